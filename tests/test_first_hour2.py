"""Issue 45, the first hour (round 2): a run says what it measured (the server, not a simulator
the spec names), vLLM bench habits are understood or refused by name, and an interrupted or
capped point says what happened to its requests."""

import json
import os

import pytest

from benchc.cli import main
from benchc.errors import EXIT_POINT_FAILED
from benchc.results.document import read
from benchc.results.identity import result_label, target_of
from tests.conftest import REPO, transports, use_transport
from tests.simrun import Sim, write_spec

MINIMAX = os.path.join(REPO, "tests", "data", "result-v1-minimax.json")


def test_plan_takes_base_url_and_it_replaces_the_simulator(tmp_path, capsys):
    spec = write_spec(tmp_path)
    assert main(["plan", spec, "--base-url", "http://gpu-a:8000/v1"]) == 0
    target = json.loads(capsys.readouterr().out)["combinations"][0]["target"]
    assert (target["base_url"], target["sim"]) == ("http://gpu-a:8000/v1", None)


def test_plan_base_url_is_checked_as_run_checks_it(tmp_path, capsys):
    assert main(["plan", write_spec(tmp_path), "--base-url", "gpu-a:8000"]) == 2
    assert "--base-url" in capsys.readouterr().err


@pytest.mark.slow  # a run against the simulator as a process
def test_base_url_on_a_simulator_spec_measures_and_names_that_server(tmp_path, capsys):
    """The spec names target.sim; --base-url points the run at another server: no simulator is
    started, and the result, its label and the llm-d export name the server measured."""
    sim = Sim(tmp_path, "--preset", "instant", "--model", "MiniMaxAI/MiniMax-M2.5")
    try:
        spec = write_spec(tmp_path, sweep="    concurrency: [1]", extra="  requests: 2")
        assert main(["run", spec, "--base-url", sim.url, "--quiet"]) == 0
        served = len(sim.records())
    finally:
        sim.close()
    doc = read(str(tmp_path / "r.json"))
    assert served == 3  # the warmup's request and the point's two: all went to --base-url
    [t] = doc["target"]
    assert t["simulated"] is False and t["base_url"] == sim.url
    assert doc["plan"]["combinations"][0]["target"]["sim"] is None
    host = sim.url.split("//")[1].rstrip("/")
    assert target_of(doc).startswith(host) and "sim " not in result_label(doc, "r.json")
    capsys.readouterr()
    assert main(["export", str(tmp_path / "r.json"), "--format", "br0.2"]) == 0
    [report] = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    server = report["scenario"]["stack"][0]
    assert (server["native"]["config"]["base_url"], server["native"]["config"]["sim"]) == (sim.url, None)


def measured_against(tmp_path, api="chat", client_limited=False) -> str:
    """The MiniMax fixture as if measured against vLLM 0.32.0 at :8020 with a spec that named :8000."""
    doc = read(MINIMAX)
    for c in doc["plan"]["combinations"]:
        c["target"].update(sim=None, base_url="http://gpu-a:8000/v1", api=api)
    for t in doc["target"]:
        t.update(base_url="http://gpu-a:8020/v1", simulated=False,
                 server={"kind": "vllm", "version": "0.32.0", "source": "/version"})
    if client_limited:
        p = doc["points"][0]
        p["client"]["client_limited"] = True
        p["trust"] = {"trusted": False, "doubts": [{"check": "client_limited", "fails_strict": True,
                                                    "message": "the client moved ttft.p99 past its bound"}]}
    path = tmp_path / "measured.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_the_llmd_export_takes_its_provenance_from_the_run(tmp_path, capsys):
    assert main(["export", measured_against(tmp_path), "--format", "br0.2"]) == 0
    server = json.loads(capsys.readouterr().out.splitlines()[0])["scenario"]["stack"][0]
    assert (server["standardized"]["tool"], server["standardized"]["tool_version"]) == ("vllm", "0.32.0")
    assert server["native"]["config"]["base_url"] == "http://gpu-a:8020/v1"


@pytest.mark.parametrize(("api", "backend"), [("chat", "openai-chat"), ("completions", "openai"),
                                              ("responses", "openai-responses"), ("messages", None)])
