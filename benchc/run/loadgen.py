"""Load generation for one step (StepRun): a unit's life (a single prompt's request, or a
session) and the step's bookkeeping (stop rules, steady state, records, the client
self-check), whatever its load shape; the shape's driver decides when units start
(run/drivers.py: closed loop, open loop and replay, users), and cancellation.

At a duration stop no new request starts; requests in flight are finished and
recorded (so the window can run past `duration`; the result's window says by
how much). On Ctrl-C the stop event is set: no new request starts, those in
flight get `grace_s` to finish, then are cancelled and counted as cancelled (counts.cancelled,
not failed).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from itertools import count
from typing import Any, TypeVar

import aiohttp

from benchc.client.http1 import Due, Pool, RxFigures
from benchc.client.request import CLOCK, reuse_rules, send, send_native
from benchc.metrics.record import CLIENT_ERROR, CacheUse, Payload, RequestRecord, Times
from benchc.metrics.recorder import PointRecorder
from benchc.plan.model import Step, Target
from benchc.plan.shapes import SHAPES, Extent
from benchc.redact import redact_url
from benchc.run.agent_replay import AgentFeed
from benchc.run.console import Progress
from benchc.run.deadserver import ConnectStreak
from benchc.run.drivers import Driver
from benchc.run.feed import StepFeed
from benchc.run.open_loop import OpenLoopDriver, ReplayDriver
from benchc.run.punctual import WORK_NS, PunctualWrites, open_ahead_of, wait_until
from benchc.run.selfcheck import (
    TICK_S,
    TICK_STAMPED_S,
    SelfCheck,
    client_summary,
    cpu_s,
    kernel_stamped,
    verdict,
)
from benchc.run.sendcheck import SlotLedger
from benchc.run.sessions import SessionEnv, SessionFeed, run_session, until
from benchc.run.stepfigures import StepFigures

CANCEL_POLL_S = 0.002  # load.cancel after_tokens: a cancelled request's text chunks are checked this often

# each runnable shape's driver, "module:class" (plan/shapes.py names it; driver_for loads it)
DRIVERS: dict[type[Extent], str] = {kind: kind.driver for kind in SHAPES.values() if kind.driver}

log = logging.getLogger(__name__)
T = TypeVar("T")


def driver_for(shape: Extent) -> Driver:
    """A driver for one step of `shape`: the one its type names (plan/shapes.py, `driver`;
    run/drivers.py's protocol)."""
    module, name = shape.driver.split(":")
    made: Driver = getattr(importlib.import_module(module), name)(shape)
    return made


@dataclass
class StepContext:
    session: aiohttp.ClientSession
    url: str
    headers: dict
    target: Target
    stop_event: asyncio.Event = field(default_factory=asyncio.Event)
    grace_s: float = 5.0
    progress: Progress | None = None  # the point's progress, told of each request's end
    keep_text: bool = False  # keep outputs to count with the tokenizer after the point
    pool: Pool | None = None  # measured requests go on the own reader's pool instead of the session
    send_priority: bool = True  # an open loop on the pool raises the loop thread's priority (--send-priority)
    inflight: int = 0  # requests of the running step in flight (what a Ctrl-C waits for)
    finished: int = 0  # requests ended so far
    running: StepRun | None = None  # the step being driven (the run's heartbeat watches it)


def _soon(punctual: PunctualWrites | None, fn: Callable[[], None]) -> None:
    """`fn` (bookkeeping) in the loop's next turn; after the punctual writes due meanwhile."""
    if punctual is not None:
        punctual.soon_after_writes(fn)
    else:
        asyncio.get_running_loop().call_soon(fn)


class StepRun:
    """One load (or warm-up) step being driven: its counters are attributes, its units
    started by its shape's driver (run/drivers.py); a unit is a request or a session."""

    def __init__(self, ctx: StepContext, step: Step, feed: StepFeed | SessionFeed | AgentFeed,
                 rec: PointRecorder, slo_checks: list | None, seed: int = 0, shard: tuple[int, int] = (0, 1),
                 series_interval_s: float | None = None):
        self.ctx, self.step, self.feed, self.rec, self.slo_checks = ctx, step, feed, rec, slo_checks
        self.seed, self.shard = seed, shard
        self.driver = driver_for(step.shape)
        self.multi_turn = isinstance(feed, SessionFeed | AgentFeed)  # a unit is a session (of either kind)
        self.target = step.inflight_target  # units held in flight (plan/shapes.py)
        self.figures = StepFigures(series_interval_s)
        self.check = SelfCheck(self.figures.series,
                               TICK_STAMPED_S if kernel_stamped(ctx.pool, ctx.url) else TICK_S)
        # a server that stopped answering, or does not serve the API, stops the point (run/deadserver.py)
        self.streak = ConnectStreak(self.target, ctx.target.api, redact_url(ctx.url))
        self.slots = SlotLedger(step.shape.cap)
        self.capped = 0  # open loop: arrivals held at max_concurrency
        self.steady_start_ns: int | None = None  # the steady state: all `target` units in flight ...
        self.steady_end_ns: int | None = None  # ... until the first end after the last may start
        self.steady_tokens = 0  # output tokens of the requests completed within it
        self.decoded_tokens = 0.0  # output tokens decoded within it (RequestRecord.tokens_within)
        self.deadline = (time.perf_counter() + step.duration_s) if step.duration_s else None
        self.max_requests = step.requests  # what else ends it: the requests, or the sessions, started
        # a replay's sessions: its feed's (its steady state ends at the first end after the last starts)
        self.max_sessions = len(feed.sessions) if isinstance(feed, AgentFeed) else step.sessions
        self.capped_at_stop = 0  # requests load.graceful_stop's cap cancelled in flight
        self.server_gone = False  # this step stopped itself: the server stopped answering
        self.issued = count()  # the next unit's index in the feed
        self.n_requests = 0  # requests started (the request-count stop counts these)
        self.n_units = 0  # requests, or sessions, started (a sessions step's session count stops on these)
        self.active = 0  # units in flight: requests, or sessions (the steady state holds them at target)
        self.tasks: set[asyncio.Task] = set()
        self.stop_wait: asyncio.Task | None = None  # done when the step is stopped (ctx.stop_event)
        self._room: asyncio.Future | None = None  # done when a unit ends (while the loop waits for one)
        # punctual writes: an open loop's (own reader only), a coding-agent replay's (either path)
        self.punctual: PunctualWrites | None = None
        self.live: dict[int, RequestRecord] = {}  # requests in flight, by id() (their streams' progress)
        # ended this turn, their figures not yet recorded (a _record_ended is due while it holds any)
        self._ended_batch: list[RequestRecord] = []
        self.ended = 0  # requests ended
        # a request's id (its x-request-id, which a server's trace joins on): unique across runs,
        # shards and a server's life by a random prefix per step, then a count (uuid4 per
        # request cost 4 us of the step's own bookkeeping, about a tenth)
        self._id_prefix = os.urandom(8).hex() + "-"
        self._ids = count()
        self.env = SessionEnv(self.measured, self.may_continue, self.until, self._took_turn, rec.add_session,
                              open_loop=step.shape.open_loop, speedup=self.driver.speedup,
                              pace_s=self.driver.pace_s)

    # ------------------------------------------------------------------ stop rules

    def may_continue(self, at_ns: int | None = None) -> bool:
        """Another request may go (now, or at `at_ns`): no stop, no deadline, under the count."""
        if self.ctx.stop_event.is_set():
            return False
        if self.deadline is not None and \
                (at_ns / 1e9 if at_ns is not None else time.perf_counter()) >= self.deadline:
            return False
        return self.max_requests is None or self.n_requests < self.max_requests

    def may_issue(self, at_ns: int | None = None) -> bool:
        """Another unit (a request, or a session) may start (now, or at `at_ns`)."""
        return self.may_continue(at_ns) and (not self.multi_turn or self.max_sessions is None
                                             or self.n_units < self.max_sessions)

    def activity(self) -> int:
        """Grows whenever anything arrives (a stream event read, a request's end): unchanged, none did."""
        return self.ended + sum(r.parser.events for r in self.live.values() if r.parser is not None)

    # ------------------------------------------------------------------ one unit

    def _unit_started(self) -> None:
        self.active += 1
        if self.active == self.target and self.steady_start_ns is None:
            self.steady_start_ns = CLOCK()

    def _unit_ended(self, end_ns: int | None = None) -> None:
        """A unit is over; its slot is free from `end_ns` (a request's end: its last read's kernel
        stamp where there is one, so a loop late to hear of the end shows as the next send's delay)."""
        self.active -= 1
        now = CLOCK()
        self.slots.give_back(min(end_ns, now) if end_ns else now)

    async def measured(self, body: bytes, r: RequestRecord, ended: Callable[[int | None], None] | None = None,
                       cancel: dict | None = None, due_ns: int | None = None,
                       written: Callable[[], None] | None = None) -> None:
        """Send one request and record it (a single prompt, or a session's turn); `ended` is called
        first with its end (a single prompt's slot is free from then). `cancel`: load.cancel chose it.
        `due_ns`: written then, never before (a replay's think time's end, as an open loop's time):
        prepared ahead, the step's alarm wakes its write (run/punctual.py). `written`: called once
        it is written (where it went at once: once its send's first turn wrote it)."""
        ctx = self.ctx
        r.payload.request_bytes = len(body)
        if due_ns is not None and self.punctual is None:  # no alarm: due, then sent
            await wait_until(due_ns)
            due_ns = None
        write_ns = r.times.scheduled_ns if due_ns is None else due_ns
        # in flight from its write; an early request (open loop, own reader; a replay's, either
        # path) from its due time (a closure per request only for those: made for every one, it
        # cost a closed loop 1 us each)
        due: Due | None = None
        counted: list[bool] | None = None
        if self.punctual is not None and write_ns is not None and write_ns > CLOCK():
            counted = []  # [True] from its due time
            due = Due(write_ns, lambda at_ns: self.punctual.due(at_ns, written,  # type: ignore[union-attr]
                                                                 lambda: self._due(counted)))
        else:
            self.check.inflight += 1
            ctx.inflight += 1
            if written is not None:
                # the send's first turn writes it (a connection idle in the pool or connector)
                # before it yields: on aiohttp too, its body's write started eagerly
                # (request._EagerWriteRequest)
                asyncio.get_running_loop().call_soon(written)
        # a session's answers go back in its next turn (a coding-agent trace's content is the trace's)
        keep = ctx.keep_text or isinstance(self.feed, SessionFeed)
        live = self.live
        live[id(r)] = r
        try:
            if ctx.pool is not None:
                sending = send_native(ctx.pool, ctx.url, ctx.headers, body, r, ctx.target, keep, due)
            else:
                sending = send(ctx.session, ctx.url, ctx.headers, body, r, ctx.target, keep, due)
            if cancel is None:
                await sending
            else:
                await _cancelled_when(sending, r, cancel)
        except Exception as e:  # send() records every failure of the server's: this is benchc's own
            log.exception("request %s: the client failed", r.id)
            r.outcome.error, r.outcome.error_detail = CLIENT_ERROR, f"{type(e).__name__}: {e}"[:200]
            r.times.end_ns = r.times.end_ns or CLOCK()
        finally:
            if counted is None or counted:
                self.check.inflight -= 1
                ctx.inflight -= 1
            del live[id(r)]
            self._ended(r, ended)

    def _ended(self, r: RequestRecord, ended: Callable[[int | None], None] | None) -> None:
        """A request is over: what the step decides by is counted now (the stop rules, the
        streak of failed connects, its slot, the steady state); its figures are recorded with
        the turn's other ends, in one pass (_record_ended)."""
        self.ended += 1
        self.ctx.finished += 1
        if self.streak.add(r):
            self.server_gone = True  # the stop is the server's: what is in flight then is not Ctrl-C's
            self.ctx.stop_event.set()
        if ended is not None:
            ended(r.times.end_ns)
        self._steady(r)
        batch = self._ended_batch
        batch.append(r)
        if len(batch) == 1:
            _soon(self.punctual, self._record_ended)

    async def open_ahead(self, n: int) -> int:
        """Open connections until `n` are idle, for `n` requests sent together (run/punctual.py)."""
        return await open_ahead_of(self.ctx, n, self.punctual)

    def _due(self, counted: list[bool]) -> None:
        """An early request is due: from now it counts as in flight."""
        counted.append(True)
        self.check.inflight += 1
        self.ctx.inflight += 1

    def _steady(self, r: RequestRecord) -> None:
        """The steady state's end and completed tokens, as each request ends (not with the turn's
        batch: its end is the first end after the last request may start, by the clock then)."""
        if self.steady_start_ns is not None and self.steady_end_ns is None:
            if not self.may_issue():
                self.steady_end_ns = CLOCK()
            elif r.ok:
                self.steady_tokens += r.output_tokens

    def _record_ended(self, whole: bool = False) -> None:
        """Record the figures of the requests that ended since the last call, once per turn of
        the event loop, not per request: a coalesced point's turn ends a hundred or more, and the
        recorders stay in cache through the pass (79 against 92 us a request at C=256, medians
        of 15 interleaved benchmarks/run_ingest.py runs). Nothing decided during the step reads
        these figures (the stop rules and steady state are kept at each end: _ended). `whole`:
        the step's end, every one now, before its figures are taken (a later pass finds none)."""
        batch, self._ended_batch = self._ended_batch, []
        if self.punctual is None or whole:
            for r in batch:
                self._record(r)
        else:  # in passes: a write due meanwhile waits for one pass at most
            self.punctual.in_passes(batch, self._record, self._ended_batch, self._record_ended)
        if batch and self.ctx.progress is not None:
            self.ctx.progress.ended(self.rec, self.check.inflight)

    def _record(self, r: RequestRecord) -> None:
        self.figures.add(r)
        # decoded within the steady span, pro-rated: a request recorded after the span's start
        # or end was set (later in its turn) ended before it, so the start leaves none of its
        # tokens in and the end cuts none: it counts as it did when recorded at its own end
        if r.ok and self.steady_start_ns is not None:
            self.decoded_tokens += r.tokens_within(self.steady_start_ns, self.steady_end_ns)
        self.rec.add(r, self.slo_checks)

    def _one(self, i: int, scheduled_ns: int | None, ready_ns: int) -> Coroutine[Any, Any, None]:
        """A single prompt's request: its record made and its unit started now, and what sends
        it (measured(), for the caller to await: a coroutine of its own between the slot and
        measured() cost each request's every resume a frame more)."""
        feed = self.feed
        assert isinstance(feed, StepFeed)  # a single prompt's step
        req = feed.get(i)
        prompt = req.prompt
        # the groups it knows made here, their fields by position: a call of 14 keywords cost
        # about 2 us more per request (when the record was one class of 50 fields)
        queued_ns = ready_ns - scheduled_ns if scheduled_ns is not None else 0
        r = RequestRecord(self._id_prefix + str(next(self._ids)), req.index, prompt.input_tokens,
                          req.expected_output_tokens, Times(scheduled_ns, ready_ns, queued_ns),
                          CacheUse(prompt.shared_tokens, prompt.reused),
                          Payload(req.images, req.tools, req.inputs))
        r.tokens.template_input_tokens = req.template_tokens
        self._unit_started()
        cancel = _cancel_of(self.step.cancel, self.seed, req.index)
        return self.measured(req.body, r, self._unit_ended, cancel)

    async def until(self, due_ns: int) -> bool:
        assert self.stop_wait is not None  # the step runs
        return await until(due_ns, self.stop_wait)

    async def writes_first(self, by_ns: int, work_ns: int = WORK_NS) -> None:
        """Host.writes_first: none to wait for without punctual writes (run/punctual.py)."""
        if self.punctual is not None:
            await self.punctual.writes_first(by_ns, work_ns)

    def _took_turn(self) -> None:
        self.n_requests += 1

    async def session(self, j: int, scheduled_ns: int | None, ready_ns: int) -> int:
        """A session: its turns in order (run/sessions.py); returns its last turn's send time."""
        feed = self.feed
        assert isinstance(feed, SessionFeed)  # a sessions step
        index, script = feed.get(j)
        conversation = feed.conversation(script, index)
        return await self.held(run_session(self.env, conversation, index, scheduled_ns, ready_ns))

    async def held(self, unit: Awaitable[T]) -> T:
        """A unit in flight while it runs (a session; a coding-agent session, which its driver
        paces itself: run/agent_replay.py): the steady state is the span where the step's
        `target` of them were."""
        self._unit_started()
        try:
            return await unit
        finally:
            self._unit_ended()

    def issue(self) -> int:
        """Count the next unit as issued, as it is decided, and give its index."""
        self.n_requests += 1
        self.n_units += 1
        return next(self.issued)

    def unit(self, i: int, scheduled_ns: int | None, ready_ns: int) -> Coroutine[Any, Any, Any]:
        """Unit `i`: a request, or a session (the workload's unit, whatever the shape)."""
        return (self.session if self.multi_turn else self._one)(i, scheduled_ns, ready_ns)

    def start_unit(self, i: int, scheduled_ns: int | None, ready_ns: int) -> None:
        """Unit `i` in a task of its own, begun when its task first runs."""
        self.start(self._unit(i, scheduled_ns, ready_ns))

    async def _unit(self, i: int, scheduled_ns: int | None, ready_ns: int) -> None:
        await self.unit(i, scheduled_ns, ready_ns)

    def start(self, unit: Coroutine[Any, Any, Any]) -> None:
        t = asyncio.create_task(unit)
        self.tasks.add(t)
        t.add_done_callback(self._unit_done)

    def _unit_done(self, t: asyncio.Task) -> None:
        self.tasks.discard(t)
        if self._room is not None and not self._room.done():
            self._room.set_result(None)

    async def room_or_stop(self, timeout: float | None = None) -> bool:
        """Wait until a unit ends (or `timeout`); False when the step was stopped meanwhile.
        One future for every unit: waiting on each of C tasks would cost O(C) per end."""
        assert self.stop_wait is not None  # the step runs
        self._room = asyncio.get_running_loop().create_future()
        done, _ = await asyncio.wait({self._room, self.stop_wait}, return_when=asyncio.FIRST_COMPLETED,
                                     timeout=timeout)
        self._room.cancel()
        self._room = None
        return self.stop_wait not in done

    async def run(self) -> dict:
        """Drive the step; returns the client self-check and steady-state figures."""
        return await _drive(self)

    def _until_due(self) -> int | None:
        """ns until the driver's next send, which the feed's builder does not delay; None while
        none is coming."""
        now = CLOCK()
        due = self.driver.next_due_ns(now)
        return None if due is None else due - now


def _cap_s(run: StepRun) -> float | None:
    """When the requests still in flight past the duration are cancelled (load.graceful_stop,
    perf_counter seconds); None: they finish."""
    if run.deadline is None or run.step.graceful_stop_s is None:
        return None
    return run.deadline + run.step.graceful_stop_s


async def _cap_watch(run: StepRun, cap_s: float) -> None:
    """At load.graceful_stop's cap (perf_counter seconds): the requests still in flight are
    cancelled on purpose, counted as cancelled (apart, as load.cancel's), never as errors.
    No unit starts past the duration, so cancelling the units' tasks (a closed loop's slots,
    an open loop's requests, sessions) ends the step."""
    await asyncio.sleep(max(cap_s - time.perf_counter(), 0.0))
    if run.ctx.stop_event.is_set():
        return  # Ctrl-C or a dead server: their own way out (the grace, the error kinds)
    run.capped_at_stop = len(run.live)
    for r in run.live.values():
        r.outcome.cancel_planned = True  # before the cancel: the send path keeps what it read
    for t in list(run.tasks):
        t.cancel()


async def _drive(run: StepRun) -> dict:
    """Drive the step (StepRun.run); returns the client self-check and steady-state figures."""
    ctx = run.ctx
    run.check.start()
    rx = RxFigures(ctx.pool) if ctx.pool is not None else None
    if ctx.pool is not None:
        ctx.pool.take_read_delay()  # start afresh
    cpu0, wall0 = cpu_s(), time.perf_counter()
    run.stop_wait = asyncio.create_task(ctx.stop_event.wait())
    ctx.running = run
    # a coding-agent replay's requests are due at their think times' ends, on either HTTP path
    if ctx.pool is not None and run.driver.scheduled or getattr(run.driver, "punctual", False):
        run.punctual = PunctualWrites(ctx.send_priority, yielding=getattr(run.driver, "punctual", False))
    # bodies built ahead while the step runs (run/feed.py); a session's turns build their own
    ahead = (asyncio.create_task(run.feed.keep_ahead(run._until_due if run.driver.scheduled else None))
             if isinstance(run.feed, StepFeed) else None)
    cap_s = _cap_s(run)  # load.graceful_stop: those in flight past the duration cancelled then
    cap = asyncio.create_task(_cap_watch(run, cap_s)) if cap_s is not None else None
    try:
        await run.driver.drive(run)
        if run.tasks:  # those in flight: all of them, or those that end within the grace
            await asyncio.wait(set(run.tasks), timeout=ctx.grace_s if ctx.stop_event.is_set() else None)
    finally:
        if cap is not None:
            cap.cancel()
        await _wind_down(run, ahead)
    return _figures(run, time.perf_counter() - wall0, cpu_s() - cpu0, rx)


def _interrupted(run: StepRun) -> None:
    """Ctrl-C (or SIGTERM) past the grace: the requests still in flight are cancelled by
    benchc, not failed by the server, so they are counted as cancelled (apart from errors, as
    load.cancel's, with what they read) and the console tells them apart as interrupted."""
    for r in run.live.values():
        # before the cancel: the send path keeps what it read
        r.outcome.cancel_planned = r.outcome.interrupted = True


async def _wind_down(run: StepRun, ahead: asyncio.Task | None) -> None:
    """The step's end: units still in flight cancelled, its last ends recorded, the feed's
    builder, the alarm and the loop thread's priority put back."""
    tasks = run.tasks
    if run.ctx.stop_event.is_set() and not run.server_gone:
        _interrupted(run)
    for t in list(tasks):
        t.cancel()
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)
    assert run.stop_wait is not None
    run.stop_wait.cancel()
    run._record_ended(whole=True)
    if ahead is not None:
        ahead.cancel()
        await asyncio.gather(ahead, return_exceptions=True)
    if run.punctual is not None:
        run.punctual.close()
    run.ctx.running = None
    await run.check.stop()


