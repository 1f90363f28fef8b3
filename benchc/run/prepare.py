"""What a point needs before it is measured, shared by the local and the Ray backend:
the combination's prompt source rebuilt from the plan and checked against it, the tokenizer,
the SLO checks (prepare -> Prepared), each step's requests (feed: run/feed.py), and a
collector-free measuring window.

The driver reads the spec's files (a dataset, the tokenizer); a Ray worker, which may run on
a machine without them, rebuilds the same Prepared from the plan and a Kit the driver sends:
the dataset's items and the tokenizer file's bytes (random prompts are a pure function of
the plan and need nothing more).
"""

from __future__ import annotations

import contextlib
import gc
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from benchc.errors import RunError
from benchc.plan.agent_trace import AgentSession
from benchc.plan.agent_trace_prompts import AgentTraceSource
from benchc.plan.compiler import bind_template, find_template, load_tokenizer, tokenizer_path
from benchc.plan.datasets import make_source
from benchc.plan.model import Combination, Plan, Step
from benchc.plan.prompts import Deal, FilePrompts, PromptSource, source_digest, step_count, step_digest
from benchc.plan.sessions import is_sessions
from benchc.plan.trace import Trace, TracePrompts
from benchc.plan.workload import Prompt
from benchc.results.slo import slo_thresholds
from benchc.run.agent_replay import AgentFeed
from benchc.run.feed import StepFeed
from benchc.run.sessions import SessionFeed
from benchc.run.shards import WHOLE, Shard
from benchc.spec.thresholds import Threshold
from benchc.tokenizer.tokenizer import load, tokenizer_files


@dataclass(frozen=True)
class TokenizerCopy:
    """A tokenizer's files (a file, or a model directory's tokenizer files), to load where
    they are not: a Ray worker without the spec's files."""

    how: str  # tokenizer.tokenizer_files: "file", "dir" or "ENCODING:"
    files: dict[str, bytes]  # file name -> bytes

    @classmethod
    def read(cls, path: str) -> TokenizerCopy:
        how, files = tokenizer_files(path)
        data = {}
        for f in files:
            with open(f, "rb") as fh:
                data[os.path.basename(f)] = fh.read()
        return cls(how, data)

    def load(self) -> Any:
        # the loaders read files: a private copy, gone once loaded
        with tempfile.TemporaryDirectory(prefix="benchc-tokenizer-") as d:
            for name, data in self.files.items():
                with open(os.path.join(d, name), "wb") as f:
                    f.write(data)
            if self.how == "dir":
                return load(d)
            copy = os.path.join(d, next(iter(self.files)))
            return load(self.how + copy if self.how.endswith(":") else copy)


@dataclass(frozen=True)
class Kit:
    """What a worker needs besides the plan to rebuild a combination's Prepared without the
    spec's files: a file dataset's items (in dealing order) and the tokenizer's bytes."""

    items: list[Prompt] | None = None
    tokenizer: TokenizerCopy | None = None
    trace: Trace | None = None  # a trace dataset's slice, its users' prompts read in (portable)
    chat_template: tuple | None = None  # the model's chat template as found (text, file, config)
    # a coding-agent trace's sessions as the driver read and checked them, and their digest: each
    # worker replays its share of them (plan/shapes.AgentReplay.divide) from these, not from the
    # trace files, which its machine need not have
    agent_sessions: tuple[list[AgentSession], str] | None = None


