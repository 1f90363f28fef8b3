"""Loading and validation: positions, interpolation, overrides, the custom messages."""

import os

import pytest

from benchc.errors import SpecError, UsageError
from benchc.spec import loader as spec

BASE = """\
version: 1
name: t
target:
  base_url: http://localhost:8000/v1
  model: m
workload:
  dataset:
    random: {input_tokens: 16, output_tokens: 8}
load:
  sweep:
    concurrency: [1, 2]
  requests: 4
"""


def problems(text, overrides=(), env=None):
    with pytest.raises(SpecError) as e:
        spec.load_text(text, "s.yaml", overrides, env or {})
    return [str(p) for p in e.value.problems]


def test_valid_spec_loads_with_positions():
    s = spec.load_text(BASE, "s.yaml", env={})
    assert s.data["load"]["sweep"]["concurrency"] == [1, 2]
    assert s.locate(("load", "sweep", "concurrency", 1)) == ("s.yaml", 11, 22)
    assert s.locate(("load", "requests"), key=True) == ("s.yaml", 12, 3)


def test_env_interpolation_typed_and_defaults():
    text = BASE.replace("requests: 4", "requests: ${env:N}").replace("model: m", "model: ${env:M:-fallback}")
    s = spec.load_text(text, "s.yaml", env={"N": "7"})
    assert s.data["load"]["requests"] == 7  # unquoted: takes the YAML type of the value
    assert s.data["target"]["model"] == "fallback"
    quoted = BASE.replace("model: m", 'model: "${env:M}"')
    assert spec.load_text(quoted, "s.yaml", env={"M": "123"}).data["target"]["model"] == "123"


def test_missing_env_names_variable_and_position():
    text = BASE.replace("model: m", "model: pre-${env:NOPE}")
    assert problems(text) == [
        "s.yaml:5:10: $.target.model: environment variable NOPE is not set "
        "(set it, or write ${env:NOPE:-default} to give a default)"]


def test_overrides_apply_before_validation():
    s = spec.load_text(BASE, "s.yaml", ["load.requests=9", "load.sweep.concurrency[1]=16",
                                         "workload.sampling.temperature=0.5"], env={})
    assert s.data["load"]["requests"] == 9
    assert s.data["load"]["sweep"]["concurrency"] == [1, 16]
    assert s.data["workload"]["sampling"] == {"temperature": 0.5}


def test_bad_override_is_reported_where_it_came_from():
    assert problems(BASE, ["load.requests=-1"]) == [
        "--set load.requests: $.load.requests: -1 is less than the minimum of 1"]
    with pytest.raises(UsageError, match="expected dotted.path=VALUE"):
        spec.load_text(BASE, "s.yaml", ["load.requests"], env={})
    with pytest.raises(UsageError, match="does not exist"):
        spec.load_text(BASE, "s.yaml", ["load.sweep.concurrency[5].x=1"], env={})


@pytest.mark.parametrize("edit,expected", [
    (("api: chat", None), None),
    (("  model: m", "  model: m\n  api: chatt"), "s.yaml:6:8: $.target.api: 'chatt' is not one of "
     "'chat', 'completions', 'responses', 'messages', 'embeddings', 'rerank', 'score' — did you mean "
     "'chat'?"),
    (("requests: 4", "requests: four"), "s.yaml:12:13: $.load.requests: expected an integer, got 'four'"),
    (("requests: 4", "requests: 4\n  duration: soon"),
     "s.yaml:13:13: $.load.duration: 'soon' is not a duration like 500ms, 2s or 15m"),
    (("  requests: 4", "  requests: 4\n  requestz: 5"),
     "s.yaml:13:3: $.load.requestz: unknown key 'requestz' — did you mean 'requests'?"),
    (("  requests: 4", "  requests: 4\n  wibble: 5"),
     "s.yaml:13:3: $.load.wibble: unknown key 'wibble'; allowed here: warmup, sweep, search, stages, "
     "requests, duration, sessions, graceful_stop, ramp_up, cooldown, cancel, repeats, saturation"),
    (("version: 1", "version: 2"), "s.yaml:1:10: $.version: 2 must be 1: the only spec version this "
     "benchc reads"),
    (("name: t", "name: 'bad name'"), "s.yaml:2:7: $.name: 'bad name' is not a name: letters, digits, "
     "'.', '_' and '-', starting with a letter or digit"),
    (("    random: {input_tokens: 16, output_tokens: 8}",
      "    random: {input_tokens: 16, output_tokens: 8}\n    jsonl: {path: x.jsonl}"),
     "s.yaml:8:5: $.workload.dataset: give exactly one dataset: random, jsonl, sharegpt, trace, "
     "agent_trace, prefix_groups or sessions"),
    (("  base_url: http://localhost:8000/v1\n", ""),
     "s.yaml:4:3: $.target: give exactly one of base_url (a running server) or sim (the embedded "
     "simulator)"),
    (("  requests: 4", "  requests: 4\nserver: {attach: true, log: x.log}"),
     "s.yaml:13:24: $.server.log: log only applies to a launched server (server.command)"),
    (("  requests: 4", "  requests: 4\nminimum_benchc_version: '99.0'"),
     "s.yaml:13:25: $.minimum_benchc_version: this spec needs benchc >= 99.0; this is 0.2.0 "
     "(pip install -U benchc)"),
    (("  requests: 4", "  requests: 4\nsmoke: {checks: [{prompt: x, expect: '('}]}"),
     "s.yaml:13:38: $.smoke.checks[0].expect: not a valid regular expression: missing ), unterminated "
     "subpattern at position 0"),
])
def test_custom_messages(edit, expected):
    old, new = edit
    text = BASE.replace(old, new) if new is not None else BASE
    if expected is None:
        spec.load_text(text, "s.yaml", env={})
        return
    assert problems(text) == [expected]


