"""compare, merge and export on real result files (tests/data, made by make_fixtures.py)."""

import csv
import io
import json
import os

import pytest

from benchc.cli import main
from benchc.metrics._hdr import Histogram
from benchc.metrics.latency import ns_to_us
from benchc.results.document import read, validate_document

DATA = os.path.join(os.path.dirname(__file__), "data")
MINIMAX = os.path.join(DATA, "result-v1-minimax.json")
KIMI = os.path.join(DATA, "result-v1-kimi.json")
SHARD_A = os.path.join(DATA, "result-v1-shard-a.json")
SHARD_B = os.path.join(DATA, "result-v1-shard-b.json")


def test_every_fixture_is_a_valid_v1_document():
    for name in os.listdir(DATA):
        if name.endswith(".json"):
            assert read(os.path.join(DATA, name))["schema_version"] == 1


def test_compare_two_models_on_one_workload(capsys):
    assert main(["compare", MINIMAX, KIMI, "--format", "json"]) == 0
    cmp = json.loads(capsys.readouterr().out)
    assert cmp["warnings"] == []  # same workload_hash
    rows = {r["point"]: r["metrics"] for r in cmp["points"]}
    assert list(rows) == ["c=1", "c=2", "c=4"]
    c1 = rows["c=1"]["output_tok_s"]
    # minimax ~84 tok/s single-stream, kimi ~61: about -27%
    assert c1["base"] == pytest.approx(84, rel=0.05) and c1["new"] == pytest.approx(61, rel=0.05)
    assert -0.32 < c1["change"] < -0.22 and c1["significant"] == "n/a"
    itl = rows["c=1"]["itl.p50"]
    assert itl["new"] > itl["base"] and itl["significant"] == "yes"  # 16.4 ms vs 11.85 ms steps


def test_compare_against_itself_finds_nothing_significant(capsys):
    assert main(["compare", MINIMAX, MINIMAX, "--format", "json"]) == 0
    cmp = json.loads(capsys.readouterr().out)
    sig = [m["significant"] for r in cmp["points"] for m in r["metrics"].values()]
    assert "yes" not in sig and "no" in sig


def test_fail_on_gates_trip_with_exit_1(capsys):
    assert main(["compare", MINIMAX, KIMI, "--fail-on", "output_tok_s < -5%"]) == 1
    err = capsys.readouterr().err
    assert "gate breached:" in err and "c=1: output_tok_s < -5% (measured -2" in err
    assert main(["compare", MINIMAX, KIMI, "--fail-on", "error_rate > 1%", "--fail-on",
                 "output_tok_s < -50%"]) == 0
    assert main(["compare", MINIMAX, KIMI, "--fail-on", "ttft.p99 > +1000%", "--fail-on",
                 "itl.p50 > 12ms"]) == 1
    assert "itl.p50 > 12ms (measured 16." in capsys.readouterr().err
    assert main(["compare", MINIMAX, KIMI, "--fail-on", "speed < 5%"]) == 2


@pytest.mark.parametrize("gate", ["goodput_s < -5%", "ttft.p90 > 500ms", "itl.mean > +10%"])
def test_a_gate_on_a_figure_compare_does_not_compare_is_refused(gate, capsys):
    """Such gates passed whatever the figures were: nothing could trip them."""
    assert main(["compare", MINIMAX, KIMI, "--fail-on", gate]) == 2
    err = capsys.readouterr().err
    assert f"compare does not compare {gate.split()[0]}; a gate may use output_tok_s" in err


