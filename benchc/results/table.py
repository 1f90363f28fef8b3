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
    # reasoning models (empty where no request reasoned) and sessions (empty for single prompts)
    "ttf_answer_p50_ms", "ttf_answer_p99_ms", "reasoning_tokens", "answer_tokens",
    "sessions_started", "sessions_completed", "session_duration_p50_ms",
    # inputs (an embeddings request's batch; one per generation request) and input rates (empty
    # for results written before benchc counted them)
    "inputs", "inputs_s", "input_tok_s",
]
# `benchc export --format csv-turns`: one row per point and turn index of a sessions workload
TURN_COLUMNS = ["point", "turn", "sent", "completed", "mean_input_tokens", "cached_fraction",
                "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "e2e_p50_ms", "e2e_p99_ms"]

_LATENCY_COLUMNS = (("ttft", ("mean", "p50", "p90", "p99")), ("itl", ("mean", "p50", "p99")),
                    ("tpot", ("mean", "p50", "p99")), ("e2e", ("mean", "p50", "p99")))


def _ms(point: dict, metric: str, stat: str) -> float | None:
    return _block_ms(point["latency"].get(f"{metric}_us"), stat)


def _block_ms(block: dict | None, stat: str) -> float | None:
    v = (block or {}).get(stat)
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
    reasoning, sessions = point.get("reasoning") or {}, point.get("sessions") or {}
    row.update(ttf_answer_p50_ms=_ms(point, "ttf_answer", "p50") if reasoning else None,
               ttf_answer_p99_ms=_ms(point, "ttf_answer", "p99") if reasoning else None,
               reasoning_tokens=reasoning.get("reasoning_tokens"),
               answer_tokens=reasoning.get("answer_tokens"),
               sessions_started=sessions.get("started"), sessions_completed=sessions.get("completed"),
               session_duration_p50_ms=_block_ms(sessions.get("duration_us"), "p50"),
               inputs=point["counts"].get("inputs"), inputs_s=t.get("inputs_s"),
               input_tok_s=t.get("input_tok_s"))
    return row


def turn_rows(doc: dict) -> list[dict]:
    """TURN_COLUMNS of every turn index of every sessions point."""
    out = []
    for p in doc["points"]:
        for b in (p.get("sessions") or {}).get("by_turn", []):
            lat = b["latency"]
            out.append({"point": p["id"], "turn": b["turn"], "sent": b["sent"], "completed": b["completed"],
                        "mean_input_tokens": b.get("mean_input_tokens"),
                        "cached_fraction": b["cache"]["cached_fraction"],
                        **{f"{m}_{s}_ms": _block_ms(lat.get(f"{m}_us"), s)
                           for m in ("ttft", "itl", "e2e") for s in ("p50", "p99")}})
    return out


def rows(doc: dict) -> list[dict]:
    return [point_row(p) for p in doc["points"]]


def to_csv(doc: dict, turns: bool = False) -> str:
    """One row per point, or (`turns`) per point and turn index."""
    columns, table = (TURN_COLUMNS, turn_rows(doc)) if turns else (CSV_COLUMNS, rows(doc))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for row in table:
        w.writerow(["" if row[c] is None else row[c] for c in columns])
    return buf.getvalue()
