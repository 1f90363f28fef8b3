"""How a load step is split across workers (Ray), so that the shards together send exactly
the plan's requests, every one of them, each with its own prompt.

A step's requests are numbered 0, 1, 2, ... (request i sends the step's prompt i, and in
open loop is the schedule's arrival i). A shard owns some `lanes` of every round of
`period` consecutive indices: lanes offset .. offset + width - 1, so its j-th request is

    index(j) = (j // width) * period + offset + j % width

- closed loop: the period is the concurrency C (or the request count, when smaller: no
  more than that can be in flight), and a shard's lanes are its share of it. A shard
  with c of the C slots sends c of every C requests, so all shards run out of requests
  together, as one client with C slots would, and their requests together are 0 .. R-1.
- open loop (a rate, a replay, users): the period is the shard count and every shard one lane: shard k sends
  arrivals k, k + n, ... of the plan's schedule (loadgen._open_loop), and the prompts of
  those same indices.

A shard that would own no request, or no concurrency to send one, is not made: a point
with concurrency 1 runs on one worker, whatever the cluster's size (`split_step` says how
many it used). A coding-agent replay's unit is a whole session (its index is the session's,
its lanes the sessions in flight). Each shape divides itself (plan/shapes.py, `divide`);
Shard is its arithmetic.
"""

from __future__ import annotations

from dataclasses import replace

from benchc.plan.model import Step
from benchc.plan.shapes import WHOLE, Shard, even


def split_step(step: Step, workers: int) -> list[tuple[Step, Shard]]:
    """Each shard's step (its concurrency, request count and concurrency cap) and Shard, on
    at most `workers` workers: as many as can each be given requests and the concurrency
    to send them."""
    if workers < 1:
        raise ValueError(f"a step needs at least one worker, not {workers}")
    return [(replace(step, load=part), shard) for part, shard in step.shape.divide(workers)]


__all__ = ["Shard", "WHOLE", "even", "split_step"]
