"""Hostile and damaged result files (issue 29, class 4): no file can hang or crash a tool.
compare, report, export and merge refuse it with exit 5 naming the field, or escape it; and
benchc never writes a result its own tools refuse."""

import base64
import json
import os
import re
import subprocess
import sys
import zlib

import pytest

from benchc.cli import main
from benchc.errors import RunError
from benchc.metrics import _hdr_codec
from benchc.metrics._hdr_codec import HdrFormatError
from benchc.results import values
from benchc.run import runner
from benchc.run.telemetry import parse_prometheus

DATA = os.path.join(os.path.dirname(__file__), "data")
SHARD_A = os.path.join(DATA, "result-v1-shard-a.json")
SHARD_B = os.path.join(DATA, "result-v1-shard-b.json")


def _doc() -> dict:
    with open(SHARD_A, encoding="utf-8") as f:
        return json.load(f)


def _hdr(lowest: int, highest: int, digits: int, body: bytes = b"\x02\x02") -> str:
    """An encoded histogram with any header: what a hand-edited or hostile file may hold."""
    payload = _hdr_codec._PAYLOAD.pack(_hdr_codec.ENCODING_COOKIE, len(body), 0, digits, lowest, highest,
                                       1.0) + body
    packed = zlib.compress(payload)
    ext = _hdr_codec._EXT.pack(_hdr_codec.COMPRESSION_COOKIE, len(packed))
    return base64.b64encode(ext + packed).decode()


def _with_hdr(text: str) -> dict:
    doc = _doc()
    doc["points"][0]["latency"]["ttft_us"]["hdr"] = text
    return doc


def _write(tmp_path, doc_or_text, name="r.json"):
    path = tmp_path / name
    path.write_text(doc_or_text if isinstance(doc_or_text, str) else json.dumps(doc_or_text))
    return str(path)


VERBS = {
    "compare": lambda p, tmp: ["compare", p, SHARD_A],
    "report": lambda p, tmp: ["report", p, "--html", str(tmp / "r.html")],
    "export-csv": lambda p, tmp: ["export", p, "--format", "csv"],
    "export-br": lambda p, tmp: ["export", p, "--format", "br0.2"],
    "export-vllm": lambda p, tmp: ["export", p, "--format", "vllm"],
    "merge": lambda p, tmp: ["merge", p, SHARD_B, "-o", str(tmp / "m.json")],
}


def _refused(capsys, argv) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err and code == 5, (code, err)
    return err


# --------------------------------------------------------------------------- histogram headers

HEADERS = [
    ((1, 2**62, 3), "highest trackable value 4611686018427387904 is 2^62 or more"),
    ((1, 2**64 - 1, 3), "highest trackable value 18446744073709551615 is 2^62 or more"),
    ((0, 1000, 3), "lowest trackable value 0 is less than 1"),
    ((1, 1000, 0), "significant digits 0 outside 1..5"),
    ((1, 1000, 6), "significant digits 6 outside 1..5"),
    ((600, 1000, 3), "highest trackable value 1000 is less than twice the lowest (600)"),
]


@pytest.mark.parametrize("header, message", HEADERS)
def test_a_histogram_header_outside_the_encoding_is_refused_by_the_decoder(header, message):
    with pytest.raises(HdrFormatError, match=re.escape(message)):
        _hdr_codec.decode(_hdr(*header))


@pytest.mark.parametrize("header, message", HEADERS)
def test_either_core_refuses_to_build_such_a_histogram(hdr_module, header, message):
    """The C core's sizing loop never ended at 2^62 (the shift overflowed): the constructor of
    both cores checks the layout first."""
    with pytest.raises(ValueError, match="trackable value|significant digits"):
        hdr_module.Histogram(*header)


