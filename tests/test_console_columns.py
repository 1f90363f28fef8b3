"""The console table's columns (run/console.py, read from benchc/catalog.py): what each shows
for a stored result's points."""

import copy
import os

from benchc.results.document import read
from benchc.run.console import Console

MINIMAX = os.path.join(os.path.dirname(__file__), "data", "result-v1-minimax.json")


def _printed(capsys, points: list[dict]) -> list[str]:
    console = Console(quiet=False, live=False)
    for p in points:
        console.point(copy.deepcopy(p) | {"trust": {"trusted": True, "doubts": []}})
    return capsys.readouterr().err.splitlines()


def test_the_console_shows_request_rate_and_tpot_p50_beside_the_throughput_and_latencies(capsys):
    points = read(MINIMAX)["points"]
    header, legend, *rows = _printed(capsys, points)
    assert header.split() == ["point", "reqs", "out", "tok/s", "req/s", "cached", "TTFT", "p50", "TTFT",
                              "p99", "ITL", "p50", "ITL", "p99", "TPOT", "p50", "E2E", "mean", "E2E", "p99",
                              "errors"]
    assert "req/s: completed requests / that window (request_s)" in legend
    for p, row in zip(points, rows, strict=True):
        cells = row.split()
        assert cells[0] == p["id"] and cells[3] == f"{p['throughput']['request_s']:.2f}"
        assert cells[4] == "-"  # a result of before the cache check: its share is not known
        assert cells[9] == f"{p['latency']['tpot_us']['p50'] / 1000:.1f}ms"
        # columns line up under their headers (right-aligned)
        assert len(row) == len(header)


def test_a_point_without_a_figure_shows_a_dash_in_its_column(capsys):
    p = copy.deepcopy(read(MINIMAX)["points"][0])
    p["latency"]["tpot_us"] = {"count": 0, "out_of_range": 0, "unit": "us"}
    _, _, row = _printed(capsys, [p])
    assert row.split()[9] == "-"
