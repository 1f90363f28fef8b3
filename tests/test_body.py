"""A non-streamed answer (one JSON body: embeddings) read by the stream parser's body mode, on
both cores: its skeleton (benchc.client._body_py: vectors dropped, usage kept), the one
interpretation of it, split at every point and compared between the cores."""

import base64
import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchc.client import _body_py
from benchc.client._sse_py import BODY_TOO_LARGE, oversized_detail
from tests.conftest import both_cores


def embeddings_answer(inputs: int, dim: int, prompt_tokens: int, b64: bool = False) -> bytes:
    """An answer in vLLM's shape (usage last)."""
    vec = [round(0.001 * (i - dim / 2), 6) for i in range(dim)]
    emb = base64.b64encode(struct.pack(f"<{dim}f", *vec)).decode() if b64 else vec
    return json.dumps({"id": "embd-1", "object": "list", "created": 1, "model": "m",
                       "data": [{"index": i, "object": "embedding", "embedding": emb} for i in range(inputs)],
                       "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens,
                                 "completion_tokens": 0, "prompt_tokens_details": {"cached_tokens": 7}},
                       }).encode()


def skim(body: bytes, cuts=()) -> _body_py.BodySkim:
    s = _body_py.BodySkim()
    a = 0
    for b in [*sorted(cuts), len(body)]:
        s.feed(body[a:b])
        a = b
    return s


def test_the_skeleton_drops_vectors_and_nested_string_values_and_keeps_usage():
    body = embeddings_answer(3, 1024, 42)
    s = skim(body)
    assert s.done and len(body) > 20_000
    kept = json.loads(bytes(s.kept))
    assert kept["data"] == [{"index": i, "object": "", "embedding": []} for i in range(3)]
    assert kept["usage"] == {"prompt_tokens": 42, "total_tokens": 42, "completion_tokens": 0,
                             "prompt_tokens_details": {"cached_tokens": 7}}
    assert (kept["id"], kept["model"]) == ("embd-1", "m")
    assert _body_py.interpret(bytes(s.kept)) == (42, 3, None)
    b64 = skim(embeddings_answer(2, 1024, 9, b64=True))  # a base64 vector is a string value at depth 3
    assert json.loads(bytes(b64.kept))["data"][1] == {"index": 1, "object": "", "embedding": ""}
    assert len(b64.kept) < 300


def test_strings_with_brackets_escapes_and_nesting_do_not_move_the_depth():
    body = (b'{"id":"a\\"[{","data":[{"k\\"ey":"v]\\\\","e":[["x\\"]",{"y":"}"}],1]},[1,{"a":[2]}]],'
            b'"usage":{"prompt_tokens":5}} trailing')
    s = skim(body)
    assert s.done
    assert json.loads(bytes(s.kept)) == {"id": 'a"[{', "data": [{'k"ey': "", "e": []}, [1, {}]],
                                         "usage": {"prompt_tokens": 5}}


@pytest.mark.parametrize("body, fields", [
    (b'{"error": {"message": "boom", "code": 500}}', (None, None, "boom")),
    (b'{"object": "error", "message": "bad input"}', (None, None, "bad input")),
    (b'{"results": [{"index": 0, "document": {"text": "x"}, "relevance_score": 0.5}], '
     b'"usage": {"total_tokens": 3}}', (3, 1, None)),  # rerank: total_tokens, no prompt_tokens
    (b'{"data": [], "usage": {"prompt_tokens": true}}', (None, 0, None)),
])
def test_interpretation(body, fields):
    assert _body_py.interpret(bytes(skim(body).kept)) == fields


def parse(mod, body: bytes, cuts=()):
    p = mod.StreamParser(body=True)
    a = 0
    for i, b in enumerate([*sorted(cuts), len(body)]):
        p.feed(body[a:b], 1000 + i)
        a = b
    p.close(99_999)
    return {k: getattr(p, k) for k in ("done_ns", "usage_prompt", "results", "error_event", "malformed",
                                       "malformed_example", "oversized", "events", "text_chunks",
                                       "first_text_ns", "body")}


BODIES = [embeddings_answer(4, 64, 123), embeddings_answer(2, 16, 5, b64=True),
          b'{"error": {"message": "overloaded"}}', b"<html>busy</html>", b"", b'{"data": [1, 2',
          b'{"data":[{"embedding":[1e-3,-2.5E+2]}],"usage":{"prompt_tokens":99999999999999999999}}',
          '{"id":"ü\\u00fc","data":[{"object":"é"}],"usage":{"prompt_tokens":3}}'.encode()]


@settings(max_examples=150, deadline=None)
@given(which=st.integers(0, len(BODIES) - 1), cuts=st.lists(st.integers(0, 2000), max_size=6))
def test_both_cores_read_a_body_split_anywhere_alike(which, cuts):
    body = BODIES[which]
    cuts = [c for c in cuts if c <= len(body)]
    py, c = (parse(mod, body, cuts) for mod in both_cores("benchc.client._stream"))
    assert py == c
    whole = parse(both_cores("benchc.client._stream")[0], body)
    assert {**py, "done_ns": bool(py["done_ns"])} == {**whole, "done_ns": bool(whole["done_ns"])}  # any split
    assert py["body"] and py["text_chunks"] == 0 and py["first_text_ns"] == 0


def test_what_each_core_reads_from_a_body():
    for mod in both_cores("benchc.client._stream"):
        got = parse(mod, embeddings_answer(4, 64, 123), cuts=[10, 500])
        assert (got["usage_prompt"], got["results"], got["error_event"]) == (123, 4, None)
        assert got["malformed"] == 0
        assert got["done_ns"] == 1002  # the read that closed the JSON
        bad = parse(mod, b"<html>busy</html>")
        assert (bad["malformed"], bad["malformed_example"], bad["done_ns"]) == (1, b"<html>busy</html>", 0)
        cut = parse(mod, b'{"data": [1, 2')
        assert (cut["done_ns"], cut["malformed"]) == (0, 1)


def test_a_skeleton_past_its_bound_stops_the_body_on_both_cores():
    # a million results of a few bytes each: no vector, yet a skeleton of megabytes
    body = b'{"data": [' + b",".join([b'{"index": 1}'] * 100_000) + b'], "usage": {"prompt_tokens": 1}}'
    for mod in both_cores("benchc.client._stream"):
        got = parse(mod, body, cuts=range(0, len(body), 65536))
        assert got["oversized"] == BODY_TOO_LARGE and got["usage_prompt"] == -1
    assert "JSON answer" in oversized_detail(BODY_TOO_LARGE)
