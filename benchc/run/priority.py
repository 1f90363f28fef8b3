"""The event loop thread's CPU priority while an open loop's sends are due.

On a busy machine a thread woken by its alarm (run/alarm.py) waits in the kernel's run queue
until the process that holds the core yields it: 2 to 3 ms a late wake on the 2-core machine
the project shares (benchmarks/send_lateness.py), and the send is late by as much. A thread
of a real-time policy is run as soon as it wakes. So for an open-loop step the loop thread
takes SCHED_RR at the lowest real-time priority where the process is permitted (CAP_SYS_NICE,
or an RLIMIT_RTPRIO that allows it), else a nice 10 lower where permitted (RLIMIT_NICE), else
it stays as it was: benchc never asks for root, and the point's client block says which was
done (`send_priority`). The kernel's real-time throttling (sched_rt_runtime_us, 95% of each
second by default) bounds what such a thread can take from the others.

A coding-agent replay's step is raised alike (its requests go at their think times' ends),
and its receive loop's thread with it (raise_thread): that thread tells the event loop of
each answer's end, from which the next think time runs.

The real-time policy is taken with SCHED_RESET_ON_FORK: threads and processes started from
the loop thread during the step (the receive loop's thread, started with the first
connection) begin as ordinary ones. A nice is inherited; the loop thread and the threads
started meanwhile are put back as they were when the step ends.
"""

from __future__ import annotations

import contextlib
import os
import threading

SCHED_RR = "SCHED_RR 1"
NICE = "nice -10"
UNCHANGED = "unchanged"

_State = tuple[int, int, int]  # (policy, real-time priority, nice)


def _threads() -> list[int]:
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [threading.get_native_id()]


def _state(tid: int) -> _State | None:
    try:
        return os.sched_getscheduler(tid), os.sched_getparam(tid).sched_priority, \
            os.getpriority(os.PRIO_PROCESS, tid)
    except OSError:  # the thread ended
        return None


def _put(tid: int, state: _State) -> None:
    policy, priority, nice = state
    with contextlib.suppress(OSError):
        os.sched_setscheduler(tid, policy, os.sched_param(priority))
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, tid, nice)


class SendPriority:
    """raise_() on the event loop's thread when an open-loop step starts, restore() when it
    ends; `how` says what was done (SCHED_RR, NICE or UNCHANGED)."""

    def __init__(self) -> None:
        self.how = UNCHANGED
        self._tid: int | None = None
        self._before: dict[int, _State] = {}
        self._raised: set[int] = set()  # threads raise_thread raised

    def raise_(self) -> str:
        if not hasattr(os, "sched_setscheduler"):  # not Linux: nothing to ask for
            return self.how
        tid = threading.get_native_id()
        self._before = {t: s for t in _threads() if (s := _state(t)) is not None}
        mine = self._before.get(tid)
        if mine is None or mine[0] != os.SCHED_OTHER:  # already real-time (chrt), or batch: as it is
            return self.how
        self._tid = tid
        try:
            os.sched_setscheduler(tid, os.SCHED_RR | getattr(os, "SCHED_RESET_ON_FORK", 0), os.sched_param(1))
            self.how = SCHED_RR
        except OSError:  # EPERM: not permitted
            try:
                os.setpriority(os.PRIO_PROCESS, tid, max(-20, mine[2] - 10))
                self.how = NICE
            except OSError:
                pass
        return self.how

    def raise_thread(self, tid: int) -> None:
        """Raise another thread of the process as the loop thread was (a coding-agent replay's
        receive loop, whose thread tells the loop of each answer's end: the session's think
        time runs from there); restore() puts it back with the rest."""
        if self._tid is None or tid == self._tid:
            return
        self._raised.add(tid)
        with contextlib.suppress(OSError):  # the thread ended, or not permitted after all
            if self.how == SCHED_RR:
                policy = os.SCHED_RR | getattr(os, "SCHED_RESET_ON_FORK", 0)
                os.sched_setscheduler(tid, policy, os.sched_param(1))
            elif self.how == NICE:
                os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, self._tid))

    def restore(self) -> None:
        """Put the threads back (`how` still says what the step ran with)."""
        if self.how == UNCHANGED or self._tid is None:
            return
        was = self._before[self._tid]
        for tid in _threads():  # the loop thread, and those started meanwhile (inherited the raise)
            if tid == self._tid or tid not in self._before:
                _put(tid, was)
            elif tid in self._raised:  # raised by raise_thread: as it was before
                _put(tid, self._before[tid])
        self._tid = None
        self._raised.clear()