def _figures(run: StepRun, wall: float, cpu: float, rx: RxFigures | None) -> dict:
    """The step's client run-check and steady-state figures."""
    ctx = run.ctx
    steady = {"start_ns": run.steady_start_ns, "end_ns": run.steady_end_ns,
              "tokens": run.steady_tokens, "decoded": run.decoded_tokens}
    rx_taken = rx.take() if rx is not None else None
    counted = run.figures
    out = client_summary(run.check, counted.skew, cpu, wall, steady, run.step.shape.open_loop,
                         {"late": counted.late, "capped": run.capped}, dict(counted.paths), rx_taken)
    figures = counted.sends.summary()
    rules = reuse_rules(ctx.session, ctx.pool)
    if rules is not None:
        figures["connections"].update(rules.report())
    out["client"].update(figures)
    closed = None if run.step.shape.open_loop else run.step.inflight_target
    rx_lag = rx_taken["lag"] if rx_taken is not None else None
    out["client"].update(verdict(ctx.pool, ctx.url, counted.paths, run.rec, closed, counted.sends,
                                 out["client"],
                                 rx_lag))
    if isinstance(run.feed, StepFeed):
        out["client"]["bodies_built_late"] = run.feed.built_late
    if run.punctual is not None:
        out["client"]["send_priority"] = run.punctual.priority.how
    out["stopped"] = run.streak.reason
    parts = getattr(run.driver, "parts", None)  # a coding-agent replay's sessions (run/agent_replay.py)
    if parts is not None:
        # its verdict, and what it is made of (a Ray worker's: the driver merges the workers')
        out["agent_parts"] = carried = parts()
        out["agent_replay"] = carried.report()
    out["series"] = counted.series
    # the steady span on the client's clock, where it had one (run/power.py integrates the
    # GPUs' energy over it)
    out["steady_ns"] = ((run.steady_start_ns, run.steady_end_ns)
                        if run.steady_start_ns is not None and run.steady_end_ns is not None
                        and out["steady"]["output_tok_s"] is not None else None)
    return out


