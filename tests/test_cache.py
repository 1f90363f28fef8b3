"""Prefix caching end to end, against the simulator with its prefix cache on: what each
request found cached (the simulator's trace) against what the result says, for fresh
prompts, shared prompts, a shared prefix, resets, a server without a reset endpoint, a
server that kept a previous run's prompts, a file that runs out, and server timings -- each
read on every transport of the own reader (the cached tokens come from the stream parser)."""

import json
import os

import pytest

from benchc.cli import main
from benchc.client import _rxloop, http1
from benchc.plan.model import Plan
from benchc.results.document import read
from tests.conftest import REPO, transports, use_transport
from tests.simrun import Sim

SPEC = """\
version: 1
name: cache
target:
  base_url: http://127.0.0.1:9/v1
  model: MiniMaxAI/MiniMax-M2.5
{server}workload:
  dataset:
    random: {{{seed}input_tokens: {inp}, output_tokens: 6, prefix_tokens: {prefix}}}
  prompts: {prompts}
load:
  warmup: {{requests: {warmup}}}
  sweep: {{concurrency: {conc}}}
  requests: {requests}
output: {{path: {path}, requests: true}}
"""
FAST = ("--preset", "minimax-m2.5-tp4", "--param", "step_table=[[1, 1.0]]")


@pytest.fixture(params=transports())
def transport(request, monkeypatch):
    """The own reader's transport the run's measured requests are read on."""
    return use_transport(monkeypatch, request.param)


def spec(tmp_path, name="s", inp=33, prefix=0, prompts="fresh", warmup=4, conc="[1, 2, 4, 8]",
         requests=6, server="", seed=""):
    f = tmp_path / f"{name}.yaml"
    f.write_text(SPEC.format(inp=inp, prefix=prefix, prompts=prompts, warmup=warmup, conc=conc,
                             requests=requests, server=server, path=tmp_path / f"{name}.json", seed=seed))
    return str(f)


def run(tmp_path, sim, name="s", extra=(), **kw):
    code = main(["run", spec(tmp_path, name, **kw), "--base-url", sim.url, "--quiet", *extra])
    doc = read(str(tmp_path / f"{name}.json"))
    reqs = [json.loads(x) for x in (tmp_path / f"{name}.requests.jsonl").read_text().splitlines()]
    served = http1.ASYNCIO if _rxloop.MODULE is None else http1.RX_LOOP  # as the transport fixture set
    assert {r["path"] for r in reqs} == {served}
    return code, doc, reqs


def by_point(doc, reqs, trace):
    """Per point id: the trace records of its requests, in arrival order."""
    return {p["id"]: sorted((trace[r["id"]] for r in reqs if r["point"] == p["id"]),
                            key=lambda t: t["arrival_ns"]) for p in doc["points"]}


@pytest.mark.slow  # runs against the simulator
@pytest.mark.usefixtures("transport")
def test_the_issue_sweep_with_fresh_prompts_finds_nothing_cached(tmp_path):
    """warmup 4, concurrency 1, 2, 4, 8: every measured request's cached tokens are 0 (no
    shared prefix), as the simulator's own trace says, and the result says the same."""
    sim = Sim(tmp_path, *FAST)
    try:
        code, doc, reqs = run(tmp_path, sim)
    finally:
        sim.close()
    assert code == 0
    trace = sim.records()
    assert len(trace) == 4 + 4 * 6
    assert all(t["cached_tokens"] == 0 for t in trace.values())  # the warmup's too
    for r in reqs:
        assert r["cached_tokens"] == trace[r["id"]]["cached_tokens"] == 0 and not r["reused_prompt"]
    for p in doc["points"]:
        c = p["cache"]
        assert (c["source"], c["cached_tokens"], c["cached_fraction"], c["above_declared"]) == \
            ("usage", 0, 0.0, False)
        assert c["prompts"] == "fresh" and c["reused_prompt_requests"] == 0
        assert c["prompt_tokens"] == 6 * 33