@pytest.mark.parametrize("verb", sorted(VERBS))
@pytest.mark.parametrize("header, message", HEADERS[:1] + HEADERS[2:4])
def test_every_tool_refuses_a_hostile_histogram_header_with_exit_5_naming_the_field(tmp_path, capsys, verb,
                                                                                   header, message):
    path = _write(tmp_path, _with_hdr(_hdr(*header)))
    err = _refused(capsys, VERBS[verb](path, tmp_path))
    assert "$.points[0].latency.ttft_us.hdr: not a histogram benchc reads" in err and message in err
    assert not (tmp_path / "m.json").exists() and not (tmp_path / "r.html").exists()


def test_the_7_kb_result_that_hung_compare_now_ends_with_exit_5(tmp_path):
    """In a process of its own: on the old code the C core never came back (Ctrl-C did not stop
    it), so this is the only way the failure shows as a failure rather than a stuck suite."""
    path = _write(tmp_path, _with_hdr(_hdr(1, 2**62, 3)))
    done = subprocess.run([sys.executable, "-m", "benchc", "compare", path, SHARD_A], capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 5 and "is 2^62 or more" in done.stderr, done.stderr


@pytest.mark.parametrize("body, message", [
    (b"\xff\xff\xff\xff\xff\xff\xff\xff\xff", "too many counts"),  # one zero run of 2^63
    (b"\xfe\xff\xff\xff\xff\xff\xff\xff\xff" * 2, "total count is past int64"),
])
def test_counts_past_what_a_histogram_holds_are_refused_before_anything_is_allocated(body, message):
    with pytest.raises(HdrFormatError, match=message):
        _hdr_codec.decode(_hdr(1, 3_600_000_000, 3, body))


def test_a_zlib_bomb_stops_at_the_largest_payload_a_histogram_has():
    payload = _hdr_codec._PAYLOAD.pack(_hdr_codec.ENCODING_COOKIE, 0, 0, 3, 1, 1000, 1.0) + bytes(2**26)
    packed = zlib.compress(payload, 9)
    text = base64.b64encode(_hdr_codec._EXT.pack(_hdr_codec.COMPRESSION_COOKIE, len(packed)) + packed)
    with pytest.raises(HdrFormatError, match="payload larger than a histogram's"):
        _hdr_codec.decode(text)


# --------------------------------------------------------------------------- numbers, nesting, names


def _count_as(text: str) -> str:
    return json.dumps(_doc()).replace('"count": 8', f'"count": {text}', 1)


@pytest.mark.parametrize("text, message", [
    (_count_as("1" + "0" * 40),
     "$.points[0].latency.ttft_us.count: the integer 10000000000000000000...00000000 is past int64"),
    (_count_as("1e40"), "$.points[0].latency.ttft_us.count: the number 1e+40 is past int64"),
    (_count_as("NaN"), "NaN is not a JSON number"),
    (_count_as("-Infinity"), "-Infinity is not a JSON number"),
    (_count_as("9" * 5000), "is not a result document: Exceeds the limit"),
])
def test_numbers_no_reader_takes_are_exit_5(tmp_path, capsys, text, message):
    path = _write(tmp_path, text)
    for verb in ("compare", "export-csv", "merge"):
        assert message in _refused(capsys, VERBS[verb](path, tmp_path))


def test_deep_nesting_inside_a_result_is_exit_5_not_a_recursion_crash(tmp_path, capsys):
    """900 levels parse (json's limit is the interpreter's), then merge's dump recursed: exit 4."""
    doc = _doc()
    deep: list = []
    for _ in range(900):
        deep = [deep]
    doc["spec"]["resolved"]["deep"] = deep
    path = _write(tmp_path, doc)
    for verb in ("compare", "merge", "report"):
        err = _refused(capsys, VERBS[verb](path, tmp_path))
        assert "$.spec.resolved.deep[0][0]" in err and "nested more than 100 levels deep" in err
        assert len(err) < 400  # the path is shortened, not 900 brackets


@pytest.mark.parametrize("name", ["/etc/passwd", "../elsewhere.requests.jsonl", "..", "sub/r.requests.jsonl"])
def test_requests_file_is_only_ever_a_name_beside_the_result(tmp_path, capsys, name):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "r.requests.jsonl").write_text("")
    doc = _doc()
    doc["requests_file"] = name
    path = _write(tmp_path, doc)
    err = _refused(capsys, ["export", path, "--format", "jsonl"])
    assert f"$.requests_file: {name!r} is not a file name" in err
    assert capsys.readouterr().out == ""


