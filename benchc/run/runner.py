"""Execute a Plan: per combination, launch the server (or start the simulator, or attach),
wait until ready, smoke-test, warm up and sweep; then write the result document.

Every way out -- the end, a failed combination, Ctrl-C, SIGTERM -- stops what was
started and writes what was measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp

from benchc import __version__
from benchc._core import core_name
from benchc.client import http1
from benchc.client.request import build_body, endpoint, headers_for, make_connector, make_trace_config
from benchc.errors import Interrupted, RunError, ThresholdFailed, UntrustedResult, UsageError
from benchc.metrics.recorder import PointRecorder
from benchc.plan.compiler import load_tokenizer
from benchc.plan.model import Combination, Plan, Step
from benchc.plan.workload import build_prompts, prompts_sha256
from benchc.redact import redact_argv as _redact_argv
from benchc.redact import redact_url
from benchc.results.document import (
    SCHEMA_VERSION,
    environment,
    metric_value,
    now_iso,
    output_path,
    write_atomic,
)
from benchc.run.loadgen import StepContext, run_step
from benchc.run.server import (
    ServerFailed,
    free_port,
    launch,
    log_tail,
    server_root,
    stop_server,
    terminate,
    wait_ready,
)
from benchc.run.smoke import run_smoke
from benchc.run.telemetry import GpuSampler, cpu_times, host_cpu, scrape, server_summary
from benchc.spec.thresholds import Threshold

METRIC_DEFINITIONS = "benchc-1: README.md#metric-definitions"


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


class _Sim:
    """The embedded simulator as a subprocess: its CPU use stays out of the client's process."""

    def __init__(self, params: dict, model: str):
        self.params, self.model = params, model
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> str:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "benchc", "sim", "--port", "0", "--model", self.model,
            "--config-json", json.dumps(self.params), stdout=asyncio.subprocess.PIPE,
            start_new_session=True)  # our Ctrl-C is ours to handle; we stop it ourselves
        line = (await asyncio.wait_for(self.proc.stdout.readline(), 30)).decode()
        if "listening on " not in line:
            raise RunError(f"the simulator did not start (exit {await self.proc.wait()})")
        return line.split("listening on ")[1].split()[0]

    async def stop(self) -> None:
        if self.proc:
            await terminate(self.proc, 10)


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


def _label(combo: Combination) -> str:
    return (",".join(f"{k}={v}" for k, v in combo.matrix.items()) + ": ") if combo.matrix else ""


def _slo_checks(plan: Plan) -> list[Threshold]:
    return [Threshold(s.metric, s.stat, s.op, s.value, False, s.text) for s in plan.slo]


def _evaluate_slo(checks: list[Threshold], point: dict) -> dict:
    breaches, results = [], []
    for t in checks:
        value = metric_value(point, t.key)
        ok = value is not None and t.holds(value)
        results.append({"threshold": t.text, "value": value, "passed": ok})
        if not ok:
            breaches.append(t.text)
    return {"passed": not breaches, "checks": results}


def prepare_requests(plan: Plan, combo: Combination) -> tuple[list, list[bytes], Any]:
    """(prompts, one serialised request body per prompt, tokenizer or None) of a combination,
    rebuilt from the plan and checked against the prompts it was compiled with."""
    w, target = combo.workload, combo.target
    spec_path = plan.spec["path"]
    tok = load_tokenizer(target.tokenizer, spec_path)
    prompts = build_prompts(w.dataset, w.params, os.path.dirname(os.path.abspath(spec_path)), tok)
    if prompts_sha256(prompts) != w.prompts_sha256:
        raise RunError("the prompts rebuilt from the plan differ from those it was compiled with "
                       "(a dataset or tokenizer file changed since the plan was made?)")
    bodies = [json.dumps(build_body(target, w.sampling, p, continuous_usage=target.continuous_usage))
              .encode() for p in prompts]
    return prompts, bodies, tok


def _expected_lengths(combo: Combination, prompts) -> list[int | None]:
    """Per prompt, the output length the request pins down (ignore_eos, or min = max)."""
    s = combo.workload.sampling
    out = []
    for p in prompts:
        mt = s.max_tokens or p.output_tokens
        fixed = s.ignore_eos or (s.min_tokens is not None and s.min_tokens == mt)
        out.append(mt if fixed else None)
    return out


