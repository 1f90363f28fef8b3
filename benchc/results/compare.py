"""`benchc compare`: two or more results side by side, with noise and CI gates.

Points are matched by their load (concurrency or rate) and matrix values. For
each metric: base, new, the change (ratio for throughputs, delta for latencies
and error rate), and whether the change is beyond noise.

Noise, and how it is decided (written into the JSON output as `noise_method`):
- latency percentiles: a bootstrap over each run's HdrHistogram -- 200 resamples
  of the recorded count drawn from the recorded distribution (numpy multinomial
  over the buckets, fixed seed) give a 95% interval for the percentile in each
  run; the change is significant when the two intervals do not overlap.
- throughputs and error rate: one figure per point and run, so no interval can
  be computed from a single run; the change is reported as `n/a` (never called
  significant). Repeat the run to get one.
"""

from __future__ import annotations

import json

import numpy as np

from benchc.errors import ThresholdFailed, UsageError
from benchc.metrics._hdr import Histogram
from benchc.results.document import metric_value, point_key, read
from benchc.spec.thresholds import Threshold, parse_gate

THROUGHPUTS = ("output_tok_s", "total_tok_s", "request_s")
LATENCIES = ("ttft.p50", "ttft.p99", "ttft.p99.9", "itl.p50", "itl.p99", "tpot.p50", "tpot.p99",
             "e2e.p50", "e2e.p99")
BOOTSTRAP_RESAMPLES = 200
NOISE_METHOD = ("latency percentiles: 95% bootstrap intervals from each run's HdrHistogram "
                f"({BOOTSTRAP_RESAMPLES} resamples, seed 0), significant when they do not overlap; "
                "throughput and error rate: single figures, significance not computable (n/a)")


def _interval(hdr: str | None, pct: float) -> tuple[float, float] | None:
    if not hdr:
        return None
    h = Histogram.decode(hdr)
    buckets = h.nonzero()
    n = h.total_count
    if n < 2:
        return None
    values = np.array([h.highest_equivalent(v) for v, _ in buckets], dtype=float)
    probs = np.array([c for _, c in buckets], dtype=float) / n
    rng = np.random.default_rng(0)
    draws = rng.multinomial(n, probs, size=BOOTSTRAP_RESAMPLES)
    cum = np.cumsum(draws, axis=1)
    target = np.maximum(1, np.floor(pct / 100 * n + 0.5))
    idx = (cum >= target).argmax(axis=1)
    stats = values[idx]
    return float(np.percentile(stats, 2.5)), float(np.percentile(stats, 97.5))


def _significance(base: dict, new: dict, key: str) -> str:
    if "." not in key:
        return "n/a"
    metric, stat = key.split(".", 1)
    pct = float(stat[1:]) if stat.startswith("p") else None
    if pct is None:
        return "n/a"
    a = _interval(base["latency"].get(f"{metric}_us", {}).get("hdr"), pct)
    b = _interval(new["latency"].get(f"{metric}_us", {}).get("hdr"), pct)
    if a is None or b is None:
        return "n/a"
    return "yes" if a[1] < b[0] or b[1] < a[0] else "no"


def compare_docs(base: dict, new: dict) -> dict:
    warnings = []
    if base.get("workload_hash") != new.get("workload_hash"):
        warnings.append("the two runs used different workloads (workload_hash differs): "
                        "differences may come from the workload, not only the server")
    base_points = {point_key(p): p for p in base["points"]}
    rows = []
    for p in new["points"]:
        b = base_points.get(point_key(p))
        if b is None:
            continue
        limited = [name for name, q in (("base", b), ("new", p)) if q["client"]["client_limited"]]
        if limited:
            warnings.append(f"{p['id']}: client-limited in {' and '.join(limited)}: its figures measure "
                            "the client, not only the server")
        metrics = {}
        for key in THROUGHPUTS + ("error_rate",) + LATENCIES:
            bv, nv = metric_value(b, key), metric_value(p, key)
            if bv is None or nv is None:
                continue
            entry = {"base": bv, "new": nv, "delta": nv - bv,
                     "change": (nv - bv) / bv if bv else None,
                     "significant": _significance(b, p, key)}
            metrics[key] = entry
        rows.append({"point": p["id"], "base_point": b["id"], "metrics": metrics,
                     "client_limited": limited})
    unmatched = [p["id"] for p in new["points"] if point_key(p) not in base_points]
    return {"base": _name(base), "new": _name(new), "noise_method": NOISE_METHOD, "warnings": warnings,
            "points": rows, "unmatched_points": unmatched}


