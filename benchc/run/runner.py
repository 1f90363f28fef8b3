"""Execute a Plan: per combination, launch the server (or start the simulator, or attach),
wait until ready, smoke-test, warm up and sweep; then write the result document.

Every way out -- the end, a failed combination, Ctrl-C, SIGTERM -- stops what was
started and writes what was measured. Each load point is measured, and assembled into
the result's point, by run/point.py, whichever backend sends its requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import aiohttp

from benchc import __version__
from benchc._core import core_name
from benchc.client.bounded import MODELS_BYTES, BodyTooLarge, read_json
from benchc.client.request import headers_for
from benchc.errors import (
    Interrupted,
    PointFailed,
    RunError,
    SearchUndecided,
    ThresholdFailed,
    UntrustedResult,
    UsageError,
)
from benchc.plan.model import Combination, Plan, Step
from benchc.plan.prompts import Deal
from benchc.redact import REDACTED, redact_argv, redact_env, redact_headers, redact_url
from benchc.results import values
from benchc.results.api import Point
from benchc.results.decide import with_decision
from benchc.results.document import (
    SCHEMA_VERSION,
    bound_requests_text,
    environment,
    is_probe,
    now_iso,
    output_path,
    requests_path,
    reserve_outputs,
    write_atomic,
)
from benchc.results.failed import failed_points
from benchc.results.repeats import summaries
from benchc.results.slo import failed_checks, run_verdict
from benchc.run.cache import CacheReset
from benchc.run.console import Console, Silence, words_line
from benchc.run.deadserver import NOT_SERVED, stop_kind
from benchc.run.fdlimit import ensure_fds, plan_sockets
from benchc.run.feed import Dealer
from benchc.run.gpus import combination_gpus, read_sim_power
from benchc.run.loadgen import StepContext
from benchc.run.point import Measurement, assemble_point, measure_point, open_client, warm_up
from benchc.run.point_telemetry import PointTelemetry
from benchc.run.power import NvmlSource, PowerSampler, SimSource, Source
from benchc.run.prepare import Prepared, prepare, step_slo_checks
from benchc.run.saturation import SweepStop
from benchc.run.search import describe, run_search
from benchc.run.server import (
    Launched,
    NotStarted,
    ServerFailed,
    free_port,
    launch,
    log_tail,
    server_root,
    stop_group,
    stop_server,
    supervise,
    wait_ready,
)
from benchc.run.server_identity import identify, unlisted_model
from benchc.run.smoke import run_smoke
from benchc.tokenizer._template_bounds import stop_renders_on

METRIC_DEFINITIONS = "benchc-1: docs/metrics.md"
# After a step stopped because no request could connect: how long the watcher of a server
# process of ours may take to see that the process exited (it is seen in milliseconds; the
# bound only matters for a server that is alive but unreachable, which is then reported so).
EXIT_SEEN_S = 5.0
# While a point runs and nothing arrives, a line this often says what is awaited (a server
# that took the connections and answers nothing is otherwise silent until the deadlines).
HEARTBEAT_S = 10.0
PROGRESS_TICK_S = 1.0  # the point's progress is brought up to date this often
log = logging.getLogger(__name__)


@dataclass
class RunOptions:
    base_url: str | None = None
    out: str | None = None
    force: bool = False
    quiet: bool = False
    strict: bool = False
    grace_s: float = 5.0
    backend: str = "local"  # "local" | "ray"
    ray_address: str | None = None
    workers: int = 0  # ray: 0 means one per CPU of the cluster
    http: str = "native"  # the measured requests' client: "native" (benchc.client.http1) or "aiohttp"
    rx_loop: str = "auto"  # native: "auto" reads plain http on the receive loop where built, "off" never
    send_priority: bool = True  # raise the loop thread's priority through an open loop (run/priority.py)


@dataclass
class RunFailure:
    """A run-level error: what stopped a combination, or lost part of a point. The result
    lists them under `errors`; the run exits 3 with their text."""

    # server_failed | server_died | server_unreachable | api_not_served | smoke_failed | worker_failed |
    # combination_failed
    kind: str
    message: str  # one line
    combination: int
    point: str | None = None
    detail: str = ""  # printed after the message (a server's log tail, kept in combinations[] too)

    def to_json(self) -> dict:
        return {"kind": self.kind, "combination": self.combination, "point": self.point,
                "message": self.message}

    def text(self) -> str:
        return self.message + (f"\n{self.detail}" if self.detail else "")


class TargetUnreachable(RunError):
    """The combination's target does not accept connections at all (before any load)."""


