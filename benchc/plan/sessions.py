"""Multi-turn sessions: conversations whose history grows, turn by turn.

A session is a script of turns. Each turn adds new messages (a user message; the first
turn may start with a system prompt), asks for an answer of a given length, and says when
it goes: `think_s` after the previous turn's answer ended (synthetic sessions, a file's
conversations), or `at_s` after the session's first turn was due, but never before the
previous turn ended (a trace's own times). The request of turn k is the whole history --
every earlier message and the answer the server actually streamed for each earlier turn
(run/sessions.py feeds it back) -- then turn k's new messages.

Sources (workload.dataset):
- sessions: synthetic; per session the number of turns, per turn the new message's length,
  the answer's length and the think time, all drawn from a generator seeded with (seed,
  prompt stream, session index): any session is built alone, by any worker. Turn 1 may
  open with a system prompt of prefix_tokens shared by every session; every user message
  starts with a marker naming (stream, session, turn), so no two sessions share more than
  that prefix (fresh prompts).
- sharegpt with `sessions: true`: each conversation's user turns replayed in order; the
  assistant's turns in the file only give each answer's length (unless output_tokens says);
  the answers sent back are the server's own.
- trace (format benchc) with `sessions: true`: rows with the same session_id are the turns
  of one session, sent at their times (over the speedup); a row's prompt or messages is the
  turn's new content, input_tokens that many fresh words.

Prefix caching: a turn's history is shared with the session's earlier turns (the cache
check allows it: run/sessions.py sets each turn's shared_tokens to everything but the new
messages' own tokens).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from typing import Any

from benchc.errors import PlanError
from benchc.plan.prompts import NO_DEAL, POOL_STREAM, Deal, RandomPrompts, pooled
from benchc.plan.trace import TracePrompts
from benchc.plan.workload import draw_length, length_spread, normalise_length, read_sharegpt, spread
from benchc.units import parse_duration, parse_tokens

_MASK64 = (1 << 64) - 1


# --------------------------------------------------------------------------- think time


def think_params(value: Any) -> dict:
    """A spec think time as {kind, ...} in seconds: `2s` (fixed), {min, max} (uniform),
    {mean, stdev} (normal, cut at 0) or {exponential: mean}."""
    if isinstance(value, dict):
        if "exponential" in value:
            return {"kind": "exponential", "mean_s": parse_duration(value["exponential"])}
        if "mean" in value:
            return {"kind": "normal", "mean_s": parse_duration(value["mean"]),
                    "stdev_s": parse_duration(value["stdev"])}
        return {"kind": "uniform", "min_s": parse_duration(value["min"]),
                "max_s": parse_duration(value["max"])}
    return {"kind": "fixed", "s": parse_duration(value)}


NO_THINK = {"kind": "fixed", "s": 0.0}


def draw_think(rng: random.Random, think: dict) -> float:
    """One think time (seconds, never below 0), rounded to the microsecond."""
    kind = think["kind"]
    if kind == "fixed":
        s = think["s"]
    elif kind == "uniform":
        s = rng.uniform(think["min_s"], think["max_s"])
    elif kind == "normal":
        s = rng.gauss(think["mean_s"], think["stdev_s"])
    else:
        s = rng.expovariate(1.0 / think["mean_s"]) if think["mean_s"] > 0 else 0.0
    return round(max(0.0, s), 6)


def think_spread(think: dict) -> dict:
    """Mean (and bounds, where it has them) of a think-time distribution, in seconds."""
    kind = think["kind"]
    if kind == "fixed":
        return {"min_s": think["s"], "mean_s": think["s"], "max_s": think["s"]}
    if kind == "uniform":
        return {"min_s": think["min_s"], "mean_s": round((think["min_s"] + think["max_s"]) / 2, 6),
                "max_s": think["max_s"]}
    return {"min_s": 0.0, "mean_s": think["mean_s"], "max_s": None}


# --------------------------------------------------------------------------- scripts


@dataclass(frozen=True)
class Turn:
    """One turn of a session's script."""

    messages: list[dict]  # the messages this turn adds (a system prompt, then the user's)
    own_tokens: int | None  # tokens of those messages no other session sends (None: a user's text)
    shared_tokens: int  # tokens of those messages other sessions send too (turn 1's system prompt)
    output_tokens: int | None  # the answer's length asked (max_tokens); None: sampling decides
    think_s: float = 0.0  # after the previous turn's answer ended (turn 1: 0)
    at_s: float | None = None  # a trace: due this long after the session's first turn was

    def to_json(self) -> dict:
        return {"messages": self.messages, "output_tokens": self.output_tokens, "think_s": self.think_s,
                "at_s": self.at_s}


