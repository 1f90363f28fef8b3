"""A coding-agent session replayed (run/agent_replay.py) against the simulator, a real
subprocess on loopback: the shipped sample's sessions, with subagents, resets and think times,
sent as the content module builds them; the simulator's own counts are the ground truth for
the input tokens (the trace's `in`), the output tokens (`out`) and the cached tokens (what the
hash ids predict, within one 16-token block); no subagent request goes before its spawn, no
parent request before its subagents ended, no request before its think time; and the verdict
names what a replay that did not keep to its trace got wrong."""

import asyncio
import os

import aiohttp
import pytest

from benchc.plan.agent_trace import predicted_cached_tokens, read_agent_traces
from benchc.plan.agent_trace_prompts import AgentTracePrompts
from benchc.run.agent_replay import Answer, Sent, fidelity, replay_session, scaled_ns
from tests.simrun import Sim

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "specs", "traces", "agentx-small")
MODEL = "benchc-sim"
TIME_SCALE = 0.002  # the sample's seconds of think time as milliseconds: the test stays short


@pytest.fixture(scope="module")
def sessions():
    return list(read_agent_traces(SAMPLE))


@pytest.fixture(scope="module")
def replayed(sessions, tmp_path_factory):
    """Every session of the sample replayed at once on one simulator: (sent per session)."""
    sim = Sim(tmp_path_factory.mktemp("sim"), "--preset", "instant")  # the test stays short
    prompts = AgentTracePrompts(seed=11)

    async def main():
        async with aiohttp.ClientSession() as http:
            def preparer(i):
                def prepare(req):
                    text = prompts.text(sessions[i], i, req)
                    return {"model": MODEL, "max_tokens": req.output_tokens,
                            "messages": [{"role": "user", "content": text}]}
                return prepare

            async def send(req, body):
                async with http.post(sim.url + "/chat/completions", json=body) as r:
                    usage = (await r.json())["usage"]
                return Answer(usage["prompt_tokens"], usage["completion_tokens"],
                              usage["prompt_tokens_details"]["cached_tokens"])
            return await asyncio.gather(*(replay_session(s, preparer(i), send, TIME_SCALE)
                                          for i, s in enumerate(sessions)))

    try:
        yield asyncio.run(main())
    finally:
        sim.close()


def test_every_request_has_the_traces_tokens_and_its_predicted_cache_hit(sessions, replayed):
    exact = total = 0
    for s, sent in zip(sessions, replayed, strict=True):
        traced = {r.path: r for r in s.requests()}
        predicted = predicted_cached_tokens(s)
        assert sorted(x.path for x in sent) == sorted(traced)
        for x in sent:
            assert x.answer.input_tokens == traced[x.path].input_tokens, x.path
            assert x.answer.output_tokens == traced[x.path].output_tokens, x.path
            # the simulator never hits a whole prompt (its last token is computed again): a block less then
            assert 0 <= predicted[x.path] - x.answer.cached_tokens <= 16, x.path
            exact += x.answer.cached_tokens == predicted[x.path]
            total += 1
    assert total == 149 and exact >= total - 6  # at most one whole-prompt hit per session


def test_spawn_join_and_think_times_kept(sessions, replayed):
    n_sub = 0
    for s, sent in zip(sessions, replayed, strict=True):
        by_path = {x.path: x for x in sent}
        verdict = fidelity(s, sent, kv_block=16)
        assert (verdict["subagent_before_spawn"], verdict["parent_before_join"]) == (0, 0)
        assert verdict["think_late_ms"]["min"] >= 0  # never sent before its think time ended
        assert (verdict["input_tokens_off"], verdict["output_tokens_off"]) == (0, 0)
        assert verdict["cache_off_by_more_than_a_block"] == 0
        for x in sent:
            if x.agent:
                n_sub += 1
                assert x.send_ns >= x.spawn_ns
        # each request waited its own trace's think time, scaled
        for r in s.requests():
            x = by_path[r.path]
            if r.think_time_s is not None:
                assert x.wait_ns == scaled_ns(r.think_time_s, TIME_SCALE, None)
    assert n_sub > 20


def test_the_verdict_names_what_a_replay_got_wrong(sessions):
    s = sessions[0]
    reqs = s.requests()
    predicted = predicted_cached_tokens(s)
    good = [Sent(r.path, "", 1000 * k, 0, 1000 * k + 10, 1000 * k + 500,
                 Answer(r.input_tokens, r.output_tokens, predicted[r.path])) for k, r in enumerate(reqs)]
    v = fidelity(s, good)
    assert v["warnings"] == [] and v["think_late_ms"]["p99"] == 0.0
    bad = list(good)
    r1 = reqs[1]
    bad[1] = Sent(r1.path, "", 0, 0, 2_000_000, 3_000_000, Answer(r1.input_tokens + 3, 1, 0))
    v = fidelity(s, bad)
    assert v["warnings"] == [
        f"input tokens: 1 requests differ from the trace's in (first {r1.path})",
        f"output tokens: 1 requests differ from the trace's out (first {r1.path})",
        "think times: sent 2.0 ms late at p99 (band 1.0 ms)",
        f"cache: 1 requests' cached tokens differ from the hash ids' prediction by more than a block of "
        f"{s.block_size}",
    ]


