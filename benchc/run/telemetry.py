"""Telemetry sampled during each load point; all of it optional, none of it required.

- GPUs: `nvidia-smi --query-gpu=... --format=csv,noheader,nounits -lms N` (when on PATH):
  per GPU mean and max of memory, utilisation and power, so idle GPUs show too;
  energy per output token and output tok/s per watt for the point.
- Server: the Prometheus /metrics endpoint before, during and after the point. The
  server's kind is told by its metric names (vLLM `vllm:`, SGLang `sglang:`, llama.cpp
  `llamacpp:`, TGI `tgi_`); for each, running and waiting requests (queue depth), prompt,
  cached-prompt and generation token counters, whose deltas are set against benchc's
  counts, and what else the kind exports (KV-cache usage, prefix-cache hits, speculative
  decoding). Where each name comes from: tests/data/metrics/README.md.
- Host: the client machine's CPU busy fraction over the point (/proc/stat).
"""

from __future__ import annotations

import asyncio
import math
import re
import shutil
import time
from typing import Any

import aiohttp

from benchc.client.bounded import METRICS_BYTES, BodyTooLarge, read_body

GPU_FIELDS = ("index", "name", "memory.used", "memory.total", "utilization.gpu", "power.draw")

# Per server kind (in detection order): the prefix of its metric names, and our figure ->
# its metric names (the first present wins). Counters end in _total; *_processed excludes
# the tokens a prefix cache supplied (llama.cpp counts only those it computed).
SERVER_KINDS: dict[str, dict[str, Any]] = {
    "vllm": {"prefix": "vllm:", "names": {
        "running": ("vllm:num_requests_running",),
        "waiting": ("vllm:num_requests_waiting",),
        "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        "generation_tokens_total": ("vllm:generation_tokens_total",),
        "prompt_tokens_total": ("vllm:prompt_tokens_total",),
        "cached_prompt_tokens_total": ("vllm:prompt_tokens_cached_total", "vllm:prefix_cache_hits_total"),
        "prefix_cache_hits_total": ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits",
                                    "vllm:gpu_prefix_cache_hits_total"),
        "prefix_cache_queries_total": ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries",
                                       "vllm:gpu_prefix_cache_queries_total"),
        "spec_decode_accepted_total": ("vllm:spec_decode_num_accepted_tokens_total",),
        "spec_decode_draft_total": ("vllm:spec_decode_num_draft_tokens_total",),
        "preemptions_total": ("vllm:num_preemptions_total",),
        # per-request phase histograms (sum and count): run/server_timings.py
        **{f"{phase}_seconds_{part}": (f"vllm:{name}_seconds_{part}",)
           for phase, name in (("queue", "request_queue_time"), ("prefill", "request_prefill_time"),
                               ("decode", "request_decode_time"), ("ttft", "time_to_first_token"))
           for part in ("sum", "count")},
    }},
    "sglang": {"prefix": "sglang:", "names": {
        "running": ("sglang:num_running_reqs",),
        "waiting": ("sglang:num_queue_reqs",),
        "kv_cache_usage": ("sglang:token_usage",),
        "generation_tokens_total": ("sglang:generation_tokens_total",),
        "prompt_tokens_total": ("sglang:prompt_tokens_total",),
        "cached_prompt_tokens_total": ("sglang:cached_tokens_total",),
        "cache_hit_rate": ("sglang:cache_hit_rate",),
        "spec_accept_length": ("sglang:spec_accept_length",),
        # SGLang calls a preemption a retraction (its scheduler's retract_decode); not
        # sglang:num_retracted_reqs, a gauge of the last batch's
        "preemptions_total": ("sglang:num_retracted_requests_total",),
    }},
    "llama.cpp": {"prefix": "llamacpp:", "names": {
        "running": ("llamacpp:requests_processing",),
        "waiting": ("llamacpp:requests_deferred",),
        "kv_cache_usage": ("llamacpp:kv_cache_usage_ratio",),
        "generation_tokens_total": ("llamacpp:tokens_predicted_total",),
        "prompt_tokens_processed_total": ("llamacpp:prompt_tokens_total",),
        "cached_prompt_tokens_total": ("llamacpp:prompt_tokens_cached_total",),
        "spec_decode_accepted_total": ("llamacpp:spec_decode_num_accepted_tokens_total",),
        "spec_decode_draft_total": ("llamacpp:spec_decode_num_draft_tokens_total",),
    }},
    "tgi": {"prefix": "tgi_", "names": {
        "running": ("tgi_batch_current_size",),
        "waiting": ("tgi_queue_size",),
        "generation_tokens_total": ("tgi_request_generated_tokens_sum",),
        "prompt_tokens_total": ("tgi_request_input_length_sum",),
    }},
}
GAUGES = ("running", "waiting", "kv_cache_usage", "cache_hit_rate", "spec_accept_length")
RATIOS = ("kv_cache_usage", "cache_hit_rate", "spec_accept_length")  # averaged over label sets, not summed
COUNTERS = ("generation_tokens_total", "prompt_tokens_total", "prompt_tokens_processed_total",
            "cached_prompt_tokens_total", "prefix_cache_hits_total", "prefix_cache_queries_total",
            "spec_decode_accepted_total", "spec_decode_draft_total", "preemptions_total")
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eE]+|NaN|\+Inf|-Inf)")