def test_mathtext_in_a_model_name_is_drawn_as_text(tmp_path, capsys):
    """matplotlib parses $...$ in a legend as mathtext; a model named so crashed the report."""
    pytest.importorskip("matplotlib")
    doc = _doc()
    doc["target"][0]["model"] = r"$\frac{a}{$ org/$x^{2$"
    path = _write(tmp_path, doc)
    code = main(["report", path, "--png", str(tmp_path / "png")])
    err = capsys.readouterr().err
    assert code == 0 and "Traceback" not in err, err
    assert os.listdir(tmp_path / "png")


# --------------------------------------------------------------------------- what benchc writes


def test_a_servers_nan_and_inf_metrics_never_reach_a_result():
    got = parse_prometheus("vllm:num_requests_running NaN\nvllm:num_requests_waiting +Inf\n"
                           "vllm:generation_tokens_total 12\nvllm:prompt_tokens_total 1e40\n")
    assert got == {"kind": "vllm", "generation_tokens_total": 12.0}


def test_benchc_never_writes_a_result_its_tools_refuse(tmp_path):
    doc = _doc()
    doc["points"][0]["telemetry"] = {"kv_cache_usage": float("nan")}
    path = str(tmp_path / "r.json")
    with pytest.raises(RunError, match=r"\$.points\[0\].telemetry.kv_cache_usage: nan is not a number") as e:
        runner._write_result(path, doc, [])
    assert not os.path.exists(path)
    rescued = str(e.value).rsplit(" ", 1)[-1]
    assert os.path.isfile(rescued)
    os.unlink(rescued)


def test_what_benchc_writes_passes_the_check():
    values.check(_doc())  # raises on a problem: the fixtures are real results
    for name in os.listdir(DATA):
        if name.startswith("result-v") and name.endswith(".json"):
            with open(os.path.join(DATA, name), encoding="utf-8") as f:
                values.check(json.load(f))



@pytest.mark.parametrize("argv", [["export", SHARD_A, "--format", "csv", "-o", "{out}/r.csv"],
                                  ["merge", SHARD_A, SHARD_B, "-o", "{out}/m.json"]])
def test_a_full_disk_is_a_clear_exit_2_with_nothing_half_written(tmp_path, capsys, monkeypatch, argv):
    """Every write went on as exit 4 (a bug) when the disk was full. /dev/full gives the real
    ENOSPC of a full disk to the temporary file's writes."""
    from benchc.results import document

    real_fdopen = os.fdopen

    def full_disk(fd, mode="r", *a, **kw):
        if "w" not in mode:
            return real_fdopen(fd, mode, *a, **kw)
        os.close(fd)
        return open("/dev/full", mode)  # noqa: SIM115 - returned to the with-block that closes it

    monkeypatch.setattr(document.os, "fdopen", full_disk)
    out = tmp_path / "out"
    out.mkdir()
    code = main([a.replace("{out}", str(out)) for a in argv])
    err = capsys.readouterr().err
    assert code == 2 and "No space left on device; nothing was written" in err and "Traceback" not in err
    assert os.listdir(out) == []  # neither the file nor the temporary one


@pytest.mark.parametrize("verb", ["compare", "report", "export-br"])
def test_counts_a_tool_cannot_decode_are_exit_5_too(tmp_path, capsys, verb):
    """The read checks a histogram's header only (cheap); its counts are checked as a tool
    decodes them, and that refusal is a result format error as well, never exit 4."""
    path = _write(tmp_path, _with_hdr(_hdr(1, 3_600_000_000, 3, b"\xff" * 9)))
    assert "too many counts" in _refused(capsys, VERBS[verb](path, tmp_path))
