"""The share of prompt tokens served from cache per point (`cached_fraction`), declared once
(benchc/catalog.py): against the simulator's trace it shows in the console and the CSV export,
and the spec's `slo` holds a point to it."""

import json

import pytest

from benchc.cli import main
from benchc.results.document import read
from benchc.results.slo import evaluate_slo
from benchc.results.table import to_csv
from benchc.run.console import Console
from benchc.spec.thresholds import parse_threshold
from tests.simrun import Sim
from tests.test_point_document import point_of

SPEC = """\
version: 1
name: cached
target: {{base_url: "http://127.0.0.1:9/v1", model: MiniMaxAI/MiniMax-M2.5}}
workload:
  dataset:
    random: {{input_tokens: 48, prefix_tokens: 32, output_tokens: 4, seed: 5}}
load:
  warmup: {{requests: 1}}
  sweep: {{concurrency: [1]}}
  requests: 6
slo: {{cached_fraction: "{slo}"}}
output: {{path: {path}, requests: true}}
"""


def _run(tmp_path, slo: str) -> tuple[int, dict, dict]:
    spec = tmp_path / "c.yaml"
    spec.write_text(SPEC.format(slo=slo, path=tmp_path / "c.json"))
    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4", "--param", "block_size=16")
    try:
        code = main(["run", str(spec), "--base-url", sim.url, "--quiet"])
        trace = sim.records()
    finally:
        sim.close()
    return code, read(str(tmp_path / "c.json")), trace


@pytest.mark.slow  # runs against the simulator
def test_the_cached_share_is_the_servers_and_shows_in_the_console_csv_and_slo(tmp_path, capsys):
    code, doc, trace = _run(tmp_path, "> 10%")
    assert code == 0
    (point,) = doc["points"]
    reqs = [json.loads(x) for x in (tmp_path / "c.requests.jsonl").read_text().splitlines()]
    cached = sum(trace[r["id"]]["cached_tokens"] for r in reqs)
    assert cached > 0  # the shared 32-token prefix, from the second request on
    share = round(cached / point["cache"]["prompt_tokens"], 4)
    assert point["cache"]["cached_fraction"] == share
    assert point["slo"]["checks"] == [{"threshold": "cached_fraction: > 10%", "value": share,
                                       "unit": "fraction", "passed": True}]
    Console(quiet=False, live=False).point(point)
    header, _, row = capsys.readouterr().err.splitlines()[:3]
    assert header.split()[5] == "cached" and row.split()[4] == f"{share:.1%}"
    csv_header, csv_row = to_csv(doc).splitlines()[:2]
    assert dict(zip(csv_header.split(","), csv_row.split(","), strict=True))["cached_fraction"] == str(share)


def test_an_slo_on_the_cached_share_holds_the_point_and_a_point_that_knows_none_fails_it():
    check = parse_threshold("cached_fraction", "> 50%")
    assert (check.metric, check.stat, check.value) == ("cached_fraction", None, 0.5)
    known = point_of(cache={"cached_fraction": 0.25})
    assert evaluate_slo([check], known) == {"passed": False, "checks": [
        {"threshold": "cached_fraction: > 50%", "value": 0.25, "unit": "fraction", "passed": False}]}
    unknown = point_of(cache={"cached_fraction": None})
    assert evaluate_slo([check], unknown)["checks"][0]["value"] is None
    assert evaluate_slo([check], unknown)["passed"] is False
