"""Which load should I run? The answer for ONE configuration: where throughput peaks, up to
which load each SLO item holds, the highest load that meets them all, and whether the best
point is the sweep's edge (then the answer may lie beyond it: try higher).

A sweep of one combination (a matrix is decided across combinations by results/decide.py)
over concurrency or rate; a search's probes are left out (the search has its own answer).
Runs of a repeated point count as one load: the mean of their output rates, and an SLO item
holds there only when it held in every run. Computed from the result's points whenever it is
shown (`benchc run` after the sweep, the HTML report's first section), never stored.
"""

from __future__ import annotations

from benchc.results.document import is_probe
from benchc.results.repeats import base_id


def _load(point: dict) -> tuple[str, float] | None:
    params = point["params"]
    if params.get("concurrency"):
        return "concurrency", float(params["concurrency"])
    if params.get("rate_rps"):
        return "rate", float(params["rate_rps"])
    return None  # users, a trace: no single load to rank


def _loads(doc: dict, combination: int) -> tuple[str, list[dict]] | None:
    """(over, [{point, load, output_tok_s, goodput_s, checks}] in load order) of a combination."""
    by_id: dict[str, list[dict]] = {}
    over = None
    for p in doc.get("points", []):
        if p.get("combination", 0) != combination or is_probe(p) or (load := _load(p)) is None:
            continue
        if over is not None and load[0] != over:
            return None  # concurrency and rates in one sweep: no one axis to answer on
        over = load[0]
        by_id.setdefault(base_id(p), []).append(p)
    if over is None:
        return None
    rows = []
    for name, runs in by_id.items():
        checks: dict[str, bool] = {}
        for r in runs:
            for c in (r.get("slo") or {}).get("checks", []):
                checks[c["threshold"]] = checks.get(c["threshold"], True) and c["passed"]
        rows.append({"point": name, "load": _load(runs[0])[1],  # type: ignore[index]
                     "output_tok_s": _mean(r["throughput"].get("output_tok_s") for r in runs) or 0.0,
                     "goodput_s": _mean(r["throughput"].get("goodput_s") for r in runs),
                     "failed": any(r["counts"]["completed"] == 0 for r in runs), "checks": checks})
    return over, sorted(rows, key=lambda r: r["load"])


def _mean(values) -> float | None:
    """The runs' mean of a figure; None where a run lacks it (another tool's result may)."""
    xs = list(values)
    return None if not xs or any(x is None for x in xs) else sum(xs) / len(xs)


def single_answer(doc: dict, combination: int = 0) -> dict | None:
    """The answer for one combination of a result: None when it has no load point on one axis
    (concurrency or rate) that completed a request."""
    found = _loads(doc, combination)
    if found is None:
        return None
    over, rows = found
    measured = [r for r in rows if not r["failed"]]
    if not measured:
        return None  # no load completed a request: nothing to answer with (the run says why)
    top = rows[-1]
    peak = max(measured, key=lambda r: r["output_tok_s"])
    items = list(dict.fromkeys(t for r in rows for t in r["checks"]))
    per_item = []
    for item in items:
        holds = [r for r in rows if r["checks"].get(item)]
        fails = [r for r in rows if item in r["checks"] and not r["checks"][item]]
        # holds up to: the highest load below the first that fails (above it, a pass is luck)
        first_fail = fails[0]["load"] if fails else None
        upto = [r for r in holds if first_fail is None or r["load"] < first_fail]
        per_item.append({"slo": item, "holds_up_to": upto[-1]["point"] if upto else None,
                         "fails_from": fails[0]["point"] if fails else None})
    meets = [r for r in rows if not r["failed"] and all(r["checks"].get(i) for i in items)]
    first_miss = next((r["load"] for r in rows if r not in meets), None)
    below = [r for r in meets if first_miss is None or r["load"] < first_miss]
    best = below[-1] if below else None
    out: dict = {"combination": combination, "over": over, "loads": [r["point"] for r in rows],
                 "peak": {"point": peak["point"], "output_tok_s": round(peak["output_tok_s"], 1),
                          "edge": peak is top and len(rows) > 1},
                 "slo": per_item,
                 "best": None if best is None else {"point": best["point"],
                                                    "output_tok_s": round(best["output_tok_s"], 1),
                                                    "goodput_s": None if best["goodput_s"] is None
                                                    else round(best["goodput_s"], 3),
                                                    "edge": best is top}}
    return out


def describe_single(answer: dict) -> list[str]:
    """The answer in sentences, for the console and the report."""
    over = answer["over"]
    peak, best = answer["peak"], answer["best"]
    lines = [f"which {over}: throughput peaks at {peak['point']} ({peak['output_tok_s']:,.1f} output tok/s)"
             + (", the sweep's highest load: try higher" if peak["edge"] else "")]
    for item in answer["slo"]:
        if item["holds_up_to"] is None:
            lines.append(f"  {item['slo']}: holds at no load of the sweep (fails from {item['fails_from']})")
        elif item["fails_from"] is None:
            lines.append(f"  {item['slo']}: holds at every load, up to {item['holds_up_to']}")
        else:
            lines.append(f"  {item['slo']}: holds up to {item['holds_up_to']}, "
                         f"fails from {item['fails_from']}")
    if not answer["slo"]:
        lines.append("  no SLO in the spec: give one (slo:) to learn the highest load that meets it")
    elif best is None:
        lines.append("  no load of the sweep meets every SLO: try lower")
    else:
        goodput = "n/a" if best["goodput_s"] is None else f"{best['goodput_s']:g} req/s"
        lines.append(f"  the highest load that meets every SLO: {best['point']} ({best['output_tok_s']:,.1f} "
                     f"output tok/s, goodput {goodput})"
                     + (", the sweep's edge: try higher" if best["edge"] else ""))
    return lines


__all__ = ["single_answer", "describe_single"]
