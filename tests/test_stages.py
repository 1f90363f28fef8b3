"""load.stages: a staged profile of concurrency or rate over time (k6's stages), each stage a
point. Counted from the simulator's own trace (what it received, when), never from the clock
of the test."""

import json

import pytest

from benchc.cli import main
from benchc.plan.model import Step
from benchc.plan.shapes import ConcurrencyStage, RateStage
from benchc.results.document import read
from benchc.run.loadgen import driver_for
from benchc.run.shards import split_step
from benchc.run.stages import stage_times
from tests.simrun import Sim, requests_of

SPEC = """\
version: 1
name: t
target:
  sim: {{preset: minimax-m2.5-tp4}}
  model: MiniMaxAI/MiniMax-M2.5
workload:
  dataset:
    random: {{input_tokens: 32, output_tokens: {out}}}
load:
  warmup: {{requests: 1}}
  stages:
{stages}
output:
  path: {path}
  requests: true
"""


def spec_of(tmp_path, stages: str, out: int = 16) -> str:
    f = tmp_path / "s.yaml"
    f.write_text(SPEC.format(stages=stages, out=out, path=tmp_path / "r.json"))
    return str(f)


def run_on_sim(tmp_path, stages: str, *args: str, out: int = 16):
    """The profile against `benchc sim`: the result, its requests, the simulator's trace."""
    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4")
    try:
        assert main(["run", spec_of(tmp_path, stages, out), "--base-url", sim.url, "--quiet", *args]) == 0
    finally:
        sim.close()
    return read(str(tmp_path / "r.json")), requests_of(tmp_path), sim.records()


ZIGZAG = "".join(f"    - {{rate: {r}/s, duration: 5s, arrival: constant}}\n" for r in (2, 8, 2, 8)).rstrip()


@pytest.mark.slow  # 20 s of load on the simulator
@pytest.mark.parametrize("http", ["native", "aiohttp"])
def test_a_zigzag_between_2_and_8_per_second_sends_each_stages_rate_within_5_percent(tmp_path, http):
    doc, reqs, trace = run_on_sim(tmp_path, ZIGZAG, "--http", http)
    ids = [p["id"] for p in doc["points"]]
    assert ids == ["stage=1,rate=2/s", "stage=2,rate=8/s", "stage=3,rate=2/s", "stage=4,rate=8/s"]
    for point, rate in zip(doc["points"], (2, 8, 2, 8), strict=True):
        # the sends the simulator received for this stage, and over what span of its clock
        arrivals = sorted(trace[r["id"]]["arrival_ns"] for r in reqs if r["point"] == point["id"])
        assert abs(len(arrivals) - rate * 5) <= 0.05 * rate * 5, (point["id"], len(arrivals))
        # centred in their slots: 1/rate apart, the first half a slot into the stage
        gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
        assert abs(sum(gaps) / len(gaps) / 1e9 - 1 / rate) <= 0.05 / rate
        assert point["params"]["rate_rps"] == rate and point["params"]["arrival"] == "constant"
        assert point["params"]["stage"]["index"] == ids.index(point["id"]) + 1


@pytest.mark.slow  # 21 s of load on the simulator
def test_a_concurrency_ramp_from_1_to_32_over_20s_holds_in_flight_to_the_ramp_within_one(tmp_path):
    doc, reqs, trace = run_on_sim(tmp_path, "    - {concurrency: 1, duration: 1s}\n"
                                            "    - {concurrency: 32, duration: 20s, ramp: 20s}", out=64)
    ramp = doc["points"][1]
    assert ramp["id"] == "stage=2,c=1..32"
    assert ramp["params"]["stage"] == {"index": 2, "from": 1, "ramp_s": 20.0}
    spans = [(trace[r["id"]]["arrival_ns"], trace[r["id"]]["end_ns"])
             for r in reqs if r["point"] == ramp["id"]]
    start = min(a for a, _ in spans)  # its first slot's first send opens the stage
    shape = ConcurrencyStage(concurrency=32, start=1, ramp_s=20.0, duration_s=20.0)
    for second in range(1, 20):
        t = start + second * 1_000_000_000
        in_flight = sum(1 for a, e in spans if a <= t < e)
        assert abs(in_flight - shape.target_at(second)) <= 1, (second, in_flight, shape.target_at(second))


