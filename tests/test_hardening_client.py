"""The client against hostile and broken servers (issue 15, classes 2 and 3), on every HTTP
path: the own reader on each transport (the event loop, the receive loop's twin, the compiled
receive loop) and aiohttp. Raw loopback servers write exactly the bytes of each case.

- a stream with a line or an event past the bounds ends as `oversized_event`, the connection
  closed (the server sees it go), what came before it measured;
- a server that takes the request and sends nothing fails it as `first_byte_timeout` after
  target.first_byte_timeout (not after the whole request's timeout); the limit ends with the
  first byte, after which the idle limit applies;
- a 200 that is not an event stream (an HTML page, the whole answer as JSON) is
  `not_event_stream`, its detail saying what came back, with the run's secrets scrubbed;
- a client out of file descriptors records `client_exhausted`, not `connect`, and such
  failures do not count toward a dead server.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import re
import subprocess
import sys

import aiohttp
import pytest

from benchc import redact
from benchc.client._sse_py import MAX_SSE_BYTES
from benchc.client.request import connect_failure, send, send_native
from benchc.metrics.record import (
    CLIENT_EXHAUSTED,
    CONNECT,
    EMPTY,
    ERROR_KINDS,
    FIRST_BYTE_TIMEOUT,
    HTTP,
    IDLE_TIMEOUT,
    NOT_SSE,
    OVERSIZED,
    TIMEOUT,
    Outcome,
    RequestRecord,
)
from benchc.run.deadserver import ConnectStreak
from tests.conftest import REPO
from tests.test_http1 import OK_HEAD, RawServer, chunked, sse, target
from tests.test_keepalive import PATHS, Client, run, sequential

BLOCK = b"x" * 65536
MOST = 1024  # blocks a server writes at most: 64 MiB, 64 times the bound


def piece(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def oversized_server(first: bytes, blocks):
    """Answers 200 with one text event, then `first` and BLOCK after BLOCK (chunked) until the
    client goes away; `seen["written"]` is what it wrote by then (None: it never went)."""
    seen: dict = {"written": None, "over": asyncio.Event()}

    async def script(n, reader, writer):
        writer.write(OK_HEAD + piece(sse(["a"])[1] + first))
        written = 0
        try:
            for block in blocks():
                writer.write(piece(block))
                await writer.drain()
                written += len(block)
        except ConnectionError:
            seen["written"] = written
        finally:
            seen["over"].set()
        return "close"

    return script, seen


async def one_then_wait(path: str, script, seen: dict):
    """One request; then wait for the server's script to end (it sees the connection go)."""
    async with RawServer(script) as srv:
        c = Client(path)
        r = await c.request(srv.url)
        await asyncio.wait_for(seen["over"].wait(), 60)  # a hang becomes a failure, not a race
        await c.close()
        return r, srv


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("shape", ["endless line", "huge event"])
def test_a_stream_past_the_bounds_ends_as_oversized_and_closes_the_connection(path, shape):
    if shape == "endless line":
        script, seen = oversized_server(b"data: ", lambda: [BLOCK] * MOST)
        words = f"an SSE line longer than {MAX_SSE_BYTES} bytes"
    else:  # one event of many short data lines: each line is fine, the event is not
        line = b"data: " + b"y" * 4089 + b"\n"
        script, seen = oversized_server(b"", lambda: [line * 16] * MOST)
        words = f"an SSE event carrying more than {MAX_SSE_BYTES} bytes of data"
    r, srv = run(one_then_wait(path, script, seen))
    assert r.outcome.error == OVERSIZED and r.outcome.error_detail.startswith(words), \
        (r.outcome.error, r.outcome.error_detail)
    assert r.outcome.status == 200 and r.tokens.text_chunks == 1  # what came before the line was read
    # the client closed the connection: the server's writes failed long before it wrote all
    assert seen["written"] is not None and seen["written"] < MOST * len(BLOCK) // 4
    assert srv.connections == 1


async def _silent(n, reader, writer):
    await reader.read(1)  # nothing, until the client goes away
    return "close"


@pytest.mark.parametrize("path", PATHS)
def test_a_server_that_never_answers_fails_at_the_first_byte_deadline(path):
    rs, _, _ = run(sequential(path, _silent, 1, t=target(timeout_s=60, idle_s=60, first_byte_s=0.3)))
    r = rs[0]
    assert r.outcome.error == FIRST_BYTE_TIMEOUT and r.outcome.status is None and not r.outcome.retried
    assert r.outcome.error_detail.startswith("no response byte within target.first_byte_timeout (0.3s)")
    line = r.to_json()
    assert line["ttft_us"] is None and line["e2e_us"] is None


