"""One coding-agent session replayed (plan/agent_trace.py), and the fidelity verdict of a replay
against its trace. Shape-blind: a request's body is built and sent by a `prepare` and a `send`
the caller gives (the load shape's driver, when the load-shape types exist; a test's client
now), so this holds only the session's order and timing:

- the session's requests go in order, each after the previous one's answer plus its wait
  (agent_trace.think_time_s), times `time_scale`, capped at `max_think_s`;
- a subagent starts its spawn wait (agent_trace.spawn_delay_s) after the answer before it and
  runs its own requests in order, beside the parent's other subagents; the parent's next
  request waits for every subagent spawned before it (spawn-join), then its own wait.

Every wait is from when what it follows really ended, so a slow answer never shortens a think
time (closed per session, as the trace's agent was).
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from benchc.plan.agent_trace import (
    AgentRequest,
    AgentSession,
    Subagent,
    predicted_cached_tokens,
    spawn_delay_s,
    think_time_s,
)


@dataclass(frozen=True)
class Answer:
    """What the server said of one request (None: it did not say)."""

    input_tokens: int | None
    output_tokens: int | None
    cached_tokens: int | None


@dataclass(frozen=True)
class Sent:
    """One request of a replayed session: when it went and what came back (ns on
    time.perf_counter_ns's clock)."""

    path: str
    agent: str  # "" for the session's own requests, else the subagent's agent_id
    after_ns: int  # when what it waited on ended (the previous answer, the last subagent, the spawn)
    wait_ns: int  # the wait it was due after that (scaled, capped)
    send_ns: int
    end_ns: int
    answer: Answer
    spawn_ns: int | None = None  # a subagent's request: when the subagent was spawned


# prepare(request) -> its body, built before its due time (a 200k-token prompt costs ms of CPU,
# which must not delay the send); send(request, body) -> what the server said
Prepare = Callable[[AgentRequest], Any]
Send = Callable[[AgentRequest, Any], Awaitable[Answer]]


def scaled_ns(wait_s: float, time_scale: float, max_think_s: float | None) -> int:
    """A trace's wait as the replay keeps it: times `time_scale`, at most `max_think_s`."""
    w = wait_s * time_scale
    if max_think_s is not None:
        w = min(w, max_think_s)
    return round(w * 1e9)


async def _until(due_ns: int) -> None:
    """Sleep to `due_ns` (never wake before it: a send is never early)."""
    while (left := due_ns - time.perf_counter_ns()) > 0:
        await asyncio.sleep(left / 1e9)


@dataclass(frozen=True)
class _Io:
    prepare: Prepare
    send: Send
    time_scale: float
    max_think_s: float | None

    def wait_ns(self, wait_s: float) -> int:
        return scaled_ns(wait_s, self.time_scale, self.max_think_s)


async def _request(req: AgentRequest, io: _Io, agent: str, after_ns: int, wait_ns: int,
                   spawn_ns: int | None, out: list[Sent]) -> int:
    body = io.prepare(req)  # before its due time: the wait covers the build
    await _until(after_ns + wait_ns)
    t0 = time.perf_counter_ns()
    answer = await io.send(req, body)
    t1 = time.perf_counter_ns()
    out.append(Sent(req.path, agent, after_ns, wait_ns, t0, t1, answer, spawn_ns))
    return t1


async def _subagent(sub: Subagent, io: _Io, spawn_due_ns: int, out: list[Sent]) -> int:
    await _until(spawn_due_ns)
    spawn_ns = time.perf_counter_ns()
    prev_end_s, end_ns = sub.t_s, spawn_ns
    for k, req in enumerate(sub.requests):
        # the first request goes its own t after the spawn; the next after an answer and a think
        wait_s = max(0.0, req.t_s - sub.t_s) if k == 0 else think_time_s(req, prev_end_s)
        end_ns = await _request(req, io, sub.agent_id, end_ns, io.wait_ns(wait_s), spawn_ns, out)
        prev_end_s = req.end_s
    return end_ns


async def replay_session(session: AgentSession, prepare: Prepare, send: Send, time_scale: float = 1.0,
                         max_think_s: float | None = None) -> list[Sent]:
    """Replay one session: each request's body built by `prepare` before it is due, then sent
    by `send` at its time; its requests as sent, in the order they ended."""
    io = _Io(prepare, send, time_scale, max_think_s)
    out: list[Sent] = []
    prev_end_s: float | None = None  # the trace's end of the previous request of the parent
    end_ns = time.perf_counter_ns()
    spawned: list[tuple[Subagent, asyncio.Task[int]]] = []
    for e in session.entries:
        if isinstance(e, Subagent):
            due = end_ns + io.wait_ns(spawn_delay_s(e, prev_end_s))
            spawned.append((e, asyncio.ensure_future(_subagent(e, io, due, out))))
            continue
        waited_s = prev_end_s
        if spawned:  # join: the next request follows the last subagent's end
            ends = await asyncio.gather(*(t for _, t in spawned))
            end_ns = max(ends)
            waited_s = max(s.end_s for s, _ in spawned)
            spawned = []
        end_ns = await _request(e, io, "", end_ns, io.wait_ns(think_time_s(e, waited_s)), None, out)
        prev_end_s = e.end_s
    if spawned:
        await asyncio.gather(*(t for _, t in spawned))
    return out


@dataclass(frozen=True)
class Replay:
    """A set of sessions replayed: when it began, each session's due start (s after it; None
    under a concurrency), and per session its requests as replay_session returns them."""

    start_ns: int
    due_s: list[float] | None
    sessions: list[list[Sent]]


async def replay_sessions(sessions: list[AgentSession], prepare_for: Callable[[int], Prepare], send: Send,
                          concurrency: int | None = None, rate_per_s: float | None = None, seed: int = 0,
                          time_scale: float = 1.0, max_think_s: float | None = None) -> Replay:
    """Replay a set of sessions, each started when a place among `concurrency` sessions in flight
    is free (a closed loop of sessions), or at a Poisson `rate_per_s` of session arrivals drawn
    from `seed` (an open loop: a session starts at its time whatever is in flight), or all at
    once when neither is given. `prepare_for(i)` is session i's prepare."""
    if concurrency is not None and rate_per_s is not None:
        raise ValueError("give a concurrency or a rate of sessions, not both")
    start_ns = time.perf_counter_ns()
    gate = asyncio.Semaphore(concurrency) if concurrency else None
    rng = random.Random(seed)
    due_s, dues = 0.0, []
    for _ in sessions:
        dues.append(due_s)
        if rate_per_s:
            due_s += rng.expovariate(rate_per_s)

    async def one(i: int, s: AgentSession) -> list[Sent]:
        if gate is not None:
            async with gate:
                return await replay_session(s, prepare_for(i), send, time_scale, max_think_s)
        await _until(start_ns + round(dues[i] * 1e9))
        return await replay_session(s, prepare_for(i), send, time_scale, max_think_s)

    sent = list(await asyncio.gather(*(one(i, s) for i, s in enumerate(sessions))))
    return Replay(start_ns, dues if gate is None else None, sent)


# --------------------------------------------------------------------------- the verdict

THINK_BAND_MS = 1.0  # p99 of (send - what it followed's end - its due wait)


def _p(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, math.ceil(q * len(s)) - 1)]


