"""Readers of trace files: each yields the file's rows in order, one `Row` at a time, and
says what is wrong with a row as `FILE:LINE: ...` (a PlanError).

Formats (learned from their publishers' descriptions; no third-party trace is copied here):
- mooncake: JSON lines {"timestamp": ms, "input_length", "output_length", "hash_ids": [...]}
  (kvcache-ai/Mooncake's FAST'25 traces): each hash id names one block of `block_size`
  tokens (512 in the published traces), equal ids meaning equal content; a row has
  ceil(input_length / block_size) ids, the last block being partial.
- azure: CSV with the columns TIMESTAMP (a date and time, "2023-11-16 18:15:46.6805900"),
  ContextTokens and GeneratedTokens (Azure's LLM inference traces, AzurePublicDataset).
- burstgpt: CSV with Timestamp (seconds), Model, Request tokens, Response tokens,
  Total tokens, Log Type, and in later releases Session ID (HPMLL/BurstGPT); rows can be
  kept by Model and Log Type.
- benchc: JSON lines {"timestamp": seconds, one of "prompt" | "messages" | "input_tokens",
  optional "output_tokens", optional "session_id"}: a user's own logs.

Every format must be in time order (each published trace is): a row earlier than the one
before it is an error naming both, not something to sort silently.
"""

from __future__ import annotations

import csv
import json
import math
from array import array
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import IO, NamedTuple

from benchc.errors import PlanError

FORMATS = ("mooncake", "azure", "burstgpt", "benchc")


class Row(NamedTuple):
    """One request of a trace file, as its format gives it."""

    line: int  # 1-based line of the file (for messages)
    time_s: float  # seconds, on the file's own clock (relative or absolute)
    input_tokens: int
    output_tokens: int | None  # None: the row does not say (benchc format)
    hash_ids: array | None  # mooncake's blocks (int64)
    offset: int  # byte offset of the row's line where its text is the user's (benchc), else -1
    session: str | None  # session_id / Session ID, kept for multi-turn replay (not built yet)


class Lines:
    """A file read line by line, with each line's byte offset (a user's prompt is read back
    from it when sent)."""

    def __init__(self, f: IO[bytes]):
        self.f = f
        self.offset = 0

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        for raw in self.f:
            at = self.offset
            self.offset += len(raw)
            yield at, raw


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _fail(path: str, line: int, what: str) -> PlanError:
    return PlanError(f"{path}:{line}: {what}")


def _length(path: str, line: int, name: str, value: object) -> int:
    """A token count: a non-negative integer (a float with no fraction is accepted: CSV
    writers and pandas write 52.0)."""
    if isinstance(value, str):
        try:
            value = float(value) if value.strip() else None
        except ValueError:
            raise _fail(path, line, f"{name} {value!r} is not a number") from None
    if isinstance(value, float) and not math.isfinite(value):  # NaN, Infinity: JSON and CSV allow them
        raise _fail(path, line, f"{name} must be a whole number of tokens, got {value!r}")
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise _fail(path, line, f"{name} must be a whole number of tokens, got {value!r}")
    if value < 0:
        raise _fail(path, line, f"{name} is negative ({int(value)})")
    return int(value)


def _number(path: str, line: int, name: str, value: object) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise _fail(path, line, f"{name} {value!r} is not a number") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _fail(path, line, f"{name} must be a finite number, got {value!r}")
    return float(value)


class _InOrder:
    """Checks that the rows' times never go back."""

    def __init__(self, path: str, fmt: str):
        self.path, self.fmt = path, fmt
        self.prev: tuple[int, float] | None = None

    def __call__(self, line: int, t: float, shown: object) -> None:
        if self.prev is not None and t < self.prev[1]:
            raise _fail(self.path, line, f"timestamp {shown} is earlier than line {self.prev[0]}'s: a "
                                         f"{self.fmt} trace must be in time order (sort it by timestamp)")
        self.prev = (line, t)


