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
- open loop: the period is the shard count and every shard one lane: shard k sends
  arrivals k, k + n, ... of the plan's schedule (loadgen._open_loop), and the prompts of
  those same indices.

A shard that would own no request, or no concurrency to send one, is not made: a point
with concurrency 1 runs on one worker, whatever the cluster's size (`split_step` says how
many it used).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from benchc.plan.model import Step


@dataclass(frozen=True)
class Shard:
    """Worker `index` of `count` in one step, and which of the step's request indices it sends."""

    index: int = 0
    count: int = 1
    offset: int = 0  # its first lane in each round
    width: int = 1  # its lanes per round
    period: int = 1  # the lanes of a round, all shards'

    def request_index(self, j: int) -> int:
        """The step's request index of this shard's j-th request (j from 0, in issue order)."""
        return (j // self.width) * self.period + self.offset + j % self.width

    def share(self, total: int | None) -> int | None:
        """How many of a step's `total` requests are this shard's (None: bound by time only)."""
        if total is None:
            return None
        rounds, rest = divmod(total, self.period)
        return rounds * self.width + min(max(rest - self.offset, 0), self.width)

    def reach(self, issued: int) -> int:
        """1 + the highest step index among this shard's first `issued` requests: every
        index the step sent is below the largest reach of its shards."""
        return self.request_index(issued - 1) + 1 if issued else 0

    @property
    def schedule_slice(self) -> tuple[int, int]:
        """(index, count) for loadgen's open loop: this shard's arrivals are index::count."""
        return self.index, self.count


WHOLE = Shard()  # the local backend: one shard, every request


def even(total: int, n: int) -> list[int]:
    """`total` over n parts, remainders to the first ones."""
    return [total // n + (1 if i < total % n else 0) for i in range(n)]


def split_step(step: Step, workers: int) -> list[tuple[Step, Shard]]:
    """Each shard's step (its concurrency, request count and concurrency cap) and Shard, on
    at most `workers` workers: as many as can each be given requests and the concurrency
    to send them."""
    if workers < 1:
        raise ValueError(f"a step needs at least one worker, not {workers}")
    if step.concurrency:
        # more slots than requests are never all used: the lanes are the slots that are
        lanes = min(step.concurrency, step.requests) if step.requests else step.concurrency
        n = min(workers, lanes)
        out, offset = [], 0
        for k, (c, width) in enumerate(zip(even(step.concurrency, n), even(lanes, n), strict=True)):
            shard = Shard(k, n, offset, width, lanes)
            out.append((replace(step, concurrency=c, requests=shard.share(step.requests)), shard))
            offset += width
        return out
    # open loop: every shard keeps the plan's rate and request count and takes every n-th
    # arrival of the one schedule (loadgen._open_loop); only a concurrency cap is split
    n = min([workers] + [x for x in (step.max_concurrency, step.requests) if x])
    caps = even(step.max_concurrency, n) if step.max_concurrency else [None] * n
    return [(replace(step, max_concurrency=m), Shard(k, n, k, 1, n)) for k, m in enumerate(caps)]
