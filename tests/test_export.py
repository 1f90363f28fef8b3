"""`benchc export` on results of real simulator runs: llm-d Benchmark Reports that llm-d's own
JSON schemas accept, vLLM bench-serve JSON with vLLM's key set and benchc's own figures, and
output files that are never overwritten silently."""

import datetime
import json
import os

import jsonschema
import pytest

from benchc.cli import main
from benchc.metrics._hdr import Histogram
from benchc.plan.model import flat_step
from benchc.results import br, vllm
from benchc.results.document import read

LLMD = os.path.join(os.path.dirname(__file__), "data", "llmd")
SCHEMAS = {"0.2": "br_v0_2_json_schema.json", "0.2.1": "br_v0_2_1_json_schema.json"}

SPEC = """\
version: 1
name: export-{shape}
target:
  sim: {{preset: minimax-m2.5-tp4{sim}}}
  model: sim-model
workload:
  dataset:
    {dataset}
load:
  warmup: {{requests: 1}}
  sweep:
{sweep}
{stop}output:
  path: unused.json
  requests: true
"""

# A Mooncake trace of 6 requests under one shared block (block_size 16), some arriving together.
MOONCAKE = "".join(json.dumps({"timestamp": t, "input_length": n, "output_length": o, "hash_ids": ids}) + "\n"
                   for t, n, o, ids in [(0, 40, 4, [0, 1, 2]), (0, 20, 3, [0, 3]), (15, 33, 5, [0, 1, 4]),
                                        (40, 17, 2, [0, 5]), (41, 60, 4, [0, 1, 2, 6]), (90, 8, 3, [7])])


def _random(isl, osl, prefix):
    return f"random: {{input_tokens: {isl}, output_tokens: {osl}, prefix_tokens: {prefix}}}"


