"""Time to first tool call (`ttf_tool_call`) as a first-class metric: measured on the
simulator's tool-call streams it is the simulator's own trace, request by request, and it
reaches the console, the CSV export, the HTML report, the spec's `slo` and `compare
--fail-on` (a figure broken on purpose trips the gate)."""

import contextlib
import copy
import io
import json
import os

import pytest

from benchc.cli import main
from benchc.metrics.latency import Recorder
from benchc.results.document import read
from benchc.results.html_report import page, report_data
from benchc.results.table import to_csv
from benchc.run.console import Console
from tests.headless import Chromium, chromium
from tests.simrun import Sim
from tests.test_reasoning import first_write_error_ms

DATA = os.path.join(os.path.dirname(__file__), "data")
SPEC = """\
version: 1
name: tools
target: {{base_url: "http://127.0.0.1:9/v1", model: MiniMaxAI/MiniMax-M2.5}}
workload:
  dataset:
    random: {{input_tokens: 32, output_tokens: 10, seed: 5}}
load:
  warmup: {{requests: 1}}
  sweep: {{concurrency: [1]}}
  requests: 10
slo: {{ttf_tool_call: "p99 < {bound}"}}
output: {{path: {path}, requests: true}}
"""


def _run(tmp_path, bound: str) -> tuple[int, dict, list[dict], dict]:
    """A run against the simulator, half of whose answers call a tool (2 reasoning tokens, the
    tool's name, 4 tokens of arguments), one token per event: (exit code, point, per-request
    records, the simulator's trace by request id)."""
    spec = tmp_path / "t.yaml"
    spec.write_text(SPEC.format(bound=bound, path=tmp_path / "t.json"))
    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4", "--param", "step_table=[[1, 1.0]]",
              "--param", "reasoning_tokens=2", "--param", "tool_call_fraction=0.5",
              "--param", "tool_call_tokens=4")
    try:
        code = main(["run", str(spec), "--base-url", sim.url, "--quiet"])
        trace = sim.records()
    finally:
        sim.close()
    reqs = [json.loads(x) for x in (tmp_path / "t.requests.jsonl").read_text().splitlines()]
    (point,) = read(str(tmp_path / "t.json"))["points"]
    return code, point, reqs, trace


