"""Keep-alive on both HTTP paths (benchc's own reader, on each of its transports, and
aiohttp) against raw loopback servers: the race of a server closing a pooled connection is
retried once on a fresh connection and counted, the server's signals stop reuse, an origin
that closes every connection stops being pooled, and genuine failures stay errors."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from benchc.client import http1
from benchc.client.request import (
    SESSION_OPTIONS,
    make_connector,
    make_trace_config,
    reuse_rules,
    send,
    send_native,
)
from benchc.metrics.record import CONNECT, FIRST_BYTE_TIMEOUT, STREAM_BROKEN, RequestRecord
from tests.conftest import rx_loop_of, transports
from tests.test_http1 import OK_HEAD, RawServer, chunked, sse, target

# the own reader on each transport (native-asyncio, native-rx-py, native-rx-c), and aiohttp
NATIVE = [f"native-{t}" for t in transports()]
PATHS = [*NATIVE, "aiohttp"]


class Client:
    """One of the HTTP paths, with its pool (or session) kept across requests: "native" (the
    own reader as `benchc run` makes it), "native-TRANSPORT" (on that transport), "aiohttp"."""

    def __init__(self, path: str, kernel_stamps: bool = http1.KERNEL_STAMPS):
        self.path = path
        native = path.startswith("native")
        rx_loop = rx_loop_of(path.split("-", 1)[1]) if native and "-" in path else "auto"
        self.pool = http1.Pool(kernel_stamps=kernel_stamps, rx_loop=rx_loop) if native else None
        self.session = None if native else aiohttp.ClientSession(
            connector=make_connector(), trace_configs=[make_trace_config()], **SESSION_OPTIONS)
        self.n = 0

    @property
    def rules(self) -> http1.ReuseRules:
        return reuse_rules(self.session, self.pool)

    async def request(self, url: str, t=None) -> RequestRecord:
        self.n += 1
        r = RequestRecord(f"req-{self.n}", 0, 1, None)
        headers = {"Content-Type": "application/json"}
        if self.pool is not None:
            return await send_native(self.pool, url, headers, b'{"x": 1}', r, t or target())
        return await send(self.session, url, headers, b'{"x": 1}', r, t or target())

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()
        else:
            await self.session.close()


def run(coro):
    return asyncio.run(coro)


async def sequential(path: str, script, n: int, t=None, between=None):
    """n requests one after another on one client; (records, server, client's rules report)."""
    async with RawServer(script) as srv:
        c = Client(path)
        rs = []
        for i in range(n):
            rs.append(await c.request(srv.url, t))
            if between is not None:
                await between(i)
        report = c.rules.report()
        await c.close()
        return rs, srv, report


async def answer(writer, texts=("a",)) -> None:
    writer.write(OK_HEAD + chunked(sse(list(texts))))
    await writer.drain()


def answer_then_close_on_reuse(reset: bool):
    """Answers the first request of each connection; the next one on it is read and the
    connection closed without an answer (with a reset when `reset`): every reuse races."""
    per_conn: dict = {}  # keyed by the writer itself: an id() of a closed one is reused

    async def script(n, reader, writer):
        per_conn[writer] = per_conn.get(writer, 0) + 1
        if per_conn[writer] == 1:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                         b"Keep-Alive: timeout=5, max=100\r\n\r\n" + chunked(sse(["a", "b"])))
            await writer.drain()
            return None
        if reset:
            writer.transport.abort()
        return "close"

    return script


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("reset", [False, True], ids=["eof", "reset"])
def test_the_keep_alive_race_is_retried_once_on_a_fresh_connection_and_counted(path, reset):
    rs, srv, report = run(sequential(path, answer_then_close_on_reuse(reset), 2))
    first, second = rs
    assert first.ok and second.ok, (first.outcome.error_detail, second.outcome.error_detail)
    assert not first.outcome.retried and second.outcome.retried and not second.outcome.reused_connection
    assert second.tokens.text_chunks == 2 and second.tokens.usage_output_tokens == 2
    # the server saw the request three times: the first, the reused attempt it never answered, the retry
    assert len(srv.requests) == 3 and srv.connections == 2
    # timing starts at the retry's send; the first attempt's send is kept for the self-check
    assert second.times.t0_ns > second.times.first_sent_ns
    assert 0 <= second.times.first_text_ns - second.times.t0_ns <= second.times.end_ns - second.times.t0_ns
    assert report["pooled"] is True and report["server_closes"] == 1


