"""Waking the event loop at a time, to within tens of microseconds: an open loop's sends are
due at scheduled nanoseconds, and the loop's own timers (uvloop's, asyncio's) round to the
millisecond. On Linux one timerfd (CLOCK_MONOTONIC, the clock of time.perf_counter_ns, which
CLOCK is) set to the earliest due time wakes the loop's poll at that time exactly; elsewhere
the loop's timers do, to their millisecond.
"""

from __future__ import annotations

import asyncio
import ctypes
import heapq
import itertools
import os
import sys
import time

CLOCK = time.perf_counter_ns
_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK_CLOEXEC = os.O_NONBLOCK | os.O_CLOEXEC  # TFD_NONBLOCK, TFD_CLOEXEC share their values
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.timerfd_create, libc.timerfd_settime  # noqa: B018 - both exist, or no timerfd
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


class Alarm:
    """`await alarm.until(due_ns)` returns at `due_ns` (CLOCK) or just after, never before.
    One per step; close() it when the step is over."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._due: list[tuple[int, int, asyncio.Future]] = []  # heap: (due_ns, order, waiter)
        self._order = itertools.count()
        self._armed: int | None = None  # the due time the timerfd is set to
        self._fd = -1
        if _LIBC is not None:
            fd = _LIBC.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK_CLOEXEC)
            if fd >= 0:
                self._fd = fd
                self._loop.add_reader(fd, self._rang)

    @property
    def precise(self) -> bool:
        """Whether a timerfd wakes the loop (else the loop's millisecond timers do)."""
        return self._fd >= 0

    async def until(self, due_ns: int) -> None:
        if self._fd < 0:
            while (left := due_ns - CLOCK()) > 0:
                await asyncio.sleep(left / 1e9)  # again: the loop's timers may fire early
            return
        if CLOCK() >= due_ns:
            return
        await self._waiter(due_ns)

    async def after(self, due_ns: int) -> None:
        """Return once the waiters due at `due_ns` woke before this one did, even when `due_ns`
        is past (until returns at once then): work that yields to a due write goes after it.
        Without a timerfd, after a turn of the loop at least."""
        if self._fd < 0:
            await asyncio.sleep(max(0.0, (due_ns - CLOCK()) / 1e9))
            return
        await self._waiter(due_ns)

    def _waiter(self, due_ns: int) -> asyncio.Future:
        """A future the alarm completes at `due_ns` (after those due sooner, or then but first)."""
        waiter = self._loop.create_future()
        heapq.heappush(self._due, (due_ns, next(self._order), waiter))
        if self._armed is None or due_ns < self._armed:
            self._arm(due_ns)
        return waiter

    def _arm(self, due_ns: int) -> None:
        self._armed = due_ns
        spec = _Itimerspec(_Timespec(0, 0), _Timespec(due_ns // 1_000_000_000, due_ns % 1_000_000_000))
        assert _LIBC is not None  # a timerfd exists
        if _LIBC.timerfd_settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")

    def _rang(self) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:
            pass
        self._armed = None
        now = CLOCK()
        while self._due and self._due[0][0] <= now:
            _, _, waiter = heapq.heappop(self._due)
            if not waiter.done():  # a waiter cancelled meanwhile is dropped
                waiter.set_result(None)
        if self._due:
            self._arm(self._due[0][0])

    def close(self) -> None:
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1
        for _, _, waiter in self._due:
            waiter.cancel()
        self._due.clear()
