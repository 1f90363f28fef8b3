"""Nanoseconds per recorded value: benchc's HdrHistogram (Cython core and Python twin)
against the `hdrhistogram` package's record_value, on the same values.

    python benchmarks/hdr_record.py [--values 1000000] [--repeats 5]

Two figures for the Cython core: called from a Python loop (what any Python caller
pays, interpreter overhead included), and from C (StreamParser.record_gaps, as the
hot path records ITL gaps). Medians of the repeats.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

from hdrh.histogram import HdrHistogram

from benchc.metrics._hdr_py import Histogram as PyHistogram

try:
    from benchc.client._stream_c import StreamParser
    from benchc.metrics._hdr_c import Histogram as CHistogram
except ImportError:  # pragma: no cover - the Cython core is not built here
    CHistogram = StreamParser = None


def per_value(fn, values, repeats) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter_ns()
        fn(values)
        times.append((time.perf_counter_ns() - t) / len(values))
    return statistics.median(times)


def loop(record):
    def run(values):
        for v in values:
            record(v)
    return run


def from_c(n_gaps: int):
    """A parser holding n_gaps chunk gaps (1 ms apart): record_gaps records them from C."""
    p = StreamParser()
    ev = b'data: {"choices":[{"index":0,"delta":{"content":" x"},"finish_reason":null}]}\n\n'
    for i in range(n_gaps + 1):
        p.feed(ev, 1_000_000 * i + (i * 7919) % 500_000)
    return p


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--values", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    rng = random.Random(1)
    values = [int(rng.lognormvariate(9, 1.5)) + 1 for _ in range(a.values)]
    print(f"hdr_record: {a.values:,} values, median of {a.repeats}, cpus={os.cpu_count()}")
    ref = per_value(loop(HdrHistogram(1, 3_600_000_000, 3).record_value), values, a.repeats)
    print(f"  hdrhistogram package record_value  {ref:8.1f} ns/value")
    py = per_value(loop(PyHistogram().record), values, max(1, a.repeats // 2))
    print(f"  benchc python core record          {py:8.1f} ns/value")
    if CHistogram is None:
        print("  (Cython core not built)")
        return
    c = per_value(loop(CHistogram().record), values, a.repeats)
    print(f"  benchc cython core, Python loop    {c:8.1f} ns/value  ({ref / c:.1f}x the package)")
    n = min(a.values, 200_000)
    parser = from_c(n)
    times = []
    for _ in range(a.repeats):
        h = CHistogram()
        t = time.perf_counter_ns()
        parser.record_gaps(h)
        times.append((time.perf_counter_ns() - t) / n)
    print(f"  benchc cython core, from C         {statistics.median(times):8.1f} ns/value  (target <= 50)")


if __name__ == "__main__":
    main()
