"""The simulator: vLLM's wire shapes, the batching model's timing against the trace,
queueing, and every fault as seen on the wire by a real aiohttp client on loopback."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import aiohttp
import pytest

from benchc.sim.model import make_config
from benchc.sim.server import SimServer

MODEL = "MiniMaxAI/MiniMax-M2.5"


def run(coro):
    return asyncio.run(coro)


async def with_sim(cfg, body):
    server = SimServer(cfg)
    port = await server.start()
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as session:
            return await body(session, server)
    finally:
        await server.stop()


def events_of(raw: bytes) -> list[str]:
    return [e[len("data: "):] for e in raw.decode().split("\n\n") if e]


def chat_body(max_tokens=4, **kw):
    return {"model": MODEL, "messages": [{"role": "user", "content": "one two three"}],
            "max_tokens": max_tokens, **kw}


def test_streaming_chat_shape_like_vllm():
    async def body(s, server):
        async with s.post("/v1/chat/completions", json=chat_body(
                4, stream=True, stream_options={"include_usage": True}),
                headers={"x-request-id": "req-1"}) as r:
            assert r.status == 200 and r.headers["x-request-id"] == "req-1"
            assert r.headers["Content-Type"].startswith("text/event-stream")
            return await r.read()

    evs = events_of(run(with_sim(make_config(), body)))
    assert evs[-1] == "[DONE]"
    chunks = [json.loads(e) for e in evs[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == "chatcmpl-req-1" and c["model"] == MODEL
               for c in chunks)
    texts = [c["choices"][0]["delta"]["content"] for c in chunks[1:5]]
    assert len(texts) == 4 and all(t.startswith(" ") and len(t.split()) == 1 for t in texts)
    assert [c["choices"][0]["finish_reason"] for c in chunks[1:5]] == [None, None, None, "length"]
    assert chunks[5]["choices"] == [] and chunks[5]["usage"] == {
        "prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7,
        # as vLLM 0.32 with --enable-prompt-tokens-details (3 tokens: no whole block to cache)
        "prompt_tokens_details": {"cached_tokens": 0, "created_cache_tokens": 0}}


def test_continuous_usage_and_completions_stream():
    async def body(s, server):
        async with s.post("/v1/completions", json={
                "model": MODEL, "prompt": "a b", "max_tokens": 3, "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True}}) as r:
            return await r.read()

    chunks = [json.loads(e) for e in events_of(run(with_sim(make_config(), body)))[:-1]]
    assert [c["object"] for c in chunks] == ["text_completion"] * 4
    assert [c["usage"]["completion_tokens"] for c in chunks] == [1, 2, 3, 3]
    assert [len(c["choices"][0]["text"].split()) for c in chunks[:3]] == [1, 1, 1]


def test_non_streaming_shapes_and_other_endpoints():
    async def body(s, server):
        async with s.post("/v1/chat/completions", json=chat_body(5)) as r:
            chat = await r.json()
        async with s.post("/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 2}) as r:
            comp = await r.json()
        async with s.get("/v1/models") as r:
            models = await r.json()
        async with s.get("/health") as r:
            health = r.status
        async with s.get("/metrics") as r:
            metrics = await r.text()
        async with s.post("/tokenize", json={"model": MODEL, "prompt": "the of nonsenseword"}) as r:
            tok = await r.json()
        async with s.post("/v1/chat/completions", json={**chat_body(), "model": "other"}) as r:
            wrong = (r.status, await r.json())
        return chat, comp, models, health, metrics, tok, wrong

    chat, comp, models, health, metrics, tok, wrong = run(with_sim(make_config(), body))
    assert chat["object"] == "chat.completion" and chat["choices"][0]["message"]["role"] == "assistant"
    assert len(chat["choices"][0]["message"]["content"].split()) == 5
    assert chat["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8,
                             "prompt_tokens_details": {"cached_tokens": 0, "created_cache_tokens": 0}}
    assert chat["choices"][0]["finish_reason"] == "length"
    assert comp["object"] == "text_completion" and comp["usage"]["completion_tokens"] == 2
    assert models["data"][0]["id"] == MODEL and health == 200
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:generation_tokens_total",
                 "vllm:prompt_tokens_total", "vllm:kv_cache_usage_perc"):
        assert name + "{" in metrics
    assert 'vllm:generation_tokens_total{model_name="MiniMaxAI/MiniMax-M2.5"} 7' in metrics
    assert tok["count"] == 3 and tok["tokens"][:2] == [0, 1]
    assert wrong[0] == 404 and wrong[1]["object"] == "error" and wrong[1]["code"] == 404


def test_cached_and_created_cache_tokens_as_vllm_0_32_reports_them():
    # What vLLM 0.32 (CPU, block 32) answered to chat prompts of 64, 65 and 96 tokens sent
    # twice (tests/test_real_vllm.py, docs/conformance.md): whole blocks only, never the last
    # token; chat's details also carry created_cache_tokens, completions' do not.
    async def body(s, server):
        out = []
        for n in (64, 65, 96):
            for _ in range(2):
                async with s.post("/v1/chat/completions", json={
                        "model": MODEL, "messages": [{"role": "user", "content": f"w{n} " + "x " * (n - 1)}],
                        "max_tokens": 1, "stream": True, "stream_options": {"include_usage": True}}) as r:
                    out.append(json.loads(events_of(await r.read())[-2])["usage"]["prompt_tokens_details"])
        completion = {"model": MODEL, "prompt": "c " * 64, "max_tokens": 1}
        async with s.post("/v1/completions", json=completion) as r:
            out.append((await r.json())["usage"]["prompt_tokens_details"])
        return out

    details = run(with_sim(make_config(block_size=32), body))
    pairs = [(d["cached_tokens"], d["created_cache_tokens"]) for d in details[:6]]
    assert pairs == [(0, 64), (32, 32), (0, 64), (64, 0), (0, 96), (64, 32)]
    assert details[6] == {"cached_tokens": 0}


def test_without_prompt_tokens_details_the_stream_has_none_as_vllm_without_the_flag():
    # vLLM 0.32 run without --enable-prompt-tokens-details: no prompt_tokens_details key at all
    # in the streamed usage (the prefix cache still works: its Prometheus counters count it)
    async def body(s, server):
        usages = []
        for _ in range(2):
            async with s.post("/v1/chat/completions", json=chat_body(
                    2, messages=[{"role": "user", "content": "y " * 40}], stream=True,
                    stream_options={"include_usage": True})) as r:
                usages.append(json.loads(events_of(await r.read())[-2])["usage"])
        async with s.get("/metrics") as r:
            return usages, await r.text()

    usages, metrics = run(with_sim(make_config(usage_cached_tokens=False), body))
    assert usages == [{"prompt_tokens": 40, "completion_tokens": 2, "total_tokens": 42}] * 2
    assert 'vllm:prefix_cache_hits_total{model_name="MiniMaxAI/MiniMax-M2.5"} 32' in metrics


def test_vllm_metrics_have_their_created_twins_and_none_is_read_as_a_figure():
    from benchc.run.telemetry import parse_prometheus

    async def body(s, server):
        async with s.post("/v1/chat/completions", json=chat_body(4)) as r:
            assert r.status == 200
        async with s.get("/metrics") as r:
            return await r.text()

    text = run(with_sim(make_config(), body))
    types = dict(line.split()[2:4] for line in text.splitlines() if line.startswith("# TYPE "))
    for name, kind in types.items():
        if kind in ("counter", "histogram") and name.startswith("vllm:"):
            twin = name.removesuffix("_total") + "_created" if kind == "counter" else name + "_created"
            assert types.get(twin) == "gauge", name
    assert "vllm:generation_tokens_created" in types and "vllm:time_to_first_token_seconds_created" in types
    without = "\n".join(line for line in text.splitlines() if "_created" not in line)
    parsed = parse_prometheus(text)
    assert parsed == parse_prometheus(without) and parsed["generation_tokens_total"] == 4


def test_reset_prefix_cache_refuses_while_a_request_holds_blocks_as_vllm_0_32():
    # vLLM 0.32 answered 200 {"success": false} and emptied nothing while another client's
    # requests ran (its log: "Failed to reset prefix cache because some blocks are not freed")
    from tests.conftest import wait_for

    async def body(s, server):
        async with s.post("/v1/chat/completions", json=chat_body(
                10_000, messages=[{"role": "user", "content": "z " * 40}], stream=True)) as r:
            await r.content.readline()  # its first chunk: it is running
            async with s.post("/reset_prefix_cache") as busy:
                refused = (busy.status, await busy.json(), len(server.engine.prefix))
        await asyncio.to_thread(wait_for, lambda: not server.engine.running, "the request to retire")
        async with s.post("/reset_prefix_cache") as done:
            emptied = (done.status, await done.json(), len(server.engine.prefix))
        return refused, emptied, server.engine.cache_resets_total

    refused, emptied, resets = run(with_sim(make_config(base_ms=5.0), body))
    assert refused[:2] == (200, {"success": False}) and refused[2] > 0  # its blocks stay cached
    assert emptied == (200, {"success": True}, 0) and resets == 1


def test_min_tokens_ignore_eos_and_stop():
    cfg = make_config(eos_prob=0.5, seed=1)

    async def body(s, server):
        lengths = []
        for extra in ({}, {"min_tokens": 20}, {"ignore_eos": True}):
            async with s.post("/v1/completions", json={"model": MODEL, "prompt": "p", "max_tokens": 30,
                                                       **extra}) as r:
                lengths.append((await r.json())["usage"]["completion_tokens"])
        return lengths

    free, min20, ignore = run(with_sim(cfg, body))
    assert free < 20  # eos at p=0.5 per token: 20 tokens without one is a 1e-6 chance
    assert 20 <= min20 <= 30 and ignore == 30


def test_max_model_len_rejects_like_vllm():
    async def body(s, server):
        req = {"model": MODEL, "prompt": "a " * 10, "max_tokens": 10}
        async with s.post("/v1/completions", json=req) as r:
            return r.status, await r.json()

    status, err = run(with_sim(make_config(max_model_len=16), body))
    assert status == 400 and err["type"] == "BadRequestError"
    assert err["message"].startswith("This model's maximum context length is 16 tokens. However, you "
                                     "requested 20 tokens (10 in the messages, 10 in the completion).")


async def _concurrent(s, c, max_tokens, prompt="x"):
    async def one():
        async with s.post("/v1/completions", json={"model": MODEL, "prompt": prompt,
                                                   "max_tokens": max_tokens, "stream": True}) as r:
            await r.read()
    await asyncio.gather(*(one() for _ in range(c)))


def decode_rate(trace) -> float:
    """Aggregate tok/s from the trace: the sum of each request's decode rate while all overlap."""
    total = 0.0
    for tr in trace:
        ts = [t for t, _ in tr["chunks"]]
        toks = sum(n for _, n in tr["chunks"][1:])
        total += toks / ((ts[-1] - ts[0]) / 1e9)
    return total


