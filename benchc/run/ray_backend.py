"""Distributed load generation on Ray: one plan, many client processes or machines.

Each load point is split across the run's worker actors, one asyncio client each
(run/shards.py): closed loop, the concurrency is split and every shard sends its slots'
share of the requests; open loop, every worker takes every n-th arrival of the plan's
one schedule, and a concurrency cap is split; a coding-agent trace replay, by whole session
(a session and its subagents on one worker: plan/shapes.AgentReplay.divide), its merged
`agent_replay` block built from every worker's sessions (run/agent_replay.ReplayParts). A
point never gives a worker requests without the concurrency to send them: a point with fewer
slots (or requests) than there are workers runs on fewer, and its `backend.workers` says how
many.

Workers start together: the driver names a wall-clock start a little in the future and
each worker waits for it. Every latency is measured within one worker's own clock; only
window starts and ends cross machines, and the merged window is united from them (see
results/merge.WINDOW_NOTE). Each worker measures its shard with the local backend's own
code (point.measure_point: recorder, self-check, per-request records, tokenizer counts)
and returns the Measurement; the driver adds them exactly (point.merge_measurements) and
assembles the point as for a local run. A worker that dies mid-point is reported, the
point is marked incomplete, and the other shards' data is kept.

Workers need no files: the driver sends each the plan and a Kit per combination (a file
dataset's items, a coding-agent trace's sessions, the tokenizer file's bytes; run/prepare.py),
so only the driver's machine needs the spec's files.

A run's actors are its own: named `benchc-<run id>-<i>` (namespace `benchc`), so runs on one
cluster never collide, owned by the driver (Ray ends them with it), and killed on every
way out (the end, an error, Ctrl-C or SIGTERM, a failed start).

Ray is an optional extra: pip install 'benchc[ray]'.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import socket
import threading
import time
import uuid
from dataclasses import replace
from typing import Any

from benchc.errors import RunError, UsageError
from benchc.plan.agent_trace_prompts import AgentTraceSource
from benchc.plan.model import Plan, Step
from benchc.plan.prompts import NO_DEAL, Deal
from benchc.plan.shapes import AgentReplay, ClosedLoop
from benchc.run import clocks
from benchc.run.point import Measurement, measure_point, merge_measurements, open_client
from benchc.run.prepare import Kit, Prepared, prepare
from benchc.run.shards import Shard, split_step

log = logging.getLogger(__name__)
START_DELAY_S = 2.0  # how far ahead a point's shared start is set: time for every worker to be ready
START_TIMEOUT_S = 120.0  # how long the workers may take to be placed and started (CPUs held elsewhere)
CONNECT_TIMEOUT_S = 5.0  # the TCP check of host:port before Ray's own connect (which retries for minutes)
HALT_MARGIN_S = 10.0  # past the grace period, how long a halted worker has to return its shard
NAMESPACE = "benchc"


def import_ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise UsageError("--backend ray needs Ray: pip install 'benchc[ray]'") from e
    return ray


class RayBackend:
    """The run's workers on a Ray cluster: started once (start), sent each combination's
    prompts (prepare), given each point's shards (measure), killed at the end (stop)."""

    def __init__(self, address: str | None, workers: int, http: str = "native", grace_s: float = 5.0,
                 rx_loop: str = "auto", send_priority: bool = True):
        if workers < 0:
            raise UsageError(f"--workers {workers}: give 1 or more (0: one per free CPU of the cluster)")
        self.address, self.requested, self.http, self.grace_s = address, workers, http, grace_s
        self.rx_loop = rx_loop  # --rx-loop: the workers' transport for measured streams
        self.send_priority = send_priority  # --send-priority: whether their open loops raise it
        self.ray = import_ray()
        self.run_id = uuid.uuid4().hex[:8]
        self.actors: list = []
        self.hosts: list[str] = []
        self.plan_dict: dict = {}
        self.traced: dict[int, int] = {}  # a coding-agent trace's sessions, by combination
        self._own_session = False  # we joined the cluster, so we leave it

    @property
    def where(self) -> str:
        return self.address or "local (a Ray instance of this run's own)"

    # ------------------------------------------------------------------ start, stop

    async def start(self, plan: Plan, stop: asyncio.Event) -> list[str]:
        """Join the cluster, start the workers and wait until each is running; returns the
        host of each ([] when `stop` was set first). RunError (exit 3) with the address and
        Ray's reason when the cluster cannot be joined, is too small, or a worker dies."""
        self._connect()
        n = self._worker_count()
        self.plan_dict = worker_plan(plan)
        # one CPU each: a worker is one asyncio client, which saturates one core at most;
        # SPREAD: over as many nodes as the cluster has, each client with its own NIC and cores
        worker = self.ray.remote(num_cpus=1, max_restarts=0, scheduling_strategy="SPREAD")(LoadWorker)
        self.actors = [worker.options(name=f"benchc-{self.run_id}-{i}", namespace=NAMESPACE).remote()
                       for i in range(n)]
        places = await self._started(stop)
        if places is None:
            return []
        for i, p in enumerate(places):
            log.info("ray: worker %d on %s (node %s, pid %d)", i, p["host"], p["node"], p["pid"])
        self.hosts = [p["host"] for p in places]
        return self.hosts

    def info(self) -> dict:
        """The run's backend, as the result keeps it."""
        return {"kind": "ray", "workers": len(self.actors), "hosts": sorted(set(self.hosts)),
                "actors": f"{NAMESPACE}/benchc-{self.run_id}-*"}

    def stop(self) -> None:
        """Kill the run's workers, and leave the cluster if this run joined it."""
        for a in self.actors:
            with contextlib.suppress(Exception):  # already dead: nothing to do
                self.ray.kill(a, no_restart=True)
        self.actors = []
        if self._own_session:
            self._own_session = False
            self.ray.shutdown()

    def _connect(self) -> None:
        if self.ray.is_initialized():
            return  # the caller's own Ray session (a test, a notebook): used as it is
        _check_reachable(self.address)
        # ray.init makes SIGTERM end the process at once (its own handler, and its C++ logger's);
        # benchc's (the runner's: stop, keep what was measured, write it) is put back after
        sigterm = signal.getsignal(signal.SIGTERM)
        try:
            # no address: an instance of its own ("local"), never the cluster a `ray start` on this
            # machine last recorded nor RAY_ADDRESS's (another user's, sent the plan's secrets);
            # --ray-address auto joins that one when asked
            self.ray.init(address=self.address or "local", include_dashboard=False, log_to_driver=False)
        except Exception as e:  # noqa: BLE001 - whatever stops Ray from joining: its reason, said plainly
            raise RunError(f"cannot join the Ray cluster at {self.where}: {ray_reason(e)}"
                           f"{_auth_hint(e, self.address)}") from e
        finally:
            if sigterm is not None and threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, sigterm)
        self._own_session = True

    def _worker_count(self) -> int:
        total = int(self.ray.cluster_resources().get("CPU", 0))
        free = int(self.ray.available_resources().get("CPU", 0))
        n = self.requested or max(1, free)
        if n > total:
            raise RunError(f"the Ray cluster at {self.where} has {total} CPUs; --workers {n} needs one per "
                           f"worker: pass --workers {total} or fewer, or add nodes to the cluster")
        if n > free:
            log.warning("ray: %d of the cluster's %d CPUs are free; waiting up to %gs for %d (other runs?)",
                        free, total, START_TIMEOUT_S, n)
        return n

    async def _started(self, stop: asyncio.Event) -> list[dict] | None:
        """Each worker's place once all run (None: `stop` was set first)."""
        tasks = [asyncio.ensure_future(a.place.remote()) for a in self.actors]
        every = asyncio.gather(*tasks)  # done when all are, or at the first that fails
        every.add_done_callback(lambda f: f.cancelled() or f.exception())  # told below, not logged
        stopped = asyncio.ensure_future(stop.wait())
        try:
            first: list[asyncio.Future[Any]] = [every, stopped]
            done, _ = await asyncio.wait(first, timeout=START_TIMEOUT_S,
                                         return_when=asyncio.FIRST_COMPLETED)
            if stopped in done:
                return None
            for i, t in enumerate(tasks):
                if t.done() and t.exception() is not None:
                    raise RunError(f"Ray worker {i} (benchc-{self.run_id}-{i}) died before it started: "
                                   f"{ray_reason(t.exception())}")
            if every not in done:
                started = sum(t.done() for t in tasks)
                free = int(self.ray.available_resources().get("CPU", 0))
                raise RunError(f"only {started} of {len(tasks)} Ray workers started within "
                               f"{START_TIMEOUT_S:g}s on the cluster at {self.where} ({free} CPUs free now: "
                               "other runs hold them?)")
            return every.result()
        finally:
            stopped.cancel()
            for t in tasks:
                t.cancel()

    # ------------------------------------------------------------------ per combination, per point

    async def prepare(self, prepared: Prepared) -> None:
        """Send every worker the plan and the combination's Kit, and have it build the
        combination's prompts now, not inside a point's start delay. A worker that cannot is
        reported by each point it fails (measure), as a dead one is."""
        kit = self.ray.put(prepared.kit())  # once into the object store, fetched once per node
        if isinstance(prepared.source, AgentTraceSource):
            self.traced[prepared.combo.index] = prepared.source.pool_size
        await asyncio.gather(*[a.prepare.remote(self.plan_dict, prepared.combo.index, kit)
                               for a in self.actors], return_exceptions=True)

    async def measure(self, combo: int, step: Step, base_url: str, seed: int, deal: Deal = NO_DEAL,
                      stop: asyncio.Event | None = None) -> tuple[Measurement | None, list[str]]:
        """(the merged measurement or None, failures): one point, split across the workers
        (run/shards.py). `deal`: where the step's prompts start in their pool, as the driver's
        run counted it. `stop` (Ctrl-C, SIGTERM, the server died) halts every worker: no new
        request, those in flight get the grace period, each returns what it measured."""
        shards = split_step(counted(step, self.traced.get(combo)), len(self.actors))
        if len(shards) < len(self.actors):
            log.info("%s: %d of %d workers (no more can each be given requests and concurrency)",
                     step.id, len(shards), len(self.actors))
        start_at = time.time() + START_DELAY_S
        plan_hash = self.plan_dict["plan_hash"]
        refs = [self.actors[s.index].run.remote(plan_hash, combo, st.__dict__, base_url, seed, s, start_at,
                                                self.http, (deal.start, deal.seen), self.grace_s,
                                                self.rx_loop, self.send_priority)
                for st, s in shards]
        log.info("%s: %d shards, starting together in %.1fs", step.id, len(refs), START_DELAY_S)
        outcomes = await self._collect(refs, [s for _, s in shards], start_at, stop or asyncio.Event())
        results = [o for o in outcomes if isinstance(o, Measurement)]
        here = clocks.mark()
        for r in results:  # a shard from another machine, onto this one's clock
            delta = clocks.shift_ns(r.clock, here)
            if delta:
                r.move(delta)
        failures = [f"{step.id}: worker {s.index} failed: {ray_reason(o)}"
                    for (_, s), o in zip(shards, outcomes, strict=True) if not isinstance(o, Measurement)]
        if not results:
            return None, failures
        m = merge_measurements(results)
        m.backend = {"kind": "ray", "workers": len(shards), "available_workers": len(self.actors),
                     "completed_shards": len(results), "hosts": sorted({r.host for r in results})}
        if failures:
            m.complete = False
            m.backend["failures"] = failures
        return m, failures

    async def _collect(self, refs: list, shards: list[Shard], point: float, stop: asyncio.Event) -> list:
        """Each shard's Measurement or the exception that stands for it. On `stop` the
        workers are halted (the point named by its start time) and given the grace period
        (and a margin) to return."""
        tasks = [asyncio.ensure_future(r) for r in refs]
        stopped = asyncio.ensure_future(stop.wait())
        try:
            first: list[asyncio.Future[Any]] = [asyncio.gather(*tasks, return_exceptions=True), stopped]
            await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
            if stop.is_set() and not all(t.done() for t in tasks):
                for s in shards:
                    self.actors[s.index].halt.remote(point)
                await asyncio.wait(tasks, timeout=self.grace_s + HALT_MARGIN_S)
            return [(t.exception() or t.result()) if t.done() and not t.cancelled()
                    else TimeoutError("did not return its shard after the stop") for t in tasks]
        finally:
            stopped.cancel()
            for t in tasks:
                t.cancel()


