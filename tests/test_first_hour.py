"""Issue 31, the first hour: a newcomer's failures are loud, figures carry their units, and
what a result measured is said."""

import asyncio
import copy
import datetime
import http.server
import json
import os
import threading

import aiohttp
import pytest

from benchc.cli import main
from benchc.errors import EXIT_POINT_FAILED, EXIT_RUN_ABORTED
from benchc.metrics._hdr import Histogram
from benchc.plan.compiler import compile_spec, draw_seed
from benchc.plan.model import Plan
from benchc.redact import redact_url
from benchc.results.api import Point
from benchc.results.document import read, validate_document
from benchc.results.identity import repeat_key
from benchc.results.report import summary_rows
from benchc.results.slo import evaluate_slo, failed_checks
from benchc.run.console import Console
from benchc.run.server_identity import identify
from benchc.spec.loader import load_text
from benchc.spec.thresholds import parse_threshold
from tests.conftest import REPO
from tests.simrun import Sim

MINIMAX = os.path.join(REPO, "tests", "data", "result-v1-minimax.json")


def a_point() -> dict:
    with open(MINIMAX, encoding="utf-8") as f:
        return copy.deepcopy(json.load(f)["points"][0])


def failed_point() -> dict:
    """A point whose every request failed, as a wrong model name makes one."""
    p = a_point()
    for block in p["latency"].values():
        for k in ("mean", "p50", "p99"):
            block[k] = None
    p["counts"].update(completed=0, failed=2, sent=2, errors={"http_status": 2},
                       error_examples={"http_status": "404: The model `foo` does not exist."})
    p["trust"] = {"trusted": True, "doubts": []}
    return p


def test_slo_checks_carry_their_unit_and_failure_lines_print_it():
    p = a_point()
    checks = [parse_threshold("ttft", "p99 < 1ms"), parse_threshold("error_rate", "> 5%"),
              parse_threshold("output_tok_s", "> 1000000")]
    p["slo"] = evaluate_slo(checks, Point.from_dict(p))
    assert [c["unit"] for c in p["slo"]["checks"]] == ["us", "fraction", "tok/s"]
    ttft, rate, tok = failed_checks([p])
    assert ttft == f"c=1: ttft: p99 < 1ms (measured {p['latency']['ttft_us']['p99'] / 1000:.1f}ms)"
    assert rate == "c=1: error_rate: > 5% (measured 0.00%)"
    assert tok == f"c=1: output_tok_s: > 1000000 (measured {p['throughput']['output_tok_s']:,.1f} tok/s)"


def test_a_check_on_a_point_that_measured_nothing_says_why_not_none():
    p = failed_point()
    p["slo"] = evaluate_slo([parse_threshold("ttft", "p99 < 500ms")], Point.from_dict(p))
    assert failed_checks([p]) == ["c=1: ttft: p99 < 500ms (measured nothing: none of 2 requests completed)"]


def test_the_console_shows_the_first_error_of_a_failed_point(capsys):
    Console(quiet=False, live=False).point(failed_point())
    err = capsys.readouterr().err
    assert ("ERROR: c=1: 2 of 2 requests failed; first error (http_status): "
            "404: The model `foo` does not exist.") in err


def _run_failing(tmp_path, model: str, verbose: list, *sim_args) -> int:
    """`benchc run` of two requests against the simulator; the exit code."""
    sim = Sim(tmp_path, *sim_args)
    try:
        spec = tmp_path / "s.yaml"
        spec.write_text("version: 1\nname: t\n"
                        f"target: {{base_url: 'http://127.0.0.1:9/v1', model: {model}}}\n"
                        "workload: {dataset: {random: {input_tokens: 8, output_tokens: 4}}}\n"
                        "load: {warmup: {requests: 0}, sweep: {concurrency: [1]}, requests: 2}\n"
                        "slo: {ttft: 'p99 < 500ms'}\n")
        code = main(["run", str(spec), "--base-url", sim.url, "--out", str(tmp_path / "r.json"), *verbose])
    finally:
        sim.close()
    return code