@pytest.mark.slow  # the preset's table, point by point
@pytest.mark.parametrize("c,expected", [(1, 84.4), (2, 142.6), (4, 254.2), (8, 353.2)])
def test_minimax_preset_matches_the_deployment_log(c, expected):
    async def body(s, server):
        await _concurrent(s, c, 48)
        return server.trace

    trace = run(with_sim(make_config("minimax-m2.5-tp4"), body))
    assert len(trace) == c
    assert decode_rate(trace) == pytest.approx(expected, rel=0.03)


def test_queueing_beyond_max_num_seqs():
    async def body(s, server):
        await _concurrent(s, 4, 10)
        return server.trace

    trace = sorted(run(with_sim(make_config("minimax-m2.5-tp4", max_num_seqs=2), body)),
                   key=lambda t: t["admitted_ns"])
    waits = [(t["admitted_ns"] - t["arrival_ns"]) / 1e6 for t in trace]
    first_done = min(t["end_ns"] for t in trace[:2])
    assert max(waits[:2]) < 50
    # the last two were admitted only once a slot freed: after the first two had finished
    assert all(t["admitted_ns"] >= first_done for t in trace[2:])
    assert min(waits[2:]) > 9 * 14.0 * 0.9  # ~10 steps of a batch of two


def test_step_table_interpolates_and_extrapolates():
    cfg = make_config("minimax-m2.5-tp4")
    assert cfg.step_ms(3) == pytest.approx((14.03 + 15.74) / 2)
    assert cfg.step_ms(512) > cfg.step_ms(256) > cfg.step_ms(128)
    assert make_config("instant").step_ms(256) == 0.0
    with pytest.raises(ValueError, match="unknown simulator preset"):
        make_config("nope")
    with pytest.raises(ValueError, match="unknown simulator parameter"):
        make_config("instant", warp=9)


