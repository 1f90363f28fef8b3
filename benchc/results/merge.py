"""`benchc merge`: shards of one plan (same plan_hash) into one result, exactly.

Per point (matched by load and matrix values) each shard's point is read back into the
tally it was made from (metrics.aggregate.Tally.from_point), the tallies are added --
histograms count for count, out-of-range counts and every counter summed, the window
united (earliest start to latest end; shards must share a clock -- one machine, or clocks
agreed to well under the window -- the result says so) -- and the figures are computed
from the sum by the same code that computes a single run's (aggregate.figures): rates
from counts over the united window, goodput from the count of requests that met every
SLO. Results written before that count was kept get it derived (goodput_s x window), and
the merged point lists it under `derived`. Steady-state throughput and the sampled
in-flight count are the sums of the shards' (they ran side by side).
"""

from __future__ import annotations

import copy

from benchc.errors import ResultFormatError, UsageError
from benchc.metrics._hdr_codec import HdrFormatError
from benchc.metrics.aggregate import Tally, figures, merge_client_checks, sum_or_none
from benchc.metrics.cache import cache_verdict
from benchc.results import values
from benchc.results.api import Point
from benchc.results.clock import iso, point_span
from benchc.results.decide import with_decision
from benchc.results.document import now_iso, point_key
from benchc.results.identity import repeat_key, result_label
from benchc.results.repeats import summaries
from benchc.results.shards import refuse_duplicates, shard_ids
from benchc.results.slo import evaluate_slo, run_verdict, slo_thresholds
from benchc.results.trust import judge
from benchc.spec.thresholds import Threshold

WINDOW_NOTE = ("window united across shards: earliest start to latest end on the shards' own "
               "monotonic clocks; exact when the shards share a clock (one machine)")


def merge_docs(docs: list[dict], sources: list[str], repeats: bool = False) -> dict:
    """Shards of one measurement (they ran side by side) into one result; with `repeats`,
    complete runs of one plan (one after another) into one result whose points are repeats."""
    if len(docs) < 2:
        raise UsageError("merge needs at least two shards")
    hashes = {d["plan_hash"] for d in docs}
    if len(hashes) != 1:
        raise UsageError("these results come from different plans (plan_hash "
                         + ", ".join(sorted(h[:12] for h in hashes)) + "); only shards of one plan merge")
    if any(d.get("search") for d in docs):
        raise UsageError("results of a capacity search do not merge: each shard chose its own probes "
                         "from its own figures; split one search's load with --backend ray instead")
    refuse_duplicates(docs, sources)
    if repeats:
        return _within_bounds(as_repeats(docs, sources))
    refuse_sequential(docs, sources)
    out = copy.deepcopy(docs[0])
    groups: dict[tuple, list[dict]] = {}
    order: list[tuple] = []
    for d in docs:
        for p in d["points"]:
            k = point_key(p)
            if k not in groups:
                order.append(k)
            groups.setdefault(k, []).append(p)
    checks = slo_thresholds(out["plan"].get("slo", []))
    out["points"] = [merge_points(groups[k], checks) for k in order]
    out["slo"] = run_verdict(bool(checks), out["points"])  # from the merged figures, not shard 0's
    if "repeats" in out:  # the runs' intervals, again from the merged runs
        out["repeats"] = summaries(out["points"])
    out["created"] = now_iso()  # when merged; exports date the points by the shards' (results/clock.py)
    out["requests_file"] = None  # each shard's records stay beside it; none holds the merged set
    _unbind(out)
    out["complete"] = all(d["complete"] for d in docs) and all(len(g) == len(docs) for g in groups.values())
    out["interrupted"] = any(d.get("interrupted") for d in docs)
    out["errors"] = [e for d in docs for e in d.get("errors", [])]
    out["merged_from"] = _merged_from(docs, sources)
    return _within_bounds(with_decision(out))


def _merged_from(docs: list[dict], sources: list[str]) -> list[dict]:
    parts = [{"source": s, "created": d["created"], "host": d["environment"].get("host"),
              "complete": d["complete"]} for s, d in zip(sources, docs, strict=True)]
    # each part's identity, so that merging this result again with one of its parts is refused
    return [{**m, "shard": sid} for m, d in zip(parts, docs, strict=True) for sid in shard_ids(d)]


