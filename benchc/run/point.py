"""One load point, the same way on every backend: measure, (merge), assemble.

    prepare(plan, combo) (run/prepare.py)      -> Prepared     prompt source, tokenizer, SLOs
    open_client(prepared, target, url, http)   -> StepContext  the measured requests' client
    prepared.feed(step, deal, shard)           -> StepFeed     the step's requests (this shard's:
                                                               run/shards.py)
    measure_point(ctx, step, prepared, seed, feed) -> Measurement  where the requests are sent
    merge_measurements([...])                  -> Measurement  the shards of a Ray point, exactly
    assemble_point(step, combo, m, telemetry, slo_checks, reset) -> Point   the result's point
                                                               (driver; results/api.py, which writes it)

The local backend measures in the driver's process; the Ray backend runs measure_point
in every worker (ray_backend.LoadWorker) and merges what they return. Everything after
the measurement -- figures, Little's law, the cache verdict, SLOs, trust checks -- happens once, in
assemble_point, whichever backend measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from benchc.client import http1
from benchc.client.request import SESSION_OPTIONS, endpoint, headers_for, make_connector, make_trace_config
from benchc.metrics.aggregate import Tally, figures, merge_client_checks, sum_or_none
from benchc.metrics.cache import cache_verdict
from benchc.metrics.recorder import PointRecorder
from benchc.metrics.timeline import ClientSeries
from benchc.plan.model import Combination, Step, Target
from benchc.results.api import Point
from benchc.results.slo import evaluate_slo
from benchc.results.trust import judge
from benchc.run.agent_replay import AgentFeed, ReplayParts
from benchc.run.clocks import MOVED_NOTE, ClockMark
from benchc.run.effects import judge_by_figure
from benchc.run.feed import StepFeed
from benchc.run.loadgen import StepContext, run_step
from benchc.run.prepare import Prepared, measuring, step_slo_checks
from benchc.run.sessions import SessionFeed
from benchc.run.shards import WHOLE, Shard
from benchc.spec.thresholds import Threshold

log = logging.getLogger(__name__)


def measured_session() -> aiohttp.ClientSession:
    """The aiohttp session of measured requests (--http aiohttp): stamping connector, t0 trace
    hook, the body passed on as it came (the stream parser reads the server's own bytes)."""
    return aiohttp.ClientSession(connector=make_connector(), **SESSION_OPTIONS,
                                 trace_configs=[make_trace_config(), _connection_log()])


def _connection_log() -> aiohttp.TraceConfig:
    """-vv: one line per connection aiohttp opens (the own reader logs its own, client/http1.py)."""

    async def opened(session: aiohttp.ClientSession, ctx: Any, params: Any) -> None:
        log.debug("aiohttp opened a connection")

    tc = aiohttp.TraceConfig()
    tc.on_connection_create_end.append(opened)
    return tc


@contextlib.asynccontextmanager
async def open_client(prepared: Prepared, target: Target, base_url: str, http: str,
                      stop_event: asyncio.Event | None = None, grace_s: float = 5.0, rx_loop: str = "auto",
                      send_priority: bool = True) -> AsyncIterator[StepContext]:
    """The client of one combination's measured requests: benchc's own HTTP/1.1 pool
    (http="native"; `rx_loop` "auto" reads plain http on the receive loop where it is built,
    "off" on the event loop; `send_priority` raises the loop thread's priority through an open
    loop, run/priority.py) or an aiohttp session, closed on the way out."""
    async with measured_session() as session:
        pool = http1.Pool(rx_loop=rx_loop) if http == "native" else None
        try:
            yield StepContext(session=session, url=endpoint(base_url, target.api),
                              headers=headers_for(target), target=target,
                              stop_event=stop_event or asyncio.Event(), grace_s=grace_s,
                              keep_text=prepared.tokenizer is not None, pool=pool,
                              send_priority=send_priority)
        finally:
            if pool is not None:
                await pool.close()


def step_params(step: Step) -> dict:
    """A load step's params in the result (its shape's: plan/shapes.py), and for a step with a
    duration how it ended there: in-flight requests finished (null), or were cancelled this long
    past it (load.graceful_stop; 0: a hard cap)."""
    params = step.params()
    if step.duration_s is not None:
        params["graceful_stop_s"] = step.graceful_stop_s
    return params


@dataclass
class Measurement:
    """What measuring a point (or one shard of it) produced, before any figure is derived."""

    tally: Tally  # counts and histograms (metrics.aggregate)
    client: dict  # the client self-check (run/loadgen.py); merged: one per shard under "shards"
    steady: dict  # the steady-state part of the window: duration_s, output_tokens, output_tok_s
    mean_inflight: float | None  # in-flight count sampled by the self-check (Little's law)
    params: dict  # the step that was run (a shard's own share on Ray)
    complete: bool = True  # False when stopped early or a shard was lost
    host: str = field(default_factory=socket.gethostname)
    requests: list[dict] = field(default_factory=list)  # per-request records, when kept
    shards: list[dict] | None = None  # a merged point: each shard's own counts and histograms
    backend: dict | None = None  # a distributed point: how it was split (set by the backend)
    consumed: int = 0  # the step's prompt indices its requests took (feed.StepFeed.consumed)
    worker: int = 0  # the shard's index (Ray worker i of the point's n)
    stopped: str | None = None  # why the point's load stopped early on its own (run/deadserver.py)
    clock: ClockMark | None = None  # a Ray worker's clock (run/clocks.py); None: the driver's
    moved: bool = False  # placed on the driver's clock from another machine's
    series: ClientSeries | None = None  # in flight and sends per interval (metrics/timeline.py)
    steady_ns: tuple[int, int] | None = None  # the steady span (start, end) on this clock, if one
    # the output tokens decoded within steady_ns, each request's pro-rated by the share of its
    # decode span inside (RequestRecord.tokens_within): the energy's per-token figure divides by them
    steady_tokens: float | None = None
    agent_replay: dict | None = None  # a coding-agent replay's verdict and per-session figures
    agent_parts: ReplayParts | None = None  # what they are made of (a Ray point's merge adds them)

    def move(self, delta_ns: int) -> None:
        """Put every time it holds on another clock (`delta_ns` later)."""
        t = self.tally
        t.start_ns = t.start_ns + delta_ns if t.start_ns is not None else None
        t.end_ns = t.end_ns + delta_ns if t.end_ns is not None else None
        if self.steady_ns is not None:
            self.steady_ns = (self.steady_ns[0] + delta_ns, self.steady_ns[1] + delta_ns)
        for r in self.requests:
            for k in ("t0_ns", "scheduled_ns"):
                if r.get(k) is not None:
                    r[k] += delta_ns
        if self.series is not None:
            self.series.move(delta_ns)
        self.moved = True


async def warm_up(ctx: StepContext, step: Step,
                  feed: StepFeed | SessionFeed | AgentFeed) -> tuple[int, str | None]:
    """Send a warm-up step; nothing of it is kept. Returns the prompt indices it took, and why
    it stopped on its own (a server that stopped answering: run/deadserver.py), if it did."""
    with measuring():
        extra = await run_step(ctx, step, feed, PointRecorder(step.inflight_target or 1), None)
    return feed.consumed(), extra["stopped"]


async def measure_point(ctx: StepContext, step: Step, prepared: Prepared, seed: int,
                        feed: StepFeed | SessionFeed | AgentFeed,
                        shard: Shard = WHOLE) -> Measurement:
    """Send one load step (or a shard's part of it) and count it: the recorder's tally, the
    client self-check, per-request records, and the outputs counted with the tokenizer here,
    where they are, after the measured requests. `feed` holds the step's requests (this
    shard's share of them)."""
    rec = PointRecorder(step.inflight_target, keep_requests=prepared.keep_requests,
                        open_loop=step.shape.open_loop, keep_text=ctx.keep_text)
    with measuring():
        extra = await run_step(ctx, step, feed, rec, step_slo_checks(step, prepared), seed=seed,
                               shard=shard.schedule_slice,
                               series_interval_s=prepared.combo.metrics_interval_s)
    if prepared.tokenizer is not None:
        rec.count_with(prepared.tokenizer)
    if prepared.template is not None:
        tools = prepared.combo.workload.tools
        rec.count_template(prepared.template, tools["definitions"] if tools else None)
    return Measurement(tally=rec.tally, client=extra["client"], steady=extra["steady"],
                       mean_inflight=extra["mean_inflight_sampled"], params=step_params(step),
                       complete=not ctx.stop_event.is_set(),
                       requests=_labelled(step.id, rec.requests, prepared.combo.workload.input_tokens),
                       consumed=feed.consumed(),
                       worker=shard.index, stopped=extra["stopped"], series=extra["series"],
                       steady_ns=extra.get("steady_ns"),
                       steady_tokens=extra["steady"]["decoded_tokens"] if extra.get("steady_ns") else None,
                       agent_replay=extra.get("agent_replay"), agent_parts=extra.get("agent_parts"))


def _labelled(point: str, records: list[dict], input_tokens: dict) -> list[dict]:
    """The per-request records of a point, each with its point; without a tokenizer their
    input_tokens are words (what benchc counts then), and each record says so (`input_unit`)
    rather than pass 512 words for 512 tokens."""
    if input_tokens.get("method") == "words":
        return [{"point": point, **r, "input_unit": "words"} for r in records]
    return [{"point": point, **r} for r in records]


def merge_measurements(parts: list[Measurement]) -> Measurement:
    """The shards of one point, as one measurement: tallies added exactly, self-checks side
    by side (each named by worker and host), steady-state rates and in-flight counts summed
    (the shards ran together). The steady rate is the sum of the shards' rates, each over
    its own steady span, so it is not output_tokens / duration_s; duration_s is the shortest
    span (docs/metrics.md)."""
    tally = Tally.total(m.tally for m in parts)
    steady = {"duration_s": min(m.steady["duration_s"] for m in parts),
              "output_tokens": sum(m.steady["output_tokens"] for m in parts),
              "output_tok_s": sum_or_none(m.steady.get("output_tok_s") for m in parts)}
    if all("decoded_tokens" in m.steady for m in parts):
        steady["decoded_tokens"] = round(sum(m.steady["decoded_tokens"] for m in parts), 3)
    shards = []
    for m in parts:
        f = figures(m.tally)
        shards.append({"worker": m.worker, "host": m.host, "params": m.params, "counts": f["counts"],
                       "window": f["window"],
                       "hdr": {k: v.get("hdr") for k, v in f["latency"].items()}})
    who = [{"worker": m.worker, "host": m.host} for m in parts]
    steady_ns, steady_tokens = common_steady_span(parts)
    # a coding-agent replay's sessions, each whole on one worker: the block one run of them gives
    replays = [m.agent_parts for m in parts if m.agent_parts is not None]
    agent_parts = ReplayParts.merged(replays) if replays else None
    return Measurement(tally=tally, client=merge_client_checks([m.client for m in parts], who), steady=steady,
                       mean_inflight=sum_or_none(m.mean_inflight for m in parts),
                       params=parts[0].params, complete=all(m.complete for m in parts),
                       host=parts[0].host, requests=[r for m in parts for r in m.requests], shards=shards,
                       consumed=max(m.consumed for m in parts), moved=any(m.moved for m in parts),
                       stopped=next((m.stopped for m in parts if m.stopped), None),
                       series=ClientSeries.total(m.series for m in parts if m.series is not None),
                       steady_ns=steady_ns, steady_tokens=steady_tokens, agent_parts=agent_parts,
                       agent_replay=agent_parts.report() if agent_parts is not None else None)


def common_steady_span(parts: list[Measurement]) -> tuple[tuple[int, int] | None, float | None]:
    """The span in which every shard was steady (all its units in flight: the whole point's
    steady state), with the output tokens decoded in it: each shard's count, over its own span,
    scaled to the common one (its rate over its span times the common span). None where a
    shard had no steady span or the spans do not overlap (the energy then takes the whole window)."""
    spans = [(m.steady_ns, m.steady_tokens) for m in parts]
    if any(span is None or tokens is None for span, tokens in spans):
        return None, None
    start = max(span[0] for span, _ in spans if span is not None)
    end = min(span[1] for span, _ in spans if span is not None)
    if end <= start:
        return None, None
    tokens = sum(t * (end - start) / (s[1] - s[0]) for s, t in spans if s is not None and t is not None)
    return (start, end), tokens


class Telemetry(Protocol):
    def summary(self, window_s: float, output_tokens: int, input_tokens: int | None = None) -> dict: ...

    def server_phases(self, point: dict) -> dict | None: ...

    def server_series(self, start_ns: int | None, end_ns: int | None) -> dict: ...


def assemble_point(step: Step, combo: Combination, m: Measurement, telemetry: Telemetry,
                   slo_checks: list[Threshold], reset: dict | None = None) -> Point:
    """The result's point: the figures of the measurement, the telemetry sampled around it,
    the prefix-cache verdict (with the reset done before it, if any), the SLO verdicts and
    the trust checks (results/trust.py), each block added to the typed point in the document's
    order (results/api.py Point.with_blocks; `to_dict()` is what the result holds)."""
    measured = {"id": step.id, "combination": combo.index, "matrix": combo.matrix,
                "params": step_params(step), "complete": m.complete,
                **figures(m.tally, m.steady.get("output_tok_s"), m.mean_inflight)}
    if m.moved:
        measured["window"]["note"] = MOVED_NOTE
    point = Point.from_dict({**measured, "client": m.client, "steady": m.steady})
    point = point.with_blocks(telemetry=telemetry.summary(point.duration_s, point.output_tokens,
                                                          point.input_tokens))
    point = point.with_blocks(timeseries=timeseries(combo, m, telemetry, measured["window"]))
    if combo.target.twin is not None and (twin := twin_block(combo.target.twin, point.to_dict())) is not None:
        point = point.with_blocks(twin=twin)
    if m.backend is not None:
        point = point.with_blocks(backend=m.backend)
    if m.shards is not None:
        # each shard's own figures: the merge can be checked, a slow one found
        point = point.with_blocks(shards=m.shards)
    if combo.workload.trace is not None:
        point = point.with_blocks(trace=trace_block(combo.workload.trace, step, point))
    if m.agent_replay is not None:
        point = point.with_blocks(agent_replay=m.agent_replay)
    cache = {**point.cache, "prompts": combo.workload.prompts}
    if reset is not None:
        cache["reset"] = reset
    point = point.with_blocks(cache=cache_verdict(cache, point.telemetry.server))
    phases = telemetry.server_phases(point.to_dict())
    if phases is not None:
        point = point.with_blocks(server_timings_prometheus=phases)
    if slo_checks:
        point = point.with_blocks(slo=evaluate_slo(slo_checks, point))
    # a late client's bias on each latency, against the figure's size and its SLO bound
    doc = point.to_dict()
    judge_by_figure(doc["client"], doc, slo_checks)
    point = point.with_blocks(client=doc["client"])
    return point.with_blocks(trust=judge(point))


def timeseries(combo: Combination, m: Measurement, telemetry: Telemetry, window: dict) -> dict:
    """The point's time series over its window: the server's /metrics samples and the client's
    in flight and sends per interval, both in seconds from the window's start (docs/report.md)."""
    start, end = window["start_ns"], window["end_ns"]
    out: dict = {"interval_s": combo.metrics_interval_s, "server": telemetry.server_series(start, end)}
    if m.series is not None and start is not None:
        out["client"] = m.series.columns(start, open_loop=not m.params.get("concurrency"))
    return out


def twin_block(twin: dict, point: dict) -> dict | None:
    """A point run against a twin: the largest batch its step time was fitted at beside the
    largest this point ran (the most requests in flight, the client's 5 ms samples or the
    simulator's own gauge, at most the twin's slots): past the first, the twin extrapolates
    (docs/twin.md). None when the twin or the point says nothing of it."""
    fitted = twin.get("fitted_batch_max")
    series = ((point.get("timeseries") or {}).get("client") or {}).get("in_flight_max") or []
    seen = [x for x in series if x is not None]
    seen.append(((point["telemetry"].get("server") or {}).get("running") or {}).get("max"))
    seen.append(point["params"].get("concurrency"))
    seen = [x for x in seen if x is not None]
    if fitted is None or not seen:
        return None
    batch = int(max(seen))
    if twin.get("max_num_seqs"):
        batch = min(batch, int(twin["max_num_seqs"]))
    return {"fitted_batch_max": fitted, "batch_max": batch, "extrapolated": batch > fitted}


def trace_block(trace: dict, step: Step, point: Point) -> dict:
    """A trace point's `trace` block: what the trace's slice holds (its file's sha256,
    requests, token totals, clipped requests, its span at this point's speedup) beside what
    the point sent and got back."""
    block = {k: v for k, v in trace.items() if k != "duration_s"}
    block["trace_duration_s"] = trace["duration_s"]  # in the trace's own time
    speedup = step.params().get("speedup")  # a replay's (a closed loop's has none)
    if speedup is not None:
        block["speedup"] = speedup
        block["duration_s"] = round(trace["duration_s"] / speedup, 6)  # as scheduled here
    block["sent"] = {"requests": point.sent, "completed": point.completed,
                     "input_tokens": point.input_tokens, "output_tokens": point.output_tokens,
                     "duration_s": point.duration_s}
    return block
