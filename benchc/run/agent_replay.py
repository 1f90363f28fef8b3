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
import json
import math
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from benchc.client.request import CLOCK, build_body
from benchc.metrics.record import RequestRecord, SessionPlace
from benchc.plan.agent_trace import (
    AgentRequest,
    AgentSession,
    Subagent,
    predicted_cached_tokens,
    spawn_delay_s,
    think_time_s,
)
from benchc.plan.agent_trace_prompts import AgentTraceSource
from benchc.plan.model import Combination, Step
from benchc.plan.shapes import WHOLE, AgentReplay, Shard
from benchc.plan.workload import Prompt
from benchc.run.drivers import Host
from benchc.run.punctual import SEND_LEAD_NS, WORK_NS, wait_until


@dataclass(frozen=True)
class Answer:
    """What the server said of one request (None: it did not say)."""

    input_tokens: int | None
    output_tokens: int | None
    cached_tokens: int | None
    send_ns: int | None = None  # the request's own write and end stamps, where the send measured them
    end_ns: int | None = None
    ttft_ns: int | None = None  # its first output after the write, where measured


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
# which must not delay the send); send(request, body) -> what the server said. A punctual send
# (replay_session's lead_ns > 0) is also given the due time (perf_counter ns) and writes at it,
# never before: the replay's wait ends lead_ns ahead, and the send readies its connection and
# request meanwhile (benchc run's: the step's measured path, as an open loop's writes); and a
# `written` callable, which it calls (or has the loop call) once the request is written, or
# never: the replay then builds the bodies that go next while this one is in flight
Prepare = Callable[[AgentRequest], Any]
Send = Callable[..., Awaitable[Answer]]
# Wait until a due time (perf_counter ns); False: the step was stopped (Ctrl-C), so no new
# request goes (the step's Host.until)
Until = Callable[[int], Awaitable[bool]]
# Before work that can wait (a request readied ahead): let the writes due meanwhile go first,
# those due by the given time only (the step's Host.writes_first)
WritesFirst = Callable[[int], Awaitable[None]]
# A session's start on the loop, at most (its cache prediction and first body: 2.2 ms measured
# for the sample's longest, pure-Python core), and the longest it waits for others' writes
SESSION_START_NS = 3_000_000


def scaled_ns(wait_s: float, time_scale: float, max_think_s: float | None) -> int:
    """A trace's wait as the replay keeps it: times `time_scale`, at most `max_think_s`."""
    w = wait_s * time_scale
    if max_think_s is not None:
        w = min(w, max_think_s)
    return round(w * 1e9)


async def _until(due_ns: int) -> bool:
    """Sleep to `due_ns` (never wake before it: a send is never early); never stopped."""
    await wait_until(due_ns)
    return True


async def _no_writes(by_ns: int, work_ns: int = 0) -> None:
    """No punctual writes to let go first (a replay outside a step)."""


class _Stopped(Exception):
    """The step stopped while a request of the session waited for its time: it never goes."""


@dataclass(frozen=True)
class _Io:
    prepare: Prepare
    send: Send
    time_scale: float
    max_think_s: float | None
    until: Until = _until
    lead_ns: int = 0
    writes_first: WritesFirst = _no_writes
    ahead: dict[str, Any] = field(default_factory=dict)  # bodies built ahead, by request path

    def wait_ns(self, wait_s: float) -> int:
        return scaled_ns(wait_s, self.time_scale, self.max_think_s)

    def body(self, req: AgentRequest) -> Any:
        """Its body: built ahead, or now."""
        body = self.ahead.pop(req.path, None)
        return self.prepare(req) if body is None else body

    def written(self, nexts: tuple[AgentRequest, ...]) -> Callable[[], None]:
        """What a punctual send calls once its request is written: the bodies of the requests
        that go next on its line built then, while it is in flight, instead of after its answer,
        where a think time shorter than the build could not cover it."""
        def build() -> None:
            for req in nexts:
                if req.path not in self.ahead:
                    self.ahead[req.path] = self.prepare(req)
        return build

    async def ready(self, due_ns: int) -> bool:
        """Wait until its send may begin (lead_ns before `due_ns`), then let the writes due
        before its own go first (its readying is work that can wait, to WORK_NS before its
        time); False: the step stopped."""
        if not await self.until(due_ns - self.lead_ns):
            return False
        if self.lead_ns:
            await self.writes_first(due_ns - WORK_NS)
        return True