def test_the_vllm_export_names_the_backend_of_the_api_measured(tmp_path, capsys, api, backend):
    assert main(["export", measured_against(tmp_path, api), "--format", "vllm"]) == 0
    first = json.loads(capsys.readouterr().out.splitlines()[0])
    assert (first["backend"], first["endpoint_type"]) == (backend, backend)


@pytest.mark.parametrize("fmt", ["br0.2", "vllm"])
def test_an_export_says_it_drops_a_points_doubts(tmp_path, capsys, fmt):
    assert main(["export", measured_against(tmp_path, client_limited=True), "--format", fmt]) == 0
    err = capsys.readouterr().err
    assert "has no field for benchc's doubts, left out: c=1: the client moved ttft.p99 past its bound" in err
    assert err.count("doubts, left out") == 1  # the other points are trusted


@pytest.mark.slow  # a run against the simulator as a process
def test_a_model_the_server_does_not_list_is_warned_naming_what_it_lists(tmp_path, capfd):
    sim = Sim(tmp_path, "--preset", "instant", "--model", "gemma-3-270m")
    try:
        spec = write_spec(tmp_path, sweep="    concurrency: [1]", extra="  requests: 2")
        main(["run", spec, "--base-url", sim.url, "--set", "target.model=my-model"])
    finally:
        sim.close()
    err = capfd.readouterr().err
    assert ("WARNING: the server's /v1/models does not list the model 'my-model'; it lists gemma-3-270m. "
            "The requests name 'my-model' and the result is labelled so") in err
    assert "--set target.model=gemma-3-270m" in err


def test_a_listed_model_or_an_unreadable_list_raises_no_warning():
    from benchc.run.server_identity import unlisted_model

    assert unlisted_model("m", {"data": [{"id": "m"}, {"id": "n"}]}) is None
    assert unlisted_model("m", {"status": 404}) is None and unlisted_model("m", {"data": []}) is None
    many = {"data": [{"id": f"m{i}"} for i in range(7)]}
    assert "it lists m0, m1, m2, m3, m4 and 2 more." in unlisted_model("x", many)


VLLM_HABITS = """\
version: 1
name: habits
target: {{base_url: 'http://127.0.0.1:9/v1', model: m}}
workload: {{dataset: {{random: {{input_tokens: 16, output_tokens: 4{random}}}}}}}
load: {{sweep: {{concurrency: [1, 2]}}, requests: 4{load}}}
"""


def habits(tmp_path, random="", load="") -> str:
    f = tmp_path / "habits.yaml"
    f.write_text(VLLM_HABITS.format(random=random, load=load))
    return str(f)


def test_a_random_datasets_num_prompts_is_refused_naming_load_requests(tmp_path, capsys):
    """It sized a pool only `prompts: shared` deals from, and was ignored otherwise."""
    path = habits(tmp_path, random=", num_prompts: 100")
    assert main(["validate", path]) == 2
    err = capsys.readouterr().err
    assert f"{path}:4:67: $.workload.dataset.random.num_prompts: num_prompts sizes the set of prompts" in err
    assert "The number of requests per point is load.requests (vLLM's --num-prompts" in err


def test_load_num_prompts_gets_the_benchc_name(tmp_path, capsys):
    path = habits(tmp_path, load=", num_prompts: 100")
    assert main(["validate", path]) == 2
    err = capsys.readouterr().err
    assert "$.load.num_prompts: unknown key 'num_prompts' — vLLM's name; benchc's is load.requests" in err


def _plan(capsys, *argv) -> dict:
    """The plan `benchc plan` prints, its steps' load fields flat on them (as plan versions 1-3)."""
    from benchc.plan.model import flat_step

    assert main(["plan", *argv]) == 0
    plan = json.loads(capsys.readouterr().out)
    plan["steps"] = [flat_step(s) for s in plan["steps"]]
    return plan


