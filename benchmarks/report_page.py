"""What the time series and the interactive report cost:

- one /metrics sample: the CPU time of parse_prometheus of a vLLM /metrics text (the real server's, fetched
  from BENCHC_VLLM_URL's root when it is set, else tests/data/metrics/vllm.after.prom), the
  work benchc does per sample on the driver's event loop;
- the report page (results/html_report.py) of 100 points, each with 300 samples (five minutes
  at 1s) of every server and client column: build CPU time and size.

    python benchmarks/report_page.py [--repeats 5] [--points 100] [--samples 300]

Prints each repeat and the medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def metrics_text() -> tuple[str, str]:
    url = os.environ.get("BENCHC_VLLM_URL")
    if url:
        root = url.rstrip("/").removesuffix("/v1")
        with urllib.request.urlopen(root + "/metrics", timeout=10) as r:
            return r.read().decode("utf-8", "replace"), root + "/metrics"
    path = os.path.join(REPO, "tests", "data", "metrics", "vllm.after.prom")
    with open(path, encoding="utf-8") as f:
        return f.read(), path


def parse_us(text: str, n: int = 200) -> float:
    """CPU time (this process's: what the sample costs the event loop, whatever else the
    machine runs) of one parse, in microseconds."""
    from benchc.run.telemetry import parse_prometheus

    t = time.process_time()
    for _ in range(n):
        parse_prometheus(text)
    return (time.process_time() - t) / n * 1e6


def page_build(points: int, samples: int) -> tuple[float, int]:
    from benchc.results.document import read
    from benchc.results.html_report import page
    from tests.test_html_report import MINIMAX, with_series

    doc = with_series(read(MINIMAX), points, samples)
    t = time.process_time()
    text = page([doc])
    return time.process_time() - t, len(text.encode("utf-8"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--points", type=int, default=100)
    ap.add_argument("--samples", type=int, default=300)
    a = ap.parse_args()
    text, source = metrics_text()
    parses, builds, sizes = [], [], []
    for i in range(a.repeats):
        us = parse_us(text)
        s, size = page_build(a.points, a.samples)
        parses.append(us)
        builds.append(s)
        sizes.append(size)
        print(f"repeat {i + 1}: /metrics parse {us:,.0f} us; page of {a.points} points x {a.samples} samples "
              f"{s:.3f} s, {size / 1e6:.2f} MB")
    print(f"/metrics text: {source}, {len(text.encode()) / 1024:.0f} KiB")
    print(f"median: /metrics parse {statistics.median(parses):,.0f} us per sample; page build "
          f"{statistics.median(builds):.3f} s, {statistics.median(sizes) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
