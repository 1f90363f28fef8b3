"""`benchc merge`: shards of one plan (same plan_hash) into one result, exactly.

Per point (matched by load and matrix values): histograms are added count for
count (HdrHistogram merge), counters summed, the window united (earliest start to
latest end; shards must share a clock -- one machine, or clocks agreed to well
under the window -- the result says so), and every rate recomputed from the
merged counts over the united window. Steady-state throughput is the sum of the
shards' (they ran side by side). Out-of-range latency counts are summed too.
"""

from __future__ import annotations

import copy

from benchc.errors import UsageError
from benchc.metrics._hdr import Histogram
from benchc.metrics.cache import cache_check
from benchc.metrics.latency import new_histogram, summarize
from benchc.results.document import now_iso, point_key

WINDOW_NOTE = ("window united across shards: earliest start to latest end on the shards' own "
               "monotonic clocks; exact when the shards share a clock (one machine)")


def merge_docs(docs: list[dict], sources: list[str]) -> dict:
    if len(docs) < 2:
        raise UsageError("merge needs at least two shards")
    hashes = {d["plan_hash"] for d in docs}
    if len(hashes) != 1:
        raise UsageError("these results come from different plans (plan_hash "
                         + ", ".join(sorted(h[:12] for h in hashes)) + "); only shards of one plan merge")
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
    out["created"] = now_iso()
    out["complete"] = all(d["complete"] for d in docs) and all(len(g) == len(docs) for g in groups.values())
    out["interrupted"] = any(d.get("interrupted") for d in docs)
    out["merged_from"] = [{"source": s, "created": d["created"], "host": d["environment"].get("host"),
                           "complete": d["complete"]} for s, d in zip(sources, docs, strict=True)]
    return out


def merge_points(shards: list[dict]) -> dict:
    p = copy.deepcopy(shards[0])
    starts = [s["window"]["start_ns"] for s in shards if s["window"].get("start_ns")]
    ends = [s["window"]["end_ns"] for s in shards if s["window"].get("end_ns")]
    start, end = (min(starts), max(ends)) if starts and ends else (None, None)
    window_s = (end - start) / 1e9 if start is not None else 0.0
    p["window"] = {"start_ns": start, "end_ns": end, "duration_s": round(window_s, 6), "note": WINDOW_NOTE}

    counts = {"sent": 0, "completed": 0, "failed": 0, "errors": {}, "error_examples": {}}
    for s in shards:
        c = s["counts"]
        for k in ("sent", "completed", "failed"):
            counts[k] += c[k]
        for k, v in c["errors"].items():
            counts["errors"][k] = counts["errors"].get(k, 0) + v
        for k, v in c.get("error_examples", {}).items():
            counts["error_examples"].setdefault(k, v)
    p["counts"] = counts

    tok = {"input": 0, "output": 0, "multi_token_chunks": 0}
    for s in shards:
        for k in tok:
            tok[k] += s["tokens"].get(k, 0)
    methods = {s["tokens"]["output_method"] for s in shards}
    tok["output_method"] = methods.pop() if len(methods) == 1 else "mixed"
    cvu = [s["tokens"]["chunks_vs_usage"] for s in shards if "chunks_vs_usage" in s["tokens"]]
    if cvu:
        usage, chunks = sum(x["usage"] for x in cvu), sum(x["chunks"] for x in cvu)
        diff = round((chunks - usage) / usage, 6) if usage else None
        tok["chunks_vs_usage"] = {"usage": usage, "chunks": chunks, "relative_difference": diff}
    tok["osl"] = {"requests_checked": sum(s["tokens"]["osl"]["requests_checked"] for s in shards),
                  "mismatched": sum(s["tokens"]["osl"]["mismatched"] for s in shards)}
    p["tokens"] = tok

    p["latency"] = _merge_summaries([s["latency"] for s in shards])
    if any("cache" in s for s in shards):
        p["cache"] = _merge_cache([s["cache"] for s in shards if "cache" in s])
        # the verdict again, on the summed counters (a Prometheus delta per shard does not add
        # up: every shard scraped the one server)
        cache_check(p)
    timed = [s["server_timings"] for s in shards if "server_timings" in s]
    if timed:
        p["server_timings"] = {"source": "timings", "requests": sum(t["requests"] for t in timed),
                               "ttft_below_server_prompt": sum(t["ttft_below_server_prompt"] for t in timed),
                               **_merge_summaries([{k: v for k, v in t.items() if k.endswith("_us")}
                                                   for t in timed])}

    latency = p["latency"]

    def rate(x: float) -> float:
        return round(x / window_s, 3) if window_s > 0 else 0.0

    good = sum(round(s["throughput"]["goodput_s"] * s["window"]["duration_s"]) for s in shards)
    steady = [s["throughput"].get("steady_output_tok_s") for s in shards]
    p["throughput"] = {"output_tok_s": rate(tok["output"]), "total_tok_s": rate(tok["output"] + tok["input"]),
                       "request_s": rate(counts["completed"]), "goodput_s": rate(good),
                       "steady_output_tok_s": round(sum(steady), 3) if all(x is not None for x in steady)
                       else None}
    p["error_rate"] = round(counts["failed"] / counts["sent"], 6) if counts["sent"] else 0.0
    mean_e2e_s = latency["e2e_us"].get("mean", 0) / 1e6
    p["little"] = {"throughput_x_latency": round(p["throughput"]["request_s"] * mean_e2e_s, 3)}
    p["complete"] = all(s["complete"] for s in shards)
    p["client"] = {"client_limited": any(s["client"]["client_limited"] for s in shards),
                   "reasons": [r for s in shards for r in s["client"].get("reasons", [])],
                   "shards": [s["client"] for s in shards]}
    p.pop("slo", None)  # thresholds are re-checked on the merged figures by `compare --fail-on`
    p.pop("steady", None)
    p["telemetry"] = {"shards": [s.get("telemetry") for s in shards]}
    return p


def _merge_summaries(blocks: list[dict]) -> dict:
    """Latency summary blocks of the same keys, merged through their histograms."""
    out = {}
    for key in blocks[0]:
        h = new_histogram()
        out_of_range = 0
        for b in blocks:
            block = b.get(key) or {}
            out_of_range += block.get("out_of_range", 0)
            if block.get("hdr"):
                h.merge(Histogram.decode(block["hdr"]))
        summary = summarize(h)
        summary["out_of_range"] = out_of_range
        out[key] = summary
    return out


def _merge_cache(blocks: list[dict]) -> dict:
    """Shards' prefix-cache counters summed (the verdict is made again on the sum)."""
    out = {k: sum(b[k] for b in blocks) for k in ("requests", "prompt_tokens", "declared_shared_tokens",
                                                   "unknown_sharing_requests", "reused_prompt_requests",
                                                   "allowed_cached_tokens")}
    sources: dict = {}
    for b in blocks:
        for k, v in b["reported"]["sources"].items():
            sources[k] = sources.get(k, 0) + v
    out["reported"] = {"requests": sum(b["reported"]["requests"] for b in blocks),
                       "cached_tokens": sum(b["reported"]["cached_tokens"] for b in blocks),
                       "sources": sources,
                       "requests_above_allowed": sum(b["reported"]["requests_above_allowed"] for b in blocks)}
    for k in ("prompts", "reset"):
        if k in blocks[0]:
            out[k] = blocks[0][k]
    return out
