"""Coding-agent traces, the Weka / AgentX format (plan/agent_trace.py): a session file or a
directory of them read into sessions with subagents, inner times relative or absolute, the
replay's waits, the cache hit the hash ids predict, and bad input named by file, session and
JSON path (exit 2), a file beyond its bound refused before it is read."""

import copy
import json
import os

import pytest

from benchc.errors import EXIT_USAGE, PlanError
from benchc.plan import agent_trace as at

SESSION = {  # block size 4: 'in' of 10 fills 3 blocks, the last partial
    "id": "s1", "models": ["m"], "block_size": 4, "hash_id_scope": "local",
    "tool_tokens": 4, "system_tokens": 4,
    "requests": [
        {"t": 0.0, "type": "n", "model": "m", "in": 10, "out": 3, "hash_ids": [1, 2, 3],
         "api_time": 1.0, "stop": "tool_use"},
        {"t": 3.0, "type": "s", "model": "m", "in": 14, "out": 2, "hash_ids": [1, 2, 4, 5],
         "api_time": 0.5, "think_time": 1.5, "ttft": 0.1},
        {"t": 4.0, "type": "subagent", "agent_id": "a1", "subagent_type": "Explore", "duration_ms": 2500,
         "status": "completed", "tool_tokens": 4, "system_tokens": 0,
         "requests": [{"t": 4.0, "type": "n", "in": 8, "out": 1, "hash_ids": [9, 10], "api_time": 1.0},
                      {"t": 5.5, "type": "n", "in": 12, "out": 1, "hash_ids": [9, 10, 11], "api_time": 1.0}]},
        {"t": 4.0, "type": "subagent", "agent_id": "a2", "subagent_type": "Explore", "status": "completed",
         "requests": [{"t": 0.0, "type": "n", "in": 4, "out": 1, "hash_ids": [9], "api_time": 0.25}]},
        {"t": 8.0, "type": "n", "in": 20, "out": 4, "hash_ids": [1, 2, 4, 5, 6]},
    ],
}


def write(tmp_path, session=SESSION, name="s1.json"):
    p = tmp_path / name
    p.write_text(json.dumps(session))
    return p


def only(path):
    sessions = list(at.read_agent_traces(path))
    assert len(sessions) == 1
    return sessions[0]


def test_a_session_file_reads_into_requests_and_subagents(tmp_path):
    s = only(write(tmp_path))
    assert (s.id, s.block_size, s.tool_tokens, s.system_tokens, s.models) == ("s1", 4, 4, 4, ("m",))
    first, second, sub1, sub2, last = s.entries
    assert (first.input_tokens, first.output_tokens, list(first.hash_ids), first.streaming) == (
        10, 3, [1, 2, 3], False)
    assert (second.streaming, second.think_time_s, second.ttft_s, second.model) == (True, 1.5, 0.1, "m")
    assert (last.model, last.api_time_s, last.think_time_s) == (None, None, None)
    assert isinstance(sub1, at.Subagent) and sub1.agent_id == "a1" and not sub1.relative_times
    assert [r.t_s for r in sub1.requests] == [4.0, 5.5]
    assert sub1.end_s == 6.5  # duration_ms recorded
    # a2's inner t (0.0) is before its spawn (4.0): relative to it, as older captures wrote them
    assert sub2.relative_times and [r.t_s for r in sub2.requests] == [4.0]
    assert sub2.end_s == 4.25  # no duration: its last answer's end
    assert [r.path for r in s.requests()] == [
        "$.requests[0]", "$.requests[1]", "$.requests[2].requests[0]", "$.requests[3].requests[0]",
        "$.requests[2].requests[1]", "$.requests[4]"]


def test_a_directory_and_a_jsonl_of_sessions(tmp_path):
    d = tmp_path / "dir"
    d.mkdir()
    write(d, name="b.json")
    write(d, {**SESSION, "id": "s0"}, name="a.json")
    (d / "notes.txt").write_text("not a trace")
    assert [s.id for s in at.read_agent_traces(d)] == ["s0", "s1"]
    lines = tmp_path / "all.jsonl"
    lines.write_text(json.dumps(SESSION) + "\n\n" + json.dumps({**SESSION, "id": 7}) + "\n")
    assert [s.id for s in at.read_agent_traces(lines)] == ["s1", "7"]


