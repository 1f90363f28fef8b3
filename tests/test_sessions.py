"""Multi-turn sessions: the scripts each source builds (plan/sessions.py), the spec rules, and
sessions sent to the simulator, checked against its trace: each turn carries the history with
the answers the server streamed, finds that history cached, keeps its think time, and a
Ctrl-C leaves the turns measured so far."""

import json
import signal
import subprocess
import sys

import pytest

from benchc.cli import main
from benchc.errors import PlanError
from benchc.plan.prompts import POOL_STREAM, Deal, step_digest
from benchc.plan.sessions import SyntheticSessions, draw_think, session_params, think_params
from benchc.results.document import read
from benchc.spec.loader import load_text, validate
from tests.conftest import wait_for
from tests.simrun import Sim

BS = 16  # the simulator's block


def synthetic(mode="fresh", **cfg):
    base = {"turns": 3, "input_tokens": 12, "output_tokens": 5, "think_time": {"min": "10ms", "max": "30ms"}}
    params = {"seed": 4, **session_params({**base, **cfg}, 6 if mode == "shared" else None)}
    return SyntheticSessions(params, mode)


# --------------------------------------------------------------------------- scripts


def test_synthetic_sessions_are_pure_functions_of_seed_stream_and_index():
    src = synthetic(turns={"min": 2, "max": 5}, prefix_tokens=7)
    a, b = src.session(3, 1), synthetic(turns={"min": 2, "max": 5}, prefix_tokens=7).session(3, 1)
    assert a == b and a != src.session(3, 2) and a != src.session(4, 1)
    lens = {len(src.session(0, i).turns) for i in range(40)}
    assert lens == {2, 3, 4, 5}
    s = src.session(2, 9)
    first, *rest = s.turns
    # turn 1 opens with the shared system prompt: the one thing sessions share
    assert first.messages[0] == {"role": "system", "content": src.words.prefix} and first.shared_tokens == 7
    assert len(src.words.prefix.split()) == 7 and first.think_s == 0.0
    for k, t in enumerate(s.turns, 1):
        user = t.messages[-1]["content"]
        assert user.split()[0] == f"2.9.{k}" and len(user.split()) == 12 == t.own_tokens
        assert t.output_tokens == 5
    assert all(r.shared_tokens == 0 and len(r.messages) == 1 and 0.010 <= r.think_s <= 0.030 for r in rest)
    # no two sessions' user messages begin alike (fresh prompts): each names its session
    heads = {t.messages[-1]["content"].split()[0] for i in range(30) for t in src.session(0, i).turns}
    assert len(heads) == sum(len(src.session(0, i).turns) for i in range(30))


def test_shared_sessions_deal_one_pool_and_count_reuse():
    src = synthetic(mode="shared")
    assert src.pool_size == 6
    # every step deals the one pool from its start: the same sessions whatever the stream
    assert src.session(0, 2).turns == src.session(7, 2).turns == src.session(POOL_STREAM, 2).turns
    assert src.session(0, 8).turns == src.session(0, 2).turns and src.session(0, 8).reused
    assert [src.session(1, i, Deal(seen=3)).reused for i in range(8)] == [True] * 3 + [False] * 3 + [True] * 2


def test_think_time_distributions_are_seeded_and_bounded():
    import random

    for spec, lo, hi in (("250ms", 0.25, 0.25), ({"min": "1s", "max": "2s"}, 1, 2),
                         ({"mean": "1s", "stdev": "2s"}, 0, None), ({"exponential": "2s"}, 0, None)):
        think = think_params(spec)
        xs = [draw_think(random.Random(1), think) for _ in range(3)]
        assert xs[0] == xs[1] == xs[2]  # seeded: the same generator state gives the same draw
        ys = [draw_think(r, think) for r in [random.Random(2)] for _ in range(200)]
        assert min(ys) >= lo and (hi is None or max(ys) <= hi)
    ys = [draw_think(random.Random(i), think_params({"exponential": "2s"})) for i in range(4000)]
    assert 1.85 < sum(ys) / len(ys) < 2.15