@pytest.mark.slow  # a run against the simulator as a process
@pytest.mark.parametrize("verbose", [[], ["-v"]])
def test_a_wrong_model_name_is_loud_on_the_console(tmp_path, capfd, verbose):
    """A 404 on measured requests stops the run (exit 3) with the server's answer, which names
    the model it does not have; never exit 0 with `errors 2` and nothing else."""
    code = _run_failing(tmp_path, "foo", verbose)
    err = capfd.readouterr().err
    assert code == EXIT_RUN_ABORTED
    assert "answered 404" in err and "The model `foo` does not exist." in err
    assert "None" not in err


@pytest.mark.slow  # a run against the simulator as a process
@pytest.mark.parametrize("verbose", [[], ["-v"]])
def test_a_point_whose_requests_all_failed_shows_the_first_error(tmp_path, capfd, verbose):
    """Every request answered 500: the point's row is followed by its first error (scrubbed),
    and the run exits 7 (a failed point) after writing the result."""
    code = _run_failing(tmp_path, "MiniMaxAI/MiniMax-M2.5", verbose, "--fault", "http_500:1")
    err = capfd.readouterr().err
    assert code == EXIT_POINT_FAILED
    assert "c=1: 2 of 2 requests failed; first error (http_status): 500: " in err
    assert "Internal server error" in err and "no request completed" in err
    assert "None" not in err
    assert read(str(tmp_path / "r.json"))["points"][0]["counts"]["failed"] == 2


FRESH_SPEC = """\
version: 1
name: fresh
target: {{base_url: 'http://127.0.0.1:9/v1', model: m}}
workload: {{dataset: {{random: {{input_tokens: 16, output_tokens: 4{seed}}}}}}}
load: {{sweep: {{concurrency: [1, 2]}}, requests: 4}}
"""


def compiled(run_seed, seed=""):
    return compile_spec(load_text(FRESH_SPEC.format(seed=seed)), run_seed=run_seed)


def test_runs_of_a_spec_without_a_seed_draw_fresh_prompts_and_stay_one_plan():
    a, b = compiled(draw_seed()), compiled(draw_seed())
    wa, wb = a.combinations[0].workload, b.combinations[0].workload
    assert not wa.seed_pinned and wa.params["seed"] != wb.params["seed"]
    assert wa.prompts_sha256 != wb.prompts_sha256  # two runs never share prompts by accident
    assert [s.prompts_sha256 for s in a.load_steps()] != [s.prompts_sha256 for s in b.load_steps()]
    # ... and are runs of one plan: repeats, merges and compare's workload check see one
    assert (a.plan_hash, a.workload_hash) == (b.plan_hash, b.workload_hash)
    # the seed a run drew is in its plan, and the plan rebuilds the same prompts from it
    again = Plan.from_dict(json.loads(a.to_json()))
    assert again.combinations[0].workload == wa and again.with_hashes().plan_hash == a.plan_hash
    pinned = compiled(None, seed=f", seed: {wa.params['seed']}")
    assert pinned.combinations[0].workload.prompts_sha256 == wa.prompts_sha256


def test_a_spec_that_pins_its_seed_keeps_it():
    a, b = compiled(7, seed=", seed: 0"), compiled(8, seed=", seed: 0")
    assert a.combinations[0].workload.params["seed"] == 0 == b.combinations[0].workload.params["seed"]
    assert a.combinations[0].workload.seed_pinned
    assert a.combinations[0].workload.prompts_sha256 == b.combinations[0].workload.prompts_sha256
    assert a.to_json() == b.to_json()
    assert compiled(None).plan_hash != a.plan_hash  # a pinned seed pins the prompts: another plan


def test_plan_and_validate_compile_with_seed_0_and_say_it_is_drawn_per_run():
    plan = compiled(None)
    assert plan.combinations[0].workload.params["seed"] == 0 and not plan.combinations[0].workload.seed_pinned