@dataclass(frozen=True)
class Session:
    """A session's script: its turns in order."""

    turns: list[Turn]
    start_s: float | None = None  # a trace: when the session starts, from the point's start
    reused: bool = False  # an earlier session of the run sent this very script
    name: str | None = None  # a trace's session_id

    def to_json(self) -> dict:
        """Its content (what a digest covers)."""
        return {"turns": [t.to_json() for t in self.turns], "start_s": self.start_s}


@dataclass
class SessionStats:
    """What a session source holds, for the plan (Workload.sessions)."""

    source: str
    turns: dict = field(default_factory=dict)
    think_time: dict | None = None
    sessions: int | None = None  # a file's or a trace's count; None: endless

    def to_json(self) -> dict:
        out: dict[str, Any] = {"source": self.source, "turns": self.turns}
        if self.think_time is not None:
            out["think_time"] = self.think_time
        if self.sessions is not None:
            out["sessions"] = self.sessions
        return out


def session_params(cfg: dict, pool: int | None) -> dict:
    """workload.dataset.sessions, normalised."""
    return {"turns": normalise_length(cfg["turns"]),
            "input_tokens": normalise_length(cfg["input_tokens"]),
            "output_tokens": normalise_length(cfg["output_tokens"]),
            "prefix_tokens": parse_tokens(cfg.get("prefix_tokens", 0)),
            "think_time": think_params(cfg.get("think_time", 0)), "num_prompts": pool}


def _rng(seed: int, *parts: int) -> random.Random:
    v = seed & _MASK64
    for p in parts:
        v = (v << 64) | (p & _MASK64)
    return random.Random(v)


class SyntheticSessions:
    """Sessions of drawn lengths (see the module's docstring)."""

    sessions = True

    def __init__(self, params: dict, mode: str, tokenizer: Any = None):
        self.params, self.mode = params, mode
        self.seed = params["seed"]
        self.pool_size = params["num_prompts"] if mode == "shared" else None
        # the words, the exact-length growth and the shared prefix of random prompts
        self.words = RandomPrompts({k: params[k] for k in ("prefix_tokens", "num_prompts", "input_tokens",
                                                           "output_tokens")} | {"seed": self.seed},
                                   mode, tokenizer)

    def session(self, stream: int, index: int, deal: Deal = NO_DEAL) -> Session:
        reused = False
        if self.pool_size is not None:  # shared: every step deals the one pool from its start
            stream, index, reused = pooled(self.pool_size, index, deal)
        p = self.params
        rng = _rng(self.seed, 3, stream + 1, index)
        n_turns = draw_length(rng, p["turns"])
        name = f"{stream}.{index}" if stream != POOL_STREAM else f"{index}"
        turns = []
        for t in range(1, n_turns + 1):
            n_in, n_out = draw_length(rng, p["input_tokens"]), draw_length(rng, p["output_tokens"])
            think = draw_think(rng, p["think_time"]) if t > 1 else 0.0
            head = f"{name}.{t}"
            text = self.words.text(head, n_in, rng, n_in, f"session {name} turn {t}")
            messages = [{"role": "user", "content": text}]
            shared = 0
            if t == 1 and self.words.prefix:
                messages.insert(0, {"role": "system", "content": self.words.prefix})
                shared = self.words.prefix_n
            turns.append(Turn(messages, n_in, shared, n_out, think))
        return Session(turns, reused=reused)

    def stats(self) -> SessionStats:
        p = self.params
        return SessionStats("sessions", length_spread(p["turns"]), think_spread(p["think_time"]))


