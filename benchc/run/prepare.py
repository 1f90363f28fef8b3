"""What a point needs before it is measured, shared by the local and the Ray backend:
the combination's prompts and request bodies rebuilt from the plan, the output lengths
the requests pin down, the tokenizer, the SLO checks (prepare -> Prepared), and a
collector-free measuring window.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from benchc.client.request import build_body
from benchc.errors import RunError
from benchc.plan.compiler import load_tokenizer
from benchc.plan.model import Combination, Plan
from benchc.plan.workload import Prompt, build_prompts, prompts_sha256
from benchc.spec.thresholds import Threshold


@dataclass(frozen=True)
class Prepared:
    """What every point of a combination sends and checks, rebuilt from the plan (on the
    driver, and again in each Ray worker)."""

    prompts: list[Prompt]
    bodies: list[bytes]  # one serialised request body per prompt (outside the timed path)
    expected_output: list[int | None]  # per prompt, the output length the request pins down
    tokenizer: Any  # the target's tokenizer (outputs are counted with it after each point), or None
    slo_checks: list[Threshold]  # each completed request is checked against these (goodput)
    keep_requests: bool  # output.requests: keep a record per request


def prepare(plan: Plan, combo: Combination) -> Prepared:
    """Rebuild a combination's prompts from the plan and check them against the prompts it
    was compiled with."""
    w, target = combo.workload, combo.target
    spec_path = plan.spec["path"]
    tok = load_tokenizer(target.tokenizer, spec_path)
    prompts = build_prompts(w.dataset, w.params, os.path.dirname(os.path.abspath(spec_path)), tok)
    if prompts_sha256(prompts) != w.prompts_sha256:
        raise RunError("the prompts rebuilt from the plan differ from those it was compiled with "
                       "(a dataset or tokenizer file changed since the plan was made?)")
    bodies = [json.dumps(build_body(target, w.sampling, p, continuous_usage=target.continuous_usage))
              .encode() for p in prompts]
    return Prepared(prompts, bodies, expected_lengths(combo, prompts), tok, slo_checks(plan),
                    bool(plan.output.get("requests")))


def expected_lengths(combo: Combination, prompts: list[Prompt]) -> list[int | None]:
    """Per prompt, the output length the request pins down (ignore_eos, or min = max)."""
    s = combo.workload.sampling
    out = []
    for p in prompts:
        mt = s.max_tokens or p.output_tokens
        fixed = s.ignore_eos or (s.min_tokens is not None and s.min_tokens == mt)
        out.append(mt if fixed else None)
    return out


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
