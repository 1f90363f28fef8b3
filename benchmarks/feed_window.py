"""Time to the first request and client memory against a step's request ceiling: building
a step's feed (run/feed.py: the bodies of its first window, before the step's first send)
for a point of 1k-token random prompts at concurrency 64, bound by `requests: N` with a
10 s duration, for N from 10^3 to 10^6, and a point bound by time only. Prints, per
ceiling, the median seconds to build the feed (as `benchc run` does: its first window, its
need and what feed.PREBUILD_S builds besides) and the tracemalloc peak while building its
whole window (the most the feed ever holds).

    python benchmarks/feed_window.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import tracemalloc

SPEC = """\
version: 1
name: feed
target: {{base_url: "http://127.0.0.1:9/v1", model: m}}
workload:
  dataset:
    random: {{input_tokens: 1k, output_tokens: 16}}
load:
  sweep: {{concurrency: [64]}}
  {stop}
"""
STOPS = {"1e3": "requests: 1000\n  duration: 10s", "1e5": "requests: 100000\n  duration: 10s",
         "1e6": "requests: 1000000\n  duration: 10s", "duration only": "duration: 10s"}


def build(stop: str) -> tuple[float, int]:
    from benchc.plan.compiler import compile_spec
    from benchc.plan.datasets import make_source
    from benchc.run.feed import StepFeed
    from benchc.spec import loader

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "s.yaml")
        with open(path, "w") as f:
            f.write(SPEC.format(stop=stop))
        plan = compile_spec(loader.load(path, env={}))
        (step,) = plan.load_steps()
        w = plan.combinations[0].workload
        source = make_source(w.dataset, w.params, w.prompts, d)
        t = time.perf_counter()
        StepFeed(source, plan.combinations[0], step)
        elapsed = time.perf_counter() - t
        tracemalloc.start()  # the whole window built (no time bound): the most the feed holds
        StepFeed(source, plan.combinations[0], step, prebuild_s=None)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return elapsed, peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    build(STOPS["1e3"])  # imports, caches
    for name, stop in STOPS.items():
        runs = [build(stop) for _ in range(args.repeats)]
        times = [t for t, _ in runs]
        peaks = [p for _, p in runs]
        print(f"requests {name:>13}: feed built (time to first request) median "
              f"{statistics.median(times):.3f} s "
              f"(runs {', '.join(f'{t:.3f}' for t in times)}); tracemalloc peak median "
              f"{statistics.median(peaks) / 2**20:.1f} MiB", flush=True)


if __name__ == "__main__":
    main()
