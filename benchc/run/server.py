"""Launch (or attach to) the server under test: process group, log file, readiness,
and a stop that always happens.

A launched server runs in its own process group (session), with stdout and stderr
appended to its log file. Readiness: `ready.path` on the server's root (default
/health) must answer 200, and then /v1/models must list the model. Stopping sends
SIGTERM to the whole group, then SIGKILL after `stop_timeout`. The runner stops
the server on every way out: the end, an error, Ctrl-C, and SIGTERM to benchc.

`{free}` in server.command and target.base_url is replaced by one free local port
chosen at launch, so a spec can launch a server on a port nobody else holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import time
from collections import deque
from dataclasses import dataclass
from typing import IO

import aiohttp

from benchc import redact
from benchc.client.bounded import MODELS_BYTES, read_json
from benchc.errors import Interrupted, RunError
from benchc.plan.model import Server
from benchc.redact import redact_argv, redact_url

log = logging.getLogger(__name__)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def server_root(base_url: str) -> str:
    """http://h:8000/v1 -> http://h:8000 (readiness paths are on the server's root)."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def log_tail(path: str | None, lines: int = 30) -> str:
    """The log's last lines, every known secret of the run replaced (they go into the result
    and onto the terminal)."""
    if not path or not os.path.exists(path):
        return ""
    with open(path, "rb") as f:
        tail = deque(f, maxlen=lines)
    return redact.active().text(b"".join(tail).decode("utf-8", "replace"))


class ServerFailed(RunError):
    """The launched server exited or never became ready; carries its log tail."""

    def __init__(self, message: str, status: int | None, tail: str):
        self.status, self.tail = status, tail
        super().__init__(message + (f"\n--- last lines of the server log ---\n{tail}" if tail else ""))


class NotStarted(Exception):
    """The supervisor could not start the command: why, and the supervisor's exit status."""

    def __init__(self, why: str, status: int):
        self.why, self.status = why, status
        super().__init__(why)


async def supervise(argv: list[str], stop_timeout_s: float, *, stderr: IO[bytes] | None,
                    keep_stdout: bool = False, cwd: str | None = None,
                    env: dict[str, str] | None = None) -> tuple[asyncio.subprocess.Process, int]:
    """Start `argv` under the supervisor (run/supervisor.py), in a session and process group
    of its own; returns the supervisor's process (it exits as `argv` does) and `argv`'s pid.
    benchc holds the supervisor's stdin: should benchc die in any way, the pipe closes and the
    supervisor stops the whole group. `argv`'s stdout and stderr go to `stderr` (None:
    benchc's own), or with `keep_stdout` its stdout to the returned process's stdout, after
    the pid line; both scrubbed of the active scrubber's secrets as they are written. Raises
    OSError when the supervisor cannot start, NotStarted when `argv` cannot."""
    # -I: the supervisor is benchc's own Python; nothing of the server's environment steers it
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-m", "benchc.run.supervisor", f"{stop_timeout_s:g}",
        *(["--keep-stdout"] if keep_stdout else []), "--", *argv, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=stderr, cwd=cwd, env=env, start_new_session=True)
    assert proc.stdin is not None and proc.stdout is not None
    # the secrets on the pipe only benchc holds: not in argv or the environment, which others may read
    proc.stdin.write(json.dumps(redact.active().secrets).encode() + b"\n")
    with contextlib.suppress(ConnectionError):  # the supervisor already gone: its status says why
        await proc.stdin.drain()
    said = (await proc.stdout.readline()).decode(errors="replace").split(maxsplit=2)
    if len(said) < 2 or said[0] != "pid":
        status = await proc.wait()
        why = said[2].strip() if len(said) == 3 and said[0] == "error" else f"exit status {status}"
        raise NotStarted(why, status)
    return proc, int(said[1])


async def stop_group(proc: asyncio.subprocess.Process, timeout_s: float) -> int:
    """SIGTERM a supervised process group, SIGKILL it after `timeout_s`; returns the exit
    status (the supervisor's, which is its command's)."""
    if proc.returncode is None:
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), timeout_s)
        except TimeoutError:
            _signal_group(proc.pid, signal.SIGKILL)
            await proc.wait()
    # whatever the leader did, nothing of its group may outlive benchc
    _signal_group(proc.pid, signal.SIGKILL)
    return await proc.wait()


@dataclass
class Launched:
    proc: asyncio.subprocess.Process  # the supervisor (run/supervisor.py): exits as the server does
    log_path: str
    started: float
    server_pid: int = 0  # the server's own process
    ready_s: float | None = None


