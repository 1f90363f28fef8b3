"""Reading another tool's JSON: every problem named by its JSON path.

A peer's file is parsed with NaN and Infinity kept as markers (Python's json module would
take them as floats, and vLLM writes them where numpy gives them), then walked: the first
one, or a number past float range, is reported at its path. A file cut short is reported at
the path it ends inside, found by a scan of the text up to where the parser stopped.
"""

from __future__ import annotations

import json
import math
from typing import Any

from benchc.errors import ResultFormatError


class _Constant:
    """NaN, Infinity or -Infinity where the file wrote one."""

    def __init__(self, literal: str):
        self.literal = literal


def path_text(parts: tuple | list) -> str:
    """`$.benchmarks[0].metrics`: a JSON path from its keys and indices."""
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def path_at(text: str, pos: int) -> str:
    """The JSON path of the value being read at character `pos` of `text` (a scan of the
    brackets, strings and keys before it: what a truncated file ends inside)."""
    stack: list[list] = []  # ["obj", key or None, expecting a key] | ["arr", index]
    i = 0
    while i < min(pos, len(text)):
        c = text[i]
        if c == '"':
            j = i + 1
            while j < len(text) and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            top = stack[-1] if stack else None
            if top is not None and top[0] == "obj" and top[2]:
                try:
                    top[1] = json.loads(text[i:j + 1])
                except ValueError:
                    top[1] = text[i + 1:j]
                top[2] = False
            i = j + 1
            continue
        if c == "{":
            stack.append(["obj", None, True])
        elif c == "[":
            stack.append(["arr", 0])
        elif c in "}]" and stack:
            stack.pop()
        elif c == "," and stack:
            top = stack[-1]
            if top[0] == "arr":
                top[1] += 1
            else:
                top[1], top[2] = None, True
        i += 1
    parts: list = []
    for frame in stack:
        if frame[0] == "arr":
            parts.append(frame[1])
        elif frame[1] is not None:
            parts.append(frame[1])
    return path_text(parts)


def _check_numbers(doc: Any) -> None:
    stack: list[tuple[Any, tuple]] = [(doc, ())]
    while stack:
        value, at = stack.pop()
        if isinstance(value, dict):
            stack.extend((v, at + (k,)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, at + (i,)) for i, v in enumerate(value))
        elif isinstance(value, _Constant):
            raise ResultFormatError(f"at {path_text(at)}: {value.literal} is not a number (the tool "
                                    "wrote it where a figure could not be computed)")
        elif isinstance(value, float) and not math.isfinite(value):
            raise ResultFormatError(f"at {path_text(at)}: a number past the range of a float")


def parse(text: str, source: str, line: int | None = None) -> Any:
    """`text` as JSON; ResultFormatError (exit 5) naming `source` (and `line` of a JSON lines
    file) and the JSON path of what is wrong."""
    where = f"{source}:{line}" if line is not None else source
    try:
        doc = json.loads(text, parse_constant=_Constant)
    except json.JSONDecodeError as e:
        if e.pos >= len(text.rstrip()):
            raise ResultFormatError(f"{where}: truncated: the JSON ends inside {path_at(text, e.pos)} (the "
                                    "file was cut short: a run that did not finish writing it?)") from None
        raise ResultFormatError(f"{where}: not JSON at {path_at(text, e.pos)} ({e.msg}, line {e.lineno} "
                                f"column {e.colno})") from None
    except RecursionError:
        raise ResultFormatError(f"{where}: JSON nested too deep to read") from None
    except ValueError as e:  # an integer of more than 4300 digits
        raise ResultFormatError(f"{where}: {e}") from None
    try:
        _check_numbers(doc)
    except ResultFormatError as e:
        raise ResultFormatError(f"{where}: {e}") from None
    return doc
