"""AIPerf's `profile_export_aiperf.json` (schema_version 1.x, AIPerf 0.13), and the per-request
`profile_export.jsonl` beside it when it is there.

Its definitions (aiperf/metrics/types/), against benchc's:
- time_to_first_token: first response chunk with content minus the request's start, benchc's TTFT;
- inter_chunk_latency: every gap between consecutive chunks of a request: benchc's ITL;
- inter_token_latency: per request (request_latency - TTFT) / (output tokens - 1), a
  per-request average: benchc's TPOT, not its ITL;
- request_latency: start to the last response byte, benchc's E2E;
- percentiles p1 .. p99 and std: AIPerf's own (numpy over the records it kept), in ms;
- output tokens: its tokenizer's count of the text (--use-server-token-count: the server's usage);
  input tokens here: the server's usage.prompt_tokens total where AIPerf recorded it, else its ISL.
The JSONL (one record per request, `metrics.<name>.value`) gives every request's value: the
histograms are built from those, never from the percentiles.
"""

from __future__ import annotations

import os
from typing import Any

from benchc.errors import ResultFormatError
from benchc.results.document import read_text  # benchc's own bound and words
from benchc.results.peers._build import Fields, Figures, PeerPoint, document
from benchc.results.peers._json import parse

TOOL = "AIPerf"
FORMAT = "AIPerf profile_export_aiperf.json (schema_version 1.x)"
EXPECTED = "an AIPerf profile_export_aiperf.json (schema_version 1.x, aiperf_version, time_to_first_token)"
MAJOR = "1"
JSONL = "profile_export.jsonl"
_PCTS = {"p1": 1.0, "p5": 5.0, "p10": 10.0, "p25": 25.0, "p50": 50.0, "p75": 75.0, "p90": 90.0,
         "p95": 95.0, "p99": 99.0}
_LATENCIES = {"time_to_first_token": "ttft", "inter_chunk_latency": "itl", "inter_token_latency": "tpot",
              "request_latency": "e2e"}
_UNITS = {"ms": 1000.0, "sec": 1e6, "s": 1e6, "us": 1.0, "ns": 1e-3}

DEFINITIONS = {
    "tpot": "AIPerf's inter_token_latency: per request (request_latency - TTFT) / (output tokens - 1), "
            "a per-request average (benchc's TPOT)",
    "itl": "AIPerf's inter_chunk_latency: every gap between a request's chunks (benchc's ITL)",
    "ttft": "AIPerf's time_to_first_token, on its worker's clock (time.perf_counter_ns)",
    "e2e": "AIPerf's request_latency: start to the last response byte",
    "percentiles": "AIPerf's own (p1..p99, numpy over its records)",
    "output_tokens": "AIPerf's tokenizer's count of the output (the server's usage with "
                     "--use-server-token-count)",
}


def recognise(doc: Any) -> bool:
    return isinstance(doc, dict) and "aiperf_version" in doc and "schema_version" in doc


def _figures(f: Fields, name: str) -> Figures | None:
    block = f.obj([name], required=False)
    if block is None:
        return None
    unit = block.get("unit")
    scale = _UNITS.get(unit) if isinstance(unit, str) else None
    if scale is None:
        raise f.fail([name, "unit"], f"unit {unit!r} is not a time benchc knows ({', '.join(_UNITS)})")

    def us(key: str) -> float | None:
        v = f.number([name, key], required=False)
        return v * scale if v is not None else None

    fig = Figures(count=f.integer([name, "count"], required=False), mean=us("avg"), stdev=us("std"),
                  min=us("min"), max=us("max"))
    for key, p in _PCTS.items():
        v = us(key)
        if v is not None:
            fig.percentiles[p] = v
    return fig


