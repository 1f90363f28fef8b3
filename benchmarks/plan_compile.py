"""What compiling a plan costs now that prompts are built on demand (plan/prompts.py):

- `benchc validate specs/expert-parallel.yaml` in a fresh process (3 matrix combinations x
  5 points of 4,000 requests of ~1k-token prompts), wall time;
- a plan of 10^6 requests (5 points of 200,000 1k-token prompts): compile time and the
  tracemalloc peak while compiling (the prompts themselves would be ~6 GB).

    python benchmarks/plan_compile.py [--repeats 5]

Prints each repeat and the medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIG = """\
version: 1
name: big
target: {base_url: "http://127.0.0.1:9/v1", model: m}
workload:
  dataset:
    random: {input_tokens: 1k, output_tokens: 16}
load:
  sweep: {concurrency: [64, 128, 256, 512, 1024]}
  requests: 200000
"""


def validate_s() -> float:
    t = time.perf_counter()
    spec = os.path.join(REPO, "specs", "expert-parallel.yaml")
    subprocess.run([sys.executable, "-m", "benchc", "validate", spec], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def big_plan() -> tuple[float, int]:
    from benchc.plan.compiler import compile_spec
    from benchc.spec import loader

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "big.yaml")
        with open(path, "w") as f:
            f.write(BIG)
        spec = loader.load(path, env={})
        compile_spec(spec)  # imports, caches
        t = time.perf_counter()
        plan = compile_spec(spec)
        elapsed = time.perf_counter() - t
        tracemalloc.start()
        compile_spec(spec)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert sum(s.requests for s in plan.load_steps()) == 10**6
    return elapsed, peak


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    val = [validate_s() for _ in range(a.repeats)]
    big = [big_plan() for _ in range(a.repeats)]
    print(f"plan_compile: {a.repeats} repeats, cpus={os.cpu_count()}")
    print("  benchc validate specs/expert-parallel.yaml (process start included): "
          + ", ".join(f"{x:.3f}" for x in val) + f" s; median {statistics.median(val):.3f} s")
    print("  10^6-request plan, compile: " + ", ".join(f"{x * 1e3:.1f}" for x, _ in big)
          + f" ms; median {statistics.median(x for x, _ in big) * 1e3:.1f} ms")
    peak = statistics.median(p for _, p in big)
    print(f"  10^6-request plan, tracemalloc peak: median {peak / 1024:.0f} kB")


if __name__ == "__main__":
    main()
