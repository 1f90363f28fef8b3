"""Load shapes as types (plan/shapes.py) and their drivers (run/drivers.py): a step's load is
one typed value; plans of every earlier version read as the shape their fields say; `benchc
plan` changes only in the version and the shape's key; Ray divides through the shape."""

import ast
import json
from dataclasses import fields
from pathlib import Path

import pytest

from benchc.cli import main
from benchc.plan.model import PLAN_VERSION, Plan, Step, flat_step
from benchc.plan.shapes import (
    AgentReplay,
    ClosedLoop,
    ConcurrencyStage,
    OpenLoop,
    RateStage,
    Replay,
    Search,
    Users,
    shape_from_dict,
)
from benchc.run.drivers import Driver
from benchc.run.loadgen import DRIVERS, StepRun, driver_for
from benchc.run.shards import split_step

ROOT = Path(__file__).resolve().parent.parent
PLANS = ROOT / "tests" / "data" / "plans"
# written by `benchc plan SPEC` of plan version 3 (commit d40673d), from the repository's root
V3_FIXTURES = {
    "demo": "specs/demo.yaml",
    "capacity-search": "specs/capacity-search.yaml",
    "trace-replay": "specs/trace-replay.yaml",
    "multi-turn-chat": "specs/multi-turn-chat.yaml",
    "all-features": "tests/specs/valid/all-features.yaml",
}


def v3(name: str) -> dict:
    return json.loads((PLANS / f"plan-v3-{name}.json").read_text())


def test_a_step_has_at_most_ten_fields_and_its_load_is_one_typed_value():
    assert len(fields(Step)) <= 10
    assert "load" in {f.name for f in fields(Step)}
    flat = {"concurrency", "rate_rps", "arrival", "speedup", "users", "sessions"}
    assert not flat & {f.name for f in fields(Step)}


@pytest.mark.parametrize("shape, label, target, params", [
    (ClosedLoop(concurrency=4, requests=8), "c=4", 4,
     {"concurrency": 4, "rate_rps": None, "arrival": None, "requests": 8, "duration_s": None}),
    (OpenLoop(rate_rps=5.0, duration_s=30.0), "rate=5/s", 0,
     {"concurrency": None, "rate_rps": 5.0, "arrival": "poisson", "requests": None, "duration_s": 30.0}),
    (OpenLoop(rate_rps=2.5, arrival="gamma", burstiness=0.5, max_concurrency=32), "rate=2.5/s", 32,
     {"concurrency": None, "rate_rps": 2.5, "arrival": "gamma", "requests": None, "duration_s": None}),
    (Replay(speedup=2.0, rate_rps=40.0, requests=50), "speedup=2", 0,
     {"concurrency": None, "rate_rps": 40.0, "arrival": "trace", "requests": 50, "duration_s": None,
      "speedup": 2.0}),
    (Users(users=3, turn_interval_s=1.5, sessions=6), "users=3", 3,
     {"concurrency": None, "rate_rps": None, "arrival": None, "requests": None, "duration_s": None,
      "sessions": 6, "users": 3, "turn_interval_s": 1.5}),
])
def test_each_shape_says_its_label_in_flight_target_and_params(shape, label, target, params):
    assert (shape.label, shape.inflight_target) == (label, target)
    assert shape.params() == params
    assert list(shape.params()) == list(params)  # the result's key order too
    assert shape_from_dict(json.loads(json.dumps(shape.to_dict()))) == shape


def test_a_steps_params_put_repeat_and_probe_where_they_always_were():
    step = Step("load", 0, "speedup=2#1", load=Replay(speedup=2.0, rate_rps=4.0, sessions=3), repeat=1)
    assert list(step.params()) == ["concurrency", "rate_rps", "arrival", "requests", "duration_s", "repeat",
                                   "speedup", "sessions"]


def test_a_search_template_makes_its_probes_shapes():
    template = Search(over="rate", least=1.0, largest=20.0, arrival="gamma", burstiness=2.0,
                      max_concurrency=8, requests=40, cooldown_s=1.0)
    assert template.probe(5.0) == OpenLoop(rate_rps=5.0, arrival="gamma", burstiness=2.0, max_concurrency=8,
                                           requests=40, cooldown_s=1.0)
    assert template.inflight_target == 8
    over_c = Search(over="concurrency", least=2, largest=64, duration_s=10.0)
    assert over_c.probe(16) == ClosedLoop(concurrency=16, duration_s=10.0)
    assert (over_c.inflight_target, over_c.first_inflight) == (64, 2)


@pytest.mark.parametrize("name", sorted(V3_FIXTURES))
def test_a_version_3_plan_reads_as_shapes_and_writes_back_its_own_steps(name):
    d = v3(name)
    assert d["plan_version"] == 3
    plan = Plan.from_dict(d)
    kinds = {type(s.load) for s in plan.steps if s.kind in ("warmup", "load", "search")}
    assert None not in kinds
    assert all(s.load is None for s in plan.steps if s.kind in ("server", "smoke"))
    # nothing lost: the steps' flat form is the version 3 file's
    assert [s.flat() for s in plan.steps] == d["steps"]


def test_version_3_plans_read_as_the_shape_their_fields_say():
    shapes = {name: [type(s.load).__name__ for s in Plan.from_dict(v3(name)).steps if s.load is not None]
              for name in V3_FIXTURES}
    assert shapes["demo"] == ["ClosedLoop"] * 5  # the warm-up and four points
    assert shapes["capacity-search"] == ["ClosedLoop", "Search"]
    assert shapes["trace-replay"] == ["ClosedLoop", "Replay", "Replay"]  # the warm-up, speedups 1 and 2
    assert set(shapes["all-features"]) == {"ClosedLoop", "OpenLoop"}
    replay = Plan.from_dict(v3("trace-replay")).load_steps()[1].load
    assert isinstance(replay, Replay) and replay.speedup == 2.0


