"""`benchc compare`: two or more results side by side, with noise and CI gates.

Points are matched by their load (concurrency or rate) and matrix values. For
each metric: base, new, the change (ratio for throughputs, delta for latencies
and error rate), and whether the change is beyond noise.

Noise, and how it is decided (written into the JSON output as `noise_method`):
- latency percentiles: a bootstrap over each run's HdrHistogram -- 200 resamples
  of the recorded count drawn from the recorded distribution (numpy multinomial
  over the buckets, fixed seed) give a 95% interval for the percentile in each
  run; the change is beyond noise when the two intervals do not overlap *and* it is
  larger than the noise floor. A percentile with fewer than MIN_TAIL samples on either
  side of it in either run (p99 of 12 requests is their largest) is not bootstrapped:
  the bootstrap of so few samples gives intervals that miss the run-to-run spread, and
  identical demo runs were called different on 4 of 52 figures. It is judged only by
  separation (separated_change): beyond noise when the two runs lie apart by more than each
  may hide (a gate then reads the gap, a bound, not the measured change); else `n/a`. The bootstrap sees one
  run's sampling noise only, not what moves between runs (the machine, the server's
  state), which is why the floor applies here too (benchmarks/noise_floor.py --pairs
  measures the false-positive rate over identical pairs). A point client-limited on
  either side is not judged either (`n/a`, beside the warning): its latencies measure the
  client, and identical runs on a loaded machine differed by up to 30% in ITL p50 there.
- throughputs and error rate: one figure per point and run, so no interval can
  be computed from a single run; the change is reported as `n/a` (never called
  significant). Repeat the run to get one.
- repeated points (load.repeats) on both sides: every metric is judged on the runs'
  figures -- Welch's 95% interval of the difference of the two means
  (metrics/intervals.py) -- and the change is beyond noise when that interval excludes
  zero *and* the change is larger than the noise floor (`--noise-floor`, default 2%). The
  interval alone would call 5% of comparisons of a setup with itself different (that is
  what 95% means), and a comparison reads many metrics; like criterion.rs's noise
  threshold, a change below the floor is not reported as one, however tight the
  intervals. 2% rather than criterion's 1%: five runs of one simulated point on a
  2-core machine spread by 0.1-0.7% (sd; benchmarks/noise_floor.py prints it), so the
  mean of five differs from another five's by 1% about once in a hundred comparisons at
  the widest of those spreads, by 2% practically never.
  Only one side repeated: its mean is shown, latency percentiles use the bootstrap on its
  pooled histograms, throughputs stay `n/a`.
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np

from benchc.catalog import METRICS, RATIO
from benchc.errors import ThresholdFailed, UsageError
from benchc.metrics._hdr import Histogram
from benchc.metrics.aggregate import Tally, figures
from benchc.metrics.intervals import difference_interval, mean_interval
from benchc.plan.model import sim_preset_is_file
from benchc.plan.search import show_load
from benchc.results.api import read_document as read
from benchc.results.document import is_probe, latency_summary, load_key
from benchc.results.identity import result_label
from benchc.results.peers.explain import missing, side_notes, why_not_judged
from benchc.results.repeats import base_id, values
from benchc.spec.thresholds import Threshold, parse_gate

# what each compared point carries, as the declarations say (benchc/catalog.py): the
# throughputs, the error rate, then the latencies' statistics
THROUGHPUTS = tuple(k for m in METRICS if m.path[0] == "throughput" for k in m.keys(m.compared))
LATENCIES = tuple(k for m in METRICS if m.latency for k in m.keys(m.compared))
COMPARED = THROUGHPUTS + tuple(k for m in METRICS if m.kind == RATIO for k in m.keys(m.compared)) + LATENCIES
BOOTSTRAP_RESAMPLES = 200
MIN_TAIL = 10  # samples needed on each side of a percentile for its bootstrap interval
NOISE_FLOOR = 0.02  # a relative change below this is never called beyond noise (repeated runs)
SEPARATION_P = 0.05  # too few samples: two runs apart in every request, no likelier than this by chance


def noise_method(floor: float = NOISE_FLOOR) -> str:
    return ("latency percentiles: 95% bootstrap intervals from each run's HdrHistogram "
            f"({BOOTSTRAP_RESAMPLES} resamples, seed 0), significant when they do not overlap and the "
            f"change exceeds {floor:.1%}; n/a with fewer than {MIN_TAIL} samples on either side of the "
            "percentile (unless every request of one run lies apart from the other's by more than "
            "each run's spread may hide: then significant, by at least that gap), or where a side "
            "was client-limited; "
            "throughput and error rate: single figures, significance not computable (n/a); "
            "points repeated on both sides (load.repeats): every metric from the runs' figures, "
            "significant when Welch's 95% interval of the difference excludes 0 and the change "
            f"exceeds {floor:.1%} (the noise floor)")


NOISE_METHOD = noise_method()


def parse_floor(text: str) -> float:
    """`--noise-floor`: `2%` or `0.02`."""
    try:
        value = float(text[:-1]) / 100 if text.strip().endswith("%") else float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise UsageError(f"--noise-floor {text!r}: give a percentage like 2% (or a fraction like 0.02)")
    return value


def _interval(hdr: str | None, pct: float) -> tuple[float, float] | None:
    if not hdr:
        return None
    h = Histogram.decode(hdr)
    buckets = h.nonzero()
    n = h.total_count
    if n < 2 or min(n * pct / 100, n * (1 - pct / 100)) < MIN_TAIL:
        return None  # too few samples around the percentile to bootstrap it
    values = np.array([h.highest_equivalent(v) for v, _ in buckets], dtype=float)
    probs = np.array([c for _, c in buckets], dtype=float) / n
    rng = np.random.default_rng(0)
    draws = rng.multinomial(n, probs, size=BOOTSTRAP_RESAMPLES)
    cum = np.cumsum(draws, axis=1)
    target = np.maximum(1, np.floor(pct / 100 * n + 0.5))
    idx = (cum >= target).argmax(axis=1)
    stats = values[idx]
    return float(np.percentile(stats, 2.5)), float(np.percentile(stats, 97.5))


def _significance(base: dict, new: dict, key: str, change: float | None,
                  floor: float) -> tuple[str, float | None]:
    """Single runs: a latency percentile's bootstrap intervals, and the noise floor (see the
    module's docstring); with too few samples to bootstrap, the two runs' separation
    (separated_change), whose bound on the change is returned beside the verdict."""
    if "." not in key:
        return "n/a", None
    metric, stat = key.rsplit(".", 1) if not key.endswith(".p99.9") else (key[:-6], "p99.9")
    pct = float(stat[1:]) if stat.startswith("p") else None
    if pct is None:
        return "n/a", None
    base_hdr, new_hdr = ((latency_summary(p, metric) or {}).get("hdr") for p in (base, new))
    a = _interval(base_hdr, pct)
    b = _interval(new_hdr, pct)
    if a is None or b is None:
        bound = separated_change(base_hdr, new_hdr, floor)
        return ("n/a", None) if bound is None else ("yes", bound)
    apart = a[1] < b[0] or b[1] < a[0]
    return ("yes" if apart and (change is None or abs(change) > floor) else "no"), None


def separated_change(base_hdr: str | None, new_hdr: str | None, floor: float) -> float | None:
    """Too few samples to bootstrap a percentile: a bound on what the small sample can hide.
    A few requests say little of the tail beyond their slowest (or below their fastest); take
    what each run may hide there to be as wide again as its own spread (its slowest over its
    fastest), so a run's percentiles lie within [fastest / spread, slowest * spread]. When
    those ranges of the two runs are apart by more than the floor, each percentile moved by at
    least the gap between them: that gap as a change against the base is returned. None when
    they are not apart, or when a separation of every request is too likely by chance: of the
    C(n+m, n) ways to rank n + m requests of one distribution, 2 split them into the two runs
    (a two-sided rank test), which must stay under SEPARATION_P (8 + 8 requests: 1 in 6,435;
    3 + 3: 1 in 10, too likely)."""
    if not base_hdr or not new_hdr:
        return None
    a, b = Histogram.decode(base_hdr), Histogram.decode(new_hdr)
    n, m = a.total_count, b.total_count
    if not n or not m or not a.min or not b.min or 2 / math.comb(n + m, n) > SEPARATION_P:
        return None
    a_lo, a_hi = a.min / (a.max / a.min), a.max * (a.max / a.min)
    b_lo, b_hi = b.min / (b.max / b.min), b.max * (b.max / b.min)
    if b_lo > a_hi * (1 + floor):
        return b_lo / a_hi - 1
    if b_hi < a_lo * (1 - floor):
        return b_hi / a_lo - 1
    return None


def _runs(doc: dict) -> dict[tuple, list[dict]]:
    """The doc's points by load and matrix values: one point, or the runs of a repeated one.
    A search's probes are left out: their loads are the search's to choose (see `searches`)."""
    out: dict[tuple, list[dict]] = {}
    for p in doc["points"]:
        if not is_probe(p):
            out.setdefault(load_key(p), []).append(p)
    return out


def _pooled(runs: list[dict]) -> dict:
    """One point standing for several runs in the bootstrap: their histograms added exactly
    (turns of sessions too)."""
    if len(runs) == 1:
        return runs[0]
    return figures(Tally.total(Tally.from_point(p) for p in runs))


def turn_metrics(b_runs: list[dict], n_runs: list[dict]) -> tuple[str, ...]:
    """Per turn both sides' sessions points have: its TTFT (p50, p99) and ITL p50; and the
    sessions' duration p50."""
    def turns(runs: list[dict]) -> set[str]:
        return {b["turn"] for p in runs for b in (p.get("sessions") or {}).get("by_turn", [])}

    common = turns(b_runs) & turns(n_runs)
    if not common:
        return ()
    order = sorted(common, key=lambda t: (t.startswith(">"), int(t.lstrip(">="))))
    return tuple(f"turn{t}.{m}" for t in order for m in ("ttft.p50", "ttft.p99", "itl.p50")) + \
        ("session_duration.p50",)