@pytest.mark.slow  # waits out the limits on every path
@pytest.mark.parametrize("path", PATHS)
def test_after_the_first_byte_the_idle_limit_applies_not_the_first_byte_one(path):
    async def head_then_wait(n, reader, writer):
        writer.write(OK_HEAD)
        await writer.drain()
        await asyncio.sleep(1.0)  # more than three first-byte limits, less than the idle one
        writer.write(chunked(sse(["a", "b"])))
        await writer.drain()

    rs, _, _ = run(sequential(path, head_then_wait, 1, t=target(timeout_s=60, idle_s=30, first_byte_s=0.3)))
    assert rs[0].ok, (rs[0].outcome.error, rs[0].outcome.error_detail)

    async def head_then_silence(n, reader, writer):
        writer.write(OK_HEAD)
        await writer.drain()
        return await _silent(n, reader, writer)

    t = target(timeout_s=60, idle_s=0.3, first_byte_s=60)
    rs, _, _ = run(sequential(path, head_then_silence, 1, t=t))
    assert rs[0].outcome.error == IDLE_TIMEOUT and rs[0].outcome.status == 200


@pytest.mark.parametrize("path", PATHS)
def test_the_whole_requests_limit_is_a_timeout_even_while_bytes_flow(path):
    """aiohttp's total limit after a 200 was called idle_timeout unless the request had run
    for the whole limit by benchc's clock (aiohttp's starts earlier, before the connect)."""
    async def trickle(n, reader, writer):
        writer.write(OK_HEAD)
        for i in range(200):  # a chunk every 20 ms: never idle, slower than the whole limit
            writer.write(chunked(sse([f"t{i}"]))[:-5])  # events, without the stream's last chunk
            await writer.drain()
            await asyncio.sleep(0.02)

    # the limit runs from before the connect: 1 s leaves a busy machine's connect room (0.4 s
    # was spent connecting once under flake-check's hogs), and the trickle outlasts it
    rs, _, _ = run(sequential(path, trickle, 1, t=target(timeout_s=1.0, idle_s=5, first_byte_s=5)))
    assert rs[0].outcome.error == TIMEOUT and rs[0].outcome.status == 200, \
        (rs[0].outcome.error, rs[0].outcome.error_detail)


@pytest.mark.parametrize("path", PATHS)
def test_an_error_status_whose_body_is_cut_short_is_that_status(path):
    """It was counted as `connect`, as though the server had never answered."""
    async def cut(n, reader, writer):
        writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 100\r\n\r\noverloa")
        await writer.drain()
        writer.transport.abort()

    rs, _, _ = run(sequential(path, cut, 1))
    assert rs[0].outcome.error == HTTP and rs[0].outcome.status == 503
    assert rs[0].outcome.error_detail.startswith("503: ")


@pytest.mark.parametrize("path", PATHS)
def test_a_users_x_request_id_header_does_not_go_out_twice(path):
    """The own reader sent the user's and the request's own; the simulator joins on the first."""
    async def go():
        async with RawServer(answering(OK_HEAD + chunked(sse(["a"])))) as srv:
            c = Client(path)
            r = RequestRecord("own-id", 0, 1, None)
            headers = {"Content-Type": "application/json", "X-Request-Id": "users"}
            if c.pool is not None:
                await send_native(c.pool, srv.url, headers, b'{"x": 1}', r, target())
            else:
                await send(c.session, srv.url, headers, b'{"x": 1}', r, target())
            await c.close()
            return r, srv.requests[0][0]

    r, head = run(go())
    ids = [line for line in head.split(b"\r\n") if line.lower().startswith(b"x-request-id:")]
    assert r.ok and [i.lower() for i in ids] == [b"x-request-id: own-id"]


SECRET = "sk-live-0123456789abcdef"
PAGE = (b"<!DOCTYPE html><html><head><title>Sign in</title></head><body>Your key "
        + SECRET.encode() + b" was refused</body></html>")
WHOLE = b'{"id":"c1","object":"chat.completion","choices":[{"message":{"content":"hi"}}]}'


