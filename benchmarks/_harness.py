"""Shared pieces of the benchmark harnesses: a simulator in its own process (pinned to
core 0 where taskset exists), and client workers in processes of their own (core 1)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from contextlib import contextmanager

PIN = sys.platform.startswith("linux") and (os.cpu_count() or 1) > 1 and shutil.which("taskset")


def pinned(cmd: list[str], core: int) -> list[str]:
    return ["taskset", "-c", str(core), *cmd] if PIN else cmd


@contextmanager
def simulator(params: dict, trace: str | None = None, model: str | None = None):
    """Yields the base URL of a `benchc sim` configured with `params` (JSON), serving `model`."""
    cmd = [sys.executable, "-m", "benchc", "sim", "--port", "0", "--config-json", json.dumps(params)]
    if model:
        cmd += ["--model", model]
    if trace:
        cmd += ["--trace", trace]
    p = subprocess.Popen(pinned(cmd, 0), stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        yield line.split("listening on ")[1].split()[0]
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)
        p.stdout.close()


def emit(result: dict) -> None:
    """A worker's result: into the file its parent named (a result of more than a pipe's 64 KiB
    once came back through stdout with bytes missing at that boundary), else to stdout."""
    path = os.environ.get("BENCHC_BENCH_RESULT")
    if path:
        with open(path, "w") as f:
            json.dump(result, f)
    else:
        print(json.dumps(result))


def worker(script: str, args: list[str], core: str | None) -> dict:
    """Run `script --worker ARGS` in a pinned process; it emit()s one JSON object."""
    env = dict(os.environ)
    if core == "python":
        env["BENCHC_NO_EXTENSIONS"] = "1"
    with tempfile.TemporaryDirectory() as d:
        env["BENCHC_BENCH_RESULT"] = os.path.join(d, "result.json")
        subprocess.run(pinned([sys.executable, script, "--worker", *args], 1), env=env, check=True,
                       timeout=600)
        with open(env["BENCHC_BENCH_RESULT"]) as f:
            return json.load(f)
