"""Before a combination's conversations go to a Responses API: does the server keep responses
(`previous_response_id`), or must each request carry the history in full? Asked once, up front,
with two small requests (an answer kept, then one naming it), so that a spec that needs the
server to keep them stops before its load instead of failing every session at its second turn,
and a spec that sends the history in full says which the server would also have taken.

vLLM keeps responses only when started with VLLM_ENABLE_RESPONSES_API_STORE=1 (else it answers
404 "Response with id ... not found"); llama.cpp's server keeps none.
"""

from __future__ import annotations

import aiohttp

from benchc.client.apis import APIS
from benchc.client.bounded import SMOKE_BYTES, error_text, read_json
from benchc.client.request import headers_for
from benchc.plan.model import Combination

CHECK_TIMEOUT_S = 60.0  # two requests of a few tokens, on a server that may be loading its graphs


def asks_history(combo: Combination) -> str | None:
    """The history mode of a combination whose conversations go to a Responses API
    (`full` or `previous_response_id`); None for any other."""
    if combo.target.api != "responses" or not combo.workload.sessions:
        return None
    return combo.workload.sessions.get("history") or "full"


async def previous_response_id(session: aiohttp.ClientSession, combo: Combination,
                               base_url: str) -> tuple[bool, str]:
    """(whether the server takes previous_response_id, what it said, in a clause)."""
    url, headers = APIS["responses"].url(base_url), headers_for(combo.target)
    timeout = aiohttp.ClientTimeout(total=CHECK_TIMEOUT_S)
    body: dict = {"model": combo.target.model, "input": "Say OK.", "max_output_tokens": 4, "store": True}
    try:
        async with session.post(url, json=body, headers=headers, timeout=timeout,
                                allow_redirects=False) as r:
            if r.status != 200:
                return False, f"a first response was refused (HTTP {r.status}: {await error_text(r, 200)})"
            first = await read_json(r, SMOKE_BYTES, "the Responses check")
        kept = first.get("id") if isinstance(first, dict) else None
        if not isinstance(kept, str):
            return False, "its response carried no id"
        body = {**body, "input": "Again.", "previous_response_id": kept}
        async with session.post(url, json=body, headers=headers, timeout=timeout,
                                allow_redirects=False) as r:
            if r.status != 200:
                return False, f"HTTP {r.status}: {await error_text(r, 200)}"
            await r.read()
    except (aiohttp.ClientError, TimeoutError, ValueError) as e:
        return False, f"the check failed ({type(e).__name__}: {e})"
    return True, "it keeps responses"