def _entry(b_runs: list[dict], n_runs: list[dict], key: str, floor: float,
           limited: bool = False, doubted: set[str] | None = None) -> dict | None:
    """One metric of one point: base, new, change, and whether it is beyond noise."""
    bv, nv = values(b_runs, key), values(n_runs, key)
    if not bv or not nv:
        return None
    if len(bv) > 1 and len(nv) > 1:
        a, b, d = mean_interval(bv), mean_interval(nv), difference_interval(bv, nv)
        assert a is not None and b is not None and d is not None  # two runs or more a side
        change = d.mean / a.mean if a.mean else None
        beyond = d.excludes_zero() and (change is None or abs(change) > floor)
        return {"base": round(a.mean, 3), "new": round(b.mean, 3), "delta": round(d.mean, 3),
                "change": change, "significant": "yes" if beyond else "no",
                "runs": [a.n, b.n], "base_ci95": [round(a.low, 3), round(a.high, 3)],
                "new_ci95": [round(b.low, 3), round(b.high, 3)],
                "delta_ci95": [round(d.low, 3), round(d.high, 3)]}
    bm, nm = (xs[0] if len(xs) == 1 else sum(xs) / len(xs) for xs in (bv, nv))
    # a run's histograms bootstrap a latency percentile; throughputs have no interval here
    change = (nm - bm) / bm if bm else None
    # a client-limited side's latencies measure the client (late reads coalesce chunks): its
    # sampling interval says nothing of that, so the change is not judged
    judged = "." in key and not (limited and _doubted(key, doubted))
    significant, bound = (_significance(_pooled(b_runs), _pooled(n_runs), key, change, floor) if judged
                          else ("n/a", None))
    out = {"base": bm, "new": nm, "delta": nm - bm, "change": change,
           "significant": significant, "runs": [len(bv), len(nv)]}
    if bound is not None:  # judged by separation: the change is at least this (a gate reads it)
        out["change_bound"] = round(bound, 4)
    return out


