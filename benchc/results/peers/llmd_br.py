"""llm-d Benchmark Reports 0.2 and 0.2.1 (one report per load point), read back: what benchc
writes (results/br.py) and what llm-d-benchmark's harnesses write.

Definitions are the report's (llmdbenchmark/analysis/benchmark_report/schema_v0_2*.py): its
Statistics in the units each block names (ms or s; ms/token or s/token), percentiles p0p1 ..
p99p9 as the writing tool computed them (benchc: from its HdrHistograms); ITL and TPOT "may
differ depending on tool": the report's `scenario.load.standardized.tool` says whose. Requests:
`failures` and `incomplete` (benchc writes cancelled requests as incomplete) are both failed
here, as benchc counts them. Token totals are the report's per-request means times the
requests that completed (what benchc divided them by). No histogram is in a report: the
percentiles are all there is.

The observability aggregates of the `server` component (running, waiting, KV-cache usage,
prefix-cache hit rate) and, in 0.2.1, its time series and the client's in-flight series
(component `benchc-client`) come back as the point's telemetry and time series.
"""

from __future__ import annotations

import datetime
import re
from typing import Any

from benchc.results.peers._build import Fields, Figures, PeerPoint, document

TOOL = "llm-d Benchmark Report"
EXPECTED = "an llm-d Benchmark Report 0.2 or 0.2.1 (version, scenario, results)"
VERSIONS = ("0.2", "0.2.1")
_PCTS = {"p0p1": 0.1, "p1": 1.0, "p5": 5.0, "p10": 10.0, "p25": 25.0, "p50": 50.0, "p75": 75.0, "p90": 90.0,
         "p95": 95.0, "p99": 99.0, "p99p9": 99.9}
_LATENCIES = {"time_to_first_token": "ttft", "time_per_output_token": "tpot", "inter_token_latency": "itl",
              "request_latency": "e2e"}
_UNITS = {"ms": 1000.0, "s": 1e6, "ms/token": 1000.0, "s/token": 1e6}
_NUM = r"(\d+(?:\.\d+)?)"
_DURATION = re.compile(rf"^P(?:{_NUM}D)?(?:T(?:{_NUM}H)?(?:{_NUM}M)?(?:{_NUM}S)?)?$")
# 0.2.1 series of the server component -> benchc's time-series columns (telemetry.SERIES_*)
SERVER_SERIES = {"num_requests_running": "running", "num_requests_waiting": "waiting",
                 "kv_cache_usage": "kv_cache_usage", "num_preemptions": "preemptions",
                 "prefix_cache_hits": "prefix_cache_hit_tokens",
                 "prefix_cache_queries": "prefix_cache_query_tokens"}
CLIENT = "benchc-client"


def recognise(doc: Any) -> bool:
    return isinstance(doc, dict) and "version" in doc and isinstance(doc.get("scenario"), dict) \
        and isinstance(doc.get("results"), dict)


def duration_s(text: str) -> float | None:
    """An ISO 8601 duration (`PT5.2S`, `PT1M3S`) in seconds; None when it is none."""
    m = _DURATION.match(text)
    if not m or not any(m.groups()):
        return None
    d, h, mi, s = (float(g) if g else 0.0 for g in m.groups())
    return ((d * 24 + h) * 60 + mi) * 60 + s


def _stats(f: Fields, at: list) -> Figures | None:
    block = f.obj(at, required=False)
    if block is None:
        return None
    units = block.get("units")
    scale = _UNITS.get(units) if isinstance(units, str) else None
    if scale is None:
        raise f.fail(at + ["units"], f"{units!r} is not a time unit benchc reads here ({', '.join(_UNITS)})")

    def us(key: str) -> float | None:
        v = f.number(at + [key], required=False)
        return v * scale if v is not None else None

    fig = Figures(mean=us("mean"), stdev=us("stddev"), min=us("min"), max=us("max"))
    for key, p in _PCTS.items():
        v = us(key)
        if v is not None:
            fig.percentiles[p] = v
    return fig


def _when(text: Any) -> datetime.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        t = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=datetime.UTC)


def _series(f: Fields, at: list, start: datetime.datetime | None) -> tuple[list[float | None], list] | None:
    """A TimeSeriesData as (seconds from the run's start, values)."""
    data = f.obj(at, required=False)
    if data is None:
        return None
    points = f.array(at + ["series"]) or []
    ts: list[float | None] = []
    values = []
    for i, p in enumerate(points):
        when = _when(p.get("ts") if isinstance(p, dict) else None)
        if when is None:
            raise f.fail(at + ["series", i, "ts"], "expected an ISO 8601 time")
        ts.append(round((when - start).total_seconds(), 6) if start else None)
        value = p.get("value") if p.get("value") is not None else p.get("mean")
        if value is not None:
            f.number(at + ["series", i, "value" if p.get("value") is not None else "mean"])
        values.append(value)
    return ts, values