class _Sim:
    """The embedded simulator as a subprocess (its CPU use stays out of the client's process),
    under the supervisor a launched server runs under: no way benchc ends leaves it behind."""

    STOP_TIMEOUT_S = 10.0

    def __init__(self, params: dict, model: str):
        self.params, self.model = params, model
        self.proc: asyncio.subprocess.Process | None = None  # its supervisor: exits as the simulator does
        self.pid = 0  # the simulator's own process

    async def start(self) -> str:
        # -v/-vv of the run goes on to the simulator, whose log lines share our stderr
        verbose = (["-vv"] if log.isEnabledFor(logging.DEBUG)
                   else ["-v"] if log.isEnabledFor(logging.INFO) else [])
        try:
            # -I: the working directory (a benchc/ folder, a sitecustomize.py) and PYTHON*
            # variables do not steer benchc's own subprocess. Its own session: our Ctrl-C is
            # ours to handle; we stop it ourselves.
            self.proc, self.pid = await supervise(
                [sys.executable, "-I", "-m", "benchc", "sim", "--port", "0", "--model", self.model,
                 "--config-json", json.dumps(self.params), *verbose], self.STOP_TIMEOUT_S, stderr=None,
                keep_stdout=True)
        except (OSError, NotStarted) as e:
            raise ServerFailed(f"the simulator did not start ({e})", getattr(e, "status", None), "") from e
        assert self.proc.stdout is not None  # a pipe, asked for above
        line = (await asyncio.wait_for(self.proc.stdout.readline(), 30)).decode()
        if "listening on " not in line:
            status = await self.proc.wait()
            raise ServerFailed(f"the simulator did not start (exit {status})", status, "")
        url = line.split("listening on ")[1].split()[0]
        log.info("simulator (pid %d) listening on %s", self.pid, url)
        return url

    async def stop(self) -> None:
        if self.proc:
            await stop_group(self.proc, self.STOP_TIMEOUT_S)


def _leave_terminal() -> None:
    """Point stdout and stderr that are a terminal at /dev/null (after a hangup every write to
    it fails with EIO); a redirected one (a file, a pipe) is kept."""
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in (1, 2):
            with contextlib.suppress(OSError):
                if os.isatty(fd):
                    os.dup2(null, fd)
    finally:
        os.close(null)


def _label(combo: Combination) -> str:
    return (",".join(f"{k}={v}" for k, v in combo.matrix.items()) + ": ") if combo.matrix else ""


def _secrets(combo: Combination) -> list[str]:
    out = [combo.target.api_key or ""]
    out += [v for k, v in combo.target.headers.items() if "auth" in k.lower() or "key" in k.lower()]
    return [x for x in out if x]


