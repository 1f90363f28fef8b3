"""One socket read with the kernel's receive stamp, pure Python (the twin of csrc/client/_rx_c.pyx)."""

from __future__ import annotations

import select
import socket
import struct
import sys
import time

# Linux stamps each received packet (software timestamps) when a socket asks for it; -1
# elsewhere (no stamps, the read's own time is used), as in the C twin
SO_TIMESTAMPNS: int = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform.startswith("linux") else -1)
_TIMESPEC = struct.Struct("@qq")
# The kernel stamps in CLOCK_REALTIME; a stamp is moved onto the monotonic clock by the offset
# between the two, read as a realtime read between two monotonic reads (the read's `now` and
# one after it): the offset is exact to half their distance. A thread that lost its core, or
# this twin the GIL, between them would date a read that much early (milliseconds were seen
# with every core busy), so a pair further apart than OFFSET_WIDTH_NS is read again, up to
# OFFSET_TRIES pairs, and the closest kept. The C twin reads them alike.
OFFSET_WIDTH_NS = 20_000
OFFSET_TRIES = 3
_monotonic_ns, _realtime_ns = time.perf_counter_ns, time.time_ns  # the two clocks (a test fakes them)


def realtime_offset_ns(now: int) -> int:
    """CLOCK_REALTIME less the monotonic clock, read just after `now` (a monotonic read)."""
    a, best, offset = now, -1, 0
    for _ in range(OFFSET_TRIES):
        real = _realtime_ns()
        b = _monotonic_ns()
        width = b - a
        if best < 0 or width < best:
            best, offset = width, real - a - width // 2
        if width <= OFFSET_WIDTH_NS:
            break
        a = _monotonic_ns()
    return offset


def read_stamped(sock: socket.socket, size: int) -> tuple[bytes, int]:
    """(bytes read, b"" at end of stream; their arrival on the monotonic clock of
    time.perf_counter_ns): the kernel's receive stamp when the socket asked for
    SO_TIMESTAMPNS, else now. BlockingIOError when nothing is there, OSError on failure."""
    data, ancillary, _, _ = sock.recvmsg(size, 128)
    now = time.perf_counter_ns()
    for level, kind, raw in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(raw) >= _TIMESPEC.size:
            # the kernel stamps in CLOCK_REALTIME: moved onto the monotonic clock with the
            # offset between the two read now (realtime_offset_ns)
            offset = realtime_offset_ns(now)
            sec, nsec = _TIMESPEC.unpack_from(raw)
            stamp = sec * 1_000_000_000 + nsec - offset
            return data, stamp if 0 <= stamp <= now else now
    return data, now


# what an idle kept-alive connection holds (peek_idle)
IDLE_QUIET, IDLE_CLOSED, IDLE_BYTES = 0, 1, 2


def peek_idle(sock: socket.socket) -> int:
    """What an idle connection holds that was not read yet, without reading it: IDLE_QUIET
    (nothing), IDLE_CLOSED (the peer's end, or an error: a reset) or IDLE_BYTES (bytes nobody
    asked for). One poll and, when it says readable, one peek of a byte."""
    try:
        ready = select.poll()
        ready.register(sock.fileno(), select.POLLIN)
        if not ready.poll(0):
            return IDLE_QUIET
        return IDLE_CLOSED if sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"" else IDLE_BYTES
    except (BlockingIOError, InterruptedError):
        return IDLE_QUIET
    except OSError:
        return IDLE_CLOSED
