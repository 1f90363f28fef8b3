"""llm-d Benchmark Reports (versions 0.2 and 0.2.1), one per load point.

The field names, enums and units follow llm-d-benchmark's pydantic models
(`llmdbenchmark/analysis/benchmark_report/schema_v0_2.py`, `schema_v0_2_1.py`) and the JSON
schemas generated from them (copies in tests/data/llmd/, which the tests validate against).
0.2.1 only adds optional fields to 0.2 (multimodal payloads, request sizes, engine time
series). A 0.2.1 report carries what a 0.2 report does, and the point's time series where the
run sampled them (`points[].timeseries`, server.metrics_interval): the server component's
running, waiting, KV-cache usage, preemptions and prefix-cache hits, queries and hit rate at
each /metrics sample, and the client's requests in flight per interval (mean as the value,
the interval's most as `max`) as the `benchc-client` component's num_requests_running.

Every value comes from the result: latency Statistics from the point's summaries and
HdrHistograms (percentiles recomputed from the histogram), counts, token totals, the
workload as the plan compiled it, and the server/GPU/host telemetry sampled during the point.
Wall-clock times are derived from the monotonic windows as benchc/results/clock.py says.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Mapping
from typing import Any

from benchc.catalog import LATENCIES
from benchc.metrics._hdr import Histogram
from benchc.metrics.record import CANCELLED
from benchc.results.api import Latency, Point, Result, from_document
from benchc.results.clock import iso, iso_duration

VERSIONS = ("0.2", "0.2.1")
CLIENT_LABEL = "benchc-client"  # the component whose time series is the client's in-flight count

# What a report can hold that a benchc result does not; `benchc export` lists it on stderr.
LEFT_OUT = [
    "results.request_performance.time_series and observability time series (a result keeps "
    "per-point means, maxima and counter deltas, not series)",
    "latency.normalized_time_per_output_token (not measured)",
    "time to first tool call (ttf_tool_call_us): a report's latency object has no field for it and "
    "allows no other; the result, the CSV export and the HTML report carry it",
    "statistics.mode", "requests.input_length/output_length beyond the mean (the result keeps totals)",
    "0.2.1 multimodal payloads and request_size (text requests; sizes not recorded)",
]

# Namespace of the report ids: uuid5 of the result's identity, so exporting the same result
# twice gives the same ids and two runs of one plan never share one.
_NAMESPACE = uuid.UUID("5b1d0c6e-8a41-5d0e-9a4c-62656e636863")

_PERCENTILES = {"p0p1": 0.1, "p1": 1, "p5": 5, "p10": 10, "p25": 25, "p50": 50, "p75": 75, "p90": 90,
                "p95": 95, "p99": 99, "p99p9": 99.9}

# benchc latency -> (report field, units), as declared (benchc/catalog.py); every latency in
# milliseconds, in the report's field order.
_FIELDS = ("time_to_first_token", "time_per_output_token", "inter_token_latency", "request_latency")
_DECLARED = {m.br[0]: (m.name, m.br) for m in LATENCIES if m.br is not None}
_LATENCIES: dict[str, tuple[str, str]] = dict(_DECLARED[f] for f in _FIELDS if f in _DECLARED)

# How each dataset's input tokens come about: words drawn by benchc (random), or a user's text
# (sampled); a benchc-format trace may carry its rows' own text.
_SOURCES = {"random": "random", "prefix_groups": "random", "jsonl": "sampled", "sharegpt": "sampled",
            "trace": "random"}


def statistics(lat: Latency | None, units: str) -> dict | None:
    """A Statistics object (milliseconds) from a latency summary in microseconds, its
    percentiles read from the summary's HdrHistogram; None when nothing was recorded."""
    if lat is None or not lat.count:
        return None
    # a summary that recorded something has all of these (metrics/latency.py)
    assert lat.hdr is not None and lat.mean is not None and lat.stdev is not None
    assert lat.min is not None and lat.max is not None
    h = Histogram.decode(lat.hdr)
    out: dict[str, Any] = {"units": units, "mean": lat.mean / 1000, "stddev": lat.stdev / 1000,
                           "min": lat.min / 1000, "max": lat.max / 1000}
    for name, pct in _PERCENTILES.items():
        out[name] = h.value_at_percentile(pct) / 1000
    return out