def test_a_version_3_user_centric_step_reads_as_users():
    flat = {"kind": "load", "combination": 0, "id": "users=4", "concurrency": None, "rate_rps": None,
            "arrival": None, "burstiness": None, "max_concurrency": None, "requests": None,
            "duration_s": 60.0, "ramp_up_s": 0.0, "cooldown_s": 0.0, "prompt_stream": 1,
            "prompts_sha256": None,
            "repeat": None, "search": None, "probe": None, "speedup": None, "sessions": 8, "users": 4,
            "turn_interval_s": 2.0, "cancel": None}
    step = Step.from_dict(flat)
    assert step.load == Users(users=4, turn_interval_s=2.0, duration_s=60.0, sessions=8)
    assert step.flat() == flat


@pytest.mark.parametrize("name", sorted(V3_FIXTURES))
def test_benchc_plan_changes_only_in_the_version_and_the_shapes_key(name, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["plan", V3_FIXTURES[name]]) == 0
    now = json.loads(capsys.readouterr().out)
    old = v3(name)
    assert now["plan_version"] == PLAN_VERSION == 4
    for s in now["steps"]:  # the load under its shape's key, nothing else of the step moved
        assert s["load"] is None or len(s["load"]) == 1 and \
            set(s["load"]) <= {"closed_loop", "open_loop", "replay", "users", "search"}
    keep = [k for k in old if k not in ("plan_version", "plan_hash", "spec")]
    assert {k: now[k] for k in keep if k != "steps"} == {k: old[k] for k in keep if k != "steps"}
    assert [flat_step(s) for s in now["steps"]] == old["steps"]


def test_a_results_plan_step_reads_flat_whatever_its_version():
    d = v3("all-features")
    load = next(s for s in d["steps"] if s["kind"] == "load")
    new = Step.from_dict(load).to_dict()
    assert "burstiness" not in new and new["load"]["open_loop"]["burstiness"] == load["burstiness"]
    assert flat_step(new) == load == flat_step(load)


def test_ray_divides_through_the_shape():
    closed = Step("load", 0, "c=5", load=ClosedLoop(concurrency=5, requests=20))
    assert [(s.load.concurrency, s.requests) for s, _ in split_step(closed, 2)] == [(3, 12), (2, 8)]
    opened = Step("load", 0, "rate=4/s", load=OpenLoop(rate_rps=4.0, requests=20, max_concurrency=5))
    parts = split_step(opened, 2)
    assert [(s.load.rate_rps, s.load.max_concurrency, s.requests) for s, _ in parts] == \
        [(4.0, 3, 20), (4.0, 2, 20)]
    assert [shard.schedule_slice for _, shard in parts] == [(0, 2), (1, 2)]
    replay = Step("load", 0, "speedup=1", load=Replay(speedup=1.0, requests=3))
    assert [shard.schedule_slice for _, shard in split_step(replay, 8)] == [(0, 3), (1, 3), (2, 3)]


def test_every_runnable_shape_has_a_driver_that_keeps_the_protocol():
    for shape in (ClosedLoop(concurrency=1), OpenLoop(rate_rps=1.0), Replay(speedup=1.0),
                  Users(users=1, turn_interval_s=1.0), AgentReplay(concurrency=1),
                  ConcurrencyStage(concurrency=1), RateStage(rate_rps=1.0)):
        driver = driver_for(shape)
        assert isinstance(driver.scheduled, bool) and driver.speedup > 0
        for name in ("next_due_ns", "drive"):
            assert callable(getattr(driver, name)), name
    assert set(DRIVERS) == {ClosedLoop, OpenLoop, Replay, Users, AgentReplay, ConcurrencyStage, RateStage}
    assert Driver  # the protocol, declared in one file


# Load fields that only a shape, or its driver, may read (the dispatch the types replace)
SHAPE_FIELDS = {"concurrency", "rate_rps", "arrival", "burstiness", "max_concurrency", "speedup", "users",
                "turn_interval_s"}
SHAPE_HOMES = {"benchc/plan/shapes.py", "benchc/run/closed_loop.py", "benchc/run/open_loop.py",
               "benchc/run/users.py"}


def _step_reads(path: Path) -> list[str]:
    """`<...step...>.FIELD` reads of a load field off a step (or its load) in one module."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr in SHAPE_FIELDS:
            base = ast.unparse(node.value)
            if "step" in base or base.endswith(".load") or base in ("first", "s", "p", "st"):
                out.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_no_code_outside_the_shapes_and_drivers_reads_which_load_fields_a_step_has():
    found = [hit for p in sorted((ROOT / "benchc").rglob("*.py"))
             if str(p.relative_to(ROOT)) not in SHAPE_HOMES and "results" not in p.parts
             for hit in _step_reads(p)]
    assert found == []


def test_steprun_is_under_300_lines_and_no_function_in_run_passes_80():
    tree = ast.parse((ROOT / "benchc/run/loadgen.py").read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == StepRun.__name__]
    assert cls.end_lineno - cls.lineno + 1 < 300
    modules = sorted((ROOT / "benchc/run").rglob("*.py"))
    assert len(modules) > 30  # the walk found the package, not an empty folder
    functions = [(path, node, node.end_lineno - node.lineno + 1)
                 for path in modules for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
    too_long = [f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)"
                for path, node, lines in functions if lines > 80]
    assert too_long == []
