"""The sweep's early stop (load.saturation): once the server is saturated, the points above
it measure a queue, not the server, and take the longest to run.

After each point of a sweep, the point is compared with the one before it in the same pass
(loads rise along a sweep; the spec is refused otherwise):
- saturated: output tok/s rose by less than `min_gain` (a fraction of the previous point's)
  while the `latency` statistic (default e2e.p50) rose -- more load bought no throughput,
  only waiting;
- errors: the point's error rate is above `max_error_rate`.
Either stops the sweep: the points after it are skipped, in this pass and in every later
pass of a repeated sweep (a pass never runs a load an earlier pass found beyond the knee),
and the combination's record in the result says why and which points were skipped.
"""

from __future__ import annotations

from benchc.results.document import metric_value


def why_stop(rule: dict, previous: dict | None, point: dict) -> str | None:
    """The sentence that stops the sweep after `point`, or None to go on."""
    bound = rule.get("max_error_rate")
    if bound is not None and point["error_rate"] > bound:
        return (f"{point['id']}: error rate {point['error_rate']:.2%} is above the bound "
                f"max_error_rate {bound:.2%}")
    gain = rule.get("min_gain")
    if gain is None or previous is None:
        return None
    t0, t1 = previous["throughput"]["output_tok_s"], point["throughput"]["output_tok_s"]
    key = rule["latency"]
    l0, l1 = metric_value(previous, key), metric_value(point, key)
    if t0 <= 0 or l0 is None or l1 is None:
        return None
    rise = t1 / t0 - 1.0
    if rise < gain and l1 > l0:
        limited = " (the client was saturated at this point: its limit, not the server's, may be the knee)" \
            if point["client"]["client_limited"] else ""
        return (f"{point['id']}: output tok/s rose {rise:+.1%} over {previous['id']} ({t0:,.1f} -> "
                f"{t1:,.1f}), less than min_gain {gain:.0%}, while {key} rose {l0 / 1000:.1f} -> "
                f"{l1 / 1000:.1f} ms: saturated{limited}")
    return None


class SweepStop:
    """One combination's sweep under the rule: which loads are left to run."""

    def __init__(self, rule: dict | None):
        self.rule = rule
        self.previous: dict[int | None, dict] = {}  # pass (repeat) -> its last point
        self.beyond: int | None = None  # the sweep's position past which no pass runs
        self.stopped: dict | None = None  # the record of why the sweep stopped
        self.skipped: list[str] = []  # ids of the load steps skipped

    def skips(self, step_id: str, position: int) -> bool:
        """Whether the load step at `position` (its index within its pass) is skipped; a
        skipped step is counted."""
        if self.beyond is None or position <= self.beyond:
            return False
        self.skipped.append(step_id)
        return True

    def after(self, point: dict, position: int) -> None:
        """Judge the point just measured (at `position` within its pass)."""
        if self.rule is None:
            return
        run = point["params"].get("repeat")
        reason = why_stop(self.rule, self.previous.get(run), point)
        self.previous[run] = point
        if reason is not None and (self.beyond is None or position < self.beyond):
            self.beyond = position
            if self.stopped is None:
                self.stopped = {"after": point["id"], "reason": reason}

    def record(self) -> dict | None:
        """The combination record's `sweep_stop`, or None when the rule never fired."""
        if self.stopped is None:
            return None
        return {**self.stopped, "rule": self.rule, "skipped": list(self.skipped)}


__all__ = ["SweepStop", "why_stop"]
