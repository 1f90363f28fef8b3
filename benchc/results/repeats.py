"""Repeated points (load.repeats): the runs of one point, summarised.

Each run of a repeated point is a result point of its own (params.repeat = 1..N, id
`c=4#2`), with its own window, self-check and trust verdict. For each point, summary()
gives:
- per metric (throughputs, error rate, latency percentiles): the runs' values, their mean,
  and a 95% Student t interval of the mean (metrics/intervals.py says why that interval);
- the pooled latency histograms: the runs' tallies added exactly (metrics/aggregate.Tally,
  bucket for bucket), so a percentile over every request of every run is one read away;
- which runs could not be trusted (results/trust.py): their figures are in the interval, and
  the summary names them.

The runner writes these into the result's `repeats`; `compare` recomputes them from the
points, so both read the same figures.
"""

from __future__ import annotations

from benchc import catalog
from benchc.metrics.aggregate import Tally, latency_block
from benchc.metrics.intervals import mean_interval
from benchc.results.document import is_probe, load_key, metric_value

# the figures a repeated point's runs give an interval of, as declared (benchc/catalog.py)
THROUGHPUTS = tuple(m.name for m in catalog.METRICS if m.repeats and m.path[0] == "throughput")
LATENCY_STATS = tuple(k for m in catalog.METRICS if m.latency for k in m.keys(m.repeats))
RATIOS = tuple(m.name for m in catalog.METRICS if m.repeats and m.kind == catalog.RATIO)
METRICS = THROUGHPUTS + RATIOS + LATENCY_STATS
INTERVAL_METHOD = ("95% Student t interval of the mean of the runs' figures: "
                   "mean +- t(0.975, n-1) s/sqrt(n); latencies in microseconds; "
                   "pooled: the runs' histograms added exactly")


def run_groups(points: list[dict]) -> list[list[dict]]:
    """The runs of each repeated point, in the order their first runs appear (probes and
    points that were not repeated are left out)."""
    groups: dict[tuple, list[dict]] = {}
    for p in points:
        if p["params"].get("repeat") is not None and not is_probe(p):
            groups.setdefault(load_key(p), []).append(p)
    return list(groups.values())


def base_id(point: dict) -> str:
    """`c=4` for the run `c=4#2`."""
    return point["id"].rsplit("#", 1)[0] if point["params"].get("repeat") is not None else point["id"]


def summary(runs: list[dict]) -> dict:
    """The result's `repeats` entry of one point from its runs."""
    first = runs[0]
    metrics = {}
    for key in METRICS:
        figures = values(runs, key)
        interval = mean_interval(figures)
        entry: dict = {"values": figures}
        if interval is not None:
            entry.update(interval.to_json(3))
        metrics[key] = entry
    pooled = Tally.total(Tally.from_point(p) for p in runs)
    params = {k: v for k, v in first["params"].items() if k != "repeat"}
    return {"point": base_id(first), "combination": first["combination"],
            "matrix": first.get("matrix", {}),
            "params": params, "runs": [p["id"] for p in runs], "n": len(runs),
            "untrusted_runs": [p["id"] for p in runs if not p.get("trust", {}).get("trusted", True)],
            "interval": INTERVAL_METHOD, "metrics": metrics,
            "pooled": {"counts": {"sent": pooled.sent, "completed": pooled.completed,
                                  "failed": pooled.failed},
                       "latency": latency_block(pooled)}}


def summaries(points: list[dict]) -> list[dict]:
    return [summary(runs) for runs in run_groups(points)]


def values(points: list[dict], key: str) -> list[float]:
    """A metric's figure in each of the runs given (None where a run has none: left out)."""
    return [v for v in (metric_value(p, key) for p in points) if v is not None]


__all__ = ["summary", "summaries", "run_groups", "base_id", "values", "METRICS", "INTERVAL_METHOD"]
