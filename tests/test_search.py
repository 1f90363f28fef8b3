"""Capacity search: the probe policy against oracles, the plan it compiles to, the spec's rules;
end to end on the simulator (marked slow): the answers its step table and a fixed-rate run
imply, and a saturated client that cannot decide the search."""

import asyncio
import json
import math
import os
import time

import pytest

from benchc.cli import main
from benchc.errors import EXIT_SEARCH_UNDECIDED
from benchc.plan.compiler import compile_spec
from benchc.plan.datasets import make_source
from benchc.plan.model import Plan
from benchc.plan.prompts import step_digest
from benchc.plan.search import (
    FAIL,
    PASS,
    UNTRUSTED,
    CapacitySearch,
    Probe,
    bracket_loads,
    probe_step,
    worst_case_probes,
)
from benchc.results.document import read
from benchc.run import effects
from benchc.sim.model import make_config
from benchc.spec import loader
from tests.conftest import REPO

EXAMPLE = os.path.join(REPO, "specs", "capacity-search.yaml")
INT = {"kind": "absolute", "value": 1}


def definition(over="concurrency", lo=1, hi=64, tolerance=INT, max_probes=100):
    return {"over": over, "min": lo, "max": hi, "tolerance": tolerance, "max_probes": max_probes,
            "slo": [{"metric": "tpot", "stat": "p50", "op": "<", "value": 20000.0,
                     "text": "tpot: p50 < 20ms"}]}


def drive(search: CapacitySearch, oracle) -> list:
    """Run the policy with `oracle(load, attempt) -> verdict`; the loads it probed, in order."""
    loads = []
    while (load := search.next_load()) is not None:
        verdict = oracle(load, loads.count(load))
        loads.append(load)
        checks = [{"threshold": "tpot: p50 < 20ms", "value": 1.0, "passed": verdict == PASS}]
        search.record(Probe(len(loads), load, verdict, f"p{len(loads)}", checks))
    return loads


# --------------------------------------------------------------------------- the policy


@pytest.mark.parametrize("lo,hi,tol", [(1, 64, 1), (4, 12, 1), (3, 100, 1), (1, 256, 4), (5, 6, 1)])
def test_concurrency_search_finds_the_exact_capacity_within_its_worst_case(lo, hi, tol):
    """Every capacity from below min to above max: the answer is the largest load that holds
    (to the tolerance), and no search takes more probes than the plan's worst case says --
    which one of them takes exactly."""
    tolerance = {"kind": "absolute", "value": tol}
    worst = worst_case_probes("concurrency", lo, hi, tolerance)
    most = 0
    for capacity in range(lo - 1, hi + 2):
        search = CapacitySearch(definition(lo=lo, hi=hi, tolerance=tolerance))
        loads = drive(search, lambda load, _, cap=capacity: PASS if load <= cap else FAIL)
        most = max(most, len(loads))
        assert len(set(loads)) == len(loads)  # trusted probes never repeat a load
        if capacity < lo:
            assert (search.status, search.answer, loads) == ("below_min", None, [lo])
        elif capacity >= hi:
            assert (search.status, search.answer) == ("at_max", hi)
            assert loads == bracket_loads("concurrency", lo, hi)
        else:
            assert search.status == "found"
            assert search.answer <= capacity < search.answer + tol
            assert search.lo == search.answer and search.hi - search.lo <= tol
            assert search.binding() == ["tpot: p50 < 20ms"]
    assert most == worst


def test_rate_search_reaches_its_relative_tolerance_within_its_worst_case():
    tolerance = {"kind": "relative", "value": 0.05}
    worst = worst_case_probes("rate", 2.0, 100.0, tolerance)
    most = 0
    for i in range(1, 400):
        capacity = 1.0 + i * 0.27  # 1.27 .. 108.7 req/s, from below min to above max
        search = CapacitySearch(definition("rate", 2.0, 100.0, tolerance))
        loads = drive(search, lambda load, _, cap=capacity: PASS if load <= cap else FAIL)
        most = max(most, len(loads))
        if capacity < 2.0:
            assert search.answer is None
        elif capacity >= 100.0:
            assert search.answer == 100.0
        else:
            assert search.lo <= capacity < search.hi <= search.lo * 1.05 + 1e-9
            assert search.answer == search.lo
    assert most <= worst
    assert most >= worst - 1  # the bound is the policy's own, not a loose one