# A /metrics figure, and its sum over label sets, is taken below 2^53 (where a double stops
# counting in ones; no counter of a server comes near), else dropped: summed over label sets and
# differenced between samples, values up to 2^63 went past int64 and the run refused its result.
MAX_FIGURE = 2.0**53


def parse_prometheus(text: str) -> dict[str, Any]:
    """Our figures -> values (counters summed over label sets, such as several engines or
    cache sources; ratios averaged), with the server's `kind` (None when no known name)."""
    sums: dict[str, float] = {}
    seen: dict[str, int] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            try:
                value = float(m.group(3))
            except ValueError:
                continue
            if not math.isfinite(value) or abs(value) >= MAX_FIGURE:
                # NaN, Inf or past what a double counts in ones: a result holds neither
                # (results/values.py), and the sums and differences below stay within int64
                continue
            sums[m.group(1)] = sums.get(m.group(1), 0.0) + value
            seen[m.group(1)] = seen.get(m.group(1), 0) + 1
    sums = {name: v for name, v in sums.items() if abs(v) < MAX_FIGURE}  # label sets past it together
    out: dict[str, Any] = {"kind": None}
    for kind, spec in SERVER_KINDS.items():
        if any(name.startswith(spec["prefix"]) for name in sums):
            out["kind"] = kind
            for ours, names in spec["names"].items():
                for n in names:
                    if n in sums:
                        out[ours] = sums[n] / seen[n] if ours in RATIOS else sums[n]
                        break
            break
    return out


async def scrape(session: aiohttp.ClientSession, root: str) -> dict[str, Any] | None:
    try:
        async with session.get(root + "/metrics", timeout=aiohttp.ClientTimeout(total=5),
                               allow_redirects=False) as r:
            if r.status != 200:
                return None
            body = await read_body(r, METRICS_BYTES, "/metrics")
            return parse_prometheus(body.decode("utf-8", "replace"))
    except (aiohttp.ClientError, TimeoutError, BodyTooLarge):
        return None


# A point's time series (points[].timeseries.server): the gauges as sampled, the counters as
# their growth since the sample before the point (so a chart's slope is their rate). Column ->
# our figure (SERVER_KINDS); a column no sample of the point had is left out.
SERIES_GAUGES = {"running": "running", "waiting": "waiting", "kv_cache_usage": "kv_cache_usage"}
SERIES_COUNTERS = {"preemptions": "preemptions_total",
                   # tokens served from the prefix cache (vLLM, SGLang, llama.cpp all count these)
                   "prefix_cache_hit_tokens": "cached_prompt_tokens_total",
                   "prefix_cache_query_tokens": "prefix_cache_queries_total"}


def server_series(before: dict | None, samples: list[tuple[int, dict]], start_ns: int | None,
                  end_ns: int | None) -> dict:
    """The columns of the /metrics samples taken (stamped `t_ns`, on the point's clock) within
    the point's window `start_ns`..`end_ns`: `t_s` in seconds from its start, then one list per
    figure (null where a sample lacked it)."""
    if before is None or before.get("kind") is None or start_ns is None or end_ns is None:
        return {"available": False}
    inside = [(t, m) for t, m in samples if start_ns <= t <= end_ns]
    out: dict = {"available": True, "kind": before["kind"],
                 "t_s": [round((t - start_ns) / 1e9, 6) for t, _ in inside]}
    for column, ours in SERIES_GAUGES.items():
        if any(ours in m for _, m in inside):
            out[column] = [float(f"{m[ours]:.6g}") if ours in m else None for _, m in inside]
    for column, ours in SERIES_COUNTERS.items():
        if ours in before and any(ours in m for _, m in inside):
            out[column] = [_whole(m[ours] - before[ours]) if ours in m else None for _, m in inside]
    return out


def _whole(v: float) -> float | int:
    """A counter's growth as an integer where it is one (Prometheus writes counts as 5.0)."""
    return int(v) if v.is_integer() else v


def _agreement(server: float, benchc: int) -> dict:
    # A difference is a finding: the server counts what it did in the window (warm-up
    # excluded), benchc what its completed requests received.
    diff = round((benchc - server) / server, 6) if server else None
    return {"server": server, "benchc": benchc, "relative_difference": diff}