@pytest.mark.real
def test_a_replay_on_a_real_vllm_sends_the_traces_tokens_and_finds_the_predicted_cache(sessions, vllm):
    """Two sessions of the sample (56 requests, 9 subagents) on the real vLLM, with its tokenizer
    and chat template: no error, input and output tokens as its usage counts them equal to the
    trace's, cached tokens the prediction within one of its KV blocks (the sample's 16-token
    blocks are finer than a CPU build's 32: its hit is the prediction rounded down to its block)."""
    from benchc.tokenizer.chat_template import load_chat_template
    from benchc.tokenizer.tokenizer import load
    from tests.vllm_server import VLLMSERVER_DIR

    model_dir = os.path.join(VLLMSERVER_DIR, "model")
    if not os.path.exists(os.path.join(model_dir, "tokenizer_config.json")):
        pytest.skip(f"the served model's folder ({model_dir}) is not on this machine")
    tok = load(model_dir)
    prompts = AgentTracePrompts(seed=int.from_bytes(os.urandom(4), "big"), tokenizer=tok,
                                template=load_chat_template(model_dir, tok))
    assert vllm.prompt_details
    two = sessions[:2]

    async def main():
        async with aiohttp.ClientSession() as http:
            def preparer(i):
                return lambda req: {"model": vllm.model, "max_tokens": req.output_tokens,
                                    "min_tokens": req.output_tokens, "ignore_eos": True, "temperature": 0,
                                    "messages": [{"role": "user", "content": prompts.text(two[i], i, req)}]}

            async def send(req, body):
                async with http.post(vllm.base_url + "/chat/completions", json=body) as r:
                    assert r.status == 200, await r.text()
                    usage = (await r.json())["usage"]
                return Answer(usage["prompt_tokens"], usage["completion_tokens"],
                              usage["prompt_tokens_details"]["cached_tokens"])
            return await asyncio.gather(*(replay_session(s, preparer(i), send, 0.001)
                                          for i, s in enumerate(two)))

    replayed = asyncio.run(main())
    diffs = []
    for s, sent in zip(two, replayed, strict=True):
        v = fidelity(s, sent, kv_block=vllm.block_size)
        assert (v["requests"], v["input_tokens_off"], v["output_tokens_off"]) == (len(s.requests()), 0, 0)
        assert (v["subagent_before_spawn"], v["parent_before_join"]) == (0, 0)
        assert v["cache_off_by_more_than_a_block"] == 0, v
        predicted = predicted_cached_tokens(s)
        diffs += [x.answer.cached_tokens - predicted[x.path] for x in sent]
    assert len(diffs) == 56 and min(diffs) >= -vllm.block_size and max(diffs) <= 0


def test_subagents_at_once_traced_and_replayed(sessions):
    from benchc.plan.agent_trace import Subagent
    from benchc.run.agent_replay import subagent_overlap

    s = next(x for x in sessions if sum(isinstance(e, Subagent) for e in x.entries) >= 2)
    subs = [e for e in s.entries if isinstance(e, Subagent)]
    # each subagent's requests one after another in time: all side by side, then one at a time
    side = [Sent(r.path, a.agent_id, 0, 0, 10 + k, 20 + k, Answer(None, None, None))
            for a in subs for k, r in enumerate(a.requests)]
    apart = [Sent(r.path, a.agent_id, 0, 0, 1000 * i + k, 1000 * i + k + 1, Answer(None, None, None))
             for i, a in enumerate(subs) for k, r in enumerate(a.requests)]
    traced = max(sum(x.t_s <= e.t_s < x.end_s for x in subs) for e in subs)
    assert subagent_overlap(s, side) == (traced, len(subs))
    assert subagent_overlap(s, apart) == (traced, 1)


def test_a_wait_is_scaled_then_capped():
    assert scaled_ns(2.5, 1.0, None) == 2_500_000_000
    assert scaled_ns(2.5, 0.1, None) == 250_000_000
    assert scaled_ns(30.0, 1.0, 5.0) == 5_000_000_000  # a human's 30 s cut to max_think
    assert scaled_ns(30.0, 0.1, 5.0) == 3_000_000_000  # scaled first: under the cap


