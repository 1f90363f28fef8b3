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

from benchc.client.bounded import SMOKE_BYTES, BodyTooLarge, error_text, read_json
from benchc.plan.model import Smoke, SmokeCheck, Target
from benchc.redact import Scrubber

EXCERPT = 200


def _body(target: Target, check: SmokeCheck, stream: bool) -> dict:
    body: dict = {"model": target.model, "max_tokens": check.max_tokens, "temperature": 0.0}
    if target.api == "chat":
        body["messages"] = check.messages or [{"role": "user", "content": check.prompt}]
    else:
        body["prompt"] = check.prompt if check.prompt is not None else " ".join(
            m["content"] for m in check.messages or [])
    if stream:
        body["stream"] = True
    return body


def _text_of_choice(c: dict) -> str:
    if "message" in c:
        m = c["message"] or {}
        return (m.get("content") or "") + (m.get("reasoning_content") or m.get("reasoning") or "")
    if "delta" in c:
        d = c["delta"] or {}
        return (d.get("content") or "") + (d.get("reasoning_content") or d.get("reasoning") or "")
    return c.get("text") or ""


async def _ask(session: aiohttp.ClientSession, url: str, headers: dict, body: dict,
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
                text = "".join(_text_of_choice(c) for c in data.get("choices", [])[:1])
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
                for c in (chunk.get("choices") or [])[:1]:
                    parts.append(_text_of_choice(c))
            return "".join(parts), time.perf_counter() - t0, None
    except (aiohttp.ClientError, TimeoutError, ValueError) as e:
        return "", time.perf_counter() - t0, f"{type(e).__name__}: {e}"[:200]


async def run_smoke(smoke: Smoke, target: Target, base_url: str, headers: dict,
                    secrets: list[str]) -> dict:
    """Run every check; {"passed": bool, "checks": [...]}."""
    url = base_url.rstrip("/") + ("/chat/completions" if target.api == "chat" else "/completions")
    results = []
    async with aiohttp.ClientSession() as s:
        for check in smoke.checks:
            entry: dict = {"name": check.name, "expect": check.expect}
            ok_all = True
            for mode in ("non_streaming", "streaming"):
                text, latency, error = await _ask(s, url, headers, _body(target, check, mode == "streaming"),
                                                  target.timeout_s)
                expected = check.expect is None or re.search(check.expect, text) is not None
                matched = error is None and expected
                ok_all = ok_all and matched
                entry[mode] = {"passed": matched, "latency_s": round(latency, 4),
                               "excerpt": Scrubber(secrets).cut(text, EXCERPT), "error": error}
            entry["passed"] = ok_all
            results.append(entry)
    return {"passed": all(r["passed"] for r in results), "continue_on_fail": smoke.continue_on_fail,
            "checks": results}
