"""Other tools' results read as benchc's (benchc/results/peers/): each fixture under
tests/data/peers was written by the tool itself against benchc's simulator (README there); the
figures read must be the file's own numbers, in benchc's names and units, histograms only from
per-request values, and bad files exit 5 naming the JSON path."""

import json
import os
import shutil

import jsonschema
import pytest

import benchc.results
from benchc.cli import main
from benchc.errors import EXIT_RESULT_FORMAT, EXIT_THRESHOLD
from benchc.metrics._hdr import Histogram
from benchc.results import br
from benchc.results.api import read_document

PEERS = os.path.join(os.path.dirname(__file__), "data", "peers")
LLMD = os.path.join(os.path.dirname(__file__), "data", "llmd")
VLLM_C4 = os.path.join(PEERS, "vllm-bench-c4-detailed.json")
VLLM_RATE8 = os.path.join(PEERS, "vllm-bench-rate8.json")
GUIDELLM = os.path.join(PEERS, "guidellm-c4.json")
AIPERF_RATE8 = os.path.join(PEERS, "aiperf-rate8", "profile_export_aiperf.json")
AIPERF_C4 = os.path.join(PEERS, "aiperf-c4", "profile_export_aiperf.json")
INFERENCE_PERF = os.path.join(PEERS, "inference-perf", "summary_lifecycle_metrics.json")
BENCHC_C4 = os.path.join(PEERS, "benchc-c4.json")
BENCHC_TS = os.path.join(PEERS, "benchc-ts.json")


def raw(path):
    with open(path) as f:
        return json.load(f)


def hdr_count(block):
    return Histogram.decode(block["hdr"]).total_count


# --------------------------------------------------------------------------- vLLM bench serve