def plain(body: bytes, content_type: bytes | None, framing: str = "length") -> bytes:
    head = b"HTTP/1.1 200 OK\r\n" + (b"Content-Type: " + content_type + b"\r\n" if content_type else b"")
    if framing == "chunked":
        return head + b"Transfer-Encoding: chunked\r\n\r\n" + chunked([body] if body else [])
    return head + b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def answering(wire: bytes):
    async def script(n, reader, writer):
        writer.write(wire)
        await writer.drain()

    return script


@pytest.mark.parametrize("path", PATHS)
def test_a_200_that_is_not_an_event_stream_says_what_came_back(path):
    with redact.scrubbing(redact.Scrubber([SECRET])):
        rs, _, _ = run(sequential(path, answering(plain(PAGE, b"text/html; charset=utf-8")), 1))
    r = rs[0]
    assert r.outcome.error == NOT_SSE and r.outcome.status == 200
    assert "text/html; charset=utf-8" in r.outcome.error_detail
    assert "<title>Sign in</title>" in r.outcome.error_detail
    assert SECRET not in r.outcome.error_detail and "Your key *** was refused" in r.outcome.error_detail

    rs, _, _ = run(sequential(path, answering(plain(WHOLE, b"application/json", "chunked")), 1))
    assert rs[0].outcome.error == NOT_SSE and "application/json" in rs[0].outcome.error_detail
    assert '"object":"chat.completion"' in rs[0].outcome.error_detail

    rs, _, _ = run(sequential(path, answering(plain(b"", b"application/json")), 1))
    assert rs[0].outcome.error == NOT_SSE and "its body was empty" in rs[0].outcome.error_detail
    # an event stream that carried no event at all stays what it was: no output
    rs, _, _ = run(sequential(path, answering(plain(b"", b"text/event-stream")), 1))
    assert rs[0].outcome.error == EMPTY


def test_a_stream_of_events_under_another_content_type_is_still_read():
    """Judged by what the body framed, not by the header alone: some servers label their
    stream application/json."""
    wire = plain(b"".join(sse(["a", "b"])), b"application/json", "chunked")
    for path in PATHS:
        rs, _, _ = run(sequential(path, answering(wire), 1))
        assert rs[0].ok and rs[0].tokens.text_chunks == 2, \
            (path, rs[0].outcome.error, rs[0].outcome.error_detail)


# --------------------------------------------------------------------------- the client's own limits


