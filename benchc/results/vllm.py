"""vLLM-compatible result JSON: per point, the document `vllm bench serve --save-result` writes.

The key set is that of vLLM 0.33.0 (`vllm/benchmarks/serve.py`, wheel commit g4ba787ec9) run as

    vllm bench serve --save-result --percentile-metrics ttft,tpot,itl,e2el

(the default `--metric-percentiles 99`, no `--save-detailed`, no `--goodput`/`--metadata`/
ramp-up/probe/speculative-decoding keys): the run settings `main_async` writes, the
`benchmark()` result less the per-request lists it deletes without `--save-detailed`, and
mean/median/std/p99 in milliseconds for each selected metric. E2EL is selected because the
issue's dashboards read it; everything else is vLLM's default.

Every figure is benchc's own: the latency summaries and HdrHistograms of the point (microseconds
/ 1000), its counts, token totals and throughputs. What benchc cannot fill is null, never made
up (see docs/results.md); the per-request lists and the peak concurrency need the
per-request records (`output.requests: true`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from benchc.catalog import LATENCIES
from benchc.results.api import Point, Result, from_document

VLLM_VERSION = "0.33.0"
VLLM_COMMIT = "g4ba787ec9"

# benchc's API -> the `vllm bench serve --backend` that sends it (vLLM 0.32's ASYNC_REQUEST_FUNCS);
# vLLM has no backend for Anthropic's Messages API, so a Messages run's is null, not a guess
BACKENDS = {"chat": "openai-chat", "completions": "openai", "responses": "openai-responses",
            "embeddings": "openai-embeddings", "rerank": "vllm-rerank"}

# vLLM's name -> benchc's, as declared (benchc/catalog.py), in the order of vLLM's
# --percentile-metrics above
_ORDER = ("ttft", "tpot", "itl", "e2el")
_DECLARED = {m.vllm: m.name for m in LATENCIES if m.vllm}
_METRICS = {name: _DECLARED[name] for name in _ORDER if name in _DECLARED}
_PERCENTILES = (99,)

# In the order vLLM writes them: main_async's settings, then benchmark()'s result dict.
SETTINGS_KEYS = ("date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
                 "request_rate", "burstiness", "max_concurrency")
RESULT_KEYS = ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
               "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
               "latencies", "queue_times", "max_output_tokens_per_s", "max_concurrent_requests", "rtfx")
METRIC_KEYS = tuple(k for m in _METRICS for k in (f"mean_{m}_ms", f"median_{m}_ms", f"std_{m}_ms",
                                                   *(f"p{p:g}_{m}_ms" for p in _PERCENTILES)))
KEYS = SETTINGS_KEYS + RESULT_KEYS + METRIC_KEYS


def _metric_keys(point: Point) -> dict:
    out: dict = {}
    for name, key in _METRICS.items():
        lat = point.latency.get(key)
        stats = ("mean", "median", "std", *(f"p{p:g}" for p in _PERCENTILES))
        if lat is None or not lat.count:
            out.update({f"{stat}_{name}_ms": None for stat in stats})
            continue
        values = (lat.mean, lat.percentiles[50.0], lat.stdev,
                  *(lat.percentiles[float(p)] for p in _PERCENTILES))
        out.update({f"{stat}_{name}_ms": v / 1000 if v is not None else None
                    for stat, v in zip(stats, values, strict=True)})
    return out


def _peak_concurrency(requests: list[dict]) -> int:
    """vLLM's sweep line over the successful requests' [start, end): ends before starts on ties."""
    events = []
    for r in requests:
        if r.get("error") is None and r.get("e2e_us") is not None:
            events += [(r["t0_ns"], 1), (r["t0_ns"] + round(r["e2e_us"] * 1000), -1)]
    events.sort()
    now = peak = 0
    for _, delta in events:
        now += delta
        peak = max(peak, now)
    return peak


def _per_request(point: Point, requests: list[dict] | None) -> dict:
    if requests is None:
        return {"latencies": None, "queue_times": None, "max_concurrent_requests": None}
    # vLLM's queue time is the wait between a request's arrival and its send; a scheduled point
    # has that (send time - scheduled time), a closed loop has no arrival before the send.
    queue = None
    if not point.closed_loop:
        queue = [(r["t0_ns"] - r["scheduled_ns"]) / 1e9 if r.get("scheduled_ns") is not None else None
                 for r in requests]
    return {"latencies": [r["e2e_us"] / 1e6 if r.get("e2e_us") is not None else None for r in requests],
            "queue_times": queue, "max_concurrent_requests": _peak_concurrency(requests)}


def _burstiness(point: Point, step: Mapping[str, Any]) -> float | None:
    """vLLM's gamma shape: 1.0 for Poisson arrivals; none for a closed loop, and none for
    constant arrivals (vLLM's infinity, which JSON cannot hold)."""
    if point.arrival == "poisson":
        return 1.0
    if point.arrival == "gamma":
        return step.get("burstiness")
    return None


def to_vllm(doc: dict, requests_by_point: dict[str, list[dict]] | None = None) -> list[dict]:
    """One vLLM result document per point of `doc`, keys in vLLM's order. `requests_by_point`:
    the per-request records by point id, when the run kept them."""
    r = from_document(doc)
    return [_point(r, p, requests_by_point) for p in r.points]


def _point(r: Result, p: Point, requests_by_point: dict[str, list[dict]] | None) -> dict:
    target = r.combination(p.combination).get("target") or {}
    step = r.step(p)
    span = r.span(p)
    settings = {
        # vLLM stamps the save time, YYYYMMDD-HHMMSS; here the point's end, in UTC
        "date": span[1].strftime("%Y%m%d-%H%M%S") if span else None,
        "endpoint_type": BACKENDS.get(str(target.get("api", "completions"))),
        "backend": BACKENDS.get(str(target.get("api", "completions"))),
        "label": r.name,
        "model_id": target.get("model"),
        "tokenizer_id": target.get("tokenizer"),
        "num_prompts": p.sent,
        # vLLM writes "inf" for "all at once"; a closed loop is its --max-concurrency run
        "request_rate": p.rate_rps if p.rate_rps else "inf",
        "burstiness": _burstiness(p, step),
        "max_concurrency": p.concurrency or p.max_concurrency or step.get("max_concurrency"),
    }
    result = {
        "duration": p.duration_s, "completed": p.completed, "failed": p.failed,
        "total_input_tokens": p.input_tokens, "total_output_tokens": p.output_tokens,
        "request_throughput": p.request_s, "request_goodput": p.goodput_s if r.slo_defined else None,
        "output_throughput": p.output_tok_s, "total_token_throughput": p.total_tok_s,
        **_per_request(p, None if requests_by_point is None else requests_by_point.get(p.id, [])),
        # the peak of per-second output-token buckets needs every token's time: not kept
        "max_output_tokens_per_s": None,
        # vLLM's input audio seconds / duration: benchc sends no audio
        "rtfx": 0.0,
    }
    doc_out = {**settings, **result, **_metric_keys(p)}
    return {k: doc_out[k] for k in KEYS}
