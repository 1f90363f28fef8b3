"""A hostile server for tests: a loopback proxy in front of the simulator that answers some
requests itself (as a real server that refuses a body shape, or rewrites what it reports),
and passes every other request through, streams included. It runs its own event loop in a
thread, so that `benchc.cli.main` (which runs its own) can be pointed at it."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable

import aiohttp
from aiohttp import web

# (path, JSON body) -> an error message to answer with HTTP 400, or None to pass it through
Refuse = Callable[[str, dict], str | None]
# a passed-through SSE line's JSON payload, rewritten in place (usage, say)
Rewrite = Callable[[dict], None]
# (path, JSON body) of a request passed through, altered in place first (tools dropped, say)
Alter = Callable[[str, dict], None]


class GateProxy:
    def __init__(self, upstream: str, refuse: Refuse | None = None, rewrite: Rewrite | None = None,
                 alter: Alter | None = None):
        self.upstream = upstream.rstrip("/").removesuffix("/v1")
        self.refuse, self.rewrite, self.alter = refuse, rewrite, alter
        self.refused: list[str] = []
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self._thread.start()
        ready.wait(10)
        self.url = f"http://127.0.0.1:{self._port}/v1"

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application(client_max_size=64 << 20)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self._port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._session = aiohttp.ClientSession(loop=self._loop)
        ready.set()
        self._loop.run_forever()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        if request.method == "POST" and self.refuse is not None:
            why = self.refuse(request.path, json.loads(raw))
            if why is not None:
                self.refused.append(why)
                error = {"code": 400, "message": why, "type": "invalid_request_error"}
                return web.json_response({"error": error}, status=400)
        if request.method == "POST" and self.alter is not None:
            body = json.loads(raw)
            self.alter(request.path, body)
            raw = json.dumps(body).encode()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        async with self._session.request(request.method, self.upstream + request.path_qs, data=raw or None,
                                         headers=headers) as up:
            out = web.StreamResponse(status=up.status)
            out.content_type = up.content_type
            await out.prepare(request)
            if self.rewrite is None:
                async for chunk in up.content.iter_any():
                    await out.write(chunk)
            else:
                async for line in up.content:
                    await out.write(self._rewritten(line))
            await out.write_eof()
            return out

    def _rewritten(self, line: bytes) -> bytes:
        assert self.rewrite is not None
        text = line.strip()
        body = text[5:].strip() if text.startswith(b"data:") else text
        if not body.startswith(b"{"):
            return line
        data = json.loads(body)
        self.rewrite(data)
        return (b"data: " if text.startswith(b"data:") else b"") + json.dumps(data).encode() + b"\n"

    def close(self) -> None:
        async def stop() -> None:
            await self._session.close()
            await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