# a compared latency's figure as the client self-check names it (run/effects.py)
_SELF_CHECK_FIGURE = {"ttf_answer": "ttft", "itl_answer": "itl", "session_duration": "e2e"}


def doubted_figures(runs: list[dict]) -> set[str] | None:
    """The latencies a client-limited run's self-check doubted (its trust doubt's figures, judged
    figure by figure against their size and SLO bounds); None: every figure (a result written
    before doubts named figures)."""
    out: set[str] = set()
    for p in runs:
        if not p["client"]["client_limited"]:
            continue
        doubts = [d for d in p.get("trust", {}).get("doubts", []) if d["check"] == "client_limited"]
        if not doubts or any(not d.get("figures") for d in doubts):
            return None
        out.update(f for d in doubts for f in d["figures"])
    return out


def _doubted(key: str, doubted: set[str] | None) -> bool:
    parts = key.split(".")
    metric = parts[1] if parts[0].startswith("turn") else parts[0]
    return doubted is None or _SELF_CHECK_FIGURE.get(metric, metric) in doubted


def compare_docs(base: dict, new: dict, noise_floor: float = NOISE_FLOOR,
                 sources: tuple[str | None, str | None] = (None, None)) -> dict:
    warnings = []
    if base.get("workload_hash") != new.get("workload_hash"):
        warnings.append("the two runs used different workloads (workload_hash differs): "
                        "differences may come from the workload, not only the server")
    if (models := model_difference(base, new)) is not None:
        warnings.append(models)
    base_runs = _runs(base)
    rows = []
    unmatched = []
    for key, n_runs in _runs(new).items():
        b_runs = base_runs.get(key)
        name = base_id(n_runs[0])
        if b_runs is None:
            unmatched.append(name)
            continue
        limited = [side for side, runs in (("base", b_runs), ("new", n_runs))
                   if any(q["client"]["client_limited"] for q in runs)]
        if limited:
            warnings.append(f"{name}: client-limited in {' and '.join(limited)}: its figures measure "
                            "the client, not only the server")
        metrics = {}
        for m in COMPARED + turn_metrics(b_runs, n_runs):
            entry = _entry(b_runs, n_runs, m, noise_floor, bool(limited), doubted_figures(b_runs + n_runs))
            if entry is not None:
                metrics[m] = entry
        sides = [("base", base, b_runs[0]), ("new", new, n_runs[0])]
        for figure, judged in metrics.items():  # a peer's side with percentiles only: say so (results/peers)
            if judged["significant"] == "n/a" and "." in figure and (why := why_not_judged(figure, sides)):
                judged["not_judged"] = why
        row = {"point": name, "base_point": base_id(b_runs[0]), "metrics": metrics,
               "client_limited": limited, "runs": [len(b_runs), len(n_runs)]}
        lacking = {k: why for k in COMPARED if k not in metrics and (why := missing(k, sides))}
        if lacking:  # only where a side is another tool's (results/peers/explain.py)
            row["missing"] = lacking
        rows.append(row)
    out = {"base": result_label(base, sources[0]), "new": result_label(new, sources[1]),
           "noise_method": noise_method(noise_floor),
           "warnings": warnings, "points": rows, "unmatched_points": unmatched}
    twins = twin_notes(base, new)
    if twins:
        out["twins"] = twins
    peers = side_notes(base, "base") + side_notes(new, "new")
    if peers:
        out["peers"] = peers
    searches = _searches(base, new)
    if searches:
        out["searches"] = searches
    return out


