"""`benchc run` end to end against the simulator on loopback, checked against its trace."""

import os
import signal
import subprocess
import sys

import pytest

from benchc.cli import main
from benchc.client._rxloop import MODULE as RX_LOOP
from benchc.results.document import read, validate_document
from tests.conftest import REPO, wait_for
from tests.simrun import Sim, requests_of, run_on_sim, write_spec


@pytest.mark.slow  # the whole demo spec, as the README runs it
def test_demo_spec_runs_and_result_validates(tmp_path, capsys):
    out = str(tmp_path / "demo.json")
    assert main(["run", os.path.join(REPO, "specs", "demo.yaml"), "--out", out,
                 "--set", "load.requests=4", "--set", "load.sweep.concurrency=[1, 2]"]) == 0
    doc = read(out)
    assert doc["complete"] is True and [p["id"] for p in doc["points"]] == ["c=1", "c=2"]
    p = doc["points"][0]
    assert p["counts"] == {"sent": 4, "completed": 4, "failed": 0, "retries": 0, "errors": {},
                           "error_examples": {}, "slo_met": 4, "inputs": 4}
    assert p["tokens"]["output"] == 4 * 64 and p["tokens"]["output_method"] == "usage"
    assert p["tokens"]["chunks_vs_usage"]["relative_difference"] == 0.0
    assert p["tokens"]["osl"] == {"requests_checked": 4, "mismatched": 0}
    assert p["latency"]["ttft_us"]["hdr"].startswith("HISTFAAA")
    assert doc["core"] in ("cython", "python") and doc["slo"]["passed"] is True
    err = capsys.readouterr().err
    assert "out tok/s" in err and "c=2" in err


@pytest.mark.slow
def test_latencies_and_counts_agree_with_the_simulator_trace(tmp_path):
    """Each request's timings sit where the simulator's own trace says they must.

    The simulator stamps a chunk just before writing it; the client's stamp of the read is the
    kernel's receive time, and on loopback the bytes are received inside that write. So, on one
    machine's monotonic clock, a request's first text arrives after the simulator's first text
    write and before its second (the engine writes chunk k before it stamps chunk k+1), and the
    request ends after its last write. A TTFT taken from the role-only chunk (sent before
    prefill), or an end taken before [DONE], breaks these orderings. How close the client comes
    to the trace in milliseconds is benchmarks/accuracy.py's to report, not a test's to bound.
    """
    from benchc.client import http1

    if not http1.KERNEL_STAMPS:
        pytest.skip("reads carry kernel receive stamps on Linux only; the orderings need them")
    doc, trace = run_on_sim(tmp_path, sweep="    concurrency: [1, 2, 4, 8]", out=32, extra="  requests: 8")
    records = requests_of(tmp_path)
    assert len(records) == 32 and all(r["error"] is None for r in records)
    for r in records:
        tr = trace[r["id"]]
        writes = [t for t, _ in tr["chunks"]]
        first_text = r["t0_ns"] + r["ttft_us"] * 1e3
        end = r["t0_ns"] + r["e2e_us"] * 1e3
        assert writes[0] <= first_text <= writes[1], (r["id"], writes[:2], first_text)
        assert end >= tr["end_ns"]
        assert r["output_tokens"] == tr["output_tokens"] == 32
    for point in doc["points"]:
        recs = [r for r in records if r["point"] == point["id"]]
        assert point["counts"]["completed"] == len(recs) == 8
        assert point["tokens"]["output"] == sum(trace[r["id"]]["output_tokens"] for r in recs)
        window = point["window"]
        assert window["start_ns"] == min(r["t0_ns"] for r in recs)
        assert window["end_ns"] >= max(trace[r["id"]]["end_ns"] for r in recs)
        # from the window's own stamps: duration_s is rounded to the microsecond, the rate is not
        rate = round(point["tokens"]["output"] / ((window["end_ns"] - window["start_ns"]) / 1e9), 3)
        assert point["throughput"]["output_tok_s"] == rate


