"""A late client judged figure by figure (issue 45, item 4): on a machine where client and
server shared the CPUs, nearly every vLLM point was flagged client-limited and a capacity
search ended undecided, although the measured bias (reads at most 7 ms late) could not move
a 40.6 ms TTFT p99 past its 500 ms bound, nor a TPOT over 127 tokens by 0.1 ms. Each figure
is judged by the bias it could carry against its own size and its SLO margin."""

from __future__ import annotations

import pytest

from benchc.cli import main
from benchc.results.api import Point
from benchc.results.document import read
from benchc.results.trust import judge
from benchc.run import effects
from benchc.run.search import verdict
from benchc.spec.thresholds import parse_threshold
from tests.test_first_hour import MINIMAX
from tests.test_search import write
from tests.test_selfcheck import slowed_event_loop


def _summary(p50_us: float, p99_us: float) -> dict:
    return {"count": 8, "out_of_range": 0, "mean": p50_us, "p50": p50_us, "p90": p99_us, "p99": p99_us,
            "max": p99_us}


def _point(lag_us: float = 7000) -> dict:
    """The issue's vLLM point: 8 requests of 127 output tokens, read by the event loop (late
    7 ms at p99), TTFT p99 40.6 ms, ITL and TPOT p50 10 ms, E2E 1.3 s."""
    lat = effects.latencies({"kernel": 0, "loop": 8}, {"p99": lag_us}, 20, None, 0, None)
    sends = {"sent": 8, "delay_ns": 0, "slot_ns": 10**10, "late": 0, "ready_span_ns": 0, "sent_span_ns": 0}
    client = {"effects": {"latencies": lat, "offered_load": effects.offered_load(True, sends, 2)},
              "causes": [f"event-loop lag p99 {lag_us / 1000:.1f} ms (20 ticks late)"]}
    client["reasons"] = effects.reasons(client["effects"])
    client["client_limited"] = bool(client["reasons"])
    return {"client": client, "counts": {"completed": 8}, "tokens": {"output": 8 * 127},
            "latency": {"ttft_us": _summary(30_000, 40_600), "itl_us": _summary(10_000, 14_000),
                        "tpot_us": _summary(10_000, 10_400), "e2e_us": _summary(1_300_000, 1_320_000)},
            "complete": True}


SLO = [parse_threshold("ttft", "p99 < 500ms"), parse_threshold("tpot", "p99 < 50ms")]


def _judged(point: dict, checks=SLO) -> dict:
    point["slo"] = {"passed": True, "checks": [{"threshold": t.text, "passed": True,
                                                "value": 1.0} for t in checks]}
    effects.judge_by_figure(point["client"], point, checks)
    # the trust checks read a whole typed point: the fixture's, with this one's blocks
    fixture = read(MINIMAX)["points"][0]
    whole = {**fixture, **point, "counts": {**fixture["counts"], **point["counts"]},
             "tokens": {**fixture["tokens"], **point["tokens"]}}
    point["trust"] = judge(Point.from_dict(whole))
    return point


def test_a_figure_the_bias_cannot_carry_past_its_bound_or_one_percent_is_not_doubted():
    p = _point()
    assert p["client"]["client_limited"]  # as the loop's lag alone said
    _judged(p)
    by = p["client"]["effects"]["latencies"]["by_figure"]
    assert {f: (v["bias_us"], v["doubted"]) for f, v in by.items()} == {
        "ttft": (7000.0, False),  # 40.6 ms p99, 459.4 ms from its 500 ms bound
        "itl": (7000.0, True),  # no SLO: 7 ms against a 10 ms median
        "tpot": (55.6, False),  # 7 ms over 126 gaps: 0.06 ms, 0.6% of 10 ms (and far from 50 ms)
        "e2e": (7000.0, False)}  # 0.5% of 1.3 s
    assert by["ttft"]["how"] == "ttft: 7.00 ms against the SLO ttft: p99 < 500ms (459.4 ms from its bound)"
    (doubt,) = p["trust"]["doubts"]
    assert doubt["figures"] == ["itl"] and "latencies moved (itl)" in doubt["message"]
    # a search whose SLO reads TTFT and TPOT is not held back by it
    assert verdict(p) == ("pass", [])