async def _request(req: AgentRequest, io: _Io, agent: str, after_ns: int, wait_ns: int,
                   spawn_ns: int | None, out: list[Sent], body: Any = None,
                   nexts: tuple[AgentRequest, ...] = ()) -> int:
    """Send `req` at its time; `nexts`: the requests that go after it on its line (built once it
    is written, where the send says when)."""
    if body is None:  # built ahead, or now: before its due time (the wait covers the build)
        body = io.body(req)
    due_ns = after_ns + wait_ns
    if not await io.ready(due_ns):
        raise _Stopped
    t0 = time.perf_counter_ns()
    answer = await (io.send(req, body, due_ns, io.written(nexts)) if io.lead_ns else io.send(req, body))
    t1 = time.perf_counter_ns()
    # the measured client's stamps where it gave them (taken at the write and the last read);
    # a punctual send that never wrote (its connect failed) is dated at its due time, not before
    t0 = answer.send_ns if answer.send_ns is not None else max(t0, due_ns) if io.lead_ns else t0
    t1 = answer.end_ns if answer.end_ns is not None else t1
    out.append(Sent(req.path, agent, after_ns, wait_ns, t0, t1, answer, spawn_ns))
    return t1


async def _subagent(sub: Subagent, io: _Io, spawn_due_ns: int, out: list[Sent]) -> int:
    if not await io.until(spawn_due_ns):
        raise _Stopped
    spawn_ns = time.perf_counter_ns()
    prev_end_s, end_ns = sub.t_s, spawn_ns
    for k, req in enumerate(sub.requests):
        # the first request goes its own t after the spawn; the next after an answer and a think
        wait_s = max(0.0, req.t_s - sub.t_s) if k == 0 else think_time_s(req, prev_end_s)
        end_ns = await _request(req, io, sub.agent_id, end_ns, io.wait_ns(wait_s), spawn_ns, out,
                                nexts=tuple(sub.requests[k + 1:k + 2]))
        prev_end_s = req.end_s
    return end_ns


def _parent_nexts(entries: tuple[AgentRequest | Subagent, ...], i: int) -> tuple[AgentRequest, ...]:
    """What goes next after the parent's request entries[i]: the first requests of the
    subagents it spawns, else its own next request (one after a join is built during the
    join)."""
    subs: list[AgentRequest] = []
    for e in entries[i + 1:]:
        if isinstance(e, AgentRequest):
            return tuple(subs) if subs else (e,)
        if e.requests:
            subs.append(e.requests[0])
    return tuple(subs)


async def replay_session(session: AgentSession, prepare: Prepare, send: Send, time_scale: float = 1.0,
                         max_think_s: float | None = None, until: Until = _until,
                         lead_ns: int = 0, writes_first: WritesFirst = _no_writes) -> list[Sent]:
    """Replay one session: each request's body built by `prepare` before it is due, then sent
    by `send` at its time (`until` waits for it; False: the step stopped, and the session ends
    there, its requests not yet due never sent); its requests as sent, in the order they ended.
    `lead_ns` > 0: `until` waits to that long before each request's time and `send(request,
    body, due_ns)` writes it at its time (a punctual send: see Send), and readying a request
    (work that can wait) lets the writes due meanwhile go first (`writes_first`)."""
    io = _Io(prepare, send, time_scale, max_think_s, until, lead_ns, writes_first)
    out: list[Sent] = []
    spawned: list[tuple[Subagent, asyncio.Task[int]]] = []
    try:
        await _entries(session, io, out, spawned)
    except _Stopped:
        # the subagents end at their own next wait (the step's stop says False there too): a
        # request of theirs in flight gets the step's grace, as every request in flight does,
        # and is counted with its answer (cancelled here, it went uncounted in the session's
        # figures and as a failed request, the client's own cancel without a grace)
        await asyncio.gather(*(t for _, t in spawned), return_exceptions=True)
    return out


