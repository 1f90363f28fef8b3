"""The client's side of a point's time series: requests in flight and sends, per interval.

The server's side is what its /metrics said at each sample (run/telemetry.py); this is what
the client did meanwhile, so that a chart can put them side by side: a waiting queue that
grows while the client's in-flight count stands still is the server's doing, one that grows
with the sends is the load's.

Per interval of `interval_ns`, counted from `origin_ns` (the step's start on the measuring
process's clock): the mean of the in-flight count as the self-check sampled it (run/loadgen.py,
every 5 ms, or 20 ms where the kernel stamps the reads), its max, the requests written (first
write), and in an open loop the requests scheduled. Memory is one small record per interval,
whatever the number of requests.

Shards of one point (Ray) add up: each interval of one shard lands on the interval of the
earliest shard's grid nearest to it (the shards start together at a shared wall-clock time, so
their grids differ by the start's jitter, far under an interval).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class _Bucket:
    inflight_sum: int = 0  # in-flight counts summed over the samples of the interval
    inflight_samples: int = 0
    inflight_max: int = 0
    sends: int = 0
    scheduled: int = 0
    inflight_mean: float | None = None  # set by a merge: the shards' means added


@dataclass
class ClientSeries:
    """In flight and sends per interval of one step (or of the shards of one point)."""

    interval_ns: int
    origin_ns: int
    buckets: dict[int, _Bucket] = field(default_factory=dict)

    def _at(self, t_ns: int) -> _Bucket:
        k = (t_ns - self.origin_ns) // self.interval_ns
        b = self.buckets.get(k)
        if b is None:
            b = self.buckets[k] = _Bucket()
        return b

    def sample_inflight(self, t_ns: int, n: int) -> None:
        b = self._at(t_ns)
        b.inflight_sum += n
        b.inflight_samples += 1
        b.inflight_max = max(b.inflight_max, n)

    def sent(self, t_ns: int) -> None:
        self._at(t_ns).sends += 1

    def scheduled(self, t_ns: int) -> None:
        self._at(t_ns).scheduled += 1

    def move(self, delta_ns: int) -> None:
        """Onto another clock (`delta_ns` later): run/clocks.py."""
        self.origin_ns += delta_ns

    @staticmethod
    def _mean(b: _Bucket) -> float | None:
        if b.inflight_mean is not None:
            return b.inflight_mean
        return b.inflight_sum / b.inflight_samples if b.inflight_samples else None

    @classmethod
    def total(cls, parts: Iterable[ClientSeries]) -> ClientSeries | None:
        """The shards' series as one: counts added interval by interval, in-flight means added
        (the shards ran side by side)."""
        parts = list(parts)
        if not parts:
            return None
        first = min(parts, key=lambda s: s.origin_ns)
        out = cls(first.interval_ns, first.origin_ns)
        for s in parts:
            shift = round((s.origin_ns - out.origin_ns) / out.interval_ns)
            for k, b in s.buckets.items():
                o = out.buckets.setdefault(k + shift, _Bucket())
                mean = cls._mean(b)
                if mean is not None:
                    o.inflight_mean = (o.inflight_mean or 0.0) + mean
                o.inflight_max += b.inflight_max  # a bound: the shards' maxima need not coincide
                o.sends += b.sends
                o.scheduled += b.scheduled
        return out

    def columns(self, start_ns: int, open_loop: bool) -> dict:
        """The result's columns: `t_s` each interval's start in seconds from `start_ns` (the
        point's window start; the first may be a little before it), then one value per
        interval, every interval from the first to the last (an empty one holds zeros)."""
        if not self.buckets:
            return {"t_s": [], "in_flight": [], "in_flight_max": [], "sends": []}
        ks = range(min(self.buckets), max(self.buckets) + 1)
        empty = _Bucket()
        rows = [self.buckets.get(k, empty) for k in ks]
        out = {"t_s": [round((self.origin_ns + k * self.interval_ns - start_ns) / 1e9, 6) for k in ks],
               "in_flight": [round(m, 3) if (m := self._mean(b)) is not None else None for b in rows],
               "in_flight_max": [b.inflight_max for b in rows],
               "sends": [b.sends for b in rows]}
        if open_loop:
            out["scheduled"] = [b.scheduled for b in rows]
        return out
