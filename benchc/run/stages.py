"""The drivers of a staged profile's stages (load.stages; plan/shapes.ConcurrencyStage and
RateStage; the protocol: run/drivers.py), k6's ramping-vus and ramping-arrival-rate: a stage's
load goes linearly from the stage before's to its own over its ramp, then holds to its end.

A concurrency stage keeps as many slots busy as its ramp says at the moment: a slot above the
target ends after its unit (a request in flight is never cut), a new slot starts as the target
rises. A rate stage's arrivals are those of a process on the ramping rate, by inversion of the
rate's integral (Lewis and Shedler's time change): the k-th arrival is where the integral
reaches k - 1/2 (constant: a stage of 5 s at 2/s sends 10, centred in their slots) or the sum of
k unit exponentials (poisson), so a ramp offers its rate's integral whatever its shape."""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Iterator
from typing import Any

from benchc.client.request import CLOCK
from benchc.plan.shapes import ConcurrencyStage, RateStage
from benchc.run.drivers import Host
from benchc.run.open_loop import _Scheduled

TICK_NS = 10_000_000  # a concurrency ramp's target is read this often (a rise starts its slot then)


class ConcurrencyStageDriver:
    scheduled = False
    speedup = 1.0
    pace_s: float | None = None

    def __init__(self, shape: ConcurrencyStage) -> None:
        self.shape = shape
        self._start_ns = 0
        self._slots: set[int] = set()  # the slots running, by number (from 0)

    def next_due_ns(self, now_ns: int) -> int | None:
        return None  # its units go as others end, and as its ramp rises

    def _target(self) -> int:
        return self.shape.target_at((CLOCK() - self._start_ns) / 1e9)

    async def drive(self, host: Host) -> None:
        """Slots up to the ramp's target, read every TICK_NS until the stop rules end the
        stage; returns once its slots are done (or the step is stopped)."""
        self._start_ns = due = CLOCK()
        while host.may_issue():
            target = self._target()
            for k in range(target):
                if k not in self._slots and host.may_issue():
                    self._slots.add(k)
                    host.start(self._slot(host, k, host.issue()))
            due += TICK_NS
            if not await host.until(due):
                return
        while host.tasks:
            if not await host.room_or_stop():
                return

    async def _slot(self, host: Host, k: int, first: int) -> None:
        """Slot k: its units in turn while the ramp keeps it and the stop rules let one go."""
        i = first
        try:
            while True:
                await host.unit(i, None, host.slots.take(None, CLOCK()))
                if k >= self._target() or not host.may_issue():
                    return
                i = host.issue()
        finally:
            self._slots.discard(k)


def stage_times(shape: RateStage, seed: int) -> Iterator[float]:
    """Seconds from the stage's start of its arrivals, up to its duration (or unbounded)."""
    rng = random.Random(seed)
    end = shape.duration_s if shape.duration_s is not None else math.inf
    level, k = 0.0, 0
    while True:
        k += 1
        level = k - 0.5 if shape.arrival == "constant" else level + rng.expovariate(1.0)
        t = _inverse(shape, level)
        if t >= end:
            return
        yield t


def _inverse(shape: RateStage, level: float) -> float:
    """The time at which the stage's offered arrivals (RateStage.offered) reach `level`."""
    r, a, b = shape.ramp_s, shape.start_rps, shape.rate_rps
    ramped = shape.offered(r) if r > 0 else 0.0
    if level >= ramped:
        return r + (level - ramped) / b
    slope = (b - a) / r  # the rate's rise a second; a + slope t integrates to `level` at t
    if abs(slope) < 1e-12:
        return level / a
    return (-a + math.sqrt(max(a * a + 2 * slope * level, 0.0))) / slope


class RateStageDriver(_Scheduled):
    """A rate stage's arrivals (stage_times), each at its time, as an open loop sends them."""

    def __init__(self, shape: RateStage) -> None:
        super().__init__(shape.max_concurrency)
        self.shape = shape

    def _times(self, feed: Any, seed: int) -> Iterable[float]:
        return stage_times(self.shape, seed)


__all__ = ["ConcurrencyStageDriver", "RateStageDriver", "stage_times"]