async def _entries(session: AgentSession, io: _Io, out: list[Sent],
                   spawned: list[tuple[Subagent, asyncio.Task[int]]]) -> None:
    """replay_session's loop: the parent's requests in order, its subagents spawned and joined."""
    prev_end_s: float | None = None  # the trace's end of the previous request of the parent
    # the session starts once its first request is built: its wait (none, or its think_time) is
    # from then, not from before a build it could not cover
    first = session.entries[0] if session.entries else None
    ahead = io.prepare(first) if isinstance(first, AgentRequest) else None
    end_ns = time.perf_counter_ns()
    for i, e in enumerate(session.entries):
        if isinstance(e, Subagent):
            due = end_ns + io.wait_ns(spawn_delay_s(e, prev_end_s))
            spawned.append((e, asyncio.ensure_future(_subagent(e, io, due, out))))
            continue
        waited_s, body, ahead = prev_end_s, ahead, None
        if spawned:  # join: the next request follows the last subagent's end
            # its body built while the subagents run (once those due at once went: a turn of the
            # loop lets them send), not after the last one's end, where a short think time
            # could not cover the build
            await asyncio.sleep(0)
            body = io.prepare(e)
            ends = await asyncio.gather(*(t for _, t in spawned))
            end_ns = max(ends)
            waited_s = max(s.end_s for s, _ in spawned)
            spawned.clear()
        end_ns = await _request(e, io, "", end_ns, io.wait_ns(think_time_s(e, waited_s)), None, out, body,
                                _parent_nexts(session.entries, i))
        prev_end_s = e.end_s
    if spawned:
        await asyncio.gather(*(t for _, t in spawned))


@dataclass(frozen=True)
class Replay:
    """A set of sessions replayed: when it began, each session's due start (s after it; None
    under a concurrency), and per session its requests as replay_session returns them."""

    start_ns: int
    due_s: list[float] | None
    sessions: list[list[Sent]]


def session_arrivals(sessions: list[AgentSession], rate_per_s: float | None, speedup: float | None,
                     seed: int) -> list[float]:
    """Each session's start, s after the first's: at a seeded Poisson `rate_per_s` of session
    arrivals (the first at 0), on the traces' own start times (each session's first `t`, from
    the earliest) over `speedup`, or all at 0 when neither is given."""
    if speedup is not None:
        starts = [min(r.t_s for r in s.requests()) for s in sessions]
        first = min(starts, default=0.0)
        return [(t - first) / speedup for t in starts]
    rng = random.Random(seed)
    due_s, dues = 0.0, []
    for _ in sessions:
        dues.append(due_s)
        if rate_per_s:
            due_s += rng.expovariate(rate_per_s)
    return dues


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
    dues = session_arrivals(sessions, rate_per_s, None, seed)

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
    return fidelity_of([session], [sent], kv_block)


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most spans open at one moment (one ending as another starts: not both open)."""
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    held = most = 0
    for _, step in edges:
        held += step
        most = max(most, held)
    return most


def requests_at_once(session: AgentSession) -> int:
    """The most requests the session has in flight at once, as traced: its most subagents
    running at once (the parent waits for them), at least its own one."""
    return max(1, _most_at_once([(e.t_s, e.end_s) for e in session.entries if isinstance(e, Subagent)]))


def subagent_overlap(session: AgentSession, sent: list[Sent]) -> tuple[int, int]:
    """(traced, replayed): the most subagents of the session running at once in the trace (spawn
    to end) and in the replay (its first send to its last answer)."""
    traced = [(e.t_s, e.end_s) for e in session.entries if isinstance(e, Subagent)]
    spans: dict[str, tuple[int, int]] = {}
    for s in sent:
        if s.agent:
            a, b = spans.get(s.agent, (s.send_ns, s.end_ns))
            spans[s.agent] = (min(a, s.send_ns), max(b, s.end_ns))
    return _most_at_once(traced), _most_at_once([(float(a), float(b)) for a, b in spans.values()])


def _session_checks(session: AgentSession, sent: list[Sent], block: int) -> dict:
    """One session's counts for the verdict (fidelity_of adds them up)."""
    reqs = {r.path: r for r in session.requests()}
    predicted = predicted_cached_tokens(session)
    reported = [s for s in sent if s.answer.cached_tokens is not None]
    parent_early = []
    for e_i, e in enumerate(session.entries):
        if isinstance(e, Subagent):
            continue
        subs = {x.agent_id for x in session.entries[:e_i] if isinstance(x, Subagent)}
        mine = next((s for s in sent if s.path == e.path), None)
        ends = [s.end_ns for s in sent if s.agent in subs]
        if mine is not None and ends and mine.send_ns < max(ends):
            parent_early.append(e.path)
    cache_diff = [s.answer.cached_tokens - predicted[s.path] for s in reported]  # type: ignore[operator]
    return {
        "traced": len(reqs), "sent": len(sent),
        "input_off": [s.path for s in sent if s.answer.input_tokens != reqs[s.path].input_tokens],
        "output_off": [s.path for s in sent if s.answer.output_tokens != reqs[s.path].output_tokens],
        "late_ms": [(s.send_ns - s.after_ns - s.wait_ns) / 1e6 for s in sent],
        "before_spawn": [s.path for s in sent if s.spawn_ns is not None and s.send_ns < s.spawn_ns],
        "parent_early": parent_early, "reported": len(reported), "cache_diff": cache_diff,
        "off_block": sum(abs(d) > (block or session.block_size) for d in cache_diff),
        "overlap": subagent_overlap(session, sent),
    }


