"""Reasoning-aware metrics against the simulator's trace (its reasoning_tokens parameter:
`reasoning_content` deltas first, then `content`, as vLLM's reasoning parser streams them),
on every client path: the own reader on each transport (the event loop and the receive
loops, whose parser is the compiled core or, for the receive loop's twin, the Python one) and
aiohttp. Time to first answer is compared with the simulator's write of the first answer
chunk, never with a wall-clock figure."""

import json
import statistics

import pytest

from benchc.cli import main
from benchc.client.request import _take
from benchc.metrics.record import RequestRecord, Times
from benchc.metrics.recorder import PointRecorder
from benchc.results.document import read
from tests.conftest import both_cores, transports, use_transport
from tests.simrun import Sim
from tests.test_sessions import run_sessions
from tests.test_stream import THINK_THEN_ANSWER, chunk, fed_one_event_per_ms

SPEC = """\
version: 1
name: think
target: {{base_url: "http://127.0.0.1:9/v1", model: MiniMaxAI/MiniMax-M2.5}}
workload:
  dataset:
    random: {{input_tokens: 16, output_tokens: {out}, seed: {seed}}}
load:
  warmup: {{requests: 0}}
  sweep: {{concurrency: [{c}]}}
  requests: {n}
output: {{path: {path}, requests: true}}
"""
PATHS = [*transports(), "aiohttp"]


@pytest.fixture(params=PATHS)
def path(request, monkeypatch):
    """The client path the run's requests are read on: (extra `benchc run` arguments, the
    RequestRecord.path its records carry)."""
    if request.param == "aiohttp":
        return ["--http", "aiohttp"], "aiohttp"
    return [], use_transport(monkeypatch, request.param)


def run(tmp_path, path, sim_args, out, n, c=2, seed=3):
    """`benchc run` of n random prompts against a reasoning simulator: (the result's point, its
    requests, the trace by request id)."""
    extra, served = path
    f = tmp_path / "r.yaml"
    f.write_text(SPEC.format(out=out, n=n, c=c, seed=seed, path=tmp_path / "r.json"))
    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4", "--param", "step_table=[[1, 1.0]]", *sim_args)
    try:
        assert main(["run", str(f), "--base-url", sim.url, "--quiet", *extra]) == 0
        trace = sim.records()
    finally:
        sim.close()
    reqs = [json.loads(x) for x in (tmp_path / "r.requests.jsonl").read_text().splitlines()]
    assert len(reqs) == n and {r["path"] for r in reqs} == {served}
    (point,) = read(str(tmp_path / "r.json"))["points"]
    return point, reqs, trace


def first_write_error_ms(r: dict, tr: dict, key: str, chunk_index: int) -> float:
    """benchc's time of a chunk (t0 + its latency) minus the simulator's write of it (ms)."""
    return (r["t0_ns"] + r[key] * 1e3 - tr["chunks"][chunk_index][0]) / 1e6


@pytest.mark.slow  # runs against the simulator
def test_time_to_first_answer_is_the_first_answer_chunk_and_the_split_is_exact(tmp_path, path):
    """4 reasoning tokens, then 6 of answer, one token per chunk (1 ms steps): each request's
    first answer is the trace's first chunk after its reasoning chunks (median error < 1 ms),
    and its tokens split as the simulator's usage.completion_tokens_details says. One stream at
    a time: streams in lockstep would share one late read on a busy machine, one sample."""
    point, reqs, trace = run(tmp_path, path, ("--param", "reasoning_tokens=4"), out=10, n=6, c=1)
    answer_errors, reasoning_errors = [], []
    for r in reqs:
        tr = trace[r["id"]]
        assert (tr["reasoning_tokens"], tr["reasoning_chunks"], tr["output_tokens"]) == (4, 4, 10)
        assert (r["reasoning_tokens"], r["output_tokens"]) == (tr["reasoning_tokens"], tr["output_tokens"])
        answer_errors.append(first_write_error_ms(r, tr, "ttf_answer_us", tr["reasoning_chunks"]))
        reasoning_errors.append(first_write_error_ms(r, tr, "ttf_reasoning_us", 0))
        assert r["ttft_us"] == r["ttf_reasoning_us"] <= r["ttf_answer_us"]  # TTFT: text of any kind
    # never before the write (kernel receive stamps, or the read's own time), but for moving the
    # kernel's CLOCK_REALTIME stamp onto the monotonic clock (two clock reads, which a busy
    # machine may pull apart): the chunk before, written a step (1 ms) earlier, would be -1 ms.
    # Late by about as long as the write call takes (more where the cores are busy elsewhere).
    assert min(answer_errors + reasoning_errors) > -0.5, (answer_errors, reasoning_errors)
    assert statistics.median(answer_errors) < 1.0, answer_errors
    assert statistics.median(reasoning_errors) < 1.0, reasoning_errors
    assert point["reasoning"] == {"requests": 6, "reasoning_tokens": 6 * 4, "answer_tokens": 6 * 6,
                                  "method": "usage", "requests_without_answer": 0}
    lat = point["latency"]
    assert lat["ttf_answer_us"]["count"] == lat["ttf_reasoning_us"]["count"] == 6
    # ITL within the answer: the gaps between its 6 chunks; ITL: between all 10
    assert (lat["itl_answer_us"]["count"], lat["itl_us"]["count"]) == (6 * 5, 6 * 9)
    assert lat["ttf_answer_us"]["p50"] > lat["ttft_us"]["p50"]


