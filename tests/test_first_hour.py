"""Issue 31, the first hour: a newcomer's failures are loud, figures carry their units, and
what a result measured is said."""

import copy
import json
import os

import pytest

from benchc.cli import main
from benchc.results.slo import evaluate_slo, failed_checks
from benchc.run.console import Console
from benchc.spec.thresholds import parse_threshold
from tests.conftest import REPO
from tests.test_run import Sim

MINIMAX = os.path.join(REPO, "tests", "data", "result-v1-minimax.json")


def a_point() -> dict:
    with open(MINIMAX, encoding="utf-8") as f:
        return copy.deepcopy(json.load(f)["points"][0])


def failed_point() -> dict:
    """A point whose every request failed, as a wrong model name makes one."""
    p = a_point()
    for block in p["latency"].values():
        for k in ("mean", "p50", "p99"):
            block[k] = None
    p["counts"].update(completed=0, failed=2, sent=2, errors={"http_status": 2},
                       error_examples={"http_status": "404: The model `foo` does not exist."})
    p["trust"] = {"trusted": True, "doubts": []}
    return p


def test_slo_checks_carry_their_unit_and_failure_lines_print_it():
    p = a_point()
    checks = [parse_threshold("ttft", "p99 < 1ms"), parse_threshold("error_rate", "> 5%"),
              parse_threshold("output_tok_s", "> 1000000")]
    p["slo"] = evaluate_slo(checks, p)
    assert [c["unit"] for c in p["slo"]["checks"]] == ["us", "fraction", "tok/s"]
    ttft, rate, tok = failed_checks([p])
    assert ttft == f"c=1: ttft: p99 < 1ms (measured {p['latency']['ttft_us']['p99'] / 1000:.1f}ms)"
    assert rate == "c=1: error_rate: > 5% (measured 0.00%)"
    assert tok == f"c=1: output_tok_s: > 1000000 (measured {p['throughput']['output_tok_s']:,.1f} tok/s)"


def test_a_check_on_a_point_that_measured_nothing_says_why_not_none():
    p = failed_point()
    p["slo"] = evaluate_slo([parse_threshold("ttft", "p99 < 500ms")], p)
    assert failed_checks([p]) == ["c=1: ttft: p99 < 500ms (measured nothing: none of 2 requests completed)"]


def test_the_console_shows_the_first_error_of_a_failed_point(capsys):
    Console(quiet=False, live=False).point(failed_point())
    err = capsys.readouterr().err
    assert ("ERROR: c=1: 2 of 2 requests failed; first error (http_status): "
            "404: The model `foo` does not exist.") in err


@pytest.mark.slow  # a run against the simulator as a process
@pytest.mark.parametrize("verbose", [[], ["-v"]])
def test_a_wrong_model_name_is_loud_on_the_console(tmp_path, capfd, verbose):
    sim = Sim(tmp_path)
    try:
        spec = tmp_path / "s.yaml"
        spec.write_text("version: 1\nname: t\ntarget: {base_url: 'http://127.0.0.1:9/v1', model: foo}\n"
                        "workload: {dataset: {random: {input_tokens: 8, output_tokens: 4}}}\n"
                        "load: {sweep: {concurrency: [1]}, requests: 2}\nslo: {ttft: 'p99 < 500ms'}\n")
        code = main(["run", str(spec), "--base-url", sim.url, "--out", str(tmp_path / "r.json"), *verbose])
    finally:
        sim.close()
    err = capfd.readouterr().err
    assert code == 1
    assert "first error (http_status): 404: " in err and "The model `foo` does not exist." in err
    assert "ttft: p99 < 500ms (measured nothing: none of 2 requests completed)" in err
    assert "None" not in err