def test_an_untrusted_probe_is_probed_again_and_never_moves_the_bracket():
    search = CapacitySearch(definition(lo=4, hi=12))
    # c=8 is untrusted once (a saturated client), then fails; capacity is 6
    loads = drive(search, lambda load, n: UNTRUSTED if (load == 8 and n == 0) else
                  (PASS if load <= 6 else FAIL))
    assert loads == [4, 8, 8, 6, 7]
    assert [p.decided for p in search.probes] == [True, False, True, True, True]
    assert (search.status, search.answer, search.lo, search.hi) == ("found", 6, 6, 7)


def test_a_load_untrusted_twice_stops_the_search_without_an_answer():
    search = CapacitySearch(definition(lo=4, hi=12))
    loads = drive(search, lambda load, n: UNTRUSTED if load == 8 else PASS)
    assert loads == [4, 8, 8]
    assert search.status == "undecided" and search.answer is None
    assert (search.lo, search.hi) == (4, None)  # what trusted probes showed, nothing more
    assert "could not be trusted 2 times" in search.reason
    block = search.block()
    assert [p["verdict"] for p in block["probes"]] == [PASS, UNTRUSTED, UNTRUSTED]
    assert block["answer"] is None and block["binding"] == []


def test_max_probes_stops_with_the_bracket_it_has():
    search = CapacitySearch(definition(lo=1, hi=64, max_probes=4))
    loads = drive(search, lambda load, _: PASS if load <= 5 else FAIL)
    assert loads == [1, 2, 4, 8]
    assert (search.status, search.answer, search.lo, search.hi) == ("max_probes", 4, 4, 8)


def test_probe_steps_take_the_search_steps_reserved_streams():
    plan = compile_spec(loader.load(EXAMPLE, ["matrix={seed: [1, 2]}",
                                              "workload.dataset.random.seed=${matrix.seed}"], {}))
    searches = plan.search_steps()
    assert [s.id for s in searches] == ["seed=1/search", "seed=2/search"]
    blocks = []
    for s in searches:
        probes = [probe_step(s, k, 2 * k) for k in range(1, s.search["max_probes"] + 1)]
        assert [p.id for p in probes[:2]] == [f"seed={s.combination + 1}/probe1:c=2",
                                              f"seed={s.combination + 1}/probe2:c=4"]
        assert all(p.kind == "load" and p.search == s.search and p.requests == s.requests for p in probes)
        blocks.append({p.prompt_stream for p in probes})
    # every probe a stream of its own: the blocks never overlap, nor meet a warmup's stream
    assert not blocks[0] & blocks[1]
    others = {s.prompt_stream for s in plan.steps if s.kind == "warmup"}
    assert not (blocks[0] | blocks[1]) & others
    # and the prompts of every probe differ from every other's
    w = plan.combinations[0].workload
    source = make_source(w.dataset, w.params, w.prompts)
    digests = [step_digest(source, stream, 4) for stream in sorted(blocks[0] | blocks[1])]
    assert len(set(digests)) == len(digests)


# --------------------------------------------------------------------------- the plan