def _sim_replay(sessions, tmp_path, **kw):
    from benchc.run.agent_replay import replay_sessions

    sim = Sim(tmp_path, "--preset", "instant")
    prompts = AgentTracePrompts(seed=13)

    async def main():
        async with aiohttp.ClientSession() as http:
            def preparer(i):
                def prepare(req):
                    return {"model": MODEL, "max_tokens": req.output_tokens,
                            "messages": [{"role": "user", "content": prompts.text(sessions[i], i, req)}]}
                return prepare

            async def send(req, body):
                async with http.post(sim.url + "/chat/completions", json=body) as r:
                    usage = (await r.json())["usage"]
                return Answer(usage["prompt_tokens"], usage["completion_tokens"], None)
            return await replay_sessions(sessions, preparer, send, time_scale=0.0005, **kw)

    try:
        return asyncio.run(main())
    finally:
        sim.close()


def test_sessions_in_flight_never_exceed_the_concurrency(sessions, tmp_path):
    replay = _sim_replay(sessions, tmp_path, concurrency=2)
    assert replay.due_s is None
    spans = [(min(x.send_ns for x in sent), max(x.end_ns for x in sent)) for sent in replay.sessions]
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    held, most = 0, 0
    for _, step in edges:
        held += step
        most = max(most, held)
    assert most == 2
    assert [len(s) for s in replay.sessions] == [len(s.requests()) for s in sessions]


def test_sessions_at_a_rate_never_start_before_their_arrival(sessions, tmp_path):
    replay = _sim_replay(sessions, tmp_path, rate_per_s=20.0, seed=4)
    assert replay.due_s[0] == 0.0 and replay.due_s == sorted(replay.due_s) and replay.due_s[-1] > 0
    for due, sent in zip(replay.due_s, replay.sessions, strict=True):
        assert min(x.send_ns for x in sent) >= replay.start_ns + round(due * 1e9)


def test_per_session_figures(sessions, replayed):
    from benchc.run.agent_replay import session_figures

    s, sent = sessions[1], replayed[1]  # 51 requests: 18 entries of which 9 subagents
    f = session_figures(s, sent, TIME_SCALE)
    sub_reqs = [r for r in s.requests() if ".requests[" in r.path[len("$.requests["):]]
    assert (f["turns"], f["requests"], f["subagents"]) == (9, 51, 9)
    assert f["subagent_request_share"] == round(len(sub_reqs) / 51, 6)
    assert f["subagent_input_token_share"] == round(
        sum(r.input_tokens for r in sub_reqs) / sum(r.input_tokens for r in s.requests()), 6)
    assert list(f["e2e_ms_p50_by_context"]) == ["0-8k"]  # the sample's contexts are under 8k
    assert list(f["e2e_ms_by_turn"]) == [str(k) for k in range(1, 10)]
    ends = [r.end_s for r in s.requests()] + [e.end_s for e in s.entries if hasattr(e, "agent_id")]
    assert f["traced_wall_s"] == round((max(ends) - s.requests()[0].t_s) * TIME_SCALE, 6)
    assert f["wall_s"] > 0


def test_the_block_merged_from_workers_parts_is_the_one_run_gives(sessions, replayed):
    """A Ray point's `agent_replay` block: each worker's sessions' checks and figures, merged,
    give the block of one run of the same requests (counts added, lateness percentiles over
    every request's value, the first request out of band in session order)."""
    from types import SimpleNamespace

    from benchc.plan.shapes import AgentReplay
    from benchc.run.agent_replay import AgentReplayDriver, ReplayParts

    def driver(mine):
        d = AgentReplayDriver(AgentReplay(concurrency=2, time_scale=TIME_SCALE, kv_block=32))
        d.feed = SimpleNamespace(sessions=sessions)
        d.replayed = {j: replayed[j] for j in mine}
        return d

    # as if a second answer of session 1 and the last of session 4 had been short
    replayed = [list(sent) for sent in replayed]  # the module's replay stays as it was
    for j in (1, 4):
        x = replayed[j][-1 if j == 4 else 1]
        replayed[j][replayed[j].index(x)] = Sent(x.path, x.agent, x.after_ns, x.wait_ns, x.send_ns, x.end_ns,
                                                Answer(x.answer.input_tokens, 1, x.answer.cached_tokens),
                                                x.spawn_ns)
    one = driver(range(6)).report()
    merged = ReplayParts.merged([driver([1, 3, 5]).parts(), driver([0, 2, 4]).parts()]).report()
    assert merged == one
    assert one["sessions_replayed"] == one["sessions_traced"] == 6
    v = one["fidelity"]
    assert v["requests"] == 149 and v["output_tokens_off"] == 2
    assert any(w.startswith("output tokens: 2 requests differ") and f"(first {replayed[1][1].path})" in w
               for w in v["warnings"]), v["warnings"]
    late = sorted((x.send_ns - x.after_ns - x.wait_ns) / 1e6 for sent in replayed for x in sent)
    assert v["think_late_ms"]["max"] == round(late[-1], 3) and v["think_late_ms"]["min"] == round(late[0], 3)
    assert [s["id"] for s in one["sessions"]] == [s.id for s in sessions]
    with pytest.raises(ValueError, match=r"sessions \[1\] were replayed by two workers"):
        ReplayParts.merged([driver([0, 1]).parts(), driver([1, 2]).parts()])
