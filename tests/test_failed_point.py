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


def _dead_server_doc(interrupted: bool, named: bool = True) -> dict:
    """A result whose point c=4 the dead-connect streak stopped (run/deadserver.py): 10 completed,
    then 10 could not connect, and the wind-down cancelled the 3 still in flight (the error kind
    cancelled, as run/loadgen.py's _wind_down leaves a server's stop)."""
    point = _point(23, 10, {"connect": 10, "cancelled": 3})
    errors = [{"kind": "server_unreachable", "combination": 0, "point": "c=4",
               "message": "c=4: 10 requests in a row could not connect to the server"}] if named else []
    return {"interrupted": interrupted, "errors": errors, "points": [point]}


def test_a_dead_servers_in_flight_cancels_are_failures_not_ctrl_cs():
    """13 of 23 lost to a server that stopped accepting connections: a failed point. Before, its 3
    cancels in flight were subtracted as Ctrl-C's (10 of 23 failed: under half, no failure)."""
    why = "c=4: 13 of 23 requests failed (10 connect, 3 cancelled), more than the 50% a point may lose"
    assert failed_points(_dead_server_doc(interrupted=False)) == [why]
    # a run not interrupted had no Ctrl-C, whatever its errors say
    assert failed_points(_dead_server_doc(interrupted=False, named=False)) == [why]
    # interrupted later (another point), this one still the server's stop
    assert failed_points(_dead_server_doc(interrupted=True)) == [why]
    # an older result that Ctrl-C interrupted, which counted its cancels as errors: as before
    assert failed_points(_dead_server_doc(interrupted=True, named=False)) == []
    # the point alone (no document to say): as before
    assert point_failure(_dead_server_doc(interrupted=False)["points"][0]) is None


DEAD = """\
version: 1
name: dead
target: {{base_url: "{url}", model: m}}
workload:
  dataset:
    random: {{input_tokens: 8, output_tokens: 4, seed: 1}}
load:
  warmup: {{requests: 0}}
  sweep: {{concurrency: [4]}}
  requests: 200
output: {{path: {out}}}
"""


@pytest.mark.slow  # a run against a server that stops listening mid-point
def test_a_server_that_stops_accepting_connections_leaves_its_in_flight_cancels_as_failures(tmp_path, capsys):
    """A server answers 10 requests (closing each connection), then holds 3 streams open and stops
    listening: the 4th slot's requests cannot connect, the streak stops the point (exit 3) and the
    wind-down cancels the 3 held streams. The result says `cancelled` among the errors though no
    Ctrl-C came (interrupted: false): the evidence that the rule above is needed; the point is a
    failed one (13 or more of at most 24 lost: one slot free, at most one more answered before the
    listener closed), which it was not before."""
    import asyncio

    from aiohttp import web

    from tests.hostile import FakeServer

    state: dict = {"quick": 0, "held": 0, "release": None}
    chunk = b'data: {"choices":[{"index":0,"delta":{"content":" hi"},"finish_reason":null}]}\n\n'

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        resp.force_close()  # every request after needs a connection of its own
        await resp.prepare(request)
        await resp.write(chunk)
        if state["quick"] < 10 or state["held"] >= 3:
            state["quick"] += 1
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        state["held"] += 1
        if state["held"] == 3:  # three held: stop listening (the streams go on)
            for site in server.runner.sites:
                site._server.close()
        if state["release"] is None:
            state["release"] = asyncio.Event()
        await state["release"].wait()  # held until the test ends (aiohttp does not cancel it)
        return resp

    server = FakeServer({"/v1/chat/completions": chat})
    try:
        spec = tmp_path / "s.yaml"
        spec.write_text(DEAD.format(url=server.url, out=tmp_path / "r.json"))
        code = main(["run", str(spec)])
    finally:
        if state["release"] is not None:
            server.loop.call_soon_threadsafe(state["release"].set)
        server.close()
    err = capsys.readouterr().err
    assert code == 3 and "requests in a row could not connect" in err
    doc = read(str(tmp_path / "r.json"))
    assert doc["interrupted"] is False and [e["kind"] for e in doc["errors"]] == ["server_unreachable"]
    (point,) = doc["points"]
    counts = point["counts"]
    assert counts["errors"]["cancelled"] == 3 and counts["errors"]["connect"] >= 10
    assert counts["completed"] == state["quick"] and "interrupted" not in (point.get("cancelled") or {})
    lost = counts["failed"]
    assert lost == counts["sent"] - counts["completed"] and lost / counts["sent"] > 0.5
    (why,) = failed_points(doc)
    assert why.startswith(f"c=4: {lost} of {counts['sent']} requests failed (") and "3 cancelled" in why
    assert why.endswith("more than the 50% a point may lose")
    # the console tells them as failures too, not as cancels of an interrupted run (before: "10 of
    # 23 requests failed" and "3 requests in flight cancelled when the run was interrupted")
    assert f"ERROR: c=4: {lost} of {counts['sent']} requests failed; first error (connect)" in err
    assert "when the run was interrupted" not in err
    assert "NOTE: c=4: partial: the point's load was stopped early" in err
