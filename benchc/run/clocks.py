"""One clock for the shards of a distributed point.

Every time a measurement holds (window, request starts) is on `time.perf_counter_ns`, which
is CLOCK_MONOTONIC on Linux: counted from the kernel's boot, one clock for every process of
one machine (containers included), unrelated between machines. A Ray worker on another
machine would put its shard's window days away from the others', and the united window, so
every rate, would mean nothing. So each worker returns a ClockMark with its measurement, and
the driver moves a measurement made under another kernel onto its own clock through the
wall clock both have: exact on one machine (no move), off by the machines' wall-clock skew
(NTP: about a millisecond) otherwise, and the point says so.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

BOOT_ID = "/proc/sys/kernel/random/boot_id"  # one per boot of a Linux kernel


@dataclass(frozen=True)
class ClockMark:
    boot: str  # equal marks share CLOCK_MONOTONIC
    wall_minus_mono_ns: int  # time.time_ns() - perf_counter_ns() when the mark was taken


def mark() -> ClockMark:
    """This process's clock: its kernel's boot and where its monotonic clock is on the wall clock."""
    try:
        with open(BOOT_ID) as f:
            boot = f.read().strip()
    except OSError:  # not Linux: the host's name (a machine without it shares no clock)
        boot = "host:" + socket.gethostname()
    return ClockMark(boot, time.time_ns() - time.perf_counter_ns())


def shift_ns(theirs: ClockMark | None, ours: ClockMark) -> int:
    """What to add to a time on `theirs` to put it on `ours`: 0 on one kernel."""
    if theirs is None or theirs.boot == ours.boot:
        return 0
    return theirs.wall_minus_mono_ns - ours.wall_minus_mono_ns


MOVED_NOTE = ("shards measured on other machines were placed on the driver's clock through their wall "
              "clocks: the window is off by the machines' clock skew (NTP: about a millisecond)")