def fidelity_of(sessions: list[AgentSession], sent: list[list[Sent]], kv_block: int | None = None) -> dict:
    """fidelity() over a set of sessions (a point's): counts added, the think-time lateness
    over every request, the warnings named once for the set (`first` the first session's
    request out of band). `kv_block`: default each session's own block."""
    parts = [_session_checks(s, x, kv_block or 0) for s, x in zip(sessions, sent, strict=True)]
    return verdict(parts, [kv_block or s.block_size for s in sessions])


def verdict(parts: list[dict], blocks: list[int]) -> dict:
    """The fidelity verdict from each session's checks (_session_checks, in session order) and
    the cache band's block of each: what fidelity_of gives, from values a Ray worker carries
    back (counts add; the lateness percentiles are taken over every request's value)."""

    def every(key: str) -> list:
        return [v for p in parts for v in p[key]]

    late_ms, cache_diff = every("late_ms"), every("cache_diff")
    input_off, output_off = every("input_off"), every("output_off")
    before_spawn, parent_early = every("before_spawn"), every("parent_early")
    n_sent, n_traced = sum(p["sent"] for p in parts), sum(p["traced"] for p in parts)
    off_block = sum(p["off_block"] for p in parts)
    late = {"p50": round(_p(late_ms, 0.5), 3), "p99": round(_p(late_ms, 0.99), 3),
            "max": round(max(late_ms, default=0.0), 3), "min": round(min(late_ms, default=0.0), 3)}
    out: dict = {
        "requests": n_sent, "requests_traced": n_traced,
        "input_tokens_off": len(input_off), "output_tokens_off": len(output_off),
        "think_late_ms": late,
        "subagent_before_spawn": len(before_spawn), "parent_before_join": len(parent_early),
        "cache_reported": sum(p["reported"] for p in parts),
        "cache_off_by_more_than_a_block": off_block,
        "cache_diff_tokens": {"min": min(cache_diff, default=0), "max": max(cache_diff, default=0)},
        # the most subagents at once in any session, as traced and as replayed (a figure, not a
        # band: a server faster than the trace's ends a subagent before its sibling's spawn)
        "subagents_at_once": {"traced": max((p["overlap"][0] for p in parts), default=0),
                              "replayed": max((p["overlap"][1] for p in parts), default=0)},
    }
    kinds = sorted(set(blocks))
    block = kinds[0] if len(kinds) == 1 else "/".join(map(str, kinds))
    warnings = []
    if n_sent != n_traced:
        warnings.append(f"requests: {n_sent} sent of the trace's {n_traced}")
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
    length bucket (0-8k, 8-32k, 32-128k, 128k+ input tokens); TTFT likewise, where the send
    measured it (Answer.ttft_ns: benchc run's driver does)."""
    reqs = {r.path: r for r in session.requests()}
    own = [e for e in session.entries if isinstance(e, AgentRequest)]
    subs = [e for e in session.entries if isinstance(e, Subagent)]
    traced_end = max(max(r.end_s for r in reqs.values()), max((x.end_s for x in subs), default=0.0))
    by_bucket: dict[str, list[float]] = {}
    ttft_bucket: dict[str, list[float]] = {}
    for x in sent:
        bucket = _bucket(reqs[x.path].input_tokens)
        by_bucket.setdefault(bucket, []).append((x.end_ns - x.send_ns) / 1e6)
        if x.answer.ttft_ns is not None:
            ttft_bucket.setdefault(bucket, []).append(x.answer.ttft_ns / 1e6)
    depth = {r.path: k for k, r in enumerate(own, 1)}
    by_depth = {depth[x.path]: (x.end_ns - x.send_ns) / 1e6 for x in sent if x.path in depth}
    ttft_depth = {depth[x.path]: x.answer.ttft_ns / 1e6 for x in sent
                  if x.path in depth and x.answer.ttft_ns is not None}
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
        "ttft_ms_p50_by_context": {label: round(_p(ttft_bucket[label], 0.5), 3)
                                   for _, label in CONTEXT_BUCKETS if label in ttft_bucket},
        "ttft_ms_by_turn": {str(k): round(v, 3) for k, v in sorted(ttft_depth.items())},
    }


