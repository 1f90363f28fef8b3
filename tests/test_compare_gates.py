"""compare's gates on small samples (issue 45, item 5): a change far beyond what 8 requests a
point can hide breaches its gate; a gate the figures cannot judge fails loudly (exit 1)
unless --allow-unjudged."""

import copy
import json
from pathlib import Path

from benchc.cli import main
from benchc.errors import EXIT_OK, EXIT_THRESHOLD
from benchc.results.compare import compare_docs
from benchc.results.document import read
from tests.test_first_hour import MINIMAX, slower


def _write(tmp_path, base, new):
    paths = [tmp_path / "base.json", tmp_path / "new.json"]
    for path, doc in zip(paths, (base, new), strict=True):
        path.write_text(json.dumps(doc))
    return [str(p) for p in paths]


def test_a_huge_regression_on_8_requests_a_point_breaches_its_gate(tmp_path, capsys):
    """+25,341% TTFT p99 on 8 requests a point was 'not judged' and the run exited 0."""
    base = read(MINIMAX)
    new = copy.deepcopy(base)
    for p in new["points"]:
        slower(p, "ttft", 254.41)
    row = compare_docs(base, new)["points"][0]["metrics"]["ttft.p99"]
    assert row["runs"] == [1, 1] and abs(row["change"] - 253.41) < 0.1 and row["significant"] == "yes"
    # c=1: base 14,992..16,303 us (spread 1.087), new 254.41 times that (spread about as wide,
    # in coarser buckets): each run may hide a spread's worth beyond its samples, so the change
    # is at least about 254.41 / 1.087^2 - 1 = +21,400%; 196.8 as the histograms have it
    assert row["change_bound"] == 196.783
    assert main(["compare", *_write(tmp_path, base, new), "--fail-on", "ttft.p99 > +10%"]) == EXIT_THRESHOLD
    err = capsys.readouterr().err
    assert "c=1: ttft.p99 > +10% (measured +25338.3%; too few requests to bootstrap" in err
    assert "c=4: ttft.p99 > +10%" in err


def test_a_change_within_what_8_requests_can_hide_is_not_judged_by_separation():
    base = read(MINIMAX)
    new = copy.deepcopy(base)
    for p in new["points"]:
        slower(p, "ttft", 1.3)  # c=1: every request apart, but within the spread each run may hide
    rows = {r["point"]: r["metrics"]["ttft.p99"] for r in compare_docs(base, new)["points"]}
    assert {k: (r["significant"], "change_bound" in r) for k, r in rows.items()} == {
        "c=1": ("n/a", False), "c=2": ("n/a", False), "c=4": ("n/a", False)}


def test_a_gate_that_could_not_judge_fails_unless_allowed(tmp_path, capsys):
    """It printed a NOTE and exited 0: a CI gate that can never fire passed every change."""
    base = read(MINIMAX)
    new = copy.deepcopy(base)
    for p in new["points"]:
        slower(p, "ttft", 1.3)
    paths = _write(tmp_path, base, new)
    assert main(["compare", *paths, "--fail-on", "ttft.p99 > +10%"]) == EXIT_THRESHOLD
    err = capsys.readouterr().err
    assert ("c=1: ttft.p99 > +10%: not judged (+30.0%, beyond noise: n/a): too few samples around the "
            "percentile, or a client-limited side; repeat the run (load.repeats) or send more requests to "
            "judge it: could not judge (--allow-unjudged lets it pass)") in err
    assert main(["compare", *paths, "--fail-on", "ttft.p99 > +10%", "--allow-unjudged"]) == EXIT_OK
    assert "NOTE: c=1: ttft.p99 > +10%: not judged (+30.0%, beyond noise: n/a)" in capsys.readouterr().err


def test_my_server_spec_sends_enough_requests_for_the_median_gate_it_shows():
    """It sent 8 a point: no percentile of it could be judged by compare's bootstrap."""
    from benchc.plan.compiler import compile_spec
    from benchc.results.compare import MIN_TAIL
    from benchc.spec.loader import load

    text = Path("specs/my-server.yaml").read_text()
    assert "--fail-on 'ttft.p50 > +10%'" in text
    plan = compile_spec(load("specs/my-server.yaml", env={}))
    for step in plan.load_steps():
        assert step.requests * 0.5 >= MIN_TAIL, step.id
