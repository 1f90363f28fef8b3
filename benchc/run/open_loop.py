"""The open loop's drivers (plan/shapes.OpenLoop, plan/shapes.Replay; the protocol:
run/drivers.py): each unit at its scheduled time, whatever the schedule: the client never
waits for a response before sending the next, only for the step's max_concurrency. On the
own reader a unit is issued SEND_LEAD_NS early and writes at its time (measured); on
aiohttp, which opens its connections itself, it is issued at its time.

The schedule is the shape's: a seeded arrival process at a rate (OpenLoopDriver), or a
trace's own times over a speedup (ReplayDriver, the feed's prompts set them). A shard
(distributed runs) takes every count-th arrival, so the shards' union is exactly the
plan's schedule."""

from __future__ import annotations

import asyncio
import heapq
import random
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

from benchc.client.request import CLOCK
from benchc.plan.shapes import OpenLoop, Replay
from benchc.run.drivers import Host
from benchc.run.punctual import SEND_LEAD_NS


def arrival_times(shape: OpenLoop, n: int, seed: int) -> list[float]:
    """Seconds from the point's start of the first `n` arrivals of an open loop."""
    rng = random.Random(seed)
    rate = shape.rate_rps
    t, out = 0.0, []
    for _ in range(n):
        if shape.arrival == "constant":
            gap = 1.0 / rate
        elif shape.arrival == "gamma":
            burst = shape.burstiness or 1.0
            gap = rng.gammavariate(burst, 1.0 / (rate * burst))
        else:
            gap = rng.expovariate(rate)
        t += gap
        out.append(t)
    return out


class _Scheduled:
    """An open loop on some schedule (the subclass gives it)."""

    scheduled = True
    speedup = 1.0
    pace_s: float | None = None

    def __init__(self, cap: int | None) -> None:
        self.cap = cap
        # the sends to come, which the feed's builder leaves their turn (next_due_ns): its
        # next issue, and the writes of requests issued ahead (a heap of their due times)
        self._next_issue_ns: int | None = None
        self._writes: list[int] = []

    def schedule(self, feed: Any, seed: int, shard: tuple[int, int]) -> Iterator[float]:
        """Its arrival times in seconds from its start, this shard's part of them."""
        index, count = shard
        return islice(self._times(feed, seed), index, None, count)

    def _times(self, feed: Any, seed: int) -> Iterable[float]:
        raise NotImplementedError

    def next_due_ns(self, now_ns: int) -> int | None:
        """Its next send (its next issue, or the write of a request issued ahead)."""
        writes = self._drop_writes(now_ns)  # written, or due and woken by now
        due = self._next_issue_ns
        if writes and (due is None or writes[0] < due):
            due = writes[0]
        return due

    def _drop_writes(self, until_ns: int) -> list[int]:
        """The early writes' heap, without those due by `until_ns`."""
        writes = self._writes
        while writes and writes[0] <= until_ns:
            heapq.heappop(writes)
        return writes

    async def drive(self, host: Host) -> None:
        lead_ns = SEND_LEAD_NS if host.punctual is not None else 0
        start_ns = CLOCK() + lead_ns
        try:
            await self._sends(host, self.schedule(host.feed, host.seed, host.shard), start_ns, lead_ns)
        finally:
            self._next_issue_ns = None

    async def _sends(self, host: Host, schedule: Iterable[float], start_ns: int, lead_ns: int) -> None:
        """Its issues, each telling the feed's builder when the next is due."""
        tasks, stop_wait, cap = host.tasks, host.stop_wait, self.cap
        assert stop_wait is not None
        for offset in schedule:
            scheduled_ns = start_ns + int(offset * 1e9)
            self._next_issue_ns = scheduled_ns - lead_ns
            # again until due: uvloop's timers round to the millisecond and may fire up to half
            # of one early, and a request must never be issued before its time
            while (delay := (scheduled_ns - lead_ns - CLOCK()) / 1e9) > 0:
                done, _ = await asyncio.wait({stop_wait}, timeout=delay)
                if done:
                    return
            if not host.may_issue(max(scheduled_ns, CLOCK())):
                return
            if cap and len(tasks) >= cap:
                host.capped += 1
                self._next_issue_ns = None  # not due until a unit ends: the builder may go on
            while cap and len(tasks) >= cap:
                # At the cap: this arrival waits (it is late, and its schedule latency shows it).
                if not await host.room_or_stop():
                    return
            if not host.may_issue(max(scheduled_ns, CLOCK())):  # the time ran out while it waited
                return
            i = host.issue()
            host.start_unit(i, scheduled_ns, host.slots.take(scheduled_ns, CLOCK()))
            if lead_ns:  # its write is due at its time (the heap's past ones go as it grows)
                heapq.heappush(self._drop_writes(scheduled_ns - lead_ns), scheduled_ns)


class OpenLoopDriver(_Scheduled):
    """Arrivals of a seeded process at the shape's rate."""

    def __init__(self, shape: OpenLoop) -> None:
        super().__init__(shape.max_concurrency)
        self.shape = shape

    def _times(self, feed: Any, seed: int) -> Iterable[float]:
        # a sessions step's arrivals are its sessions' (its requests, the turns, are at least
        # as many); else a rate and a request count or a duration: the compiler saw to it
        s = self.shape
        n = s.sessions or s.requests or int(s.rate_rps * (s.duration_s or 0.0) * 2 + 16)
        return arrival_times(s, n, seed)


class ReplayDriver(_Scheduled):
    """A trace's own times over the speedup (the feed's prompts, or sessions, hold them)."""

    def __init__(self, shape: Replay) -> None:
        super().__init__(shape.max_concurrency)
        self.shape = shape
        self.speedup = shape.speedup

    def _times(self, feed: Any, seed: int) -> Iterable[float]:
        return feed.arrivals()


__all__ = ["OpenLoopDriver", "ReplayDriver", "arrival_times", "SEND_LEAD_NS"]
