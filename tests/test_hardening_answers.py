"""Answers checked against their request (issue 44, class 6, and two minor cases): an
embeddings answer with fewer vectors than inputs counts what was embedded and is flagged
(`stream.short_answers`, a doubt); rerank results past the documents are not counted; a
response ends at its end event (response.completed / .incomplete / .failed, message_stop):
a second `response.completed` cannot replace the first's usage, and events after the end do
not stretch E2E. Both cores, every HTTP path."""

from __future__ import annotations

import json

import pytest
from aiohttp import web

from benchc.plan.model import Target
from tests.conftest import both_cores
from tests.hostile import FakeServer, answered, small_run
from tests.test_hardening_cuts import core  # noqa: F401 - the fixture: both cores on every path
from tests.test_keepalive import PATHS


def events(*objs) -> bytes:
    return b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in objs)


def completed(output_tokens: int) -> dict:
    return {"type": "response.completed",
            "response": {"id": "resp_1", "status": "completed", "output": [],
                         "usage": {"input_tokens": 5, "output_tokens": output_tokens}}}


DELTA = {"type": "response.output_text.delta", "delta": "hi"}
MSG_TEXT = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}}


def _fed(module, reads: list[tuple[bytes, int]]):
    p = module.StreamParser()
    for data, at in reads:
        p.feed(data, at)
    p.close(9000)
    return p


@pytest.mark.parametrize("second", [
    completed(2_700_000),
    {"type": "response.output_text.delta", "delta": "more text after the end"},
    {"type": "response.failed", "response": {"error": {"message": "too late"}}},
])
def test_a_response_ends_at_its_first_end_event_on_both_cores(second):
    figures = []
    for module in both_cores("benchc.client._stream"):
        p = _fed(module, [(events(DELTA, completed(2)), 1000), (events(second), 5000)])
        figures.append((p.usage_completion, p.usage_prompt, p.finish_reason, p.error_event, p.done_ns,
                        p.text_chunks, p.last_text_ns, p.events))
    py, c = figures
    assert py == c
    assert py[:6] == (2, 5, "stop", None, 1000, 1)  # the first completion's, ended at its read


def test_events_after_message_stop_neither_count_nor_stretch_e2e_on_both_cores():
    late = {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 99}}
    end = [{"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
           {"type": "message_stop"}]
    figures = []
    for module in both_cores("benchc.client._stream"):
        p = _fed(module, [(events(MSG_TEXT, *end), 1000), (events(late, MSG_TEXT), 5000)])
        figures.append((p.usage_completion, p.finish_reason, p.done_ns, p.text_chunks))
    assert figures[0] == figures[1] == (1, "stop", 1000, 1)


def target(api: str) -> Target:
    return Target("http://x/v1", None, api, "m", None, {}, 10.0, 10.0, None, first_byte_timeout_s=10.0)


SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
JSON_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"


@pytest.mark.parametrize("path", PATHS)
def test_a_second_completion_does_not_replace_the_first_on_every_path(core, path):  # noqa: F811
    r = answered(path, SSE_HEAD, events(DELTA, completed(2), completed(2_700_000)), target("responses"))
    assert r.outcome.error is None, path
    assert (r.tokens.usage_output_tokens, r.outcome.finish_reason) == (2, "stop"), path
    assert r.times.end_ns == r.parser.done_ns  # E2E ends at the first completion's read


def vectors(n: int) -> bytes:
    data = [{"object": "embedding", "index": i, "embedding": [0.5, 0.25]} for i in range(n)]
    usage = {"prompt_tokens": 8, "total_tokens": 8}
    return json.dumps({"object": "list", "data": data, "usage": usage}).encode()


@pytest.mark.parametrize("path", PATHS)
def test_an_embeddings_answer_short_of_its_inputs_counts_what_was_embedded_on_every_path(core, path):  # noqa: F811
    r = answered(path, JSON_HEAD, vectors(3), target("embeddings"), inputs=8)
    assert r.outcome.error is None, path
    assert (r.payload.inputs, r.payload.results, r.payload.unanswered) == (3, 3, 5), path
    assert r.to_json()["unanswered"] == 5
    r = answered(path, JSON_HEAD, vectors(9), target("embeddings"), inputs=8)  # one too many: not counted
    assert (r.payload.inputs, r.payload.results, r.payload.unanswered) == (8, 8, 0), path


@pytest.mark.parametrize("path", PATHS)
def test_rerank_results_past_the_documents_are_not_counted_on_every_path(core, path):  # noqa: F811
    results = [{"index": i % 3, "relevance_score": 0.5} for i in range(7)]
    body = json.dumps({"results": results, "usage": {"total_tokens": 40}}).encode()
    r = answered(path, JSON_HEAD, body, target("rerank"), inputs=4)  # a query and 3 documents
    assert r.outcome.error is None, path
    assert (r.payload.inputs, r.payload.results, r.payload.unanswered) == (4, 3, 0), path
    body = json.dumps({"results": results[:2], "usage": {"total_tokens": 40}}).encode()
    r = answered(path, JSON_HEAD, body, target("rerank"), inputs=4)  # top_n 2: all answered
    assert (r.payload.inputs, r.payload.results, r.payload.unanswered) == (4, 2, 0), path


class ShortEmbedder(FakeServer):
    """An embeddings server that answers 3 vectors whatever it is asked. A thread of its own."""

    def __init__(self):
        super().__init__({"/v1/embeddings": self._embed})

    async def _embed(self, request):
        await request.read()
        return web.Response(body=vectors(3), content_type="application/json")


def test_a_point_of_short_embeddings_answers_counts_what_was_embedded_and_doubts_it(tmp_path, capsys):
    server = ShortEmbedder()
    try:
        point = small_run(tmp_path, server.url, requests=4, api="embeddings", batch=8)
    finally:
        server.close()
    assert point["counts"]["completed"] == 4 and point["counts"]["inputs"] == 12  # not 32
    assert point["stream"]["short_answers"] == 4 and point["stream"]["unanswered_inputs"] == 20
    doubt = [d for d in point["trust"]["doubts"] if d["check"] == "short_answers"]
    assert doubt and "4 answers carried fewer results than their request's inputs (20 inputs unanswered)" \
        in doubt[0]["message"]
