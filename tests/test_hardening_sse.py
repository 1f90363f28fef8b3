"""SSE input is bounded in both stream-parser cores (issue 15, class 2): a line or an event's
data past MAX_SSE_BYTES stops the parser (`oversized`), at the same line on both cores and
over any split of the stream; the memory either holds stays bounded (an endless line took
2.8 GB in 5 s before the bounds). Then a fuzz over hostile SSE byte streams: no exception
escapes, the Python core's memory stays within a bound measured with tracemalloc, and both
cores give the same figures and, once judged as a request, the same error kind."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchc.client._sse_py import EVENT_TOO_LARGE, LINE_TOO_LONG, MAX_SSE_BYTES, SSEDecoder
from benchc.client.request import _conclude
from benchc.metrics.record import RequestRecord, Times
from tests.conftest import REPO, both_cores

MAX = MAX_SSE_BYTES


def event(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def text_event(t: str) -> bytes:
    return event({"choices": [{"index": 0, "delta": {"content": t}}]})


def figures(p) -> tuple:
    return (p.events, p.text_chunks, p.text_bytes, p.malformed, p.malformed_example, p.oversized,
            p.usage_completion, p.usage_prompt, p.finish_reason, p.error_event, p.done_ns, p.first_text_ns,
            p.gaps_ns, p.chunk_tokens, p.first_bytes)


def feed(module, chunks: list[bytes], close: bool = True):
    p = module.StreamParser()
    for i, c in enumerate(chunks):
        p.feed(c, 1000 + i)
    if close:
        p.close(1000 + len(chunks))
    return p


def split(stream: bytes, cuts: list[int]) -> list[bytes]:
    cuts = sorted({c for c in cuts if 0 < c < len(stream)})
    return [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]


def both(chunks: list[bytes], close: bool = True) -> tuple:
    py, c = (feed(m, chunks, close) for m in both_cores("benchc.client._stream"))
    assert figures(py) == figures(c)
    return py, c


@pytest.mark.parametrize("cuts", [[], [3], [MAX // 2, MAX + 4], list(range(65536, 3 * MAX, 65536))])
def test_a_line_past_the_bound_stops_both_cores_at_the_same_point(cuts):
    before = text_event("a") + text_event("b")
    huge = b"data: " + b"x" * MAX  # the line is MAX + 6 bytes long, with no end yet
    py, _ = both(split(before + huge + b"\n\n" + text_event("after"), [len(before) + c for c in cuts]))
    assert py.oversized == LINE_TOO_LONG
    assert py.text_chunks == 2 and py.events == 2  # what came before it was read; nothing after it


def test_a_line_of_exactly_the_bound_is_read():
    payload = json.dumps({"choices": [{"index": 0, "delta": {"content": "y"}}]}).encode()
    pad = MAX - len(b"data: ") - len(payload)
    line = b"data: " + payload[:-1] + b" " * pad + payload[-1:]  # JSON allows the blanks
    assert len(line) == MAX
    py, _ = both(split(line + b"\n\n" + text_event("z"), [1000, MAX - 5, MAX + 1]))
    assert py.oversized == 0 and py.text_chunks == 2 and py.malformed == 0


def test_an_event_whose_data_lines_pass_the_bound_stops_both_cores():
    line = b"data: " + b"y" * 1023 + b"\n"  # 1 KiB of data per line, joined with LF
    lines = MAX // 1024 + 1
    stream = text_event("a") + line * lines + b"\n" + text_event("after")
    py, _ = both(split(stream, list(range(7, len(stream), 50_000))))
    assert py.oversized == EVENT_TOO_LARGE and py.text_chunks == 1
    # one line less stays inside the bound: the event is read (and is malformed JSON)
    py, _ = both([text_event("a") + line * (lines - 1) + b"\n" + text_event("after")])
    assert py.oversized == 0 and py.malformed == 1 and py.text_chunks == 2


def test_after_stopping_nothing_more_is_read_and_close_adds_nothing():
    for m in both_cores("benchc.client._stream"):
        p = m.StreamParser()
        p.feed(b"data: " + b"x" * (MAX + 1), 1)
        assert p.oversized == LINE_TOO_LONG
        p.feed(text_event("late"), 2)
        p.close(3)
        assert (p.events, p.text_chunks, p.done_ns) == (0, 0, 0)


def test_the_first_bytes_are_kept_on_both_cores():
    py, _ = both([b"<html><title>", b"502 Bad Gateway</title>" + b"." * 400])
    assert py.first_bytes == (b"<html><title>502 Bad Gateway</title>" + b"." * 400)[:200]


ENDLESS = """
import resource, sys
sys.path.insert(0, {repo!r})
import importlib
m = importlib.import_module("benchc.client._stream_" + sys.argv[1])
p = m.StreamParser()
chunk = b"x" * 65536
p.feed(b"data: ", 1)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for i in range(1024):  # 64 MiB of one line
    p.feed(chunk, i + 2)
grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
print(p.oversized, grew)
"""


@pytest.mark.parametrize("core", ["py", "c"])
def test_an_endless_line_costs_bounded_memory_on_either_core(core):
    """The process's peak resident size (the C core's buffers are malloc'd, out of tracemalloc's
    sight) grows by less than a few times the bound while 64 MiB of one line stream in."""
    both_cores("benchc.client._stream")  # skips where the compiled core is not built
    out = subprocess.run([sys.executable, "-c", ENDLESS.format(repo=REPO), core], capture_output=True,
                         text=True, timeout=120, check=True).stdout.split()
    oversized, grew_kib = int(out[0]), int(out[1])
    assert oversized == LINE_TOO_LONG
    assert grew_kib < 4 * MAX // 1024, f"peak RSS grew {grew_kib} KiB"


# --------------------------------------------------------------------------- the fuzz

def _json_event(draw) -> bytes:
    t = draw(st.text(max_size=6))
    shape = draw(st.sampled_from(["delta", "text", "finish", "usage", "error"]))
    if shape == "delta":
        return text_event(t)
    if shape == "text":
        return event({"choices": [{"index": 0, "text": t}]})
    if shape == "finish":
        return event({"choices": [{"index": 0, "delta": {}, "finish_reason": t or "stop"}]})
    if shape == "usage":
        return event({"choices": [], "usage": {"prompt_tokens": draw(st.integers(0, 99)),
                                               "completion_tokens": draw(st.integers(-2, 10**20))}})
    return event({"error": {"message": t}})


FIELDS = [b"event: x\n", b"id: 7\n", b"retry: 5\n", b"data\n", b"data:x\n", b": keep-alive\n"]
BAD_UTF8 = b'data: {"choices":[{"delta":{"content":"\xff\xfe'


@st.composite
def piece(draw) -> tuple:
    """One piece of a stream as (head, unit, times, tail), its bytes head + unit * times + tail:
    small enough to show when a case fails (hypothesis prints its arguments; a megabyte of
    them is useless and slow)."""
    kind = draw(st.sampled_from(["json", "json", "json", "done", "bad_json", "bad_utf8", "field", "eol",
                                 "binary", "huge_line", "big_event", "bom"]))
    if kind == "bom":  # dropped once, first in a stream; data anywhere else
        return draw(st.sampled_from([b"\xef\xbb\xbf", b"\xef\xbb", b"\xef"])), b"", 0, b""
    if kind == "json":
        return _json_event(draw), b"", 0, b""
    if kind == "done":
        return b"data: [DONE]\n\n", b"", 0, b""
    if kind == "bad_json":
        return b"data: {" + draw(st.binary(max_size=12)).replace(b"\n", b"") + b"\n\n", b"", 0, b""
    if kind == "bad_utf8":
        return BAD_UTF8 + draw(st.binary(max_size=4)) + b'"}}]}\n\n', b"", 0, b""
    if kind == "field":
        return draw(st.sampled_from(FIELDS)), b"", 0, b""
    if kind == "eol":
        return draw(st.sampled_from([b"\n", b"\r", b"\r\n", b"\n\n", b"\r\r"])), b"", 0, b""
    if kind == "binary":
        return draw(st.binary(max_size=40)), b"", 0, b""
    if kind == "huge_line":  # a data line around the bound, ended or not
        n = MAX + draw(st.sampled_from([-7, -6, 0, 1, 4096, 2 * MAX]))
        return b"data: ", b"x", n, draw(st.sampled_from([b"", b"\n", b"\n\n"]))
    return b"", b"data: " + b"y" * 4095 + b"\n", draw(st.sampled_from([255, 256, 257, 300])), b"\n"


def build(pieces: list[tuple]) -> bytes:
    return b"".join(head + unit * times + tail for head, unit, times, tail in pieces)


hostile_stream = st.tuples(st.lists(piece(), max_size=12), st.lists(st.integers(0, 4 * MAX), max_size=16))


def judged(parser) -> str | None:
    rec = RequestRecord("r", 0, 1, None, times=Times(t0_ns=1))
    return _conclude(rec, parser, "text/event-stream").outcome.error


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.data_too_large])
@given(stream=hostile_stream, close=st.booleans())
def test_hostile_sse_byte_streams(stream, close):
    pieces, cuts = stream
    whole = build(pieces)
    chunks = split(whole, [c % (len(whole) + 1) for c in cuts])
    py_mod, c_mod = both_cores("benchc.client._stream")
    biggest = max((len(c) for c in chunks), default=0)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        py = feed(py_mod, chunks, close)
        held, peak = (m - base for m in tracemalloc.get_traced_memory())
    finally:
        tracemalloc.stop()
    c = feed(c_mod, chunks, close)
    assert figures(py) == figures(c)
    assert judged(py) == judged(c)
    # what the parser keeps between reads: at most an event's data and a line not ended yet,
    # each within the bound, and its per-chunk figures (an endless line was kept whole before)
    assert held <= 2 * MAX + 64 * 1024 + 200 * py.text_chunks, held
    # at work: a read's copies and the twin's few copies of one bounded line (the line, its
    # value, the joined event)
    assert peak <= 6 * MAX + 3 * biggest + 1024 * 1024, (peak, biggest)


def test_the_decoder_on_its_own_keeps_no_more_than_the_bound():
    d = SSEDecoder()
    for _ in range(40):
        d.feed(b"z" * 65536)
    assert d.oversized == LINE_TOO_LONG and d.buffered == 0



@pytest.mark.parametrize("read_size", [1 << 20, 65_537])  # whole events, and lines across reads
def test_kept_text_past_its_bound_stops_the_stream_at_the_same_event_on_both_cores(read_size):
    """A server that streams past max_tokens for ever: with keep_text (a session's next turn, the
    tokenizer's count) the kept text grew without end. Past MAX_KEPT_TEXT_BYTES the stream
    stops as oversized (TEXT_TOO_LARGE) after the event that passed it, on both cores; the
    connection is closed as for a line past its bound. Without keep_text it is read on."""
    from benchc.client._sse_py import MAX_KEPT_TEXT_BYTES, TEXT_TOO_LARGE, oversized_detail

    piece = 1 << 16
    over = MAX_KEPT_TEXT_BYTES // piece + 1  # the event whose text passes the bound
    stream = text_event("x" * piece) * (over + 3) + b"data: [DONE]\n\n"
    for keep in (True, False):
        seen = []
        for m in both_cores("benchc.client._stream"):
            p = m.StreamParser(keep_text=keep)
            for i in range(0, len(stream), read_size):
                p.feed(stream[i:i + read_size], i + 1)
            p.close(len(stream) + 1)
            seen.append((p.oversized, p.text_chunks, p.text_bytes, len(p.text()) if keep else None))
        assert seen[0] == seen[1]
        if keep:
            assert seen[0] == (TEXT_TOO_LARGE, over, over * piece, over * piece)
        else:
            assert seen[0] == (0, over + 3, (over + 3) * piece, None)
    assert str(MAX_KEPT_TEXT_BYTES) in oversized_detail(TEXT_TOO_LARGE)
