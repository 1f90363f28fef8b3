"""A stream's chunk gaps are bounded in memory (issue 29, class 2): the parser keeps the first
GAPS_KEPT of them as a list, and every later one goes straight into the request's own
histograms (its ITL, per-token ITL and answer ITL, in the point's layout) as it arrives, so
that an endless stream of 1-token chunks (2.3 GB at 20 s before) holds constant memory. What
the figures take from a request stays exactly what it was: the point's histograms, per token
and per answer, the session turn's, and the largest gap (the `itl` SLO)."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from benchc.client._stream_py import ANSWER, GAPS_KEPT, REASONING, TOOL
from benchc.metrics.latency import ns_to_us
from tests.conftest import REPO, both_cores, histograms_of


def _event(kind: int, text: str, usage: int | None) -> bytes:
    if kind == TOOL:
        delta = {"tool_calls": [{"index": 0, "function": {"arguments": text}}]}
    else:
        delta = {"reasoning_content" if kind == REASONING else "content": text}
    obj: dict = {"choices": [{"index": 0, "delta": delta}]}
    if usage is not None:
        obj["usage"] = {"prompt_tokens": 3, "completion_tokens": usage}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def long_stream(n: int, seed: int) -> tuple[list[tuple[bytes, int]], list[int], list[int], list[int]]:
    """n text chunks: reasoning, then an answer with tool-call pieces in it; continuous usage on
    most chunks (1 to 3 tokens each), none on some; gaps from 0 (two chunks in one read) to
    seconds. The reads as (bytes, arrival ns), and per chunk its arrival, kind and tokens."""
    rng = random.Random(seed)
    reads: list[tuple[bytes, int]] = []
    times, kinds, tokens = [], [], []
    now, usage = 10**9, 0
    for i in range(n):
        kind = REASONING if i < n // 10 else TOOL if rng.random() < 0.05 else ANSWER
        k = rng.choice([1, 1, 1, 2, 3])
        if rng.random() < 0.2:  # a chunk without usage: its tokens are unknown
            data, tok = _event(kind, "x" * k, None), -1
        else:
            usage += k
            data, tok = _event(kind, "x" * k, usage), k
        same_read = reads and rng.random() < 0.1
        if same_read:
            reads[-1] = (reads[-1][0] + data, now)
        else:
            now += rng.choice([1, 999, 1500, 40_000, 2_000_000, 3 * 10**9 + 7])
            reads.append((data, now))
        times.append(now)
        kinds.append(kind)
        tokens.append(tok)
    # continuous usage's tokens count from the last usage seen, which a chunk without usage skips
    return reads, times, kinds, tokens


def expected(hdr_module, times, kinds, tokens):
    itl, per_token, answer = hdr_module.Histogram(), hdr_module.Histogram(), hdr_module.Histogram()
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    for i, g in enumerate(gaps):
        itl.record(ns_to_us(g))
        if tokens[i + 1] > 0:
            per_token.record(ns_to_us(g // tokens[i + 1]), tokens[i + 1])
        if kinds[i] == ANSWER and kinds[i + 1] == ANSWER:
            answer.record(ns_to_us(g))
    return gaps, itl, per_token, answer


def state(h) -> tuple:
    return h.nonzero(), h.total_count, h.out_of_range, h.min_value, h.max_value


@pytest.mark.parametrize("n", [5, GAPS_KEPT, GAPS_KEPT + 1, GAPS_KEPT + 2, GAPS_KEPT + 3000])
def test_a_long_streams_gaps_reach_every_histogram_exactly(stream_modules, n):
    stream_mod, hdr_mod = stream_modules
    reads, times, kinds, tokens = long_stream(n, seed=n)
    p = stream_mod.StreamParser()
    for data, now in reads:
        p.feed(data, now)
    p.close(times[-1] + 1)
    gaps, want_itl, want_token, want_answer = expected(hdr_mod, times, kinds, tokens)
    itl, per_token, answer, session_itl = (hdr_mod.Histogram() for _ in range(4))
    p.record_gaps(itl, per_token)
    p.record_answer_gaps(answer)
    p.record_gaps(session_itl)  # a session's turn records the same gaps again, into its own
    assert state(itl) == state(want_itl) == state(session_itl)
    assert state(per_token) == state(want_token)
    assert state(answer) == state(want_answer)
    assert p.text_chunks == n and p.max_gap_ns == max(gaps)
    # the first GAPS_KEPT gaps stay readable as a list, with their chunks' tokens
    assert p.gaps_ns == gaps[:GAPS_KEPT]
    assert p.chunk_tokens == tokens[:GAPS_KEPT + 1]


def test_both_cores_agree_on_a_long_stream():
    reads, times, _, _ = long_stream(GAPS_KEPT + 500, seed=7)
    results = []
    for stream_mod, hdr_mod in zip(both_cores("benchc.client._stream"), both_cores("benchc.metrics._hdr"),
                                   strict=True):
        p = stream_mod.StreamParser()
        for data, now in reads:
            p.feed(data, now)
        hists = [hdr_mod.Histogram() for _ in range(3)]
        p.record_gaps(hists[0], hists[1])
        p.record_answer_gaps(hists[2])
        results.append(([state(h) for h in hists], p.max_gap_ns, p.gaps_ns, p.chunk_tokens, p.answer_gaps_ns))
    assert results[0] == results[1]


def test_the_twin_records_into_the_compiled_histograms_too():
    """The receive loop's twin reads with the Python parser into the point's histograms, which
    are compiled where the core is built: a long stream's gaps reach those too."""
    py_stream, _ = both_cores("benchc.client._stream")
    _, c_hdr = both_cores("benchc.metrics._hdr")
    reads, times, kinds, tokens = long_stream(GAPS_KEPT + 100, seed=3)
    with histograms_of("c"):  # where the core is built (its gaps past GAPS_KEPT spill into them too)
        p = py_stream.StreamParser()
        for data, now in reads:
            p.feed(data, now)
        _, want_itl, want_token, want_answer = expected(c_hdr, times, kinds, tokens)
        itl, per_token, answer = c_hdr.Histogram(), c_hdr.Histogram(), c_hdr.Histogram()
        p.record_gaps(itl, per_token)
        p.record_answer_gaps(answer)
    assert (state(itl), state(per_token), state(answer)) == (state(want_itl), state(want_token),
                                                             state(want_answer))


