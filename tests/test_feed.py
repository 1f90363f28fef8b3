"""A step's request bodies are built ahead in a bounded window (run/feed.py): what the feed
holds does not depend on the step's request ceiling, a body built ahead is the one the
request would have built itself, and the window refills while the step runs."""

from __future__ import annotations

import asyncio
import json

import pytest

from benchc.cli import main
from benchc.plan.compiler import compile_spec
from benchc.plan.datasets import make_source
from benchc.run import feed
from benchc.run.feed import StepFeed
from benchc.spec import loader

SPEC = """\
version: 1
name: f
target: {{sim: {{preset: instant}}, model: m}}
workload:
  dataset:
    random: {{input_tokens: 64, output_tokens: 4}}
load:
  sweep: {{concurrency: [2]}}
  {stop}
"""


def feed_for(tmp_path, stop: str, window: int | None = None, sweep: str = "concurrency: [2]",
             prebuild_s: float | None = None) -> StepFeed:
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(stop=stop).replace("concurrency: [2]", sweep))
    plan = compile_spec(loader.load(str(spec), env={}))
    (step,) = plan.load_steps()
    w = plan.combinations[0].workload
    # prebuild_s None: the whole first window (else the step's need and what prebuild_s builds)
    return StepFeed(make_source(w.dataset, w.params, w.prompts, str(tmp_path)), plan.combinations[0], step,
                    window=window, prebuild_s=prebuild_s)


def test_the_first_window_holds_the_steps_need_whatever_the_time_allowed(tmp_path):
    """Before the step, bodies are built until its need is ready (not only for a set time):
    rounds of its units in flight, or seconds of its open loop's arrivals, within the window
    and the step's request ceiling."""
    closed = feed_for(tmp_path, "requests: 1000", sweep="concurrency: [3]", prebuild_s=0.0)
    assert closed.need() == feed.ROUNDS_AHEAD * 3 and len(closed._ready) == closed.need()
    assert feed_for(tmp_path, "requests: 10", sweep="concurrency: [3]", prebuild_s=0.0).need() == 10
    windowed = feed_for(tmp_path, "requests: 1000", window=20, sweep="concurrency: [3]", prebuild_s=0.0)
    assert windowed.need() == 20
    rate = feed_for(tmp_path, "requests: 1000", sweep="rate: [5/s]", prebuild_s=0.0)
    assert rate.need() == int(feed.ARRIVALS_AHEAD_S * 5) and len(rate._ready) == rate.need()


def test_the_builder_is_done_once_the_steps_share_is_built(tmp_path):
    small = feed_for(tmp_path, "requests: 20", window=8)

    async def drive() -> None:
        ahead = asyncio.create_task(small.keep_ahead())
        for j in range(20):
            small.get(j)
            await asyncio.sleep(0)
        await asyncio.wait_for(ahead, 10)  # it ended by itself: no wake per request after the last

    asyncio.run(drive())
    assert small.built_late == 0 and small._next == 20


def test_what_the_feed_holds_does_not_depend_on_the_request_ceiling(tmp_path):
    small = feed_for(tmp_path, "requests: 1000", window=200)
    huge = feed_for(tmp_path, "requests: 1000000\n  duration: 10s", window=200)
    timed = feed_for(tmp_path, "duration: 10s", window=200)
    for f in (small, huge, timed):
        assert f.most_ready == len(f._ready) == 200
    # a ceiling under the window: only the step's own requests are built
    assert feed_for(tmp_path, "requests: 10", window=200).most_ready == 10


def test_a_body_built_ahead_is_the_one_built_on_demand(tmp_path):
    ahead = feed_for(tmp_path, "requests: 1000", window=4)
    lazy = feed_for(tmp_path, "requests: 1000", window=4)
    # lazy's requests 4.. are built when taken (the window was not refilled): late, and equal
    taken = [lazy.get(j) for j in range(10)]
    assert lazy.built_late == 6 and lazy.issued == 10
    for j in range(4):
        assert ahead.get(j) == taken[j]
    assert ahead.built_late == 0
    later = []
    for j in range(4, 10):
        assert ahead.build_ahead()  # a request took one: room for one more
        later.append(ahead.get(j))
    assert later == taken[4:] and ahead.built_late == 0
    assert len({json.loads(r.body)["messages"][0]["content"] for r in taken}) == 10  # ten prompts


