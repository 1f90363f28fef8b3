"""What a result document's values may be, beyond its schema: the checks that keep a hostile or
damaged file from hanging or crashing a tool, run on every document read and on every one
benchc writes (so it never writes one its own tools refuse).

- every number finite and within int64 (a JSON schema's `integer` takes 1e40, and NaN is not
  JSON at all; the tools do arithmetic and histogram indexing on these);
- nesting at most MAX_DEPTH levels (a spec is held to 64 by spec/yaml_bounds.py; the result
  around it adds a few), so no reader recurses without bound;
- every encoded histogram (`hdr`) is framed right, no larger than a histogram, and of a
  layout the encoding allows (metrics/_hdr_codec.check_header: cheap, no loop over the
  counts); its counts are checked as a tool decodes them (HdrFormatError is a
  ResultFormatError: exit 5 too);
- `requests_file` a plain file name, read beside the result, never a path elsewhere.

The walk is iterative: a document nested deeper than Python's recursion limit is refused,
not crashed on.
"""

from __future__ import annotations

import math
import os

from benchc.metrics._hdr_codec import HdrFormatError, check_header

MAX_DEPTH = 100
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class ValueProblem(ValueError):
    """A value a result may not hold; `where` is its JSON path ($.points[0].counts.sent)."""

    def __init__(self, where: str, message: str):
        self.where = where
        super().__init__(f"{where}: {message}")


def _path(parts: tuple) -> str:
    """A JSON path; a deep one shows its first steps and how many follow."""
    shown = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts[:12])
    return "$" + shown + (f"... ({len(parts)} levels)" if len(parts) > 12 else "")


def check(doc: object) -> None:
    """Raise ValueProblem at the first value of `doc` a result may not hold (see the module)."""
    stack: list[tuple[object, tuple]] = [(doc, ())]
    while stack:
        value, at = stack.pop()
        if len(at) > MAX_DEPTH:
            raise ValueProblem(_path(at[:MAX_DEPTH]), f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(value, dict):
            stack.extend((v, at + (k,)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, at + (i,)) for i, v in enumerate(value))
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, int):
            if not INT64_MIN <= value <= INT64_MAX:
                raise ValueProblem(_path(at), f"the integer {_short(value)} is past int64")
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise ValueProblem(_path(at), f"{value} is not a number a result holds")
            if not INT64_MIN <= value <= INT64_MAX:
                raise ValueProblem(_path(at), f"the number {value:g} is past int64")
        elif isinstance(value, str) and at and at[-1] == "hdr":
            try:
                check_header(value)
            except HdrFormatError as e:
                raise ValueProblem(_path(at), f"not a histogram benchc reads: {e}") from None
    _check_requests_file(doc)


def _check_requests_file(doc: object) -> None:
    name = doc.get("requests_file") if isinstance(doc, dict) else None
    if isinstance(name, str) and (name != os.path.basename(name) or name in ("", ".", "..")
                                  or "\\" in name or "\0" in name):
        raise ValueProblem("$.requests_file", f"{name!r} is not a file name (the per-request file "
                           "is always beside its result)")


def _short(n: int) -> str:
    text = str(n) if n.bit_length() < 1000 else f"of {n.bit_length()} bits"
    return text if len(text) <= 40 else text[:20] + "..." + text[-8:]
