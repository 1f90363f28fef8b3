"""Hardening round 4, minor cases (issue 44): a price that makes a figure infinite, merge
sums past int64, the event loop's import chained into every traceback, `fit` past int64
and on many points, and the HTML report of many points."""

import json
import os

import pytest

from benchc.cli import main
from benchc.errors import ResultFormatError
from benchc.results.document import read
from benchc.results.merge import merge_docs

DATA = os.path.join(os.path.dirname(__file__), "data")


def _with_gpus() -> dict:
    doc = read(os.path.join(DATA, "result-v1-minimax.json"))
    doc["combinations"] = [{"combination": 0, "matrix": {}, "status": "ok",
                            "gpus": {"count": 4, "source": "server.gpus", "indices": None}}]
    return doc


def test_a_price_that_makes_the_cost_infinite_writes_no_infinity(tmp_path, capsys):
    f = tmp_path / "r.json"
    f.write_text(json.dumps(_with_gpus()))
    assert main(["compare", str(f), "--format", "json", "--gpu-hour", "1e308"]) == 0
    out = capsys.readouterr().out
    assert "Infinity" not in out and "NaN" not in out
    doc = json.loads(out)  # strict JSON
    assert all(p.get("cost_per_mtok") is None for p in doc["frontier"]["points"])
    # a price that gives a number still gives it
    assert main(["compare", str(f), "--format", "json", "--gpu-hour", "2.5"]) == 0
    assert all(p["cost_per_mtok"] > 0 for p in json.loads(capsys.readouterr().out)["frontier"]["points"])


def test_merge_repeats_whose_sums_pass_int64_is_refused_as_inputs_not_as_its_output(tmp_path, capsys):
    paths = []
    for i in (1, 2):
        doc = read(os.path.join(DATA, "result-v1-minimax.json"))
        doc["created"] = f"2026-01-0{i}T00:00:00Z"
        for p in doc["points"]:
            p["counts"]["completed"] = 2**62
        paths.append(tmp_path / f"m{i}.json")
        paths[-1].write_text(json.dumps(doc))
    assert main(["merge", "--repeats", *map(str, paths), "-o", str(tmp_path / "m.json")]) == 5
    err = capsys.readouterr().err
    assert "these results cannot be merged: their figures add past what a result holds" in err
    assert "pooled.counts.completed: the integer 9223372036854775808 is past int64" in err
    assert "result document invalid" not in err and not (tmp_path / "m.json").exists()
    with pytest.raises(ResultFormatError):
        merge_docs([read(str(p)) for p in paths], list(map(str, paths)), repeats=True)