def test_markdown_renders_a_table(capsys):
    assert main(["compare", MINIMAX, KIMI, "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "| point | metric | base | new | change | beyond noise |" in md
    assert "|---|---|---|---|---|---|" in md
    assert "| c=1 | output_tok_s |" in md


def test_compare_warns_on_different_workloads(tmp_path, capsys):
    doc = read(KIMI)
    doc["workload_hash"] = "0" * 64
    other = tmp_path / "other.json"
    other.write_text(json.dumps(doc))
    assert main(["compare", MINIMAX, str(other)]) == 0
    assert "WARNING: the two runs used different workloads" in capsys.readouterr().out


def test_merge_is_exact_count_for_count(tmp_path, capsys):
    out = tmp_path / "merged.json"
    assert main(["merge", SHARD_A, SHARD_B, "-o", str(out)]) == 0
    merged = read(str(out))
    a, b = read(SHARD_A), read(SHARD_B)
    # one histogram fed every request's TTFT from both shards' per-request records
    samples: dict[str, list[float]] = {}
    for name in ("result-v1-shard-a.requests.jsonl", "result-v1-shard-b.requests.jsonl"):
        with open(os.path.join(DATA, name)) as f:
            for line in f:
                r = json.loads(line)
                samples.setdefault(r["point"], []).append(r["ttft_us"])
    for p, pa, pb in zip(merged["points"], a["points"], b["points"], strict=True):
        h = Histogram()
        for us in samples[p["id"]]:
            h.record(ns_to_us(round(us * 1000)))
        assert Histogram.decode(p["latency"]["ttft_us"]["hdr"]).nonzero() == h.nonzero()
        assert p["counts"]["sent"] == pa["counts"]["sent"] + pb["counts"]["sent"] == 16
        assert p["tokens"]["output"] == pa["tokens"]["output"] + pb["tokens"]["output"]
        assert p["window"]["start_ns"] == min(pa["window"]["start_ns"], pb["window"]["start_ns"])
        w = p["window"]["duration_s"]
        assert p["throughput"]["output_tok_s"] == pytest.approx(p["tokens"]["output"] / w, rel=1e-4)
    assert [m["source"] for m in merged["merged_from"]] == [SHARD_A, SHARD_B]


def test_merge_refuses_different_plans(tmp_path, capsys):
    assert main(["merge", MINIMAX, KIMI, "-o", str(tmp_path / "m.json")]) == 2
    assert "different plans" in capsys.readouterr().err


def test_export_csv_and_jsonl(capsys):
    assert main(["export", MINIMAX, "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["concurrency"] for r in rows] == ["1", "2", "4"]
    assert float(rows[0]["output_tok_s"]) == pytest.approx(84, rel=0.05)
    assert float(rows[0]["itl_p50_ms"]) == pytest.approx(11.85, rel=0.05)
    assert main(["export", SHARD_A, "--format", "jsonl"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 24 and json.loads(lines[0])["point"] == "c=1"
    assert main(["export", MINIMAX, "--format", "jsonl"]) == 2


def test_merged_result_validates():
    from benchc.results.merge import merge_docs

    validate_document(merge_docs([read(SHARD_A), read(SHARD_B)], ["a", "b"]))


def test_a_merged_result_judges_its_slo_on_its_own_figures():
    """It kept shard 0's verdict, per-request file and, for exports, its creation time."""
    from benchc.results.clock import point_span
    from benchc.results.merge import merge_docs

    a, b = read(SHARD_A), read(SHARD_B)
    slo = {"metric": "ttft", "stat": "p99", "op": "<", "value": 1.0, "text": "ttft p99 < 1us"}
    for d in (a, b):  # each shard says it passed; no merged point can meet 1 us
        d["plan"]["slo"] = [slo]
        for p in d["points"]:
            p["slo"] = {"passed": True, "checks": []}
        d["slo"] = {"defined": True, "passed": True}
    merged = merge_docs([a, b], ["a", "b"])
    validate_document(merged)
    assert merged["slo"] == {"defined": True, "passed": False}
    for p in merged["points"]:
        (check,) = p["slo"]["checks"]
        assert check["value"] == p["latency"]["ttft_us"]["p99"] and not check["passed"]
    assert merged["requests_file"] is None  # neither shard's records are the merged set
    last = max(point_span(merged, p)[1] for p in merged["points"])
    assert last.isoformat().startswith(b["created"][:-1])  # the later shard's, not the merge's


def test_report_writes_pngs_and_a_self_contained_html(tmp_path, capsys):
    png_dir, page = tmp_path / "png", tmp_path / "report.html"
    assert main(["report", MINIMAX, KIMI, SHARD_A, SHARD_B, "--png", str(png_dir), "--html", str(page)]) == 0
    names = sorted(p.name for p in png_dir.iterdir())
    assert names == ["itl_spectrum.png", "latency_vs_throughput.png", "throughput.png", "ttft_spectrum.png"]
    for p in png_dir.iterdir():
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000
    text = page.read_text()
    # the page is the interactive one (tests/test_html_report.py): its data inlined, nothing fetched
    assert "<script id='benchc-data' type='application/json'>" in text and " src=" not in text
    # each result named by its file and its target
    assert "result-v1-minimax.json: sim minimax-m2.5-tp4" in text
    assert "result-v1-kimi.json: sim kimi-k2.5-nvfp4-tp8" in text
    assert main(["report", MINIMAX]) == 2  # nowhere to write


def test_report_groups_repeats_of_one_plan_and_separates_other_plans():
    from benchc.results.report import collect

    series = collect([read(p) for p in (MINIMAX, KIMI, SHARD_A, SHARD_B)])
    minimax = [k for k in series if "minimax" in k]
    assert len(series) == 2 and len(minimax) == 1
    assert [len(v) for v in series[minimax[0]].values()] == [3, 3, 3]  # three runs of one plan
