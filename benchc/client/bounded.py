"""Reads from a server off the measured path (/v1/models, /metrics, smoke answers, error bodies,
cache resets), each with a stated bound on the bytes it keeps: a server that answers forever, or
with a 200 MB list, costs benchc at most the bound, and the side channel says it was cut rather
than losing the run (README: Limits).

Every bound is here, so the Limits table has one place to read them from.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from benchc import redact

MODELS_BYTES = 1 << 20  # /v1/models (a real list of thousands of models is ~300 kB)
METRICS_BYTES = 8 << 20  # /metrics (vLLM's is ~100 kB; per-LoRA and per-engine labels multiply it)
SMOKE_BYTES = 1 << 20  # a smoke check's answer, streamed or not (its max_tokens is small)
ERROR_BODY_BYTES = 300  # what an error answer's body contributes to a message


class BodyTooLarge(ValueError):
    """A side channel's answer passed its bound; `what` names the read and the bound."""

    def __init__(self, what: str, limit: int):
        self.what, self.limit = what, limit
        super().__init__(f"{what} answered more than {limit:,} bytes (benchc's bound; README: Limits)")


async def read_at_most(resp: aiohttp.ClientResponse, limit: int) -> tuple[bytearray, bool]:
    """Up to `limit` bytes of the body, and whether there was more (left unread: the
    connection is closed rather than drained)."""
    buf = bytearray()  # returned as it is: a copy would double the peak
    while len(buf) <= limit:
        chunk = await resp.content.read(limit + 1 - len(buf))
        if not chunk:
            return buf, False
        buf += chunk
    resp.close()
    del buf[limit:]
    return buf, True


async def read_body(resp: aiohttp.ClientResponse, limit: int, what: str) -> bytearray:
    """The whole body, or BodyTooLarge once it passes `limit`."""
    body, more = await read_at_most(resp, limit)
    if more:
        raise BodyTooLarge(what, limit)
    return body


async def read_json(resp: aiohttp.ClientResponse, limit: int, what: str) -> Any:
    """The body as JSON (any Content-Type), or BodyTooLarge / ValueError."""
    body = await read_body(resp, limit, what)
    try:
        return json.loads(body)
    except RecursionError:
        raise ValueError(f"{what} answered JSON nested too deep to read") from None


async def error_text(resp: aiohttp.ClientResponse, limit: int = ERROR_BODY_BYTES) -> str:
    """The start of an error answer's body, as text for a message, with the run's secrets
    scrubbed before it is cut to `limit` (a gateway may echo the request's headers): it reads
    as many more bytes as the longest form of a secret, so one across the cut is still whole
    when it is found."""
    scrub = redact.active()
    body, _ = await read_at_most(resp, limit + scrub.longest)
    return scrub.cut(bytes(body).decode("utf-8", "replace"), limit)
