"""Sessions and reasoning models against the simulator's trace: how closely benchc keeps a
session's think time, and how close its time to first answer token is to the truth.

    python benchmarks/sessions.py [--repeats 3] [--sessions 16] [--concurrency 8] [--turns 4]

1. Think time: `benchc run` of a synthetic sessions workload (think times drawn from 20 to
   200 ms) against the simulator (its own process, 1 ms steps). Per turn after the first,
   from the per-request records: the gap from the previous turn's end (the client's stamp of
   the read that ended its stream) to this turn's send, minus the think time the plan drew for
   it -- the client's error, never negative by construction -- and the same gap as the
   simulator saw it (the next request's arrival minus the previous answer's last write).
   Prints the median and p99 in ms per repeat, and their medians.
2. Time to first answer token: the simulator reasoning 32 tokens before each answer, C
   streams at once, on each client path (--paths: the own reader on the receive loop and on
   the event loop, aiohttp); per request, benchc's first answer time (t0 + ttf_answer_us)
   minus the simulator's write of its first answer chunk (the trace's chunk after its
   reasoning_chunks), the same for the first reasoning chunk, and the reasoning/answer token
   split against the trace. Prints median, p99 and max (ms) per path and repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from _harness import pinned, simulator

SPEC = """\
version: 1
name: bench
target: {{base_url: "http://127.0.0.1:9/v1", model: MiniMaxAI/MiniMax-M2.5}}
workload:
  dataset:
    {dataset}
