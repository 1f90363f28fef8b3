"""Process lifecycle (issue 29, class 6): a hangup stops a run as Ctrl-C does, writing what was
measured; benchc's own Python subprocesses are isolated from the working directory."""

import signal
import subprocess
import sys

import pytest

from benchc.results.document import read
from tests.conftest import wait_for
from tests.simrun import Sim, write_spec


def _hung_up_run(tmp_path, sighup) -> tuple[int, str]:
    """A run against a simulator subprocess, its SIGHUP disposition `sighup` as inherited (a
    terminal: SIG_DFL; nohup: SIG_IGN), sent SIGHUP once two requests have finished: its exit
    status and stderr. The disposition is set whatever launched the suite (under nohup the
    child would inherit SIGHUP ignored)."""
    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4")
    spec = write_spec(tmp_path, sweep="    concurrency: [2, 4]", out=48, extra="  requests: 40")
    cmd = [sys.executable, "-m", "benchc", "run", spec, "--quiet", "--base-url", sim.url,
           "--set", "load.warmup.requests=0"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGHUP, sighup))
    try:
        wait_for(lambda: sim.trace.exists() and len(sim.trace.read_text().splitlines()) >= 2,
                 what="two finished requests in the simulator's trace")
        assert p.poll() is None, "the run ended before its hangup"
        p.send_signal(signal.SIGHUP)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
        sim.close()
    return p.returncode, err


@pytest.mark.slow  # a run against a simulator subprocess
def test_sighup_writes_a_partial_result_and_exits_130(tmp_path):
    """An ssh session that dropped killed the run (SIGHUP's default) and lost the measurement."""
    code, err = _hung_up_run(tmp_path, signal.SIG_DFL)
    assert code == 130, err
    doc = read(str(tmp_path / "r.json"))
    assert doc["complete"] is False and doc["interrupted"] is True
    assert doc["points"][0]["counts"]["sent"] >= 2


@pytest.mark.slow  # a run against a simulator subprocess
def test_under_nohup_a_hangup_is_left_ignored_and_the_run_goes_on(tmp_path):
    """nohup asks that a hangup not stop the process: benchc keeps SIGHUP ignored (runner.py)
    and the run ends complete."""
    code, err = _hung_up_run(tmp_path, signal.SIG_IGN)
    assert code == 0, err
    doc = read(str(tmp_path / "r.json"))
    assert doc["complete"] is True and [p["counts"]["completed"] for p in doc["points"]] == [40, 40]


@pytest.mark.slow  # a run with the embedded simulator
def test_the_embedded_simulator_ignores_a_benchc_folder_in_the_working_directory(tmp_path):
    """`python -m benchc sim` imported ./benchc/ of the working directory first."""
    trap = tmp_path / "cwd" / "benchc"
    trap.mkdir(parents=True)
    (trap / "__init__.py").write_text("raise SystemExit('the working directory was imported')\n")
    (trap / "__main__.py").write_text("raise SystemExit('the working directory was imported')\n")
    spec = write_spec(tmp_path, sweep="    concurrency: [1]", out=4, extra="  requests: 2")
    done = subprocess.run([sys.executable, "-I", "-m", "benchc", "run", spec, "--quiet"],
                          cwd=trap.parent, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert read(str(tmp_path / "r.json"))["points"][0]["counts"]["completed"] == 2


def test_two_runs_with_the_same_out_and_force_cannot_both_claim_it(tmp_path):
    """With --force, both runs passed the reservation and both said they wrote the file; one
    document was lost without a word. The second is now refused while the first holds it."""
    from benchc.errors import UsageError
    from benchc.results.document import reserve_outputs

    out = str(tmp_path / "r.json")
    first = reserve_outputs(out, True, [], overwrite=True)
    try:
        with pytest.raises(UsageError, match="is being written by another benchc run"):
            reserve_outputs(out, True, [], overwrite=True)
    finally:
        first.release()
    again = reserve_outputs(out, True, [], overwrite=True)  # free once the first let it go
    again.release()
