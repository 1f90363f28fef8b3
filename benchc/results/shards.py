"""Which measurement a result holds, so that `merge` never counts one twice.

A shard's identity is a digest of what no other run can share: its host, its creation
time and each point's window on the host's monotonic clock (nanoseconds) with its request
count. Two files with one identity are the same measurement (a file given twice, or a
copy); a merged result carries the identities of its parts (`merged_from[].shard`), so
merging it again with one of them is caught too.
"""

from __future__ import annotations

import hashlib
import json

from benchc.errors import UsageError


def shard_id(doc: dict) -> str:
    """The identity of one measured result (16 hex digits)."""
    points = [(p.get("id"), (p.get("window") or {}).get("start_ns"), (p.get("window") or {}).get("end_ns"),
               (p.get("counts") or {}).get("sent")) for p in doc.get("points", [])]
    material = [(doc.get("environment") or {}).get("host"), doc.get("created"), doc.get("plan_hash"), points]
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


def shard_ids(doc: dict) -> list[str]:
    """The identities of the measurements in `doc`: its parts' for a merged result."""
    parts = [m.get("shard") for m in doc.get("merged_from") or [] if isinstance(m, dict)]
    named = [p for p in parts if isinstance(p, str)]
    return named if parts and len(named) == len(parts) else [shard_id(doc)]


def refuse_duplicates(docs: list[dict], sources: list[str]) -> None:
    """UsageError when two of `docs` hold the same measurement (it would be counted twice)."""
    seen: dict[str, str] = {}
    for source, doc in zip(sources, docs, strict=True):
        for sid in shard_ids(doc):
            if sid in seen:
                same = ("is given twice" if seen[sid] == source
                        else f"and {seen[sid]} hold the same measurement")
                raise UsageError(f"{source} {same} (shard {sid}); merging it twice would count every "
                                 "request twice: give each shard once")
        for sid in shard_ids(doc):
            seen[sid] = source
