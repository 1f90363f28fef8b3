"""Secrets are scrubbed before a server's text is cut (issue 44, class 1): an error event's
message (200 characters), a finish, stop or incomplete reason (100) and a malformed event's
start (200) go through one helper (benchc.redact.clip) that scrubs first, then cuts, hiding a
secret's start left at the cut. The parsers of both cores keep KEEP_PAST_CUT more than is
shown, so that a key across the bound is whole when it is scrubbed. Before, a
`response.failed` echoing the key at character 190 left its first ten characters in the
result, the requests file and the console."""

from __future__ import annotations

import json

import pytest

from benchc import redact
from benchc.cli import main
from benchc.client import _response, _stream
from benchc.client import request as request_mod
from benchc.metrics.record import MALFORMED, STREAM_BROKEN, RequestRecord
from benchc.redact import Scrubber
from tests.conftest import both_cores
from tests.hostile import FakeServer, answered, streamed
from tests.test_keepalive import PATHS

KEY = "sk-live-7Hq2xR9mZ4vB8nK3"


def failed_event(message: str) -> bytes:
    obj = {"type": "response.failed", "response": {"id": "resp_1", "status": "failed",
                                                   "error": {"code": "server_error", "message": message}}}
    return b"event: response.failed\ndata: " + json.dumps(obj).encode() + b"\n\n"


def parsed(module, chunks: list[bytes]):
    p = module.StreamParser()
    for i, c in enumerate(chunks):
        p.feed(c, 1000 + i)
    p.close(2000)
    return p


def test_the_parsers_keep_a_key_across_the_shown_bound_whole_on_both_cores():
    message = "x" * 190 + KEY + " was refused"
    long_reason = {"type": "message_delta", "delta": {"stop_reason": "r" * 95 + KEY},
                   "usage": {"output_tokens": 1}}
    bad = b"data: {" + b"y" * 190 + KEY.encode() + b"\n\n"
    kept = []
    for module in both_cores("benchc.client._stream"):
        p = parsed(module, [failed_event(message)])
        q = parsed(module, [b"data: " + json.dumps(long_reason).encode() + b"\n\n"])
        m = parsed(module, [bad])
        kept.append((p.error_event, q.finish_reason, m.malformed_example))
    py, c = kept
    assert py == c
    assert py[0] == message and py[1] == "r" * 95 + KEY and py[2] == b"{" + b"y" * 190 + KEY.encode()


def test_clip_scrubs_then_cuts_and_hides_a_start_left_at_the_cut():
    with redact.scrubbing(Scrubber([KEY])):
        assert redact.clip("x" * 190 + KEY + " tail", 200) == "x" * 190 + "*** tail"
        # a key longer than the reader kept past the bound: its start at the cut is hidden
        assert redact.clip("x" * 190 + KEY[:12], 200, was_cut=True) == "x" * 190 + "***"
        assert redact.clip("stop", 100) == "stop"
    assert redact.clip("z" * 300, 200) == "z" * 200  # no run: a plain cut


@pytest.fixture(params=["py", "c"])
def core(request, monkeypatch):
    """The stream parser core of the asyncio transport and the aiohttp path (the receive
    loops read with their own: rx-py the twin, rx-c the compiled core)."""
    module = both_cores("benchc.client._stream")[request.param == "c"]
    reader = both_cores("benchc.client._response")[request.param == "c"]
    monkeypatch.setattr(_stream, "StreamParser", module.StreamParser)
    monkeypatch.setattr(_response, "ResponseReader", reader.ResponseReader)
    monkeypatch.setattr(request_mod, "StreamParser", module.StreamParser)
    return request.param


def _answered(path: str, events: list[bytes]) -> RequestRecord:
    with redact.scrubbing(Scrubber([KEY])):
        return answered(path, b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n", b"".join(events))


@pytest.mark.parametrize("path", PATHS)
def test_an_error_event_echoing_the_key_at_190_leaves_none_of_it_on_every_path(core, path):
    r = _answered(path, [failed_event("x" * 190 + KEY + " was refused")])
    assert r.outcome.error == STREAM_BROKEN
    assert r.outcome.error_detail == "error event: " + "x" * 190 + "*** was re", \
        (path, r.outcome.error_detail)


@pytest.mark.parametrize("path", PATHS)
def test_a_reason_and_a_malformed_event_are_scrubbed_before_their_cut_on_every_path(core, path):
    delta = {"type": "message_delta", "delta": {"stop_reason": "r" * 95 + KEY}, "usage": {"output_tokens": 1}}
    text = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}}
    r = _answered(path, [b"data: " + json.dumps(o).encode() + b"\n\n" for o in (text, delta)])
    assert r.outcome.error is None and r.outcome.finish_reason == "r" * 95 + "***", \
        (path, r.outcome.finish_reason)
    r = _answered(path, [b"data: {" + b"y" * 190 + KEY.encode() + b"\n\n"])
    assert r.outcome.error == MALFORMED and r.outcome.error_detail == "{" + "y" * 190 + "***", \
        (path, r.outcome.error_detail)


# --------------------------------------------------------------------------- end to end

SPEC = """\
version: 1
name: t
target:
  base_url: {url}
  model: m
  api: responses
  api_key: {key}
workload:
  dataset:
    random: {{input_tokens: 8, output_tokens: 4}}
load:
  warmup: {{requests: 0}}
  sweep:
    concurrency: [1]
  requests: 3
output:
  path: {out}
  requests: true
"""


class FailingResponses(FakeServer):
    """A Responses API server whose every answer is `response.failed`, its message echoing the
    request's key at character 190. Runs in a thread of its own."""

    def __init__(self):
        super().__init__({"/v1/responses": self._answer})

    async def _answer(self, request):
        key = request.headers.get("Authorization", "").removeprefix("Bearer ")
        return await streamed(request, failed_event("x" * 190 + key + " is not allowed here"))


def test_a_failed_response_echoing_the_key_leaves_none_of_it_in_result_requests_or_console(tmp_path, capsys):
    server = FailingResponses()
    try:
        path = tmp_path / "s.yaml"
        path.write_text(SPEC.format(url=server.url, key=KEY, out=tmp_path / "r.json"))
        assert main(["run", str(path), "-v"]) == 7  # every request failed
    finally:
        server.close()
    out, err = capsys.readouterr()
    result = (tmp_path / "r.json").read_text()
    records = (tmp_path / "r.requests.jsonl").read_text()
    point = json.loads(result)["points"][0]
    assert point["counts"]["errors"] == {"stream_broken": 3}
    assert point["counts"]["error_examples"]["stream_broken"] == "error event: " + "x" * 190 + "*** is not"
    assert len(records.splitlines()) == 3
    for where, text in (("stdout", out), ("stderr", err), ("the result", result), ("the requests", records)):
        assert KEY[:6] not in text, where
