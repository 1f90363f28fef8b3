"""Which concurrency should I run? (issue 45, item 6): for ONE configuration, where throughput
peaks, up to which load each SLO item holds, the highest load that meets them all, and "try
higher" when that is the sweep's edge; `run` prints it after a single-configuration sweep, and
the HTML report opens with it, its latency charts carrying the SLO bounds and each point's load."""

import json

import pytest

from benchc.cli import main
from benchc.results.concurrency import describe_single, single_answer
from benchc.results.html_report import report_data
from tests.simrun import write_spec


def _doc(rows, over="concurrency"):
    """rows: (load, output tok/s, {slo text: passed})."""
    points = []
    for load, tok_s, checks in rows:
        params = {"concurrency": load} if over == "concurrency" else {"rate_rps": load}
        points.append({"id": f"c={load}" if over == "concurrency" else f"rate={load:g}/s", "combination": 0,
                       "params": {**params, "probe": None}, "counts": {"completed": 8},
                       "throughput": {"output_tok_s": tok_s, "goodput_s": tok_s / 100},
                       "slo": {"passed": all(checks.values()),
                               "checks": [{"threshold": t, "passed": ok} for t, ok in checks.items()]}})
    return {"points": points}


TTFT, TPOT = "ttft: p99 < 500ms", "tpot: p50 < 20ms"


def test_the_highest_load_meeting_every_slo_below_the_first_miss():
    doc = _doc([(1, 80.0, {TTFT: True, TPOT: True}), (2, 130.0, {TTFT: True, TPOT: True}),
                (4, 230.0, {TTFT: True, TPOT: False}), (8, 200.0, {TTFT: False, TPOT: True})])
    answer = single_answer(doc)
    assert answer["peak"] == {"point": "c=4", "output_tok_s": 230.0, "edge": False}
    assert answer["best"] == {"point": "c=2", "output_tok_s": 130.0, "goodput_s": 1.3, "edge": False}
    # tpot held again at c=8 past saturation: luck above its first miss, not a pass
    assert describe_single(answer) == [
        "which concurrency: throughput peaks at c=4 (230.0 output tok/s)",
        "  ttft: p99 < 500ms: holds up to c=4, fails from c=8",
        "  tpot: p50 < 20ms: holds up to c=2, fails from c=4",
        "  the highest load that meets every SLO: c=2 (130.0 output tok/s, goodput 1.3 req/s)"]


def test_the_sweep_s_edge_says_try_higher_and_no_load_says_try_lower():
    edge = single_answer(_doc([(1.0, 10.0, {TTFT: True}), (2.5, 20.0, {TTFT: True})], over="rate"))
    assert describe_single(edge) == [
        "which rate: throughput peaks at rate=2.5/s (20.0 output tok/s), the sweep's highest load: "
        "try higher",
        "  ttft: p99 < 500ms: holds at every load, up to rate=2.5/s",
        "  the highest load that meets every SLO: rate=2.5/s (20.0 output tok/s, goodput 0.2 req/s), the "
        "sweep's edge: try higher"]
    none = single_answer(_doc([(1, 10.0, {TTFT: False}), (2, 20.0, {TTFT: False})]))
    assert describe_single(none)[1:] == [
        "  ttft: p99 < 500ms: holds at no load of the sweep (fails from c=1)",
        "  no load of the sweep meets every SLO: try lower"]
    failed = _doc([(1, 0.0, {TTFT: False}), (2, 0.0, {TTFT: False})])
    for p in failed["points"]:
        p["counts"]["completed"] = 0  # every request refused: no answer, not "peaks at c=1 (0.0)"
    assert single_answer(failed) is None
    unset = single_answer(_doc([(1, 10.0, {}), (2, 20.0, {})]))
    assert describe_single(unset)[1] == ("  no SLO in the spec: give one (slo:) to learn the highest load "
                                         "that meets it")


@pytest.mark.slow  # runs the simulator
def test_run_prints_the_answer_after_a_single_configuration_sweep(tmp_path, capsys):
    """`run` printed a decision only across combinations: one configuration had no answer."""
    spec = write_spec(tmp_path, sweep="    concurrency: [1, 2, 4]", out=8,
                      extra="  requests: 4\nslo: {ttft: 'p99 < 600s', tpot: 'p50 < 600s'}")
    assert main(["run", spec]) == 0
    err = capsys.readouterr().err
    lines = err[err.index("which concurrency: "):].splitlines()
    assert lines[0].startswith("which concurrency: throughput peaks at c=")
    assert lines[1:4] == ["  ttft: p99 < 600s: holds at every load, up to c=4",
                          "  tpot: p50 < 600s: holds at every load, up to c=4",
                          lines[3]]
    assert lines[3].startswith("  the highest load that meets every SLO: c=4 (")
    assert lines[3].endswith("req/s), the sweep's edge: try higher")
    # the report opens with the same answer; its latency charts carry the bounds and the loads
    doc = json.loads((tmp_path / "r.json").read_text())
    data = report_data([doc])
    assert list(data)[:2] == ["results", "answer"] and data["answer"][0]["lines"] == lines[:4]
    for metric in ("ttft", "tpot"):
        chart = data["latency"][metric]
        stat = "p99" if metric == "ttft" else "p50"
        assert chart["slo"] == [{"label": f"SLO {metric}: {stat} < 600s", "y": 600000.0}]
        for path in chart["paths"]:
            assert [label for _, _, label in path["points"]] == ["c=1", "c=2", "c=4"]  # load order


@pytest.mark.slow  # runs the simulator, then the page in headless Chromium
def test_the_report_opens_with_the_answer_in_headless_chromium(tmp_path):
    from tests.headless import Chromium, chromium
    from tests.test_html_report import DRAWN

    if chromium() is None:
        pytest.skip("no Chromium on PATH: apt-get install -y chromium")
    spec = write_spec(tmp_path, sweep="    concurrency: [1, 2, 4]", out=8,
                      extra="  requests: 4\nslo: {ttft: 'p99 < 600s', tpot: 'p50 < 600s'}")
    assert main(["run", spec, "--quiet"]) == 0
    html = tmp_path / "r.html"
    assert main(["report", str(tmp_path / "r.json"), "--html", str(html)]) == 0
    with Chromium.start(str(tmp_path / "chromium")) as browser:
        page = browser.open(html.as_uri())
        got = page.evaluate(DRAWN)
        first = page.evaluate("""(() => { const s = document.querySelector('section');
            return [s.querySelector('h2').textContent, s.querySelector('pre').textContent]; })()""")
        latency = page.evaluate("window.benchcLatency")
        assert page.errors == []
    assert got["charts"] == got["drawn"] == got["inked"] and got["state"]["errors"] == []
    assert first[0] == "Which load to run at"
    assert first[1].startswith("which concurrency: throughput peaks at c=")
    assert "  the highest load that meets every SLO: c=4 (" in first[1]
    assert [c["slo"] for c in latency] == [["SLO ttft: p99 < 600s"], ["SLO tpot: p50 < 600s"]]
    for c in latency:  # every point labelled by its load, p50 and p99 lines
        assert c["labels"] == ["c=1", "c=2", "c=4"] * 2 and c["joined"]