# --------------------------------------------------------------------------- files


def _word_count(text: str) -> int:
    return max(1, len(text.split()))


_USER_ROLES = ("human", "user")
_ASSISTANT_ROLES = ("gpt", "assistant", "chatgpt", "bard", "bing", "model")


def sharegpt_sessions(params: dict, base_dir: str) -> list[Session]:
    """A ShareGPT file's conversations as sessions: each user turn (from: human) a turn of its
    own, each reply's word count its answer length (output_tokens overrides), a leading
    system turn the first turn's system prompt; at most max_turns turns each."""
    path, data = read_sharegpt(params["path"], base_dir)
    override, think = params.get("output_tokens"), params.get("think_time") or NO_THINK
    cap = params.get("max_turns")
    rng = random.Random(params["seed"])
    out = []
    for conv in data if isinstance(data, list) else []:
        msgs = conv.get("conversations") if isinstance(conv, dict) else None
        if not isinstance(msgs, list):
            continue
        turns: list[Turn] = []
        system: list[dict] = []
        for k, m in enumerate(msgs):
            if not isinstance(m, dict) or not isinstance(m.get("value"), str):
                continue
            role = m.get("from")
            if role == "system" and not turns:
                system = [{"role": "system", "content": m["value"]}]
            elif role in _USER_ROLES and m["value"]:
                reply = next((x.get("value", "") for x in msgs[k + 1:k + 2]
                              if isinstance(x, dict) and x.get("from") in _ASSISTANT_ROLES), None)
                if reply is None and override is None:
                    break  # a last question without an answer gives no length to ask for
                n_out = draw_length(rng, override) if override else _word_count(reply or "")
                new = (system if not turns else []) + [{"role": "user", "content": m["value"]}]
                turns.append(Turn(new, None, 0, n_out, draw_think(rng, think) if turns else 0.0))
                if cap and len(turns) == cap:
                    break
        if turns:
            out.append(Session(turns))
    if not out:
        raise PlanError(f"sharegpt dataset {path} has no usable conversations")
    n = params.get("num_prompts")
    if n is not None and n < len(out):
        random.Random(params["seed"]).shuffle(out)
        out = out[:n]
    return out


class FileSessions:
    """A file's conversations, dealt in order across the run (as a file's prompts are); a
    conversation sent before is `reused`."""

    sessions = True

    def __init__(self, items: list[Session], mode: str, params: dict):
        self.items, self.mode, self.params = items, mode, params
        self.pool_size = len(items)

    def session(self, stream: int, index: int, deal: Deal = NO_DEAL) -> Session:
        pos = deal.start + index
        item = self.items[pos % self.pool_size]
        reused = pos >= self.pool_size or pos < deal.seen
        return Session(item.turns, item.start_s, True, item.name) if reused else item

    def digest(self) -> str:
        h = hashlib.sha256()
        for s in self.items:
            h.update(json.dumps(s.to_json(), sort_keys=True, ensure_ascii=False).encode())
            h.update(b"\n")
        return h.hexdigest()

    def stats(self) -> SessionStats:
        think = self.params.get("think_time")
        return SessionStats("sharegpt", spread([len(s.turns) for s in self.items]),
                            think_spread(think) if think else None, len(self.items))


# --------------------------------------------------------------------------- traces


