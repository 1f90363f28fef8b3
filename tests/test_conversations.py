"""Conversations on the Responses and Messages APIs: agent loops whose history carries tool
calls in each API's own items (docs/agents.md), and Responses conversations kept by the server
(`workload.history: previous_response_id`, docs/sessions.md), checked against the simulator's
trace on every client path."""

import json

import pytest

from benchc.client.request import build_body
from benchc.errors import SpecError
from benchc.plan.model import Sampling
from benchc.plan.workload import Prompt
from benchc.sim.prompt_tokens import PromptCounter
from benchc.sim.responses_store import ResponseStore
from benchc.spec.loader import load_text
from tests.test_agents import AGENT, plan_of
from tests.test_reasoning import PATHS

# an agent loop's history as run/sessions.py keeps it (the chat form): a user message, the
# assistant's two calls, their results, and the next user message
HISTORY = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "fix it"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"path": "a.py"}'}},
        {"id": "c2", "type": "function", "function": {"name": "grep", "arguments": " w1 w2"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "r1 r2"},
    {"role": "tool", "tool_call_id": "c2", "content": "r3"},
    {"role": "user", "content": "now test it"},
]
SAMPLING = Sampling(0.0, None, 4, None, False, [], None, {})


def body(api, messages=HISTORY, **kw):
    from dataclasses import replace

    target = replace(plan_of("").combinations[0].target, api=api)
    return build_body(target, SAMPLING, Prompt(None, messages, 10, 4), **kw)


def test_the_responses_adapter_writes_tool_calls_and_results_as_items():
    assert body("responses")["input"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "fix it"},
        {"type": "function_call", "call_id": "c1", "name": "read", "arguments": '{"path": "a.py"}'},
        {"type": "function_call", "call_id": "c2", "name": "grep", "arguments": " w1 w2"},
        {"type": "function_call_output", "call_id": "c1", "output": "r1 r2"},
        {"type": "function_call_output", "call_id": "c2", "output": "r3"},
        {"role": "user", "content": "now test it"}]


def test_the_messages_adapter_writes_tool_use_and_tool_result_blocks():
    b = body("messages")
    assert b["system"] == "be brief"
    assert b["messages"] == [
        {"role": "user", "content": "fix it"},
        # arguments that are a JSON object are the input; others (the simulator's words) are
        # kept whole under "arguments"
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "c1", "name": "read", "input": {"path": "a.py"}},
            {"type": "tool_use", "id": "c2", "name": "grep", "input": {"arguments": " w1 w2"}}]},
        {"role": "user", "content": [  # the results of one answer's calls: one user message
            {"type": "tool_result", "tool_use_id": "c1", "content": "r1 r2"},
            {"type": "tool_result", "tool_use_id": "c2", "content": "r3"}]},
        {"role": "user", "content": "now test it"}]


