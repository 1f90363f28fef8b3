"""Conformance against a real vLLM (0.32, CPU build, start.sh's tiny random-weight Llama): what
benchc measures and reads from the engine most users serve with. Deselected unless --real:

    BENCHC_VLLM_URL=http://127.0.0.1:8020/v1 python -m pytest -q --real -m real

(without BENCHC_VLLM_URL the session starts one with ../shared/tools/vllmserver/start.sh; see
tests/vllm_server.py and docs/conformance.md). Every request is small and pins its length
(random weights never stop on their own): the server is slow on 2 cores and may be shared.
What the simulator was taught from these findings is covered by fast tests of its own
(tests/test_sim.py, tests/test_cache.py, tests/test_telemetry.py).

The server may serve other clients while these run: a test reads per-request figures (each
request's own usage, on prompts no other client sends), and only lower bounds from the
server-wide Prometheus counters.
"""

from __future__ import annotations

import json
import os
import random
import uuid
from types import SimpleNamespace

import pytest

from benchc.cli import main
from benchc.results.document import read
from benchc.run.telemetry import SERVER_KINDS, parse_prometheus
from benchc.tokenizer.chat_template import load_chat_template
from benchc.tokenizer.tokenizer import load
from tests.vllm_server import launch_command

pytestmark = pytest.mark.real

SPEC = """\
version: 1
name: real-{name}
target:
  base_url: {url}
  model: {model}
  api: {api}
  tokenizer: {tokenizer}
{body}
output:
  path: {out}
  requests: true
"""


def run(tmp_path, vllm, name: str, body: str, api: str = "chat", args: tuple = ()) -> tuple[dict, list[dict]]:
    """`benchc run` of a spec against the server; its result and per-request records. SEED in
    `body` becomes a seed of its own: prompts no earlier run sent to this long-lived server
    (benchc's prompts are a function of the seed, the same on every run of one spec)."""
    body = body.replace("SEED", str(random.randrange(2**31)))
    out = tmp_path / f"{name}.json"
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(SPEC.format(name=name, url=vllm.base_url, model=vllm.model, api=api,
                                tokenizer=vllm.tokenizer, body=body, out=out))
    code = main(["run", str(spec), "--quiet", *args])
    doc = read(str(out))
    assert code == 0, (code, doc.get("errors"))
    records = [json.loads(x) for x in (tmp_path / f"{name}.requests.jsonl").read_text().splitlines()]
    return doc, records


def blocks(tokens: int, block: int) -> int:
    """The tokens of `tokens`' whole blocks."""
    return tokens // block * block


def test_warmup_and_a_fresh_sweep_find_nothing_cached_and_the_lengths_asked(tmp_path, vllm):
    doc, records = run(tmp_path, vllm, "fresh", """\
workload:
  dataset:
    random: {input_tokens: 100, output_tokens: 6, seed: SEED}
load:
  warmup: {requests: 2}
  sweep:
    concurrency: [1, 2]
  requests: 4
""")
    assert [p["counts"]["completed"] for p in doc["points"]] == [4, 4]
    for p in doc["points"]:
        c = p["cache"]
        # chat template (BOS, <User>, <Assistant>) + 100 prompt tokens, by the server's count
        assert c["source"] == "usage" and c["reported"]["requests"] == 4, c
        assert c["prompt_tokens"] == 4 * 103, c
        assert c["cached_tokens"] == 0 and not c["above_declared"], c
        # ignore_eos (random prompts pin their lengths): usage says each got what it asked
        assert p["tokens"]["osl"] == {"requests_checked": 4, "mismatched": 0}, p["tokens"]["osl"]
    print(f"fresh: cached tokens per point {[p['cache']['cached_tokens'] for p in doc['points']]} "
          f"of {[p['cache']['prompt_tokens'] for p in doc['points']]}")
    measured = [r for r in records if r["error"] is None]
    assert len(measured) == len(records) >= 8
    assert {r["output_tokens"] for r in records} == {6} and {r["usage_output_tokens"] for r in records} == {6}