def counted(step: Step, traced: int | None) -> Step:
    """A coding-agent replay of all of its trace's `traced` sessions, as a step that counts them:
    its split (plan/shapes.AgentReplay.divide) then gives no worker none, as a closed loop's
    gives none no request (a point of fewer sessions than workers runs on fewer)."""
    shape = step.shape
    if traced is None or not isinstance(shape, AgentReplay) or shape.sessions is not None:
        return step
    return replace(step, load=replace(shape, sessions=traced))


def ray_refusal(plan: Plan) -> str | None:
    """Why the plan cannot run on Ray yet (None: it can). Sessions (multi-turn) split by whole
    session (a closed loop's slots deal them: plan/shapes.ClosedLoop.divide) where the workers
    can rebuild them from the plan (synthetic sessions, workload.dataset.sessions) and a point
    is bounded by its session count or its duration; the rest is not built yet: a file's
    sessions (not in the Kit), a rate, users, a trace replay or a search of sessions (their
    arrivals would split by session, not by request), a turn count (load.requests: it does not
    split by session)."""
    for combo in plan.combinations:
        w = combo.workload
        if w.sessions is None:
            continue
        if w.dataset != "sessions":
            return (f"--backend ray: sessions (multi-turn) read from a file (workload.dataset.{w.dataset}) "
                    "are not built yet on Ray; run them with --backend local")
        for step in plan.steps:
            if step.combination != combo.index or step.kind not in ("load", "search"):
                continue
            shape = step.shape
            if step.kind == "search" or type(shape) is not ClosedLoop or shape.requests is not None:
                return (f"--backend ray: sessions (multi-turn) are not built yet on Ray for point {step.id}: "
                        "only a concurrency sweep of them, bounded by load.sessions or load.duration (not by "
                        "a turn count, load.requests); run it with --backend local")
    return None


