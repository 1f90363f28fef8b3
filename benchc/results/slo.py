"""A point's SLO verdict (its `slo` block): the plan's SLO items checked against the point's
figures. One implementation for a run's points and for the points `benchc merge` sums, so a
merged result's verdict is computed from its own figures, never copied from a shard."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from benchc.results.document import is_probe, metric_value
from benchc.spec.thresholds import Threshold


def slo_thresholds(items: Iterable[Any]) -> list[Threshold]:
    """Thresholds from a plan's SLO items (plan.model.SloItem, or their dicts in a result's plan)."""
    out = []
    for s in items:
        d = s if isinstance(s, dict) else vars(s)
        out.append(Threshold(d["metric"], d["stat"], d["op"], d["value"], False, d["text"]))
    return out


def evaluate_slo(checks: list[Threshold], point: dict) -> dict:
    """The point's `slo` block: each check with the value it saw; passed when all hold."""
    results = []
    for t in checks:
        value = metric_value(point, t.key)
        results.append({"threshold": t.text, "value": value, "passed": value is not None and t.holds(value)})
    return {"passed": all(r["passed"] for r in results), "checks": results}


def run_verdict(defined: bool, points: list[dict]) -> dict:
    """The result's top-level `slo`: passed when every point held to the SLO passed (a
    capacity search's probes are expected to fail some; the search reports them)."""
    held = [p for p in points if "slo" in p and not is_probe(p)]
    return {"defined": defined, "passed": all(p["slo"]["passed"] for p in held)}
