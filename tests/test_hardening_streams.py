"""Hostile streams on the measured path (issue 29, classes 2 and 3), on every HTTP path (the own
reader on each transport, aiohttp) and both cores."""

from __future__ import annotations

import pytest

from benchc.client._sse_py import MAX_SSE_BYTES
from tests.conftest import both_cores
from tests.test_stream_gaps import _paths_and_cores

# --------------------------------------------------------------------------- class 2: memory

# What one endless line may cost a client beyond the line's own bound: the line held (1 MiB),
# the read that passed it, and the copies a core makes of it (the twin joins a read to what it
# holds). Measured here: 1.0 to 1.9 MiB in C, 1.8 to 2.7 MiB on the twins.
LINE_PEAK_KIB = 4 * MAX_SSE_BYTES // 1024


@pytest.mark.slow
@pytest.mark.parametrize("path,core", _paths_and_cores())
def test_one_endless_line_costs_a_bounded_peak_on_every_path(path, core):
    """A server streams one SSE line that never ends, as fast as the client takes it: the
    parser refuses it at MAX_SSE_BYTES (oversized_event, the connection closed), and the
    client process's peak resident size grows by less than LINE_PEAK_KIB while it does."""
    from tests.endless import EndlessServer, read_one

    if core == "c":
        both_cores("benchc.client._stream")  # skips where the compiled core is not built
    with EndlessServer("line") as srv:
        out = read_one(path, srv.url, core, seconds=600)
    assert out["error"] == "oversized_event" and out["text_chunks"] == 0, out
    assert out["grew_kib"] < LINE_PEAK_KIB, out
