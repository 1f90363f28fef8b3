"""Each API's simulator adapter (benchc/sim/adapter.py, apis.py, wire.py, pooling.py) against
the client's adapter for the same API (benchc/client/apis.py): the client's body is read by the
simulator's adapter, and what the simulator's engine writes through that adapter is read by the
client's stream parser, on both cores, giving the text, token counts, usage and tool calls the
simulator's trace says it sent. And the engine never asks which API it serves."""

from __future__ import annotations

import ast
import asyncio
import json
import types
from pathlib import Path

import pytest

from benchc.client.apis import APIS
from benchc.plan.model import Sampling, Target
from benchc.plan.tools import synthetic_tools
from benchc.plan.workload import Prompt
from benchc.sim.adapter import Reject
from benchc.sim.model import SimConfig
from benchc.sim.server import CLOCK, SimServer
from tests.conftest import both_cores

GENERATING = ("chat", "completions", "responses", "messages")
SAMPLING = Sampling(temperature=0.0, top_p=None, max_tokens=None, min_tokens=None, ignore_eos=True, stop=[],
                    seed=None, extra_body={})
# six words (one token each without a tokenizer), in every API's form of a conversation
PROMPT = Prompt(text=None, messages=[{"role": "system", "content": "be brief"},
                                     {"role": "user", "content": "alpha beta gamma delta"}],
                input_tokens=6, output_tokens=9)
TOOLS = {"definitions": synthetic_tools(2, 20, seed=1), "choice": "auto"}


def _target(api: str) -> Target:
    return Target(base_url="http://127.0.0.1:1/v1", sim=None, api=api, model="benchc-sim", api_key=None,
                  headers={}, timeout_s=10, idle_timeout_s=5, tokenizer=None)


def _server(**overrides) -> SimServer:
    cfg = SimConfig(trace_text=True, tokens_per_step=2, **overrides)
    return SimServer(cfg)


