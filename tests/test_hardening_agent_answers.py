"""One hostile answer cannot kill a session's task (issue 44, class 2): whatever reading an
answer raises (tool-call arguments nested 100,000 deep: RecursionError in every JSON reader
that caught ValueError only; a huge tool result: MemoryError) ends that session as failed,
the error named and counted in the point's `sessions.answer_errors`, and the point fails
(exit 7). Before, the slot's task died ("Task exception was never retrieved"), the point
said complete and the run exited 0."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from aiohttp import web

from benchc.cli import main
from benchc.client.apis import _tool_input
from benchc.run import sessions
from benchc.run.sessions import split_tool_text

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


class ToolCaller:
    """A server whose every answer is one tool call with `arguments`, on the chat and the
    Messages APIs (`chat`: what a chat answer is instead). Runs in a thread of its own;
    `bodies` holds what each request sent."""

    def __init__(self, arguments: str, chat=chat_tool_call):
        self.arguments, self.chat = arguments, chat
        self.bodies: list[bytes] = []
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        assert self.ready.wait(30)

    def _serve(self):
        async def models(_):
            return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

        def answer(stream):
            async def handler(request):
                self.bodies.append(await request.read())
                resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await resp.prepare(request)
                await resp.write(stream(self.arguments))
                await resp.write_eof()
                return resp
            return handler

        async def start():
            app = web.Application(client_max_size=64 * 2**20)
            app.router.add_get("/v1/models", models)
            app.router.add_post("/v1/chat/completions", answer(self.chat))
            app.router.add_post("/v1/messages", answer(messages_tool_call))
            self.runner = web.AppRunner(app)
            await self.runner.setup()
            site = web.TCPSite(self.runner, "127.0.0.1", 0)
            await site.start()
            self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"
            self.ready.set()

        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(start())
        self.loop.run_forever()

    def close(self):
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


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
