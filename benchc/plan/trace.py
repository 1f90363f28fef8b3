"""The trace dataset: a trace file's slice as a schedule, and the prompts its rows send.

`load_trace` hashes the whole file, then streams it once (plan/trace_formats.py reads each
format) and keeps the slice's rows as compact arrays -- per request its time, input and
output lengths, and its hash ids in one flat array. Nothing else of the file is held:
a request's prompt is built when it is sent (run/feed.py), and a user's own prompt text
(benchc format) is read back from the file by its byte offset then.

Prompts (TracePrompts): row r's prompt is its hash-id blocks, then words of its own up to
its input length. The block of hash id h is a pure function of (seed, step stream, h): two
rows of one step that share an id send exactly the same `block_size` tokens there (a prefix
cache sees the trace's real reuse), and no step sees another's blocks (each load point
replays the trace on its own content, as fresh prompts keep points apart). Every word is one
that the target's tokenizer makes one token with its leading space (without a tokenizer, one
word is one token, as everywhere in benchc), so a prompt has exactly its row's input length,
and a block's text is the same wherever it stands.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchc.errors import PlanError
from benchc.inputs import TRACE_BYTES, input_problem
from benchc.plan.prompts import NO_DEAL, POOL_STREAM, Deal, WordBlocks, one_token_words
from benchc.plan.trace_formats import READERS, Lines, Row, literal_prompt
from benchc.plan.workload import Prompt
from benchc.spec.limits import MAX_TOKENS
from benchc.units import parse_duration, parse_tokens

_MASK64 = (1 << 64) - 1
_BLOCK_CACHE = 1024  # blocks kept built (a system prompt's blocks are sent again and again)


def trace_params(cfg: dict) -> dict:
    """workload.dataset.trace, normalised (seconds, token counts, lists)."""
    sl = cfg.get("slice", {})
    params: dict[str, Any] = {
        "path": cfg["path"], "format": cfg["format"],
        "slice": {"start_s": parse_duration(sl.get("start", 0)),
                  "duration_s": parse_duration(sl["duration"]) if "duration" in sl else None,
                  "requests": sl.get("requests")},
        "max_input_tokens": parse_tokens(cfg["max_input_tokens"]) if "max_input_tokens" in cfg else None,
        "max_output_tokens": parse_tokens(cfg["max_output_tokens"]) if "max_output_tokens" in cfg else None,
        "min_tokens": bool(cfg.get("min_tokens", False)),
    }
    if cfg["format"] == "mooncake":
        params["block_size"] = cfg["block_size"]  # the compiler fills its default (512)
    if "filter" in cfg:
        params["filter"] = {k: [v] if isinstance(v, str) else list(v) for k, v in cfg["filter"].items()}
    if cfg.get("sessions"):
        if cfg["format"] != "benchc":
            raise PlanError(f"workload.dataset.trace.sessions: replaying {cfg['format']} sessions as "
                            "multi-turn conversations is not built yet (their rows' lengths include the "
                            "history); format: benchc replays session_id rows as turns")
        params["sessions"] = True  # rows of one session_id are the turns of a conversation (plan/sessions.py)
    return params


class Trace:
    """A trace's slice: per request, its time (seconds from the slice's first request, trace
    time), input and output lengths after the caps, its hash ids, the tokens it may share
    with other requests of the slice, and where its own text is (benchc format)."""

    def __init__(self, path: str, fmt: str, block_size: int):
        self.path, self.format, self.block_size = path, fmt, block_size
        self.time_s = array("d")
        self.input_tokens = array("q")
        self.output_tokens = array("q")  # -1: the row does not say
        self.ids_at = array("q", [0])  # row r's hash ids are ids[ids_at[r]:ids_at[r + 1]]
        self.ids = array("q")
        self.shared = array("q")  # leading tokens whose blocks other rows of the slice also have
        self.text_at = array("q")  # byte offset of a row whose prompt is the user's, else -1
        self.session = array("q")  # index into session_names, -1 for none
        self.session_names: list[str] = []
        self.sha256 = ""
        self.stats: dict[str, Any] = {}
        self.literals: dict[int, dict] | None = None  # a portable copy's users' prompts, by offset

    def __len__(self) -> int:
        return len(self.time_s)

    def portable(self) -> Trace:
        """A copy that needs no file: the users' own prompts (benchc format) read in now, for a
        worker that cannot see the trace file (a Ray worker on another machine)."""
        copy = Trace(self.path, self.format, self.block_size)
        copy.__dict__.update({k: v for k, v in self.__dict__.items() if k != "literals"})
        copy.literals = {off: literal_prompt(self.path, off) for off in self.text_at if off >= 0}
        return copy

    def literal(self, offset: int) -> dict:
        """The user's own prompt of the row at `offset` (read from the file when it is sent)."""
        return self.literals[offset] if self.literals is not None else literal_prompt(self.path, offset)

    def hash_ids(self, r: int) -> array:
        return self.ids[self.ids_at[r]:self.ids_at[r + 1]]


