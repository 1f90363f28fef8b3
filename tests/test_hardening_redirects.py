"""Credentials stay with their origin (issue 29, class 1): no request benchc makes follows a
redirect, so no credential header goes to another origin and no other server's answer is
measured; a redirect is recorded as the status it is. Every HTTP path (the own reader on each
transport, aiohttp) and the side channels (/v1/models, /metrics, smoke)."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from benchc.client.apis import APIS
from benchc.client.request import send, send_native
from benchc.metrics.record import HTTP, RequestRecord
from benchc.run import smoke, telemetry
from benchc.run.runner import fetch_models
from tests.test_http1 import OK_HEAD, RawServer, chunked, sse, target
from tests.test_keepalive import PATHS, Client

SECRET = "sk-origin-only-4242"


class Recorder:
    """Any HTTP request at all: kept (its head), answered 200 with a small stream."""

    def __init__(self):
        self.heads: list[bytes] = []

    async def _conn(self, reader, writer):
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.heads.append(head)
            writer.write(OK_HEAD + chunked(*sse(["other", "server"])))
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        self.root = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc):
        self.server.close()


class Redirecting:
    """Answers every request (any method, with or without a body) 307 to `location`."""

    def __init__(self, location: str):
        self.location = location.encode()

    async def _conn(self, reader, writer):
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 307 Temporary Redirect\r\nLocation: " + self.location
                         + b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        self.root = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc):
        self.server.close()


@pytest.mark.parametrize("path", PATHS)
def test_a_measured_request_never_follows_a_redirect_to_another_origin(path):
    """aiohttp followed it, with the x-api-key and every other header, and measured the other
    server's stream as this one's."""
    async def go():
        async with Recorder() as other:
            async def script(n, reader, writer):
                writer.write(b"HTTP/1.1 307 Temporary Redirect\r\nLocation: " + other.root.encode()
                             + b"/v1/chat/completions\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
            async with RawServer(script) as srv:
                c = Client(path)
                r = RequestRecord("req-1", 0, 1, None)
                headers = {"Content-Type": "application/json", "x-api-key": SECRET,
                           "Authorization": f"Bearer {SECRET}"}
                if c.pool is not None:
                    r = await send_native(c.pool, srv.url, headers, b'{"x": 1}', r, target())
                else:
                    r = await send(c.session, srv.url, headers, b'{"x": 1}', r, target())
                await c.close()
                return r, other.heads, srv.requests
    r, elsewhere, here = asyncio.run(go())
    assert elsewhere == [] and len(here) == 1
    assert (r.outcome.status, r.outcome.error) == (307, HTTP) and r.tokens.text_chunks == 0


def _side_channels(root: str):
    headers = {"Authorization": f"Bearer {SECRET}", "x-api-key": SECRET}

    async def go():
        async with aiohttp.ClientSession() as s:
            models = await fetch_models(s, root + "/v1", headers)
            metrics = await telemetry.scrape(s, root)
            url = root + "/v1/chat/completions"
            asked = await smoke._ask(s, APIS["chat"], url, headers, {"stream": False}, 10)
            return models, metrics, asked
    return go


def test_the_side_channels_never_follow_a_redirect_either():
    async def go():
        async with Recorder() as other, Redirecting(other.root + "/v1/models") as srv:
            got = await _side_channels(srv.root)()
            return got, other.heads
    (models, metrics, (text, _, error)), elsewhere = asyncio.run(go())
    assert elsewhere == []
    assert models == {"status": 307} and metrics is None and error.startswith("HTTP 307")