@pytest.mark.slow  # runs against the simulator
def test_without_usage_the_split_comes_from_the_chunks_and_a_request_may_not_answer(tmp_path, path):
    """A server that ignores stream_options (no usage at all): reasoning and answer are counted
    one token per chunk of each kind, still exactly the trace's; outputs of 2 to 9 tokens with
    5 of reasoning: a request whose max_tokens ran out while it reasoned has no answer."""
    sim = ("--param", "reasoning_tokens=5", "--param", 'ignored_params=["stream_options"]')
    point, reqs, trace = run(tmp_path, path, sim, out="{min: 2, max: 9}", n=6)
    silent = 0
    for r in reqs:
        tr = trace[r["id"]]
        assert r["reasoning_tokens"] == tr["reasoning_tokens"] == tr["reasoning_chunks"]
        assert r["output_tokens"] - r["reasoning_tokens"] == tr["output_tokens"] - tr["reasoning_tokens"]
        answered = tr["output_tokens"] > tr["reasoning_tokens"]
        silent += not answered
        if answered:  # not before the simulator wrote the first answer chunk (see above)
            assert first_write_error_ms(r, tr, "ttf_answer_us", tr["reasoning_chunks"]) > -0.5
            assert r["ttf_answer_us"] >= r["ttf_reasoning_us"]  # one read may carry both
        else:
            assert r["ttf_answer_us"] is None and r["finish_reason"] == "length"
    assert 0 < silent < len(reqs)  # the seed draws both kinds
    b = point["reasoning"]
    assert (b["method"], b["requests"], b["requests_without_answer"]) == ("chunks", 6, silent)
    assert b["reasoning_tokens"] == sum(t["reasoning_tokens"] for t in trace.values())
    assert b["answer_tokens"] == sum(t["output_tokens"] - t["reasoning_tokens"] for t in trace.values())
    assert point["latency"]["ttf_answer_us"]["count"] == len(reqs) - silent
    assert point["tokens"]["output_method"] == "chunks"


@pytest.mark.slow  # runs against the simulator
def test_a_sessions_next_turn_sends_back_the_answer_not_the_reasoning(tmp_path):
    """A chat's history carries the assistant's answers (chat templates drop the thinking of
    earlier turns): each turn sends the previous turn's streamed content only."""
    doc, sessions, trace = run_sessions(tmp_path, ("--param", "reasoning_tokens=3"), turns=2, n_out=6,
                                        load="  sessions: 2")
    for turns in sessions.values():
        before, now = trace[turns[0]["id"]], trace[turns[1]["id"]]
        assert before["reasoning"] and before["output"]
        assert now["messages"][-2] == {"role": "assistant", "content": before["output"]}
        assert before["reasoning"] not in json.dumps(now["messages"])
    point = doc["points"][0]
    assert point["reasoning"]["requests"] == 4 and point["reasoning"]["reasoning_tokens"] == 4 * 3
    assert point["reasoning"]["answer_tokens"] == 4 * 3


def record_of(stream_mod, events, t0=0):
    p = fed_one_event_per_ms(stream_mod, events)
    r = RequestRecord("r", 0, 5, None, parser=p, times=Times(t0_ns=t0))
    _take(r, p)
    r.times.end_ns = p.done_ns
    return r


def recordable_parsers() -> list:
    """The parser cores whose gaps a PointRecorder's histograms take: both where the compiled
    cores are in use; the twin alone with BENCHC_NO_EXTENSIONS=1 (the compiled parser records
    into compiled histograms only)."""
    from benchc.metrics import _hdr

    both = both_cores("benchc.client._stream")
    return both if _hdr.CORE == "cython" else both[:1]


