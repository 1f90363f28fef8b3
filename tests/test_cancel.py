"""load.cancel: a seeded fraction of a point's requests closed on purpose (run/loadgen.py),
counted apart from completed and failed requests, checked against the simulator's trace on
every client path."""

from __future__ import annotations

import json

import pytest

from benchc.cli import main
from benchc.metrics.aggregate import Tally, figures
from benchc.metrics.record import CANCELLED, Outcome, RequestRecord, Times, Tokens
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


def _record(i: int, error: str | None, planned: bool, chunks: int, first: bool,
            interrupted: bool = False) -> RequestRecord:
    r = RequestRecord(id=str(i), prompt_index=i, input_tokens=8, expected_output_tokens=None,
                      times=Times(t0_ns=1_000, end_ns=9_000_000, first_text_ns=2_001_000 if first else None),
                      outcome=Outcome(error=error, cancel_planned=planned, interrupted=interrupted),
                      tokens=Tokens(text_chunks=chunks))
    return r


def test_cancelled_requests_are_neither_completed_nor_errors_and_keep_their_partial_figures():
    rec = PointRecorder(2)
    rec.add(_record(0, CANCELLED, True, 5, True))
    rec.add(_record(1, CANCELLED, True, 0, False))  # closed before its first token
    # a Ctrl-C's cancel (as run/loadgen.py marks it past the grace): cancelled too, not an error
    # as it was before (issue 45 item 13: docs/running.md counts it as `cancelled`)
    rec.add(_record(2, CANCELLED, True, 3, True, interrupted=True))
    f = figures(rec.tally)
    assert f["counts"]["sent"] == 3 and f["counts"]["completed"] == 0
    assert f["counts"]["cancelled"] == 3 and f["counts"]["errors"] == {} and f["counts"]["failed"] == 0
    assert f["error_rate"] == 0
    block = f["cancelled"]
    assert (block["requests"], block["output_tokens"], block["with_first_token"]) == (3, 8, 2)
    assert block["interrupted"] == 1  # the console tells Ctrl-C's apart
    assert block["ttft_us"]["count"] == 2 and block["ttft_us"]["p50"] == pytest.approx(2000, rel=0.01)
    assert f["tokens"]["output"] == 0  # the completed requests' figures hold none of theirs
    # a result's point gives back the tally it was made from, and shards add up
    again = figures(Tally.total([Tally.from_point(f), Tally.from_point(f)]))
    assert again["cancelled"]["requests"] == 6 and again["counts"]["cancelled"] == 6
    assert again["cancelled"]["interrupted"] == 2
    only_planned = PointRecorder(2)
    only_planned.add(_record(0, CANCELLED, True, 5, True))
    assert "interrupted" not in figures(only_planned.tally)["cancelled"]  # none: not there
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


def _running(url: str) -> int:
    """Requests the simulator is decoding now (its /metrics gauge)."""
    import urllib.request

    base = url.rsplit("/v1", 1)[0]
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("vllm:num_requests_running"):
                return int(float(line.split()[-1]))
    return 0


@pytest.mark.slow  # end-to-end runs, each through the 5 s grace
@pytest.mark.parametrize("path", ["native", "aiohttp"])
def test_ctrl_c_counts_the_requests_in_flight_past_the_grace_as_cancelled_not_failed(tmp_path, capfd, path):
    """Ctrl-C while both requests of a c=2 point decode answers far longer than the grace: the
    run exits 130 with the partial result, in which the two are counted as cancelled (the
    `cancelled` block says a Ctrl-C's), not failed, not in error_rate, and the point is not a
    failed one (before: counts.failed 2, errors {cancelled: 2}, error_rate 1.0)."""
    import os
    import signal
    import threading

    from benchc.results.failed import point_failure
    from tests.conftest import wait_for

    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4")
    try:
        spec = write_spec(tmp_path, sweep="    concurrency: [2]", out=20_000, extra="  requests: 4")
        f = tmp_path / "s.yaml"
        f.write_text(f.read_text().replace("workload:", "workload:\n  sampling: {ignore_eos: true}", 1))

        seen: list[bool] = []

        def interrupt() -> None:  # once both requests decode; a run that never gets there is stopped too
            try:
                wait_for(lambda: _running(sim.url) == 2, what="both requests of the point decoding")
                seen.append(True)
            finally:
                os.kill(os.getpid(), signal.SIGINT)
        t = threading.Thread(target=interrupt, daemon=True)
        t.start()
        code = main(["run", spec, "--base-url", sim.url, "--quiet", "--http", path,
                     "--set", "load.warmup.requests=0"])
        t.join(timeout=10)
    finally:
        sim.close()
    assert seen and code == 130
    doc = read(str(tmp_path / "r.json"))
    assert doc["interrupted"] is True and doc["complete"] is False
    (p,) = doc["points"]
    assert p["complete"] is False
    assert (p["counts"]["sent"], p["counts"]["completed"], p["counts"]["failed"]) == (2, 0, 0)
    assert p["counts"]["cancelled"] == 2 and p["counts"]["errors"] == {} and p["error_rate"] == 0
    assert p["cancelled"]["interrupted"] == 2 and p["cancelled"]["with_first_token"] == 2
    assert p["cancelled"]["output_tokens"] > 0  # what they read before the cancel is kept
    assert point_failure(p) is None
    records = requests_of(tmp_path)
    assert [r["error"] for r in records] == [CANCELLED, CANCELLED]
    err = capfd.readouterr().err
    assert "requests failed" not in err


