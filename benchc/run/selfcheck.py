"""The client self-check of a point (its causes: event-loop lag, CPU, the receive loop's
lag): sampled while the step runs (SelfCheck), summed up at its end (client_summary), and
judged by effect (verdict; run/effects.py decides what a late client moved)."""

from __future__ import annotations

import asyncio
import resource
import time
from collections import Counter
from typing import Any

from benchc.client.http1 import ASYNCIO, RX_LOOP, Pool
from benchc.client.request import CLOCK
from benchc.metrics.latency import Recorder, summarize
from benchc.metrics.recorder import PointRecorder
from benchc.metrics.timeline import ClientSeries
from benchc.run import effects
from benchc.run.sendcheck import SendCheck

# The self-check's ticker: every TICK_S where the event loop dates the reads (aiohttp, https),
# so that its lag, which moves those requests' latencies, is sampled finely; every
# TICK_STAMPED_S where the kernel stamps them (the own reader on plain http), where the lag
# moves no latency and is a cause only. A tick on a loop that has nothing else to do is a
# wakeup of its own, about 50-80 us of CPU on the project's VM: at 5 ms it was the most of
# what `benchc run` spent beside the component benchmark per-token (benchmarks/run_ingest.py).
TICK_S = 0.005
TICK_STAMPED_S = 0.020


class SelfCheck:
    """Samples event-loop lag and the in-flight count while a point runs (into `series` too,
    per interval, when the point keeps one).

    A tick is a bare timer callback, not a task sleeping: on a mostly idle loop (a per-token
    stream read by the receive loop) each tick is a wakeup of its own, and a task's sleep
    (future, task step) cost about twice the callback's CPU per wakeup (benchmarks/run_ingest.py)."""

    def __init__(self, series: ClientSeries | None = None, tick_s: float = TICK_S) -> None:
        self.tick_s = tick_s
        self.lag = Recorder()
        self.late_ticks = 0  # ticks later than effects.LOOP_LAG_P99_US
        self.inflight_samples = 0
        self.inflight_sum = 0
        self.inflight = 0
        self.series = series
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0  # perf_counter seconds the next tick is due at

    def _tick(self) -> None:
        lag_us = max(0.0, (time.perf_counter() - self._due) * 1e6)
        self.lag.record_us(lag_us)
        if lag_us > effects.LOOP_LAG_P99_US:
            self.late_ticks += 1
        self.inflight_samples += 1
        self.inflight_sum += self.inflight
        if self.series is not None:
            self.series.sample_inflight(CLOCK(), self.inflight)
        self._schedule()

    def _schedule(self) -> None:
        self._due = time.perf_counter() + self.tick_s
        self._handle = asyncio.get_running_loop().call_later(self.tick_s, self._tick)

    def start(self) -> None:
        self._schedule()

    async def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def kernel_stamped(pool: Pool | None, url: str) -> bool:
    """Whether the kernel stamps every read of the step (the own reader on plain http: the
    receive loop's reads and the event loop's own), so that a late event loop dates none."""
    return pool is not None and pool.kernel_stamps and not url.startswith("https:")


