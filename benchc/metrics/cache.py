"""A point's prefix caching: its counters (CacheCounters, part of the point's Tally, so shards
add exactly) and the verdict on them (cache_verdict).

The server's cached prompt tokens, per request where it reports them
(usage.prompt_tokens_details.cached_tokens, llama.cpp's timings.cache_n), else the point's
delta of vLLM's Prometheus counters (vllm:prefix_cache_hits_total / _queries_total), against
the most the spec's sharing allows. More cached than allowed means the server served prompts
from a cache the spec did not ask for (a previous run's prompts on a server that stayed up,
another client's traffic, a prompt source that repeated itself): the point is marked, a
warning printed, and --strict fails on it.

The verdict reads the cache block and nothing else of the point: cache_verdict(block, server)
returns the completed block, which the point's writer (results/api.py Point.with_blocks) puts in
its place.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Tokens a request may find cached beyond what the spec shares: token-granular caches
# (llama.cpp's slots, SGLang's radix tree) also match the first characters of two requests'
# markers ("3.17" and "3.18") or a first word that happens to be the same.
CACHE_SLACK_TOKENS = 8

# said in a point's cache block when no request reported its cached tokens (the result must
# say plainly that it does not know them per request, not show a silent zero)
NOT_PER_REQUEST = ("the server reported no cached prompt tokens per request (its usage has no "
                   "prompt_tokens_details: vLLM reports them only when run with "
                   "--enable-prompt-tokens-details, SGLang with --enable-cache-report)")

_SUMMED = ("requests", "prompt_tokens", "declared_shared_tokens", "unknown_sharing", "reused", "reporting",
           "cached_tokens", "allowed_tokens", "above")


@dataclass
class CacheCounters:
    """What a point's completed requests say about prefix caching: by the spec (shared and
    reused prompts) and by the server (cached prompt tokens), and the most the spec's sharing
    lets a server have cached (`allowed_tokens`, per request the prompt minus the part of it
    no other request sent, plus CACHE_SLACK_TOKENS)."""

    requests: int = 0
    prompt_tokens: int = 0  # the server's usage.prompt_tokens (chat template included), else benchc's count
    declared_shared_tokens: int = 0  # prefix_tokens of requests whose sharing the spec declares
    unknown_sharing: int = 0  # requests of a user's file, sent for the first time: not checked
    reused: int = 0  # requests whose prompt an earlier request of the run sent
    reporting: int = 0  # requests whose server reported cached tokens
    sources: Counter = field(default_factory=Counter)
    cached_tokens: int = 0  # of the reporting requests
    allowed_tokens: int = 0
    above: int = 0  # reporting requests with more cached than allowed

    def add(self, r: Any) -> None:
        """One completed request (a metrics.record.RequestRecord)."""
        self.requests += 1
        cache, usage = r.cache, r.tokens.usage_input_tokens
        prompt = usage if usage is not None else r.input_tokens
        self.prompt_tokens += prompt
        shared = cache.shared_tokens
        if cache.reused or shared is None:
            allowed = prompt  # all of it may be cached: sent before, or sharing unknown
            if cache.reused:
                self.reused += 1
            else:
                self.unknown_sharing += 1
        else:
            self.declared_shared_tokens += shared
            # the part of this prompt no other request sent, in benchc's count (a server's
            # tokenizer makes it no shorter: vocabulary words are one token each)
            own = max(0, r.input_tokens - shared)
            allowed = min(prompt, max(0, prompt - own) + CACHE_SLACK_TOKENS)
        self.allowed_tokens += allowed
        cached = cache.cached_tokens
        if cached is not None:
            self.reporting += 1
            self.sources[cache.cached_source] += 1
            self.cached_tokens += cached
            if cached > allowed:
                self.above += 1

    def merge(self, other: CacheCounters) -> None:
        """Another tally's counters of the same point (a shard): every count summed."""
        for name in _SUMMED:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.sources.update(other.sources)

    def block(self) -> dict:
        """The counters as a result point's `cache` block (cache_verdict adds the verdict)."""
        return {"requests": self.requests, "prompt_tokens": self.prompt_tokens,
                "declared_shared_tokens": self.declared_shared_tokens,
                "unknown_sharing_requests": self.unknown_sharing, "reused_prompt_requests": self.reused,
                "allowed_cached_tokens": self.allowed_tokens,
                "reported": {"requests": self.reporting, "cached_tokens": self.cached_tokens,
                             "sources": dict(self.sources), "requests_above_allowed": self.above}}

    @classmethod
    def from_block(cls, block: dict) -> CacheCounters:
        """The counters a result point's `cache` block was made from."""
        rep = block["reported"]
        return cls(requests=block["requests"], prompt_tokens=block["prompt_tokens"],
                   declared_shared_tokens=block["declared_shared_tokens"],
                   unknown_sharing=block["unknown_sharing_requests"], reused=block["reused_prompt_requests"],
                   reporting=rep["requests"], sources=Counter(rep["sources"]),
                   cached_tokens=rep["cached_tokens"], allowed_tokens=block["allowed_cached_tokens"],
                   above=rep["requests_above_allowed"])


