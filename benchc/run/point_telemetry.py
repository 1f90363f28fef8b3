"""Telemetry around one load point, sampled by the driver whichever backend sends the load:
the server's /metrics before, during (every `interval_s`: server.metrics_interval) and after,
the GPUs through nvidia-smi, the driver machine's CPU. The samplers themselves are in
telemetry.py.

The samples during the point are asked for on a fixed schedule, ticks at start + k * interval
on the clock the point's window is on, and each is stamped with its tick: a window of W seconds
holds W / interval ticks, give or take one, and each tick is a sample or is counted `skipped`.
A tick is skipped when the event loop served it more than half an interval late (its sample
would stand for another moment), when MAX_OUTSTANDING scrapes are still unanswered, or when
its scrape failed. A scrape does not wait for the one before it: a server slow to render
/metrics under load (a real vLLM on two busy cores took over 250 ms) would otherwise thin the
series exactly where the load is."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator

import aiohttp

from benchc.client.request import CLOCK
from benchc.run.server_timings import prometheus_timings
from benchc.run.telemetry import GpuSampler, cpu_times, host_cpu, scrape, server_series, server_summary

log = logging.getLogger(__name__)
MAX_OUTSTANDING = 4  # scrapes in flight at once; a tick past them is skipped


class PointTelemetry:
    def __init__(self, session: aiohttp.ClientSession, root: str, interval_s: float = 1.0):
        self.session, self.root, self.interval_s = session, root, interval_s
        self.before: dict | None = None
        self.after: dict | None = None
        self.samples: list[tuple[int, dict]] = []  # (CLOCK when asked, the figures) during the point
        self.skipped: list[int] = []  # ticks (CLOCK) without a sample: late, too many in flight, failed
        self._scrapes: set[asyncio.Task] = set()
        self.gpu = GpuSampler()
        self.cpu0: tuple[float, float] | None = None
        self.cpu1: tuple[float, float] | None = None

    @contextlib.asynccontextmanager
    async def around(self) -> AsyncIterator[PointTelemetry]:
        """Sample while the body runs (outside the measured requests' own work)."""
        self.before = await scrape(self.session, self.root)
        has_gpu = await self.gpu.start()
        log.debug("telemetry: /metrics %s, nvidia-smi %s", "answered" if self.before else "not available",
                  "running" if has_gpu else "not available")
        self.cpu0 = cpu_times()
        poller = asyncio.create_task(self._poll()) if self.before else None
        try:
            yield self
        finally:
            if poller:
                poller.cancel()
                for task in self._scrapes:
                    task.cancel()
                await asyncio.gather(poller, *self._scrapes, return_exceptions=True)
                self.samples.sort(key=lambda s: s[0])
            if has_gpu:
                await self.gpu.stop()
            self.cpu1 = cpu_times()
            self.after = await scrape(self.session, self.root) if self.before else None

    async def _poll(self) -> None:
        step = int(self.interval_s * 1e9)
        tick = CLOCK()
        while True:
            tick += step
            if (wait := tick - CLOCK()) > 0:
                await asyncio.sleep(wait / 1e9)
            if CLOCK() - tick > step // 2 or len(self._scrapes) >= MAX_OUTSTANDING:
                self.skipped.append(tick)
                continue
            task = asyncio.create_task(self._sample(tick))
            self._scrapes.add(task)
            task.add_done_callback(functools.partial(self._scrape_done, tick))

    def _scrape_done(self, tick: int, task: asyncio.Task) -> None:
        self._scrapes.discard(task)
        if task.cancelled():
            # still unanswered when the point ended: a tick without a sample. Counted here, not
            # in _sample, because a task cancelled before its first step never runs its body.
            self.skipped.append(tick)

    async def _sample(self, tick: int) -> None:
        m = await scrape(self.session, self.root)
        if m:
            self.samples.append((tick, m))
        else:
            self.skipped.append(tick)

    @property
    def during(self) -> list[dict]:
        return [m for _, m in self.samples]

    def summary(self, window_s: float, output_tokens: int, input_tokens: int | None = None) -> dict:
        return {"gpu": self.gpu.summary(window_s, output_tokens),
                "server": server_summary(self.before, self.after, self.during, output_tokens, input_tokens),
                "host": host_cpu(self.cpu0, self.cpu1)}

    def server_series(self, start_ns: int | None, end_ns: int | None) -> dict:
        """The /metrics samples within the point's window, as columns (telemetry.server_series)."""
        out = server_series(self.before, self.samples, start_ns, end_ns)
        if out["available"] and start_ns is not None and end_ns is not None:
            out["skipped"] = sum(1 for t in self.skipped if start_ns <= t <= end_ns)
        return out

    def server_phases(self, point: dict) -> dict | None:
        """The server's own phase means over the point (vLLM's histograms), beside the point's
        client figures; None when the server exposes none (run/server_timings.py)."""
        return prometheus_timings(self.before, self.after, point)
