"""Splitting a load step across workers (run/shards.py): every split sends exactly the plan's
requests, each with its own prompt, and never gives a worker requests without the
concurrency to send them."""

import math
import os
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchc.plan.compiler import compile_spec
from benchc.plan.model import Step
from benchc.plan.shapes import AgentReplay, ClosedLoop, OpenLoop
from benchc.run.agent_replay import AgentFeed
from benchc.run.feed import Dealer
from benchc.run.prepare import prepare
from benchc.run.shards import WHOLE, Shard, split_step
from benchc.spec import loader
from tests.test_point_document import point_of

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def closed(c: int, requests: int | None, duration_s: float | None = None) -> Step:
    return Step("load", 0, f"c={c}", load=ClosedLoop(concurrency=c, requests=requests, duration_s=duration_s))


def opened(requests: int | None, cap: int | None = None, duration_s: float | None = None) -> Step:
    return Step("load", 0, "r", load=OpenLoop(rate_rps=10.0, arrival="poisson", requests=requests,
                                              max_concurrency=cap, duration_s=duration_s))


def indices(shard: Shard, share: int) -> list[int]:
    return [shard.request_index(j) for j in range(share)]


def test_concurrency_below_the_worker_count_runs_on_fewer_workers():
    # issue 22: concurrency 1 over 2 workers sent 6 of 12 requests (the other shard had
    # concurrency 0); now the point runs on one worker, which sends all 12
    (step, shard), = split_step(closed(1, 12), 2)
    assert (step.load.concurrency, step.requests, shard) == (1, 12, WHOLE)
    assert [(s.load.concurrency, s.requests) for s, _ in split_step(closed(3, 12), 8)] == [(1, 4)] * 3
    # more slots than requests: only the requests' worth are used, one request each
    assert [(s.load.concurrency, s.requests)
            for s, _ in split_step(closed(8, 3), 4)] == [(3, 1), (3, 1), (2, 1)]
    # open loop: a cap of 1 cannot be split (a worker with cap 0 would have had none)
    assert [(s.load.max_concurrency, s.requests) for s, _ in split_step(opened(30, cap=1), 4)] == [(1, 30)]
    assert len(split_step(opened(3), 8)) == 3


def test_requests_follow_the_concurrency_so_shards_end_together():
    # C=5 over 2 workers: 3 and 2 slots; 100 requests go 60/40, so both run 20 rounds
    # (an even 50/50 would leave the 2-slot worker sending alone for the last third)
    shards = split_step(closed(5, 100), 2)
    assert [(s.load.concurrency, s.requests) for s, _ in shards] == [(3, 60), (2, 40)]
    assert indices(shards[1][1], 4) == [3, 4, 8, 9]


@settings(max_examples=400, deadline=None)
@given(c=st.integers(1, 300), requests=st.one_of(st.none(), st.integers(1, 2000)),
       workers=st.integers(1, 64), timed=st.booleans())
def test_closed_loop_splits_send_exactly_the_plans_requests(c, requests, workers, timed):
    duration = 30.0 if timed or requests is None else None
    step = closed(c, requests, duration)
    shards = split_step(step, workers)
    lanes = min(c, requests) if requests else c
    assert len(shards) == min(workers, lanes)
    assert sum(s.load.concurrency for s, _ in shards) == c  # the plan's concurrency, all of it
    for s, shard in shards:
        assert s.load.concurrency >= 1 and s.duration_s == duration and s.load.mean_rate_rps is None
        assert s.requests == shard.share(requests)
    if requests is not None:
        assert sum(s.requests for s, _ in shards) == requests
        assert all(s.requests >= 1 for s, _ in shards)  # every shard sends, and can
        sent = sorted(i for s, shard in shards for i in indices(shard, s.requests))
        assert sent == list(range(requests))  # every request index exactly once
        rounds = [math.ceil(s.requests / shard.width) for s, shard in shards]
        assert max(rounds) - min(rounds) <= 1  # they run out of requests together
        assert max(shard.reach(s.requests) for s, shard in shards) == requests
    else:
        # bound by time: any prefix of the step's indices is split without gap or overlap
        horizon = 3 * c + 7
        sent = sorted(i for _, shard in shards for i in indices(shard, horizon) if i < horizon)
        assert sent == list(range(horizon))


@settings(max_examples=300, deadline=None)
@given(requests=st.one_of(st.none(), st.integers(1, 500)), cap=st.one_of(st.none(), st.integers(1, 100)),
       workers=st.integers(1, 64))