@pytest.mark.slow  # a run per transport
@pytest.mark.parametrize("http,rx_loop", [("native", "auto"), ("native", "off"), ("aiohttp", "auto")])
def test_every_fault_is_counted_by_kind_and_the_run_finishes(tmp_path, http, rx_loop):
    doc, trace = run_on_sim(tmp_path, "--param", "step_table=[[1, 1.0]]", "--fault", "http_503:0.15",
                            "--fault", "http_429:0.1", "--fault", "reset:0.1", "--fault", "malformed:0.1",
                            "--param", "seed=4", sweep="    concurrency: [4]", out=8, extra="  requests: 60",
                            run_args=["--http", http, "--rx-loop", rx_loop])
    assert doc["environment"]["http_client"] == http
    p = doc["points"][0]
    # the point says which transport read its requests, and what the receive loop cost
    path = "aiohttp" if http == "aiohttp" else "rx_loop" if rx_loop == "auto" and RX_LOOP else "asyncio"
    assert p["client"]["transport"] == {path: 60}
    if path == "rx_loop":
        rx = p["client"]["rx_loop"]
        assert rx["reads"] > 0 and rx["lag_us"]["count"] == rx["reads"] and rx["cpu_s"] > 0
    else:
        assert "rx_loop" not in p["client"]
    errors = p["counts"]["errors"]
    assert set(errors) == {"http_status", "stream_broken", "malformed_chunk"}
    faults = [t["fault"] for t in trace.values()]
    assert errors["stream_broken"] == faults.count("reset")
    assert errors["malformed_chunk"] == faults.count("malformed")
    assert p["counts"]["sent"] == 60 and p["counts"]["completed"] + p["counts"]["failed"] == 60
    assert "503" in p["counts"]["error_examples"]["http_status"] or \
        "429" in p["counts"]["error_examples"]["http_status"]


def test_unreachable_target_aborts_before_any_load(tmp_path, capsys):
    spec = write_spec(tmp_path)
    assert main(["run", spec, "--base-url", "http://127.0.0.1:9/v1", "--quiet"]) == 3
    assert "cannot reach the target" in capsys.readouterr().err


@pytest.mark.slow
def test_open_loop_overload_shows_in_latency_from_schedule(tmp_path):
    spec = write_spec(tmp_path, sweep="    rate: [40/s]\n    max_concurrency: 2", out=16,
                      extra="  requests: 16")
    assert main(["run", spec, "--quiet"]) == 0
    p = read(str(tmp_path / "r.json"))["points"][0]
    lat = p["latency"]
    # Two slots of ~0.2 s each cannot keep up with 40 arrivals/s: arrivals wait in the client.
    assert lat["e2e_from_schedule_us"]["p99"] > 2 * lat["e2e_us"]["p99"]
    assert lat["e2e_us"]["max"] < 2 * lat["e2e_us"]["min"]
    assert p["client"]["send_skew_us"]["max"] > 500_000