load:
  warmup: {{requests: 0}}
  sweep: {{concurrency: [{c}]}}
{stop}
output: {{path: {out}, requests: true}}
"""
SIM = {"preset": "minimax-m2.5-tp4", "step_table": [[1, 1.0]], "prefill_tok_s": 1e9}  # prefill ~free


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


# client paths: `benchc run` arguments (each reads with the one stream parser)
PATHS = {"rx-loop": ["--rx-loop", "auto"], "asyncio": ["--rx-loop", "off"], "aiohttp": ["--http", "aiohttp"]}


def _run(d: str, url: str, name: str, dataset: str, c: int, stop: str,
         extra: tuple[str, ...] = ()) -> tuple[dict, list[dict]]:
    out = os.path.join(d, f"{name}.json")
    spec = os.path.join(d, f"{name}.yaml")
    with open(spec, "w") as f:
        f.write(SPEC.format(dataset=dataset, c=c, stop=stop, out=out))
    cmd = [sys.executable, "-m", "benchc", "run", spec, "--base-url", url, "--quiet", "--out", out, "--force",
           *extra]
    subprocess.run(pinned(cmd, 1), check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        doc = json.load(f)
    with open(os.path.splitext(out)[0] + ".requests.jsonl") as f:
        return doc, [json.loads(x) for x in f]


def _trace(path: str) -> dict:
    with open(path) as f:
        return {r["id"]: r for r in map(json.loads, f)}


def think_time(d: str, repeat: int, sessions: int, c: int, turns: int) -> tuple[float, float, float]:
    """(median, p99 of the client's gap minus the drawn think time, median of the simulator's
    gap minus it), in ms."""
    from benchc.plan.sessions import SyntheticSessions

    trace_path = os.path.join(d, f"think-{repeat}.trace")
    with simulator(SIM, trace_path) as url:
        dataset = (f"sessions: {{turns: {turns}, input_tokens: 16, output_tokens: 8, "
                   f"think_time: {{min: 20ms, max: 200ms}}, seed: {repeat}}}")
        doc, reqs = _run(d, url, f"think-{repeat}", dataset, c, f"  sessions: {sessions}")
    trace = _trace(trace_path)
    w = doc["plan"]["combinations"][0]["workload"]
    src = SyntheticSessions(w["params"], w["prompts"])
    stream = next(s for s in doc["plan"]["steps"] if s["kind"] == "load")["prompt_stream"]
    by_session: dict[int, list[dict]] = {}
    for r in reqs:
        by_session.setdefault(r["session"], []).append(r)
    client, server = [], []
    for i, rs in by_session.items():
        rs.sort(key=lambda r: r["turn"])
        script = src.session(stream, i)
        for prev, r in zip(rs, rs[1:], strict=False):
            planned_ns = script.turns[r["turn"] - 1].think_s * 1e9
            prev_end = prev["t0_ns"] + prev["e2e_us"] * 1e3
            client.append((r["t0_ns"] - prev_end - planned_ns) / 1e6)
            server.append((trace[r["id"]]["arrival_ns"] - trace[prev["id"]]["end_ns"] - planned_ns) / 1e6)
    assert len(client) == sessions * (turns - 1), len(client)
    return statistics.median(client), _pct(client, 0.99), statistics.median(server)


def first_answer(d: str, repeat: int, c: int, path: str) -> tuple[float, float, float, float, bool]:
    """(median, p99, max of benchc's first answer time minus the simulator's write of the first
    answer chunk, median of the same for the first reasoning chunk, in ms; every request's
    reasoning/answer split equal to the trace's)."""
    trace_path = os.path.join(d, f"answer-{path}-{repeat}.trace")
    with simulator({**SIM, "step_table": [[1, 2.0]], "reasoning_tokens": 32, "max_num_seqs": 4096},
                   trace_path) as url:
        dataset = f"random: {{input_tokens: 16, output_tokens: 48, seed: {repeat}}}"
        doc, reqs = _run(d, url, f"answer-{path}-{repeat}", dataset, c, f"  requests: {c}", PATHS[path])
    trace = _trace(trace_path)
    errors, reasoning, split = [], [], True
    for r in reqs:
        tr = trace[r["id"]]
        first_write = tr["chunks"][tr["reasoning_chunks"]][0]
        errors.append((r["t0_ns"] + r["ttf_answer_us"] * 1e3 - first_write) / 1e6)
        reasoning.append((r["t0_ns"] + r["ttf_reasoning_us"] * 1e3 - tr["chunks"][0][0]) / 1e6)
        split &= (r["reasoning_tokens"], r["output_tokens"] - r["reasoning_tokens"]) == \
            (tr["reasoning_tokens"], tr["output_tokens"] - tr["reasoning_tokens"])
    return statistics.median(errors), _pct(errors, 0.99), max(errors), statistics.median(reasoning), split


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--streams", type=int, default=64, help="streams at once for the first-answer figures")
    ap.add_argument("--paths", nargs="+", choices=list(PATHS), default=list(PATHS),
                    help="client paths for the first-answer figures")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        print(f"think time: {args.sessions} sessions x {args.turns} turns at C={args.concurrency}, "
              "think 20..200 ms; client gap minus drawn think time (ms)")
        rows = [think_time(d, k, args.sessions, args.concurrency, args.turns) for k in range(args.repeats)]
        for k, (med, p99, srv) in enumerate(rows):
            print(f"  repeat {k + 1}: median {med:.3f}  p99 {p99:.3f}  (simulator's gap: median {srv:.3f})")
        print(f"  median of medians {statistics.median(r[0] for r in rows):.3f} ms, of p99s "
              f"{statistics.median(r[1] for r in rows):.3f} ms")
        print(f"first answer token: {args.streams} streams reasoning 32 tokens then answering 16, "
              "2 ms steps; benchc minus the simulator's first answer write (ms)")
        for path in args.paths:
            rows = [first_answer(d, k, args.streams, path) for k in range(args.repeats)]
            for k, (med, p99, mx, rmed, split) in enumerate(rows):
                print(f"  {path:8s} repeat {k + 1}: median {med:.3f}  p99 {p99:.3f}  max {mx:.3f}  "
                      f"(first reasoning: median {rmed:.3f})  token split {'exact' if split else 'DIFFERS'}")
            print(f"  {path:8s} median of medians {statistics.median(r[0] for r in rows):.3f} ms")


if __name__ == "__main__":
    main()
