"""Bounded memory from any server on the side channels (issue 29, class 2): /v1/models,
/metrics, smoke answers and error bodies each read at most their stated bound
(benchc/client/bounded.py, README: Limits), and a side channel past it never ends the run.

The servers here are real sockets that answer forever; each test checks what benchc kept, that
the server was still writing when benchc stopped reading (so the bound, not a timeout, ended
it), and tracemalloc's peak against the bound."""

import asyncio
import tracemalloc

import aiohttp
import pytest

from benchc.client import bounded
from benchc.client.apis import APIS
from benchc.run import smoke, telemetry
from benchc.run.runner import fetch_models


class Endless:
    """An HTTP/1.1 server whose every answer is a 200 with `prefix`, then `block` repeated for
    as long as the client reads (chunked). It counts the body bytes it got out."""

    def __init__(self, prefix: bytes, block: bytes, content_type: bytes = b"application/json"):
        self.prefix, self.block, self.content_type = prefix, block, content_type
        self.sent = 0

    async def _serve(self, reader, writer):
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: " + self.content_type
                         + b"\r\ntransfer-encoding: chunked\r\n\r\n")
            data = self.prefix or self.block  # an empty chunk would end the body
            while True:
                writer.write(b"%x\r\n%s\r\n" % (len(data), data))
                await writer.drain()
                self.sent += len(data)
                data = self.block
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        self.root = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc):
        self.server.close()
        await self.server.wait_closed()


def _measured(coro_fn):
    """Run `coro_fn(session)` against a fresh session; its result and the tracemalloc peak."""
    async def go():
        async with aiohttp.ClientSession() as session:
            return await coro_fn(session)
    tracemalloc.start()
    try:
        out = asyncio.run(go())
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


BLOCK = b"x" * 65536


def test_an_endless_models_list_is_not_copied_into_the_result():
    """A 200 MB /v1/models went whole into the result document."""
    async def probe(session):
        async with Endless(b'{"object": "list", "data": [', BLOCK) as srv:
            got = await fetch_models(session, srv.root + "/v1", {})
            return got, srv.sent
    (got, sent), peak = _measured(probe)
    assert got == {"error": f"/v1/models answered more than {bounded.MODELS_BYTES:,} bytes (benchc's bound; "
                            "README: Limits)"}
    assert sent > bounded.MODELS_BYTES and peak < 4 * bounded.MODELS_BYTES


def test_an_endless_metrics_page_is_no_telemetry_not_a_lost_run():
    """It took 2.8 GB and ended the run with exit 4 and no result."""
    async def probe(session):
        async with Endless(b"vllm:num_requests_running 1\n", b"vllm:num_requests_waiting 0\n" * 2000,
                           b"text/plain") as srv:
            return await telemetry.scrape(session, srv.root), srv.sent
    (got, sent), peak = _measured(probe)
    assert got is None and sent > bounded.METRICS_BYTES and peak < 4 * bounded.METRICS_BYTES


@pytest.mark.parametrize("stream", [False, True])
def test_an_endless_smoke_answer_is_a_failed_check_not_gigabytes(stream):
    """A non-streamed answer that never ended took 3.6 GB."""
    if stream:
        prefix, block, ctype = b"", b'data: {"choices": [{"delta": {"content": "xxxxxxxx"}}]}\n\n' * 1000, \
            b"text/event-stream"
    else:
        prefix, block, ctype = b'{"choices": [{"message": {"content": "', BLOCK, b"application/json"
    async def probe(session):
        async with Endless(prefix, block, ctype) as srv:
            url = srv.root + "/v1/chat/completions"
            return await smoke._ask(session, APIS["chat"], url, {}, {"stream": stream}, 60), srv.sent
    ((text, _, error), sent), peak = _measured(probe)
    assert text == "" and error is not None and "more than 1,048,576 bytes" in error
    assert sent > bounded.SMOKE_BYTES and peak < 4 * bounded.SMOKE_BYTES


def test_an_endless_error_body_costs_the_few_bytes_a_message_shows():
    async def probe(session):
        async with Endless(b"", BLOCK) as srv:
            async with session.get(srv.root + "/") as r:
                return await bounded.error_text(r)
    text, peak = _measured(probe)
    assert text == "x" * bounded.ERROR_BODY_BYTES and peak < 1 << 20