def test_think_time_recorded_else_the_idle_gap_after_the_previous_end():
    prev = at.AgentRequest("$.requests[0]", 0.0, False, None, 4, 1, at.array("q"), None, 1.0, None, "")
    recorded = at.AgentRequest("$.requests[1]", 3.0, False, None, 4, 1, at.array("q"), 1.5, None, None, "")
    derived = at.AgentRequest("$.requests[1]", 3.0, False, None, 4, 1, at.array("q"), None, None, None, "")
    early = at.AgentRequest("$.requests[1]", 0.5, False, None, 4, 1, at.array("q"), None, None, None, "")
    assert at.think_time_s(recorded, prev.end_s) == 1.5
    assert at.think_time_s(derived, prev.end_s) == 2.0  # 3.0 - (0.0 + api_time 1.0), not 3.0
    assert at.think_time_s(early, prev.end_s) == 0.0  # began before the previous ended: at once
    assert at.think_time_s(derived, None) == 0.0


def test_predicted_cache_hit_is_the_leading_blocks_seen_whole_before(tmp_path):
    s = only(write(tmp_path))
    hit = at.predicted_cached_tokens(s)
    # [0]: nothing before. [1]: ids 1, 2 seen whole in [0] (3 was its partial last block) -> 8.
    # a1[0]: 9, 10 unseen. a2[0]: 9 seen whole in a1[0] -> 4 (its whole input).
    # a1[1]: 9, 10 seen, 11 unseen -> 8. [4]: 1, 2, 4 seen whole in [1] (14 tokens: 3 whole
    # blocks, 5 partial) -> 12, then 5 was only partial -> stop.
    assert hit == {"$.requests[0]": 0, "$.requests[1]": 8, "$.requests[2].requests[0]": 0,
                   "$.requests[3].requests[0]": 4, "$.requests[2].requests[1]": 8, "$.requests[4]": 12}


def bad(tmp_path, mutate, name="bad.json"):
    s = copy.deepcopy(SESSION)
    mutate(s)
    p = write(tmp_path, s, name)
    with pytest.raises(PlanError) as e:
        list(at.read_agent_traces(p))
    assert e.value.exit_code == EXIT_USAGE
    return str(e.value).replace(str(p), "FILE")


def test_bad_input_names_file_session_and_path(tmp_path):
    assert bad(tmp_path, lambda s: s["requests"][1].pop("in")) == (
        "FILE: session 's1': $.requests[1].in: missing")
    assert bad(tmp_path, lambda s: s["requests"][0].update(hash_ids=[1, 2, 3, 4])) == (
        "FILE: session 's1': $.requests[0].hash_ids: 4 blocks of 4 tokens are more than in = 10 fills (3): "
        "is block_size right?")
    assert bad(tmp_path, lambda s: s["requests"][2].update(requests=[])) == (
        "FILE: session 's1': $.requests[2].requests: a subagent without requests (it needs at least one)")
    assert bad(tmp_path, lambda s: s["requests"][4].update(t=2.0)) == (
        "FILE: session 's1': $.requests[4].t: 2 is earlier than $.requests[3].t (4): a session's requests "
        "and subagents are in time order")
    assert bad(tmp_path, lambda s: s["requests"][2]["requests"][1].update(t=4.5 - 1)) == (
        "FILE: session 's1': $.requests[2].requests[1].t: 3.5 is earlier than $.requests[2].requests[0].t "
        "(4): a subagent's requests are in time order, after its spawn")
    assert bad(tmp_path, lambda s: s["requests"][1].update(type="x")) == (
        "FILE: session 's1': $.requests[1].type: unknown type \"x\" (a session's request is \"n\" or \"s\", "
        "a subagent \"subagent\")")
    assert bad(tmp_path, lambda s: s["requests"][2]["requests"][0].update(type="subagent")) == (
        "FILE: session 's1': $.requests[2].requests[0].type: unknown type \"subagent\" (a subagent's request "
        "is \"n\" or \"s\")")
    assert bad(tmp_path, lambda s: s.update(hash_id_scope="global")) == (
        "FILE: session 's1': $.hash_id_scope: \"global\" is not supported: benchc replays hash ids scoped to "
        "their session (\"local\") only")