def test_the_window_refills_while_the_step_runs_and_never_grows(tmp_path):
    feed = feed_for(tmp_path, "requests: 1000000", window=8)

    async def drive() -> None:
        ahead = asyncio.create_task(feed.keep_ahead())
        try:
            for j in range(100):
                assert feed.get(j).index == j
                # the builder takes one body per turn of the loop: a request's turn is left alone
                for _ in range(3):
                    await asyncio.sleep(0)
                assert len(feed._ready) == 8  # refilled
        finally:
            ahead.cancel()
            await asyncio.gather(ahead, return_exceptions=True)

    asyncio.run(drive())
    assert feed.built_late == 0 and feed.most_ready == 8


def test_a_closed_loop_whose_turns_end_many_requests_never_drains_the_window(tmp_path):
    """A coalesced closed loop ends many requests in one turn of the event loop, each taking a
    body: the builder pays back per turn what was taken since its last, so a step of many more
    rounds than ROUNDS_AHEAD sends every body from the window (one body per turn left about
    half of a C=256 point's 4096 bodies built on the send path)."""
    c, rounds = 16, 4 * feed.ROUNDS_AHEAD
    f = feed_for(tmp_path, f"requests: {c * rounds}", sweep=f"concurrency: [{c}]", prebuild_s=0.0)
    assert len(f._ready) == f.need() == feed.ROUNDS_AHEAD * c

    async def drive() -> None:
        ahead = asyncio.create_task(f.keep_ahead())
        await asyncio.sleep(0)
        for r in range(rounds):
            for j in range(r * c, (r + 1) * c):  # a turn in which the whole round ends
                f.get(j)
            await asyncio.sleep(0)  # the next turn: the round's answers are read
        await asyncio.wait_for(ahead, 10)

    asyncio.run(drive())
    assert f.built_late == 0 and f.issued == c * rounds
    assert f.most_ready <= f.window


def test_the_builder_leaves_a_due_send_its_turn(tmp_path):
    """An open loop's next send (its issue, or a write due soon) is not kept waiting by a
    body's build: while `until_due` says it is nearer than a build, the builder builds nothing
    and waits for it (down to half the step's need: below, those bodies would be built on the
    send path anyway); once it has gone, the window refills."""
    f = feed_for(tmp_path, "requests: 1000", window=8)
    near = [True]
    asked = []

    def until_due() -> int | None:
        asked.append(near[0])
        return 50_000 if near[0] else None  # due in 50 us (within the guard), again and again; then none

    async def drive() -> None:
        ahead = asyncio.create_task(f.keep_ahead(until_due))
        try:
            for j in range(4):
                f.get(j)
            while asked.count(True) < 5:  # the builder looked five times
                await asyncio.sleep(0.001)
            assert len(f._ready) == 4  # and built nothing in the send's way
            assert f.need() == 8  # of which 4 is half
            f.get(4)
            while len(f._ready) < 4:  # one under half: refilled to half, the send due or not
                await asyncio.sleep(0.001)
            seen = asked.count(True)
            while asked.count(True) < seen + 5:
                await asyncio.sleep(0.001)
            assert len(f._ready) == 4  # and no further
            near[0] = False
            while len(f._ready) < 8:  # it refills once the send has gone
                await asyncio.sleep(0.001)
        finally:
            ahead.cancel()
            await asyncio.gather(ahead, return_exceptions=True)

    asyncio.run(asyncio.wait_for(drive(), 30))
    assert f.built_late == 0 and f.most_ready == 8


def test_below_half_the_builder_refills_one_body_a_turn_while_a_send_is_near(tmp_path):
    """What the builder owes gathers while it leaves sends their turn; below half the step's
    need it refills whatever is due, but one body per turn of the event loop while a send is
    near, so the send's task runs between (in one turn, a debt of 32 bodies of 1k tokens, 166
    us each on the 2-core VM, would hold a send 5 ms)."""
    f = feed_for(tmp_path, "requests: 1000", window=8)
    assert f.need() == 8 and len(f._ready) == 8

    async def drive() -> None:
        ahead = asyncio.create_task(f.keep_ahead(lambda: 50_000))  # a send always due in 50 us
        try:
            await asyncio.sleep(0)
            for j in range(7):  # one left: well under half, seven bodies owed
                f.get(j)
            seen = [len(f._ready)]
            while seen[-1] < 4:  # refilled to half ...
                await asyncio.sleep(0)
                seen.append(len(f._ready))
            steps = [b - a for a, b in zip(seen, seen[1:], strict=False)]
            assert max(steps) == 1, seen  # ... one body a turn, never the debt at once
            for _ in range(5):
                await asyncio.sleep(0)
            assert len(f._ready) == 4  # and no further while the send is near
        finally:
            ahead.cancel()
            await asyncio.gather(ahead, return_exceptions=True)

    asyncio.run(asyncio.wait_for(drive(), 30))
    assert f.built_late == 0


