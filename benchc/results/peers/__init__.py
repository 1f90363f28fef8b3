"""Other tools' results, read as benchc reads its own (docs/results.md, "Other tools' results").

One reader per format; each recognises its files by their content (never their name) and
builds a benchc-shaped document marked as the tool's measurement (peers/_build.py). `read`
tries them in turn on a file that is not a benchc result.
"""

from __future__ import annotations

import json
import os
from typing import Any

from benchc.errors import ResultFormatError
from benchc.results.document import read_text  # benchc's own bound and words
from benchc.results.peers import aiperf, guidellm, inference_perf, llmd_br, vllm_bench
from benchc.results.peers._build import is_peer
from benchc.results.peers._json import parse

__all__ = ["READERS", "is_peer", "read", "read_any", "recognised"]

READERS = (llmd_br, vllm_bench, guidellm, aiperf, inference_perf)


def recognised(doc: Any) -> Any:
    """The reader whose format `doc` is, or None."""
    return next((r for r in READERS if r.recognise(doc)), None)


def expected() -> str:
    return "; ".join(["a benchc result (schema_version, points)", *(r.EXPECTED for r in READERS)])


def read_any(path: str) -> dict:
    """A benchc result (document.read: validated, any readable version), or another tool's read
    as one."""
    from benchc.results.document import read as read_benchc

    text = read_text(path)
    try:
        doc = json.loads(text, parse_constant=lambda c: c)
    except (ValueError, RecursionError):
        doc = None
        if '"benchc_version"' in text[:4096]:
            return read_benchc(path)  # its own reader says what is wrong, as it always has
    if doc is None or recognised(doc) is not None:
        return read(path, text)  # another tool's, or JSON cut short or damaged: said at its JSON path
    if isinstance(doc, dict) and "schema_version" in doc:
        return read_benchc(path)  # benchc's, of any version: its own reader says what is wrong
    return read(path, text)


def _reports(text: str, path: str) -> list[dict] | None:
    """Benchmark Reports one per line (what `benchc export --format br0.2.1` prints for a result
    of several points), or None when the text is not that."""
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if len(lines) < 2 or not all(line.lstrip().startswith("{") for _, line in lines):
        return None
    try:
        first = json.loads(lines[0][1])
    except ValueError:
        return None
    if not llmd_br.recognise(first):
        return None
    return [parse(line, path, n) for n, line in lines]


def read(path: str, text: str | None = None) -> dict:
    """The benchc-shaped document of a peer's file at `path` (ResultFormatError, exit 5, when it
    is none this benchc reads)."""
    if text is None:
        text = read_text(path)
    reports = _reports(text, path)
    if reports is not None:
        return llmd_br.to_document(reports[0], path, reports[1:])
    doc = parse(text, path)
    reader = recognised(doc)
    if reader is None:
        keys = ", ".join(list(doc)[:8]) if isinstance(doc, dict) else type(doc).__name__
        raise ResultFormatError(f"{path} is not a result benchc reads (found {keys or 'nothing'}); expected "
                                f"{expected()}")
    return reader.to_document(doc, os.path.relpath(path) if not os.path.isabs(path) else path)
