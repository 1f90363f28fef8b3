"""Issue 45, the first hour (round 2): a run says what it measured (the server, not a simulator
the spec names), vLLM bench habits are understood or refused by name, and an interrupted or
capped point says what happened to its requests."""

import json
import os

import pytest

from benchc.cli import main
from benchc.results.document import read
from benchc.results.identity import result_label, target_of
from tests.conftest import REPO
from tests.simrun import Sim, write_spec

MINIMAX = os.path.join(REPO, "tests", "data", "result-v1-minimax.json")


def test_plan_takes_base_url_and_it_replaces_the_simulator(tmp_path, capsys):
    spec = write_spec(tmp_path)
    assert main(["plan", spec, "--base-url", "http://gpu-a:8000/v1"]) == 0
    target = json.loads(capsys.readouterr().out)["combinations"][0]["target"]
    assert (target["base_url"], target["sim"]) == ("http://gpu-a:8000/v1", None)


def test_plan_base_url_is_checked_as_run_checks_it(tmp_path, capsys):
    assert main(["plan", write_spec(tmp_path), "--base-url", "gpu-a:8000"]) == 2
    assert "--base-url" in capsys.readouterr().err


@pytest.mark.slow  # a run against the simulator as a process
def test_base_url_on_a_simulator_spec_measures_and_names_that_server(tmp_path, capsys):
    """The spec names target.sim; --base-url points the run at another server: no simulator is
    started, and the result, its label and the llm-d export name the server measured."""
    sim = Sim(tmp_path, "--preset", "instant", "--model", "MiniMaxAI/MiniMax-M2.5")
    try:
        spec = write_spec(tmp_path, sweep="    concurrency: [1]", extra="  requests: 2")
        assert main(["run", spec, "--base-url", sim.url, "--quiet"]) == 0
        served = len(sim.records())
    finally:
        sim.close()
    doc = read(str(tmp_path / "r.json"))
    assert served == 3  # the warmup's request and the point's two: all went to --base-url
    [t] = doc["target"]
    assert t["simulated"] is False and t["base_url"] == sim.url
    assert doc["plan"]["combinations"][0]["target"]["sim"] is None
    host = sim.url.split("//")[1].rstrip("/")
    assert target_of(doc).startswith(host) and "sim " not in result_label(doc, "r.json")
    capsys.readouterr()
    assert main(["export", str(tmp_path / "r.json"), "--format", "br0.2"]) == 0
    [report] = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    server = report["scenario"]["stack"][0]
    assert (server["native"]["config"]["base_url"], server["native"]["config"]["sim"]) == (sim.url, None)