class _Sink:
    """A stream's response, as the engine writes it: every write kept."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    async def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))


async def _serve(server: SimServer, name: str, body: dict, rid: str) -> tuple[dict, list[bytes], dict | None]:
    """(trace, the stream's writes, the whole answer) of one request run through the server's
    adapter for `name` and its engine, as a handler runs it (without the sockets)."""
    api = server.apis[name]
    parsed = api.read(body)
    request = types.SimpleNamespace(headers={"x-request-id": rid}, transport=None, content_length=0)
    seq = server._new_seq(request, body, api, CLOCK(), parsed, None)
    sink = _Sink()
    seq.resp = sink
    if seq.stream and api.opening(seq):
        sink.writes.append(api.opening(seq))
    engine = server.engine
    engine.submit(seq)
    engine._admit(CLOCK())
    while engine.running:
        await engine._step(CLOCK())
    whole = None if seq.stream else api.whole(seq, engine.final_usage(seq))
    return seq.trace, sink.writes, whole


def _parsed(stream_mod, writes: list[bytes]) -> tuple:
    """What the client's stream parser reads of the writes (the k-th read at k ms)."""
    p = stream_mod.StreamParser(keep_text=True)
    for k, data in enumerate(writes, start=1):
        p.feed(data, k * 1_000_000)
    p.close(10**12)
    return (p.answer_text(), p.reasoning_text(), p.tool_text(), p.text_chunks, p.reasoning_chunks,
            p.tool_chunks, p.usage_completion, p.usage_prompt, p.usage_cached, p.usage_reasoning,
            p.finish_reason, p.malformed, p.unknown_events, p.response_id, p.chunk_tokens)


def _expected(trace: dict, name: str, continuous: bool) -> tuple:
    """The same, as the simulator's trace says it sent them (the reasoning tokens where the
    API's usage says them: OpenAI's, for an answer that reasoned; -1 is none; each chunk's
    tokens where its usage says them: continuous usage, chat's and completions')."""
    said = name in ("chat", "responses") and trace["reasoning_tokens"]
    reasoning = trace["reasoning_tokens"] if said else -1
    return (trace["output"], trace["reasoning"], trace.get("tool_call", ""), len(trace["chunks"]),
            trace["reasoning_chunks"], trace["tool_chunks"], trace["output_tokens"], trace["input_tokens"],
            trace["cached_tokens"], reasoning, trace["reason"], 0, 0,
            "resp_" + trace["id"] if name == "responses" else None,
            [n if continuous and name in ("chat", "completions") else -1 for _, n in trace["chunks"]])


def _event_texts(name: str, writes: list[bytes]) -> str:
    """The text the client's adapter reads from each of the stream's events, joined."""
    out = []
    for event in b"".join(writes).split(b"\n\n"):
        for line in event.split(b"\n"):
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                out.append(APIS[name].event_text(json.loads(line[6:])))
    return "".join(out)


def _run_twice(name: str, body: dict, **overrides) -> list[tuple[dict, list[bytes], dict | None]]:
    """One request, then the same again (its prompt found in the prefix cache)."""
    server = _server(**overrides)

    async def both():
        return [await _serve(server, name, body, "r1"), await _serve(server, name, body, "r2")]

    return asyncio.run(both())


@pytest.mark.parametrize("name", GENERATING)
def test_the_client_body_is_read_by_the_simulator_adapter(name):
    """The client's body for each API: its six prompt words are the prompt's tokens (the system
    prompt where the API puts it), its output length the request's."""
    server = _server()
    body = APIS[name].body(_target(name), SAMPLING, PROMPT)
    parsed = server.apis[name].read(body)
    assert (len(parsed.tokens), parsed.max_tokens, parsed.image_tokens) == (6, 9, 0)
    assert parsed.conversation == (parsed.tokens if name == "responses" else None)


@pytest.mark.parametrize("name", ["chat", "responses", "messages"])
def test_the_client_tools_are_read_before_the_conversation(name):
    """Tools in each API's own form count before the conversation (their JSON's words)."""
    server = _server()
    body = APIS[name].body(_target(name), SAMPLING, PROMPT, tools=TOOLS)
    tokens = server.apis[name].read(body).tokens
    words = sum(len(json.dumps(t, ensure_ascii=False).split()) for t in body["tools"])
    assert len(tokens) == words + 6 and tokens[-6:] == "be brief alpha beta gamma delta".split()


@pytest.mark.parametrize("name", ["embeddings", "rerank", "score"])
def test_the_client_pooling_body_is_read_by_the_simulator_adapter(name):
    inputs = ("what is it", "a thing", "two more things")
    prompt = Prompt(text=None, messages=None, input_tokens=9, output_tokens=None, inputs=inputs)
    body = APIS[name].body(_target(name), SAMPLING, prompt)
    counts = _server().apis[name].inputs(body)
    # embeddings: a vector per input; rerank, score: the query with each document
    assert counts == ([3, 2, 3] if name == "embeddings" else [3 + 2, 3 + 3])


def test_messages_without_max_tokens_is_refused_as_anthropic_refuses_it():
    body = APIS["messages"].body(_target("messages"), SAMPLING, PROMPT)
    del body["max_tokens"]
    with pytest.raises(Reject) as e:
        _server().apis["messages"].read(body)
    assert e.value.response.status == 400 and b"max_tokens: Field required" in e.value.response.body


@pytest.mark.parametrize("continuous", [False, True])
@pytest.mark.parametrize(("name", "tool"), [(n, t) for n in GENERATING for t in (False, True)
                                            if not (n == "completions" and t)])  # no tool calls there
def test_the_simulator_stream_reads_as_its_trace_on_both_cores(name, tool, continuous):
    """Reasoning (3 tokens), then the answer or a tool call (its name, then 4 tokens of
    arguments), two tokens a step: the client's parser on either core reads the text, chunks
    (and their tokens, with continuous usage), usage (the second request's prompt found in the
    prefix cache) and tool call the trace says were sent, and the cores agree; the client
    adapter's event_text reads the reasoning and the answer."""
    body = APIS[name].body(_target(name), SAMPLING, PROMPT, continuous_usage=continuous)
    runs = _run_twice(name, body, reasoning_tokens=3, tool_call_fraction=1.0 if tool else 0.0,
                      tool_call_tokens=4, block_size=2)
    for trace, writes, _ in runs:
        want = _expected(trace, name, continuous)
        got = [_parsed(mod, writes) for mod in both_cores("benchc.client._stream")]
        assert got[0] == got[1] == want
        assert _event_texts(name, writes) == trace["reasoning"] + trace["output"]
    first, second = (t for t, _, _ in runs)
    assert first["cached_tokens"] == 0 and second["cached_tokens"] > 0
    if tool:
        assert first["reason"] == "tool_calls" and first["tool_chunks"] == 3 and first["tool_call"]
    else:
        assert first["reason"] == "length" and first["output_tokens"] == 9 and first["output"]
    if name != "completions":
        assert first["reasoning_tokens"] == 3 and first["reasoning"]


@pytest.mark.parametrize("name", GENERATING)
def test_the_simulator_whole_answer_reads_as_its_trace(name):
    """A request that did not stream: the client's adapter reads the answer's text (reasoning
    and answer, in the API's order)."""
    body = APIS[name].body(_target(name), SAMPLING, PROMPT, stream=False)
    (trace, writes, whole), _ = _run_twice(name, body, reasoning_tokens=2)
    assert writes == [] and whole is not None
    text = APIS[name].answer_text(whole)
    assert text in (trace["reasoning"] + trace["output"], trace["output"] + trace["reasoning"])
    assert len(text.split()) == 9 and trace["output_tokens"] == 9


def test_the_simulator_embeddings_answer_reads_as_the_client_reads_it():
    server = _server(embed_dim=4)
    prompt = Prompt(text=None, messages=None, input_tokens=4, output_tokens=None, inputs=("a b", "c d"))
    body = APIS["embeddings"].body(_target("embeddings"), SAMPLING, prompt)
    api = server.apis["embeddings"]
    counts = api.inputs(body)
    seq = types.SimpleNamespace(id="embd-r1", input_tokens=sum(counts), inputs=len(counts))
    answer = api.answer(seq, body)
    assert APIS["embeddings"].answer_text(json.loads(answer)) == "2 embeddings of 4 floats"
    for mod in both_cores("benchc.client._stream"):
        p = mod.StreamParser(body=True)
        p.feed(answer, 1_000_000)
        p.close(2_000_000)
        assert (p.usage_prompt, p.malformed) == (4, 0)


def _api_name_branches(source: str) -> list[int]:
    """The lines that ask which API a request is of: a comparison with, a lookup by, or a
    dict.get of an API name (`api`, `x.api`, `api.name`)."""

    def is_api(n: ast.AST) -> bool:
        return (isinstance(n, ast.Name) and n.id == "api") or (isinstance(n, ast.Attribute) and (
            n.attr == "api" or (n.attr == "name" and isinstance(n.value, ast.Name) and n.value.id == "api")))

    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(is_api(x) for x in [node.left, *node.comparators]) \
                or isinstance(node, ast.Subscript) and is_api(node.slice) \
                or isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "get" and node.args and is_api(node.args[0]):
            lines.append(node.lineno)
    return lines


def test_the_server_branches_on_the_api_name_at_most_three_times():
    """The engine asks a request's adapter, never its API (31 such lines before the adapters:
    now only the routes, which generating APIs the server is configured to serve)."""
    source = (Path(__file__).parents[1] / "benchc" / "sim" / "server.py").read_text()
    assert len(_api_name_branches(source)) <= 3, _api_name_branches(source)


def _events(writes: list[bytes]) -> list[dict]:
    """The JSON objects of a stream's events, in order."""
    out = []
    for event in b"".join(writes).split(b"\n\n"):
        out += [json.loads(line[6:]) for line in event.split(b"\n") if line.startswith(b"data: {")]
    return out


def _tool_event_index(obj: dict) -> int | None:
    """The call index a tool-call event names (chat's tool_calls[].index, Responses'
    output_index, Messages' block index), None for any other event."""
    choices = obj.get("choices")
    if choices and choices[0]["delta"].get("tool_calls"):
        return choices[0]["delta"]["tool_calls"][0]["index"]
    kind = obj.get("type")
    if kind == "response.function_call_arguments.delta":
        return obj["output_index"]
    if kind == "response.output_item.added" and obj["item"]["type"] == "function_call":
        return obj["output_index"]
    if kind == "content_block_start" and obj["content_block"]["type"] == "tool_use":
        return obj["index"]
    if kind == "content_block_delta" and obj["delta"]["type"] == "input_json_delta":
        return obj["index"]
    return None


@pytest.mark.parametrize("name", ("chat", "responses", "messages"))
def test_parallel_tool_calls_stream_interleaved_and_read_apart_on_both_cores(name):
    """parallel_tool_calls 3: the answer is 3 calls (a name token and 3 argument tokens each)
    whose events interleave token by token, each naming its own call (chat's tool_calls[].index,
    Responses' output_index and item id, Messages' block index): the client's parser on either
    core keeps each call's name and arguments apart, as the trace says each call was sent. Before
    the parameter, the simulator could only stream one call."""
    prompt = Prompt(text=None, messages=PROMPT.messages, input_tokens=6, output_tokens=20)
    body = APIS[name].body(_target(name), SAMPLING, prompt)
    (trace, writes, _), _ = _run_twice(name, body, reasoning_tokens=1, tool_call_fraction=1.0,
                                       tool_call_tokens=3, parallel_tool_calls=3)
    assert trace["reason"] == "tool_calls" and trace["output_tokens"] == 1 + 3 * 4
    assert trace["tool_call_tokens"] == 12 and trace["tool_chunks"] == 12  # one event per token
    calls = trace["tool_calls"]
    assert len(calls) == 3 and [len(c.split()) for c in calls] == [4, 4, 4]
    # interleaved on the wire: the call each tool event names goes 0, 1, 2, 0, 1, 2, ...
    named = [k for k in map(_tool_event_index, _events(writes)) if k is not None]
    first = named[0]  # after the reasoning's item (block), in Responses and Messages
    assert first == {"chat": 0, "responses": 1, "messages": 1}[name]
    assert [k - first for k in named] == [0, 1, 2] * 4
    # each call is closed with its own whole arguments, under its own ids
    events = _events(writes)
    if name == "responses":
        (done,) = [e for e in events if e["type"] == "response.completed"]
        items = [i for i in done["response"]["output"] if i["type"] == "function_call"]
        assert [i["name"] + i["arguments"] for i in items] == calls
        assert [i["id"] for i in items] == ["fc_r1", "fc_r1_1", "fc_r1_2"]
    if name == "messages":
        assert [e["index"] for e in events if e["type"] == "content_block_stop"] == [0, 1, 2, 3]
    for mod in both_cores("benchc.client._stream"):
        p = mod.StreamParser(keep_text=True)
        for k, data in enumerate(writes, start=1):
            p.feed(data, k * 1_000_000)
        p.close(10**12)
        assert p.tool_call_texts() == calls and p.finish_reason == "tool_calls"


def test_parallel_tool_calls_is_checked_by_the_simulators_ranges(capsys):
    """One range (the spec schema's target.sim) for a spec, a twin file (tests/
    test_hardening_twins.py) and `benchc sim --param`."""
    from benchc.cli import main
    from benchc.sim.model import make_config
    from benchc.spec.values import sim_param_names, sim_param_problems

    assert "parallel_tool_calls" in sim_param_names()
    assert sim_param_problems({"parallel_tool_calls": 0}) == \
        ["parallel_tool_calls: 0 is less than the minimum of 1"]
    assert sim_param_problems({"parallel_tool_calls": 4}) == []
    with pytest.raises(ValueError, match="parallel_tool_calls must be at least 1"):
        make_config("instant", parallel_tool_calls=0)
    assert main(["sim", "--param", "parallel_tool_calls=0", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "parallel_tool_calls: 0 is less than the minimum of 1" in err and "Traceback" not in err


@pytest.mark.parametrize("name", ("responses", "messages"))
def test_a_whole_answer_of_parallel_tool_calls_holds_each_call_apart(name):
    """A request that did not stream: each of the 3 calls is an item (block) of its own, its
    name and arguments those the trace says the call had."""
    prompt = Prompt(text=None, messages=PROMPT.messages, input_tokens=6, output_tokens=20)
    body = APIS[name].body(_target(name), SAMPLING, prompt, stream=False)
    (trace, _, whole), _ = _run_twice(name, body, tool_call_fraction=1.0, tool_call_tokens=3,
                                      parallel_tool_calls=3)
    assert whole is not None
    if name == "responses":
        got = [i["name"] + i["arguments"] for i in whole["output"] if i["type"] == "function_call"]
    else:
        got = [b["name"] + b["input"]["arguments"] for b in whole["content"] if b["type"] == "tool_use"]
    assert got == trace["tool_calls"] and len(got) == 3
