"""GPU power through a point, and the energy its window took: joules per output token.

One sampler, three ways to read the GPUs (the first that works, chosen per combination):
- the simulator (benchc's, embedded or attached): GET /sim/power, its modelled draw and each
  simulated GPU's energy counter (sim/power.py);
- NVML through `nvidia-ml-py` (`import pynvml`), where importable and a driver answers: every
  GPU's power (nvmlDeviceGetPowerUsage) and, where the GPU keeps one, its energy counter
  (nvmlDeviceGetTotalEnergyConsumption, Volta and later);
- nvidia-smi's looping query, which the point's GPU telemetry already runs (run/telemetry.py:
  GpuSampler stamps each row it reads): power only.
Every GPU of the machine is sampled, idle ones included; the combination's GPUs
(run/gpus.py's indices) are told apart as the server's.

Energy over a window [a, b] per GPU: with energy counters, the counter read at a and b
(linear between the samples around each; exact where the draw is steady between samples);
otherwise the power samples integrated by the trapezoid rule, the first and last sample's
draw held to the window's edges. The window is the point's steady state (every unit in
flight, run/loadgen.py) where it had one, else its whole window; the output tokens are the
ones decoded in that window: each request's pro-rated by the share of its decode span (first
output to end) inside it (metrics/record.py RequestRecord.tokens_within), so a round still
decoding when the steady span ends counts for what it decoded in it. Joules per request:
joules per output token x the point's mean output tokens per completed request.

What a source reads is checked where it enters (a hostile simulator, a driver's glitch):
a draw that is negative, NaN, infinite or past 100 kW is no reading (the sample is dropped
and counted, `dropped_samples` per GPU), nor is such an energy counter (the sample keeps its
draw), so no figure of the block can pass what a result holds. An energy counter that runs
backwards between two samples was reset (NVML's after a GPU reset or a driver reload), and
one that rises faster than a GPU draws (past 100 kW) cannot be read either: that GPU's
joules come from its power samples instead, and its entry says `counter_reset` (a reset
mid-window would otherwise give negative joules, a jump a draw past any float a result holds).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator
from typing import Any, Protocol

import aiohttp

from benchc.run.gpus import read_sim_power

CLOCK = time.perf_counter_ns  # the measured requests' clock (client/http1.py)
INTERVAL_S = 0.1  # a poll every 100 ms: a counter's edges are exact to what 100 ms can move
log = logging.getLogger(__name__)
Sample = tuple[int, float, float | None]  # (t_ns, power W, energy counter J or None)
Row = tuple[int, str | None, float, float | None]  # a GPU's reading: index, name, power W, energy J or None


class Source(Protocol):
    name: str

    async def read(self) -> tuple[int | None, list[Row]] | None:
        """Every GPU now: (index, name, power W, energy J or None), with the instant the source
        itself stamped on the reading (None: it stamps none); None when it could not read."""
        ...


class SimSource:
    name = "simulator"

    def __init__(self, session: aiohttp.ClientSession, root: str):
        self.session, self.root = session, root

    async def read(self) -> tuple[int | None, list[Row]] | None:
        doc = await read_sim_power(self.session, self.root)
        if doc is None:
            return None
        stamp = doc.get("t_ns") if isinstance(doc.get("t_ns"), int) else None
        rows: list[Row] = [(g["index"], g.get("name"), float(g["power_w"]), float(g["energy_j"]))
                           for g in doc["gpus"]]
        return stamp, rows


class NvmlSource:
    name = "nvml"

    def __init__(self, nvml: Any, handles: list[Any], names: list[str]):
        self.nvml, self.handles, self.names = nvml, handles, names

    @classmethod
    def open(cls) -> NvmlSource | None:
        """NVML when `nvidia-ml-py` is installed and a driver answers; None otherwise."""
        try:
            import pynvml  # type: ignore[import-not-found]

            pynvml.nvmlInit()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            names = [_text(pynvml.nvmlDeviceGetName(h)) for h in handles]
        except Exception as e:  # ImportError, or NVMLError of any kind: no NVML here
            log.debug("NVML not available: %s", e)
            return None
        return cls(pynvml, handles, names) if handles else None

    def _read_now(self) -> list[Row]:
        out: list[Row] = []
        for i, h in enumerate(self.handles):
            watts = self.nvml.nvmlDeviceGetPowerUsage(h) / 1000.0  # mW
            try:
                joules: float | None = self.nvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0  # mJ
            except Exception:  # a GPU without the counter (before Volta)
                joules = None
            out.append((i, self.names[i], watts, joules))
        return out

    async def read(self) -> tuple[int | None, list[Row]] | None:
        try:
            return None, await asyncio.to_thread(self._read_now)
        except Exception as e:  # NVMLError: a GPU lost mid-run; the point goes on without it
            log.debug("NVML read failed: %s", e)
            return None


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class PowerSampler:
    """Samples a source while a point runs (or takes nvidia-smi's stamped rows)."""

    def __init__(self, source: Source | None, smi: Any = None, interval_s: float = INTERVAL_S):
        self.source, self.smi, self.interval_s = source, smi, interval_s
        self.samples: dict[int, list[Sample]] = {}
        self.names: dict[int, str | None] = {}
        self.dropped: dict[int, int] = {}  # per GPU: readings refused as impossible (entry checks)

    @property
    def source_name(self) -> str | None:
        if self.source is not None:
            return self.source.name
        return "nvidia-smi" if self.smi is not None and self.smi.stamped else None

    async def _poll_once(self) -> None:
        assert self.source is not None
        t0 = CLOCK()
        got = await self.source.read()
        t1 = CLOCK()
        if got is None:
            return
        stamp, rows = got
        # The reading's own instant where the source stamps one and it falls within the round
        # trip (the same machine's clock: a simulator answers between its steps, up to tens of
        # ms after the ask); else the round trip's middle.
        t = stamp if stamp is not None and t0 <= stamp <= t1 else (t0 + t1) // 2
        for index, name, watts, joules in rows:
            self.names[index] = name
            self.add(index, t, watts, joules)

    def add(self, index: int, t_ns: int, watts: float, joules: float | None) -> None:
        """One GPU's reading, kept when it can be right: a draw that is not a finite number
        of watts from 0 to MAX_GPU_W drops the sample (counted); such an energy counter is
        dropped alone (the draw is kept); an index no GPU has drops the reading."""
        if not (isinstance(index, int) and 0 <= index < MAX_GPUS):
            log.debug("power: a reading of GPU index %r ignored (no GPU's)", index)
            return
        if not _physical(watts):
            self.dropped[index] = self.dropped.get(index, 0) + 1
            return
        keep = joules if _physical(joules, MAX_COUNTER_J) else None
        self.samples.setdefault(index, []).append((t_ns, watts, keep))

    @contextlib.asynccontextmanager
    async def around(self) -> AsyncIterator[PowerSampler]:
        if self.source is None:
            yield self
            return
        await self._poll_once()

        async def poll() -> None:
            while True:
                await asyncio.sleep(self.interval_s)
                await self._poll_once()

        task = asyncio.create_task(poll())
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await self._poll_once()  # a sample after the window's end

    def _all_samples(self) -> dict[int, list[Sample]]:
        if self.source is None and self.smi is not None:
            self.names = {int(k): v for k, v in self.smi.names.items() if k.isdigit()}
            rows = {int(k): v for k, v in self.smi.stamped.items() if k.isdigit()}
            self.dropped = {i: n for i, v in rows.items() if (n := sum(not _physical(w) for _, w in v))}
            return {i: [(t, w, None) for t, w in v if _physical(w)] for i, v in rows.items()}
        return self.samples

    def block(self, start_ns: int, end_ns: int, window: str, output_tokens: int,
              tokens_per_request: float | None, server_gpus: list[int] | None) -> dict:
        """The point's `energy`: per GPU its mean draw and joules over [start_ns, end_ns], the
        server's GPUs and the machine's summed, joules per output token and per request."""
        samples = self._all_samples()
        if not samples or end_ns <= start_ns:
            return {"available": False}
        span_s = (end_ns - start_ns) / 1e9
        gpus: list[dict[str, Any]] = []
        counters = True
        resets = []
        for index in sorted(samples):
            rows = sorted(samples[index])
            joules, counted = energy_between(rows, start_ns, end_ns)
            counters = counters and counted
            server = None if server_gpus is None else index in server_gpus
            gpu: dict[str, Any] = {"index": index, "name": self.names.get(index), "server": server,
                                   "samples": sum(1 for t, _, _ in rows if start_ns <= t <= end_ns),
                                   "power_w": round(joules / span_s, 3), "joules": round(joules, 3)}
            if counter_reset(rows):
                gpu["counter_reset"] = True
                resets.append(index)
            if self.dropped.get(index):
                gpu["dropped_samples"] = self.dropped[index]
            gpus.append(gpu)
        known = server_gpus is not None and any(g["server"] for g in gpus)
        mine = [g for g in gpus if g["server"]] if known else gpus
        server_j = sum(g["joules"] for g in mine)
        machine_j = sum(g["joules"] for g in gpus)
        out: dict = {"available": True, "source": self.source_name, "window": window,
                     "start_ns": start_ns, "end_ns": end_ns, "window_s": round(span_s, 6),
                     "method": "energy counters" if counters else "power samples, trapezoid rule",
                     "gpus": gpus,
                     "server": {"gpus": [g["index"] for g in mine] if known else None,
                                "power_w": round(server_j / span_s, 3), "joules": round(server_j, 3)},
                     "machine": {"power_w": round(machine_j / span_s, 3), "joules": round(machine_j, 3)},
                     "output_tokens": output_tokens,
                     # documents before this field counted the requests completed in the window
                     "output_tokens_counted": "decoded"}
        notes = []
        if resets:
            notes.append(f"the energy counter of GPU {', '.join(map(str, resets))} ran backwards (a reset): "
                         "its joules come from its power samples")
        if dropped := sum(self.dropped.values()):
            notes.append(f"{dropped} reading(s) of an impossible draw (negative, not finite, past "
                         f"{MAX_GPU_W / 1000:g} kW) were dropped")
        if not known:
            notes.append("which GPUs are the server's is not known (server.gpus as indices, or "
                         "CUDA_VISIBLE_DEVICES): the server's figures count every GPU of the machine")
        if notes:
            out["note"] = "; ".join(notes)
        if output_tokens > 0:
            out["joules_per_output_token"] = round(server_j / output_tokens, 6)
            if tokens_per_request:
                out["joules_per_request"] = round(server_j / output_tokens * tokens_per_request, 6)
        return out


# what a reading can be: one GPU draws at most a few kW (an H200 700 W, a B200 1 kW), so past
# 100 kW a draw is a broken reading; NVML's counter is millijoules in a uint64
MAX_GPU_W = 100_000.0
MAX_COUNTER_J = 2**64 / 1000
MAX_GPUS = 4096  # GPU indices a machine may have: a larger one is no GPU's
# a counter may move in steps (a driver updates it every few ms to 100 ms): two samples close
# together may see one whole step, which is no jump
COUNTER_STEP_J = 1000.0


def _physical(x: float | None, most: float = MAX_GPU_W) -> bool:
    """A draw in watts (or a counter in joules, with `most` its bound) that can be right: a
    finite number from 0 to `most`."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and 0 <= x <= most


def counter_reset(rows: list[Sample]) -> bool:
    """Whether one GPU's energy counter cannot be read between two of its samples (by time):
    it ran backwards (a reset), or rose faster than any GPU draws (past MAX_GPU_W: a reset
    to another base, or a broken reading), which would give a draw past what a result holds."""
    counted = [(t, j) for t, _, j in rows if j is not None]
    for (t0, j0), (t1, j1) in zip(counted, counted[1:], strict=False):
        if j1 < j0 or j1 - j0 > MAX_GPU_W * max(t1 - t0, 0) / 1e9 + COUNTER_STEP_J:
            return True
    return False


def energy_between(rows: list[Sample], a: int, b: int) -> tuple[float, bool]:
    """(joules over [a, b], whether energy counters gave it) from one GPU's samples by time.
    A counter that ran backwards (a reset) is not read: the power samples give the joules."""
    if len(rows) >= 2 and all(j is not None for _, _, j in rows) and not counter_reset(rows):
        return _counter_at(rows, b) - _counter_at(rows, a), True
    return _trapezoid(rows, a, b), False


def _counter_at(rows: list[Sample], t: int) -> float:
    """The energy counter at t, from the samples around it. Between two samples whose draws
    differ, the draw is taken to change once, at the instant that makes the counters agree
    (a load starting or ending inside a poll interval: exact then); where no such instant
    exists, or the draws are equal, the counter is linear between them. Beyond the samples,
    the nearest two samples' slope."""
    i = next((k for k, r in enumerate(rows) if r[0] >= t), len(rows) - 1)
    i = max(1, i)
    (t0, p0, j0), (t1, p1, j1) = rows[i - 1], rows[i]
    assert j0 is not None and j1 is not None  # energy_between checked every counter
    if t1 == t0:
        return j1
    if t0 <= t <= t1 and p0 != p1:
        span = (t1 - t0) / 1e9
        switch = ((j1 - j0) - p1 * span) / (p0 - p1)  # seconds after t0 at draw p0
        if 0 <= switch <= span:
            dt = (t - t0) / 1e9
            return j0 + p0 * min(dt, switch) + p1 * max(0.0, dt - switch)
    return j0 + (j1 - j0) * (t - t0) / (t1 - t0)


def _power_at(rows: list[Sample], t: int) -> float:
    if t <= rows[0][0]:
        return rows[0][1]
    if t >= rows[-1][0]:
        return rows[-1][1]
    i = next(k for k, r in enumerate(rows) if r[0] >= t)
    (t0, p0, _), (t1, p1, _) = rows[i - 1], rows[i]
    return p1 if t1 == t0 else p0 + (p1 - p0) * (t - t0) / (t1 - t0)


def _trapezoid(rows: list[Sample], a: int, b: int) -> float:
    points = [(a, _power_at(rows, a))] + [(t, p) for t, p, _ in rows if a < t < b] + [(b, _power_at(rows, b))]
    pairs = zip(points, points[1:], strict=False)
    return sum((t1 - t0) / 1e9 * (p0 + p1) / 2 for (t0, p0), (t1, p1) in pairs)