# --------------------------------------------------------------------------- faults


def fault_cfg(fault):
    return make_config("minimax-m2.5-tp4", faults=[fault], step_table=[(1, 2.0)], seed=3)


@pytest.mark.parametrize("code,kind", [(429, "RateLimitError"), (500, "InternalServerError"),
                                       (503, "ServiceUnavailableError")])
def test_http_error_faults(code, kind):
    async def body(s, server):
        async with s.post("/v1/chat/completions", json=chat_body(stream=True)) as r:
            return r.status, await r.json()

    status, err = run(with_sim(fault_cfg(f"http_{code}:1"), body))
    assert status == code and err["code"] == code and err["type"] == kind and err["object"] == "error"


def test_reset_fault_breaks_the_stream():
    async def body(s, server):
        got = b""
        with pytest.raises((aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError,
                            aiohttp.ClientOSError)):
            async with s.post("/v1/chat/completions", json=chat_body(20, stream=True)) as r:
                async for chunk in r.content.iter_any():
                    got += chunk
        async with s.get("/metrics") as r:
            return got, server.trace, await r.text()

    got, trace, metrics = run(with_sim(fault_cfg("reset:1"), body))
    assert b'"role":"assistant"' in got and b"[DONE]" not in got
    assert trace[0]["reason"] == "reset" and trace[0]["fault"] == "reset"
    # a reset is no success, as on vLLM (it was counted as one); its prompt was processed
    assert 'vllm:request_success_total{model_name="MiniMaxAI/MiniMax-M2.5"} 0' in metrics
    assert 'vllm:prompt_tokens_total{model_name="MiniMaxAI/MiniMax-M2.5"} 3' in metrics