def test_a_shared_prefix_is_found_cached_to_the_block_as_the_server_reports_it(tmp_path, vllm):
    doc, records = run(tmp_path, vllm, "shared", """\
workload:
  dataset:
    random: {input_tokens: 100, output_tokens: 2, prefix_tokens: 64, seed: SEED}
load:
  warmup: {requests: 1}
  sweep:
    concurrency: [1, 2]
  requests: 4
""")
    before, after = vllm.around_text("chat")
    # the template's head and the prefix are what requests share; the markers that follow
    # differ from their first token on (a block that holds part of one is never shared)
    expected = blocks(before + 64, vllm.block_size)
    assert expected > 0
    print(f"shared prefix: cached tokens per request {[r['cached_tokens'] for r in records]}")
    # the warm-up cached the prefix: every measured request finds it
    assert [r["cached_tokens"] for r in records] == [expected] * 8
    for p in doc["points"]:
        c = p["cache"]
        assert c["source"] == "usage" and c["cached_tokens"] == 4 * expected, c
        # input_tokens are the own part, after the prefix
        assert c["prompt_tokens"] == 4 * (before + 64 + 100 + after) and not c["above_declared"], c
        # the server's own counters saw at least these hits (other clients may add theirs)
        server = p["telemetry"]["server"]
        assert server["cached_prompt_tokens_delta"] >= 4 * expected, server
        assert server["prefix_cache_hits_delta"] >= 4 * expected, server


def test_reset_cache_empties_the_cache_between_points(tmp_path, vllm):
    body = """\
workload:
  dataset:
    random: {{input_tokens: 100, output_tokens: 2, num_prompts: 2, seed: {seed}}}
  prompts: shared
load:
  warmup: {{requests: 0}}
  sweep:
    concurrency: [1, 2]
  requests: 2
server:
  attach: true
  reset_cache: {reset}
"""
    seed = random.randrange(2**31)  # prompts no earlier run of this test sent
    before, after = vllm.around_text("chat")
    prompt = before + 100 + after
    doc, _ = run(tmp_path, vllm, "kept", body.format(seed=seed, reset="never"))
    # the same two prompts on both points: the second finds them cached, but the last token
    kept = blocks(prompt - 1, vllm.block_size)
    print(f"reset_cache never: cached per point {[p['cache']['cached_tokens'] for p in doc['points']]}")
    assert [p["cache"]["cached_tokens"] for p in doc["points"]] == [0, 2 * kept]
    doc, _ = run(tmp_path, vllm, "reset", body.format(seed=seed + 1, reset="between_points"))
    print(f"reset_cache between_points: cached per point "
          f"{[p['cache']['cached_tokens'] for p in doc['points']]}")
    assert [p["cache"]["cached_tokens"] for p in doc["points"]] == [0, 0]
    done = {"done": True, "endpoint": "/reset_prefix_cache"}
    assert [p["cache"]["reset"] for p in doc["points"]] == [done, done]


# figures benchc reads from a vLLM's /metrics that this server cannot have: it runs no
# speculative decoding
NOT_SERVED = {"spec_decode_accepted_total", "spec_decode_draft_total"}