# --------------------------------------------------------------------------- JSON lines


def _json_rows(lines: Lines, path: str) -> Iterator[tuple[int, int, dict]]:
    for n, (offset, raw) in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise _fail(path, n, f"not a JSON object ({getattr(e, 'msg', e)})") from e
        except RecursionError as e:
            raise _fail(path, n, "JSON nested too deep to read") from e
        if not isinstance(rec, dict):
            raise _fail(path, n, "not a JSON object")
        yield n, offset, rec


def _need(path: str, line: int, rec: dict, keys: tuple[str, ...], fmt: str) -> None:
    missing = [k for k in keys if k not in rec]
    if missing:
        raise _fail(path, line, f"missing {', '.join(repr(k) for k in missing)} ({_article(fmt)} {fmt} row "
                                f"has {', '.join(keys)})")


def read_mooncake(lines: Lines, path: str, opts: dict) -> Iterator[Row]:
    order = _InOrder(path, "mooncake")
    for n, _, rec in _json_rows(lines, path):
        _need(path, n, rec, ("timestamp", "input_length", "output_length"), "mooncake")
        ms = _number(path, n, "timestamp", rec["timestamp"])
        order(n, ms, rec["timestamp"])
        try:  # one C call checks every id's type (json.loads made floats of what is not an int)
            ids = array("q", rec.get("hash_ids", []))
        except (TypeError, OverflowError):
            ids = None
        if ids is None or (ids and min(ids) < 0):
            raise _fail(path, n, "hash_ids must be a list of non-negative integers")
        n_in = _length(path, n, "input_length", rec["input_length"])
        bs = opts["block_size"]
        if len(ids) > -(-n_in // bs):
            raise _fail(path, n, f"{len(ids)} hash_ids of {bs} tokens are more blocks than input_length "
                                 f"{n_in} fills ({-(-n_in // bs)}): is block_size right?")
        yield Row(n, ms / 1000.0, n_in, _length(path, n, "output_length", rec["output_length"]), ids, -1,
                  None)


def read_benchc(lines: Lines, path: str, opts: dict) -> Iterator[Row]:
    order = _InOrder(path, "benchc")
    for n, offset, rec in _json_rows(lines, path):
        _need(path, n, rec, ("timestamp",), "benchc")
        t = _number(path, n, "timestamp", rec["timestamp"])
        order(n, t, rec["timestamp"])
        given = [k for k in ("prompt", "messages", "input_tokens") if k in rec]
        if len(given) != 1:
            raise _fail(path, n, "each row needs exactly one of 'prompt', 'messages' or 'input_tokens'")
        if "input_tokens" in rec:
            n_in, at = _length(path, n, "input_tokens", rec["input_tokens"]), -1
        else:
            n_in, at = literal_words(path, n, rec), offset
        out = rec.get("output_tokens")
        out = None if out is None else _length(path, n, "output_tokens", out)
        session = rec.get("session_id")
        yield Row(n, t, n_in, out, None, at, None if session is None else str(session))


def literal_words(path: str, line: int, rec: dict) -> int:
    """A user's prompt's length in benchc's word count (as jsonl datasets count it)."""
    if "prompt" in rec:
        if not isinstance(rec["prompt"], str):
            raise _fail(path, line, "prompt must be a string")
        text = rec["prompt"]
    else:
        msgs = rec["messages"]
        if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) for m in msgs):
            raise _fail(path, line, "messages must be a non-empty list of {role, content} objects")
        text = " ".join(str(m.get("content", "")) for m in msgs)
    return max(1, len(text.split()))


# --------------------------------------------------------------------------- CSV


