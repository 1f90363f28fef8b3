"""Unusual but correct servers are read the same way on every transport (issue 29, class 3)."""

import pytest

from benchc.client import http1
from tests.test_http1 import chunked, sse
from tests.test_keepalive import PATHS, run, sequential


@pytest.mark.parametrize("value", ["timeout=inf", "timeout=nan", "timeout=-inf", "timeout=-5",
                                   "timeout=1e400, max=3"])
def test_a_keep_alive_timeout_that_is_no_duration_is_ignored(value):
    timeout, _ = http1.parse_keep_alive(value)
    assert timeout is None


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("value", [b"timeout=inf", b"timeout=nan"])
def test_keep_alive_timeout_inf_or_nan_reads_every_answer_on_every_path(path, value):
    """int(inf * 1e9) raised inside the own reader's keep-alive bookkeeping: every answer of
    such a server ended as an error."""
    async def script(n, reader, writer):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                     b"Keep-Alive: " + value + b"\r\n\r\n" + chunked(sse(["a", "b"])))
        await writer.drain()

    records, srv, _ = run(sequential(path, script, 3))
    assert [(r.status, r.error, r.text_chunks) for r in records] == [(200, None, 2)] * 3
