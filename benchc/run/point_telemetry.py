"""Telemetry around one load point, sampled by the driver whichever backend sends the load:
the server's /metrics before, during (every second) and after, the GPUs through nvidia-smi,
the driver machine's CPU. The samplers themselves are in telemetry.py."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import aiohttp

from benchc.run.server_timings import prometheus_timings
from benchc.run.telemetry import GpuSampler, cpu_times, host_cpu, scrape, server_summary

log = logging.getLogger(__name__)
POLL_S = 1.0


class PointTelemetry:
    def __init__(self, session: aiohttp.ClientSession, root: str):
        self.session, self.root = session, root
        self.before: dict | None = None
        self.after: dict | None = None
        self.during: list[dict] = []
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
            if has_gpu:
                await self.gpu.stop()
            self.cpu1 = cpu_times()
            self.after = await scrape(self.session, self.root) if self.before else None

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            m = await scrape(self.session, self.root)
            if m:
                self.during.append(m)

    def summary(self, window_s: float, output_tokens: int, input_tokens: int | None = None) -> dict:
        return {"gpu": self.gpu.summary(window_s, output_tokens),
                "server": server_summary(self.before, self.after, self.during, output_tokens, input_tokens),
                "host": host_cpu(self.cpu0, self.cpu1)}

    def server_phases(self, point: dict) -> dict | None:
        """The server's own phase means over the point (vLLM's histograms), beside the point's
        client figures; None when the server exposes none (run/server_timings.py)."""
        return prometheus_timings(self.before, self.after, point)
