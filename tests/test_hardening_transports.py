"""A fuzz over hostile HTTP answers, served by a real socket server and read on every path
(issue 29, class 3, Must show): the own reader on each transport (the event loop, the receive
loop's twin and its compiled loop) and aiohttp, each with both cores where it can run them.
Whatever the server writes (status lines, heads, framings, bodies, cut anywhere, in pieces),
every path must give the same error kind (and the same status and text chunks where it
succeeded), never `client_error` (benchc's own code failing: a traceback in the log), and stay
within a memory bound (tracemalloc: the Python side; the compiled side's buffers are bounded
by the tests of tests/test_hardening_streams.py).

The default selection draws a few dozen answers; `--slow` draws several hundred.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchc.client import _response_py, _stream_py, request
from benchc.metrics.record import CLIENT_ERROR, ERROR_KINDS, RequestRecord
from tests.test_http1 import target
from tests.test_keepalive import PATHS, Client

PEAK_BYTES = 64 * 1024 * 1024


def _event(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


EVENTS = [
    _event({"choices": [{"index": 0, "delta": {"content": "a"}}]}),
    _event({"choices": [{"index": 0, "delta": {"reasoning_content": "r"}}]}),
    _event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
    _event({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}),
    _event({"error": {"message": "boom"}}), b"data: [DONE]\n\n", b"data: {not json\n\n", b": ping\n\n",
    b"\xef\xbb\xbf", b"data: \xff\xfe\n\n", b"event: x\nid: 1\n\n", b"\r\n", b"\n", b"data:",
]
STATUS_LINES = [b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK", b"HTTP/1.0 200 OK",
                b"HTTP/1.1 200", b"HTTP/1.1 500 Internal Server Error", b"HTTP/1.1 404 Not Found",
                b"HTTP/1.1 302 Found", b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK",
                b"HTTP/1.1 204 No Content",
                b"\r\nHTTP/1.1 200 OK", b"\n\r\nHTTP/1.1 500 Oops",
                b"HTTP/2 200", b"HTTP/1.1 20 OK", b"HTTP/1.1 2000 OK", b"SSH-2.0-OpenSSH_9.6", b"",
                b"\x00\x01\x02"]
HEADERS = [b"Content-Type: text/event-stream", b"Content-Type: application/json", b"Content-Type: text/html",
           b"Connection: close", b"Connection: keep-alive", b"Keep-Alive: timeout=inf", b"Keep-Alive: max=0",
           b"Cache-Control: no-cache", b"X-Junk: \x7f", b"Server: x" + b"y" * 200, b"Content-Encoding: gzip",
           b"No-Colon-Line", b": empty name",
           b"Bad Name: x", b"Name@: x", b"X-Big: " + b"b" * 70_000,
           b"X-Long: " + b"l" * 9000, b"Transfer-Encoding: identity",
           # blanks before the colon (refused: RFC 9112 5.1)
           b"X-Spaced : x", b"Content-Type\t: text/event-stream", b"Connection : close",
           # folded lines (joined to the line before: RFC 9112 5.2; EOL is the head's line end), and
           # lines led by blanks (folded, or the first field line: one SP reads as a field, more refused)
           b"X-Folded: a{EOL} b", b"Content-Type:{EOL} text/event-stream",
           b"Connection: keep-alive,{EOL}\tclose", b"Content-Type: text/event-stream{EOL} ; charset=utf-8",
           b"Content-Encoding:{EOL} gzip",
           b"Transfer-Encoding:{EOL}  chunked", b"X-Empty:{EOL} ", b" lead", b"\tX-Tab: 1", b" X-One: 1",
           b"  X-Two: 2"]


@st.composite
def answer(draw) -> tuple[bytes, list[int]]:
    """(the bytes the server writes, where it splits them into writes)."""
    status = draw(st.sampled_from(STATUS_LINES))
    eol = draw(st.sampled_from([b"\r\n", b"\r\n", b"\n"]))
    headers = draw(st.lists(st.sampled_from(HEADERS), max_size=4))
    body = b"".join(draw(st.lists(st.sampled_from(EVENTS), max_size=10)))
    framing = draw(st.sampled_from(["chunked", "chunked", "length", "close", "chunked-cut", "length-long",
                                    "length-twice", "chunked-bad", "length-past", "chunked-past"]))
    if framing.startswith("chunked"):
        headers.append(b"Transfer-Encoding: chunked")
        pieces = [body[i:i + 37] for i in range(0, len(body), 37)]
        framed = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)
        if framing in ("chunked", "chunked-past"):
            framed += b"0\r\n\r\n"
        elif framing == "chunked-bad":
            framed += draw(st.sampled_from([b"zz\r\n", b"5\r\nab\r\n", b"1;ext=1\r\nx\r\n0\r\n\r\n",
                                            b"0\r\nTrailer: x\r\n\r\n", b"-1\r\n"]))
        body = framed
    elif framing.startswith("length"):
        n = len(body) + (5 if framing == "length-long" else 0)  # longer: the server closes first
        headers += [b"Content-Length: %d" % n] * (2 if framing == "length-twice" else 1)
    if framing.endswith("-past"):  # bytes past the body's end: no answer of this request
        body += draw(st.sampled_from([b"junk", b"\r\n", b"data: [DONE]\n\n", b"HTTP/1.1 200 OK\r\n\r\n",
                                      b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nab"]))
    if b" 204 " in status and draw(st.booleans()):
        # a 204 ends at its head, whatever its headers say (RFC 9112 6.3): what follows is past it
        headers = [h for h in headers if not h.startswith((b"Transfer-Encoding", b"Content-Length"))]
    head = status + eol + b"".join(h.replace(b"{EOL}", eol) + eol for h in headers) + eol if status else b""
    data = head + body
    cuts = draw(st.lists(st.integers(0, max(len(data), 1)), max_size=3))
    return data, sorted(set(cuts))


def runs() -> list[tuple[str, str]]:
    """(path, core) pairs: every path with each core it can run."""
    out = []
    for path in PATHS:
        if path != "native-rx-c":
            out.append((path, "py"))
        if path != "native-rx-py":
            out.append((path, "c"))
    return out


@contextlib.contextmanager
def python_core(client: Client, core: str):
    """The client reads with the pure-Python twins (core "py") where its path runs the
    selected ones: the own reader on the event loop, and aiohttp's stream parser."""
    saved = request.StreamParser
    if core == "py":
        if client.pool is not None and client.pool._rx_mod is None:
            client.pool.ResponseReader = _response_py.ResponseReader
            client.pool.StreamParser = _stream_py.StreamParser
        request.StreamParser = _stream_py.StreamParser
    try:
        yield
    finally:
        request.StreamParser = saved