class Runner:
    def __init__(self, plan: Plan, spec_data: dict, opts: RunOptions, result_path: str = "result.json"):
        self.plan, self.spec_data, self.opts = plan, spec_data, opts
        self.result_path = result_path
        self.stop_event = asyncio.Event()  # Ctrl-C / SIGTERM: stop everything
        self.combo_stop: asyncio.Event | None = None  # also set when this combination's server dies
        self.combos: list[dict] = []
        self.failures: list[str] = []
        self.backend = None  # RayBackend when distributed
        self.backend_info: dict = {"kind": "local"}
        self.interrupted = False
        self.points: list[dict] = []
        self.requests: list[dict] = []
        self.targets: list[dict] = []
        self.errors: list[str] = []

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
                self._say(f"\ninterrupted: finishing in-flight requests (up to {self.opts.grace_s:g}s); "
                          "Ctrl-C again to stop now")
            elif main:
                main.cancel()

        # SIGTERM (benchc itself being stopped) is handled as Ctrl-C: the server is stopped
        # and what was measured is written.
        loop.add_signal_handler(signal.SIGINT, on_sigint)
        loop.add_signal_handler(signal.SIGTERM, on_sigint)
        if self.opts.backend == "ray":
            from benchc.run.ray_backend import RayBackend

            self.backend = RayBackend(self.opts.ray_address, self.opts.workers, self.opts.http)
            hosts = self.backend.start(self.plan)
            self.backend_info = {"kind": "ray", "workers": len(hosts), "hosts": sorted(set(hosts))}
            self._say(f"ray: {len(hosts)} workers on {', '.join(sorted(set(hosts)))}")
        try:
            for combo in self.plan.combinations:
                if self.stop_event.is_set():
                    break
                await self._combination(combo)
        except asyncio.CancelledError:
            if not self.interrupted:
                raise
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            loop.remove_signal_handler(signal.SIGTERM)
            if self.backend:
                self.backend.stop()
        return self._document()

    async def _combination(self, combo: Combination) -> None:
        """Start or attach, check readiness, smoke-test, sweep, stop: one matrix combination.

        A combination that fails (server never ready, smoke failed, server died) is recorded
        with the reason and the log tail; the next combination goes on."""
        steps = [s for s in self.plan.steps if s.combination == combo.index]
        record: dict = {"combination": combo.index, "matrix": combo.matrix, "status": "ok"}
        self.combos.append(record)
        self.combo_stop = cstop = asyncio.Event()
        if self.stop_event.is_set():
            cstop.set()
        base_url = self.opts.base_url or combo.target.base_url
        server = combo.server
        sim = launched = monitor = None
        headers = headers_for(combo.target)
        try:
            if not self.opts.base_url and combo.target.sim is not None:
                sim = _Sim(combo.target.sim, combo.target.model)
                base_url = await sim.start()
                record["server"] = {"kind": "simulator"}
            elif not self.opts.base_url and server is not None and not server.attach:
                argv = list(server.command)
                if any("{free}" in a for a in argv) or "{free}" in base_url:
                    port = str(free_port())
                    argv = [a.replace("{free}", port) for a in argv]
                    base_url = base_url.replace("{free}", port)
                log = server.log or os.path.splitext(self.result_path)[0] + f".server-{combo.index}.log"
                launched = await launch(server, argv, log)
                record["server"] = {"kind": "launched", "command": _redact_argv(argv), "log": log,
                                    "pid": launched.proc.pid}
                self._say(f"{_label(combo)}launched the server (pid {launched.proc.pid}); waiting for "
                          f"{server.ready_path} (up to {server.ready_timeout_s:g}s), log: {log}")
                record["server"]["load_time_s"] = round(
                    await wait_ready(launched, base_url, server, combo.target.model, headers, cstop), 3)
                self._say(f"{_label(combo)}ready after {record['server']['load_time_s']:.1f}s")
                monitor = asyncio.create_task(self._watch(launched, cstop, record))
            elif server is not None:
                record["server"] = {"kind": "attached"}
            if combo.smoke:
                smoke = await run_smoke(combo.smoke, combo.target, base_url, headers, self._secrets(combo))
                record["smoke"] = smoke
                for c in smoke["checks"]:
                    self._say(f"{_label(combo)}smoke {c['name']}: {'passed' if c['passed'] else 'FAILED'} "
                              f"({c['non_streaming']['excerpt'][:60]!r})")
                if not smoke["passed"] and not smoke["continue_on_fail"]:
                    record["status"] = "smoke_failed"
                    self.failures.append(f"{_label(combo)}smoke checks failed")
                    return
            await self._sweep(combo, steps, base_url, cstop)
        except ServerFailed as e:
            record["status"] = "server_failed"
            record["error"] = str(e).split("\n")[0]
            record["log_tail"] = e.tail
            self.failures.append(f"{_label(combo)}{e}")
            self._say(f"ERROR: {_label(combo)}{e}")
        finally:
            if monitor:
                monitor.cancel()
            if launched:
                status = await stop_server(launched, server.stop_timeout_s)
                record["server"]["exit_status"] = status
            if sim:
                await sim.stop()
            self.combo_stop = None

    async def _watch(self, launched, cstop: asyncio.Event, record: dict) -> None:
        """A launched server that exits mid-run stops this combination's load, with its log tail."""
        status = await launched.proc.wait()
        if not cstop.is_set():
            tail = log_tail(launched.log_path)
            record["status"] = "server_died"
            record["error"] = f"the server exited with status {status} during the run"
            record["log_tail"] = tail
            self.failures.append(f"the server exited with status {status} during the run\n"
                                 f"--- last lines of the server log ---\n{tail}")
            self._say(f"ERROR: the server exited with status {status} during the run; "
                      f"last log lines:\n{tail}")
            cstop.set()

    def _secrets(self, combo: Combination) -> list[str]:
        out = [combo.target.api_key or ""]
        out += [v for k, v in combo.target.headers.items() if "auth" in k.lower() or "key" in k.lower()]
        return [x for x in out if x]

    async def _sweep(self, combo: Combination, steps: list[Step], base_url: str,
                     cstop: asyncio.Event) -> None:
        w = combo.workload
        target = combo.target
        prompts, bodies, tok = prepare_requests(self.plan, combo)
        widest = max([s.concurrency or s.max_concurrency or 0 for s in steps] + [1])
        connector = make_connector()
        async with aiohttp.ClientSession(connector=connector, read_bufsize=1 << 20, auto_decompress=False,
                                         trace_configs=[make_trace_config()]) as session:
            models = await self._models(session, base_url, target)
            self.targets.append({"combination": combo.index, "matrix": combo.matrix,
                                 "base_url": redact_url(base_url), "model": target.model,
                                 "simulated": target.sim is not None, "models": models,
                                 "max_inflight": widest})
            self.tokenizer = tok
            ctx = StepContext(session=session, url=endpoint(base_url, target.api), keep_text=tok is not None,
                              headers=headers_for(target), target=target, bodies=bodies, prompts=prompts,
                              expected_output=_expected_lengths(combo, prompts),
                              stop_event=cstop, grace_s=self.opts.grace_s,
                              pool=http1.Pool(rx_loop=self.opts.rx_loop) if self.opts.http == "native"
                              else None)
            checks = _slo_checks(self.plan)
            root = server_root(base_url)
            try:
                for i, step in enumerate(steps):
                    if cstop.is_set():
                        break
                    if step.kind == "warmup":
                        with measuring():
                            await run_step(ctx, step, PointRecorder(step.concurrency or 1), None)
                    elif step.kind == "load":
                        seed = w.params.get("seed", 0) + i
                        if self.backend:
                            await self._ray_point(ctx, step, combo, checks, seed, base_url)
                        else:
                            with measuring():
                                await self._point(ctx, step, combo, checks, seed, root)
                        if step.cooldown_s and not cstop.is_set():
                            try:
                                await asyncio.wait_for(cstop.wait(), step.cooldown_s)
                            except TimeoutError:
                                pass
            finally:
                if ctx.pool is not None:
                    await ctx.pool.close()

    async def _models(self, session: aiohttp.ClientSession, base_url: str, target) -> Any:
        try:
            async with session.get(base_url.rstrip("/") + "/models", headers=headers_for(target),
                                   timeout=aiohttp.ClientTimeout(total=30)) as r:
                if r.status != 200:
                    return {"status": r.status}
                return await r.json()
        except aiohttp.ClientConnectorError as e:
            raise RunError(f"cannot reach the target at {redact_url(base_url)}: {e.strerror or e}") from e
        except (aiohttp.ClientError, TimeoutError, json.JSONDecodeError) as e:
            return {"error": f"{type(e).__name__}"}

    async def _point(self, ctx: StepContext, step: Step, combo: Combination, checks, seed: int,
                     root: str) -> None:
        rec = PointRecorder(step.concurrency or step.max_concurrency or 0,
                            keep_requests=bool(self.plan.output.get("requests")),
                            open_loop=step.rate_rps is not None, keep_text=ctx.keep_text)
        ctx.progress = self._progress(step) if sys.stderr.isatty() and not self.opts.quiet else None
        # Telemetry, outside the measured requests: server metrics before/during/after,
        # GPUs through nvidia-smi when present, the client machine's CPU.
        metrics_before = await scrape(ctx.session, root)
        gpu = GpuSampler()
        has_gpu = await gpu.start()
        cpu0 = cpu_times()
        during: list[dict] = []
        poller = None
        if metrics_before:
            poller = asyncio.create_task(self._poll_metrics(ctx.session, root, during))
        try:
            extra = await run_step(ctx, step, rec, checks, seed=seed)
        finally:
            if poller:
                poller.cancel()
            if has_gpu:
                await gpu.stop()
        cpu1 = cpu_times()
        metrics_after = await scrape(ctx.session, root) if metrics_before else None
        if ctx.keep_text:
            rec.count_with(self.tokenizer)  # after the measured requests, never among them
        summary = rec.summary(extra["steady"])
        window_s = summary["window"]["duration_s"]
        summary["telemetry"] = {
            "gpu": gpu.summary(window_s, summary["tokens"]["output"]),
            "server": server_summary(metrics_before, metrics_after, during, summary["tokens"]["output"]),
            "host": host_cpu(cpu0, cpu1),
        }
        point = {"id": step.id, "combination": combo.index, "matrix": combo.matrix,
                 "params": {"concurrency": step.concurrency, "rate_rps": step.rate_rps,
                            "arrival": step.arrival, "requests": step.requests,
                            "duration_s": step.duration_s},
                 "complete": not ctx.stop_event.is_set(), **summary, "client": extra["client"]}
        # Little's law, L = lambda * W: the in-flight count sampled by the self-check against
        # request/s x mean E2E. A ratio far from 1 means the window or the counts are off.
        little = point["little"]
        little["mean_inflight_sampled"] = extra["mean_inflight_sampled"]
        little["ratio"] = (round(little["mean_inflight_sampled"] / little["throughput_x_latency"], 4)
                           if little["throughput_x_latency"] else None)
        point["throughput"]["steady_output_tok_s"] = extra["steady"]["output_tok_s"]
        point["steady"] = extra["steady"]
        if checks:
            point["slo"] = _evaluate_slo(checks, point)
        self.points.append(point)
        for r in rec.requests:
            self.requests.append({"point": step.id, **r})
        if ctx.progress:
            sys.stderr.write("\r\033[K")
        self._say_row(point)
        osl = point["tokens"]["osl"]
        if osl["mismatched"]:
            osl["warning"] = (f"{osl['mismatched']} of {osl['requests_checked']} requests returned another "
                              "output length than the request pinned down (ignore_eos or min_tokens "
                              "ignored by the server?)")
            self._say(f"WARNING: {step.id}: {osl['warning']}")
        if point["client"]["client_limited"]:
            self._say(f"WARNING: {step.id}: the client itself was saturated "
                      f"({'; '.join(point['client']['reasons'])}): these figures measure benchc")

    async def _ray_point(self, ctx: StepContext, step: Step, combo: Combination, checks, seed: int,
                         base_url: str) -> None:
        """One point, split across the Ray workers and merged exactly."""
        point, failures = await self.backend.run_point(self.plan.to_dict(redact=False), combo.index, step,
                                                       base_url, seed)
        for f in failures:
            self.failures.append(f)
            self._say(f"ERROR: {f}")
        if point is None:
            return
        if checks:
            point["slo"] = _evaluate_slo(checks, point)
        self.points.append(point)
        self._say_row(point)

    async def _poll_metrics(self, session: aiohttp.ClientSession, root: str, out: list[dict]) -> None:
        while True:
            await asyncio.sleep(1.0)
            m = await scrape(session, root)
            if m:
                out.append(m)

    # ------------------------------------------------------------------ output

    def _progress(self, step: Step):
        total = step.requests

        def show(rec: PointRecorder, inflight: int) -> None:
            elapsed = ((rec.last_end or 0) - (rec.first_t0 or 0)) / 1e9
            tok_s = rec.output_tokens / elapsed if elapsed > 0 else 0.0
            done = f"{rec.sent}/{total}" if total else f"{rec.sent}"
            sys.stderr.write(f"\r\033[K{step.id}: {done} done, {inflight} in flight, {tok_s:,.0f} tok/s, "
                             f"{sum(rec.errors.values())} errors")
            sys.stderr.flush()
        return show

    def _say(self, text: str) -> None:
        if not self.opts.quiet:
            print(text, file=sys.stderr, flush=True)

    _HEADER = (f"{'point':<24} {'reqs':>5} {'out tok/s':>10} {'TTFT p50':>9} {'TTFT p99':>9} "
               f"{'ITL p50':>8} {'ITL p99':>8} {'E2E mean':>9} {'E2E p99':>9} {'errors':>6}")

    def _say_row(self, p: dict) -> None:
        if self.opts.quiet:
            return
        if len(self.points) == 1:
            print(self._HEADER, file=sys.stderr)
        lat = p["latency"]

        def ms(block: dict, key: str) -> str:
            v = block.get(key)
            return f"{v / 1000:.1f}ms" if v is not None else "-"

        mark = " !client-limited" if p["client"]["client_limited"] else ""
        if p.get("slo") and not p["slo"]["passed"]:
            mark += " !slo"
        print(f"{p['id']:<24} {p['counts']['completed']:>5} {p['throughput']['output_tok_s']:>10.1f} "
              f"{ms(lat['ttft_us'], 'p50'):>9} {ms(lat['ttft_us'], 'p99'):>9} {ms(lat['itl_us'], 'p50'):>8} "
              f"{ms(lat['itl_us'], 'p99'):>8} {ms(lat['e2e_us'], 'mean'):>9} {ms(lat['e2e_us'], 'p99'):>9} "
              f"{p['counts']['failed']:>6}{mark}", file=sys.stderr, flush=True)

    def _document(self) -> dict:
        from benchc.redact import REDACTED, redact_argv, redact_env, redact_headers

        resolved = json.loads(json.dumps(self.spec_data))
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
        n_planned = len(self.plan.load_steps())
        complete = not self.interrupted and not self.failures and len(self.points) == n_planned
        slo_points = [p for p in self.points if "slo" in p]
        return {
            "schema_version": SCHEMA_VERSION, "benchc_version": __version__, "core": core_name(),
            "created": now_iso(), "complete": complete, "interrupted": self.interrupted,
            "spec": {"path": self.plan.spec["path"], "sha256": self.plan.spec["sha256"],
                     "resolved": resolved},
            "plan": self.plan.to_dict(redact=True), "plan_hash": self.plan.plan_hash,
            "workload_hash": self.plan.workload_hash,
            "environment": environment(type(asyncio.get_event_loop()).__module__.split(".")[0],
                                       self.opts.http),
            "target": self.targets, "combinations": self.combos, "backend": self.backend_info,
            "metric_definitions": METRIC_DEFINITIONS, "points": self.points,
            "slo": {"defined": bool(self.plan.slo), "passed": all(p["slo"]["passed"] for p in slo_points)},
            "errors": self.errors,
        }