def test_vllm_flags_are_aliases_of_set(tmp_path, capsys):
    path = habits(tmp_path)
    plan = _plan(capsys, path, "--model", "gemma", "--num-prompts", "7", "--max-concurrency", "3")
    assert plan["combinations"][0]["target"]["model"] == "gemma"
    assert [(s["concurrency"], s["requests"]) for s in plan["steps"] if s["kind"] == "load"] == [(3, 7)]
    plan = _plan(capsys, path, "--request-rate", "2.5", "--max-concurrency", "3")
    [step] = [s for s in plan["steps"] if s["kind"] == "load"]
    assert (step["rate_rps"], step["max_concurrency"], step["concurrency"]) == (2.5, 3, None)
    # vLLM's inf: all at once, C in flight at most: a closed loop
    plan = _plan(capsys, path, "--request-rate", "inf", "--max-concurrency", "3")
    assert [s["concurrency"] for s in plan["steps"] if s["kind"] == "load"] == [3]
    # --set, given explicitly, wins over the alias
    plan = _plan(capsys, path, "--model", "gemma", "--set", "target.model=other")
    assert plan["combinations"][0]["target"]["model"] == "other"


def test_a_pinned_seed_is_unset_with_set_null(tmp_path, capsys):
    path = habits(tmp_path, random=", seed: 7")
    pinned = _plan(capsys, path)["combinations"][0]["workload"]
    unset = _plan(capsys, path, "--set", "workload.dataset.random.seed=null")["combinations"][0]["workload"]
    assert (pinned["seed_pinned"], unset["seed_pinned"]) == (True, False)
    assert main(["plan", path, "--set", "workload.seed=null"]) == 2
    assert ("--set workload.seed=null removes a key, and the spec has no $.workload.seed — vLLM's name; "
            "benchc's is workload.dataset.<kind>.seed") in capsys.readouterr().err


@pytest.mark.slow  # a run against the simulator as a process
def test_a_404_from_a_base_url_without_v1_hints_at_v1(tmp_path, capfd):
    sim = Sim(tmp_path, "--preset", "instant", "--model", "m")
    try:
        code = main(["run", habits(tmp_path), "--base-url", sim.url.removesuffix("/").removesuffix("/v1"),
                     "--out", str(tmp_path / "r.json")])
    finally:
        sim.close()
    err = capfd.readouterr().err
    assert code == 3
    assert "the server answered 404" in err
    assert ("the URL has no /v1: OpenAI-compatible servers serve the API under it, so give the base URL "
            "with /v1") in err


@pytest.mark.parametrize(("slo", "col", "message"), [
    ('tpot: "p50 > 100ms"', 9, "'p50 > 100ms': an SLO bounds tpot from above (it is met when tpot is small "
                               "enough); write 'p50 < ...', e.g. 'p99 < 500ms'"),
    ('error_rate: ">= 1%"', 15, "'>= 1%': an SLO bounds error_rate from above"),
    ('output_tok_s: "< 100"', 17, "'< 100': an SLO bounds output_tok_s from below (it is met when "
                                  "output_tok_s is high enough); write '> ...', e.g. '> 100'"),
])
def test_an_inverted_slo_is_refused_at_validate(tmp_path, capsys, slo, col, message):
    f = tmp_path / "inverted.yaml"
    f.write_text(VLLM_HABITS.format(random="", load="") + f"slo:\n  {slo}\n")
    assert main(["validate", str(f)]) == 2
    metric = slo.split(":")[0]
    assert f"{f}:7:{col}: $.slo.{metric}: {message}" in capsys.readouterr().err


def interrupted_point(http_failures: int = 0) -> dict:
    """A point Ctrl-C stopped: 3 requests cancelled in flight (error kind `cancelled`, no detail)."""
    with open(MINIMAX, encoding="utf-8") as f:
        p = json.load(f)["points"][0]
    errors = {"cancelled": 3, **({"http_status": http_failures} if http_failures else {})}
    examples = {"cancelled": None, **({"http_status": "500: boom"} if http_failures else {})}
    p["counts"].update(failed=3 + http_failures, errors=errors, error_examples=examples)
    p["complete"] = False
    p["trust"] = {"trusted": True, "doubts": []}
    return p


def test_an_interrupted_point_is_marked_partial_and_its_cancelled_requests_are_not_failures(capsys):
    from benchc.run.console import Console

    Console(quiet=False, live=False).point(interrupted_point())
    err = capsys.readouterr().err
    assert "None" not in err and "ERROR" not in err
    [row] = [x for x in err.splitlines() if x.startswith("c=1 ")]
    assert row.endswith(" !partial")
    assert ("NOTE: c=1: partial: the point's load was stopped early; 3 requests in flight cancelled when the "
            "run was interrupted (counted as `cancelled`, not as failed)") in err