@pytest.mark.parametrize("path", PATHS)
def test_an_origin_that_closes_every_connection_stops_being_pooled(path):
    """Every reuse races; after STOP_POOLING_AFTER closes in a row each request opens its
    own connection, and the result's report says so."""
    rs, srv, report = run(sequential(path, answer_then_close_on_reuse(False), 8))
    assert all(r.ok for r in rs), [r.outcome.error_detail for r in rs]
    # The own reader pools a retry's fresh connection, so the next request races again; the
    # aiohttp path retries on a one-off connection, so the next request opens its own.
    races = [False, True, True, True] if path in NATIVE else [False, True, False, True, False, True]
    assert [r.outcome.retried for r in rs] == races + [False] * (8 - len(races))
    assert report["pooled"] is False and "3 connections in a row right after a response" in report["note"]
    assert srv.connections == 8 and len(srv.requests) == 8 + http1.STOP_POOLING_AFTER


@pytest.mark.parametrize("path", PATHS)
def test_keep_alive_max_is_honoured_and_the_server_never_closes_first(path):
    """cpp-httplib's `max` counts the requests a connection may carry; the client stops at it."""
    served: dict = {}

    async def script(n, reader, writer):
        served[writer] = served.get(writer, 0) + 1
        if served[writer] > 2:  # what a server enforcing max=2 would do: no answer, close
            return "close"
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nKeep-Alive: timeout=5, max=2\r\n\r\n"
                     + chunked(sse(["a"])))
        await writer.drain()

    rs, srv, report = run(sequential(path, script, 6))
    assert all(r.ok and not r.outcome.retried for r in rs)
    assert srv.connections == 3 and len(srv.requests) == 6
    assert [r.outcome.reused_connection for r in rs] == [False, True] * 3
    assert report["pooled"] is True and report["server_closes"] == 0


@pytest.mark.skipif(not http1.KERNEL_STAMPS, reason="the idle peek is the plain-socket (Linux) transport's")
@pytest.mark.parametrize("path", NATIVE)
def test_an_eof_seen_on_an_idle_connection_keeps_it_out_of_use(path):
    """The server closes right after the response; once its FIN is in, the next request
    does not take the dead connection (no race, no retry), and the close is counted."""
    closed = asyncio.Event

    async def main():
        done = closed()

        async def script(n, reader, writer):
            writer.write(OK_HEAD + chunked(sse(["a"])))
            await writer.drain()
            writer.close()
            await writer.wait_closed()
            done.set()
            return "close"

        async def wait_for_close(i):
            await done.wait()  # the FIN has left: on loopback it is in the client's socket now
            done.clear()

        return await sequential(path, script, 3, between=wait_for_close)

    rs, srv, report = run(main())
    assert all(r.ok and not r.outcome.retried and not r.outcome.reused_connection for r in rs)
    assert srv.connections == 3 and len(srv.requests) == 3
    assert report["server_closes"] == 2