def _models(doc: dict) -> list[str]:
    """The models a result's requests named (its targets', else its plan's), once each."""
    named = [t.get("model") for t in doc.get("target") or []] or [
        (c.get("target") or {}).get("model") for c in (doc.get("plan") or {}).get("combinations", [])]
    return list(dict.fromkeys(str(m) for m in named if m))


def model_difference(base: dict, new: dict) -> str | None:
    """A warning naming both sides' models when they differ: the workload hash leaves the model
    out (one spec, any server), so runs of two models would otherwise pass for one server's change."""
    b, n = _models(base), _models(new)
    if not b or not n or b == n:
        return None
    return (f"the two runs measured different models (base: {', '.join(b)}; new: {', '.join(n)}): the "
            "differences are the models' and servers' together, not one server's change")


def _twins_of(doc: dict) -> list[str]:
    """The twin files (`benchc fit`) a run's simulated targets played, as the plan names them."""
    sims = [(c.get("target") or {}).get("sim") or {} for c in (doc.get("plan") or {}).get("combinations", [])]
    return sorted({s["preset"] for s in sims if sim_preset_is_file(str(s.get("preset", "")))})


def twin_notes(base: dict, new: dict) -> list[str]:
    """What a comparison with a twin's run means: its change is the twin's prediction error."""
    notes = [f"new ran against the twin {t}: its figures are the twin's predictions, each change "
             "the prediction's error" for t in _twins_of(new)]
    notes += [f"base ran against the twin {t}: its figures are the twin's predictions, each change "
              "the measurement's distance from them (the prediction's error, sign reversed)"
              for t in _twins_of(base)]
    return notes


def _searches(base: dict, new: dict) -> list[dict]:
    """Capacity searches of the same combination (matrix values) side by side."""
    def key(s: dict) -> tuple:
        return tuple(sorted((k, str(v)) for k, v in s.get("matrix", {}).items()))

    old = {key(s): s for s in base.get("search", [])}
    out = []
    for s in new.get("search", []):
        b = old.get(key(s))
        if b is None:
            continue
        out.append({"search": s["id"], "over": s["over"], "slo": s["slo"],
                    "base": {k: b[k] for k in ("answer", "status", "goodput_s")},
                    "new": {k: s[k] for k in ("answer", "status", "goodput_s")},
                    "same_slo": b["slo"] == s["slo"]})
    return out


