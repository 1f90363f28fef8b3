"""A point's progress on the console (run/console.py): a line per interval off a terminal, a
bar on one, the time left, and the "waiting for the server" note only when nothing arrived.
Driven by a fake clock and fake tallies: no test here waits for time to pass."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

from benchc.plan.model import Step
from benchc.plan.shapes import ClosedLoop, OpenLoop
from benchc.run.console import PROGRESS_LINE_S, REDRAW_S, Progress, Silence


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def rec(sent: int, failed: int = 0, tokens: int = 0, window_s: float = 0.0):
    # the point's token counts sit in their own group (metrics/aggregate.py TokenCounts)
    tally = SimpleNamespace(sent=sent, failed=failed, tokens=SimpleNamespace(output=tokens),
                            window_s=window_s)
    return SimpleNamespace(tally=tally)


def step(**kw) -> Step:
    return Step(kind="load", combination=0, id="c=4", load=ClosedLoop(concurrency=4, **kw))


def test_off_a_terminal_a_line_per_interval_with_what_is_done_and_what_is_left():
    out, clock = io.StringIO(), Clock()
    p = Progress(step(requests=100), out, live=False, clock=clock)
    p.ended(rec(1), 4)
    p.tick(rec(1), 4)
    assert out.getvalue() == ""  # no line before the first interval, none per request
    clock.now += PROGRESS_LINE_S
    p.tick(rec(25, failed=2, tokens=5000, window_s=10.0), 4)
    # 25 of 100 in 10 s: 75 more at that rate take 30 s
    assert out.getvalue() == "c=4: 25/100 done, 4 in flight, 500 tok/s, 2 errors, 30s left\n"
    clock.now += PROGRESS_LINE_S / 2
    p.tick(rec(40), 4)
    assert out.getvalue().count("\n") == 1  # not yet: one line per interval
    clock.now += PROGRESS_LINE_S / 2
    p.tick(rec(50), 4)
    assert out.getvalue().count("\n") == 2 and "\r" not in out.getvalue()


def test_on_a_terminal_a_bar_redrawn_as_requests_end_at_most_so_often():
    out, clock = io.StringIO(), Clock()
    p = Progress(step(duration_s=20.0), out, live=True, clock=clock)
    clock.now += 5.0
    p.ended(rec(3), 4)
    assert out.getvalue() == ("\r\033[Kc=4: [#####...............]  25% 3 done, 4 in flight, 0 tok/s, "
                              "0 errors, 15s left")
    p.ended(rec(4), 4)  # within REDRAW_S: not drawn again
    assert out.getvalue().count("\r") == 1
    clock.now += 2 * REDRAW_S
    p.ended(rec(5), 4)
    assert out.getvalue().count("\r") == 2
    p.tick(rec(5), 4)  # time passing redraws (the time left moves)
    assert out.getvalue().count("\r") == 3


def test_a_point_bound_by_neither_shows_no_time_left():
    out, clock = io.StringIO(), Clock()
    p = Progress(Step(kind="load", combination=0, id="trace", load=OpenLoop(rate_rps=5.0)), out, live=False,
                 clock=clock)
    clock.now += PROGRESS_LINE_S
    p.tick(rec(7), 1)
    assert out.getvalue() == "trace: 7 done, 1 in flight, 0 tok/s, 0 errors\n"


def test_the_waiting_note_only_when_nothing_arrived_for_the_stated_time():
    clock = Clock()
    s = Silence(10.0, clock)
    assert s.note_due(activity=0, inflight=2) is None
    clock.now += 10.0
    assert s.note_due(activity=0, inflight=2) == pytest.approx(10.0)  # nothing since the start
    clock.now += 1.0
    # a slow request that streams all along (a reasoning model): never silent
    for k in range(1, 30):
        clock.now += 1.0
        assert s.note_due(activity=k, inflight=2) is None
    # then nothing arrives: a note at 10 s of silence, the next at 20 s, none between
    notes = []
    for _ in range(25):
        clock.now += 1.0
        notes.append(s.note_due(activity=29, inflight=2))
    assert [q for q in notes if q is not None] == [pytest.approx(10.0), pytest.approx(20.0)]
    clock.now += 1.0
    assert s.note_due(activity=30, inflight=2) is None  # an event: the silence is over
    clock.now += 10.0
    assert s.note_due(activity=30, inflight=0) is None  # nothing in flight: nothing awaited


@pytest.mark.slow  # an end-to-end run
def test_slow_requests_that_stream_get_progress_lines_and_no_waiting_note(tmp_path, capsys, monkeypatch):
    """Requests that take far longer than the note's interval but stream all along (as a
    reasoning model's do): the note said "waiting for the server ... none ended" before;
    now progress lines, and no note."""
    from benchc.cli import main
    from benchc.run import console, runner
    from tests.simrun import write_spec

    monkeypatch.setattr(runner, "HEARTBEAT_S", 0.2)
    monkeypatch.setattr(runner, "PROGRESS_TICK_S", 0.02)
    monkeypatch.setattr(console, "PROGRESS_LINE_S", 0.1)
    # 25 ms a step: 40 tokens take a second, five times the note's interval
    spec = write_spec(tmp_path, sweep="    concurrency: [2]", out=40, extra="  requests: 2",
                      sim=", step_table: [[1, 25.0], [2, 25.0]]")
    assert main(["run", spec, "--set", "load.warmup.requests=0"]) == 0
    err = capsys.readouterr().err
    assert "waiting for the server" not in err
    assert "c=2: 0/2 done, 2 in flight" in err  # a progress line while the requests streamed
