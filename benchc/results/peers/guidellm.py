"""GuideLLM's benchmark report JSON (`guidellm run --output kind=json`), report version 2
(GuideLLM 0.8: `metadata.version`, `benchmarks[]`); another version is refused by name.

Its definitions (guidellm/schemas/base/request_stats.py), against benchc's:
- TTFT: first token iteration minus the request's start (its worker's clock), benchc's TTFT;
- ITL: per request, (last token - first token) / (output tokens - 1): a per-request average,
  which is benchc's TPOT, not benchc's ITL (every gap between chunks): it is read as `tpot`,
  and benchc's per-chunk ITL is not in the report;
- TPOT: per request, (last token - start) / output tokens, the first token included (llm-d's
  NTPOT): benchc has no such figure; kept in the point's native figures only;
- request latency (seconds) is benchc's E2E;
- distributions: GuideLLM's own summary of the requests it kept (mean, std_dev, min, max,
  percentiles p001 .. p999 = 0.1 .. 99.9); throughputs its `*_per_second` means over the run.
A histogram is built only where the report lists every successful request (no sampling).
"""

from __future__ import annotations

from typing import Any

from benchc.results.peers._build import Fields, Figures, PeerPoint, document

TOOL = "GuideLLM"
FORMAT = "GuideLLM benchmark report JSON (metadata.version 2)"
EXPECTED = "a GuideLLM benchmark report (metadata.version 2, benchmarks[].metrics)"
VERSIONS = (2,)
_PCTS = {"p001": 0.1, "p01": 1.0, "p05": 5.0, "p10": 10.0, "p25": 25.0, "p50": 50.0, "p75": 75.0,
         "p90": 90.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}
# GuideLLM's metric -> (benchc's latency, scale to microseconds, its per-request field and scale)
_LATENCIES = {"time_to_first_token_ms": ("ttft", 1000.0, "time_to_first_token_ms"),
              "inter_token_latency_ms": ("tpot", 1000.0, "inter_token_latency_ms"),
              "request_latency": ("e2e", 1e6, "request_latency")}

DEFINITIONS = {
    "tpot": "GuideLLM's inter_token_latency_ms: per request (last token - first token) / "
            "(output tokens - 1), a per-request average (benchc's TPOT); GuideLLM's own "
            "time_per_output_token_ms includes the first token and is not mapped",
    "itl": "not in the report: GuideLLM keeps no per-chunk gaps",
    "ttft": "first token iteration minus the request's start, on GuideLLM's worker clock",
    "e2e": "GuideLLM's request_latency (seconds): request start to its end",
    "percentiles": "GuideLLM's distribution summary of the requests it kept (p001..p999); its ITL summary "
                   "weights each request's average by the request's token gaps (count = gaps, not requests)",
    "output_tok_s": "GuideLLM's output_tokens_per_second, the mean rate over the benchmark",
}


def recognise(doc: Any) -> bool:
    if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict):
        return False
    return isinstance(doc.get("benchmarks"), list) and "config" in doc and (
        "guidellm_version" in doc["metadata"] or "version" in doc["metadata"])


def _figures(f: Fields, at: list, scale: float) -> Figures | None:
    block = f.obj(at, required=False)
    if block is None:
        return None
    fig = Figures(count=f.integer(at + ["count"], required=False), mean=_scaled(f, at + ["mean"], scale),
                  stdev=_scaled(f, at + ["std_dev"], scale), min=_scaled(f, at + ["min"], scale),
                  max=_scaled(f, at + ["max"], scale))
    pcts = f.obj(at + ["percentiles"], required=False) or {}
    for name, p in _PCTS.items():
        if name in pcts:
            v = _scaled(f, at + ["percentiles", name], scale)
            if v is not None:
                fig.percentiles[p] = v
    return fig


def _scaled(f: Fields, at: list, scale: float) -> float | None:
    v = f.number(at, required=False)
    return v * scale if v is not None else None