def refuse_sequential(docs: list[dict], sources: list[str]) -> None:
    """UsageError when two results measured a point one after the other: they are runs, not
    shards. Summed over the united window they would halve every rate (two runs of 83 tok/s
    merged to 40.8); shards of one measurement ran side by side, so their windows overlap."""
    spans: dict[tuple, list[tuple]] = {}
    for source, d in zip(sources, docs, strict=True):
        for p in d["points"]:
            span = point_span(d, p)
            if span is not None:
                spans.setdefault(point_key(p), []).append((span, source, p["id"]))
    for runs in spans.values():
        for i, ((a0, a1), sa, pid) in enumerate(runs):
            for (b0, b1), sb, _ in runs[i + 1:]:
                if a1 < b0 or b1 < a0:
                    raise UsageError(
                        f"{sa} and {sb} measured {pid} one after the other ({iso(a0)} to {iso(a1)}, "
                        f"{iso(b0)} to {iso(b1)}): they are runs of the plan, not shards of one "
                        "measurement, and summing them over both windows would halve every rate. "
                        "Pass --repeats to merge them as repeats of each point (compare and report "
                        "read them so); merge without it only shards that ran side by side")


def as_repeats(docs: list[dict], sources: list[str]) -> dict:
    """Runs of one plan as one result whose every point is repeated: run r of point c=4 is
    `c=4#r`, with its own figures; `repeats` summarises them (means, intervals, pooled
    histograms), as load.repeats does within one run."""
    if any(p["params"].get("repeat") is not None for d in docs for p in d["points"]):
        raise UsageError("merge --repeats of results that already hold repeats (load.repeats) is not "
                         "built yet; merge them without --repeats if they are shards")
    if len({repeat_key(d)[1] for d in docs}) != 1:
        named = "; ".join(result_label(d, s) for d, s in zip(docs, sources, strict=True))
        raise UsageError(f"these results measured different targets ({named}): runs against two "
                         "servers are never repeats of one another; compare them instead")
    out = copy.deepcopy(docs[0])
    groups: dict[tuple, list[dict]] = {}
    for r, d in enumerate(docs, 1):
        for p in d["points"]:
            run = copy.deepcopy(p)
            run["params"]["repeat"] = r
            run["id"] = f"{p['id']}#{r}"
            groups.setdefault(point_key(p), []).append(run)
    out["points"] = [p for runs in groups.values() for p in runs]
    out["repeats"] = summaries(out["points"])
    out["slo"] = run_verdict(bool(out["plan"].get("slo")), out["points"])
    out["created"] = now_iso()
    out["requests_file"] = None
    _unbind(out)
    out["complete"] = all(d["complete"] for d in docs)
    out["interrupted"] = any(d.get("interrupted") for d in docs)
    out["errors"] = [e for d in docs for e in d.get("errors", [])]
    out["merged_from"] = _merged_from(docs, sources)
    return with_decision(out)


def merge_points(shards: list[dict], slo_checks: list[Threshold] | None = None) -> dict:
    """One point from the points of its shards (result documents' points); its SLO verdict
    again, on the merged figures, where the shards' points had one."""
    try:
        tally = Tally.total(Tally.from_point(s) for s in shards)
    except (ValueError, HdrFormatError) as e:
        raise ResultFormatError(f"point {shards[0]['id']}: a histogram cannot be merged: {e}") from e
    first = shards[0]
    p = {k: copy.deepcopy(first[k]) for k in ("id", "combination", "matrix", "params") if k in first}
    p["complete"] = all(s["complete"] for s in shards)
    p.update(figures(tally, sum_or_none(s["throughput"].get("steady_output_tok_s") for s in shards),
                     sum_or_none((s.get("little") or {}).get("mean_inflight_sampled") for s in shards)))
    p["window"]["note"] = WINDOW_NOTE
    for k in ("prompts", "reset"):  # how the run dealt prompts and reset the cache: the same in each shard
        if k in first.get("cache", {}):
            p["cache"][k] = first["cache"][k]
    # the verdict again, on the summed counters (a Prometheus delta per shard does not add up:
    # every shard scraped the one server)
    p["cache"] = cache_verdict(p["cache"])
    point = Point.from_dict({**p, "client": merge_client_checks([s["client"] for s in shards])})
    if slo_checks and any("slo" in s for s in shards):
        point = point.with_blocks(slo=evaluate_slo(slo_checks, point))
    point = point.with_blocks(telemetry={"shards": [s.get("telemetry") for s in shards]})
    return point.with_blocks(trust=judge(point)).to_dict()


def _unbind(out: dict) -> None:
    """A merged document is no run's: it names none and keeps no per-request file's hash."""
    out.pop("run_id", None)
    out.pop("requests_sha256", None)


def _within_bounds(out: dict) -> dict:
    """The merged document, once its sums are within what a result may hold (int64, finite:
    results/values.py). Each input was; sums of them past it mean the inputs cannot all be
    right, which is said of the inputs (exit 5), not of a document merge made."""
    try:
        values.check(out)
    except values.ValueProblem as problem:
        raise ResultFormatError(f"these results cannot be merged: their figures add past what a result "
                                f"holds (the merged {problem.where}: {str(problem).split(': ', 1)[1]}); "
                                "each is within it alone, so together they cannot all be right") from None
    return out
