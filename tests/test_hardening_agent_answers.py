"""One hostile answer cannot kill a session's task (issue 44, class 2): whatever reading an
answer raises (tool-call arguments nested 100,000 deep: RecursionError in every JSON reader
that caught ValueError only; a huge tool result: MemoryError) ends that session as failed,
the error named and counted in the point's `sessions.answer_errors`, and the point fails
(exit 7). Before, the slot's task died ("Task exception was never retrieved"), the point
said complete and the run exited 0."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from benchc.cli import main
from benchc.client.apis import _tool_input
from benchc.run import sessions
from benchc.run.sessions import split_tool_text
from tests.conftest import REPO, both_cores
from tests.hostile import FakeServer, streamed

DEPTH = 100_000
DEEP = '{"a":' + "[" * DEPTH + "]" * DEPTH + "}"


def test_json_readers_of_answers_take_arguments_nested_past_the_decoders_depth():
    assert split_tool_text("tool_0" + DEEP) == [("tool_0", DEEP)]
    assert _tool_input(DEEP) == {"arguments": DEEP}


def _sse(objs: list) -> bytes:
    return b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in objs)


def chat_tool_call(arguments: str) -> bytes:
    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "tool_0", "arguments": ""}}
    return _sse([
        {"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [call]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0,
                                                            "function": {"arguments": arguments}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5}}]) + b"data: [DONE]\n\n"


def messages_tool_call(arguments: str) -> bytes:
    return _sse([
        {"type": "message_start", "message": {"id": "m1", "usage": {"input_tokens": 10, "output_tokens": 0}}},
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "tool_use", "id": "t1", "name": "tool_0", "input": {}}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "input_json_delta", "partial_json": arguments}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 5}},
        {"type": "message_stop"}])


class ToolCaller(FakeServer):
    """A server whose every answer is one tool call with `arguments`, on the chat and the
    Messages APIs (`chat`: what a chat answer is instead). Runs in a thread of its own;
    `bodies` holds what each request sent."""

    def __init__(self, arguments: str, chat=chat_tool_call):
        self.arguments, self.chat = arguments, chat
        self.bodies: list[bytes] = []
        super().__init__({"/v1/chat/completions": self._answer(self.chat),
                          "/v1/messages": self._answer(messages_tool_call)}, client_max_size=64 * 2**20)

    def _answer(self, stream):
        async def handler(request):
            self.bodies.append(await request.read())
            return await streamed(request, stream(self.arguments))
        return handler


SPEC = """\
version: 1
name: agent
target: {{base_url: "{url}", model: m, api: {api}}}
workload:
  dataset:
    sessions: {{turns: 2, input_tokens: 24, output_tokens: 24, seed: 5}}
  tools: {{synthetic: {{count: 2, tokens: 40}}}}
  agent: {{tool_result_tokens: 20, tool_latency: 1ms, max_tool_calls: 1}}
load:
  warmup: {{requests: 0}}
  sweep: {{concurrency: [2]}}
  sessions: 3