@pytest.mark.slow  # runs against the simulator
def test_time_to_first_tool_call_is_the_simulators_trace_and_reaches_every_output(tmp_path, capsys):
    code, point, reqs, trace = _run(tmp_path, "1h")
    assert code == 0
    called = [r for r in reqs if "tool_call_tokens" in trace[r["id"]]]
    assert 0 < len(called) < len(reqs)  # the seed draws both kinds
    # per request: the first tool-call chunk the simulator wrote (after its 2 reasoning chunks),
    # never before the write and late by about a write call (tests/test_reasoning.py says why)
    errors = [first_write_error_ms(r, trace[r["id"]], "ttf_tool_call_us", 2) for r in called]
    assert min(errors) > -0.5 and sorted(errors)[len(errors) // 2] < 1.0, errors
    assert all("ttf_tool_call_us" not in r for r in reqs if r not in called)
    # the point's histogram holds exactly those requests' values
    rebuilt = Recorder()
    for r in called:
        rebuilt.record_ns(round(r["ttf_tool_call_us"] * 1000))
    block = point["latency"]["ttf_tool_call_us"]
    assert block["count"] == len(called)
    assert {k: block[k] for k in ("min", "max", "p50", "p99")} == \
        {k: rebuilt.summary()[k] for k in ("min", "max", "p50", "p99")}
    # the SLO item held each request to its own first tool call (those that called none meet it)
    check = point["slo"]["checks"][0]
    assert check == {"threshold": "ttf_tool_call: p99 < 1h", "value": block["p99"], "unit": "us",
                     "passed": True}
    assert point["goodput_per_slo"]["ttf_tool_call: p99 < 1h"]["slo_met"] == len(reqs)

    # the console: a line under the point's row
    Console(quiet=False, live=False).point(point)
    err = capsys.readouterr().err
    assert (f"  c=1: time to first tool call p50 {block['p50'] / 1000:.1f}ms p99 {block['p99'] / 1000:.1f}ms "
            f"({len(called)} requests)") in err
    # the CSV export (and the dataframe: the same columns)
    doc = read(str(tmp_path / "t.json"))
    header, row = to_csv(doc).splitlines()[:2]
    cells = dict(zip(header.split(","), row.split(","), strict=True))
    assert float(cells["ttf_tool_call_p50_ms"]) == round(block["p50"] / 1000, 4)
    assert float(cells["ttf_tool_call_p99_ms"]) == round(block["p99"] / 1000, 4)
    # the HTML report: a chart of its p50 and p99 against output throughput, with its title
    chart = report_data([doc])["latency"]["ttf_tool_call"]
    assert chart["x"] == [point["throughput"]["output_tok_s"]]
    assert [s["y"] for s in chart["series"]] == [[block["p50"] / 1000], [block["p99"] / 1000]]
    assert '"ttf_tool_call":"time to first tool call"' in page([doc])


@pytest.mark.slow  # runs against the simulator
def test_an_slo_on_time_to_first_tool_call_that_no_request_meets_fails_the_run(tmp_path):
    code, point, reqs, _ = _run(tmp_path, "1us")
    assert code == 1  # a threshold failed
    assert point["slo"]["passed"] is False
    called = sum("ttf_tool_call_us" in r for r in reqs)
    # the requests that called no tool are not held to it; every one that did missed it
    assert point["goodput_per_slo"]["ttf_tool_call: p99 < 1us"]["slo_met"] == len(reqs) - called


def _with_tool_calls(doc: dict, scale: float) -> dict:
    """`doc` with a ttf_tool_call_us summary on every point: 2,000 requests' first tool calls
    between 200 and 400 ms, each times `scale`."""
    out = copy.deepcopy(doc)
    for p in out["points"]:
        r = Recorder()
        for i in range(2000):
            r.record_us((200_000 + 100 * i) * scale)
        p["latency"]["ttf_tool_call_us"] = r.summary()
    return out


def _compare(tmp_path, scale: float, gate: str) -> tuple[int, str]:
    doc = read(os.path.join(DATA, "result-v1-minimax.json"))
    base, new = tmp_path / "base.json", tmp_path / "new.json"
    base.write_text(json.dumps(_with_tool_calls(doc, 1.0)))
    new.write_text(json.dumps(_with_tool_calls(doc, scale)))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["compare", str(base), str(new), "--fail-on", gate])
    return code, out.getvalue() + err.getvalue()


def test_a_fail_on_gate_on_time_to_first_tool_call_trips_when_the_figure_is_broken(tmp_path):
    # the same figures: nothing to trip
    code, _ = _compare(tmp_path, 1.0, "ttf_tool_call p99 +10%")
    assert code == 0
    # every first tool call 30% later: p99 +30%, beyond noise with 2,000 samples
    code, text = _compare(tmp_path, 1.3, "ttf_tool_call p99 +10%")
    assert code == 1
    assert "c=1: ttf_tool_call p99 +10% (measured +30.0%)" in text
    # the dotted form with its operator is the same gate
    assert _compare(tmp_path, 1.3, "ttf_tool_call.p50 > +10%")[0] == 1


@pytest.fixture
def browser(tmp_path):
    if chromium() is None:
        pytest.skip("no Chromium on PATH: the page was not opened in a browser (tests/test_html_report.py)")
    with Chromium.start(str(tmp_path / "chromium")) as b:
        yield b


@pytest.mark.slow  # opens the page in headless Chromium
def test_the_html_page_draws_the_time_to_first_tool_call_chart(tmp_path, browser):
    from tests.test_html_report import DRAWN

    doc = _with_tool_calls(read(os.path.join(DATA, "result-v1-minimax.json")), 1.0)
    html = tmp_path / "report.html"
    html.write_text(page([doc]), encoding="utf-8")
    page_ = browser.open(html.as_uri())
    got = page_.evaluate(DRAWN)
    assert page_.errors == [] and got["state"]["errors"] == []
    assert got["charts"] == got["drawn"] == got["inked"]
    titles = page_.evaluate("Array.from(document.querySelectorAll('.u-title')).map(e => e.textContent)")
    assert "time to first tool call p50 / p99 against output throughput" in titles
    assert "TTFT p50 / p99 against output throughput" in titles
