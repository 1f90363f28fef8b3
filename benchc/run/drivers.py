"""The protocol between a step (run/loadgen.StepRun: a request's life and the step's
bookkeeping, shape-blind) and its load shape's driver (one per shape of plan/shapes.py:
run/closed_loop.py, run/open_loop.py, run/users.py), k6's executors being the model.

A driver says three things and nothing else:
- when its next unit is due (`next_due_ns`: an open loop's schedule; the feed's builder
  leaves that moment free), and how a session's turns are paced (`speedup`, `pace_s`);
- whether a unit may start now: it starts one when its own rule says (a free slot, its
  time, its user's pace) and the step's stop rules let one go (`Host.may_issue`);
- what ends the step: `drive` returns when it will start no more units; the step then
  waits for those in flight.
A unit is a single prompt's request or a session, as the workload says: the driver does
not know which (`Host.unit`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar

from benchc.metrics.record import RequestRecord
from benchc.metrics.recorder import PointRecorder
from benchc.plan.model import Step
from benchc.run.punctual import PunctualWrites
from benchc.run.sendcheck import SlotLedger

T = TypeVar("T")


class Host(Protocol):
    """What a driver may ask of the step it drives (run/loadgen.StepRun)."""

    step: Step
    seed: int
    shard: tuple[int, int]  # (index, count) of this worker's part of an open loop's schedule
    slots: SlotLedger  # when each unit was ready to go (the self-check's send delay)
    tasks: set[asyncio.Task]  # units in flight, each a task
    punctual: PunctualWrites | None  # punctual writes (an open loop on the own reader, a replay's)
    capped: int  # an open loop's arrivals held at its cap
    rec: PointRecorder  # the step's figures (a driver that paces its own sessions tells it of their ends)

    @property
    def feed(self) -> Any: ...  # its requests (run/feed.StepFeed) or sessions (run/sessions.SessionFeed)

    def may_issue(self, at_ns: int | None = None) -> bool:
        """The stop rules let another unit start (now, or at `at_ns`)."""
        ...

    def issue(self) -> int:
        """Count the next unit as started (as it is decided) and give its index in the feed."""
        ...

    def unit(self, i: int, scheduled_ns: int | None, ready_ns: int) -> Coroutine[Any, Any, Any]:
        """Unit `i` (a request, or a session), due at `scheduled_ns` (None: as soon as it
        may), ready to go at `ready_ns`: for the driver to await or start()."""
        ...

    def session(self, j: int, scheduled_ns: int | None, ready_ns: int) -> Coroutine[Any, Any, int]:
        """Session `j`, returning its last turn's send time (users pace their next on it)."""
        ...

    def start_unit(self, i: int, scheduled_ns: int | None, ready_ns: int) -> None:
        """Unit `i` in a task of its own, begun when its task first runs (an open loop's)."""
        ...

    def start(self, unit: Coroutine[Any, Any, Any]) -> None:
        """Run a unit in a task of its own (in `tasks` until it ends)."""
        ...

    async def measured(self, body: bytes, r: RequestRecord, *, due_ns: int | None = None,
                       written: Callable[[], None] | None = None) -> None:
        """Send one request of a unit the driver paces itself (a coding-agent session's: run/
        agent_replay.py) and record it, through the step's own request life; `due_ns`: written
        at that time, never before (an open loop's punctual write: ask for it SEND_LEAD_NS
        ahead). A driver whose class says `punctual = True` has the step keep an alarm for
        such writes on either HTTP path. `written`: called once the request is written, where
        the path says when (the own reader), else never."""
        ...

    async def held(self, unit: Awaitable[T]) -> T:
        """Await a unit the driver paces itself (a coding-agent session), counted in flight
        while it runs (the steady state: the span where the step's target of them were)."""
        ...

    async def open_ahead(self, n: int) -> int:
        """Open connections (own reader) until `n` are idle, for `n` requests that will go
        together; how many were opened."""
        ...

    async def room_or_stop(self, timeout: float | None = None) -> bool:
        """Wait until a unit ends; False when the step was stopped meanwhile."""
        ...

    async def until(self, due_ns: int) -> bool:
        """Wait until `due_ns`; False when the step was stopped meanwhile."""
        ...

    async def writes_first(self, by_ns: int, work_ns: int = ...) -> None:
        """Before work that can wait (`work_ns` of it at most: a request readied ahead, a
        session's start): the step's punctual writes due within it go first, those due by
        `by_ns` only."""
        ...

    @property
    def stop_wait(self) -> asyncio.Task | None: ...  # done when the step is stopped


class Driver(Protocol):
    """One load shape's driver (made from its shape: `Driver(shape)`)."""

    # its units are due at times of its own (next_due_ns): on the own reader each is issued
    # early and an alarm writes it at its time (run/alarm.py); the loop thread is raised to
    # keep them, and the feed's builder leaves them their turn
    scheduled: bool
    speedup: float  # a session's turns are on its trace's times over this (a replay)
    pace_s: float | None  # a session's turn this long after its previous turn's send (users)

    def next_due_ns(self, now_ns: int) -> int | None:
        """When its next send is due (CLOCK ns; it is now `now_ns`), while one is coming; None:
        none is scheduled (a closed loop's units go as others end)."""
        ...

    async def drive(self, host: Host) -> None:
        """Start the step's units, each when its rule and the stop rules let it; return once
        it will start no more."""
        ...


__all__ = ["Host", "Driver"]