def test_a_point_whose_every_figure_holds_is_not_client_limited_and_says_why():
    p = _judged(_point(), SLO + [parse_threshold("itl", "p50 < 100ms")])
    assert p["client"]["client_limited"] is False and p["client"]["reasons"] == []
    assert p["trust"] == {"trusted": True, "doubts": []}
    assert p["client"]["self_check_note"].startswith("the client ran late (event-loop lag p99 7.0 ms")


def test_a_bias_that_could_carry_a_figure_across_its_bound_is_doubted():
    p = _point(lag_us=12_000)
    _judged(p, [parse_threshold("ttft", "p99 < 50ms")])  # 40.6 ms: 9.4 ms from the bound, 12 ms of bias
    assert p["client"]["effects"]["latencies"]["by_figure"]["ttft"]["doubted"]
    assert "ttft" in p["trust"]["doubts"][0]["figures"]


def test_the_client_sharing_its_cpus_with_the_server_is_named():
    lag = {"p99": 7000}
    assert effects.shares_cpus(lag, 20, 0.35, effects.on_loopback("http://127.0.0.1:8020/v1")) == (
        "the client shares its CPUs with the server (on loopback): its event loop ran 7.0 ms late at p99 "
        "while using 35% of a core")
    assert effects.shares_cpus(lag, 20, 0.35, effects.on_loopback("http://gpu-a:8000/v1")) is None
    assert effects.shares_cpus(lag, 20, 0.97, True) is None  # the client busy itself: its own CPU
    assert effects.on_loopback("http://localhost:8000/v1") and effects.on_loopback("http://[::1]:80/v1")
    # and the doubt of a point it limited says so
    p = _point()
    p["client"]["causes"].append(effects.shares_cpus(lag, 20, 0.35, True))
    (doubt,) = _judged(p)["trust"]["doubts"]
    assert doubt["message"].endswith("itl measure benchc; the client shares its CPUs with the server "
                                     "(on loopback): its event loop ran 7.0 ms late at p99 while using 35% "
                                     "of a core")


@pytest.mark.slow  # a capacity search on the simulator, the client's event loop slowed on purpose
def test_a_search_whose_slo_figures_the_late_client_cannot_move_decides(tmp_path, monkeypatch):
    """aiohttp dates every read on the event loop, blocked 30 ms in every 70: the loop's lag
    moves TTFT, ITL and TPOT, but 30 ms cannot carry an E2E p99 of under a second across a
    600 s bound. The search ended undecided (exit 8): every probe untrusted."""
    slowed_event_loop(monkeypatch)
    spec = write(tmp_path, "{over: concurrency, min: 1, max: 2, slo: {e2e: 'p99 < 600s'}}",
                 sim=", step_table: [[1, 40.0]]", out=16, requests=4)
    assert main(["run", spec, "--quiet", "--http", "aiohttp"]) == 0
    doc = read(str(tmp_path / "r.json"))
    (search,) = doc["search"]
    assert search["status"] == "at_max" and search["answer"] == 2, search  # decided: held up to max
    for p in doc["points"]:
        lat = p["client"]["effects"]["latencies"]
        assert lat["measure"] == "loop_lag_p99_us" and lat["value"] > effects.LOOP_LAG_P99_US
        assert lat["by_figure"]["e2e"]["doubted"] is False


def test_compare_judges_the_figures_a_client_limited_side_did_not_doubt():
    """compare printed n/a for every latency of a client-limited point; only the doubted ones
    (here ITL) are not judged now."""
    import copy

    from benchc.results.compare import compare_docs
    from tests.test_first_hour import MINIMAX, slower

    base = read(MINIMAX)
    new = copy.deepcopy(base)
    for p in new["points"]:
        slower(p, "itl", 1.3)
        slower(p, "e2e", 1.3)
        p["client"]["client_limited"] = True
        p["trust"] = {"trusted": False, "doubts": [{"check": "client_limited", "message": "m",
                                                    "fails_strict": True, "figures": ["itl"]}]}
    row = compare_docs(base, new)["points"][0]
    assert row["client_limited"] == ["new"]
    assert row["metrics"]["itl.p50"]["significant"] == "n/a"  # doubted: the client's
    assert row["metrics"]["e2e.p50"]["significant"] == "yes"  # 8 requests apart by 30%: judged
