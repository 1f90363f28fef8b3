"""The client self-check judges effects (run/effects.py): a late loop marks a point only when a
figure it can move moved past its bound. End to end against the simulator, whose trace says
when it wrote every chunk, with the client's event loop slowed on purpose; and the judging
itself, figure by figure."""

from __future__ import annotations

import asyncio
import time

import pytest

from benchc.cli import main
from benchc.client import http1
from benchc.results.document import read
from benchc.results.trust import judge
from benchc.run import effects, loadgen
from benchc.run import point as point_mod
from benchc.run.search import verdict
from tests.conftest import transports, use_transport
from tests.simrun import Sim, requests_of, write_spec
from tests.test_point_document import point_of

HOG_BLOCK_S = 0.030  # the event loop blocked this long ...
HOG_EVERY_S = 0.040  # ... after this much free time, over and over


def slowed_event_loop(monkeypatch) -> None:
    """Every load point runs with the client's event loop blocked HOG_BLOCK_S after every
    HOG_EVERY_S (as a slow callback or a busy neighbour thread holding the loop would). The
    self-check's ticker (every 5 ms; 20 ms where the kernel stamps the reads) is then late past
    the 5 ms bound in every cycle, whatever the phase of the two: a ticker that fires and
    re-arms for T later always has a tick due in a block longer than T, and that tick runs when
    the block ends, at least 30 - T ms late (10 ms at T = 20 ms). A block shorter than T can
    fall between two ticks: at 12 ms the ticker, re-armed at the end of the block that made it
    late, locked onto the hog's cycle and saw 3 late ticks in 186 in one CI run. Blocks stay
    shorter than the 40 ms between the simulator's chunks, so no read on the loop holds two."""
    real = point_mod.run_step

    async def slowed(*args, **kwargs):
        async def hog():
            while True:
                await asyncio.sleep(HOG_EVERY_S)
                time.sleep(HOG_BLOCK_S)  # blocks the loop: nothing else of it runs meanwhile

        task = asyncio.create_task(hog())
        try:
            return await real(*args, **kwargs)
        finally:
            task.cancel()

    monkeypatch.setattr(point_mod, "run_step", slowed)


def run_against_sim(tmp_path, http: str, out: int, sim_args: tuple = (), requests: int = 6) -> tuple:
    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4", *sim_args)
    try:
        spec = write_spec(tmp_path, sweep="    concurrency: [2]", out=out, extra=f"  requests: {requests}")
        assert main(["run", spec, "--base-url", sim.url, "--quiet", "--http", http]) == 0
    finally:
        sim.close()
    return read(str(tmp_path / "r.json"))["points"][0], requests_of(tmp_path), sim.records()


CLOCKS_NS = 100_000  # the kernel stamps in CLOCK_REALTIME, moved onto the monotonic clock by an
# offset read from two clock calls (client/_rx_py.py): off by microseconds (7 us seen)


def assert_ttft_as_traced(records: list, trace: dict) -> None:
    """Each request's first text arrived after the simulator wrote it and before its next write
    (as tests/test_run.py's trace check: the kernel stamped the read on loopback), to the
    clocks' agreement."""
    for r in records:
        writes = [t for t, _ in trace[r["id"]]["chunks"]]
        first_text = r["t0_ns"] + r["ttft_us"] * 1e3
        assert writes[0] - CLOCKS_NS <= first_text <= writes[1] + CLOCKS_NS, (r["id"], writes[:2], first_text)