def fidelity(session: AgentSession, sent: list[Sent], kv_block: int | None = None) -> dict:
    """How far a replay kept to its trace: input and output tokens (the server's) against the
    trace's `in` and `out`, the think times kept (send minus the end of what it followed, minus
    its due wait, in ms), order (no subagent request before its spawn, no parent request before
    the subagents it follows ended), and the cached tokens the server reported against the
    prediction, per request within one KV block (`kv_block`, default the trace's block).
    `warnings` names each figure out of its band."""
    reqs = {r.path: r for r in session.requests()}
    predicted = predicted_cached_tokens(session)
    block = kv_block or session.block_size
    late_ms = [(s.send_ns - s.after_ns - s.wait_ns) / 1e6 for s in sent]
    input_off = [s.path for s in sent if s.answer.input_tokens != reqs[s.path].input_tokens]
    output_off = [s.path for s in sent if s.answer.output_tokens != reqs[s.path].output_tokens]
    reported = [s for s in sent if s.answer.cached_tokens is not None]
    cache_diff = [s.answer.cached_tokens - predicted[s.path] for s in reported]  # type: ignore[operator]
    before_spawn = [s.path for s in sent if s.spawn_ns is not None and s.send_ns < s.spawn_ns]
    by_end = sorted(sent, key=lambda s: s.end_ns)
    parent_early = []
    for e_i, e in enumerate(session.entries):
        if isinstance(e, Subagent):
            continue
        subs = [x.agent_id for x in session.entries[:e_i] if isinstance(x, Subagent)]
        mine = next(s for s in sent if s.path == e.path)
        ends = [s.end_ns for s in by_end if s.agent in subs]
        if ends and mine.send_ns < max(ends):
            parent_early.append(e.path)
    late = {"p50": round(_p(late_ms, 0.5), 3), "p99": round(_p(late_ms, 0.99), 3),
            "max": round(max(late_ms, default=0.0), 3), "min": round(min(late_ms, default=0.0), 3)}
    off_block = sum(abs(d) > block for d in cache_diff)
    out: dict = {
        "requests": len(sent), "requests_traced": len(reqs),
        "input_tokens_off": len(input_off), "output_tokens_off": len(output_off),
        "think_late_ms": late,
        "subagent_before_spawn": len(before_spawn), "parent_before_join": len(parent_early),
        "cache_reported": len(reported),
        "cache_off_by_more_than_a_block": off_block,
        "cache_diff_tokens": {"min": min(cache_diff, default=0), "max": max(cache_diff, default=0)},
    }
    warnings = []
    if len(sent) != len(reqs):
        warnings.append(f"requests: {len(sent)} sent of the trace's {len(reqs)}")
    if input_off:
        warnings.append(f"input tokens: {len(input_off)} requests differ from the trace's in (first "
                        f"{input_off[0]})")
    if output_off:
        warnings.append(f"output tokens: {len(output_off)} requests differ from the trace's out (first "
                        f"{output_off[0]})")
    if late["p99"] > THINK_BAND_MS or late["min"] < 0:
        warnings.append(f"think times: sent {late['p99']} ms late at p99 (band {THINK_BAND_MS} ms)")
    if before_spawn or parent_early:
        warnings.append(f"order: {len(before_spawn)} subagent requests before their spawn, "
                        f"{len(parent_early)} parent requests before their subagents ended")
    if off_block:
        warnings.append(f"cache: {off_block} requests' cached tokens differ from the hash ids' prediction by "
                        f"more than a block of {block}")
    out["warnings"] = warnings
    return out