@pytest.mark.slow  # runs against the simulator
@pytest.mark.usefixtures("transport")
def test_shared_prompts_are_served_from_cache_from_the_second_point_on_and_the_result_says_so(tmp_path):
    sim = Sim(tmp_path, *FAST)
    try:
        code, doc, reqs = run(tmp_path, sim, prompts="shared", conc="[1, 2]")
    finally:
        sim.close()
    assert code == 0
    points = by_point(doc, reqs, sim.records())
    # every block of a 33-token prompt but the one holding its last token: 32 tokens
    assert [t["cached_tokens"] for t in points["c=2"]] == [32] * 6
    c = doc["points"][1]["cache"]
    assert c["prompts"] == "shared" and c["reused_prompt_requests"] == 6
    assert (c["cached_tokens"], c["cached_fraction"]) == (6 * 32, round(32 / 33, 4))
    assert c["above_declared"] is False and "warning" not in c  # cache-warm was asked for
    # the first point sent the warmup's 4 prompts again (cached) and 2 new ones
    assert sorted(t["cached_tokens"] for t in points["c=1"]) == [0, 0, 32, 32, 32, 32]
    assert doc["points"][0]["cache"]["reused_prompt_requests"] == 4


@pytest.mark.slow  # runs against the simulator
@pytest.mark.usefixtures("transport")
def test_a_512_token_shared_prefix_cached_fraction_matches_the_trace(tmp_path):
    sim = Sim(tmp_path, *FAST)
    try:
        code, doc, reqs = run(tmp_path, sim, inp=64, prefix=512, conc="[1, 2, 4]")
    finally:
        sim.close()
    assert code == 0
    for p in doc["points"]:
        recs = by_point(doc, reqs, sim.records())[p["id"]]
        cached = sum(t["cached_tokens"] for t in recs)
        prompt = sum(t["input_tokens"] for t in recs)
        assert all(t["cached_tokens"] == 512 for t in recs)  # the prefix, no more
        c = p["cache"]
        assert (c["cached_tokens"], c["prompt_tokens"]) == (cached, prompt)
        assert c["declared_shared_tokens"] == 6 * 512
        assert c["cached_fraction"] == round(cached / prompt, 4) and c["above_declared"] is False


@pytest.mark.slow  # runs against the simulator
@pytest.mark.usefixtures("transport")
def test_reset_between_points_makes_the_shared_prefix_uncached_again(tmp_path):
    sim = Sim(tmp_path, *FAST)
    try:
        server = "server: {attach: true, reset_cache: between_points}\n"
        code, doc, reqs = run(tmp_path, sim, inp=64, prefix=512, conc="[1, 2]", server=server)
    finally:
        sim.close()
    assert code == 0
    points = by_point(doc, reqs, sim.records())
    for p in doc["points"]:
        assert p["cache"]["reset"] == {"done": True, "endpoint": "/reset_prefix_cache"}
        # the point's first request computes the prefix again; the others find it
        assert [t["cached_tokens"] for t in points[p["id"]]] == [0] + [512] * 5
        assert p["cache"]["cached_tokens"] == 5 * 512


@pytest.mark.slow  # runs against the simulator
@pytest.mark.usefixtures("transport")
def test_a_server_without_a_reset_endpoint_is_said_so_and_strict_fails(tmp_path, capsys):
    sim = Sim(tmp_path, *FAST, "--param", "reset_endpoints=false")
    try:
        server = "server: {attach: true, reset_cache: between_points}\n"
        code, doc, _ = run(tmp_path, sim, inp=16, conc="[1, 2]", requests=2, server=server,
                           extra=["--strict"])
    finally:
        sim.close()
    err = capsys.readouterr().err
    assert code == 6  # --strict: the points did not start with an empty cache
    assert err.count("did not empty its prefix cache") >= 2  # the warning, and the --strict reason
    assert "POST /reset_prefix_cache (vLLM, when run with VLLM_SERVER_DEV_MODE=1) answered 404" in err
    assert "POST /flush_cache (SGLang) answered 404" in err
    for p in doc["points"]:
        assert p["cache"]["reset"]["done"] is False and "404" in p["cache"]["reset"]["message"]


