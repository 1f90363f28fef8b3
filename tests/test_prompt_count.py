"""The prompt the server counted against the one benchc sent (issue 45, item 2): llama.cpp
serving Gemma 3 (whose chat template has no tool section) ignored the tools and counted 282
prompt tokens a request against 856 sent, and benchc said nothing. A point whose server count
differs by more than the chat template's share says so, with the likely cause; --strict fails it."""

import pytest

from benchc.cli import main
from benchc.errors import EXIT_UNTRUSTED
from benchc.results.document import read
from benchc.results.trust import PROMPT_TOLERANCE, TEMPLATE_SHARE_TOKENS, judge, prompt_tokens
from tests.gate_proxy import GateProxy
from tests.simrun import Sim
from tests.test_point_document import point_of

SPEC = """\
version: 1
name: tools
target: {{base_url: "http://127.0.0.1:9/v1", model: MiniMaxAI/MiniMax-M2.5}}
workload:
  dataset:
    random: {{input_tokens: 256, output_tokens: 8}}
{tools}
load:
  warmup: {{requests: 0}}
  sweep: {{concurrency: [2]}}
  requests: 6
output: {{path: {out}}}
"""


def _run(tmp_path, capsys, *args, tools=True, **proxy):
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(out=tmp_path / "r.json",
                                tools="  tools: {synthetic: {count: 3, tokens: 200}}" if tools else ""))
    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4")
    gate = GateProxy(sim.url, **proxy)
    try:
        code = main(["run", str(spec), "--base-url", gate.url, *args])
    finally:
        gate.close()
        sim.close()
    (point,) = read(str(tmp_path / "r.json"))["points"]
    return code, point, capsys.readouterr().err


def _drop_tools(path, body):
    body.pop("tools", None)  # as a chat template without a tool section renders the request
    body.pop("tool_choice", None)


@pytest.mark.slow  # runs against a simulator subprocess, behind a proxy
def test_a_server_that_ignores_the_tools_is_named_and_strict_fails_it(tmp_path, capsys):
    code, point, err = _run(tmp_path, capsys, alter=_drop_tools)
    counted = point["tokens"]["prompt_counted"]
    assert (counted["requests"], counted["sent"], counted["requests_with_tools"]) == (6, 6 * 856, 6)
    assert counted["server"] == 6 * 256  # the simulator counts words: the prompt without the tools
    (doubt,) = point["trust"]["doubts"]
    assert doubt["check"] == "prompt_tokens" and doubt["fails_strict"] and not point["trust"]["trusted"]
    assert doubt["message"] == ("the server counted 256 prompt tokens a request against 856 sent (600 fewer, "
                                "beyond a chat template's usual share of 32 and 10%; 6 requests): likely "
                                "tools dropped (a chat template without a section for them ignores them)")
    assert code == 0 and "WARNING: c=2: the server counted 256 prompt tokens a request" in err  # console
    code, point, err = _run(tmp_path, capsys, "--strict", alter=_drop_tools)
    assert code == EXIT_UNTRUSTED and "--strict: c=2: the server counted 256 prompt tokens" in err


def _more_prompt(data):
    usage = data.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), int):
        usage["prompt_tokens"] = usage["prompt_tokens"] * 3 // 2


@pytest.mark.slow
def test_a_server_counting_with_another_tokenizer_is_named(tmp_path, capsys):
    code, point, err = _run(tmp_path, capsys, tools=False, rewrite=_more_prompt)
    (doubt,) = point["trust"]["doubts"]
    assert doubt["message"] == ("the server counted 384 prompt tokens a request against 256 sent (128 more, "
                                "beyond a chat template's usual share of 32 and 10%; 6 requests): likely a "
                                "different tokenizer (lengths were planned without the model's: set "
                                "target.tokenizer)")


@pytest.mark.slow
def test_a_server_counting_what_was_sent_raises_no_doubt(tmp_path, capsys):
    code, point, err = _run(tmp_path, capsys)
    assert point["tokens"]["prompt_counted"]["server"] == point["tokens"]["prompt_counted"]["sent"] == 6 * 856
    assert point["trust"] == {"trusted": True, "doubts": []} and code == 0


def _point(sent, server, n=4, template=None, tools=0):
    """The MiniMax fixture's first point (tests/test_point_document.point_of) with these counts."""
    tok = {"input": server, "output": 8, "output_method": "usage",
           "prompt_counted": {"requests": n, "sent": sent, "server": server, "requests_with_tools": tools,
                              "requests_with_images": 0}}
    if template is not None:
        tok["chat_template"] = {"requests": n, "input_tokens": sent + template * n, "content_tokens": sent,
                                "overhead_tokens": template * n, "overhead_per_request": template}
    return point_of(tokens=tok)


def test_the_template_share_is_the_rendered_template_s_when_benchc_rendered_it():
    # 4 requests of 100 tokens, the template adding 60 each: 640 counted is the template's share
    assert prompt_tokens(_point(400, 640, template=60)) is None
    # without the rendered template, 60 a request is past the usual 32 (and 10%)
    assert TEMPLATE_SHARE_TOKENS == 32 and PROMPT_TOLERANCE == 0.10
    assert prompt_tokens(_point(400, 640)).message.startswith(
        "the server counted 160 prompt tokens a request against 100 sent (60 more, beyond a chat template's "
        "usual share of 32")
    # within 10% below and the share above: the same prompt
    assert prompt_tokens(_point(400, 361)) is None and prompt_tokens(_point(400, 528)) is None


def test_a_result_without_the_server_s_count_is_judged_as_before():
    assert "prompt_counted" not in point_of().raw["tokens"]
    assert judge(point_of()) == {"trusted": True, "doubts": []}


@pytest.mark.real
def test_the_shared_vllm_dropping_tools_is_named(tmp_path, capsys):
    """The shared vLLM 0.32 (BENCHC_VLLM_URL), its tiny Llama asked with tool_choice none:
    the server renders the prompt without the tool definitions (69 prompt tokens of 264 sent,
    measured), and the point says so."""
    import os

    spec = tmp_path / "s.yaml"
    spec.write_text(f"""\
version: 1
name: vllm-tools
target: {{base_url: "{os.environ['BENCHC_VLLM_URL']}", model: tiny-random}}
workload:
  dataset:
    random: {{input_tokens: 64, output_tokens: 8}}
  tools: {{synthetic: {{count: 2, tokens: 100}}, choice: none}}
load:
  warmup: {{requests: 0}}
  sweep: {{concurrency: [2]}}
  requests: 4
output: {{path: {tmp_path / "r.json"}}}
""")
    assert main(["run", str(spec), "--quiet", "--strict"]) == EXIT_UNTRUSTED
    (point,) = read(str(tmp_path / "r.json"))["points"]
    counted = point["tokens"]["prompt_counted"]
    assert counted["sent"] == 4 * 264 and counted["server"] < counted["sent"] / 2
    doubt = next(d for d in point["trust"]["doubts"] if d["check"] == "prompt_tokens")
    assert doubt["message"].endswith("likely tools dropped (a chat template without a section for them "
                                     "ignores them)")