@pytest.mark.slow  # two runs of the embedded simulator
def test_each_run_records_the_seed_it_drew(tmp_path, capfd):
    spec = tmp_path / "s.yaml"
    text = FRESH_SPEC.format(seed="")
    spec.write_text(text.replace("base_url: 'http://127.0.0.1:9/v1'", "sim: {preset: instant}"))
    seeds = []
    for name in ("a.json", "b.json"):
        assert main(["run", str(spec), "--out", str(tmp_path / name)]) == 0
        doc = read(str(tmp_path / name))
        w = doc["plan"]["combinations"][0]["workload"]
        assert w["seed_pinned"] is False
        seeds.append(w["params"]["seed"])
        err = capfd.readouterr().err
        assert (f"prompts: seed {seeds[-1]} drawn for this run (fresh prompts; "
                f"--set workload.dataset.random.seed={seeds[-1]} sends them again)") in err
    assert seeds[0] != seeds[1]


class KindServer:
    """A loopback HTTP server answering GET paths with fixed JSON (404 elsewhere), in a thread."""

    def __init__(self, answers: dict[str, dict]):
        answers_ = answers

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                body = json.dumps(answers_[self.path]).encode() if self.path in answers_ else b"{}"
                self.send_response(200 if self.path in answers_ else 404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.root = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


async def _identify(root):
    async with aiohttp.ClientSession() as s:
        return await identify(s, root, {})


@pytest.mark.parametrize("answers, expected", [
    ({"/version": {"version": "0.32.0"}}, {"kind": "vllm", "version": "0.32.0", "source": "/version"}),
    ({"/get_server_info": {"version": "0.4.6", "tp_size": 1}},
     {"kind": "sglang", "version": "0.4.6", "source": "/get_server_info"}),
    ({"/props": {"build_info": "b5000-abc", "default_generation_settings": {}}},
     {"kind": "llama.cpp", "version": "b5000-abc", "source": "/props"}),
    ({"/info": {"version": "3.0.1", "model_id": "m"}},
     {"kind": "tgi", "version": "3.0.1", "source": "/info"}),
    ({}, {"kind": None, "version": None, "source": None}),
])
def test_the_server_kind_and_version_come_from_what_the_server_offers(answers, expected):
    srv = KindServer(answers)
    try:
        assert asyncio.run(_identify(srv.root)) == expected
    finally:
        srv.close()


def against(doc: dict, url: str, kind: str = "vllm") -> dict:
    """`doc` as if measured against the server at `url` (not the simulator)."""
    d = copy.deepcopy(doc)
    for c in d["plan"]["combinations"]:
        c["target"]["sim"] = None
    for t in d["target"]:
        t.update(base_url=url, simulated=False, server={"kind": kind, "version": "1.0", "source": "/version"})
    return d


def test_runs_of_one_plan_against_two_servers_are_two_series_never_averaged():
    from benchc.results.report import collect

    minimax = read(MINIMAX)
    a, b = against(minimax, "http://gpu-a:8000/v1"), against(minimax, "http://gpu-b:8000/v1", "sglang")
    assert a["plan_hash"] == b["plan_hash"]  # the plan hash leaves the URL out: one spec, any server
    assert repeat_key(a) != repeat_key(b)
    series = collect([a, b, copy.deepcopy(a)])
    assert sorted(series) == ["fixture / fixture-model (gpu-a:8000/v1 (vllm 1.0))",
                              "fixture / fixture-model (gpu-b:8000/v1 (sglang 1.0))"]
    runs = {label: [len(v) for v in by_x.values()] for label, by_x in series.items()}
    assert sorted(runs.values()) == [[1, 1, 1], [2, 2, 2]]  # a and its copy are repeats; b stands alone


def test_compare_and_report_name_each_result_by_file_and_target(tmp_path, capsys):
    minimax = read(MINIMAX)
    paths = []
    for name, url in (("before.json", "http://gpu-a:8000/v1"), ("after.json", "http://user:pw@gpu-b:8000/v1")):
        doc = against(minimax, url)
        doc["target"][0]["base_url"] = redact_url(url)  # as a run writes it
        (tmp_path / name).write_text(json.dumps(doc))
        paths.append(str(tmp_path / name))
    assert main(["compare", *paths]) == 0
    out = capsys.readouterr().out
    assert "base: before.json: gpu-a:8000/v1 (vllm 1.0)" in out
    assert "new:  after.json: gpu-b:8000/v1 (vllm 1.0)" in out and "pw" not in out
    rows = summary_rows([read(p) for p in paths], paths)
    assert [r[0] for r in rows][::3] == ["before.json: gpu-a:8000/v1 (vllm 1.0)",
                                         "after.json: gpu-b:8000/v1 (vllm 1.0)"]


def test_the_spectrum_of_a_repeated_point_pools_every_run():
    from benchc.results.api import from_document
    from benchc.results.report import _pooled

    p = from_document(read(MINIMAX)).points[0]
    one = Histogram.decode(p.ttft.hdr)
    assert _pooled([p, p, p], "ttft").total_count == 3 * one.total_count


SHARD_A = os.path.join(REPO, "tests", "data", "result-v1-shard-a.json")
SHARD_B = os.path.join(REPO, "tests", "data", "result-v1-shard-b.json")


def run_after(path: str, out, later_s: int = 60) -> str:
    """The shard at `path` as a run that started `later_s` after it (another run of the plan)."""
    d = read(path)
    for p in d["points"]:
        p["window"]["start_ns"] += later_s * 10**9
        p["window"]["end_ns"] += later_s * 10**9
    created = datetime.datetime.fromisoformat(d["created"].replace("Z", "+00:00"))
    d["created"] = (created + datetime.timedelta(seconds=later_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
    out.write_text(json.dumps(d))
    return str(out)


def test_merge_refuses_complete_runs_one_after_the_other_unless_repeats(tmp_path, capsys):
    later = run_after(SHARD_B, tmp_path / "later.json")
    out = tmp_path / "m.json"
    assert main(["merge", SHARD_A, later, "-o", str(out)]) == 2 and not out.exists()
    err = capsys.readouterr().err
    assert f"{SHARD_A} and {later} measured c=1 one after the other" in err and "--repeats" in err
    # shards that ran side by side still merge
    assert main(["merge", SHARD_A, SHARD_B, "-o", str(tmp_path / "shards.json")]) == 0
    capsys.readouterr()
    # --repeats: each run a repeat of every point, figures kept, never summed into one
    assert main(["merge", SHARD_A, later, "--repeats", "-o", str(out)]) == 0
    doc, a, b = read(str(out)), read(SHARD_A), read(later)
    validate_document(doc)
    assert [p["id"] for p in doc["points"]] == ["c=1#1", "c=1#2", "c=2#1", "c=2#2", "c=4#1", "c=4#2"]
    assert [p["throughput"]["output_tok_s"] for p in doc["points"]] == [
        p["throughput"]["output_tok_s"] for pair in zip(a["points"], b["points"], strict=True) for p in pair]
    assert [r["point"] for r in doc["repeats"]] == ["c=1", "c=2", "c=4"]
    assert doc["repeats"][0]["metrics"]["output_tok_s"]["values"] == [
        a["points"][0]["throughput"]["output_tok_s"], b["points"][0]["throughput"]["output_tok_s"]]


def test_merge_repeats_refuses_runs_against_two_servers(tmp_path, capsys):
    first = tmp_path / "a.json"
    first.write_text(json.dumps(against(read(SHARD_A), "http://gpu-a:8000/v1")))
    other = tmp_path / "b.json"
    other.write_text(json.dumps(against(read(run_after(SHARD_B, tmp_path / "l.json")), "http://gpu-b:8000/v1")))
    assert main(["merge", str(first), str(other), "--repeats", "-o", str(tmp_path / "m.json")]) == 2
    assert "measured different targets" in capsys.readouterr().err


def test_the_console_says_what_its_columns_count(capsys):
    Console(quiet=False, live=False).point(a_point() | {"trust": {"trusted": True, "doubts": []}})
    header, legend, row = capsys.readouterr().err.splitlines()[:3]
    assert header.split()[:4] == ["point", "reqs", "out", "tok/s"]
    assert "reqs: requests completed" in legend and "output_tok_s, not steady_output_tok_s" in legend


def test_the_result_schema_says_what_the_steady_figure_counts():
    from benchc.spec.schemas import load_schema

    props = load_schema("result-v1")["$defs"]["point"]["properties"]["throughput"]["properties"]
    steady = props["steady_output_tok_s"]["description"]
    assert "completed while the in-flight count stood at its target" in steady
    assert "window" in props["output_tok_s"]["description"]


def test_sim_help_has_its_own_verbose_text(capsys):
    for verb in ("sim", "run"):
        with pytest.raises(SystemExit):
            main([verb, "--help"])
    sim_help, run_help = capsys.readouterr().out.split("usage: benchc run", 1)
    assert "what the simulator does" in " ".join(sim_help.split())
    assert "what the simulator does" not in " ".join(run_help.split())


def slower(point: dict, metric: str, factor: float) -> None:
    """The point's `metric` latencies, every sample times `factor` (summary and histogram)."""
    from benchc.metrics.latency import new_histogram, summarize

    h, scaled = Histogram.decode(point["latency"][f"{metric}_us"]["hdr"]), new_histogram()
    for value, count in h.nonzero():
        scaled.record(round(value * factor), count)
    point["latency"][f"{metric}_us"] = summarize(scaled)


def test_compare_judges_no_percentile_from_too_few_samples_and_no_change_below_the_floor(capsys):
    from benchc.results.compare import compare_docs

    base = read(MINIMAX)
    new = copy.deepcopy(base)
    for p in new["points"]:
        slower(p, "ttft", 1.15)  # 8 requests a point: p99 is their largest, p50 has 4 a side
        slower(p, "itl", 1.01)  # 248 gaps: tight intervals around a 1% change
    row = compare_docs(base, new)["points"][0]["metrics"]
    assert row["ttft.p99"]["significant"] == "n/a" and row["ttft.p50"]["significant"] == "n/a"
    assert row["itl.p50"]["change"] > 0.005 and row["itl.p50"]["significant"] == "no"  # under the 2% floor
    # the noise floor says so where the table is explained
    assert "n/a with fewer than 10 samples" in compare_docs(base, new)["noise_method"]


def test_a_gate_never_fires_on_a_change_the_table_calls_noise(tmp_path, capsys):
    base = read(MINIMAX)
    new = copy.deepcopy(base)
    for p in new["points"]:
        slower(p, "itl", 1.01)
    paths = [tmp_path / "base.json", tmp_path / "new.json"]
    for path, doc in zip(paths, (base, new), strict=True):
        path.write_text(json.dumps(doc))
    assert main(["compare", *map(str, paths), "--fail-on", "itl.p50 > +0.5%"]) == 0  # the table: noise
    for p in new["points"]:
        slower(p, "itl", 1.05)
    paths[1].write_text(json.dumps(new))
    assert main(["compare", *map(str, paths), "--fail-on", "itl.p50 > +0.5%"]) == 1  # beyond noise: fires
    assert "itl.p50 > +0.5%" in capsys.readouterr().err


def test_a_client_limited_side_is_not_judged_and_its_gate_is_said_not_breached(tmp_path, capsys):
    base = read(MINIMAX)
    new = copy.deepcopy(base)
    for p in new["points"]:
        slower(p, "itl", 1.3)  # what a late client does to ITL p50 on a loaded machine
        p["client"]["client_limited"] = True
    paths = [tmp_path / "base.json", tmp_path / "new.json"]
    for path, doc in zip(paths, (base, new), strict=True):
        path.write_text(json.dumps(doc))
    assert main(["compare", *map(str, paths), "--fail-on", "itl.p50 > +10%", "--format", "json"]) == 0
    captured = capsys.readouterr()
    row = json.loads(captured.out)["points"][0]
    assert row["client_limited"] == ["new"] and row["metrics"]["itl.p50"]["significant"] == "n/a"
    assert "NOTE: c=1: itl.p50 > +10%: not judged (+30.0%, beyond noise: n/a)" in captured.err