def test_an_interrupted_points_real_failures_are_still_told(capsys):
    from benchc.run.console import Console

    Console(quiet=False, live=False).point(interrupted_point(http_failures=2))
    err = capsys.readouterr().err
    sent = interrupted_point()["counts"]["sent"]
    assert f"ERROR: c=1: 2 of {sent} requests failed; first error (http_status): 500: boom" in err
    assert "None" not in err


def test_the_doc_test_takes_a_missed_slo_for_a_run_that_ran(tmp_path):
    """A busy machine may miss the demo's latency SLO: the doc test must not fail for that, and
    must still fail for anything else."""
    import subprocess

    from tests.test_docs import slo_missed

    def done(code, err):
        return subprocess.CompletedProcess([], code, "", err)

    run = "benchc run specs/demo.yaml --out results/demo.json"
    missed = ("benchc: SLO not met:\n  c=1: tpot: p50 < 50ms (measured 50.2ms)\n"
              "result written to results/demo.json\n")
    assert slo_missed("sh", run, done(1, missed))
    assert not slo_missed("sh", run, done(3, missed))
    assert not slo_missed("sh", run, done(1, "benchc: other\n"))
    assert not slo_missed("sh", "benchc compare a.json b.json", done(1, missed))


def test_a_spec_added_to_specs_keeps_the_example_specs_test_green(tmp_path, monkeypatch, capsys):
    """The README invites adding one's own spec under specs/: no test may count that folder."""
    import shutil

    import tests.test_plan as test_plan

    specs = tmp_path / "specs"
    shutil.copytree(os.path.join(REPO, "specs"), specs)
    shutil.copy(specs / "my-server.yaml", specs / "mine.yaml")
    monkeypatch.setattr(test_plan, "REPO", str(tmp_path))
    test_plan.test_all_example_specs_validate(capsys)


def test_compare_of_two_models_names_both_and_warns_though_the_workload_is_one(tmp_path, capsys):
    base = read(MINIMAX)
    new = json.loads(json.dumps(base))
    for t in new["target"]:
        t["model"] = "gemma-3-270m"
    for c in new["plan"]["combinations"]:
        c["target"]["model"] = "gemma-3-270m"
    assert base["workload_hash"] == new["workload_hash"]
    paths = []
    for name, doc in (("a.json", base), ("b.json", new)):
        (tmp_path / name).write_text(json.dumps(doc))
        paths.append(str(tmp_path / name))
    assert main(["compare", *paths]) == 0
    model = base["target"][0]["model"]
    assert (f"the two runs measured different models (base: {model}; new: gemma-3-270m)"
            in capsys.readouterr().out)
    assert main(["compare", paths[0], paths[0]]) == 0
    assert "different models" not in capsys.readouterr().out


def _answer(best_fig: float, runner_fig: float, gpus: int = 1) -> dict:
    def cand(load, fig):
        return {"point": f"c={load}", "combination": 0, "matrix": {}, "load": f"c={load}", "gpus": gpus,
                "goodput_s_per_gpu": fig}
    relative = None if runner_fig == 0 else (best_fig - runner_fig) / runner_fig
    return {"slo": ["ttft: p99 < 2s", "tpot: p50 < 50ms"], "by": "goodput_s_per_gpu",
            "best": cand(8, best_fig), "runner_up": cand(4, runner_fig),
            "margin": {"relative": relative, "floor": 0.02, "beyond_noise": True, "method": "single runs"}}


def test_the_decision_never_says_lead_na_beyond_noise_nor_1_gpus():
    from benchc.results.decide import describe

    line = describe(_answer(2.0, 0.0))[1]
    assert "n/a" not in line and "beyond noise" not in line and "(1 GPUs" not in line
    assert line.endswith("runner-up c=4: 0 req/s per GPU; the runner-up has none")
    assert "(1 GPU)" in line
    assert "(2 GPUs)" in describe(_answer(2.0, 1.0, gpus=2))[1]


