"""Capacity search: the largest load (concurrency, or arrival rate) at which every SLO holds.

A spec's `load.search` compiles to one `search` step per matrix combination; its `search`
dict (Step.search) holds the definition: `over`, `min`, `max`, `tolerance`, `max_probes`,
the SLO items that decide, and what the plan can promise before anything runs -- the most
probes the policy takes when every probe is trusted (`worst_case_probes`), and the most
requests the search may send (`max_requests`).

Probes are decided at run time, from the verdicts of earlier probes; the policy below is a
pure function of those verdicts (CapacitySearch), so a search is as reproducible as a sweep.
Probe k (1, 2, ...) is a load step made from the search step (probe_step): the load the
policy asks for, the search step's request count, duration, ramp-up and cooldown, and
prompt stream `search step's prompt_stream + k - 1` -- the compiler reserves `max_probes`
streams for the search, so every probe sends prompts no other request of the run sent.

The policy:
- bracket: probe `min`; while the SLOs hold, double the load (capped at `max`). The first
  failing probe closes the bracket [last load that held, first load that failed]. `min`
  failing ends the search with no answer (below_min); `max` holding ends it with `max`
  (at_max: the capacity may lie above).
- refine: bisect the bracket -- concurrency on integers, mid = (lo + hi) // 2, until
  hi - lo <= tolerance (default 1: the exact largest concurrency); rate at the midpoint
  until hi - lo <= tolerance (absolute, req/s) or <= tolerance x lo (relative, `5%`).
- a probe whose figures cannot be trusted (results/trust.py: the client was saturated,
  outputs of other lengths than asked, more prefix-cache hits than the spec shares) decides
  nothing: the same load is probed again, with fresh prompts, up to REPROBES times; still
  untrusted, the search stops undecided, with what it knew (the bracket) and never an answer
  concluded from that probe.
- `max_probes` reached before the tolerance: the search stops with the bracket it has; its
  answer is the largest load that held (status max_probes).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from benchc.plan.model import Step
from benchc.plan.shapes import Search

REPROBES = 1  # an untrusted probe's load is probed again this many times before the search stops
GROWTH = 2  # bracketing multiplies the load by this
DEFAULT_TOLERANCE = {"concurrency": {"kind": "absolute", "value": 1},
                     "rate": {"kind": "relative", "value": 0.05}}

PASS, FAIL, UNTRUSTED = "pass", "fail", "untrusted"


def show_load(over: str, load: float | None) -> str:
    """`c=6`, `12.5/s`, or `none`."""
    if load is None:
        return "none"
    return f"c={int(load)}" if over == "concurrency" else f"{load:g}/s"


def bracket_loads(over: str, lo: float, hi: float) -> list[float]:
    """The bracketing probes' loads when every one holds: min, 2 min, 4 min, ..., max."""
    out = [lo]
    while out[-1] < hi:
        nxt = out[-1] * GROWTH
        out.append(hi if nxt >= hi else nxt)
    return [int(x) for x in out] if over == "concurrency" else out


def _resolved(over: str, lo: float, hi: float, tolerance: dict) -> bool:
    width = hi - lo
    if over == "concurrency" and width <= 1:
        return True  # nothing lies between two neighbouring integers
    if tolerance["kind"] == "relative":
        return width <= tolerance["value"] * lo
    return width <= tolerance["value"]


def _midpoint(over: str, lo: float, hi: float) -> float:
    return (int(lo) + int(hi)) // 2 if over == "concurrency" else (lo + hi) / 2