@pytest.mark.slow  # runs against the simulator
@pytest.mark.usefixtures("transport")
def test_a_server_that_kept_the_previous_runs_prompts_is_flagged(tmp_path, capsys):
    """The same plan twice, its seed pinned (a spec that pins none draws one per run), against a
    server that stayed up: the second run's prompts are all in its cache, more than the spec
    shares (nothing): a warning, a mark, and --strict fails."""
    sim = Sim(tmp_path, *FAST)
    pinned = dict(warmup=0, conc="[2]", requests=4, seed="seed: 7, ")
    try:
        first, _, _ = run(tmp_path, sim, "first", **pinned)
        second, doc, reqs = run(tmp_path, sim, "second", extra=["--strict"], **pinned)
    finally:
        sim.close()
    assert (first, second) == (0, 6)
    c = doc["points"][0]["cache"]
    trace = sim.records()
    assert [trace[r["id"]]["cached_tokens"] for r in reqs] == [32] * 4
    assert c["above_declared"] is True and c["cached_tokens"] == 4 * 32
    assert c["allowed_cached_tokens"] == 4 * 8  # the slack of token-granular caches, per request
    assert "more than this workload shares" in c["warning"]
    assert "more than this workload shares" in capsys.readouterr().err


@pytest.mark.slow  # runs against the simulator
@pytest.mark.usefixtures("transport")
def test_without_cached_tokens_in_usage_the_prometheus_counters_say_it(tmp_path):
    sim = Sim(tmp_path, *FAST, "--param", "usage_cached_tokens=false")
    try:
        code, doc, reqs = run(tmp_path, sim, inp=64, prefix=512, conc="[2]")
    finally:
        sim.close()
    assert code == 0
    recs = by_point(doc, reqs, sim.records())["c=2"]
    c = doc["points"][0]["cache"]
    assert c["reported"]["requests"] == 0 and c["source"] == "prometheus"
    assert "reported no cached prompt tokens per request" in c["note"]
    assert c["cached_tokens"] == sum(t["cached_tokens"] for t in recs) == 6 * 512
    assert c["cached_fraction"] == round(6 * 512 / sum(t["input_tokens"] for t in recs), 4)
    # vLLM's phase histograms, differenced over the point: the server's view of those requests
    phases = doc["points"][0]["server_timings_prometheus"]
    assert phases["requests"] == 6
    for phase, start, end in (("queue", "arrival_ns", "admitted_ns"),
                              ("prefill", "admitted_ns", "first_token_ns"),
                              ("decode", "first_token_ns", "end_ns"),
                              ("ttft", "arrival_ns", "first_token_ns")):
        mean_ms = sum(t[end] - t[start] for t in recs) / len(recs) / 1e6
        assert abs(phases[f"{phase}_ms_mean"] - mean_ms) < 0.002, phase
    ttft_mean_us = doc["points"][0]["latency"]["ttft_us"]["mean"]
    assert phases["client_ttft_ms_mean"] == round(ttft_mean_us / 1e3, 3)


@pytest.mark.slow  # runs against the simulator
@pytest.mark.usefixtures("transport")
def test_a_file_with_fewer_items_than_requests_counts_the_reused_prompts(tmp_path):
    data = tmp_path / "five.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"question number {i} about rivers"}) + "\n"
                            for i in range(5)))
    f = tmp_path / "f.yaml"
    f.write_text(f"""\
version: 1
name: file
target: {{sim: {{preset: minimax-m2.5-tp4, step_table: [[1, 1.0]]}}, model: MiniMaxAI/MiniMax-M2.5}}
workload:
  dataset: {{jsonl: {{path: five.jsonl}}}}
  sampling: {{max_tokens: 4}}
load:
  warmup: {{requests: 2}}
  sweep: {{concurrency: [1, 1]}}
  requests: 4
output: {{path: {tmp_path / "f.json"}, requests: true}}
""")
    assert main(["run", str(f), "--quiet"]) == 0
    doc = read(str(tmp_path / "f.json"))
    # warmup: items 0, 1; first point: 2, 3, 4, then 0 again; second point: 1, 2, 3, 4 again
    assert [p["cache"]["reused_prompt_requests"] for p in doc["points"]] == [1, 4]
    assert [p["cache"]["unknown_sharing_requests"] for p in doc["points"]] == [3, 0]
    assert not any(p["cache"]["above_declared"] for p in doc["points"])