def _observability(f: Fields, start: datetime.datetime | None) -> tuple[dict, dict | None]:
    """(telemetry, timeseries) of the point from the report's observability components."""
    telemetry: dict = {}
    server_cols: dict = {}
    client_cols: dict = {}
    comps = f.array(["results", "observability", "components"], required=False) or []
    for i in range(len(comps)):
        at = ["results", "observability", "components", i]
        label = f.get(at + ["component_label"])
        agg = f.obj(at + ["aggregate"], required=False) or {}
        if label == "server":
            server: dict = {"available": True}
            for ours, theirs in (("running", "running_requests"), ("waiting", "waiting_requests"),
                                 ("kv_cache_usage", "kv_cache_usage")):
                block = f.obj(at + ["aggregate", theirs], required=False)
                if block is not None:
                    server[ours] = {k: f.number(at + ["aggregate", theirs, k])
                                    for k in ("mean", "max") if block.get(k) is not None}
            if agg.get("cache_hit_rate"):
                server["prefix_cache_hit_rate"] = f.number(at + ["aggregate", "cache_hit_rate", "mean"])
            telemetry["server"] = server
            for theirs, ours in SERVER_SERIES.items():
                got = _series(f, at + ["time_series", theirs], start)
                if got is not None:
                    server_cols.setdefault("t_s", got[0])
                    server_cols[ours] = got[1]
        elif label == CLIENT:
            got = _series(f, at + ["time_series", "num_requests_running"], start)
            if got is not None:
                points = f.array(at + ["time_series", "num_requests_running", "series"]) or []
                client_cols = {"t_s": got[0], "in_flight": got[1],
                               "in_flight_max": [p.get("max") for p in points]}
        elif isinstance(agg.get("cpu_utilization"), dict):
            telemetry["host"] = {"available": True,
                                 "busy_fraction": f.number(at + ["aggregate", "cpu_utilization", "mean"])}
    timeseries = None
    if server_cols or client_cols:
        timeseries = {"server": {"available": bool(server_cols), **server_cols}}
        if client_cols:
            timeseries["client"] = client_cols
    return telemetry, timeseries


def _one(f: Fields, index: int) -> PeerPoint:
    std = f.obj(["scenario", "load", "standardized"], required=False) or {}
    point = PeerPoint(id="")
    if std.get("concurrency"):
        point.concurrency = f.integer(["scenario", "load", "standardized", "concurrency"])
        point.id = f"c={point.concurrency}"
    elif std.get("rate_qps"):
        point.rate_rps = f.number(["scenario", "load", "standardized", "rate_qps"])
        point.id = f"rate={point.rate_rps:g}/s"
    native = f.get(["scenario", "load", "native", "config", "benchc_point"], required=False)
    if isinstance(native, str):
        point.id = native  # benchc's own report names its point
    if not point.id:
        point.id = f"stage{std.get('stage', index)}"
    agg = ["results", "request_performance", "aggregate"]
    duration = f.get(["run", "time", "duration"], required=False)
    if duration is not None:
        point.duration_s = duration_s(duration) if isinstance(duration, str) else None
        if point.duration_s is None:
            raise f.fail(["run", "time", "duration"], f"{duration!r} is not an ISO 8601 duration (PT5.2S)")
    point.sent = f.integer(agg + ["requests", "total"], required=False)
    failures = f.integer(agg + ["requests", "failures"], required=False)
    incomplete = f.integer(agg + ["requests", "incomplete"], required=False) or 0
    if failures is not None:
        point.failed = failures + incomplete
        if point.sent is not None:
            point.completed = point.sent - point.failed
    if point.completed is not None:
        for attr, key in (("input_tokens", "input_length"), ("output_tokens", "output_length")):
            mean = f.number(agg + ["requests", key, "mean"], required=False)
            if mean is not None:
                setattr(point, attr, round(mean * point.completed))
    tp = agg + ["throughput"]
    point.output_tok_s = f.number(tp + ["output_token_rate", "mean"], required=False)
    point.total_tok_s = f.number(tp + ["total_token_rate", "mean"], required=False)
    point.request_s = f.number(tp + ["request_rate", "mean"], required=False)
    for theirs, ours in _LATENCIES.items():
        fig = _stats(f, agg + ["latency", theirs])
        if fig is not None:
            # a report counts requests, not ITL gaps; TPOT leaves out requests of one token
            fig.count = point.completed if ours in ("ttft", "e2e") else None
            point.latency[ours] = fig
    start = _when(f.get(["run", "time", "start"], required=False))
    telemetry, timeseries = _observability(f, start)
    point.native = {"tool": std.get("tool"), "tool_version": std.get("tool_version"), "telemetry": telemetry,
                    "timeseries": timeseries}
    return point


def to_document(doc: dict, source: str, more: list[dict] | None = None) -> dict:
    """The reports of one file (a report, or benchc's JSON lines of several) as one document."""
    reports = [doc, *(more or [])]
    points = []
    tools = set()
    for i, rep in enumerate(reports):
        f = Fields(rep, source if not more else f"{source}: report {i + 1}", TOOL)
        version = f.get(["version"])
        if version not in VERSIONS:
            raise f.fail(["version"], f"Benchmark Report version {version!r} is not one benchc reads "
                                      f"(it reads {', '.join(VERSIONS)})")
        point = _one(f, i)
        tools.add(f"{point.native.get('tool')} {point.native.get('tool_version')}")
        points.append(point)
    measured = ", ".join(sorted(tools))
    out = document(f"{measured} (via {TOOL} {doc['version']})", None, f"{TOOL} {doc['version']}", points,
                   definitions={"tool": f"figures as {measured} measured and defined them",
                                "percentiles": "the report's own p0p1..p99p9 (no histogram is in a report)",
                                "requests": "failures and incomplete both counted failed"},
                   histograms="none: a Benchmark Report holds summaries and percentiles only",
                   unmapped=["error kinds"], name=f"{TOOL} {doc['version']}")
    for p, point in zip(out["points"], points, strict=True):
        native = p.pop("peer_native")
        if native.get("telemetry"):
            p["telemetry"] = native["telemetry"]
        if native.get("timeseries"):
            p["timeseries"] = native["timeseries"]
        p["peer_native"] = {"tool": native.get("tool"), "tool_version": native.get("tool_version")}
        del point
    return out
