"""benchc's own HTTP/1.1 reader (benchc.client.http1, client.send_native) against raw asyncio
servers on loopback that write exactly the bytes each case needs: real servers'
quirks, broken servers, keep-alive races, timeouts -- on each transport: the asyncio loop,
the compiled receive loop and its pure-Python twin. And the chunked decoder's twins."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchc.client import http1
from benchc.client.request import send_native
from benchc.metrics.record import (
    CANCELLED,
    CONNECT,
    FIRST_BYTE_TIMEOUT,
    HTTP,
    IDLE_TIMEOUT,
    STREAM_BROKEN,
    TIMEOUT,
    RequestRecord,
)
from benchc.plan.model import Target
from tests.conftest import both_cores, transports, use_transport


@pytest.fixture(autouse=True, params=transports())
def transport(request, monkeypatch):
    """Every test of this module on each transport: a Pool() reads through this loop."""
    use_transport(monkeypatch, request.param)
    return request.param


def served_by(transport: str) -> str:
    return http1.ASYNCIO if transport == "asyncio" else http1.RX_LOOP


def sse(texts: list[str], usage: bool = True) -> list[bytes]:
    events = [{"choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
    events += [{"choices": [{"index": 0, "delta": {"content": t}}]} for t in texts]
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    if usage:
        events.append({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": len(texts)}})
    return [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]


def chunked(parts: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


class RawServer:
    """Loopback server; `script(n, reader, writer)` answers the n-th request (from 0)
    after its head and body were read. Records requests and connections."""

    def __init__(self, script):
        self.script = script
        self.requests: list[tuple[bytes, bytes]] = []
        self.connections = 0

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1/chat/completions"
        return self

    async def __aexit__(self, *exc):
        self.server.close()

    async def _conn(self, reader, writer):
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int([ln.split(b":")[1] for ln in head.split(b"\r\n")
                              if ln.lower().startswith(b"content-length")][0])
                body = await reader.readexactly(length)
                n = len(self.requests)
                self.requests.append((head, body))
                if await self.script(n, reader, writer) == "close":
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client went away, or the test's loop is closing
        finally:
            writer.close()


def target(timeout_s: float = 10.0, idle_s: float = 10.0, first_byte_s: float = 10.0) -> Target:
    return Target("http://x/v1", None, "chat", "m", None, {}, timeout_s, idle_s, None,
                  first_byte_timeout_s=first_byte_s)


async def request(pool, url, t=None, headers=None) -> RequestRecord:
    r = RequestRecord("req-1", 0, 1, None)
    return await send_native(pool, url, headers or {"Content-Type": "application/json"}, b'{"x": 1}', r,
                             t or target())


def run(coro):
    return asyncio.run(coro)


async def one_request(script, t=None) -> tuple[RequestRecord, RawServer]:
    """One request on a fresh pool against a RawServer running `script`."""
    async with RawServer(script) as srv:
        pool = http1.Pool()
        r = await request(pool, srv.url, t)
        await pool.close()
        return r, srv


def test_every_event_its_own_chunk_dribbled_byte_by_byte(transport):
    texts = ["Hel", "lo", " wörld", " 😀", "\n"]

    async def script(n, reader, writer):
        wire = OK_HEAD + chunked(sse(texts))
        for i in range(0, len(wire), 7):  # 7-byte writes: splits inside heads, sizes, CRLFs, UTF-8
            writer.write(wire[i:i + 7])
            await writer.drain()
            await asyncio.sleep(0)

    r, srv = run(one_request(script))
    assert r.ok, r.outcome.error_detail
    assert r.outcome.path == served_by(transport)
    assert r.tokens.text_chunks == 5 and r.tokens.usage_output_tokens == 5
    assert r.outcome.finish_reason == "stop"
    assert r.tokens.text_bytes == len("".join(texts).encode())
    head, body = srv.requests[0]
    assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"x-request-id: req-1\r\n" in head and b"Accept-Encoding: identity" in head
    assert body == b'{"x": 1}'


def test_keep_alive_reuses_one_connection_and_a_closing_server_costs_no_error():
    async def keep(n, reader, writer):
        writer.write(OK_HEAD + chunked(sse(["a", "b"])))

    async def close_each(n, reader, writer):  # says nothing, closes after each stream
        writer.write(OK_HEAD + chunked(sse(["a", "b"])))
        await writer.drain()
        return "close"

    async def main(script):
        async with RawServer(script) as srv:
            pool = http1.Pool()
            rs = []
            for _ in range(4):
                rs.append(await request(pool, srv.url))
                await asyncio.sleep(0.01)
            await pool.close()
            return rs, srv.connections

    rs, conns = run(main(keep))
    assert all(r.ok for r in rs) and conns == 1
    rs, conns = run(main(close_each))
    assert all(r.ok for r in rs) and [r.tokens.text_chunks for r in rs] == [2] * 4 and conns == 4


async def one_stream_then_close(n, reader, writer):
    writer.write(OK_HEAD + chunked(sse(["a"])))
    await writer.drain()
    return "close"


async def loop_saw_the_close(dropped_check: bool):
    """The receive loop saw the server's close while the connection sat idle, and Python has
    not heard yet (the asyncio loop is held). With the idle check (Connection.dropped) the
    pool leaves the connection out; without it, the loop refuses the request (begin) and the
    request goes once more on a fresh connection: the keep-alive race, retried."""
    import time

    async with RawServer(one_stream_then_close) as srv:
        pool = http1.Pool()
        r1 = await request(pool, srv.url)
        [conn] = [c for idle in pool._idle.values() for c in idle]
        deadline = time.monotonic() + 10
        while conn.transport.rx.poll() != "closed" and time.monotonic() < deadline:
            time.sleep(0.001)
        assert not conn.closed  # Python has not heard yet
        if not dropped_check:
            conn.dropped = lambda: False
        r2 = await request(pool, srv.url)
        report = pool.rules.report()
        await pool.close()
        return r1, r2, srv, report


@pytest.mark.parametrize("transport", [t for t in transports() if t != "asyncio"], indirect=True)
@pytest.mark.parametrize("dropped_check", [True, False], ids=["idle-check", "refused-by-the-loop"])
def test_a_connection_the_receive_loop_saw_close_is_not_an_error(transport, dropped_check):
    r1, r2, srv, report = run(loop_saw_the_close(dropped_check))
    assert r1.ok and r2.ok, (r1.outcome.error_detail, r2.outcome.error_detail)
    assert srv.connections == 2 and len(srv.requests) == 2  # the dead connection carried nothing
    assert r2.outcome.path == http1.RX_LOOP and not r2.outcome.reused_connection
    assert r2.outcome.retried is (not dropped_check)
    assert report["server_closes"] == 1  # counted once, either way


@pytest.mark.parametrize("form", ["content-length", "read-to-close", "lf-only-chunked", "continue-first"])
def test_other_body_forms(form):
    body = b"".join(sse(["x", "y", "z"]))

    async def script(n, reader, writer):
        if form == "content-length":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        elif form == "read-to-close":
            writer.write(b"HTTP/1.0 200 OK\r\n\r\n" + body)
            await writer.drain()
            return "close"
        elif form == "lf-only-chunked":
            writer.write(b"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n" +
                         chunked(sse(["x", "y", "z"])).replace(b"\r\n", b"\n"))
        else:
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" + OK_HEAD + chunked(sse(["x", "y", "z"])))

    r, _ = run(one_request(script))
    assert r.ok, r.outcome.error_detail
    assert r.tokens.text_chunks == 3 and r.outcome.status == 200


@pytest.mark.parametrize("case,kind,detail", [
    ("status-500", HTTP, "500: overloaded"),
    ("bad-chunk-size", STREAM_BROKEN, "bad chunked encoding"),
    ("reset-mid-stream", STREAM_BROKEN, "mid-response"),
    ("closed-before-response", CONNECT, "before any response"),
    ("gzip", STREAM_BROKEN, "compressed response"),
    # a server that answered bytes that are not HTTP answered: not connect (issue 29, class 3)
    ("bad-status-line", STREAM_BROKEN, "bad status line"),
])
def test_broken_servers_are_classified_and_what_was_measured_is_kept(case, kind, detail):
    async def script(n, reader, writer):
        if case == "status-500":
            writer.write(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 10\r\n\r\noverloaded")
        elif case == "bad-chunk-size":
            writer.write(OK_HEAD + b"5\r\nhello\r\nzz\r\n")
        elif case == "reset-mid-stream":
            writer.write(OK_HEAD + chunked(sse(["a", "b", "c"]))[:-60])
            await writer.drain()
            writer.transport.abort()
            return "close"
        elif case == "closed-before-response":
            return "close"
        elif case == "gzip":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc")
        else:
            writer.write(b"SPDY/9 200 OK\r\n\r\n")

    r, _ = run(one_request(script))
    assert r.outcome.error == kind and detail in r.outcome.error_detail, \
        (r.outcome.error, r.outcome.error_detail)
    if case == "reset-mid-stream":
        assert r.tokens.text_chunks >= 2 and r.times.first_text_ns  # the part that arrived was measured


def test_timeouts_before_and_after_the_head():
    async def stall_before(n, reader, writer):
        await asyncio.sleep(5)

    async def stall_after(n, reader, writer):
        writer.write(OK_HEAD + chunked(sse(["a"]))[:60])
        await writer.drain()
        await asyncio.sleep(5)

    r, _ = run(one_request(stall_before, target(first_byte_s=0.2)))
    assert r.outcome.error == FIRST_BYTE_TIMEOUT and r.outcome.status is None
    assert r.outcome.error_detail == ("no response byte within target.first_byte_timeout (0.2s) after the "
                                      "request was sent")
    r, _ = run(one_request(stall_after, target(idle_s=0.2)))
    assert r.outcome.error == IDLE_TIMEOUT and r.outcome.status == 200
    r, _ = run(one_request(stall_after, target(timeout_s=0.3, idle_s=10)))
    assert r.outcome.error == TIMEOUT


def test_exchanges_of_other_limits_share_one_timer():
    """The pool's one timer (http1._Deadlines) serves exchanges of any limits in any order: a
    short limit that comes due before a long-waiting exchange's fires on time, after a hundred
    answered exchanges left their cancelled deadlines behind (compacted away), and no timer
    is left once no exchange waits."""
    async def script(n, reader, writer):
        if n == 0:  # the long-waiting one: no byte, ever
            await asyncio.sleep(30)
            return None
        # the last: a head and a part of the stream, then silence
        writer.write(OK_HEAD + (chunked(sse(["a"]))[:60] if n == 101 else chunked(sse(["a"]))))
        await writer.drain()
        if n == 101:
            await asyncio.sleep(30)
        return None

    async def main():
        async with RawServer(script) as srv:
            pool = http1.Pool()
            long_limits = target(timeout_s=60, idle_s=60, first_byte_s=60)
            waiting = asyncio.create_task(request(pool, srv.url, long_limits))
            while not srv.requests:
                await asyncio.sleep(0.01)
            answered = [await request(pool, srv.url) for _ in range(100)]
            timers = pool._deadlines
            heap_after_answers = len(timers.heap)
            stalled = await request(pool, srv.url, target(idle_s=0.2))
            still_waiting = not waiting.done()
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            left = (timers.handle, timers.heap, timers.live)
            await pool.close()
            return answered, heap_after_answers, stalled, still_waiting, left

    answered, heap_after_answers, stalled, still_waiting, left = run(main())
    assert all(r.ok and r.output_tokens == 1 for r in answered)
    assert heap_after_answers < 70  # the answered exchanges' deadlines did not pile up
    assert stalled.outcome.error == IDLE_TIMEOUT and stalled.outcome.status == 200 and still_waiting
    assert left == (None, [], 0)


def test_cancellation_records_and_frees_the_connection():
    async def stall(n, reader, writer):
        writer.write(OK_HEAD)
        await writer.drain()
        await asyncio.sleep(5)

    async def main():
        async with RawServer(stall) as srv:
            pool = http1.Pool()
            r = RequestRecord("c", 0, 1, None)
            task = asyncio.create_task(send_native(pool, srv.url, {}, b"{}", r, target()))
            while not srv.requests:  # the server has the request: cancel while it stalls
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await pool.close()
            return r, pool

    r, pool = run(main())
    assert r.outcome.error == CANCELLED and not pool._open


def test_connect_refused_and_credentials_from_the_url():
    async def main():
        pool = http1.Pool()
        r = await request(pool, "http://127.0.0.1:9/v1/chat/completions")
        await pool.close()
        return r

    r = run(main())
    assert r.outcome.error == CONNECT

    async def ok(n, reader, writer):
        writer.write(OK_HEAD + chunked(sse(["a"])))

    async def with_user():
        async with RawServer(ok) as srv:
            pool = http1.Pool()
            r = await request(pool, srv.url.replace("http://", "http://u%40x:p%3Aw@"))
            await pool.close()
            return r, srv.requests[0][0]

    r, head = run(with_user())
    assert r.ok and b"Authorization: Basic dUB4OnA6dw==\r\n" in head  # base64("u@x:p:w")


# ------------------------------------------------------------- chunked decoder twins

@pytest.mark.parametrize("transport", ["asyncio"], indirect=True)  # no connection: once
@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=300), max_size=12), st.integers(0, 2**32 - 1),
       st.booleans(), st.booleans())
def test_decoder_cores_agree_on_any_split(parts, seed, lf_only, extensions):
    wire = chunked(parts)
    if extensions:
        wire = wire.replace(b"\r\n", b";ext=1\r\n", 1)
    if lf_only:
        wire = wire.replace(b"\r\n", b"\n")
    rng = random.Random(seed)
    results = []
    for m in both_cores("benchc.client._chunked"):
        d, out, i = m.ChunkedDecoder(), b"", 0
        while i < len(wire):
            k = rng.randint(1, 40)
            out += d.feed(wire[i:i + k])
            i += k
        results.append((out, d.done, d.error, d.excess))
    if not lf_only or not any(b"\n" in p for p in parts):
        assert results[0][:3] == (b"".join(parts), True, None)
    assert all(r == results[0] for r in results)


@pytest.mark.parametrize("transport", ["asyncio"], indirect=True)  # no connection: once
@pytest.mark.parametrize("wire", [
    b"000000000000001\r\nx\r\n0\r\n\r\n",  # 15 hex digits: a size
    b"0000000000000001\r\nx\r\n0\r\n\r\n",  # 16: a bad size line
    b"A\r\n0123456789\r\n0\r\n\r\n", b"a \r\n0123456789\r\n0\r\n\r\n", b"1;x=y\r\nz\r\n0\r\n\r\n",
    b"1\nz\n0\n\n", b"1\rz\r\n0\r\n\r\n", b"1\r\nz\r\r\n0\r\n\r\n", b"1\r\nzz\r\n", b"1\r\nz\n\r\n0\r\n\r\n",
    b"g\r\n", b"\r\n1\r\nz\r\n", b"2\r\nab\r\n0\r\nTrailer: t\r\n\r\nrest"])
def test_decoder_cores_agree_on_size_and_end_lines(wire):
    """The compiled core reads a size line of bare hex digits and a payload's CRLF without a
    search; every other line (extensions, blanks, a lone CR or LF, 16 digits) as the twin."""
    for cut in range(len(wire) + 1):
        results = []
        for m in both_cores("benchc.client._chunked"):
            d = m.ChunkedDecoder()
            out = d.feed(wire[:cut]) + d.feed(wire[cut:])
            results.append((out, d.done, d.error, d.excess, d.state))
        assert all(r == results[0] for r in results), (wire, cut)


@pytest.mark.parametrize("transport", ["asyncio"], indirect=True)  # no connection: once
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_decoder_cores_agree_on_garbage(garbage):
    results = []
    for m in both_cores("benchc.client._chunked"):
        d = m.ChunkedDecoder()
        out = d.feed(garbage)
        results.append((out, d.done, d.error, d.excess, d.state))
    assert all(r == results[0] for r in results)


def _self_signed(tmp_path):
    """A throwaway certificate for 127.0.0.1 (the openssl command line; no Python package)."""
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl command not available to make a test certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return str(cert), str(key)


def test_https_with_certificate_verification(tmp_path):
    import ssl

    cert, key = _self_signed(tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context(cafile=cert)

    async def script(n, reader, writer):
        writer.write(OK_HEAD + chunked(sse(["se", "cure"])))

    async def main(ctx):
        srv = RawServer(script)
        srv.server = await asyncio.start_server(srv._conn, "127.0.0.1", 0, ssl=server_ctx)
        url = f"https://127.0.0.1:{srv.server.sockets[0].getsockname()[1]}/v1/chat/completions"
        pool = http1.Pool(ssl_context=ctx)
        try:
            return [await request(pool, url) for _ in range(2)], srv.connections
        finally:
            await pool.close()
            srv.server.close()

    (r1, r2), conns = run(main(client_ctx))
    assert r1.ok and r2.ok and r1.tokens.text_chunks == 2 and conns == 1
    # the receive loop reads plain http only: visibly
    assert r1.outcome.path == r2.outcome.path == http1.ASYNCIO
    (r1, _), _ = run(main(None))  # the system trust store does not know this certificate
    assert r1.outcome.error == CONNECT and "CERTIFICATE_VERIFY_FAILED" in r1.outcome.error_detail


def stamped_pair(rcvbuf: int | None = None) -> tuple:
    """A connected loopback pair whose receiving end asks for kernel receive stamps (before
    connect, as http1 does), and has a receive buffer of `rcvbuf` bytes where given."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    b = socket.socket()
    b.setsockopt(socket.SOL_SOCKET, http1.SO_TIMESTAMPNS, 1)
    if rcvbuf is not None:
        b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    b.connect(listener.getsockname())
    a, _ = listener.accept()
    listener.close()
    return a, b


