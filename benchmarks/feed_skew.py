"""Open-loop send skew while the feed's builder works during the point: `benchc run` with the
feed's window cut (run/feed.py WINDOW) so that bodies are built between sends, not all
before the point, on the simulator (its own process, core 0; the run on core 1):

1. Poisson arrivals at each `--rates` (`--input-tokens` inputs, `--output-tokens` outputs), the
   window `--window` bodies;
2. the Mooncake example replay (specs/trace-replay.yaml's trace at speedup 2; inputs up to
   8k tokens, the slowest bodies to build), the window `--trace-window` bodies.

With `--base DIR` (a copy of the benchc package of other code, DIR/benchc) every run is
repeated on that code right after, interleaved (A/B), the runs started with PYTHONPATH=DIR
from outside the worktree.

    python benchmarks/feed_skew.py [--rates 44,300] [--repeats 2] [--base /tmp/base]

Prints per run: send skew p50/p99 (us), late sends (>= 1 ms), bodies built late (on the
send path), the loop thread's priority; then the medians per point and code.
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
from punctual_sends import skew

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRESET = {"preset": "minimax-m2.5-tp4"}
MODEL = "MiniMaxAI/MiniMax-M2.5"
# benchc's CLI with the feed's window cut first (argv: window, then benchc's arguments)
WRAP = ("import sys, benchc.run.feed as f; f.WINDOW = int(sys.argv[1]); "
        "from benchc.cli import main; sys.exit(main(sys.argv[2:]))")
POISSON = """\
version: 1
name: feed-skew
target: {{sim: {{preset: minimax-m2.5-tp4}}, model: {model}}}
workload:
  dataset:
    random: {{input_tokens: {input}, output_tokens: {output}}}
  sampling: {{ignore_eos: true}}
load:
  warmup: {{requests: 0}}
  sweep: {{rate: [{rate}/s], arrival: poisson}}
  requests: {requests}
"""
TRACE = """\
version: 1
name: feed-skew-trace
target: {{sim: {{preset: minimax-m2.5-tp4}}, api: chat, model: {model}}}
workload:
  dataset:
    trace:
      path: {path}
      format: mooncake
      block_size: 512
      slice: {{start: 0s, duration: 20s}}
      max_input_tokens: 8k
      max_output_tokens: 1k
load:
  warmup: {{requests: 2}}
  sweep: {{speedup: [2], max_concurrency: 256}}
"""


def run(spec: str, window: int, url: str, base: str | None, d: str) -> dict:
    out = os.path.join(d, "r.json")
    cmd = [sys.executable, "-c", WRAP, str(window), "run", spec, "--quiet", "--out", out, "--force",
           "--base-url", url]
    env = dict(os.environ)
    if base:
        env["PYTHONPATH"] = base
    # cwd outside the worktree: `-c` puts the cwd first on sys.path, ahead of PYTHONPATH
    rc = subprocess.run(pinned(cmd, 1), stdout=subprocess.DEVNULL, env=env, cwd=d).returncode
    if rc not in (0, 1):
        raise SystemExit(f"benchc run exited {rc}")
    with open(out) as f:
        (p,) = json.load(f)["points"]
    c = p["client"]
    return skew(p) | {"built_late": c.get("bodies_built_late"), "priority": c.get("send_priority")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="44,300", help="Poisson rates (req/s), comma-separated")
    ap.add_argument("--requests", type=int, default=600)
    ap.add_argument("--input-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=8)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--trace-window", type=int, default=16)
    ap.add_argument("--no-trace", action="store_true")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--base", help="a directory holding another benchc package, run after each")
    a = ap.parse_args()
    codes = ["new", "base"] if a.base else ["new"]
    rows: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory() as d, simulator(PRESET, model=MODEL) as url:
        specs = []
        for rate in a.rates.split(","):
            path = os.path.join(d, f"poisson-{rate}.yaml")
            with open(path, "w") as f:
                f.write(POISSON.format(model=MODEL, input=a.input_tokens, output=a.output_tokens, rate=rate,
                                       requests=a.requests))
            specs.append((f"poisson {rate}/s window {a.window}", path, a.window))
        if not a.no_trace:
            path = os.path.join(d, "trace.yaml")
            with open(path, "w") as f:
                trace = os.path.join(REPO, "specs", "traces", "mooncake-small.jsonl")
                f.write(TRACE.format(model=MODEL, path=trace))
            specs.append((f"trace x2 window {a.trace_window}", path, a.trace_window))
        load = os.getloadavg()
        print(f"feed_skew: load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
        for k in range(a.repeats):
            for name, path, window in specs:
                for code in codes:
                    r = run(path, window, url, a.base if code == "base" else None, d)
                    rows.setdefault((name, code), []).append(r)
                    print(f"  repeat {k + 1} {name:26s} {code:4s} skew p50 {r['p50']} us p99 {r['p99']} us, "
                          f"late {r['late']} of {r['sent']}, bodies built late {r['built_late']}, "
                          f"{r['priority']}; load {os.getloadavg()[0]:.2f}", flush=True)
    for (name, code), rs in rows.items():
        print(f"{name:26s} {code:4s} median of {len(rs)}: "
              f"skew p50 {statistics.median(r['p50'] for r in rs):.0f} us, "
              f"p99 {statistics.median(r['p99'] for r in rs):.0f} us, late {[r['late'] for r in rs]}, "
              f"bodies built late {[r['built_late'] for r in rs]}")


if __name__ == "__main__":
    main()