def test_slo_items_that_agree_are_told_once_not_as_copies_of_the_block():
    from benchc.results.decide import describe

    answer = _answer(2.0, 1.0)
    answer["per_slo"] = [{**_answer(2.0, 1.0), "slo": ["ttft: p99 < 2s"]},
                         {**_answer(2.0, 1.0), "slo": ["tpot: p50 < 50ms"]}]
    lines = describe(answer)
    assert sum("most goodput per GPU" in x for x in lines) == 1
    assert lines[-1] == "  each SLO item alone ([ttft: p99 < 2s], [tpot: p50 < 50ms]) gives the same answer"
    answer["per_slo"][1]["best"]["load"] = "c=2"  # an item with its own winner keeps its block
    assert sum("most goodput per GPU" in x for x in describe(answer)) == 2


def test_past_its_duration_the_progress_says_what_it_waits_for_not_0s_left():
    import io

    from benchc.plan.model import Step
    from benchc.plan.shapes import ClosedLoop
    from benchc.run.console import Progress
    from tests.test_progress import Clock, rec

    out, clock = io.StringIO(), Clock()
    p = Progress(Step(kind="load", combination=0, id="c=4", load=ClosedLoop(concurrency=4, duration_s=45.0)),
                 out, live=False, clock=clock)
    lines = []
    for t in (50.0, 60.0, 70.0):
        clock.now = 100.0 + t
        lines.append(p.text(rec(10), 4, clock.now))
    assert not any("0s left" in x for x in lines)
    assert lines[0].endswith("duration reached 5s ago: no new sends, the in-flight finishing "
                             "(load.graceful_stop caps it)")
    capped = Progress(Step(kind="load", combination=0, id="c=4",
                           load=ClosedLoop(concurrency=4, duration_s=45.0, graceful_stop_s=10.0)),
                      out, live=False, clock=clock)
    clock.now += 47.0
    assert capped.text(rec(10), 4, clock.now).endswith(
        "duration reached: no new sends, the in-flight cancelled in 8s (graceful_stop 10s)")


def test_graceful_stop_needs_a_duration(tmp_path, capsys):
    path = habits(tmp_path, load=", graceful_stop: 0s")
    assert main(["validate", path]) == 2
    assert "$.load.graceful_stop: graceful_stop applies past load.duration" in capsys.readouterr().err


@pytest.mark.slow  # a run against the simulator as a process
@pytest.mark.parametrize("path", [*transports(), "aiohttp"])
def test_a_hard_cap_at_the_duration_cancels_the_in_flight_and_counts_them_cancelled(tmp_path, capfd,
                                                                                    monkeypatch, path):
    """Requests of about 5 s each (400 tokens at the MiniMax preset's pace, which a busy machine
    only slows) in a 1 s point with graceful_stop 0s: both in flight at the duration are cancelled
    there, counted as cancelled (not failed, not completed), and the console and the result say
    which end the point used. With no request completed the point failed (exit 7), and says why."""
    args = ["--http", "aiohttp"] if path == "aiohttp" else []
    if path != "aiohttp":
        use_transport(monkeypatch, path)
    spec = write_spec(tmp_path, sweep="    concurrency: [2]", out=400,
                      extra="  duration: 1s\n  graceful_stop: 0s")
    assert main(["run", spec, *args]) == EXIT_POINT_FAILED
    doc = read(str(tmp_path / "r.json"))
    [p] = doc["points"]
    assert p["params"]["graceful_stop_s"] == 0.0 and p["params"]["duration_s"] == 1.0
    assert (p["counts"]["completed"], p["counts"]["failed"], p["counts"]["cancelled"]) == (0, 0, 2)
    err = capfd.readouterr().err
    assert ("NOTE: c=2: duration 1s with graceful_stop 0s: requests still in flight then were cancelled "
            "(2 cancelled, counted apart from errors)") in err
    assert "c=2: no request completed (0 failed, 2 cancelled on purpose)" in err


def test_a_point_that_ran_past_its_duration_says_its_requests_finished(capsys):
    from benchc.run.console import duration_line

    p = interrupted_point()
    p["params"].update(duration_s=45.0, graceful_stop_s=None)
    p["window"]["duration_s"] = 93.0
    assert duration_line(p) == ("duration 45s: no new sends past it, and the requests in flight finished: "
                                "the window ran 93.0s (load.graceful_stop: 0s cancels them at the duration "
                                "instead)")
    del p["params"]["graceful_stop_s"]  # a result from before: nothing said
    assert duration_line(p) is None


