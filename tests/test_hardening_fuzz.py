"""Fuzzing `benchc validate` (load, validate, compile) with hostile spec YAML (issue 15):
random edits of the example specs, YAML token soup, alias bombs and `--set` values.
Whatever comes in: no traceback, an exit code from the table (0 valid, 2 refused), and
memory within a fixed bound, measured with tracemalloc.

What a *valid* spec may make benchc build is bounded by the ceilings of
benchc/spec/limits.py; here they are lowered (as a test may: they are parameters), so that
every spec the fuzzer gets past validation compiles in milliseconds and the memory bound
can be tight. A spec over a ceiling is refused by arithmetic whatever the ceiling is.
"""

import contextlib
import glob
import io
import os
import re
import tempfile
import tracemalloc

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from benchc.cli import main
from benchc.spec import limits
from tests.conftest import REPO

PEAK_BYTES = 96 * 1024 * 1024  # a billion laughs took 2.5 GB before the bounds


def _seed(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    # small numbers, so that the seeds themselves compile quickly under the lowered ceilings
    return re.sub(r"requests: \d+", "requests: 4", text)


SEEDS = [_seed(p) for p in sorted(glob.glob(os.path.join(REPO, "specs", "*.yaml")))
         + [os.path.join(REPO, "tests", "specs", "valid", "all-features.yaml")]]

TOKENS = ["[", "]", "{", "}", ": ", ":", "- ", "? ", ",", "&a ", "*a", "&b ", "*b", "<<: *a", "!!int ",
          "!!binary ", "!!python/object:os.system ", "!!float ", "!!set ", "|", ">", "'", '"', "#", "\n",
          "  ", "\t", "\x00", "\x01", "\x7f", "\ufeff", "\u00e9", "\ud7ff", ".nan", ".inf", "-.inf", "-1",
          "0", "1e999", "99999999999", "1000000", "1M", "1k", "10/s", "0/s", "2s", ".5", "${env:}",
          "${env:A B}", "${env:HOME}", "${env:NOPE}", "${matrix.x}", "{free}", "%YAML 1.1\n", "---\n",
          "...\n", "~", "null", "true", "yes", "x", "version", "load", "requests", "concurrency",
          "http://[::1", "ftp://h", "http://h:99999/v1", "?token=t"]

soup = st.lists(st.sampled_from(TOKENS), min_size=0, max_size=40).map("".join)


@st.composite
def edited_seed(draw) -> bytes:
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 4))):
        lines = text.split("\n")
        op = draw(st.sampled_from(["insert", "delete", "replace_line", "duplicate_line", "swap_lines"]))
        if op == "insert":
            at = draw(st.integers(0, len(text)))
            text = text[:at] + draw(soup) + text[at:]
        elif op == "delete":
            at = draw(st.integers(0, len(text)))
            text = text[:at] + text[at + draw(st.integers(1, 20)):]
        elif op == "replace_line":
            lines[draw(st.integers(0, len(lines) - 1))] = draw(soup)
            text = "\n".join(lines)
        elif op == "duplicate_line":
            i = draw(st.integers(0, len(lines) - 1))
            text = "\n".join(lines[:i + 1] + lines[i:])
        else:
            i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
    data = text.encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 9)) == 0:  # now and then, bytes that are not UTF-8
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80\x80"])) + data[at:]
    return data


@st.composite
def alias_bomb(draw) -> bytes:
    levels, width = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    prefix = draw(st.sampled_from(["", SEEDS[0]]))  # a bomb on its own, or under a real spec
    return (prefix + "\n".join(lines) + "\n").encode()


@pytest.fixture
def lowered_ceilings(monkeypatch):
    monkeypatch.setattr(limits, "MAX_TOKENS", 2_000)
    monkeypatch.setattr(limits, "MAX_COMBINATIONS", 8)
    monkeypatch.setattr(limits, "MAX_LOAD_POINTS", 32)


def validate(data: bytes, extra: list[str] = ()) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "spec.yaml")
        with open(path, "wb") as f:
            f.write(data)
        err, out = io.StringIO(), io.StringIO()
        tracemalloc.start()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
                code = main(["validate", path, *extra])
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert "Traceback" not in err.getvalue() and code in (0, 2), (code, err.getvalue()[-2000:], data[:500])
    assert peak < PEAK_BYTES, (peak, data[:500])


FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])
LARGE = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                         HealthCheck.too_slow])


@FAST
@given(data=edited_seed())
def test_edited_example_specs(lowered_ceilings, data):
    validate(data)


@FAST
@given(data=st.one_of(soup.map(str.encode), alias_bomb()))
@example(data=b"&a <<: *a\n")  # a merge of a scalar: found while building, once exit 4
def test_random_yaml_documents_and_alias_bombs(lowered_ceilings, data):
    validate(data)


@FAST
@given(value=soup)
@example(value="!!binary : ")  # a mapping with a bytes key: its message once raised (exit 4)
def test_random_set_values(lowered_ceilings, value):
    validate(SEEDS[0].encode(), ["--set", f"load.requests={value}", "--set", f"target.model={value}"])


@pytest.mark.slow
@LARGE
@given(data=st.one_of(edited_seed(), soup.map(str.encode), alias_bomb()))
def test_many_more_hostile_specs(lowered_ceilings, data):
    validate(data)
