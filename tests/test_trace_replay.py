"""Replaying traces against the simulator: every request sent at or after its scaled trace time
and in trace order, the trace's requests and token totals sent and returned, and for a
Mooncake trace the simulator's cached tokens per request exactly what the hash ids imply.

What the hash ids imply, with the trace's block (32 tokens) a multiple of the simulator's
(16, vLLM's): a request finds cached the longest prefix it has in common with any request
admitted before it (blocks of equal id are equal words, a partial block being the first words
of its id's), rounded down to whole 16-token blocks, and never its last token -- the rule of
the simulator's cache (sim/prefix_cache.py), applied to the ids, in the order the simulator
admitted the requests (its trace's admitted_seq). The cache holds 1 Mi tokens: nothing of
these traces is evicted.
"""

import json
import random

import pytest

from benchc.cli import main
from benchc.results.document import read
from tests.simrun import Sim

SIM_BLOCK = 16
BLOCK = 32

SPEC = """\
version: 1
name: replay
target: {{base_url: "http://127.0.0.1:9/v1", model: MiniMaxAI/MiniMax-M2.5}}
workload:
  dataset:
    trace: {{path: {path}, format: {fmt}{extra}}}
load:
  warmup: {{requests: 0}}
  sweep: {{speedup: {speedups}{cap}}}
output: {{path: {out}, requests: true}}
"""


def mooncake_rows(n=24, seed=7):
    """Conversations that grow (each turn's ids extend the last turn's), under one shared
    system-prompt block, with a few rows whose shared block ends part-way (partial blocks)."""
    rng = random.Random(seed)
    rows, next_id, t = [], 1, 0
    convs: list[list[int]] = []
    for _ in range(n):
        t += rng.choice([0, 0, 5, 12, 30])  # ms; equal times too
        if convs and rng.random() < 0.6:
            ids = rng.choice(convs)
        else:
            ids = [0]
            convs.append(ids)
        extra = rng.randint(1, 3)
        ids.extend(range(next_id, next_id + extra))
        next_id += extra
        n_in = (len(ids) - 1) * BLOCK + rng.randint(1, BLOCK)  # the last block partial (or full)
        rows.append({"timestamp": t, "input_length": n_in, "output_length": rng.randint(1, 5),
                     "hash_ids": list(ids)})
    return rows


def common_prefix(a, b):
    """Tokens two Mooncake rows send alike: equal ids are equal blocks, a partial block the
    first tokens of its id's."""
    n = 0
    for k, (x, y) in enumerate(zip(a["hash_ids"], b["hash_ids"], strict=False)):
        la = min(BLOCK, a["input_length"] - k * BLOCK)
        lb = min(BLOCK, b["input_length"] - k * BLOCK)
        if x != y:
            break
        n += min(la, lb)
        if la != lb:
            break
    return n