def test_text_before_a_call_is_kept_in_each_form():
    said = [{"role": "user", "content": "q"},
            {"role": "assistant", "content": "Let me look.", "tool_calls": HISTORY[2]["tool_calls"][:1]}]
    # an answer is a typed output message (issue 45: servers refuse the chat form in Responses input)
    assert body("responses", said)["input"][1] == {
        "type": "message", "role": "assistant", "id": "msg_history_1", "status": "completed",
        "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]}
    assert body("messages", said)["messages"][1]["content"][0] == {"type": "text", "text": "Let me look."}
    assert body("chat", said)["messages"] == said  # chat's own form


def test_the_simulator_counts_the_history_alike_in_every_form_but_messages_arguments():
    """Chat and Responses count a call as its name and its arguments' text; Messages as its
    input's JSON (the simulator's word arguments, wrapped, are 2 tokens more)."""
    counter = PromptCounter(None, 28, 16384)
    counts = {api: len(counter.prompt(api, body(api))[0]) for api in ("chat", "responses", "messages")}
    # be brief, fix it, read {"path": "a.py"}, grep w1 w2, r1 r2, r3, now test it
    assert counts["chat"] == counts["responses"] == 2 + 2 + 3 + 3 + 2 + 1 + 3
    assert counts["messages"] == counts["chat"] + 2  # {"arguments": " w1 w2"}: 4 words, not 2


def test_previous_response_id_is_the_responses_apis_alone():
    assert body("responses", HISTORY[-1:], previous_response_id="resp_1")["previous_response_id"] == "resp_1"
    from benchc.errors import PlanError

    for api in ("chat", "messages"):
        with pytest.raises(PlanError, match=f"previous_response_id.*not the {api} API's"):
            body(api, previous_response_id="resp_1")


def test_the_store_forgets_after_its_time_and_past_its_capacity():
    s = ResponseStore(ttl_s=1.0, capacity=2)
    s.put("a", [1], 0)
    s.put("b", [2], 500_000_000)
    assert s.get("a", 999_999_999) == [1] and s.get("a", 1_000_000_000) is None  # kept 1 s after it ended
    s.put("c", [3], 600_000_000)
    s.put("d", [4], 700_000_000)  # the third: the oldest goes
    assert (s.get("b", 700_000_000), s.get("c", 700_000_000), s.get("d", 700_000_000)) == (None, [3], [4])
    assert len(s) == 2


def on_api(tmp_path, api):
    """tests/test_agents.AGENT's spec on `api`."""
    return AGENT.format(out=tmp_path / "r.json").replace("model: MiniMaxAI", f"api: {api}, model: MiniMaxAI")


@pytest.mark.parametrize("api, history, message", [
    ("chat", "previous_response_id", r"^s.yaml:8:12: \$.workload.history: previous_response_id is the "
                                     r"Responses API's: it needs target.api: responses"),
    ("responses", "previous_response_id", None),
    ("responses", "full", None),
])
def test_the_history_option_needs_the_responses_api(tmp_path, api, history, message):
    text = on_api(tmp_path, api).replace("  agent:", f"  history: {history}\n  agent:")
    if message is None:
        assert load_text(text, "s.yaml", env={}) is not None
        return
    with pytest.raises(SpecError, match=message):
        load_text(text, "s.yaml", env={})


def test_the_history_option_needs_sessions():
    with pytest.raises(SpecError, match=r"history: a history is a session's: previous_response_id needs"):
        plan_of("  history: previous_response_id").combinations  # noqa: B018


def test_the_plan_says_how_a_session_carries_its_history(tmp_path):
    from benchc.plan.compiler import compile_spec

    text = on_api(tmp_path, "responses")
    full = compile_spec(load_text(text, "s.yaml", env={}))
    by_id = compile_spec(load_text(text.replace("  agent:", "  history: previous_response_id\n  agent:"),
                                   "s.yaml", env={}))
    assert "history" not in full.combinations[0].workload.sessions  # the plan of old: its hash kept
    assert by_id.combinations[0].workload.sessions["history"] == "previous_response_id"
    assert full.plan_hash != by_id.plan_hash


# ----------------------------------------------------------------------- on the simulator


@pytest.fixture(params=PATHS)
def path(request, monkeypatch):
    from tests.conftest import use_transport

    if request.param == "aiohttp":
        return ["--http", "aiohttp"], "aiohttp"
    return [], use_transport(monkeypatch, request.param)


def run_loop(tmp_path, path, api, history="full", agent=True):
    """An agent spec (tests/test_agents.AGENT: 3 sessions of 2 user turns, each answer a tool
    call of a name and 16 argument tokens, 2 tool rounds of a 20-token result per user turn)
    on `api`, its records by (session, turn), and the simulator's trace."""
    from tests.test_agents import run_agent_sim

    extra, served = path
    text = on_api(tmp_path, api)
    if history != "full":
        text = text.replace("  agent:", f"  history: {history}\n  agent:")
    if not agent:
        text = text.replace("  agent:", "  # agent:")
    spec = tmp_path / "s.yaml"
    spec.write_text(text)
    trace = run_agent_sim(tmp_path, spec, extra, "--param", f"tool_call_fraction={1.0 if agent else 0.0}")
    reqs = [json.loads(x) for x in (tmp_path / "r.requests.jsonl").read_text().splitlines()]
    assert {r["path"] for r in reqs} == {served}
    sessions: dict = {}
    for r in sorted(reqs, key=lambda r: (r["session"], r["turn"])):
        sessions.setdefault(r["session"], []).append(r)
    from benchc.results.document import read

    (point,) = read(str(tmp_path / "r.json"))["points"]
    return point, sessions, trace


# Per API: the tokens the simulator counts for a streamed call (its name and 16 argument words)
# in the next request's prompt, and of them those its cache holds from the streamed output.
# Messages sends word arguments wrapped ({"arguments": " w1 ... w16"}: `{"arguments":` and `"`
# more), so its cache holds the call's name only.
CALL_TOKENS = {"responses": (17, 17), "messages": (19, 1)}


def calls_and_results(api, received):
    """The last call and its result in the history a request carried, in its API's form:
    (the call's name and arguments' text, the call's id, the result's id, the result's text)."""
    if api == "responses":
        call = next(i for i in reversed(received) if i.get("type") == "function_call")
        result = next(i for i in reversed(received) if i.get("type") == "function_call_output")
        return f"{call['name']} {call['arguments']}", call["call_id"], result["call_id"], result["output"]
    call_msg = next(m for m in reversed(received) if m["role"] == "assistant")
    (use,) = call_msg["content"]
    res_msg = next(m for m in reversed(received) if m["role"] == "user" and isinstance(m["content"], list))
    (res,) = res_msg["content"]
    assert use["type"] == "tool_use" and res["type"] == "tool_result"
    return f"{use['name']} {use['input']['arguments']}", use["id"], res["tool_use_id"], res["content"]


@pytest.mark.slow  # runs against the simulator
@pytest.mark.parametrize("api", ["responses", "messages"])
def test_an_agent_loop_on_each_api_sends_calls_and_results_in_its_form_and_the_server_caches_them(
        tmp_path, path, api):
    """As tests/test_agents' chat loop, on the Responses and Messages APIs: each follow-up
    carries the call as streamed and its 20-token result in the API's items; its input tokens
    are the request before, the call and the result (and a user message); its cache holds the
    request before and as much of the call as the simulator's streamed output matches, and one
    request later the result too. Per-turn figures: every request is a turn of its session."""
    from tests.test_sessions import end_ns

    point, sessions, trace = run_loop(tmp_path, path, api)
    counted, cached_call = CALL_TOKENS[api]
    key = "input" if api == "responses" else "messages"
    assert len(sessions) == 3
    for recs in sessions.values():
        assert [r["turn"] for r in recs] == [1, 2, 3, 4, 5, 6]
        for k, (prev, r) in enumerate(zip(recs, recs[1:], strict=False), 2):
            before, now = trace[prev["id"]], trace[r["id"]]
            assert before["tool_call_tokens"] == 17
            follow_up = k != 4  # request 4 is the second user turn
            streamed, call_id, result_id, result = calls_and_results(api, now[key])
            assert streamed.split() == before["tool_call"].split() and call_id == result_id
            assert len(result.split()) == 20
            assert now[key][:len(before[key])] == before[key]  # the history, as sent before
            new = 20 + (0 if follow_up else 24)
            assert now["input_tokens"] == before["input_tokens"] + counted + new
            # benchc's own count: the call as streamed (its words), whatever the API's form
            # (which counts the tools of the API's form too: its own tools count is chat's)
            assert r["input_tokens"] == prev["input_tokens"] + 17 + new
            assert now["cached_tokens"] == r["cached_tokens"] == \
                (before["input_tokens"] + cached_call) // 16 * 16
            assert r["t0_ns"] >= end_ns(prev) + (5_000_000 if follow_up else 0)
        for prev, r in zip(recs[1:], recs[2:], strict=False):  # the result cached one request later
            assert trace[r["id"]]["cached_tokens"] >= trace[prev["id"]]["input_tokens"] // 16 * 16
    s = point["sessions"]
    assert (s["started"], s["completed"], s["failed"], s["turns_sent"]) == (3, 3, 0, 18)
    assert point["stream"]["tool_call_requests"] == point["stream"]["tool_call_finishes"] == 18
    # per-turn figures: each request position's input and cached tokens are the server's
    assert [t["turn"] for t in s["by_turn"]] == ["1", "2", "3", "4", "5", "6"]
    for t in s["by_turn"]:
        at = [trace[recs[int(t["turn"]) - 1]["id"]] for recs in sessions.values()]
        assert t["completed"] == 3 and t["input_tokens"] == sum(x["input_tokens"] for x in at)
        assert t["cache"]["cached_tokens"] == sum(x["cached_tokens"] for x in at)


@pytest.mark.slow  # runs against the simulator
@pytest.mark.parametrize("agent", [True, False], ids=["agent-loop", "chat-turns"])
def test_previous_response_id_sends_only_the_new_input_and_the_server_counts_the_history(
        tmp_path, path, agent):
    """workload.history: previous_response_id. Each request after a session's first names the
    response before it and carries only what the history gained since: a follow-up its tool
    result, a user turn its message (after tool rounds, the last round's result too). The
    simulator renders the kept conversation before it, as vLLM does: the input tokens are
    the request before, its answer and the new input, as with the full history, and its cache
    holds the request before and its answer."""
    point, sessions, trace = run_loop(tmp_path, path, "responses", "previous_response_id", agent)
    assert len(sessions) == 3
    for recs in sessions.values():
        assert [r["turn"] for r in recs] == ([1, 2, 3, 4, 5, 6] if agent else [1, 2])
        assert "previous_response_id" not in trace[recs[0]["id"]]
        for k, (prev, r) in enumerate(zip(recs, recs[1:], strict=False), 2):
            before, now = trace[prev["id"]], trace[r["id"]]
            assert now["previous_response_id"] == "resp_" + prev["id"]
            user_turn = not agent or k == 4
            sent = now["input"]
            kinds = [i.get("type", i.get("role")) for i in sent]
            if not agent:
                assert kinds == ["user"]
            else:
                assert kinds == (["function_call_output", "user"] if user_turn else ["function_call_output"])
                assert len(sent[0]["output"].split()) == 20
            answer = before["output_tokens"]
            new = (20 if agent else 0) + (24 if user_turn else 0)
            assert now["input_tokens"] == before["input_tokens"] + answer + new
            assert r["input_tokens"] == prev["input_tokens"] + answer + new  # benchc's count alike
            assert now["cached_tokens"] == r["cached_tokens"] == (before["input_tokens"] + answer) // 16 * 16
    s = point["sessions"]
    assert (s["completed"], s["failed"], s["turns_sent"]) == (3, 0, 18 if agent else 6)
    assert point["counts"]["failed"] == 0


# ----------------------------------------------------------------------- images in sessions

IMAGES = "\n  images: {count: 2, width: 56, height: 56}"  # 2 x 2 patches: 4 tokens each to the simulator


def image_data(api, message) -> list[str]:
    """The base64 images of a message as its API carries them."""
    out = []
    for p in message["content"] if isinstance(message["content"], list) else []:
        if p["type"] == "image_url":
            out.append(p["image_url"]["url"].split(",", 1)[1])
        elif p["type"] == "input_image":
            out.append(p["image_url"].split(",", 1)[1])
        elif p["type"] == "image":
            out.append(p["source"]["data"])
    return out


@pytest.mark.slow  # runs against the simulator
@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_each_turn_carries_its_own_images_and_the_history_keeps_the_earlier_ones(tmp_path, api):
    """Sessions of 3 turns whose user messages each carry 2 images of 56 x 56 (4 tokens each
    to the simulator): turn k sends the history's images again and 2 of its own, none sent by
    another turn or session; the server counts 8 x k image tokens, and its cache holds the
    history, images included (keyed on their bytes)."""
    from tests.test_sessions import RUN, run_against_sim

    text = RUN.format(turns=3, n_in=24, n_out=6, think="0s", sweep="{concurrency: [2]}", load="  sessions: 3",
                      out=tmp_path / "r.json")
    text = text.replace("MiniMaxAI/MiniMax-M2.5}", f"MiniMaxAI/MiniMax-M2.5, api: {api}}}") \
        .replace("think_time: 0s}", "think_time: 0s}" + IMAGES)
    spec = tmp_path / "s.yaml"
    spec.write_text(text)
    trace = run_against_sim(tmp_path, spec)
    reqs = [json.loads(x) for x in (tmp_path / "r.requests.jsonl").read_text().splitlines()]
    key = "input" if api == "responses" else "messages"
    seen: set = set()
    for s in {r["session"] for r in reqs}:
        recs = sorted((r for r in reqs if r["session"] == s), key=lambda r: r["turn"])
        assert [r["turn"] for r in recs] == [1, 2, 3]
        history: list = []
        for k, r in enumerate(recs, 1):
            now = trace[r["id"]]
            users = [m for m in now[key] if m.get("role") == "user"]
            own = image_data(api, users[-1])
            assert len(own) == 2 and not set(own) & seen  # its own: never sent before
            assert [image_data(api, m) for m in users[:-1]] == history  # the earlier turns', again
            history.append(own)
            seen |= set(own)
            assert now["image_tokens"] == 8 * k
            if k > 1:
                before = trace[recs[k - 2]["id"]]
                past = before["input_tokens"] + before["output_tokens"]
                assert now["input_tokens"] == past + 24 + 8
                assert now["cached_tokens"] == r["cached_tokens"] == past // 16 * 16
    from benchc.results.document import read

    (point,) = read(str(tmp_path / "r.json"))["points"]
    assert point["payload"]["images"] == 3 * (2 + 4 + 6) and point["payload"]["requests"] == 9
    assert point["counts"]["failed"] == 0
