"""Multi-turn Responses conversations against servers that refuse (issue 45, item 3): a point in
which no session completed, or no request of some turn depth did, is a failed point (exit 7)
even when exactly half the requests failed; the history goes as typed items (an answer a
`message` of `output_text` content), which llama.cpp and vLLM take."""

import os

import pytest

from benchc.cli import main
from benchc.errors import EXIT_POINT_FAILED, EXIT_RUN_ABORTED
from benchc.results.document import read
from benchc.results.failed import point_failure
from tests.gate_proxy import GateProxy
from tests.simrun import Sim

SPEC = """\
version: 1
name: conversation
target: {{base_url: "http://127.0.0.1:9/v1", api: responses, model: MiniMaxAI/MiniMax-M2.5}}
workload:
  dataset:
    sessions: {{turns: 2, input_tokens: 24, output_tokens: 8, seed: 5}}
load:
  warmup: {{requests: 0}}
  sweep: {{concurrency: [2]}}
  sessions: 3
output: {{path: {out}}}
"""


def _run(tmp_path, capsys, refuse, history="full", quiet=True):
    spec = tmp_path / "s.yaml"
    text = SPEC.format(out=tmp_path / "r.json")
    spec.write_text(text.replace("  dataset:", f"  history: {history}\n  dataset:"))
    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4")
    proxy = GateProxy(sim.url, refuse)
    try:
        code = main(["run", str(spec), "--base-url", proxy.url] + (["--quiet"] if quiet else []))
    finally:
        proxy.close()
        sim.close()
    doc = read(str(tmp_path / "r.json"))
    point = doc["points"][0] if doc["points"] else None
    return code, point, capsys.readouterr().err, proxy.refused


def _answers(body: dict) -> list[dict]:
    items = body.get("input")
    return [i for i in items if i.get("role") == "assistant"] if isinstance(items, list) else []


def _history_refused(path: str, body: dict) -> str | None:
    """A server that takes no history at all: every second turn is refused."""
    return "history not supported" if _answers(body) and body.get("max_output_tokens") != 4 else None


def _keeps_none(path: str, body: dict) -> str | None:
    """A server that keeps no responses, as vLLM without its store."""
    if "previous_response_id" in body:
        return f"Response with id '{body['previous_response_id']}' not found."
    return None


def _chat_form_refused(path: str, body: dict) -> str | None:
    """A server that takes an earlier answer only as a typed output message."""
    for item in _answers(body):
        parts = item.get("content")
        if item.get("type") != "message" or not isinstance(parts, list) or \
                any(p.get("type") != "output_text" for p in parts):
            return "input[1]: an assistant message's content must be output_text parts"
    return None


@pytest.mark.slow  # a run against a simulator subprocess, behind a proxy
def test_every_second_turn_refused_fails_the_point_though_only_half_the_requests_failed(tmp_path, capsys):
    """It exited 0: 3 of 6 requests failed, not more than half."""
    code, point, err, refused = _run(tmp_path, capsys, _history_refused)
    assert len(refused) == 3, refused
    assert point["counts"]["sent"] == 6 and point["counts"]["failed"] == 3
    assert code == EXIT_POINT_FAILED, err
    assert "c=2: no request of turn 2 completed (3 sent): of 3 sessions 3 failed" in err


@pytest.mark.slow
def test_an_earlier_answer_goes_as_a_typed_output_message_and_every_session_completes(tmp_path, capsys):
    """It went as {role: assistant, content: text}: a server that wants typed items refused
    every second turn."""
    code, point, err, refused = _run(tmp_path, capsys, _chat_form_refused)
    assert refused == [], refused
    assert code == 0, err
    assert point["sessions"]["completed"] == 3 and point["counts"]["failed"] == 0