async def run_step(ctx: StepContext, step: Step, feed: StepFeed | SessionFeed | AgentFeed, rec: PointRecorder,
                   slo_checks: list | None, seed: int = 0, shard: tuple[int, int] = (0, 1),
                   series_interval_s: float | None = None) -> dict:
    """Drive one load (or warm-up) step of `feed`'s requests (StepRun); with
    `series_interval_s`, the client's series per interval too (`series`)."""
    return await StepRun(ctx, step, feed, rec, slo_checks, seed, shard, series_interval_s).run()


def _schedule(step: Step, feed: Any, seed: int, shard: tuple[int, int] = (0, 1)) -> Iterator[float]:
    """An open loop's (or a replay's) arrival times, in seconds from its start, this shard's
    part of them (run/open_loop.py)."""
    driver = driver_for(step.shape)
    assert isinstance(driver, OpenLoopDriver | ReplayDriver), "a closed loop has no schedule"
    return driver.schedule(feed, seed, shard)


def _cancel_of(rule: dict | None, seed: int, index: int) -> dict | None:
    """load.cancel's rule for the step's request `index`, if it is one the seed chose (the
    same requests on every run and every shard)."""
    if rule is None or random.Random(seed * 1_000_003 + index).random() >= rule["fraction"]:
        return None
    return rule


