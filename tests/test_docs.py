"""Every command of the README and docs/ runs as written (docs/CONTRIBUTING.md has the
convention): `sh` blocks line by line, `python` blocks as scripts, in a scratch folder with a
copy of specs/ and tests/data/. Cheap lines (no benchmark, no result of one) run in the fast
selection; a file's whole sequence, benchmarks included, is an end-to-end test marked slow."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchc.errors import EXIT_THRESHOLD
from tests.conftest import REPO

DOCS = [Path(REPO, "README.md")] + sorted(Path(REPO, "docs").glob("*.md"))
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```$", re.M | re.S)
SERVER = "http://localhost:8000/v1"  # stands for the reader's server: a simulator the test starts
RUN_KINDS = ("sh", "python")


def blocks(doc: Path) -> list[tuple[str, str]]:
    """(info string, body) of every fenced block, in order."""
    return [(m[1].strip(), m[2]) for m in FENCE.finditer(doc.read_text(encoding="utf-8"))]


def commands(body: str) -> list[str]:
    """The command lines of a sh block: continuations joined, comments and blank lines out."""
    out, pending = [], ""
    for line in body.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line and not line.startswith("#"):
            out.append(line)
    return out


def is_cheap(line: str) -> bool:
    """Runs nothing end to end and reads no result an earlier line wrote."""
    return "benchc run" not in line and "results/" not in line


def steps(doc: Path, cheap_only: bool) -> list[tuple[str, str]]:
    """("sh", line) and ("python", script) in order; cheap_only: the cheap sh lines alone."""
    out = []
    for info, body in blocks(doc):
        if info == "sh":
            out += [("sh", line) for line in commands(body) if not cheap_only or is_cheap(line)]
        elif info == "python" and not cheap_only:
            out.append(("python", body))
    return out


def test_every_fenced_block_says_how_it_is_treated():
    """A block of a shell or Python is run unless it says it cannot be (docs/CONTRIBUTING.md)."""
    for doc in DOCS:
        for info, body in blocks(doc):
            assert info != "", f"{doc.name}: a fence without a language: {body[:60]!r}"
            if info.split()[0] in ("bash", "shell", "console", "py", "python3"):
                raise AssertionError(f"{doc.name}: ```{info}: write sh or python (run), or text (shown)")


def test_the_quick_start_and_every_docs_file_have_commands_that_run():
    """The convention is used: the README's quick start and the results tools run something."""
    assert any(kind == "sh" and "specs/my-server.yaml" in line for kind, line in steps(DOCS[0], False))
    assert ("sh", "benchc run specs/demo.yaml --out results/demo.json") in steps(DOCS[0], False)


class Scratch:
    """A folder like the checkout's top (specs/, tests/data/), and the simulator standing in
    for the reader's server when a line names it."""

    def __init__(self, tmp_path: Path, lines: list[str]):
        self.dir = tmp_path
        shutil.copytree(Path(REPO, "specs"), tmp_path / "specs")
        shutil.copytree(Path(REPO, "tests", "data"), tmp_path / "tests" / "data")
        bin_dir = os.path.dirname(sys.executable)
        self.env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
        self.sim = None
        self.url = SERVER
        if any(SERVER in line for line in lines):
            argv = [sys.executable, "-m", "benchc", "sim", "--port", "0", "--model", "my-model",
                    "--preset", "instant"]
            self.sim = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=tmp_path)
            self.url = self.sim.stdout.readline().split("listening on ")[1].split()[0]

    def run(self, kind: str, text: str) -> None:
        if kind == "sh":
            argv = ["bash", "-c", "set -eo pipefail; " + text.replace(SERVER, self.url)]
        else:
            script = self.dir / "example.py"
            script.write_text(text)
            argv = [sys.executable, str(script)]
        done = subprocess.run(argv, cwd=self.dir, env=self.env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0 or slo_missed(kind, text, done), \
            f"{kind}: {text}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}"

    def close(self) -> None:
        if self.sim is not None:
            self.sim.terminate()
            self.sim.wait(timeout=30)
            self.sim.stdout.close()


def slo_missed(kind: str, text: str, done: subprocess.CompletedProcess) -> bool:
    """A `benchc run` that ran to its end and wrote its result, whose only verdict is that a
    latency SLO was missed: whether the simulator met the demo's SLO depends on how busy the
    machine is (a busy one missed it by 0.2 ms), which no test may depend on. Anything else
    (another exit code, another reason) still fails the step."""
    return (kind == "sh" and "benchc run" in text and done.returncode == EXIT_THRESHOLD
            and "SLO not met:" in done.stderr and "result written to" in done.stderr)


def run_steps(tmp_path: Path, todo: list[tuple[str, str]]) -> None:
    scratch = Scratch(tmp_path, [text for _, text in todo])
    try:
        for kind, text in todo:
            scratch.run(kind, text)
    finally:
        scratch.close()


@pytest.mark.parametrize("doc", [d for d in DOCS if steps(d, True)], ids=lambda d: d.name)
def test_the_cheap_commands_run_as_written(doc, tmp_path):
    run_steps(tmp_path, steps(doc, True))


@pytest.mark.slow  # benchmarks of the simulator, as the docs run them
@pytest.mark.parametrize("doc", [d for d in DOCS if steps(d, False) != steps(d, True)], ids=lambda d: d.name)
def test_every_command_runs_as_written(doc, tmp_path):
    run_steps(tmp_path, steps(doc, False))
