"""A peer's measurement in the shape of a benchc result document, so that compare, report and
the decision read it as they read benchc's own.

What a document built here holds, and what it never holds:
- each figure the tool wrote, under benchc's name, in benchc's units (latencies microseconds);
- a figure the tool does not have is absent (null where benchc's shape needs the key), never 0,
  and `peer.unmapped` names it;
- latency percentiles are the tool's own (its interpolation, its population); a histogram
  (`hdr`) is there only where the tool wrote every request's value (vLLM's `--save-detailed`,
  AIPerf's per-request JSONL), recorded from those values: never made up from percentiles;
- `peer` says which tool measured it, its version and format, how each of its figures is
  defined where that differs from benchc's (docs/results.md), and where the histograms came from.

Such a document is read, never written: `schema_version` 1 only so that the typed objects of
results/api.py take it; `core` is `peer`, and `peer` is what marks it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from benchc.errors import ResultFormatError
from benchc.metrics.latency import HIGHEST_US, new_histogram
from benchc.results.peers._json import path_text

PERCENTILE_NAMES = {50: "p50", 90: "p90", 95: "p95", 99: "p99", 99.9: "p99.9"}


class Fields:
    """Typed reads of one peer document: every problem ResultFormatError (exit 5) at its JSON path."""

    def __init__(self, doc: Any, source: str, tool: str):
        self.doc, self.source, self.tool = doc, source, tool

    def fail(self, at: Iterable, message: str) -> ResultFormatError:
        return ResultFormatError(f"{self.source}: {self.tool}: at {path_text(list(at))}: {message}")

    def get(self, at: Iterable, required: bool = True) -> Any:
        value = self.doc
        walked: list = []
        for step in at:
            walked.append(step)
            if isinstance(step, int):
                if not isinstance(value, list) or step >= len(value):
                    if not required:
                        return None
                    raise self.fail(walked, "missing (the list is shorter)")
                value = value[step]
            else:
                if not isinstance(value, dict):
                    raise self.fail(walked[:-1], f"expected an object, found {_kind(value)}")
                if step not in value:
                    if not required:
                        return None
                    raise self.fail(walked, "missing")
                value = value[step]
        return value

    def number(self, at: Iterable, required: bool = True, minimum: float = 0) -> float | None:
        at = list(at)
        v = self.get(at, required)
        if v is None:
            if required:
                raise self.fail(at, "is null where a number is needed")
            return None
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self.fail(at, f"expected a number, found {_kind(v)}")
        if not math.isfinite(v) or v < minimum:
            raise self.fail(at, f"{v!r} is below {minimum:g}" if math.isfinite(v) else f"{v!r} is no figure")
        return float(v)

    def integer(self, at: Iterable, required: bool = True) -> int | None:
        at = list(at)
        v = self.number(at, required)
        if v is None:
            return None
        if v != int(v):
            raise self.fail(at, f"expected a whole number, found {v!r}")
        return int(v)

    def total(self, at: Iterable, required: bool = True) -> int | None:
        """A count a tool summed in floating point (GuideLLM's total_sum: 2105.9999999999995),
        rounded to the whole number it is; one further from it than rounding error is refused."""
        at = list(at)
        v = self.number(at, required)
        if v is None:
            return None
        if abs(v - round(v)) > 1e-6 * max(1.0, abs(v)):
            raise self.fail(at, f"expected a count, found {v!r}")
        return round(v)

    def obj(self, at: Iterable, required: bool = True) -> dict | None:
        at = list(at)
        v = self.get(at, required)
        if v is None and not required:
            return None
        if not isinstance(v, dict):
            raise self.fail(at, f"expected an object, found {_kind(v)}")
        return v

    def array(self, at: Iterable, required: bool = True) -> list | None:
        at = list(at)
        v = self.get(at, required)
        if v is None and not required:
            return None
        if not isinstance(v, list):
            raise self.fail(at, f"expected a list, found {_kind(v)}")
        return v


def _kind(v: Any) -> str:
    other = f"the number {v!r}" if isinstance(v, int | float) else type(v).__name__
    names = {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null"}
    return names.get(type(v), other)


@dataclass
class Figures:
    """One latency as the tool reported it, in microseconds."""

    count: int | None = None
    mean: float | None = None
    stdev: float | None = None
    min: float | None = None
    max: float | None = None
    percentiles: dict[float, float] = field(default_factory=dict)  # {99: us}
    values: list[float] | None = None  # every request's (or chunk's) value, where the tool kept them

    def block(self) -> dict:
        """A benchc latency summary: the tool's figures; a histogram only of real values."""
        # a count the tool did not write stays unknown (null): 0 would say nothing was measured
        count = self.count
        if count is None and self.values is not None:
            count = len(self.values)
        out: dict[str, Any] = {"count": count, "out_of_range": 0, "unit": "us"}
        for k in ("mean", "stdev", "min", "max"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        for p, v in sorted(self.percentiles.items()):
            out[PERCENTILE_NAMES.get(p, f"p{p:g}")] = v
        if self.values:
            h = new_histogram()
            lost = 0
            for v in self.values:
                # beyond an hour (or below 0): counted out of range, as benchc's recorders do
                if not 0 <= v <= HIGHEST_US or not h.record(max(1, round(v))):
                    lost += 1
            out["out_of_range"] = lost
            out["hdr"] = h.encode()
        return out


@dataclass
class PeerPoint:
    """One load point of a peer's run, in benchc's names; None where the tool has no figure."""

    id: str
    concurrency: int | None = None
    rate_rps: float | None = None
    arrival: str | None = None
    duration_s: float | None = None
    sent: int | None = None
    completed: int | None = None
    failed: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    output_tok_s: float | None = None
    total_tok_s: float | None = None
    request_s: float | None = None
    goodput_s: float | None = None
    latency: dict[str, Figures] = field(default_factory=dict)  # ttft, itl, tpot, e2e, ...
    native: dict = field(default_factory=dict)  # the tool's own settings of the point, as written

    def as_point(self, index: int) -> dict:
        completed, failed = self.completed, self.failed
        sent = self.sent if self.sent is not None else (
            completed + failed if completed is not None and failed is not None else None)
        latency = {f"{k}_us": f.block() for k, f in self.latency.items()}
        for k in ("ttft_us", "itl_us", "tpot_us", "e2e_us"):
            latency.setdefault(k, {"count": None, "out_of_range": 0, "unit": "us"})  # not measured: absent
        error_rate = failed / sent if failed is not None and sent else (0.0 if sent == 0 else None)
        return {"id": self.id, "combination": 0, "matrix": {},
                "params": {"concurrency": self.concurrency, "rate_rps": self.rate_rps,
                           "arrival": self.arrival},
                "complete": True, "window": {"duration_s": self.duration_s},
                "counts": {"sent": sent, "completed": completed, "failed": failed, "errors": {}},
                "error_rate": error_rate,
                "tokens": {"input": self.input_tokens, "output": self.output_tokens, "output_method": "peer"},
                "throughput": {"output_tok_s": self.output_tok_s, "total_tok_s": self.total_tok_s,
                               "request_s": self.request_s, "goodput_s": self.goodput_s,
                               "steady_output_tok_s": None},
                "latency": latency, "client": {"client_limited": False},
                "peer_native": self.native}


def unmapped_of(points: list[PeerPoint]) -> list[str]:
    """benchc's figures none of the points has (absent, not zero)."""
    names = {"duration_s": "window duration", "sent": "requests sent", "completed": "completed requests",
             "failed": "failed requests", "input_tokens": "input tokens", "output_tokens": "output tokens",
             "output_tok_s": "output tok/s", "total_tok_s": "total tok/s", "request_s": "requests/s",
             "goodput_s": "goodput/s"}
    def lacks(p: PeerPoint, attr: str) -> bool:
        if attr == "sent":  # completed + failed where the tool counted both
            return p.sent is None and (p.completed is None or p.failed is None)
        return getattr(p, attr) is None

    out = [label for attr, label in names.items() if all(lacks(p, attr) for p in points)]
    for lat in ("ttft", "itl", "tpot", "e2e"):
        if all(lat not in p.latency for p in points):
            out.append(f"{lat} latency")
    return out


def document(tool: str, version: str | None, fmt: str, points: list[PeerPoint], *,
             model: str | None = None, definitions: Mapping[str, str] | None = None,
             histograms: str = "none: the tool wrote summaries and percentiles only",
             unmapped: Iterable[str] = (), created: str | None = None, name: str = "",
             base_url: str | None = None, notes: Iterable[str] = ()) -> dict:
    """The benchc-shaped document of a peer's run (see the module's docstring)."""
    label = f"{tool} {version}" if version else tool
    return {
        "schema_version": 1, "benchc_version": "", "core": "peer", "created": created,
        "complete": True, "spec": {"path": "", "sha256": "", "resolved": {}},
        "plan": {"plan_version": 0, "name": name or label, "description": f"a {label} run ({fmt})",
                 "combinations": [{"index": 0, "target": {"model": model}}], "steps": []},
        "plan_hash": f"peer:{tool}", "workload_hash": None, "environment": {},
        "target": [{"combination": 0, "model": model, "base_url": base_url or f"({label})"}],
        "metric_definitions": f"{label}'s own: see peer.definitions",
        "points": [p.as_point(i) for i, p in enumerate(points)],
        "peer": {"tool": tool, "version": version, "format": fmt,
                 "measured_by": f"{label}: these figures are its measurement, not benchc's",
                 "definitions": dict(definitions or {}), "histograms": histograms,
                 "unmapped": [*unmapped_of(points), *unmapped], "notes": list(notes)},
    }


def is_peer(doc: Mapping) -> bool:
    return isinstance(doc.get("peer"), dict)


def ms_to_us(v: float | None) -> float | None:
    return v * 1000 if v is not None else None


def s_to_us(v: float | None) -> float | None:
    return v * 1e6 if v is not None else None
