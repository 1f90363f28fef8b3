"""The response reader (benchc.client._response) on both cores: the head, the body's framing,
the excerpt of a failed status, every failure and its words, over any split of the bytes.
The compiled reader is what the receive loop feeds from its thread; the twin defines it."""

import json
import random

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.conftest import both_cores

CORES = list(zip(both_cores("benchc.client._response"), both_cores("benchc.client._stream"), strict=True))


def sse(texts):
    events = [{"choices": [{"index": 0, "delta": {"content": t}}]} for t in texts]
    events.append({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": len(texts)}})
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def chunked(body: bytes, size: int = 40) -> bytes:
    parts = [body[i:i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


BODY = sse(["Hel", "lo", " wörld", " 😀"])
OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
# (name, bytes on the wire, the connection ends after them: None, "closed" or "reset")
CASES = [
    ("chunked", OK + b"Transfer-Encoding: chunked\r\n\r\n" + chunked(BODY), None),
    ("chunked-then-excess", OK + b"Transfer-Encoding: chunked\r\n\r\n" + chunked(BODY) + b"HTTP/1.1", None),
    ("chunked-close-header", OK + b"Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(BODY),
     "closed"),
    ("lf-only", (OK + b"transfer-encoding: Chunked\r\n\r\n").replace(b"\r\n", b"\n")
     + chunked(BODY).replace(b"\r\n", b"\n"), None),
    ("length", OK + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY, None),
    ("length-too-much", OK + b"content-length:  %d \r\n\r\n" % len(BODY) + BODY + b"junk", None),
    ("last-length-wins", OK + b"Content-Length: 3\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY, None),
    ("read-to-close", b"HTTP/1.0 200 OK\r\n\r\n" + BODY, "closed"),
    ("http10-keep-alive", b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: %d\r\n\r\n"
     % len(BODY) + BODY, None),
    ("continue-first", b"HTTP/1.1 100 Continue\r\nConnection: close\r\n\r\n" + OK
     + b"Transfer-Encoding: chunked\r\n\r\n" + chunked(BODY), None),
    ("continue-alone", b"HTTP/1.1 100 Continue\r\n\r\n", "closed"),
    ("no-content", b"HTTP/1.1 204 No Content\r\n\r\n", None),
    # a 204 or 304 ends at its head whatever its headers say (RFC 9112 6.3); what follows is past it
    ("no-content-framed", b"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n", None),
    ("not-modified-length", b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n", None),
    ("no-content-with-body", b"HTTP/1.1 204 No Content\r\n\r\n" + BODY, None),
    ("status-500", b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 400\r\n\r\n" + b"x" * 400, None),
    ("status-503-chunked", b"HTTP/1.1 503 Busy\r\nTransfer-Encoding: chunked\r\n\r\n"
     + chunked(b'{"error": "overloaded"}'), None),
    ("reset-mid-body", OK + b"Transfer-Encoding: chunked\r\n\r\n" + chunked(BODY)[:-60], "reset"),
    ("closed-mid-body", OK + b"Transfer-Encoding: chunked\r\n\r\n" + chunked(BODY)[:-60], "closed"),
    ("closed-in-head", b"HTTP/1.1 200 OK\r\nTransfer-", "closed"),
    ("closed-before-any", b"", "closed"),
    ("reset-before-any", b"", "reset"),
    ("bad-chunk-size", OK + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n", None),
    ("chunk-without-crlf", OK + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhelloXX\r\n", None),
    ("gzip", b"HTTP/1.1 200 OK\r\nContent-Encoding: GZip\r\nContent-Length: 3\r\n\r\nabc", None),
    ("identity", b"HTTP/1.1 200 OK\r\nContent-Encoding: identity\r\nContent-Length: 0\r\n\r\n", None),
    ("bad-status-line", b"SPDY/9 200 OK\r\n\r\n", None),
    ("bad-status-code", b"HTTP/1.1 2000 OK\r\n\r\n", None),
    ("status-without-reason", b"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", None),
    ("empty-head", b"\r\n\r\n", None),
    # empty lines before a status line are skipped, as aiohttp skips them
    ("empty-lines-first", b"\r\n\n\r\n" + OK + b"Content-Length: 0\r\n\r\n", None),
    ("empty-lines-then-close", b"\r\n\r\n", "closed"),
    ("bad-length", b"HTTP/1.1 200 OK\r\nContent-Length: 12a\r\n\r\n", None),
    ("huge-length", b"HTTP/1.1 200 OK\r\nContent-Length: 1234567890123456789\r\n\r\n", None),
    ("head-too-large", b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"p" * 70_000, None),
    ("header-lookalikes", OK + b"X-Content-Length: 5\r\nContent-Lengthy: 9\r\n  Connection:close\r\n"
     b"Transfer-Encoding: gzip, chunked\r\n\r\n" + chunked(BODY), None),
    # a blank before the colon: an invalid field line (RFC 9112 5.1), refused as aiohttp refuses it
    ("blank-before-colon", OK + b"Transfer-Encoding : chunked\r\n\r\n" + chunked(BODY), None),
    # a folded line (obs-fold) joins the line before it, read as one SP (RFC 9112 5.2), as aiohttp does
    ("folded-framing", OK + b"Transfer-Encoding:\r\n chunked\r\nConnection: keep-alive,\r\n\t close\r\n"
     b"Keep-Alive: timeout=5,\r\n  \r\n max=3\r\n\r\n" + chunked(BODY), None),
    ("folded-length", OK + b"Content-Length: 1\r\n 2\r\n\r\n", None),
    # the first field line led by one SP is a field (as aiohttp reads it); by a tab or more blanks, refused
    ("first-line-sp", b"HTTP/1.1 200 OK\r\n Content-Length: 0\r\n\r\n", None),
    ("first-line-tab", b"HTTP/1.1 200 OK\r\n\tContent-Length: 0\r\n\r\n", None),
    ("first-line-blanks", b"HTTP/1.1 200 OK\n  Content-Length: 0\n\n", None),
    # Keep-Alive (issue 23): the value the keep-alive rules judge, as the last header says it
    ("keep-alive", OK + b"Keep-Alive: timeout=5, max=100\r\nTransfer-Encoding: chunked\r\n\r\n"
     + chunked(BODY), None),
    ("keep-alive-spelled", OK + b"KEEP-ALIVE:\t Timeout=5 ,MAX=3 \r\nkeep-alive-x: max=1\r\n"
     b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY, None),
    ("keep-alive-twice", OK + b"Keep-Alive: max=9\r\nKeep-Alive: timeout=2\r\nContent-Length: 0\r\n\r\n",
     None),
    ("keep-alive-empty", OK + b"Keep-Alive:\r\nContent-Length: 0\r\n\r\n", None),
    ("keep-alive-long", OK + b"Keep-Alive: timeout=1, " + b"x" * 200 + b", max=7\r\n"
     b"Content-Length: 0\r\n\r\n", None),
    ("keep-alive-in-1xx", b"HTTP/1.1 100 Continue\r\nKeep-Alive: max=1\r\n\r\n" + OK
     + b"Content-Length: 0\r\n\r\n", None),
]


def read(reader_mod, stream_mod, wire: bytes, end, cuts):
    parser = stream_mod.StreamParser()
    r = reader_mod.ResponseReader(parser, 5)
    bounds = [0, *sorted(set(cuts)), len(wire)]
    for i, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False)):
        if b > a:
            r.feed(wire[a:b], 1_000 * (i + 1))
    if end == "closed":
        r.lost(None, 10**9)
    elif end == "reset":
        r.lost(ConnectionResetError(104, "Connection reset by peer"), 10**9)
    return (r.status, r.got_bytes, r.keep_alive, r.excerpt, r.finished, r.error, r.end_ns, r.last_rx_ns,
            parser.text_chunks, parser.text_bytes, parser.usage_completion, parser.gaps_ns, parser.done_ns,
            r.keep_alive_header, r.early_reads, r.sent_ns)


@pytest.mark.parametrize("name,wire,end", CASES, ids=[c[0] for c in CASES])
def test_cores_agree_on_every_response(name, wire, end):
    small = 7 if len(wire) < 5000 else len(wire) // 300  # the twin rereads a long head per read
    for cuts in ([], range(0, len(wire), small), range(0, len(wire), 1 + len(wire) // 3)):
        results = [read(r, s, wire, end, cuts) for r, s in CORES]
        assert all(x == results[0] for x in results), name


def test_what_the_twin_reads():
    """The definition, spelled out on the cases that name a figure or a word."""
    import benchc.client._response_py as R
    import benchc.client._stream_py as S

    def one(name):
        wire, end = next((w, e) for n, w, e in CASES if n == name)
        return read(R, S, wire, end, [])

    status, got, keep, excerpt, finished, error, *_, chunks, nbytes, usage, gaps, done = one("chunked")[:13]
    assert (status, keep, finished, error, chunks, usage) == (200, True, True, None, 4, 4) and done
    assert one("chunked-then-excess")[2] is False  # bytes past the end: not reused
    assert one("chunked-close-header")[2] is False
    assert one("http10-keep-alive")[2] is True
    assert one("continue-first")[0] == 200 and one("continue-first")[2] is False  # its close stays
    assert one("continue-alone")[5] == ("stream_broken",
                                        "the server closed the connection inside the response head")
    assert one("closed-before-any")[5] == ("stream_broken",
                                           "the server closed the connection before any response")
    assert one("status-500")[:6] == (500, True, True, b"x" * 300, True, None)
    assert one("read-to-close")[4:6] == (True, None)
    assert one("closed-mid-body")[5] == ("stream_broken", "the server closed the connection mid-response")
    assert one("reset-before-any")[5] == (
        "stream_broken", "ConnectionResetError: [Errno 104] Connection reset by peer before any response")
    assert one("closed-in-head")[5][1].endswith("inside the response head")
    assert one("bad-chunk-size")[5] == ("stream_broken", "bad chunked encoding: bad chunk size line: b'zz'")
    assert one("gzip")[5] == ("stream_broken", "compressed response (gzip) although identity was asked for")
    assert one("identity")[5] is None
    assert one("bad-status-line")[5] == ("stream_broken", "bad status line: b'SPDY/9 200 OK'")
    assert one("bad-status-code")[5][1].startswith("bad status line")
    assert one("bad-length")[5] == ("stream_broken", "bad Content-Length: b'12a'")
    assert one("head-too-large")[5] == ("stream_broken", "response head too large")
    # the indented "Connection:close" is a folded line: part of the value before it (it was read
    # as a header of its own, which aiohttp never did)
    assert one("header-lookalikes")[:6] == (200, True, True, b"", True, None)
    assert one("blank-before-colon")[:6] == (
        None, True, False, b"", True, ("stream_broken", "bad header line: b'Transfer-Encoding : chunked'"))
    assert one("folded-framing")[:6] == (200, True, False, b"", True, None)  # chunked, and closed
    assert one("folded-framing")[8] == 4 and one("folded-framing")[13] == b"timeout=5,  max=3"
    assert one("empty-lines-first")[:6] == (200, True, True, b"", True, None)
    assert one("empty-lines-then-close")[5] == ("stream_broken",
                                                "the server closed the connection inside the response head")
    assert one("first-line-sp")[:6] == (200, True, True, b"", True, None)
    assert one("first-line-tab")[5] == ("stream_broken", "bad header line: b'\\tContent-Length: 0'")
    assert one("first-line-blanks")[5] == ("stream_broken", "bad header line: b'  Content-Length: 0'")
    assert one("folded-length")[5] == ("stream_broken", "bad Content-Length: b'1 2'")
    assert one("no-content-framed")[:6] == (204, True, True, b"", True, None)
    assert one("not-modified-length")[:6] == (304, True, True, b"", True, None)
    assert one("no-content-with-body")[:6] == (204, True, False, b"", True, None)  # not reused
    assert one("header-lookalikes")[8] == 4  # read as chunked
    assert one("chunked")[13] is None  # no Keep-Alive header
    assert one("keep-alive")[13] == b"timeout=5, max=100"
    assert one("keep-alive-spelled")[13] == b"timeout=5 ,max=3"  # lower case, stripped, as the rules read it
    assert one("keep-alive-twice")[13] == b"timeout=2"  # the last one
    assert one("keep-alive-empty")[13] == b""
    assert one("keep-alive-long")[13] == (b"timeout=1, " + b"x" * 200)[:R.KEPT]  # a bounded copy
    assert one("keep-alive-in-1xx")[13] == b"max=1"  # an interim head's counts too (as before the move)


# cases with bytes after the response's end: those bytes
EXCESS = {"chunked-then-excess": b"HTTP/1.1", "length-too-much": b"junk"}


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(CASES), st.lists(st.integers(0, 10**6), max_size=12), st.integers(0, 2**32 - 1))
@example(next(c for c in CASES if c[0] == "length-too-much"), [440], 0)  # a read ends with the response
@example(next(c for c in CASES if c[0] == "chunked-then-excess"), [509], 0)
def test_any_split_gives_the_same_on_both_cores(case, cuts, seed):
    name, wire, end = case
    cuts = [c % (len(wire) + 1) for c in cuts]
    results = [read(r, s, wire, end, cuts) for r, s in CORES]
    assert all(x == results[0] for x in results), name
    # split-independent: everything but the stamps matches the unsplit read
    whole = read(*CORES[0], wire, end, [])
    assert results[0][8:11] == whole[8:11]
    if name in EXCESS and len(wire) - len(EXCESS[name]) in cuts:
        # a read that ends exactly where the response does: the bytes past it come in a later
        # read, the idle connection's to find (the pool peeks before reuse), not the reader's
        assert results[0][:2] + results[0][3:6] == whole[:2] + whole[3:6]
    else:
        assert results[0][:6] == whole[:6]


@pytest.mark.parametrize("cores", CORES, ids=["py", "c"])
def test_a_read_stamped_before_the_send_is_dated_at_the_send(cores):
    """t0 is taken just before the write; a read the kernel stamped earlier (a step of the wall
    clock, which the stamp is moved from) is dated at t0 and counted, on both cores."""
    reader_mod, stream_mod = cores
    parser = stream_mod.StreamParser()
    wire = CASES[0][1]
    r = reader_mod.ResponseReader(parser, 1_000)
    r.feed(wire[:30], 400)  # before the send
    r.feed(wire[30:60], 1_000)  # at it: not early
    r.feed(wire[60:], 2_000)
    assert (r.sent_ns, r.early_reads, r.finished, r.error) == (1_000, 1, True, None)
    assert r.last_rx_ns == 2_000 and parser.first_text_ns >= 1_000


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 2**32 - 1))
def test_garbage_gives_the_same_on_both_cores(blob, seed):
    rng = random.Random(seed)
    for prefix in (b"", OK, OK + b"Transfer-Encoding: chunked\r\n\r\n"):
        wire = prefix + blob
        cuts = [rng.randint(0, len(wire)) for _ in range(3)]
        end = rng.choice([None, "closed", "reset"])
        results = [read(r, s, wire, end, cuts) for r, s in CORES]
        assert all(x == results[0] for x in results)