def test_open_loop_splits_keep_the_schedule_and_its_prompts(requests, cap, workers):
    step = opened(requests, cap, None if requests else 20.0)
    shards = split_step(step, workers)
    assert len(shards) == min([workers] + [x for x in (cap, requests) if x])
    if cap is not None:
        assert sum(s.load.max_concurrency for s, _ in shards) == cap
        assert all(s.load.max_concurrency >= 1 for s, _ in shards)
    n = requests or 200
    arrivals = list(range(n))
    for s, shard in shards:
        assert (s.load.rate_rps, s.requests, s.load.arrival) == \
            (step.load.rate_rps, step.requests, step.load.arrival)
        index, count = shard.schedule_slice
        mine = arrivals[index::count]  # what loadgen._open_loop sends for this shard
        assert mine, "a shard without an arrival"
        assert indices(shard, len(mine)) == mine  # arrival i sends prompt i, as a local run does
        if requests is not None:
            assert shard.share(requests) == len(mine)
    if requests is not None:
        assert sorted(i for _, shard in shards for i in indices(shard, shard.share(requests))) == arrivals


def test_a_split_needs_a_worker():
    with pytest.raises(ValueError):
        split_step(closed(4, 8), 0)


SPEC = """\
version: 1
name: feed
target: {sim: {preset: instant}, model: m}
workload:
  dataset:
    random: {input_tokens: 8, output_tokens: 4}
load:
  warmup: {requests: 0}
  sweep: {concurrency: [5]}
  requests: 13
"""


@pytest.mark.parametrize("step_of, workers", [
    (lambda s: s, 2),  # C=5 over 2: 3 + 2 slots
    (lambda s: s, 3),  # 2 + 2 + 1
    (lambda s: replace(s, load=replace(s.load, concurrency=1)), 4),  # one worker
    (lambda s: replace(s, load=OpenLoop(rate_rps=5.0, arrival="poisson", **s.load.bounds())), 3),
])
def test_step_feeds_send_every_prompt_of_the_step_once_across_shards(tmp_path, step_of, workers):
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC)
    plan = compile_spec(loader.load(str(spec), env={}))
    combo = plan.combinations[0]
    prepared = prepare(plan, combo)
    step = step_of(plan.load_steps()[0])
    deal = Dealer().deal(combo.workload)
    local = prepared.feed(step, deal)
    expected = {i: local.get(i).body for i in range(step.requests)}
    seen: dict[int, bytes] = {}
    reach = 0
    for _, shard in split_step(step, workers):
        feed = prepared.feed(step, deal, shard)  # a worker's feed: the plan's step, its shard
        for j in range(shard.share(step.requests)):
            r = feed.get(j)
            assert r.index not in seen
            seen[r.index] = r.body
        reach = max(reach, feed.consumed())
    assert seen == expected  # the same bodies, each sent once, by some shard
    assert reach == local.consumed() == step.requests  # the run deals on from the same place


def test_a_merged_point_names_the_worker_whose_client_was_saturated():
    from benchc.metrics.aggregate import Tally
    from benchc.results.trust import judge
    from benchc.run.point import Measurement, merge_measurements

    def shard(worker: int, host: str, reasons: list[str]) -> Measurement:
        check = {"client_limited": bool(reasons), "reasons": reasons,
                 "cpu_fraction": 0.95 if reasons else 0.2}
        return Measurement(tally=Tally(), client=check, steady={"duration_s": 1.0, "output_tokens": 0},
                           mean_inflight=1.0, params={}, host=host, worker=worker)

    busy = "client CPU 95% of one core"
    m = merge_measurements([shard(0, "a", []), shard(1, "b", [busy])])
    assert m.client["client_limited"] is True
    assert m.client["limited_workers"] == [{"worker": 1, "host": "b", "reasons": [busy]}]
    assert [(c["worker"], c["host"], c["cpu_fraction"]) for c in m.client["shards"]] == \
        [(0, "a", 0.2), (1, "b", 0.95)]
    doubt = judge(point_of(client=m.client))["doubts"][0]
    assert doubt["check"] == "client_limited" and f"worker 1 on b: {busy}" in doubt["message"]


def test_a_shard_from_another_machine_is_moved_onto_the_drivers_clock():
    """Each machine's monotonic clock counts from its own boot: shards' windows were united as
    they came, so a point spread over two machines had a window (and rates) of days."""
    from benchc.metrics.aggregate import Tally, TokenCounts
    from benchc.run.clocks import MOVED_NOTE, ClockMark, shift_ns
    from benchc.run.point import Measurement, merge_measurements

    def shard(start_ns: int, clock: ClockMark) -> Measurement:
        t = Tally(sent=1, completed=1, tokens=TokenCounts(output=10), start_ns=start_ns,
                  end_ns=start_ns + 2_000_000_000)
        return Measurement(t, {"client_limited": False}, {"duration_s": 2.0, "output_tokens": 10,
                                                           "output_tok_s": 5.0}, None, {},
                           requests=[{"t0_ns": start_ns, "scheduled_ns": None}], clock=clock)

    driver = ClockMark("boot-a", 1_000 * 10**9)  # its monotonic 0 is wall 1,000 s
    here = shard(50 * 10**9, ClockMark("boot-a", driver.wall_minus_mono_ns + 3))  # the same kernel
    there = shard(7 * 10**9, ClockMark("boot-b", 1_043 * 10**9))  # wall 1,050 s: monotonic 50 s here
    assert shift_ns(here.clock, driver) == 0
    for m in (here, there):
        delta = shift_ns(m.clock, driver)
        if delta:
            m.move(delta)
    merged = merge_measurements([here, there])
    assert (merged.tally.start_ns, merged.tally.end_ns) == (50 * 10**9, 52 * 10**9)
    assert [r["t0_ns"] for r in merged.requests] == [50 * 10**9, 50 * 10**9]
    assert merged.moved and not here.moved and MOVED_NOTE.startswith("shards measured on other machines")


