"""Load generation for one step: closed loop (fixed concurrency) or open loop
(seeded arrival schedule), with stop conditions, the client self-check and
cancellation.

At a duration stop no new request starts; requests in flight are finished and
recorded (so the window can run past `duration`; the result's window says by
how much). On Ctrl-C the stop event is set: no new request starts, those in
flight get `grace_s` to finish, then are cancelled and counted as `cancelled`.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import os
import random
import resource
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import count, islice
from typing import Any

import aiohttp

from benchc.client.http1 import ASYNCIO, RX_LOOP, Due, Pool, RxFigures
from benchc.client.request import CLOCK, reuse_rules, send, send_native
from benchc.metrics.latency import Recorder, summarize
from benchc.metrics.record import CLIENT_ERROR, RequestRecord
from benchc.metrics.recorder import PointRecorder
from benchc.metrics.timeline import ClientSeries
from benchc.plan.model import Step, Target
from benchc.redact import redact_url
from benchc.run import effects
from benchc.run.alarm import Alarm
from benchc.run.console import Progress
from benchc.run.deadserver import ConnectStreak
from benchc.run.feed import StepFeed
from benchc.run.priority import SendPriority
from benchc.run.sendcheck import SendCheck, SlotLedger
from benchc.run.sessions import SessionEnv, SessionFeed, run_session, until

# The client self-check's causes (loop lag, CPU) are measured here, its effects judged in
# run/effects.py: a point is client_limited when a figure a late client can move moved.
LATE_SEND_US = 1_000  # open loop: a send this much after its scheduled time is counted late
# The self-check's ticker: every TICK_S where the event loop dates the reads (aiohttp, https),
# so that its lag, which moves those requests' latencies, is sampled finely; every
# TICK_STAMPED_S where the kernel stamps them (the own reader on plain http), where the lag
# moves no latency and is a cause only. A tick on a loop that has nothing else to do is a
# wakeup of its own, about 50-80 us of CPU on the project's VM: at 5 ms it was the most of
# what `benchc run` spent beside the component benchmark per-token (benchmarks/run_ingest.py).
TICK_S = 0.005
TICK_STAMPED_S = 0.020
# open loop on the own reader: a request is issued this long before its time, takes (or opens)
# its connection and readies its request, and writes at its time (run/alarm.py wakes it)
SEND_LEAD_NS = 5_000_000
CANCEL_POLL_S = 0.002  # load.cancel after_tokens: a cancelled request's text chunks are checked this often

log = logging.getLogger(__name__)


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


class _SelfCheck:
    """Samples event-loop lag and the in-flight count while a point runs (into `series` too,
    per interval, when the point keeps one).

    A tick is a bare timer callback, not a task sleeping: on a mostly idle loop (a per-token
    stream read by the receive loop) each tick is a wakeup of its own, and a task's sleep
    (future, task step) cost about twice the callback's CPU per wakeup (benchmarks/run_ingest.py)."""

    def __init__(self, series: ClientSeries | None = None, tick_s: float = TICK_S) -> None:
        self.tick_s = tick_s
        self.lag = Recorder()
        self.late_ticks = 0  # ticks later than effects.LOOP_LAG_P99_US
        self.inflight_samples = 0
        self.inflight_sum = 0
        self.inflight = 0
        self.series = series
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0  # perf_counter seconds the next tick is due at

    def _tick(self) -> None:
        lag_us = max(0.0, (time.perf_counter() - self._due) * 1e6)
        self.lag.record_us(lag_us)
        if lag_us > effects.LOOP_LAG_P99_US:
            self.late_ticks += 1
        self.inflight_samples += 1
        self.inflight_sum += self.inflight
        if self.series is not None:
            self.series.sample_inflight(CLOCK(), self.inflight)
        self._schedule()

    def _schedule(self) -> None:
        self._due = time.perf_counter() + self.tick_s
        self._handle = asyncio.get_running_loop().call_later(self.tick_s, self._tick)

    def start(self) -> None:
        self._schedule()

    async def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def arrival_times(step: Step, n: int, seed: int) -> list[float]:
    """Seconds from the point's start of the first `n` arrivals of an open-loop step."""
    rng = random.Random(seed)
    rate = step.rate_rps
    assert rate is not None  # an open-loop step has one
    t, out = 0.0, []
    for _ in range(n):
        if step.arrival == "constant":
            gap = 1.0 / rate
        elif step.arrival == "gamma":
            shape = step.burstiness or 1.0
            gap = rng.gammavariate(shape, 1.0 / (rate * shape))
        else:
            gap = rng.expovariate(rate)
        t += gap
        out.append(t)
    return out