def test_sharegpt_conversations_become_sessions(tmp_path):
    from benchc.plan.datasets import make_source

    convs = [
        {"conversations": [{"from": "system", "value": "be brief"}, {"from": "human", "value": "hi there"},
                           {"from": "gpt", "value": "hello to you"}, {"from": "human", "value": "and then"},
                           {"from": "gpt", "value": "a b c d e"}, {"from": "human", "value": "unanswered"}]},
        {"conversations": [{"from": "gpt", "value": "greeting"}, {"from": "human", "value": "only one"},
                           {"from": "gpt", "value": "x y"}]},
        {"conversations": []},
    ]
    f = tmp_path / "sg.json"
    f.write_text(json.dumps(convs))
    params = {"path": str(f), "num_prompts": None, "seed": 0, "sessions": True,
              "think_time": think_params("1s"), "max_turns": None}
    src = make_source("sharegpt", params, "fresh")
    assert src.pool_size == 2
    a, b = src.session(0, 0), src.session(0, 1)
    assert [t.messages for t in a.turns] == [[{"role": "system", "content": "be brief"},
                                              {"role": "user", "content": "hi there"}],
                                             [{"role": "user", "content": "and then"}]]
    assert [t.output_tokens for t in a.turns] == [3, 5] and [t.think_s for t in a.turns] == [0.0, 1.0]
    assert all(t.own_tokens is None for t in a.turns)  # a user's text: what it shares nobody can say
    assert [t.messages for t in b.turns] == [[{"role": "user", "content": "only one"}]]
    # dealt in order across the run; round again: reused
    assert src.session(0, 2).turns == a.turns and src.session(0, 2).reused
    assert len(make_source("sharegpt", {**params, "max_turns": 1}, "fresh").session(0, 0).turns) == 1


def test_trace_rows_of_a_session_are_its_turns(tmp_path):
    from benchc.plan.datasets import make_source
    from benchc.plan.trace import trace_params

    rows = [{"timestamp": 1.0, "input_tokens": 6, "output_tokens": 2, "session_id": "a"},
            {"timestamp": 1.5, "prompt": "alone here", "output_tokens": 3},
            {"timestamp": 2.0, "messages": [{"role": "user", "content": "second turn of a"}],
             "session_id": "a", "output_tokens": 4},
            {"timestamp": 2.5, "input_tokens": 3, "output_tokens": 1, "session_id": 7}]
    f = tmp_path / "t.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    params = {"seed": 0, **trace_params({"path": str(f), "format": "benchc", "sessions": True})}
    src = make_source("trace", params, "fresh")
    assert src.pool_size == 3
    a, alone, seven = (src.session(2, i) for i in range(3))
    assert (a.name, a.start_s, [t.at_s for t in a.turns]) == ("a", 0.0, [0.0, 1.0])
    assert len(a.turns[0].messages[0]["content"].split()) == 6 and a.turns[0].own_tokens == 6
    assert a.turns[1].messages == rows[2]["messages"] and a.turns[1].output_tokens == 4
    assert alone.turns[0].messages == [{"role": "user", "content": "alone here"}] and alone.start_s == 0.5
    assert (seven.name, seven.start_s) == ("7", 1.5)
    assert list(src.arrivals(2.0)) == [0.0, 0.25, 0.75]
    # every point replays the same sessions, on words of its own
    assert src.session(3, 0).turns[0].messages != a.turns[0].messages
    assert step_digest(src, 2, 3) == step_digest(make_source("trace", params, "fresh"), 2, 3)


SPEC = """\
version: 1
name: chat
target:
  sim: {{preset: instant}}
  model: benchc-sim{api}
workload:
  dataset:
    {dataset}
load:
  sweep: {sweep}
{load}
"""


