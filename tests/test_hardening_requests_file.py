"""Hardening round 4, class 8 (issue 44): a result's per-request file is bound to it. Every
record names the run (`run_id`, which the result holds too) and the result keeps the file's
SHA-256 (`requests_sha256`): another run's `*.requests.jsonl` under the result's name, or a
file changed after the run, is refused by export (exit 5, saying which). Files and results
written before the binding stay readable."""

import hashlib
import json
import os
import shutil

import pytest

from benchc.cli import main
from benchc.results.document import read
from tests.simrun import write_spec

DATA = os.path.join(os.path.dirname(__file__), "data")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Runs of one spec: a/r.json and c/r.json (3 requests: repeats of one plan), b/r.json (7)."""
    out = {}
    for name, n in (("a", 3), ("b", 7), ("c", 3)):
        d = tmp_path_factory.mktemp(name)
        spec = write_spec(d, sweep="    concurrency: [1]", out=4, extra=f"  requests: {n}")
        assert main(["run", spec]) == 0
        out[name] = d
    return out


def test_each_record_names_the_run_and_the_result_keeps_the_files_hash(two_runs, capsys):
    d = two_runs["a"]
    doc = read(str(d / "r.json"))
    raw = (d / "r.requests.jsonl").read_bytes()
    records = [json.loads(x) for x in raw.splitlines()]
    assert len(records) == 3 and len(doc["run_id"]) == 32
    assert {r["run_id"] for r in records} == {doc["run_id"]}
    assert doc["requests_sha256"] == hashlib.sha256(raw).hexdigest()
    assert doc["run_id"] != read(str(two_runs["b"] / "r.json"))["run_id"]
    capsys.readouterr()
    assert main(["export", str(d / "r.json"), "--format", "jsonl"]) == 0
    assert capsys.readouterr().out.encode() == raw


@pytest.mark.parametrize("fmt", ["jsonl", "vllm"])
def test_another_runs_requests_file_under_the_name_is_refused(two_runs, tmp_path, capsys, fmt):
    shutil.copy(two_runs["a"] / "r.json", tmp_path / "r.json")
    shutil.copy(two_runs["b"] / "r.requests.jsonl", tmp_path / "r.requests.jsonl")
    capsys.readouterr()
    assert main(["export", str(tmp_path / "r.json"), "--format", fmt]) == 5
    err = capsys.readouterr().err
    mine, theirs = (read(str(two_runs[k] / "r.json"))["run_id"] for k in ("a", "b"))
    assert f"r.requests.jsonl is another run's per-request file (its records are of run {theirs}; " \
           f"this result is run {mine})" in err
    assert "Traceback" not in err


def test_a_requests_file_changed_after_the_run_is_refused(two_runs, tmp_path, capsys):
    shutil.copy(two_runs["a"] / "r.json", tmp_path / "r.json")
    lines = (two_runs["a"] / "r.requests.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "r.requests.jsonl").write_text("".join(lines[:2]))  # one record left out
    capsys.readouterr()
    assert main(["export", str(tmp_path / "r.json"), "--format", "jsonl"]) == 5
    assert "is not the per-request file this result was written with" in capsys.readouterr().err


def test_a_bound_file_beside_an_unbound_result_is_refused_and_old_pairs_stay_readable(two_runs, tmp_path,
                                                                                         capsys):
    # the fixture pair, written before the binding: read as it is
    assert main(["export", os.path.join(DATA, "result-v1-shard-a.json"), "--format", "jsonl"]) == 0
    with open(os.path.join(DATA, "result-v1-shard-a.requests.jsonl")) as f:
        assert capsys.readouterr().out == f.read()
    # that old result with a new run's records under its name
    shutil.copy(os.path.join(DATA, "result-v1-shard-a.json"), tmp_path / "r.json")
    doc = read(str(tmp_path / "r.json"))
    doc["requests_file"] = "r.requests.jsonl"
    (tmp_path / "r.json").write_text(json.dumps(doc))
    shutil.copy(two_runs["b"] / "r.requests.jsonl", tmp_path / "r.requests.jsonl")
    assert main(["export", str(tmp_path / "r.json"), "--format", "jsonl"]) == 5
    assert "a result written before per-request files named their run" in capsys.readouterr().err


def test_a_merged_result_names_no_run(two_runs, tmp_path):
    out = tmp_path / "m.json"
    assert main(["merge", "--repeats", str(two_runs["a"] / "r.json"), str(two_runs["c"] / "r.json"),
                 "-o", str(out)]) == 0
    doc = read(str(out))
    assert "run_id" not in doc and "requests_sha256" not in doc and doc["requests_file"] is None


def test_a_record_nested_past_the_stack_is_refused_naming_its_line(tmp_path, capsys):
    shutil.copy(os.path.join(DATA, "result-v1-shard-a.json"), tmp_path / "r.json")
    with open(os.path.join(DATA, "result-v1-shard-a.requests.jsonl")) as f:
        good = f.read()
    deep = '{"point": "x", "t0_ns": 1, "deep": ' + "[" * 100_000 + "]" * 100_000 + "}\n"
    (tmp_path / "result-v1-shard-a.requests.jsonl").write_text(good + deep)
    assert main(["export", str(tmp_path / "r.json"), "--format", "jsonl"]) == 5  # was exit 4, a traceback
    err = capsys.readouterr().err
    n = good.count("\n") + 1
    assert f"result-v1-shard-a.requests.jsonl line {n}: a JSON record nested too deep to read" in err
    assert "Traceback" not in err
