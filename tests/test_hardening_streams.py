"""Hostile streams on the measured path (issue 29, classes 2 and 3), on every HTTP path (the own
reader on each transport, aiohttp) and both cores."""

from __future__ import annotations

import pytest

from benchc.client._sse_py import MAX_SSE_BYTES
from tests.conftest import both_cores
from tests.test_stream_gaps import _paths_and_cores

# --------------------------------------------------------------------------- class 2: memory

# What one endless line may cost a client beyond the line's own bound: the line held (1 MiB),
# the read that passed it, and the copies a core makes of it (the twin joins a read to what it
# holds). Measured here: 1.0 to 1.9 MiB in C, 1.8 to 2.7 MiB on the twins.
LINE_PEAK_KIB = 4 * MAX_SSE_BYTES // 1024


@pytest.mark.slow
@pytest.mark.parametrize("path,core", _paths_and_cores())
def test_one_endless_line_costs_a_bounded_peak_on_every_path(path, core):
    """A server streams one SSE line that never ends, as fast as the client takes it: the
    parser refuses it at MAX_SSE_BYTES (oversized_event, the connection closed), and the
    client process's peak resident size grows by less than LINE_PEAK_KIB while it does."""
    from tests.endless import EndlessServer, read_one

    if core == "c":
        both_cores("benchc.client._stream")  # skips where the compiled core is not built
    with EndlessServer("line") as srv:
        out = read_one(path, srv.url, core, seconds=600)
    assert out["error"] == "oversized_event" and out["text_chunks"] == 0, out
    assert out["grew_kib"] < LINE_PEAK_KIB, out


# --------------------------------------------------------------------------- class 3: unusual but correct

from tests.test_http1 import chunked, sse  # noqa: E402
from tests.test_keepalive import PATHS, run, sequential  # noqa: E402

SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
BOM = b"\xef\xbb\xbf"


def _answer(body: bytes, close: bool = False):
    async def script(n, reader, writer):
        writer.write(body)
        await writer.drain()
        return "close" if close else None
    return script


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("split", [False, True])
def test_a_utf8_bom_before_the_first_event_is_skipped_on_every_path(path, split):
    """WHATWG's event-stream decoding drops one leading BOM; the stream was read as no event
    (the first line's field name was BOM + "data") and judged not_event_stream."""
    events = sse(["a", "b"])[1:]  # no role-only chunk: the first event carries text
    first = [BOM[:1], BOM[1:] + events[0]] if split else [BOM + events[0]]  # split inside the BOM
    body = chunked(first + events[1:])
    records, _, _ = run(sequential(path, _answer(SSE_HEAD + body), 1))
    r = records[0]
    assert (r.outcome.status, r.outcome.error, r.tokens.text_chunks) == (200, None, 2), r.outcome.error_detail


@pytest.mark.parametrize("path", PATHS)
def test_done_without_the_closing_chunk_is_a_complete_answer_on_every_path(path):
    """The stream said it ended ([DONE]) and the server closed without the terminal 0-chunk:
    every event came, so the answer is complete (it was stream_broken); the connection is not
    reused."""
    body = chunked(sse(["a", "b"]))
    assert body.endswith(b"0\r\n\r\n")
    records, srv, _ = run(sequential(path, _answer(SSE_HEAD + body[:-5], close=True), 2))
    assert [(r.outcome.status, r.outcome.error, r.tokens.text_chunks) for r in records] \
        == [(200, None, 2)] * 2, [r.outcome.error_detail for r in records]
    assert srv.connections == 2


@pytest.mark.parametrize("path", PATHS)
def test_a_stream_cut_before_done_stays_stream_broken(path):
    body = chunked(sse(["a", "b"]))
    cut = body[:body.index(b"data: [DONE]")]
    records, _, _ = run(sequential(path, _answer(SSE_HEAD + cut, close=True), 1))
    assert (records[0].outcome.status, records[0].outcome.error) == (200, "stream_broken"), \
        records[0].outcome.error_detail


def _parse(module, chunks: list[bytes], close: bool = True):
    p = module.StreamParser()
    for i, c in enumerate(chunks):
        p.feed(c, 1000 + i)
    if close:
        p.close(1000 + len(chunks))
    return p.events, p.text_chunks, p.malformed, p.first_bytes


@pytest.mark.parametrize("chunks,events", [
    ([BOM + b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'], 1),
    ([BOM[:1], BOM[1:2], BOM[2:] + b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'], 1),
    ([BOM + BOM + b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'], 0),  # only the first is dropped
    ([b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n' + BOM + b"data: [DONE]\n\n"], 1),  # not first
    ([BOM[:2]], 0), ([BOM[:2] + b"data: x"], 0), ([b"\xef", b"data: x"], 0), ([BOM[:2], b"\n"], 0),
    ([b""], 0), ([b"", BOM, b"", b'data: {"choices":[{"delta":{"content":"a"}}]}'], 1),
])
def test_both_cores_drop_one_leading_bom_over_any_split(chunks, events):
    py, c = (_parse(m, chunks) for m in both_cores("benchc.client._stream"))
    assert py == c and py[0] == events, (py, c)
    whole = b"".join(chunks)
    assert py[3] == whole[:200]  # what came, BOM included