@pytest.mark.parametrize("dataset,sweep,load,api,message", [
    ("random: {input_tokens: 8, output_tokens: 4}", "{concurrency: [1]}", "  sessions: 3", "",
     "$.load.sessions: sessions count the sessions of a sessions workload"),
    ("random: {input_tokens: 8, output_tokens: 4}", "{users: [2], turn_interval: 1s}", "  requests: 3", "",
     "$.load.sweep.users: users send sessions at a per-user pace: they need a sessions workload"),
    ("sessions: {turns: 2, input_tokens: 8, output_tokens: 4}", "{users: [2]}", "  sessions: 3", "",
     "$.load.sweep: users needs turn_interval"),
    ("sessions: {turns: 2, input_tokens: 8, output_tokens: 4}", "{concurrency: [2]}", "  ramp_up: 1s", "",
     "$.load: say when each point stops: give requests, duration, or both (or sessions)"),
    ("sessions: {turns: 2, input_tokens: 8, output_tokens: 4, think_time: {min: 1s}}", "{concurrency: [2]}",
     "  sessions: 2", "", "think_time"),
])
def test_spec_rules_for_sessions(tmp_path, capsys, dataset, sweep, load, api, message):
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(dataset=dataset, sweep=sweep, load=load, api=api))
    assert main(["validate", str(spec)]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("dataset,load,message", [
    ("sessions: {turns: 20000, input_tokens: 8, output_tokens: 4}", "  sessions: 2",
     "20,000 turns per session is more than 10,000"),
    ("sessions: {turns: 5000, input_tokens: 2k, output_tokens: 1k}", "  sessions: 2",
     "15,000,000 tokens in a session's last turn"),
    ("sessions: {turns: 2, input_tokens: 8, output_tokens: 4}", "  sessions: 2000000",
     "2,000,000 sessions per point is more than 1,000,000"),
])
def test_ceilings_of_sessions(tmp_path, capsys, dataset, load, message):
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(dataset=dataset, sweep="{concurrency: [2]}", load=load, api=""))
    assert main(["validate", str(spec)]) == 2
    assert message in capsys.readouterr().err


def test_sessions_need_the_chat_api(tmp_path):
    from benchc.plan.compiler import compile_spec

    text = SPEC.format(dataset="sessions: {turns: 2, input_tokens: 8, output_tokens: 4}",
                       sweep="{concurrency: [2]}", load="  sessions: 2", api="\n  api: completions")
    spec = load_text(text, "s.yaml", env={})
    assert validate(spec) == []
    with pytest.raises(PlanError, match="need target.api: chat"):
        compile_spec(spec)


# --------------------------------------------------------------------------- against the simulator

RUN = """\
version: 1
name: chat
target: {{base_url: "http://127.0.0.1:9/v1", model: MiniMaxAI/MiniMax-M2.5}}
workload:
  dataset:
    sessions: {{turns: {turns}, input_tokens: {n_in}, output_tokens: {n_out}, think_time: {think}}}
load:
  warmup: {{requests: 0}}
  sweep: {sweep}
{load}
output: {{path: {out}, requests: true}}
"""


def run_against_sim(tmp_path, spec, *sim_args) -> dict:
    """`benchc run` of a spec against a simulator subprocess (1 ms steps) that keeps each
    request's messages and streamed text in its trace: the trace by request id."""
    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4", "--param", "step_table=[[1, 1.0]]",
              "--param", "trace_text=true", *sim_args)
    try:
        assert main(["run", str(spec), "--base-url", sim.url, "--quiet"]) == 0
        return sim.records()
    finally:
        sim.close()
        sim.trace.unlink(missing_ok=True)  # the next run's simulator starts a trace of its own


def run_sessions(tmp_path, sim_args=(), turns=3, n_in=24, n_out=6, think="0s", sweep="{concurrency: [2]}",
                 load="  sessions: 3", name="r"):
    """`benchc run` of a sessions spec against a simulator subprocess keeping text in its trace:
    (result, per-request records by session then turn, the trace by request id)."""
    out = tmp_path / f"{name}.json"
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(RUN.format(turns=turns, n_in=n_in, n_out=n_out, think=think, sweep=sweep, load=load,
                               out=out))
    trace = run_against_sim(tmp_path, spec, *sim_args)
    reqs = [json.loads(x) for x in (tmp_path / f"{name}.requests.jsonl").read_text().splitlines()]
    sessions: dict[int, list[dict]] = {}
    for r in sorted(reqs, key=lambda r: (r["session"], r["turn"])):
        sessions.setdefault(r["session"], []).append(r)
    return read(str(out)), sessions, trace


def end_ns(r):
    return r["t0_ns"] + round(r["e2e_us"] * 1000)


