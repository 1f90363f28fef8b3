"""Coding-agent session traces (the Weka / AgentX format, `cc-traces-weka`): the reader, each
request's wait in a replay, and the cache hit its hash ids predict.

The format (its semantics learned from AIPerf's loader, aiperf/dataset/loader/
weka_trace_models.py and weka_trace.py, Apache-2.0; no code of it copied): one JSON object per
session, a `.json` file each (a directory of them), or one a line in a `.jsonl` file:

    {id, models, block_size, hash_id_scope: "local", tool_tokens, system_tokens, requests}

`requests` interleaves, in time order, the session's own requests
`{t, type: "n" | "s", model, in, out, hash_ids, input_types, output_types, stop, api_time,
think_time, ttft}` (`t` seconds from the session's start, `api_time`, `think_time` and `ttft`
seconds; "s" is a streamed call) and the subagents it spawned
`{t, type: "subagent", agent_id, subagent_type, duration_ms, status, requests: [...],
tool_tokens, system_tokens}`, whose inner requests are "n" or "s". Published captures give a
subagent's inner `t` on the session's clock; older ones from the spawn: a subagent whose first
inner `t` is before its spawn has relative times (AIPerf reads them the same way).

Each hash id names one block of `block_size` tokens; equal ids within a session
(`hash_id_scope: local`, the only scope published) are equal content, so a request has at most
ceil(in / block_size) ids, its last block partial when `in` is not a multiple.

Bad input is a PlanError (exit 2) naming the file, the session and the JSON path of every
problem of the file (the first _SHOWN of them); a file is read within its bound
(benchc/inputs.py), never whole beyond it.
"""

from __future__ import annotations

import json
import math
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchc.errors import PlanError
from benchc.inputs import AGENT_SESSION_BYTES, AGENT_TRACE_BYTES, input_problem
from benchc.units import parse_duration

REQUEST_TYPES = ("n", "s")
SUBAGENT_TYPE = "subagent"
_SHOWN = 20  # problems named per file; the rest are counted
_EPSILON_S = 1e-6  # a subagent's first inner t this much before its spawn is relative to it


@dataclass(frozen=True, slots=True)
class AgentRequest:
    """One request of a session or of a subagent, as the trace gives it (times in seconds on
    the session's clock: a subagent's relative inner times are made absolute)."""

    path: str  # its JSON path in the session, e.g. $.requests[4].requests[1]
    t_s: float
    streaming: bool  # type "s"
    model: str | None
    input_tokens: int
    output_tokens: int
    # its hash ids: int64, at most ceil(input_tokens / block_size) of them; or, as the reader
    # leaves them (checked, not decoded: most of a set's ids are not needed before its
    # session starts), their JSON list's text, decoded on first use (hash_ids)
    block_ids: array | bytes
    think_time_s: float | None
    api_time_s: float | None
    ttft_s: float | None
    stop: str

    @property
    def end_s(self) -> float:
        """When the trace's answer ended: its start plus the recorded api_time (0 when not
        recorded)."""
        return self.t_s + (self.api_time_s or 0.0)

    @property
    def hash_ids(self) -> array:
        """Its hash ids (int64), decoded from the trace's text the first time they are asked for."""
        ids = self.block_ids
        if isinstance(ids, bytes):
            ids = array("q", map(int, ids.split(b","))) if ids else array("q")
            object.__setattr__(self, "block_ids", ids)  # frozen: the same ids, decoded once
        return ids


@dataclass(frozen=True, slots=True)
class Subagent:
    """A subagent the session spawned at `t_s`: its own requests, run beside the parent's
    other subagents; the parent's next request waits for it."""

    path: str
    t_s: float
    agent_id: str
    subagent_type: str
    duration_s: float | None  # duration_ms / 1000, None when not recorded (async_launched)
    status: str
    requests: tuple[AgentRequest, ...]
    tool_tokens: int
    system_tokens: int
    relative_times: bool  # the file gave its inner times from the spawn

    @property
    def end_s(self) -> float:
        """When the trace's subagent ended: spawn plus duration, else its last answer's end."""
        if self.duration_s is not None:
            return self.t_s + self.duration_s
        return max(r.end_s for r in self.requests)