def server_summary(before: dict | None, after: dict | None, during: list[dict], benchc_tokens: int,
                   benchc_input_tokens: int | None = None) -> dict:
    """The point's server telemetry from /metrics scraped before, during and after it."""
    if before is None or after is None:
        return {"available": False}
    if after.get("kind") is None:
        return {"available": False, "reason": "/metrics has no metric names of a known server "
                                              "(vLLM, SGLang, llama.cpp, TGI)"}
    out: dict = {"available": True, "kind": after["kind"]}
    for k in GAUGES:
        vals = [d[k] for d in during if k in d]
        if vals:
            # 6 significant digits, kept between the samples' min and max, where a mean lies: a
            # small ratio (a real vLLM's KV-cache usage of 0.000183) rounded to 4 places was a
            # mean of 0.0002, above its max
            mean = min(max(float(f"{sum(vals) / len(vals):.6g}"), min(vals)), max(vals))
            out[k] = {"mean": mean, "max": max(vals), "samples": len(vals)}
    deltas = {k: after[k] - before[k] for k in COUNTERS if k in before and k in after}
    if "prompt_tokens_total" not in deltas and {"prompt_tokens_processed_total",
                                                "cached_prompt_tokens_total"} <= deltas.keys():
        deltas["prompt_tokens_total"] = (deltas["prompt_tokens_processed_total"]
                                         + deltas["cached_prompt_tokens_total"])
    for k, v in deltas.items():
        out[k.replace("_total", "_delta")] = v
    q = out.get("prefix_cache_queries_delta")
    if q:
        out["prefix_cache_hit_rate"] = round(out.get("prefix_cache_hits_delta", 0) / q, 4)
    d = out.get("spec_decode_draft_delta")
    if d:
        out["spec_decode_acceptance"] = round(out.get("spec_decode_accepted_delta", 0) / d, 4)
    if "generation_tokens_delta" in out:
        out["token_agreement"] = _agreement(out["generation_tokens_delta"], benchc_tokens)
    if "prompt_tokens_delta" in out and benchc_input_tokens is not None:
        out["prompt_token_agreement"] = _agreement(out["prompt_tokens_delta"], benchc_input_tokens)
    return out


class GpuSampler:
    """nvidia-smi in looping mode while a point runs."""

    def __init__(self, interval_ms: int = 500):
        self.interval_ms = interval_ms
        self.proc: asyncio.subprocess.Process | None = None
        self.samples: dict[str, list[tuple[float, float, float, float]]] = {}
        self.names: dict[str, str] = {}
        self.total_mem: dict[str, float] = {}
        # per GPU (t_ns when its row was read, power W): run/power.py integrates them
        self.stamped: dict[str, list[tuple[int, float]]] = {}
        self._reader: asyncio.Task | None = None

    async def start(self) -> bool:
        exe = shutil.which("nvidia-smi")
        if not exe:
            return False
        try:
            self.proc = await asyncio.create_subprocess_exec(
                exe, f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv,noheader,nounits",
                f"-lms={self.interval_ms}", stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL)
        except OSError:
            return False
        self._reader = asyncio.create_task(self._read())
        return True

    async def _read(self) -> None:
        assert self.proc and self.proc.stdout
        async for raw in self.proc.stdout:
            parts = [p.strip() for p in raw.decode(errors="replace").split(",")]
            if len(parts) != len(GPU_FIELDS):
                continue
            idx, name, used, total, util, power = parts
            try:
                row = (float(used), float(util), float(power), float(total))
            except ValueError:
                continue
            self.names[idx] = name
            self.samples.setdefault(idx, []).append(row)
            self.stamped.setdefault(idx, []).append((time.perf_counter_ns(), row[2]))

    async def stop(self) -> None:
        from benchc.run.server import terminate

        if self.proc:
            await terminate(self.proc, 5)
        if self._reader:
            try:
                await asyncio.wait_for(self._reader, 5)
            except (TimeoutError, asyncio.CancelledError):
                self._reader.cancel()

    def summary(self, window_s: float, output_tokens: int) -> dict:
        if not self.samples:
            return {"available": False}
        gpus = []
        total_power = 0.0
        for idx in sorted(self.samples, key=lambda x: int(x) if x.isdigit() else x):
            rows = self.samples[idx]
            mean = [sum(r[i] for r in rows) / len(rows) for i in range(3)]
            gpus.append({"index": idx, "name": self.names.get(idx), "samples": len(rows),
                         "memory_used_mib": {"mean": round(mean[0], 1), "max": max(r[0] for r in rows)},
                         "memory_total_mib": rows[-1][3],
                         "utilization_pct": {"mean": round(mean[1], 1), "max": max(r[1] for r in rows)},
                         "power_w": {"mean": round(mean[2], 1), "max": max(r[2] for r in rows)}})
            total_power += mean[2]
        out = {"available": True, "gpus": gpus, "power_w_total_mean": round(total_power, 1)}
        if output_tokens and window_s > 0:
            out["joules_per_output_token"] = round(total_power * window_s / output_tokens, 4)
            if total_power:
                out["output_tok_s_per_watt"] = round(output_tokens / window_s / total_power, 4)
        return out


def cpu_times() -> tuple[float, float] | None:
    """(busy, total) jiffies of the whole machine, from /proc/stat (Linux)."""
    try:
        with open("/proc/stat") as f:
            parts = [float(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0.0)
    total = sum(parts)
    return total - idle, total


def host_cpu(before: tuple[float, float] | None, after: tuple[float, float] | None) -> dict:
    if not before or not after or after[1] <= before[1]:
        return {"available": False}
    return {"available": True, "busy_fraction": round((after[0] - before[0]) / (after[1] - before[1]), 4)}