def test_each_turn_sends_the_history_with_the_streamed_answers_and_finds_it_cached(tmp_path):
    doc, sessions, trace = run_sessions(tmp_path)
    (point,) = doc["points"]
    assert sorted(sessions) == [0, 1, 2]
    assert all([r["turn"] for r in s] == [1, 2, 3] for s in sessions.values())
    for turns in sessions.values():
        for prev, r in zip(turns, turns[1:], strict=False):
            before, now = trace[prev["id"]], trace[r["id"]]
            # the history: everything turn k-1 sent, then the very answer the server streamed for it
            answer = {"role": "assistant", "content": before["output"]}
            assert now["messages"][:-1] == before["messages"] + [answer]
            assert now["messages"][-1]["role"] == "user"
            history = before["input_tokens"] + before["output_tokens"]
            # the simulator cached turn k-1's prompt and answer: all of it, to its 16-token blocks
            assert now["cached_tokens"] == r["cached_tokens"] == history // BS * BS > 0
            assert now["input_tokens"] == history + 24
            assert r["t0_ns"] >= end_ns(prev)  # never before the answer it carries ended
        assert trace[turns[0]["id"]]["cached_tokens"] == 0  # fresh: nothing of other sessions
    s = point["sessions"]
    assert (s["started"], s["completed"], s["cut"], s["failed"], s["turns_sent"]) == (3, 3, 0, 0, 9)
    by_turn = {b["turn"]: b for b in s["by_turn"]}
    for k in ("1", "2", "3"):
        recs = [t[int(k) - 1] for t in sessions.values()]
        b = by_turn[k]
        assert (b["sent"], b["completed"]) == (3, 3)
        assert b["input_tokens"] == sum(trace[r["id"]]["input_tokens"] for r in recs)
        assert b["cache"]["cached_tokens"] == sum(r["cached_tokens"] for r in recs)
        assert b["latency"]["ttft_us"]["count"] == 3 and b["latency"]["itl_us"]["count"] == 3 * 5
    assert by_turn["1"]["cache"]["cached_fraction"] == 0.0 < by_turn["2"]["cache"]["cached_fraction"]
    # the cache check knows a turn's history is shared: nothing above what the spec allows
    assert point["cache"]["above_declared"] is False and point["cache"]["cached_tokens"] > 0
    # no doubt but the client's own: turns of 8 ms leave the slots idle a large share of the time
    # whenever a busy machine holds the client back a few ms (run/effects.py; tests/test_selfcheck.py)
    assert [d["check"] for d in point["trust"]["doubts"]] in ([], ["client_limited"])


@pytest.mark.slow  # runs against the simulator
def test_ttft_per_turn_falls_where_the_history_is_cached(tmp_path):
    """Two runs of the same sessions, the simulator's prefix cache on and off, prefill at 5000
    tokens/s: without the cache each turn prefills its whole history, with it only what the
    cache lacks. By turn 3 that is hundreds of tokens, tens of milliseconds of prefill by the
    simulator's own cost model -- far above the noise of a 1 ms step. One session at a time:
    two sessions' turns that happen to reach the same engine step prefill together, and each
    waits for both (a TTFT of the arrival timing, not of the cache)."""
    prefill = 5000.0
    args = ("--param", f"prefill_tok_s={prefill}")
    one = "{concurrency: [1]}"
    on, s_on, tr_on = run_sessions(tmp_path, args, n_in=200, n_out=8, sweep=one, load="  sessions: 2",
                                   name="on")
    off, s_off, tr_off = run_sessions(tmp_path, args + ("--param", "prefix_cache=false"), n_in=200, n_out=8,
                                      sweep=one, load="  sessions: 2", name="off")
    ttft_on = {b["turn"]: b["latency"]["ttft_us"]["p50"] for b in on["points"][0]["sessions"]["by_turn"]}
    ttft_off = {b["turn"]: b["latency"]["ttft_us"]["p50"] for b in off["points"][0]["sessions"]["by_turn"]}
    for k in ("2", "3"):
        cached = [tr_on[t[int(k) - 1]["id"]]["cached_tokens"] for t in s_on.values()]
        assert min(cached) >= 200  # a whole turn's history at least
        # what the cache saves by the simulator's cost: the cached tokens' prefill
        saved_us = min(cached) / prefill * 1e6
        assert ttft_off[k] - ttft_on[k] > saved_us / 2, (k, ttft_on, ttft_off, saved_us)
    # with the cache a turn prefills its new message (and the last partial block) only: turn 3's
    # TTFT is no longer that of its whole history, as it is without the cache
    assert ttft_off["3"] > ttft_off["1"] + (400 / prefill * 1e6) / 2
    assert all(tr_off[r["id"]]["cached_tokens"] == 0 for t in s_off.values() for r in t)


