"""One flat row per point: the CSV export and `Result.to_dataframe()` share these columns."""

from __future__ import annotations

import csv
import io

from benchc.catalog import METRICS, Metric

_PLACED = ("error", "throughput", "latency", "reasoning", "inputs")  # groups with a place below


def _metric_columns(group: str) -> list[str]:
    """The CSV columns of the metrics declared into `group` (benchc/catalog.py), in their order;
    "extra": those of every group without a place of its own."""
    return [m.column(stat) for m in METRICS
            if m.csv_group == group or (group == "extra" and m.csv_group not in _PLACED)
            for stat in m.csv]


# Where each group of declared metrics' columns goes among the point's other columns; a metric
# declared with another group gets its columns at the end ("extra").
CSV_COLUMNS = [
    "point", "concurrency", "rate_rps", "matrix", "sent", "completed", "failed", *_metric_columns("error"),
    *_metric_columns("throughput"), *_metric_columns("latency"),
    "input_tokens", "output_tokens", "output_method", "client_limited",
    # reasoning models (empty where no request reasoned) and sessions (empty for single prompts)
    *_metric_columns("reasoning"), "reasoning_tokens", "answer_tokens",
    "sessions_started", "sessions_completed", "session_duration_p50_ms",
    # inputs (an embeddings request's batch; one per generation request) and input rates (empty
    # for results written before benchc counted them)
    "inputs", *_metric_columns("inputs"),
    # the figures of a kind some points have (empty where a point has none)
    *_metric_columns("extra"),
]
# `benchc export --format csv-turns`: one row per point and turn index of a sessions workload
TURN_COLUMNS = ["point", "turn", "sent", "completed", "mean_input_tokens", "cached_fraction",
                "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "e2e_p50_ms", "e2e_p99_ms"]


def _block_ms(block: dict | None, stat: str) -> float | None:
    v = (block or {}).get(stat)
    return round(v / 1000, 4) if v is not None else None


def metric_cell(point: dict, m: Metric, stat: str | None) -> float | None:
    """A declared metric's value in a point, as the CSV has it: a latency's statistic in
    milliseconds (4 decimals), a scalar as the point holds it; None where the point has none."""
    value = m.value_in(point)
    return value if stat is None else _block_ms(value, stat)


def point_row(point: dict) -> dict:
    """The CSV_COLUMNS of one point, as Python values (None where the point has no value)."""
    row = {"point": point["id"], "concurrency": point["params"].get("concurrency"),
           "rate_rps": point["params"].get("rate_rps"),
           "matrix": ";".join(f"{k}={v}" for k, v in point.get("matrix", {}).items()),
           "sent": point["counts"]["sent"], "completed": point["counts"]["completed"],
           "failed": point["counts"]["failed"]}
    for m in METRICS:
        for stat in m.csv:
            row[m.column(stat)] = metric_cell(point, m, stat)
    row.update(input_tokens=point["tokens"]["input"], output_tokens=point["tokens"]["output"],
               output_method=point["tokens"]["output_method"],
               client_limited=point["client"]["client_limited"])
    reasoning, sessions = point.get("reasoning") or {}, point.get("sessions") or {}
    row.update(reasoning_tokens=reasoning.get("reasoning_tokens"),
               answer_tokens=reasoning.get("answer_tokens"),
               sessions_started=sessions.get("started"), sessions_completed=sessions.get("completed"),
               session_duration_p50_ms=_block_ms(sessions.get("duration_us"), "p50"),
               inputs=point["counts"].get("inputs"))
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