def test_stall_fault_leaves_a_gap():
    async def body(s, server):
        arrivals = []
        async with s.post("/v1/chat/completions", json=chat_body(10, stream=True)) as r:
            async for _ in r.content.iter_any():
                arrivals.append(time.perf_counter())
        return arrivals, server.trace

    arrivals, trace = run(with_sim(fault_cfg("stall:1:300ms"), body))
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
    assert max(gaps) >= 0.29
    ts = [t for t, _ in trace[0]["chunks"]]
    assert max(b - a for a, b in zip(ts, ts[1:], strict=False)) >= 0.29e9


def test_malformed_and_no_done_faults():
    async def body(s, server):
        async with s.post("/v1/chat/completions", json=chat_body(6, stream=True)) as r:
            return await r.read()

    evs = events_of(run(with_sim(fault_cfg("malformed:1"), body)))
    bad = [e for e in evs if e != "[DONE]" and not _is_json(e)]
    assert len(bad) == 1 and evs[-1] == "[DONE]"
    evs = events_of(run(with_sim(fault_cfg("no_done:1"), body)))
    assert "[DONE]" not in evs and json.loads(evs[-1])["choices"][0]["finish_reason"] == "length"


def _is_json(s):
    try:
        json.loads(s)
        return True
    except json.JSONDecodeError:
        return False


