"""The step records its requests' figures once per turn of the event loop (run/loadgen.py
StepRun._record_ended), and decides by what it counts as each request ends: the figures of a
turn's ends come in at the loop's next turn, every end is recorded once, and the step's end
records the ends whose pass has not run yet. Driven on a bare event loop: no server, no wait."""

from __future__ import annotations

import asyncio
import json

from benchc.client._stream import StreamParser
from benchc.client.request import _conclude
from benchc.metrics.record import RequestRecord
from benchc.metrics.recorder import PointRecorder
from benchc.plan.model import Step, Target
from benchc.plan.shapes import ClosedLoop
from benchc.run.loadgen import StepContext, StepRun


class CountingProgress:
    def __init__(self) -> None:
        self.calls: list[int] = []

    def ended(self, rec: PointRecorder, inflight: int) -> None:
        self.calls.append(rec.tally.sent)


def _run(requests: int = 10) -> tuple[StepRun, PointRecorder, CountingProgress]:
    target = Target("http://127.0.0.1:9/v1", None, "chat", "m", None, {}, 600.0, 60.0, None)
    progress = CountingProgress()
    ctx = StepContext(None, target.base_url, {}, target, progress=progress)  # type: ignore[arg-type]
    rec = PointRecorder(4)
    step = Step(kind="load", combination=0, id="c=4", load=ClosedLoop(concurrency=4, requests=requests))
    return StepRun(ctx, step, None, rec, None), rec, progress  # type: ignore[arg-type]


def _answered(i: int, t0_ns: int) -> RequestRecord:
    """A request whose stream answered 16 tokens, one a millisecond from 1 ms after its send."""
    r = RequestRecord(f"r{i}", i, 8, 16)
    r.times.t0_ns = r.times.first_sent_ns = t0_ns
    r.times.t0_sent, r.outcome.status = True, 200
    p = r.parser = StreamParser()
    for k in range(16):
        p.feed(b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": " w"}}]}).encode()
               + b"\n\n", t0_ns + (k + 1) * 1_000_000)
    p.feed(b"data: [DONE]\n\n", t0_ns + 16_000_000)
    p.close(t0_ns + 16_000_000)
    r.times.end_ns = p.done_ns
    return _conclude(r, p)


def test_a_turns_ends_are_recorded_at_the_next_turn_once_each_and_told_to_the_progress_once():
    async def go() -> None:
        run, rec, progress = _run()
        ended_at: list[int | None] = []
        for i in range(3):
            run._ended(_answered(i, 1_000_000_000 + i), ended_at.append)
        # decided by now: the ends are counted and each slot's end was told
        assert run.ended == 3 and run.ctx.finished == 3 and len(ended_at) == 3
        assert rec.tally.sent == 0  # recorded with the turn's other ends, not yet
        await asyncio.sleep(0)
        assert rec.tally.sent == rec.tally.completed == 3
        assert progress.calls == [3]  # once for the turn, not once a request
        run._ended(_answered(3, 2_000_000_000), None)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert rec.tally.sent == 4 and progress.calls == [3, 4]
        assert rec.tally.tokens.output == 4 * 16

    asyncio.run(go())


def test_the_steps_end_records_the_ends_whose_pass_has_not_run_and_the_pass_then_finds_none():
    async def go() -> None:
        run, rec, progress = _run()
        for i in range(2):
            run._ended(_answered(i, 1_000_000_000 + i), None)
        run._record_ended(whole=True)  # as StepRun.run does before it takes the step's figures
        assert rec.tally.sent == 2
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert rec.tally.sent == 2 and progress.calls == [2]  # not recorded twice

    asyncio.run(go())


def test_the_steady_state_ends_at_the_first_end_after_the_last_request_may_start():
    """Kept as each request ends, not with the turn's pass: the end after the request count
    was reached sets it, and the tokens of the ends before it count as the steady state's."""

    async def go() -> None:
        run, rec, _ = _run(requests=4)
        run.steady_start_ns = 500_000_000
        run.n_requests = 3  # a fourth may still start
        run._ended(_answered(0, 1_000_000_000), None)
        assert run.steady_end_ns is None and run.steady_tokens == 16
        run.n_requests = 4  # the last has started
        run._ended(_answered(1, 1_000_000_001), None)
        assert run.steady_end_ns is not None and run.steady_tokens == 16
        await asyncio.sleep(0)
        # decoded within the span, pro-rated: both ended before the span's end, wholly inside
        assert run.decoded_tokens == 32.0
        assert rec.tally.sent == 2

    asyncio.run(go())
