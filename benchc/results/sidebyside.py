"""Combinations side by side: one table per load, a row per combination of every result.

`benchc compare` on one matrix result sets its combinations against each other at each load
it measured; on several results, every result's combinations at each load. A row's
per-GPU figures are results/decide.py's (the same candidates the frontier ranks); a repeated
point shows the mean of its runs.
"""

from __future__ import annotations

from collections.abc import Sequence

from benchc.results.api import Point, Result
from benchc.results.decide import candidates

# (key, header, how it is shown); a column no row has is left out
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("gpus", "GPUs", "{:d}"),
    ("output_tok_s", "out tok/s", "{:,.1f}"),
    ("output_tok_s_per_gpu", "tok/s/GPU", "{:,.1f}"),
    ("output_tok_s_per_user", "tok/s/user", "{:,.1f}"),
    ("goodput_s", "goodput/s", "{:,.3g}"),
    ("goodput_s_per_gpu", "goodput/s/GPU", "{:,.3g}"),
    ("ttft_p99_ms", "TTFT p99 ms", "{:,.1f}"),
    ("tpot_p50_ms", "TPOT p50 ms", "{:,.2f}"),
    ("error_rate", "errors", "{:.1%}"),
    ("joules_per_output_token", "J/tok", "{:,.3g}"),
    ("cost_per_mtok", "cost/Mtok", "{:,.3g}"),
)


def _mean(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals and len(vals) == len(xs) else None


def side_by_side(results: Sequence[Result], gpu_hour: float | None = None) -> list[dict]:
    """[{"load": "c=4", "rows": [{"combination": name, figures...}]}] in the order loads first appear."""
    several = len(results) > 1
    cands, _ = candidates(results, gpu_hour)
    per_gpu = {(c.result, c.combination, c.point): c for c in cands}
    tables: dict[str, list[dict]] = {}
    for r in results:
        label = (r.path.rsplit("/", 1)[-1] or r.name) if several else ""
        groups: dict[tuple[int, str], list[Point]] = {}
        for p in r.points:
            if not p.probe:
                groups.setdefault((p.combination, p.id.split("#", 1)[0]), []).append(p)
        for (combo, pid), runs in groups.items():
            first = runs[0]
            matrix = ",".join(f"{k}={v}" for k, v in first.matrix.items()) or "-"
            row: dict = {"combination": f"{label}: {matrix}" if label else matrix, "point": pid,
                         "gpus": first.gpus,
                         "output_tok_s": _mean([p.output_tok_s for p in runs]),
                         "goodput_s": _mean([p.goodput_s for p in runs]),
                         "ttft_p99_ms": _mean([p.latency["ttft"].p99_ms if "ttft" in p.latency else None
                                               for p in runs]),
                         "tpot_p50_ms": _mean([p.latency["tpot"].p50_ms if "tpot" in p.latency else None
                                               for p in runs]),
                         "error_rate": _mean([p.error_rate for p in runs])}
            if len(runs) > 1:
                row["runs"] = len(runs)
            c = per_gpu.get((label, combo, pid))
            if c is not None:
                for k in ("output_tok_s_per_gpu", "output_tok_s_per_user", "goodput_s_per_gpu",
                          "joules_per_output_token", "cost_per_mtok"):
                    row[k] = getattr(c, k)
            tables.setdefault(first.load, []).append(row)
    return [{"load": load, "rows": rows} for load, rows in tables.items()]


def cells(table: dict) -> tuple[list[str], list[list[str]]]:
    """One load's table as (header, rows of shown cells): the columns some row has."""
    cols = [c for c in COLUMNS if any(r.get(c[0]) is not None for r in table["rows"])]
    header = ["combination", *(h for _, h, _ in cols)]
    body = [[r["combination"] + (f" ({r['runs']} runs)" if r.get("runs") else ""),
             *("-" if r.get(k) is None else f.format(r[k]) for k, _, f in cols)] for r in table["rows"]]
    return header, body


def render_tables(tables: list[dict], markdown: bool) -> list[str]:
    """The tables as text (aligned columns) or markdown, one per load (the report's page shows
    the same cells: results/html_report.py)."""
    lines: list[str] = []
    for t in tables:
        header, body = cells(t)
        lines.append("")
        if markdown:
            lines.append(f"#### load {t['load']}")
            lines.append("")
            lines.append("| " + " | ".join(header) + " |")
            lines.append("|" + "---|" * len(header))
            lines += ["| " + " | ".join(r) + " |" for r in body]
        else:
            lines.append(f"load {t['load']}:")
            widths = [max(len(x) for x in col) for col in zip(header, *body, strict=True)]
            for r in [header, *body]:
                pairs = enumerate(zip(r, widths, strict=True))
                shown = [x.ljust(w) if i == 0 else x.rjust(w) for i, (x, w) in pairs]
                lines.append(("  " + "  ".join(shown)).rstrip())
    return lines
