"""load.cancel: a seeded fraction of a point's requests closed on purpose (run/loadgen.py),
counted apart from completed and failed requests, checked against the simulator's trace on
every client path."""

from __future__ import annotations

import json

import pytest

from benchc.cli import main
from benchc.metrics.aggregate import Tally, figures
from benchc.metrics.record import CANCELLED, RequestRecord
from benchc.metrics.recorder import PointRecorder
from benchc.plan.compiler import compile_spec
from benchc.results.document import read
from benchc.spec import loader
from tests.conftest import transports, use_transport
from tests.simrun import Sim, requests_of, write_spec

OUT = 60  # tokens each request is asked for (ignore_eos: exactly these, unless cancelled)


def test_the_rule_compiles_into_each_point_and_refuses_sessions(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(write_spec_text("  cancel: {fraction: 0.25, after: 1500ms}"))
    plan = compile_spec(loader.load(str(spec), env={}))
    assert [s.cancel for s in plan.load_steps()] == [{"fraction": 0.25, "after_s": 1.5}]
    assert all(s.cancel is None for s in plan.steps if s.kind == "warmup")  # warm-up is never cancelled
    spec.write_text(write_spec_text("  cancel: {fraction: 0.25}"))
    with pytest.raises(Exception, match=r"load.cancel"):
        compile_spec(loader.load(str(spec), env={}))


def write_spec_text(extra: str) -> str:
    return f"""\
version: 1
name: t
target: {{sim: {{preset: instant}}, model: m}}
workload:
  dataset:
    random: {{input_tokens: 8, output_tokens: 4}}
load:
  warmup: {{requests: 1}}
  sweep: {{concurrency: [2]}}
  requests: 10
{extra}
"""


def _record(i: int, error: str | None, planned: bool, chunks: int, first: bool) -> RequestRecord:
    r = RequestRecord(id=str(i), prompt_index=i, input_tokens=8, expected_output_tokens=None, t0_ns=1_000,
                      end_ns=9_000_000, error=error, cancel_planned=planned, text_chunks=chunks,
                      first_text_ns=2_001_000 if first else None)
    return r


def test_cancelled_requests_are_neither_completed_nor_errors_and_keep_their_partial_figures():
    rec = PointRecorder(2)
    rec.add(_record(0, CANCELLED, True, 5, True))
    rec.add(_record(1, CANCELLED, True, 0, False))  # closed before its first token
    rec.add(_record(2, CANCELLED, False, 3, True))  # a Ctrl-C's cancel: an error, as before
    f = figures(rec.tally)
    assert f["counts"]["sent"] == 3 and f["counts"]["completed"] == 0
    assert f["counts"]["cancelled"] == 2 and f["counts"]["errors"] == {CANCELLED: 1}
    block = f["cancelled"]
    assert (block["requests"], block["output_tokens"], block["with_first_token"]) == (2, 5, 1)
    assert block["ttft_us"]["count"] == 1 and block["ttft_us"]["p50"] == pytest.approx(2000, rel=0.01)
    assert f["tokens"]["output"] == 0  # the completed requests' figures hold none of theirs
    # a result's point gives back the tally it was made from, and shards add up
    again = Tally.total([Tally.from_point(f), Tally.from_point(f)])
    assert figures(again)["cancelled"]["requests"] == 4 and figures(again)["counts"]["cancelled"] == 4
    assert "cancelled" not in figures(PointRecorder(2).tally)["counts"]  # none: not there


@pytest.mark.slow  # end-to-end runs
@pytest.mark.parametrize("path", [*transports(), "aiohttp"])
def test_cancel_on_every_client_path_against_the_simulators_trace(tmp_path, monkeypatch, path):
    """Half the requests (by the seed) closed after 8 text chunks: each is `cancelled` with the
    tokens it read, the simulator saw the client go (reason client_gone) and freed its slot
    (its request retired with fewer tokens than asked), every other request completed in
    full, and the same requests are cancelled on every path."""
    args = ["--http", "aiohttp"] if path == "aiohttp" else []
    if path != "aiohttp":
        use_transport(monkeypatch, path)
    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4")
    try:
        spec = write_spec(tmp_path, sweep="    concurrency: [2]", out=OUT,
                          extra="  requests: 12\n  cancel: {fraction: 0.5, after_tokens: 8}")
        path = tmp_path / "s.yaml"
        # the seed pinned: it chooses the cancelled requests, the same on every path (a spec that
        # pins none draws one per run)
        path.write_text(path.read_text().replace("workload:", "workload:\n  sampling: {ignore_eos: true}", 1)
                        .replace("random: {", "random: {seed: 0, ", 1))
        assert main(["run", spec, "--base-url", sim.url, "--quiet", *args]) == 0
    finally:
        sim.close()
    (p,) = read(str(tmp_path / "r.json"))["points"]
    trace = sim.records()
    records = requests_of(tmp_path)
    cancelled = [r for r in records if r["error"] == CANCELLED]
    completed = [r for r in records if r["error"] is None]
    assert len(records) == 12 and len(cancelled) + len(completed) == 12
    assert 0 < len(cancelled) < 12
    assert p["counts"]["cancelled"] == len(cancelled) and p["counts"]["failed"] == 0
    assert p["counts"]["completed"] == len(completed)
    for r in cancelled:
        t = trace[r["id"]]
        assert t["reason"] == "client_gone"  # the server saw the client go, and retired it
        assert 8 <= r["output_tokens"] <= t["output_tokens"] < OUT
    for r in completed:
        assert r["output_tokens"] == OUT and trace[r["id"]]["reason"] == "length"
    assert p["cancelled"]["output_tokens"] == sum(r["output_tokens"] for r in cancelled)
    assert p["cancelled"]["with_first_token"] == len(cancelled)
    assert p["tokens"]["output"] == OUT * len(completed)  # completed requests' figures only
    chosen = sorted(r["prompt_index"] for r in cancelled)
    shared = tmp_path.parent / "cancelled-indices.json"  # the same on every path (the seed's)
    if shared.exists():
        assert json.loads(shared.read_text()) == chosen
    else:
        shared.write_text(json.dumps(chosen))


@pytest.mark.slow  # an end-to-end run
def test_cancel_after_a_time_closes_no_stream_before_it(tmp_path):
    """`after: 100ms`: a chosen request is closed 100 ms after its write, never before; the
    simulator retired it as gone with the tokens it had sent by then."""
    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4")
    try:
        spec = write_spec(tmp_path, sweep="    concurrency: [2]", out=OUT,
                          extra="  requests: 8\n  cancel: {fraction: 0.5, after: 100ms}")
        path = tmp_path / "s.yaml"
        # the seed pinned: it chooses the cancelled requests, the same on every path (a spec that
        # pins none draws one per run)
        path.write_text(path.read_text().replace("workload:", "workload:\n  sampling: {ignore_eos: true}", 1)
                        .replace("random: {", "random: {seed: 0, ", 1))
        assert main(["run", spec, "--base-url", sim.url, "--quiet"]) == 0
    finally:
        sim.close()
    trace = sim.records()
    cancelled = [r for r in requests_of(tmp_path) if r["error"] == CANCELLED]
    assert cancelled
    for r in cancelled:
        t = trace[r["id"]]
        assert t["reason"] == "client_gone" and t["output_tokens"] < OUT
        assert t["end_ns"] - r["t0_ns"] >= 100_000_000  # the server streamed to it for 100 ms at least