async def _serve(data: bytes, cuts: list[int]):
    async def conn(reader, writer):
        try:
            await reader.readuntil(b"\r\n\r\n")
            for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True):
                writer.write(data[a:b])
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()  # every answer ends with the connection: nothing waits for a timeout

    return await asyncio.start_server(conn, "127.0.0.1", 0)


async def read_everywhere(data: bytes, cuts: list[int]) -> dict:
    server = await _serve(data, cuts)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/chat/completions"
    out = {}
    try:
        for path, core in runs():
            c = Client(path)
            with python_core(c, core):
                r: RequestRecord = await c.request(url, target(timeout_s=20, idle_s=20, first_byte_s=20))
            await c.close()
            out[(path, core)] = r
    finally:
        server.close()
    return out


def judged(r: RequestRecord) -> tuple:
    """What every path must agree on: the error kind; with no error, the status and the text."""
    return (r.outcome.error,) if r.outcome.error is not None else (r.outcome.error, r.outcome.status,
                                                                   r.tokens.text_chunks,
                                                                   r.tokens.usage_output_tokens)


def check(data: bytes, cuts: list[int]) -> None:
    tracemalloc.start()
    try:
        records = asyncio.run(read_everywhere(data, cuts))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    seen = {k: judged(r) for k, r in records.items()}
    details = {k: (r.outcome.status, r.outcome.error, r.outcome.error_detail) for k, r in records.items()}
    assert all(r.outcome.error is None or r.outcome.error in ERROR_KINDS for r in records.values()), details
    assert all(r.outcome.error != CLIENT_ERROR for r in records.values()), details
    assert len(set(seen.values())) == 1, (data[:300], details)
    assert peak < PEAK_BYTES, peak


FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LARGE = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(a=answer())
def test_hostile_answers_read_alike_on_every_path_and_core(a):
    check(*a)


@pytest.mark.slow
@LARGE
@given(a=answer())
def test_many_more_hostile_answers(a):
    check(*a)


# --------------------------------------------------------------------------- what the fuzz found

