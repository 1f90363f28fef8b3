"""The supervisor of a launched server: no server outlives benchc, even a benchc killed by
SIGKILL (which runs no cleanup of its own).

benchc runs this file as a script (`python -I supervisor.py STOP_TIMEOUT_S [--keep-stdout] --
ARGV...`; it imports nothing of benchc), in a session and process group of its own, with a
pipe on its stdin whose other end only benchc holds. It starts ARGV in its group, says `pid N`
on stdout (or `error ERRNO STRERROR` when ARGV cannot start), and then:

- when the server exits, it exits the same way (the same status, or killed by the same
  signal), so benchc sees the server's own exit;
- when benchc's end of the pipe closes -- benchc exited or was killed, whatever the way --
  it sends SIGTERM to the whole group, and SIGKILL after STOP_TIMEOUT_S. The group holds
  every process the server started (workers, a shell's children), which PR_SET_PDEATHSIG on
  the server alone would miss;
- a SIGTERM, SIGINT or SIGHUP to the group (benchc stopping the server) reaches the server
  directly; the supervisor itself stays until the server has gone, to report its status.

ARGV's stdout goes to the supervisor's stderr (the server's log), or with `--keep-stdout`
(the embedded simulator, which says where it listens) to the supervisor's stdout, after the
`pid N` line, so benchc reads that line first whatever the child prints.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import threading


def _signal_group(sig: int) -> None:
    try:
        os.killpg(os.getpgid(0), sig)
    except (ProcessLookupError, PermissionError):
        pass


def _ignore(signum: int, frame: object) -> None:
    """A handler, not SIG_IGN: caught signals are reset on exec, ignored ones would be inherited."""


def _watch_parent(child: subprocess.Popen, stop_timeout_s: float, parent_gone: threading.Event) -> None:
    while True:
        try:
            if not os.read(0, 4096):
                break
        except OSError:
            break
    parent_gone.set()
    sys.stderr.write("--- benchc supervisor: benchc is gone; stopping the server's process group\n")
    sys.stderr.flush()
    _signal_group(signal.SIGTERM)
    try:
        child.wait(stop_timeout_s)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(signal.SIGKILL)  # what is left of the group, this process included


def _relay(src: int, dst: int, child_gone: threading.Event) -> None:
    """Copy what the child writes on `src` to `dst`, until the pipe ends, or the child has
    gone and what it wrote before it went has been read: a process it left behind (a
    daemon holding the pipe) must not keep the supervisor from reporting the exit."""
    while True:
        ready, _, _ = select.select([src], [], [], 0 if child_gone.is_set() else 0.1)
        if not ready:
            if child_gone.is_set():
                return
            continue
        data = os.read(src, 65536)
        if not data:
            return
        with contextlib.suppress(OSError):  # benchc stopped reading: nothing else to do with it
            os.write(dst, data)


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
    try:
        child = subprocess.Popen(argv[2:], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE if keep_stdout else 2, stderr=2)
    except OSError as e:
        print(f"error {e.errno or 0} {e.strerror or e}", flush=True)
        return 127
    print(f"pid {child.pid}", flush=True)
    child_gone = threading.Event()
    relay = None
    if child.stdout is not None:  # --keep-stdout: after the pid line, never before it
        relay = threading.Thread(target=_relay, args=(child.stdout.fileno(), 1, child_gone), daemon=True)
        relay.start()
    parent_gone = threading.Event()
    watcher = threading.Thread(target=_watch_parent, args=(child, stop_timeout_s, parent_gone), daemon=True)
    watcher.start()
    status = child.wait()
    child_gone.set()
    if relay is not None:
        relay.join()
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
