"""The receive loop, pure Python (the reference twin of csrc/client/_rxloop_c.pyx): a thread
that reads the measured streams' sockets, so the asyncio loop is woken once per batch of
finished responses instead of once per read.

    loop = RxLoop()                      # its thread starts at once
    conn = loop.attach(sock, token)      # watch a connected socket (non-blocking)
    conn.begin(reader)                   # its request was written: feed `reader` from now on
    ... asyncio's add_reader(loop.fileno(), ...) -> loop.finished() -> [token, ...]
    conn.poll()                          # "idle" (the response finished, the socket may carry
                                         # another), "active", or "closed" (not watched any more)
    conn.closed_for                      # why the loop closed it: "response" (a finished response
                                         # said so), "lost" (the connection ended under a response:
                                         # EOF, an error), "end" (it ended while idle), "stray"
                                         # (bytes came while idle); None otherwise
    conn.take_back() / conn.detach()     # a timeout or cancellation / before closing the socket

The thread reads each ready socket (level-triggered) in a run of at most RUN_READS reads,
each stamped with the kernel's receive time (benchc.client._rx), and feeds each read to the
connection's ResponseReader
(benchc.client._response): the same reader the asyncio transports feed, so a response read
here means what it means there. A slot moves IDLE -> ACTIVE (Python, begin) -> IDLE (the
thread, a finished keep-alive response) or CLOSED (the thread: the response said close, the
connection ended or broke, bytes came while idle; or Python: take_back, detach). Every move
happens under the slot's lock; every move the thread makes is reported as the slot's token.
The compiled twin does the same without the GIL, edge-triggered, and records what the
thread costs (its CPU and its lag from a read's kernel stamp to the read) the same way.

Why runs: a server that keeps its socket full (a flood) must not hold the loop, nor the
slot's lock, for as long as it writes: the loop then read no other connection, and Python's
take_back (a timeout, on the event loop's thread) waited for the flood to pause. After a run
the loop turns to the other ready sockets and comes back next turn. A Python thread waiting
for a slot's lock says so first (`_wanted`), and the loop passes the slot over until Python
has had it, rather than racing it for the lock (a lock is not fair).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from benchc.client._response_py import ResponseReader
from benchc.client._rx_py import read_stamped
from benchc.client._stream_py import StreamParser
from benchc.metrics.latency import new_histogram, ns_to_us

RECV_SIZE = 64 * 1024  # as http1.RECV_SIZE
RUN_READS = 4  # reads of one socket in a row before the loop turns to the others
MAX_RUN_BYTES = RUN_READS * RECV_SIZE  # the most one run reads from one socket
IDLE, ACTIVE, CLOSED = "idle", "active", "closed"
RESPONSE, LOST, END, STRAY = "response", "lost", "end", "stray"  # why the loop closed a slot (closed_for)
CLOCK = time.perf_counter_ns

__all__ = ["RxConn", "RxLoop", "ResponseReader", "StreamParser"]  # the reader and parser it feeds


class RxLoop:
    def __init__(self) -> None:
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()  # readable while finished() has tokens
        self._stop_r, self._stop_w = os.pipe()
        for fd in (self._wake_r, self._wake_w):
            os.set_blocking(fd, False)
        self._sel.register(self._stop_r, selectors.EVENT_READ, None)
        self._q = threading.Lock()  # the finished tokens and the wake flag
        self._done: list[int] = []
        self._wake_pending = False
        self._stats = threading.Lock()
        self._lag = new_histogram()
        self._reads = self._bytes = 0
        self._longest_run = 0
        self.stopped = False
        self._thread = threading.Thread(target=self._run, name="benchc-rxloop-py", daemon=True)
        self._thread.start()

    def fileno(self) -> int:
        return self._wake_r

    def attach(self, sock: socket.socket, token: int) -> RxConn:
        """Watch a connected socket; its finished responses and its end come back as `token`."""
        return RxConn(self, sock, token)

    def finished(self) -> list[int]:
        """Tokens of the slots that finished a response or closed since the last call."""
        try:
            os.read(self._wake_r, 4096)
        except BlockingIOError:
            pass
        with self._q:
            out, self._done = self._done, []
            self._wake_pending = False
        return out

    def take_lag(self) -> tuple:
        """The histogram of the loop's lag (us from a read's kernel stamp to the read) since the
        last call, and the reads and bytes since then."""
        with self._stats:
            old, self._lag = self._lag, new_histogram()
            out = old, self._reads, self._bytes
            self._reads = self._bytes = 0
        return out

    def take_longest_run(self) -> int:
        """The most bytes the loop read from one connection in one run (one after another,
        serving no other connection and letting Python take no slot meanwhile) since the last
        call."""
        with self._stats:
            out, self._longest_run = self._longest_run, 0
        return out

    @property
    def thread_id(self) -> int:
        """The loop's thread, as the system knows it (for perf, top -H)."""
        assert self._thread.native_id is not None  # started in __init__
        return self._thread.native_id

    def cpu_s(self) -> float:
        """CPU seconds the loop's thread used so far."""
        assert self._thread.ident is not None  # started in __init__
        return time.clock_gettime(time.pthread_getcpuclockid(self._thread.ident))

    def close(self) -> None:
        if self.stopped:
            return
        os.write(self._stop_w, b"x")
        self._thread.join()
        self.stopped = True
        self._sel.close()
        for fd in (self._wake_r, self._wake_w, self._stop_r, self._stop_w):
            os.close(fd)

    # ---------------------------------------------------------------- the thread

    def _run(self) -> None:
        while True:
            wake = False
            for key, _ in self._sel.select():
                if key.data is None:
                    return
                wake = self._serve(key.data) or wake
            if wake:  # once per batch: Python drains every finished token at once
                os.write(self._wake_w, b"x")

    def _serve(self, conn: RxConn) -> bool:
        """One run of reads of a ready socket: at most RUN_READS, until a read comes short (the
        socket is empty), the slot closes, or Python waits for it (a socket left with bytes is
        ready again next turn); True when Python must be woken."""
        if conn._wanted:
            return False
        wake = False
        run = 0
        with conn._lock:
            for reads in range(RUN_READS):
                if conn._state == CLOSED or reads and conn._wanted:
                    break
                n, woke = self._read(conn)
                wake = woke or wake
                run += n
                if n < RECV_SIZE:
                    break
        with self._stats:
            self._longest_run = max(self._longest_run, run)
        return wake

    def _read(self, conn: RxConn) -> tuple[int, bool]:
        """One read of a slot's socket (under its lock): the bytes read (0 at the socket's end
        or when it was empty), and whether Python must be woken."""
        try:
            data, stamp = read_stamped(conn.sock, RECV_SIZE)
        except (BlockingIOError, InterruptedError):
            return 0, False
        except OSError as e:
            return 0, self._ended(conn, e, CLOCK())
        now = CLOCK()
        if not data:
            return 0, self._ended(conn, None, now)
        with self._stats:
            self._reads += 1
            self._bytes += len(data)
            self._lag.record(ns_to_us(now - stamp))
        if conn._state == IDLE:  # bytes nobody asked for: the connection is out of step
            return len(data), self._close(conn, STRAY)
        r = conn._reader
        r.feed(data, stamp)
        if not r.finished:
            return len(data), False
        conn._reader = None
        if r.keep_alive:
            conn._state = IDLE
            return len(data), self._push(conn.token)
        return len(data), self._close(conn, RESPONSE)

    def _ended(self, conn: RxConn, exc: OSError | None, now: int) -> bool:
        if conn._state == ACTIVE:
            conn._reader.lost(exc, now)
            conn._reader = None
            return self._close(conn, LOST)
        return self._close(conn, END)

    def _close(self, conn: RxConn, why: str) -> bool:
        conn._unwatch()
        conn._state = CLOSED
        conn.closed_for = why
        return self._push(conn.token)

    def _push(self, token: int) -> bool:
        with self._q:
            self._done.append(token)
            wake = not self._wake_pending
            self._wake_pending = True
        return wake