def gate_judges(g: Threshold, m: dict) -> bool:
    """Whether a gate may judge this figure as the table shows it: a relative gate on a
    latency breaches only a change the table calls beyond noise (never one it calls noise, or
    cannot judge: too few samples, a client-limited side); on a throughput or the error rate,
    which a single run cannot judge, it takes the change as measured unless the table calls
    it noise (repeated runs)."""
    if not g.relative:
        return True
    if "." in g.key:
        return m["significant"] == "yes"
    return m["significant"] != "no"


def unjudged_gates(comparison: dict, gates: list[Threshold]) -> list[str]:
    """The relative latency gates the table could not judge, per point (said, not breached);
    where a side is another tool's, the line says why (results/peers/explain.py)."""
    lines = [f"{row['point']}: {g.text}: not judged ({m['change']:+.1%}, beyond noise: n/a)"
             + (f": {m['not_judged']}" if m.get("not_judged") else "")
             for row in comparison["points"] for g in gates if g.relative and "." in g.key
             and (m := row["metrics"].get(g.key)) is not None and m["change"] is not None
             and m["significant"] == "n/a" and g.holds(m["change"])]
    return lines + [f"{row['point']}: {g.text}: not judged: {row['missing'][g.key]}"
                    for row in comparison["points"] for g in gates if g.key in row.get("missing", {})]


def check_gates(comparison: dict, gates: list[Threshold]) -> list[str]:
    """One line per breached gate, per point; gate_judges says which changes a gate judges,
    so that a gate and the table never speak differently of one change."""
    breaches = []
    for row in comparison["points"]:
        for g in gates:
            m = row["metrics"].get(g.key)
            if m is None:
                continue
            # a change judged on too few samples counts as no more than what they prove
            value = m.get("change_bound", m["change"]) if g.relative else m["new"]
            if value is None or not gate_judges(g, m):
                continue
            if g.holds(value):
                shown = f"{value:+.1%}" if g.relative else _fmt(g.key, value)
                if g.relative and "change_bound" in m:
                    shown = (f"{m['change']:+.1%}; too few requests to bootstrap, but every request "
                             f"of one run apart from every one of the other: at least {value:+.1%}")
                breaches.append(f"{row['point']}: {g.text} (measured {shown})")
    return breaches


def _fmt(key: str, v: float) -> str:
    if "." in key:
        return f"{v / 1000:.2f}ms"
    if key == "error_rate":
        return f"{v:.2%}"
    return f"{v:,.1f}"


def _shown(key: str, m: dict, side: str) -> str:
    """base or new, with the half-width of its 95% interval when the runs give one."""
    text = _fmt(key, m[side])
    ci = m.get(f"{side}_ci95")
    if ci:
        half = (ci[1] - ci[0]) / 2
        text += f" ±{half / 1000:.2f}ms" if "." in key else (f" ±{half:.2%}" if key == "error_rate"
                                                              else f" ±{half:,.1f}")
    return text


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
    for t in comparison.get("twins", []):
        lines.append(("> **twin:** " if md else "TWIN: ") + t)
    for t in comparison.get("peers", []):
        lines.append(("> **peer:** " if md else "PEER: ") + t)
    header = ["point", "metric", "base", "new", "change", "beyond noise"]
    table = []
    for row in comparison["points"]:
        for key, m in row["metrics"].items():
            change = "" if m["change"] is None else (
                f"{m['change']:+.1%}" if "." not in key else f"{m['delta'] / 1000:+.2f}ms")
            runs = row.get("runs", [1, 1])
            name = row["point"] + (f" ({runs[0]}+{runs[1]} runs)" if max(runs) > 1 else "")
            table.append([name + (" (client-limited)" if row["client_limited"] else ""), key,
                          _shown(key, m, "base"), _shown(key, m, "new"), change, m["significant"]])
    if md:
        lines.append("")
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
        lines += ["| " + " | ".join(r) + " |" for r in table]
    else:
        widths = [max(len(str(x)) for x in col) for col in zip(header, *table, strict=False)]
        for r in [header, *table]:
            lines.append("  ".join(str(x).ljust(w) for x, w in zip(r, widths, strict=False)).rstrip())
    for sr in comparison.get("searches", []):
        note = "" if sr["same_slo"] else " (different SLOs!)"
        base, new = (show_load(sr["over"], sr[side]["answer"]) for side in ("base", "new"))
        lines.append(f"{sr['search']} ({'; '.join(sr['slo'])}): answer {base} ({sr['base']['status']}) -> "
                     f"{new} ({sr['new']['status']}){note}")
    if comparison["unmatched_points"]:
        lines.append(f"points only in new: {', '.join(comparison['unmatched_points'])}")
    lines.append(("\n_" if md else "") + "noise: " + comparison["noise_method"] + ("_" if md else ""))
    return "\n".join(lines) + "\n"


