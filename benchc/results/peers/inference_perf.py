"""inference-perf's lifecycle reports (`summary_lifecycle_metrics.json`, `stage_N_lifecycle_metrics.json`;
inference-perf 0.7), with the run's `config.yaml` beside them when it is there (the load).

The reports carry no version; a file is recognised by its keys (load_summary, successes,
failures). Its definitions (inference_perf/reportgen/base.py), against benchc's:
- time_to_first_token: first token's time minus the request's start (seconds), benchc's TTFT;
- inter_token_latency: the summary of every gap between consecutive tokens' times of every
  request (per chunk, benchc's ITL);
- time_per_output_token: per request (last token - first token) / (output tokens - 1): benchc's TPOT;
- normalized_time_per_output_token: request latency / output tokens (llm-d's NTPOT): not mapped;
- request_latency: benchc's E2E; percentiles numpy's (`median` is p50), no standard deviation.
The load (concurrency or rate) is read from config.yaml's single stage; a report of several
stages, or without its config, has no load benchc can match points by.
"""

from __future__ import annotations

import os
from typing import Any

from benchc.results.peers._build import Fields, Figures, PeerPoint, document

TOOL = "inference-perf"
FORMAT = "inference-perf lifecycle metrics report (unversioned; read as 0.7 writes it)"
EXPECTED = "an inference-perf lifecycle report (load_summary, successes, failures)"
_PCTS = {"p0.1": 0.1, "p1": 1.0, "p5": 5.0, "p10": 10.0, "p25": 25.0, "median": 50.0, "p75": 75.0,
         "p90": 90.0, "p95": 95.0, "p99": 99.0, "p99.9": 99.9}
_LATENCIES = {"time_to_first_token": "ttft", "inter_token_latency": "itl", "time_per_output_token": "tpot",
              "request_latency": "e2e"}

DEFINITIONS = {
    "ttft": "first token's time minus the request's start, on inference-perf's clock",
    "itl": "every gap between consecutive tokens of every request, pooled (per chunk, as benchc's)",
    "tpot": "per request (last token - first token) / (output tokens - 1): benchc's TPOT, from the last "
            "token rather than the stream's end",
    "e2e": "request_latency: start to the response's end",
    "percentiles": "numpy's (np.percentile, linear); no standard deviation in the report",
}


def recognise(doc: Any) -> bool:
    return isinstance(doc, dict) and {"load_summary", "successes", "failures"} <= doc.keys()


def _load(source: str, point: PeerPoint) -> str | None:
    """The load from config.yaml beside the report: (note when it cannot be read)."""
    path = os.path.join(os.path.dirname(source), "config.yaml")
    if not os.path.isfile(path):
        return "no config.yaml beside the report: its load is unknown"
    import yaml

    try:
        with open(path, encoding="utf-8") as fh:
            config = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError) as e:
        return f"{path} could not be read ({e}): the load is unknown"
    load = (config or {}).get("load") or {}
    stages = load.get("stages") or []
    if len(stages) != 1 or not isinstance(stages[0], dict):
        return f"{path}: {len(stages)} stages: the report's load is no single point"
    stage = stages[0]
    concurrency = stage.get("concurrency_level") or stage.get("concurrency")
    rate = stage.get("rate")
    if isinstance(concurrency, int) and not isinstance(concurrency, bool) and concurrency > 0:
        point.concurrency = concurrency
        point.id = f"c={point.concurrency}"
    elif isinstance(rate, int | float) and not isinstance(rate, bool) and 0 < rate < float("inf"):
        point.rate_rps = float(rate)
        point.arrival = "poisson" if load.get("type") == "poisson" else "constant"
        point.id = f"rate={point.rate_rps:g}/s"
    return None


def _figures(f: Fields, at: list) -> Figures | None:
    if f.obj(at, required=False) is None:
        return None

    def us(key: str) -> float | None:
        v = f.number(at + [key], required=False)
        return v * 1e6 if v is not None else None

    fig = Figures(mean=us("mean"), min=us("min"), max=us("max"))
    for key, p in _PCTS.items():
        v = us(key)
        if v is not None:
            fig.percentiles[p] = v
    return fig


def to_document(doc: dict, source: str) -> dict:
    f = Fields(doc, source, TOOL)
    point = PeerPoint(id="all stages")
    note = _load(source, point)
    point.duration_s = f.number(["benchmark_time_seconds"])
    point.completed = f.integer(["successes", "count"])
    point.failed = f.integer(["failures", "count"])
    point.input_tokens = f.total(["successes", "prompt_tokens", "total"], required=False)
    point.output_tokens = f.total(["successes", "output_tokens", "total"], required=False)
    tp = ["successes", "throughput"]
    point.request_s = f.number(tp + ["requests_per_sec"], required=False)
    point.output_tok_s = f.number(tp + ["output_tokens_per_sec"], required=False)
    point.total_tok_s = f.number(tp + ["total_tokens_per_sec"], required=False)
    for theirs, ours in _LATENCIES.items():
        fig = _figures(f, ["successes", "latency", theirs])
        if fig is not None:
            fig.count = point.completed if ours in ("ttft", "e2e") else None
            point.latency[ours] = fig
    return document(TOOL, None, FORMAT, [point], definitions=DEFINITIONS,
                    unmapped=["goodput/s", "latency standard deviation",
                              "normalized_time_per_output_token (NTPOT: no benchc figure)"],
                    notes=[note] if note else [])