def test_every_problem_of_a_session_is_named(tmp_path):
    def two(s):
        s["requests"][0].pop("out")
        s["requests"][4]["in"] = -1
    assert bad(tmp_path, two).splitlines() == [
        "FILE: session 's1': $.requests[0].out: missing",
        "FILE: session 's1': $.requests[4].in: -1 is less than the minimum of 0"]


def test_a_jsonl_problem_names_its_line(tmp_path):
    p = tmp_path / "x.jsonl"
    s = copy.deepcopy(SESSION)
    s["requests"][0]["type"] = "q"
    p.write_text(json.dumps(SESSION) + "\n" + json.dumps(s) + "\n")
    with pytest.raises(PlanError, match=r"x\.jsonl:2: session 's1': \$\.requests\[0\]\.type: unknown type"):
        list(at.read_agent_traces(p))


def test_a_file_beyond_its_bound_is_refused_unread(tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as f:  # sparse: 2 GB on paper, nothing on disk
        f.truncate(2 << 30)
    with pytest.raises(PlanError, match=r"is 2,147,483,648 bytes, more than the 268,435,456 a"):
        list(at.read_agent_traces(big))
    lines = tmp_path / "big.jsonl"
    with open(lines, "wb") as f:
        f.truncate(2 << 30)
    with pytest.raises(PlanError, match=r"is 2,147,483,648 bytes, more than the 1,073,741,824"):
        list(at.read_agent_traces(lines))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs")
def test_an_endless_input_is_refused_unread(tmp_path):
    fifo = tmp_path / "endless.json"
    os.mkfifo(fifo)
    with pytest.raises(PlanError, match="is a FIFO"):
        list(at.read_agent_traces(fifo))
    with pytest.raises(PlanError, match="is a character device"):
        list(at.read_agent_traces("/dev/zero"))


def test_a_session_line_longer_than_its_bound_is_not_read_on(tmp_path, monkeypatch):
    monkeypatch.setattr(at, "AGENT_SESSION_BYTES", 1000)
    p = tmp_path / "long.jsonl"
    p.write_text(json.dumps(SESSION) + "\n" + "x" * 5000 + "\n")
    with pytest.raises(PlanError, match=r"long\.jsonl:2: a session line longer than 1,000 bytes"):
        list(at.read_agent_traces(p))


def spec_for(tmp_path, trace_path):
    spec = tmp_path / "agent.yaml"
    spec.write_text("version: 1\nname: agent-traces\ntarget:\n  base_url: http://127.0.0.1:9/v1\n  model: m\n"
                    f"workload:\n  dataset:\n    agent_trace:\n      path: {trace_path}\n"
                    "      time_scale: 0.5\n"
                    "load:\n  sweep:\n    concurrency: [1]\n")
    return str(spec)


def test_validate_reads_and_checks_the_trace_and_plans_its_replay(tmp_path, capsys):
    from benchc.cli import main

    d = tmp_path / "traces"
    d.mkdir()
    write(d)
    assert main(["validate", spec_for(tmp_path, d)]) == 0
    capsys.readouterr()
    assert main(["plan", spec_for(tmp_path, d)]) == 0
    plan = json.loads(capsys.readouterr().out)
    loads = [s for s in plan["steps"] if s["kind"] == "load"]
    # one point, the sessions one at a time, the spec's time_scale; no warm-up (it would fill the cache)
    assert [s["load"] for s in loads] == [{"agent_replay": {
        "requests": None, "duration_s": None, "sessions": None, "ramp_up_s": 0.0, "cooldown_s": 0.0,
        "concurrency": 1, "rate_rps": None, "speedup": None, "time_scale": 0.5, "max_think_s": None,
        "kv_block": None}}]
    assert [s["kind"] for s in plan["steps"]] == ["server", "load"]
    s = copy.deepcopy(SESSION)
    s["requests"][2]["requests"][1].pop("in")
    write(d, s)
    assert main(["validate", spec_for(tmp_path, d)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"{d / 's1.json'}: session 's1': $.requests[2].requests[1].in: missing" in err
    assert "Traceback" not in err


def as_read(sessions):
    return [[(r.path, r.t_s, r.input_tokens, r.output_tokens, list(r.hash_ids)) for r in s.requests()]
            for s in sessions]


@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": ")])
def test_hash_ids_are_checked_at_read_and_decoded_when_first_asked_for(tmp_path, monkeypatch, separators):
    # compact JSON (the generator's, AIPerf's) and json.dumps' default spacing both take the
    # fast path: ids kept as their text until a session needs them, the same ids as json gives
    p = tmp_path / "s.jsonl"
    p.write_text("".join(json.dumps({**SESSION, "id": f"s{k}"}, separators=separators) + "\n"
                         for k in range(3)))
    fast = list(at.read_agent_traces(p))
    first = fast[0].entries[0]
    assert first.block_ids == b"1,2,3"  # not decoded by the read
    assert list(first.hash_ids) == [1, 2, 3] and first.block_ids == at.array("q", [1, 2, 3])
    monkeypatch.setattr(at, "_lift_ids", lambda raw: None)  # json reads every id
    assert as_read(fast) == as_read(at.read_agent_traces(p))
    assert at.predicted_cached_tokens(fast[1]) == at.predicted_cached_tokens(next(at.read_agent_traces(p)))


