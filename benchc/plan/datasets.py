"""The dataset kinds of `workload.dataset`, in one table: what each kind's spec block compiles
to, the prompt source that builds its prompts, and what the compiler and the runner need to
know of it. A new kind is a module of its own under plan/ and one entry here (and its block
in benchc/schemas/spec-v1.json).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchc.plan.agent_trace import agent_trace_params
from benchc.plan.agent_trace_prompts import AgentTraceSource
from benchc.plan.prefix_groups import PrefixGroupPrompts, prefix_group_params
from benchc.plan.prompts import FilePrompts, PromptSource, RandomPrompts
from benchc.plan.sessions import (
    FileSessions,
    SyntheticSessions,
    TraceSessions,
    session_params,
    sharegpt_sessions,
    think_params,
)
from benchc.plan.trace import TracePrompts, load_trace, trace_params
from benchc.plan.workload import length_spread, load_items, normalise_length, spread
from benchc.units import parse_tokens


@dataclass(frozen=True)
class DatasetKind:
    """One kind of dataset.

    params(cfg, pool)  -- its spec block normalised (Workload.params, less the seed); `pool`
                          is the number of prompts dealt in turn where a pool is dealt
    source(params, mode, base_dir, tokenizer) -> its PromptSource (plan/prompts.py)
    lengths(source, params) -> ({min, mean, max} of the input tokens, of the output tokens)
    exact_lengths(source) -- its prompts say exactly how long each output is (sampling.ignore_eos
                          then defaults to compiler.DEFAULTS' ignore_eos.exact_lengths)
    replays            -- every step sends its rows from the first (a trace), rather than
                          the next of a pool (run/feed.Dealer)
    timed              -- its rows carry arrival times: load.sweep.speedup replays them, a
                          rate rescales them
    describe(source)   -- what the plan keeps of the dataset's file (Workload.trace), or None
    multi_turn(params) -- its params make sessions (plan/sessions.py) rather than single prompts
    """

    params: Callable[[dict, int | None], dict]
    source: Callable[[dict, str, str, Any], PromptSource]
    lengths: Callable[[Any, dict], tuple[dict, dict]]
    exact_lengths: Callable[[Any], bool]
    replays: bool = False
    timed: bool = False
    describe: Callable[[Any], dict] | None = None
    multi_turn: Callable[[dict], bool] = lambda params: False


def _random_params(cfg: dict, pool: int | None) -> dict:
    return {"input_tokens": normalise_length(cfg["input_tokens"]),
            "output_tokens": normalise_length(cfg["output_tokens"]),
            "prefix_tokens": parse_tokens(cfg["prefix_tokens"]), "num_prompts": pool}


def _file_lengths(source: FilePrompts, params: dict) -> tuple[dict, dict]:
    asked = [p.output_tokens for p in source.items if p.output_tokens is not None]
    return spread([p.input_tokens for p in source.items]), (spread(asked) if asked else {})


def _file_source(kind: str) -> Callable[[dict, str, str, Any], PromptSource]:
    return lambda params, mode, base_dir, tok: FilePrompts(load_items(kind, params, base_dir), mode)


def _sharegpt_params(cfg: dict, pool: int | None) -> dict:
    params: dict[str, Any] = {"path": cfg["path"], "num_prompts": pool}
    if "output_tokens" in cfg:
        params["output_tokens"] = normalise_length(cfg["output_tokens"])
    if cfg.get("sessions"):  # every user turn of a conversation, with its history
        params.update(sessions=True, think_time=think_params(cfg.get("think_time", 0)),
                      max_turns=cfg.get("max_turns"))
    return params


def _sharegpt_source(params: dict, mode: str, base_dir: str, tok: Any) -> PromptSource:
    if params.get("sessions"):
        return FileSessions(sharegpt_sessions(params, base_dir), mode, params)  # type: ignore[return-value]
    return FilePrompts(load_items("sharegpt", params, base_dir), mode)


def _sharegpt_lengths(source: Any, params: dict) -> tuple[dict, dict]:
    if isinstance(source, FileSessions):
        turns = [t for s in source.items for t in s.turns]
        ins = [sum(len(str(m["content"]).split()) for m in t.messages) for t in turns]
        # a ShareGPT turn's answer length is its reply's words (None only where a file gives none)
        outs = [n for t in turns if (n := t.output_tokens) is not None]
        return spread([max(1, n) for n in ins]), spread(outs)
    return _file_lengths(source, params)


def _trace_source(params: dict, mode: str, base_dir: str, tok: Any) -> PromptSource:
    rows = TracePrompts(load_trace(params, base_dir), params, mode, tok)
    return TraceSessions(rows) if params.get("sessions") else rows  # type: ignore[return-value]


def _trace_stats(source: Any) -> dict:
    rows = source.rows if isinstance(source, TraceSessions) else source
    stats = dict(rows.trace.stats)
    if isinstance(source, TraceSessions):
        stats["sessions"] = source.pool_size
    return stats


def _agent_trace_source(params: dict, mode: str, base_dir: str, tok: Any) -> PromptSource:
    """The trace's sessions, read and checked now (a bad one is named: exit 2)."""
    return AgentTraceSource(params, base_dir)


def _agent_trace_lengths(source: Any, params: dict) -> tuple[dict, dict]:
    reqs = [r for s in source.agent_sessions for r in s.requests()]
    return spread([r.input_tokens for r in reqs]), spread([r.output_tokens for r in reqs])


def _rows(source: Any) -> TracePrompts:
    return source.rows if isinstance(source, TraceSessions) else source


def _drawn_lengths(input_key: str) -> Callable[[Any, dict], tuple[dict, dict]]:
    """The lengths of a synthetic dataset: its input distribution (`input_key`) after its
    prefix, and its output distribution."""
    return lambda source, p: (length_spread(p[input_key], p["prefix_tokens"]),
                              length_spread(p["output_tokens"]))


def _no(source: Any) -> bool:
    return False


def _yes(source: Any) -> bool:
    return True


KINDS: dict[str, DatasetKind] = {
    "random": DatasetKind(
        params=_random_params,
        source=lambda params, mode, base_dir, tok: RandomPrompts(params, mode, tok),
        lengths=_drawn_lengths("input_tokens"), exact_lengths=_yes),
    "jsonl": DatasetKind(
        params=lambda cfg, pool: {"path": cfg["path"], "num_prompts": pool,
                                  "shuffle": cfg.get("shuffle", False)},
        source=_file_source("jsonl"), lengths=_file_lengths, exact_lengths=_no),
    "sharegpt": DatasetKind(
        params=_sharegpt_params, source=_sharegpt_source, lengths=_sharegpt_lengths, exact_lengths=_no,
        multi_turn=lambda params: bool(params.get("sessions"))),
    "trace": DatasetKind(
        params=lambda cfg, pool: trace_params(cfg),
        source=_trace_source,
        lengths=lambda source, p: _rows(source).lengths(),
        # when the trace gives every request's output length
        exact_lengths=lambda source: min(_rows(source).trace.output_tokens) >= 0,
        replays=True, timed=True, describe=_trace_stats,
        multi_turn=lambda params: bool(params.get("sessions"))),
    "agent_trace": DatasetKind(
        params=lambda cfg, pool: agent_trace_params(cfg), source=_agent_trace_source,
        lengths=_agent_trace_lengths, exact_lengths=_yes),
    "prefix_groups": DatasetKind(
        params=prefix_group_params,
        source=lambda params, mode, base_dir, tok: PrefixGroupPrompts(params, mode, tok),
        lengths=_drawn_lengths("suffix_tokens"), exact_lengths=_yes),
    "sessions": DatasetKind(
        params=session_params,
        source=lambda params, mode, base_dir, tok: SyntheticSessions(params, mode, tok),  # type: ignore
        # per turn: the new user message (turn 1's system prompt on top), and the answer
        lengths=lambda source, p: (length_spread(p["input_tokens"]), length_spread(p["output_tokens"])),
        exact_lengths=_yes, multi_turn=lambda params: True),
}


def make_source(dataset: str, params: dict, mode: str, base_dir: str = ".", tokenizer=None) -> PromptSource:
    """The prompt source of a combination's workload: its kind's (files are read here, once)."""
    return KINDS[dataset].source(params, mode, base_dir, tokenizer)


def is_multi_turn(dataset: str, params: dict) -> bool:
    """A workload of sessions (plan/sessions.py): its requests are turns of conversations."""
    return KINDS[dataset].multi_turn(params)


__all__ = ["KINDS", "DatasetKind", "make_source", "spread", "length_spread", "is_multi_turn"]
