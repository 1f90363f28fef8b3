"""The run stage under hostile conditions (issue 15, phase 2): output paths refused before the
first request, special files never written through, a dead server detected, the readiness
wait interrupted, benchc killed with SIGKILL, stdout on a full device, the file-descriptor
limit, and a simulator that never spins. Each was a lost or wrong run before."""

import contextlib
import errno
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from benchc.cli import main
from benchc.errors import UsageError
from benchc.metrics.record import CONNECT, HTTP, STREAM_BROKEN, TIMEOUT, Outcome, RequestRecord
from benchc.results.document import read, reserve_outputs, write_atomic
from benchc.run.deadserver import MIN_CONNECT_FAILURES, ConnectStreak, failure_limit
from tests.conftest import REPO, killed_after, wait_for
from tests.simrun import Sim, write_spec

PY = sys.executable


def run_main(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err and code != 4, err
    return code, err


def sim_metric(sim_url: str, name: str) -> float:
    root = sim_url.rsplit("/v1", 1)[0]
    text = urllib.request.urlopen(root + "/metrics", timeout=10).read().decode()
    return float(next(line.split()[-1] for line in text.splitlines() if line.startswith(name + "{")))


def assert_no_request_arrived(sim: Sim) -> None:
    """The simulator read no completion request: none traced, no prompt token counted."""
    assert not sim.trace.exists() or sim.trace.read_text() == ""
    assert sim_metric(sim.url, "vllm:prompt_tokens_total") == 0


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie (one nobody reaped is dead all the same)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture
def sim(tmp_path):
    s = Sim(tmp_path, "--preset", "minimax-m2.5-tp4")
    yield s
    s.close()


# --------------------------------------------------------------------------- output paths


def test_an_existing_sidecar_is_refused_before_the_first_request(tmp_path, capsys, sim):
    """The run measured everything, then failed to write over the existing *.requests.jsonl."""
    spec = write_spec(tmp_path)
    (tmp_path / "r.requests.jsonl").write_text("someone's records\n")
    code, err = run_main(capsys, ["run", spec, "--base-url", sim.url, "--out", str(tmp_path / "r.json")])
    sidecar = tmp_path / "r.requests.jsonl"
    assert code == 2 and f"{sidecar} exists; choose another --out or pass --force" in err
    assert_no_request_arrived(sim)
    assert (tmp_path / "r.requests.jsonl").read_text() == "someone's records\n"
    assert not (tmp_path / "r.json").exists()  # the reservation was given back


def test_out_under_a_regular_file_is_refused_before_the_first_request(tmp_path, capsys, sim):
    spec = write_spec(tmp_path)
    (tmp_path / "file").write_text("x")
    out = str(tmp_path / "file/sub/r.json")
    code, err = run_main(capsys, ["run", spec, "--base-url", sim.url, "--out", out])
    assert code == 2 and f"{tmp_path / 'file'} is a file, not a folder" in err
    assert_no_request_arrived(sim)


@contextlib.contextmanager
def unwritable_folder(path: Path):
    """A folder this process cannot create files in: read-only by its mode, or, for root (whom
    modes do not stop), immutable (chattr +i)."""
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        try:
            yield path
        finally:
            path.chmod(0o755)
        return
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(path)]).returncode != 0:
        pytest.skip("running as root where chattr +i is not allowed: no folder root cannot write")
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_an_unwritable_folder_is_refused_before_the_first_request(tmp_path, capsys, sim):
    spec = write_spec(tmp_path)
    with unwritable_folder(tmp_path / "locked") as locked:
        code, err = run_main(capsys, ["run", spec, "--base-url", sim.url, "--out", str(locked / "r.json")])
        assert code == 2 and f"cannot write in {locked} (" in err, err
        assert_no_request_arrived(sim)
        assert os.listdir(locked) == []


