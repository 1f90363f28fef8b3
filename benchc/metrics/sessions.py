"""A point's multi-turn sessions, counted: per turn index the latencies, input tokens and the
server's cached fraction, and per session its outcome, its duration and the think time it
kept. Part of the point's Tally (aggregate.py), so shards add exactly.

Turns 1 .. TURN_BUCKETS - 1 are counted each on their own and every later turn together
(">=TURN_BUCKETS"): the history, and with it the prefill a cache saves, grows turn by turn,
and a long tail of turns should not spread into many near-empty columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from benchc.metrics.latency import Recorder

TURN_BUCKETS = 10
LAST_BUCKET = f">={TURN_BUCKETS}"
_LATENCIES = ("ttft_us", "itl_us", "e2e_us")
_OUTCOMES = ("completed", "failed", "cut")


def turn_bucket(turn: int) -> str:
    """The column of a turn (1-based): "1" .. "9", then ">=10"."""
    return str(turn) if turn < TURN_BUCKETS else LAST_BUCKET


def _bucket_order(name: str) -> int:
    return TURN_BUCKETS if name == LAST_BUCKET else int(name)


@dataclass
class TurnCounters:
    """The requests of one turn index (of every session of the point)."""

    sent: int = 0
    completed: int = 0
    input_tokens: int = 0  # of the completed ones: the server's usage.prompt_tokens, else benchc's count
    reporting: int = 0  # completed requests whose server reported cached tokens ...
    reporting_prompt_tokens: int = 0  # ... their prompt tokens ...
    cached_tokens: int = 0  # ... and of those, the cached ones
    latency: dict[str, Recorder] = field(default_factory=lambda: {k: Recorder() for k in _LATENCIES})

    def add(self, r, ttft_ns: int | None, e2e_ns: int | None) -> None:
        """One request of this turn (a metrics.record.RequestRecord); latencies when it completed."""
        self.sent += 1
        if ttft_ns is None or e2e_ns is None:
            return
        self.completed += 1
        prompt = r.tokens.usage_input_tokens if r.tokens.usage_input_tokens is not None else r.input_tokens
        self.input_tokens += prompt
        if r.cache.cached_tokens is not None:
            self.reporting += 1
            self.reporting_prompt_tokens += prompt
            self.cached_tokens += r.cache.cached_tokens
        self.latency["ttft_us"].record_ns(ttft_ns)
        self.latency["e2e_us"].record_ns(e2e_ns)
        r.parser.record_gaps(self.latency["itl_us"].hist)

    def merge(self, other: TurnCounters) -> None:
        for name in ("sent", "completed", "input_tokens", "reporting", "reporting_prompt_tokens",
                     "cached_tokens"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for k, rec in other.latency.items():
            self.latency[k].merge(rec)

    def block(self, name: str) -> dict:
        prompt = self.reporting_prompt_tokens
        frac = round(self.cached_tokens / prompt, 4) if prompt else None
        return {"turn": name, "sent": self.sent, "completed": self.completed,
                "input_tokens": self.input_tokens,
                "mean_input_tokens": round(self.input_tokens / self.completed, 3) if self.completed else None,
                "cache": {"reporting": self.reporting, "prompt_tokens": self.reporting_prompt_tokens,
                          "cached_tokens": self.cached_tokens, "cached_fraction": frac},
                "latency": {k: rec.summary() for k, rec in self.latency.items()}}

    @classmethod
    def from_block(cls, b: dict) -> TurnCounters:
        c = b["cache"]
        return cls(sent=b["sent"], completed=b["completed"], input_tokens=b["input_tokens"],
                   reporting=c["reporting"], reporting_prompt_tokens=c["prompt_tokens"],
                   cached_tokens=c["cached_tokens"],
                   latency={k: Recorder.from_summary(b["latency"][k]) for k in _LATENCIES})


@dataclass
class SessionCounters:
    """A point's sessions: outcomes, durations, think times, and its turns by index."""

    started: int = 0
    outcomes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_OUTCOMES, 0))
    turns: dict[str, TurnCounters] = field(default_factory=dict)
    duration: Recorder = field(default_factory=Recorder)  # first turn's send to last turn's end
    think_gap: Recorder = field(default_factory=Recorder)  # a turn's send after the previous turn's end
    think_late: Recorder = field(default_factory=Recorder)  # a turn's send after it was due
    # agent loops with fan-out: each round's K sub-requests, from the first one's send to the
    # last one's end (the slowest decides when the round is over)
    fan_out_rounds: int = 0
    fan_out_requests: int = 0
    fan_out_round: Recorder = field(default_factory=Recorder)
    # sessions ended because an answer could not be read (run/sessions.py's guard), by what it raised
    answer_errors: dict[str, int] = field(default_factory=dict)

    def add_turn(self, r, ttft_ns: int | None, e2e_ns: int | None) -> None:
        """One request that was a session's turn."""
        name = turn_bucket(r.place.turn)
        counters = self.turns.get(name)
        if counters is None:
            counters = self.turns[name] = TurnCounters()
        counters.add(r, ttft_ns, e2e_ns)
        if r.place.prev_end_ns is not None and r.times.t0_ns:
            self.think_gap.record_ns(max(0, r.times.t0_ns - r.place.prev_end_ns))
            if r.times.ready_ns is not None:
                self.think_late.record_ns(max(0, r.times.t0_ns - r.times.ready_ns))

    def add_session(self, info: dict) -> None:
        """A session that is over (run/sessions.run_session's account of it)."""
        self.started += 1
        self.outcomes[info["outcome"]] += 1
        if info["start_ns"] is not None and info["end_ns"] is not None:
            self.duration.record_ns(max(0, info["end_ns"] - info["start_ns"]))
        _add(self.answer_errors, info.get("errors") or {})
        for sub_requests, round_ns in info.get("fan_out", ()):
            self.fan_out_rounds += 1
            self.fan_out_requests += sub_requests
            self.fan_out_round.record_ns(round_ns)

    def merge(self, other: SessionCounters) -> None:
        self.started += other.started
        for k, v in other.outcomes.items():
            self.outcomes[k] = self.outcomes.get(k, 0) + v
        for name, c in other.turns.items():
            if name in self.turns:
                self.turns[name].merge(c)
            else:
                self.turns[name] = TurnCounters()
                self.turns[name].merge(c)
        self.duration.merge(other.duration)
        self.think_gap.merge(other.think_gap)
        self.think_late.merge(other.think_late)
        self.fan_out_rounds += other.fan_out_rounds
        self.fan_out_requests += other.fan_out_requests
        self.fan_out_round.merge(other.fan_out_round)
        _add(self.answer_errors, other.answer_errors)

    def block(self) -> dict | None:
        """The point's `sessions` block; None for a point that sent no session."""
        if not self.started and not self.turns:
            return None
        out = {"started": self.started, **self.outcomes,
               "turns_sent": sum(c.sent for c in self.turns.values()),
               "duration_us": self.duration.summary(), "think_gap_us": self.think_gap.summary(),
               "think_late_us": self.think_late.summary(),
               "by_turn": [self.turns[k].block(k) for k in sorted(self.turns, key=_bucket_order)]}
        if self.answer_errors:
            out["answer_errors"] = dict(sorted(self.answer_errors.items()))
        if self.fan_out_rounds:
            out["fan_out"] = {"rounds": self.fan_out_rounds, "sub_requests": self.fan_out_requests,
                              "round_us": self.fan_out_round.summary()}
        return out

    @classmethod
    def from_block(cls, block: dict | None) -> SessionCounters:
        out = cls()
        if block:
            out.started = block["started"]
            out.outcomes = {k: block[k] for k in _OUTCOMES}
            out.turns = {b["turn"]: TurnCounters.from_block(b) for b in block["by_turn"]}
            out.duration = Recorder.from_summary(block["duration_us"])
            out.think_gap = Recorder.from_summary(block["think_gap_us"])
            out.think_late = Recorder.from_summary(block["think_late_us"])
            out.answer_errors = dict(block.get("answer_errors", {}))
            fan = block.get("fan_out")
            if fan:
                out.fan_out_rounds, out.fan_out_requests = fan["rounds"], fan["sub_requests"]
                out.fan_out_round = Recorder.from_summary(fan["round_us"])
        return out


def _add(into: dict[str, int], counts: dict[str, int]) -> None:
    for name, n in counts.items():
        into[name] = into.get(name, 0) + n


__all__ = ["SessionCounters", "TurnCounters", "turn_bucket", "TURN_BUCKETS", "LAST_BUCKET"]
