"""Smoke checks: does the server answer sensibly before it is benchmarked?

Each check is sent twice, non-streaming and streaming; its `expect` regex must
match both answers. The result records pass/fail per mode, an excerpt of each
answer and its latency. Not on the hot path: plain Python JSON handling.
"""

from __future__ import annotations

import json
import re
import time

import aiohttp

from benchc.client.apis import APIS, Api
from benchc.client.bounded import SMOKE_BYTES, BodyTooLarge, error_text, read_json
from benchc.plan.model import Sampling, Smoke, SmokeCheck, Target
from benchc.plan.workload import Prompt
from benchc.redact import Scrubber

EXCERPT = 200


def _body(target: Target, check: SmokeCheck, stream: bool) -> dict:
    """The check's request, built by target.api's adapter: greedy, the check's max_tokens."""
    prompt = Prompt(text=check.prompt, messages=check.messages, input_tokens=0,
                    output_tokens=check.max_tokens)
    return APIS[target.api].body(target, _GREEDY, prompt, stream=stream)


_GREEDY = Sampling(temperature=0.0, top_p=None, max_tokens=None, min_tokens=None, ignore_eos=False, stop=[],
                   seed=None, extra_body={})


async def _ask(session: aiohttp.ClientSession, api: Api, url: str, headers: dict, body: dict,
               timeout_s: float) -> tuple[str, float, str | None]:
    """(answer text, latency s, error or None)."""
    t0 = time.perf_counter()
    try:
        async with session.post(url, json=body, headers=headers, allow_redirects=False,
                                timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
            if r.status != 200:
                return "", time.perf_counter() - t0, f"HTTP {r.status}: {(await error_text(r, 200))}"
            if not body.get("stream"):
                data = await read_json(r, SMOKE_BYTES, "the smoke check")
                text = api.answer_text(data) if isinstance(data, dict) else ""
                return text, time.perf_counter() - t0, None
            parts, size = [], 0
            async for line in r.content:
                size += len(line)
                if size > SMOKE_BYTES:
                    raise BodyTooLarge("the smoke check's stream", SMOKE_BYTES)
                line = line.strip()
                if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
                    continue
                chunk = json.loads(line[5:])
                if isinstance(chunk, dict):
                    parts.append(api.event_text(chunk))
            return "".join(parts), time.perf_counter() - t0, None
    except (aiohttp.ClientError, TimeoutError, ValueError) as e:
        return "", time.perf_counter() - t0, f"{type(e).__name__}: {e}"[:200]


async def run_smoke(smoke: Smoke, target: Target, base_url: str, headers: dict,
                    secrets: list[str]) -> dict:
    """Run every check; {"passed": bool, "checks": [...]}."""
    api = APIS[target.api]
    url = api.url(base_url)
    results = []
    async with aiohttp.ClientSession() as s:
        for check in smoke.checks:
            entry: dict = {"name": check.name, "expect": check.expect}
            ok_all = True
            for mode in ("non_streaming", "streaming"):
                body = _body(target, check, mode == "streaming")
                text, latency, error = await _ask(s, api, url, headers, body, target.timeout_s)
                expected = check.expect is None or re.search(check.expect, text) is not None
                matched = error is None and expected
                ok_all = ok_all and matched
                entry[mode] = {"passed": matched, "latency_s": round(latency, 4),
                               "excerpt": Scrubber(secrets).cut(text, EXCERPT), "error": error}
            entry["passed"] = ok_all
            results.append(entry)
    return {"passed": all(r["passed"] for r in results), "continue_on_fail": smoke.continue_on_fail,
            "checks": results}