@pytest.mark.parametrize("path", PATHS)
def test_genuine_failures_stay_errors(path):
    """A fresh connection the server closes, a retry that fails too, a reset after bytes of
    the answer, a silent server: errors as before, never retried into a success."""

    async def close_all(n, reader, writer):
        return "close"  # never answers

    rs, srv, _ = run(sequential(path, close_all, 2))
    assert [r.outcome.error for r in rs] == [CONNECT, CONNECT] and not any(r.outcome.retried for r in rs)
    details = [r.outcome.error_detail for r in rs]
    assert all("before any response" in d or "Server disconnected" in d for d in details), details

    async def answer_once_then_never(n, reader, writer):
        if n == 0:
            return await answer(writer)
        return "close"  # the reused attempt and its retry on a new connection both fail

    rs, srv, _ = run(sequential(path, answer_once_then_never, 2))
    assert rs[0].ok and rs[1].outcome.error == CONNECT and rs[1].outcome.retried
    assert "a retry after a reused connection failed" in rs[1].outcome.error_detail
    assert len(srv.requests) == 3

    async def reset_mid_answer_on_reuse(n, reader, writer):
        if n == 0:
            return await answer(writer)
        writer.write(OK_HEAD + chunked(sse(["a", "b", "c"]))[:-60])
        await writer.drain()
        writer.transport.abort()
        return "close"

    rs, srv, _ = run(sequential(path, reset_mid_answer_on_reuse, 2))
    assert rs[1].outcome.error == STREAM_BROKEN and not rs[1].outcome.retried
    assert rs[1].tokens.text_chunks >= 1
    assert len(srv.requests) == 2

    async def silent_on_reuse(n, reader, writer):
        if n == 0:
            return await answer(writer)
        await asyncio.sleep(5)

    rs, srv, _ = run(sequential(path, silent_on_reuse, 2, t=target(timeout_s=10, first_byte_s=0.3)))
    assert rs[1].outcome.error == FIRST_BYTE_TIMEOUT and not rs[1].outcome.retried and len(srv.requests) == 2


@pytest.mark.parametrize("path", PATHS)
def test_a_failed_request_stores_no_latency(path):
    async def close_all(n, reader, writer):
        return "close"

    rs, _, _ = run(sequential(path, close_all, 1))
    line = rs[0].to_json()
    assert line["error"] == CONNECT and line["ttft_us"] is None and line["e2e_us"] is None
    assert rs[0].times.end_ns >= rs[0].times.t0_ns


def test_keep_alive_header_parsing_and_the_max_reading():
    assert http1.parse_keep_alive(b"timeout=5, max=100") == (5.0, 100)
    assert http1.parse_keep_alive("Max=3") == (None, 3)
    assert http1.parse_keep_alive(b"timeout=x, max=") == (None, None)
    assert http1.parse_keep_alive(None) == (None, None)
    rules = http1.ReuseRules(keepalive_s=60)
    use = rules.opened(("o",))
    # Apache counts down (requests left), cpp-httplib repeats its constant: both end in time
    assert rules.finished(use, True, b"timeout=5, max=3", 1) is True
    assert rules.finished(use, True, b"timeout=5, max=2", 2) is True
    assert rules.finished(use, True, b"timeout=5, max=1", 3) is False
    use = rules.opened(("o",))
    assert [rules.finished(use, True, b"max=2", i) for i in (1, 2)] == [True, False]
    # idle past the server's timeout (less a margin): not handed out again
    use = rules.opened(("o",))
    rules.finished(use, True, b"timeout=2", 0)
    assert rules.reusable(use, 1_000_000_000) and not rules.reusable(use, 1_600_000_000)
    # an idle close long after the response is the server's timeout, not its habit
    rules.server_closed(("o",), 5_000_000_000)
    assert rules.report() == {"pooled": True, "server_closes": 0}
    assert http1.retry_on_fresh(True, 0, False, False)
    assert not http1.retry_on_fresh(False, 0, False, False)  # a fresh connection: the server's failure
    assert not http1.retry_on_fresh(True, 1, False, False)  # once
    assert not http1.retry_on_fresh(True, 0, True, False)  # bytes of an answer came
    assert not http1.retry_on_fresh(True, 0, False, True)  # a timeout is not the race