class Runner:
    def __init__(self, plan: Plan, spec_data: dict, opts: RunOptions, result_path: str = "result.json"):
        self.plan, self.spec_data, self.opts = plan, spec_data, opts
        self.result_path = result_path
        self.stop_event = asyncio.Event()  # Ctrl-C / SIGTERM: stop everything
        self.combo_stop: asyncio.Event | None = None  # also set when this combination's server dies
        self.combos: list[dict] = []
        self.errors: list[RunFailure] = []
        self.backend: Any = None  # RayBackend when distributed
        self.backend_info: dict = {"kind": "local"}
        self.interrupted = False
        self.points: list[dict] = []
        self.searches: list[dict] = []  # the result's `search`: one entry per combination's search
        self.skipped: list[str] = []  # load steps a saturation stop skipped
        self.requests: list[dict] = []
        self.dealer = Dealer()  # what each prompt pool has dealt so far in this run
        self.targets: list[dict] = []
        self.phase = "starting"  # what the run is doing, for the Ctrl-C message
        self._monitor: asyncio.Task | None = None  # watches the combination's server process, if ours
        self._ctx: StepContext | None = None  # the combination's measured client (its in-flight count)
        self._power: Source | None = None  # where the combination's GPU power is read (run/power.py)
        self._nvml: NvmlSource | None = None  # NVML, opened on first need
        self._nvml_tried = False
        # the live progress line would tangle with -v log lines
        self.console = Console(opts.quiet, live=not logging.getLogger("benchc").isEnabledFor(logging.INFO))

    # ------------------------------------------------------------------ driving

    async def run(self) -> dict:
        loop = asyncio.get_running_loop()
        main = asyncio.current_task()
        presses = 0

        def on_sigint() -> None:
            nonlocal presses
            presses += 1
            self.interrupted = True
            self.stop_event.set()
            if self.combo_stop is not None:
                self.combo_stop.set()
            if presses == 1:
                self.console.say(f"\n{self._interrupt_message()}; Ctrl-C again to stop now")
            elif main:
                main.cancel()

        def on_sighup() -> None:
            # the terminal (an ssh session) is gone: nothing more goes to it (a write to a
            # hung-up tty fails), and the run stops as on Ctrl-C, writing what was measured
            _leave_terminal()
            self.console.quiet, self.console.live = True, False
            on_sigint()

        # SIGTERM (benchc itself being stopped) and SIGHUP (its terminal gone) are handled as
        # Ctrl-C: the server is stopped and what was measured is written. Under nohup SIGHUP
        # stays ignored, as asked.
        hangup = signal.getsignal(signal.SIGHUP) != signal.SIG_IGN
        loop.add_signal_handler(signal.SIGINT, on_sigint)
        loop.add_signal_handler(signal.SIGTERM, on_sigint)
        if hangup:
            loop.add_signal_handler(signal.SIGHUP, on_sighup)
        stopping = [signal.SIGINT, signal.SIGTERM] + ([signal.SIGHUP] if hangup else [])
        stops = None
        try:
            # a chat template renders on this loop: a signal cancels the render at once rather
            # than waiting for it to return (tokenizer/_template_bounds.py)
            with stop_renders_on(stopping) as stops:
                if self.opts.backend == "ray":
                    await self._start_ray()
                for combo in self.plan.combinations:
                    if self.stop_event.is_set():
                        break
                    await self._combination(combo)
        except asyncio.CancelledError:
            signum = stops.signum if stops is not None else 0  # a stop signal came (0: none)
            if not (self.interrupted or signum):
                raise
            if not self.interrupted:  # a render the signal cancelled ended the run before its handler ran
                (on_sighup if signum == signal.SIGHUP else on_sigint)()
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            loop.remove_signal_handler(signal.SIGTERM)
            if hangup:
                loop.remove_signal_handler(signal.SIGHUP)
            if self.backend:
                self.backend.stop()
        doc = self._document()
        if len(self.plan.combinations) > 1:  # a matrix: which combination serves more per GPU
            from benchc.results.decide import describe

            for answer in doc.get("decision", []):
                for line in describe(answer):
                    self.console.say(line)
        else:  # one configuration: which load to run it at
            self._say_single_answer(doc)
        return doc

    def _say_single_answer(self, doc: dict) -> None:
        from benchc.results.concurrency import describe_single, single_answer

        answer = single_answer(doc)
        if answer is not None and len(answer["loads"]) > 1:
            for line in describe_single(answer):
                self.console.say(line)

    def _interrupt_message(self) -> str:
        """What the first Ctrl-C stops: the phase the run was in, and the requests it lets finish."""
        inflight = self._ctx.inflight if self._ctx is not None else 0
        if self.phase.startswith("point ") and self.backend:
            return (f"interrupted during {self.phase}: the workers finish their in-flight requests "
                    f"(up to {self.opts.grace_s:g}s)")
        if inflight:
            return (f"interrupted during {self.phase}: finishing {inflight} in-flight "
                    f"request{'s' if inflight != 1 else ''} (up to {self.opts.grace_s:g}s)")
        return f"interrupted while {self.phase}: stopping, and writing what was measured"

    async def _start_ray(self) -> None:
        """The Ray workers, started before anything else (and stopped by run's finally, whatever
        happens, a failed start included)."""
        from benchc.run.ray_backend import RayBackend, ray_refusal

        if (refused := ray_refusal(self.plan)) is not None:
            raise UsageError(refused)
        self.phase = "starting the Ray workers"
        self.backend = RayBackend(self.opts.ray_address, self.opts.workers, self.opts.http, self.opts.grace_s,
                                  rx_loop=self.opts.rx_loop, send_priority=self.opts.send_priority)
        hosts = await self.backend.start(self.plan, self.stop_event)
        if hosts:  # else interrupted while they started
            self.backend_info = self.backend.info()
            self.console.say(f"ray: {len(hosts)} workers on {', '.join(sorted(set(hosts)))}")

    def _fail(self, failure: RunFailure) -> None:
        self.errors.append(failure)
        self.console.say(f"ERROR: {failure.text()}")

    async def _combination(self, combo: Combination) -> None:
        """One matrix combination: its server (started, launched or attached), smoke checks,
        sweep. A combination that fails (server never ready, smoke failed, server died) is
        recorded with the reason and the log tail; the next combination goes on."""
        record: dict = {"combination": combo.index, "matrix": combo.matrix, "status": "ok"}
        self.combos.append(record)
        self.combo_stop = cstop = asyncio.Event()
        if self.stop_event.is_set():
            cstop.set()
        try:
            async with self._serving(combo, record, cstop) as base_url:
                if combo.smoke and not await self._smoke(combo, base_url, record):
                    return
                if not await self._responses_history(combo, base_url, record):
                    return
                await self._sweep(combo, base_url, cstop, record)
        except ServerFailed as e:
            message, _, detail = str(e).partition("\n")
            record["status"] = "server_failed"
            record["error"] = message
            record["log_tail"] = e.tail
            self._fail(RunFailure("server_failed", _label(combo) + message, combo.index, detail=detail))
        except Interrupted as e:
            # Ctrl-C before the combination's load (the readiness wait): nothing measured here
            record["status"] = "interrupted"
            record["error"] = str(e)
        except RunError as e:
            # the target unreachable, the prompts not as planned: this combination stops, what
            # earlier ones measured is kept, and the next one goes on
            kind = "server_unreachable" if isinstance(e, TargetUnreachable) else "combination_failed"
            record["status"] = kind
            record["error"] = str(e)
            self._fail(RunFailure(kind, _label(combo) + str(e), combo.index))
        finally:
            self.combo_stop = None
            self._ctx = None

    @contextlib.asynccontextmanager
    async def _serving(self, combo: Combination, record: dict, cstop: asyncio.Event) -> AsyncIterator[str]:
        """The combination's server for the body, at the URL it yields: the embedded simulator,
        a launched server (ready, and watched while the body runs), or the target as given.
        What was started is stopped on the way out."""
        server = combo.server
        base_url = self.opts.base_url or combo.target.base_url
        if not self.opts.base_url and combo.target.sim is not None:
            sim = _Sim(combo.target.sim, combo.target.model)
            self.phase = f"{_label(combo)}starting the simulator"
            try:
                base_url = await sim.start()
                assert sim.proc is not None
                record["server"] = {"kind": "simulator", "pid": sim.pid}
                self._monitor = asyncio.create_task(self._watch(combo, sim.proc, "the simulator", None,
                                                                cstop, record))
                yield base_url
            finally:
                await self._unwatch()
                await sim.stop()
        elif not self.opts.base_url and server is not None and not server.attach:
            assert base_url is not None  # validated: a target without `sim` has a base_url
            self.phase = f"{_label(combo)}launching the server"
            launched, base_url = await self._launch(combo, base_url, record)
            try:
                self.phase = f"{_label(combo)}waiting for the server to be ready"
                ready_s = await wait_ready(launched, base_url, server, combo.target.model,
                                           headers_for(combo.target), cstop)
                record["server"]["load_time_s"] = round(ready_s, 3)
                self.console.say(f"{_label(combo)}ready after {record['server']['load_time_s']:.1f}s")
                self._monitor = asyncio.create_task(self._watch(combo, launched.proc, "the server",
                                                                launched.log_path, cstop, record))
                yield base_url
            finally:
                await self._unwatch()
                self.phase = f"{_label(combo)}stopping the server"
                record["server"]["exit_status"] = await stop_server(launched, server.stop_timeout_s)
        else:
            assert base_url is not None  # validated: a target without `sim` has a base_url
            if server is not None:
                record["server"] = {"kind": "attached"}
            yield base_url

    async def _launch(self, combo: Combination, base_url: str, record: dict) -> tuple[Launched, str]:
        """Start server.command (with {free} filled in); returns it and the URL it will serve."""
        server = combo.server
        # _serving launches only a combination's own server, one with a command (not attach)
        assert server is not None and server.command is not None
        argv = list(server.command)
        if any("{free}" in a for a in argv) or "{free}" in base_url:
            port = str(free_port())
            argv = [a.replace("{free}", port) for a in argv]
            base_url = base_url.replace("{free}", port)
        log_path = server_log_path(combo, self.result_path)
        launched = await launch(server, argv, log_path)
        record["server"] = {"kind": "launched", "command": redact_argv(argv), "log": log_path,
                            "pid": launched.server_pid}
        self.console.say(f"{_label(combo)}launched the server (pid {launched.server_pid}); waiting for "
                         f"{server.ready_path} (up to {server.ready_timeout_s:g}s), log: {log_path}")
        return launched, base_url

    async def _smoke(self, combo: Combination, base_url: str, record: dict) -> bool:
        """Run the smoke checks; False when they failed and the combination stops."""
        self.phase = f"{_label(combo)}running the smoke checks"
        assert combo.smoke is not None  # called only for a combination with smoke checks
        smoke = await run_smoke(combo.smoke, combo.target, base_url, headers_for(combo.target),
                                _secrets(combo))
        record["smoke"] = smoke
        for c in smoke["checks"]:
            self.console.say(f"{_label(combo)}smoke {c['name']}: {'passed' if c['passed'] else 'FAILED'} "
                             f"({c['non_streaming']['excerpt'][:60]!r})")
        if smoke["passed"] or smoke["continue_on_fail"]:
            return True
        record["status"] = "smoke_failed"
        self._fail(RunFailure("smoke_failed", f"{_label(combo)}smoke checks failed", combo.index))
        return False

    async def _responses_history(self, combo: Combination, base_url: str, record: dict) -> bool:
        """Conversations on a Responses API: whether the server keeps responses, asked up front
        and said (run/responses_check.py); False, and the combination stops before its load,
        when the spec's history needs them kept and the server keeps none."""
        from benchc.run.responses_check import asks_history, previous_response_id

        mode = asks_history(combo)
        if mode is None:
            return True
        self.phase = f"{_label(combo)}asking the server whether it keeps responses"
        async with aiohttp.ClientSession() as session:
            takes, said = await previous_response_id(session, combo, base_url)
        record["responses"] = {"previous_response_id": takes, "detail": said}
        head = f"{_label(combo)}responses: the server"
        if takes:
            sends = "the new input only" if mode != "full" else "the history in full"
            self.console.say(f"{head} takes previous_response_id ({said}); this run sends {sends}")
            return True
        if mode == "full":
            self.console.say(f"{head} does not take previous_response_id ({said}); the history goes in "
                             "full, as typed items, as the spec asks")
            return True
        record["status"] = NOT_SERVED
        record["error"] = (f"the server does not take previous_response_id ({said}), which "
                           "workload.history asks for: set workload.history: full (the history sent as "
                           "typed items), or have the server keep responses (vLLM: "
                           "VLLM_ENABLE_RESPONSES_API_STORE=1)")
        self._fail(RunFailure(NOT_SERVED, _label(combo) + record["error"], combo.index))
        return False

    async def _watch(self, combo: Combination, proc: asyncio.subprocess.Process, what: str,
                     log_path: str | None, cstop: asyncio.Event, record: dict) -> None:
        """A server process of ours (launched, or the simulator) that exits mid-run stops this
        combination's load, with its log tail. Cancelled before benchc stops it itself."""
        status = await proc.wait()
        if self.stop_event.is_set():
            return  # the run is being interrupted: not the server's doing
        tail = log_tail(log_path)
        record["status"] = "server_died"
        record["error"] = f"{what} exited with status {status} during the run"
        detail = ""
        if log_path is not None:
            record["log_tail"] = tail
            detail = f"--- last lines of the server log ---\n{tail}"
        self._fail(RunFailure("server_died", _label(combo) + record["error"], combo.index, detail=detail))
        cstop.set()

    async def _unwatch(self) -> None:
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor
            self._monitor = None

    async def _server_gone(self, combo: Combination, step: Step, reason: str) -> None:
        """A step stopped because its requests could no longer connect (run/deadserver.py). A
        server process of ours that exited is the better diagnosis: its watcher is given a
        moment to see the exit (the connections fail as the process dies, its exit is seen
        just after) and report it; otherwise the server is recorded as unreachable."""
        record = self.combos[-1]
        if self._monitor is not None:
            await asyncio.wait({self._monitor}, timeout=EXIT_SEEN_S)
        if record["status"] == "server_died":
            return
        kind = stop_kind(reason)  # unreachable, or without the API (run/deadserver.py)
        record["status"] = kind
        record["error"] = reason
        self._fail(RunFailure(kind, f"{_label(combo)}{step.id}: {reason}", combo.index,
                              step.id))

    async def _sweep(self, combo: Combination, base_url: str, cstop: asyncio.Event, record: dict) -> None:
        """Warm-up, load and search steps of the combination, in plan order: each load step (and
        each probe of a search) gets the next prompts of the run's deal, after the prefix-cache
        reset the spec asks for; load.saturation may stop the sweep early (run/saturation.py)."""
        steps = [s for s in self.plan.steps if s.combination == combo.index]
        prepared = prepare(self.plan, combo)
        if w_template := combo.workload.chat_template:
            self.console.say(f"chat template ({w_template['source']}): " + (
                "input tokens counted as the server renders them" if w_template["counting"]
                else f"not used: {w_template['note']}"))
        if self.backend:
            await self.backend.prepare(prepared)
        w = combo.workload
        seed0 = w.params.get("seed", 0)
        self._say_prompts(combo)
        resetter = CacheReset(combo.server.reset_cache if combo.server else "never")
        stop = SweepStop(self.plan.saturation)
        positions: dict[int | None, int] = {}  # pass (repeat) -> load steps of it so far
        # /models, /metrics and cache resets go on a session of their own, never on the
        # measured client's
        async with aiohttp.ClientSession() as control:
            await self._describe_target(control, combo, base_url, steps)
            async with open_client(prepared, combo.target, base_url, self.opts.http, cstop,
                                   self.opts.grace_s, self.opts.rx_loop, self.opts.send_priority) as ctx:
                self._ctx = ctx
                first = True

                async def run_load(step: Step, seed: int) -> dict | None:
                    """One warm-up or load step; the load step's point (None: not measured)."""
                    nonlocal first
                    if cstop.is_set():
                        return None
                    reset = await self._reset_cache(resetter, step, first, control, base_url, ctx.headers)
                    first = False
                    deal = self.dealer.deal(w)
                    if step.kind == "warmup":
                        log.info("%s: warm-up (%s requests)", step.id, step.requests)
                        self.phase = f"{_label(combo)}warming up"
                        consumed, stopped = await warm_up(ctx, step, prepared.feed(step, deal))
                        self.dealer.took(w, consumed)
                        if stopped:
                            await self._server_gone(combo, step, stopped)
                        return None
                    point, consumed = await self._point(ctx, control, step, combo, prepared, seed, base_url,
                                                        deal, reset)
                    self.dealer.took(w, consumed)
                    await self._cool_down(step, cstop)
                    return point

                for i, step in enumerate(steps):
                    if cstop.is_set():
                        break
                    if step.kind == "search":
                        # probe k: arrival seed seed0 + i + k - 1, prompt stream step's + k - 1
                        def probe_load(probe: Step, i: int = i) -> Awaitable[dict | None]:
                            return run_load(probe, seed0 + i + probe.probe - 1)

                        block = await run_search(step, probe_load, self.console.say)
                        self.searches.append({"matrix": combo.matrix, **block})
                        self.console.say(_label(combo) + describe(block))
                    elif step.kind == "load":
                        position = positions[step.repeat] = positions.get(step.repeat, -1) + 1
                        if stop.skips(step.id, position):
                            continue
                        point = await run_load(step, seed0 + i)
                        if point is not None:
                            stop.after(point, position)
                    elif step.kind == "warmup":
                        await run_load(step, seed0 + i)
        if stop.record() is not None:
            record["sweep_stop"] = stop.record()
            self.skipped += stop.skipped
            self.console.say(f"{_label(combo)}sweep stopped: {record['sweep_stop']['reason']}; skipped "
                             f"{', '.join(stop.skipped) or 'nothing'}")
        self._say_repeats(combo)

    def _say_prompts(self, combo: Combination) -> None:
        """What the combination's prompts hold (in words, where they are words) and, for a seed
        drawn for this run, how to send the same prompts again."""
        w = combo.workload
        if (words := words_line(w)) is not None:
            self.console.say(f"{_label(combo)}{words}")
        # each point's row then says what the server counted for those words
        self.console.words_sent = w.input_tokens.get("mean") if words is not None else None
        if not w.seed_pinned:  # how to send these prompts again: the result's plan has it too
            seed0 = w.params.get("seed", 0)
            self.console.say(f"{_label(combo)}prompts: seed {seed0} drawn for this run (fresh prompts; "
                             f"--set workload.dataset.{w.dataset}.seed={seed0} sends them again)")

    def _say_repeats(self, combo: Combination) -> None:
        """Per repeated point of the combination: the mean and 95% interval of its runs."""
        for r in summaries([p for p in self.points if p["combination"] == combo.index]):
            self.console.say(_repeat_line(r))

    async def _reset_cache(self, resetter: CacheReset, step: Step, first: bool,
                           session: aiohttp.ClientSession, base_url: str, headers: dict) -> dict | None:
        """The server's prefix cache reset before `step`, when server.reset_cache says so;
        what the reset did goes into the point (run/cache.py)."""
        if not resetter.due(step.kind, first):
            return None
        reset = await resetter.reset(session, server_root(base_url), headers)
        if reset.pop("say", False):
            self.console.say(f"WARNING: {step.id}: {reset['message']}")
        return reset

    async def _cool_down(self, step: Step, cstop: asyncio.Event) -> None:
        if step.cooldown_s and not cstop.is_set():
            self.phase = f"cooling down after {step.id}"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(cstop.wait(), step.cooldown_s)

    async def _describe_target(self, session: aiohttp.ClientSession, combo: Combination, base_url: str,
                               steps: list[Step]) -> None:
        self.phase = f"{_label(combo)}asking the target for its models"
        target = combo.target
        models = await fetch_models(session, base_url, headers_for(target))
        if (unlisted := unlisted_model(target.model, models)) is not None:
            self.console.say(f"WARNING: {_label(combo)}{unlisted}")
        await self._count_gpus(session, combo, base_url, models)
        # the embedded simulator is benchc's own: this benchc's version, nothing to ask
        server = ({"kind": "benchc-sim", "version": __version__, "source": None} if target.sim is not None
                  else await identify(session, server_root(base_url), headers_for(target)))
        self.targets.append({"combination": combo.index, "matrix": combo.matrix,
                             "base_url": redact_url(base_url), "model": target.model,
                             "simulated": target.sim is not None, "server": server,
                             "models": models,
                             "max_inflight": max([s.inflight_target for s in steps] + [1])})

    async def _count_gpus(self, session: aiohttp.ClientSession, combo: Combination, base_url: str,
                          models: Any) -> None:
        """The combination's GPUs, stated in its record (run/gpus.py): the simulator (embedded, or
        one /v1/models names as benchc-sim) is asked for its own."""
        record = self.combos[-1]
        owners = [m.get("owned_by") for m in models.get("data", []) if isinstance(m, dict)] \
            if isinstance(models, dict) and isinstance(models.get("data"), list) else []
        sim = (await read_sim_power(session, server_root(base_url))
               if combo.target.sim is not None or "benchc-sim" in owners else None)
        launched = record.get("server", {}).get("kind") == "launched" and combo.server is not None
        env = {**os.environ, **combo.server.env} if launched and combo.server is not None else None
        gpus = combination_gpus(combo, sim, env)
        if gpus is not None:
            record["gpus"] = gpus
        if sim is not None:
            self._power = SimSource(session, server_root(base_url))
        else:
            if not self._nvml_tried:
                self._nvml, self._nvml_tried = NvmlSource.open(), True
            self._power = self._nvml  # None: nvidia-smi's rows, where it runs

    async def _point(self, ctx: StepContext, control: aiohttp.ClientSession, step: Step, combo: Combination,
                     prepared: Prepared, seed: int, base_url: str, deal: Deal, reset: dict | None
                     ) -> tuple[dict | None, int]:
        """One load point: measured by the backend with telemetry sampled around it, then
        assembled (run/point.py), kept and shown. Returns it (None when nothing was measured)
        and the prompt indices it took."""
        log.info("%s: start", step.id)
        self.phase = f"point {step.id}"
        telemetry = PointTelemetry(control, server_root(base_url), combo.metrics_interval_s)
        power = PowerSampler(self._power, telemetry.gpu)
        async with telemetry.around(), power.around():
            m, failures = await self._measure(ctx, step, combo, prepared, seed, base_url, deal)
        for f in failures:
            self._fail(RunFailure("worker_failed", f, combo.index, step.id))
        if m is None:
            return None, 0
        if m.stopped:
            await self._server_gone(combo, step, m.stopped)
        assembled = assemble_point(step, combo, m, telemetry, step_slo_checks(step, prepared), reset)
        assembled = assembled.with_blocks(energy=energy_of(power, m, assembled, self.combos[-1].get("gpus")))
        log.info("%s: end: %d sent, %d completed, %d failed in %.3fs", step.id, assembled.sent,
                 assembled.completed, assembled.failed, assembled.duration_s)
        point = assembled.to_dict()  # the document's point
        self.points.append(point)
        self.requests += m.requests
        # a dead server's stop cancels what is in flight as errors, not as Ctrl-C's (results/failed.py)
        self.console.point(point, ctrl_c_cancels=self.interrupted and not m.stopped)
        return point, m.consumed

    async def _measure(self, ctx: StepContext, step: Step, combo: Combination, prepared: Prepared, seed: int,
                       base_url: str, deal: Deal) -> tuple[Measurement | None, list[str]]:
        """(measurement, failures) of one point on the run's backend."""
        if self.backend:
            return await self.backend.measure(combo.index, step, base_url, seed, deal, ctx.stop_event)
        ctx.progress = self.console.progress(step)
        heartbeat = asyncio.create_task(self._heartbeat(step, ctx))
        try:
            return await measure_point(ctx, step, prepared, seed, prepared.feed(step, deal)), []
        finally:
            heartbeat.cancel()
            ctx.progress = None

    async def _heartbeat(self, step: Step, ctx: StepContext) -> None:
        """Every PROGRESS_TICK_S: the point's progress; and every HEARTBEAT_S in which nothing at
        all arrived from the server (no stream event, no request's end) while requests were
        in flight, say how many are awaited and how long they may still take."""
        silence = Silence(HEARTBEAT_S)
        while True:
            await asyncio.sleep(PROGRESS_TICK_S)
            run = ctx.running
            if run is None:
                continue
            if ctx.progress is not None:
                ctx.progress.tick(run.rec, ctx.inflight)
            quiet = silence.note_due(run.activity(), ctx.inflight)
            if quiet is not None:
                t, n = ctx.target, ctx.inflight
                self.console.say(
                    f"{step.id}: waiting for the server: {n} request{'s' if n != 1 else ''} in flight, "
                    f"nothing arrived in {quiet:.0f}s (one without an answer fails after "
                    f"{t.first_byte_timeout_s:g}s, target.first_byte_timeout; a silent stream after "
                    f"{t.idle_timeout_s:g}s; any after {t.timeout_s:g}s)")

    # ------------------------------------------------------------------ output

    def _document(self) -> dict:
        # complete: every planned load point ran or a saturation stop skipped it, and every
        # search ended by its own rule
        n_planned = len(self.plan.load_steps())
        n_points = len([p for p in self.points if not is_probe(p)])
        searches_done = (len(self.searches) == len(self.plan.search_steps())
                         and all(s["status"] != "interrupted" for s in self.searches))
        complete = (not self.interrupted and not self.errors and n_points + len(self.skipped) == n_planned
                    and searches_done)
        doc = {
            "schema_version": SCHEMA_VERSION, "benchc_version": __version__, "core": core_name(),
            "created": now_iso(), "complete": complete, "interrupted": self.interrupted,
            "spec": {"path": self.plan.spec["path"], "sha256": self.plan.spec["sha256"],
                     "resolved": _redacted_spec(self.spec_data)},
            "plan": self.plan.to_dict(redact=True), "plan_hash": self.plan.plan_hash,
            "workload_hash": self.plan.workload_hash,
            "environment": environment(type(asyncio.get_event_loop()).__module__.split(".")[0],
                                       self.opts.http),
            "target": self.targets, "combinations": self.combos, "backend": self.backend_info,
            "metric_definitions": METRIC_DEFINITIONS, "points": self.points,
            "slo": run_verdict(bool(self.plan.slo), self.points),  # a probe's failure is the search's
            "errors": [e.to_json() for e in self.errors],
            **({"search": self.searches} if self.searches else {}),
            **({"repeats": summaries(self.points)} if self.plan.repeats > 1 else {}),
        }
        return with_decision(doc)