async def _cancelled_when(sending: Coroutine[Any, Any, Any], r: RequestRecord, rule: dict) -> None:
    """Send, and close the stream when load.cancel's rule says: `after_s` after the request's
    write, or once `after_tokens` text chunks were read (checked every CANCEL_POLL_S). The
    request then ends CANCELLED with cancel_planned set (counted apart, not as an error); one
    that ended before is what it was."""
    task = asyncio.ensure_future(sending)

    async def when() -> None:
        while not r.times.t0_sent:  # the write (after any connect)
            await asyncio.sleep(CANCEL_POLL_S)
        if "after_s" in rule:
            due = r.times.t0_ns + int(rule["after_s"] * 1e9)
            while (left := due - CLOCK()) > 0:
                await asyncio.sleep(left / 1e9)
        else:
            while r.parser is None or r.parser.text_chunks < rule["after_tokens"]:
                await asyncio.sleep(CANCEL_POLL_S)

    watch = asyncio.ensure_future(when())
    try:
        done, _ = await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
        if watch in done and not task.done():
            r.outcome.cancel_planned = True  # before the cancel: the send path keeps what it read
            task.cancel()
        await asyncio.wait({task})
    finally:
        watch.cancel()
        if not task.done():  # the step itself was cancelled (Ctrl-C past the grace)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if not task.cancelled():
        task.result()  # a failure of the client's own goes where measured() catches it