@pytest.mark.slow
def test_whether_the_server_keeps_responses_is_asked_up_front_and_said(tmp_path, capsys):
    """The simulator keeps responses (vLLM with its store): said, and the history still goes in
    full as the spec asks."""
    code, point, err, _ = _run(tmp_path, capsys, None, quiet=False)
    assert code == 0 and point["sessions"]["completed"] == 3
    assert ("responses: the server takes previous_response_id (it keeps responses); this run sends the "
            "history in full") in err
    assert read(str(tmp_path / "r.json"))["combinations"][0]["responses"] == {
        "previous_response_id": True, "detail": "it keeps responses"}


@pytest.mark.slow
def test_a_spec_that_needs_kept_responses_stops_before_its_load_on_a_server_that_keeps_none(tmp_path, capsys):
    """It ran, and every session failed at its second turn (the id not found)."""
    code, point, err, refused = _run(tmp_path, capsys, _keeps_none, history="previous_response_id")
    assert code == EXIT_RUN_ABORTED and point is None and len(refused) == 1
    assert ("the server does not take previous_response_id (HTTP 400: ") in err
    assert ("which workload.history asks for: set workload.history: full (the history sent as typed items), "
            "or have the server keep responses (vLLM: VLLM_ENABLE_RESPONSES_API_STORE=1)") in err
    (tmp_path / "full").mkdir()
    code, point, err, refused = _run(tmp_path / "full", capsys, _keeps_none, quiet=False)  # history: full
    assert code == 0 and point["sessions"]["completed"] == 3
    assert "does not take previous_response_id (HTTP 400: " in err and "the history goes in full" in err


def _sessions_point(by_turn, completed, failed=0, cut=0):
    return {"id": "c=2", "params": {"concurrency": 2, "probe": None},
            "counts": {"sent": sum(t["sent"] for t in by_turn),
                       "completed": sum(t["completed"] for t in by_turn),
                       "failed": sum(t["sent"] - t["completed"] for t in by_turn), "errors": {}},
            "sessions": {"started": completed + failed + cut, "completed": completed, "failed": failed,
                         "cut": cut, "by_turn": by_turn}}


def test_a_point_with_no_completed_session_fails():
    turns = [{"turn": "1", "sent": 4, "completed": 4}, {"turn": "2", "sent": 4, "completed": 2},
             {"turn": "3", "sent": 2, "completed": 2}]
    point = _sessions_point(turns, completed=0, failed=2, cut=2)
    assert point_failure(point) == "no session completed: of 4 sessions 2 failed, 2 cut"


def test_a_point_whose_sessions_all_completed_is_no_failure():
    turns = [{"turn": "1", "sent": 4, "completed": 4}, {"turn": "2", "sent": 4, "completed": 4}]
    point = _sessions_point(turns, completed=4)
    assert point_failure(point) is None


@pytest.mark.real
def test_the_responses_agent_loop_completes_every_session_on_vllm(tmp_path, capsys):
    """The shared vLLM (BENCHC_VLLM_URL): an agent loop on the Responses API, its history as
    typed items, every session completed and the run green."""
    url = os.environ["BENCHC_VLLM_URL"]
    spec = tmp_path / "s.yaml"
    spec.write_text(f"""\
version: 1
name: agent-responses
target: {{base_url: "{url}", api: responses, model: tiny-random}}
workload:
  dataset:
    sessions: {{turns: 3, input_tokens: 24, output_tokens: 8, seed: 5}}
  tools: {{synthetic: {{count: 2, tokens: 40}}}}
  agent: {{tool_result_tokens: 20, tool_latency: 5ms, max_tool_calls: 2}}
load:
  warmup: {{requests: 0}}
  sweep: {{concurrency: [2]}}
  sessions: 4
output: {{path: {tmp_path / "r.json"}}}
""")
    code = main(["run", str(spec)])
    err = capsys.readouterr().err
    assert code == 0, err
    # asked up front: vLLM keeps no responses unless started with its store
    assert "responses: the server does not take previous_response_id (HTTP 404: " in err
    (point,) = read(str(tmp_path / "r.json"))["points"]
    assert point["sessions"]["started"] == 4 and point["sessions"]["completed"] == 4, point["sessions"]
    assert point["counts"]["failed"] == 0
