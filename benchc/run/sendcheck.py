"""Where a request's send delay came from: the server (waiting for a concurrency slot) or
the client (late with a free slot).

A request is *ready* when the load shape lets it go: open loop, at its scheduled time,
or, under `max_concurrency`, when a slot became free (the later of the two); closed loop,
when the request it replaces ended (or when the ramp started it). Time from the schedule
to ready is queueing at the client caused by the server: the cap did its job and the
latencies from schedule show it. Time from ready to the first write, less the time spent
opening a connection, is the client's own lateness; only that can make the point
client-limited, by its effect on the offered load (run/effects.py).
"""

from __future__ import annotations

import heapq

from benchc.metrics.latency import Recorder
from benchc.metrics.record import CLIENT_EXHAUSTED, RequestRecord
from benchc.run import effects

_FIGURES = ("count", "mean", "p50", "p99", "max")


class SlotLedger:
    """When each of `cap` in-flight slots became free; None: no cap (open loop without
    max_concurrency). Requests take slots in the order they are issued."""

    def __init__(self, cap: int | None):
        self.cap = cap
        self._unused = cap or 0  # slots no request has held yet: free since the point began
        self._freed: list[int] = []  # heap of the times held slots were given back

    def take(self, scheduled_ns: int | None, now_ns: int) -> int:
        """A request is issued now: its ready time."""
        if self.cap is None:
            return scheduled_ns if scheduled_ns is not None else now_ns
        if self._freed:
            free = heapq.heappop(self._freed)
        elif self._unused:
            self._unused -= 1
            free = scheduled_ns if scheduled_ns is not None else now_ns  # free since ever
        else:
            free = now_ns  # more issued than slots: cannot happen in loadgen; no blame either way
        return max(free, scheduled_ns) if scheduled_ns is not None else free

    def give_back(self, now_ns: int) -> None:
        if self.cap is not None:
            heapq.heappush(self._freed, now_ns)


class SendCheck:
    """Per point: the client's own send delay, the queueing at the cap, how requests found
    their connections (by their first attempt), and requests the client itself could not
    make (out of file descriptors or ports: the point is then client-limited)."""

    def __init__(self) -> None:
        self.client = Recorder()  # ready -> first write, less connect time
        self.queued = Recorder()  # schedule -> ready, for the requests that waited
        self.scheduled = 0
        self.reused = 0
        self.fresh = 0
        self.early_reads = 0
        self.exhausted = 0  # requests failed as CLIENT_EXHAUSTED
        # for the offered-load effect (run/effects.py)
        self.sent = 0  # requests written, with a ready time
        self.delay_ns = 0  # their send delays, summed
        self.slot_ns = 0  # their ready -> end, summed: the slots' time
        self.late = 0  # sends more than effects.SEND_LATE_US late with a free slot
        # the first and last ready time, and first write: the spans of the two (4 ints, not a
        # helper's list: this runs per request on the load generator's path)
        self._ready_lo = self._ready_hi = self._sent_lo = self._sent_hi = 0

    def add(self, r: RequestRecord) -> None:
        if r.times.scheduled_ns is not None:
            self.scheduled += 1
            if r.times.queued_ns > 0:
                self.queued.record_ns(r.times.queued_ns)
        if r.times.early_reads:
            self.early_reads += r.times.early_reads
        if r.outcome.error == CLIENT_EXHAUSTED:
            self.exhausted += 1
        sent = r.times.first_sent_ns
        if sent is None:
            return  # never sent (the connect failed): no send delay to judge
        ready = r.times.ready_ns
        if ready is not None:
            delay = sent - ready - r.times.connect_ns
            if delay < 0:
                delay = 0
            self.client.record_ns(delay)
            self.sent += 1
            self.delay_ns += delay
            slot = (r.times.end_ns or sent) - ready
            if slot > 0:
                self.slot_ns += slot
            if delay > effects.SEND_LATE_US * 1000:
                self.late += 1
            if self.sent == 1:
                self._ready_lo = self._ready_hi = ready
                self._sent_lo = self._sent_hi = sent
            else:
                if ready < self._ready_lo:
                    self._ready_lo = ready
                elif ready > self._ready_hi:
                    self._ready_hi = ready
                if sent < self._sent_lo:
                    self._sent_lo = sent
                elif sent > self._sent_hi:
                    self._sent_hi = sent
        # a retry follows a failure on a reused connection
        if r.outcome.reused_connection or r.outcome.retried:
            self.reused += 1
        else:
            self.fresh += 1

    def effect_inputs(self) -> dict:
        """What run/effects.offered_load reads."""
        return {"sent": self.sent, "delay_ns": self.delay_ns, "slot_ns": self.slot_ns, "late": self.late,
                "ready_span_ns": self._ready_hi - self._ready_lo,
                "sent_span_ns": self._sent_hi - self._sent_lo}

    def summary(self) -> dict:
        """Figures for the point's `client` block."""
        out: dict = {}
        delay = self.client.summary()
        out["send_delay_us"] = {k: delay[k] for k in _FIGURES if k in delay}
        q = self.queued.summary()
        if self.scheduled:
            cap = {"requests": q["count"], "of": self.scheduled,
                   "wait_us": {k: q[k] for k in _FIGURES if k in q}}
            if q["count"]:
                cap["note"] = (f"{q['count']} of {self.scheduled} arrivals waited for a free max_concurrency "
                               f"slot (p99 {q['p99'] / 1000:.1f} ms): the server did not keep up with the "
                               "rate; latencies from schedule include the wait")
            out["cap_queueing"] = cap
        out["connections"] = {"new": self.fresh, "reused": self.reused}
        if self.early_reads:
            # reads whose kernel stamp fell before the send stamp (a clock step): dated at the send
            out["reads_stamped_before_send"] = self.early_reads
        return out

