"""Each streaming API end to end against the simulator, on each client path (own reader on
the event loop and on the receive loop of each core, aiohttp): what benchc records per
request -- TTFT, time to first tool call, ITL, output and cached tokens, the finish -- is what
the simulator's trace says it wrote. And a server without the API stops the run (exit 3)."""

import json
import statistics

import pytest

from benchc.cli import main
from benchc.results.document import read
from tests.simrun import Sim
from tests.test_reasoning import PATHS, first_write_error_ms

SPEC = """\
version: 1
name: apis
target: {{base_url: "http://127.0.0.1:9/v1", model: MiniMaxAI/MiniMax-M2.5, api: {api}}}
workload:
  dataset:
    random: {{input_tokens: 48, prefix_tokens: 32, output_tokens: {out}, seed: 5}}
load:
  warmup: {{requests: 1}}
  sweep: {{concurrency: [1]}}
  requests: {n}
output: {{path: {path}, requests: true}}
"""
APIS = ["chat", "responses", "messages"]


@pytest.fixture(params=PATHS)
def path(request, monkeypatch):
    from tests.conftest import use_transport

    if request.param == "aiohttp":
        return ["--http", "aiohttp"], "aiohttp"
    return [], use_transport(monkeypatch, request.param)


def run(tmp_path, path, api, sim_args, out=10, n=8):
    extra, served = path
    f = tmp_path / "a.yaml"
    f.write_text(SPEC.format(api=api, out=out, n=n, path=tmp_path / "a.json"))
    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4", "--param", "step_table=[[1, 1.0]]", *sim_args)
    try:
        assert main(["run", str(f), "--base-url", sim.url, "--quiet", *extra]) == 0
        trace = sim.records()
    finally:
        sim.close()
    reqs = [json.loads(x) for x in (tmp_path / "a.requests.jsonl").read_text().splitlines()]
    assert len(reqs) == n and {r["path"] for r in reqs} == {served}
    (point,) = read(str(tmp_path / "a.json"))["points"]
    return point, reqs, trace


@pytest.mark.slow  # runs against the simulator
@pytest.mark.parametrize("api", APIS)
def test_each_api_records_what_the_simulator_wrote(tmp_path, path, api):
    """Half the answers are tool calls (2 tokens of reasoning, the tool's name, 4 of arguments),
    the rest 2 of reasoning and 8 of text; one token per event, 1 ms steps, one stream at a
    time. Prompts share a 32-token prefix: from the second request on, the server's cache holds
    it, and its usage says so in each API's words."""
    sim = ("--param", "reasoning_tokens=2", "--param", "tool_call_fraction=0.5",
           "--param", "tool_call_tokens=4", "--param", "block_size=16")
    point, reqs, trace = run(tmp_path, path, api, sim)
    ttft_errors, tool_errors = [], []
    tools = finishes = 0
    for r in reqs:
        tr = trace[r["id"]]
        called = "tool_call_tokens" in tr
        tools += called
        assert r["error"] is None
        assert r["output_tokens"] == tr["output_tokens"] == (7 if called else 10)
        assert r["cached_tokens"] == tr["cached_tokens"]
        assert r["text_chunks"] == len(tr["chunks"]) == tr["output_tokens"]
        ttft_errors.append(first_write_error_ms(r, tr, "ttft_us", 0))
        if called:
            assert tr["tool_chunks"] == 5 and tr["reasoning_chunks"] == 2
            assert r["finish_reason"] == "tool_calls"
            finishes += 1
            tool_errors.append(first_write_error_ms(r, tr, "ttf_tool_call_us", tr["reasoning_chunks"]))
            assert r["ttf_tool_call_us"] >= r["ttft_us"]
        else:
            assert "ttf_tool_call_us" not in r and r["finish_reason"] == "length"
    assert 0 < tools < len(reqs)  # the seed draws both kinds
    assert sum(tr["cached_tokens"] for tr in trace.values()) > 0
    # never before the write, and late by about a write call (see tests/test_reasoning.py)
    assert min(ttft_errors + tool_errors) > -0.5, (ttft_errors, tool_errors)
    assert statistics.median(ttft_errors) < 1.0 and statistics.median(tool_errors) < 1.0
    lat = point["latency"]
    assert lat["ttf_tool_call_us"]["count"] == tools
    assert lat["itl_us"]["count"] == sum(len(trace[r["id"]]["chunks"]) - 1 for r in reqs)
    assert point["stream"] == {"tool_call_requests": tools, "tool_call_finishes": finishes,
                               "unknown_events": 0}
    assert point["tokens"]["output"] == sum(trace[r["id"]]["output_tokens"] for r in reqs)
    assert point["tokens"]["output_method"] == "usage"
    # a tool call is an answer: no request ran out of tokens while it reasoned
    assert point["reasoning"]["requests"] == len(reqs) and point["reasoning"]["requests_without_answer"] == 0
    assert point["cache"]["reported"]["cached_tokens"] == sum(trace[r["id"]]["cached_tokens"] for r in reqs)


