"""The aggregation arithmetic (benchc/metrics/aggregate.py): a point's figures come from its
tally, and tallies of one point add exactly -- shards recorded apart give the figures of
the same requests recorded together, on both cores' stream parsers."""

import json
import os
import pickle
import random

import pytest

from benchc.client.request import _conclude
from benchc.metrics.aggregate import Tally, figures
from benchc.metrics.record import HTTP, CacheUse, RequestRecord, Times
from benchc.metrics.recorder import PointRecorder
from benchc.results.document import read, validate_document
from benchc.results.merge import merge_docs, merge_points
from benchc.spec.thresholds import parse_threshold
from tests.conftest import both_cores, core_of, histograms_of

DATA = os.path.join(os.path.dirname(__file__), "data")
SHARD_A = os.path.join(DATA, "result-v1-shard-a.json")
SHARD_B = os.path.join(DATA, "result-v1-shard-b.json")
HOUR_NS = 3_600 * 10**9
SLO = [parse_threshold("ttft", "p99 < 40ms"), parse_threshold("e2e", "p99 < 1s")]
PARSERS = [m.StreamParser for m in both_cores("benchc.client._stream")]
PARSER_IDS = ["py", "c"][: len(PARSERS)]


def _chunk(text: str, usage: int | None = None) -> bytes:
    ev: dict = {"choices": [{"index": 0, "delta": {"content": text}}]}
    if usage is not None:
        ev["usage"] = {"prompt_tokens": 32, "completion_tokens": usage}
    return b"data: " + json.dumps(ev).encode() + b"\n\n"