# --------------------------------------------------------------------------- benchc run's driver


# where a body's prompt goes: json.dumps writes the mark as _PROMPT_MARK_JSON
_PROMPT_MARK = "\x00benchc agent-trace prompt\x00"
_PROMPT_MARK_JSON = json.dumps(_PROMPT_MARK)[1:-1].encode()


class AgentFeed:
    """The sessions a coding-agent point replays (its first `step.sessions`, or all) and its
    requests' bodies, built through the target's API adapter with the run's tokenizer and chat
    template. A point's blocks are its own: the content key is (prompt stream, session), so no
    point finds another's blocks in the server's cache."""

    def __init__(self, source: AgentTraceSource, combo: Combination, step: Step, tokenizer: Any = None,
                 template: Any = None, shard: Shard = WHOLE):
        n = step.sessions
        self.sessions = source.agent_sessions[:n] if n else list(source.agent_sessions)
        # the indices of the sessions this worker replays (plan/shapes.AgentReplay.divide: whole
        # sessions, dealt as its shard's lanes); `sessions` stays the step's every one, so a
        # session's index, its content key and its due time are the same on every backend
        self.mine = [shard.request_index(j) for j in range(shard.share(len(self.sessions)) or 0)]
        self.prompts = source.prompts(tokenizer, template)
        self.combo, self.stream = combo, step.prompt_stream or 0
        self.models: dict[str, str] = combo.workload.params.get("models") or {}
        self.issued = 0

    def key(self, j: int) -> int:
        """Session j's content key: its point's stream and its place."""
        return (self.stream << 32) | j

    def body(self, j: int, req: AgentRequest) -> bytes:
        """Request `req` of session j: a prompt of exactly its `in` tokens, asking for `out`.
        The body is json.dumps' of the API's body with that prompt, byte for byte; the prompt's
        JSON text (up to a MB) is put in as built (AgentTracePrompts.content), never encoded
        again, copied once."""
        content = self.prompts.content(self.sessions[j], self.key(j), req)
        head, mark, tail = self._encoded(req, _PROMPT_MARK).partition(_PROMPT_MARK_JSON)
        if not mark or _PROMPT_MARK_JSON in tail:  # the mark in a value of the spec's too: encode it whole
            return self._encoded(req, json.loads(b'"' + content + b'"'))
        return b"".join((head, content, tail))

    def _encoded(self, req: AgentRequest, text: str) -> bytes:
        w, target = self.combo.workload, self.combo.target
        prompt = Prompt(None, [{"role": "user", "content": text}], req.input_tokens, req.output_tokens)
        body = build_body(target, w.sampling, prompt, continuous_usage=target.continuous_usage)
        served = self.models.get(req.model or "")
        if served is not None and "model" in body:  # agent_trace.models: the trace's model, mapped
            body["model"] = served
        return json.dumps(body).encode()

    def consumed(self) -> int:
        return self.issued