def cache_verdict(block: Mapping[str, Any], server: Mapping[str, Any] | None = None) -> dict:
    """The point's `cache` block (its counters from the recorder, and what the run adds: prompts,
    reset) completed with the verdict: source, cached_tokens, cached_fraction, allowed_fraction,
    above_declared and, when above, a warning. A new dict; `block` is left as it is. `server` is
    the point's Prometheus summary (telemetry.server_summary)."""
    c = dict(block)
    reported = c["reported"]
    allowed, prompt = c["allowed_cached_tokens"], c["prompt_tokens"]
    if reported["requests"]:
        # a server may leave prompt_tokens_details out when nothing was cached (vLLM 0.32 with
        # --enable-prompt-tokens-details reports 0, docs/conformance.md): the other requests of
        # a point where some reported count as 0 cached
        source = "+".join(sorted(reported["sources"]))
        cached = reported["cached_tokens"]
    elif server and server.get("prefix_cache_queries_delta"):
        # the whole server's counters over the point (any other traffic included)
        source = "prometheus"
        cached = int(server.get("prefix_cache_hits_delta", 0))
        prompt = int(server["prefix_cache_queries_delta"])
        c["note"] = NOT_PER_REQUEST + ": these figures are its Prometheus prefix-cache counters over " \
            "the point (the whole server's: other clients' requests included), not checked per request"
    else:
        c.update(source="none", cached_tokens=None, cached_fraction=None, above_declared=False,
                 note=NOT_PER_REQUEST + ", and no prefix-cache counters of its /metrics stand in for them "
                      "here: whether prompts came from a prefix cache is not known")
        return c
    # per request where the server said per request: one request's hit of a prompt it kept from
    # before is not hidden by the others' sharing less than they might
    over = reported["requests_above_allowed"] if source != "prometheus" else 0
    above = cached > allowed or over > 0
    c.update(source=source, cached_tokens=cached,
             cached_fraction=round(cached / prompt, 4) if prompt else None,
             allowed_fraction=round(min(allowed, prompt) / prompt, 4) if prompt else None,
             above_declared=above)
    if above:
        which = (f"more than this workload shares (at most {allowed})" if cached > allowed else
                 f"and {over} request(s) got more of theirs from it than this workload shares with them")
        c["warning"] = (f"{cached} of {prompt} prompt tokens came from the server's prefix cache "
                        f"({cached / prompt:.0%}, by {source}), {which}: the server served prompts it "
                        "kept from before, so TTFT here partly measures cache hits (a spec that pins "
                        "`seed` resends the prompts of earlier runs: leave it out for fresh ones, or set "
                        "server.reset_cache)")
    return c


def cache_doubts(c: Mapping[str, Any]) -> list[str]:
    """What makes a point's figures untrustworthy on prefix caching (--strict fails on it), from
    its `cache` block: more cached than the spec shares, or a reset asked for and not done."""
    out = [c["warning"]] if c.get("above_declared") and c.get("warning") else []
    reset = c.get("reset")
    if reset is not None and not reset.get("done"):
        out.append(reset["message"])
    return out