def test_the_client_running_out_is_told_from_a_server_refusing():
    assert connect_failure(OSError(errno.EMFILE, "Too many open files")) == CLIENT_EXHAUSTED
    assert connect_failure(OSError(errno.ENFILE, "File table overflow")) == CLIENT_EXHAUSTED
    assert connect_failure(OSError(errno.EADDRNOTAVAIL, "Cannot assign address")) == CLIENT_EXHAUSTED
    assert connect_failure(ConnectionRefusedError(errno.ECONNREFUSED, "refused")) == CONNECT
    try:
        try:
            raise OSError(errno.EMFILE, "Too many open files")
        except OSError as inner:
            raise ValueError("wrapped") from inner
    except ValueError as outer:
        assert connect_failure(outer) == CLIENT_EXHAUSTED
    wrapped = aiohttp.ClientConnectorError(
        aiohttp.client_reqrep.ConnectionKey("h", 1, False, True, None, None, None),
        OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address"))
    assert connect_failure(wrapped) == CLIENT_EXHAUSTED


def test_client_exhaustion_neither_counts_toward_a_dead_server_nor_resets_the_count():
    streak = ConnectStreak(inflight=1)
    for _ in range(5):
        streak.add(RequestRecord("x", 0, 1, 1, outcome=Outcome(error=CONNECT)))
    for _ in range(50):
        assert not streak.add(RequestRecord("x", 0, 1, 1, outcome=Outcome(error=CLIENT_EXHAUSTED)))
    assert streak.streak == 5 and streak.reason is None


OUT_OF_FDS = """
import asyncio, errno, os, resource, sys
sys.path.insert(0, {repo!r})
import aiohttp
from benchc.client import http1
from benchc.client.request import make_connector, make_trace_config, send, send_native
from benchc.metrics.record import RequestRecord
from benchc.plan.model import Target

async def main(path):
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    url = "http://127.0.0.1:%d/v1/chat/completions" % server.sockets[0].getsockname()[1]
    t = Target(url, None, "chat", "m", None, {{}}, 10.0, 10.0, None)
    if path == "aiohttp":
        client = aiohttp.ClientSession(connector=make_connector(), trace_configs=[make_trace_config()])
    else:
        client = http1.Pool(rx_loop="auto" if path == "native-rx" else "off")
    held = []
    try:
        while True:  # every descriptor the limit allows, in use
            held.append(os.dup(0))
    except OSError as e:
        assert e.errno == errno.EMFILE, e
    rec = RequestRecord("r", 0, 1, None)
    headers = {{"Content-Type": "application/json"}}
    if path == "aiohttp":
        await send(client, url, headers, b"{{}}", rec, t)
    else:
        await send_native(client, url, headers, b"{{}}", rec, t)
    for fd in held:
        os.close(fd)
    await client.close()
    server.close()
    print(rec.outcome.error, rec.outcome.status, rec.outcome.error_detail)

resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
asyncio.run(main(sys.argv[1]))
"""


@pytest.mark.parametrize("path", ["native-asyncio", "native-rx", "aiohttp"])
def test_a_client_out_of_file_descriptors_records_client_exhausted(path):
    """Really out of descriptors (a process with a low limit, every descriptor held): the
    request fails as the client's own exhaustion, before anything reached the server."""
    out = subprocess.run([sys.executable, "-c", OUT_OF_FDS.format(repo=REPO), path], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    error, status, detail = out.stdout.strip().split(" ", 2)
    assert (error, status) == (CLIENT_EXHAUSTED, "None"), out.stdout
    assert "Too many open files" in detail or "[Errno 24]" in detail, detail


def test_the_docs_and_the_result_schema_name_every_error_kind():
    with open(os.path.join(REPO, "docs", "running.md"), encoding="utf-8") as f:
        readme = f.read()
    table = readme[readme.index("| kind | what happened |"):]
    table = table[:table.index("\n\n")]
    assert sorted(re.findall(r"^  \| `(\w+)` \|", table, re.M)) == sorted(ERROR_KINDS)
    with open(os.path.join(REPO, "benchc", "schemas", "result-v1.json"), encoding="utf-8") as f:
        schema = json.load(f)
    described = schema["$defs"]["point"]["properties"]["counts"]["properties"]["errors"]["description"]
    assert all(kind in described for kind in ERROR_KINDS)


class SilentServer:
    """Takes connections and reads requests; answers GET (the run's /models look-up) with a
    404, and never answers a POST: the server of issue 15 that hung benchc silently."""

    def __init__(self):
        import socket
        import threading

        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.posts = 0
        self.conns: list = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import threading

        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        try:
            head = conn.recv(65536)
            if head.startswith(b"GET"):
                conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                conn.close()
                return
            self.posts += 1
            while conn.recv(65536):  # until the client gives up on it
                pass
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.sock.close()
        for c in self.conns:
            with contextlib.suppress(OSError):
                c.close()


@pytest.mark.slow
def test_a_run_against_a_server_that_never_answers_says_so_and_ends_at_the_first_byte_deadline(
        tmp_path, capsys, monkeypatch):
    """Before: no output for the whole request timeout (10 minutes by default). Now a line while
    every request waits, and each fails as first_byte_timeout after target.first_byte_timeout."""
    from benchc.cli import main
    from benchc.results.document import read
    from benchc.run import runner
    from tests.simrun import write_spec

    monkeypatch.setattr(runner, "HEARTBEAT_S", 0.25)
    monkeypatch.setattr(runner, "PROGRESS_TICK_S", 0.05)
    srv = SilentServer()
    try:
        spec = write_spec(tmp_path, sweep="    concurrency: [2]", extra="  requests: 2",
                          target="\n  first_byte_timeout: 1500ms")
        code = main(["run", spec, "--base-url", srv.url, "--set", "load.warmup.requests=0"])
    finally:
        srv.close()
    err = capsys.readouterr().err
    assert "c=2: waiting for the server: 2 requests in flight, nothing arrived in" in err
    assert "one without an answer fails after 1.5s, target.first_byte_timeout" in err
    doc = read(str(tmp_path / "r.json"))
    point = doc["points"][0]
    assert point["counts"]["errors"] == {FIRST_BYTE_TIMEOUT: 2} and srv.posts == 2
    # the load ran to its end; every request failed: a failed point, exit 7 (issue 29, class 7)
    assert code == 7 and doc["complete"] is True
