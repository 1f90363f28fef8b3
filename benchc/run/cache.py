"""Emptying the server's prefix cache between points (server.reset_cache); the verdict on a
point's cached prompt tokens is metrics/cache.py's.

Reset (server.reset_cache, opt-in): vLLM's POST /reset_prefix_cache (served only when the
server runs with VLLM_SERVER_DEV_MODE=1) or SGLang's POST /flush_cache, the first that
answers 200, on the server's root. A server with neither is said so at the first reset,
loudly, and every point it should have emptied the cache for is marked: never a silent no-op.

vLLM (0.32, checked on a real server) answers 200 {"success": false} and empties nothing while
any request holds blocks: another client's, on a shared server (benchc's own have ended). That
answer is asked again for a while (those requests end), then the point is marked as not reset.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp

from benchc.client.bounded import error_text

# a reset the server refused for requests it is running: asked again every RETRY_S, up to
# RETRIES times (their requests end; a server that never drains leaves the point marked)
RETRY_S = 0.5
RETRIES = 20

# (path, who serves it): tried in order, on the server's root
RESET_ENDPOINTS = (("/reset_prefix_cache", "vLLM, when run with VLLM_SERVER_DEV_MODE=1"),
                   ("/flush_cache", "SGLang"))


class CacheReset:
    """server.reset_cache of one combination: when a reset is due, and doing it."""

    def __init__(self, mode: str):
        self.mode = mode  # between_points | between_combinations | never
        self.endpoint: str | None = None  # the one that worked
        self.failure: str | None = None  # why none did (said once, then repeated in each point)

    def due(self, kind: str, first_step: bool) -> bool:
        """Before a load point (between_points), or before a combination's first step."""
        if self.mode == "between_points":
            return kind == "load"
        return self.mode == "between_combinations" and first_step

    async def reset(self, session: aiohttp.ClientSession, root: str, headers: dict) -> dict:
        """Empty the server's prefix cache; {"done", "endpoint"} or {"done": False, "message"}."""
        if self.failure is not None:  # said at the first reset; each point still says it
            return {"done": False, "message": self.failure}
        tried = []
        for path, who in ([(self.endpoint, "")] if self.endpoint else RESET_ENDPOINTS):
            answer = await _post(session, root + path, headers)
            for _ in range(RETRIES):
                if answer != BUSY:
                    break
                await asyncio.sleep(RETRY_S)
                answer = await _post(session, root + path, headers)
            if answer == "200":
                self.endpoint = path
                return {"done": True, "endpoint": path}
            if answer == BUSY:
                self.endpoint = path  # it is there: ask it again before the next point
                return {"done": False, "endpoint": path, "say": True, "message": (
                    f"server.reset_cache: {self.mode}: the server at {root} did not empty its prefix cache: "
                    f"POST {path} answered 200 {{\"success\": false}} {RETRIES + 1} times over "
                    f"{RETRIES * RETRY_S:g}s (vLLM empties it only while no request holds blocks: another "
                    "client's requests were running). The point starts with whatever the server cached")}
            tried.append(f"POST {path} ({who}) answered {answer}" if who
                         else f"POST {path} answered {answer}")
        message = (f"server.reset_cache: {self.mode}: the server at {root} did not empty its prefix cache: "
                   + "; ".join(tried) + ". llama.cpp's llama-server has no such endpoint. The points start "
                   "with whatever the server cached (fresh prompts still keep them from sharing prompts); "
                   "give the server its reset endpoint, or set server.reset_cache: never")
        if self.endpoint is None:
            self.failure = message  # no endpoint at all: do not ask again at every point
        return {"done": False, "message": message, "say": True}


BUSY = "200, success false"  # vLLM's answer while requests hold blocks


async def _post(session: aiohttp.ClientSession, url: str, headers: dict) -> str:
    try:
        async with session.post(url, headers=headers, timeout=aiohttp.ClientTimeout(total=60),
                                allow_redirects=False) as r:
            if r.status == 200:
                return BUSY if _refused(await r.content.read(1024)) else "200"
            body = (await error_text(r, 120)).strip()
            return f"{r.status}" + (f" ({body})" if body else "")
    except (aiohttp.ClientError, TimeoutError) as e:
        return f"nothing ({type(e).__name__})"


def _refused(body: bytes) -> bool:
    """A 200 whose JSON body says {"success": false} (vLLM 0.32: nothing was emptied)."""
    try:
        answer = json.loads(body)
    except (ValueError, RecursionError):
        return False  # an empty or other body: the status says it (SGLang, older vLLM)
    return isinstance(answer, dict) and answer.get("success") is False