def test_telemetry_reads_every_figure_under_this_versions_names(tmp_path, vllm):
    text = vllm.metrics()
    parsed = parse_prometheus(text)
    assert parsed["kind"] == "vllm"
    wanted = set(SERVER_KINDS["vllm"]["names"]) - NOT_SERVED
    assert wanted <= parsed.keys(), f"not found under 0.32's names: {sorted(wanted - parsed.keys())}"
    # every counter and histogram has a _created twin (a timestamp): none is read as a figure
    assert "vllm:generation_tokens_created" in text and "vllm:time_to_first_token_seconds_created" in text
    assert parsed["generation_tokens_total"] < 1e9 and parsed["prompt_tokens_total"] < 1e9
    # gauges sampled during the point, counters over it: the poll at its shortest (50 ms), so
    # that the point (two rounds of 48 decode steps) spans several ticks however fast the
    # server decodes (at the default 1 s, an idle server finished it before the first tick)
    doc, records = run(tmp_path, vllm, "telemetry", """\
server:
  metrics_interval: 50ms
workload:
  dataset:
    random: {input_tokens: 50, output_tokens: 48, seed: SEED}
load:
  warmup: {requests: 0}
  sweep:
    concurrency: [2]
  requests: 4
""")
    p = doc["points"][0]
    server = p["telemetry"]["server"]
    assert server["available"] and server["kind"] == "vllm"
    print(f"telemetry: {server}, phases {p['server_timings_prometheus']}")
    for gauge in ("running", "waiting", "kv_cache_usage"):
        assert server[gauge]["samples"] >= 1, (gauge, server)
    assert server["running"]["max"] >= 1 and 0 < server["kv_cache_usage"]["max"] <= 1, server
    for counter in ("generation_tokens_delta", "prompt_tokens_delta", "cached_prompt_tokens_delta",
                    "prefix_cache_hits_delta", "prefix_cache_queries_delta"):
        assert counter in server, (counter, server)
    # the server counted at least what benchc's requests received and sent
    assert server["generation_tokens_delta"] >= p["tokens"]["output"] == 4 * 48, server
    assert server["prompt_tokens_delta"] >= p["cache"]["prompt_tokens"], server
    phases = p["server_timings_prometheus"]
    assert phases["requests"] >= 4 and all(phases[k] > 0 for k in ("prefill_ms_mean", "decode_ms_mean",
                                                                    "ttft_ms_mean")), phases


def test_the_time_series_of_running_waiting_and_kv_usage_move_with_the_load(tmp_path, vllm):
    # 16 prompts of 1,500 tokens at once are more than one engine step's prefill budget: some
    # wait while the first are prefilled, then all 16 run; at c=1 one runs
    doc, _ = run(tmp_path, vllm, "timeseries", """\
server:
  metrics_interval: 250ms
workload:
  dataset:
    random: {input_tokens: 1500, output_tokens: 48, seed: SEED}
load:
  warmup: {requests: 0}
  sweep:
    concurrency: [1, 16]
  requests: 16
""")
    series = {}
    for p in doc["points"]:
        server, window = p["timeseries"]["server"], p["window"]["duration_s"]
        assert server["available"] and server["kind"] == "vllm", server
        n = len(server["t_s"])
        assert abs(n + server["skipped"] - window / 0.25) <= 1, (n, server["skipped"], window)
        for column in ("running", "waiting", "kv_cache_usage"):
            assert len(server[column]) == n and None not in server[column], (column, server)
        series[p["params"]["concurrency"]] = server
        print(f"c={p['params']['concurrency']}: {window:.1f}s, {n} samples ({server['skipped']} skipped): "
              f"running {server['running']}, waiting {server['waiting']}, kv {server['kv_cache_usage']}")
    one, many = series[1], series[16]
    assert max(many["running"]) >= 8 > max(one["running"]) >= 1
    assert max(many["waiting"]) >= 1 and max(many["waiting"]) > max(one["waiting"])
    assert max(many["kv_cache_usage"]) > max(one["kv_cache_usage"]) > 0
    assert min(many["running"]) < max(many["running"])  # it rose as the prompts were admitted