def _seq_len(declared: Mapping | None, measured: Mapping | None, prefix: int = 0) -> dict | None:
    """A SequenceLength: the distribution the spec declared (plus the shared prefix, which every
    prompt carries), with the min and max of the prompts the plan actually built."""
    measured = measured or {}
    declared = declared or {}
    kind = declared.get("kind")
    if kind == "fixed":
        out: dict[str, Any] = {"distribution": "fixed", "value": declared["value"] + prefix}
    elif kind == "uniform":
        out = {"distribution": "uniform", "value": (declared["min"] + declared["max"]) / 2 + prefix}
    elif kind == "normal":
        out = {"distribution": "gaussian", "value": declared["mean"] + prefix, "std_dev": declared["stdev"]}
    elif measured.get("mean") is not None:
        out = {"distribution": "other", "value": measured["mean"]}
    else:
        return None
    if isinstance(measured.get("min"), int):
        out["min"] = measured["min"]
    if isinstance(measured.get("max"), int) and measured["max"] >= 1:
        out["max"] = measured["max"]
    return out


def _output_seq_len(workload: Mapping) -> dict | None:
    """The output length, when the requests pin it down (ignore_eos, or min_tokens = max_tokens);
    otherwise it is a cap the server may stop short of, which the report's field does not mean."""
    sampling = workload.get("sampling", {})
    max_tokens = sampling.get("max_tokens")
    pinned = sampling.get("ignore_eos") or (max_tokens is not None
                                            and sampling.get("min_tokens") == max_tokens)
    if not pinned:
        return None
    if max_tokens is not None:
        return {"distribution": "fixed", "value": max_tokens, "min": max_tokens, "max": max_tokens}
    return _seq_len(workload.get("params", {}).get("output_tokens"), workload.get("output_tokens"))


def _load(r: Result, point: Point, index: int, combo: Mapping, step: Mapping) -> dict:
    workload = combo.get("workload", {})
    params = workload.get("params", {})
    prefix = params.get("prefix_tokens") or 0
    source = _SOURCES.get(workload.get("dataset"), "unknown")
    if params.get("format") == "benchc":
        source = "unknown"  # its rows may be words benchc draws or the user's own text
    declared = params.get("input_tokens", params.get("suffix_tokens"))  # prefix_groups: the suffix
    # without a tokenizer the declared lengths (and the prompts' min/max) are words: the report's
    # SequenceLength has no unit, so native.config says it (input_unit), and the tokens the
    # server counted are results.request_performance's input_length
    words = (workload.get("input_tokens") or {}).get("method") == "words"
    standardized: dict = {
        "tool": "benchc", "tool_version": r.benchc_version,
        "parallelism": r.workers or 1,
        "source": source, "stage": index,
        "input_seq_len": _seq_len(declared, workload.get("input_tokens"), prefix)
        or {"distribution": "other", "value": 0},
    }
    osl = _output_seq_len(workload)
    if osl:
        standardized["output_seq_len"] = osl
    if prefix:
        standardized["prefix"] = {"prefix_len": {"distribution": "fixed", "value": prefix},
                                  "num_groups": params.get("groups") or 1, "num_users_per_group": 1,
                                  "num_prefixes": 1}
    if point.rate_rps:
        standardized["rate_qps"] = point.rate_rps
    if point.concurrency:
        standardized["concurrency"] = point.concurrency
    return {"metadata": {"schema_version": "0.0.1", "cfg_id": r.workload_hash,
                         "description": r.description or r.name},
            "standardized": standardized,
            "native": {"config": {"benchc_point": point.id, "plan_hash": r.plan_hash, "step": dict(step),
                                  "workload": workload, **({"input_unit": "words"} if words else {})}}}


def _server_component(r: Result, point: Point, combo: Mapping) -> dict:
    target = r.target(point.combination)
    models = (target.get("models") or {}).get("data") or []
    served = next((m for m in models if m.get("id") == target.get("model")), models[0] if models else {})
    identity = target.get("server") or {}
    if target.get("simulated"):
        tool, version = "benchc-sim", r.benchc_version
    elif identity.get("kind"):
        # what the run asked the server (run/server_identity.py): vllm 0.32.0, llama.cpp b5000
        tool, version = identity["kind"], identity.get("version") or "unknown"
    else:
        # what /v1/models says it is (vLLM, SGLang and llama.cpp fill owned_by); no version is served
        tool, version = served.get("owned_by") or "unknown", "unknown"
    standardized = {"kind": "generic", "tool": tool, "tool_version": version, "model": target.get("model")}
    if served.get("max_model_len"):
        standardized["max_model_len"] = served["max_model_len"]
    config = combo.get("target")
    if not target.get("simulated") and target.get("base_url") and isinstance(config, Mapping):
        # the URL the run measured (--base-url, a launched server's {free} port), not the spec's
        config = {**config, "base_url": target["base_url"]}
    native: dict = {"config": config}
    if combo.get("server"):
        native["args"] = {"server": combo["server"]}
    return {"metadata": {"label": "server", "cfg_id": r.plan_hash,
                         "description": "the inference server benchc measured"},
            "standardized": standardized, "native": native}