@pytest.mark.slow  # a run against the simulator as a process
def test_without_a_tokenizer_lengths_are_said_to_be_words_with_what_the_server_counted(tmp_path, capfd):
    spec = write_spec(tmp_path, sweep="    concurrency: [1]", extra="  requests: 2")
    assert main(["run", spec]) == 0
    err = capfd.readouterr().err
    assert ("lengths are in words, not tokens: without a tokenizer benchc counts a prompt's words (these "
            "prompts: 32.0 words on average)") in err
    assert "give target.tokenizer (the model's tokenizer.json, or its .gguf file)" in err
    doc = read(str(tmp_path / "r.json"))
    [p] = doc["points"]
    per = p["tokens"]["input"] / p["counts"]["completed"]
    assert f"NOTE: c=1: input: 32 words sent per request (no tokenizer); {per:,.1f} input tokens per " in err
    records = [json.loads(x) for x in (tmp_path / "r.requests.jsonl").read_text().splitlines()]
    assert records and all(r["input_unit"] == "words" and r["input_tokens"] == 32 for r in records)


def test_with_a_tokenizer_nothing_is_said_of_words():
    from types import SimpleNamespace

    from benchc.run.console import server_count_line, words_line

    assert words_line(SimpleNamespace(input_tokens={"method": "tokenizer", "mean": 32.0})) is None
    assert server_count_line({"counts": {"completed": 2}, "tokens": {"input": 70}}, None) is None


def test_the_llmd_export_of_a_word_counted_run_labels_the_words(tmp_path, capsys):
    """The fixture's prompts were 64 words (no tokenizer): the report's SequenceLength has no unit,
    so native.config says it, and the server's count is the requests' input_length."""
    from tests.test_export import validator

    doc = read(MINIMAX)
    p = doc["points"][0]
    p["tokens"]["input"] = 538 * p["counts"]["completed"]  # as a server counts 64 words' prompt
    path = tmp_path / "words.json"
    path.write_text(json.dumps(doc))
    assert main(["export", str(path), "--format", "br0.2"]) == 0
    first = json.loads(capsys.readouterr().out.splitlines()[0])
    assert first["scenario"]["load"]["native"]["config"]["input_unit"] == "words"
    requests = first["results"]["request_performance"]["aggregate"]["requests"]
    assert requests["input_length"] == {"units": "count", "mean": 538.0}
    assert list(validator("0.2").iter_errors(first)) == []


@pytest.mark.real
def test_a_simulator_spec_pointed_at_vllm_names_vllm_everywhere(tmp_path, capsys, vllm):
    """specs/demo.yaml (target.sim) with --base-url at the real vLLM and vLLM bench's flags: the
    result, its label and the llm-d export name vLLM and its version, at the URL measured."""
    out = tmp_path / "r.json"
    assert main(["run", os.path.join(REPO, "specs", "demo.yaml"), "--base-url", vllm.base_url,
                 "--model", vllm.model, "--num-prompts", "2", "--max-concurrency", "1",
                 "--set", "load.warmup.requests=0", "--set", "workload.dataset.random.seed=null",
                 "--out", str(out), "--quiet"]) == 0
    doc = read(str(out))
    [t] = doc["target"]
    assert (t["simulated"], t["server"]["kind"], t["server"]["version"]) == (False, "vllm", vllm.version)
    assert target_of(doc) == f"{vllm.base_url.split('//')[1]} (vllm {vllm.version})"
    assert doc["plan"]["combinations"][0]["workload"]["seed_pinned"] is False
    capsys.readouterr()
    assert main(["export", str(out), "--format", "br0.2"]) == 0
    server = json.loads(capsys.readouterr().out.splitlines()[0])["scenario"]["stack"][0]
    assert (server["standardized"]["tool"], server["standardized"]["tool_version"]) == ("vllm", vllm.version)
    assert server["native"]["config"]["base_url"] == vllm.base_url


def test_a_ratio_wanted_high_is_bounded_from_below():
    """cached_fraction (the share served from the prefix cache) is an SLO met when high."""
    from benchc.spec.thresholds import parse_slo

    assert parse_slo("cached_fraction", "> 50%").op == ">"
    with pytest.raises(ValueError, match="an SLO bounds cached_fraction from below"):
        parse_slo("cached_fraction", "< 50%")
    with pytest.raises(ValueError, match="an SLO bounds error_rate from above"):
        parse_slo("error_rate", "> 1%")