def worker_plan(plan: Plan) -> dict:
    """The plan as the workers get it: the target's credentials (they send the requests), not
    the server's launch command and environment (the driver launches it; its tokens stay)."""
    out = plan.to_dict(redact=False)
    shown = plan.to_dict(redact=True)
    for mine, redacted in zip(out["combinations"], shown["combinations"], strict=True):
        mine["server"] = redacted["server"]
    return out


def _check_reachable(address: str | None) -> None:
    """Fail fast, with the reason, when nothing answers at host:port: Ray's own connect
    retries an unreachable address for minutes."""
    if address in (None, "", "auto", "local"):
        return
    hostport = address.removeprefix("ray://")
    m = re.fullmatch(r"\[?([^\[\]]+?)\]?:(\d+)", hostport)
    if m is None:
        raise UsageError(f"--ray-address {address}: give host:port (the head's GCS port, 6379 by default), "
                         "ray://host:port (Ray Client) or auto")
    host, port = m.group(1), int(m.group(2))
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as e:
        reason = e.strerror or str(e) or type(e).__name__
        raise RunError(f"cannot reach the Ray cluster at {address}: {reason} (is `ray start --head` "
                       "running there, and is the port open to this machine?)") from e


def _chain(e: BaseException | None) -> list[BaseException]:
    """An exception and those it was raised from, outermost first."""
    out: list[BaseException] = []
    while e is not None and all(e is not x for x in out):
        out.append(e)
        e = e.__cause__ or e.__context__
    return out


