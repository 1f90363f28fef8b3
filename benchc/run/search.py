"""Run one capacity search (plan/search.py holds the policy): probe, judge, until the policy
stops; each probe is measured as any load point is (run/point.py: fresh prompts, self-check,
telemetry, trust checks) by the runner's `measure` callback.

A probe's verdict: `untrusted` when its point's trust checks raise a doubt that fails
--strict (results/trust.py) on the load or on a figure its SLO reads, or it did not complete,
else `pass` when every SLO item of the search held on its figures, else `fail`. An untrusted
probe never moves the bracket. (A doubt names the figures it concerns where it can: a client
late enough to merge reads moved ITL, not the E2E an SLO of E2E reads.)
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from benchc.plan.model import Step
from benchc.plan.search import FAIL, PASS, UNTRUSTED, CapacitySearch, Probe, probe_step, show_load
from benchc.spec.thresholds import METRICS

log = logging.getLogger(__name__)


def slo_figures(point: dict) -> set[str]:
    """The figures a probe's verdict reads: its load, and its SLO's metrics (by the names the
    trust doubts give them: a latency's own, `throughput` for rates, `errors`)."""
    out = {"load"}
    for check in point["slo"]["checks"]:
        metric = check["threshold"].split(":", 1)[0]  # as spec/thresholds writes it: "e2e: p99 < 2m"
        base = metric.strip().rsplit(".", 1)[-1]  # turn2.ttft: ttft
        kind = METRICS.get(base)
        out.add(base if kind == "latency" else "errors" if kind == "ratio" else "throughput")
    return out


def verdict(point: dict) -> tuple[str, list[str]]:
    """(pass | fail | untrusted, the doubts) of a probe's assembled point."""
    reads = slo_figures(point)
    doubts = [d["message"] for d in point["trust"]["doubts"]
              if d["fails_strict"] and (not d.get("figures") or reads & set(d["figures"]))]
    if not point["complete"]:
        doubts.append("the probe did not complete (stopped, or a shard was lost)")
    if doubts:
        return UNTRUSTED, doubts
    return (PASS if point["slo"]["passed"] else FAIL), []


async def run_search(step: Step, measure: Callable[[Step], Awaitable[dict | None]],
                     say: Callable[[str], None]) -> dict:
    """Drive the search of `step` (a `search` step); `measure(probe)` runs one probe's load
    step and returns its point (None when the run stopped). Returns the result's `search`
    entry for the combination."""
    assert step.search is not None, "a search step holds its search"
    search = CapacitySearch(step.search)
    points: dict[str, dict] = {}
    while (load := search.next_load()) is not None:
        index = len(search.probes) + 1
        probe = probe_step(step, index, load)
        point = await measure(probe)
        if point is None:
            search.abort(f"the run stopped during {probe.id}")
            break
        points[point["id"]] = point
        outcome, doubts = verdict(point)
        search.record(Probe(index, load, outcome, point["id"], point["slo"]["checks"], doubts))
        if outcome == UNTRUSTED:
            say(f"WARNING: {probe.id}: cannot decide the search ({'; '.join(doubts)})")
        log.info("%s: %s", probe.id, outcome)
    block = {"combination": step.combination, "id": step.id, **search.block()}
    answer_point = next((p.point for p in reversed(search.probes)
                         if p.load == search.answer and p.verdict == PASS), None)
    block["answer_point"] = answer_point
    block["goodput_s"] = points[answer_point]["throughput"]["goodput_s"] if answer_point else None
    return block


def describe(block: dict) -> str:
    """One line for the console: the answer, the bracket, what bound it."""
    def show(x: float | None) -> str:
        return show_load(block["over"], x)

    head = f"{block['id']} ({block['over']}, {'; '.join(block['slo'])}): "
    n = len(block["probes"])
    if block["answer"] is None:
        return head + f"no answer ({block['status']}): {block['reason']}; {n} probes"
    binding = f", binding {'; '.join(block['binding'])}" if block["binding"] else ""
    return (head + f"answer {show(block['answer'])} (goodput {block['goodput_s']:g} req/s), bracket "
            f"[{show(block['bracket']['lo'])}, {show(block['bracket']['hi'])}]{binding}; {block['status']}, "
            f"{n} probes")


__all__ = ["run_search", "verdict", "describe", "FAIL", "PASS", "UNTRUSTED"]
