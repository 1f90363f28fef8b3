"""The simulator's /metrics text under the metric names of a real server.

The engine's counters are the same whichever names are used; `metrics_names` picks whose
Prometheus names and label style they are written in, so that benchc's telemetry can be
tested against each server kind it knows (benchc/run/telemetry.py). The names are those
each server documents (sources in tests/data/metrics/README.md).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Counters:
    """What the engine knows, at the moment of a scrape."""

    running: int
    waiting: int
    kv_usage: float  # 0..1
    prompt_tokens: int
    cached_prompt_tokens: int  # prompt tokens its prefix cache supplied
    generation_tokens: int
    requests: int
    prefix_cache_queries: int | None = None  # prompt tokens looked up (None: no prefix cache)
    phase_s: dict[str, float] | None = None  # vLLM's per-request phases: seconds summed ...
    phase_n: int = 0  # ... over this many requests
    cache_resets: int = 0
    created_s: float = 0.0  # wall-clock time the counters started (Prometheus' _created samples)
    # the engine reserves a request's whole KV (prompt + max_tokens) when it admits it, so it
    # never preempts: the counter is there, as on the real servers, and stays 0
    preemptions: int = 0


def render(names: str, model: str, c: Counters) -> str:
    label = f'{{model_name="{model}"}}'
    lines = _RENDER[names](model, c)
    # the simulator's own: how often its prefix cache was emptied on request
    lines += _metric("benchc_sim:prefix_cache_resets_total", "counter", c.cache_resets, label)
    return "\n".join(lines) + "\n"


def _metric(name: str, kind: str, value: float | str, labels: str = "",
            help_: str | None = None) -> list[str]:
    out = [f"# HELP {name} {help_}"] if help_ else []
    return out + [f"# TYPE {name} {kind}", f"{name}{labels} {value}"]


def _vllm(model: str, c: Counters) -> list[str]:
    label = f'{{model_name="{model}"}}'
    out = [
        *_metric("vllm:num_requests_running", "gauge", c.running, label),
        *_metric("vllm:num_requests_waiting", "gauge", c.waiting, label),
        *_metric("vllm:kv_cache_usage_perc", "gauge", f"{c.kv_usage:.6f}", label),
        *_metric("vllm:gpu_cache_usage_perc", "gauge", f"{c.kv_usage:.6f}", label),
        *_metric("vllm:generation_tokens_total", "counter", c.generation_tokens, label),
        *_metric("vllm:prompt_tokens_total", "counter", c.prompt_tokens, label),
        *_metric("vllm:prompt_tokens_cached_total", "counter", c.cached_prompt_tokens, label),
        *_metric("vllm:request_success_total", "counter", c.requests, label),
        *_metric("vllm:num_preemptions_total", "counter", c.preemptions, label),
    ]
    if c.prefix_cache_queries is not None:
        out += [*_metric("vllm:prefix_cache_queries_total", "counter", c.prefix_cache_queries, label),
                *_metric("vllm:prefix_cache_hits_total", "counter", c.cached_prompt_tokens, label)]
    for phase, name in (("queue", "request_queue_time"), ("prefill", "request_prefill_time"),
                        ("decode", "request_decode_time"), ("ttft", "time_to_first_token")):
        if c.phase_s is not None:
            out += [f"# TYPE vllm:{name}_seconds histogram",
                    f"vllm:{name}_seconds_sum{label} {c.phase_s[phase]:.9f}",
                    f"vllm:{name}_seconds_count{label} {c.phase_n}"]
    return _created_twins(out, label, c.created_s)


def _created_twins(lines: list[str], labels: str, created_s: float) -> list[str]:
    """Each counter and histogram followed by its `_created` gauge (when it started, in Unix
    seconds), as vLLM 0.32's prometheus_client writes them: `vllm:generation_tokens_total`
    has `vllm:generation_tokens_created`, `vllm:time_to_first_token_seconds` has
    `vllm:time_to_first_token_seconds_created`. A reader that took one for a figure would
    read a timestamp (about 1.8e9) as a count."""
    out: list[str] = []
    family = None
    for line in lines:
        if line.startswith("# TYPE ") and family:
            out += family
            family = None
        out.append(line)
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            if kind in ("counter", "histogram"):
                base = name.removesuffix("_total") if kind == "counter" else name
                family = [f"# TYPE {base}_created gauge", f"{base}_created{labels} {created_s:.9e}"]
    return out + (family or [])


def _sglang(model: str, c: Counters) -> list[str]:
    label = f'{{model_name="{model}"}}'
    return [
        *_metric("sglang:num_running_reqs", "gauge", c.running, label, "The number of running requests."),
        *_metric("sglang:num_queue_reqs", "gauge", c.waiting, label,
                 "The number of requests in the waiting queue."),
        *_metric("sglang:token_usage", "gauge", f"{c.kv_usage:.6f}", label, "The token usage."),
        *_metric("sglang:prompt_tokens_total", "counter", c.prompt_tokens, label,
                 "Number of prefill tokens processed."),
        *_metric("sglang:generation_tokens_total", "counter", c.generation_tokens, label,
                 "Number of generation tokens processed."),
        *_metric("sglang:cached_tokens_total", "counter", c.cached_prompt_tokens, label,
                 "Number of cached prompt tokens."),
        *_metric("sglang:num_requests_total", "counter", c.requests, label, "Number of requests processed."),
        *_metric("sglang:num_retracted_requests_total", "counter", c.preemptions, label,
                 "Number of retracted requests."),
    ]


def _llamacpp(model: str, c: Counters) -> list[str]:
    # llama-server labels nothing; its prompt counter excludes the tokens taken from the cache
    return [
        *_metric("llamacpp:prompt_tokens_total", "counter", c.prompt_tokens - c.cached_prompt_tokens,
                 help_="Number of prompt tokens processed, excluding cached tokens"),
        *_metric("llamacpp:prompt_tokens_cached_total", "counter", c.cached_prompt_tokens,
                 help_="Number of prompt tokens reused from the cache"),
        *_metric("llamacpp:tokens_predicted_total", "counter", c.generation_tokens,
                 help_="Number of generation tokens processed"),
        *_metric("llamacpp:requests_processing", "gauge", c.running, help_="Number of requests processing"),
        *_metric("llamacpp:requests_deferred", "gauge", c.waiting, help_="Number of requests deferred"),
        *_metric("llamacpp:kv_cache_usage_ratio", "gauge", f"{c.kv_usage:.6f}",
                 help_="KV-cache usage. 1 means 100 percent usage."),
    ]


def _tgi(model: str, c: Counters) -> list[str]:
    # TGI (metrics-exporter-prometheus) writes no HELP lines and histograms as _bucket/_sum/_count
    return [
        *_metric("tgi_queue_size", "gauge", c.waiting),
        *_metric("tgi_batch_current_size", "gauge", c.running),
        *_metric("tgi_request_success", "counter", c.requests),
        "# TYPE tgi_request_generated_tokens histogram",
        f'tgi_request_generated_tokens_bucket{{le="+Inf"}} {c.requests}',
        f"tgi_request_generated_tokens_sum {c.generation_tokens}",
        f"tgi_request_generated_tokens_count {c.requests}",
        "# TYPE tgi_request_input_length histogram",
        f'tgi_request_input_length_bucket{{le="+Inf"}} {c.requests}',
        f"tgi_request_input_length_sum {c.prompt_tokens}",
        f"tgi_request_input_length_count {c.requests}",
    ]


_RENDER = {"vllm": _vllm, "sglang": _sglang, "llamacpp": _llamacpp, "tgi": _tgi}
