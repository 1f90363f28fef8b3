"""A point's time series: the server's /metrics sampled every server.metrics_interval through
the point's window, beside the client's in flight and sends per interval (metrics/timeline.py,
run/telemetry.py server_series, run/point.py timeseries). The /metrics texts are
tests/data/metrics' (each server's names); end to end, the simulator's /metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchc.cli import main
from benchc.metrics.timeline import ClientSeries
from benchc.results.document import read
from benchc.run.telemetry import parse_prometheus, server_series, server_summary
from tests.test_telemetry import pair

S = 1_000_000_000


def test_preemptions_are_read_under_vllm_and_sglang_names():
    assert server_summary(*pair("vllm"), [], 1)["preemptions_delta"] == 5  # two engines summed
    assert server_summary(*pair("sglang"), [], 1)["preemptions_delta"] == 3  # SGLang's retractions
    assert "preemptions_delta" not in server_summary(*pair("llamacpp"), [], 1)  # llama.cpp has none


def test_server_series_keeps_the_samples_in_the_window_as_columns():
    before, after = pair("vllm")
    start = 100 * S
    # asked at: before the window, inside it (twice), after it
    samples = [(start - 1, after), (start, before), (start + S // 2, after), (start + 3 * S, after)]
    s = server_series(before, samples, start, start + 2 * S)
    assert s["available"] is True and s["kind"] == "vllm"
    assert s["t_s"] == [0.0, 0.5]
    assert s["running"] == [0.0, 5.0] and s["waiting"] == [0.0, 1.0]  # the fixtures' gauges, engines summed
    assert s["kv_cache_usage"][1] == after["kv_cache_usage"]
    # counters: their growth since the sample before the point (deltas of docs' fixture table)
    assert s["preemptions"] == [0, 5] and s["prefix_cache_hit_tokens"] == [0, 1536]
    # a sample that lacked a figure keeps its place, as null
    lacking = {k: v for k, v in after.items() if k != "waiting"}
    partial = server_series(before, [(start, lacking), (start + 1, after)], start, start + S)
    assert partial["waiting"] == [None, 1.0]


def test_server_series_says_when_there_is_none():
    before, _ = pair("vllm")
    unknown = parse_prometheus("# TYPE http_requests_total counter\nhttp_requests_total 3\n")
    assert server_series(None, [], 0, S) == {"available": False}
    assert server_series(unknown, [], 0, S) == {"available": False}
    assert server_series(before, [], None, None) == {"available": False}  # no request was sent
    # llama.cpp: no preemption counter, so no such column (rather than a column of made-up zeros)
    lb, la = pair("llamacpp")
    s = server_series(lb, [(0, la)], 0, S)
    assert "preemptions" not in s and s["running"] == [8.0] and s["prefix_cache_hit_tokens"] == [64]


def test_client_series_counts_per_interval_and_fills_the_gaps():
    c = ClientSeries(S, origin_ns=10 * S)
    for t, n in ((10 * S, 2), (10 * S + 1, 4), (13 * S, 1)):  # intervals 0 and 3
        c.sample_inflight(t, n)
    c.sent(10 * S + 5)
    c.sent(10 * S + 6)
    c.sent(13 * S)
    c.scheduled(12 * S)
    cols = c.columns(start_ns=10 * S + S // 2, open_loop=True)
    assert cols == {"t_s": [-0.5, 0.5, 1.5, 2.5], "in_flight": [3.0, None, None, 1.0],
                    "in_flight_max": [4, 0, 0, 1], "sends": [2, 0, 0, 1], "scheduled": [0, 0, 1, 0]}
    assert "scheduled" not in c.columns(10 * S, open_loop=False)
    empty = {"t_s": [], "in_flight": [], "in_flight_max": [], "sends": []}
    assert ClientSeries(S, 0).columns(0, False) == empty


def test_shards_series_add_on_the_earliest_grid_and_a_move_keeps_them_apart_by_the_shift():
    a, b = ClientSeries(S, 0), ClientSeries(S, S // 10)  # b started 0.1 s later: the same intervals
    for s in (a, b):
        s.sample_inflight(s.origin_ns, 2)
        s.sample_inflight(s.origin_ns + S, 3)
        s.sent(s.origin_ns)
    total = ClientSeries.total([b, a])
    assert total is not None
    assert total.columns(0, False) == {"t_s": [0.0, 1.0], "in_flight": [4.0, 6.0], "in_flight_max": [4, 6],
                                       "sends": [2, 0]}
    b.move(2 * S)  # a shard of another machine, placed on the driver's clock two seconds later
    moved = ClientSeries.total([a, b])
    assert moved is not None and moved.columns(0, False)["in_flight"] == [2.0, 3.0, 2.0, 3.0]
    assert ClientSeries.total([]) is None


def test_the_interval_is_a_spec_field_with_a_floor(tmp_path, capsys):
    from tests.simrun import write_spec

    spec = tmp_path / "s.yaml"
    text_ = Path(write_spec(tmp_path, sweep="    concurrency: [1]", extra="  requests: 1")).read_text()
    text_ += "server:\n  metrics_interval: 10ms\n"
    spec.write_text(text_)
    assert main(["validate", str(spec)]) == 2
    err = capsys.readouterr().err
    line = text_.splitlines().index("  metrics_interval: 10ms") + 1
    assert f"s.yaml:{line}:" in err and "'10ms' is shorter than the 50ms" in err
    spec.write_text(text_.replace("10ms", "250ms"))
    assert main(["plan", str(spec)]) == 0
    server = json.loads(capsys.readouterr().out)["combinations"][0]["server"]
    # a section that only says how to sample is about the target's server: attached, never launched
    assert server["metrics_interval_s"] == 0.25 and server["attach"] is True and server["command"] is None


@pytest.mark.slow  # two timed points against the simulator
def test_every_point_has_window_over_interval_samples_and_the_clients_side(tmp_path):
    from tests.simrun import write_spec

    spec = write_spec(tmp_path, sweep="    concurrency: [2, 8]", out=64, extra="  duration: 2s")
    with open(spec, "a") as f:
        f.write("server:\n  metrics_interval: 200ms\n")
    assert main(["run", spec, "--quiet"]) == 0
    doc = read(str(tmp_path / "r.json"))
    assert len(doc["points"]) == 2
    for p in doc["points"]:
        c = p["params"]["concurrency"]
        ts = p["timeseries"]
        assert ts["interval_s"] == 0.2
        server, window = ts["server"], p["window"]["duration_s"]
        n = len(server["t_s"])
        # every tick of the window is a sample, or counted skipped (a loop on a busy machine late
        # by half an interval; an idle one skips none)
        assert abs(n + server["skipped"] - window / 0.2) <= 1, (n, server["skipped"], window)
        # stamped with their ticks: a whole number of intervals apart
        gaps = [(b - a) / 0.2 for a, b in zip(server["t_s"], server["t_s"][1:], strict=False)]
        assert n >= 2 and all(round(g) >= 1 and abs(g - round(g)) < 1e-3 for g in gaps), server["t_s"]
        assert all(0 <= t <= window for t in server["t_s"]) and server["t_s"] == sorted(server["t_s"])
        for column in ("running", "waiting", "kv_cache_usage", "preemptions", "prefix_cache_hit_tokens"):
            assert len(server[column]) == n and None not in server[column], column
        # a closed loop of c: the simulator never runs more, and runs all c at some sample
        assert max(server["running"]) == c and min(server["running"]) >= 0
        assert 0 < max(server["kv_cache_usage"]) <= 1
        assert server["preemptions"] == [0] * n  # the simulator never preempts
        client = ts["client"]
        assert sum(client["sends"]) == p["counts"]["sent"]
        assert max(client["in_flight_max"]) == c and "scheduled" not in client
        assert len(client["t_s"]) == len(client["in_flight"]) and abs(len(client["t_s"]) - window / 0.2) <= 2



def test_a_scrape_unanswered_when_the_point_ends_is_a_skipped_tick(monkeypatch):
    """Every tick is a sample or counted `skipped` (docs/report.md): a scrape still in flight
    when the point ends is cancelled, and its tick was counted as neither."""
    import asyncio

    from benchc.run import point_telemetry

    asked = []

    async def scrape(session, root):
        asked.append(root)
        if len(asked) == 1:
            return {"kind": "vllm"}  # before the point
        await asyncio.Event().wait()  # during it: a server that never answers /metrics

    async def point() -> point_telemetry.PointTelemetry:
        monkeypatch.setattr(point_telemetry, "scrape", scrape)
        t = point_telemetry.PointTelemetry(None, "http://x", interval_s=0.05)  # type: ignore[arg-type]
        monkeypatch.setattr(t.gpu, "start", lambda: asyncio.sleep(0, False))
        async with t.around():
            while len(t._scrapes) < 2:
                await asyncio.sleep(0.01)
            monkeypatch.setattr(point_telemetry, "scrape", lambda s, r: asyncio.sleep(0, None))
        return t

    t = asyncio.run(point())
    assert t.samples == [] and len(t.skipped) >= 2
    assert len(t.skipped) == len(set(t.skipped))  # each tick once
