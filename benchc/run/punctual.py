"""A step's punctual writes: requests written at their due time, never before, to within tens
of microseconds. An open loop's on the own reader, a coding-agent replay's (its requests due
at their think times' ends) on either HTTP path. The step keeps an alarm (run/alarm.py) that
wakes each write, raises the event loop's thread where permitted (run/priority.py), and opens
the connections requests sent together need before they are due."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp

from benchc.client.request import CLOCK, open_ahead
from benchc.run.alarm import Alarm
from benchc.run.priority import SendPriority


class PunctualWrites:
    def __init__(self, raise_loop_thread: bool) -> None:
        self.alarm = Alarm()
        self.priority = SendPriority()  # woken on time on a busy machine too
        if raise_loop_thread:  # else `unchanged` (--send-priority off)
            self.priority.raise_()

    async def due(self, at_ns: int, written: Callable[[], None] | None,
                  in_flight: Callable[[], None]) -> None:
        """An early request's wait for its write's time (http1.Due); from then `in_flight`
        counts it. `written` goes to the loop to call after the write (which follows this, in
        the same turn)."""
        await self.alarm.until(at_ns)
        if written is not None:
            asyncio.get_running_loop().call_soon(written)
        in_flight()

    def close(self) -> None:
        """The step's end: the alarm closed, the threads' priorities put back."""
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
