"""One flat row per point: the CSV export and `Result.to_dataframe()` share these columns."""

from __future__ import annotations

import csv
import io

CSV_COLUMNS = [
    "point", "concurrency", "rate_rps", "matrix", "sent", "completed", "failed", "error_rate",
    "output_tok_s", "total_tok_s", "request_s", "goodput_s", "steady_output_tok_s",
    "ttft_mean_ms", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "itl_mean_ms", "itl_p50_ms", "itl_p99_ms",
    "tpot_mean_ms", "tpot_p50_ms", "tpot_p99_ms", "e2e_mean_ms", "e2e_p50_ms", "e2e_p99_ms",
    "input_tokens", "output_tokens", "output_method", "client_limited",
]

_LATENCY_COLUMNS = (("ttft", ("mean", "p50", "p90", "p99")), ("itl", ("mean", "p50", "p99")),
                    ("tpot", ("mean", "p50", "p99")), ("e2e", ("mean", "p50", "p99")))


def _ms(point: dict, metric: str, stat: str) -> float | None:
    v = (point["latency"].get(f"{metric}_us") or {}).get(stat)
    return round(v / 1000, 4) if v is not None else None


def point_row(point: dict) -> dict:
    """The CSV_COLUMNS of one point, as Python values (None where the point has no value)."""
    t = point["throughput"]
    row = {"point": point["id"], "concurrency": point["params"].get("concurrency"),
           "rate_rps": point["params"].get("rate_rps"),
           "matrix": ";".join(f"{k}={v}" for k, v in point.get("matrix", {}).items()),
           "sent": point["counts"]["sent"], "completed": point["counts"]["completed"],
           "failed": point["counts"]["failed"], "error_rate": point["error_rate"],
           "output_tok_s": t["output_tok_s"], "total_tok_s": t["total_tok_s"], "request_s": t["request_s"],
           "goodput_s": t["goodput_s"], "steady_output_tok_s": t.get("steady_output_tok_s")}
    for metric, stats in _LATENCY_COLUMNS:
        for stat in stats:
            row[f"{metric}_{stat}_ms"] = _ms(point, metric, stat)
    row.update(input_tokens=point["tokens"]["input"], output_tokens=point["tokens"]["output"],
               output_method=point["tokens"]["output_method"],
               client_limited=point["client"]["client_limited"])
    return row


def rows(doc: dict) -> list[dict]:
    return [point_row(p) for p in doc["points"]]


def to_csv(doc: dict) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for row in rows(doc):
        w.writerow(["" if row[c] is None else row[c] for c in CSV_COLUMNS])
    return buf.getvalue()
