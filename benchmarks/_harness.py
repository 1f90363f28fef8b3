"""Shared pieces of the benchmark harnesses: a simulator in its own process (pinned to
core 0 where taskset exists), and client workers in processes of their own (core 1)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from contextlib import contextmanager

PIN = sys.platform.startswith("linux") and (os.cpu_count() or 1) > 1 and shutil.which("taskset")


def pinned(cmd: list[str], core: int) -> list[str]:
    return ["taskset", "-c", str(core), *cmd] if PIN else cmd


@contextmanager
def simulator(params: dict, trace: str | None = None):
    """Yields the base URL of a `benchc sim` configured with `params` (JSON)."""
    cmd = [sys.executable, "-m", "benchc", "sim", "--port", "0", "--config-json", json.dumps(params)]
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


def worker(script: str, args: list[str], core: str | None) -> dict:
    """Run `script --worker ARGS` in a pinned process; it prints one JSON line."""
    env = dict(os.environ)
    if core == "python":
        env["BENCHC_NO_EXTENSIONS"] = "1"
    out = subprocess.run(pinned([sys.executable, script, "--worker", *args], 1), env=env,
                         capture_output=True, text=True, check=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])