def energy_of(power: PowerSampler, m: Measurement, point: Point, gpus: dict | None) -> dict:
    """The point's `energy` over its steady span (else its whole window): run/power.py."""
    completed = point.completed
    per_request = point.output_tokens / completed if completed else None
    indices = gpus["indices"] if gpus else None
    if m.steady_ns is not None and m.steady_tokens is not None:
        # the tokens decoded in the span (a Ray point's: its shards' over their common span): a
        # whole count is within half a token of them
        return power.block(*m.steady_ns, "steady", round(m.steady_tokens), per_request, indices)
    if point.start_ns is None or point.end_ns is None:
        return {"available": False}
    return power.block(point.start_ns, point.end_ns, "whole", point.output_tokens, per_request, indices)


def _repeat_line(r: dict) -> str:
    """`c=4 over 5 runs (mean [95% CI]): output_tok_s 254.1 [252.9, 255.3] tok/s, ...`"""
    def show(key: str, scale: float = 1.0, unit: str = "") -> str:
        e = r["metrics"][key]
        if "ci95" not in e:
            return f"{key} -"
        lo, hi = e["ci95"]
        return f"{key} {e['mean'] / scale:,.1f}{unit} [{lo / scale:,.1f}, {hi / scale:,.1f}]"

    untrusted = f"; untrusted runs: {', '.join(r['untrusted_runs'])}" if r["untrusted_runs"] else ""
    return (f"{r['point']} over {r['n']} runs (mean [95% CI]): {show('output_tok_s')} tok/s, "
            f"{show('ttft.p99', 1000, 'ms')}, {show('tpot.p50', 1000, 'ms')}{untrusted}")


