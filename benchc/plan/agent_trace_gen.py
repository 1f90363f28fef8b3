"""Synthetic coding-agent sessions in the Weka / AgentX trace format (plan/agent_trace.py reads
them), drawn from published distributions, deterministic from a seed: the same arguments give
the same sessions, byte for byte once written (`write_sessions`).

The distributions are the AgentX dataset manifest's (SemiAnalysis' AgentX, as shipped with AIPerf:
aiperf/dataset/agentic_code_gen/datasets/1k_sessions_200k_ctx/manifest.json, Apache-2.0):
new tokens per turn lognormal (mean 6,000, median 4,000, at most 50,000), output tokens
lognormal (mean 1,000, median 800, at most 10,000), the delay before a turn an agentic one
(70 %: mean 5 s, median 2 s) or a human one (mean 30 s, median 15 s), a reset after a turn with
probability 0.05 x (1 + 0.5 x context / 200k), contexts up to 200k tokens in blocks of 512, a
first layer of 32,000 tokens (tools and system prompt) and a session's own second layer
lognormal (mean 15,000, median 5,000, at most 50,000). A lognormal's mean m and median d give
mu = ln d and sigma = sqrt(2 ln(m / d)) (the manifest's mu and sigma are these).

What the manifest does not give, benchc assumes here and says so:
- turns per session: lognormal median 15, mean 40, at most 200 (SyFI TraceLab's coding
  sessions: tool-initiated steps per session, p50 15, mean 73.6);
- a reset compacts the context (the next turn sends the first layer, a new summary drawn like
  the second layer, and its new tokens) where AgentX ends the session;
- subagents: after an agentic turn, with probability 0.1, 1 to 3 subagents spawned together,
  each 2 to 6 turns of the same new-token, output and agentic-delay draws over a prefix of its
  own (tools 8,000, system 4,000 tokens, shared by the session's subagents of one type);
- api_time (the trace's own answer time, which only sets `t`): 0.2 s + uncached input at
  10,000 tokens/s + output at 60 tokens/s.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path


@dataclass(frozen=True)
class Lognormal:
    """A lognormal by its real-space mean and median (mean >= median > 0), drawn values cut at
    `max` when given."""

    mean: float
    median: float
    max: float | None = None

    @property
    def mu(self) -> float:
        return math.log(self.median)

    @property
    def sigma(self) -> float:
        return math.sqrt(2.0 * math.log(self.mean / self.median))

    def draw(self, rng: random.Random) -> float:
        v = rng.lognormvariate(self.mu, self.sigma)
        return min(v, self.max) if self.max is not None else v

    def scaled(self, k: float) -> Lognormal:
        return Lognormal(self.mean * k, self.median * k, None if self.max is None else self.max * k)


@dataclass(frozen=True)
class AgentTraceParams:
    """What a generated set is drawn from; AGENTX is the AgentX manifest (tokens, ms)."""

    new_tokens: Lognormal
    output_tokens: Lognormal
    agentic_fraction: float
    agentic_delay_ms: Lognormal
    human_delay_ms: Lognormal
    reset_base: float
    reset_context_scaling: float
    max_prompt_tokens: int
    block_size: int
    tool_tokens: int  # the first layer (AgentX layer1_tokens), split tools / system
    system_tokens: int
    summary_tokens: Lognormal  # the second layer (a session's own first context; a reset's summary)
    turns: Lognormal
    subagent_probability: float
    subagent_tool_tokens: int
    subagent_system_tokens: int
    model: str = "agentx"

    def scaled(self, tokens: float) -> AgentTraceParams:
        """The same shape with every token count times `tokens` (a sample small enough for a
        small model); block size too, at least 16."""
        return replace(self, new_tokens=self.new_tokens.scaled(tokens),
                       output_tokens=self.output_tokens.scaled(tokens),
                       max_prompt_tokens=int(self.max_prompt_tokens * tokens),
                       block_size=max(16, int(self.block_size * tokens)),
                       tool_tokens=int(self.tool_tokens * tokens),
                       system_tokens=int(self.system_tokens * tokens),
                       summary_tokens=self.summary_tokens.scaled(tokens),
                       subagent_tool_tokens=int(self.subagent_tool_tokens * tokens),
                       subagent_system_tokens=int(self.subagent_system_tokens * tokens))


AGENTX = AgentTraceParams(
    new_tokens=Lognormal(6000, 4000, 50000), output_tokens=Lognormal(1000, 800, 10000),
    agentic_fraction=0.7, agentic_delay_ms=Lognormal(5000, 2000), human_delay_ms=Lognormal(30000, 15000),
    reset_base=0.05, reset_context_scaling=1.5, max_prompt_tokens=200_000, block_size=512,
    tool_tokens=20_000, system_tokens=12_000, summary_tokens=Lognormal(15000, 5000, 50000),
    turns=Lognormal(40, 15, 200), subagent_probability=0.1, subagent_tool_tokens=8000,
    subagent_system_tokens=4000)

# The shipped sample's shape (specs/traces/agentx-small/): AGENTX's token counts over 64, so that a
# session fits a small model's 4,096-token context (blocks of 16), with fewer turns and more
# resets and subagents than AGENTX so that a handful of sessions shows each; delays as published.
SMALL = replace(AGENTX.scaled(1 / 64), turns=Lognormal(8, 6, 20), reset_base=0.15, subagent_probability=0.3)

_PREFILL_TPS = 10_000.0  # api_time's model (module docstring): it only places `t`
_DECODE_TPS = 60.0


class _Session:
    """One session being drawn: its block ids (local to it) and its clock."""

    def __init__(self, p: AgentTraceParams, rng: random.Random):
        self.p, self.rng = p, rng
        self.next_id = 0
        self.prefix_ids: dict[str, list[int]] = {}

    def fresh(self, n: int) -> list[int]:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        return ids

    def prefix(self, kind: str, tokens: int) -> list[int]:
        """The whole blocks of a prefix (tools and system prompt): one set of ids per kind in
        the session, so every request that starts with it shares them."""
        if kind not in self.prefix_ids:
            self.prefix_ids[kind] = self.fresh(tokens // self.p.block_size)
        return self.prefix_ids[kind]

    def ids_for(self, carried: list[int], n_in: int) -> list[int]:
        """A request of `n_in` tokens whose first blocks are `carried` (whole blocks it shares
        with what came before), the rest new content."""
        total = -(-n_in // self.p.block_size)
        return carried[:total] + self.fresh(max(0, total - len(carried)))

    def tokens(self, dist: Lognormal) -> int:
        return max(1, int(dist.draw(self.rng)))

    def delay_s(self, human: bool) -> float:
        d = self.p.human_delay_ms if human else self.p.agentic_delay_ms
        return round(d.draw(self.rng) / 1000.0, 3)

    def request(self, t: float, n_in: int, n_out: int, ids: list[int], cached: int, think: float | None,
                stop: str, human: bool) -> tuple[dict, float]:
        """A request's record, and when its answer ended on the trace's clock."""
        ttft = 0.2 + max(0, n_in - cached) / _PREFILL_TPS
        api = round(ttft + n_out / _DECODE_TPS, 3)
        rec = {"t": round(t, 3), "type": "s", "model": self.p.model, "in": n_in, "out": n_out,
               "hash_ids": ids, "input_types": ["text" if human else "tool_result"], "output_types": ["text"],
               "stop": stop, "api_time": api, "think_time": think, "ttft": round(ttft, 3)}
        return rec, round(t, 3) + api


def _subagent(s: _Session, index: int, spawn: float, relative: bool) -> tuple[dict, float]:
    p, rng = s.p, s.rng
    kind = rng.choice(("Explore", "general-purpose"))
    head = s.prefix(f"sub:{kind}", p.subagent_tool_tokens + p.subagent_system_tokens)
    n_in = p.subagent_tool_tokens + p.subagent_system_tokens + s.tokens(p.new_tokens)
    t, prev_ids, reqs, end = spawn, head, [], spawn
    for k in range(rng.randint(2, 6)):
        if n_in >= p.max_prompt_tokens:
            break
        ids = s.ids_for(prev_ids, n_in)
        think = None if k == 0 else s.delay_s(False)
        t = end + (think or 0.0)
        n_out = s.tokens(p.output_tokens)
        rec, end = s.request(t, n_in, n_out, ids, len(prev_ids) * p.block_size, think, "tool_use", False)
        if relative:
            rec["t"] = round(rec["t"] - spawn, 3)
        reqs.append(rec)
        prev_ids = ids[:n_in // p.block_size]
        n_in = n_in + n_out + s.tokens(p.new_tokens)
    return ({"t": round(spawn, 3), "type": "subagent", "agent_id": f"agent_{index:03d}",
             "subagent_type": kind, "models": [p.model],  # as published traces have it (AIPerf requires it)
             "duration_ms": round((end - spawn) * 1000), "status": "completed", "requests": reqs,
             "tool_tokens": p.subagent_tool_tokens, "system_tokens": p.subagent_system_tokens}, end)


def session(p: AgentTraceParams, seed: int, index: int, relative_subagent_times: bool = False) -> dict:
    """Session `index` of the set drawn from `seed` (a pure function of the three: any session
    can be drawn alone)."""
    rng = random.Random((seed << 32) ^ index)
    s = _Session(p, rng)
    head_tokens = p.tool_tokens + p.system_tokens
    head = s.prefix("main", head_tokens)
    turns = max(1, int(p.turns.draw(rng)))
    entries: list[dict] = []
    n_in = head_tokens + s.tokens(p.summary_tokens)
    carried, t, end, human = head, 0.0, 0.0, True
    subagents = 0
    for k in range(turns):
        n_in = min(n_in, p.max_prompt_tokens - 1)
        ids = s.ids_for(carried, n_in)
        think = None if k == 0 else s.delay_s(human)
        t = end + (think or 0.0)
        n_out = s.tokens(p.output_tokens)
        next_human = rng.random() >= p.agentic_fraction
        stop = "end_turn" if next_human else "tool_use"
        rec, end = s.request(t, n_in, n_out, ids, len(carried) * p.block_size, think, stop, human)
        entries.append(rec)
        human = next_human
        carried = ids[:n_in // p.block_size]
        if not human and k + 1 < turns and rng.random() < p.subagent_probability:
            spawn, ends = end, []
            for _ in range(rng.randint(1, 3)):  # spawned together: each from the same answer's end
                subagents += 1
                sub, sub_end = _subagent(s, subagents, spawn, relative_subagent_times)
                entries.append(sub)
                ends.append(sub_end)
            end = max(ends)
        grown = n_in + n_out + s.tokens(p.new_tokens)
        reset_p = p.reset_base * (1.0 + (p.reset_context_scaling - 1.0) * n_in / p.max_prompt_tokens)
        if grown >= p.max_prompt_tokens or rng.random() < reset_p:
            # compaction: the first layer stays, a summary replaces the history
            carried, grown = head, head_tokens + s.tokens(p.summary_tokens) + s.tokens(p.new_tokens)
        n_in = grown
    return {"id": f"session_{seed}_{index:05d}", "models": [p.model], "block_size": p.block_size,
            "hash_id_scope": "local", "tool_tokens": p.tool_tokens, "system_tokens": p.system_tokens,
            "requests": entries}


def sessions(p: AgentTraceParams, n: int, seed: int, relative_subagent_times: bool = False) -> Iterator[dict]:
    """n sessions drawn from `seed`."""
    for i in range(n):
        yield session(p, seed, i, relative_subagent_times)


def write_sessions(out: Path, p: AgentTraceParams, n: int, seed: int,
                   relative_subagent_times: bool = False) -> None:
    """n sessions as a directory of one .json per session (the published layout), or one
    .jsonl when `out` names one."""
    if out.suffix == ".jsonl":
        with open(out, "w") as f:
            for s in sessions(p, n, seed, relative_subagent_times):
                f.write(json.dumps(s, separators=(",", ":")) + "\n")
        return
    out.mkdir(parents=True, exist_ok=True)
    for s in sessions(p, n, seed, relative_subagent_times):
        (out / f"{s['id']}.json").write_text(json.dumps(s, separators=(",", ":")) + "\n")


__all__ = ["AGENTX", "SMALL", "AgentTraceParams", "Lognormal", "session", "sessions", "write_sessions"]