def _host_component(r: Result) -> dict:
    env = r.environment
    return {"metadata": {"label": "benchc-host", "cfg_id": r.plan_hash,
                         "description": f"the machine benchc ran on ({env.get('host')}): its CPUs, and "
                                        "the GPUs nvidia-smi reported there"},
            "standardized": {"kind": "generic", "tool": "benchc", "tool_version": r.benchc_version},
            "native": {"config": {k: env.get(k) for k in ("os", "python", "cpu_count")}}}


def _mean_max(block: Mapping | None, units: str) -> dict | None:
    if not block or block.get("mean") is None:
        return None
    out = {"units": units, "mean": block["mean"]}
    if block.get("max") is not None:
        out["max"] = block["max"]
    return out


def _observability(point: Point) -> list[dict]:
    """Per-component aggregates: the server's /metrics gauges and prefix-cache counters over the
    point, and the benchc machine's CPU and GPUs."""
    tel = point.telemetry
    components = []
    server = tel.server
    if server is not None:
        agg = {"running_requests": _mean_max(server.get("running"), "count"),
               "waiting_requests": _mean_max(server.get("waiting"), "count"),
               # vLLM's kv_cache_usage_perc and SGLang's token_usage are fractions (0..1)
               "kv_cache_usage": _mean_max(server.get("kv_cache_usage"), "fraction")}
        if server.get("prefix_cache_hit_rate") is not None:
            # hits / queries of the server's prefix-cache counters over the point: token-weighted
            agg["cache_hit_rate"] = {"units": "fraction", "mean": server["prefix_cache_hit_rate"]}
        agg = {k: v for k, v in agg.items() if v is not None}
        if agg:
            components.append({"component_label": "server", "aggregate": agg})
    host: dict = {}
    if tel.host_busy_fraction is not None:
        host["cpu_utilization"] = {"units": "fraction", "mean": tel.host_busy_fraction}
    gpus = tel.gpus
    if gpus:
        host["gpu_utilization"] = {"units": "percent",
                                   "mean": sum(g["utilization_pct"]["mean"] for g in gpus) / len(gpus),
                                   "max": max(g["utilization_pct"]["max"] for g in gpus)}
        # memory and power are summed over the GPUs; a sum of maxima is no maximum, so none is given
        host["gpu_memory_usage"] = {"units": "MiB", "mean": sum(g["memory_used_mib"]["mean"] for g in gpus)}
        host["power_consumption"] = {"units": "Watts", "mean": tel.gpu_power_w}
    if host:
        components.append({"component_label": "benchc-host", "aggregate": host})
    return components


def left_out(version: str) -> list[str]:
    """What a report of `version` can hold that benchc's does not (`benchc export` says it)."""
    if version == "0.2":
        return LEFT_OUT
    return ["results.request_performance.time_series (latency and throughput per interval: not kept); "
            "observability time series of points run without server.metrics_interval", *LEFT_OUT[1:]]


def _series(start: datetime.datetime, t_s: list, values: list, units: str,
            maxima: list | None = None) -> dict | None:
    """A TimeSeriesData: each sample's wall-clock time (the window's start + t_s) and value;
    samples without either are left out (a gauge the scrape lacked)."""
    points = []
    for i, (t, v) in enumerate(zip(t_s, values, strict=True)):
        if t is None or v is None:
            continue
        p: dict[str, Any] = {"ts": iso(start + datetime.timedelta(seconds=t)), "value": v}
        if maxima is not None and maxima[i] is not None:
            p["max"] = maxima[i]
        points.append(p)
    return {"units": units, "series": points} if points else None


def _hit_rate(hits: list, queries: list) -> list:
    """The prefix cache's hit rate since the point's first sample, at each sample (hits and
    queries are counted from the sample before the point): None until a query was made."""
    return [h / q if h is not None and q else None for h, q in zip(hits, queries, strict=True)]


