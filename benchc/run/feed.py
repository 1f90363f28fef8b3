"""The requests of one step: request bodies built from the plan's prompt source.

A step's bodies are built before it starts, outside the measured window (with a chat template,
each one's exact input tokens counted there too), up to PREBUILD_BYTES
(a step of 10^5 long prompts would otherwise hold gigabytes); past those, and past
DURATION_PREBUILD requests of a step bound by time only, each body is built when its
request is issued (a random prompt of 1k words costs some tens of microseconds; the client
self-check sees that cost like any other).

Shards (Ray workers) share a step: each sends the request indices its Shard owns
(run/shards.py), so their prompts never overlap and together are the plan's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace

from benchc.client.request import build_body
from benchc.plan.datasets import KINDS
from benchc.plan.images import synthetic_images
from benchc.plan.model import Combination, Step
from benchc.plan.prompts import NO_DEAL, Deal, PromptSource, pooled
from benchc.plan.trace import TracePrompts
from benchc.plan.workload import Prompt
from benchc.run.shards import WHOLE, Shard

PREBUILD_BYTES = 64 << 20
DURATION_PREBUILD = 1000


@dataclass(frozen=True)
class Request:
    body: bytes
    prompt: Prompt  # its counts and sharing; its text is in the body, and not held twice
    index: int  # the request's index in its step (the prompt stream's)
    expected_output_tokens: int | None  # the length the request pins down, if it does
    template_tokens: int | None = None  # its input as the server renders it (a chat template)
    images: int = 0  # images it carries (their bytes are in the body)
    tools: bool = False  # it offers the workload's tools


class StepFeed:
    """Request j of this worker's share of a step (j counts from 0 in issue order)."""

    def __init__(self, source: PromptSource, combo: Combination, step: Step, deal: Deal = NO_DEAL,
                 shard: Shard = WHOLE, template=None):
        self.source, self.combo, self.step, self.deal, self.shard = source, combo, step, deal, shard
        self.template = template  # the model's chat template: each request's exact input tokens
        self.issued = 0  # how many this worker has handed out (its indices 0 .. issued-1)
        self._built: list[Request] = []
        share = shard.share(step.requests)
        if share is None:
            share = DURATION_PREBUILD
        size = 0
        while len(self._built) < share and size < PREBUILD_BYTES:
            r = self._build(len(self._built))
            self._built.append(r)
            size += len(r.body)

    def get(self, j: int) -> Request:
        self.issued = max(self.issued, j + 1)
        return self._built[j] if j < len(self._built) else self._build(j)

    def consumed(self) -> int:
        """How many of the step's indices this worker's requests took (from 0, other shards'
        indices below its last counted): what the run has dealt once the step is over."""
        return self.shard.reach(self.issued)

    def arrivals(self) -> Iterable[float] | None:
        """When the step's requests are due, in seconds from its start, where its prompts set
        the schedule (a trace replayed on its own times); None where the step's arrival
        process does (run/loadgen.arrival_times)."""
        if self.step.arrival != "trace":
            return None
        assert isinstance(self.source, TracePrompts)  # the compiler allows arrival: trace only there
        return self.source.arrivals(self.step.speedup or 1.0)

    def _build(self, j: int) -> Request:
        i = self.shard.request_index(j)
        stream = self.step.prompt_stream or 0
        prompt = self.source.prompt(stream, i, self.deal)
        w, target = self.combo.workload, self.combo.target
        if w.images:  # the request's own images; a shared prompt's are the same each time it goes
            pool = w.num_prompts if w.prompts == "shared" else None
            at = pooled(pool, i, self.deal)[:2] if pool else (stream, i)
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
        return Request(json.dumps(body).encode(), replace(prompt, text=None, messages=None, images=()), i,
                       expected_output(w.sampling, prompt, pin), exact, len(prompt.images),
                       w.tools is not None)


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