async def launch(server: Server, argv: list[str], log_path: str) -> Launched:
    """Start `argv` under the supervisor (supervise), output appended to `log_path`."""
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    env = {**os.environ, **server.env}
    # scrubbed as it is written (supervise), and 0600 all the same: a server may print what
    # benchc does not know to be a secret; only the user who ran benchc may read it
    log_file = os.fdopen(os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab")
    try:
        said = f"--- benchc: launching {' '.join(redact_argv(argv))}\n"
        log_file.write(redact.active().text(said).encode())
        log_file.flush()
        proc, pid = await supervise(argv, server.stop_timeout_s, stderr=log_file, cwd=server.cwd, env=env)
    except OSError as e:
        raise ServerFailed(f"server.command could not start: {e.strerror} ({server.cwd or argv[0]})", None,
                           log_tail(log_path)) from e
    except NotStarted as e:
        raise ServerFailed(f"server.command could not start: {e.why} ({argv[0]})", e.status,
                           log_tail(log_path)) from e
    finally:
        log_file.close()
    log.info("launched (pid %d, supervisor %d): %s; log: %s", pid, proc.pid, " ".join(redact_argv(argv)),
             log_path)
    return Launched(proc, log_path, time.perf_counter(), pid)


async def wait_ready(launched: Launched | None, base_url: str, server: Server, model: str,
                     headers: dict, stop: asyncio.Event) -> float:
    """Poll until ready; returns seconds from launch (0 when attached). Raises ServerFailed."""
    root = server_root(base_url)
    deadline = time.perf_counter() + server.ready_timeout_s
    last = "no answer yet"
    log.info("waiting for %s%s (up to %gs)", redact_url(root), server.ready_path, server.ready_timeout_s)
    async with aiohttp.ClientSession() as s:
        while True:
            if launched and launched.proc.returncode is not None:
                raise ServerFailed(f"the server exited with status {launched.proc.returncode} before it "
                                   "was ready", launched.proc.returncode, log_tail(launched.log_path))
            if stop.is_set():
                raise Interrupted("interrupted while waiting for the server to be ready")
            try:
                async with s.get(root + server.ready_path, headers=headers, allow_redirects=False,
                                 timeout=aiohttp.ClientTimeout(total=5)) as r:
                    ok = r.status == 200
                    last = f"{server.ready_path} answered {r.status}"
                if ok:
                    async with s.get(base_url.rstrip("/") + "/models", headers=headers, allow_redirects=False,
                                     timeout=aiohttp.ClientTimeout(total=5)) as r:
                        body = await read_json(r, MODELS_BYTES, "/v1/models") if r.status == 200 else {}
                    listed = body.get("data") if isinstance(body, dict) else None
                    listed = listed if isinstance(listed, list) else []  # any JSON may come back
                    names = [m.get("id") for m in listed if isinstance(m, dict)]
                    if model in names:
                        log.info("ready: %s answered 200 and /v1/models lists %r", server.ready_path, model)
                        return (time.perf_counter() - launched.started) if launched else 0.0
                    last = f"/v1/models lists {names}, not {model!r}"
            except (aiohttp.ClientError, TimeoutError, ValueError) as e:
                if _request_cannot_be_made(e):
                    # asking again cannot help: say so now, not after ready.timeout
                    raise ServerFailed(f"the readiness check cannot be sent ({e}): a configuration "
                                       "error, not a server still starting", None,
                                       log_tail(launched.log_path) if launched else "") from e
                last = f"{type(e).__name__}: {e}"[:200]
            log.debug("readiness poll: %s", last)
            if time.perf_counter() >= deadline:
                raise ServerFailed(f"the server was not ready after {server.ready_timeout_s:g}s ({last})",
                                   None, log_tail(launched.log_path) if launched else "")
            try:
                await asyncio.wait_for(stop.wait(), server.ready_interval_s)
            except TimeoutError:
                pass


def _request_cannot_be_made(e: BaseException) -> bool:
    """aiohttp refuses to build the request (an invalid URL, credentials given twice): a
    ValueError that is neither a failed connection nor an unreadable answer."""
    if isinstance(e, aiohttp.InvalidURL):
        return True
    return isinstance(e, ValueError) and not isinstance(e, (aiohttp.ClientError, json.JSONDecodeError))


async def stop_server(launched: Launched | None, timeout_s: float) -> int | None:
    """SIGTERM the whole process group, SIGKILL it after `timeout_s`; returns the exit status."""
    if launched is None:
        return None
    return await stop_group(launched.proc, timeout_s)


async def terminate(proc: asyncio.subprocess.Process, timeout_s: float) -> int:
    """SIGTERM a child process, SIGKILL it after `timeout_s`; waits for it (no zombie)."""
    if proc.returncode is None:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), timeout_s)
        except TimeoutError:
            proc.kill()
    return await proc.wait()


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