def implied_cached(rows, order):
    """Per row index, the cached tokens the simulator's cache gives it, in admission order."""
    out, before = {}, []
    for r in order:
        row = rows[r]
        common = max((common_prefix(row, rows[b]) for b in before), default=0)
        usable = (row["input_length"] - 1) // SIM_BLOCK
        out[r] = min(common // SIM_BLOCK, usable) * SIM_BLOCK
        before.append(r)
    return out


def run_on_sim(tmp_path, spec_text):
    """`benchc run` of a spec (its output at tmp_path/r.json, with per-request records) against a
    simulator with 1 ms steps: (result, per-request records, the simulator's trace by id)."""
    spec = tmp_path / "s.yaml"
    spec.write_text(spec_text)
    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4", "--param", "step_table=[[1, 1.0]]")
    try:
        assert main(["run", str(spec), "--base-url", sim.url, "--quiet"]) == 0
        trace = sim.records()
    finally:
        sim.close()
    reqs = [json.loads(x) for x in (tmp_path / "r.requests.jsonl").read_text().splitlines()]
    return read(str(tmp_path / "r.json")), reqs, trace


def replay(tmp_path, fmt, text, speedups, extra="", cap=""):
    trace_file = tmp_path / f"trace.{fmt}"
    trace_file.write_text(text)
    doc, reqs, trace = run_on_sim(tmp_path, SPEC.format(path=trace_file.name, fmt=fmt, extra=extra,
                                                        speedups=speedups, out=tmp_path / "r.json", cap=cap))
    by_point = {p["id"]: sorted((r for r in reqs if r["point"] == p["id"]), key=lambda r: r["prompt_index"])
                for p in doc["points"]}
    return doc, by_point, trace


def check_schedule(point, sent, times_s, speedup, ins, outs, trace):
    """Every trace row sent once, at or after its scaled time, with its lengths."""
    assert [r["prompt_index"] for r in sent] == list(range(len(times_s)))
    t0 = sent[0]["scheduled_ns"]
    for r, t in zip(sent, times_s, strict=True):
        # the schedule is the trace's times over the speedup (to the nanosecond's rounding)
        assert abs(r["scheduled_ns"] - t0 - t / speedup * 1e9) <= 1_000
        assert r["t0_ns"] >= r["scheduled_ns"]  # never before its time
    assert [trace[r["id"]]["input_tokens"] for r in sent] == ins
    assert [trace[r["id"]]["output_tokens"] for r in sent] == [r["output_tokens"] for r in sent] == outs
    assert point["counts"]["sent"] == point["counts"]["completed"] == len(times_s)
    assert (point["tokens"]["input"], point["tokens"]["output"]) == (sum(ins), sum(outs))
    assert point["tokens"]["osl"] == {"requests_checked": len(outs), "mismatched": 0}
    tb = point["trace"]
    assert (tb["requests"], tb["input_tokens"], tb["output_tokens"]) == (len(ins), sum(ins), sum(outs))
    assert tb["sent"]["requests"] == len(ins) and tb["sent"]["input_tokens"] == sum(ins)
    assert tb["speedup"] == speedup and tb["duration_s"] == pytest.approx(times_s[-1] / speedup, abs=1e-6)
    client = point["client"]
    assert client["send_skew_us"]["count"] == len(ins) and client["capped_sends"] == 0
    assert client["late_sends"] == sum(r["t0_ns"] - r["scheduled_ns"] >= 1_000_000 for r in sent)


@pytest.mark.slow  # runs against the simulator
def test_a_mooncake_trace_replays_on_time_with_the_cache_hits_its_hash_ids_imply(tmp_path):
    rows = mooncake_rows()
    text = "".join(json.dumps(r) + "\n" for r in rows)
    doc, by_point, trace = replay(tmp_path, "mooncake", text, "[1, 3]", extra=f", block_size: {BLOCK}")
    times = [(r["timestamp"] - rows[0]["timestamp"]) / 1000 for r in rows]
    ins = [r["input_length"] for r in rows]
    outs = [r["output_length"] for r in rows]
    assert [p["id"] for p in doc["points"]] == ["speedup=1", "speedup=3"]
    total_implied = 0
    for point, speedup in zip(doc["points"], (1.0, 3.0), strict=True):
        sent = by_point[point["id"]]
        check_schedule(point, sent, times, speedup, ins, outs, trace)
        order = [r["prompt_index"] for r in sorted(sent, key=lambda r: trace[r["id"]]["admitted_seq"])]
        implied = implied_cached(rows, order)
        assert [trace[r["id"]]["cached_tokens"] for r in sent] == [implied[r["prompt_index"]] for r in sent]
        assert [r["cached_tokens"] for r in sent] == [implied[r["prompt_index"]] for r in sent]
        # each point replays the trace on content of its own: the second finds nothing of the first
        c = point["cache"]
        assert c["cached_tokens"] == sum(implied.values()) > 0 and c["above_declared"] is False
        assert c["cached_fraction"] == round(sum(implied.values()) / sum(ins), 4)
        total_implied += sum(implied.values())
    plan_trace = doc["plan"]["combinations"][0]["workload"]["trace"]
    assert doc["points"][0]["trace"]["sha256"] == plan_trace["sha256"]
    assert total_implied == sum(t["cached_tokens"] for t in trace.values())


AZURE = """\
TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,37,4
2023-11-16 18:15:46.6805900,120,2
2023-11-16 18:15:46.9001000,9,6
2023-11-16 18:15:47.0500000,300,1
2023-11-16 18:15:47.4000000,64,3
2023-11-16 18:15:47.4000001,52,5
"""

BURSTGPT = """\
Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5,ChatGPT,47,3,50,Conversation log
5.5,GPT-4,99,2,101,Conversation log
6,ChatGPT,140,4,144,API log
6.25,ChatGPT,18,0,18,Conversation log
7.5,ChatGPT,77,5,82,Conversation log
"""


@pytest.mark.slow  # runs against the simulator
@pytest.mark.parametrize("fmt,text,extra,times,ins,outs", [
    # Azure's 100 ns ticks are read to the microsecond: the last two rows arrive together
    ("azure", AZURE, "", [0.0, 0.0, 0.21951, 0.36941, 0.71941, 0.71941], [37, 120, 9, 300, 64, 52],
     [4, 2, 6, 1, 3, 5]),
    # ChatGPT conversations only; the failed request (0 response tokens) asks for 1
    ("burstgpt", BURSTGPT, ", filter: {model: ChatGPT, log_type: Conversation log}", [0.0, 1.25, 2.5],
     [47, 18, 77], [3, 1, 5]),
])
def test_azure_and_burstgpt_traces_replay_on_time_with_their_lengths(tmp_path, fmt, text, extra, times, ins,
                                                                     outs):
    doc, by_point, trace = replay(tmp_path, fmt, text, "[4]", extra=extra)
    (point,) = doc["points"]
    check_schedule(point, by_point[point["id"]], times, 4.0, ins, outs, trace)
    # no hash ids: every prompt its own, nothing cached
    assert point["cache"]["cached_tokens"] == 0 and point["trace"]["raised_requests"] == (fmt == "burstgpt")


@pytest.mark.slow  # runs against the simulator
def test_arrivals_beyond_max_concurrency_wait_and_are_counted(tmp_path):
    """Six requests due at once, at most two in flight: the last four each wait for an earlier
    one to end, are sent late (the simulator takes at least 3 steps of 1 ms per request), and
    the self-check counts them: late, all four (the first two too, when opening their
    connections took a millisecond); held at the cap, the third for certain (the
    first two cannot have ended), the others unless two requests ended together and freed
    two places at once."""
    rows = [{"timestamp": 0, "input_length": 20, "output_length": 3} for _ in range(6)]
    doc, by_point, trace = replay(tmp_path, "mooncake", "".join(json.dumps(r) + "\n" for r in rows), "[1]",
                                  cap=", max_concurrency: 2")
    (point,) = doc["points"]
    sent = sorted(by_point[point["id"]], key=lambda r: r["t0_ns"])
    assert [r["scheduled_ns"] for r in sent] == [sent[0]["scheduled_ns"]] * 6
    ends = sorted(trace[r["id"]]["end_ns"] for r in sent)
    for k, r in enumerate(sent[2:]):
        # the k-th waiting request goes only once k + 1 requests have ended
        assert trace[r["id"]]["arrival_ns"] >= ends[k]
    client = point["client"]
    assert 1 <= client["capped_sends"] <= 4 and 4 <= client["late_sends"] <= 6
    assert point["latency"]["ttft_from_schedule_us"]["max"] > point["latency"]["ttft_us"]["max"]