def _chain_text(e: BaseException | None) -> str:
    return "\n".join(str(x) for x in _chain(e))


def ray_reason(e: BaseException) -> str:
    """Ray's reason for an error, in one line: the innermost exception line of the error
    (Ray chains them and embeds remote tracebacks in messages), else the error's first
    line with the exception it was raised from."""
    chain = _chain(e)
    lines = [x.strip() for x in _chain_text(e).splitlines() if x.strip()]
    raised = [x for x in lines if re.match(r"^(\w+\.)*\w*(Error|Exception)\b:", x)]
    if raised:
        reason = raised[-1]
    else:
        reason = lines[0] if lines else type(e).__name__
        inner = chain[-1]
        if inner is not e and str(inner).strip():
            reason += f" ({type(inner).__name__}: {str(inner).strip().splitlines()[0]})"
    # a dead actor's error says why further down ("The actor is dead because it was killed ...")
    reason = " ".join([reason] + [x for x in lines if x.startswith(("The actor is dead because",
                                                                     "The actor never ran"))])
    # Ray's messages run on with advice for every case: its first sentence is the reason
    if len(reason) > 200 and ". " in reason[80:]:
        reason = reason[:reason.index(". ", 80) + 1]
    return reason


def _auth_hint(e: BaseException, address: str | None) -> str:
    """Ray uses its token for a cluster it finds by itself (auto) and only when told for one
    named by address (RAY_AUTH_MODE=token): a head started by `ray start --head` asks for one."""
    text = _chain_text(e)
    if "InvalidAuthToken" not in text and "AuthenticationError" not in text:
        return ""
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "token":
        return (" (RAY_AUTH_MODE=token is set: is the token the cluster's? ~/.ray/auth_token, "
                "RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN)")
    return (". The cluster asks for token authentication, which Ray uses for an address it is given only "
            "when told: run with RAY_AUTH_MODE=token (and the cluster's token in ~/.ray/auth_token, "
            "RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN)"
            + (", or --ray-address auto on the head's own machine" if address not in (None, "auto") else ""))