@pytest.mark.slow  # runs against the simulator
def test_a_server_without_the_api_stops_the_run_with_exit_3(tmp_path, capsys):
    """A simulator that serves chat only, asked for the Responses API: every request is a 404;
    the first stops the point, the run exits 3 naming the API and its endpoint."""
    f = tmp_path / "a.yaml"
    f.write_text(SPEC.format(api="responses", out=4, n=20, path=tmp_path / "a.json"))
    sim = Sim(tmp_path, "--preset", "instant", "--param", 'apis=["chat"]')
    try:
        code = main(["run", str(f), "--base-url", sim.url, "--quiet"])
    finally:
        sim.close()
    assert code == 3
    err = capsys.readouterr().err
    assert "it does not serve the responses API" in err and sim.url + "/responses" in err
    doc = read(str(tmp_path / "a.json"))
    assert doc["errors"][0]["kind"] == "api_not_served"
    assert doc["combinations"][0]["status"] == "api_not_served"
    assert sum(p["counts"]["sent"] for p in doc["points"]) < 20


@pytest.mark.slow  # runs against the simulator
def test_the_messages_apis_key_header_is_stored_nowhere(tmp_path, capsys):
    """The Messages API sends the key as x-api-key: the plan, the result, the per-request
    records and the console show none of it (the scrubber knows the key by value)."""
    key = "sk-ant-secret-0042"
    f = tmp_path / "a.yaml"
    f.write_text(SPEC.format(api="messages", out=4, n=4, path=tmp_path / "a.json")
                 .replace("api: messages}", f"api: messages, api_key: {key}}}"))
    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4", "--param", "step_table=[[1, 1.0]]")
    try:
        assert main(["run", str(f), "--base-url", sim.url, "--json"]) == 0
        assert main(["plan", str(f)]) == 0
    finally:
        sim.close()
    out, err = capsys.readouterr()
    files = [p.read_text() for p in tmp_path.iterdir() if p.suffix in (".json", ".jsonl")]
    assert files and all(key not in text for text in [out, err, *files])
    doc = read(str(tmp_path / "a.json"))
    assert doc["points"][0]["counts"]["completed"] == 4


@pytest.mark.slow  # runs against the simulator
@pytest.mark.parametrize("api,key", [("responses", "input"), ("messages", "messages")])
def test_sessions_send_the_whole_conversation_on_the_responses_and_messages_apis(tmp_path, api, key):
    """A conversation by full input: each turn sends the history (the answers as streamed) and
    finds its previous turn's prompt and answer cached, as on chat."""
    from tests.test_sessions import RUN, run_against_sim

    spec = tmp_path / "s.yaml"
    spec.write_text(RUN.format(turns=3, n_in=24, n_out=6, think="0s", sweep="{concurrency: [2]}",
                               load="  sessions: 2", out=tmp_path / "s.json")
                    .replace("M2.5}", f"M2.5, api: {api}}}"))
    trace = run_against_sim(tmp_path, spec)
    reqs = [json.loads(x) for x in (tmp_path / "s.requests.jsonl").read_text().splitlines()]
    assert len(reqs) == 6 and all(r["error"] is None for r in reqs)
    by_session: dict = {}
    for r in sorted(reqs, key=lambda r: (r["session"], r["turn"])):
        by_session.setdefault(r["session"], []).append(r)
    for turns in by_session.values():
        for prev, r in zip(turns, turns[1:], strict=False):
            before, now = trace[prev["id"]], trace[r["id"]]
            answer = {"role": "assistant", "content": before["output"]}
            if api == "responses":  # a typed output message (issue 45): servers refuse the chat form
                answer = {"type": "message", "role": "assistant", "id": f"msg_history_{len(before[key])}",
                          "status": "completed",
                          "content": [{"type": "output_text", "text": before["output"], "annotations": []}]}
            assert now[key][:-1] == before[key] + [answer]
            assert now["cached_tokens"] == r["cached_tokens"] > 0