def test_slow_headers_and_refused_connections():
    async def body(s, server):
        t0 = time.perf_counter()
        async with s.post("/v1/chat/completions", json=chat_body(2, stream=True)) as r:
            headers_after = time.perf_counter() - t0
            await r.read()
        return headers_after

    assert run(with_sim(fault_cfg("slow_headers:1:300ms"), body)) >= 0.29

    async def refused():
        server = SimServer(make_config("instant", faults=["refuse_for:400ms"]))
        port = await server.start()
        try:
            async with aiohttp.ClientSession() as s:
                with pytest.raises(aiohttp.ClientConnectorError):
                    await s.get(f"http://127.0.0.1:{port}/health")
                await asyncio.sleep(0.6)
                async with s.get(f"http://127.0.0.1:{port}/health") as r:
                    return r.status
        finally:
            await server.stop()

    assert run(refused()) == 200


def test_fault_rates_are_deterministic_by_seed():
    from benchc.sim.faults import FaultPicker, parse_faults

    faults, _ = parse_faults(["http_503:0.3", "reset:0.2"])
    pa, pb = FaultPicker(faults, 5), FaultPicker(faults, 5)
    a = [f and f.kind for f in (pa.pick() for _ in range(200))]
    b = [f and f.kind for f in (pb.pick() for _ in range(200))]
    assert a == b and 40 < a.count("http_503") < 80
    with pytest.raises(ValueError, match="write stall:0.1:500ms"):
        parse_faults(["stall:0.1"])


def test_standalone_sim_subprocess_traces_and_stops_on_sigterm(tmp_path):
    trace = tmp_path / "trace.jsonl"
    p = subprocess.Popen([sys.executable, "-m", "benchc", "sim", "--preset", "instant", "--port", "0",
                          "--trace", str(trace)], stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert line.startswith("benchc sim: listening on http://127.0.0.1:")
        base = line.split()[4]

        async def go():
            async with aiohttp.ClientSession() as s:
                async with s.post(f"{base}/completions", json={"model": "benchc-sim", "prompt": "a",
                                                               "max_tokens": 3}) as r:
                    return await r.json()

        assert run(go())["usage"]["completion_tokens"] == 3
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=10) == 0
        p.stdout.close()
    rec = json.loads(trace.read_text().splitlines()[0])
    assert rec["output_tokens"] == 3 and rec["reason"] == "length"
    assert os.path.getsize(trace) > 0


def test_close_after_stream_behaves_like_llama_cpp_on_the_connection():
    """Keep-Alive is promised, then the connection is closed after the stream, after the
    seeded delay; a request sent on it meanwhile is never read (the keep-alive race)."""
    import random

    cfg = make_config(close_after_stream=True, close_delay_ms=400, seed=5)
    delay_ms = random.Random(cfg.seed ^ 0xC105E).uniform(0, cfg.close_delay_ms)
    assert delay_ms > 100  # the seed gives a delay long enough to send into it (no luck involved)
    body = json.dumps({**chat_body(3), "stream": True}).encode()
    req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n%s" % (len(body), body))

    async def main():
        server = SimServer(cfg)
        port = await server.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(req)
            head = await reader.readuntil(b"\r\n\r\n")
            stream = await reader.readuntil(b"0\r\n\r\n")  # the chunked body's end
            writer.write(req)  # the next request, on the connection the server is closing
            try:
                after = await reader.read()  # until the close: nothing answered it
            except ConnectionResetError:
                after = b"reset"
            writer.close()
            return head, stream, after, len(server.trace)
        finally:
            await server.stop()

    head, stream, after, traced = run(main())
    assert b"Keep-Alive: timeout=5, max=100\r\n" in head and b"Connection: close" not in head
    assert b"data: [DONE]" in stream
    assert after in (b"", b"reset")  # a reset: the kernel closes a socket with unread bytes so
    assert traced == 1  # the second request never reached the engine


def test_metrics_under_each_servers_names():
    async def body(s, server):
        async with s.get("/metrics") as r:
            return await r.text()

    names = {"sglang": "sglang:generation_tokens_total{", "llamacpp": "llamacpp:tokens_predicted_total ",
             "tgi": "tgi_request_generated_tokens_sum ", "vllm": "vllm:generation_tokens_total{"}
    for kind, line in names.items():
        assert line in run(with_sim(make_config(metrics_names=kind), body)), kind
    with pytest.raises(ValueError, match="metrics_names must be one of"):
        make_config(metrics_names="triton")