def _per_request(path: str) -> tuple[dict[str, list[float]], int]:
    """Every request's values from the JSONL (microseconds), and how many records it held."""
    text = read_text(path, "AIPerf per-request export")
    values: dict[str, list[float]] = {k: [] for k in _LATENCIES.values()}
    records = 0
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        rec = parse(line, path, n)
        f = Fields(rec, f"{path}:{n}", TOOL)
        records += 1
        for name, ours in _LATENCIES.items():
            m = f.obj(["metrics", name], required=False)
            if m is None:
                continue
            unit = m.get("unit")
            scale = _UNITS.get(unit) if isinstance(unit, str) else None
            if scale is None:
                raise f.fail(["metrics", name, "unit"], f"unit {m.get('unit')!r} is not a time benchc knows")
            v = m.get("value")
            if isinstance(v, list):
                values[ours] += [(f.number(["metrics", name, "value", i]) or 0.0) * scale
                                 for i in range(len(v))]
            else:
                values[ours].append((f.number(["metrics", name, "value"]) or 0.0) * scale)
    return values, records


def to_document(doc: dict, source: str) -> dict:
    f = Fields(doc, source, TOOL)
    version = f.get(["schema_version"])
    if not isinstance(version, str) or version.split(".")[0] != MAJOR:
        raise f.fail(["schema_version"], f"{version!r} is not a version benchc reads (it reads {MAJOR}.x: "
                                         "AIPerf 0.13)")
    phases = f.array(["input_config", "phases"], required=False) or []
    at = next((["input_config", "phases", i] for i, p in enumerate(phases)
               if isinstance(p, dict) and p.get("kind") == "profiling"), None)
    phase = f.obj(at) or {} if at is not None else {}
    point = PeerPoint(id="")
    if at is not None and phase.get("concurrency") and phase.get("type") == "concurrency":
        point.concurrency = f.integer(at + ["concurrency"])
        point.id = f"c={point.concurrency}"
    elif at is not None and (phase.get("rate") or phase.get("request_rate")):
        point.rate_rps = f.number(at + ["rate" if phase.get("rate") else "request_rate"])
        kind = phase.get("type")
        point.arrival = kind if kind in ("poisson", "constant", "gamma") else "poisson"
        point.id = f"rate={point.rate_rps:g}/s"
    else:
        point.id = str(phase.get("type") or "profiling")
    point.duration_s = f.number(["benchmark_duration", "avg"])
    errors = sum(int(e.get("count", 0)) for e in (f.array(["error_summary"], required=False) or [])
                 if isinstance(e, dict))
    completed = f.integer(["completed_request_count", "avg"], required=False)
    if completed is None:
        completed = f.integer(["request_count", "avg"]) or 0  # required: never None here
    point.completed = completed
    point.failed = errors
    point.input_tokens = f.total(["total_usage_prompt_tokens", "avg"], required=False)
    if point.input_tokens is None:
        point.input_tokens = f.total(["total_isl", "avg"], required=False)
    point.output_tokens = f.total(["total_output_tokens", "avg"], required=False)
    point.request_s = f.number(["request_throughput", "avg"], required=False)
    point.output_tok_s = f.number(["output_token_throughput", "avg"], required=False)
    point.total_tok_s = f.number(["total_token_throughput", "avg"], required=False)
    goodput = f.obj(["goodput"], required=False)
    point.goodput_s = f.number(["goodput", "avg"], required=False) if goodput is not None else None
    point.native = {"phase": phase}
    jsonl = os.path.join(os.path.dirname(source), JSONL)
    values: dict[str, list[float]] = {}
    histograms = f"none: no {JSONL} beside it (the percentiles are AIPerf's only)"
    if os.path.isfile(jsonl):
        values, records = _per_request(jsonl)
        if records != completed + errors:
            raise ResultFormatError(f"{jsonl}: {records} records where {source} counts "
                                    f"{completed + errors} requests: not the same run's export")
        histograms = f"from every request's value in {JSONL} beside it (" + ", ".join(
            k for k, v in values.items() if v) + ")"
    for name, ours in _LATENCIES.items():
        fig = _figures(f, name)
        if fig is None:
            continue
        if values.get(ours):
            fig.values = values[ours]
            fig.count = len(values[ours])
        point.latency[ours] = fig
    models = f.get(["input_config", "models", "items"], required=False)
    first = models[0] if isinstance(models, list) and models else None
    model = first.get("name") if isinstance(first, dict) and isinstance(first.get("name"), str) else None
    created = doc.get("start_time") if isinstance(doc.get("start_time"), str) else None
    return document(TOOL, str(f.get(["aiperf_version"])), FORMAT, [point], model=model,
                    definitions=DEFINITIONS, histograms=histograms, created=created)
