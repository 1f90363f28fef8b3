"""The verdict on a point's prefix caching, from its counters (recorder.py CacheCounters).

The server's cached prompt tokens, per request where it reports them
(usage.prompt_tokens_details.cached_tokens, llama.cpp's timings.cache_n), else the point's
delta of vLLM's Prometheus counters (vllm:prefix_cache_hits_total / _queries_total), against
the most the spec's sharing allows. More cached than allowed means the server served prompts
from a cache the spec did not ask for (a previous run's prompts on a server that stayed up,
another client's traffic, a prompt source that repeated itself): the point is marked, a
warning printed, and --strict fails on it.
"""

from __future__ import annotations


def cache_check(point: dict, server: dict | None = None) -> dict:
    """Complete the point's `cache` block (its counters from the recorder) with the verdict:
    source, cached_tokens, cached_fraction, allowed_fraction, above_declared and, when above,
    a warning. `server` is the point's Prometheus summary (telemetry.server_summary)."""
    c = point["cache"]
    reported = c["reported"]
    allowed, prompt = c["allowed_cached_tokens"], c["prompt_tokens"]
    if reported["requests"]:
        # vLLM and SGLang leave prompt_tokens_details out when nothing was cached: the other
        # requests of a point where some reported count as 0 cached
        source = "+".join(sorted(reported["sources"]))
        cached = reported["cached_tokens"]
    elif server and server.get("prefix_cache_queries_delta"):
        # the whole server's counters over the point (any other traffic included)
        source = "prometheus"
        cached = int(server.get("prefix_cache_hits_delta", 0))
        prompt = int(server["prefix_cache_queries_delta"])
    else:
        c.update(source="none", cached_tokens=None, cached_fraction=None, above_declared=False)
        return c
    above = cached > allowed
    c.update(source=source, cached_tokens=cached,
             cached_fraction=round(cached / prompt, 4) if prompt else None,
             allowed_fraction=round(min(allowed, prompt) / prompt, 4) if prompt else None,
             above_declared=above)
    if above:
        c["warning"] = (f"{cached} of {prompt} prompt tokens came from the server's prefix cache "
                        f"({cached / prompt:.0%}, by {source}), more than this workload shares (at most "
                        f"{allowed}): the server served prompts it kept from before, so TTFT here partly "
                        "measures cache hits")
    return c


def cache_doubts(point: dict) -> list[str]:
    """What makes the point's figures untrustworthy on prefix caching (--strict fails on it):
    more cached than the spec shares, or a reset asked for and not done."""
    c = point.get("cache") or {}
    out = [c["warning"]] if c.get("above_declared") and c.get("warning") else []
    reset = c.get("reset")
    if reset is not None and not reset.get("done"):
        out.append(reset["message"])
    return out