def test_a_rate_stage_splits_on_workers_exactly_as_a_point_does():
    """Each worker takes every n-th arrival of the one schedule (the shape's divide): the same
    sends in all, and each stage's rate summed over the workers within 5%."""
    for shape in (RateStage(rate_rps=8.0, duration_s=5.0, arrival="constant", start_rps=2.0, stage=2),
                  RateStage(rate_rps=2.0, duration_s=5.0, start_rps=8.0, ramp_s=5.0, stage=3),
                  RateStage(rate_rps=8.0, duration_s=5.0, arrival="poisson", stage=1)):
        step = Step("load", 0, shape.label, load=shape)
        whole = list(driver_for(shape).schedule(None, 7, (0, 1)))
        parts = split_step(step, 3)
        assert [s.load for s, _ in parts] == [shape] * 3  # a rate is not split, its arrivals are
        sent = [list(driver_for(s.load).schedule(None, 7, shard.schedule_slice)) for s, shard in parts]
        assert sorted(t for part in sent for t in part) == whole
        offered = shape.offered(5.0)
        assert abs(sum(len(p) for p in sent) / 5.0 - offered / 5.0) <= 0.05 * offered / 5.0 or \
            shape.arrival == "poisson"  # a Poisson stage's count is the schedule's: checked equal above
    constant = RateStage(rate_rps=8.0, duration_s=5.0, arrival="constant", start_rps=2.0, stage=2)
    assert len(list(stage_times(constant, 0))) == 40


def test_a_rate_ramp_offers_its_integral():
    ramp = RateStage(rate_rps=8.0, start_rps=2.0, ramp_s=4.0, duration_s=6.0, arrival="constant")
    times = list(stage_times(ramp, 0))
    assert len(times) == 2 * 4 + 6 * 4 / 2 + 8 * 2 == 36  # (2+8)/2 over 4 s, then 8/s for 2 s
    assert sum(1 for t in times if t < 2.0) == 2 * 2 + 1.5 * 2 * 2 / 2 == 7  # 2/s rising 1.5/s a second
    assert times == sorted(times) and times[-1] < 6.0


def test_a_concurrency_stage_splits_its_target_and_its_ramps_start():
    step = Step("load", 0, "x", load=ConcurrencyStage(concurrency=32, start=5, ramp_s=20.0, duration_s=20.0))
    parts = [s.load for s, _ in split_step(step, 3)]
    assert [(p.concurrency, p.start) for p in parts] == [(11, 2), (11, 2), (10, 1)]


def test_the_plan_of_a_profile_has_one_point_a_stage(tmp_path, capsys):
    path = spec_of(tmp_path, "    - {concurrency: 2, duration: 3s}\n"
                             "    - {concurrency: 8, duration: 5s, ramp: 2s}\n"
                             "    - {concurrency: 2, duration: 1m}")
    assert main(["plan", path]) == 0
    plan = json.loads(capsys.readouterr().out)
    loads = [s for s in plan["steps"] if s["kind"] == "load"]
    assert [s["id"] for s in loads] == ["stage=1,c=2", "stage=2,c=2..8", "stage=3,c=2"]
    assert [s["load"] for s in loads][1] == {"concurrency_stage": {
        "requests": None, "duration_s": 5.0, "sessions": None, "ramp_up_s": 0.0, "cooldown_s": 0.0,
        "concurrency": 8, "start": 2, "ramp_s": 2.0, "stage": 2}}


