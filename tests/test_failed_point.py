"""A failed point is not a success (issue 29, class 7): a point in which no request completed,
or more than half failed, gives the run exit 7, the result keeping every figure."""

import pytest

from benchc.cli import main
from benchc.errors import EXIT_POINT_FAILED
from benchc.results.document import read
from benchc.results.failed import MAX_ERROR_FRACTION, failed_points, point_failure
from tests.simrun import Sim, write_spec


def _point(sent, completed, errors=None, probe=None, pid="c=4"):
    failed = sent - completed
    if errors is None:
        errors = {"http_status": failed} if failed else {}
    return {"id": pid, "params": {"concurrency": 4, "probe": probe},
            "counts": {"sent": sent, "completed": completed, "failed": failed, "errors": errors}}


@pytest.mark.parametrize("sent, completed, errors, why", [
    (8, 0, {"http_status": 5, "connect": 3}, "no request completed (5 http_status, 3 connect)"),
    (0, 0, {}, "no request was sent"),
    (10, 4, {"timeout": 6}, "6 of 10 requests failed (6 timeout), more than the 50% a point may lose"),
    (9, 1, {"a": 2, "b": 2, "c": 2, "d": 2}, "8 of 9 requests failed (2 a, 2 b, 2 c, ...), more than"),
])
def test_a_point_fails_with_no_completion_or_past_the_stated_fraction(sent, completed, errors, why):
    assert point_failure(_point(sent, completed, errors)).startswith(why)


@pytest.mark.parametrize("sent, completed", [(10, 5), (10, 10), (1, 1), (3, 2)])
def test_a_point_within_the_bound_is_no_failure(sent, completed):
    assert MAX_ERROR_FRACTION == 0.5
    assert point_failure(_point(sent, completed)) is None


def test_a_search_probe_past_capacity_is_how_a_search_works_not_a_failure():
    assert point_failure(_point(8, 0, probe=2)) is None


def test_failed_points_names_each_in_order():
    doc = {"points": [_point(4, 0, pid="c=1"), _point(4, 4, pid="c=2"), _point(4, 1, pid="c=4")]}
    assert failed_points(doc) == ["c=1: no request completed (4 http_status)",
                                  "c=4: 3 of 4 requests failed (3 http_status), more than the 50% a point "
                                  "may lose"]


@pytest.mark.slow  # a run against a simulator subprocess
def test_a_run_whose_every_request_failed_exits_7_and_keeps_its_figures(tmp_path, capsys):
    """It exited 0: a CI job took a server answering 503 to everything for a benchmark."""
    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4", "--fault", "http_503:1.0", "--param", "seed=1")
    try:
        spec = write_spec(tmp_path, sweep="    concurrency: [2]", out=4, extra="  requests: 6")
        code = main(["run", spec, "--base-url", sim.url, "--quiet"])
    finally:
        sim.close()
    err = capsys.readouterr().err
    assert code == EXIT_POINT_FAILED, err
    assert "c=2: no request completed (6 http_status)" in err and "result written to" in err
    point = read(str(tmp_path / "r.json"))["points"][0]
    assert point["counts"]["sent"] == 6 and point["counts"]["failed"] == 6
    assert point["counts"]["errors"] == {"http_status": 6} and point["error_rate"] == 1.0
