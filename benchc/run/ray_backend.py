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
united from them (see merge.WINDOW_NOTE). Shards are merged exactly through the
HdrHistograms (benchc merge). A worker that dies mid-point is reported, the point
is marked incomplete, and the other shards' data is kept.

Ray is an optional extra: pip install 'benchc[ray]'.
"""

from __future__ import annotations

import asyncio
import socket
import time
from dataclasses import replace

from benchc.errors import UsageError
from benchc.plan.model import Plan, Step
from benchc.results.merge import merge_points

START_DELAY_S = 2.0  # how far ahead the shared start is set: time for every worker to be ready


def import_ray():
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
    def __init__(self, address: str | None, workers: int, http: str = "native"):
        self.http = http
        self.ray = import_ray()
        if not self.ray.is_initialized():
            self.ray.init(address=address, include_dashboard=False, log_to_driver=False,
                          ignore_reinit_error=True)
        self.n = workers or max(1, int(self.ray.cluster_resources().get("CPU", 1)))
        self.actor_cls = self.ray.remote(num_cpus=1)(LoadWorker)
        self.actors: list = []

    def start(self, plan: Plan) -> list[str]:
        self.actors = [self.actor_cls.options(name=f"benchc-worker-{i}", namespace="benchc",
                                              lifetime=None).remote() for i in range(self.n)]
        return self.ray.get([a.host.remote() for a in self.actors])

    def stop(self) -> None:
        for a in self.actors:
            self.ray.kill(a)
        self.actors = []

    async def run_point(self, plan_dict: dict, combo: int, step: Step, base_url: str,
                        seed: int, deal: tuple[int, int] = (0, 0)) -> tuple[dict | None, list[str]]:
        """(merged point or None, failures). `deal`: where the step's prompts start in their
        pool (plan/prompts.py Deal), as the driver counted it."""
        shards = shard_steps(step, len(self.actors))
        start_at = time.time() + START_DELAY_S
        refs = [a.run.remote(plan_dict, combo, s.__dict__, base_url, seed, (i, len(shards)), start_at,
                               self.http, deal)
                for i, (a, s) in enumerate(zip(self.actors, shards, strict=False))]
        results, failures = [], []
        for i, ref in enumerate(refs):
            try:
                results.append(await ref)
            except Exception as e:  # noqa: BLE001 - a dead worker: report it, keep the others
                failures.append(f"{step.id}: worker {i} failed: {type(e).__name__}: {str(e).splitlines()[0]}")
        if not results:
            return None, failures
        merged = merge_points(results)
        merged["id"] = step.id
        merged["params"] = {**merged["params"], "concurrency": step.concurrency, "rate_rps": step.rate_rps,
                            "requests": step.requests}
        merged["backend"] = {"kind": "ray", "workers": len(shards), "completed_shards": len(results),
                             "hosts": sorted({r["host"] for r in results})}
        # each shard's own figures stay, so the merge can be checked and a slow worker found
        merged["shards"] = [{"host": r["host"], "params": r["params"], "counts": r["counts"],
                             "window": r["window"], "hdr": {k: v.get("hdr") for k, v in r["latency"].items()}}
                            for r in results]
        if failures:
            merged["complete"] = False
            merged["backend"]["failures"] = failures
        return merged, failures


def plan_step(plan: Plan, combo_index: int, step_id: str) -> Step:
    return next(s for s in plan.steps if s.combination == combo_index and s.id == step_id)


class LoadWorker:
    """One client of a distributed point: rebuilds the plan's prompts and runs its shard."""

    def host(self) -> str:
        return socket.gethostname()

    async def run(self, plan_dict: dict, combo_index: int, step_dict: dict, base_url: str, seed: int,
                  shard: tuple[int, int], start_at: float, http: str = "native",
                  deal: tuple[int, int] = (0, 0)) -> dict:
        import aiohttp

        from benchc.client import http1
        from benchc.client.request import endpoint, headers_for, make_connector, make_trace_config
        from benchc.metrics.recorder import PointRecorder
        from benchc.plan.prompts import Deal
        from benchc.run.feed import StepFeed
        from benchc.run.loadgen import StepContext, run_step
        from benchc.run.prepare import measuring, prepare_source, slo_checks

        plan = Plan.from_dict(plan_dict)
        combo = plan.combinations[combo_index]
        step = Step(**step_dict)
        target = combo.target
        source, _ = prepare_source(plan, combo)
        # the step as the plan has it (its request count, not this shard's), for the prompts
        feed = StepFeed(source, combo, plan_step(plan, combo_index, step.id), Deal(*deal), shard)
        checks = slo_checks(plan)
        rec = PointRecorder(step.concurrency or step.max_concurrency or 0,
                            open_loop=step.rate_rps is not None)
        async with aiohttp.ClientSession(connector=make_connector(), read_bufsize=1 << 20,
                                         trace_configs=[make_trace_config()]) as session:
            ctx = StepContext(session=session, url=endpoint(base_url, target.api),
                              headers=headers_for(target), target=target, feed=feed,
                              pool=http1.Pool() if http == "native" else None)
            # every shard waits for the shared wall-clock start
            await asyncio.sleep(max(0.0, start_at - time.time()))
            try:
                with measuring():
                    extra = await run_step(ctx, step, rec, checks, seed=seed, shard=shard)
            finally:
                if ctx.pool is not None:
                    await ctx.pool.close()
        point = {"id": step.id, "combination": combo_index, "matrix": combo.matrix,
                 "params": {"concurrency": step.concurrency, "rate_rps": step.rate_rps,
                            "arrival": step.arrival, "requests": step.requests,
                            "duration_s": step.duration_s},
                 "complete": True, **rec.summary(extra["steady"]), "client": extra["client"],
                 "host": socket.gethostname()}
        point["throughput"]["steady_output_tok_s"] = extra["steady"]["output_tok_s"]
        return point