# The result shapes every exporter must handle. A new kind of point gets a line here, and every
# test below runs on it.
SHAPES = {
    "closed": dict(sweep="    concurrency: [2]", stop="  requests: 6\n", dataset=_random(24, 4, 0)),
    "open": dict(sweep="    rate: [40]\n    arrival: poisson", stop="  requests: 6\n",
                 dataset=_random(24, 4, 0)),
    "multi": dict(sweep="    concurrency: [1, 3]", stop="  requests: 4\n",
                  dataset=_random("{min: 8, max: 16}", "{mean: 4, stdev: 1}", 8)),
    # a replayed trace: open loop on the trace's own times (every point sends the trace once)
    "trace": dict(sweep="    speedup: [2]", stop="",
                  dataset="trace: {path: trace.jsonl, format: mooncake, block_size: 16}",
                  files={"trace.jsonl": MOONCAKE}),
    # a reasoning model: reasoning_content before the answer, the point's reasoning block
    "reasoning": dict(sweep="    concurrency: [2]", stop="  requests: 4\n", dataset=_random(24, 6, 0),
                      sim=", reasoning_tokens: 3"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """shape -> (path, document) of a short `benchc run` against the simulator, run once each."""
    done = {}

    def get(shape):
        if shape not in done:
            d = tmp_path_factory.mktemp(shape)
            spec = d / "spec.yaml"
            config = {"sim": "", **SHAPES[shape]}
            for name, content in config.pop("files", {}).items():
                (d / name).write_text(content)
            spec.write_text(SPEC.format(shape=shape, **config))
            out = d / "result.json"
            assert main(["run", str(spec), "--out", str(out), "--quiet"]) == 0
            done[shape] = str(out), read(str(out))
        return done[shape]

    return get


@pytest.fixture(params=list(SHAPES))
def result(request, runs):
    return runs(request.param)


def text(path):
    with open(path) as f:
        return f.read()


def export(capsys, path, fmt):
    capsys.readouterr()  # what came before (the runs fixture's `benchc run`, when this test ran it)
    assert main(["export", path, "--format", fmt]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


# --------------------------------------------------------------------------- Benchmark Reports

# Which units llm-d's models accept for each Statistics field (the check_units validators of
# schema_v0_2.py; a JSON schema only knows the union of all units).
TIME, GEN_LATENCY, QUANTITY = {"ms", "s"}, {"ms/token", "s/token"}, {"count", "pixels"}
PORTION, MEMORY = {"percent", "fraction"}, {"bytes", "MB", "GB", "TB", "MiB", "GiB", "TiB"}
UNITS = {"time_to_first_token": TIME, "time_per_output_token": GEN_LATENCY,
         "inter_token_latency": GEN_LATENCY, "request_latency": TIME, "input_length": QUANTITY,
         "output_length": QUANTITY, "input_token_rate": {"tokens/s"}, "output_token_rate": {"tokens/s"},
         "total_token_rate": {"tokens/s"},
         "request_rate": {"queries/s"}, "kv_cache_usage": PORTION, "cache_hit_rate": PORTION,
         "gpu_utilization": PORTION, "cpu_utilization": PORTION, "gpu_memory_usage": MEMORY,
         "power_consumption": {"Watts"}, "running_requests": QUANTITY, "waiting_requests": QUANTITY}


def validator(version):
    with open(os.path.join(LLMD, SCHEMAS[version])) as f:
        schema = json.load(f)
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    # the date-time check is silently skipped without rfc3339-validator: make sure it runs
    assert not checker.conforms("2026-11-29 18:18", "date-time")
    return jsonschema.Draft202012Validator(schema, format_checker=checker)


def statistics_blocks(node, name=None):
    if isinstance(node, dict):
        if "units" in node and "mean" in node:
            yield name, node
        for k, v in node.items():
            yield from statistics_blocks(v, k)
    elif isinstance(node, list):
        for v in node:
            yield from statistics_blocks(v, name)


def check_valid(reports, version):
    v = validator(version)
    for r in reports:
        errors = sorted(v.iter_errors(r), key=lambda e: list(e.absolute_path))
        assert not errors, [f"{list(e.absolute_path)}: {e.message}" for e in errors[:5]]
        for name, block in statistics_blocks(r["results"]):
            assert block["units"] in UNITS[name], (name, block["units"])


@pytest.mark.slow  # runs for each kind of result
@pytest.mark.parametrize("version", br.VERSIONS)
def test_every_report_validates_against_llmd_schema(result, version, capsys):
    path, doc = result
    reports = export(capsys, path, f"br{version}")
    assert len(reports) == len(doc["points"]) and {r["version"] for r in reports} == {version}
    check_valid(reports, version)


@pytest.mark.slow  # runs for each kind of result
def test_reports_carry_the_points_own_figures(result, capsys):
    path, doc = result
    reports = export(capsys, path, "br0.2")
    for i, (r, p) in enumerate(zip(reports, doc["points"], strict=True)):
        agg = r["results"]["request_performance"]["aggregate"]
        req = agg["requests"]
        assert (req["total"], req["failures"], req["incomplete"]) == (p["counts"]["sent"], 0, 0)
        assert req["output_length"]["mean"] == p["tokens"]["output"] / p["counts"]["completed"]
        assert req["input_length"]["mean"] == p["tokens"]["input"] / p["counts"]["completed"]
        ttft = agg["latency"]["time_to_first_token"]
        h = Histogram.decode(p["latency"]["ttft_us"]["hdr"])
        assert ttft["p99"] == h.value_at_percentile(99) / 1000 == p["latency"]["ttft_us"]["p99"] / 1000
        assert ttft["mean"] == p["latency"]["ttft_us"]["mean"] / 1000 and ttft["units"] == "ms"
        assert agg["throughput"]["output_token_rate"]["mean"] == p["throughput"]["output_tok_s"]
        load = r["scenario"]["load"]["standardized"]
        assert load["stage"] == i and load["source"] == "random"
        assert load.get("concurrency") == p["params"]["concurrency"]
        assert load.get("rate_qps") == p["params"]["rate_rps"]
        duration = r["run"]["time"]["duration"]
        assert duration.startswith("PT") and float(duration[2:-1]) == p["window"]["duration_s"]


def test_report_times_keep_the_windows_offsets(result, capsys):
    """Start and end from the monotonic windows, anchored at `created` (benchc/results/clock.py):
    each report spans its window, and the points' spacing is the windows' spacing."""
    path, doc = result
    reports = export(capsys, path, "br0.2.1")
    parse = datetime.datetime.fromisoformat
    created = parse(doc["created"].replace("Z", "+00:00"))
    ms = datetime.timedelta(milliseconds=1)
    last = max(p["window"]["end_ns"] for p in doc["points"])
    first_start = parse(reports[0]["run"]["time"]["start"])
    for r, p in zip(reports, doc["points"], strict=True):
        start, end = parse(r["run"]["time"]["start"]), parse(r["run"]["time"]["end"])
        # times are written to the millisecond: each of start and end is within 1 ms
        assert abs((end - start).total_seconds() - p["window"]["duration_s"]) <= 0.002
        before_created = datetime.timedelta(microseconds=(last - p["window"]["end_ns"]) / 1000)
        assert abs(end - (created - before_created)) < 2 * ms
        offset = (p["window"]["start_ns"] - doc["points"][0]["window"]["start_ns"]) / 1e9
        assert abs((start - first_start).total_seconds() - offset) <= 0.003
    assert parse(reports[-1]["run"]["time"]["end"]) == created  # the last window ends at `created`


def test_report_ids_are_stable_per_result_and_distinct_per_point(result, capsys):
    path, doc = result
    a, b = export(capsys, path, "br0.2"), export(capsys, path, "br0.2")
    assert [r["run"]["uid"] for r in a] == [r["run"]["uid"] for r in b]
    assert len({r["run"]["uid"] for r in a}) == len(a) and len({r["run"]["eid"] for r in a}) == 1


def test_prefix_and_lengths_describe_the_workload(runs, capsys):
    """The multi-point shape: uniform inputs behind an 8-token prefix, gaussian outputs pinned by
    ignore_eos; the min/max are those of the prompts the plan built."""
    path, doc = runs("multi")
    std = export(capsys, path, "br0.2")[0]["scenario"]["load"]["standardized"]
    w = doc["plan"]["combinations"][0]["workload"]
    assert std["prefix"]["prefix_len"] == {"distribution": "fixed", "value": 8}
    assert std["input_seq_len"] == {"distribution": "uniform", "value": 20.0,
                                    "min": w["input_tokens"]["min"], "max": w["input_tokens"]["max"]}
    assert 16 <= std["input_seq_len"]["min"] <= std["input_seq_len"]["max"] <= 24
    assert std["output_seq_len"]["distribution"] == "gaussian" and std["output_seq_len"]["std_dev"] == 1.0


def test_server_and_gpu_telemetry_land_in_observability():
    """The telemetry blocks as benchc's own telemetry code builds them (prefix-cache counters from
    /metrics text, GPU samples as nvidia-smi's rows), exported into 0.2/0.2.1 observability."""
    from benchc.run.telemetry import GpuSampler, parse_prometheus, server_summary

    doc = read(os.path.join(os.path.dirname(__file__), "data", "result-v1-minimax.json"))
    before = parse_prometheus("vllm:prefix_cache_queries_total 1000\nvllm:prefix_cache_hits_total 100\n"
                              "vllm:generation_tokens_total 5\n")
    after = parse_prometheus("vllm:prefix_cache_queries_total 1512\nvllm:prefix_cache_hits_total 356\n"
                             "vllm:generation_tokens_total 261\n")
    during = [{"running": 1.0, "waiting": 0.0, "kv_cache_usage": 0.25},
              {"running": 3.0, "waiting": 2.0, "kv_cache_usage": 0.75}]
    gpu = GpuSampler()
    gpu.names = {"0": "H200", "1": "H200"}
    gpu.samples = {"0": [(1000.0, 50.0, 300.0, 143771.0), (3000.0, 70.0, 500.0, 143771.0)],
                   "1": [(2000.0, 10.0, 100.0, 143771.0)]}
    point = doc["points"][0]
    point["telemetry"] = {"server": server_summary(before, after, during, 256),
                          "gpu": gpu.summary(point["window"]["duration_s"], 256),
                          "host": {"available": True, "busy_fraction": 0.5}}
    for version in br.VERSIONS:
        reports = br.to_reports(doc, version)
        check_valid(reports, version)
        components = reports[0]["results"]["observability"]["components"]
        obs = {c["component_label"]: c["aggregate"] for c in components}
        assert obs["server"]["cache_hit_rate"] == {"units": "fraction", "mean": 0.5}  # 256 of 512
        assert obs["server"]["running_requests"] == {"units": "count", "mean": 2.0, "max": 3.0}
        assert obs["server"]["kv_cache_usage"] == {"units": "fraction", "mean": 0.5, "max": 0.75}
        assert obs["benchc-host"]["gpu_utilization"] == {"units": "percent", "mean": 35.0, "max": 70.0}
        assert obs["benchc-host"]["gpu_memory_usage"] == {"units": "MiB", "mean": 4000.0}
        assert obs["benchc-host"]["power_consumption"] == {"units": "Watts", "mean": 500.0}
        assert obs["benchc-host"]["cpu_utilization"] == {"units": "fraction", "mean": 0.5}
        labels = {c["metadata"]["label"] for c in reports[0]["scenario"]["stack"]}
        assert labels == set(obs)  # every observed component is one of the stack's


def test_cancelled_requests_are_incomplete_not_failures():
    doc = read(os.path.join(os.path.dirname(__file__), "data", "result-v1-minimax.json"))
    counts = doc["points"][0]["counts"]
    counts.update(sent=10, completed=6, failed=4, errors={"http": 1, "cancelled": 3})
    req = br.to_reports(doc, "0.2")[0]["results"]["request_performance"]["aggregate"]["requests"]
    assert (req["total"], req["failures"], req["incomplete"]) == (10, 1, 3)


# --------------------------------------------------------------------------- vLLM

# The keys `vllm bench serve --save-result --percentile-metrics ttft,tpot,itl,e2el` writes in
# vLLM 0.33.0 (vllm/benchmarks/serve.py of the 0.33.0 wheel, commit g4ba787ec9): main_async's
# settings (date ... max_concurrency), benchmark()'s result dict less the lists main_async
# deletes without --save-detailed (input_lens, output_lens, start_times, ttfts, itls,
# generated_texts, errors), and process_one_metric's mean/median/std/p99 per selected metric.
VLLM_0_33_0_KEYS = [
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts", "request_rate",
    "burstiness", "max_concurrency",
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
    "request_goodput", "output_throughput", "total_token_throughput", "latencies", "queue_times",
    "max_output_tokens_per_s", "max_concurrent_requests", "rtfx",
    "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms",
    "mean_tpot_ms", "median_tpot_ms", "std_tpot_ms", "p99_tpot_ms",
    "mean_itl_ms", "median_itl_ms", "std_itl_ms", "p99_itl_ms",
    "mean_e2el_ms", "median_e2el_ms", "std_e2el_ms", "p99_e2el_ms",
]


def test_vllm_export_has_vllms_key_set_and_benchcs_figures(result, capsys):
    path, doc = result
    docs = export(capsys, path, "vllm")
    assert vllm.VLLM_VERSION == "0.33.0"
    records = [json.loads(x) for x in text(os.path.splitext(path)[0] + ".requests.jsonl").splitlines()]
    for v, p in zip(docs, doc["points"], strict=True):
        assert list(v) == VLLM_0_33_0_KEYS
        for name, key in (("ttft", "ttft_us"), ("tpot", "tpot_us"), ("itl", "itl_us"), ("e2el", "e2e_us")):
            block = p["latency"][key]
            h = Histogram.decode(block["hdr"])
            assert v[f"mean_{name}_ms"] == block["mean"] / 1000
            assert v[f"median_{name}_ms"] == block["p50"] / 1000 == h.value_at_percentile(50) / 1000
            assert v[f"std_{name}_ms"] == block["stdev"] / 1000
            assert v[f"p99_{name}_ms"] == block["p99"] / 1000 == h.value_at_percentile(99) / 1000
        c, tok = p["counts"], p["tokens"]
        assert (v["completed"], v["failed"], v["num_prompts"]) == (c["completed"], 0, c["sent"])
        assert (v["total_input_tokens"], v["total_output_tokens"]) == (tok["input"], tok["output"])
        assert v["output_throughput"] == p["throughput"]["output_tok_s"]
        assert v["duration"] == p["window"]["duration_s"]
        mine = sorted((r for r in records if r["point"] == p["id"]), key=lambda r: r["t0_ns"])
        assert v["latencies"] == [r["e2e_us"] / 1e6 for r in mine]
        assert v["model_id"] == "sim-model" and v["backend"] == "openai-chat"
        if p["params"]["concurrency"]:
            # every request of a closed loop overlaps the others in flight: the peak is the target
            assert (v["request_rate"], v["max_concurrency"]) == ("inf", p["params"]["concurrency"])
            assert v["max_concurrent_requests"] == p["params"]["concurrency"] and v["queue_times"] is None
        else:
            # a scheduled point (fixed rate; a trace has no rate, which vLLM writes as "inf")
            assert v["request_rate"] == (p["params"]["rate_rps"] or "inf")
            step = flat_step(next(s for s in doc["plan"]["steps"] if s["id"] == p["id"]))  # any plan version
            shape = {"poisson": 1.0, "gamma": step["burstiness"]}.get(p["params"]["arrival"])
            assert v["burstiness"] == shape
            assert v["queue_times"] == [(r["t0_ns"] - r["scheduled_ns"]) / 1e9 for r in mine]
            assert 1 <= v["max_concurrent_requests"] <= p["counts"]["sent"]
        assert v["max_output_tokens_per_s"] is None and v["request_goodput"] is None


def test_vllm_export_without_per_request_records_leaves_their_keys_null(capsys):
    docs = export(capsys, os.path.join(os.path.dirname(__file__), "data", "result-v1-minimax.json"), "vllm")
    assert len(docs) == 3 and all(list(d) == VLLM_0_33_0_KEYS for d in docs)
    per_request = {(d["latencies"], d["queue_times"], d["max_concurrent_requests"]) for d in docs}
    assert per_request == {(None, None, None)}


# --------------------------------------------------------------------------- files


def test_per_point_files_are_numbered_and_never_overwritten_silently(result, tmp_path, capsys):
    path, doc = result
    out = tmp_path / "vllm.json"
    assert main(["export", path, "--format", "vllm", "-o", str(out)]) == 0
    n = len(doc["points"])
    written = capsys.readouterr().out.split()
    expected = [str(out)] if n == 1 else [str(tmp_path / f"vllm-{i}.json") for i in range(1, n + 1)]
    assert written == expected
    first = [json.loads(text(p)) for p in written]
    assert [d["num_prompts"] for d in first] == [p["counts"]["sent"] for p in doc["points"]]
    for p in written:
        with open(p, "w") as f:
            f.write("mine")
    assert main(["export", path, "--format", "br0.2", "-o", str(out)]) == 2
    assert "pass --force" in capsys.readouterr().err
    assert all(text(p) == "mine" for p in written)  # nothing written when refused
    assert main(["export", path, "--format", "br0.2", "-o", str(out), "--force"]) == 0
    assert [json.loads(text(p))["version"] for p in written] == ["0.2"] * n


def test_whole_result_formats_refuse_an_existing_file_unless_forced(tmp_path, capsys):
    src = os.path.join(os.path.dirname(__file__), "data", "result-v1-minimax.json")
    out = tmp_path / "r.csv"
    out.write_text("keep")
    assert main(["export", src, "--format", "csv", "-o", str(out)]) == 2
    assert out.read_text() == "keep"
    assert "exists; choose another -o or pass --force" in capsys.readouterr().err
    assert main(["export", src, "--format", "csv", "-o", str(out), "--force"]) == 0
    assert out.read_text().startswith("point,concurrency,")