@pytest.mark.parametrize("data", [
    # a bare-LF head over a chunked body: the own reader took the body's closing CRLF CRLF for the
    # head's end and waited for a body that had come (stream_broken; aiohttp: not_event_stream)
    b"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\nContent-Type: text/event-stream\nTransfer-Encoding: chunked\n\n"
    b"f\r\ndata: [DONE]\r\n\r\n\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\n\r\n0\r\n\r\n",  # a mixed blank line
    # gzip on a 200: the own reader refused it (stream_broken), aiohttp passed the bytes on
    # (empty_output, not_event_stream); on a 500 the own reader said http_status
    b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\nabcd",
    b"HTTP/1.1 500 Oops\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\nabcd",
    # two Content-Length values, or one beside Transfer-Encoding: aiohttp refused the head, the
    # own reader took the last (or the chunks); on a 302 it said http_status
    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 5\r\n\r\nabcde",
    b"HTTP/1.1 302 Found\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\nContent-Length: 3\r\n\r\nabc",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    # a head past 64 KiB in one read: the own reader read it (it refused it only in pieces);
    # a 9,000-byte header line: aiohttp refused it (its own limit, 8,190)
    b"HTTP/1.1 200 OK\r\nX-Big: " + b"b" * 70_000 + b"\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Long: " + b"l" * 9000
    + b"\r\nContent-Length: 14\r\n\r\ndata: [DONE]\n\n",
    # a field line that is not NAME ":" VALUE (aiohttp refused the head, the own reader skipped it)
    b"HTTP/1.1 200 OK\r\nNo-Colon-Line\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\nBad Name: x\nContent-Length: 0\n\n",
    b"HTTP/1.1 200 OK\r\n: empty\r\nContent-Length: 0\r\n\r\n",
    # blanks before the colon: the own reader read the field (aiohttp refused the head)
    b"HTTP/1.1 200 OK\r\nContent-Type : text/event-stream\r\nContent-Length: 14\r\n\r\ndata: [DONE]\n\n",
    b"HTTP/1.1 500 Oops\nX-Spaced\t: x\nContent-Length: 0\n\n",
    # aiohttp's compiled parser passed a blank before the colon after a name it tracks itself
    b"HTTP/1.1 200 OK\r\nConnection : close\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length  : 0\r\n\r\n",
    # a folded line: the own reader skipped it (and read an indented header as a field of its own);
    # aiohttp joins it to the value before it
    b"HTTP/1.1 200 OK\r\nContent-Type:\r\n text/event-stream\r\nContent-Length: 14\r\n\r\ndata: [DONE]\n\n",
    b"HTTP/1.1 200 OK\r\nContent-Encoding:\r\n gzip\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\nTransfer-Encoding:\n chunked\n\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX-A: 1\r\n  Content-Length: 3\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\n\tContent-Length: 0\r\n\r\n",  # a first field line led by a tab
    # Content-Type twice: aiohttp's path took the first, the own reader the last
    b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Type: text/event-stream\r\n"
    b"Content-Length: 0\r\n\r\n",
    # bytes past the body's end, or past a 204's head: aiohttp refused them as the next answer's
    # head when they came in the answer's read, and lost the answer (stream_broken)
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 14\r\n\r\ndata: [DONE]\n\njunk",
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\ndata: x\n\n",
    b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\nnoHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 204 No Content\r\n\r\ndata: [DONE]\n\n",
    b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
    # an error answer whose chunked framing breaks: aiohttp refused the head (stream_broken) when
    # the bad bytes came in its read; the own reader read the status (http_status)
    b"HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab\r\n",
    # empty lines before a status line: aiohttp skipped them and read the answer; the own reader
    # refused the status line (stream_broken)
    b"\r\nHTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 14\r\n\r\ndata: [DONE]\n\n",
    b"\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
    # empty lines only, then a close (or a head cut short): aiohttp skips empty lines before a
    # status line and said the server disconnected (connect); the own reader stream_broken
    b"\r\n", b"\n", b"\r\n\r\n", b"\r\n\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-",
])
def test_found_answers_read_alike(data):
    check(data, [])


