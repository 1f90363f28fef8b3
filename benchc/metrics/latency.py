"""Latency recording: the histogram range every result uses, the ns -> us rounding, summaries.

Latencies are recorded in integer microseconds into HdrHistograms with 3 significant
digits over 1 us .. 1 h; values outside that range are counted in `out_of_range`, never
dropped silently. Every histogram of a result is made by new_histogram(), so any two
merge.
"""

from __future__ import annotations

from benchc.metrics._hdr import Histogram

LOWEST_US, HIGHEST_US, DIGITS = 1, 3_600_000_000, 3


def new_histogram() -> Histogram:
    """An empty histogram over the range and precision of every result."""
    return Histogram(LOWEST_US, HIGHEST_US, DIGITS)


def ns_to_us(ns: int) -> int:
    """Recorded latencies are whole microseconds, rounded half up, at least 1
    (csrc/client/_stream_c.pyx rounds the same way)."""
    us = (ns + 500) // 1000
    return us if us > 0 else 1


PERCENTILES = (50, 90, 95, 99, 99.9)


class Recorder:
    """An HdrHistogram in microseconds (benchc's own, in C when built); it counts what it
    cannot hold in `out_of_range` rather than dropping it.

    A recorder rebuilt from a result's summary block (from_summary) carries that block's
    out-of-range count, which the encoded histogram does not hold; merge() adds both, so
    shards merge count for count. Pickled (Ray), it travels as its encoding.
    """

    def __init__(self) -> None:
        self.hist = new_histogram()
        self._carried_out_of_range = 0  # counted elsewhere (a shard, a result), not in self.hist

    @classmethod
    def from_summary(cls, block: dict) -> Recorder:
        """The recorder a summary block (as summarize() writes it) was made from."""
        r = cls()
        if block.get("hdr"):
            r.hist = Histogram.decode(block["hdr"])
        r._carried_out_of_range = int(block.get("out_of_range", 0))
        return r

    @property
    def out_of_range(self) -> int:
        return self.hist.out_of_range + self._carried_out_of_range

    def record_ns(self, ns: int, count: int = 1) -> None:
        self.hist.record(ns_to_us(ns), count)

    def record_us(self, us: float) -> None:
        self.record_ns(int(us * 1000))

    def merge(self, other: Recorder) -> None:
        """Add another recorder's counts, bucket for bucket, out-of-range counts included."""
        self.hist.merge(other.hist)
        self._carried_out_of_range += other._carried_out_of_range

    def summary(self) -> dict:
        out = summarize(self.hist)
        out["out_of_range"] = self.out_of_range
        return out

    def __getstate__(self) -> dict:
        return {"hdr": self.hist.encode() if self.hist.total_count else None,
                "out_of_range": self.out_of_range}

    def __setstate__(self, state: dict) -> None:
        self.hist = Histogram.decode(state["hdr"]) if state["hdr"] else new_histogram()
        self._carried_out_of_range = state["out_of_range"]


def summarize(h: Histogram) -> dict:
    """A latency summary block (microseconds) with the encoded histogram under `hdr`."""
    n = h.total_count
    out: dict = {"count": n, "out_of_range": h.out_of_range, "unit": "us"}
    if n:
        out.update(mean=round(h.mean, 3), stdev=round(h.stdev, 3), min=h.min, max=h.max)
        for p in PERCENTILES:
            out[_pname(p)] = h.value_at_percentile(p)
        out["hdr"] = h.encode()
    return out


def _pname(p: float) -> str:
    return f"p{p:g}"
