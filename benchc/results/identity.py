"""What a result measured, for the tools that set results side by side: the target (where
the requests went) and how to name a result to a reader (its file and its target).

Runs of one plan against one target are repeats of each other; runs of one plan against two
servers are two series, never averaged (the plan hash leaves URLs out on purpose: one spec
may be pointed at any server with --base-url).
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit


def target_of(doc: dict) -> str:
    """`127.0.0.1:8020/v1 (vllm 0.32.0)`, `sim minimax-m2.5-tp4`: where the result's requests
    went (every combination's, once each). Credentials were removed when the result was
    written; a result without targets (an old or hand-made one) is `?`."""
    seen: list[str] = []
    sims = {c["index"]: c["target"].get("sim") for c in (doc.get("plan") or {}).get("combinations", [])
            if isinstance(c, dict) and isinstance(c.get("target"), dict)}
    for t in doc.get("target") or []:
        sim = sims.get(t.get("combination"))
        if t.get("simulated") or sim:
            name = f"sim {sim.get('preset')}" if isinstance(sim, dict) and sim.get("preset") else "sim"
        else:
            url = urlsplit(str(t.get("base_url") or ""))
            host = url.netloc.rsplit("@", 1)[-1]  # a redacted user:password is no name
            name = (host + url.path.rstrip("/")) or "?"
            server = t.get("server") or {}
            if server.get("kind"):
                name += f" ({server['kind']} {server.get('version') or ''})".replace(" )", ")")
        if name not in seen:
            seen.append(name)
    return ", ".join(seen) or "?"


def repeat_key(doc: dict) -> tuple[str, str]:
    """Results with one key are runs of one plan against one target: their points are repeats."""
    return (str(doc.get("plan_hash")), target_of(doc))


def result_label(doc: dict, source: str | None) -> str:
    """`a.json: 127.0.0.1:8020/v1 (vllm 0.32.0)`: a result named by its file and its target."""
    name = os.path.basename(source) if source else str((doc.get("plan") or {}).get("name", "?"))
    return f"{name}: {target_of(doc)}"