class AgentReplayDriver:
    """plan/shapes.AgentReplay's driver (the protocol: run/drivers.py): sessions started
    `concurrency` at a time (a new one as one ends), at a seeded Poisson rate or on the traces'
    own start times (session_arrivals); each session replayed by replay_session, its every
    request sent and recorded by the step's own request life (Host.measured: the measured
    client, either HTTP path, either core). report() gives the point's fidelity verdict and
    per-session figures once it ran."""

    scheduled = False  # a session's requests wait on its own answers
    punctual = True  # ... and each goes at its think time's end: the step keeps an alarm (Host.measured)
    speedup = 1.0
    pace_s: float | None = None

    def __init__(self, shape: AgentReplay) -> None:
        self.shape = shape
        self.replayed: dict[int, list[Sent]] = {}  # by the session's index in the step
        self.feed: AgentFeed | None = None
        self.opened_ahead = 0  # connections opened before the first session (Host.open_ahead)

    def next_due_ns(self, now_ns: int) -> int | None:
        return None

    async def drive(self, host: Host) -> None:
        feed = host.feed
        assert isinstance(feed, AgentFeed)  # an agent_trace workload
        self.feed = feed
        n, shape = len(feed.mine), self.shape
        if shape.concurrency:
            # a session's subagents spawned together go right after the answer before them, often
            # with no wait: a connect in their sends' path made them late by its time (ms), so the
            # most requests the sessions in flight send at once find a connection each
            at_once = max((requests_at_once(feed.sessions[j]) for j in feed.mine), default=1)
            self.opened_ahead = await host.open_ahead(min(shape.concurrency, n) * at_once)
            for _ in range(min(shape.concurrency, n)):
                if not host.may_issue():
                    break
                host.start(self._slot(host, self._issue(host, feed), n))
        else:
            start = CLOCK()
            for _, due_s in self.arrivals(feed, host.seed):
                if not await host.until(start + round(due_s * 1e9)) or not host.may_issue():
                    break
                host.start(self._session(host, self._issue(host, feed)))
        while host.tasks:
            if not await host.room_or_stop():
                return

    def arrivals(self, feed: AgentFeed, seed: int) -> list[tuple[int, float]]:
        """(session index, due s after the step's start) of this worker's sessions, at a rate or
        on the traces' own times: their times in the whole step's schedule (session_arrivals),
        so a Ray worker's sessions start when they would locally."""
        dues = session_arrivals(feed.sessions, self.shape.rate_rps, self.shape.speedup, seed)
        return [(j, dues[j]) for j in feed.mine]

    @staticmethod
    def _issue(host: Host, feed: AgentFeed) -> int:
        """The next of this worker's sessions: its index in the step."""
        k = host.issue()
        feed.issued = max(feed.issued, k + 1)
        return feed.mine[k]

    async def _slot(self, host: Host, first: int, n: int) -> None:
        j = first
        while True:
            await self._session(host, j)
            if host.feed.issued >= n or not host.may_issue():
                return
            j = self._issue(host, host.feed)

    async def _session(self, host: Host, j: int) -> None:
        feed = self.feed
        assert feed is not None
        session = feed.sessions[j]
        # its start (the cache prediction, its first body: ms of the loop for a long context)
        # can wait for the other sessions' writes due meanwhile: none is then late by it
        await host.writes_first(CLOCK() + SESSION_START_NS, SESSION_START_NS)
        predicted = predicted_cached_tokens(session)
        own = (e for e in session.entries if isinstance(e, AgentRequest))
        depth = {e.path: k for k, e in enumerate(own, 1)}  # a session's own requests' turn depth

        async def send(req: AgentRequest, body: bytes, due_ns: int, written: Callable[[], None]) -> Answer:
            # its id (the x-request-id a server's log and the simulator's trace join on) names
            # the trace request it replays: session j's place, the request's JSON path
            rid = f"{uuid.uuid4().hex}-s{j}{req.path}"
            r = RequestRecord(rid, j, req.input_tokens, req.output_tokens)
            r.times.ready_ns, r.place = CLOCK(), SessionPlace(j, turn=depth.get(req.path))
            r.cache.shared_tokens = predicted[req.path]  # the tokens its hash ids say an earlier request sent
            # written at its think time's end, its connection readied ahead (as an open loop's)
            await host.measured(body, r, due_ns=due_ns, written=written)
            at = r.times
            ttft = at.first_text_ns - at.t0_ns if r.ok and at.first_text_ns else None
            return Answer(r.tokens.usage_input_tokens, r.output_tokens if r.ok else None,
                          r.cache.cached_tokens, at.t0_ns or None, at.end_ns, ttft)

        # held: in flight for the step's steady state, as a sessions step's session is
        sent = await host.held(replay_session(session, lambda req: feed.body(j, req), send,
                                              self.shape.time_scale, self.shape.max_think_s, host.until,
                                              SEND_LEAD_NS, host.writes_first))
        self.replayed[j] = sent
        ok = sum(x.answer.output_tokens is not None for x in sent)
        cut = len(sent) < len(session.requests())  # the step stopped (Ctrl-C) before the rest was due
        outcome = "failed" if ok < len(sent) else "cut" if cut else "completed"
        host.rec.add_session({"outcome": outcome, "turns": len(sent),
                             "completed_turns": ok, "start_ns": min((x.send_ns for x in sent), default=None),
                             "end_ns": max((x.end_ns for x in sent), default=None), "fan_out": []})

    def parts(self) -> ReplayParts:
        """What the point's `agent_replay` block is made of, per session it replayed: what a Ray
        worker carries back (ReplayParts.merged adds the workers' up)."""
        shape = self.shape
        sessions = self.feed.sessions if self.feed is not None else []  # none before it drove
        done = {j: SessionPart(sessions[j].id, shape.kv_block or sessions[j].block_size,
                               _session_checks(sessions[j], sent, shape.kv_block or 0),
                               session_figures(sessions[j], sent, shape.time_scale))
                for j, sent in self.replayed.items()}
        return ReplayParts(len(sessions), shape.time_scale, shape.max_think_s, done, self.opened_ahead)

    def report(self) -> dict:
        """The point's `agent_replay` block: the fidelity verdict over the sessions it replayed
        and each session's figures (session_figures), in session order."""
        return self.parts().report()


