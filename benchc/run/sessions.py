"""Sessions, sent: a step's conversations (SessionFeed), each one's growing history
(Conversation), and the turn loop of one session (run_session).

Turn k's request is the session's history -- every earlier turn's messages and, after each,
the answer the server streamed for it (the content, not any reasoning: chat templates drop
reasoning from the history, as the servers' own clients do) -- then turn k's new messages.
The answer is known only once turn k-1 ended, so each turn's body is built when it is due,
not ahead like a single prompt's (run/feed.py).

When a turn is due (plan/sessions.py says which rule a session follows):
- think time: its `think_s` after the previous turn's end (the read that ended its stream);
- a trace's times: the session's first turn's due time plus the turn's `at_s` over the
  speedup, and never before the previous turn ended;
- user-centric pace (load.sweep.users): the previous turn's send plus turn_interval, and
  never before the previous turn ended.
A turn that failed ends its session (its answer, which the next turn would carry, is
missing); a stop condition or Ctrl-C ends a session between turns (`cut`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from benchc import redact
from benchc.client.apis import APIS
from benchc.client.request import CLOCK, build_body
from benchc.metrics.record import CacheUse, Payload, RequestRecord, SessionPlace, Times
from benchc.plan.images import synthetic_images
from benchc.plan.model import Combination, Step
from benchc.plan.prompts import NO_DEAL, Deal
from benchc.plan.sessions import Session, ToolResults, Turn
from benchc.plan.shapes import Replay
from benchc.plan.workload import Prompt
from benchc.run.feed import expected_output
from benchc.run.shards import WHOLE, Shard
from benchc.spec.limits import MAX_TOKENS

log = logging.getLogger(__name__)


class SessionFeed:
    """Session j of this worker's share of a step (j counts from 0 in start order); a shard
    (run/shards.py) numbers its sessions as StepFeed does its requests."""

    sessions = True

    def __init__(self, source, combo: Combination, step: Step, deal: Deal = NO_DEAL, shard: Shard = WHOLE,
                 tokenizer=None, template=None):
        self.source, self.combo, self.step, self.deal, self.shard = source, combo, step, deal, shard
        self.tokenizer = tokenizer
        self.template = template  # a chat template: turns keep their messages, counted after the point
        self.issued = 0
        agent = combo.workload.agent  # agent loops: a tool call's answer is a tool result
        self.tools = ToolResults(agent, combo.workload.params["seed"], tokenizer) if agent else None

    def get(self, j: int) -> tuple[int, Session]:
        """(the session's index in its step, its script)."""
        self.issued = max(self.issued, j + 1)
        i = self.shard.request_index(j)
        return i, self.source.session(self.step.prompt_stream or 0, i, self.deal)

    def consumed(self) -> int:
        """The step's session indices taken (as StepFeed.consumed counts requests)."""
        return self.shard.reach(self.issued)

    def arrivals(self) -> Iterable[float]:
        """A replayed trace's sessions' start times over its speedup (run/drivers.py)."""
        replay = self.step.shape
        assert isinstance(replay, Replay)
        return self.source.arrivals(replay.speedup)

    def conversation(self, session: Session, index: int = 0) -> Conversation:
        """Session `index`'s conversation (the index names its tool results)."""
        return Conversation(session, self.combo, self.tokenizer, self.template is not None, self.tools,
                            (self.step.prompt_stream or 0, index))


def _words(text: str) -> int:
    return len(text.split())


_IMAGE_PARTS = ("image_url", "input_image", "image")  # an image content part, in each API's form


def _images_in(message: dict) -> int:
    content = message.get("content")
    return sum(isinstance(p, dict) and p.get("type") in _IMAGE_PARTS for p in content) \
        if isinstance(content, list) else 0


SUB_AGENT = 1 << 20  # the call numbers of sub-agents' tasks (a round's own calls count from 0)


class Conversation:
    """One session's history and the body of its next request: a turn (the history, then the
    turn's new messages), or, in an agent loop, a follow-up (the history, which ends with the
    tool results of the answer before)."""

    def __init__(self, session: Session, combo: Combination, tokenizer=None, keep_messages: bool = False,
                 tools: ToolResults | None = None, name: tuple[int, int] = (0, 0)):
        self.session, self.combo = session, combo
        self.keep_messages = keep_messages
        self.messages: list[dict] | None = None  # the last turn's, when kept
        self.history: list[dict] = []
        self.history_tokens = 0  # benchc's count of the history (answers by the tokenizer, else words)
        self.count = tokenizer.count if tokenizer is not None else _words
        self._new = 0  # tokens of the messages of the request last built, not yet in the history
        self._pending: list[dict] = []  # ... and those messages
        self.tools = tools  # the agent loop's tool results, or None
        self.name = name  # (prompt stream, session index): names the tool results
        self.tool_steps = 0  # tool rounds answered so far (each one's results are new)
        self._results = 0  # tokens of the last tool round's results
        offered = combo.workload.tools  # the workload's tools: their names name a streamed call
        self.tool_names = [d["function"]["name"] for d in offered["definitions"]] if offered else []
        self.tools_tokens = offered["tokens"] if offered else 0  # every request's, shared by all
        # previous_response_id (workload.history): the server keeps the conversation; a request
        # sends what the history gained since the response it names (self.held: the messages
        # that response covers), the whole history where no response named one
        self.by_id = (combo.workload.sessions or {}).get("history") == "previous_response_id"
        self.response_id: str | None = None
        self.held = 0
        self.user_turns = 0  # turns sent (each user message's images are its own)
        self.images = 0  # images the request last built carries (its history's and its own)

    def _request(self, messages: list[dict], n_in: int, output_tokens: int | None,
                 own: int | None) -> tuple[bytes, int, int | None, int | None]:
        w, target = self.combo.workload, self.combo.target
        self.messages = messages if self.keep_messages else None
        n_in += self.tools_tokens  # the tool definitions come with every request (shared)
        previous = self.response_id if self.by_id else None
        sent = messages[self.held:] if previous else messages
        self.images = sum(_images_in(m) for m in sent)
        prompt = Prompt(None, sent, n_in, output_tokens)
        body = build_body(target, w.sampling, prompt, continuous_usage=target.continuous_usage, tools=w.tools,
                          previous_response_id=previous)
        shared = None if own is None else n_in - own
        return json.dumps(body).encode(), n_in, shared, expected_output(w.sampling, prompt)

    def turn(self, turn: Turn) -> tuple[bytes, int, int | None, int | None]:
        """(body, input tokens, shared tokens, expected output tokens) of a turn: the history,
        then its messages. Its shared tokens are all but its own: the history is the session's
        earlier turns' (None where nobody can say: a user's text)."""
        new = turn.own_tokens + turn.shared_tokens if turn.own_tokens is not None else \
            sum(max(1, _words(str(m.get("content", "")))) for m in turn.messages)
        self._new, self._pending = new, self._with_images(turn.messages)
        self.user_turns += 1
        return self._request(self.history + self._pending, self.history_tokens + new, turn.output_tokens,
                             turn.own_tokens)

    def _with_images(self, messages: list[dict]) -> list[dict]:
        """A turn's messages, its user message carrying the turn's own images (workload.images:
        image k of (seed, stream, session) from (turn - 1) x count on, a pure function like every
        synthetic prompt) in the API's form; the history keeps them, so every later turn sends
        them again, as a client sends a conversation's images."""
        params = self.combo.workload.images
        if not params or not messages:
            return list(messages)
        stream, index = self.name
        images = synthetic_images(params, self.combo.workload.params["seed"], stream, index,
                                  self.user_turns * params["count"])
        return messages[:-1] + APIS[self.combo.target.api].with_images(messages[-1:], images)

    def sub_requests(self, turn: Turn) -> list[tuple[bytes, int, int | None]]:
        """The sub-agents of the tool round last answered (fan-out): (body, input tokens,
        expected output tokens) each. Sub-agent j starts a context of its own -- one user
        message, a task of tool_result_tokens (a result-like text, its marker naming the round
        and j) -- and answers at the turn's length, without tools."""
        assert self.tools is not None
        w, target = self.combo.workload, self.combo.target
        stream, index = self.name
        out = []
        for j in range(self.tools.fan_out):
            text, n, _ = self.tools.result(stream, index, self.tool_steps, SUB_AGENT + j)
            prompt = Prompt(None, [{"role": "user", "content": text}], n, turn.output_tokens)
            body = build_body(target, w.sampling, prompt, continuous_usage=target.continuous_usage)
            out.append((json.dumps(body).encode(), n, expected_output(w.sampling, prompt)))
        return out

    def follow_up(self, turn: Turn) -> tuple[bytes, int, int | None, int | None]:
        """An agent loop's next request, after a tool round: the history (ending with the tool
        results, the one part of it the server has not seen), asking for the turn's answer
        length. Shared: all but the tool results."""
        self._new, self._pending = 0, []
        return self._request(list(self.history), self.history_tokens, turn.output_tokens, self._results)

    def answered(self, turn: Turn, answer: str, response_id: str | None = None) -> None:
        """The request's new messages and the server's answer join the history (`response_id`:
        the server's id of that answer, which holds the history so far)."""
        self.history += self._pending
        self.history.append({"role": "assistant", "content": answer})
        self.history_tokens += self._new + self.count(answer)
        self._new, self._pending = 0, []
        self._held(response_id)
        self._bounded()

    def _held(self, response_id: str | None) -> None:
        """The history so far is what the server keeps under `response_id` (None: it named none,
        and the next request sends the whole history)."""
        self.response_id, self.held = response_id, len(self.history) if response_id else 0

    def called(self, content: str, calls: list[dict], response_id: str | None = None) -> float:
        """The answer was tool calls (`calls`: {id, name, arguments} as the server streamed
        them): the request's new messages, the assistant's calls, then each call's synthetic
        result join the history, in the chat form (client/apis.py writes other APIs' forms;
        `response_id` as for `answered`: the server holds the history through the calls).
        Returns the tools' latency in seconds: they run side by side, the slowest decides."""
        assert self.tools is not None
        self.tool_steps += 1
        stream, index = self.name
        self.history += self._pending
        wire = [{"id": c["id"], "type": "function",
                 "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]
        self.history.append({"role": "assistant", "content": content or None, "tool_calls": wire})
        self._held(response_id)
        tokens = self._new + self.count(content) if content else self._new
        results, latency = 0, 0.0
        for k, c in enumerate(calls):
            text, n, took = self.tools.result(stream, index, self.tool_steps, k)
            self.history.append({"role": "tool", "tool_call_id": c["id"], "content": text})
            tokens += self.count(f"{c['name']} {c['arguments']}")
            results += n
            latency = max(latency, took)
        self.history_tokens += tokens + results
        self._results = results
        self._new, self._pending = 0, []
        self._bounded()
        return latency

    def _bounded(self) -> None:
        """The history may grow only up to what one request may carry (the spec's ceiling on a
        request's tokens): past it, the answers made it so and the session ends (its guard
        counts it)."""
        if self.history_tokens > MAX_TOKENS:
            raise HistoryPastCeiling(f"the history holds {self.history_tokens:,} tokens, past the "
                                     f"{MAX_TOKENS:,} one request may carry")


@dataclass
class SessionEnv:
    """What a session needs of the step that runs it (run/loadgen.py)."""

    measured: Callable[[bytes, RequestRecord], Awaitable[None]]  # send one turn, record it
    may_continue: Callable[..., bool]  # a next turn may start (now, or at a time in ns): no stop reached
    until: Callable[[int], Awaitable[bool]]  # wait until a time (ns); False: the step was stopped
    took_turn: Callable[[], None]  # a turn after the first goes (the step's request count)
    done: Callable[[dict], None]  # the session is over: what it did (PointRecorder.add_session)
    open_loop: bool  # turns keep a scheduled time (latencies from schedule)
    speedup: float = 1.0  # a trace's times are over this
    pace_s: float | None = None  # user-centric: a turn's send this long after the previous one's


async def run_session(env: SessionEnv, conv: Conversation, index: int, scheduled_ns: int | None,
                      ready_ns: int) -> int:
    """Send a session's turns in order; returns the send time (ns) of its last turn sent.

    In an agent loop (conv.tools), a request answered by tool calls is followed, after the
    tools' latency, by a request carrying their results, until an answer calls no tool or the
    user message has had max_tool_calls rounds; then the next turn goes, its think time after
    the last answer. Every request counts as a turn of the session (its `turn` numbers them
    all: 1, 2, ...), so the per-turn figures follow the conversation as it grows."""
    run = _SessionRun(env, conv, index, scheduled_ns, ready_ns)
    errors: dict[str, int] = {}
    try:
        await run.turns()
    except Exception as e:
        # What an answer holds may break reading it (tool-call arguments nested 100,000 deep:
        # RecursionError; a huge tool result: MemoryError): the session ends, failed, its
        # error named and counted, and the step goes on (before, the slot's task died unseen)
        run.outcome = "failed"
        errors[type(e).__name__] = 1
        log.warning("session %d ended: %s", index, redact.clip(f"{type(e).__name__}: {e}", 300))
    env.done({"outcome": run.outcome, "turns": run.sent, "completed_turns": run.ok,
              "start_ns": run.start_ns, "end_ns": run.end_ns, "fan_out": run.fan_out, "errors": errors})
    return run.prev_send if run.prev_send is not None else ready_ns


class _SessionRun:
    """One session's turn loop (run_session) and what it has done so far: the requests sent and
    completed, the first send and the last end, how it ended (`outcome`: completed, cut by the
    step's stop, or failed)."""

    def __init__(self, env: SessionEnv, conv: Conversation, index: int, scheduled_ns: int | None,
                 ready_ns: int):
        self.env, self.conv, self.index = env, conv, index
        self.scheduled_ns, self.ready_ns = scheduled_ns, ready_ns
        # a trace's turn times count from the session's first due time
        self.first_due = scheduled_ns if scheduled_ns is not None else ready_ns
        self.prev_end: int | None = None  # the previous request's end and send (set once one completed)
        self.prev_send: int | None = None
        self.sent = self.ok = 0
        self.start_ns: int | None = None
        self.end_ns: int | None = None
        self.outcome = "completed"
        self.fan_out: list[tuple[int, int]] = []  # per round run as sub-requests: (how many, its time in ns)

    async def turns(self) -> None:
        """Each turn in order (with its tool rounds), until the last, a failed one, or the step's
        stop (`outcome` says which)."""
        conv = self.conv
        for k, turn in enumerate(conv.session.turns, 1):
            due = self.ready_ns
            if k > 1:
                due = self._due(turn)
                if not await self._wait(due):
                    self.outcome = "cut"
                    return
            sched = self.scheduled_ns if k == 1 else (due if self.env.open_loop else None)
            r = await self._send(functools.partial(conv.turn, turn), due, sched, k == 1)
            last = await self._tool_rounds(turn, r)
            if last is None:
                self.outcome = "cut"
                return
            if not last.ok:
                self.outcome = "failed"
                return
            if not (conv.tools is not None and tool_calls(last, conv.tool_names)):
                conv.answered(turn, last.parser.answer_text(), last.parser.response_id)
            self.prev_end, self.prev_send = last.times.end_ns, last.times.t0_ns

    def _due(self, turn: Turn) -> int:
        """When a turn after the first is due (the module's docstring gives the rules)."""
        prev_end, prev_send = self.prev_end, self.prev_send
        assert prev_end is not None and prev_send is not None  # turn k-1 completed, else it ended
        if self.env.pace_s is not None:
            return max(prev_send + int(self.env.pace_s * 1e9), prev_end)
        if turn.at_s is not None:
            return max(self.first_due + int(turn.at_s / self.env.speedup * 1e9), prev_end)
        return prev_end + int(turn.think_s * 1e9)

    async def _tool_rounds(self, turn: Turn, r: RequestRecord) -> RequestRecord | None:
        """An agent loop's rounds after request `r`: while an answer calls tools, their results
        (after the tools' latency, or the sub-agents' round) go back in a follow-up, up to
        max_tool_calls rounds. Returns the last request's record; None: the step stopped
        between rounds (the session is cut)."""
        conv, env = self.conv, self.env
        rounds = 0
        while r.ok and conv.tools is not None and (calls := tool_calls(r, conv.tool_names)):
            rounds += 1
            latency_s = conv.called(r.parser.answer_text(), calls, r.parser.response_id)
            self.prev_end, self.prev_send = r.times.end_ns, r.times.t0_ns
            if rounds > conv.tools.max_rounds:  # the results stay in the history; the user goes on
                break
            assert r.times.end_ns is not None  # a completed request has ended
            due = r.times.end_ns + int(latency_s * 1e9)
            if conv.tools.fan_out > 1:  # sub-agents: the round is over when the slowest is
                if not env.may_continue():
                    return None
                due = await self._sub_agents(turn, r.times.end_ns)
            if not await self._wait(due):
                return None
            sched = due if env.open_loop else None
            r = await self._send(functools.partial(conv.follow_up, turn), due, sched, False)
        return r

    async def _sub_agents(self, turn: Turn, ready_ns: int) -> int:
        """A tool round run as sub-requests (fan-out): returns when it is over (the slowest
        one's end, ns), and counts the round in `fan_out`."""
        subs = await _sub_requests(self.env, self.conv, turn, self.index, self.conv.session.reused, ready_ns)
        first = min(x.times.t0_ns for x in subs)
        over = max(x.times.end_ns or first for x in subs)
        self.fan_out.append((len(subs), over - first))
        return over

    async def _wait(self, due: int) -> bool:
        """Whether the next request may go at `due` (False: the step stopped; the session is cut)."""
        env = self.env
        # a request due past the step's deadline never goes: no waiting out its think time
        if not env.may_continue(due) or not await env.until(due) or not env.may_continue():
            return False
        env.took_turn()
        return True

    async def _send(self, build: Callable[[], tuple[bytes, int, int | None, int | None]], due: int,
                    sched: int | None, first: bool) -> RequestRecord:
        """Build a request when it goes (a turn's body needs the answers before it), send it,
        and count it as the session's next turn."""
        conv = self.conv
        body, n_in, shared, expected = build()
        r = RequestRecord(id=uuid.uuid4().hex, prompt_index=self.index, input_tokens=n_in,
                          expected_output_tokens=expected,
                          times=Times(scheduled_ns=sched, ready_ns=due,
                                      queued_ns=due - sched if sched is not None and first else 0),
                          cache=CacheUse(shared_tokens=shared, reused=conv.session.reused),
                          payload=Payload(tools=conv.combo.workload.tools is not None, images=conv.images),
                          place=SessionPlace(self.index, turn=self.sent + 1, prev_end_ns=self.prev_end,
                                             messages=conv.messages))
        await self.env.measured(body, r)
        self.sent += 1
        self.ok += r.ok
        self.start_ns = r.times.t0_ns if self.start_ns is None else self.start_ns
        self.end_ns = r.times.end_ns
        return r


async def _sub_requests(env: SessionEnv, conv: Conversation, turn: Turn, index: int, reused: bool,
                        ready_ns: int) -> list[RequestRecord]:
    """A tool round's sub-agents, sent side by side and measured as requests of the point (not
    as turns of the session: their `turn` is None); returns their records once all ended."""
    built = conv.sub_requests(turn)
    recs = [RequestRecord(id=uuid.uuid4().hex, prompt_index=index, input_tokens=n, expected_output_tokens=exp,
                          times=Times(ready_ns=ready_ns), cache=CacheUse(shared_tokens=0, reused=reused),
                          place=SessionPlace(index))
            for _, n, exp in built]
    await asyncio.gather(*(env.measured(body, r) for (body, _, _), r in zip(built, recs, strict=True)))
    return recs


def tool_calls(r: RequestRecord, names: Iterable[str] = ()) -> list[dict]:
    """The tool calls a completed answer made, as {id, name, arguments} (the arguments' text as
    streamed), or [] when it called none: at most MAX_CALLS_PER_ANSWER, the first ones (each
    call's result joins the history: 100,000 parallel calls in an 8 MB answer made one 218 MB
    follow-up). The stream parser keeps each call's name and argument pieces apart by the
    call index the server streamed (its tool_call_texts: interleaved parallel calls stay
    apart); where one index carried them all, split_tool_text parts the text. The server's
    call id is not kept: each call gets one made from the request's id (servers match a tool
    message to its call by position, and vLLM does not check the id)."""
    texts = r.parser.tool_call_texts() if getattr(r.parser, "tool_chunks", 0) else []
    if len(texts) > 1:
        calls = [one_call(t, names) for t in texts[:MAX_CALLS_PER_ANSWER]]
    else:
        calls = split_tool_text(texts[0] if texts else "", names)[:MAX_CALLS_PER_ANSWER]
    return [{"id": f"call_{r.id[:16]}_{k}", "name": name, "arguments": args}
            for k, (name, args) in enumerate(calls)]


# Parallel calls of one answer that are answered (the rest are not sent back): far more than
# agents make in one round (a few to a few dozen), few enough that one answer cannot multiply
# the next request past what its spec's ceilings allow.
MAX_CALLS_PER_ANSWER = 128


class HistoryPastCeiling(Exception):
    """A session's history grew past the tokens one request may carry (spec/limits.py
    MAX_TOKENS): what the server streamed back made it so, and the session ends."""


_JSON = json.JSONDecoder()


def split_tool_text(text: str, names: Iterable[str] = ()) -> list[tuple[str, str]]:
    """(name, arguments) of each call in a stream's tool text: each call's name, then its
    arguments. Where every call's arguments are a JSON object (real servers: name1{...}name2
    {...}), each name is what precedes its object; else one call, named by the longest
    workload tool name the text starts with, or its first word, its arguments the rest (the
    simulator streams a name word and argument words)."""
    stripped = text.strip()
    if not stripped:
        return []
    calls, pos = [], 0
    while pos < len(text):
        brace = text.find("{", pos)
        if brace < 0:
            break
        try:
            _, end = _JSON.raw_decode(text, brace)
        except (ValueError, RecursionError):  # not JSON, or nested past what the decoder follows
            break
        name = text[pos:brace].strip()
        if not name:
            break
        calls.append((name, text[brace:end]))
        pos = end
    if calls and not text[pos:].strip():
        return calls
    known = sorted((n for n in names if stripped.startswith(n)), key=len, reverse=True)
    if known:
        name = known[0]
    else:  # a first word, before any argument object (a call cut short by max_tokens)
        m = re.match(r"[^\s{]+", stripped)
        name = m.group() if m else ""
    return [(name, stripped[len(name):])]


def one_call(text: str, names: Iterable[str] = ()) -> tuple[str, str]:
    """(name, arguments) of one call's text: its name (split_tool_text's), the rest its arguments."""
    parts = split_tool_text(text, names)
    if len(parts) == 1:
        return parts[0]
    name = parts[0][0] if parts else ""
    return name, text.strip()[len(name):]


async def until(due_ns: int, stop_wait: asyncio.Task) -> bool:
    """Wait until `due_ns` (CLOCK); False as soon as the step is stopped. Again until due:
    uvloop's timers round to the millisecond and may fire up to half of one early."""
    while (delay := (due_ns - CLOCK()) / 1e9) > 0:
        done, _ = await asyncio.wait({stop_wait}, timeout=delay)
        if done:
            return False
    return not stop_wait.done()


__all__ = ["SessionFeed", "Conversation", "SessionEnv", "run_session", "until"]