def execute(plan: Plan, spec_data: dict, opts: RunOptions) -> tuple[dict, str]:
    """Run the plan; write the result; return (document, path). Raises Interrupted or
    ThresholdFailed *after* writing, so the document is never lost."""
    path = opts.out or output_path(plan.output["path"], plan.name, plan.plan_hash)
    if opts.out and os.path.exists(opts.out) and not opts.force:
        raise UsageError(f"{opts.out} exists; choose another --out or pass --force")
    runner = Runner(plan, spec_data, opts, path)
    try:
        import uvloop  # type: ignore[import-not-found]

        doc = uvloop.run(runner.run())
    except ImportError:
        doc = asyncio.run(runner.run())
    if runner.requests:
        req_path = os.path.splitext(path)[0] + ".requests.jsonl"
        write_atomic(req_path, "".join(json.dumps(r) + "\n" for r in runner.requests), overwrite=opts.force)
        doc["requests_file"] = os.path.basename(req_path)
    write_atomic(path, json.dumps(doc, indent=1) + "\n", overwrite=opts.force)
    if runner.interrupted:
        raise Interrupted(f"interrupted; partial result written to {path}")
    if runner.failures:
        raise RunError("\n".join(runner.failures) + f"\nresult written to {path}")
    if opts.strict:
        doubts = [f"{p['id']}: client-limited" for p in doc["points"] if p["client"]["client_limited"]]
        doubts += [f"{p['id']}: {p['tokens']['osl']['warning']}" for p in doc["points"]
                   if p["tokens"]["osl"].get("warning")]
        if doubts:
            raise UntrustedResult("--strict: " + "; ".join(doubts) + f"; result written to {path}")
    if plan.slo and not doc["slo"]["passed"]:
        failed = [f"{p['id']}: {c['threshold']} (measured {c['value']})" for p in doc["points"]
                  if "slo" in p for c in p["slo"]["checks"] if not c["passed"]]
        raise ThresholdFailed("SLO not met:\n  " + "\n  ".join(failed) + f"\nresult written to {path}")
    return doc, path
