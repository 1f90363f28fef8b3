"""Which server a run measured: its kind and version, asked of the endpoints each kind offers
on its root (beside /v1), so a result says what it measured and tools never take runs against
two servers for repeats of one.

    vLLM       GET /version          {"version": "0.32.0"}
    SGLang     GET /get_server_info  {"version": "0.4.6", ...}
    llama.cpp  GET /props            {"build_info": "b5000-...", "default_generation_settings": ...}
    TGI        GET /info             {"version": "3.0.1", "model_id": ..., ...}

The first that answers 200 with the expected JSON names the kind; none: kind and version
null (the run goes on: knowing the server is worth a line in the result, never a failed run).
Reads are bounded (a hostile or broken server cannot grow benchc's memory) and short.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp

# a server's answer to one of these is a few hundred bytes; llama.cpp's /props carries its
# chat template, which can be tens of kilobytes
MAX_BYTES = 1 << 20
TIMEOUT_S = 5.0


def _vllm(d: dict) -> str | None:
    return d.get("version") if set(d) == {"version"} else None


def _sglang(d: dict) -> str | None:
    return d.get("version")


def _llamacpp(d: dict) -> str | None:
    if "default_generation_settings" not in d and "build_info" not in d:
        return None
    return str(d.get("build_info") or "unknown")


def _tgi(d: dict) -> str | None:
    return d.get("version") if "model_id" in d else None


# (kind, path on the server's root, version from its JSON or None when it is not that kind)
PROBES: tuple[tuple[str, str, Callable[[dict], str | None]], ...] = (
    ("vllm", "/version", _vllm),
    ("sglang", "/get_server_info", _sglang),
    ("llama.cpp", "/props", _llamacpp),
    ("tgi", "/info", _tgi),
)

UNKNOWN: dict[str, Any] = {"kind": None, "version": None, "source": None}


async def _get_json(session: aiohttp.ClientSession, url: str, headers: Mapping[str, str]) -> dict | None:
    try:
        async with session.get(url, headers=dict(headers), allow_redirects=False,
                               timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)) as r:
            if r.status != 200:
                return None
            body = await r.content.read(MAX_BYTES + 1)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
    if len(body) > MAX_BYTES:
        return None
    try:
        d = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return d if isinstance(d, dict) else None


async def identify(session: aiohttp.ClientSession, root: str, headers: Mapping[str, str]) -> dict[str, Any]:
    """{kind, version, source} of the server at `root` (http://h:8000, no /v1): the first
    kind's endpoint that answers as that kind does; all null when none does."""
    for kind, path, version_of in PROBES:
        d = await _get_json(session, root.rstrip("/") + path, headers)
        if d is None:
            continue
        version = version_of(d)
        if isinstance(version, str) and version:
            return {"kind": kind, "version": version[:200], "source": path}
    return dict(UNKNOWN)


def unlisted_model(model: str, models: Any) -> str | None:
    """A warning when the target's /v1/models answer (as kept in the result) lists models and
    not `model`: a server that serves one model whatever the request names (llama.cpp) answers
    anyway, and the result would carry a name the server never heard of. The result keeps the
    name sent (it is what the requests carried); the warning says what the server lists."""
    data = models.get("data") if isinstance(models, dict) else None
    if not isinstance(data, list):
        return None
    ids = [str(m["id"]) for m in data if isinstance(m, dict) and m.get("id") is not None]
    if not ids or model in ids:
        return None
    listed = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
    return (f"the server's /v1/models does not list the model {model!r}; it lists {listed}. The "
            f"requests name {model!r} and the result is labelled so; if the server answered anyway, "
            f"it served one of its own: run with --set target.model={ids[0]}")

