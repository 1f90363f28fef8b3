"""Bad input at the command line and in result files (issue 15, classes 4, 5 and 7): a clear
message and exit 2 or 5, never a traceback."""

import json
import os
import shutil
import socket

import pytest

from benchc.cli import main
from benchc.results.document import read
from tests.test_spec import BASE

DATA = os.path.join(os.path.dirname(__file__), "data")
SHARD_A = os.path.join(DATA, "result-v1-shard-a.json")
SHARD_B = os.path.join(DATA, "result-v1-shard-b.json")

SPEC = BASE.replace("  model: m\n", "  model: m\n  api_key: sk-spec-key-1234\n")


def run_main(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err and code != 4, err
    return code, err


# --------------------------------------------------------------------------- run --base-url


@pytest.mark.parametrize("url, message", [
    ("http://[::1", "'http://[::1' is not a URL (Invalid IPv6 URL)"),
    ("http://localhost:99999/v1", "'http://localhost:99999/v1' is not a URL (Port out of range 0-65535)"),
    ("ftp://localhost/v1", "'ftp://localhost/v1' is not an http(s) URL"),
    ("localhost:8000/v1", "'localhost:8000/v1' has no scheme: write http://localhost:8000/v1"),
    ("http://localhost:8000/v1?token=abcdef", "'http://localhost:8000/v1?token=***' has a query or fragment"),
])
def test_an_unusable_base_url_is_refused_before_anything_runs(tmp_path, capsys, monkeypatch, url, message):
    """These ran with 100% errors and exit 0, or crashed (the IPv6 one)."""
    monkeypatch.setattr("benchc.run.runner.execute", lambda *a, **k: pytest.fail("the run started"))
    path = tmp_path / "s.yaml"
    path.write_text(SPEC)
    code, err = run_main(capsys, ["run", str(path), "--base-url", url])
    assert code == 2 and f"benchc: --base-url: {message}" in err
    assert "abcdef" not in err  # a credential in the URL is not repeated


def test_user_password_in_base_url_with_an_api_key_is_a_configuration_error(tmp_path, capsys, monkeypatch):
    """Attach mode crashed on it (aiohttp refuses both), and readiness retried it until timeout."""
    monkeypatch.setattr("benchc.run.runner.execute", lambda *a, **k: pytest.fail("the run started"))
    path = tmp_path / "s.yaml"
    path.write_text(SPEC)
    code, err = run_main(capsys, ["run", str(path), "--base-url", "http://u:pw@127.0.0.1:1/v1"])
    assert code == 2 and "both set the credentials; keep one" in err
    path.write_text(SPEC.replace("http://localhost:8000/v1", "http://u:pw@localhost:8000/v1"))
    code, err = run_main(capsys, ["validate", str(path)])
    assert code == 2
    assert "$.target.base_url: user:password in the URL and api_key both give credentials" in err


# --------------------------------------------------------------------------- sim


def test_sim_on_a_port_in_use_says_so(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code, err = run_main(capsys, ["sim", "--port", str(port), "--preset", "instant"])
    assert code == 2 and f"sim: cannot listen on 127.0.0.1:{port}" in err and "in use" in err


@pytest.mark.parametrize("param, message", [
    ("max_num_seqs=0", "max_num_seqs: 0 is less than the minimum of 1"),
    ("jitter=.nan", "jitter: NaN and infinity are not allowed"),
    ("max_num_sqs=4", "unknown parameter 'max_num_sqs'; did you mean 'max_num_seqs'?"),
    ("tokens_per_step=two", "tokens_per_step: 'two' is not of type 'integer'"),
    ("x=&a [*a]", "--param x: the value is not a YAML value benchc reads"),
    ("max_num_seqs", "expected NAME=VALUE"),
])
def test_sim_parameters_are_validated_before_it_starts(capsys, monkeypatch, param, message):
    """max_num_seqs=0 made the engine loop spin without yielding: SIGTERM could not stop it."""
    monkeypatch.setattr("benchc.sim.server.serve_forever", lambda *a: pytest.fail("the simulator started"))
    code, err = run_main(capsys, ["sim", "--param", param])
    assert code == 2 and message in err


def test_sim_port_out_of_range(capsys):
    code, err = run_main(capsys, ["sim", "--port", "70000"])
    assert code == 2 and "--port 70000 is not a port" in err


# --------------------------------------------------------------------------- tokens


def test_a_tokenizer_json_without_vocab_is_exit_2(tmp_path, capsys):
    tok = tmp_path / "tokenizer.json"
    tok.write_text(json.dumps({"model": {"type": "BPE", "merges": []}}))
    (tmp_path / "t.txt").write_text("hello")
    code, err = run_main(capsys, ["tokens", str(tmp_path / "t.txt"), "--tokenizer", str(tok)])
    assert code == 2 and str(tok) in err and "vocab" in err  # the file, and what it lacks


def test_tokens_of_a_file_that_is_not_utf8_is_exit_2(tmp_path, capsys):
    tok = tmp_path / "tokenizer.json"  # the smallest BPE a loader takes: one token per character
    tok.write_text(json.dumps({"model": {"type": "BPE", "vocab": {chr(c): c for c in range(33, 127)},
                                         "merges": []}}))
    (tmp_path / "t.txt").write_bytes(b"fine\ncaf\xe9\n")
    code, err = run_main(capsys, ["tokens", str(tmp_path / "t.txt"), "--tokenizer", str(tok)])
    assert code == 2 and f"{tmp_path / 't.txt'}:2: byte 0xe9 is not UTF-8 text" in err


# --------------------------------------------------------------------------- result files


def test_compare_on_a_binary_file_is_exit_5(tmp_path, capsys):
    blob = tmp_path / "blob.json"
    blob.write_bytes(bytes(range(256)) * 4)
    code, err = run_main(capsys, ["compare", str(blob), SHARD_A])
    assert code == 5 and f"{blob} is not a result document: byte 128 (0x80) is not UTF-8 text" in err


@pytest.mark.parametrize("version", [None, "1", True, 0, 1.5])
def test_a_schema_version_that_is_not_a_whole_number_is_damage_not_newness(tmp_path, capsys, version):
    with open(SHARD_A, encoding="utf-8") as f:
        doc = json.load(f)
    doc["schema_version"] = version
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    code, err = run_main(capsys, ["compare", str(path), SHARD_A])
    assert code == 5 and f"schema_version {json.dumps(version)} is not a version number" in err
    assert "newer" not in err


def test_a_newer_schema_version_is_called_newer(tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"schema_version": 7}))
    code, err = run_main(capsys, ["compare", str(path), SHARD_A])
    assert code == 5 and "it is newer; a newer benchc may read it" in err