def test_sessions_find_their_history_cached_to_the_block(tmp_path, vllm):
    turns, out = 5, 48
    doc, records = run(tmp_path, vllm, "sessions", f"""\
workload:
  dataset:
    sessions: {{turns: {turns}, input_tokens: 40, output_tokens: {out}, think_time: 0s, seed: SEED}}
load:
  warmup: {{sessions: 0}}
  sweep:
    concurrency: [1]
  sessions: 1
""")
    p = doc["points"][0]
    assert p["sessions"]["completed"] == 1 and p["cache"]["above_declared"] is False, p["cache"]
    by_turn = {int(b["turn"]): b["cache"] for b in p["sessions"]["by_turn"]}
    answer = {r["turn"]: r["usage_output_tokens"] for r in records}
    assert answer == {k: out for k in range(1, turns + 1)}
    bs = vllm.block_size
    lost = {}
    for k in range(2, turns + 1):
        prev, this = by_turn[k - 1]["prompt_tokens"], by_turn[k]
        cached = this["cached_tokens"]
        # its history: the previous turn's prompt and answer, whose KV the server computed
        # (all but the answer's last token) and kept in whole blocks; never this prompt's last token
        history = blocks(min(prev + answer[k - 1] - 1, this["prompt_tokens"] - 1), bs)
        # the previous prompt is this one's prefix: its whole blocks are found for sure
        assert blocks(prev, bs) <= cached <= history, (k, prev, cached, history)
        lost[k] = history - cached
        print(f"sessions: turn {k}: prompt {this['prompt_tokens']}, cached {cached}, history to the block "
              f"{history}, not reused {lost[k]}")


# (input tokens, hash ids of its 64-token blocks): shared prefixes of 2, 1 and 0 blocks, one
# that shares all of a prompt of whole blocks (its last token is computed again), and one
# whose shared blocks are not its first (the hash chain: nothing is found)
TRACE = [(150, [1, 2, 3]), (150, [1, 2, 4]), (100, [1, 5]), (200, [6, 7, 8, 9]), (130, [6, 7, 10]),
         (128, [1, 2]), (140, [11, 2, 3])]