@pytest.mark.parametrize("ids, message", [
    ("[1,-2]", "$.requests[0].hash_ids: must be a list of non-negative integers"),
    ("[1,2.0]", "$.requests[0].hash_ids: must be a list of non-negative integers"),
    ("[1,2e0]", "$.requests[0].hash_ids: must be a list of non-negative integers"),
    ('[1,"2"]', "$.requests[0].hash_ids: must be a list of non-negative integers"),
    ("[1,[2]]", "$.requests[0].hash_ids: must be a list of non-negative integers"),
    ("[9223372036854775808]", "$.requests[0].hash_ids: must be a list of non-negative integers"),
    ("7", "$.requests[0].hash_ids: must be a list of non-negative integers"),
    ("[1,02]", "not a JSON object"),
    ("[1,,2]", "not a JSON object"),
    ("[1,2,]", "not a JSON object"),
    ("[,1]", "not a JSON object"),
    ("[1 2]", "not a JSON object"),
])
def test_hash_ids_the_fast_read_cannot_take_are_named_as_json_reads_them(tmp_path, ids, message):
    text = json.dumps(SESSION, separators=(",", ":")).replace('"hash_ids":[1,2,3]', f'"hash_ids":{ids}', 1)
    p = tmp_path / "s.json"
    p.write_text(text)
    with pytest.raises(PlanError) as e:
        list(at.read_agent_traces(p))
    assert message in str(e.value)


def test_a_key_spelled_with_escapes_is_read_as_json_reads_it(tmp_path):
    escaped = '"hash\\u005fids":[1,2,3,4]'  # json reads it as hash_ids
    text = json.dumps(SESSION, separators=(",", ":")).replace('"hash_ids":[1,2,3]', escaped)
    p = tmp_path / "s.json"
    p.write_text(text)
    with pytest.raises(PlanError, match=r"\$\.requests\[0\]\.hash_ids: 4 blocks of 4 tokens are more"):
        list(at.read_agent_traces(p))
    p.write_text(text.replace("[1,2,3,4]", "[7,8]"))
    assert list(only(p).entries[0].hash_ids) == [7, 8]