@contextlib.contextmanager
def kernel_stamps_on(read_stamped, timeout_s: float = 30.0):
    """Linux turns receive stamping on from deferred kernel work after the first socket asks
    (see http1.Pool), and off again the same way when the last one closes: in either window
    reads are dated when they are read. Probe until a read carries a stamp from before it was
    read (waiting for the event, not guessing a delay), and keep the probing socket open for
    the block, so that stamping stays on (a test that closed it first failed once in a while)."""
    import time

    a, b = stamped_pair()
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            a.sendall(b"probe")
            sent = time.perf_counter_ns()
            time.sleep(0.005)
            _, stamp = read_stamped(b, 1024)
            if stamp <= sent:
                break
            assert time.monotonic() < deadline, "the kernel never stamped a read"
        yield
    finally:
        a.close()
        b.close()


@pytest.mark.skipif(not http1.KERNEL_STAMPS, reason="kernel receive stamps are a Linux feature")
def test_reads_carry_the_kernels_arrival_time_not_the_loops():
    """The server writes the whole response, then blocks the (shared) event loop for 300 ms:
    the bytes wait in the client's socket. With kernel stamps they are dated when they
    arrived, before the block; stamped in the callback they would be dated after it."""
    import time

    from benchc.client._rx import read_stamped

    block: dict[str, int] = {}

    async def script(n, reader, writer):
        writer.write(OK_HEAD + chunked(sse(["a", "b"])))  # into the socket at once
        block["from"] = time.perf_counter_ns()
        time.sleep(0.3)  # the loop is busy: nobody reads
        block["to"] = time.perf_counter_ns()

    async def main(kernel):
        async with RawServer(script) as srv:
            pool = http1.Pool(kernel_stamps=kernel)
            with kernel_stamps_on(read_stamped) if kernel else contextlib.nullcontext():
                r = await request(pool, srv.url)
            await pool.close()
            return r, dict(block)

    (kernel, k_block), (loop_stamped, l_block) = run(main(True)), run(main(False))
    assert kernel.ok and loop_stamped.ok
    assert loop_stamped.times.first_text_ns >= l_block["to"]  # the callback ran after the block
    assert kernel.times.first_text_ns <= k_block["from"]  # the kernel saw the bytes before it


