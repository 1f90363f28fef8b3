"""The closed loop's driver (plan/shapes.ClosedLoop; the protocol: run/drivers.py): C slots,
each a task that sends its units one after another (a request, or a session), one new unit
per finished one, started in the finished one's own turn of the loop. A task per request,
woken through the step's loop, cost several microseconds a request more
(benchmarks/run_ingest.py, coalesced)."""

from __future__ import annotations

import asyncio

from benchc.client.request import CLOCK
from benchc.plan.shapes import ClosedLoop
from benchc.run.drivers import Host


class ClosedLoopDriver:
    scheduled = False
    speedup = 1.0
    pace_s: float | None = None

    def __init__(self, shape: ClosedLoop) -> None:
        self.shape = shape

    def next_due_ns(self, now_ns: int) -> int | None:
        return None  # its units go as others end

    async def drive(self, host: Host) -> None:
        """Its slots, the first ones spread over ramp_up_s; returns when every slot is done
        (the stop rules ended it), or the step is stopped."""
        c = self.shape.concurrency
        ramp = self.shape.ramp_up_s / c if self.shape.ramp_up_s and c > 1 else 0.0
        for k in range(c):
            if not host.may_issue():
                break
            # counted as issued as it is decided (not when its task first runs: C slots
            # started together would each pass may_issue() on the same count, and a step of
            # fewer requests than slots sent one per slot)
            host.start(self._slot(host, host.issue()))
            if ramp and k < c - 1:
                await asyncio.sleep(ramp)
        while host.tasks:
            if not await host.room_or_stop():
                return

    async def _slot(self, host: Host, first: int) -> None:
        """One slot: its units in turn while the stop rules let another go."""
        i = first
        while True:
            await host.unit(i, None, host.slots.take(None, CLOCK()))
            if not host.may_issue():
                return
            i = host.issue()


__all__ = ["ClosedLoopDriver"]