def _redacted_spec(spec_data: dict) -> dict:
    """The resolved spec as the result keeps it: credentials replaced by ***."""
    resolved = json.loads(json.dumps(spec_data))
    t = resolved.get("target", {})
    if "api_key" in t:
        t["api_key"] = REDACTED
    if "headers" in t:
        t["headers"] = redact_headers(t["headers"])
    if "base_url" in t:
        t["base_url"] = redact_url(t["base_url"])
    srv = resolved.get("server") or {}
    if isinstance(srv.get("env"), dict):
        srv["env"] = redact_env(srv["env"])
    if isinstance(srv.get("command"), list):
        srv["command"] = redact_argv([str(a) for a in srv["command"]])
    elif isinstance(srv.get("command"), str):
        srv["command"] = redact_argv([srv["command"]])[0]
    return resolved


def server_log_path(combo: Combination, result_path: str) -> str:
    """Where a launched server's output goes: server.log, else beside the result."""
    assert combo.server is not None
    return combo.server.log or os.path.splitext(result_path)[0] + f".server-{combo.index}.log"


def _launches(plan: Plan, opts: RunOptions) -> list[Combination]:
    """The combinations whose server benchc launches (not attached, not the simulator)."""
    if opts.base_url:
        return []
    return [c for c in plan.combinations
            if c.target.sim is None and c.server is not None and not c.server.attach]


