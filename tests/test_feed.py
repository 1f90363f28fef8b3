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
