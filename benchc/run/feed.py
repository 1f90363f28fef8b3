"""The requests of one step: request bodies built from the plan's prompt source.

Bodies are built ahead of need, in a bounded window (json-encoded bytes, with a chat template
each one's exact input tokens counted there too): the first window before the step starts,
outside the measured window (what the step's start needs, StepFeed.need, and as much more as
PREBUILD_S builds), then while it runs, per turn of the event loop, as many as requests took
since the builder's last turn (StepFeed.keep_ahead), never into an open loop's due send. So the time to
the first request and the client's memory depend on the window, never on the step's request
ceiling (a step of 10^6 requests bound by time would otherwise spend seconds and gigabytes
before its first send), and a body is built between sends, not in a send's way. A request
whose body is not ready (the window ran dry) builds its own, counted in `built_late`.

Shards (Ray workers) share a step: each sends the request indices its Shard owns
(run/shards.py), so their prompts never overlap and together are the plan's.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from benchc.client.apis import prompt_text
from benchc.client.request import build_body
from benchc.plan.datasets import KINDS
from benchc.plan.images import synthetic_images
from benchc.plan.model import Combination, Step
from benchc.plan.prompts import NO_DEAL, Deal, PromptSource, pooled
from benchc.plan.shapes import Replay
from benchc.plan.trace import TracePrompts
from benchc.plan.workload import Prompt
from benchc.run.shards import WHOLE, Shard

# The window: at most WINDOW bodies and WINDOW_BYTES (long prompts), whatever the step's
# request ceiling. Before the step it is filled for PREBUILD_S, and longer until the step's
# need is ready (ROUNDS_AHEAD rounds of its units in flight, or ARRIVALS_AHEAD_S of an open
# loop's arrivals: a start's bursts, before the builder's turns pay back what each took),
# for at most PREBUILD_MAX_S (the time to the first request stays under a second whatever the
# prompts cost to build); the rest is built while the step runs (StepFeed.keep_ahead). By time
# alone, a step of 1024 in flight started with half its first 8192 built and built the rest
# during its measured window (benchmarks/run_ingest.py).
WINDOW = 8192
WINDOW_BYTES = 64 << 20
PREBUILD_S = 0.25
PREBUILD_MAX_S = 2.0
ROUNDS_AHEAD = 8
ARRIVALS_AHEAD_S = 2.0
# An open loop's send due sooner than the builder's estimate of one build and this much is
# left its turn: the builder waits for it rather than start a body that may end after it.
DUE_GUARD_NS = 100_000
# The event loop's timers round to the millisecond (uvloop's): a shorter sleep comes back at the
# loop's next turn, and a builder waiting for a send that near would spin through the loop's
# turns until it went (on a real-time loop thread, run/priority.py, taking its core from the
# receive loop's thread). It waits at least this long.
TIMER_S = 0.001


@dataclass(frozen=True)
class Request:
    body: bytes
    prompt: Prompt  # its counts and sharing; its text is in the body, and not held twice
    index: int  # the request's index in its step (the prompt stream's)
    expected_output_tokens: int | None  # the length the request pins down, if it does
    template_tokens: int | None = None  # its input as the server renders it (a chat template)
    images: int = 0  # images it carries (their bytes are in the body)
    tools: bool = False  # it offers the workload's tools
    inputs: int = 1  # the inputs it carries (workload.batch)


class StepFeed:
    """Request j of this worker's share of a step (j counts from 0 in issue order)."""

    def __init__(self, source: PromptSource, combo: Combination, step: Step, deal: Deal = NO_DEAL,
                 shard: Shard = WHOLE, template=None, window: int | None = None,
                 prebuild_s: float | None = PREBUILD_S):
        self.source, self.combo, self.step, self.deal, self.shard = source, combo, step, deal, shard
        self.template = template  # the model's chat template: each request's exact input tokens
        self.issued = 0  # how many this worker has handed out (its indices 0 .. issued-1)
        self.window = window or WINDOW
        self.built_late = 0  # requests that built their own body: the window ran dry
        self.most_ready = 0  # the most bodies held ready at once
        self.build_ns = 0  # one body's build (ns): the slowest lately, decaying by an eighth a body
        self._share = shard.share(step.requests)  # None: bound by time only
        self._ready: dict[int, Request] = {}  # built ahead, by j
        self._ready_bytes = 0
        self._next = 0  # the next j to build ahead
        self._owed = 0  # bodies taken since the builder's last turn (keep_ahead pays them back)
        self._taken = asyncio.Event()  # a request took a body: there is room again
        # the first window, before the step starts: its need, and what prebuild_s builds besides,
        # within PREBUILD_MAX_S (prebuild_s None: all of it, whatever it takes)
        start = time.perf_counter()
        need = self.need()
        # below this the builder no longer leaves a due send its turn (keep_ahead)
        self._low = max(1, need // 2)
        while self.build_ahead():
            if prebuild_s is None:
                continue
            elapsed = time.perf_counter() - start
            if elapsed >= PREBUILD_MAX_S or (elapsed >= prebuild_s and len(self._ready) >= need):
                break

    def need(self) -> int:
        """The bodies the step's start takes before the builder's turns (keep_ahead) keep up:
        ROUNDS_AHEAD rounds of its units in flight, or ARRIVALS_AHEAD_S of its open loop's
        arrivals (within the window and the worker's share)."""
        step = self.step
        if step.inflight_target:
            n = ROUNDS_AHEAD * step.inflight_target
        elif rate := step.shape.mean_rate_rps:
            n = int(ARRIVALS_AHEAD_S * rate)
        else:
            n = self.window
        n = min(n, self.window)
        return n if self._share is None else min(n, self._share)

    def build_ahead(self) -> bool:
        """Build the next body into the window, if it has room; whether one was built."""
        if len(self._ready) >= self.window or self._ready_bytes >= WINDOW_BYTES or \
                (self._share is not None and self._next >= self._share):
            return False
        t = time.perf_counter_ns()
        r = self._build(self._next)
        took = time.perf_counter_ns() - t
        # a slow body (a long prompt, a chat template's count) raises the estimate at once
        self.build_ns = took if took > self.build_ns else self.build_ns - (self.build_ns - took) // 8
        self._ready[self._next] = r
        self._ready_bytes += len(r.body)
        self._next += 1
        self.most_ready = max(self.most_ready, len(self._ready))
        return True

    async def keep_ahead(self, until_due: Callable[[], int | None] | None = None) -> None:
        """While the step runs: refill the window, per turn of the event loop as many bodies as
        requests took since the builder's last turn (at least one while it has room). A
        coalesced turn ends many requests, each taking a body: at one body per turn a closed
        loop's window ran dry after ROUNDS_AHEAD rounds (about half of a C=256 point's 4096
        bodies were built on the send path).

        `until_due`: in how many ns an open loop's next send goes (its next issue, or the write
        of one issued ahead), None while none is coming. A send nearer than one build (the
        estimate, build_ns, and DUE_GUARD_NS) is left its turn: the builder waits until it is
        due, then goes on. A send already overdue (its task not yet run) is late whatever the
        builder does: it then builds one body a turn, as it yields, rather than spin. Below
        half the step's need the window is refilled whatever is due, but one body a turn while
        a send is near: those bodies would otherwise be built on the send path, and an estimate
        raised by one slow build (a pause of the process) could keep a fast open loop's builder
        waiting at every send; a refill in one turn would hold the sends it waited for.

        Sleeps while the window is full; done once the worker's share is built (woken by
        every request's take, it cost a task's step per request)."""
        while self._share is None or self._next < self._share:
            owed, self._owed = max(1, self._owed), 0
            while owed:
                if until_due is not None and (left := until_due()) is not None and \
                        left < self.build_ns + DUE_GUARD_NS:
                    if left <= 0 or len(self._ready) < self._low:
                        # overdue, or the window below half: one body, then the send's turn
                        # (what the builder owes gathers while it waits for sends: paid in one
                        # turn, 32 bodies of 1k tokens would hold a send 5 ms)
                        self._owed += owed - 1
                        owed = 1
                    else:
                        self._owed += owed  # paid once the send has gone
                        await asyncio.sleep(max(left / 1e9, TIMER_S))
                        break
                if not self.build_ahead():
                    owed = 0
                    if self._share is not None and self._next >= self._share:
                        return
                    self._taken.clear()  # the window is full: until a request takes a body
                    await self._taken.wait()
                    break
                owed -= 1
            else:
                await asyncio.sleep(0)

    def get(self, j: int) -> Request:
        self.issued = max(self.issued, j + 1)
        r = self._ready.pop(j, None)
        if r is None:
            r = self._build(j)
            self.built_late += 1
            self._next = max(self._next, j + 1)
        else:
            self._ready_bytes -= len(r.body)
            self._owed += 1
        self._taken.set()
        return r

    def consumed(self) -> int:
        """How many of the step's prompt indices this worker's requests took (from 0, other
        shards' indices below its last counted): what the run has dealt once the step is over."""
        return self.shard.reach(self.issued) * self.combo.workload.batch

    def _prompt(self, i: int, batch: int) -> Prompt:
        """Request i's prompt: the prompt stream's i-th, or with a batch of n inputs
        (embeddings) its prompts n*i .. n*i+n-1 as one prompt of n inputs."""
        stream = self.step.prompt_stream or 0
        if batch == 1:
            return self.source.prompt(stream, i, self.deal)
        parts = [self.source.prompt(stream, i * batch + k, self.deal) for k in range(batch)]
        shared = [p.shared_tokens for p in parts]
        return Prompt(None, None, sum(p.input_tokens for p in parts), None,
                      shared_tokens=None if None in shared else sum(shared),  # type: ignore[arg-type]
                      reused=any(p.reused for p in parts), inputs=tuple(prompt_text(p) for p in parts))

    def arrivals(self) -> Iterable[float]:
        """When a replay's requests are due, in seconds from its start: the trace's own times
        over its speedup (run/drivers.py's replay driver asks)."""
        assert isinstance(self.source, TracePrompts)  # the compiler allows a replay only there
        replay = self.step.shape
        assert isinstance(replay, Replay)
        return self.source.arrivals(replay.speedup)

    def _build(self, j: int) -> Request:
        i = self.shard.request_index(j)
        w, target = self.combo.workload, self.combo.target
        prompt = self._prompt(i, w.batch)
        if w.images:  # the request's own images; a shared prompt's are the same each time it goes
            pool = w.num_prompts if w.prompts == "shared" else None
            at = pooled(pool, i, self.deal)[:2] if pool else (self.step.prompt_stream or 0, i)
            prompt = replace(prompt, images=prompt.images + synthetic_images(w.images, w.params["seed"], *at))
        if w.tools:  # every request offers the tools: their tokens on top, shared by all (a prefix)
            n = w.tools["tokens"]
            prompt = replace(prompt, input_tokens=prompt.input_tokens + n,
                             shared_tokens=None if prompt.shared_tokens is None else prompt.shared_tokens + n)
        body = build_body(target, w.sampling, prompt, continuous_usage=target.continuous_usage, tools=w.tools)
        pin = w.params.get("min_tokens", False) and prompt.output_tokens is not None \
            and w.sampling.max_tokens is None
        if pin:  # the dataset asks min_tokens = this request's own output length
            body["min_tokens"] = prompt.output_tokens
        exact = None if self.template is None else self.template.count(body["messages"], body.get("tools"))
        return Request(json.dumps(body).encode(),
                       replace(prompt, text=None, messages=None, images=(), inputs=None), i,
                       expected_output(w.sampling, prompt, pin), exact, images=len(prompt.images),
                       tools=w.tools is not None, inputs=w.batch)


def expected_output(s, prompt: Prompt, pinned: bool = False) -> int | None:
    """The output length the request pins down (ignore_eos, or min_tokens = max_tokens, or the
    dataset's own min_tokens per request)."""
    mt = s.max_tokens or prompt.output_tokens
    fixed = s.ignore_eos or pinned or (s.min_tokens is not None and s.min_tokens == mt)
    return mt if fixed else None


class Dealer:
    """What a run has dealt from each prompt pool (a file's items, a shared set), so the next
    step's requests continue the deal (fresh) or know what was sent before (shared). Pools
    are told apart by their digest: two combinations with the same dataset share one."""

    def __init__(self) -> None:
        self._dealt: dict[str, int] = {}  # fresh: positions dealt so far
        self._seen: dict[str, int] = {}  # shared: items sent so far (the pool's first ones)

    def deal(self, workload) -> Deal:
        if workload.num_prompts is None:
            return Deal()  # endless: every prompt new, nothing to count
        key = workload.prompts_sha256
        if _continues(workload):
            return Deal(start=self._dealt.get(key, 0))
        return Deal(seen=self._seen.get(key, 0))

    def took(self, workload, consumed: int) -> None:
        """A step of this workload took `consumed` of its indices (StepFeed.consumed)."""
        if workload.num_prompts is None:
            return
        key = workload.prompts_sha256
        if _continues(workload):
            self._dealt[key] = self._dealt.get(key, 0) + consumed
        else:
            self._seen[key] = max(self._seen.get(key, 0), min(workload.num_prompts, consumed))


def _continues(workload) -> bool:
    """Whether a step deals the pool's next items (a file, fresh) rather than the pool from its
    first item (prompts: shared; a trace, which every point replays from its first row)."""
    return workload.prompts == "fresh" and not KINDS[workload.dataset].replays
