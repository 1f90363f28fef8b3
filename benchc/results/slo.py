"""A point's SLO verdict (its `slo` block): the plan's SLO items checked against the point's
figures. One implementation for a run's points and for the points `benchc merge` sums, so a
merged result's verdict is computed from its own figures, never copied from a shard."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from benchc.results.api import Point
from benchc.results.document import is_probe
from benchc.spec.thresholds import Threshold, show_value, value_unit


def slo_thresholds(items: Iterable[Any]) -> list[Threshold]:
    """Thresholds from a plan's SLO items (plan.model.SloItem, or their dicts in a result's plan)."""
    out = []
    for s in items:
        d = s if isinstance(s, dict) else vars(s)
        out.append(Threshold(d["metric"], d["stat"], d["op"], d["value"], False, d["text"]))
    return out


def evaluate_slo(checks: list[Threshold], point: Point) -> dict:
    """The point's `slo` block: each check with the value it saw (in `unit`: us, fraction,
    tok/s, req/s); passed when all hold."""
    results = []
    for t in checks:
        value = point.value(t.key)
        results.append({"threshold": t.text, "value": value, "unit": value_unit(t.metric),
                        "passed": value is not None and t.holds(value)})
    return {"passed": all(r["passed"] for r in results), "checks": results}


def check_unit(check: dict) -> str:
    """A check's unit; a result written before checks carried one: from its metric's name."""
    return check.get("unit") or value_unit(check["threshold"].split(":", 1)[0].split()[0])


def measured(check: dict, point: dict) -> str:
    """What a check saw, for a person: `502.3ms`, `2.00%`, or why there is no value (a point
    whose every request failed has no latency to check, which `None` never said)."""
    if check["value"] is not None:
        return show_value(check["value"], check_unit(check))
    counts = point.get("counts", {})
    if counts.get("sent") and not counts.get("completed"):
        return f"nothing: none of {counts['sent']} requests completed"
    return "nothing: no request gave this figure"


def failed_checks(points: list[dict]) -> list[str]:
    """One line per failed check of the points held to the SLO: `c=1: ttft: p99 < 500ms
    (measured 502.3ms)`."""
    return [f"{p['id']}: {c['threshold']} (measured {measured(c, p)})" for p in points
            if "slo" in p and not is_probe(p) for c in p["slo"]["checks"] if not c["passed"]]


def run_verdict(defined: bool, points: list[dict]) -> dict:
    """The result's top-level `slo`: passed when every point held to the SLO passed (a
    capacity search's probes are expected to fail some; the search reports them)."""
    held = [p for p in points if "slo" in p and not is_probe(p)]
    return {"defined": defined, "passed": all(p["slo"]["passed"] for p in held)}
