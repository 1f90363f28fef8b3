"""Hardening round 4, class 7 (issue 44): energy figures that cannot be right. A negative or
non-finite draw is dropped where it enters (and counted), an energy counter that runs
backwards (a GPU reset) is read as a reset (the GPU's joules from its power samples, said),
the decision never ranks energy at or below 0, and a document holding negative energy is
refused on read, exit 5, naming its JSON path."""

import copy
import json
import os

import pytest

from benchc.cli import main
from benchc.results import api
from benchc.results.decide import decision
from benchc.results.document import read
from benchc.run.power import PowerSampler, energy_between

DATA = os.path.join(os.path.dirname(__file__), "data")
S = 1_000_000_000


def test_a_counter_that_runs_backwards_is_a_reset_never_negative_joules():
    # 300 W throughout; the counter is reset to 0 between the second and third sample
    rows = [(0, 300.0, 1000.0), (S, 300.0, 1300.0), (2 * S, 300.0, 100.0), (3 * S, 300.0, 400.0)]
    joules, counted = energy_between(rows, 0, 3 * S)
    assert (joules, counted) == (pytest.approx(900.0), False)  # was 1300 - 1000 - 900 = -600
    power = PowerSampler(None)
    for t, w, j in rows:
        power.add(0, t, w, j)
    e = power.block(0, 3 * S, "whole", 90, None, [0])
    (gpu,) = e["gpus"]
    assert gpu["joules"] == 900.0 and gpu["counter_reset"] is True
    assert e["server"]["joules"] == 900.0 and e["joules_per_output_token"] == 10.0
    assert e["method"] == "power samples, trapezoid rule"
    assert "energy counter of GPU 0 ran backwards (a reset)" in e["note"]


def test_a_counter_that_jumps_faster_than_a_gpu_draws_is_read_as_a_reset():
    # 300 W by its draw; the counter leaps by 1.8e16 J in a second (a reading of another base)
    rows = [(0, 300.0, 0.0), (S, 300.0, 1.8e16), (2 * S, 300.0, 1.8e16 + 300.0)]
    power = PowerSampler(None)
    for t, w, j in rows:
        power.add(0, t, w, j)
    e = power.block(S // 2, S // 2 + 1_000_000, "whole", 1, None, [0])  # a 1 ms window
    assert e["gpus"][0]["counter_reset"] is True and e["server"]["power_w"] == 300.0
    # a counter that rises as the draw says is read as it is
    steady = PowerSampler(None)
    for t, w, j in ((0, 300.0, 0.0), (S, 300.0, 300.0)):
        steady.add(0, t, w, j)
    e = steady.block(0, S, "whole", 1, None, [0])
    assert e["method"] == "energy counters" and "counter_reset" not in e["gpus"][0]


@pytest.mark.parametrize("watts", [-500.0, float("nan"), float("inf"), 1e30])
def test_an_impossible_draw_is_dropped_where_it_enters_and_counted(watts):
    power = PowerSampler(None)
    for t, w in ((0, 100.0), (S, watts), (2 * S, 100.0)):
        power.add(0, t, w, None)
    power.add(1, 0, 50.0, float("nan"))  # a counter that is no number: the draw is kept
    power.add(1, 2 * S, 50.0, -3.0)
    power.add(10**30, S, 50.0, 1.0)  # an index no GPU has: no GPU of the block
    e = power.block(0, 2 * S, "whole", 10, None, [0, 1])
    g0, g1 = e["gpus"]  # and no third
    assert g0["joules"] == 200.0 and g0["dropped_samples"] == 1 and g0["samples"] == 2
    assert g1["joules"] == 100.0 and "dropped_samples" not in g1
    assert e["server"]["joules"] == 300.0
    assert "1 reading(s) of an impossible draw (negative, not finite, past 100 kW) were dropped" in e["note"]


def _energy(joules: float) -> dict:
    w = joules / 10.0
    return {"available": True, "source": "nvml", "window": "whole", "start_ns": 0, "end_ns": 10 * S,
            "window_s": 10.0, "method": "energy counters",
            "gpus": [{"index": 0, "name": "H200", "server": True, "samples": 100, "power_w": w,
                      "joules": joules}],
            "server": {"gpus": [0], "power_w": w, "joules": joules},
            "machine": {"power_w": w, "joules": joules}, "output_tokens": 1000,
            "joules_per_output_token": joules / 1000}


def _doc(joules: float) -> dict:
    doc = read(os.path.join(DATA, "result-v1-minimax.json"))
    doc["combinations"] = [{"combination": 0, "matrix": {}, "status": "ok",
                            "gpus": {"count": 4, "source": "server.gpus", "indices": None}}]
    for p in doc["points"]:
        p["energy"] = _energy(joules)
    return doc


def test_a_result_holding_negative_energy_is_refused_on_read(tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_doc(2688.0)))
    assert read(str(good))["points"][0]["energy"]["server"]["joules"] == 2688.0
    for where in ("server.joules", "gpus[0].power_w", "joules_per_output_token"):
        doc = _doc(2688.0)
        block = doc["points"][1]["energy"]
        if where == "gpus[0].power_w":
            block["gpus"][0]["power_w"] = -268.8
        else:
            key = where.split(".")
            (block[key[0]] if len(key) > 1 else block)[key[-1]] = -2.688
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(doc))
        assert main(["compare", str(bad)]) == 5
        err = capsys.readouterr().err
        assert f"$.points[1].energy.{where}: " in err and "less than the minimum of 0" in err
        assert "Traceback" not in err


def test_the_decision_never_ranks_energy_at_or_below_zero(tmp_path):
    measured = api.from_document(_doc(2688.0), str(tmp_path / "a.json"))
    (answer,) = decision([measured])
    assert answer["per_joule"]["best"]["goodput_per_kj"] > 0
    for joules in (-2688.0, 0.0):  # a document built in memory, never read through the schema
        doc = _doc(2688.0)
        for p in doc["points"]:
            p["energy"] = copy.deepcopy(_energy(joules))
        (answer,) = decision([api.from_document(doc, str(tmp_path / "b.json"))])
        assert "per_joule" not in answer
        assert answer["best"].get("goodput_per_kj") is None
        assert answer["best"].get("joules_per_output_token") is None


def test_an_energy_block_that_says_available_and_holds_nothing_is_refused_on_read(tmp_path, capsys):
    doc = _doc(2688.0)
    doc["points"][0]["energy"] = {"available": True}
    f = tmp_path / "r.json"
    f.write_text(json.dumps(doc))
    for argv in (["compare", str(f)], ["report", str(f), "--html", str(tmp_path / "r.html")]):
        assert main(argv) == 5  # was an internal error (KeyError 'server'), exit 4
        err = capsys.readouterr().err
        assert "$.points[0].energy: 'source' is a required property" in err and "Traceback" not in err
    doc["points"][0]["energy"] = {"available": False}  # no energy measured: read as it is
    f.write_text(json.dumps(doc))
    assert read(str(f))["points"][0]["energy"] == {"available": False}
