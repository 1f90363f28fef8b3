"""What a point needs before it is measured, shared by the local and the Ray backend:
the combination's prompt source rebuilt from the plan and checked against it, the tokenizer,
the SLO checks (prepare -> Prepared), each step's requests (feed: run/feed.py), and a
collector-free measuring window.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from benchc.errors import RunError
from benchc.plan.compiler import load_template, load_tokenizer
from benchc.plan.datasets import make_source
from benchc.plan.model import Combination, Plan, Step
from benchc.plan.prompts import Deal, PromptSource, source_digest, step_count, step_digest
from benchc.plan.sessions import is_sessions
from benchc.run.feed import StepFeed
from benchc.run.sessions import SessionFeed
from benchc.spec.thresholds import Threshold


@dataclass(frozen=True)
class Prepared:
    """What every point of a combination sends and checks, rebuilt from the plan (on the
    driver, and again in each Ray worker)."""

    combo: Combination
    source: PromptSource  # the plan's prompts, built on demand (plan/prompts.py)
    tokenizer: Any  # the target's tokenizer (outputs are counted with it after each point), or None
    slo_checks: list[Threshold]  # each completed request is checked against these (goodput)
    keep_requests: bool  # output.requests: keep a record per request
    template: Any = None  # the model's chat template (exact input tokens), or None

    def feed(self, step: Step, deal: Deal, shard: tuple[int, int] = (0, 1)) -> StepFeed | SessionFeed:
        """The requests of `step` (as the plan has it: its prompt stream and request count)
        for this worker's share, continuing the run's deal of the prompt pool; for a sessions
        workload, its sessions (run/sessions.py)."""
        if is_sessions(self.source):
            return SessionFeed(self.source, self.combo, step, deal, shard, self.tokenizer, self.template)
        return StepFeed(self.source, self.combo, step, deal, shard, self.template)


def prepare(plan: Plan, combo: Combination) -> Prepared:
    """Rebuild a combination's prompt source from the plan and check it against the prompts
    the plan was compiled with (each step's first ones, and a file's items)."""
    w, target = combo.workload, combo.target
    spec_path = plan.spec["path"]
    tok = load_tokenizer(target.tokenizer, spec_path)
    source = make_source(w.dataset, w.params, w.prompts, os.path.dirname(os.path.abspath(spec_path)), tok)
    same = source_digest(source) == w.prompts_sha256 and all(
        step_digest(source, s.prompt_stream, step_count(s, source)) == s.prompts_sha256
        for s in plan.steps if s.combination == combo.index and s.prompt_stream is not None)
    if not same:
        raise RunError("the prompts rebuilt from the plan differ from those it was compiled with "
                       "(a dataset or tokenizer file changed since the plan was made?)")
    return Prepared(combo, source, tok, slo_checks(plan), bool(plan.output.get("requests")),
                    load_template(target.tokenizer, spec_path, tok, target.api))


def slo_checks(plan: Plan) -> list[Threshold]:
    return [Threshold(s.metric, s.stat, s.op, s.value, False, s.text) for s in plan.slo]


def step_slo_checks(step: Step, prepared: Prepared) -> list[Threshold]:
    """The SLO a step's requests and figures are held to: a search's probe, its search's
    (load.search.slo, which defaults to the spec's); any other step, the spec's. Read from
    the step itself, so a Ray worker given a probe holds its requests to the same SLO."""
    if step.search is None:
        return prepared.slo_checks
    return [Threshold(s["metric"], s["stat"], s["op"], s["value"], False, s["text"])
            for s in step.search["slo"]]


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