output: {{path: {out}, requests: true}}
"""


def run_against(tmp_path, server: ToolCaller, api: str, *args: str) -> tuple[int, dict]:
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(url=server.url, api=api, out=tmp_path / "r.json"))
    code = main(["run", str(spec), "--quiet", *args])
    return code, json.loads((tmp_path / "r.json").read_text())["points"][0]


@pytest.mark.parametrize("api", ["chat", "messages"])
def test_arguments_nested_100000_deep_go_back_as_text_and_every_session_completes(tmp_path, api, capsys):
    server = ToolCaller(DEEP)
    try:
        code, point = run_against(tmp_path, server, api)
    finally:
        server.close()
    # each turn: the call, then its follow-up (max_tool_calls 1), 2 turns a session, 3 sessions
    assert code == 0 and point["sessions"]["completed"] == 3 and point["counts"]["completed"] == 12
    assert "answer_errors" not in point["sessions"]
    # the call went back as the server streamed it, in every request after a session's first
    assert sum(json.dumps(DEEP)[1:-1].encode() in b for b in server.bodies) == 9
    assert "never retrieved" not in capsys.readouterr().err


@pytest.mark.parametrize("http", ["native", "aiohttp"])
def test_an_answer_that_cannot_be_read_ends_its_session_named_and_fails_the_point(tmp_path, monkeypatch,
                                                                                capsys, http):
    def too_big(self, content, calls, response_id=None):
        raise MemoryError("a tool result past memory")

    monkeypatch.setattr(sessions.Conversation, "called", too_big)
    server = ToolCaller('{"q": 1}')
    try:
        code, point = run_against(tmp_path, server, "chat", "--http", http)
    finally:
        server.close()
    assert code == 7  # a failed point
    s = point["sessions"]
    assert (s["started"], s["completed"], s["failed"]) == (3, 0, 3)
    assert s["answer_errors"] == {"MemoryError": 3}
    assert point["counts"]["completed"] == 3  # the answers themselves came whole
    err = capsys.readouterr().err
    assert "3 sessions ended on an answer benchc could not read (3 MemoryError)" in err
    assert "never retrieved" not in err


# --------------------------------------------------------------------------- class 4: amplification


def test_an_answer_of_a_thousand_parallel_calls_sends_back_at_most_the_bound(tmp_path):
    """Every call of an answer and its result joined the history: 100,000 parallel calls in an
    8 MB answer made one 218 MB follow-up. Now the first MAX_CALLS_PER_ANSWER are answered."""
    server = ToolCaller("{}" + "tool_1{}" * 999)  # one answer, 1,000 calls
    try:
        code, point = run_against(tmp_path, server, "chat")
    finally:
        server.close()
    assert code == 0 and point["sessions"]["completed"] == 3
    follow_ups = [json.loads(b) for b in server.bodies if b'"role": "tool"' in b]
    assert follow_ups
    for body in follow_ups:
        calls = [m for m in body["messages"] if m.get("tool_calls")]
        results = [m for m in body["messages"] if m["role"] == "tool"]
        assert {len(m["tool_calls"]) for m in calls} == {sessions.MAX_CALLS_PER_ANSWER}
        assert len(results) == len(calls) * sessions.MAX_CALLS_PER_ANSWER


def test_a_history_grown_past_the_ceiling_of_a_request_ends_its_session(tmp_path, monkeypatch):
    monkeypatch.setattr(sessions, "MAX_TOKENS", 200)  # as if the answers carried millions of tokens
    server = ToolCaller("{" + '"w": "many words here", ' * 20 + '"end": 1}')
    try:
        code, point = run_against(tmp_path, server, "chat")
    finally:
        server.close()
    assert code == 7
    s = point["sessions"]
    assert s["failed"] == 3 and s["answer_errors"] == {"HistoryPastCeiling": 3}


_KEPT_TEXT_PEAK = """
import resource, sys
from benchc.client import _stream_c
n = int(sys.argv[1])
block = b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\\n\\n' * 4096
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
p = _stream_c.StreamParser(True)
for i in range(n // 4096):
    p.feed(block, i)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base)
assert p.text() == "a" * n
"""


def test_kept_text_of_one_byte_pieces_costs_about_its_bytes_on_the_compiled_core():
    """The compiled core kept an 8-byte index per piece: 16 MiB of 1-byte pieces held 145 MB.
    A piece of the kind and form of the one before now extends it (the peak of a fresh
    process, 8 Mi pieces: 64 MiB of index and more before)."""
    both_cores("benchc.client._stream")  # skips where the compiled core is not built
    n = 8 * 2**20
    out = subprocess.run([sys.executable, "-c", _KEPT_TEXT_PEAK, str(n)], capture_output=True, text=True,
                         check=True, cwd=REPO)
    grown_kib = int(out.stdout)
    assert grown_kib < 2 * n // 1024, f"{grown_kib} KiB for {n // 2**20} MiB of text"


@pytest.mark.parametrize("pieces", [
    ["\ud83d", "\ude00"],  # a pair split across two chunks: each escaped on its own
    ["x\ud83d", "\ude00y", "z"],
    ["a\\\\ud83d", "\ude00"],  # an escaped backslash before text that looks like an escape
    ["plain", " text", "\n", "\"quoted\""],
])
def test_kept_pieces_read_back_as_the_twin_joins_them_on_both_cores(pieces):
    stream = b"".join(b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": t}}]}).encode()
                      + b"\n\n" for t in pieces)
    texts = []
    for module in both_cores("benchc.client._stream"):
        p = module.StreamParser(True)
        p.feed(stream, 1)
        texts.append((p.text(), p.answer_text()))
    assert texts[0] == texts[1] == ("".join(pieces), "".join(pieces))


def test_kept_text_of_one_byte_pieces_costs_about_its_bytes_on_the_twin():
    """The twin kept a list entry (and a kind entry) per piece: 16 bytes and more per 1-byte
    piece. A run of pieces of one kind is now one piece, RUN_PIECES at a time."""
    import tracemalloc

    from benchc.client import _stream_py

    n = 2**16
    block = b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n' * 4096

    def held(keep_text: bool):
        parser = _stream_py.StreamParser(keep_text)
        tracemalloc.start()
        try:
            for i in range(n // 4096):
                parser.feed(block, i)
            return parser, tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()

    p, kept = held(True)
    kept -= held(False)[1]  # what keeping the text costs (the gaps kept are the same)
    assert kept < 2 * n, f"{kept} bytes held for {n} bytes of text"
    assert p.text() == "a" * n and p.answer_text() == "a" * n and p.tool_text() == ""