def _time_series(r: Result, point: Point) -> tuple[dict | None, dict | None]:
    """(server's, client's) 0.2.1 time series of a point, each None without samples."""
    ts = point.raw.get("timeseries") or {}
    span = r.span(point)
    if not ts or span is None:
        return None, None
    start = span[0]
    server = ts.get("server") or {}
    out_server: dict = {}
    if server.get("available") and server.get("t_s"):
        t_s = server["t_s"]
        for theirs, ours, units in (("num_requests_running", "running", "count"),
                                    ("num_requests_waiting", "waiting", "count"),
                                    ("kv_cache_usage", "kv_cache_usage", "fraction"),
                                    ("num_preemptions", "preemptions", "count"),
                                    ("prefix_cache_hits", "prefix_cache_hit_tokens", "count"),
                                    ("prefix_cache_queries", "prefix_cache_query_tokens", "count")):
            if ours in server:
                s = _series(start, t_s, server[ours], units)
                if s is not None:
                    out_server[theirs] = s
        if "prefix_cache_hit_tokens" in server and "prefix_cache_query_tokens" in server:
            rate = _series(start, t_s, _hit_rate(server["prefix_cache_hit_tokens"],
                                                 server["prefix_cache_query_tokens"]), "fraction")
            if rate is not None:
                out_server["prefix_cache_hit_rate"] = rate
    client = ts.get("client") or {}
    out_client = None
    if client.get("t_s"):
        running = _series(start, client["t_s"], client["in_flight"], "count", client.get("in_flight_max"))
        if running is not None:
            out_client = {"num_requests_running": running}
    return out_server or None, out_client


def _client_component(r: Result) -> dict:
    return {"metadata": {"label": CLIENT_LABEL, "cfg_id": r.plan_hash,
                         "description": "benchc's load generator: its time series is the requests it had in "
                                        "flight per interval (value: the interval's mean, max: its most)"},
            "standardized": {"kind": "generic", "tool": "benchc", "tool_version": r.benchc_version},
            "native": {"config": {}}}


def _requests(point: Point) -> dict:
    cancelled = point.errors.get(CANCELLED, 0)  # older results' Ctrl-C cancels, counted as failed
    # benchc's own cancels (load.cancel, graceful_stop, Ctrl-C): in sent, neither completed nor failed
    incomplete = cancelled + point.raw["counts"].get("cancelled", 0)
    out: dict[str, Any] = {"total": point.sent, "failures": point.failed - cancelled,
                           "incomplete": incomplete}
    if point.completed:
        # token totals are of completed requests; input as the server's usage counted it when sent
        out["input_length"] = {"units": "count", "mean": point.input_tokens / point.completed}
        out["output_length"] = {"units": "count", "mean": point.output_tokens / point.completed}
    return out


def _throughput(point: Point) -> dict:
    window_s = point.duration_s
    input_rate = round(point.input_tokens / window_s, 3) if window_s else 0.0
    return {"input_token_rate": {"units": "tokens/s", "mean": input_rate},
            "output_token_rate": {"units": "tokens/s", "mean": point.output_tok_s},
            "total_token_rate": {"units": "tokens/s", "mean": point.total_tok_s},
            "request_rate": {"units": "queries/s", "mean": point.request_s}}


def _run(r: Result, point: Point, combo: Mapping) -> dict:
    identity = f"benchc:{r.plan_hash}:{r.created_text}:{r.environment.get('host')}"
    model = (combo.get("target") or {}).get("model")
    run: dict = {"uid": str(uuid.uuid5(_NAMESPACE, f"{identity}:{point.id}")),
                 "eid": str(uuid.uuid5(_NAMESPACE, identity)),
                 "description": r.description or f"{model} [{r.name}]"}
    time: dict = {"duration": iso_duration(point.duration_s)}
    span = r.span(point)
    if span:
        time["start"], time["end"] = iso(span[0]), iso(span[1])
    run["time"] = time
    return run


def to_reports(doc: dict, version: str) -> list[dict]:
    """One Benchmark Report per point of `doc`, in point order."""
    if version not in VERSIONS:
        raise ValueError(f"Benchmark Report version {version!r} is not one of {VERSIONS}")
    r = from_document(doc)
    reports = []
    for index, p in enumerate(r.points):
        combo = r.combination(p.combination)
        latency = {field: statistics(p.latency.get(key), units)
                   for key, (field, units) in _LATENCIES.items()}
        results: dict = {"request_performance": {"aggregate": {
            "requests": _requests(p),
            "latency": {k: v for k, v in latency.items() if v is not None},
            "throughput": _throughput(p)}}}
        stack = [_server_component(r, p, combo)]
        components = _observability(p)
        if version != "0.2":  # 0.2.1 added the engine's time series
            server_series, client_series = _time_series(r, p)
            if server_series:
                server = next((c for c in components if c["component_label"] == "server"), None)
                if server is None:
                    server = {"component_label": "server"}
                    components.insert(0, server)
                server["time_series"] = server_series
            if client_series:
                components.append({"component_label": CLIENT_LABEL, "time_series": client_series})
                stack.append(_client_component(r))
        if components:
            results["observability"] = {"components": components}
            if any(c["component_label"] == "benchc-host" for c in components):
                stack.append(_host_component(r))
        reports.append({
            "version": version,
            "run": _run(r, p, combo),
            "scenario": {"stack": stack, "load": _load(r, p, index, combo, r.step(p))},
            "results": results,
        })
    return reports
