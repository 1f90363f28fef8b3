"""SSE framing (benchc/client/_sse_py.py, the framer of the Python core; the compiled stream
parser frames in C and is held to the same results in test_stream.py)."""

import importlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

STREAM = (
    b": keep-alive comment\r\n\r\n"
    b'data: {"choices":[{"delta":{"role":"assistant"}}]}\r\n\r\n'
    b'data:{"choices":[{"delta":{"content":"h\xc3\xa9llo"}}]}\n\n'
    b"event: message\nid: 7\ndata: line one\ndata: line two\n\n"
    b"retry: 100\rdata: cr only\r\r"
    b"data: [DONE]\n\n"
)
EVENTS = [
    b'{"choices":[{"delta":{"role":"assistant"}}]}',
    b'{"choices":[{"delta":{"content":"h\xc3\xa9llo"}}]}',
    b"line one\nline two",
    b"cr only",
    b"[DONE]",
]


@pytest.fixture
def sse_module():
    return importlib.import_module("benchc.client._sse_py")


def decode(mod, pieces):
    d = mod.SSEDecoder()
    out = []
    for p in pieces:
        out += d.feed(p)
    return out + d.close(), d


def test_whole_stream(sse_module):
    events, d = decode(sse_module, [STREAM])
    assert events == EVENTS
    assert d.buffered == 0


def test_byte_at_a_time(sse_module):
    assert decode(sse_module, [STREAM[i:i + 1] for i in range(len(STREAM))])[0] == EVENTS


def test_unterminated_last_event_is_delivered_at_close(sse_module):
    d = sse_module.SSEDecoder()
    assert d.feed(b"data: a\n\ndata: [DONE]") == [b"a"]
    assert d.buffered == len(b"data: [DONE]")
    assert d.close() == [b"[DONE]"]


def test_garbage_never_crashes(sse_module):
    events, _ = decode(sse_module, [b"\x00\xff\xfe garbage\n\ndata\n\n:\n\ndatax: y\n\n\r\n\n"])
    assert events == [b""]  # a bare `data` line is an empty payload; `datax` is another field


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_random_splits_give_identical_events(cuts):
    cuts = sorted(set(cuts))
    bounds = [0, *cuts, len(STREAM)]
    pieces = [STREAM[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    assert decode(importlib.import_module("benchc.client._sse_py"), pieces)[0] == EVENTS