@pytest.mark.parametrize("uvloop_importable", [True, False])
def test_an_error_of_the_run_carries_no_chained_uvloop_import(tmp_path, monkeypatch, uvloop_importable):
    import sys

    from benchc.run import runner
    from tests.simrun import write_spec

    if not uvloop_importable:
        monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` raises ImportError
    calls = []

    async def broken(self):
        calls.append(1)
        raise ImportError("a module the run needed")  # an ImportError of the run, not of the loop

    monkeypatch.setattr(runner.Runner, "run", broken)
    from benchc.plan.compiler import compile_spec
    from benchc.spec.loader import load

    spec = load(write_spec(tmp_path), env={})
    with pytest.raises(ImportError, match="a module the run needed") as e:
        runner.execute(compile_spec(spec), spec.data, runner.RunOptions())
    assert e.value.__context__ is None  # no "During handling of ... No module named 'uvloop'"
    assert calls == [1]  # run once: the run's own ImportError never starts it again on asyncio


def _many_points(n: int, concurrency=lambda i: i + 1) -> dict:
    import copy

    doc = read(os.path.join(DATA, "result-v1-kimi.json"))
    points = doc["points"]
    doc["points"] = []
    for i in range(n):
        p = copy.deepcopy(points[i % len(points)])
        p["params"]["concurrency"] = concurrency(i)
        p["id"] = f"c={concurrency(i)}"
        doc["points"].append(p)
    return doc


def test_fit_of_twenty_thousand_points_gives_the_table_through_every_one():
    """Each concurrency's step is its TPOT p50 (made non-decreasing), a row per concurrency and
    one beyond; a residual per point. (Before, the fit grouped and interpolated per point over
    every point: 4,000 points took 9 s, 20,000 minutes; measured, not asserted.)"""
    from benchc.sim.fit import fit

    doc = _many_points(20_000)
    twin = fit([("x.json", doc)])
    table = twin["sim"]["step_table"]
    assert len(table) == 20_001 and [b for b, _ in table[:-1]] == list(range(1, 20_001))
    assert table[-1][0] == 40_000
    assert all(a[1] <= b[1] for a, b in zip(table, table[1:], strict=False))  # non-decreasing
    assert len(twin["residuals"]) == 20_000
    first = twin["residuals"][0]
    tpot_ms = doc["points"][0]["latency"]["tpot_us"]["p50"] / 1000
    assert first["tpot_p50_ms"]["measured"] == pytest.approx(tpot_ms, abs=1e-3)


def test_fit_never_writes_a_batch_past_int64(tmp_path, capsys):
    from benchc.sim.fit import MAX_FIT_CONCURRENCY, fit
    from benchc.spec.limits import MAX_CONCURRENCY

    assert MAX_FIT_CONCURRENCY == MAX_CONCURRENCY
    doc = _many_points(4, concurrency=lambda i: (1, 2, 4, 2**62)[i])
    twin = fit([("x.json", doc)])
    assert max(b for b, _ in twin["sim"]["step_table"]) == 8  # 2^62 left out, not doubled past int64
    assert any("left out, at a concurrency past 1,000,000" in n and "c=4611686018427387904" in n
               for n in twin["notes"])
    f = tmp_path / "r.json"
    f.write_text(json.dumps(doc))
    assert main(["fit", str(f), "-o", str(tmp_path / "t.yaml")]) == 0
    from benchc.sim.twin import read_twin

    assert read_twin(str(tmp_path / "t.yaml"))["sim"]["step_table"][-1][0] == 8


def test_a_report_of_many_points_keeps_128_curves_and_says_what_it_left_out():
    from benchc.results.html_report import page
    from tests.test_html_report import MINIMAX, page_data, with_series

    d = page_data(page([with_series(read(MINIMAX), 300, 10)]))
    assert len(d["table"]["rows"]) == 300 and len(d["timeseries"]) == 128
    names = [t["name"] for t in d["timeseries"]]
    assert names[0].endswith(": c=1") and names[-1].endswith(": c=300") and len(set(names)) == 128
    assert d["left_out_of_page"]["timeseries"].startswith("time series of 128 of 300 points")
    assert d["left_out_of_page"]["spectra"].startswith("spectra of 128 of 300 points")


@pytest.mark.slow  # 10,000 points built and drawn: 13 s of CPU
def test_a_report_of_ten_thousand_points_is_bounded_and_says_what_it_left_out(tmp_path):
    """Every point's row stays; spectra and time series of at most 128 points, evenly across
    the load (first and last kept), and the page says so. It was a 211 MB page (with 60
    samples a point, 27.6 MiB before, 3.6 MiB after)."""
    from benchc.results.html_report import MAX_CURVES, page
    from tests.test_html_report import MINIMAX, page_data, with_series

    doc = with_series(read(MINIMAX), 10_000, 60)
    text = page([doc])
    size = len(text.encode("utf-8"))
    print(f"10,000 points x 60 samples: {size / 2**20:.1f} MiB")
    assert size < 16 * 2**20
    d = page_data(text)
    assert len(d["table"]["rows"]) == 10_000
    assert MAX_CURVES == 128 and len(d["timeseries"]) == 128
    names = [t["name"] for t in d["timeseries"]]
    assert names[0].endswith(": c=1") and names[-1].endswith(": c=10000")
    assert all(len(d["spectra"][m]["series"]) == 128 for m in d["spectra"])
    assert d["left_out_of_page"] == {
        "spectra": "spectra of 128 of 10,000 points, evenly across the load (the first and the last "
                   "included): a page of every one could not be read; the result holds them all",
        "timeseries": "time series of 128 of 10,000 points, evenly across the load (the first and the last "
                      "included): a page of every one could not be read; the result holds them all"}
    assert "left_out_of_page" not in page_data(page([with_series(read(MINIMAX), 100, 30)]))