@pytest.mark.parametrize("transport", ["asyncio"], indirect=True)  # no connection: once
@pytest.mark.skipif(not http1.KERNEL_STAMPS, reason="kernel receive stamps are a Linux feature")
def test_stamped_read_twins_agree():
    """Both cores read the same bytes and date them by the kernel, not by the read."""
    import time

    for m in both_cores("benchc.client._rx"):
        with contextlib.ExitStack() as stack:
            stack.enter_context(kernel_stamps_on(m.read_stamped))
            a, b = stamped_pair()
            stack.callback(b.close)
            stack.callback(a.close)
            b.setblocking(False)
            with pytest.raises(BlockingIOError):
                m.read_stamped(b, 1024)
            a.sendall(b"data: x\n\n")
            sent = time.perf_counter_ns()
            time.sleep(0.05)  # the bytes wait in the socket
            data, stamp = m.read_stamped(b, 1024)
            assert data == b"data: x\n\n"
            assert stamp <= sent, m.__name__  # dated on arrival, not when read
            a.close()
            assert m.read_stamped(b, 1024)[0] == b""  # end of stream


@pytest.mark.parametrize("transport", ["asyncio"], indirect=True)  # no connection: once
def test_idle_peek_twins_agree():
    """What an idle kept-alive connection holds, on both cores, without reading it: nothing,
    bytes nobody asked for (left in the socket), the server's end, a reset."""
    import select
    import socket
    import struct

    from benchc.client._rx_py import IDLE_BYTES, IDLE_CLOSED, IDLE_QUIET

    for m in both_cores("benchc.client._rx"):
        a, b = stamped_pair()
        try:
            assert m.peek_idle(b) == IDLE_QUIET, m.__name__
            a.sendall(b"x")
            select.select([b], [], [], 10)  # arrived (an event, not a sleep)
            assert m.peek_idle(b) == IDLE_BYTES and m.peek_idle(b) == IDLE_BYTES  # a peek: still there
            assert b.recv(1) == b"x"
            a.close()
            select.select([b], [], [], 10)
            assert m.peek_idle(b) == IDLE_CLOSED, m.__name__
        finally:
            a.close()
            b.close()
        a, b = stamped_pair()
        try:
            a.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            a.close()  # a reset, not a FIN
            select.select([b], [], [], 10)
            assert m.peek_idle(b) == IDLE_CLOSED, m.__name__
        finally:
            b.close()