def _csv_rows(lines: Lines, path: str, fmt: str, need: tuple[str, ...]
              ) -> Iterator[tuple[int, dict[str, str]]]:
    def text() -> Iterator[str]:
        for _, raw in lines:
            try:
                yield raw.decode("utf-8-sig" if lines.offset == len(raw) else "utf-8")
            except UnicodeDecodeError as e:
                raise PlanError(f"{path}: not UTF-8 text ({e.reason})") from e

    reader = csv.reader(text())
    header = next(reader, None)
    if header is None:
        raise PlanError(f"{path}: empty file ({_article(fmt)} {fmt} trace starts with a header: "
                        f"{', '.join(need)})")
    header = [h.strip() for h in header]
    missing = [c for c in need if c not in header]
    if missing:
        names = ("columns " if len(missing) > 1 else "column ") + ", ".join(repr(c) for c in missing)
        raise _fail(path, 1, f"missing {names} ({_article(fmt)} {fmt} trace's header has {', '.join(need)}; "
                             f"this one has {', '.join(header)})")
    for values in reader:
        if not values or not any(v.strip() for v in values):
            continue
        if len(values) != len(header):
            raise _fail(path, reader.line_num, f"{len(values)} fields where the header has {len(header)}")
        yield reader.line_num, dict(zip(header, values, strict=True))


def _clock(path: str, line: int, value: str) -> float:
    """Azure's TIMESTAMP as seconds since the epoch of its own (naive) clock."""
    try:
        dt = datetime.fromisoformat(value.strip())
    except ValueError:
        raise _fail(path, line, f"TIMESTAMP {value!r} is not a date and time like "
                                "2023-11-16 18:15:46.6805900") from None
    if dt.tzinfo is not None:
        return dt.timestamp()
    return (dt - datetime(1970, 1, 1)).total_seconds()


def read_azure(lines: Lines, path: str, opts: dict) -> Iterator[Row]:
    order = _InOrder(path, "azure")
    for n, row in _csv_rows(lines, path, "azure", ("TIMESTAMP", "ContextTokens", "GeneratedTokens")):
        t = _clock(path, n, row["TIMESTAMP"])
        order(n, t, row["TIMESTAMP"])
        yield Row(n, t, _length(path, n, "ContextTokens", row["ContextTokens"]),
                  _length(path, n, "GeneratedTokens", row["GeneratedTokens"]), None, -1, None)


def read_burstgpt(lines: Lines, path: str, opts: dict) -> Iterator[Row]:
    """BurstGPT rows kept by `opts["filter"]` ({model: [...], log_type: [...]}); the rows it
    leaves out are counted in opts["filtered_out"]."""
    keep = opts.get("filter") or {}
    need: tuple[str, ...] = ("Timestamp", "Request tokens", "Response tokens")
    need += ("Model",) if "model" in keep else ()
    need += ("Log Type",) if "log_type" in keep else ()
    order = _InOrder(path, "burstgpt")
    for n, row in _csv_rows(lines, path, "burstgpt", need):
        t = _number(path, n, "Timestamp", row["Timestamp"])
        order(n, t, row["Timestamp"])
        if ("model" in keep and row["Model"] not in keep["model"]) or \
                ("log_type" in keep and row["Log Type"] not in keep["log_type"]):
            opts["filtered_out"] = opts.get("filtered_out", 0) + 1
            continue
        session = row.get("Session ID") or None
        yield Row(n, t, _length(path, n, "Request tokens", row["Request tokens"]),
                  _length(path, n, "Response tokens", row["Response tokens"]), None, -1, session)


READERS: dict[str, Callable[[Lines, str, dict], Iterator[Row]]] = {
    "mooncake": read_mooncake, "azure": read_azure, "burstgpt": read_burstgpt, "benchc": read_benchc}


def literal_prompt(path: str, offset: int) -> dict:
    """The benchc-format row at `offset`: its prompt or messages, read when it is sent (the
    texts of a long trace are not held)."""
    with open(path, "rb") as f:
        f.seek(offset)
        return json.loads(f.readline())


__all__ = ["FORMATS", "READERS", "Row", "Lines", "literal_prompt"]