@pytest.mark.parametrize("order", ["plain-first", "reasoning-first"])
def test_a_point_records_every_requests_answer_whatever_came_first(order):
    """Until a point meets a request that reasons, time to first answer and answer ITL are not
    recorded twice (they are TTFT and ITL); from then on they are, starting from those. Either
    way, and across tallies merged (workers, shards), every completed request is counted once."""
    for stream_mod in recordable_parsers():
        plain = [chunk({"content": "a"}), chunk({"content": "b"}), chunk({"content": "c"})]
        mixed = [plain, THINK_THEN_ANSWER] if order == "plain-first" else [THINK_THEN_ANSWER, plain]
        one = PointRecorder(2)
        for events in mixed:
            one.add(record_of(stream_mod, events))
        lat = one.summary()["latency"]
        assert lat["ttf_answer_us"]["count"] == 2 and lat["ttf_reasoning_us"]["count"] == 1
        assert lat["itl_answer_us"]["count"] == 2 + 2  # plain: 3 chunks; reasoning: 3 answer chunks
        # plain answers at 1 ms, the reasoning one at 5 ms (after its role chunk and 3 of thinking)
        assert lat["ttf_answer_us"]["min"] == 1000
        assert lat["ttf_answer_us"]["max"] == pytest.approx(5000, rel=1e-3)
        # the same requests in two tallies, merged either way round
        parts = [PointRecorder(1), PointRecorder(1)]
        for rec, events in zip(parts, mixed, strict=True):
            rec.add(record_of(stream_mod, events))
        for a, b in (parts, parts[::-1]):
            merged = PointRecorder(2)
            merged.tally.add(a.tally)
            merged.tally.add(b.tally)
            got = merged.summary()["latency"]
            for name in ("ttf_answer_us", "itl_answer_us", "ttf_reasoning_us"):
                assert got[name]["hdr"] == lat[name]["hdr"], name
        # a point where nothing reasoned shows no reasoning figures (they would repeat TTFT and ITL)
        none = PointRecorder(1)
        none.add(record_of(stream_mod, plain))
        assert "ttf_answer_us" not in none.summary()["latency"] and "reasoning" not in none.summary()



TOOLS_SPEC = """\
version: 1
name: tools-{name}
target:
  sim: {{preset: minimax-m2.5-tp4, step_table: [[1, 1.0]], reasoning_tokens: {reasoning}}}
  model: sim-model
workload:
  dataset:
    random: {{input_tokens: 16, output_tokens: 8}}
load:
  warmup: {{requests: 0}}
  sweep: {{concurrency: [2]}}
  requests: 4
output: {{path: {path}}}
"""


def tools_run(tmp_path, name, reasoning):
    spec, out = tmp_path / f"{name}.yaml", tmp_path / f"{name}.json"
    spec.write_text(TOOLS_SPEC.format(name=name, reasoning=reasoning, path=out))
    assert main(["run", str(spec), "--quiet"]) == 0
    return str(out)


@pytest.mark.slow  # runs the embedded simulator
def test_compare_export_and_report_carry_the_time_to_first_answer(tmp_path, capsys):
    import csv
    import io

    from benchc.results.report import HEADER, summary_rows

    thinks, plain = tools_run(tmp_path, "thinks", 3), tools_run(tmp_path, "plain", 0)
    doc = read(thinks)
    ttfa_ms = doc["points"][0]["latency"]["ttf_answer_us"]["p50"] / 1000
    capsys.readouterr()
    assert main(["export", thinks, "--format", "csv"]) == 0
    (row,) = csv.DictReader(io.StringIO(capsys.readouterr().out))
    assert float(row["ttf_answer_p50_ms"]) == pytest.approx(ttfa_ms, rel=1e-3)
    assert (row["reasoning_tokens"], row["answer_tokens"]) == ("12", "20")
    assert main(["export", plain, "--format", "csv"]) == 0
    (row,) = csv.DictReader(io.StringIO(capsys.readouterr().out))
    assert row["ttf_answer_p50_ms"] == row["reasoning_tokens"] == ""  # nothing reasoned there
    assert main(["compare", thinks, thinks, "--format", "json"]) == 0
    (point,) = json.loads(capsys.readouterr().out)["points"]
    assert point["metrics"]["ttf_answer.p50"]["base"] == pytest.approx(ttfa_ms * 1000, rel=1e-3)  # us
    assert {"ttf_answer.p99", "itl_answer.p50"} <= set(point["metrics"])
    assert main(["compare", plain, thinks, "--format", "json"]) == 0  # where one side has it: left out
    (point,) = json.loads(capsys.readouterr().out)["points"]
    assert "ttf_answer.p50" not in point["metrics"] and "ttft.p50" in point["metrics"]
    rows = summary_rows([doc, read(plain)])
    col = HEADER.index("first answer p50 ms")
    assert float(rows[0][col]) == pytest.approx(ttfa_ms, abs=0.05) and rows[1][col] == "-"