Entry = AgentRequest | Subagent


@dataclass(frozen=True)
class AgentSession:
    """One session of a trace file."""

    file: str
    id: str
    models: tuple[str, ...]
    block_size: int
    tool_tokens: int
    system_tokens: int
    entries: tuple[Entry, ...]

    def requests(self) -> list[AgentRequest]:
        """Every request, the subagents' too, in the order the trace started them (its `t`;
        ties in file order)."""
        flat: list[AgentRequest] = []
        for e in self.entries:
            flat.extend(e.requests if isinstance(e, Subagent) else (e,))
        return sorted(flat, key=lambda r: r.t_s)


# --------------------------------------------------------------------------- the spec's dataset


def agent_trace_params(cfg: dict) -> dict:
    """workload.dataset.agent_trace, normalised."""
    return {"path": cfg["path"], "time_scale": float(cfg.get("time_scale", 1.0)),
            "max_think_s": parse_duration(cfg["max_think"]) if "max_think" in cfg else None,
            "kv_block": cfg.get("kv_block"), "models": dict(cfg.get("models", {}))}


def agent_trace_stats(path: str, base_dir: str = ".") -> dict:
    """Every session of the trace read and checked (PlanError on the first file with a
    problem), and what it holds: sessions, requests (the subagents' too), subagents, the
    input tokens sent and those its hash ids predict cached, the longest input."""
    stats = {"sessions": 0, "requests": 0, "subagents": 0, "input_tokens": 0, "predicted_cached_tokens": 0,
             "max_input_tokens": 0}
    for s in read_agent_traces(path, base_dir):
        reqs = s.requests()
        stats["sessions"] += 1
        stats["requests"] += len(reqs)
        stats["subagents"] += sum(isinstance(e, Subagent) for e in s.entries)
        stats["input_tokens"] += sum(r.input_tokens for r in reqs)
        stats["predicted_cached_tokens"] += sum(predicted_cached_tokens(s).values())
        stats["max_input_tokens"] = max(stats["max_input_tokens"], max(r.input_tokens for r in reqs))
    return stats


# --------------------------------------------------------------------------- replay waits


def think_time_s(req: AgentRequest, prev_end_s: float | None) -> float:
    """How long the replay waits before `req`, after the end of what it follows (the previous
    request's answer, or the last of the subagents before it): the trace's `think_time` when
    recorded, else the idle gap the trace shows, `t` minus the previous end on the trace's
    clock (`t` minus the previous `t` would count the previous api_time twice: AIPerf's
    weka_trace.py makes the same point), never below 0. The first request waits nothing."""
    if req.think_time_s is not None:
        return req.think_time_s
    if prev_end_s is None:
        return 0.0
    return max(0.0, req.t_s - prev_end_s)


def spawn_delay_s(sub: Subagent, prev_end_s: float | None) -> float:
    """How long after what precedes it a subagent is spawned: its spawn minus the previous
    request's end on the trace's clock, never below 0 (subagents spawned together start
    together: each one's wait is from the same request's end)."""
    return 0.0 if prev_end_s is None else max(0.0, sub.t_s - prev_end_s)


# --------------------------------------------------------------------------- cache prediction