def requests(parser_cls, n: int, seed: int, open_loop: bool = False) -> list[RequestRecord]:
    """`n` finished requests as the client fills them: real stream parsers fed SSE bytes at
    seeded times, with every case the tally counts -- usage or none, multi-token chunks
    (continuous usage), pinned lengths met or not, HTTP errors, an E2E beyond the 1 h range."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        t0 = 10**12 + rng.randrange(10**9)
        tokens = rng.randrange(1, 12)
        expected = rng.choice([None, tokens, tokens + 1])
        rec = RequestRecord(id=f"r{seed}-{i}", prompt_index=i, input_tokens=32,
                            expected_output_tokens=expected,
                            times=Times(t0_ns=t0,
                                        scheduled_ns=t0 - rng.randrange(10**7) if open_loop else None))
        if rng.random() < 0.15:
            rec.outcome.error, rec.outcome.error_detail, rec.outcome.status = HTTP, "503: busy", 503
            rec.times.end_ns = t0 + 10**6
            out.append(rec)
            continue
        with_usage, continuous = rng.random() < 0.7, rng.random() < 0.3
        parser = parser_cls(True)
        t = t0 + rng.randrange(5 * 10**6, 60 * 10**6)
        sent = 0
        while sent < tokens:
            k = min(tokens - sent, 2 if continuous and rng.random() < 0.5 else 1)
            sent += k
            parser.feed(_chunk(" w" * k, sent if continuous else None), t)
            t += rng.randrange(5 * 10**6, 30 * 10**6)
        if rng.random() < 0.05:
            t += 2 * HOUR_NS  # a stream that ended past the histograms' range
        tail = _chunk("", tokens) if with_usage else b""
        parser.feed(tail.replace(b'"content": ""', b'"content": null') + b"data: [DONE]\n\n", t)
        parser.close(t)
        rec.parser = parser
        rec.times.end_ns = parser.done_ns or t
        out.append(_conclude(rec, parser))
    return out


class WordCounter:
    """A stand-in tokenizer for count_with: one token per word of the joined output."""

    def count(self, text: str) -> int:
        return len(text.split())


def record(reqs: list[RequestRecord], open_loop: bool = False) -> PointRecorder:
    parser = next(r.parser for r in reqs if r.parser is not None)
    with histograms_of(core_of(parser)):  # the parsers' core's histograms, whatever the recorder's
        rec = PointRecorder(4, keep_requests=True, open_loop=open_loop, keep_text=True)
        for r in reqs:
            rec.add(r, SLO)
    rec.count_with(WordCounter())
    return rec


@pytest.mark.parametrize("parser_cls", PARSERS, ids=PARSER_IDS)
@pytest.mark.parametrize("open_loop", [False, True], ids=["closed", "open"])
def test_shards_add_up_to_the_point_recorded_whole(parser_cls, open_loop):
    reqs = requests(parser_cls, 60, seed=3, open_loop=open_loop)
    whole = record(reqs, open_loop).tally
    shards = [record(reqs[i::3], open_loop).tally for i in range(3)]
    merged = figures(Tally.total(shards), 12.5, 4.0)
    assert merged == figures(whole, 12.5, 4.0)
    # the cases are really there, so the equality above covers them
    assert merged["counts"]["errors"]["http_status"] > 0
    assert merged["latency"]["e2e_us"]["out_of_range"] > 0
    assert merged["tokens"]["output_method"] == "mixed" and merged["tokens"]["tokenizer"]["usage"] > 0
    assert 0 < merged["tokens"]["osl"]["mismatched"] < merged["tokens"]["osl"]["requests_checked"]
    assert 0 < merged["counts"]["slo_met"] < merged["counts"]["completed"]
    assert merged["tokens"]["multi_token_chunks"] > 0 and "itl_per_token_us" in merged["latency"]
    assert ("e2e_from_schedule_us" in merged["latency"]) is open_loop


def test_figures_are_the_tallys_arithmetic():
    reqs = requests(PARSERS[0], 30, seed=5)
    t = record(reqs).tally
    f = figures(t, None, 2.0)
    window_s = (max(r.times.end_ns for r in reqs) - min(r.times.t0_ns for r in reqs)) / 1e9
    ok = [r for r in reqs if r.ok]
    assert f["window"]["duration_s"] == round(window_s, 6)
    assert f["counts"]["completed"] == len(ok) and f["counts"]["failed"] == len(reqs) - len(ok)
    assert f["throughput"]["request_s"] == round(len(ok) / window_s, 3)
    assert f["throughput"]["goodput_s"] == round(f["counts"]["slo_met"] / window_s, 3)
    assert f["error_rate"] == round((len(reqs) - len(ok)) / len(reqs), 6)
    product = round(f["throughput"]["request_s"] * f["latency"]["e2e_us"]["mean"] / 1e6, 3)
    assert f["little"] == {"throughput_x_latency": product, "mean_inflight_sampled": 2.0,
                           "ratio": round(2.0 / product, 4)}
    cvu = f["tokens"]["chunks_vs_usage"]
    usage_reqs = [r for r in ok if r.tokens.usage_output_tokens is not None]
    assert cvu["usage"] == sum(r.tokens.usage_output_tokens for r in usage_reqs)
    assert cvu["chunks"] == sum(r.tokens.text_chunks for r in usage_reqs)


def test_a_tally_survives_pickling_and_its_own_result_point():
    """Ray sends tallies between processes; `benchc merge` reads them back from results."""
    t = record(requests(PARSERS[-1], 40, seed=7, open_loop=True), open_loop=True).tally
    f = figures(t)
    assert figures(pickle.loads(pickle.dumps(t))) == f
    point = {"id": "c=4", "params": {"concurrency": 4}, **f}
    assert figures(Tally.from_point(point)) == f


def test_merging_new_results_is_exact_and_says_nothing_was_derived():
    shards = []
    for seed in (11, 12):
        t = record(requests(PARSERS[0], 25, seed=seed)).tally
        shards.append({"id": "c=4", "combination": 0, "matrix": {}, "params": {"concurrency": 4},
                       "complete": True, **figures(t, 10.0, 2.0), "client": {"client_limited": False}})
    merged = merge_points(shards)
    whole = Tally.total(Tally.from_point(s) for s in shards)
    assert merged["counts"]["slo_met"] == sum(s["counts"]["slo_met"] for s in shards)
    assert merged["throughput"]["goodput_s"] == figures(whole)["throughput"]["goodput_s"]
    assert merged["throughput"]["steady_output_tok_s"] == 20.0
    assert merged["little"]["mean_inflight_sampled"] == 4.0
    assert merged["latency"]["e2e_us"]["out_of_range"] == sum(s["latency"]["e2e_us"]["out_of_range"]
                                                               for s in shards)
    assert "derived" not in merged
    # the trust checks run on the merged point too (the synthetic shards ignored pinned lengths)
    assert merged["trust"]["trusted"] is False
    assert [d["check"] for d in merged["trust"]["doubts"]] == ["output_length"]


def test_old_results_without_the_slo_count_still_merge_and_say_so():
    a, b = read(SHARD_A), read(SHARD_B)
    assert all("slo_met" not in p["counts"] for p in a["points"])  # written before it was counted
    doc = merge_docs([a, b], ["a", "b"])
    validate_document(doc)
    for p, pa, pb in zip(doc["points"], a["points"], b["points"], strict=True):
        derived = [round(q["throughput"]["goodput_s"] * q["window"]["duration_s"]) for q in (pa, pb)]
        assert p["counts"]["slo_met"] == sum(derived)
        assert p["throughput"]["goodput_s"] == round(sum(derived) / p["window"]["duration_s"], 3)
        assert any(d.startswith("counts.slo_met:") for d in p["derived"])


def test_a_point_says_plainly_when_no_request_reported_its_cached_tokens():
    """vLLM without --enable-prompt-tokens-details sends no prompt_tokens_details at all (0.32,
    checked on a real server: docs/conformance.md): the point's cached tokens then come from
    the server-wide Prometheus counters, or are unknown, and its cache block says which."""
    from benchc.metrics.cache import NOT_PER_REQUEST, CacheCounters, cache_verdict
    from benchc.metrics.record import RequestRecord

    counters = CacheCounters()
    for _ in range(3):
        counters.add(RequestRecord("r", 0, 100, None, cache=CacheUse(shared_tokens=64)))  # nothing reported
    server = {"prefix_cache_queries_delta": 400, "prefix_cache_hits_delta": 128}
    c = cache_verdict(counters.block(), server)
    assert (c["source"], c["cached_tokens"], c["cached_fraction"]) == ("prometheus", 128, 0.32)
    assert c["note"].startswith(NOT_PER_REQUEST) and "the whole server's" in c["note"]
    assert "--enable-prompt-tokens-details" in c["note"]
    c = cache_verdict(counters.block(), {"available": True})
    assert (c["source"], c["cached_tokens"], c["above_declared"]) == ("none", None, False)
    assert c["note"].startswith(NOT_PER_REQUEST) and c["note"].endswith("is not known")
    # a server that reported them (a zero is a report): no note
    counters.add(RequestRecord("r", 0, 100, None,
                               cache=CacheUse(shared_tokens=64, cached_tokens=0, cached_source="usage")))
    assert "note" not in cache_verdict(counters.block(), server)


def test_one_request_served_from_an_old_cache_is_not_hidden_by_the_others():
    """The verdict compared the point's sums: a request that got a prompt it sent in an
    earlier run from the cache passed unnoticed beside requests sharing less than allowed."""
    from benchc.metrics.cache import CACHE_SLACK_TOKENS, CacheCounters, cache_verdict
    from benchc.metrics.record import RequestRecord

    counters = CacheCounters()
    def record(input_tokens: int, shared_tokens: int, cached_tokens: int) -> RequestRecord:
        return RequestRecord("r", 0, input_tokens, None,
                             cache=CacheUse(shared_tokens=shared_tokens, cached_tokens=cached_tokens,
                                            cached_source="usage"))

    fresh, shared = record(40, 0, 32), record(100, 100, 0)
    for r in (fresh, shared):
        counters.add(r)
    block = counters.block()
    assert 32 < counters.allowed_tokens == CACHE_SLACK_TOKENS + 100  # the sums alone look fine
    c = cache_verdict(block)
    assert c["reported"]["requests_above_allowed"] == 1 and c["above_declared"] is True
    assert "1 request(s) got more of theirs from it than this workload shares with them" in c["warning"]