def check_file_descriptors(plan: Plan, opts: RunOptions) -> None:
    """The open-file limit against the plan's widest concurrency (and fan-out), before anything starts
    (run/fdlimit.py). On Ray each worker holds only its share of the sockets, on its host."""
    if opts.backend != "local":
        return
    ensure_fds(*plan_sockets(plan))


async def fetch_models(session: aiohttp.ClientSession, base_url: str, headers: dict) -> Any:
    """The target's /v1/models answer as kept in the result: the JSON, or {"status": N}, or
    {"error": ...} (a side channel: never the run's end, except that nothing answers at all)."""
    try:
        async with session.get(base_url.rstrip("/") + "/models", headers=headers, allow_redirects=False,
                               timeout=aiohttp.ClientTimeout(total=30)) as r:
            if r.status != 200:
                return {"status": r.status}
            return await read_json(r, MODELS_BYTES, "/v1/models")
    except aiohttp.ClientConnectorError as e:
        raise TargetUnreachable(f"cannot reach the target at {redact_url(base_url)}: "
                                f"{e.strerror or e}") from e
    except BodyTooLarge as e:  # kept out of the result; the run goes on
        return {"error": str(e)}
    except (aiohttp.ClientError, TimeoutError, ValueError) as e:
        return {"error": f"{type(e).__name__}"}