def _load(f: Fields, i: int, point: PeerPoint) -> None:
    strategy = f.obj(["benchmarks", i, "config", "strategy"])
    kind = strategy.get("type_") if strategy else None
    if kind == "concurrent":
        point.concurrency = f.integer(["benchmarks", i, "config", "strategy", "streams"])
        point.id = f"c={point.concurrency}"
    elif kind == "synchronous":
        point.concurrency, point.id = 1, "c=1"
    elif kind in ("constant", "poisson"):
        point.rate_rps = f.number(["benchmarks", i, "config", "strategy", "rate"])
        point.arrival = kind
        point.id = f"rate={point.rate_rps:g}/s"
    else:
        point.id = f"{kind}#{i + 1}"  # throughput (all at once) and others: no benchc load to match


def to_document(doc: dict, source: str) -> dict:
    f = Fields(doc, source, TOOL)
    version = f.get(["metadata", "version"])
    if version not in VERSIONS:
        raise f.fail(["metadata", "version"], f"report version {version!r} is not one benchc reads "
                                              f"(it reads {', '.join(map(str, VERSIONS))}: GuideLLM 0.8)")
    tool_version = f.get(["metadata", "guidellm_version"], required=False)
    points = []
    sampled = []
    for i in range(len(f.array(["benchmarks"]) or [])):
        m = ["benchmarks", i, "metrics"]
        point = PeerPoint(id="")
        _load(f, i, point)
        point.duration_s = f.number(["benchmarks", i, "duration"])
        point.completed = f.integer(m + ["request_totals", "successful"])
        point.failed = f.integer(m + ["request_totals", "errored"])
        incomplete = f.integer(m + ["request_totals", "incomplete"], required=False) or 0
        point.sent = f.integer(m + ["request_totals", "total"])
        point.input_tokens = f.total(m + ["prompt_token_count", "successful", "total_sum"], required=False)
        point.output_tokens = f.total(m + ["output_token_count", "successful", "total_sum"], required=False)
        point.request_s = f.number(m + ["requests_per_second", "successful", "mean"], required=False)
        point.output_tok_s = f.number(m + ["output_tokens_per_second", "successful", "mean"], required=False)
        point.total_tok_s = f.number(m + ["tokens_per_second", "successful", "mean"], required=False)
        point.goodput_s = f.number(m + ["request_goodput"], required=False)
        kept = f.array(["benchmarks", i, "requests", "successful"], required=False) or []
        every = len(kept) == point.completed
        if kept and not every:
            sampled.append(f"{point.id}: {len(kept)} of {point.completed} requests listed")
        for name, (ours, scale, per_request) in _LATENCIES.items():
            fig = _figures(f, m + [name, "successful"], scale)
            if fig is None:
                continue
            if every:
                listed = ["benchmarks", i, "requests", "successful"]
                values = [f.number(listed + [j, per_request], required=False) for j in range(len(kept))]
                fig.values = [v * scale for v in values if v is not None]
                # its ITL summary counts tokens (each request's average weighted by its gaps);
                # the histogram holds one value per request
                fig.count = len(fig.values)
            point.latency[ours] = fig
        tpot_incl_first = _figures(f, m + ["time_per_output_token_ms", "successful"], 1000.0)
        point.native = {"strategy": f.obj(["benchmarks", i, "config", "strategy"]), "incomplete": incomplete,
                        "time_per_output_token_us_incl_first":
                            tpot_incl_first.block() if tpot_incl_first else None}
        points.append(point)
    backend = f.obj(["config", "spec", "backend"], required=False) or {}
    model = backend.get("model") if isinstance(backend.get("model"), str) else None
    version_text = str(tool_version) if tool_version is not None else None
    return document(TOOL, version_text, FORMAT, points, model=model,
                    definitions=DEFINITIONS,
                    histograms="from every successful request's value the report lists (ttft, tpot, e2e)"
                    if not sampled else "only where every request is listed; sampled: " + "; ".join(sampled),
                    unmapped=["per-chunk ITL (GuideLLM's ITL is a per-request average: read as tpot)"])
