"""A fake OpenAI-style server for the hardening tests, the one each hostile answer (a key
echoed back, a failed response, too few vectors, a tool call nested past the decoder's depth)
is served by: aiohttp on a free port of 127.0.0.1, in a thread and event loop of its own so
that a test can run benchc's own `main` against it in the test's thread."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

from benchc.client.request import send, send_native
from benchc.metrics.record import Payload, RequestRecord
from benchc.plan.model import Target
from tests.test_http1 import RawServer, target
from tests.test_keepalive import Client

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class FakeServer:
    """GET /v1/models lists model `m`; each POST path of `routes` (e.g. "/v1/chat/completions")
    answers with its handler. `url`: the base URL (…/v1). close() stops it."""

    def __init__(self, routes: dict[str, Handler], client_max_size: int = 1024**2):
        self.routes, self.client_max_size = routes, client_max_size  # aiohttp's default bound
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        assert self.ready.wait(30)

    def _serve(self) -> None:
        async def models(_):
            return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

        async def start():
            app = web.Application(client_max_size=self.client_max_size)
            app.router.add_get("/v1/models", models)
            for path, handler in self.routes.items():
                app.router.add_post(path, handler)
            self.runner = web.AppRunner(app)
            await self.runner.setup()
            site = web.TCPSite(self.runner, "127.0.0.1", 0)
            await site.start()
            self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"
            self.ready.set()

        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(start())
        self.loop.run_forever()

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


async def streamed(request: web.Request, body: bytes) -> web.StreamResponse:
    """`body` sent back as one text/event-stream answer."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(body)
    await resp.write_eof()
    return resp


def answered(path: str, head: bytes, body: bytes, t: Target | None = None, inputs: int = 1,
             headers: dict[str, str] | None = None) -> RequestRecord:
    """The record of one request (POST {"x": 1}) sent on client path `path` (test_keepalive's
    PATHS) to a raw server whose answer is `head` (its status line and headers, each ending in
    CRLF), a Content-Length and `body`; `t`: the target (test_http1's by default)."""
    async def script(n, reader, writer):
        writer.write(head + b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()

    async def go():
        async with RawServer(script) as srv:
            c = Client(path)
            r = RequestRecord("req-1", 0, 1, None, payload=Payload(inputs=inputs))
            h = headers or {"Content-Type": "application/json"}
            to = t or target()
            if c.pool is not None:
                r = await send_native(c.pool, srv.url, h, b'{"x": 1}', r, to)
            else:
                r = await send(c.session, srv.url, h, b'{"x": 1}', r, to)
            await c.close()
            return r

    return asyncio.run(go())


SMALL_RUN = """\
version: 1
name: {name}
target: {{base_url: "{url}", model: m{api}}}
workload:
{batch}  dataset:
    random: {{input_tokens: 8, output_tokens: 1, seed: 1}}
load:
  warmup: {{requests: 0}}
  sweep: {{concurrency: [1]}}
  requests: {requests}
output: {{path: {out}}}
"""


def small_run(tmp_path: Path, url: str, requests: int, api: str | None = None,
              batch: int | None = None) -> dict:
    """The point of a quiet run (asserted to exit 0) of `requests` random 8-token prompts, one at a
    time, against `url` (`api` and a `batch` of inputs where given); its result is r.json."""
    from benchc.cli import main

    spec = tmp_path / "s.yaml"
    spec.write_text(SMALL_RUN.format(name="e" if api else "h", url=url, api=f", api: {api}" if api else "",
                                     batch=f"  batch: {batch}\n" if batch else "", requests=requests,
                                     out=tmp_path / "r.json"))
    assert main(["run", str(spec), "--quiet"]) == 0
    return json.loads((tmp_path / "r.json").read_text())["points"][0]
