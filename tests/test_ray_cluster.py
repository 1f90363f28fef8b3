"""Distributed runs against a real Ray cluster, as a user runs them: a head started by
`ray start --head` in a process of its own (started in another working directory than the
runs', so its workers see none of the spec's files by relative path), joined by `benchc run`
processes by address. Nothing of the cluster or the runs outlives the module, even when a
test fails: every process started here carries a marker in its environment, and the
fixture's teardown ends each that is left, by its pid."""

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from benchc.results.document import read
from benchc.run.server import free_port
from tests.conftest import wait_for
from tests.test_ray import write_files_spec

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow

MARKER = "BENCHC_TEST_RAY_CLUSTER"
CPUS = 4

SPEC = """\
version: 1
name: cluster
target:
  sim: {{preset: minimax-m2.5-tp4}}
  model: m
workload:
  dataset:
    random: {{input_tokens: 16, output_tokens: 8}}
load:
  warmup: {{requests: 0}}
  sweep: {{concurrency: {concurrency}}}
  requests: {requests}
"""

# what a driver on the cluster sees: the run actors left, and the CPUs free
PROBE = """
import json, sys, ray
ray.init(address=sys.argv[1], include_dashboard=False, log_to_driver=False, logging_level="error")
print(json.dumps({"named": ray.util.list_named_actors(all_namespaces=True),
                  "free": ray.available_resources().get("CPU", 0)}))
"""


def _marked_pids(marker: str) -> list[int]:
    """Processes whose environment carries this module's marker value (this machine's
    other Ray clusters never do)."""
    pids = []
    needle = f"{MARKER}={marker}".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    pids.append(int(name))
        except OSError:
            continue  # gone, or not ours to read
    return pids


