"""The supervisor of a launched server (and of the embedded simulator): no server outlives
benchc, even a benchc killed by SIGKILL (which runs no cleanup of its own), and its log never
holds a secret of the run in clear.

benchc runs this module (`python -I -m benchc.run.supervisor STOP_TIMEOUT_S [--keep-stdout] --
ARGV...`), in a session and process group of its own, with a pipe on its stdin whose other end
only benchc holds. benchc first writes the run's secrets on it (one line, a JSON list of
strings). The supervisor then starts ARGV in its group, says `pid N` on stdout (or `error
ERRNO STRERROR` when ARGV cannot start), and then:

- ARGV's stdout and stderr go through a scrubbing pump (run/logpump.py) to the supervisor's
  stderr (the server's log), line by line as they are written; with `--keep-stdout` (the
  embedded simulator, which says where it listens) its stdout goes to the supervisor's
  stdout instead, after the `pid N` line, so benchc reads that line first;
- when the server exits, it exits the same way (the same status, or killed by the same
  signal), so benchc sees the server's own exit;
- when benchc's end of the pipe closes -- benchc exited or was killed, whatever the way --
  it sends SIGTERM to the whole group, and SIGKILL after STOP_TIMEOUT_S. The group holds
  every process the server started (workers, a shell's children), which PR_SET_PDEATHSIG on
  the server alone would miss;
- a SIGTERM, SIGINT or SIGHUP to the group (benchc stopping the server) reaches the server
  directly; the supervisor itself stays until the server has gone, to report its status.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading

from benchc.redact import Scrubber
from benchc.run.logpump import pump

SECRETS_LINE_BYTES = 16 << 20  # the first line on stdin: benchc's own, a run's secrets


def _signal_group(sig: int) -> None:
    try:
        os.killpg(os.getpgid(0), sig)
    except (ProcessLookupError, PermissionError):
        pass


def _ignore(signum: int, frame: object) -> None:
    """A handler, not SIG_IGN: caught signals are reset on exec, ignored ones would be inherited."""


def _say(text: str, lock: threading.Lock) -> None:
    with lock, contextlib.suppress(OSError):
        os.write(2, text.encode())


def _read_secrets() -> Scrubber | None:
    """The first line benchc writes on stdin; None when benchc went before it wrote it."""
    line = b""
    while not line.endswith(b"\n") and len(line) < SECRETS_LINE_BYTES:
        data = os.read(0, 4096)  # unbuffered: what follows on fd 0 is the watcher's
        if not data:
            return None
        line += data
    return Scrubber(json.loads(line))


def _watch_parent(child: subprocess.Popen, stop_timeout_s: float, parent_gone: threading.Event,
                  lock: threading.Lock) -> None:
    while True:
        try:
            if not os.read(0, 4096):
                break
        except OSError:
            break
    parent_gone.set()
    _say("--- benchc supervisor: benchc is gone; stopping the server's process group\n", lock)
    _signal_group(signal.SIGTERM)
    try:
        child.wait(stop_timeout_s)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(signal.SIGKILL)  # what is left of the group, this process included


def main(argv: list[str]) -> int:
    keep_stdout = len(argv) > 1 and argv[1] == "--keep-stdout"
    if keep_stdout:
        argv = argv[:1] + argv[2:]
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: supervisor.py STOP_TIMEOUT_S [--keep-stdout] -- ARGV...\n")
        return 2
    stop_timeout_s = float(argv[0])
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _ignore)
    scrubber = _read_secrets()
    if scrubber is None:
        return 1  # benchc is gone already: nothing to start
    try:
        child = subprocess.Popen(argv[2:], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE if keep_stdout else subprocess.STDOUT)
    except OSError as e:
        print(f"error {e.errno or 0} {e.strerror or e}", flush=True)
        return 127
    print(f"pid {child.pid}", flush=True)
    child_gone = threading.Event()
    log_lock = threading.Lock()  # the pumps and the watcher write lines to one log
    assert child.stdout is not None
    outputs = [(child.stdout.fileno(), 1 if keep_stdout else 2)]
    if child.stderr is not None:
        outputs.append((child.stderr.fileno(), 2))
    pumps = [threading.Thread(target=pump, daemon=True,
                              args=(src, dst, scrubber, child_gone, log_lock if dst == 2 else None))
             for src, dst in outputs]
    for t in pumps:
        t.start()
    parent_gone = threading.Event()
    watcher = threading.Thread(target=_watch_parent, args=(child, stop_timeout_s, parent_gone, log_lock),
                               daemon=True)
    watcher.start()
    status = child.wait()
    child_gone.set()
    for t in pumps:
        t.join()  # what the server wrote before it went
    if parent_gone.is_set():
        watcher.join()  # it ends the group, this process included
    if status < 0:
        # killed by a signal: die of the same one, so benchc reads the server's own status
        with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP take no handler
            signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    return status if status >= 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