@pytest.mark.slow  # runs against the simulator
def test_think_time_is_kept_from_each_answers_end(tmp_path):
    """Each turn after the first goes its drawn think time after the previous turn's end (the
    client's stamp of the read that ended it), never before; the simulator, which sees the
    answer end first and the next request arrive last, sees a gap at least as long."""
    doc, sessions, trace = run_sessions(tmp_path, turns=4, n_in=8, n_out=3,
                                        think="{min: 20ms, max: 80ms}", load="  sessions: 3")
    plan = doc["plan"]
    w = plan["combinations"][0]["workload"]
    src = SyntheticSessions(w["params"], w["prompts"])
    stream = next(s for s in plan["steps"] if s["kind"] == "load")["prompt_stream"]
    gaps = 0
    for i, turns in sessions.items():
        script = src.session(stream, i)
        for k in range(1, 4):
            prev, r = turns[k - 1], turns[k]
            planned = int(script.turns[k].think_s * 1e9)
            assert 20_000_000 <= planned <= 80_000_000
            assert r["t0_ns"] - end_ns(prev) >= planned - 1000  # e2e_us is rounded to the ns
            assert trace[r["id"]]["arrival_ns"] - trace[prev["id"]]["end_ns"] >= planned
            gaps += 1
    s = doc["points"][0]["sessions"]
    assert s["think_gap_us"]["count"] == s["think_late_us"]["count"] == gaps == 9
    assert s["think_gap_us"]["min"] >= 20_000


@pytest.mark.slow  # runs against the simulator
def test_users_keep_their_pace_and_open_loop_sessions_arrive_at_the_rate(tmp_path):
    interval_ns = 60_000_000
    doc, sessions, _ = run_sessions(tmp_path, turns=3, n_in=8, n_out=2,
                                    sweep="{users: [2], turn_interval: 60ms}", load="  sessions: 4",
                                    name="users")
    (point,) = doc["points"]
    assert point["params"]["users"] == 2 and point["sessions"]["started"] == 4
    for turns in sessions.values():
        for prev, r in zip(turns, turns[1:], strict=False):
            # the next turn at the pace from the last send, and never before the last answer ended
            assert r["t0_ns"] >= prev["t0_ns"] + interval_ns and r["t0_ns"] >= end_ns(prev)
            assert r["scheduled_ns"] >= prev["t0_ns"] + interval_ns
    doc, sessions, _ = run_sessions(tmp_path, turns=2, n_in=8, n_out=2, sweep="{rate: [20/s]}",
                                    load="  sessions: 5", name="rate")
    (point,) = doc["points"]
    starts = sorted(t[0]["scheduled_ns"] for t in sessions.values())
    assert len(starts) == 5 and point["sessions"]["completed"] == 5 and point["counts"]["sent"] == 10
    assert all(t[0]["t0_ns"] >= t[0]["scheduled_ns"] for t in sessions.values())
    assert "ttft_from_schedule_us" in point["latency"]


@pytest.mark.slow
def test_ctrl_c_in_the_middle_of_sessions_writes_the_turns_measured_so_far(tmp_path):
    """Sessions think for a minute between turns: once the simulator has answered every
    session's first turn, Ctrl-C. The sessions waiting out their think time stop at once (cut),
    and the result holds the first turns."""
    out = tmp_path / "r.json"
    spec = tmp_path / "s.yaml"
    spec.write_text(RUN.format(turns=3, n_in=8, n_out=4, think="60s", sweep="{concurrency: [2]}",
                               load="  sessions: 2", out=out))
    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4", "--param", "step_table=[[1, 1.0]]")
    p = subprocess.Popen([sys.executable, "-m", "benchc", "run", str(spec), "--quiet", "--base-url", sim.url],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: sim.trace.exists() and len(sim.trace.read_text().splitlines()) >= 2,
                 what="both sessions' first turns in the simulator's trace")
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
        sim.close()
    assert p.returncode == 130, err
    doc = read(str(out))
    assert doc["complete"] is False and doc["interrupted"] is True
    (point,) = doc["points"]
    s = point["sessions"]
    assert (s["started"], s["cut"], s["turns_sent"]) == (2, 2, 2)
    assert [(b["turn"], b["completed"]) for b in s["by_turn"]] == [("1", 2)]
    assert point["counts"]["completed"] == 2 and point["complete"] is False


