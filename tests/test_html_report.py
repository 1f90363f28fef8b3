"""`benchc report --html`: one self-contained interactive page (results/html_report.py, uPlot
vendored under benchc/results/_vendor). The page's data is checked here against the results it
was made from; in headless Chromium (tests/headless.py, the DevTools protocol over aiohttp's
websocket client) every chart must be drawn with no console error, and a pointer over a chart
must show a value. Without a Chromium the browser test is skipped, and says so."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import sys

import pytest

from benchc.cli import main
from benchc.errors import EXIT_SEARCH_UNDECIDED, EXIT_THRESHOLD
from benchc.results.document import read
from benchc.results.html_report import page, report_data
from tests.conftest import REPO
from tests.headless import Chromium, chromium

DATA = os.path.join(REPO, "tests", "data")
MINIMAX = os.path.join(DATA, "result-v1-minimax.json")
KIMI = os.path.join(DATA, "result-v1-kimi.json")
VENDOR = os.path.join(REPO, "benchc", "results", "_vendor", "uplot")
# the files VENDORED.md names, unmodified from the npm package uplot 1.6.32
UPLOT_SHA256 = {"uPlot.iife.min.js": "19c8d4c6ad88929a79f4ae49d6f7161566dfd0ba3d15cc495e974f787eb78f1f",
                "uPlot.min.css": "df630c6a8d6f8eeaff264b50f73ce5b114f646ffd9a0bb74f049b0a00135fa04"}
MAX_PAGE_BYTES = 2 * 1024 * 1024  # issue 32: under 2 MB for 100 points


def page_data(text: str) -> dict:
    m = re.search(r"<script id='benchc-data' type='application/json'>(.*?)</script>", text, re.S)
    assert m is not None
    return json.loads(m.group(1))


def with_series(doc: dict, points: int, samples: int) -> dict:
    """`doc` with `points` points (its own, repeated at new loads), each given a time series of
    `samples` samples a second apart: the shape a long sweep's result has."""
    out = copy.deepcopy(doc)
    base = out["points"]
    out["points"] = []
    for i in range(points):
        p = copy.deepcopy(base[i % len(base)])
        p["id"] = f"c={i + 1}"
        p["params"]["concurrency"] = i + 1
        t = [round(k + 0.5, 6) for k in range(samples)]
        p["timeseries"] = {
            "interval_s": 1.0,
            "server": {"available": True, "kind": "vllm", "t_s": t, "running": [float(i % 64)] * samples,
                       "waiting": [float(k % 7) for k in range(samples)],
                       "kv_cache_usage": [round(0.5 + k / (4 * samples), 6) for k in range(samples)],
                       "preemptions": [k // 10 for k in range(samples)],
                       "prefix_cache_hit_tokens": [k * 32 for k in range(samples)]},
            "client": {"t_s": [float(k) for k in range(samples)], "in_flight": [float(i + 1)] * samples,
                       "in_flight_max": [i + 1] * samples, "sends": [k % 3 for k in range(samples)]}}
        out["points"].append(p)
    return out


def test_the_vendored_uplot_is_the_version_its_note_names():
    for name, digest in UPLOT_SHA256.items():
        with open(os.path.join(VENDOR, name), "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == digest, name
    with open(os.path.join(VENDOR, "VENDORED.md"), encoding="utf-8") as f:
        note = f.read()
    assert "1.6.32" in note and all(d in note for d in UPLOT_SHA256.values())
    with open(os.path.join(VENDOR, "LICENSE"), encoding="utf-8") as f:
        assert f.read().startswith("The MIT License")


def test_the_page_needs_no_network_and_no_matplotlib(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    out = tmp_path / "r.html"
    assert main(["report", MINIMAX, KIMI, "--html", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    # nothing fetched: no script, style or image from elsewhere
    assert not re.search(r"<(script|link|img|iframe)[^>]*\s(src|href)\s*=", text, re.I)
    assert "@import" not in text and "url(http" not in text
    assert "MIT License" in text and "uPlot" in text  # the library inlined, its license with it
    # the PNGs still need matplotlib, and say so
    capsys.readouterr()
    assert main(["report", MINIMAX, "--png", str(tmp_path / "png")]) == 2
    assert "pip install 'benchc[report]'" in capsys.readouterr().err


def test_the_page_holds_every_point_and_its_series(tmp_path):
    minimax, kimi = read(MINIMAX), read(KIMI)
    doc = with_series(minimax, 3, 5)
    d = report_data([doc, kimi], ["a.json", "b.json"])
    assert [r[1] for r in d["table"]["rows"]] == ["c=1", "c=2", "c=3"] + [p["id"] for p in kimi["points"]]
    assert d["table"]["header"][3] == "out tok/s"
    # output tok/s against the load: each result its line, at its own loads
    lines = {tuple(v for v in s["y"] if v is not None) for s in d["throughput"]["series"]}
    assert lines == {tuple(p["throughput"]["output_tok_s"] for p in r["points"]) for r in (doc, kimi)}
    assert d["throughput"]["x"] == sorted(d["throughput"]["x"])
    # the spectra: one line per point with a TTFT histogram, values from the histogram in ms
    ttft = d["spectra"]["ttft"]
    assert len(ttft["series"]) == 3 + len(kimi["points"])
    p50 = ttft["x"].index(2.0)  # x = 1 / (1 - p/100): p50 at 2
    first = doc["points"][0]["latency"]["ttft_us"]
    assert abs(ttft["series"][0]["y"][p50] - first["p50"] / 1000) <= first["p50"] / 1000 * 0.001
    # a time series per point that has one: the server's and the client's columns on one x
    assert [t["name"] for t in d["timeseries"]] == [f"a.json: sim minimax-m2.5-tp4: c={i}" for i in (1, 2, 3)]
    server, client = d["timeseries"][1]["sides"]
    assert server["t"] == [0.5, 1.5, 2.5, 3.5, 4.5] and client["t"] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert set(server["cols"]) == {"server running", "server waiting", "server kv cache usage",
                                   "server preemptions"}  # no query counter in this series: no hit rate
    assert server["cols"]["server waiting"] == [0, 1, 2, 3, 4]
    assert server["cols"]["server preemptions"] == [0] * 5
    assert server["cols"]["server kv cache usage"] == [0.5, 0.55, 0.6, 0.65, 0.7]
    assert client["cols"] == {"client in flight": [2] * 5, "client sends / interval": [0, 1, 2, 0, 1]}
    # no frontier without GPU counts (results before them): the page says nothing rather than guess
    assert d["pareto"] == [] and d["decision"] == []


def test_a_hundred_points_stay_under_two_megabytes(tmp_path):
    doc = with_series(read(MINIMAX), 100, 300)  # 100 points of five minutes at 1s
    text = page([doc])
    size = len(text.encode("utf-8"))
    print(f"100 points x 300 samples: {size / 1024:.0f} KiB")
    assert size < MAX_PAGE_BYTES
    assert len(page_data(text)["timeseries"]) == 100


def test_text_from_a_result_stays_text(tmp_path):
    doc = read(MINIMAX)
    hostile = "</script><script>alert(1)</script><img src=x onerror=alert(2)> $5"  # $: no mathtext escape
    doc["target"][0]["model"] = hostile
    doc["points"][0]["id"] = hostile
    text = page([doc])
    assert "<script>alert(1)" not in text and "<img src=x" not in text
    d = page_data(text)  # the JSON block gives it back as it was, for the script to set as text
    assert d["table"]["rows"][0][1] == hostile
    assert any(hostile in s["label"] for s in d["throughput"]["series"])


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if chromium() is None:
        pytest.skip("no Chromium on PATH (chromium, chromium-browser, google-chrome; or BENCHC_CHROMIUM): "
                    "the report was not opened in a browser. apt-get install -y chromium")
    with Chromium.start(str(tmp_path_factory.mktemp("chromium"))) as b:
        yield b


DRAWN = """(() => {
  const charts = Array.from(document.querySelectorAll('.uplot'));
  const inked = charts.map(c => Array.from(c.querySelectorAll('canvas')).some(cv => {
    const px = cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data;
    for (let i = 3; i < px.length; i += 4) if (px[i]) return true;
    return false;
  }));
  return {state: window.benchcReport, charts: charts.length, inked: inked.filter(Boolean).length,
          drawn: document.querySelectorAll('.uplot[data-drawn]').length};
})()"""

CENTER = """(() => {
  const o = %s;
  o.scrollIntoView({block: 'center'});
  const r = o.getBoundingClientRect();
  return [r.x + r.width / 2, r.y + r.height / 2];
})()"""

LEGEND = """new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => done(
  Array.from(document.querySelectorAll('.uplot')[%d].querySelectorAll('.u-legend .u-value'))
       .map(e => e.textContent)))))"""


def spec_run(tmp_path, name: str, *sets: str, codes: tuple[int, ...] = (0,)) -> str:
    out = str(tmp_path / f"{name}.json")
    args = [a for kv in sets for a in ("--set", kv)]
    assert main(["run", os.path.join(REPO, "specs", f"{name}.yaml"), "--out", out, "--quiet", *args]) in codes
    return out


@pytest.mark.slow  # a matrix run of both presets, sessions and a capacity search, then the browser
def test_the_report_of_a_matrix_run_opens_in_headless_chromium(tmp_path, browser):
    # its SLOs may fail on a machine busy enough to slow the simulator (exit 1): charted the same
    decided = spec_run(tmp_path, "decide", "load.requests=8", "server.metrics_interval=250ms",
                       codes=(0, EXIT_THRESHOLD))
    sessions = spec_run(tmp_path, "multi-turn-chat", "load.sweep.concurrency=[2]", "load.sessions=3",
                        "workload.dataset.sessions.think_time=0")
    # on a machine busy enough to make the client doubt its probes, a search may end undecided
    # (exit 8): its probes are charted all the same
    search = spec_run(tmp_path, "capacity-search", "load.requests=8", "load.search.max=8",
                      codes=(0, EXIT_SEARCH_UNDECIDED))
    html = tmp_path / "report.html"
    assert main(["report", decided, sessions, search, "--html", str(html)]) == 0
    doc = read(decided)
    d = page_data(html.read_text(encoding="utf-8"))
    # what the page holds: every point, both frontiers, the decision the matrix run printed, a
    # series per point, sessions by turn, a chart per SLO item of the search
    points = [p for r in (doc, read(sessions), read(search)) for p in r["points"]]
    assert len(d["table"]["rows"]) == len(points) and len(d["timeseries"]) == len(points)
    assert [p["axis"] for p in d["pareto"]] == ["output_tok_s_per_gpu", "goodput_s_per_gpu"]
    best = doc["decision"][0]["best"]
    assert any(f"preset={best['matrix']['preset']} {best['load']}" in a[1] for a in d["decision"])
    assert d["sessions"] is not None and len(d["searches"]) == 3
    # the matrix's combinations side by side at each load (results/sidebyside.py's cells)
    first = d["side_by_side"][0]
    assert first["load"] == "c=1" and first["header"][:3] == ["combination", "GPUs", "out tok/s"]
    assert [r[0] for r in first["rows"]][:2] == ["decide.json: preset=minimax-m2.5-tp4",
                                                 "decide.json: preset=kimi-k2.5-nvfp4-tp8"]
    expected = (1 + len(d["latency"]) + len(d["pareto"]) + len(d["spectra"]) + 1  # + the time series
                + 2 + len(d["searches"]))  # sessions: TTFT and cached fraction by turn
    page_ = browser.open(html.as_uri())
    got = page_.evaluate(DRAWN)
    assert page_.errors == []
    assert got["state"] == {"charts": expected, "drawn": expected, "errors": []}, got
    assert got["charts"] == got["drawn"] == got["inked"] == expected, got
    # a pointer over the throughput chart shows its values in the legend (hover)
    assert set(page_.evaluate(LEGEND % 0)) == {"--"}
    x, y = page_.evaluate(CENTER % "document.querySelectorAll('.uplot')[0].querySelector('.u-over')")
    page_.move_pointer(x, y)
    values = page_.evaluate(LEGEND % 0)
    assert values[0] != "--" and any(v != "--" for v in values[1:]), values
    # a click on a header sorts the table by it (out tok/s, descending on the second click)
    column = d["table"]["header"].index("out tok/s")
    page_.evaluate(f"document.querySelectorAll('table.sortable')[0].querySelectorAll('th')[{column}].click()")
    page_.evaluate(f"document.querySelectorAll('table.sortable')[0].querySelectorAll('th')[{column}].click()")
    shown = page_.evaluate(f"""Array.from(document.querySelectorAll('table.sortable')[0]
        .querySelectorAll('tbody tr')).map(r => parseFloat(r.children[{column}].textContent))""")
    assert shown == sorted((float(r[column]) for r in d["table"]["rows"]), reverse=True)
    # a legend click hides its series (toggle); another point's series replaces the time series chart
    first = "document.querySelectorAll('.uplot')[0]"
    legend = f"{first}.querySelectorAll('.u-legend .u-series')"
    page_.click(*page_.evaluate(CENTER % f"{legend}[1].querySelector('th')"))
    assert page_.evaluate(f"Array.from({legend}).map(r => r.classList.contains('u-off'))")[1:] == \
        [True] + [False] * (len(d["throughput"]["series"]) - 1)
    page_.evaluate("""(() => { const s = document.querySelector('select'); s.value = '5';
                             s.dispatchEvent(new Event('change')); })()""")  # the 6th point
    after = page_.evaluate(DRAWN)
    assert after["charts"] == after["drawn"] == after["inked"] == expected and page_.errors == []
    assert d["timeseries"][5]["name"] in page_.evaluate("Array.from(document.querySelectorAll('.u-title'))"
                                                        ".map(e => e.textContent).join('|')")


def test_the_prefix_cache_hit_rate_is_charted_per_interval():
    from benchc.results.html_report import _interval_rates

    # counters since the point's start: 32 of 64 tokens found in the second interval, none looked
    # up in the third (no rate, rather than 0), 64 of 128 in the fourth
    assert _interval_rates([0, 32, 32, 96], [64, 128, 128, 256]) == [0.0, 0.5, None, 0.5]
    assert _interval_rates([None, 10], [None, 20]) == [None, 0.5]
