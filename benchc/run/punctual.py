"""A step's punctual writes: requests written at their due time, never before, to within tens
of microseconds. An open loop's on the own reader, a coding-agent replay's (its requests due
at their think times' ends) on either HTTP path. The step keeps an alarm (run/alarm.py) that
wakes each write, raises the event loop's thread where permitted (run/priority.py), and opens
the connections requests sent together need before they are due."""

from __future__ import annotations

import asyncio
import heapq
from collections import Counter
from collections.abc import Callable
from typing import Any

import aiohttp

from benchc.client.request import CLOCK, open_ahead
from benchc.run.alarm import Alarm
from benchc.run.priority import SendPriority

# A punctual write's request is issued this long before its time, takes (or opens) its
# connection and readies its request, and writes at its time (run/alarm.py wakes it)
SEND_LEAD_NS = 5_000_000
# The loop work that can wait and yields to the writes due before it would end (writes_first):
# a request readied ahead (aiohttp's preparing, 0.2-0.3 ms here), the step's bookkeeping. One
# such turn of the loop, run while a write fell due, made that write late by its length: the
# 0.5-2 ms `wake` of benchmarks/think_lateness.py's late requests.
WORK_NS = 1_000_000
# A step's ended requests' figures are recorded in passes this long at most (in_passes): the
# pure-Python core's recorders took 0.7 ms for one turn's ends of a coding-agent replay
RECORD_PASS_NS = 200_000


class PunctualWrites:
    def __init__(self, raise_loop_thread: bool, yielding: bool = False) -> None:
        """`yielding`: work that can wait yields to the writes due (writes_first, and the
        step's bookkeeping: soon_after_writes, in_passes): a coding-agent replay's, whose few
        writes are each a think time's end. Not an open loop's: at a high rate its writes come
        every few us, and its bookkeeping must keep pace with them."""
        self.alarm = Alarm()
        self.priority = SendPriority()  # woken on time on a busy machine too
        if raise_loop_thread:  # else `unchanged` (--send-priority off)
            self.priority.raise_()
        self.yielding = yielding
        self._writes: list[int] = []  # heap: the due times of the writes waiting (lazily pruned)
        self._waiting: Counter[int] = Counter()  # due time -> writes waiting for it
        self._deferred: set[asyncio.Task] = set()  # soon_after_writes's calls waiting

    async def due(self, at_ns: int, written: Callable[[], None] | None,
                  in_flight: Callable[[], None]) -> None:
        """An early request's wait for its write's time (http1.Due); from then `in_flight`
        counts it. `written` goes to the loop to call after the write (which follows this, in
        the same turn)."""
        if self.yielding:  # what yields to it knows of it
            heapq.heappush(self._writes, at_ns)
            self._waiting[at_ns] += 1
        try:
            await self.alarm.until(at_ns)
        finally:
            if self.yielding:
                self._waiting[at_ns] -= 1
                if not self._waiting[at_ns]:
                    del self._waiting[at_ns]
        if written is not None:
            asyncio.get_running_loop().call_soon(written)
        in_flight()

    def next_write(self) -> int | None:
        """The due time of the earliest write still waiting (past, where the loop is late)."""
        writes = self._writes
        while writes and writes[0] not in self._waiting:
            heapq.heappop(writes)
        return writes[0] if writes else None

    async def writes_first(self, by_ns: int, work_ns: int = WORK_NS) -> None:
        """Before work that can wait (`work_ns` of it at most): the writes due within `work_ns`
        go first, those due by `by_ns` only (the work's own deadline), so that none waits for it."""
        while (at := self.next_write()) is not None and at <= by_ns and at - CLOCK() < work_ns:
            await self.alarm.after(at)

    def soon_after_writes(self, fn: Callable[[], None]) -> None:
        """Call `fn` (bookkeeping that can wait: the figures of the requests that ended) in the
        loop's next turn, or after the writes due within WORK_NS when there are (within the
        send lead at most)."""
        at = self.next_write()  # None unless yielding
        if at is None or at - CLOCK() >= WORK_NS:
            asyncio.get_running_loop().call_soon(fn)
            return

        async def later() -> None:
            await self.writes_first(CLOCK() + SEND_LEAD_NS)
            fn()

        task = asyncio.ensure_future(later())
        self._deferred.add(task)
        task.add_done_callback(self._deferred.discard)

    def in_passes(self, batch: list, record: Callable[[Any], None], rest: list,
                  again: Callable[[], None]) -> None:
        """`record` each of `batch` for RECORD_PASS_NS at most: what is left goes back at the
        head of `rest`, and `again` (which records `rest`) after the writes due meanwhile."""
        if not self.yielding:
            for item in batch:
                record(item)
            return
        end = CLOCK() + RECORD_PASS_NS
        for k, item in enumerate(batch):
            record(item)
            if CLOCK() > end and k + 1 < len(batch):
                rest[:0] = batch[k + 1:]
                self.soon_after_writes(again)
                return

    def close(self) -> None:
        """The step's end (its pending bookkeeping done first: what soon_after_writes still
        holds is dropped): the alarm closed, the threads' priorities put back."""
        for task in list(self._deferred):
            task.cancel()
        self.alarm.close()
        self.priority.restore()


async def wait_until(due_ns: int) -> None:
    """Wait until `due_ns` (CLOCK) on the loop's millisecond timers, never waking before it
    (a step without an alarm: a punctual write waits on PunctualWrites.due)."""
    while (left := due_ns - CLOCK()) > 0:
        await asyncio.sleep(left / 1e9)


async def open_ahead_of(ctx: Any, n: int, punctual: PunctualWrites | None) -> int:
    """Open connections until `n` are idle (http1.Pool.open_ahead; on aiohttp, `n` in its
    connector: request.open_ahead), so that `n` requests sent together each find one, no
    connect delaying its write; how many were opened (0 when the connects failed: the
    requests then find out for themselves, with their error kinds)."""
    opening = (ctx.pool.open_ahead(ctx.pool.origin(ctx.url, ctx.headers), n) if ctx.pool is not None
               else open_ahead(ctx.session, ctx.url, n))
    try:
        opened = await asyncio.wait_for(opening, ctx.target.timeout_s)
    except (OSError, aiohttp.ClientError, asyncio.TimeoutError):  # noqa: UP041 - or not in time
        return 0
    rx = ctx.pool.rx_loop if ctx.pool is not None else None
    if rx is not None and punctual is not None:
        # the receive loop tells the event loop of each answer's end, from which the next
        # think time runs: an ordinary thread waited 0.1-0.7 ms in the run queue to do it
        # on the busy 2-core machine (benchmarks/think_lateness.py, end_to_loop)
        punctual.priority.raise_thread(rx.thread_id)
    return opened