class TraceSessions:
    """A benchc-format trace's rows grouped by session_id (a row without one is a session of
    one turn), in the order of their first rows. Every step replays them all from the first."""

    sessions = True
    replays = True

    def __init__(self, rows: TracePrompts):
        self.rows = rows
        tr = rows.trace
        self.mode = rows.mode
        groups: dict[int, list[int]] = {}
        order: list[list[int]] = []
        for r in range(len(tr)):
            s = tr.session[r]
            if s < 0:
                order.append([r])
            elif s in groups:
                groups[s].append(r)
            else:
                groups[s] = [r]
                order.append(groups[s])
        self.order = order
        self.pool_size = len(order)

    def session(self, stream: int, index: int, deal: Deal = NO_DEAL) -> Session:
        tr = self.rows.trace
        lap, s = divmod(index, len(self.order))
        rows = self.order[s]
        n = len(tr)
        start = tr.time_s[rows[0]]
        turns = []
        for r in rows:
            p = self.rows.prompt(stream, r + lap * n, deal)
            messages = p.messages or [{"role": "user", "content": p.text}]
            own = None if p.shared_tokens is None else p.input_tokens - p.shared_tokens
            turns.append(Turn(messages, own, p.shared_tokens or 0, p.output_tokens, 0.0,
                              round(tr.time_s[r] - start, 6)))
        sid = tr.session[rows[0]]
        return Session(turns, start_s=start, reused=lap > 0 or index < deal.seen,
                       name=tr.session_names[sid] if sid >= 0 else None)

    def arrivals(self, speedup: float) -> Any:
        """Seconds from the point's start at which each session's first turn is due."""
        tr = self.rows.trace
        return (tr.time_s[rows[0]] / speedup for rows in self.order)

    def digest(self) -> str:
        return self.rows.digest()

    def stats(self) -> SessionStats:
        return SessionStats("trace", spread([len(rows) for rows in self.order]), None, len(self.order))


# --------------------------------------------------------------------------- agent loops


class ToolResults:
    """The synthetic tool results of an agent loop (workload.agent): what a tool answers to
    a call, and how long it takes.

    Result `call` of tool round `step` of a session's request is a pure function of (seed,
    prompt stream, session, step, call): a marker naming them, then words, `tool_result_tokens`
    long (exactly, by target.tokenizer, else in words); its latency a draw of `tool_latency`
    from the same generator. No two results share more than their marker's first word, so
    each is new to the server's prefix cache in the request that carries it first."""

    def __init__(self, agent: dict, seed: int, tokenizer: Any = None):
        self.agent, self.seed = agent, seed
        length = agent["tool_result_tokens"]
        self.words = RandomPrompts({"prefix_tokens": 0, "num_prompts": None, "input_tokens": length,
                                    "output_tokens": length, "seed": seed}, "fresh", tokenizer)

    @property
    def max_rounds(self) -> int:
        """Tool rounds one user message may take (then the session goes to its next turn)."""
        return self.agent["max_tool_calls"]

    @property
    def fan_out(self) -> int:
        """Sub-requests a tool round runs side by side (1: none, the tool takes tool_latency)."""
        return self.agent.get("fan_out", 1)

    def result(self, stream: int, session: int, step: int, call: int) -> tuple[str, int, float]:
        """(the result's text, its tokens, the tool's latency in seconds)."""
        rng = _rng(self.seed, 5, stream + 1, session, step, call)
        n = draw_length(rng, self.agent["tool_result_tokens"])
        latency = draw_think(rng, self.agent["tool_latency"])
        name = f"{stream}.{session}" if stream != POOL_STREAM else f"{session}"
        text = self.words.text(f"result-{name}.{step}.{call}", n, rng, n, f"tool result {name}.{step}.{call}")
        return text, n, latency


def sessions_digest(source: Any, stream: int, n: int) -> str:
    """sha256 of a session source's first n sessions of a stream, in order."""
    h = hashlib.sha256()
    for i in range(n):
        h.update(json.dumps(source.session(stream, i).to_json(), sort_keys=True, ensure_ascii=False).encode())
        h.update(b"\n")
    return h.hexdigest()


def is_sessions(source: Any) -> bool:
    """The source deals sessions (multi-turn), not single prompts."""
    return bool(getattr(source, "sessions", False))


__all__ = ["Turn", "Session", "SessionStats", "SyntheticSessions", "FileSessions", "TraceSessions",
           "ToolResults",
           "session_params", "sharegpt_sessions", "think_params", "draw_think", "think_spread",
           "sessions_digest", "is_sessions", "NO_THINK"]