def _write_result(path: str, doc: dict, requests: list[dict]) -> str:
    """Write the per-request JSONL (when there are records) and the result, to the paths
    reserved before the run. Should that fail now (the disk filled up, the file was replaced
    by something benchc does not write through), the measurement goes to a file of its own in
    the temporary folder rather than being lost; RunError names it."""
    try:
        values.check(doc)  # never a result benchc's own tools would refuse to read
    except values.ValueProblem as problem:
        kept = _rescue(json.dumps(doc, indent=1) + "\n", ".json")
        raise RunError(f"the result holds a value no reader takes ({problem}): a bug in benchc, please "
                       f"report it; the result is in {kept}") from problem
    # the records name their run and the result keeps their hash: export refuses another
    # run's file found under this name (results/export.py)
    text = bound_requests_text(requests, doc) if requests else ""
    try:
        if requests:
            req_path = requests_path(path)
            write_atomic(req_path, text, overwrite=True)
            doc["requests_file"] = os.path.basename(req_path)
        write_atomic(path, json.dumps(doc, indent=1) + "\n", overwrite=True)
        return path
    except (OSError, UsageError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        doc.pop("requests_file", None)
        rescued = [_rescue(json.dumps(doc, indent=1) + "\n", ".json")]
        if requests:
            rescued.append(_rescue(text, ".requests.jsonl"))
        raise RunError(f"could not write the result to {path} ({why}); it is in "
                       + " and ".join(rescued)) from e


def _rescue(text: str, suffix: str) -> str:
    fd, rescue = tempfile.mkstemp(prefix="benchc-result-", suffix=suffix)
    os.close(fd)
    write_atomic(rescue, text, overwrite=True)
    return rescue


def execute(plan: Plan, spec_data: dict, opts: RunOptions) -> tuple[dict, str]:
    """Run the plan; write the result; return (document, path). Raises Interrupted, RunError,
    PointFailed, UntrustedResult or ThresholdFailed *after* writing, so the document is never
    lost (in that order: the first that applies decides the exit code).

    Every output path (result, per-request JSONL, server logs) is checked and the result's
    reserved before the run starts: a run whose result could not be written is refused
    (UsageError, exit 2) before its first request."""
    path = opts.out or output_path(plan.output["path"], plan.name, plan.plan_hash,
                                   sidecars=bool(plan.output.get("requests")))
    reserved = reserve_outputs(path, bool(plan.output.get("requests")),
                               [server_log_path(c, path) for c in _launches(plan, opts)], opts.force)
    try:
        check_file_descriptors(plan, opts)
        runner = Runner(plan, spec_data, opts, path)
        # only the import decides the loop: an exception of the run itself is never handled
        # here (it would carry a chained "No module named 'uvloop'", or run the plan twice)
        run_loop: Callable[[Coroutine[Any, Any, dict]], dict] = asyncio.run
        try:
            import uvloop

            run_loop = uvloop.run
        except ImportError:
            pass
        doc = run_loop(runner.run())
        path = _write_result(path, doc, runner.requests)
    finally:
        reserved.release()
    if runner.interrupted:
        raise Interrupted(f"interrupted; partial result written to {path}")
    if runner.errors:
        raise RunError("\n".join(e.text() for e in runner.errors) + f"\nresult written to {path}")
    failed = failed_points(doc)
    if failed:
        raise PointFailed("load point(s) failed:\n  " + "\n  ".join(failed) + f"\nresult written to {path}")
    untrusted = [p for p in doc["points"] if not p["trust"]["trusted"]]
    if opts.strict and untrusted:
        doubts = [f"{p['id']}: {d['message']}" for p in untrusted for d in p["trust"]["doubts"]
                  if d["fails_strict"]]
        raise UntrustedResult("--strict: " + "; ".join(doubts) + f"; result written to {path}")
    if plan.slo and not doc["slo"]["passed"]:
        failed = failed_checks(doc["points"])
        raise ThresholdFailed("SLO not met:\n  " + "\n  ".join(failed) + f"\nresult written to {path}")
    below = [s for s in doc.get("search", []) if s["status"] == "below_min"]
    if below:
        raise ThresholdFailed("SLO not met:\n  " + "\n  ".join(f"{s['id']}: {s['reason']}" for s in below)
                              + f"\nresult written to {path}")
    undecided = [s for s in doc.get("search", []) if s["status"] == "undecided"]
    if undecided:
        raise SearchUndecided("capacity search undecided (no answer):\n  "
                              + "\n  ".join(f"{s['id']}: {s['reason']}" for s in undecided)
                              + f"\nresult written to {path}")
    return doc, path