@dataclass(frozen=True)
class Prepared:
    """What every point of a combination sends and checks, rebuilt from the plan (on the
    driver, and again in each Ray worker)."""

    combo: Combination
    source: PromptSource  # the plan's prompts, built on demand (plan/prompts.py)
    tokenizer: Any  # the target's tokenizer (outputs are counted with it after each point), or None
    slo_checks: list[Threshold]  # each completed request is checked against these (goodput)
    keep_requests: bool  # output.requests: keep a record per request
    tokenizer_copy: TokenizerCopy | None = None  # the tokenizer file's bytes (driver), for a Kit
    template: Any = None  # the model's chat template (exact input tokens), or None
    template_found: tuple | None = None  # what it was made of (chat_template.find), for a Kit

    def feed(self, step: Step, deal: Deal, shard: Shard = WHOLE) -> StepFeed | SessionFeed | AgentFeed:
        """The requests of `step` (as the plan has it: its prompt stream and request count)
        for this worker's share, continuing the run's deal of the prompt pool; for a sessions
        workload, its sessions (run/sessions.py); for a coding-agent trace, its sessions
        (run/agent_replay.py)."""
        if isinstance(self.source, AgentTraceSource):
            return AgentFeed(self.source, self.combo, step, self.tokenizer, self.template, shard)
        if is_sessions(self.source):
            return SessionFeed(self.source, self.combo, step, deal, shard, self.tokenizer, self.template)
        return StepFeed(self.source, self.combo, step, deal, shard, self.template)

    def kit(self) -> Kit:
        """What a worker needs to rebuild this without the spec's files (prepare(..., kit))."""
        source = self.source
        return Kit(source.items if isinstance(source, FilePrompts) else None, self.tokenizer_copy,
                   source.trace.portable() if isinstance(source, TracePrompts) else None,
                   self.template_found,
                   (source.agent_sessions, source.digest()) if isinstance(source, AgentTraceSource) else None)


def prepare(plan: Plan, combo: Combination, kit: Kit | None = None) -> Prepared:
    """Rebuild a combination's prompt source from the plan -- from the spec's files, or from
    the driver's `kit` -- and check it against the plan it was compiled with (each step's
    first prompts, a file's items, the tokenizer)."""
    w, target = combo.workload, combo.target
    spec_path = plan.spec["path"]
    copy = None
    if kit is None:
        tok = load_tokenizer(target.tokenizer, spec_path)
        if tok is not None and target.tokenizer:  # its bytes too, read now: a Ray worker is sent them (Kit)
            copy = TokenizerCopy.read(tokenizer_path(target.tokenizer, spec_path))
        source = make_source(w.dataset, w.params, w.prompts, os.path.dirname(os.path.abspath(spec_path)), tok)
        found = find_template(target.tokenizer, spec_path, target.api)
    else:
        found = kit.chat_template
        tok = kit.tokenizer.load() if kit.tokenizer is not None else None
        if kit.items is not None:
            source = FilePrompts(kit.items, w.prompts)
        elif kit.trace is not None:
            source = TracePrompts(kit.trace, w.params, w.prompts, tok)
        elif kit.agent_sessions is not None:
            source = AgentTraceSource.shipped(w.params, *kit.agent_sessions)
        else:
            source = make_source(w.dataset, w.params, w.prompts, tokenizer=tok)
    if w.tokenizer_sha256 is not None and (tok is None or tok.sha256 != w.tokenizer_sha256):
        raise RunError("the tokenizer differs from the one the plan was compiled with "
                       "(target.tokenizer changed since the plan was made?)")
    same = source_digest(source) == w.prompts_sha256 and all(
        step_digest(source, s.prompt_stream, step_count(s, source)) == s.prompts_sha256
        for s in plan.steps if s.combination == combo.index and s.prompt_stream is not None)
    if not same:
        raise RunError("the prompts rebuilt from the plan differ from those it was compiled with "
                       "(a dataset or tokenizer file changed since the plan was made?)")
    return Prepared(combo, source, tok, slo_checks(plan), bool(plan.output.get("requests")), copy,
                    bind_template(found, tok), found)


def slo_checks(plan: Plan) -> list[Threshold]:
    return slo_thresholds(plan.slo)


def step_slo_checks(step: Step, prepared: Prepared) -> list[Threshold]:
    """The SLO a step's requests and figures are held to: a search's probe, its search's
    (load.search.slo, which defaults to the spec's); any other step, the spec's. Read from
    the step itself, so a Ray worker given a probe holds its requests to the same SLO."""
    if step.search is None:
        return prepared.slo_checks
    return slo_thresholds(step.search["slo"])


@contextlib.contextmanager
def measuring() -> Iterator[None]:
    """No garbage collection while a point is measured.

    A full collection of a large heap pauses the client's event loop for tens of
    milliseconds (18-36 ms seen in the test process), and every stream read in that
    pause gets a late timestamp. Objects alive now are frozen out of later
    collections; reference counting still frees the per-request objects, and the
    cycles a point leaves are collected right after it.
    """
    gc.collect()
    gc.freeze()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
        gc.unfreeze()
        gc.collect()