def test_trace_replay_finds_cached_exactly_the_blocks_its_trace_shares(tmp_path, vllm):
    assert 64 % vllm.block_size == 0
    rows = [{"timestamp": 100 * i, "input_length": n, "output_length": 2, "hash_ids": ids}
            for i, (n, ids) in enumerate(TRACE)]
    (tmp_path / "trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    doc, records = run(tmp_path, vllm, "trace", f"""\
workload:
  dataset:
    trace: {{path: {tmp_path / "trace.jsonl"}, format: mooncake, block_size: 64, seed: SEED}}
load:
  warmup: {{requests: 0}}
  sweep:
    concurrency: [1]
""", api="completions")
    before, _ = vllm.around_text("completions")
    seen: set[tuple] = set()
    expected = []
    for n, ids in TRACE:  # in order, one at a time (concurrency 1)
        shared = 0
        while shared < len(ids) and tuple(ids[:shared + 1]) in seen:
            shared += 1
        seen.update(tuple(ids[:k]) for k in range(1, len(ids) + 1))
        # found: the shared blocks' whole KV blocks, never the prompt's last token
        expected.append(blocks(min(before + 64 * shared, before + n - 1), vllm.block_size))
    assert expected == [0, 128, 64, 0, 128, 96, 0]
    print(f"trace: cached per request {[r['cached_tokens'] for r in records]}, the trace's blocks {expected}")
    assert [r["cached_tokens"] for r in sorted(records, key=lambda r: r["prompt_index"])] == expected
    p = doc["points"][0]
    assert p["cache"]["cached_tokens"] == sum(expected) and not p["cache"]["above_declared"], p["cache"]
    assert p["trace"]["requests"] == len(TRACE) and p["tokens"]["osl"]["mismatched"] == 0


def test_prefix_groups_find_their_groups_prefix_cached(tmp_path, vllm):
    doc, records = run(tmp_path, vllm, "groups", """\
workload:
  dataset:
    prefix_groups: {groups: 2, prefix_tokens: 64, suffix_tokens: 20, output_tokens: 2, seed: SEED}
load:
  warmup: {requests: 0}
  sweep:
    concurrency: [1]
  requests: 6
""", api="completions")
    before, _ = vllm.around_text("completions")
    # every run of 2 requests holds each group once: the first two find nothing, the others
    # their group's prefix, to the block
    expected = [0, 0] + [blocks(before + 64, vllm.block_size)] * 4
    print(f"prefix groups: cached per request {[r['cached_tokens'] for r in records]}")
    assert [r["cached_tokens"] for r in sorted(records, key=lambda r: r["prompt_index"])] == expected
    assert doc["points"][0]["cache"]["cached_tokens"] == sum(expected)


def test_a_capacity_search_ends_with_an_answer(tmp_path, vllm):
    doc, _ = run(tmp_path, vllm, "search", """\
workload:
  dataset:
    random: {input_tokens: 40, output_tokens: 4, seed: SEED}
load:
  warmup: {requests: 1}
  search: {over: concurrency, min: 1, max: 3, slo: {e2e: "p99 < 2m"}}
  requests: 3
""")
    [search] = doc["search"]
    print(f"search: {search['status']} {search['answer']}, probes "
          f"{[(p['load'], p['verdict'], p.get('doubts')) for p in search['probes']]}")
    # an SLO every probe meets (2 minutes for 4 tokens): the search climbs to max and says so
    assert (search["status"], search["answer"]) == ("at_max", 3), search
    # a probe the self-check could not trust (the server shares this machine's cores, and a late
    # receive loop marks a point) is probed again; the last word at every load is a pass
    last = {p["load"]: p["verdict"] for p in search["probes"]}
    assert last == {1: "pass", 2: "pass", 3: "pass"}, search["probes"]
    assert all(p["verdict"] in ("pass", "untrusted") for p in search["probes"]), search["probes"]
    assert [p["load"] for p in search["probes"]][-1] == 3 and search["goodput_s"] > 0


def _processes_with(marker: str) -> list[int]:
    """The processes whose environment holds `marker` (a launched server and its children
    inherit it, whatever their command lines say)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:  # gone, or not ours to read
            continue
    return found


def test_a_launched_vllm_goes_through_deploy_ready_smoke_bench_and_stop(tmp_path):
    """server.command with vLLM's command line: a second vLLM for a few minutes (~5 GB), run
    without --enable-prompt-tokens-details, so its point's cached tokens come from /metrics
    and the result says so."""
    command, env = launch_command()
    marker = f"BENCHC_REAL_TEST={uuid.uuid4().hex}"
    env[marker.split("=")[0]] = marker.split("=")[1]
    model_dir = command[command.index("serve") + 1]  # tokenizer.json and its chat template
    server = SimpleNamespace(base_url="http://127.0.0.1:{free}/v1", model="tiny-random", tokenizer=model_dir)
    doc, records = run(tmp_path, server, "launched", f"""\
server:
  command: {json.dumps(command)}
  env: {json.dumps(env)}
  ready: {{path: /health, timeout: 15m, interval: 2s}}
  stop_timeout: 60s
smoke:
  checks:
    - {{name: answers, prompt: "Say something", expect: ".", max_tokens: 8}}
workload:
  dataset:
    random: {{input_tokens: 40, output_tokens: 4, prefix_tokens: 64, seed: SEED}}
load:
  warmup: {{requests: 1}}
  sweep:
    concurrency: [2]
  requests: 4
""")
    [combo] = doc["combinations"]
    print(f"launched: ready after {combo['server'].get('load_time_s')} s, cache {doc['points'][0]['cache']}")
    assert combo["server"]["kind"] == "launched" and combo["server"]["load_time_s"] > 0, combo["server"]
    assert combo["smoke"]["passed"], combo["smoke"]
    assert combo["server"]["exit_status"] is not None, combo["server"]
    assert _processes_with(marker) == []  # the server and every child it spawned are gone
    p = doc["points"][0]
    assert p["counts"]["completed"] == 4 and {r["usage_output_tokens"] for r in records} == {4}
    # no prompt_tokens_details: no request says, the server's counters do (its only client is
    # this run: exactly the prefix's whole blocks for each request, after the warm-up's)
    c = p["cache"]
    assert c["reported"]["requests"] == 0 and {r["cached_tokens"] for r in records} == {None}
    assert c["source"] == "prometheus" and "reported no cached prompt tokens per request" in c["note"], c
    tok = load(model_dir)
    template = load_chat_template(model_dir, tok)
    assert template is not None
    before = tok.count(template.render([{"role": "user", "content": "\0"}]).split("\0")[0])
    assert c["cached_tokens"] == 4 * blocks(before + 64, 32), (before, c)
