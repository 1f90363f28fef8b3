"""A result point written through benchc.results' types (results/api.py's write side): the
document the runner writes is the one it wrote when it assembled the point as a dict (a stored
point, tests/outputs/assembled-point.json, written by the code before), and every stored result
reads into those types and writes back the same bytes."""

import json
import os

import pytest

from benchc.plan.compiler import compile_spec
from benchc.results.api import Point, from_document
from benchc.results.document import read, validate_document
from benchc.run.point import Measurement, assemble_point
from benchc.spec.loader import load
from tests.test_aggregate import PARSERS, SLO, record, requests

ROOT = os.path.dirname(os.path.dirname(__file__))
DATA = os.path.join(ROOT, "tests", "data")
ASSEMBLED = os.path.join(ROOT, "tests", "outputs", "assembled-point.json")
UPDATE = os.environ.get("BENCHC_UPDATE_ASSEMBLED") == "1"


def point_of(**blocks) -> Point:
    """A whole result point (the MiniMax fixture's first: trusted, no SLO) with `blocks` in
    place of its own: what a test of one room (trust, slo) hands it."""
    p = read(os.path.join(DATA, "result-v1-minimax.json"))["points"][0]
    return Point.from_dict({**p, **blocks})


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
    return assemble_point(step, plan.combinations[0], m, FixedTelemetry(), SLO, reset).to_dict()


@pytest.mark.parametrize("parser_cls", PARSERS, ids=["py", "c"][: len(PARSERS)])
def test_the_assembled_point_is_the_document_written_before(parser_cls):
    text = json.dumps(assembled(parser_cls), indent=1)
    if UPDATE:
        with open(ASSEMBLED, "w") as f:
            f.write(text + "\n")
    with open(ASSEMBLED) as f:
        assert text + "\n" == f.read()


RESULTS = sorted(os.path.join(DATA, f) for f in os.listdir(DATA)
                 if f.startswith("result-v") and f.endswith(".json")) + \
    [os.path.join(ROOT, "tests", "outputs", "search-input.json")]


@pytest.mark.parametrize("path", RESULTS, ids=os.path.basename)
def test_every_stored_result_reads_into_the_types_and_writes_back_the_same_bytes(path):
    """Each stored result (every version written, tests/data; a capacity search's) read into
    Result and Point and written back by their to_dict gives the bytes the runner writes
    (run/runner.py: json, indent 1) for the document as read, and still validates."""
    doc = read(path)
    back = from_document(doc, path).to_dict()
    assert json.dumps(back, indent=1) == json.dumps(doc, indent=1)
    validate_document(back)
    for p in doc["points"]:
        point = Point.from_dict(p)
        assert json.dumps(point.to_dict(), indent=1) == json.dumps(p, indent=1)
        # what a room adds goes after the point's blocks; a block put again keeps its place
        grown = point.with_blocks(trust={"trusted": True, "doubts": []}, energy={"available": False})
        assert list(grown.to_dict()) == [*p, *(k for k in ("trust", "energy") if k not in p)]
        again = point.with_blocks(counts=dict(p["counts"]))
        assert list(again.to_dict()) == list(p) and again.to_dict() == p


def test_a_point_written_is_a_copy_the_point_does_not_share():
    point = point_of()
    written = point.to_dict()
    written["counts"]["sent"] = -1
    written["latency"]["ttft_us"]["p99"] = -1
    assert point.sent == point.to_dict()["counts"]["sent"] > 0
    assert point.ttft.percentiles[99.0] == point.to_dict()["latency"]["ttft_us"]["p99"] > 0