def test_no_gap_at_all_and_one_gap():
    for stream_mod in both_cores("benchc.client._stream"):
        p = stream_mod.StreamParser()
        p.feed(_event(ANSWER, "a", None), 5)
        assert (p.text_chunks, p.max_gap_ns, p.gaps_ns) == (1, 0, [])
        p.feed(_event(ANSWER, "b", None), 5)  # the same read's time: a gap of 0
        assert (p.text_chunks, p.max_gap_ns, p.gaps_ns) == (2, 0, [0])


ENDLESS_CHUNKS = """
import sys
sys.path.insert(0, {repo!r})
import importlib
m = importlib.import_module("benchc.client._stream_" + sys.argv[1])
n = int(sys.argv[2])
def hwm():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
event = b'data: {{"choices":[{{"index":0,"delta":{{"content":"a"}}}}]}}\\n\\n'
p = m.StreamParser()
for i in range(1000):  # the parser's own start, before the baseline
    p.feed(event, 1000 + i * 1_000_003)
base = hwm()
for i in range(1000, n):  # one chunk a read, each at its own time
    p.feed(event, 1000 + i * 1_000_003)
print(p.text_chunks, hwm() - base)
"""


@pytest.mark.parametrize("core,chunks", [("py", 80_000), ("c", 1_000_000)])
def test_an_endless_stream_of_one_token_chunks_holds_constant_memory(core, chunks):
    """The process's peak resident size (the C core's arrays are malloc'd, out of tracemalloc's
    sight) while a stream of one-token chunks comes in: it kept every gap, its chunk's tokens and
    kind (17 bytes a chunk in C, about 55 in the twin: 16.6 MB and 4.4 MB here) and now stays
    within a bound that does not depend on the chunks: GAPS_KEPT of them and the histograms
    (80 and 240 KiB here)."""
    both_cores("benchc.client._stream")  # skips where the compiled core is not built
    out = subprocess.run([sys.executable, "-c", ENDLESS_CHUNKS.format(repo=REPO), core, str(chunks)],
                         capture_output=True, text=True, timeout=300, check=True).stdout.split()
    read, grew_kib = int(out[0]), int(out[1])
    assert read == chunks
    assert grew_kib < 2 * 1024, f"peak RSS grew {grew_kib} KiB over {chunks} chunks"


@pytest.mark.parametrize("core", ["py", "c"])
def test_the_itl_slo_sees_the_largest_gap_past_the_kept_ones(core):
    """A request meets an `itl` SLO when its largest chunk gap does: a gap past GAPS_KEPT counts."""
    from benchc.metrics.record import RequestRecord, Times, Tokens
    from benchc.metrics.recorder import PointRecorder
    from benchc.spec.thresholds import parse_threshold

    stream_mod = both_cores("benchc.client._stream")[0 if core == "py" else 1]
    slo = [parse_threshold("itl", "max < 50ms")]
    met = []
    for late_ms in (10, 90):  # the last gap: within the SLO, then past it
        p = stream_mod.StreamParser()
        now = 10**9
        for i in range(GAPS_KEPT + 10):
            now += late_ms * 10**6 if i == GAPS_KEPT + 9 else 10**6
            p.feed(_event(ANSWER, "a", None), now)
        p.feed(b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n', now)
        r = RequestRecord("r", 0, 1, None, parser=p,
                          times=Times(t0_ns=10**9 - 5, first_text_ns=p.first_text_ns, end_ns=now),
                          tokens=Tokens(text_chunks=p.text_chunks))
        with histograms_of(core):
            rec = PointRecorder(target_inflight=1)
            rec.add(r, slo)
        met.append(rec.tally.slo_met)
        assert p.max_gap_ns == late_ms * 10**6 and len(p.gaps_ns) == GAPS_KEPT
    assert met == [1, 0]


def _paths_and_cores() -> list[tuple[str, str]]:
    from tests.test_keepalive import PATHS

    out = [(p, "c") for p in PATHS]
    out += [(p, "py") for p in PATHS if p != "native-rx-c"]  # the compiled loop runs the compiled parser
    return out


@pytest.mark.slow
@pytest.mark.parametrize("path,core", _paths_and_cores())
def test_one_endless_stream_of_one_token_chunks_on_every_path(path, core):
    """The server writes one-token chunks as fast as the client reads them; the client process
    reads one such answer (cancelled once it has read `chunks`: 17 MB of gaps a million before)
    and its peak resident size grows by less than the bound."""
    from tests.endless import EndlessServer, read_one

    if core == "c":
        both_cores("benchc.client._stream")  # skips where the compiled core is not built
    # the Python parser reads about 20k chunks a second here: fewer for it (5 MB before)
    chunks = 1_000_000 if core == "c" and path != "native-rx-py" else 100_000
    with EndlessServer("tokens") as srv:
        out = read_one(path, srv.url, core, chunks=chunks)
    assert out["error"] == "cancelled" and out["text_chunks"] >= chunks, out
    assert out["grew_kib"] < 3 * 1024, out