def verdict(pool: Pool | None, url: str, paths: Counter, rec: PointRecorder, concurrency: int | None,
            sends: SendCheck, client: dict, rx_lag: Any) -> dict:
    """The self-check's verdict by effect (run/effects.py): `effects`, `client_limited`,
    `reasons` (what moved, by how much), and a note when the client ran late to no effect.
    `concurrency`: a closed loop's (None: an open loop, whose offered load is its schedule)."""
    kernel = paths[RX_LOOP] + (paths[ASYNCIO] if kernel_stamped(pool, url) else 0)
    # reads the kernel stamped: the receive loop's, and the event loop's own (client/http1.py)
    reads = pool.take_read_delay() if pool is not None else Recorder()
    if rx_lag is not None:
        reads.hist.merge(rx_lag)
    late_reads = sum(n for us, n in reads.hist.nonzero() if us > effects.LOOP_LAG_P99_US)
    delay = reads.summary()
    gaps = rec.itl.hist
    # a gap of 0 ns (recorded as the histogram's 1 us floor): two chunks of one read
    same_read = sum(n for us, n in gaps.nonzero() if us <= 1)
    merged = same_read / gaps.total_count if gaps.total_count else None
    found = {
        "offered_load": effects.offered_load(concurrency is not None, sends.effect_inputs(), concurrency),
        "latencies": effects.latencies(
            {"kernel": kernel, "loop": sum(paths.values()) - kernel}, client["loop_lag_us"],
            client["late_ticks"], {k: delay[k] for k in ("count", "p50", "p99", "max") if k in delay}
            if delay.get("count") else None, late_reads, merged),
        "client_resources": effects.client_resources(sends.exhausted),
    }
    out: dict = {"effects": found, "reasons": effects.reasons(found)}
    out["client_limited"] = bool(out["reasons"])
    seen = effects.causes(client["loop_lag_us"], client["late_ticks"], client["loop_cpu_fraction"],
                          client.get("rx_loop"))
    if seen:
        out["causes"] = seen
    if (note := effects.note(found, seen)) is not None:
        out["self_check_note"] = note
    return out


def client_summary(check: SelfCheck, skew: Recorder, cpu_s: float, wall_s: float, steady: dict,
                   open_loop: bool, sends: dict | None = None, transport: dict | None = None,
                   rx: dict | None = None) -> dict:
    lag = check.lag.summary()
    cpu_fraction = cpu_s / wall_s if wall_s > 0 else 0.0
    # the event loop's thread: the process less the receive loop's thread, where one read
    loop_cpu_fraction = (cpu_s - rx["cpu_s"]) / wall_s if rx is not None and wall_s > 0 else cpu_fraction
    sk = skew.summary()  # schedule -> send: the cap's queueing and the client's delay together
    rx_block = rx_check(rx, wall_s) if rx is not None else None
    steady_s = ((steady["end_ns"] or 0) - (steady["start_ns"] or 0)) / 1e9 if steady["end_ns"] else 0.0
    mean_inflight = check.inflight_sum / check.inflight_samples if check.inflight_samples else 0.0
    client = {
        "loop_lag_us": {k: lag[k] for k in ("count", "mean", "p50", "p99", "max") if k in lag},
        "late_ticks": check.late_ticks,
        "cpu_s": round(cpu_s, 4), "wall_s": round(wall_s, 4), "cpu_fraction": round(cpu_fraction, 4),
        "loop_cpu_fraction": round(loop_cpu_fraction, 4),
        "send_skew_us": {k: sk[k] for k in ("count", "mean", "p50", "p99", "max") if k in sk},
        **({"late_sends": sends["late"], "capped_sends": sends["capped"]}
           if sends is not None and open_loop else {}),
        "client_limited": False, "reasons": [],  # judged by effect (verdict)
    }
    if transport:
        client["transport"] = transport
    if rx_block is not None:
        client["rx_loop"] = rx_block
    return {
        "client": client,
        "steady": {"duration_s": round(steady_s, 6), "output_tokens": steady["tokens"],
                   "decoded_tokens": round(steady["decoded"], 3),
                   "output_tok_s": round(steady["tokens"] / steady_s, 3) if steady_s > 0.05 else None},
        "mean_inflight_sampled": round(mean_inflight, 3),
    }


def rx_check(rx: dict, wall_s: float) -> dict:
    """What the receive loop cost: its lag (a read's kernel stamp to the loop's read of it) and
    its thread's CPU."""
    lag = summarize(rx["lag"])
    late = sum(count for us, count in rx["lag"].nonzero() if us > effects.LOOP_LAG_P99_US)
    fraction = rx["cpu_s"] / wall_s if wall_s > 0 else 0.0
    return {"lag_us": {k: lag[k] for k in ("count", "mean", "p50", "p99", "max") if k in lag},
            "late_reads": late, "reads": rx["reads"], "bytes": rx["bytes"],
            "cpu_s": round(rx["cpu_s"], 4), "cpu_fraction": round(fraction, 4)}


__all__ = ["SelfCheck", "client_summary", "rx_check", "verdict", "kernel_stamped", "cpu_s", "TICK_S",
           "TICK_STAMPED_S"]