@pytest.mark.slow
def test_sigint_writes_a_partial_result_and_exits_130(tmp_path):
    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4")
    spec = write_spec(tmp_path, sweep="    concurrency: [2, 4]", out=48, extra="  requests: 40")
    cmd = [sys.executable, "-m", "benchc", "run", spec, "--quiet", "--base-url", sim.url,
           "--set", "load.warmup.requests=0"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # two requests of the first point have finished: interrupt in the middle of it
        wait_for(lambda: sim.trace.exists() and len(sim.trace.read_text().splitlines()) >= 2,
                 what="two finished requests in the simulator's trace")
        p.send_signal(signal.SIGINT)
    finally:
        out, err = p.communicate(timeout=60)
        sim.close()
    out, err = p.communicate(timeout=30)
    assert p.returncode == 130, err
    doc = read(str(tmp_path / "r.json"))
    assert doc["complete"] is False and doc["interrupted"] is True
    assert len(doc["points"]) == 1 and doc["points"][0]["complete"] is False
    assert doc["points"][0]["counts"]["sent"] >= 2


def test_result_validation_refuses_unknown_versions():
    from benchc.errors import ResultFormatError

    with pytest.raises(ResultFormatError, match="schema_version 9 is not one this benchc reads"):
        validate_document({"schema_version": 9})


@pytest.mark.slow  # an end-to-end run
def test_continuous_usage_gives_per_token_itl_and_shows_multi_token_chunks(tmp_path):
    spec = write_spec(tmp_path, sweep="    concurrency: [2]", out=20, extra="  requests: 4",
                      sim=", tokens_per_step: 2", target="\n  continuous_usage_stats: true")
    assert main(["run", spec, "--quiet"]) == 0
    p = read(str(tmp_path / "r.json"))["points"][0]
    assert p["tokens"]["multi_token_chunks"] == 4 * 10  # every chunk carried two tokens
    assert p["tokens"]["output"] == 80 and p["tokens"]["chunks_vs_usage"]["chunks"] == 40
    itl, per_token = p["latency"]["itl_us"], p["latency"]["itl_per_token_us"]
    assert per_token["count"] == 2 * itl["count"]
    assert per_token["p50"] == pytest.approx(itl["p50"] / 2, rel=0.02)


def test_fewer_chunks_than_tokens_asked_is_no_output_length_mismatch_without_usage(tmp_path, capsys):
    """A server that sends no usage and two tokens per chunk honoured ignore_eos; counted per
    chunk, every request looked half as long as asked, and --strict failed a correct server.
    The point's doubts are what --strict fails on; a busy machine may add the client's own
    (client_limited), which is not this test's, so the output-length doubt is asked for by name."""
    spec = write_spec(tmp_path, sweep="    concurrency: [2]", out=20, extra="  requests: 4",
                      sim=", tokens_per_step: 2, ignored_params: [stream_options]")
    assert main(["run", spec, "--strict", "--quiet"]) in (0, 6), capsys.readouterr().err
    p = read(str(tmp_path / "r.json"))["points"][0]
    doubts = {d["check"] for d in p["trust"]["doubts"]}
    assert doubts <= {"client_limited"}, p["trust"]
    assert p["tokens"]["output_method"] == "chunks" and p["tokens"]["output"] == 4 * 10
    assert p["tokens"]["osl"]["requests_checked"] == 0  # nobody can tell from chunks alone


def test_a_closed_loop_with_fewer_requests_than_slots_sends_only_its_requests(tmp_path):
    """A closed loop's slots count a request as they decide it: eight slots for three requests
    (and for the warm-up's one) each started a request of their own before any was counted."""
    doc, trace = run_on_sim(tmp_path, sweep="    concurrency: [8]", out=4, extra="  requests: 3")
    (p,) = doc["points"]
    assert (p["counts"]["sent"], p["counts"]["completed"]) == (3, 3)
    assert len(trace) == 1 + 3  # the warm-up's one request, then the point's three


@pytest.mark.slow  # end-to-end runs
def test_ignored_ignore_eos_is_flagged_and_strict_exits_6(tmp_path, capsys):
    spec = write_spec(tmp_path, sweep="    concurrency: [2]", out=30, extra="  requests: 6",
                      sim=", eos_prob: 0.2, seed: 1, ignored_params: [ignore_eos]")
    assert main(["run", spec, "--strict"]) == 6
    err = capsys.readouterr().err
    assert "WARNING: c=2: " in err and "ignore_eos or min_tokens ignored by the server?" in err
    p = read(str(tmp_path / "r.json"))["points"][0]
    assert p["tokens"]["osl"]["requests_checked"] == 6 and p["tokens"]["osl"]["mismatched"] >= 5


@pytest.mark.slow
def test_littles_law_holds_in_a_closed_loop(tmp_path):
    spec = write_spec(tmp_path, sweep="    concurrency: [4]", out=16, extra="  requests: 16")
    assert main(["run", spec, "--quiet"]) == 0
    little = read(str(tmp_path / "r.json"))["points"][0]["little"]
    # 4 in flight throughout except the tail; sampled every 5 ms against lambda x W.
    assert little["ratio"] == pytest.approx(1.0, abs=0.15)