CONTEXT_BUCKETS = ((0, "0-8k"), (8192, "8-32k"), (32768, "32-128k"), (131072, "128k+"))


def _bucket(tokens: int) -> str:
    name = CONTEXT_BUCKETS[0][1]
    for low, label in CONTEXT_BUCKETS:
        if tokens >= low:
            name = label
    return name


def session_figures(session: AgentSession, sent: list[Sent], time_scale: float = 1.0) -> dict:
    """A replayed session beside its trace: wall time (first send to last answer) against the
    trace's (its first `t` to its last end, times `time_scale`: the trace's own answer times are
    scaled too, so the two agree only where the server answered as fast, scaled); turns (the
    session's own requests), subagents, the subagents' share of the requests and of the input
    tokens; E2E (ms, p50) by turn depth (the session's own requests, 1-based) and by context
    length bucket (0-8k, 8-32k, 32-128k, 128k+ input tokens)."""
    reqs = {r.path: r for r in session.requests()}
    own = [e for e in session.entries if isinstance(e, AgentRequest)]
    subs = [e for e in session.entries if isinstance(e, Subagent)]
    traced_end = max(max(r.end_s for r in reqs.values()), max((x.end_s for x in subs), default=0.0))
    by_bucket: dict[str, list[float]] = {}
    for x in sent:
        by_bucket.setdefault(_bucket(reqs[x.path].input_tokens), []).append((x.end_ns - x.send_ns) / 1e6)
    depth = {r.path: k for k, r in enumerate(own, 1)}
    by_depth = {depth[x.path]: (x.end_ns - x.send_ns) / 1e6 for x in sent if x.path in depth}
    sub_sent = [x for x in sent if x.agent]
    total_in = sum(reqs[x.path].input_tokens for x in sent)
    wall_ns = max(x.end_ns for x in sent) - min(x.send_ns for x in sent) if sent else 0
    return {
        "wall_s": round(wall_ns / 1e9, 6),
        "traced_wall_s": round((traced_end - min(r.t_s for r in reqs.values())) * time_scale, 6),
        "turns": len(own), "requests": len(sent), "subagents": len(subs),
        "subagent_request_share": round(len(sub_sent) / len(sent), 6) if sent else 0.0,
        "subagent_input_token_share": round(sum(reqs[x.path].input_tokens for x in sub_sent) / total_in, 6)
        if total_in else 0.0,
        "e2e_ms_p50_by_context": {label: round(_p(by_bucket[label], 0.5), 3) for _, label in CONTEXT_BUCKETS
                                  if label in by_bucket},
        "e2e_ms_by_turn": {str(k): round(v, 3) for k, v in sorted(by_depth.items())},
    }


__all__ = ["Answer", "Sent", "Prepare", "Send", "Replay", "replay_session", "replay_sessions",
           "session_figures", "fidelity", "scaled_ns", "THINK_BAND_MS", "CONTEXT_BUCKETS"]