@pytest.mark.slow  # runs against the simulator
@pytest.mark.usefixtures("transport")
def test_server_timings_stand_beside_the_clients(tmp_path):
    sim = Sim(tmp_path, *FAST, "--param", "timings=true")
    try:
        code, doc, reqs = run(tmp_path, sim, warmup=0, conc="[2]", requests=6)
    finally:
        sim.close()
    assert code == 0
    trace = sim.records()
    st = doc["points"][0]["server_timings"]
    assert st["requests"] == 6 and st["ttft_us"]["count"] == 6
    prompt_us = [trace[r["id"]]["timings"]["prompt_ms"] * 1000 for r in reqs]
    decode_us = [trace[r["id"]]["timings"]["predicted_ms"] * 1000 for r in reqs]
    # 3 significant digits: the histogram's max is the largest value to within 0.1%
    assert abs(st["server_prompt_us"]["max"] - max(prompt_us)) <= max(prompt_us) * 1e-3 + 1
    assert abs(st["server_decode_us"]["max"] - max(decode_us)) <= max(decode_us) * 1e-3 + 1
    # beside them, the client's figures of the same requests: here all of the point's
    p = doc["points"][0]
    assert st["ttft_us"]["hdr"] == p["latency"]["ttft_us"]["hdr"]
    assert st["ttft_below_server_prompt"] + st["ttft_minus_server_prompt_us"]["count"] == 6


def test_llama_server_with_a_reset_is_refused_at_validation(tmp_path, capsys):
    f = tmp_path / "l.yaml"
    f.write_text("""\
version: 1
name: llama
target: {base_url: "http://127.0.0.1:{free}/v1", model: m}
server:
  command: "llama-server -m /models/q.gguf --port {free}"
  reset_cache: between_points
workload: {dataset: {random: {input_tokens: 8, output_tokens: 4}}}
load: {sweep: {concurrency: [1]}, requests: 1}
""")
    assert main(["validate", str(f)]) == 2
    err = capsys.readouterr().err
    assert "server.reset_cache: between_points: llama.cpp's llama-server has no endpoint" in err


def test_a_v1_plan_in_an_old_result_still_reads():
    doc = read(os.path.join(REPO, "tests", "data", "result-v1-minimax.json"))
    plan = Plan.from_dict(doc["plan"])
    assert plan.plan_version == 1
    assert all(c.workload.prompts == "shared" for c in plan.combinations)  # what v1 did


def test_a_reset_the_server_refused_for_running_requests_is_not_done(monkeypatch):
    """vLLM 0.32 answers POST /reset_prefix_cache with 200 {"success": false}, emptying nothing,
    while requests hold blocks (another client's, on a shared server: found on a real one). The
    reset asks again a while, then says it was not done; once they end, it is."""
    import asyncio

    import aiohttp

    from benchc.run import cache
    from benchc.sim.model import make_config
    from benchc.sim.server import SimServer
    from tests.conftest import wait_for

    monkeypatch.setattr(cache, "RETRIES", 2)
    monkeypatch.setattr(cache, "RETRY_S", 0.01)

    async def main():
        server = SimServer(make_config(base_ms=5.0))
        port = await server.start()
        root = f"http://127.0.0.1:{port}"
        resetter = cache.CacheReset("between_points")
        try:
            async with aiohttp.ClientSession() as s:
                body = {"model": server.cfg.model, "messages": [{"role": "user", "content": "z " * 40}],
                        "max_tokens": 10_000, "stream": True}
                async with s.post(root + "/v1/chat/completions", json=body) as r:
                    await r.content.readline()  # running: its blocks are held
                    busy = await resetter.reset(s, root, {})
                await asyncio.to_thread(wait_for, lambda: not server.engine.running, "the request to retire")
                return busy, await resetter.reset(s, root, {}), server.engine.cache_resets_total
        finally:
            await server.stop()

    busy, done, resets = asyncio.run(main())
    assert busy["done"] is False and busy["endpoint"] == "/reset_prefix_cache" and busy["say"] is True
    assert 'answered 200 {"success": false} 3 times' in busy["message"]
    assert "another client's requests were running" in busy["message"]
    assert done == {"done": True, "endpoint": "/reset_prefix_cache"} and resets == 1
    # the point that was not reset says so, and --strict fails on it
    from benchc.metrics.cache import cache_doubts

    kept = {k: v for k, v in busy.items() if k != "say"}  # what the point keeps (runner.py pops "say")
    assert cache_doubts({"reset": kept}) == [busy["message"]]