def _interrupted_point(completed: int, interrupted: int, *, older: bool = False, http: int = 0) -> dict:
    """A recorded point that Ctrl-C stopped with `interrupted` requests in flight: counted as
    cancelled (or, `older`, as a result before this counted them: failed, error kind cancelled)."""
    from tests.conftest import REPO

    with open(f"{REPO}/tests/data/result-v1-minimax.json", encoding="utf-8") as f:
        p = json.load(f)["points"][0]
    errors = {"http_status": http} if http else {}
    sent = completed + interrupted + http
    if older:
        p["counts"].update(sent=sent, completed=completed, failed=interrupted + http,
                           errors={**errors, CANCELLED: interrupted})
    else:
        p["counts"].update(sent=sent, completed=completed, failed=http, errors=errors, cancelled=interrupted)
        p["cancelled"] = {"requests": interrupted, "output_tokens": 7, "with_first_token": 1,
                          "ttft_us": p["latency"]["ttft_us"], "interrupted": interrupted}
    p["complete"] = False
    return p


@pytest.mark.parametrize("older", [False, True])
def test_a_point_whose_only_losses_are_ctrl_cs_cancels_is_not_a_failed_point(older):
    """3 of 4 requests cancelled by Ctrl-C: before, 3 failed of 4 sent made it a failed point
    (more than half); they are the user's doing, in this result's counting and an older one's."""
    from benchc.results.failed import point_failure

    assert point_failure(_interrupted_point(1, 3, older=older)) is None
    assert point_failure(_interrupted_point(0, 3, older=older)) is None  # stopped before any completed
    # real failures still fail it, told without the cancels
    why = point_failure(_interrupted_point(1, 1, older=older, http=3))
    assert why is not None and why.startswith("3 of 5 requests failed (3 http_status")


def test_the_console_tells_ctrl_cs_cancels_counted_as_cancelled_apart_from_failures(capsys):
    from benchc.run.console import Console

    p = _interrupted_point(1, 3)
    p["trust"] = {"trusted": True, "doubts": []}  # the fixture's was judged before trust had doubts
    Console(quiet=False, live=False).point(p)
    err = capsys.readouterr().err
    assert "requests failed" not in err and "None" not in err
    [row] = [x for x in err.splitlines() if x.startswith("c=1 ")]
    assert row.endswith(" !partial")
    assert ("NOTE: c=1: partial: the point's load was stopped early; 3 requests in flight cancelled when the "
            "run was interrupted (counted as `cancelled`, not as failed)") in err


@pytest.mark.parametrize("older", [False, True])
def test_the_br_export_counts_ctrl_cs_cancels_as_incomplete(older):
    from benchc.results import br
    from benchc.results.document import validate_document
    from tests.conftest import REPO

    doc = read(f"{REPO}/tests/data/result-v1-minimax.json")
    doc["points"] = [_interrupted_point(1, 3, older=older, http=1)]
    validate_document(doc)
    req = br.to_reports(doc, "0.2")[0]["results"]["request_performance"]["aggregate"]["requests"]
    assert (req["total"], req["failures"], req["incomplete"]) == (5, 1, 3)