def agent(**load) -> Step:
    return Step("load", 0, "a", load=AgentReplay(**load))


@pytest.mark.parametrize("load, workers, parts", [
    # sessions in flight split as a closed loop's slots: c of every C sessions, in session order
    (dict(concurrency=5), 2, [(3, None, [0, 1, 2, 5, 6, 7]), (2, None, [3, 4, 8, 9])]),
    (dict(concurrency=2, sessions=3), 4, [(1, 2, [0, 2]), (1, 1, [1])]),
    (dict(concurrency=1), 3, [(1, None, list(range(10)))]),
    # arrivals (a rate, the traces' own times): worker k takes sessions k, k + n, ...
    (dict(rate_rps=2.0), 3, [(None, None, [0, 3, 6, 9]), (None, None, [1, 4, 7]), (None, None, [2, 5, 8])]),
    (dict(speedup=1.0, sessions=2), 4, [(None, 1, [0]), (None, 1, [1])]),
])
def test_a_coding_agent_replay_splits_by_whole_session(load, workers, parts):
    step, traced = agent(**load), 10
    got = [(s.load.concurrency, s.sessions, indices(shard, shard.share(step.sessions or traced)))
           for s, shard in split_step(step, workers)]
    assert got == parts
    dealt = sorted(j for _, _, mine in got for j in mine)
    assert dealt == list(range(step.sessions or traced))  # every session once, on one worker


def test_a_workers_agent_feed_holds_its_sessions_with_their_content_as_locally():
    spec = os.path.join(REPO, "specs", "agent-traces.yaml")
    plan = compile_spec(loader.load(spec, env={}))
    prepared = prepare(plan, plan.combinations[0])
    step = plan.load_steps()[0]  # 2 sessions in flight of the sample's 6
    local = prepared.feed(step, Dealer().deal(plan.combinations[0].workload))
    assert isinstance(local, AgentFeed) and local.mine == [0, 1, 2, 3, 4, 5]
    mine = []
    for _, shard in split_step(step, 2):
        feed = prepared.feed(step, Dealer().deal(plan.combinations[0].workload), shard)
        mine.append(feed.mine)
        for j in feed.mine:  # a session's requests built as the local run builds them
            req = feed.sessions[j].requests()[-1]
            assert feed.body(j, req) == local.body(j, req)
    assert mine == [[0, 2, 4], [1, 3, 5]]


@pytest.mark.parametrize("load", [dict(rate_rps=3.0), dict(speedup=2.0)])
def test_a_workers_sessions_arrive_at_their_times_in_the_whole_schedule(load):
    from benchc.run.agent_replay import AgentReplayDriver

    spec = os.path.join(REPO, "specs", "agent-traces.yaml")
    plan = compile_spec(loader.load(spec, env={}))
    prepared = prepare(plan, plan.combinations[0])
    step = replace(plan.load_steps()[0], load=AgentReplay(**load))
    deal = Dealer().deal(plan.combinations[0].workload)
    whole = AgentReplayDriver(step.shape).arrivals(prepared.feed(step, deal), seed=7)
    assert [j for j, _ in whole] == list(range(6)) and whole[0][1] == 0.0
    if "rate_rps" in load:  # the sample's sessions all start at their t = 0: a rate spreads them
        assert len({due for _, due in whole}) == 6
    parts = [AgentReplayDriver(part.shape).arrivals(prepared.feed(step, deal, shard), seed=7)
             for part, shard in split_step(step, 4)]
    assert [[j for j, _ in p] for p in parts] == [[0, 4], [1, 5], [2], [3]]
    assert sorted(x for p in parts for x in p) == whole  # each session at its time, on one worker


def test_a_closed_loop_of_sessions_deals_whole_sessions():
    step = Step("load", 0, "c=3", load=ClosedLoop(concurrency=3, sessions=7))
    parts = split_step(step, 2)
    assert [(s.load.concurrency, s.sessions, s.requests) for s, _ in parts] == [(2, 5, None), (1, 2, None)]
    assert [indices(shard, s.sessions) for s, shard in parts] == [[0, 1, 3, 4, 6], [2, 5]]
    # a closed loop of single prompts splits its requests as before
    assert [(s.load.concurrency, s.requests) for s, _ in split_step(closed(3, 7), 2)] == [(2, 5), (1, 2)]
