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
    assert [(r.outcome.status, r.outcome.error, r.tokens.text_chunks) for r in records] \
        == [(200, None, 2)] * 3


STREAM_BROKEN_ANSWERS = {
    # bytes that are not HTTP: the server answered, so not `connect` (which counts toward a dead server)
    "ssh banner": b"SSH-2.0-OpenSSH_9.6\r\n",
    "binary": bytes(range(256)),
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", sorted(STREAM_BROKEN_ANSWERS))
def test_a_server_answering_bytes_that_are_not_http_is_stream_broken_not_connect(path, case):
    async def script(n, reader, writer):
        writer.write(STREAM_BROKEN_ANSWERS[case])
        await writer.drain()
        return "close"

    records, _, _ = run(sequential(path, script, 1))
    assert (records[0].outcome.status, records[0].outcome.error) == (None, "stream_broken"), \
        records[0].outcome.error_detail


@pytest.mark.parametrize("path", PATHS)
def test_thousands_of_interim_heads_before_the_answer_are_skipped_on_every_path(path):
    """The Python receive loop's reader recursed once per 1xx head: 5,000 of them in one read
    raised RecursionError in its thread, and the request ended as a timeout."""
    async def script(n, reader, writer):
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" * 5000 + b"HTTP/1.1 200 OK\r\n"
                     b"Content-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + chunked(sse(["a", "b"])))
        await writer.drain()

    records, _, _ = run(sequential(path, script, 1))
    first = records[0]
    assert (first.outcome.status, first.outcome.error, first.tokens.text_chunks) == (200, None, 2)