def test_a_clock_offset_split_by_a_pause_is_read_again(monkeypatch):
    """A kernel stamp (CLOCK_REALTIME) moves onto the monotonic clock by an offset read between
    two monotonic reads (client/_rx_py.py). A thread that lost its core (the Python twin: the
    GIL) between them put every stamp of that read early by the pause: such a pair is read
    again, and the closest pair is kept. Fake clocks: the realtime clock runs 10**18 ns ahead."""
    from benchc.client import _rx_py

    ahead = 10**18
    # a 5 ms pause between the first pair's reads, none in the second's
    reads = iter([("real", ahead + 1_000), ("mono", 5_000_000),
                  ("mono", 5_000_100), ("real", ahead + 5_000_200), ("mono", 5_000_300)])

    def clock(kind):
        def read():
            got, t = next(reads)
            assert got == kind
            return t
        return read

    monkeypatch.setattr(_rx_py, "_realtime_ns", clock("real"))
    monkeypatch.setattr(_rx_py, "_monotonic_ns", clock("mono"))
    assert _rx_py.realtime_offset_ns(0) == ahead  # the first pair alone: 2.5 ms off
    assert next(reads, None) is None  # the second pair was close: no third
    py, c = both_cores("benchc.client._rx")  # the compiled twin reads its clocks alike
    assert (c.OFFSET_TRIES, c.OFFSET_WIDTH_NS) == (py.OFFSET_TRIES, py.OFFSET_WIDTH_NS)