class RxConn:
    """One connection's slot in the loop, driven from Python."""

    def __init__(self, loop: RxLoop, sock: socket.socket, token: int):
        if loop.stopped:
            raise RuntimeError("the receive loop is closed")
        self.loop, self.sock, self.token = loop, sock, token
        self._lock = threading.Lock()
        self._wanted: list[None] = []  # one item per Python thread waiting for _lock (append and
        # pop are atomic under the GIL): the loop passes the slot over meanwhile
        self._state = IDLE
        self._reader: Any = None  # ACTIVE: the exchange's ResponseReader
        self._watched = True
        self.closed_for: str | None = None  # why the loop closed it (written before CLOSED, then final)
        loop._sel.register(sock, selectors.EVENT_READ, self)

    def begin(self, reader) -> bool:
        """IDLE -> ACTIVE: the loop feeds `reader` from now on. False when the loop saw the
        connection end (or bytes nobody asked for) while it was idle."""
        with self._held():
            if self._state != IDLE:
                return False
            self._reader, self._state = reader, ACTIVE
            return True

    def poll(self) -> str:
        """The slot's state: "idle", "active" or "closed"."""
        with self._held():
            return self._state

    def take_back(self) -> bool:
        """ACTIVE -> CLOSED with the reader unfinished, for Python to end (a timeout, a
        cancellation): True. False when the loop had finished it (its token is on the way)."""
        with self._held():
            if self._state != ACTIVE:
                return False
            self._reader = None
            self._unwatch()
            self._state = CLOSED
            return True

    def detach(self) -> bool:
        """-> CLOSED and forgotten, before Python closes the socket. True when a reader was
        still being fed (now Python's, unfinished)."""
        with self._held():
            was_active = self._state == ACTIVE
            self._reader = None
            self._unwatch()
            self._state = CLOSED
            return was_active

    @contextlib.contextmanager
    def _held(self) -> Iterator[None]:
        """Python takes the slot's lock: the loop passes the slot over while Python waits."""
        self._wanted.append(None)
        try:
            self._lock.acquire()
        finally:
            self._wanted.pop()
        try:
            yield
        finally:
            self._lock.release()

    def _unwatch(self) -> None:
        if self._watched and not self.loop.stopped:
            self.loop._sel.unregister(self.sock)
        self._watched = False