@pytest.mark.slow  # end-to-end runs
@pytest.mark.parametrize("transport", transports())
def test_a_late_event_loop_moves_no_kernel_stamped_latency_and_the_point_stays_trusted(
        tmp_path, monkeypatch, transport):
    """The event loop is blocked 30 ms in every 70, a chunk comes every 40 ms: the loop's lag is
    past its bound, yet the reads keep the kernel's stamps and never merge two chunks, the sends
    leave the slots idle for a sliver of the time, so nothing the lag can move moved: trusted,
    and the note says what was late and how little it moved. (Before the self-check judged
    effects, the lag alone marked the point client-limited.)"""
    if not http1.KERNEL_STAMPS:
        pytest.skip("reads carry kernel receive stamps on Linux only")
    path = use_transport(monkeypatch, transport)
    slowed_event_loop(monkeypatch)
    p, records, trace = run_against_sim(tmp_path, "native", 32, ("--param", "step_table=[[1, 40.0]]"))
    client = p["client"]
    # the cause was there: the ticker saw the blocks
    assert client["loop_lag_us"]["p99"] > effects.LOOP_LAG_P99_US and client["late_ticks"] >= 5, client
    assert client["client_limited"] is False and client["reasons"] == [], client["reasons"]
    assert p["trust"] == {"trusted": True, "doubts": []}
    assert any(c.startswith("event-loop lag") for c in client["causes"])
    assert {r["path"] for r in records} == {path}
    assert_ttft_as_traced(records, trace)
    # and it moved nothing past a bound
    assert client["effects"]["latencies"]["requests"] == {"kernel": 6, "loop": 0}
    # chunks 40 ms apart, reads on time: hardly two chunks in one read (a busy machine may hold the
    # simulator or the reader back now and then), none of the reads a late loop dated
    assert not client["effects"]["latencies"]["moved"], client["effects"]["latencies"]
    assert client["effects"]["latencies"]["value"] < effects.MERGED_SHARE_BOUND
    assert client["effects"]["offered_load"]["value"] < effects.IDLE_SHARE_BOUND, client["effects"]
    assert "no figure it can move moved" in client["self_check_note"]


@pytest.mark.slow  # an end-to-end run
def test_the_same_late_loop_moves_the_latencies_aiohttp_dates(tmp_path, monkeypatch):
    """aiohttp's reads are dated when its protocol callback runs on the event loop: the same
    blocked loop moves every latency it reads, the point says so by the loop's lag."""
    slowed_event_loop(monkeypatch)
    p, records, _ = run_against_sim(tmp_path, "aiohttp", 32, ("--param", "step_table=[[1, 40.0]]"))
    lat = p["client"]["effects"]["latencies"]
    assert lat["requests"] == {"kernel": 0, "loop": 6}
    assert lat["moved"] and lat["measure"] == "loop_lag_p99_us" and lat["value"] > effects.LOOP_LAG_P99_US
    (doubt,) = p["trust"]["doubts"]
    assert doubt["check"] == "client_limited" and set(doubt["figures"]) >= {"ttft", "itl", "tpot", "e2e"}
    assert "latencies moved (ttft, itl, tpot, e2e)" in doubt["message"]


@pytest.mark.slow  # an end-to-end run
def test_closed_loop_sends_late_past_the_bound_are_untrusted_for_the_offered_load(tmp_path, monkeypatch):
    """A hook makes the client dawdle 50 ms before every send: short requests' slots stand idle
    a large share of the time, the concurrency held is not the one asked for. Untrusted, for
    the load (and throughput), while the kernel-stamped TTFT is still the trace's."""
    real = loadgen.send_native

    async def late_send(*args, **kwargs):
        until = time.perf_counter() + 0.05
        while time.perf_counter() < until:
            await asyncio.sleep(until - time.perf_counter())
        return await real(*args, **kwargs)

    monkeypatch.setattr(loadgen, "send_native", late_send)
    p, records, trace = run_against_sim(tmp_path, "native", 8)
    load = p["client"]["effects"]["offered_load"]
    assert load["measure"] == "idle_share" and load["moved"] and load["value"] > effects.IDLE_SHARE_BOUND
    assert p["client"]["send_delay_us"]["p50"] >= 50_000
    assert p["client"]["reasons"][0].startswith("offered load moved (load, throughput): the client left ")
    assert not p["trust"]["trusted"] and p["trust"]["doubts"][0]["figures"] == ["load", "throughput"]
    if http1.KERNEL_STAMPS:
        assert_ttft_as_traced(records, trace)


# ---------------------------------------------------------------------- the judging, figure by figure


SENDS = {"sent": 100, "delay_ns": 0, "slot_ns": 100 * 10**9, "late": 0, "ready_span_ns": 10**9,
         "sent_span_ns": 10**9}


def test_closed_loop_offered_load_is_the_share_of_slot_time_left_idle():
    e = effects.offered_load(True, {**SENDS, "delay_ns": 4 * 10**9})
    assert (e["measure"], e["value"], e["moved"]) == ("idle_share", 0.04, False)
    e = effects.offered_load(True, {**SENDS, "delay_ns": 6 * 10**9}, 4)
    assert (e["value"], e["moved"]) == (0.06, True) and e["figures"] == ["load", "throughput"]
    assert "6.0% of its slots' time idle (bound 5%)" in e["how"]
    # one slot: no request shared the server with another; the throughput moved, not the load
    assert effects.offered_load(True, {**SENDS, "delay_ns": 6 * 10**9}, 1)["figures"] == ["throughput"]


