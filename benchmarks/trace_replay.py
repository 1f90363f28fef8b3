"""Trace replay: how late each request is sent against its scaled trace time, and what a long
trace costs before the first request goes.

    python benchmarks/trace_replay.py [--repeats 3] [--requests 1500] [--rate 100] [--big 100000]

1. Send skew: a Mooncake-format trace written by specs/traces/make_traces.py (chat-shaped,
   bursty), `--requests` of it rescaled to `--rate` requests/s, replayed by `benchc run`
   against the simulator (`instant` preset, in its own process, inputs cut to 256 tokens and
   outputs to 8 so the server is never the bottleneck); beside it a Poisson schedule at the
   same rate, with the same lengths. Per request: send time (t0) minus scheduled time, from
   the per-request records; prints the median and p99 per repeat, and their medians.
2. A long trace: `benchc run` on a --big-request trace (then one a tenth as long), from the
   process's start to the first request reaching the simulator (its trace file), and the
   benchc process's resident memory then (VmHWM, the peak) -- the run is then interrupted.
   Memory per request is the difference of the two sizes over the difference of requests.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from _harness import pinned, simulator

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _make_traces():
    spec = importlib.util.spec_from_file_location("make_traces", os.path.join(REPO, "specs", "traces",
                                                                               "make_traces.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


TRACE_SPEC = """\
version: 1
name: skew
target: {{base_url: "http://127.0.0.1:9/v1", model: benchc-sim, api: completions}}
workload:
  dataset:
    {dataset}
load:
  warmup: {{requests: 0}}
  sweep: {sweep}
{stop}output: {{path: {out}, requests: true}}
"""


def _percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def skew_run(d: str, url: str, kind: str, trace: str, n: int, rate: float) -> tuple[float, float]:
    """(median, p99) of t0 - scheduled in microseconds over one point's requests."""
    out = os.path.join(d, f"{kind}.json")
    if kind == "trace":
        dataset = (f"trace: {{path: {trace}, format: mooncake, slice: {{requests: {n}}}, "
                   "max_input_tokens: 256, max_output_tokens: 8}")
        sweep, stop = f"{{rate: [{rate}/s]}}", ""
    else:
        dataset = "random: {input_tokens: {min: 16, max: 256}, output_tokens: {min: 1, max: 8}}"
        sweep, stop = f"{{rate: [{rate}/s], arrival: poisson}}", f"  requests: {n}\n"
    spec = os.path.join(d, f"{kind}.yaml")
    with open(spec, "w") as f:
        f.write(TRACE_SPEC.format(dataset=dataset, sweep=sweep, stop=stop, out=out))
    cmd = [sys.executable, "-m", "benchc", "run", spec, "--base-url", url, "--quiet", "--out", out, "--force"]
    subprocess.run(pinned(cmd, 1), check=True, stdout=subprocess.DEVNULL)
    with open(os.path.splitext(out)[0] + ".requests.jsonl") as f:
        skews = [(r["t0_ns"] - r["scheduled_ns"]) / 1e3 for r in map(json.loads, f)]
    assert len(skews) == n, (kind, len(skews))
    return statistics.median(skews), _percentile(skews, 0.99)


def first_send(d: str, url: str, sim_trace: str, trace: str) -> tuple[float, int]:
    """(seconds from `benchc run`'s start to the first request at the simulator, benchc's peak
    resident memory in kB by then)."""
    spec = os.path.join(d, "big.yaml")
    with open(spec, "w") as f:
        f.write(TRACE_SPEC.format(dataset=f"trace: {{path: {trace}, format: mooncake}}",
                                  sweep="{speedup: [1]}", stop="", out=os.path.join(d, "big.json")))
    seen = os.path.getsize(sim_trace) if os.path.exists(sim_trace) else 0
    t0 = time.perf_counter()
    p = subprocess.Popen(pinned([sys.executable, "-m", "benchc", "run", spec, "--base-url", url, "--quiet",
                                 "--out", os.path.join(d, "big.json"), "--force"], 1),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # the simulator writes a request to its trace when it ends; the first of these requests
        # (an 8-token answer on the instant preset) ends within a millisecond or so of arriving
        while not (os.path.exists(sim_trace) and os.path.getsize(sim_trace) > seen):
            if p.poll() is not None:
                raise RuntimeError(f"benchc run exited {p.returncode} before sending")
            time.sleep(0.005)
        elapsed = time.perf_counter() - t0
        with open(sim_trace) as f:
            f.seek(seen)
            first = json.loads(f.readline())
        with open(f"/proc/{p.pid}/status") as f:
            hwm = next(int(x.split()[1]) for x in f if x.startswith("VmHWM:"))
        return elapsed - (first["end_ns"] - first["arrival_ns"]) / 1e9, hwm
    finally:
        p.send_signal(signal.SIGINT)
        p.send_signal(signal.SIGINT)
        p.wait(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--requests", type=int, default=1500)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--big", type=int, default=100_000)
    a = ap.parse_args()
    mt = _make_traces()
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "trace.jsonl")
        mt.write(trace, mt.mooncake_rows(a.requests))
        sim_trace = os.path.join(d, "sim.jsonl")
        params = {"preset": "instant", "max_model_len": 1 << 20}
        rows: dict[str, list[tuple[float, float]]] = {"trace": [], "poisson": []}
        with simulator(params, sim_trace) as url:
            for _ in range(a.repeats):
                for kind in rows:
                    rows[kind].append(skew_run(d, url, kind, trace, a.requests, a.rate))
        print(f"trace_replay: {a.repeats} repeats, {a.requests} requests at {a.rate:g}/s, "
              f"cpus={os.cpu_count()}")
        for kind, rs in rows.items():
            p50s, p99s = [m for m, _ in rs], [p for _, p in rs]
            print(f"  {kind:8s} send skew (t0 - scheduled) p50: " + ", ".join(f"{m:.0f}" for m in p50s)
                  + f" us (median {statistics.median(p50s):.0f}); p99: "
                  + ", ".join(f"{p:.0f}" for p in p99s) + f" us (median {statistics.median(p99s):.0f})")
        sizes = [a.big // 10, a.big]
        found = {}
        for n in sizes:
            path = os.path.join(d, f"big-{n}.jsonl")
            rows_written = mt.write(path, mt.mooncake_rows(n, seed=1, rate_rps=50.0))
            mb = os.path.getsize(path) / 1e6
            with simulator(params, os.path.join(d, f"sim-{n}.jsonl")) as url:
                runs = [first_send(d, url, os.path.join(d, f"sim-{n}.jsonl"), path) for _ in range(a.repeats)]
            found[n] = runs
            starts = [s for s, _ in runs]
            print(f"  {rows_written} requests ({mb:.1f} MB): start to first send "
                  + ", ".join(f"{s:.2f}" for s in starts) + f" s (median {statistics.median(starts):.2f}); "
                  f"benchc peak RSS {statistics.median(h for _, h in runs) / 1024:.0f} MB")
        small, big = (statistics.median(h for _, h in found[n]) for n in sizes)
        print(f"  peak RSS growth: {(big - small) * 1024 / (sizes[1] - sizes[0]):.0f} bytes per request")


if __name__ == "__main__":
    main()