# The last trace loaded, by its file's content (sha256) and params: `benchc run` compiles the
# plan, then rebuilds its prompt source from it (run/prepare.py); hashing the file again costs
# a few milliseconds, parsing it again seconds. A Trace is not changed once loaded.
_LAST: list = [None, None]


def load_trace(params: dict, base_dir: str = ".") -> Trace:
    """The slice of the trace file that `params` (trace_params) names, with the file's sha256
    and the slice's statistics; PlanError names the file (and line) of anything wrong."""
    p = Path(params["path"]).expanduser()
    path = p if p.is_absolute() else Path(base_dir) / p
    if why := input_problem(path, TRACE_BYTES, "trace"):
        raise PlanError(why)
    try:
        with open(path, "rb") as f:
            sha256 = hashlib.file_digest(f, "sha256").hexdigest()
    except OSError as e:
        raise PlanError(f"trace {path}: {e.strerror}") from e
    key = (str(path.resolve()), sha256, json.dumps(params, sort_keys=True))
    if _LAST[0] == key:
        return _LAST[1]
    trace = _read(path, params, sha256)
    _LAST[:] = [key, trace]
    return trace


def _read(path: Path, params: dict, sha256: str) -> Trace:
    fmt = params["format"]
    trace = Trace(str(path), fmt, params.get("block_size", 1))  # only mooncake rows have blocks
    trace.sha256 = sha256
    opts = {"block_size": trace.block_size, "filter": params.get("filter")}
    sl = params["slice"]
    caps = (params.get("max_input_tokens"), params.get("max_output_tokens"))
    tally = {"clipped": 0, "raised": 0}
    first: float | None = None
    last = 0.0
    sessions: dict[str, int] = {}
    try:
        f = open(path, "rb")  # noqa: SIM115 - the with below closes it
    except OSError as e:
        raise PlanError(f"trace {path}: {e.strerror}") from e
    with f:
        lines = Lines(f)
        lo = hi = 0.0
        for row in READERS[fmt](lines, str(path), opts):
            if first is None:
                first = row.time_s
                lo = first + sl["start_s"]
                hi = lo + sl["duration_s"] if sl["duration_s"] is not None else math.inf
            last = row.time_s
            if row.time_s < lo:
                continue
            if row.time_s >= hi:
                break
            _add(trace, row, lo, caps, tally, sessions, str(path))
            if sl["requests"] and len(trace) == sl["requests"]:
                break
    if not len(trace):
        if first is None:
            held = (f"the filter kept none of its {opts['filtered_out']} rows" if opts.get("filtered_out")
                    else "the file holds no request")
        else:
            held = f"the file's requests run from 0s to {last - first:g}s"
        raise PlanError(f"trace {path}: the slice {_describe(sl)} holds no request ({held})")
    trace.session_names = list(sessions)
    _rebase(trace)
    _find_sharing(trace)
    outs = trace.output_tokens
    trace.stats = {
        "format": fmt, "sha256": sha256, "requests": len(trace),
        "input_tokens": sum(trace.input_tokens),
        "output_tokens": sum(outs) if min(outs) >= 0 else None,
        "duration_s": round(trace.time_s[-1], 6),
        "clipped_requests": tally["clipped"], "raised_requests": tally["raised"],
        "shared_tokens": sum(trace.shared),
    }
    if "filtered_out" in opts:
        trace.stats["filtered_out"] = opts["filtered_out"]
    return trace


