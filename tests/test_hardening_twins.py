"""Hardening round 4, class 5 (issue 44): a twin file's `sim` keys are judged by the ranges
the spec schema gives target.sim and `benchc sim --param` (spec/values.py), so a twin cannot
set what a spec could not: `validate`, the plan compiler and the simulator refuse it, exit 2,
naming the file and the key."""

import os

import pytest
import yaml

from benchc.cli import main
from benchc.sim.model import PARAMS
from benchc.sim.twin import read_twin
from benchc.spec import values
from tests.conftest import REPO

KIMI = os.path.join(REPO, "tests", "data", "result-v1-kimi.json")
SPEC = """\
version: 1
name: t
target:
  sim: {{preset: {preset}}}
  model: m
workload:
  dataset:
    random: {{input_tokens: 32, output_tokens: 8}}
load:
  sweep:
    concurrency: [1]
  requests: 2
"""


@pytest.fixture(scope="module")
def fitted(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("fit") / "twin.yaml"
    assert main(["fit", KIMI, "-o", str(out)]) == 0
    return yaml.safe_load(out.read_text())


BAD = [
    ({"max_num_seqs": 0}, "sim.max_num_seqs: 0 is less than the minimum of 1"),
    ({"max_num_seqs": -4}, "sim.max_num_seqs: -4 is less than the minimum of 1"),
    ({"tokens_per_step": 0}, "sim.tokens_per_step: 0 is less than the minimum of 1"),
    ({"step_table": [[1, 10.0], [1, 12.0], [4, 20.0]]},
     "sim.step_table: the batch sizes must increase from pair to pair, each once (got 1, 1, 4)"),
    ({"step_table": [[4, 20.0], [2, 12.0]]}, "sim.step_table: the batch sizes must increase"),
    ({"step_table": [[1, -5.0], [2, 12.0]]}, "sim.step_table[0][1]: -5.0 is less than the minimum of 0"),
    ({"step_table": [[0, 5.0], [2, 12.0]]}, "sim.step_table[0][0]: 0 is less than the minimum of 1"),
    ({"frontend_growth": [[8, 1.0], [4, 2.0]]}, "sim.frontend_growth: the held counts must increase"),
    ({"block_size": 0}, "sim.block_size: 0 is less than the minimum of 1"),
    ({"parallel_tool_calls": 0}, "sim.parallel_tool_calls: 0 is less than the minimum of 1"),
    ({"jitter": float("nan")}, "sim.jitter: NaN and infinity are not allowed"),
    ({"prefill_tok_s": float("inf")}, "sim.prefill_tok_s: NaN and infinity are not allowed"),
    ({"max_num_seqs": "many"}, "sim.max_num_seqs: 'many' is not of type 'integer'"),
    ({"gpu_idle_w": -60.0}, "sim.gpu_idle_w: -60.0 is less than the minimum of 0"),
    ({"host": "0.0.0.0"}, "sim.host: '0.0.0.0' is not this machine"),
    # a step (or wait) past an hour holds every request to its timeout, as zero tokens per step did
    ({"step_table": [[1, 1.0e300], [2, 2.0e300]]},
     "sim.step_table[0][1]: 1e+300 is greater than the maximum of 3600000"),
    ({"frontend_ms": 1.0e12}, "sim.frontend_ms: 1000000000000.0 is greater than the maximum of 3600000"),
]


def _twin(tmp_path, fitted: dict, change: dict) -> str:
    doc = {**fitted, "sim": {**fitted["sim"], **change}}
    f = tmp_path / "twin.yaml"
    f.write_text(yaml.safe_dump(doc))
    return str(f)


@pytest.mark.parametrize("change, message", BAD)
def test_a_twin_out_of_the_simulators_ranges_is_refused_by_every_reader(tmp_path, capsys, fitted,
                                                                      change, message):
    path = _twin(tmp_path, fitted, change)
    with pytest.raises(ValueError) as e:
        read_twin(path)
    assert str(e.value).startswith(f"{path}: ") and message in str(e.value)
    # validate (the plan compiler) calls it invalid, exit 2, naming the file and the key
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(preset="twin.yaml"))
    assert main(["validate", str(spec)]) == 2
    err = capsys.readouterr().err
    assert path in err and message in err and "Traceback" not in err
    # the simulator refuses it before it listens
    assert main(["sim", "--preset", path, "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_twin_holding_an_infinite_batch_anywhere_is_refused_not_crashed_on(tmp_path, capsys, fitted):
    doc = {**fitted, "fitted_range": {**fitted["fitted_range"], "batch": [1, float("inf")]}}
    f = tmp_path / "twin.yaml"
    f.write_text(yaml.safe_dump(doc))
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(preset="twin.yaml"))
    assert main(["validate", str(spec)]) == 2  # was an internal error (OverflowError), exit 4
    err = capsys.readouterr().err
    assert f"{f}: fitted_range.batch.1: NaN and infinity are not allowed" in err
    assert "Traceback" not in err


def test_the_twin_fit_writes_is_within_the_ranges(tmp_path, fitted):
    assert values.sim_param_problems(fitted["sim"], PARAMS) == []
    assert read_twin(_twin(tmp_path, fitted, {}))["sim"] == fitted["sim"]


def test_the_ranges_describe_every_simulator_parameter():
    assert sorted(values.sim_param_names()) == sorted(PARAMS)


@pytest.mark.parametrize("line, message", [
    ("target.sim.step_table=[[1, 10.0], [1, 12.0]]", "the batch sizes must increase"),
    ("target.sim.host=0.0.0.0", "'0.0.0.0' is not this machine"),
])
def test_a_spec_and_sim_param_are_held_to_the_same_ordering_and_host(tmp_path, capsys, line, message):
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(preset="instant"))
    assert main(["validate", str(spec), "--set", line]) == 2
    err = capsys.readouterr().err
    key = line.split("=")[0]
    assert f"--set {key}: $.{key}: " in err and message in err  # where it came from, and its path
    assert main(["sim", "--param", line.removeprefix("target.sim."), "--port", "0"]) == 2
    assert message in capsys.readouterr().err
