"""What compare says of a side that is another tool's measurement (results/peers/_build.py):
who measured it, how its figures are defined, and why a gate on it cannot be judged exactly."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from benchc.results.document import latency_summary


def _peer(doc: Mapping[str, Any]) -> Mapping[str, Any] | None:
    p = doc.get("peer")
    return p if isinstance(p, Mapping) else None


def side_notes(doc: Mapping[str, Any], side: str) -> list[str]:
    """The lines compare prints of a peer side: whose figures, its histograms, what it lacks,
    and each definition that differs from benchc's."""
    peer = _peer(doc)
    if peer is None:
        return []
    lines = [f"{side} is {peer['measured_by']}; histograms: {peer['histograms']}"]
    if peer.get("unmapped"):
        lines.append(f"{side} has no {'; '.join(peer['unmapped'])} (absent, not zero)")
    lines += [f"{side}'s {k}: {v}" for k, v in (peer.get("definitions") or {}).items()]
    return lines


def _split(key: str) -> tuple[str, str]:
    return (key[:-6], "p99.9") if key.endswith(".p99.9") else tuple(key.rsplit(".", 1))  # type: ignore[return-value]


def why_not_judged(key: str, sides: Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any]]]) -> str | None:
    """Why a latency percentile `key` of a point cannot be bootstrapped because a side is a peer's
    with percentiles only: which side, and which percentile of it was used. `sides`: (name,
    document, point) for base and new."""
    metric, stat = _split(key)
    for side, doc, point in sides:
        peer = _peer(doc)
        if peer is None:
            continue
        block = latency_summary(dict(point), metric) or {}
        if not block.get("hdr"):
            how = (peer.get("definitions") or {}).get("percentiles", "the tool's own percentile")
            return (f"{side} is {peer['tool']}'s measurement with percentiles only (no per-request values to "
                    f"bootstrap an interval from): the change used its own {stat} ({how})")
    return None


def missing(key: str, sides: Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any]]]) -> str | None:
    """Why a gate's figure is not compared at a point where a peer side lacks it."""
    metric, stat = _split(key) if "." in key else (key, "")
    for side, doc, point in sides:
        peer = _peer(doc)
        if peer is None:
            continue
        if "." in key:
            block = latency_summary(dict(point), metric) or {}
            if block.get(stat) is None:
                has = sorted(k for k in block if k.startswith("p"))
                hint = (" (vLLM: --metric-percentiles, --percentile-metrics)"
                        if peer["tool"] == "vllm bench serve" else "")
                return (f"{side} ({peer['tool']}) has no {key}: it wrote "
                        f"{', '.join(has) or 'no percentile'} of {metric}{hint}")
        elif (point.get("throughput") or {}).get(key) is None and key != "error_rate":
            return f"{side} ({peer['tool']}) has no {key}"
    return None