def test_merging_the_same_shard_twice_is_refused(tmp_path, capsys):
    """It used to double every count without a word."""
    out = tmp_path / "m.json"
    code, err = run_main(capsys, ["merge", SHARD_A, SHARD_A, "-o", str(out)])
    assert code == 2 and f"{SHARD_A} is given twice" in err and not out.exists()
    copy = tmp_path / "copy.json"
    shutil.copy(SHARD_A, copy)
    code, err = run_main(capsys, ["merge", SHARD_A, SHARD_B, str(copy), "-o", str(out)])
    assert code == 2 and f"{copy} and {SHARD_A} hold the same measurement" in err


def test_a_merged_result_cannot_be_merged_again_with_one_of_its_shards(tmp_path, capsys):
    merged = tmp_path / "m.json"
    assert run_main(capsys, ["merge", SHARD_A, SHARD_B, "-o", str(merged)])[0] == 0
    assert [m["source"] for m in read(str(merged))["merged_from"]] == [SHARD_A, SHARD_B]
    code, err = run_main(capsys, ["merge", str(merged), SHARD_B, "-o", str(tmp_path / "again.json")])
    assert code == 2 and f"{SHARD_B} and {merged} hold the same measurement" in err


@pytest.mark.parametrize("fmt", ["jsonl", "vllm"])
def test_exporting_a_truncated_per_request_file_names_the_line(tmp_path, capsys, fmt):
    """`export --format jsonl` passed half a record through."""
    shutil.copy(SHARD_A, tmp_path / "r.json")
    with open(SHARD_A.replace(".json", ".requests.jsonl"), "rb") as f:
        records = f.read()
    lines = records.count(b"\n")
    (tmp_path / "result-v1-shard-a.requests.jsonl").write_bytes(records[:-40])
    code, err = run_main(capsys, ["export", str(tmp_path / "r.json"), "--format", fmt])
    assert code == 5 and f"line {lines}: cut short: the file ends inside a record" in err
    assert capsys.readouterr().out == ""  # nothing passed on


def test_exporting_a_damaged_per_request_line_names_it(tmp_path, capsys):
    shutil.copy(SHARD_A, tmp_path / "r.json")
    with open(SHARD_A.replace(".json", ".requests.jsonl"), "rb") as f:
        lines = f.read().splitlines(keepends=True)
    lines[1] = b'{"not": "a record"}\n'
    (tmp_path / "result-v1-shard-a.requests.jsonl").write_bytes(b"".join(lines))
    code, err = run_main(capsys, ["export", str(tmp_path / "r.json"), "--format", "jsonl"])
    assert code == 5 and "line 2: not a per-request record of benchc" in err