class Head:
    """`ray start --head --block` on a free port with its own temp dir and token."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="bcray-", dir="/tmp")  # short: Ray's socket paths
        self.elsewhere = os.path.join(self.dir, "cwd")
        os.mkdir(self.elsewhere)
        token = os.path.join(self.dir, "token")
        with open(token, "w") as f:
            f.write(secrets.token_hex(32))
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"  # as a user would name it; Ray registered the node's IP
        self.env = {**os.environ, MARKER: self.dir, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": token,
                    "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0", "RAY_USAGE_STATS_ENABLED": "0"}
        self.env.pop("RAY_ADDRESS", None)
        self.log = open(os.path.join(self.dir, "head.log"), "w")  # noqa: SIM115 - closed in stop()
        ports = [f"--{flag}={free_port()}" for flag in ("dashboard-port",
                                                        "dashboard-agent-listen-port")]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", f"--port={self.port}",
             f"--num-cpus={CPUS}", f"--temp-dir={self.dir}/t", "--block", "--include-dashboard=false",
             "--disable-usage-stats", "--object-store-memory=100000000", *ports],
            cwd=self.elsewhere, env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True)

    def wait_ready(self) -> None:
        def up() -> bool:
            assert self.proc.poll() is None, f"ray start exited:\n{self.text()}"
            return "Ray runtime started" in self.text()
        wait_for(up, "the Ray head to start", timeout_s=120)

    def text(self) -> str:
        with open(os.path.join(self.dir, "head.log")) as f:
            return f.read()

    def probe(self) -> dict:
        out = subprocess.run([sys.executable, "-c", PROBE, self.address], env=self.env, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    def idle(self) -> bool:
        p = self.probe()
        return p["free"] == CPUS and not [a for a in p["named"] if a["namespace"] == "benchc"]

    def stop(self) -> None:
        """The head ends its own processes on SIGTERM (no drain); any left -- a worker, a
        run, a simulator started here -- is killed by pid."""
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=10)
            deadline = time.monotonic() + 20
            while _marked_pids(self.dir) and time.monotonic() < deadline:
                time.sleep(0.2)  # ending on their own after the head
            for pid in _marked_pids(self.dir):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            wait_for(lambda: not _marked_pids(self.dir), "every process of the test cluster to end", 20)
        finally:
            self.log.close()
            shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def head():
    h = Head()
    try:
        h.wait_ready()
        yield h
    finally:
        h.stop()


def benchc_run(head: Head, spec: str, out: str, *args: str, cwd: str | None = None, env: dict | None = None
               ) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "benchc", "run", spec, "--out", out, "--backend", "ray",
                             *args], cwd=cwd, env={**head.env, **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return proc.returncode, err


def test_two_runs_at_once_on_one_cluster_both_complete(head, tmp_path):
    # run A: points below, at and above the worker count
    a_spec = tmp_path / "a.yaml"
    a_spec.write_text(SPEC.format(concurrency="[1, 3]", requests=12))
    # run B: a file dataset and a tokenizer by paths relative to the spec, named relative to
    # the run's working directory; the workers' is another, so they must be sent what they need
    b_dir = tmp_path / "b"
    write_files_spec(b_dir)
    a = benchc_run(head, str(a_spec), str(tmp_path / "a.json"), "--ray-address", head.address,
                   "--workers", "2")
    b = benchc_run(head, "s.yaml", str(tmp_path / "b.json"), "--ray-address", head.address, "--workers", "2",
                   cwd=str(b_dir))
    (a_code, a_err), (b_code, b_err) = finish(a), finish(b)
    assert (a_code, b_code) == (0, 0), a_err[-3000:] + b_err[-3000:]
    da, db = read(str(tmp_path / "a.json")), read(str(tmp_path / "b.json"))
    assert da["backend"]["actors"] != db["backend"]["actors"]  # each run its own actors
    assert [(p["id"], p["counts"]["sent"], p["counts"]["completed"], p["backend"]["workers"])
            for p in da["points"]] == [("c=1", 12, 12, 1), ("c=3", 12, 12, 2)]
    assert [(p["id"], p["counts"]["sent"], p["counts"]["completed"], p["backend"]["completed_shards"])
            for p in db["points"]] == [("c=1", 7, 7, 1), ("c=3", 7, 7, 2)]
    # counted with the tokenizer the workers were sent
    assert [p["tokens"]["tokenizer"]["requests"] for p in db["points"]] == [7, 7]
    wait_for(head.idle, "the runs' actors to be gone and their CPUs free", timeout_s=60)


def test_addresses_and_sizes_that_cannot_work_say_why(head, tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(concurrency="[1]", requests=2))
    nobody = f"127.0.0.1:{free_port()}"
    code, err = finish(benchc_run(head, str(spec), str(tmp_path / "x.json"), "--ray-address", nobody))
    assert code == 3 and f"cannot reach the Ray cluster at {nobody}: Connection refused" in err
    # the head's token is not used for an address given explicitly unless asked: Ray's
    # connect fails (Ray retries it for 20 s; three tries are enough here)
    code, err = finish(benchc_run(head, str(spec), str(tmp_path / "y.json"), "--ray-address", head.address,
                                  env={"RAY_AUTH_MODE": "disabled", "RAY_gcs_server_port_wait_time_s": "3"}))
    assert code == 3 and f"cannot join the Ray cluster at {head.address}: " in err
    assert "InvalidAuthToken" in err and "run with RAY_AUTH_MODE=token" in err
    code, err = finish(benchc_run(head, str(spec), str(tmp_path / "z.json"), "--ray-address", head.address,
                                  "--workers", str(CPUS + 1)))
    assert code == 3 and f"has {CPUS} CPUs; --workers {CPUS + 1} needs one per worker" in err
    assert "Traceback" not in err


def test_sigterm_mid_point_keeps_what_was_measured_and_leaves_no_actor(head, tmp_path):
    from tests.simrun import Sim

    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4", "--model", "m")
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(concurrency="[4]", requests=400).replace("output_tokens: 8",
                                                                         "output_tokens: 64"))
    try:
        run = benchc_run(head, str(spec), str(tmp_path / "t.json"), "--ray-address", head.address,
                         "--workers", "2", "--base-url", sim.url)
        # both workers are inside the point once the simulator finished a first request
        wait_for(lambda: sim.trace.exists() and sim.trace.read_text().strip(), "a first finished request",
                 timeout_s=120)
        run.send_signal(signal.SIGTERM)
        code, err = finish(run)
    finally:
        sim.close()
    assert code == 130, err[-3000:]
    doc = read(str(tmp_path / "t.json"))
    p, = doc["points"]
    assert doc["interrupted"] is True and p["complete"] is False
    assert p["backend"]["completed_shards"] == 2  # each worker stopped and returned its shard
    finished = len(sim.trace.read_text().splitlines())
    assert 1 <= p["counts"]["completed"] <= finished < 400
    wait_for(head.idle, "the run's actors to be gone and their CPUs free", timeout_s=60)
