"""Open-loop sends on time (run/alarm.py, http1.exchange's `due`): a request is issued ahead
of its time, takes or opens its connection, and writes at its time -- never before it."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from benchc.run.alarm import CLOCK, Alarm
from tests.conftest import transports, use_transport
from tests.simrun import requests_of, run_on_sim


def test_the_alarm_wakes_every_waiter_and_never_before_its_time():
    woke: list[tuple[int, int]] = []  # (due, when it woke)

    async def drive() -> bool:
        alarm = Alarm()
        try:
            start = CLOCK()
            dues = [start + k * 300_000 for k in (7, 1, 4, 2, 9, 3)]

            async def wait(due: int) -> None:
                await alarm.until(due)
                woke.append((due, CLOCK()))

            cancelled = asyncio.create_task(alarm.until(start + 500_000))
            waiters = [asyncio.create_task(wait(d)) for d in dues]
            await asyncio.sleep(0)
            cancelled.cancel()  # a waiter gone meanwhile wakes nobody and stops nobody
            await asyncio.gather(*waiters)
            await alarm.until(start)  # a time gone by: at once
            return alarm.precise
        finally:
            alarm.close()

    asyncio.run(drive())
    # every waiter woke (the timer re-armed for the next one each time), none before its time;
    # their order is not asserted: on a busy machine a waiter may start after its time went by
    assert len(woke) == 6 and all(at >= due for due, at in woke)


@pytest.mark.slow  # end-to-end runs
@pytest.mark.parametrize("transport", transports())
def test_open_loop_requests_open_their_connections_ahead_and_write_on_time(tmp_path, monkeypatch, transport):
    """A constant-rate point on the simulator, on each of the own reader's transports: every
    request reaches the server at or after its scheduled time (the simulator's trace), its
    write is its t0, and its send skew is counted for every request sent."""
    use_transport(monkeypatch, transport)
    doc, trace = run_on_sim(tmp_path, sweep="    rate: [200/s]\n    arrival: constant", out=4,
                            extra="  requests: 40")
    (p,) = doc["points"]
    records = requests_of(tmp_path)
    assert p["counts"]["completed"] == 40, p["counts"]["error_examples"]
    assert p["client"]["send_skew_us"]["count"] == 40
    assert p["client"]["connections"]["new"] >= 1
    for r in records:
        assert r["t0_ns"] >= r["scheduled_ns"]  # never before its time
        assert trace[r["id"]]["arrival_ns"] >= r["scheduled_ns"]


@pytest.mark.slow  # an end-to-end run
@pytest.mark.parametrize("choice", ["raise", "off"])
def test_send_priority_says_what_the_open_loop_thread_ran_at(tmp_path, choice):
    """--send-priority off leaves the loop thread as it is (run/priority.py): the point says
    `unchanged`; raised, it says what the process was permitted, and is put back after."""
    from benchc.run.priority import SendPriority, _state

    before = _state(threading.get_native_id())
    doc, _ = run_on_sim(tmp_path, sweep="    rate: [200/s]\n    arrival: constant", out=4,
                        extra="  requests: 20", run_args=["--send-priority", choice])
    (p,) = doc["points"]
    assert p["counts"]["completed"] == 20, p["counts"]["error_examples"]
    if choice == "off":
        assert p["client"]["send_priority"] == "unchanged"
    else:
        # what this process may do: the same as SendPriority says in a step of its own
        probe = SendPriority()
        assert p["client"]["send_priority"] == probe.raise_()
        probe.restore()
    assert _state(threading.get_native_id()) == before


def test_work_that_can_wait_goes_after_the_writes_due_within_it_and_before_those_past_it():
    """PunctualWrites.writes_first(by_ns, work_ns): it returns once the writes due within
    `work_ns` of now went (their due time passed and their write's turn ran), and never waits
    for a write due past `by_ns` (the work's own deadline) or past `work_ns` from now;
    soon_after_writes(fn) calls fn after a write due within WORK_NS (or overdue). Each case's
    order holds however late this machine runs: the times are far apart or the bounds wide."""
    from benchc.run.punctual import WORK_NS, PunctualWrites

    order: list[str] = []

    async def drive() -> None:
        p = PunctualWrites(raise_loop_thread=False, yielding=True)
        try:
            async def write(name: str, at: int) -> None:
                await p.due(at, None, lambda: None)
                order.append(name)  # the write's own turn (the send writes right after due())

            now = CLOCK()
            soon, late, far = now + WORK_NS // 2, now + 3 * WORK_NS, now + 60 * 10**9
            writes = [asyncio.ensure_future(write(n, at)) for n, at in (("soon", soon), ("late", late))]
            distant = asyncio.ensure_future(write("far", far))
            await asyncio.sleep(0)  # all three wait for their times now
            assert p.next_write() == soon
            await p.writes_first(soon - 1, 10**12)  # due after the work's deadline: not waited for
            order.append("work due before them")
            await p.writes_first(far - 1, 60 * 10**9)  # both near ones within its span: after them
            order.append("work after them")
            assert p.next_write() == far
            await p.writes_first(far + 1)  # due past WORK_NS from now: not waited for
            order.append("work not waiting for far")
            at = CLOCK() + WORK_NS // 2
            writes.append(asyncio.ensure_future(write("next", at)))
            await asyncio.sleep(0)
            p.soon_after_writes(lambda: order.append("bookkeeping"))
            await asyncio.gather(*writes)
            await asyncio.sleep(0)
            distant.cancel()
        finally:
            p.close()

    asyncio.run(drive())
    assert order == ["work due before them", "soon", "late", "work after them", "work not waiting for far",
                     "next", "bookkeeping"]


def test_the_alarms_after_wakes_behind_the_waiters_due_then_even_for_a_time_gone_by():
    woke: list[str] = []

    async def drive() -> None:
        alarm = Alarm()
        try:
            at = CLOCK() + 1_000_000

            async def wait(name: str, fn) -> None:
                await fn(at)
                woke.append(name)

            first = asyncio.ensure_future(wait("due", alarm.until))
            await asyncio.sleep(0)
            second = asyncio.ensure_future(wait("after", alarm.after))
            await asyncio.gather(first, second)
            # a time gone by: until returns at once, after waits for the alarm's next ring
            t = asyncio.ensure_future(wait("after, gone by", alarm.after))
            woke.append("until, gone by") if await alarm.until(at) is None else None
            await t
        finally:
            alarm.close()

    asyncio.run(drive())
    assert woke == ["due", "after", "until, gone by", "after, gone by"]


def test_an_open_loops_writes_do_not_hold_back_its_bookkeeping():
    """PunctualWrites without `yielding` (an open loop's: its writes come every few us at a
    high rate): nothing waits for its writes, and a batch is recorded in one pass."""
    from benchc.run.punctual import RECORD_PASS_NS, PunctualWrites

    order: list[str] = []

    async def drive() -> None:
        p = PunctualWrites(raise_loop_thread=False)
        try:
            at = CLOCK() + 200_000_000  # well after the rest, however late this machine runs
            write = asyncio.ensure_future(p.due(at, None, lambda: order.append("write")))
            await asyncio.sleep(0)
            assert p.next_write() is None
            await p.writes_first(at + RECORD_PASS_NS)
            p.soon_after_writes(lambda: order.append("bookkeeping"))
            rest: list[int] = []
            # 50 items of a tenth of a pass each: five passes' time, in one
            p.in_passes(list(range(50)), lambda _: time.sleep(RECORD_PASS_NS / 1e10), rest, order.clear)
            assert rest == []
            order.append("work")
            await write
        finally:
            p.close()

    asyncio.run(drive())
    assert order == ["work", "bookkeeping", "write"]
