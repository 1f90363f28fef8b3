import json
import os
import subprocess
import sys

import pytest

from benchc import __version__
from benchc.cli import main
from tests.conftest import REPO


def test_version_names_the_core(capsys, monkeypatch):
    assert main(["--version"]) == 0
    out = capsys.readouterr().out.strip()
    assert out in (f"benchc {__version__} (core: cython)", f"benchc {__version__} (core: python)")


def test_no_extensions_forces_the_python_core():
    env = dict(os.environ, BENCHC_NO_EXTENSIONS="1")
    out = subprocess.run([sys.executable, "-m", "benchc", "--version"], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == f"benchc {__version__} (core: python)"


@pytest.mark.slow
def test_a_run_on_the_python_core_counts_what_the_compiled_core_counts(tmp_path):
    """The whole measured path (own HTTP reader, de-chunking, stamped reads, parsing) on the
    twins, in a process of its own; the same counts as in this process."""
    demo = os.path.join(REPO, "specs", "demo.yaml")
    args = ["run", demo, "--quiet", "--set", "load.requests=3", "--set", "load.sweep.concurrency=[2]"]
    env = dict(os.environ, BENCHC_NO_EXTENSIONS="1")
    subprocess.run([sys.executable, "-m", "benchc", *args, "--out", str(tmp_path / "py.json")], env=env,
                   check=True, capture_output=True, timeout=120)
    assert main([*args, "--out", str(tmp_path / "here.json")]) == 0
    py, here = (json.loads((tmp_path / f).read_text()) for f in ("py.json", "here.json"))
    assert py["core"] == "python"
    for doc in (py, here):
        assert doc["points"][0]["counts"]["failed"] == 0
    assert py["points"][0]["tokens"] == here["points"][0]["tokens"]


def test_compiled_core_loads_when_required():
    """CI builds the extensions and sets BENCHC_REQUIRE_EXTENSIONS=1: then the C core must be in use."""
    if os.environ.get("BENCHC_REQUIRE_EXTENSIONS", "") in ("", "0"):
        return
    from benchc._core import core_name

    assert core_name() == "cython"


def test_validate_json_format(capsys):
    demo = os.path.join(REPO, "specs", "demo.yaml")
    assert main(["validate", "--format", "json", demo]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report[0]["valid"] is True and report[0]["load_points"] == 4


def test_a_server_command_that_cannot_start_is_reported(capsys, tmp_path):
    """specs/minimax.yaml launches vllm; on a machine without it the failure is clear and recorded."""
    minimax = os.path.join(REPO, "specs", "minimax.yaml")
    out = tmp_path / "r.json"
    assert main(["run", minimax, "--out", str(out), "--set", "server.log=" + str(tmp_path / "vllm.log"),
                 "--set", "server.env.PATH=/nonexistent"]) == 3
    assert "server.command could not start: No such file or directory (vllm)" in capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert doc["combinations"][0]["status"] == "server_failed" and doc["points"] == []
