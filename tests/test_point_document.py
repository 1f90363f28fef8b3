"""A result point written through benchc.results' types (results/api.py's write side): the
document the runner writes is the one it wrote when it assembled the point as a dict (a stored
point, tests/data/assembled-point.json, written by the code before), and every stored result
reads into those types and writes back the same bytes."""

import json
import os

import pytest

from benchc.plan.compiler import compile_spec
from benchc.run.point import Measurement, assemble_point
from benchc.spec.loader import load
from tests.test_aggregate import PARSERS, SLO, record, requests

ROOT = os.path.dirname(os.path.dirname(__file__))
DATA = os.path.join(ROOT, "tests", "data")
ASSEMBLED = os.path.join(DATA, "assembled-point.json")
UPDATE = os.environ.get("BENCHC_UPDATE_ASSEMBLED") == "1"


class FixedTelemetry:
    """The telemetry of a point whose server reported prefix-cache counters and GPU-less
    /metrics: fixed figures, so the point's bytes are the code's alone."""

    def summary(self, window_s: float, output_tokens: int, input_tokens: int | None = None) -> dict:
        return {"server": {"available": True, "running": {"mean": 3.5, "max": 4},
                           "prefix_cache_queries_delta": 4000, "prefix_cache_hits_delta": 120},
                "host": {"available": True, "busy_fraction": 0.25}, "gpu": {"available": False}}

    def server_phases(self, point: dict) -> dict | None:
        return {"queue_us": {"mean": 12.0}, "window_s": point["window"]["duration_s"]}

    def server_series(self, start_ns: int | None, end_ns: int | None) -> dict:
        return {"t_s": [0.0, 0.5], "running": [2, 4]}


def assembled(parser_cls) -> dict:
    """One point of specs/demo.yaml assembled from seeded requests (stream parsers fed SSE
    bytes, tests/test_aggregate.py), with a cache reset not done, a shard list and a backend."""
    plan = compile_spec(load(os.path.join(ROOT, "specs", "demo.yaml"), env={}))
    step = next(s for s in plan.steps if s.kind == "load")
    rec = record(requests(parser_cls, 40, seed=11))
    tally = rec.tally
    m = Measurement(tally=tally, client={"client_limited": False, "reasons": []},
                    steady={"duration_s": 1.5, "output_tokens": 90, "output_tok_s": 60.0},
                    mean_inflight=3.25, params={}, host="h", backend={"kind": "ray", "workers": 2},
                    shards=[{"worker": 0, "host": "h"}])
    reset = {"done": False, "message": "the cache reset failed: 404"}
    return assemble_point(step, plan.combinations[0], m, FixedTelemetry(), SLO, reset)


@pytest.mark.parametrize("parser_cls", PARSERS, ids=["py", "c"][: len(PARSERS)])
def test_the_assembled_point_is_the_document_written_before(parser_cls):
    text = json.dumps(assembled(parser_cls), indent=1)
    if UPDATE:
        with open(ASSEMBLED, "w") as f:
            f.write(text + "\n")
    with open(ASSEMBLED) as f:
        assert text + "\n" == f.read()