def predicted_cached_tokens(session: AgentSession) -> dict[str, int]:
    """Per request (by JSON path), the input tokens a prefix cache keyed by the trace's blocks
    holds when it is sent: its leading blocks whose ids a request started earlier in the
    session carried as whole blocks (a prefix cache hits only a prefix, and caches only full
    blocks: an earlier request's partial last block is not counted), each counted for the
    tokens it has in this request."""
    bs = session.block_size
    seen: set[int] = set()
    out: dict[str, int] = {}
    for r in session.requests():
        ids, n_in = r.hash_ids, r.input_tokens
        hit = 0
        for k, h in enumerate(ids):
            if h not in seen:
                break
            hit += min(bs, n_in - k * bs)
        out[r.path] = hit
        seen.update(ids[:n_in // bs])
    return out


# --------------------------------------------------------------------------- reading


def trace_files(path: str | Path, base_dir: str = ".") -> list[Path]:
    """The files a trace path names: itself, or a directory's .json and .jsonl files in name
    order."""
    p = Path(path).expanduser()
    p = p if p.is_absolute() else Path(base_dir) / p
    if p.is_dir():
        files = sorted(f for f in p.iterdir()
                       if f.suffix in (".json", ".jsonl") and not f.name.startswith("."))
        if not files:
            raise PlanError(f"agent trace {p}: the directory holds no .json or .jsonl file")
        return files
    if not p.exists():
        raise PlanError(f"agent trace {p}: no such file or directory")
    return [p]


def read_agent_traces(path: str | Path, base_dir: str = ".") -> Iterator[AgentSession]:
    """Every session of a trace file or directory, one at a time, checked (PlanError, exit 2,
    names the file, the session and the JSON path of what is wrong)."""
    for f in trace_files(path, base_dir):
        if f.suffix == ".jsonl":
            yield from _read_lines(f)
        else:
            yield _one_session(str(f), None, _read_bounded(f))


def _read_bounded(f: Path) -> bytes:
    """A single-session file, refused by its bound before it is read (and while it is read:
    a file that grows past it is not read on)."""
    if why := input_problem(f, AGENT_SESSION_BYTES, "agent trace session"):
        raise PlanError(why)
    try:
        with open(f, "rb") as fh:
            data = fh.read(AGENT_SESSION_BYTES + 1)
    except OSError as e:
        raise PlanError(f"agent trace {f}: {e.strerror}") from e
    if len(data) > AGENT_SESSION_BYTES:
        raise PlanError(f"agent trace {f}: grew past {AGENT_SESSION_BYTES:,} bytes, the most a session may "
                        "have (benchc's bound; README: Limits)")
    return data


def _read_lines(f: Path) -> Iterator[AgentSession]:
    if why := input_problem(f, AGENT_TRACE_BYTES, "agent trace"):
        raise PlanError(why)
    try:
        fh = open(f, "rb")  # noqa: SIM115 - the with below closes it
    except OSError as e:
        raise PlanError(f"agent trace {f}: {e.strerror}") from e
    read = 0
    with fh:
        for n in range(1, 1 << 62):
            raw = fh.readline(AGENT_SESSION_BYTES + 1)
            if not raw:
                return
            read += len(raw)
            if len(raw) > AGENT_SESSION_BYTES:
                raise PlanError(f"{f}:{n}: a session line longer than {AGENT_SESSION_BYTES:,} bytes, the "
                                "most a session may have (benchc's bound; README: Limits)")
            if read > AGENT_TRACE_BYTES:
                raise PlanError(f"agent trace {f}: grew past {AGENT_TRACE_BYTES:,} bytes while read "
                                "(benchc's bound; README: Limits)")
            if raw.strip():
                yield _one_session(str(f), n, raw)


def _one_session(file: str, line: int | None, raw: bytes) -> AgentSession:
    where = f"{file}:{line}" if line is not None else file
    lifted = _lift_ids(raw)
    try:
        obj = json.loads(lifted[0] if lifted is not None else raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        lifted = None  # the message json gives for the file's own text
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise PlanError(f"{where}: not a JSON object ({getattr(e, 'msg', e)})") from e
    if not isinstance(obj, dict):
        raise PlanError(f"{where}: $: a session is a JSON object, not {_kind(obj)}")
    sid = obj.get("id")
    named = isinstance(sid, str | int) and not isinstance(sid, bool)
    label = f"session {sid!r}" if named else "session (no id)"
    check = _Check(f"{where}: {label}", lifted[1] if lifted is not None else None)
    session = check.session(where, obj)
    check.raise_any()
    assert session is not None
    return session


_IDS_KEY = b'"hash_ids"'
_ID_TEXT = b"0123456789,"
_AS_DIGIT = bytes.maketrans(b"123456789", b"000000000")
_TOO_LONG = b"0" * 19  # an id of 19 digits may not fit int64: the slow path names it


def _lift_ids(raw: bytes) -> tuple[bytes, list[bytes]] | None:
    """A session's text with each `hash_ids` list's numbers taken out, and those numbers'
    text: its k-th list becomes [k] and the k-th text is the list's numbers, comma-separated.

    Why: a 1,000-session set holds millions of ids, and json.loads made a Python int of each
    (most of reading the set); taken out, they are checked here by a few passes of bytes
    operations over the line and decoded when their session needs them (AgentRequest.hash_ids).
    None when any `hash_ids` is not a plain list of non-negative integers as JSON writes them
    (`[1,2]`, `[1, 2]`), or the text has backslash-u escapes (a key spelled with them would not
    be found here): json then reads the text whole, and _Check names what is wrong exactly as
    before. Lists taken out leave the document as valid, or invalid, as it was: only digits and
    commas are replaced by digits."""
    if b"\\u" in raw:
        return None
    chunks = raw.split(_IDS_KEY)
    parts, texts = [chunks[0]], []
    for k, chunk in enumerate(chunks[1:]):
        opened = 2 if chunk.startswith(b":[") else 3 if chunk.startswith(b": [") else 0
        end = chunk.find(b"]", opened)
        if not opened or end < 0:
            return None
        texts.append(chunk[opened:end])
        parts += (_IDS_KEY, chunk[:opened], b"%d" % k, chunk[end:])
    if not texts:
        return raw, texts
    every = b",".join(t for t in texts if t)
    if b" " in every:  # JSON written with spaces after commas
        texts = [t.replace(b", ", b",") for t in texts]
        every = b",".join(t for t in texts if t)
    return (b"".join(parts), texts) if _plain_ids(every) else None


def _plain_ids(ids: bytes) -> bool:
    """Whether `ids` is comma-separated non-negative integers as JSON writes them (no sign,
    fraction, exponent, space, leading zero or empty item), each of at most 18 digits (one of
    19 may not fit int64: the slow path names it)."""
    if ids.translate(None, _ID_TEXT) or ids[:1] == b"," or ids[-1:] == b"," or b",," in ids:
        return False
    if ids[:1] == b"0" and ids[1:2] not in (b",", b""):
        return False
    k = ids.find(b",0")
    while k >= 0:  # a number after a comma that starts with 0 is 0 itself, or not JSON
        if ids[k + 2:k + 3] not in (b",", b""):
            return False
        k = ids.find(b",0", k + 2)
    return _TOO_LONG not in ids.translate(_AS_DIGIT)


def _kind(v: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(v), "a number")


class _Check:
    """A session's problems, all collected (path, message), raised as one PlanError."""

    def __init__(self, label: str, lifted_ids: list[bytes] | None = None):
        self.label = label
        self.problems: list[str] = []
        self.lifted_ids = lifted_ids  # _lift_ids's texts: each hash_ids is [k], the k-th of them

    def add(self, path: str, message: str) -> None:
        self.problems.append(f"{self.label}: {path}: {message}")

    def raise_any(self) -> None:
        if not self.problems:
            return
        shown = self.problems[:_SHOWN]
        if len(self.problems) > _SHOWN:
            shown.append(f"... and {len(self.problems) - _SHOWN} more problems")
        raise PlanError("\n".join(shown))

    # ----- values

    def count(self, obj: dict, key: str, path: str, default: int | None = None,
              minimum: int = 0) -> int | None:
        """A whole number of at least `minimum` (a float with no fraction is one); missing:
        `default`, or a problem when there is none."""
        if key not in obj:
            if default is None:
                self.add(f"{path}.{key}", "missing")
            return default
        v = obj[key]
        if isinstance(v, float) and math.isfinite(v) and v == int(v):
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            self.add(f"{path}.{key}", f"must be a whole number, got {json.dumps(v)[:40]}")
            return None
        if v < minimum:
            self.add(f"{path}.{key}", f"{v} is less than the minimum of {minimum}")
            return None
        return v

    def seconds(self, obj: dict, key: str, path: str, required: bool) -> float | None:
        """A finite number of seconds, at least 0; null or missing
        when not required: None."""
        v = obj.get(key)
        if v is None:
            if required:
                self.add(f"{path}.{key}", "missing" if key not in obj else "must be a number, got null")
            return None
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            self.add(f"{path}.{key}", f"must be a finite number of seconds, got {json.dumps(v)[:40]}")
            return None
        if v < 0:
            self.add(f"{path}.{key}", f"{v} is negative")
            return None
        return float(v)

    def text(self, obj: dict, key: str, path: str, default: str | None = None) -> str | None:
        v = obj.get(key, default)
        if v is None and key not in obj and default is None:
            self.add(f"{path}.{key}", "missing")
            return None
        if v is None:
            return default
        if isinstance(v, int) and not isinstance(v, bool) and key in ("id", "agent_id"):
            return str(v)
        if not isinstance(v, str):
            self.add(f"{path}.{key}", f"must be a string, got {_kind(v)}")
            return None
        return v

    # ----- structure

    def session(self, where: str, obj: dict) -> AgentSession | None:
        sid = self.text(obj, "id", "$")
        scope = obj.get("hash_id_scope")
        if "hash_id_scope" not in obj:
            self.add("$.hash_id_scope", "missing (a session's hash ids are scoped to it: \"local\")")
        elif scope != "local":
            self.add("$.hash_id_scope", f"{json.dumps(scope)[:40]} is not supported: benchc replays hash ids "
                                        "scoped to their session (\"local\") only")
        bs = self.count(obj, "block_size", "$", minimum=1)
        tool = self.count(obj, "tool_tokens", "$", default=0)
        system = self.count(obj, "system_tokens", "$", default=0)
        models = obj.get("models", [])
        if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
            self.add("$.models", "must be a list of model names (strings)")
            models = []
        reqs = obj.get("requests")
        if not isinstance(reqs, list) or not reqs:
            self.add("$.requests", "missing" if reqs is None else
                     ("empty: a session has at least one request" if isinstance(reqs, list)
                      else f"must be a list of requests, got {_kind(reqs)}"))
            return None
        entries: list[Entry] = []
        prev: tuple[str, float] | None = None
        for i, rec in enumerate(reqs):
            path = f"$.requests[{i}]"
            e = self.entry(rec, path, bs or 0, nested=False)
            if e is None:
                continue
            if prev is not None and e.t_s < prev[1]:
                self.add(f"{path}.t", f"{e.t_s:g} is earlier than {prev[0]}.t ({prev[1]:g}): a session's "
                                      "requests and subagents are in time order")
            prev = (path, e.t_s)
            entries.append(e)
        if self.problems or sid is None or bs is None or tool is None or system is None:
            return None
        return AgentSession(where, sid, tuple(models), bs, tool, system, tuple(entries))

    def entry(self, rec: Any, path: str, bs: int, nested: bool, offset_s: float = 0.0) -> Entry | None:
        if not isinstance(rec, dict):
            self.add(path, f"a request is a JSON object, not {_kind(rec)}")
            return None
        kind = rec.get("type")
        if kind == SUBAGENT_TYPE and not nested:
            return self.subagent(rec, path, bs)
        if kind not in REQUEST_TYPES:
            known = '"n" or "s"' + ("" if nested else ', a subagent "subagent"')
            what = "missing" if "type" not in rec else f"unknown type {json.dumps(kind)[:40]}"
            self.add(f"{path}.type", f"{what} (a {'subagent' if nested else 'session'}'s request is {known})")
            return None
        t = self.seconds(rec, "t", path, required=True)
        n_in = self.count(rec, "in", path)
        n_out = self.count(rec, "out", path)
        model = self.text(rec, "model", path, default="") or None
        ids = self.hash_ids(rec, path, n_in, bs)
        think = self.seconds(rec, "think_time", path, required=False)
        api = self.seconds(rec, "api_time", path, required=False)
        ttft = self.seconds(rec, "ttft", path, required=False)
        stop = rec.get("stop") or ""
        if t is None or n_in is None or n_out is None or ids is None:
            return None
        return AgentRequest(path, t + offset_s, kind == "s", model, n_in, n_out, ids, think, api, ttft,
                            stop if isinstance(stop, str) else str(stop))

    def hash_ids(self, rec: dict, path: str, n_in: int | None, bs: int) -> array | bytes | None:
        if self.lifted_ids is not None:  # checked plain already (_lift_ids): count them
            text = self.lifted_ids[rec["hash_ids"][0]] if "hash_ids" in rec else b""
            if n_in is not None and bs and text and text.count(b",") + 1 > -(-n_in // bs):
                self._too_many(path, text.count(b",") + 1, n_in, bs)
                return None
            return text
        raw = rec.get("hash_ids", [])
        try:  # one C call checks every id's type (json.loads made floats of what is not an int)
            ids = array("q", raw if isinstance(raw, list) else None)  # type: ignore[arg-type]
        except (TypeError, OverflowError):
            ids = None
        if ids is None or (ids and min(ids) < 0):
            self.add(f"{path}.hash_ids", "must be a list of non-negative integers")
            return None
        if n_in is not None and bs and len(ids) > -(-n_in // bs):
            self._too_many(path, len(ids), n_in, bs)
            return None
        return ids

    def _too_many(self, path: str, n: int, n_in: int, bs: int) -> None:
        self.add(f"{path}.hash_ids", f"{n} blocks of {bs} tokens are more than in = {n_in} fills "
                                     f"({-(-n_in // bs)}): is block_size right?")

    def subagent(self, rec: dict, path: str, bs: int) -> Subagent | None:
        spawn = self.seconds(rec, "t", path, required=True)
        agent_id = self.text(rec, "agent_id", path)
        sub_type = self.text(rec, "subagent_type", path, default="") or ""
        status = self.text(rec, "status", path, default="") or ""
        dur_ms = self.seconds(rec, "duration_ms", path, required=False)
        tool = self.count(rec, "tool_tokens", path, default=0)
        system = self.count(rec, "system_tokens", path, default=0)
        inner = rec.get("requests")
        if not isinstance(inner, list) or not inner:
            self.add(f"{path}.requests", "a subagent without requests (it needs at least one)" if not inner
                     else f"must be a list of requests, got {_kind(inner)}")
            return None
        if spawn is None:
            return None
        first_t = inner[0].get("t") if isinstance(inner[0], dict) else None
        relative = (isinstance(first_t, int | float) and not isinstance(first_t, bool)
                    and first_t + _EPSILON_S < spawn)
        reqs: list[AgentRequest] = []
        prev: tuple[str, float] = (path, spawn)
        for j, r in enumerate(inner):
            ipath = f"{path}.requests[{j}]"
            e = self.entry(r, ipath, bs, nested=True, offset_s=spawn if relative else 0.0)
            if not isinstance(e, AgentRequest):
                continue
            if e.t_s < prev[1]:
                was = "its spawn" if prev[0] == path else f"{prev[0]}.t"
                self.add(f"{ipath}.t", f"{e.t_s:g} is earlier than {was} ({prev[1]:g}): a subagent's "
                                       "requests are in time order, after its spawn")
            prev = (ipath, e.t_s)
            reqs.append(e)
        if agent_id is None or tool is None or system is None or len(reqs) != len(inner):
            return None
        return Subagent(path, spawn, agent_id, sub_type, None if dur_ms is None else dur_ms / 1000.0, status,
                        tuple(reqs), tool, system, relative)


__all__ = ["agent_trace_params", "agent_trace_stats", "AgentRequest", "AgentSession", "Subagent",
           "read_agent_traces", "trace_files", "think_time_s", "spawn_delay_s", "predicted_cached_tokens",
           "REQUEST_TYPES"]