def test_plan_shows_the_search_before_anything_runs(capsys):
    assert main(["plan", EXAMPLE]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["plan_version"] == 4
    (step,) = [s for s in d["steps"] if s["kind"] == "search"]
    s = step["search"]
    tolerance = {"kind": "absolute", "value": 1}
    assert s["worst_case_probes"] == worst_case_probes("concurrency", 2, 64, tolerance)
    assert s["max_probes"] == s["worst_case_probes"] + 2
    assert s["max_requests"] == s["max_probes"] * step["load"]["search"]["requests"]
    assert [x["text"] for x in s["slo"]] == ["tpot: p50 < 20ms", "ttft: p99 < 1s", "error_rate: < 1%"]
    warmup = next(x for x in d["steps"] if x["kind"] == "warmup")
    assert d["budget"] == {"load_points": 0, "searches": 1, "probes_max": s["max_probes"],
                           "requests_max": warmup["load"]["closed_loop"]["requests"] + s["max_requests"]}
    assert main(["validate", EXAMPLE]) == 0
    assert f"1 capacity search(es), up to {s['max_probes']} probes" in capsys.readouterr().out


def test_plan_round_trips_and_older_plans_still_read():
    plan = compile_spec(loader.load(EXAMPLE, [], {}))
    assert Plan.from_dict(json.loads(plan.to_json(redact=False))) == plan
    d = plan.to_dict(redact=False)
    d["plan_version"] = 2
    for k in ("repeats", "saturation", "budget"):
        del d[k]
    d["steps"] = [{k: v for k, v in s.items() if k not in ("repeat", "search", "probe")}
                  for s in d["steps"] if s["kind"] != "search"]
    old = Plan.from_dict(d)
    assert old.plan_version == 2 and old.repeats == 1 and old.saturation is None
    assert old.search_steps() == [] and all(s.repeat is None for s in old.steps)


def test_search_changes_the_plan_hash():
    base = compile_spec(loader.load(EXAMPLE, [], {}))
    assert compile_spec(loader.load(EXAMPLE, ["load.search.max=32"], {})).plan_hash != base.plan_hash
    assert compile_spec(loader.load(EXAMPLE, ["load.search.slo={tpot: 'p50 < 25ms'}"], {})).plan_hash \
        != base.plan_hash


SWEEP = """\
version: 1
name: t
target: {base_url: 'http://localhost:8000/v1', model: m}
workload:
  dataset:
    random: {input_tokens: 16, output_tokens: 8}
load:
  sweep:
    concurrency: [1, 2]
  requests: 4
slo: {ttft: 'p99 < 2s'}
"""


def problems(text):
    with pytest.raises(Exception) as e:
        loader.load_text(text, "s.yaml", [], {})
    return [str(p) for p in e.value.problems]


S = "  sweep:\n    concurrency: [1, 2]"


@pytest.mark.parametrize("old,new,expected", [
    ("  requests: 4", "  search: {over: concurrency, min: 1, max: 8}\n  requests: 4",
     ["s.yaml:8:3: $.load: give exactly one of sweep (fixed points) or search (the largest load that "
      "meets the SLO)"]),
    (S, "  search: {over: concurrency, min: 1.5, max: 8}",
     ["s.yaml:8:36: $.load.search.min: 1.5: a concurrency search takes an integer min"]),
    (S, "  search: {over: concurrency, min: 8, max: 8}",
     ["s.yaml:8:44: $.load.search.max: max must be greater than min"]),
    (S, "  search: {over: concurrency, min: 1, max: 8, tolerance: 5%}",
     ["s.yaml:8:58: $.load.search.tolerance: '5%': a concurrency search's tolerance is an integer >= 1 "
      "(1: the exact largest concurrency)"]),
    (S, "  search: {over: concurrency, min: 1, max: 8, arrival: constant}",
     ["s.yaml:8:47: $.load.search.arrival: arrival applies to a rate search, not to concurrency"]),
    (S + "\n  requests: 4", "  search: {over: concurrency, min: 1, max: 8}\n  requests: 4\n  repeats: 3",
     ["s.yaml:10:12: $.load.repeats: repeats with a search is not built yet: each probe runs once; repeat "
      "the run, or sweep around the answer with repeats"]),
    ("slo: {ttft: 'p99 < 2s'}", "", None),  # a sweep needs no SLO
    (S + "\n  requests: 4\nslo: {ttft: 'p99 < 2s'}",
     "  search: {over: rate, min: 1, max: 8/s}\n  requests: 4",
     ["s.yaml:8:11: $.load.search: a search needs an SLO to hold: give load.search.slo or the spec's slo"]),
    (S, "  search: {over: rate, min: 1, max: 8, slo: {ttft: 'p99 < 2'}}",
     ["s.yaml:8:52: $.load.search.slo.ttft: 'p99 < 2': give ttft a duration with its unit, e.g. 500ms or "
      "2s"]),
    ("  requests: 4", "  requests: 4\n  saturation: {latency: e2e.p50}",
     ["s.yaml:11:15: $.load.saturation: give min_gain (stop when throughput stops rising), max_error_rate, "
      "or both", "s.yaml:11:16: $.load.saturation.latency: latency applies with min_gain"]),
    ("concurrency: [1, 2]", "concurrency: [2, 1]\n  saturation: {min_gain: 5%}",
     ["s.yaml:9:5: $.load.sweep: saturation needs the sweep's loads in rising order: each point is "
      "compared with the one before"]),
    (S, "  search: {over: concurrency, min: 1, max: 8}\n  saturation: {min_gain: 5%}",
     ["s.yaml:9:3: $.load.saturation: saturation stops a sweep; a search stops by itself"]),
])
def test_search_repeats_and_saturation_rules(old, new, expected):
    assert old in SWEEP
    text = SWEEP.replace(old, new)
    if expected is None:
        loader.load_text(text, "s.yaml", [], {})
        return
    assert problems(text) == expected


# --------------------------------------------------------------------------- end to end

SPEC = """\
version: 1
name: s
target:
  sim: {{preset: minimax-m2.5-tp4{sim}}}
  model: MiniMaxAI/MiniMax-M2.5
workload:
  dataset:
    random: {{input_tokens: {inp}, output_tokens: {out}}}
load:
  warmup: {{requests: 1}}
  {load}
  requests: {requests}
output:
  path: {path}
{extra}"""


def write(tmp_path, search=None, sim="", inp=16, out=48, requests=8, sweep=None, extra=""):
    f = tmp_path / "s.yaml"
    load = f"search: {search}" if search else f"sweep: {sweep}"
    f.write_text(SPEC.format(load=load, sim=sim, inp=inp, out=out, requests=requests,
                             path=str(tmp_path / "r.json"), extra=extra))
    return str(f)


@pytest.fixture
def busy_machine_self_check(monkeypatch):
    """The tests below are about the search's answer, on a test machine whose every core may be
    busy with other work. There the client's event loop is late now and then because the machine
    is, and the self-check judges what that moved -- and a probe whose load it moved decides
    nothing (the tests of that are test_a_saturated_client_cannot_decide_the_search and the
    policy's). The offered-load bounds are doubled here (slots idle 10%, not 5%; sends late
    10%, not 5%), so that only a client truly swamped stops the search."""
    monkeypatch.setattr(effects, "IDLE_SHARE_BOUND", 2 * effects.IDLE_SHARE_BOUND)
    monkeypatch.setattr(effects, "LATE_SHARE_BOUND", 2 * effects.LATE_SHARE_BOUND)


def waves(cfg, c: int, requests: int) -> list[int]:
    """The batch each of `requests` equal requests decodes in, closed loop at concurrency c: full
    batches of min(c, max_num_seqs) (the rest wait in the simulator's FIFO), then the remainder."""
    width, left, out = min(c, cfg.max_num_seqs), requests, []
    while left:
        n = min(width, left)
        out += [n] * n
        left -= n
    return out


def predicted_tpot_p50_ms(cfg, c: int, requests: int) -> float:
    """The p50 TPOT of such a point from the step table alone: a request decodes every step at its
    batch's step time. The HdrHistogram's p50 is the ceil(n/2)-th value."""
    return sorted(cfg.step_ms(n) for n in waves(cfg, c, requests))[math.ceil(requests / 2) - 1]


def predicted_within(cfg, c: int, requests: int, threshold_ms: float) -> int:
    """How many of those requests decode faster than the threshold (each meets `tpot <`)."""
    return sum(cfg.step_ms(n) < threshold_ms for n in waves(cfg, c, requests))


@pytest.mark.slow
def test_concurrency_search_returns_what_the_step_table_implies(tmp_path, busy_machine_self_check):
    """One search per matrix combination: the minimax preset as it is, and limited to 4 running
    sequences (whose TPOT then stays at the 4-sequence step time whatever the concurrency)."""
    lo, hi, requests, inp, out, threshold_ms = 4, 12, 8, 16, 48, 20.0
    seqs = [256, 4]
    expect = {}
    for n in seqs:
        cfg = make_config("minimax-m2.5-tp4", max_num_seqs=n)
        predicted = {c: predicted_tpot_p50_ms(cfg, c, requests) for c in range(lo, hi + 1)}
        # What can move a measured p50 TPOT off the table: a newly admitted batch's prefill charged
        # to a step others decode in (at most c x input tokens / prefill rate, spread over out - 1
        # gaps), and the simulator's last step late on a busy machine (15 ms, over out - 1 gaps).
        slack_ms = hi * inp / cfg.prefill_tok_s * 1000 / (out - 1) + 15.0 / (out - 1)
        assert all(abs(v - threshold_ms) > slack_ms for v in predicted.values()), (predicted, slack_ms)
        tpots = list(predicted.values())
        assert all(a <= b for a, b in zip(tpots, tpots[1:], strict=False))  # it rises with the load
        answer = max((c for c, v in predicted.items() if v < threshold_ms), default=None)
        # the probes the policy makes when each probe's verdict is the table's
        oracle = CapacitySearch(definition(lo=lo, hi=hi))
        loads = drive(oracle, lambda c, _, p=predicted: PASS if p[c] < threshold_ms else FAIL)
        expect[n] = (cfg, answer, oracle.status, loads)
    assert expect[256][1:3] == (6, "found") and expect[4][1:3] == (hi, "at_max")  # as the table says

    slo = f"tpot: 'p50 < {threshold_ms:g}ms'"
    spec = write(tmp_path, f"{{over: concurrency, min: {lo}, max: {hi}, slo: {{{slo}}}}}", inp=inp,
                 out=out, requests=requests, sim=", max_num_seqs: '${matrix.seqs}'",
                 extra=f"matrix: {{seqs: {seqs}}}\n")
    assert main(["run", spec, "--quiet"]) == 0
    doc = read(str(tmp_path / "r.json"))
    assert [s["matrix"] for s in doc["search"]] == [{"seqs": n} for n in seqs]
    points = {p["id"]: p for p in doc["points"]}
    for search, n in zip(doc["search"], seqs, strict=True):
        cfg, answer, status, loads = expect[n]
        assert (search["status"], search["answer"]) == (status, answer)
        assert [p["load"] for p in search["probes"]] == loads
        if status == "found":
            assert search["bracket"] == {"lo": answer, "hi": answer + 1}
            assert search["binding"] == [f"tpot: p50 < {threshold_ms:g}ms"]
        answer_point = points[search["answer_point"]]
        assert answer_point["params"]["concurrency"] == answer and answer_point["matrix"] == {"seqs": n}
        assert search["goodput_s"] == answer_point["throughput"]["goodput_s"] > 0
        for probe in search["probes"]:
            p = points[probe["point"]]
            assert p["params"]["probe"] == probe["probe"] and p["counts"]["completed"] == requests
            # goodput: each request held to the search's SLO
            assert p["counts"]["slo_met"] == predicted_within(cfg, probe["load"], requests, threshold_ms)
            assert p["cache"]["cached_tokens"] == 0  # fresh prompts: nothing of one probe cached for another
    assert len(points) == sum(len(s["probes"]) for s in doc["search"])  # every point is a probe
    assert doc["complete"] is True


@pytest.mark.slow
def test_rate_search_agrees_with_a_run_at_fixed_rates(tmp_path, busy_machine_self_check):
    """A server of hard capacity (4 sequences of 10 steps of 10 ms: 40 req/s); its TTFT p99 holds
    below the capacity and climbs with the queue above it. A sweep of fixed rates says where the
    SLO holds (at most `passing`) and where it fails (from `failing`); the search must land
    between them, to its tolerance."""
    sim = ", step_table: [[1, 10.0]], max_num_seqs: 4"
    slo = "{ttft: 'p99 < 200ms'}"
    fixed = tmp_path / "fixed"
    fixed.mkdir()
    sweep_spec = write(fixed, sweep="{rate: [16, 32, 64], arrival: constant}", sim=sim, inp=8, out=10,
                       requests=32, extra=f"slo: {slo}\n")
    rc = main(["run", sweep_spec, "--quiet"])
    sweep = read(str(fixed / "r.json"))["points"]
    held = [p["params"]["rate_rps"] for p in sweep if p["slo"]["passed"]]
    failed = [p["params"]["rate_rps"] for p in sweep if not p["slo"]["passed"]]
    assert rc == 1 and held and failed and max(held) < min(failed)  # 1: the SLO failed, as it must
    passing, failing = max(held), min(failed)

    tol = 0.1
    spec = write(tmp_path, f"{{over: rate, min: 16, max: 128, tolerance: {tol * 100:g}%, arrival: constant, "
                           f"slo: {slo}}}", sim=sim, inp=8, out=10, requests=32)
    assert main(["run", spec, "--quiet"]) == 0
    (search,) = read(str(tmp_path / "r.json"))["search"]
    assert search["status"] == "found", search["reason"]
    lo, hi = search["bracket"]["lo"], search["bracket"]["hi"]
    assert search["answer"] == lo and hi <= lo * (1 + tol) + 1e-6
    # everything at or below `passing` holds, so the first failing load lies above it; nothing
    # from `failing` up holds, so the answer lies below it
    assert passing < hi and lo < failing
    assert passing / (1 + tol) < search["answer"] < failing


@pytest.mark.slow
def test_a_saturated_client_cannot_decide_the_search(tmp_path, monkeypatch, busy_machine_self_check):
    """Every probe at c=8 runs with a client that takes 400 ms to get each request out (as a
    client far too slow to build its bodies would): the slots stand idle a large share of the
    time, the load probed is not the load asked for (past even the raised bound). The probe is
    untrusted, probed again, untrusted again, and the search stops without concluding anything
    from it. (A loop merely late, with every request in flight, moves no figure the TPOT SLO
    reads: tests/test_selfcheck.py.)"""
    from benchc.run import loadgen
    from benchc.run import point as point_mod

    real, real_send = point_mod.run_step, loadgen.send_native
    saturated_at = 8
    slow = False

    async def saturated(ctx, step, *args, **kwargs):  # run_step's arguments, whatever they become
        nonlocal slow
        slow = step.load.concurrency == saturated_at
        return await real(ctx, step, *args, **kwargs)

    async def late_send(*args, **kwargs):
        if slow:
            until = time.perf_counter() + 0.4
            while time.perf_counter() < until:
                await asyncio.sleep(until - time.perf_counter())
        return await real_send(*args, **kwargs)

    monkeypatch.setattr(loadgen, "send_native", late_send)
    monkeypatch.setattr(point_mod, "run_step", saturated)
    spec = write(tmp_path, "{over: concurrency, min: 4, max: 12, slo: {tpot: 'p50 < 20ms'}}")
    assert main(["run", spec, "--quiet"]) == EXIT_SEARCH_UNDECIDED  # CI tells no answer from an answer
    doc = read(str(tmp_path / "r.json"))
    (search,) = doc["search"]
    assert [(p["load"], p["verdict"], p["decided"]) for p in search["probes"]] == [
        (4, PASS, True), (8, UNTRUSTED, False), (8, UNTRUSTED, False)]
    assert search["status"] == "undecided" and search["answer"] is None and search["goodput_s"] is None
    assert search["bracket"] == {"lo": 4, "hi": None}
    limited = [p for p in doc["points"] if p["params"]["concurrency"] == saturated_at]
    assert all(p["client"]["client_limited"] and not p["trust"]["trusted"] for p in limited)
    assert all(p["client"]["effects"]["offered_load"]["moved"] for p in limited)
    assert all(p["client"]["reasons"][0].startswith("offered load moved (load, throughput)") for p in limited)
    assert all("load" in p["trust"]["doubts"][0]["figures"] for p in limited)

