"""A fake OpenAI-style server for the hardening tests, the one each hostile answer (a key
echoed back, a failed response, too few vectors, a tool call nested past the decoder's depth)
is served by: aiohttp on a free port of 127.0.0.1, in a thread and event loop of its own so
that a test can run benchc's own `main` against it in the test's thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable

from aiohttp import web

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