def _describe(sl: dict) -> str:
    parts = [f"start {sl['start_s']:g}s"]
    if sl["duration_s"] is not None:
        parts.append(f"duration {sl['duration_s']:g}s")
    if sl["requests"]:
        parts.append(f"requests {sl['requests']}")
    return "(" + ", ".join(parts) + ")"


def _add(trace: Trace, row: Row, t0: float, caps: tuple, tally: dict, sessions: dict, path: str) -> None:
    """One row into the trace: lengths capped (counted) and raised to 1 (counted: a server
    takes no empty prompt and no max_tokens of 0), hash ids cut to the blocks it fills."""
    n_in, n_out = row.input_tokens, row.output_tokens
    cap_in, cap_out = caps
    literal = row.offset >= 0
    clipped = False
    if cap_in is not None and n_in > cap_in and not literal:  # a user's text is never cut
        n_in, clipped = cap_in, True
    if cap_out is not None and n_out is not None and n_out > cap_out:
        n_out, clipped = cap_out, True
    tally["clipped"] += clipped
    for n, what in ((n_in, "input"), (n_out or 0, "output")):
        if n > MAX_TOKENS:  # 8 prompts of it are built to compile the plan: bounded like a spec's
            raise PlanError(f"{path}:{row.line}: {n:,} {what} tokens, over benchc's ceiling of "
                            f"{MAX_TOKENS:,} per request (cap them with max_{what}_tokens)")
    if n_in < 1 or n_out == 0:
        tally["raised"] += 1
        n_in, n_out = max(1, n_in), None if n_out is None else max(1, n_out)
    trace.time_s.append(row.time_s - t0)
    trace.input_tokens.append(n_in)
    trace.output_tokens.append(-1 if n_out is None else n_out)
    ids = row.hash_ids if row.hash_ids is not None else array("q")
    trace.ids.extend(ids[:-(-n_in // trace.block_size)])
    trace.ids_at.append(len(trace.ids))
    trace.text_at.append(row.offset)
    trace.session.append(-1 if row.session is None else sessions.setdefault(row.session, len(sessions)))


def _rebase(trace: Trace) -> None:
    """Times from the slice's first request: it is sent as the point starts."""
    t0 = trace.time_s[0]
    if t0:
        trace.time_s = array("d", (t - t0 for t in trace.time_s))


def _find_sharing(trace: Trace) -> None:
    """Per row, the leading tokens that other rows of the slice may also send: its first
    blocks whose hash ids occur more than once in the slice (a prefix cache can hit only a
    prefix). An upper bound, which the cache check needs (metrics/cache.py)."""
    n = len(trace)
    if not len(trace.ids):
        trace.shared = array("q", bytes(8 * n))
        return
    import numpy as np

    flat = np.frombuffer(trace.ids, dtype=np.int64)
    unique, counts = np.unique(flat, return_counts=True)
    repeated = (counts[np.searchsorted(unique, flat)] > 1).tobytes()  # one byte per id
    shared = array("q")
    bs, at, ins = trace.block_size, trace.ids_at, trace.input_tokens
    for r in range(n):
        a, b = at[r], at[r + 1]
        k = a
        while k < b and repeated[k]:
            k += 1
        shared.append(min(ins[r], (k - a) * bs))
    trace.shared = shared


def trace_rate(trace_stats: dict, speedup: float) -> float | None:
    """The mean arrival rate of the slice replayed `speedup` times faster: its requests after
    the first over its span. None when every request arrives at once."""
    n, span = trace_stats["requests"], trace_stats["duration_s"]
    return round((n - 1) * speedup / span, 6) if n > 1 and span > 0 else None


def speedup_for(trace_stats: dict, rate_rps: float) -> float:
    """The speedup that replays the slice at a mean rate of `rate_rps` (trace_rate's inverse)."""
    n, span = trace_stats["requests"], trace_stats["duration_s"]
    if n < 2 or span <= 0:
        raise PlanError(f"load.sweep.rate: the trace's slice has {n} request(s) arriving at once; there "
                        "is no rate to rescale (use load.sweep.speedup, or a longer slice)")
    return rate_rps * span / (n - 1)


def _seed(*parts: int) -> int:
    v = 0
    for p in parts:
        v = (v << 64) | (p & _MASK64)
    return v


class TracePrompts:
    """Prompt i of a step: row i of the trace (rows go round when a step sends more than the
    slice holds: a warmup wider than the slice). Every load point replays the whole slice."""

    replays = True  # every step deals the rows from the first (run/feed.Dealer)

    def __init__(self, trace: Trace, params: dict, mode: str, tokenizer: Any = None):
        self.trace, self.params, self.mode = trace, params, mode
        self.seed = params["seed"]
        self.tok = tokenizer
        self.pool_size = len(trace)
        self.words = one_token_words(tokenizer)
        self._blocks = WordBlocks(self.words, self.seed, _BLOCK_CACHE)

    def prompt(self, stream: int, index: int, deal: Deal = NO_DEAL) -> Prompt:
        tr = self.trace
        lap, r = divmod(index, len(tr))
        raw_out = tr.output_tokens[r]
        n_out = None if raw_out < 0 else raw_out
        if tr.text_at[r] >= 0:  # the user's own prompt: sent as it is, again on every point
            rec = tr.literal(tr.text_at[r])
            reused = lap > 0 or index < deal.seen
            return Prompt(rec.get("prompt"), rec.get("messages"), tr.input_tokens[r], n_out, None, reused)
        reused = False
        if self.mode == "shared":  # the same content on every step: cache-warm, on purpose
            stream, lap = POOL_STREAM, 0
            reused = index >= len(tr) or index < deal.seen
        text = self._text(stream, lap, r)
        return Prompt(text, None, tr.input_tokens[r], n_out, shared_tokens=tr.shared[r], reused=reused)

    def _text(self, stream: int, lap: int, r: int) -> str:
        tr = self.trace
        n_in, bs = tr.input_tokens[r], tr.block_size
        parts, left = [], n_in
        for hid in tr.hash_ids(r):
            words = self._blocks.get((stream, lap, hid), self.trace.block_size)
            take = min(bs, left)
            parts.append(" " + " ".join(words[:take]))
            left -= take
        if left > 0:  # the row's own tokens beyond its blocks: words no other row sends
            rng = random.Random(_seed(self.seed, 2, stream, lap, r))
            parts.append(" " + " ".join(rng.choices(self.words, k=left)))
        text = "".join(parts)
        if self.tok is not None and self.tok.count(text) != n_in:
            raise PlanError(f"trace row {r}: could not build a prompt of exactly {n_in} tokens with this "
                            "tokenizer (its words are not one token each here)")
        return text

    def arrivals(self, speedup: float) -> Iterator[float]:
        """Seconds from the point's start at which each row is due, the trace's times over
        `speedup`."""
        return (t / speedup for t in self.trace.time_s)

    def digest(self) -> str:
        """sha256 of what the prompts come from: the file's own sha256 and the slice."""
        material = {"sha256": self.trace.sha256, "params": self.params}
        return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()

    def lengths(self) -> tuple[dict, dict]:
        """min, mean and max of the input lengths, and of the output lengths (when all known)."""
        tr = self.trace
        outs = tr.output_tokens
        return _spread(tr.input_tokens), (_spread(outs) if min(outs) >= 0 else {})


def _spread(xs: array) -> dict:
    return {"min": min(xs), "mean": round(sum(xs) / len(xs), 3), "max": max(xs)}


__all__ = ["Trace", "TracePrompts", "load_trace", "trace_params", "trace_rate", "speedup_for"]