@pytest.mark.parametrize("data,kind", [
    (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\nabcd", "stream_broken"),
    (b"HTTP/1.1 302 Found\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc", "stream_broken"),
    (b"HTTP/1.1 200 OK\r\nNo-Colon-Line\r\nContent-Length: 0\r\n\r\n", "stream_broken"),
    (b"HTTP/1.1 200 OK\r\nX-Big: " + b"b" * 70_000 + b"\r\nContent-Length: 0\r\n\r\n", "stream_broken"),
    (b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Type: text/event-stream\r\n"
     b"Content-Length: 0\r\n\r\n", "empty_output"),
    (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 14\r\n\r\ndata: [DONE]\n\n"
     b"junk", "empty_output"),  # the answer stands: no text, and bytes past it are dropped
    (b"HTTP/1.1 204 No Content\r\n\r\ndata: [DONE]\n\n", "http_status"),
    (b"HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "http_status"),
    (b"HTTP/1.1 200 OK\r\nContent-Type : text/event-stream\r\nContent-Length: 14\r\n\r\ndata: [DONE]\n\n",
     "stream_broken"),  # RFC 9112 5.1: no blank before the colon
    (b"HTTP/1.1 200 OK\r\nContent-Encoding:\r\n gzip\r\nContent-Length: 0\r\n\r\n", "stream_broken"),
    (b"HTTP/1.1 200 OK\r\nX-A: 1\r\n  Content-Length: 3\r\nContent-Length: 0\r\n\r\n", "not_event_stream"),
    (b"\r\n", "stream_broken"),  # the server answered: never connect
    (b"\r\n\r\n", "stream_broken"),
    (b"HTTP/1.1 200 OK\r\nContent-", "stream_broken"),
])
def test_the_kind_each_found_answer_gets(data, kind):
    records = asyncio.run(read_everywhere(data, []))
    assert {r.outcome.error for r in records.values()} == {kind}, \
        {k: r.outcome.error_detail for k, r in records.items()}


def _serve_script(answers: list[bytes]):
    """A server that answers the n-th request of a connection with answers[n] (then waits for
    the next request), closing when they run out."""
    async def conn(reader, writer):
        try:
            for a in answers:
                await reader.readuntil(b"\r\n\r\n")
                await reader.readexactly(8)  # the Client's body, b'{"x": 1}'
                writer.write(a)
                await writer.drain()
            await reader.read()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
    return conn


OK_SSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _sse_answer(text: str) -> bytes:
    body = _event({"choices": [{"index": 0, "delta": {"content": text}}]}) + b"data: [DONE]\n\n"
    return OK_SSE + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


@pytest.mark.parametrize("path", PATHS)
def test_bytes_past_an_answer_are_never_the_next_requests_answer(path):
    """A server that writes a second answer after the first one's end, on a kept connection:
    it is dropped with the connection (RFC 9112 6.3: never read as a separate answer), on
    every path (aiohttp's own pool dropped a connection holding a parsed answer; the aiohttp
    path now drops the bytes before they are parsed)."""
    async def go():
        connections = []

        script = _serve_script([_sse_answer("first") + _sse_answer("stale"), _sse_answer("fresh")])

        async def conn(reader, writer):
            connections.append(writer)
            await script(reader, writer)

        server = await asyncio.start_server(conn, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/chat/completions"
        c = Client(path)
        try:
            first = await c.request(url, target())
            second = await c.request(url, target())
        finally:
            await c.close()
            server.close()
        return first, second, len(connections)

    first, second, connections = asyncio.run(go())
    assert first.ok and second.ok, (first.outcome.error_detail, second.outcome.error_detail)
    # "fresh", not "stale"
    assert first.tokens.text_bytes == len("first") and second.tokens.text_bytes == len("fresh")
    assert connections == 2  # the first connection was not reused


async def _one_request(server: asyncio.Server, path: str, tgt):
    """One request of `path`'s client to `server`'s chat endpoint; both closed after."""
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/chat/completions"
    c = Client(path)
    try:
        return await c.request(url, tgt)
    finally:
        await c.close()
        server.close()


@pytest.mark.parametrize("status,kind", [(200, "stream_broken"), (500, "http_status")])
@pytest.mark.parametrize("path", PATHS)
def test_framing_that_breaks_after_the_head_fails_the_answer_at_once(path, status, kind):
    """A chunked body whose framing breaks in a later read than its head (past 256 KiB of good
    chunks: one read takes at most that much): aiohttp's compiled parser closed the connection
    without failing the body, which waited for the idle timeout."""
    pings = b": ping\n\n" * 40_000  # 320 KB of SSE comments
    data = (b"HTTP/1.1 %d X\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" % status
            + b"%x\r\n%s\r\n" % (len(pings), pings) + b"zz\r\n")

    async def go():
        server = await _serve(data, [])
        return await _one_request(server, path, target(timeout_s=60, idle_s=20, first_byte_s=60))

    r = asyncio.run(go())
    assert (r.outcome.status, r.outcome.error) == (status, kind), r.outcome.error_detail


@pytest.mark.parametrize("first", [b"\r\n", b"HTTP/1.1 200 OK\r\nContent-"])
@pytest.mark.parametrize("path", PATHS)
def test_a_head_begun_then_stalled_is_a_timeout_not_a_first_byte_timeout(path, first):
    """A server that sends the start of an answer and then nothing: a byte came, so it is a
    `timeout` between reads on every path; aiohttp's read timer said `first_byte_timeout`."""
    async def go():
        async def conn(reader, writer):
            try:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(first)
                await writer.drain()
                await reader.read()  # until the client gives up and closes
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(conn, "127.0.0.1", 0)
        return await _one_request(server, path, target(timeout_s=60, idle_s=0.5, first_byte_s=0.5))

    r = asyncio.run(go())
    assert (r.outcome.status, r.outcome.error) == (None, "timeout"), r.outcome.error_detail