@pytest.fixture
def specials(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    target = tmp_path / "target.json"
    target.write_text("keep\n")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    return {"a FIFO": fifo, "a symbolic link": link, "a character device": Path("/dev/null"),
            "a folder": tmp_path}


@pytest.mark.parametrize("kind", ["a FIFO", "a symbolic link", "a character device", "a folder"])
def test_write_atomic_never_replaces_a_special_file_even_with_force(specials, kind):
    """--force renamed a regular file onto whatever was there."""
    path = specials[kind]
    before = os.lstat(path)
    with pytest.raises(UsageError, match=f"is {kind}: benchc writes only regular files"):
        write_atomic(str(path), "{}\n", overwrite=True)
    after = os.lstat(path)
    assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)
    if kind == "a symbolic link":
        assert path.read_text() == "keep\n"


def test_run_with_force_onto_a_fifo_is_refused_before_the_first_request(tmp_path, capsys, sim, specials):
    spec = write_spec(tmp_path)
    code, err = run_main(capsys, ["run", spec, "--base-url", sim.url, "--out", str(specials["a FIFO"]),
                                  "--force"])
    assert code == 2 and "is a FIFO: benchc writes only regular files" in err
    assert_no_request_arrived(sim)


def test_reservation_takes_the_paths_and_gives_back_what_was_not_written(tmp_path):
    result = str(tmp_path / "out/r.json")
    res = reserve_outputs(result, True, [str(tmp_path / "logs/s.log")], overwrite=False)
    assert sorted(os.listdir(tmp_path / "out")) == ["r.json", "r.requests.jsonl"]
    assert (tmp_path / "logs").is_dir()
    with pytest.raises(UsageError, match=r"r.json exists \(empty: a run that did not finish reserved it\)"):
        reserve_outputs(result, False, [], overwrite=False)  # a second run cannot take it
    write_atomic(result, "{}\n", overwrite=True)
    res.release()
    assert os.listdir(tmp_path / "out") == ["r.json"]  # the empty sidecar went, the result stayed
    assert (tmp_path / "out/r.json").read_text() == "{}\n"


def test_a_server_log_that_is_not_a_regular_file_is_refused(tmp_path, specials):
    with pytest.raises(UsageError, match="is a FIFO"):
        reserve_outputs(str(tmp_path / "r.json"), False, [str(specials["a FIFO"])], overwrite=False)
    assert not (tmp_path / "r.json").exists()


@pytest.mark.slow  # draws the plots
def test_report_never_overwrites_without_force(tmp_path, capsys):
    result = os.path.join(REPO, "tests", "data", "result-v1-shard-a.json")
    page = tmp_path / "report.html"
    page.write_text("mine")
    code, err = run_main(capsys, ["report", result, "--html", str(page)])
    assert code == 2 and f"{page} exists; choose another place or pass --force" in err
    assert page.read_text() == "mine"
    png = tmp_path / "png"
    assert run_main(capsys, ["report", result, "--png", str(png)])[0] == 0
    written = sorted(os.listdir(png))
    code, err = run_main(capsys, ["report", result, "--png", str(png)])
    assert code == 2 and "exists; choose another place or pass --force" in err
    assert run_main(capsys, ["report", result, "--png", str(png), "--html", str(page), "--force"])[0] == 0
    assert sorted(os.listdir(png)) == written and page.read_text().startswith("<!doctype html>")


# --------------------------------------------------------------------------- stdout on a full device