def test_every_error_is_reported_not_only_the_first():
    text = BASE.replace("concurrency: [1, 2]", "concurrency: [0, -2]").replace("model: m", "model: 5")
    assert problems(text) == [
        "s.yaml:5:10: $.target.model: expected a string, got 5",
        "s.yaml:11:19: $.load.sweep.concurrency[0]: 0 is less than the minimum of 1",
        "s.yaml:11:22: $.load.sweep.concurrency[1]: -2 is less than the minimum of 1",
    ]


def test_duplicate_keys_and_merge_keys():
    text = BASE + "load:\n  requests: 3\n"
    assert problems(text) == ["s.yaml:13:1: $.load: duplicate key 'load' (first given on line 9)"]
    merged = BASE.replace("target:\n", "x-common: &c {model: m}\ntarget:\n  <<: *c\n").replace(
        "  model: m\n", "", 1)
    # `x-common` is not a spec key, so this is an error -- but the merge itself resolved:
    assert problems(merged) == ["s.yaml:3:1: $.x-common: unknown key 'x-common'; allowed here: version, "
                                "name, description, minimum_benchc_version, target, server, smoke, "
                                "workload, load, matrix, slo, cost, output, run"]


def test_matrix_placeholders_are_typed_and_checked():
    text = BASE.replace("concurrency: [1, 2]", "concurrency: [1]") + (
        "server:\n  command: [serve, --tp, '${matrix.tp}']\nmatrix:\n  tp: [4, 8]\n"
        "  exclude: [{tp: 8}]\n")
    s = spec.load_text(text, "s.yaml", env={})
    assert s.data["matrix"]["tp"] == [4, 8]
    bad = text.replace("${matrix.tp}", "${matrix.tpp}")
    assert problems(bad) == ["s.yaml:14:26: $.server.command[2]: ${matrix.tpp}: no axis named 'tpp' "
                             "— did you mean 'tp'?"]
    everything = text.replace("exclude: [{tp: 8}]", "exclude: [{tp: 8}, {tp: 4}]")
    assert problems(everything) == ["s.yaml:17:12: $.matrix.exclude: exclude removes every combination"]


def test_problem_only_in_some_combinations_names_them():
    text = BASE.replace("name: t", "name: t\ndescription: n=${matrix.n}") + "matrix:\n  n: [2, -1]\n"
    assert problems(text) == ["s.yaml:3:14: $.description: ${matrix.n} is only substituted in target, "
                              "server and workload"]
    text = BASE.replace("input_tokens: 16", "input_tokens: '${matrix.n}'") + "matrix:\n  n: [2, -1]\n"
    assert problems(text) == [
        "s.yaml:8:28: $.workload.dataset.random.input_tokens: -1 is not a token length: a count (512, 1k), "
        "{mean, stdev} or {min, max} (with matrix n=-1)"]


def test_unreadable_file_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="cannot read spec"):
        spec.load(str(tmp_path / "missing.yaml"))


def test_empty_spec():
    assert problems("") == ["s.yaml:1:1: $: the spec is empty"]


INVALID = os.path.join(os.path.dirname(__file__), "specs", "invalid")


@pytest.mark.parametrize("name", sorted(f for f in os.listdir(INVALID) if f.endswith(".yaml")))
def test_invalid_specs_print_the_stored_errors(name, monkeypatch, capsys):
    """Acceptance: `benchc validate` on each invalid spec prints exactly the text stored beside it."""
    from benchc.cli import main

    monkeypatch.chdir(INVALID)
    monkeypatch.delenv("BENCHC_TEST_UNSET_KEY", raising=False)
    assert main(["validate", name]) == 2
    with open(os.path.join(INVALID, name[:-5] + ".expected")) as f:
        expected = f.read()
    assert capsys.readouterr().err == expected


def test_five_mistakes_give_five_errors_with_positions(monkeypatch, capsys):
    from benchc.cli import main

    monkeypatch.chdir(INVALID)
    monkeypatch.delenv("BENCHC_TEST_UNSET_KEY", raising=False)
    main(["validate", "five-mistakes.yaml"])
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(": ")[0] for line in lines] == [
        "five-mistakes.yaml:6:12", "five-mistakes.yaml:11:22", "five-mistakes.yaml:14:25",
        "five-mistakes.yaml:16:13", "five-mistakes.yaml:17:3"]
