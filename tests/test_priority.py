"""An open loop's event loop thread is raised where the process is permitted, and it and the
threads started meanwhile are put back when the step ends (run/priority.py)."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from benchc.run.priority import NICE, SCHED_RR, UNCHANGED, SendPriority

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux scheduling policies")


def state(tid: int) -> tuple[int, int, int]:
    """(policy, without SCHED_RESET_ON_FORK; real-time priority; nice)"""
    return (os.sched_getscheduler(tid) & ~getattr(os, "SCHED_RESET_ON_FORK", 0),
            os.sched_getparam(tid).sched_priority, os.getpriority(os.PRIO_PROCESS, tid))


def test_the_thread_runs_raised_as_said_and_every_thread_is_put_back():
    """Whatever this process may do (root: SCHED_RR; else perhaps a nice; else nothing), what
    `how` says is what the thread runs with, and afterwards nothing is left raised, a thread
    started during the step (as the receive loop's) included: it starts ordinary under
    SCHED_RR (reset on fork), and with the raised nice under a nice."""
    me = threading.get_native_id()
    before = state(me)
    p = SendPriority()
    how = p.raise_()
    during = state(me)
    started: list[int] = []
    go = threading.Event()
    done = threading.Event()

    def worker() -> None:
        started.append(threading.get_native_id())
        go.set()
        done.wait(30)

    t = threading.Thread(target=worker)
    t.start()
    try:
        assert go.wait(30)
        inherited = state(started[0])
        if how == SCHED_RR:
            assert during[:2] == (os.SCHED_RR, 1) and inherited == before
        elif how == NICE:
            assert during[0] == os.SCHED_OTHER and during[2] == max(-20, before[2] - 10)
            assert inherited == during
        else:
            assert how == UNCHANGED and during == before
        p.restore()
        assert state(me) == before and state(started[0]) == before
        assert p.how == how  # the point still says what it ran with
    finally:
        done.set()
        t.join(30)


def test_a_thread_already_real_time_is_left_as_it_is():
    me = threading.get_native_id()
    before = state(me)
    try:
        os.sched_setscheduler(me, os.SCHED_FIFO, os.sched_param(2))
    except OSError:
        pytest.skip("this process may not take a real-time policy")
    try:
        p = SendPriority()
        assert p.raise_() == UNCHANGED and state(me)[:2] == (os.SCHED_FIFO, 2)
        p.restore()
        assert state(me)[:2] == (os.SCHED_FIFO, 2)
    finally:
        os.sched_setscheduler(me, before[0], os.sched_param(before[1]))


def test_without_leave_for_real_time_a_nice_is_tried(monkeypatch):
    """A process refused SCHED_RR (EPERM, as without CAP_SYS_NICE) falls back to a nice 10
    lower, where RLIMIT_NICE (or root) allows it, and is put back after."""
    real = os.sched_setscheduler

    def refused(tid: int, policy: int, param: os.sched_param) -> None:
        if policy & ~getattr(os, "SCHED_RESET_ON_FORK", 0) == os.SCHED_RR:
            raise PermissionError(1, "Operation not permitted")
        real(tid, policy, param)

    monkeypatch.setattr(os, "sched_setscheduler", refused)
    me = threading.get_native_id()
    before = state(me)
    p = SendPriority()
    how = p.raise_()
    try:
        assert how in (NICE, UNCHANGED)
        assert state(me) == ((before[0], before[1], max(-20, before[2] - 10)) if how == NICE else before)
    finally:
        p.restore()
    assert state(me) == before