@pytest.mark.parametrize("stages,message", [
    ("    - {rate: 2/s, duration: 5s}\n    - {rate: 8/s, duration: 5s, ramp: 10s}",
     "s.yaml:13:39: $.load.stages[1].ramp: '10s': a ramp longer than its stage's duration ('5s') would "
     "overlap the stage before (a ramp is within its stage)"),
    ("    - {rate: 2/s, duration: -5s}",
     "s.yaml:12:29: $.load.stages[0].duration: '-5s' is not a duration like 500ms, 2s or 15m"),
    ("    - {rate: 2/s, concurrency: 4, duration: 5s}",
     "s.yaml:12:7: $.load.stages[0]: give a stage exactly one of concurrency (closed loop) or rate "
     "(open loop)"),
    ("    - {concurrency: 4, duration: 5s}\n    - {rate: 2/s, duration: 5s}",
     "s.yaml:13:8: $.load.stages[1].rate: a profile is of one kind: stage 1 gives concurrency, this one "
     "rate"),
    ("    - {rate: 2/s, duration: 0s}\n    - {rate: 8/s, duration: 0s}",
     "s.yaml:12:5: $.load.stages: a profile of zero length: give its stages a duration above 0"),
    ("    []", "s.yaml:12:5: $.load.stages: [] should be non-empty"),
    # a stage's point stops at its duration: one of 0s ran until Ctrl-C
    ("    - {concurrency: 2, duration: 1s}\n    - {concurrency: 1, duration: 0s}",
     "s.yaml:13:34: $.load.stages[1].duration: '0s': a stage of zero length: give it a duration above 0"),
    # the sweep's ceilings hold for stages too
    ("    - {concurrency: 2000000, duration: 5s}", "s.yaml:12:21: $.load.stages[0].concurrency: 2,000,000 "
                                                  "requests in flight is more than 1,000,000"),
    ("    - {rate: 1000/s, duration: 30m}", "s.yaml:12:14: $.load.stages[0].rate: 1,800,000 requests per "
                                           "stage (1000/s for 30m; give a lower rate or duration) is more "
                                           "than 1,000,000"),
    pytest.param("    - {rate: 1/s, duration: 1s}\n" * 101 + "  repeats: 100",
                 "s.yaml:12:5: $.load.stages: 10,100 load points (combinations x stages x repeats) is more "
                 "than 10,000", id="101-stages-x-100-repeats"),
])
def test_a_bad_profile_is_refused_at_its_line_with_the_rule_it_breaks(tmp_path, capsys, stages, message):
    assert main(["validate", spec_of(tmp_path, stages)]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert "Traceback" not in err


@pytest.mark.slow  # 8 s of load on the embedded simulator
def test_the_shipped_stress_spec_runs_a_zigzag_with_a_row_and_an_slo_verdict_a_stage(tmp_path, capsys):
    out = tmp_path / "stress.json"
    assert main(["run", "specs/stress.yaml", "--out", str(out)]) == 0
    doc = read(str(out))
    ids = ["stage=1,rate=2/s", "stage=2,rate=8/s", "stage=3,rate=2/s", "stage=4,rate=8/s"]
    assert [p["id"] for p in doc["points"]] == ids
    assert [p["params"]["rate_rps"] for p in doc["points"]] == [2.0, 8.0, 2.0, 8.0]
    assert [p["counts"]["sent"] for p in doc["points"]] == [4, 16, 4, 16]  # constant: rate x 2 s
    # SLOs judged per stage: each its own verdict on each threshold of the spec
    assert [[c["threshold"] for c in p["slo"]["checks"]] for p in doc["points"]] == \
        [["ttft: p99 < 2s", "error_rate: < 1%"]] * 4
    console = capsys.readouterr().err.splitlines()  # the table is a diagnostic: stdout has the path
    assert [line.split()[0] for line in console if line.startswith("stage=")] == ids


@pytest.mark.slow  # a Ray cluster in worker processes, 8 s of load
def test_stages_on_ray_send_what_a_single_worker_sends_each_stage_split_over_the_workers(tmp_path):
    pytest.importorskip("ray")
    zigzag = ZIGZAG.replace("5s", "2s")
    out = tmp_path / "r.json"
    assert main(["run", spec_of(tmp_path, zigzag), "--backend", "ray", "--workers", "2", "--out", str(out),
                 "--quiet"]) == 0
    points = read(str(out))["points"]
    # the same total sends as one worker (constant arrivals: the rate times 2 s, exactly), each
    # stage's every other arrival on each worker: the rates summed over them are the stage's
    assert [p["counts"]["sent"] for p in points] == [4, 16, 4, 16]
    shards = [sorted(s["counts"]["sent"] for s in p["shards"]) for p in points]
    assert shards == [[2, 2], [8, 8], [2, 2], [8, 8]]