@dataclass(frozen=True)
class SessionPart:
    """One replayed session's share of the point's `agent_replay` block: its id, the block of its
    cache band, its checks (every request's lateness, order, tokens and cache against the
    trace: the verdict's inputs) and its figures."""

    id: str
    block: int
    checks: dict
    figures: dict


@dataclass(frozen=True)
class ReplayParts:
    """A replay's sessions (a point's, or a Ray worker's share of it), by their index in the
    step: the `agent_replay` block is a function of these, so the workers' parts merged give
    the block one local run of the same requests would. Clock-free (each time in them is a
    difference of one worker's stamps), so a shard from another machine needs no move."""

    traced: int  # the step's sessions (every worker's)
    time_scale: float
    max_think_s: float | None
    sessions: dict[int, SessionPart]
    opened_ahead: int = 0  # connections opened before the first session (every worker's)

    @classmethod
    def merged(cls, parts: list[ReplayParts]) -> ReplayParts:
        """The workers' parts of one point (each session on one worker: none is in two)."""
        every: dict[int, SessionPart] = {}
        for p in parts:
            if twice := every.keys() & p.sessions.keys():  # a split that dealt a session twice
                raise ValueError(f"sessions {sorted(twice)} were replayed by two workers")
            every.update(p.sessions)
        first = parts[0]
        opened = sum(p.opened_ahead for p in parts)
        return cls(first.traced, first.time_scale, first.max_think_s, every, opened)

    def report(self) -> dict:
        """The point's `agent_replay` block: the fidelity verdict over the sessions replayed and
        each session's figures, in session order."""
        done = [self.sessions[j] for j in sorted(self.sessions)]
        return {"sessions_replayed": len(done), "sessions_traced": self.traced,
                "time_scale": self.time_scale, "max_think_s": self.max_think_s,
                "connections_opened_ahead": self.opened_ahead,
                "fidelity": verdict([p.checks for p in done], [p.block for p in done]),
                "sessions": [{"id": p.id, **p.figures} for p in done]}


__all__ = ["Answer", "Sent", "Prepare", "Send", "Replay", "replay_session", "replay_sessions",
           "session_arrivals", "session_figures", "fidelity", "fidelity_of", "AgentFeed", "AgentReplayDriver",
           "scaled_ns", "requests_at_once", "THINK_BAND_MS", "CONTEXT_BUCKETS", "ReplayParts", "SessionPart",
           "verdict"]