def decide_section(docs: list[dict], paths: list[str], noise_floor: float = NOISE_FLOOR,
                   gpu_hour: float | None = None) -> dict:
    """Every result's combinations side by side per load, the frontier and the decision
    across them all (results/sidebyside.py, results/decide.py)."""
    from benchc.results.api import from_document
    from benchc.results.decide import decision, frontier_block
    from benchc.results.sidebyside import side_by_side

    results = [from_document(d, p) for d, p in zip(docs, paths, strict=True)]
    out: dict = {"side_by_side": side_by_side(results, gpu_hour)}
    frontier = frontier_block(results, gpu_hour)
    if frontier is not None:
        out["frontier"] = frontier
    out["decision"] = decision(results, gpu_hour, noise_floor)
    return out


def render_decide(section: dict, fmt: str) -> str:
    from benchc.results.decide import describe
    from benchc.results.sidebyside import render_tables

    md = fmt == "markdown"
    lines = []
    if section["side_by_side"]:
        lines = ["", "**side by side**" if md else "side by side (one table per load):"]
    lines += render_tables(section["side_by_side"], md)
    left = (section.get("frontier") or {}).get("left_out")
    if left:
        lines.append("")
        lines.append(f"left out of the frontier and the decision: {len(left)} point(s): {left[0]['reason']}")
    for answer in section["decision"]:
        lines.append("")
        lines += [("    " if md else "") + x for x in describe(answer)]
    return "\n".join(lines) + "\n"


def run_compare(paths: list[str], gates: list[str], fmt: str,
                noise_floor: float = NOISE_FLOOR, gpu_hour: float | None = None,
                allow_unjudged: bool = False) -> tuple[str, list[str]]:
    """(the comparison's text, the breached gates' lines). A relative latency gate the table
    could not judge whose measured change would breach it counts as breached (a CI gate that
    cannot fire must not pass), unless `allow_unjudged`: then it is a NOTE on stderr."""
    if not paths:
        raise UsageError("compare needs a result (one matrix result: its combinations side by side)")
    if len(paths) == 1:
        if gates:
            raise UsageError("--fail-on needs a base result and at least one more to compare against")
        doc = read(paths[0])
        section = decide_section([doc], paths, noise_floor, gpu_hour)
        if fmt == "json":
            return json.dumps({"result": result_label(doc, paths[0]), **section}, indent=1) + "\n", []
        return result_label(doc, paths[0]) + "\n" + render_decide(section, fmt), []
    try:
        parsed = [parse_gate(g) for g in gates]
    except ValueError as e:
        raise UsageError(f"--fail-on: {e}") from e
    for g in parsed:  # a gate on a figure compare does not compare could never trip
        if g.key not in COMPARED:
            raise UsageError(f"--fail-on {g.text!r}: compare does not compare {g.key}; a gate may "
                             f"use {', '.join(COMPARED)}")
    docs = [read(p) for p in paths]
    section = decide_section(docs, paths, noise_floor, gpu_hour)
    outputs, breaches = [], []
    for path, new in zip(paths[1:], docs[1:], strict=True):
        comparison = compare_docs(docs[0], new, noise_floor, (paths[0], path))
        if fmt == "json":
            comparison.update(section)
        outputs.append(render(comparison, fmt))
        breaches += check_gates(comparison, parsed)
        for line in unjudged_gates(comparison, parsed):
            told = ": not judged: " in line or "beyond noise: n/a): " in line  # a peer side's reason
            why = "" if told else (": too few samples around the percentile, or a client-limited side; "
                                   "repeat the run (load.repeats) or send more requests to judge it")
            if allow_unjudged:
                print(f"benchc: NOTE: {line}{why}", file=sys.stderr)
            else:  # a CI gate that cannot fire must not pass (issue 45)
                breaches.append(f"{line}{why}: could not judge (--allow-unjudged lets it pass)")
    if fmt != "json":
        outputs.append(render_decide(section, fmt))
    return "\n".join(outputs), breaches


def raise_on_breaches(breaches: list[str]) -> None:
    if breaches:
        raise ThresholdFailed("gate breached:\n  " + "\n  ".join(breaches))
