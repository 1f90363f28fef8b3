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
from benchc.metrics.cache import cache_check
from benchc.results.document import now_iso, point_key
from benchc.results.repeats import summaries
from benchc.results.shards import refuse_duplicates, shard_ids
from benchc.results.trust import judge

WINDOW_NOTE = ("window united across shards: earliest start to latest end on the shards' own "
               "monotonic clocks; exact when the shards share a clock (one machine)")


def merge_docs(docs: list[dict], sources: list[str]) -> dict:
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
    out = copy.deepcopy(docs[0])
    groups: dict[tuple, list[dict]] = {}
    order: list[tuple] = []
    for d in docs:
        for p in d["points"]:
            k = point_key(p)
            if k not in groups:
                order.append(k)
            groups.setdefault(k, []).append(p)
    out["points"] = [merge_points(groups[k]) for k in order]
    if "repeats" in out:  # the runs' intervals, again from the merged runs
        out["repeats"] = summaries(out["points"])
    out["created"] = now_iso()
    out["complete"] = all(d["complete"] for d in docs) and all(len(g) == len(docs) for g in groups.values())
    out["interrupted"] = any(d.get("interrupted") for d in docs)
    out["errors"] = [e for d in docs for e in d.get("errors", [])]
    out["merged_from"] = [{"source": s, "created": d["created"], "host": d["environment"].get("host"),
                           "complete": d["complete"]} for s, d in zip(sources, docs, strict=True)]
    # each part's identity, so that merging this result again with one of its parts is refused
    out["merged_from"] = [{**m, "shard": sid} for m, d in zip(out["merged_from"], docs, strict=True)
                          for sid in shard_ids(d)]
    return out


def merge_points(shards: list[dict]) -> dict:
    """One point from the points of its shards (result documents' points)."""
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
    cache_check(p)
    p["client"] = merge_client_checks([s["client"] for s in shards])
    # thresholds are re-checked on the merged figures by `compare --fail-on`
    p["telemetry"] = {"shards": [s.get("telemetry") for s in shards]}
    p["trust"] = judge(p)
    return p
