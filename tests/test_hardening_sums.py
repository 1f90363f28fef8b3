"""Server numbers cannot overflow into the result (issue 44, class 3): a server's count enters
up to MAX_COUNT (2^32 tokens) on both cores, else it is taken as not reported, so a point's
sums (tokens, cached tokens) stay within int64 and a run never refuses its own result; the
Messages API's input + cache read + cache creation no longer overflows the compiled core's
int64 (reported as out of memory); a NaN, an Infinity or a negative figure from /sim/power is
not a reading."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from aiohttp import web

from benchc.client._body_py import MAX_COUNT
from benchc.run.gpus import read_sim_power
from tests.conftest import both_cores
from tests.hostile import small_run
from tests.test_hardening_agent_answers import ToolCaller

BIG = 2**62


def _parsed(module, *objs):
    p = module.StreamParser()
    p.feed(b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in objs), 1000)
    p.close(2000)
    return p


@pytest.mark.parametrize("usage, prompt", [
    ({"input_tokens": BIG, "cache_read_input_tokens": BIG, "cache_creation_input_tokens": BIG,
      "output_tokens": 1}, -1),
    ({"input_tokens": MAX_COUNT, "cache_read_input_tokens": MAX_COUNT, "output_tokens": 1}, 2 * MAX_COUNT),
    ({"input_tokens": 10, "cache_read_input_tokens": MAX_COUNT + 1, "output_tokens": 1}, 10),
])
def test_messages_usage_past_the_bound_is_not_reported_and_never_overflows_on_both_cores(usage, prompt):
    start = {"type": "message_start", "message": {"id": "m", "usage": usage}}
    figures = [(p.usage_prompt, p.usage_cached) for p in
               (_parsed(m, start) for m in both_cores("benchc.client._stream"))]
    assert figures[0] == figures[1] and figures[0][0] == prompt


@pytest.mark.parametrize("tokens, taken", [(MAX_COUNT, MAX_COUNT), (MAX_COUNT + 1, -1), (2**63 - 1, -1),
                                           (10**15 - 1, -1), (-5, -1)])
def test_a_chat_usage_past_the_bound_or_negative_is_not_reported_on_both_cores(tokens, taken):
    chunk = {"choices": [], "usage": {"prompt_tokens": tokens, "completion_tokens": tokens,
                                      "prompt_tokens_details": {"cached_tokens": tokens}}}
    got = [(p.usage_prompt, p.usage_completion, p.usage_cached) for p in
           (_parsed(m, chunk) for m in both_cores("benchc.client._stream"))]
    assert got[0] == got[1] == (taken, taken, taken)


def test_a_run_whose_server_reports_counts_near_int64_writes_its_result(tmp_path):
    """Three answers of 9e18 prompt and output tokens each: their sums passed int64, and the
    run refused its own result at the end (exit 3, the result left in a temporary folder)."""
    def huge(arguments: str) -> bytes:
        chunks = [{"choices": [{"index": 0, "delta": {"content": "hi"}}]},
                  {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                  {"choices": [], "usage": {"prompt_tokens": 9 * 10**18, "completion_tokens": 9 * 10**18,
                                            "prompt_tokens_details": {"cached_tokens": 9 * 10**18}}}]
        return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"

    server = ToolCaller("", chat=huge)
    try:
        point = small_run(tmp_path, server.url, requests=3)
    finally:
        server.close()
    assert point["counts"]["completed"] == 3
    assert point["tokens"]["input"] == 3 * 8 and point["tokens"]["output"] == 3  # benchc's own counts


@pytest.mark.parametrize("power", ["NaN", "Infinity", "-5.0", "1e400"])
def test_a_sim_power_reading_that_is_not_a_finite_non_negative_number_is_no_reading(power):
    async def go():
        async def handler(_):
            gpu = f'{{"index": 0, "name": "g", "server": true, "power_w": {power}, "energy_j": 1.0}}'
            body = f'{{"t_ns": 1, "gpus": [{gpu}]}}'
            return web.Response(text=body, content_type="application/json")

        app = web.Application()
        app.router.add_get("/sim/power", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        root = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        try:
            async with aiohttp.ClientSession() as s:
                return await read_sim_power(s, root)
        finally:
            await runner.cleanup()

    assert asyncio.run(go()) is None


def test_metrics_figures_past_what_a_double_counts_are_dropped_summed_over_label_sets_too():
    from benchc.run.telemetry import parse_prometheus

    # each below 2^63, their sum past it: a point's server figures then held 1.2e19
    text = ('vllm:prefix_cache_queries_total{engine="0"} 6e18\n'
            'vllm:prefix_cache_queries_total{engine="1"} 6e18\n'
            'vllm:prefix_cache_hits_total{engine="0"} 100\nvllm:prefix_cache_hits_total{engine="1"} 28\n')
    out = parse_prometheus(text)
    assert "prefix_cache_queries_total" not in out and out["prefix_cache_hits_total"] == 128
    assert "prefix_cache_queries_total" not in parse_prometheus("vllm:prefix_cache_queries_total 1e17\n")
