"""Golden outputs: what `benchc export` (br0.2, br0.2.1, vllm) and the report's data (the
figures the HTML page and the PNGs draw, results/report.py and html_report.py) give for the
stored result fixtures, and for a variant of one that takes the other branches (an open-loop
point, SLOs, GPU telemetry, a prefix workload). A change to how those modules read a result
(typed accessors instead of literal keys) must leave every byte as it was.

tests/outputs/search-input.json is a result with a capacity search (`benchc run
specs/capacity-search.yaml`, kept as it came out): its search charts and table.

Regenerate after a deliberate change of output: BENCHC_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py
"""

import contextlib
import io
import json
import os

import pytest

from benchc.cli import main
from benchc.results.document import read
from benchc.results.html_report import report_data

DATA = os.path.join(os.path.dirname(__file__), "data")
OUTPUTS = os.path.join(os.path.dirname(__file__), "outputs")
FIXTURES = ("result-v1-minimax.json", "result-v1-kimi.json", "result-v1-shard-a.json")
UPDATE = os.environ.get("BENCHC_UPDATE_GOLDEN") == "1"
SEARCH = os.path.join(OUTPUTS, "search-input.json")


def variant(tmp_path) -> str:
    """The MiniMax fixture with the branches the fixtures miss: its second point open loop
    (poisson at 2/s, scheduled sends), SLOs with goodput, GPU telemetry on two GPUs, and a
    prefix_groups workload with pinned output lengths."""
    doc = read(os.path.join(DATA, "result-v1-minimax.json"))
    p = doc["points"][1]
    p["params"].update(concurrency=None, rate_rps=2.0, arrival="poisson")
    p["id"] = "rate=2/s"
    doc["slo"] = {"defined": True, "passed": False}
    doc["plan"]["slo"] = [{"metric": "ttft", "stat": "p99", "op": "<", "value": 2e5,
                           "text": "ttft: p99 < 200ms"}]
    for q in doc["points"]:
        q["counts"]["slo_met"] = q["counts"]["completed"] // 2
        q["throughput"]["goodput_s"] = round(q["counts"]["slo_met"] / q["window"]["duration_s"], 3)
        q["telemetry"]["gpu"] = {
            "available": True, "power_w_total_mean": 1234.5,
            "gpus": [{"index": i, "utilization_pct": {"mean": 80.0 + i, "max": 99.0},
                      "memory_used_mib": {"mean": 70000.0 + i, "max": 71000.0}} for i in range(2)]}
        q["telemetry"]["server"]["prefix_cache_hit_rate"] = 0.25
    w = doc["plan"]["combinations"][0]["workload"]
    w["dataset"] = "prefix_groups"
    w["params"] = {**w["params"], "prefix_tokens": 64, "groups": 4,
                   "suffix_tokens": w["params"].get("input_tokens")}
    w["sampling"] = {**w["sampling"], "ignore_eos": True, "max_tokens": 32}
    path = tmp_path / "variant.json"
    path.write_text(json.dumps(doc))
    return str(path)


def check(name: str, text: str) -> None:
    path = os.path.join(OUTPUTS, name)
    if UPDATE:
        with open(path, "w") as f:
            f.write(text)
    with open(path) as f:
        assert text == f.read(), f"{name} differs from the golden output (tests/outputs/)"


def export(path: str, fmt: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(["export", path, "--format", fmt]) == 0
    return out.getvalue()


@pytest.mark.parametrize("fmt", ["br0.2", "br0.2.1", "vllm"])
def test_exports_are_byte_equal_to_the_golden_outputs(tmp_path, fmt):
    for name in FIXTURES:
        check(f"{name.removesuffix('.json')}.{fmt}.jsonl", export(os.path.join(DATA, name), fmt))
    check(f"variant.{fmt}.jsonl", export(variant(tmp_path), fmt))
    check(f"search.{fmt}.jsonl", export(SEARCH, fmt))


def test_report_data_is_byte_equal_to_the_golden_output(tmp_path):
    docs = [read(os.path.join(DATA, n)) for n in FIXTURES] + [read(variant(tmp_path))]
    # the results' names as `benchc report` gives them: their paths (here fixed ones)
    data = report_data(docs, [f"results/{n}" for n in (*FIXTURES, "variant.json")])
    check("report_data.json", json.dumps(data, indent=1, sort_keys=True) + "\n")


def test_report_data_of_a_search_is_byte_equal_to_the_golden_output():
    data = report_data([read(SEARCH)], ["results/search.json"])
    check("report_data_search.json", json.dumps(data, indent=1, sort_keys=True) + "\n")