def test_vllm_detailed_maps_every_figure_and_builds_histograms_from_its_requests():
    v = raw(VLLM_C4)
    r = benchc.results.load(VLLM_C4)
    (p,) = r.points
    assert (p.id, p.concurrency, p.rate_rps) == ("c=4", 4, None)
    assert (p.sent, p.completed, p.failed) == (40, v["completed"], v["failed"])
    assert (p.input_tokens, p.output_tokens) == (v["total_input_tokens"], v["total_output_tokens"])
    assert (p.output_tok_s, p.request_s, p.total_tok_s) == (v["output_throughput"], v["request_throughput"],
                                                            v["total_token_throughput"])
    assert p.duration_s == v["duration"] and p.goodput_s is None  # no --goodput: absent, not 0
    for ours, theirs in (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"), ("e2e", "e2el")):
        lat = p.latency[ours]
        assert lat.mean == v[f"mean_{theirs}_ms"] * 1000 and lat.stdev == v[f"std_{theirs}_ms"] * 1000
        assert lat.percentiles[99.0] == v[f"p99_{theirs}_ms"] * 1000  # vLLM's own percentile, kept
        assert lat.percentiles[90.0] == v[f"p90_{theirs}_ms"] * 1000
    raw_lat = r.raw["points"][0]["latency"]
    assert hdr_count(raw_lat["ttft_us"]) == hdr_count(raw_lat["e2e_us"]) == 40
    assert hdr_count(raw_lat["itl_us"]) == sum(len(x) for x in v["itls"])  # every chunk gap
    h = Histogram.decode(raw_lat["ttft_us"]["hdr"])
    assert h.max == pytest.approx(max(v["ttfts"]) * 1e6, rel=1e-3)  # the requests' own values
    peer = r.raw["peer"]
    assert peer["tool"] == "vllm bench serve" and "not benchc's" in peer["measured_by"]
    assert peer["histograms"].startswith("from every request's value")
    assert "goodput/s" in peer["unmapped"]


def test_vllm_without_detail_keeps_percentiles_only_and_says_what_is_missing():
    v = raw(VLLM_RATE8)
    r = benchc.results.load(VLLM_RATE8)
    (p,) = r.points
    assert (p.id, p.rate_rps, p.arrival, p.concurrency) == ("rate=8/s", 8.0, "poisson", None)
    raw_lat = r.raw["points"][0]["latency"]
    assert "hdr" not in raw_lat["ttft_us"] and "hdr" not in raw_lat["itl_us"]  # never made up
    assert raw_lat["ttft_us"]["p99"] == v["p99_ttft_ms"] * 1000 and "p90" not in raw_lat["ttft_us"]
    assert hdr_count(raw_lat["e2e_us"]) == 40  # `latencies` is kept without --save-detailed
    assert raw_lat["tpot_us"]["count"] is None  # vLLM does not say how many: unknown, not 0
    assert any("--save-detailed" in u for u in r.raw["peer"]["unmapped"])


# --------------------------------------------------------------------------- GuideLLM, AIPerf, inference-perf


def test_guidellm_itl_is_read_as_tpot_and_per_chunk_itl_is_absent():
    g = raw(GUIDELLM)["benchmarks"][0]["metrics"]
    r = benchc.results.load(GUIDELLM)
    (p,) = r.points
    assert (p.id, p.concurrency, p.completed, p.failed) == ("c=4", 4, 16, 0)
    assert p.output_tokens == 512 and p.output_tok_s == g["output_tokens_per_second"]["successful"]["mean"]
    itl = g["inter_token_latency_ms"]["successful"]
    assert p.tpot.percentiles[99.0] == itl["percentiles"]["p99"] * 1000  # its per-request ITL = our TPOT
    assert p.tpot.percentiles[0.1] == itl["percentiles"]["p001"] * 1000
    assert p.e2e.mean == g["request_latency"]["successful"]["mean"] * 1e6  # seconds
    assert p.itl.count is None and not p.itl.percentiles  # GuideLLM keeps no chunk gaps
    assert hdr_count(r.raw["points"][0]["latency"]["ttft_us"]) == 16
    assert r.raw["peer"]["version"] == "0.8.1"
    assert any("per-chunk ITL" in u for u in r.raw["peer"]["unmapped"])


def test_aiperf_reads_its_per_request_jsonl_beside_it():
    a = raw(AIPERF_RATE8)
    r = benchc.results.load(AIPERF_RATE8)
    (p,) = r.points
    assert (p.id, p.rate_rps, p.completed) == ("rate=8/s", 8.0, 16)
    assert p.itl.percentiles[99.0] == a["inter_chunk_latency"]["p99"] * 1000  # chunk gaps: our ITL
    assert p.tpot.percentiles[50.0] == a["inter_token_latency"]["p50"] * 1000  # per request: our TPOT
    assert p.input_tokens == a["total_usage_prompt_tokens"]["avg"]  # the server's usage
    chunks = 0
    with open(os.path.join(PEERS, "aiperf-rate8", "profile_export.jsonl")) as f:
        for line in f:
            chunks += len(json.loads(line)["metrics"]["inter_chunk_latency"]["value"])
    assert hdr_count(r.raw["points"][0]["latency"]["itl_us"]) == chunks
    assert "profile_export.jsonl" in r.raw["peer"]["histograms"]


def test_aiperf_without_its_jsonl_has_percentiles_only():
    r = benchc.results.load(AIPERF_C4)
    assert "hdr" not in r.raw["points"][0]["latency"]["ttft_us"]
    assert r.points[0].concurrency == 4 and r.raw["peer"]["histograms"].startswith("none")


def test_aiperf_jsonl_of_another_run_is_refused(tmp_path):
    d = tmp_path / "run"
    shutil.copytree(os.path.join(PEERS, "aiperf-c4"), d)
    shutil.copy(os.path.join(PEERS, "aiperf-rate8", "profile_export.jsonl"), d / "profile_export.jsonl")
    with pytest.raises(benchc.errors.ResultFormatError, match="16 records where .* counts 40 requests"):
        benchc.results.load(str(d / "profile_export_aiperf.json"))


def test_inference_perf_summary_and_its_config():
    s = raw(INFERENCE_PERF)["successes"]
    r = benchc.results.load(INFERENCE_PERF)
    (p,) = r.points
    assert (p.id, p.rate_rps, p.arrival, p.completed, p.failed) == ("rate=8/s", 8.0, "poisson", 24, 0)
    assert p.itl.percentiles[99.0] == s["latency"]["inter_token_latency"]["p99"] * 1e6
    assert p.tpot.percentiles[50.0] == s["latency"]["time_per_output_token"]["median"] * 1e6
    assert p.ttft.stdev is None  # the report has none: absent
    assert (p.input_tokens, p.output_tokens) == (622, 768)


def test_inference_perf_without_config_has_no_load(tmp_path):
    shutil.copy(INFERENCE_PERF, tmp_path / "summary.json")
    r = benchc.results.load(str(tmp_path / "summary.json"))
    assert r.points[0].id == "all stages" and r.points[0].rate_rps is None
    assert "no config.yaml" in r.raw["peer"]["notes"][0]


# --------------------------------------------------------------------------- BR 0.2.1: export, read back


def test_br_round_trip_keeps_every_figure_the_report_carries(tmp_path, capsys):
    """benchc -> BR 0.2.1 -> read: every Statistics value, count, rate and series of the report
    comes back in benchc's units; compare of the result with its own report finds no change."""
    out = tmp_path / "br.json"
    assert main(["export", BENCHC_TS, "--format", "br0.2.1", "-o", str(out)]) == 0
    report = raw(str(out))
    r = benchc.results.load(str(out))
    (p,) = r.points
    agg = report["results"]["request_performance"]["aggregate"]
    assert (p.sent, p.failed) == (agg["requests"]["total"], agg["requests"]["failures"])
    assert p.output_tokens == round(agg["requests"]["output_length"]["mean"] * p.completed)
    assert p.output_tok_s == agg["throughput"]["output_token_rate"]["mean"]
    assert p.request_s == agg["throughput"]["request_rate"]["mean"]
    for ours, (field, _) in br._LATENCIES.items():
        stats, lat = agg["latency"][field], p.latency[ours]
        assert lat.mean == pytest.approx(stats["mean"] * 1000, rel=1e-12)
        assert lat.stdev == pytest.approx(stats["stddev"] * 1000, rel=1e-12)
        assert (lat.min, lat.max) == pytest.approx((stats["min"] * 1000, stats["max"] * 1000), rel=1e-12)
        for name, pct in br._PERCENTILES.items():
            assert lat.percentiles[pct] == pytest.approx(stats[name] * 1000, rel=1e-12), (field, name)
    original = read_document(BENCHC_TS)["points"][0]
    series = p.raw["timeseries"]
    for col in ("running", "waiting", "kv_cache_usage", "preemptions", "prefix_cache_hit_tokens",
                "prefix_cache_query_tokens"):
        assert series["server"][col] == original["timeseries"]["server"][col], col
    # the report's times are to the millisecond
    assert series["server"]["t_s"] == pytest.approx(original["timeseries"]["server"]["t_s"], abs=0.002)
    assert series["client"]["in_flight"] == original["timeseries"]["client"]["in_flight"]
    assert series["client"]["in_flight_max"] == original["timeseries"]["client"]["in_flight_max"]
    assert p.raw["telemetry"]["server"]["running"] == {k: original["telemetry"]["server"]["running"][k]
                                                       for k in ("mean", "max")}
    capsys.readouterr()
    assert main(["compare", BENCHC_TS, str(out), "--format", "json"]) == 0
    cmp = json.loads(capsys.readouterr().out)
    (row,) = cmp["points"]
    assert {"output_tok_s", "ttft.p99", "itl.p50", "tpot.p99", "e2e.p99"} <= row["metrics"].keys()
    for key, m in row["metrics"].items():
        assert m["new"] == pytest.approx(m["base"], rel=1e-12, abs=1e-9), key


def test_br_0_2_1_time_series_validate_against_llmd_schema(tmp_path):
    out = tmp_path / "br.json"
    assert main(["export", BENCHC_TS, "--format", "br0.2.1", "-o", str(out)]) == 0
    report = raw(str(out))
    with open(os.path.join(LLMD, "br_v0_2_1_json_schema.json")) as f:
        schema = json.load(f)
    v = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    assert not [e.message for e in v.iter_errors(report)]
    comps = {c["component_label"]: c for c in report["results"]["observability"]["components"]}
    ts = read_document(BENCHC_TS)["points"][0]["timeseries"]
    running = comps["server"]["time_series"]["num_requests_running"]
    assert [s["value"] for s in running["series"]] == ts["server"]["running"] and running["units"] == "count"
    client = comps[br.CLIENT_LABEL]["time_series"]["num_requests_running"]["series"]
    assert [(s["value"], s["max"]) for s in client] == list(zip(ts["client"]["in_flight"],
                                                                ts["client"]["in_flight_max"], strict=True))
    assert br.CLIENT_LABEL in [c["metadata"]["label"] for c in report["scenario"]["stack"]]
    hits = comps["server"]["time_series"]["prefix_cache_hit_rate"]["series"]
    assert [s["value"] for s in hits] == [0.0] * len(ts["server"]["running"])  # fresh prompts: no hits


def test_br_0_2_has_no_time_series(tmp_path):
    out = tmp_path / "br.json"
    assert main(["export", BENCHC_TS, "--format", "br0.2", "-o", str(out)]) == 0
    assert "time_series" not in json.dumps(raw(str(out)))


# --------------------------------------------------------------------------- compare and its gates


def test_compare_judges_a_gate_against_vllm_with_per_request_figures(capsys):
    """Both sides have every request's TTFT: the bootstrap judges it, and the gate breaches."""
    rc = main(["compare", VLLM_C4, BENCHC_C4, "--fail-on", "ttft.p50 > +10%"])
    out = capsys.readouterr()
    assert rc == EXIT_THRESHOLD
    assert "c=4: ttft.p50 > +10% (measured +574.6%)" in out.err
    assert "PEER: base is vllm bench serve: these figures are its measurement, not benchc's" in out.out


def test_compare_says_why_a_gate_on_a_percentiles_only_side_is_not_judged(capsys):
    # a gate that cannot judge fails unless allowed (issue 45): allowed, it is this NOTE
    assert main(["compare", BENCHC_C4, AIPERF_C4, "--fail-on", "ttft.p99 > +1%"]) == EXIT_THRESHOLD
    capsys.readouterr()
    rc = main(["compare", BENCHC_C4, AIPERF_C4, "--fail-on", "ttft.p99 > +1%", "--allow-unjudged"])
    err = capsys.readouterr().err
    assert rc == 0
    assert ("c=4: ttft.p99 > +1%: not judged (+14.4%, beyond noise: n/a): new is AIPerf's measurement "
            "with percentiles only (no per-request values to bootstrap an interval from): the change used "
            "its own p99 (AIPerf's own (p1..p99, numpy over its records)") in err


def test_compare_says_which_percentiles_a_peer_wrote(capsys):
    rc = main(["compare", VLLM_C4, BENCHC_C4, "--fail-on", "ttft.p99.9 > +10%", "--allow-unjudged"])
    err = capsys.readouterr().err
    assert rc == 0
    assert ("c=4: ttft.p99.9 > +10%: not judged: base (vllm bench serve) has no ttft.p99.9: it wrote p50, "
            "p90, p99 of ttft (vLLM: --metric-percentiles, --percentile-metrics)") in err


@pytest.mark.parametrize("path", [VLLM_RATE8, GUIDELLM, AIPERF_RATE8, INFERENCE_PERF])
def test_report_reads_each_peer(tmp_path, path, capsys):
    out = tmp_path / "report.html"
    assert main(["report", path, BENCHC_C4, "--html", str(out)]) == 0
    assert out.stat().st_size > 0


# --------------------------------------------------------------------------- bad input: exit 5, JSON path


def bad(tmp_path, text, name="x.json"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def refused(capsys, path):
    assert main(["compare", path, BENCHC_C4]) == EXIT_RESULT_FORMAT
    return capsys.readouterr().err


def test_unknown_file_names_what_was_expected(tmp_path, capsys):
    err = refused(capsys, bad(tmp_path, json.dumps({"hello": 1})))
    assert "is not a result benchc reads (found hello); expected a benchc result" in err
    for what in ("vLLM `bench serve --save-result`", "GuideLLM benchmark report", "AIPerf",
                 "inference-perf", "llm-d Benchmark Report 0.2 or 0.2.1"):
        assert what in err
    assert "Traceback" not in err


def test_truncated_peer_file_names_the_path_it_ends_inside(tmp_path, capsys):
    with open(VLLM_RATE8) as f:
        text = f.read()
    cut = text[:text.index('"p99_ttft_ms"') + len('"p99_ttft_ms": 2')]
    err = refused(capsys, bad(tmp_path, cut))
    assert "truncated: the JSON ends inside $.p99_ttft_ms" in err
    with open(GUIDELLM) as f:
        text = f.read()
    err = refused(capsys, bad(tmp_path, text[:text.index('"time_to_first_token_ms"') + 40], "g.json"))
    assert "truncated: the JSON ends inside $.benchmarks[0].metrics.time_to_first_token_ms" in err


def test_nan_in_a_peer_file_names_its_path(tmp_path, capsys):
    with open(VLLM_RATE8) as f:
        doc = f.read()
    doc = doc.replace('"std_itl_ms": 6.532776052289752', '"std_itl_ms": NaN')
    err = refused(capsys, bad(tmp_path, doc))
    assert "at $.std_itl_ms: NaN is not a number" in err


@pytest.mark.parametrize("path,edit,where,says", [
    (GUIDELLM, lambda d: d["metadata"].update(version=3), "$.metadata.version", "report version 3"),
    (AIPERF_C4, lambda d: d.update(schema_version="2.0"), "$.schema_version", "'2.0' is not a version"),
])
def test_unknown_version_names_its_path(tmp_path, capsys, path, edit, where, says):
    doc = raw(path)
    edit(doc)
    err = refused(capsys, bad(tmp_path, json.dumps(doc)))
    assert f"at {where}: {says}" in err


def test_unknown_br_version_names_its_path(tmp_path, capsys):
    out = tmp_path / "br.json"
    assert main(["export", BENCHC_C4, "--format", "br0.2", "-o", str(out)]) == 0
    doc = raw(str(out))
    doc["version"] = "0.3"
    err = refused(capsys, bad(tmp_path, json.dumps(doc), "br3.json"))
    assert "at $.version: Benchmark Report version '0.3' is not one benchc reads (it reads 0.2, 0.2.1)" in err


def test_a_wrong_type_names_its_path(tmp_path, capsys):
    doc = raw(VLLM_RATE8)
    doc["p99_ttft_ms"] = "fast"
    err = refused(capsys, bad(tmp_path, json.dumps(doc)))
    assert "vllm bench serve: at $.p99_ttft_ms: expected a number, found a string" in err


def test_benchc_results_keep_their_own_messages(tmp_path, capsys):
    err = refused(capsys, bad(tmp_path, json.dumps({"schema_version": 9})))
    assert "schema_version 9 is not one this benchc reads" in err


def _containers_and_leaves(node, at=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield at + (k,)
            yield from _containers_and_leaves(v, at + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node[:2]):
            yield at + (i,)
            yield from _containers_and_leaves(v, at + (i,))


@pytest.mark.parametrize("path", [VLLM_C4, GUIDELLM, AIPERF_C4, INFERENCE_PERF, BENCHC_C4 + ":br"])
def test_a_value_of_any_wrong_kind_is_exit_5_never_a_crash(tmp_path, path, capsys):
    """Values anywhere in a peer file replaced by a string, a list, an object, a negative number, true
    or 1e300 (seeded sample of places): the file is read, or refused as ResultFormatError."""
    import random

    if path.endswith(":br"):
        out = tmp_path / "br.json"
        assert main(["export", path[:-3], "--format", "br0.2.1", "-o", str(out)]) == 0
        path = str(out)
    doc = raw(path)
    places = list(_containers_and_leaves(doc))
    for at in random.Random(0).sample(places, min(25, len(places))):
        for value in ("x", [1], {"a": 1}, -1, True, 1e300):
            d = json.loads(json.dumps(doc))
            node = d
            for k in at[:-1]:
                node = node[k]
            node[at[-1]] = value
            target = tmp_path / "x.json"
            target.write_text(json.dumps(d))
            try:
                benchc.results.load(str(target))
            except benchc.errors.ResultFormatError:
                pass


@pytest.mark.real
def test_real_vllm_time_series_go_into_br_0_2_1_and_come_back(tmp_path, vllm, capsys):
    """A run against the real vLLM with server.metrics_interval: its report's server series are
    vLLM's /metrics as sampled, llm-d's schema accepts it, and reading it back gives the series.
    The run spans several samples (16 requests of 64 tokens, sampled every 100 ms), so that
    one is taken while requests run: with 8 requests of 24 tokens sampled every 250 ms, a run
    took two samples in all, and `max(running) >= 1` rested on one of them landing mid-run."""
    import random as _random

    spec = tmp_path / "ts.yaml"
    out = tmp_path / "ts.json"
    spec.write_text(f"""\
version: 1
name: real-br-series
target: {{base_url: {vllm.base_url}, model: {vllm.model}, api: chat, tokenizer: {vllm.tokenizer}}}
server: {{metrics_interval: 100ms}}
workload:
  dataset:
    random: {{input_tokens: 300, output_tokens: 64, seed: {_random.randrange(2**31)}}}
  sampling: {{max_tokens: 64, ignore_eos: true}}
load:
  warmup: {{requests: 0}}
  sweep: {{concurrency: [4]}}
  requests: 16
output: {{path: {out}}}
""")
    assert main(["run", str(spec), "--quiet"]) == 0
    br_path = tmp_path / "br.json"
    assert main(["export", str(out), "--format", "br0.2.1", "-o", str(br_path)]) == 0
    report = raw(str(br_path))
    with open(os.path.join(LLMD, "br_v0_2_1_json_schema.json")) as f:
        schema = json.load(f)
    v = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    assert not [e.message for e in v.iter_errors(report)]
    series = read_document(str(out))["points"][0]["timeseries"]["server"]
    assert series["available"] and series["kind"] == "vllm" and series["t_s"]
    comps = {c["component_label"]: c for c in report["results"]["observability"]["components"]}
    running = [s["value"] for s in comps["server"]["time_series"]["num_requests_running"]["series"]]
    assert running == [x for x in series["running"] if x is not None] and max(running) >= 1
    back = benchc.results.load(str(br_path)).points[0].raw["timeseries"]["server"]
    assert back["kv_cache_usage"] == [x for x in series["kv_cache_usage"] if x is not None]


def test_br_json_lines_of_a_several_point_result_read_as_its_points(tmp_path, capsys):
    """`benchc export --format br0.2.1` prints one report per line: saved, it reads back as one
    result of those points, in order."""
    source = os.path.join(os.path.dirname(__file__), "data", "result-v1-minimax.json")
    assert main(["export", source, "--format", "br0.2.1"]) == 0
    lines = capsys.readouterr().out
    path = tmp_path / "reports.jsonl"
    path.write_text(lines)
    r = benchc.results.load(str(path))
    original = benchc.results.load(source)
    assert [p.id for p in r.points] == [p.id for p in original.points] and len(r.points) == 3
    assert [p.output_tok_s for p in r.points] == [p.output_tok_s for p in original.points]
    bad_line = lines.splitlines()
    bad_line[1] = bad_line[1].replace('"version": "0.2.1"', '"version": "9"')
    path.write_text("\n".join(bad_line) + "\n")
    with pytest.raises(benchc.errors.ResultFormatError, match=r"reports.jsonl: report 2: .* at \$.version"):
        benchc.results.load(str(path))


@pytest.mark.parametrize("path,edit,load", [
    (GUIDELLM, lambda d: d["benchmarks"][0]["config"].update(strategy={"type_": "poisson", "rate": 8.0}),
     ("rate=8/s", None, 8.0, "poisson")),
    (GUIDELLM, lambda d: d["benchmarks"][0]["config"].update(strategy={"type_": "synchronous"}),
     ("c=1", 1, None, None)),
    (VLLM_RATE8, lambda d: d.update(burstiness=0.5), ("rate=8/s", None, 8.0, "gamma")),
    (VLLM_RATE8, lambda d: d.update(request_rate="inf", max_concurrency=16), ("c=16", 16, None, None)),
])
def test_each_tools_load_becomes_benchcs(tmp_path, path, edit, load):
    """The load a tool states (edited from a real file) as benchc's: compare matches points by it."""
    doc = raw(path)
    edit(doc)
    target = tmp_path / "x.json"
    target.write_text(json.dumps(doc))
    p = benchc.results.load(str(target)).points[0]
    assert (p.id, p.concurrency, p.rate_rps, p.arrival) == load


def test_aiperf_jsonl_cut_short_names_its_line_and_path(tmp_path, capsys):
    d = tmp_path / "run"
    shutil.copytree(os.path.join(PEERS, "aiperf-rate8"), d)
    jsonl = d / "profile_export.jsonl"
    text = jsonl.read_text()
    cut = text.rstrip("\n")
    jsonl.write_text(cut[:cut.rindex('"inter_chunk_latency"') + 40])
    err = refused(capsys, str(d / "profile_export_aiperf.json"))
    assert "profile_export.jsonl:16: truncated: the JSON ends inside $.metrics.inter_chunk_latency" in err