def _refinements(over: str, lo: float, hi: float, tolerance: dict) -> int:
    """The most bisection probes a bracket [lo, hi] takes. The worst verdicts keep lo where it
    is (a relative tolerance shrinks with lo) and, on integers, leave the larger half
    (mid = lo + w // 2, so hi - mid = w - w // 2)."""
    n = 0
    while not _resolved(over, lo, hi, tolerance):
        width = hi - lo
        hi = lo + (width - width // 2 if over == "concurrency" else width / 2)
        n += 1
    return n


def worst_case_probes(over: str, lo: float, hi: float, tolerance: dict) -> int:
    """The most probes the policy takes with every probe trusted: over every place the first
    failing probe can fall, the bracketing probes plus the bisections of that bracket."""
    loads = bracket_loads(over, lo, hi)
    worst = len(loads)  # every load held, max included
    for k in range(1, len(loads)):  # probe k (0-based) is the first to fail
        worst = max(worst, k + 1 + _refinements(over, loads[k - 1], loads[k], tolerance))
    return worst


@dataclass
class Probe:
    """One probe as the search saw it."""

    index: int  # 1, 2, ...
    load: float
    verdict: str  # pass | fail | untrusted
    point: str | None = None  # the result point's id
    checks: list[dict] = field(default_factory=list)  # {threshold, value, passed} per SLO item
    doubts: list[str] = field(default_factory=list)  # why it could not be trusted
    decided: bool = True  # False: it did not move the search (untrusted)

    def to_json(self) -> dict:
        out: dict[str, Any] = {"probe": self.index, "load": self.load, "point": self.point,
                               "verdict": self.verdict, "decided": self.decided, "checks": self.checks}
        if self.doubts:
            out["doubts"] = self.doubts
        return out


class CapacitySearch:
    """The probe policy of one search (see the module's docstring): next_load() says what to
    probe, record() takes the verdict; block() is the result's account of it."""

    def __init__(self, search: dict):
        self.search = search
        self.over: str = search["over"]
        self.min, self.max = search["min"], search["max"]
        self.tolerance: dict = search["tolerance"]
        self.max_probes: int = search["max_probes"]
        self.lo: float | None = None  # the largest load that held
        self.hi: float | None = None  # the smallest load that failed
        self.probes: list[Probe] = []
        self.status: str | None = None  # set once the search has ended
        self.reason = ""
        self._reprobes = 0  # re-probes of the current load so far
        self._pending: float | None = self.min

    def next_load(self) -> float | None:
        """The load of the next probe, or None once the search has ended."""
        if self.status is None and len(self.probes) >= self.max_probes:
            self._end("max_probes", f"max_probes ({self.max_probes}) reached before the tolerance")
        return None if self.status is not None else self._pending

    def record(self, probe: Probe) -> None:
        """The verdict of the probe of next_load()'s load."""
        self.probes.append(probe)
        load = probe.load
        if probe.verdict == UNTRUSTED:
            probe.decided = False
            if self._reprobes < REPROBES:
                self._reprobes += 1
                return  # the same load again, with the next probe's fresh prompts
            self._end("undecided", f"the probe at {self._show(load)} could not be trusted "
                                   f"{self._reprobes + 1} times ({'; '.join(probe.doubts)}): the "
                                   "search cannot go on from figures that measure the client or a "
                                   "misbehaving server; the bracket is what trusted probes showed")
            return
        self._reprobes = 0
        if probe.verdict == PASS:
            self.lo = load
        else:
            self.hi = load
        self._pending = self._decide()

    def abort(self, reason: str) -> None:
        """The run stopped (interrupted, server gone) before the search ended."""
        if self.status is None:
            self._end("interrupted", reason)

    # ------------------------------------------------------------------ policy

    def _decide(self) -> float | None:
        if self.hi is None:  # still bracketing: everything so far held
            if self.lo is None:
                return self.min
            if self.lo >= self.max:
                self._end("at_max", f"every SLO held at max ({self._show(self.max)}); the capacity may "
                                    "lie above it")
                return None
            nxt = self.lo * GROWTH
            return self._cast(self.max if nxt >= self.max else nxt)
        if self.lo is None:
            self._end("below_min", f"the SLOs failed at min ({self._show(self.min)}): no load in the "
                                   "range meets them")
            return None
        if _resolved(self.over, self.lo, self.hi, self.tolerance):
            self._end("found", f"the bracket [{self._show(self.lo)}, {self._show(self.hi)}] is within "
                               "the tolerance")
            return None
        return self._cast(_midpoint(self.over, self.lo, self.hi))

    def _end(self, status: str, reason: str) -> None:
        self.status, self.reason = status, reason

    def _cast(self, x: float) -> float:
        return int(x) if self.over == "concurrency" else round(x, 6)

    def _show(self, load: float) -> str:
        return show_load(self.over, load)

    # ------------------------------------------------------------------ the result's account

    @property
    def answer(self) -> float | None:
        """The largest load at which every SLO held -- only from a search that concluded."""
        return self.lo if self.status in ("found", "at_max", "max_probes") else None

    def binding(self) -> list[str]:
        """The SLO items that failed at the bracket's upper end (the smallest failing load)."""
        if self.hi is None:
            return []
        at_hi = [p for p in self.probes if p.load == self.hi and p.verdict == FAIL]
        return [c["threshold"] for c in at_hi[-1].checks if not c["passed"]] if at_hi else []

    def block(self) -> dict:
        """The result's `search` entry for this search (without combination and answer point)."""
        return {"over": self.over, "slo": [s["text"] for s in self.search["slo"]], "min": self.min,
                "max": self.max, "tolerance": self.tolerance, "max_probes": self.max_probes,
                "status": self.status, "reason": self.reason, "answer": self.answer,
                "bracket": {"lo": self.lo, "hi": self.hi}, "binding": self.binding(),
                "probes": [p.to_json() for p in self.probes]}


def probe_step(search_step: Step, index: int, load: float) -> Step:
    """Probe `index` (1, 2, ...) of a search step, at `load`: a load step (plan/model.Step)."""
    assert search_step.search is not None, "a search step holds its search"
    over = search_step.search["over"]
    label = search_step.id.rsplit("/", 1)[0] if "/" in search_step.id else ""
    name = f"probe{index}:" + (show_load(over, load) if over == "concurrency" else f"rate={load:g}/s")
    template = search_step.shape
    assert isinstance(template, Search), "a search step's load is its probes' template"
    return replace(search_step, kind="load", id=f"{label}/{name}" if label else name, probe=index,
                   load=template.probe(load),
                   prompt_stream=(search_step.prompt_stream or 0) + index - 1, prompts_sha256=None)


__all__ = ["CapacitySearch", "Probe", "probe_step", "show_load", "worst_case_probes", "bracket_loads",
           "REPROBES", "DEFAULT_TOLERANCE", "PASS", "FAIL", "UNTRUSTED"]