@pytest.mark.slow  # runs against the simulator
def test_a_traces_sessions_replay_their_turns_at_their_times(tmp_path):
    """benchc-format rows sharing a session_id: each session starts at its first row's time
    (over the speedup), each later turn at its own row's time but never before the previous
    turn's answer ended, and carries that answer."""
    rows = [{"timestamp": 0.0, "input_tokens": 10, "output_tokens": 30, "session_id": "a"},
            {"timestamp": 0.02, "input_tokens": 6, "output_tokens": 2, "session_id": "b"},
            {"timestamp": 0.03, "prompt": "then what", "output_tokens": 2, "session_id": "a"},
            {"timestamp": 0.3, "input_tokens": 5, "output_tokens": 2, "session_id": "b"},
            {"timestamp": 0.32, "input_tokens": 5, "output_tokens": 2, "session_id": "a"}]
    f = tmp_path / "t.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = tmp_path / "s.yaml"
    out = tmp_path / "r.json"
    spec.write_text(f"""\
version: 1
name: replay
target: {{base_url: "http://127.0.0.1:9/v1", model: MiniMaxAI/MiniMax-M2.5}}
workload:
  dataset:
    trace: {{path: t.jsonl, format: benchc, sessions: true}}
load:
  warmup: {{requests: 0}}
  sweep: {{speedup: [2]}}
output: {{path: {out}, requests: true}}
""")
    trace = run_against_sim(tmp_path, spec)
    reqs = [json.loads(x) for x in (tmp_path / "r.requests.jsonl").read_text().splitlines()]
    a = sorted((r for r in reqs if r["session"] == 0), key=lambda r: r["turn"])
    b = sorted((r for r in reqs if r["session"] == 1), key=lambda r: r["turn"])
    assert (len(a), len(b)) == (3, 2)
    start = a[0]["scheduled_ns"]
    assert b[0]["scheduled_ns"] - start == pytest.approx(0.01e9, abs=1000)  # 20 ms over speedup 2
    # a's second turn is due 15 ms in, but its first answer (30 tokens of 1 ms steps) ends later
    assert a[1]["t0_ns"] >= end_ns(a[0]) and a[1]["scheduled_ns"] == pytest.approx(end_ns(a[0]), abs=1000)
    assert trace[a[1]["id"]]["messages"][-1] == {"role": "user", "content": "then what"}
    assert trace[a[1]["id"]]["messages"][1] == {"role": "assistant", "content": trace[a[0]["id"]]["output"]}
    for turn, at in ((a[2], 0.16), (b[1], 0.14)):
        first = a[0] if turn is a[2] else b[0]
        assert turn["t0_ns"] >= first["scheduled_ns"] + at * 1e9 - 1000
    (point,) = read(str(out))["points"]
    assert point["params"]["sessions"] == 2 and point["sessions"]["completed"] == 2
    assert point["trace"]["sessions"] == 2 and point["counts"]["sent"] == 5


@pytest.mark.parametrize("sweep, load, refused", [
    # a rate of sessions: its arrivals would split by session (not built yet on Ray)
    ("{rate: [5]}", "  sessions: 2", "for point rate=5/s: only a concurrency sweep of them"),
    # a turn count does not split by session
    ("{concurrency: [2]}", "  requests: 4", "for point c=2: only a concurrency sweep of them, bounded by "
     "load.sessions or load.duration (not by a turn count, load.requests)"),
])
def test_sessions_on_ray_are_refused_before_anything_starts(tmp_path, capsys, sweep, load, refused):
    """Sessions on Ray: a concurrency sweep of synthetic sessions splits by session
    (tests/test_ray.py); the rest is refused by name before anything starts."""
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(dataset="sessions: {turns: 2, input_tokens: 8, output_tokens: 4}",
                                sweep=sweep, load=load, api=""))
    assert main(["run", str(spec), "--backend", "ray", "--quiet", "--out", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert "sessions (multi-turn) are not built yet on Ray" in err and refused in err, err
    assert not (tmp_path / "r.json").exists()


def test_a_files_sessions_on_ray_are_refused_before_anything_starts(tmp_path, capsys):
    (tmp_path / "sg.json").write_text(json.dumps([{"conversations": [
        {"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}]))
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(dataset="sharegpt: {path: sg.json, sessions: true}",
                                sweep="{concurrency: [1]}", load="  sessions: 1", api=""))
    assert main(["run", str(spec), "--backend", "ray", "--quiet", "--out", str(tmp_path / "r.json")]) == 2
    assert ("--backend ray: sessions (multi-turn) read from a file (workload.dataset.sharegpt) are not built "
            "yet on Ray; run them with --backend local") in capsys.readouterr().err