def test_open_loop_offered_load_is_the_share_of_sends_late_past_10ms():
    e = effects.offered_load(False, {**SENDS, "late": 5, "sent_span_ns": 2 * 10**9})
    assert (e["measure"], e["value"], e["moved"], e["rate_ratio"]) == ("late_share", 0.05, False, 0.5)
    e = effects.offered_load(False, {**SENDS, "late": 6})
    assert e["moved"] and "6 of 100 sends (6.0%) went more than 10.0 ms late" in e["how"]
    assert "latencies from schedule" in e["figures"]


def test_kernel_stamped_latencies_move_only_when_late_reads_merged_chunks():
    late = {"count": 900, "p50": 100, "p99": 9000, "max": 20000}
    lag = {"p99": 30_000}
    # a loop 30 ms late, reads 9 ms after their stamps, no chunk merged: nothing moved
    e = effects.latencies({"kernel": 10, "loop": 0}, lag, 50, late, 40, 0.0)
    assert not e["moved"] and e["figures"] == ["ttft", "itl", "tpot"]  # never e2e: the last read is exact
    # the same, with a tenth of the gaps inside one read: ITL (and a merged first chunk's TTFT) moved
    assert effects.latencies({"kernel": 10, "loop": 0}, lag, 50, late, 40, 0.1)["moved"]
    # merged gaps with reads on time: the server wrote them together, not the client's doing
    prompt = {"count": 900, "p50": 100, "p99": 900, "max": 2000}
    assert not effects.latencies({"kernel": 10, "loop": 0}, lag, 50, prompt, 0, 0.5)["moved"]


def test_loop_dated_latencies_move_with_the_loop_lag():
    e = effects.latencies({"kernel": 0, "loop": 10}, {"p99": 7000}, 5, None, 0, None)
    assert e["moved"] and e["figures"] == ["ttft", "itl", "tpot", "e2e"] and e["value"] == 7000
    hiccup = effects.latencies({"kernel": 0, "loop": 10}, {"p99": 7000}, 4, None, 0, None)  # 4 ticks late
    assert not hiccup["moved"]
    assert not effects.latencies({"kernel": 0, "loop": 10}, {"p99": 4000}, 50, None, 0, None)["moved"]


def test_a_busy_cpu_alone_is_a_cause_and_no_effect():
    found = {"offered_load": effects.offered_load(True, SENDS),
             "latencies": effects.latencies({"kernel": 5, "loop": 0}, {"p99": 100}, 0, None, 0, 0.0),
             "client_resources": effects.client_resources(0)}
    seen = effects.causes({"p99": 100}, 0, 0.97, None)
    assert seen == ["client CPU 97% of one core"] and effects.reasons(found) == []
    note = effects.note(found, seen)
    assert note is not None and note.startswith("the client ran late (client CPU 97% of one core), but no")
    found["client_resources"] = effects.client_resources(3)
    assert effects.reasons(found) == ["client resources moved (errors, load): 3 requests failed for want of "
                                      "client resources (file descriptors or local ports; counted as "
                                      "client_exhausted)"]
    assert effects.note(found, seen) is None


def _point(effects_block: dict | None, slo_metric: str = "e2e") -> dict:
    client: dict = {"client_limited": True, "reasons": ["r"]}
    if effects_block is not None:
        client["effects"] = effects_block
    point = {"client": client, "tokens": {}, "complete": True,
             "slo": {"passed": True, "checks": [{"threshold": f"{slo_metric}: p99 < 2m", "value": 1.0,
                                                 "passed": True}]}}
    point["trust"] = judge(point_of(client=client))
    return point


def test_a_search_probe_is_held_back_only_by_doubts_on_its_load_or_its_slo_figures():
    itl_moved = {"latencies": {"figures": ["ttft", "itl", "tpot"], "moved": True}}
    assert verdict(_point(itl_moved, "e2e")) == ("pass", [])
    assert verdict(_point(itl_moved, "itl"))[0] == "untrusted"
    load_moved = {"offered_load": {"figures": ["load", "throughput"], "moved": True}}
    assert verdict(_point(load_moved, "e2e"))[0] == "untrusted"
    assert verdict(_point(load_moved, "turn2.ttft"))[0] == "untrusted"


def test_a_result_written_before_effects_doubts_every_figure():
    p = _point(None)
    (doubt,) = p["trust"]["doubts"]
    assert "figures" not in doubt and doubt["message"].endswith("these figures measure benchc")
    assert verdict(p)[0] == "untrusted"
