"""Distributed load generation on Ray: one plan, many client processes or machines.

Each load point is split across N worker actors, one asyncio client each:
- closed loop: the concurrency is split (C=256 over 4 workers = 64 each; remainders
  go to the first workers), and so is the request count;
- open loop: every worker computes the plan's arrival schedule and takes every Nth
  arrival, so the union of the shards is the plan's schedule; `max_concurrency` is
  split like concurrency.
Workers start together: the driver names a wall-clock start a little in the future
and each worker waits for it. Every latency is measured within one worker's own
clock; only window starts and ends cross machines, and the merged window is
united from them (see results/merge.WINDOW_NOTE). Each worker measures its shard with
the local backend's own code (point.measure_point: recorder, self-check, per-request
records, tokenizer counts) and returns the Measurement; the driver adds them exactly
(point.merge_measurements) and assembles the point as for a local run. A worker that
dies mid-point is reported, the point is marked incomplete, and the other shards' data
is kept.

Ray is an optional extra: pip install 'benchc[ray]'.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from dataclasses import replace
from typing import Any

from benchc.errors import UsageError
from benchc.plan.model import Plan, Step
from benchc.plan.prompts import NO_DEAL, Deal
from benchc.run.point import Measurement, measure_point, merge_measurements, open_client
from benchc.run.prepare import Prepared, prepare

log = logging.getLogger(__name__)
START_DELAY_S = 2.0  # how far ahead the shared start is set: time for every worker to be ready


def import_ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise UsageError("--backend ray needs Ray: pip install 'benchc[ray]'") from e
    return ray


def split(total: int | None, n: int) -> list[int | None]:
    """`total` over n shards, remainders to the first ones (None stays None)."""
    if total is None:
        return [None] * n
    return [total // n + (1 if i < total % n else 0) for i in range(n)]


def shard_steps(step: Step, n: int) -> list[Step]:
    """The step each of n workers runs; a worker with no share gets none."""
    if step.concurrency:
        shares = split(step.concurrency, n)
        reqs = split(step.requests, n)
        return [replace(step, concurrency=c, requests=r) for c, r in zip(shares, reqs, strict=True) if c]
    # open loop: every worker keeps the plan's rate and count and takes its slice of the
    # one schedule (loadgen._open_loop, shard=(i, n)); only a concurrency cap is split
    caps = split(step.max_concurrency, n)
    return [replace(step, max_concurrency=m) for m in caps]


class RayBackend:
    def __init__(self, address: str | None, workers: int, http: str = "native", rx_loop: str = "auto"):
        self.http = http
        self.rx_loop = rx_loop
        self.ray = import_ray()
        if not self.ray.is_initialized():
            self.ray.init(address=address, include_dashboard=False, log_to_driver=False,
                          ignore_reinit_error=True)
        self.n = workers or max(1, int(self.ray.cluster_resources().get("CPU", 1)))
        self.actor_cls = self.ray.remote(num_cpus=1)(LoadWorker)
        self.actors: list = []
        self.plan_dict: dict = {}

    def start(self, plan: Plan) -> list[str]:
        """Start the workers; returns the host each one runs on."""
        # with secrets: the workers send the requests
        self.plan_dict = plan.to_dict(redact=False)
        self.actors = [self.actor_cls.options(name=f"benchc-worker-{i}", namespace="benchc",
                                              lifetime=None).remote() for i in range(self.n)]
        places = self.ray.get([a.place.remote() for a in self.actors])
        for i, p in enumerate(places):
            log.info("ray: worker %d on %s (node %s, pid %d)", i, p["host"], p["node"], p["pid"])
        return [p["host"] for p in places]

    def stop(self) -> None:
        for a in self.actors:
            self.ray.kill(a)
        self.actors = []

    async def prepare(self, combo: int) -> None:
        """Have every worker build the combination's prompts now, not inside a point's start delay.
        A worker that cannot is reported by each point it fails (measure), as a dead one is."""
        await asyncio.gather(*[a.prepare.remote(self.plan_dict, combo) for a in self.actors],
                             return_exceptions=True)

    async def measure(self, combo: int, step: Step, base_url: str, seed: int, deal: Deal = NO_DEAL
                      ) -> tuple[Measurement | None, list[str]]:
        """(the merged measurement or None, failures): one point, split across the workers.
        `deal`: where the step's prompts start in their pool, as the driver's run counted it;
        worker i of n sends the step's requests i, i + n, ... (run/feed.py)."""
        shards = shard_steps(step, len(self.actors))
        start_at = time.time() + START_DELAY_S
        refs = [a.run.remote(self.plan_dict, combo, s.__dict__, base_url, seed, (i, len(shards)), start_at,
                             self.http, (deal.start, deal.seen), self.rx_loop)
                for i, (a, s) in enumerate(zip(self.actors, shards, strict=False))]
        log.info("%s: %d shards, starting together in %.1fs", step.id, len(refs), START_DELAY_S)
        results, failures = [], []
        for i, ref in enumerate(refs):
            try:
                results.append(await ref)
            except Exception as e:  # noqa: BLE001 - a dead worker: report it, keep the others
                failures.append(f"{step.id}: worker {i} failed: {type(e).__name__}: {str(e).splitlines()[0]}")
        if not results:
            return None, failures
        m = merge_measurements(results)
        m.backend = {"kind": "ray", "workers": len(shards), "completed_shards": len(results),
                     "hosts": sorted({r.host for r in results})}
        if failures:
            m.complete = False
            m.backend["failures"] = failures
        return m, failures


class LoadWorker:
    """One client of a distributed point: rebuilds the plan's prompts and measures its shard
    with the local backend's code."""

    def __init__(self) -> None:
        self._combos: dict[tuple[str, int], tuple[Plan, Prepared]] = {}

    def place(self) -> dict:
        import ray

        return {"host": socket.gethostname(), "pid": os.getpid(),
                "node": ray.get_runtime_context().get_node_id()[:12]}

    async def prepare(self, plan_dict: dict, combo_index: int) -> None:
        self._combination(plan_dict, combo_index)

    def _combination(self, plan_dict: dict, combo_index: int) -> tuple[Plan, Prepared]:
        """The plan and the combination's prompt source, built once per worker."""
        key = (plan_dict["plan_hash"], combo_index)
        if key not in self._combos:
            plan = Plan.from_dict(plan_dict)
            self._combos[key] = (plan, prepare(plan, plan.combinations[combo_index]))
        return self._combos[key]

    async def run(self, plan_dict: dict, combo_index: int, step_dict: dict, base_url: str, seed: int,
                  shard: tuple[int, int], start_at: float, http: str = "native",
                  deal: tuple[int, int] = (0, 0), rx_loop: str = "auto") -> Measurement:
        plan, prepared = self._combination(plan_dict, combo_index)
        step = Step(**step_dict)  # this shard's share of the step
        # the step as the plan has it (its prompt stream and request count) for the prompts; a
        # search's probe, made at run time, carries its own stream (its share's count only sizes
        # what is built ahead)
        planned = next((s for s in plan.steps if s.combination == combo_index and s.id == step.id), step)
        feed = prepared.feed(planned, Deal(*deal), shard)
        async with open_client(prepared, prepared.combo.target, base_url, http, rx_loop=rx_loop) as ctx:
            # every shard waits for the shared wall-clock start
            await asyncio.sleep(max(0.0, start_at - time.time()))
            return await measure_point(ctx, step, prepared, seed, feed, shard)
