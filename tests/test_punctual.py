"""Open-loop sends on time (run/alarm.py, http1.exchange's `due`): a request is issued ahead
of its time, takes or opens its connection, and writes at its time -- never before it."""

from __future__ import annotations

import asyncio
import threading

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
