"""`benchc export`: a result as CSV (one row per point), the per-request JSONL, or
llm-d's Benchmark Report v0.2 (one report per load point, as far as the data allows)."""

from __future__ import annotations

import csv
import io
import json
import os

from benchc import __version__
from benchc.errors import UsageError
from benchc.metrics._hdr import Histogram

CSV_COLUMNS = [
    "point", "concurrency", "rate_rps", "matrix", "sent", "completed", "failed", "error_rate",
    "output_tok_s", "total_tok_s", "request_s", "goodput_s", "steady_output_tok_s",
    "ttft_mean_ms", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "itl_mean_ms", "itl_p50_ms", "itl_p99_ms",
    "tpot_mean_ms", "tpot_p50_ms", "tpot_p99_ms", "e2e_mean_ms", "e2e_p50_ms", "e2e_p99_ms",
    "input_tokens", "output_tokens", "output_method", "client_limited",
]

# What a v0.2 report can hold that benchc does not measure; listed on stderr by `export`.
BR02_LEFT_OUT = ["scenario.stack (server components and their configuration ids)",
                 "results.request_performance.time_series", "results.observability",
                 "latency.normalized_time_per_output_token", "statistics.mode"]


def _ms(point: dict, metric: str, stat: str) -> float | None:
    v = (point["latency"].get(f"{metric}_us") or {}).get(stat)
    return round(v / 1000, 4) if v is not None else None


def to_csv(doc: dict) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for p in doc["points"]:
        t = p["throughput"]
        row = [p["id"], p["params"].get("concurrency"), p["params"].get("rate_rps"),
               ";".join(f"{k}={v}" for k, v in p.get("matrix", {}).items()), p["counts"]["sent"],
               p["counts"]["completed"], p["counts"]["failed"], p["error_rate"], t["output_tok_s"],
               t["total_tok_s"], t["request_s"], t["goodput_s"], t.get("steady_output_tok_s")]
        for metric, stats in (("ttft", ("mean", "p50", "p90", "p99")), ("itl", ("mean", "p50", "p99")),
                              ("tpot", ("mean", "p50", "p99")), ("e2e", ("mean", "p50", "p99"))):
            row += [_ms(p, metric, s) for s in stats]
        row += [p["tokens"]["input"], p["tokens"]["output"], p["tokens"]["output_method"],
                p["client"]["client_limited"]]
        w.writerow(["" if x is None else x for x in row])
    return buf.getvalue()


def requests_jsonl(doc: dict, result_path: str) -> str:
    name = doc.get("requests_file")
    if not name:
        raise UsageError("this result has no per-request records (run with output.requests: true)")
    path = os.path.join(os.path.dirname(os.path.abspath(result_path)), name)
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise UsageError(f"the per-request file {path} is missing: {e.strerror}") from e


_BR_PCTS = {"p0p1": 0.1, "p1": 1, "p5": 5, "p10": 10, "p25": 25, "p50": 50, "p75": 75, "p90": 90, "p95": 95,
            "p99": 99, "p99p9": 99.9}


def _stats(block: dict | None, scale: float, units: str) -> dict | None:
    """A v0.2 Statistics object from a latency block; percentiles from its histogram."""
    if not block or not block.get("count"):
        return None
    h = Histogram.decode(block["hdr"])
    out = {"units": units, "mean": block["mean"] * scale, "stddev": block["stdev"] * scale,
           "min": block["min"] * scale, "max": block["max"] * scale}
    for name, pct in _BR_PCTS.items():
        out[name] = h.value_at_percentile(pct) * scale
    return out


def _seq_len(length: dict | None) -> dict | None:
    if not length:
        return None
    kind = length.get("kind")
    if kind == "fixed":
        return {"distribution": "fixed", "value": length["value"]}
    if kind == "normal":
        return {"distribution": "gaussian", "value": length["mean"], "std_dev": length["stdev"]}
    if kind == "uniform":
        return {"distribution": "random", "value": (length["min"] + length["max"]) / 2, "min": length["min"],
                "max": length["max"]}
    return None


def to_br02(doc: dict) -> list[dict]:
    reports = []
    combos = {c["index"]: c for c in doc["plan"]["combinations"]}
    for p in doc["points"]:
        combo = combos.get(p["combination"], {})
        w = combo.get("workload", {})
        params = w.get("params", {})
        standardized = {"tool": "benchc", "tool_version": __version__,
                        "input_seq_len": _seq_len(params.get("input_tokens"))
                        or {"distribution": "other", "value": w.get("input_tokens", {}).get("mean", 0)},
                        "rate_qps": p["params"].get("rate_rps"),
                        "concurrency": p["params"].get("concurrency")}
        osl = _seq_len(params.get("output_tokens"))
        if osl:
            standardized["output_seq_len"] = osl
        lat = p["latency"]
        latency = {"time_to_first_token": _stats(lat.get("ttft_us"), 1e-3, "ms"),
                   "time_per_output_token": _stats(lat.get("tpot_us"), 1e-3, "ms/token"),
                   "inter_token_latency": _stats(lat.get("itl_us"), 1e-3, "ms/token"),
                   "request_latency": _stats(lat.get("e2e_us"), 1e-6, "s")}
        t = p["throughput"]
        throughput = {"output_token_rate": {"units": "token/s", "mean": t["output_tok_s"]},
                      "total_token_rate": {"units": "token/s", "mean": t["total_tok_s"]},
                      "input_token_rate": {"units": "token/s",
                                           "mean": round(t["total_tok_s"] - t["output_tok_s"], 3)},
                      "requests_rate": {"units": "qps", "mean": t["request_s"]}}
        window = p["window"]
        reports.append({
            "version": "0.2",
            "run": {"uid": f"{doc['plan_hash'][:16]}-{p['id']}", "eid": doc["plan_hash"],
                    "time": {"start": doc["created"], "duration": f"PT{window['duration_s']}S"}},
            "scenario": {"load": {
                "metadata": {"schema_version": "0.0.1", "cfg_id": doc.get("workload_hash"),
                             "description": doc["plan"].get("description") or doc["plan"]["name"]},
                "standardized": standardized,
                "Native": {"config": {"benchc_point": p["id"], "plan_hash": doc["plan_hash"]}}}},
            "results": {"request_performance": {"aggregate": {
                "requests": {"total": p["counts"]["sent"], "failures": p["counts"]["failed"]},
                "latency": {k: v for k, v in latency.items() if v is not None},
                "throughput": throughput}}},
        })
    return reports


def export(doc: dict, fmt: str, result_path: str) -> str:
    if fmt == "csv":
        return to_csv(doc)
    if fmt == "jsonl":
        return requests_jsonl(doc, result_path)
    if fmt == "br0.2":
        return json.dumps(to_br02(doc), indent=1) + "\n"
    raise UsageError(f"unknown export format {fmt!r}")