class FullDevice:
    """A stdout whose every write fails as /dev/full's do."""

    def write(self, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def flush(self):
        pass


def test_run_json_to_a_full_stdout_exits_0_and_says_where_the_result_is(tmp_path, capsys, monkeypatch, sim):
    """It exited 4 after the file was written."""
    spec = write_spec(tmp_path, sweep="    concurrency: [1]", out=4, extra="  requests: 2")
    monkeypatch.setattr(sys, "stdout", FullDevice())
    code = main(["run", spec, "--base-url", sim.url, "--json"])
    err = capsys.readouterr().err
    assert code == 0, err
    path = tmp_path / "r.json"
    assert (f"warning: could not print the result to stdout (No space left on device); it is on disk at "
            f"{path}") in err
    assert read(str(path))["complete"] is True


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_run_json_to_dev_full_exits_0(tmp_path, sim):
    spec = write_spec(tmp_path, sweep="    concurrency: [1]", out=4, extra="  requests: 2")
    with open("/dev/full", "w") as full:
        p = subprocess.run([PY, "-m", "benchc", "run", spec, "--base-url", sim.url, "--json"], stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "it is on disk at" in p.stderr and "Traceback" not in p.stderr
    assert read(str(tmp_path / "r.json"))["complete"] is True


# --------------------------------------------------------------------------- a dead server


def record(error=None, status=None):
    return RequestRecord(id="x", prompt_index=0, input_tokens=1, expected_output_tokens=1,
                         outcome=Outcome(error=error, status=status))


def test_connect_streak_counts_failures_since_the_last_answer():
    streak = ConnectStreak(inflight=8)
    assert streak.limit == failure_limit(8) == 16 and failure_limit(1) == MIN_CONNECT_FAILURES
    for _ in range(15):
        assert not streak.add(record(CONNECT))
    streak.add(record(HTTP, status=503))  # the server answered: it is there
    assert streak.streak == 0
    for _ in range(10):
        streak.add(record(CONNECT))
    streak.add(record(TIMEOUT))  # says nothing of the server: neither counts nor resets
    streak.add(record(STREAM_BROKEN, status=200))  # a 200 came: resets
    assert streak.streak == 0 and streak.reason is None
    tripped = [streak.add(record(CONNECT)) for _ in range(20)]
    assert tripped.count(True) == 1 and tripped.index(True) == 15
    assert streak.reason.startswith("16 requests in a row could not connect to the server")


@pytest.mark.slow
def test_an_attached_server_killed_mid_run_stops_the_point_and_exits_3(tmp_path):
    """Tens of thousands of `connect` errors at 100% CPU, exit 0, complete: true before."""
    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4")
    spec = write_spec(tmp_path, sweep="    concurrency: [2, 4]", out=48, extra="  requests: 400")
    p = subprocess.Popen([PY, "-m", "benchc", "run", spec, "--quiet", "--base-url", sim.url, "--set",
                          "load.warmup.requests=0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        # four finished at the simulator: in a closed loop of 2, the client had ended two of them
        # before it sent the other two
        wait_for(lambda: sim.trace.exists() and len(sim.trace.read_text().splitlines()) >= 4,
                 "four finished requests in the simulator's trace")
        sim.p.kill()
        sim.p.wait(timeout=30)
        out, err = p.communicate(timeout=120)
    finally:
        for proc in (p, sim.p):  # a failure above must leave no process behind
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        sim.p.stdout.close()
    finished = len(sim.trace.read_text().splitlines())
    assert p.returncode == 3, err
    assert "requests in a row could not connect to the server" in err
    doc = read(str(tmp_path / "r.json"))
    assert doc["complete"] is False and [e["kind"] for e in doc["errors"]] == ["server_unreachable"]
    assert doc["errors"][0]["point"] == "c=2" and doc["combinations"][0]["status"] == "server_unreachable"
    assert [pt["id"] for pt in doc["points"]] == ["c=2"]  # the sweep stopped there
    point = doc["points"][0]
    assert point["complete"] is False
    # what the server finished was measured, but for the two in flight as it died (their ends
    # may have been written, or traced, but not both)
    assert finished - 2 <= point["counts"]["completed"] <= finished + 2 and finished >= 4
    # the point stopped at the limit: the two in flight, then at most the limit and what was in
    # flight when it was reached
    assert point["counts"]["errors"].get(CONNECT, 0) <= failure_limit(2) + 2
    assert point["counts"]["sent"] <= finished + 2 + failure_limit(2) + 2


def _sim_pid_and_point_started(p, finished_needed: int) -> int:
    """Read `benchc run -vv` stderr until the embedded simulator has finished
    `finished_needed` requests of the first point (the simulator's own log lines); returns the
    simulator's pid."""
    pid, started, finished = None, False, 0
    for line in p.stderr:
        if "simulator (pid " in line:
            pid = int(line.split("simulator (pid ")[1].split(")")[0])
        elif ": start" in line and "c=" in line:
            started = True
        elif started and "finished:" in line and "request " in line:
            finished += 1
            if finished >= finished_needed:
                return pid
    raise AssertionError("benchc ended before the simulator finished requests")


@pytest.mark.slow
def test_the_embedded_simulator_killed_mid_run_ends_with_exit_3_and_the_measured_part_written(tmp_path):
    spec = write_spec(tmp_path, sweep="    concurrency: [2, 4]", out=48, extra="  requests: 400")
    p = subprocess.Popen([PY, "-m", "benchc", "run", spec, "-vv", "--set", "load.warmup.requests=0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # in a closed loop of 2, the client ended two requests before it sent the third and fourth
        pid = _sim_pid_and_point_started(p, 4)
        os.kill(pid, signal.SIGKILL)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 3, err
    assert "the simulator exited with status -9 during the run" in err
    doc = read(str(tmp_path / "r.json"))
    assert doc["complete"] is False and doc["combinations"][0]["status"] == "server_died"
    assert [e["kind"] for e in doc["errors"]] == ["server_died"]
    assert [pt["id"] for pt in doc["points"]] == ["c=2"]
    point = doc["points"][0]
    assert point["complete"] is False and point["counts"]["completed"] >= 2
    assert point["counts"]["errors"].get(CONNECT, 0) <= failure_limit(2) + 2


# --------------------------------------------------------------------------- launched servers

LAUNCH = """\
version: 1
name: launch
target:
  base_url: http://127.0.0.1:{{free}}/v1
  model: sim-model
server:
  command: {command}
  ready: {{timeout: {ready}, interval: 100ms}}
  stop_timeout: 5s
workload:
  dataset:
    random: {{input_tokens: 16, output_tokens: 16}}
load:
  warmup: {{requests: 0}}
  sweep: {{concurrency: [1]}}
  requests: 400
output:
  path: {path}
"""


def launch_spec(tmp_path, command: str, ready: str = "30s") -> str:
    f = tmp_path / "launch.yaml"
    f.write_text(LAUNCH.format(command=json.dumps(command), ready=ready, path=tmp_path / "r.json"))
    return str(f)


def read_stderr_until(p, text: str) -> list[str]:
    lines = []
    for line in p.stderr:
        lines.append(line)
        if text in line:
            return lines
    raise AssertionError(f"benchc ended before saying {text!r}: {''.join(lines)}")


@pytest.mark.slow
def test_ctrl_c_during_the_readiness_wait_exits_130_with_a_partial_result(tmp_path):
    """It exited 3 with no result file, saying it was finishing in-flight requests."""
    spec = launch_spec(tmp_path, f"exec {PY} -c 'import time; time.sleep(600)'", ready="10m")
    p = subprocess.Popen([PY, "-m", "benchc", "run", spec], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        lines = read_stderr_until(p, "launched the server (pid ")
        server_pid = int(lines[-1].split("(pid ")[1].split(")")[0])
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert "interrupted while waiting for the server to be ready: stopping" in err
    assert "in-flight" not in err
    doc = read(str(tmp_path / "r.json"))
    assert doc["interrupted"] is True and doc["complete"] is False and doc["points"] == []
    assert doc["combinations"][0]["status"] == "interrupted"
    wait_for(lambda: not alive(server_pid), "the server to be stopped")


def _children(pid: int) -> list[int]:
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            out += [int(x) for x in f.read().split()]
    return out


@pytest.mark.slow
def test_sigkill_of_benchc_leaves_no_server_process_behind(tmp_path):
    """A server.command shell and the server it started (a grandchild of the supervisor) both
    go when benchc is killed with SIGKILL, which runs no cleanup of benchc's own."""
    pids = tmp_path / "pids"
    command = (f"{PY} -m benchc sim --preset instant --port {{free}} --model sim-model & "
               f"echo $! > {pids}; wait")
    spec = launch_spec(tmp_path, command)
    with killed_after(subprocess.Popen([PY, "-m", "benchc", "run", spec], stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)) as p:
        lines = read_stderr_until(p, "ready after ")
        said = next(x for x in lines if "launched the server (pid " in x)
        shell = int(said.split("(pid ")[1].split(")")[0])
        sim = int(pids.read_text())
        supervisor = int(Path(f"/proc/{shell}/stat").read_text().rsplit(")", 1)[1].split()[1])
        assert supervisor in _children(p.pid) and sim in _children(shell)
    wait_for(lambda: not any(alive(x) for x in (supervisor, shell, sim)),
             "the supervisor, the shell and the simulator to be gone")
    log = (tmp_path / "r.server-0.log").read_text()
    assert "benchc is gone; stopping the server's process group" in log


@pytest.mark.slow
def test_sigkill_of_benchc_leaves_no_embedded_simulator_behind(tmp_path):
    """The embedded simulator runs under the launch supervisor: benchc killed with SIGKILL
    mid-point (no cleanup of its own runs) takes the simulator with it. It was left running."""
    spec = write_spec(tmp_path, sweep="    concurrency: [2]", out=48, extra="  requests: 400")
    with killed_after(subprocess.Popen([PY, "-m", "benchc", "run", spec, "-vv", "--set",
                                        "load.warmup.requests=0"],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)) as p:
        sim = _sim_pid_and_point_started(p, 2)
        assert alive(sim)
    try:
        wait_for(lambda: not alive(sim), "the simulator to be gone")
    finally:
        if alive(sim):  # the failure this test catches: leave no process behind it
            os.kill(sim, signal.SIGKILL)


def test_the_supervisor_reports_a_command_that_cannot_start(tmp_path, capsys):
    spec = launch_spec(tmp_path, "x")
    text = Path(spec).read_text().replace('command: "x"', "command: [/nonexistent/server]")
    Path(spec).write_text(text)
    code, err = run_main(capsys, ["run", spec])
    assert code == 3
    assert "server.command could not start: No such file or directory (/nonexistent/server)" in err


# --------------------------------------------------------------------------- file descriptors

FD_PROBE = """
import resource, sys
from benchc.run.fdlimit import ensure_fds
ensure_fds(int(sys.argv[1]))
print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


def _lowered(soft: int, hard: int):
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_soft_descriptor_limit_is_raised_toward_the_hard_one():
    p = subprocess.run([PY, "-c", FD_PROBE, "500"], capture_output=True, text=True, timeout=60,
                       preexec_fn=_lowered(256, 4096))
    assert p.returncode == 0, p.stderr
    assert int(p.stdout) == 500 + 64


def test_a_concurrency_the_hard_descriptor_limit_cannot_hold_is_refused_before_the_first_request(
        tmp_path, sim):
    spec = write_spec(tmp_path, sweep="    concurrency: [2, 1000]", out=4, extra="  requests: 4")
    p = subprocess.run([PY, "-m", "benchc", "run", spec, "--base-url", sim.url], capture_output=True,
                       text=True, timeout=120, preexec_fn=_lowered(256, 512))
    assert p.returncode == 2, p.stderr
    assert ("1000 requests in flight (the plan's widest point) need about 1064 file descriptors (one socket "
            "each, and 64 more), but this process may open at most 512 (ulimit -Hn)") in p.stderr
    assert_no_request_arrived(sim)
    assert not (tmp_path / "r.json").exists()


# --------------------------------------------------------------------------- the simulator's loop

SPIN_PROBE = """
import asyncio
from benchc.sim.model import make_config
from benchc.sim.server import serve_forever
asyncio.run(serve_forever(make_config("instant", max_num_seqs=0), 0))
"""


@pytest.mark.slow  # a simulator process
def test_a_simulator_that_admits_nothing_still_answers_and_stops_on_sigterm():
    """`benchc sim --param max_num_seqs=0` busy-looped and ignored SIGTERM (the spec now refuses
    0; the engine must not spin whatever its parameters)."""
    p = subprocess.Popen([PY, "-c", SPIN_PROBE], stdout=subprocess.PIPE, text=True)
    try:
        url = p.stdout.readline().split("listening on ")[1].split()[0]
        host, port = url.split("//")[1].split("/")[0].split(":")
        body = json.dumps({"model": "benchc-sim", "prompt": "hi", "max_tokens": 4, "stream": True})
        with socket.create_connection((host, int(port))) as s:
            s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
            # the request waits for a place that never comes; the server still answers /metrics
            wait_for(lambda: sim_metric(url, "vllm:num_requests_waiting") == 1, "the request to queue")
            p.send_signal(signal.SIGTERM)
            assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            p.kill()
        p.stdout.close()


@pytest.mark.slow
def test_ctrl_c_during_a_point_says_how_many_requests_it_lets_finish(tmp_path, sim):
    spec = write_spec(tmp_path, sweep="    concurrency: [2]", out=48, extra="  requests: 40")
    p = subprocess.Popen([PY, "-m", "benchc", "run", spec, "--base-url", sim.url, "--set",
                          "load.warmup.requests=0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        wait_for(lambda: sim.trace.exists() and len(sim.trace.read_text().splitlines()) >= 2,
                 "two finished requests in the simulator's trace")
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    # two in flight, or one in the instant between a request's end and its successor's start
    said = next(line for line in err.splitlines() if line.startswith("interrupted"))
    assert said in (f"interrupted during point c=2: finishing {n} in-flight request{s} (up to 5s); Ctrl-C "
                    "again to stop now" for n, s in ((2, "s"), (1, "")))


MATRIX = """\
version: 1
name: m
target:
  base_url: http://127.0.0.1:${{matrix.port}}/v1
  model: MiniMaxAI/MiniMax-M2.5
workload:
  dataset:
    random: {{input_tokens: 16, output_tokens: 4}}
load:
  warmup: {{requests: 0}}
  sweep: {{concurrency: [1]}}
  requests: 2
matrix:
  port: [{good}, {bad}]
output:
  path: {path}
"""


def test_a_combination_whose_target_cannot_be_reached_keeps_what_earlier_ones_measured(tmp_path, capsys, sim):
    """The whole run ended with exit 3 and no result, losing the first combination's point."""
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        bad = s.getsockname()[1]
    spec = tmp_path / "m.yaml"
    spec.write_text(MATRIX.format(good=sim.url.rsplit(":", 1)[1].split("/")[0], bad=bad,
                                  path=tmp_path / "r.json"))
    code, err = run_main(capsys, ["run", str(spec), "--quiet"])
    assert code == 3 and f"port={bad}: cannot reach the target at http://127.0.0.1:{bad}/v1" in err
    doc = read(str(tmp_path / "r.json"))
    assert [c["status"] for c in doc["combinations"]] == ["ok", "server_unreachable"]
    assert [(e["kind"], e["combination"]) for e in doc["errors"]] == [("server_unreachable", 1)]
    assert len(doc["points"]) == 1 and doc["points"][0]["counts"]["completed"] == 2
    assert doc["complete"] is False


def test_the_clients_own_failure_is_its_own_kind_and_never_a_completed_request(tmp_path, capsys, sim,
                                                                                monkeypatch, caplog):
    """An exception from benchc's code in a request went out of send() with no error set: the
    request was counted as completed (with no latencies) and an assertion hid the cause."""
    from benchc.metrics.record import CLIENT_ERROR
    from benchc.run import loadgen

    real, calls = loadgen.send_native, []

    async def failing_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("a bug in the client")
        return await real(*args, **kwargs)

    monkeypatch.setattr(loadgen, "send_native", failing_once)
    spec = write_spec(tmp_path, sweep="    concurrency: [1]", out=4, extra="  requests: 4")
    code, err = run_main(capsys, ["run", spec, "--base-url", sim.url])
    (point,) = read(str(tmp_path / "r.json"))["points"]
    assert point["counts"]["errors"] == {CLIENT_ERROR: 1} and point["counts"]["completed"] == 3
    assert point["counts"]["error_examples"][CLIENT_ERROR] == "RuntimeError: a bug in the client"
    (logged,) = [r for r in caplog.records if r.name == "benchc.run.loadgen"]
    assert logged.levelname == "ERROR" and logged.exc_info is not None  # with its traceback