def test_the_builder_waiting_for_a_send_never_asks_for_a_sleep_the_loop_cannot_keep(tmp_path, monkeypatch):
    """uvloop's timers round to the millisecond: a sleep of 50 us comes back at the loop's next
    turn, so a builder waiting that way for a send due in 50 us woke at every turn until it
    went (a 1000/s open loop spent its loop thread so: p50 skew 3.2 / 4.1 ms, against 79 / 70 us
    once it waited a millisecond; benchmarks/feed_skew.py). It waits at least TIMER_S."""
    f = feed_for(tmp_path, "requests: 1000", window=8)
    asked: list[float] = []
    sleep = asyncio.sleep

    async def recorded(delay: float, *a):
        asked.append(delay)
        return await sleep(delay, *a)

    async def drive() -> None:
        ahead = asyncio.create_task(f.keep_ahead(lambda: 50_000))  # a send always due in 50 us
        try:
            f.get(0)  # room for one: the builder would build, but the send is nearer than a build
            while not asked:
                await sleep(0)
        finally:
            ahead.cancel()
            await asyncio.gather(ahead, return_exceptions=True)

    monkeypatch.setattr(asyncio, "sleep", recorded)
    asyncio.run(asyncio.wait_for(drive(), 30))
    assert asked and min(asked) >= feed.TIMER_S == 0.001
    assert len(f._ready) == 7  # it built nothing in the send's way


@pytest.mark.slow
def test_a_step_of_a_million_requests_sends_from_its_window(tmp_path):
    """End to end on the simulator: a point bound by a million requests and a short duration
    runs, and its client block says how many bodies were not ready (a count, never absent)."""
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(stop="requests: 1000000\n  duration: 300ms"))
    assert main(["run", str(spec), "--out", str(tmp_path / "r.json"), "--quiet"]) == 0
    doc = json.loads((tmp_path / "r.json").read_text())
    (p,) = doc["points"]
    assert p["counts"]["completed"] > 0 and p["counts"]["failed"] == 0
    assert 0 <= p["client"]["bodies_built_late"] <= p["counts"]["sent"]


@pytest.mark.slow
def test_a_closed_loop_of_many_rounds_sends_every_body_from_its_window(tmp_path, monkeypatch):
    """End to end on the simulator: a closed loop of 40 rounds, its window only its need
    (ROUNDS_AHEAD rounds: the builder, not the first window, must keep it), builds no body on
    the send path."""
    c = 32
    monkeypatch.setattr(feed, "WINDOW", feed.ROUNDS_AHEAD * c)
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(stop=f"requests: {40 * c}").replace("[2]", f"[{c}]"))
    assert main(["run", str(spec), "--out", str(tmp_path / "r.json"), "--quiet"]) == 0
    (p,) = json.loads((tmp_path / "r.json").read_text())["points"]
    assert p["counts"]["completed"] == 40 * c, p["counts"]
    assert p["client"]["bodies_built_late"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("http", ["native", "aiohttp"])
def test_an_open_loop_builds_between_its_sends(tmp_path, monkeypatch, http):
    """End to end on the simulator: an open loop of 80 requests through a window of 16 is fed
    by the builder between its sends (leaving each due send its turn), and no request goes
    before its time. Not none late: a process stalled long enough that a window's arrivals
    are overdue at once (a busy machine) takes them in one turn, before any builder could;
    but a builder kept from its work would leave all but the first window late."""
    window, n = 16, 80
    monkeypatch.setattr(feed, "WINDOW", window)
    spec = tmp_path / "s.yaml"
    sweep = "rate: [200/s], arrival: constant"
    spec.write_text(SPEC.format(stop=f"requests: {n}").replace("concurrency: [2]", sweep))
    out = tmp_path / "r.json"
    assert main(["run", str(spec), "--out", str(out), "--quiet", "--http", http]) == 0
    (p,) = json.loads(out.read_text())["points"]
    assert p["counts"]["completed"] == n, p["counts"]
    assert p["client"]["bodies_built_late"] < n - 2 * window
    assert p["client"]["send_skew_us"]["count"] == n