class LoadWorker:
    """One client of a distributed point: rebuilds the plan's prompts from the plan and the
    driver's Kit, and measures its shard with the local backend's code."""

    def __init__(self) -> None:
        # (plan_hash, combination) -> (plan, prepared), or why it could not be prepared
        self._combos: dict[tuple[str, int], tuple[Plan, Prepared] | Exception] = {}
        self._stops: dict[float, asyncio.Event] = {}  # each point's stop, by its start time

    def place(self) -> dict:
        import ray

        return {"host": socket.gethostname(), "pid": os.getpid(),
                "node": ray.get_runtime_context().get_node_id()[:12]}

    async def prepare(self, plan_dict: dict, combo_index: int, kit: Kit) -> None:
        key = (plan_dict["plan_hash"], combo_index)
        try:
            plan = Plan.from_dict(plan_dict)
            self._combos[key] = (plan, prepare(plan, plan.combinations[combo_index], kit))
        except Exception as e:
            self._combos[key] = e  # each point says it
            raise

    async def run(self, plan_hash: str, combo_index: int, step_dict: dict, base_url: str, seed: int,
                  shard: Shard, start_at: float, http: str = "native", deal: tuple[int, int] = (0, 0),
                  grace_s: float = 5.0, rx_loop: str = "auto", send_priority: bool = True) -> Measurement:
        got = self._combos.get((plan_hash, combo_index))
        if got is None:
            raise RunError(f"combination {combo_index} was not sent to this worker")
        if isinstance(got, Exception):
            raise got
        plan, prepared = got
        step = Step(**step_dict)  # this shard's share of the step
        # the step as the plan has it (its prompt stream and request count) for the prompts; a
        # search's probe, made at run time, carries its own stream (its share's count only sizes
        # what is built ahead)
        planned = next((s for s in plan.steps if s.combination == combo_index and s.id == step.id), step)
        feed = prepared.feed(planned, Deal(*deal), shard)
        # a halt may come before this call runs: it leaves the point's stop set
        stop = self._stops.setdefault(start_at, asyncio.Event())
        try:
            async with open_client(prepared, prepared.combo.target, base_url, http, stop, grace_s,
                                   rx_loop=rx_loop, send_priority=send_priority) as ctx:
                # every shard waits for the shared wall-clock start (or a halt)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), max(0.0, start_at - time.time()))
                m = await measure_point(ctx, step, prepared, seed, feed, shard)
                m.clock = clocks.mark()
                return m
        finally:
            self._stops.pop(start_at, None)

    async def halt(self, point: float) -> None:
        """Stop the point that starts at `point` (its shared start time): no new request;
        those in flight get the grace period."""
        self._stops.setdefault(point, asyncio.Event()).set()