def _name(doc: dict) -> str:
    t = doc["target"][0] if doc.get("target") else {}
    return f"{doc['plan']['name']} ({t.get('model', '?')})"


def check_gates(comparison: dict, gates: list[Threshold]) -> list[str]:
    """One line per breached gate, per point."""
    breaches = []
    for row in comparison["points"]:
        for g in gates:
            m = row["metrics"].get(g.key)
            if m is None:
                continue
            value = m["change"] if g.relative else m["new"]
            if value is None:
                continue
            if g.holds(value):
                shown = f"{value:+.1%}" if g.relative else _fmt(g.key, value)
                breaches.append(f"{row['point']}: {g.text} (measured {shown})")
    return breaches


def _fmt(key: str, v: float) -> str:
    if "." in key:
        return f"{v / 1000:.2f}ms"
    if key == "error_rate":
        return f"{v:.2%}"
    return f"{v:,.1f}"


def render(comparison: dict, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(comparison, indent=1)
    md = fmt == "markdown"
    lines = []
    if md:
        lines.append(f"**benchc compare**: base `{comparison['base']}` vs new `{comparison['new']}`\n")
    else:
        lines.append(f"base: {comparison['base']}\nnew:  {comparison['new']}")
    for w in comparison["warnings"]:
        lines.append(("> **warning:** " if md else "WARNING: ") + w)
    header = ["point", "metric", "base", "new", "change", "beyond noise"]
    table = []
    for row in comparison["points"]:
        for key, m in row["metrics"].items():
            change = "" if m["change"] is None else (
                f"{m['change']:+.1%}" if "." not in key else f"{m['delta'] / 1000:+.2f}ms")
            table.append([row["point"] + (" (client-limited)" if row["client_limited"] else ""), key,
                          _fmt(key, m["base"]), _fmt(key, m["new"]), change, m["significant"]])
    if md:
        lines.append("")
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
        lines += ["| " + " | ".join(r) + " |" for r in table]
    else:
        widths = [max(len(str(x)) for x in col) for col in zip(header, *table, strict=False)]
        for r in [header, *table]:
            lines.append("  ".join(str(x).ljust(w) for x, w in zip(r, widths, strict=False)).rstrip())
    if comparison["unmatched_points"]:
        lines.append(f"points only in new: {', '.join(comparison['unmatched_points'])}")
    lines.append(("\n_" if md else "") + "noise: " + comparison["noise_method"] + ("_" if md else ""))
    return "\n".join(lines) + "\n"


def run_compare(paths: list[str], gates: list[str], fmt: str) -> tuple[str, list[str]]:
    if len(paths) < 2:
        raise UsageError("compare needs a base result and at least one more")
    try:
        parsed = [parse_gate(g) for g in gates]
    except ValueError as e:
        raise UsageError(f"--fail-on: {e}") from e
    docs = [read(p) for p in paths]
    outputs, breaches = [], []
    for new in docs[1:]:
        comparison = compare_docs(docs[0], new)
        outputs.append(render(comparison, fmt))
        breaches += check_gates(comparison, parsed)
    return "\n".join(outputs), breaches


def raise_on_breaches(breaches: list[str]) -> None:
    if breaches:
        raise ThresholdFailed("gate breached:\n  " + "\n  ".join(breaches))