class StepRun:
    """One load (or warm-up) step being driven: its counters are attributes, its loop is
    closed (`concurrency`), user-centric (`users`) or open (a schedule)."""

    def __init__(self, ctx: StepContext, step: Step, feed: StepFeed | SessionFeed, rec: PointRecorder,
                 slo_checks: list | None, seed: int = 0, shard: tuple[int, int] = (0, 1),
                 series_interval_s: float | None = None):
        self.ctx, self.step, self.feed, self.rec, self.slo_checks = ctx, step, feed, rec, slo_checks
        self.seed, self.shard = seed, shard
        self.multi_turn = isinstance(feed, SessionFeed)
        self.target = step.inflight_target  # units held in flight (plan/model.Step)
        # in flight and sends per interval (metrics/timeline.py), beside the server's /metrics samples
        self.series = (ClientSeries(int(series_interval_s * 1e9), CLOCK())
                       if series_interval_s else None)
        self.check = _SelfCheck(self.series, TICK_STAMPED_S if self._kernel_stamped() else TICK_S)
        self.skew = Recorder()  # schedule -> first write, open loop
        self.sends = SendCheck()
        # a server that stopped answering, or does not serve the API, stops the point (run/deadserver.py)
        self.streak = ConnectStreak(self.target, ctx.target.api, redact_url(ctx.url))
        self.slots = SlotLedger(step.concurrency or step.max_concurrency or None)
        self.late = 0  # open loop: sends LATE_SEND_US or more after their time
        self.capped = 0  # open loop: arrivals held at max_concurrency
        self.paths: Counter = Counter()  # requests by the transport that read them (RequestRecord.path)
        self.steady_start_ns: int | None = None  # the steady state: all `target` units in flight ...
        self.steady_end_ns: int | None = None  # ... until the first end after the last may start
        self.steady_tokens = 0  # output tokens of the requests completed within it
        self.decoded_tokens = 0.0  # output tokens decoded within it (RequestRecord.tokens_within)
        self.deadline = (time.perf_counter() + step.duration_s) if step.duration_s else None
        self.capped_at_stop = 0  # requests load.graceful_stop's cap cancelled in flight
        self.issued = count()  # the next unit's index in the feed
        self.n_requests = 0  # requests started (the request-count stop counts these)
        self.n_units = 0  # requests, or sessions, started (a sessions step's session count stops on these)
        self.active = 0  # units in flight: requests, or sessions (the steady state holds them at target)
        self.tasks: set[asyncio.Task] = set()
        self.stop_wait: asyncio.Task | None = None  # done when the step is stopped (ctx.stop_event)
        self._room: asyncio.Future | None = None  # done when a unit ends (while the loop waits for one)
        self.alarm: Alarm | None = None  # the open loop's punctual writes (own reader only)
        # the open loop's sends to come, which the feed's builder leaves their turn (_until_due):
        # its next issue, and the writes of requests issued ahead (a heap of their due times)
        self._next_issue_ns: int | None = None
        self._writes: list[int] = []
        self.live: dict[int, RequestRecord] = {}  # requests in flight, by id() (their streams' progress)
        # ended this turn, their figures not yet recorded (a _record_ended is due while it holds any)
        self._ended_batch: list[RequestRecord] = []
        self.ended = 0  # requests ended
        # a request's id (its x-request-id, which a server's trace joins on): unique across runs,
        # shards and a server's life by a random prefix per step, then a count (uuid4 per
        # request cost 4 us of the step's own bookkeeping, about a tenth)
        self._id_prefix = os.urandom(8).hex() + "-"
        self._ids = count()
        self.env = SessionEnv(self.measured, self.may_continue, self._until, self._took_turn, rec.add_session,
                              open_loop=not step.concurrency, speedup=step.speedup or 1.0,
                              pace_s=step.turn_interval_s)

    # ------------------------------------------------------------------ stop rules

    def may_continue(self, at_ns: int | None = None) -> bool:
        """Another request may go (now, or at `at_ns`): no stop, no deadline, under the count."""
        if self.ctx.stop_event.is_set():
            return False
        if self.deadline is not None and \
                (at_ns / 1e9 if at_ns is not None else time.perf_counter()) >= self.deadline:
            return False
        return self.step.requests is None or self.n_requests < self.step.requests

    def _cap_s(self) -> float | None:
        """When the requests still in flight past the duration are cancelled (load.graceful_stop,
        perf_counter seconds); None: they finish."""
        if self.deadline is None or self.step.graceful_stop_s is None:
            return None
        return self.deadline + self.step.graceful_stop_s

    async def _cap_watch(self, cap_s: float) -> None:
        """At load.graceful_stop's cap (perf_counter seconds): the requests still in flight are
        cancelled on purpose, counted as cancelled (apart, as load.cancel's), never as errors.
        No unit starts past the duration, so cancelling the units' tasks (a closed loop's slots,
        an open loop's requests, sessions) ends the step."""
        await asyncio.sleep(max(cap_s - time.perf_counter(), 0.0))
        if self.ctx.stop_event.is_set():
            return  # Ctrl-C or a dead server: their own way out (the grace, the error kinds)
        self.capped_at_stop = len(self.live)
        for r in self.live.values():
            r.cancel_planned = True  # before the cancel: the send path keeps what it read
        for t in list(self.tasks):
            t.cancel()

    def may_issue(self, at_ns: int | None = None) -> bool:
        """Another unit (a request, or a session) may start (now, or at `at_ns`)."""
        return self.may_continue(at_ns) and (not self.multi_turn or self.step.sessions is None
                                             or self.n_units < self.step.sessions)

    def activity(self) -> int:
        """A count that grows whenever anything arrives: each stream event read (on every path:
        the parsers count them) and each request's end. Unchanged: the server sent nothing."""
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
                       cancel: dict | None = None) -> None:
        """Send one request and record it (a single prompt, or a session's turn); `ended` is
        called first with its end when it is over (a single prompt's slot is free from then).
        `cancel`: load.cancel chose it (its stream is closed when the rule says)."""
        ctx = self.ctx
        r.request_bytes = len(body)
        # in flight from its write; an early request (open loop, own reader) from its due time
        # (a closure per request only for those: made for every request it cost the closed
        # loop a microsecond a request)
        due: Due | None = None
        counted: list[bool] | None = None
        if self.alarm is not None and r.scheduled_ns is not None and r.scheduled_ns > CLOCK():
            counted = []  # [True] from its due time
            due = Due(r.scheduled_ns, lambda at_ns: self._due(at_ns, counted))
        else:
            self.check.inflight += 1
            ctx.inflight += 1
        keep = ctx.keep_text or self.multi_turn  # a session's answers go back in its next turn
        live = self.live
        live[id(r)] = r
        try:
            if ctx.pool is not None:
                sending = send_native(ctx.pool, ctx.url, ctx.headers, body, r, ctx.target, keep, due)
            else:
                sending = send(ctx.session, ctx.url, ctx.headers, body, r, ctx.target, keep)
            if cancel is None:
                await sending
            else:
                await _cancelled_when(sending, r, cancel)
        except Exception as e:  # send() records every failure of the server's: this is benchc's own
            log.exception("request %s: the client failed", r.id)
            r.error, r.error_detail = CLIENT_ERROR, f"{type(e).__name__}: {e}"[:200]
            r.end_ns = r.end_ns or CLOCK()
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
            self.ctx.stop_event.set()
        if ended is not None:
            ended(r.end_ns)
        self._steady(r)
        batch = self._ended_batch
        batch.append(r)
        if len(batch) == 1:
            asyncio.get_running_loop().call_soon(self._record_ended)

    async def _due(self, at_ns: int, counted: list[bool]) -> None:
        """An early request's wait for its write's time; from then it counts as in flight."""
        assert self.alarm is not None  # an open loop on the own reader
        await self.alarm.until(at_ns)
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

    def _record_ended(self) -> None:
        """Record the figures of the requests that ended since the last call: called once per
        turn of the event loop (and once more at the step's end), not once per request. In a
        coalesced point a turn ends a hundred or more requests, and the recorders' histograms,
        the send check's and the code that fills them stay in cache through the pass, where
        interleaved with each request's send they were evicted every time: the event loop spent
        about 13 us a request less, 79 against 92 at C=256 (medians of 15 interleaved runs of
        benchmarks/run_ingest.py's coalesced point). Nothing decided during the step
        reads these figures (the stop rules and the steady state are kept as each request
        ends: StepRun._ended); the live progress reads them a turn later."""
        batch, self._ended_batch = self._ended_batch, []
        for r in batch:
            self._record(r)
        if batch and self.ctx.progress is not None:
            self.ctx.progress.ended(self.rec, self.check.inflight)

    def _record_pending(self) -> None:
        """The step's end: the ends whose turn's pass has not run yet are recorded now, before
        the step's figures are taken (and the pass, when its turn comes, finds nothing)."""
        if self._ended_batch:
            self._record_ended()

    def _record(self, r: RequestRecord) -> None:
        self.sends.add(r)
        series = self.series
        if series is not None:
            if r.first_sent_ns is not None:
                series.sent(r.first_sent_ns)
            if r.scheduled_ns is not None:
                series.scheduled(r.scheduled_ns)
        if r.path is not None:
            self.paths[r.path] += 1
        # the first attempt's write (a keep-alive retry's own is later, and a request that
        # never connected has none): as the self-check's send delay (sendcheck) counts it
        if r.scheduled_ns is not None and r.first_sent_ns is not None:
            self.skew.record_ns(max(0, r.first_sent_ns - r.scheduled_ns))
            if r.first_sent_ns - r.scheduled_ns >= LATE_SEND_US * 1000:
                self.late += 1
        # decoded within the steady span, pro-rated: a request recorded after the span's start
        # or end was set (later in its turn) ended before it, so the start leaves none of its
        # tokens in and the end cuts none: it counts as it did when recorded at its own end
        if r.ok and self.steady_start_ns is not None:
            self.decoded_tokens += r.tokens_within(self.steady_start_ns, self.steady_end_ns)
        self.rec.add(r, self.slo_checks)

    def _cancel_of(self, index: int) -> dict | None:
        """load.cancel's rule for the step's request `index`, if it is one the seed chose (the
        same requests on every run and every shard)."""
        rule = self.step.cancel
        if rule is None or random.Random(self.seed * 1_000_003 + index).random() >= rule["fraction"]:
            return None
        return rule

    def _one(self, i: int, scheduled_ns: int | None, ready_ns: int) -> Coroutine[Any, Any, None]:
        """A single prompt's request: its record made and its unit started now, and what sends
        it (measured(), for the caller to await: a coroutine of its own between the slot and
        measured() cost each request's every resume a frame more)."""
        feed = self.feed
        assert isinstance(feed, StepFeed)  # a single prompt's step
        req = feed.get(i)
        prompt = req.prompt
        # the leading fields by position, the rest set after: a call of 14 keywords cost about
        # 2 us more per request (the record has 50 fields)
        r = RequestRecord(self._id_prefix + str(next(self._ids)), req.index, prompt.input_tokens,
                          req.expected_output_tokens, scheduled_ns)
        r.ready_ns = ready_ns
        if scheduled_ns is not None:
            r.queued_ns = ready_ns - scheduled_ns
        r.shared_tokens, r.reused = prompt.shared_tokens, prompt.reused
        r.template_input_tokens, r.images = req.template_tokens, req.images
        r.tools, r.inputs = req.tools, req.inputs
        self._unit_started()
        return self.measured(req.body, r, self._unit_ended, self._cancel_of(req.index))

    async def _until(self, due_ns: int) -> bool:
        assert self.stop_wait is not None  # the step runs
        return await until(due_ns, self.stop_wait)

    def _took_turn(self) -> None:
        self.n_requests += 1

    async def _session(self, j: int, scheduled_ns: int | None, ready_ns: int) -> int:
        """A session: its turns in order (run/sessions.py); returns its last turn's send time."""
        feed = self.feed
        assert isinstance(feed, SessionFeed)  # a sessions step
        index, script = feed.get(j)
        self._unit_started()
        try:
            return await run_session(self.env, feed.conversation(script, index), index, scheduled_ns,
                                     ready_ns)
        finally:
            self._unit_ended()

    def _spawn(self, scheduled_ns: int) -> None:
        """An open loop's unit, in a task of its own."""
        i = self._issue()
        self._start(self._unit(i, scheduled_ns, self.slots.take(scheduled_ns, CLOCK())))

    async def _unit(self, i: int, scheduled_ns: int | None, ready_ns: int) -> None:
        """One unit (a request, or a session), started when its task first runs."""
        await (self._session if self.multi_turn else self._one)(i, scheduled_ns, ready_ns)

    def _start(self, unit: Coroutine[Any, Any, Any]) -> None:
        t = asyncio.create_task(unit)
        self.tasks.add(t)
        t.add_done_callback(self._unit_done)

    def _unit_done(self, t: asyncio.Task) -> None:
        self.tasks.discard(t)
        if self._room is not None and not self._room.done():
            self._room.set_result(None)

    async def _room_or_stop(self, timeout: float | None = None) -> bool:
        """Wait until a unit ends (or `timeout`); False when the step was stopped meanwhile.
        One future for every unit: waiting on each of C tasks would cost O(C) per end."""
        assert self.stop_wait is not None  # the step runs
        self._room = asyncio.get_running_loop().create_future()
        done, _ = await asyncio.wait({self._room, self.stop_wait}, return_when=asyncio.FIRST_COMPLETED,
                                     timeout=timeout)
        self._room.cancel()
        self._room = None
        return self.stop_wait not in done

    # ------------------------------------------------------------------ the step

    async def run(self) -> dict:
        """Drive the step; returns the client self-check and steady-state figures."""
        ctx, step = self.ctx, self.step
        self.check.start()
        rx = RxFigures(ctx.pool) if ctx.pool is not None else None
        if ctx.pool is not None:
            ctx.pool.take_read_delay()  # start afresh
        cpu0, wall0 = _cpu_s(), time.perf_counter()
        stop_wait = self.stop_wait = asyncio.create_task(ctx.stop_event.wait())
        ctx.running = self
        priority = None
        if ctx.pool is not None and not step.concurrency and not step.users:
            self.alarm = Alarm()
            priority = SendPriority()  # woken on time on a busy machine too (run/priority.py)
            if ctx.send_priority:  # else `unchanged` (--send-priority off)
                priority.raise_()
        tasks = self.tasks
        # bodies built ahead while the step runs (run/feed.py); a session's turns build their own
        ahead = (asyncio.create_task(self.feed.keep_ahead(None if step.concurrency else self._until_due))
                 if isinstance(self.feed, StepFeed) else None)
        cap_s = self._cap_s()
        cap = asyncio.create_task(self._cap_watch(cap_s)) if cap_s is not None else None
        try:
            if step.concurrency:
                await self._closed_loop()
            elif step.users:
                self._users()
                await asyncio.wait(set(tasks) | {stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            else:
                await self._open_loop(_schedule(step, self.feed, self.seed, self.shard))
            if tasks:
                if ctx.stop_event.is_set():
                    await asyncio.wait(set(tasks), timeout=ctx.grace_s)
                else:
                    await asyncio.wait(set(tasks))
        finally:
            if cap is not None:
                cap.cancel()
            for t in list(tasks):
                t.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            stop_wait.cancel()
            self._record_pending()
            if ahead is not None:
                ahead.cancel()
                await asyncio.gather(ahead, return_exceptions=True)
            if self.alarm is not None:
                self.alarm.close()
            if priority is not None:
                priority.restore()
            ctx.running = None
            await self.check.stop()
        wall = time.perf_counter() - wall0
        cpu = _cpu_s() - cpu0
        steady = {"start_ns": self.steady_start_ns, "end_ns": self.steady_end_ns,
                  "tokens": self.steady_tokens, "decoded": self.decoded_tokens}
        rx_taken = rx.take() if rx is not None else None
        out = _client_summary(self.check, self.skew, cpu, wall, steady, step,
                              {"late": self.late, "capped": self.capped}, dict(self.paths), rx_taken)
        figures = self.sends.summary()
        rules = reuse_rules(ctx.session, ctx.pool)
        if rules is not None:
            figures["connections"].update(rules.report())
        out["client"].update(figures)
        out["client"].update(self._effects(out["client"], rx_taken["lag"] if rx_taken is not None else None))
        if isinstance(self.feed, StepFeed):
            out["client"]["bodies_built_late"] = self.feed.built_late
        if priority is not None:
            out["client"]["send_priority"] = priority.how
        out["stopped"] = self.streak.reason
        out["series"] = self.series
        # the steady span on the client's clock, where it had one (run/power.py integrates the
        # GPUs' energy over it)
        out["steady_ns"] = ((self.steady_start_ns, self.steady_end_ns)
                            if self.steady_start_ns is not None and self.steady_end_ns is not None
                            and out["steady"]["output_tok_s"] is not None else None)
        return out

    def _kernel_stamped(self) -> bool:
        """Whether the kernel stamps every read of the step (the own reader on plain http: the
        receive loop's reads and the event loop's own), so that a late event loop dates none."""
        pool = self.ctx.pool
        return pool is not None and pool.kernel_stamps and not self.ctx.url.startswith("https:")

    def _effects(self, client: dict, rx_lag: Any) -> dict:
        """The self-check's verdict by effect (run/effects.py): `effects`, `client_limited`,
        `reasons` (what moved, by how much), and a note when the client ran late to no effect."""
        pool = self.ctx.pool
        kernel = self.paths[RX_LOOP] + (self.paths[ASYNCIO] if self._kernel_stamped() else 0)
        # reads the kernel stamped: the receive loop's, and the event loop's own (client/http1.py)
        reads = pool.take_read_delay() if pool is not None else Recorder()
        if rx_lag is not None:
            reads.hist.merge(rx_lag)
        late_reads = sum(n for us, n in reads.hist.nonzero() if us > effects.LOOP_LAG_P99_US)
        delay = reads.summary()
        gaps = self.rec.itl.hist
        # a gap of 0 ns (recorded as the histogram's 1 us floor): two chunks of one read
        same_read = sum(n for us, n in gaps.nonzero() if us <= 1)
        merged = same_read / gaps.total_count if gaps.total_count else None
        closed = self.step.concurrency is not None
        found = {
            "offered_load": effects.offered_load(closed, self.sends.effect_inputs(), self.step.concurrency),
            "latencies": effects.latencies(
                {"kernel": kernel, "loop": sum(self.paths.values()) - kernel}, client["loop_lag_us"],
                client["late_ticks"], {k: delay[k] for k in ("count", "p50", "p99", "max") if k in delay}
                if delay.get("count") else None, late_reads, merged),
            "client_resources": effects.client_resources(self.sends.exhausted),
        }
        out: dict = {"effects": found, "reasons": effects.reasons(found)}
        out["client_limited"] = bool(out["reasons"])
        seen = effects.causes(client["loop_lag_us"], client["late_ticks"], client["loop_cpu_fraction"],
                              client.get("rx_loop"))
        if seen:
            out["causes"] = seen
        if (note := effects.note(found, seen)) is not None:
            out["self_check_note"] = note
        return out

    async def _closed_loop(self) -> None:
        """C slots, each a task that sends its units one after another (a request, or a
        session): one new unit per finished one, started in the finished one's own turn of
        the loop. A task per request, woken through the step's loop, cost several
        microseconds a request more (benchmarks/run_ingest.py, coalesced)."""
        c, tasks = self.step.concurrency, self.tasks
        assert c is not None
        ramp = self.step.ramp_up_s / c if self.step.ramp_up_s and c > 1 else 0.0
        for k in range(c):
            if not self.may_issue():
                break
            self._start(self._slot(self._issue()))
            if ramp and k < c - 1:
                await asyncio.sleep(ramp)
        while tasks:  # until every slot is done (the stop rules ended it), or the step is stopped
            if not await self._room_or_stop():
                return

    def _issue(self) -> int:
        """Count the next unit as issued, as it is decided (for a closed loop's slot, not when
        its task first runs: C slots started together would each pass may_issue() on the same
        count, and a step of fewer requests than slots sent one per slot), and give its index."""
        self.n_requests += 1
        self.n_units += 1
        return next(self.issued)

    async def _slot(self, first: int) -> None:
        """One of a closed loop's slots: its units in turn while the stop rules let another go."""
        unit = self._session if self.multi_turn else self._one
        i = first
        while True:
            await unit(i, None, self.slots.take(None, CLOCK()))
            if not self.may_issue():
                return
            i = self._issue()

    def _users(self) -> None:
        """Start a user-centric step's users, spread evenly over one turn interval, so that the
        turns arrive at users / turn_interval from the start (AIPerf staggers its users likewise;
        benchc's all start at their sessions' first turn)."""
        step = self.step
        assert step.users is not None and step.turn_interval_s is not None  # a user-centric step
        start = CLOCK()
        gap = int(step.turn_interval_s * 1e9) // step.users
        for u in range(step.users):
            self._start(self._user(start + u * gap))

    async def _user(self, start_ns: int) -> None:
        """One user of a user-centric step: sessions back to back, each turn at the pace."""
        due = start_ns
        pace_s = self.step.turn_interval_s
        assert pace_s is not None  # a user-centric step has its pace
        while await self._until(due) and self.may_issue():
            self.n_requests += 1
            self.n_units += 1
            last_send = await self._session(next(self.issued), due, max(due, CLOCK()))
            due = last_send + int(pace_s * 1e9)

    def _until_due(self) -> int | None:
        """ns until the open loop's next send (its next issue, or the write of a request issued
        ahead), which the feed's builder does not delay; None while none is coming."""
        now = CLOCK()
        writes = self._drop_writes(now)  # written, or due and woken by now
        due = self._next_issue_ns
        if writes and (due is None or writes[0] < due):
            due = writes[0]
        return None if due is None else due - now

    def _drop_writes(self, until_ns: int) -> list[int]:
        """The early writes' heap, without those due by `until_ns`."""
        writes = self._writes
        while writes and writes[0] <= until_ns:
            heapq.heappop(writes)
        return writes

    async def _open_loop(self, schedule: Iterable[float]) -> None:
        """Each request at its scheduled time, whatever the schedule: the client never waits
        for a response before sending the next, only for the step's max_concurrency. On the
        own reader a request is issued SEND_LEAD_NS early and writes at its time (measured);
        on aiohttp, which opens its connections itself, it is issued at its time."""
        lead_ns = SEND_LEAD_NS if self.alarm is not None else 0
        start_ns = CLOCK() + lead_ns
        try:
            await self._open_loop_sends(schedule, start_ns, lead_ns)
        finally:
            self._next_issue_ns = None

    async def _open_loop_sends(self, schedule: Iterable[float], start_ns: int, lead_ns: int) -> None:
        """The open loop's issues, each telling the feed's builder when the next is due."""
        tasks, stop_wait, cap = self.tasks, self.stop_wait, self.step.max_concurrency
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
            if not self.may_issue(max(scheduled_ns, CLOCK())):
                return
            if cap and len(tasks) >= cap:
                self.capped += 1
                self._next_issue_ns = None  # not due until a unit ends: the builder may go on
            while cap and len(tasks) >= cap:
                # At the cap: this arrival waits (it is late, and its schedule latency shows it).
                if not await self._room_or_stop():
                    return
            if not self.may_issue(max(scheduled_ns, CLOCK())):  # the time ran out while it waited
                return
            self._spawn(scheduled_ns)
            if lead_ns:  # its write is due at its time (the heap's past ones go as it grows)
                heapq.heappush(self._drop_writes(scheduled_ns - lead_ns), scheduled_ns)


async def run_step(ctx: StepContext, step: Step, feed: StepFeed | SessionFeed, rec: PointRecorder,
                   slo_checks: list | None, seed: int = 0, shard: tuple[int, int] = (0, 1),
                   series_interval_s: float | None = None) -> dict:
    """Drive one load (or warm-up) step of `feed`'s requests (StepRun); with
    `series_interval_s`, the client's series per interval too (`series`)."""
    return await StepRun(ctx, step, feed, rec, slo_checks, seed, shard, series_interval_s).run()


async def _cancelled_when(sending: Coroutine[Any, Any, Any], r: RequestRecord, rule: dict) -> None:
    """Send, and close the stream when load.cancel's rule says: `after_s` after the request's
    write, or once `after_tokens` text chunks were read (checked every CANCEL_POLL_S). The
    request then ends CANCELLED with cancel_planned set (counted apart, not as an error); one
    that ended before is what it was."""
    task = asyncio.ensure_future(sending)

    async def when() -> None:
        while not r.t0_sent:  # the write (after any connect)
            await asyncio.sleep(CANCEL_POLL_S)
        if "after_s" in rule:
            due = r.t0_ns + int(rule["after_s"] * 1e9)
            while (left := due - CLOCK()) > 0:
                await asyncio.sleep(left / 1e9)
        else:
            while r.parser is None or r.parser.text_chunks < rule["after_tokens"]:
                await asyncio.sleep(CANCEL_POLL_S)

    watch = asyncio.ensure_future(when())
    try:
        done, _ = await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
        if watch in done and not task.done():
            r.cancel_planned = True  # before the cancel: the send path keeps what it read
            task.cancel()
        await asyncio.wait({task})
    finally:
        watch.cancel()
        if not task.done():  # the step itself was cancelled (Ctrl-C past the grace)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if not task.cancelled():
        task.result()  # a failure of the client's own goes where measured() catches it


def _schedule(step: Step, feed, seed: int, shard: tuple[int, int] = (0, 1)) -> Iterator[float]:
    """The open-loop step's arrival times, in seconds from its start: the trace's own (the
    feed's prompts set them) or the plan's seeded arrival process. A shard (distributed runs)
    takes every count-th arrival, so the shards' union is exactly the plan's schedule."""
    index, count = shard
    times = feed.arrivals() if feed is not None else None
    if times is None:
        # a sessions step's arrivals are its sessions' (its requests, the turns, are at least as
        # many); else a rate and a request count or a duration: the compiler saw to it
        n = step.sessions or step.requests or int((step.rate_rps or 0.0) * (step.duration_s or 0.0) * 2 + 16)
        times = arrival_times(step, n, seed)
    return islice(times, index, None, count)


def _client_summary(check: _SelfCheck, skew: Recorder, cpu_s: float, wall_s: float, steady: dict,
                    step: Step, sends: dict | None = None, transport: dict | None = None,
                    rx: dict | None = None) -> dict:
    lag = check.lag.summary()
    cpu_fraction = cpu_s / wall_s if wall_s > 0 else 0.0
    # the event loop's thread: the process less the receive loop's thread, where one read
    loop_cpu_fraction = (cpu_s - rx["cpu_s"]) / wall_s if rx is not None and wall_s > 0 else cpu_fraction
    sk = skew.summary()  # schedule -> send: the cap's queueing and the client's delay together
    rx_block = _rx_check(rx, wall_s) if rx is not None else None
    steady_s = ((steady["end_ns"] or 0) - (steady["start_ns"] or 0)) / 1e9 if steady["end_ns"] else 0.0
    mean_inflight = check.inflight_sum / check.inflight_samples if check.inflight_samples else 0.0
    client = {
        "loop_lag_us": {k: lag[k] for k in ("count", "mean", "p50", "p99", "max") if k in lag},
        "late_ticks": check.late_ticks,
        "cpu_s": round(cpu_s, 4), "wall_s": round(wall_s, 4), "cpu_fraction": round(cpu_fraction, 4),
        "loop_cpu_fraction": round(loop_cpu_fraction, 4),
        "send_skew_us": {k: sk[k] for k in ("count", "mean", "p50", "p99", "max") if k in sk},
        **({"late_sends": sends["late"], "capped_sends": sends["capped"]}
           if sends is not None and step.concurrency is None else {}),
        "client_limited": False, "reasons": [],  # judged by effect (StepRun._effects)
    }
    if transport:
        client["transport"] = transport
    if rx_block is not None:
        client["rx_loop"] = rx_block
    return {
        "client": client,
        "steady": {"duration_s": round(steady_s, 6), "output_tokens": steady["tokens"],
                   "decoded_tokens": round(steady["decoded"], 3),
                   "output_tok_s": round(steady["tokens"] / steady_s, 3) if steady_s > 0.05 else None},
        "mean_inflight_sampled": round(mean_inflight, 3),
    }


def _rx_check(rx: dict, wall_s: float) -> dict:
    """What the receive loop cost: its lag (a read's kernel stamp to the loop's read of it) and
    its thread's CPU."""
    lag = summarize(rx["lag"])
    late = sum(count for us, count in rx["lag"].nonzero() if us > effects.LOOP_LAG_P99_US)
    fraction = rx["cpu_s"] / wall_s if wall_s > 0 else 0.0
    return {"lag_us": {k: lag[k] for k in ("count", "mean", "p50", "p99", "max") if k in lag},
            "late_reads": late, "reads": rx["reads"], "bytes": rx["bytes"],
            "cpu_s": round(rx["cpu_s"], 4), "cpu_fraction": round(fraction, 4)}
