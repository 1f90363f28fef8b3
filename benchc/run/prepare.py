"""What a point needs before it is measured, shared by the local and the Ray backend:
the combination's prompt source rebuilt from the plan (and checked against it), the SLO
checks, and a collector-free measuring window.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator
from typing import Any

from benchc.errors import RunError
from benchc.plan.compiler import load_tokenizer
from benchc.plan.model import Combination, Plan
from benchc.plan.prompts import make_source, source_digest, step_digest
from benchc.spec.thresholds import Threshold


def prepare_source(plan: Plan, combo: Combination) -> tuple[Any, Any]:
    """(prompt source, tokenizer or None) of a combination, rebuilt from the plan and checked
    against the prompts it was compiled with (each step's first ones, and a file's items).
    Request bodies are built per step from it (run/feed.py)."""
    w, target = combo.workload, combo.target
    spec_path = plan.spec["path"]
    tok = load_tokenizer(target.tokenizer, spec_path)
    source = make_source(w.dataset, w.params, w.prompts, os.path.dirname(os.path.abspath(spec_path)), tok)
    same = source_digest(source) == w.prompts_sha256 and all(
        step_digest(source, s.prompt_stream, s.requests) == s.prompts_sha256
        for s in plan.steps if s.combination == combo.index and s.prompt_stream is not None)
    if not same:
        raise RunError("the prompts rebuilt from the plan differ from those it was compiled with "
                       "(a dataset or tokenizer file changed since the plan was made?)")
    return source, tok


def slo_checks(plan: Plan) -> list[Threshold]:
    return [Threshold(s.metric, s.stat, s.op, s.value, False, s.text) for s in plan.slo]


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
