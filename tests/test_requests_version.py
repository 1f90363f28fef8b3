"""The per-request JSONL's own version (issue 42): every record a run writes names it
(`requests_version`, after `run_id`); a record without it is version 1, which stays readable
(the fixtures in tests/data: before the run binding and with it); a version newer than the
reader knows, or no version at all, is refused by name (exit 5) naming the line."""

import json
import os
import shutil

import pytest

from benchc.cli import main
from benchc.results.document import REQUESTS_VERSION, read
from tests.simrun import requests_of, write_spec

DATA = os.path.join(os.path.dirname(__file__), "data")
OLD = ("result-v1-shard-a", "result-v1-run-bound")  # version 1: before the run binding, with it


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("v")
    assert main(["run", write_spec(d, sweep="    concurrency: [1]", out=4, extra="  requests: 3")]) == 0
    return d


def test_each_record_names_its_version_last_after_the_run_binding(run_dir, capsys):
    records = requests_of(run_dir)
    assert REQUESTS_VERSION == 2 and len(records) == 3
    assert all(list(r)[-2:] == ["run_id", "requests_version"] and r["requests_version"] == 2
               for r in records)
    # the keys before it are version 1's, in its order (the fixture written at stop 47)
    with open(os.path.join(DATA, "result-v1-run-bound.requests.jsonl")) as f:
        v1 = json.loads(f.readline())
    assert "requests_version" not in v1
    assert list(records[0])[:-1] == list(v1)
    capsys.readouterr()
    assert main(["export", str(run_dir / "r.json"), "--format", "jsonl"]) == 0
    assert capsys.readouterr().out == (run_dir / "r.requests.jsonl").read_text()


@pytest.mark.parametrize("name", OLD)
def test_version_1_files_stay_readable(name, capsys):
    result = os.path.join(DATA, name + ".json")
    capsys.readouterr()
    assert main(["export", result, "--format", "jsonl"]) == 0
    with open(os.path.join(DATA, name + ".requests.jsonl")) as f:
        assert capsys.readouterr().out == f.read()
    assert main(["export", result, "--format", "vllm"]) == 0  # read by point, per-request lists
    docs = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    n = len(read(result)["points"])
    assert len(docs) == n and all(d["latencies"] is not None for d in docs)


def _with_record(tmp_path, extra: dict) -> str:
    """The pre-binding fixture (its result keeps no hash) with one more record after its last."""
    shutil.copy(os.path.join(DATA, "result-v1-shard-a.json"), tmp_path / "r.json")
    with open(os.path.join(DATA, "result-v1-shard-a.requests.jsonl")) as f:
        good = f.read()
    record = {"point": "c=1", "id": "x", "t0_ns": 1, "ttft_us": None, "e2e_us": None, "error": None, **extra}
    (tmp_path / "result-v1-shard-a.requests.jsonl").write_text(good + json.dumps(record) + "\n")
    return str(tmp_path / "r.json"), good.count("\n") + 1


def test_a_newer_version_is_refused_by_name_naming_its_line(tmp_path, capsys):
    result, line = _with_record(tmp_path, {"requests_version": 3})
    capsys.readouterr()
    assert main(["export", result, "--format", "jsonl"]) == 5
    err = capsys.readouterr().err
    assert f"result-v1-shard-a.requests.jsonl line {line}: per-request records of requests_version 3, " \
           "newer than this benchc reads (1 to 2)" in err
    assert "Traceback" not in err
    assert main(["export", result, "--format", "vllm"]) == 5  # the per-point reader too


@pytest.mark.parametrize("bad", ["2", True, 0, None, 2.0])
def test_a_version_that_is_not_one_is_refused(tmp_path, capsys, bad):
    result, line = _with_record(tmp_path, {"requests_version": bad})
    capsys.readouterr()
    assert main(["export", result, "--format", "jsonl"]) == 5
    err = capsys.readouterr().err
    assert f"line {line}: requests_version {json.dumps(bad)} is not a version (a whole number from 1)" in err


def test_the_versions_this_benchc_wrote_read_back(tmp_path, capsys):
    for version in (1, 2):
        result, _ = _with_record(tmp_path, {"requests_version": version} if version > 1 else {})
        capsys.readouterr()
        assert main(["export", result, "--format", "jsonl"]) == 0
        assert capsys.readouterr().out.splitlines()[-1].endswith("}")
