"""What PointRecorder.add costs per request (metrics/recorder.py): the point recorder alone,
fed 20,000 completed streamed requests of 256 tokens (usage counted, a stub parser whose gaps
are not this harness's), with no SLO and with two SLO items a request is held to.

    python benchmarks/recorder_add.py [--repeats 5]

Prints ns of the thread's CPU time per add (the best of `repeats` passes), no SLO then with
SLOs. CPU time, not wall time: on a busy machine wall time moved 3x between runs, CPU time a
few percent. To compare two checkouts, run each in turn, interleaved, and take medians.
"""

from __future__ import annotations

import argparse
import sys
import time

sys.path.insert(0, __file__.rsplit("/", 2)[0])
from benchc.metrics.record import RequestRecord  # noqa: E402
from benchc.metrics.recorder import PointRecorder  # noqa: E402
from benchc.spec.thresholds import parse_threshold  # noqa: E402

REQUESTS = 20_000


class _Parser:
    text_chunks = 256
    max_gap_ns = 10_000

    def record_gaps(self, *hists) -> None:
        pass

    def record_answer_gaps(self, *hists) -> None:
        pass


def records(n: int) -> list[RequestRecord]:
    out = []
    for i in range(n):
        r = RequestRecord(id=str(i), prompt_index=i, input_tokens=100, expected_output_tokens=256)
        r.times.t0_ns = 1_000_000 + i * 1000
        r.times.first_text_ns = r.times.t0_ns + 20_000_000 + (i % 97) * 1000
        r.times.end_ns = r.times.first_text_ns + 500_000_000
        r.tokens.text_chunks, r.tokens.usage_output_tokens, r.tokens.usage_input_tokens = 256, 256, 100
        r.parser = _Parser()
        out.append(r)
    return out


def per_add_ns(checks: list | None, repeats: int) -> float:
    rs = records(REQUESTS)
    best = float("inf")
    for _ in range(repeats):
        rec = PointRecorder(target_inflight=256)
        start = time.thread_time_ns()
        for r in rs:
            rec.add(r, checks)
        best = min(best, (time.thread_time_ns() - start) / len(rs))
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    slo = [parse_threshold("ttft", "p99 < 2s"), parse_threshold("tpot", "p50 < 50ms")]
    print(f"no SLO: {per_add_ns(None, a.repeats):.0f} ns per add; "
          f"2 SLO items: {per_add_ns(slo, a.repeats):.0f} ns per add")


if __name__ == "__main__":
    main()
