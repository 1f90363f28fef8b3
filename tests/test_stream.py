"""The stream parser on both cores: the compiled fast path must give exactly what the
Python twin (json.loads per event) gives, on real shapes, odd shapes and garbage, over
any split of the byte stream."""

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import REPO, both_cores


def chunk(delta=None, text=None, finish=None, usage=None, spaced=False):
    c = {"index": 0, "logprobs": None, "finish_reason": finish}
    if delta is not None:
        c["delta"] = delta
    if text is not None:
        c["text"] = text
    obj = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
           "choices": [c]}
    if usage is not None:
        obj["usage"] = usage
    return json.dumps(obj, separators=None if spaced else (",", ":"), ensure_ascii=spaced).encode()


VLLM_CHAT = [
    chunk({"role": "assistant", "content": ""}),  # role only: not text
    chunk({"content": " Hello"}),
    chunk({"content": " wörld \"quoted\"\n\tnext"}, spaced=True),
    chunk({"content": "😀 emoji, 中文"}, spaced=True),  # \ud83d\ude00 escapes
    chunk({"reasoning_content": "thinking..."}),
    chunk({"content": None, "reasoning": "r"}),
    chunk({"content": " end"}, finish="length",
          usage={"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11}),
    json.dumps({"id": "x", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 6}}).encode(),
]
ODD = [
    chunk(text=" completion", finish=None),
    chunk(text="", finish="stop"),
    b'{"choices":[{"delta":{"content":"\\ud800 lone surrogate"}}]}',
    b'{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"{}"}}]}}]}',
    b'{"choices":[{"delta":{"content":"x"},"logprobs":{"content":[{"token":"x"}]}}]}',
    b'{"error":{"message":"CUDA out of memory","code":500}}',
    b'{"choices":[{"delta":{"content":"unterminated',
    b"not json at all",
    b"[1, 2, 3]",
    b'{"usage":{"completion_tokens":1.5}}',
    b'{"choices":[{"delta":{"content":"a"},"finish_reason":"st\\u006fp"}]}',
]


def stream_of(events, crlf=False):
    nl = b"\r\n" if crlf else b"\n"
    return b"".join(b"data: " + e + nl + nl for e in events) + b"data: [DONE]" + nl + nl


def measure(mods, data: bytes, cuts):
    stream_mod, hdr_mod = mods
    p = stream_mod.StreamParser()
    bounds = [0, *sorted(set(cuts)), len(data)]
    for i, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False)):
        p.feed(data[a:b], 1_000_000 * (i + 1))
    p.close(10**12)
    itl, per_token, answer = hdr_mod.Histogram(), hdr_mod.Histogram(), hdr_mod.Histogram()
    p.record_gaps(itl, per_token)
    p.record_answer_gaps(answer)
    return (p.first_text_ns, p.last_text_ns, p.done_ns, p.text_chunks, p.text_bytes, p.usage_completion,
            p.usage_prompt, p.finish_reason, p.malformed, p.malformed_example, p.error_event,
            p.multi_token_chunks, p.gaps_ns, p.chunk_tokens, p.events, itl.nonzero(), per_token.nonzero(),
            p.usage_cached, p.server_timings,
            # reasoning models: timing-dependent first, then the counts
            (p.first_reasoning_ns, p.first_answer_ns, p.answer_gaps_ns, answer.nonzero(), p.reasoning_chunks,
             p.usage_reasoning),
            # tool calls, and the events of a type no API has; the Responses API's response id
            (p.first_tool_ns, p.tool_chunks, p.unknown_events, p.response_id))


def cores():
    return list(zip(both_cores("benchc.client._stream"), both_cores("benchc.metrics._hdr"), strict=True))


def test_vllm_chat_stream_is_read_exactly(stream_modules):
    data = stream_of(VLLM_CHAT)
    r = measure(stream_modules, data, range(0, len(data), 50))
    first, last, done, chunks, nbytes, usage, prompt, finish = r[:8]
    assert chunks == 6  # the role-only chunk does not count
    texts = [" Hello", " wörld \"quoted\"\n\tnext", "😀 emoji, 中文", "thinking...", "r", " end"]
    assert nbytes == sum(len(t.encode()) for t in texts)
    assert (usage, prompt, finish) == (6, 5, "length")
    assert done and first < last <= done


def test_odd_shapes_and_garbage(stream_modules):
    r = measure(stream_modules, stream_of(ODD), [])
    malformed, example, error_event = r[8], r[9], r[10]
    assert malformed == 3 and example.startswith(b'{"choices":[{"delta":{"content":"unterminated')
    assert error_event == "CUDA out of memory"
    assert r[7] == "stop"  # an escaped finish_reason is decoded


def test_cores_agree_on_every_fixture():
    for events in (VLLM_CHAT, ODD, VLLM_CHAT + ODD):
        for crlf in (False, True):
            data = stream_of(events, crlf)
            results = [measure(m, data, range(0, len(data), 7)) for m in cores()]
            assert all(r == results[0] for r in results)


def test_line_ends_at_every_offset_agree_on_both_cores():
    """The compiled core finds a line's end (CR, LF or CRLF) 16 bytes at a time: an end at every
    offset of a data line, inside its first block and past several, and a lone CR that ends a
    line in mid-event, read as the twin reads them."""
    for nl in (b"\n", b"\r", b"\r\n"):
        for n in range(0, 40):
            text = json.dumps({"choices": [{"delta": {"content": "x" * n}}]}).encode()
            data = b"".join(b"data: " + text + nl + nl for _ in range(3))
            data += b"data: " + text[:n] + b"\r" + text[n:] + b"\n\n"  # a CR inside the event's data
            results = [measure(m, data, []) for m in cores()]
            assert results[0] == results[1]
            assert results[0][3] == (3 if n else 0)  # the three whole events are read, with text


def test_quotes_and_non_ascii_at_every_offset_agree_on_both_cores():
    """The compiled core finds a string's closing quote, and checks UTF-8, 16 bytes at a time:
    an escaped quote, a closing quote, a multi-byte character and an invalid byte at every
    offset of a string within and across those blocks, read as the twin reads them."""
    events = []
    for n in range(0, 40):
        for piece in (b'\\"', b'\\\\', "é".encode(), "😀".encode(), b"\xff", b"\xe2\x82"):
            text = b"a" * n + piece + b"b" * (n % 7)
            done = b'{"type":"response.output_text.done","text":"' + text + b'","item_id":"m'
            events.append(done + b"x" * n + b'"}')
            events.append(b'{"choices":[{"delta":{"content":"' + text + b'"}}],"id":"' + b"y" * n + b'"}')
    data = stream_of(events)
    results = [measure(m, data, []) for m in cores()]
    assert results[0] == results[1]
    assert results[0][8] == 4 * 40  # each invalid byte (2 pieces x 2 shapes x 40) makes a malformed event


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=4000), max_size=25), st.booleans())
def test_random_splits_give_identical_results_on_both_cores(cuts, crlf):
    """Splits fall anywhere: inside `data:`, inside CRLF, inside multi-byte UTF-8 and escapes."""
    data = stream_of(VLLM_CHAT + ODD, crlf)
    cuts = [c % (len(data) + 1) for c in cuts]
    whole = measure(cores()[0], data, [])
    for m in cores():
        r = measure(m, data, cuts)
        # timestamps depend on the split; every count and value does not
        assert r[3:12] == whole[3:12] and r[13:15] == whole[13:15] and r[19][4:] == whole[19][4:]
    results = [measure(m, data, cuts) for m in cores()]
    assert all(r == results[0] for r in results)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=12), min_size=1, max_size=8), st.booleans())
def test_any_text_content_is_counted_identically(texts, ascii_only):
    events = [json.dumps({"choices": [{"index": 0, "delta": {"content": t}, "finish_reason": None}]},
                         ensure_ascii=ascii_only).encode() for t in texts]
    data = stream_of(events)
    results = [measure(m, data, [len(data) // 3]) for m in cores()]
    assert all(r == results[0] for r in results)
    assert results[0][3] == sum(1 for t in texts if t)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300))
def test_garbage_bytes_never_crash_or_hang(blob):
    data = b"data: " + blob + b"\n\n" + blob
    results = [measure(m, data, [len(data) // 2]) for m in cores()]
    assert all(r == results[0] for r in results)


# Shapes where a fast path that looks for keys by their bytes would go wrong: keys outside
# the delta, nested or repeated keys, escaped quotes and backslashes before a closing quote.
TRICKY = [
    b'{"choices":[{"delta":{},"content":"outside the delta"}]}',
    b'{"choices":[{"delta":{"x":{"content":"nested"}},"finish_reason":null}]}',
    b'{"choices":[{"delta":{"content":"a","content":"b"}}]}',
    b'{"choices":[{"delta":{"content":"say \\"error\\": \\\\"}}]}',
    b'{"choices":[{"delta":{"content":"x"},"logprobs" : {"content":[]}}]}',
    b'{"choices":[{"finish_reason":"error","delta":{"content":"fin"}}]}',
    b'{"usage":{"prompt_tokens_details":{"cached_tokens":3},"completion_tokens":7,"prompt_tokens":2},'
    b'"choices":[]}',
    b'{"choices":[{"delta":{"content":"k\\"ey\\":"}}], "text": "t"}',
    b'{ "choices" : [ { "delta" : { "reasoning" : "r1" , "content" : "" } } ] }',
    b'{"choices":[{"text":null,"delta":{"content":null}}]}',
    b'{"usage":{"completion_tokens":3,"completion_tokens":4}}',
    b'{"usage":{"x":{"completion_tokens":9},"completion_tokens":2}}',
    b'{"choices":[{"delta":{"content":"\\\\"}}]}',
    b'{"a":"\\\\\\"","choices":[{"delta":{"content":"q"}}]}',
    b'{"choices":[{"delta":{"content":"x"}}],"error":null}',
    b'{"delta":{"content":":"}}',
    b'{"choices":[{"delta":{"con\\u0074ent":"escaped key"}}]}',
    b'{"choices":[{"index":0},{"delta":{"content":"second choice"}}]}',
    b'{"choices":[1,{"delta":{"content":"x"}}]}',
    b'{"choices":[{"delta":{"content":"x"}}], junk}',
    b'{"choices":[{"delta":{"content":"x"}}]}}',
    b'{"usage":{"completion_tokens":null}}',
    b'{"usage":{"completion_tokens":-3,"prompt_tokens":2}}',
    b'{"choices":[{"delta":null,"text":"t"}]}',
    b'{"usage":{"prompt_tokens_details":null,"completion_tokens":2}}',
    b'{"usage":{"prompt_tokens_details":{"cached_tokens":-1}},"timings":{"cache_n":true,"prompt_ms":"1"}}',
    b'{"usage":{"prompt_tokens_details":{"cached_tokens":1.0}},"timings":{"prompt_ms":3,"predicted_ms":2.5}}',
    b'{"x":{"timings":{"cache_n":4},"prompt_tokens_details":{"cached_tokens":4}},"timings":null}',
    b'{"choices":[{"delta":{"content":"t"}}],"timings":{"cache_n":4,"prompt_n":1,"predicted_n":1}}',
    b'{"usage":{"completion_tokens":99999999999999999999999,"prompt_tokens":-9223372036854775809}}',
    b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}",  # deeper than json.loads follows: malformed
    # cached tokens and timings no int64 or finite double holds: absent on both cores
    b'{"usage":{"prompt_tokens_details":{"cached_tokens":9223372036854775808}},'
    b'"timings":{"cache_n":9223372036854775807,"prompt_n":99999999999999999999,"prompt_ms":1e400,'
    b'"predicted_ms":' + b"9" * 400 + b'}}',
    # reasoning: which key holds the text, and usage's completion_tokens_details
    b'{"choices":[{"delta":{"reasoning_content":"r","content":"a"}}]}',  # content wins: an answer
    b'{"choices":[{"delta":{"content":null,"reasoning_content":"","reasoning":"r2"}}]}',
    b'{"choices":[{"delta":{"reasoning_content":null}}],"usage":{"completion_tokens":4,'
    b'"completion_tokens_details":{"reasoning_tokens":3,"accepted_prediction_tokens":0}}}',
    b'{"usage":{"completion_tokens_details":{"reasoning_tokens":null},"completion_tokens":2}}',
    b'{"usage":{"completion_tokens_details":{"reasoning_tokens":-1}}}',
    b'{"usage":{"completion_tokens_details":{"reasoning_tokens":2.0}}}',
    b'{"usage":{"completion_tokens_details":{"reasoning_tokens":99999999999999999999}}}',
    b'{"usage":{"completion_tokens_details":{"reasoning_tokens":1},"completion_tokens_details":{}}}',
    b'{"usage":{"completion_tokens_details":{"reasoning_tokens":1,"reasoning_tokens":2}}}',
    b'{"usage":{"completion_tokens_details":null,"completion_tokens":2}}',
    b'{"usage":{"completion_tokens_details":5}}',
    b'{"usage":{"reasoning_tokens":5,"x":{"completion_tokens_details":{"reasoning_tokens":6}}}}',
    b'{"completion_tokens_details":{"reasoning_tokens":7},"usage":{"completion_tokens":1}}',
    b'{"usage":{"completion_tokens_details":{"x":{"reasoning_tokens":8}},"prompt_tokens":1}}',
    b'{"choices":[{"delta":{"reasoning":"r"},"finish_reason":null}],"usage":{"completion_tokens_details":'
    b'{"reasoning_tokens":9}}}',
]


def test_cores_agree_on_tricky_shapes():
    for event in TRICKY:
        data = stream_of([event])
        results = [measure(m, data, []) for m in cores()]
        assert all(r == results[0] for r in results), event


_KEYS = ["choices", "delta", "content", "reasoning_content", "reasoning", "text", "finish_reason",
         "usage", "completion_tokens", "prompt_tokens", "error", "logprobs", "tool_calls", "x",
         "completion_tokens_details", "reasoning_tokens",
         "prompt_tokens_details", "cached_tokens", "timings", "cache_n", "prompt_n", "prompt_ms",
         "predicted_n", "predicted_ms"]
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.text(alphabet='ab "\\\n:{}é😀', max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(_KEYS), inner, max_size=4),
    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(_KEYS), _JSON, max_size=4), st.booleans(), st.booleans())
def test_cores_agree_on_random_json_events(obj, ascii_only, spaced):
    event = json.dumps(obj, ensure_ascii=ascii_only, separators=(", ", ": ") if spaced else (",", ":"))
    data = stream_of([event.encode()])
    results = [measure(m, data, []) for m in cores()]
    assert all(r == results[0] for r in results), event


def test_cores_agree_where_a_chunk_keeps_the_shape_of_the_one_before():
    """The compiled core reads only the text of a chunk whose bytes around the text repeat
    the previous text chunk's; these keep those bytes and change what lies between."""
    head, tail = b'{"id":"c","choices":[{"index":0,"delta":{"content":"', b'"},"finish_reason":null}]}'
    middles = [b"first", b'a\\"b', b'a","content":"b', b'x","reasoning":"y', b"", b"\\ud83d\\ude00",
               b'a"}},{"delta":{"content":"b', b"\\\\", b"tab\\t", b'"', b"\\", b"z"]
    events = [head + m + tail for m in middles]
    for order in (events, events[::-1], events[:1] + events[1:][::2] + events[1:][1::2]):
        data = stream_of(order)
        results = [measure(m, data, []) for m in cores()]
        assert all(r == results[0] for r in results)


STREAMS = os.path.join(REPO, "tests", "data", "streams")


def fixture(name: str) -> bytes:
    with open(os.path.join(STREAMS, name), "rb") as f:
        return f.read()


def test_llama_cpp_timings_and_cached_tokens_on_both_cores():
    """llama-server's last chunk: usage without prompt_tokens_details, and its timings."""
    data = fixture("llama-cpp-chat.sse")
    for m in cores():
        r = measure(m, data, range(0, len(data), 61))
        assert r[3] == 3 and r[5:8] == (3, 55, "length")
        assert r[17] == -1  # no usage.prompt_tokens_details
        assert r[18] == {"cache_n": 50, "prompt_n": 5, "predicted_n": 3, "prompt_ms": 12.847,
                         "predicted_ms": 24.113}
    # a request takes the cached tokens from the timings when usage has none
    from benchc.client.request import _take
    from benchc.metrics.record import RequestRecord

    for stream_mod, _ in cores():
        p = stream_mod.StreamParser()
        p.feed(data, 1)
        rec = RequestRecord("r", 0, 55, None)
        _take(rec, p)
        assert (rec.cache.cached_tokens, rec.cache.cached_source) == (50, "timings")
        assert rec.outcome.server_timings["prompt_ms"] == 12.847


def test_vllm_cached_tokens_on_both_cores():
    data = fixture("vllm-chat.sse")
    for m in cores():
        r = measure(m, data, [len(data) - 40])
        assert r[3] == 3 and r[5:8] == (3, 1043, "length")
        assert (r[17], r[18]) == (1024, None)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=3000), max_size=20))
def test_cores_agree_on_the_server_fixtures_over_any_split(cuts):
    for name in ("llama-cpp-chat.sse", "vllm-chat.sse"):
        data = fixture(name)
        cut = [c % (len(data) + 1) for c in cuts]
        results = [measure(m, data, cut) for m in cores()]
        assert all(r == results[0] for r in results)


def kept_over(data: bytes, cuts) -> list:
    """A keep_text parser of each core, fed `data` split at `cuts` (taken modulo its length)."""
    cuts = sorted({c % (len(data) + 1) for c in cuts})
    parsers = []
    for stream_mod, _ in cores():
        p = stream_mod.StreamParser(keep_text=True)
        bounds = [0, *cuts, len(data)]
        for a, b in zip(bounds, bounds[1:], strict=False):
            p.feed(data[a:b], 1)
        p.close(2)
        parsers.append(p)
    return parsers


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=4000), max_size=10))
def test_kept_text_is_the_same_on_both_cores(cuts):
    """keep_text (a tokenizer counts the output after the point): the text pieces of the fast
    path (raw JSON strings, decoded when asked) and of json.loads (str) join identically."""
    texts = [p.text() for p in kept_over(stream_of(VLLM_CHAT + ODD + TRICKY[:14]), cuts)]
    assert all(t == texts[0] for t in texts)
    assert texts[0].startswith(' Hello wörld "quoted"\n\tnext😀 emoji, 中文thinking...r end completion')
    for stream_mod, _ in cores():
        with pytest.raises(ValueError):
            stream_mod.StreamParser().text()


# Reasoning models: vLLM streams the thinking as `reasoning_content` deltas (newer releases and
# SGLang/llama.cpp as `reasoning`), then the answer as `content`.
THINK_THEN_ANSWER = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"reasoning_content": "Let"}),
    chunk({"reasoning_content": " me"}),  # the same bytes around its text: the shape path
    chunk({"reasoning": " think"}),
    chunk({"content": "Hi"}),
    chunk({"content": " there"}),
    chunk({"content": "!"}, finish="stop"),
    json.dumps({"id": "x", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 6,
                                                    "completion_tokens_details": {"reasoning_tokens": 3}}},
               ).encode(),
]


def fed_one_event_per_ms(stream_mod, events, keep_text=False):
    """A parser fed each event (and [DONE]) as a read of its own, the k-th at k ms."""
    p = stream_mod.StreamParser(keep_text=keep_text)
    for k, e in enumerate([*events, b"[DONE]"], start=1):
        p.feed(b"data: " + e + b"\n\n", k * 1_000_000)
    p.close(10**12)
    return p


def test_reasoning_then_answer_is_told_apart(stream_modules):
    stream_mod, hdr_mod = stream_modules
    p = fed_one_event_per_ms(stream_mod, THINK_THEN_ANSWER, keep_text=True)
    ms = 1_000_000
    assert (p.first_text_ns, p.first_reasoning_ns, p.first_answer_ns) == (2 * ms, 2 * ms, 5 * ms)
    assert (p.text_chunks, p.reasoning_chunks, p.usage_reasoning, p.usage_completion) == (6, 3, 3, 6)
    assert p.gaps_ns == [ms] * 5  # TTFT and ITL stay "text of any kind"
    assert p.answer_gaps_ns == [ms, ms]  # within the answer: not the turn from thinking to answering
    h = hdr_mod.Histogram()
    p.record_answer_gaps(h)
    assert h.nonzero() == [(1000, 2)]
    assert (p.reasoning_text(), p.answer_text()) == ("Let me think", "Hi there!")
    assert p.text() == "Let me thinkHi there!"


def test_interleaved_thinking_answers_from_its_first_content(stream_modules):
    """MiniMax-M2.5 interleaves thinking: the answer starts at the first content chunk, and its
    gaps are those between answer chunks that follow each other."""
    events = [chunk({"reasoning_content": "a"}), chunk({"content": "b"}), chunk({"reasoning_content": "c"}),
              chunk({"content": "d"}), chunk({"content": "e"})]
    p = fed_one_event_per_ms(stream_modules[0], events, keep_text=True)
    assert (p.first_reasoning_ns, p.first_answer_ns, p.reasoning_chunks) == (1_000_000, 2_000_000, 2)
    assert p.answer_gaps_ns == [1_000_000] and p.usage_reasoning == -1
    assert (p.reasoning_text(), p.answer_text()) == ("ac", "bde")


def test_a_stream_without_reasoning_answers_from_its_first_text(stream_modules):
    """Completions (no reasoning fields) and a chat model that does not reason: the answer is
    every text chunk, so its first time and gaps are TTFT's and ITL's."""
    for events in ([chunk(text=" one"), chunk(text=" two"), chunk(text=" three", finish="length")],
                   VLLM_CHAT[:4]):
        p = fed_one_event_per_ms(stream_modules[0], events)
        assert p.first_answer_ns == p.first_text_ns > 0 and p.answer_gaps_ns == p.gaps_ns
        assert (p.first_reasoning_ns, p.reasoning_chunks, p.usage_reasoning) == (0, 0, -1)


def test_a_stream_that_only_reasoned_has_no_answer(stream_modules):
    """max_tokens spent on thinking: no answer chunk at all."""
    usage = {"completion_tokens": 2, "completion_tokens_details": {"reasoning_tokens": 2}}
    events = [chunk({"reasoning_content": "hm"}),
              chunk({"reasoning_content": "m"}, finish="length", usage=usage)]
    p = fed_one_event_per_ms(stream_modules[0], events)
    assert (p.first_answer_ns, p.answer_gaps_ns, p.reasoning_chunks, p.usage_reasoning) == (0, [], 2, 2)


def test_cores_agree_on_reasoning_streams_over_any_split():
    """Reasoning and answer chunks, with continuous usage (completion_tokens_details in every
    chunk, read in place by the compiled core) and without, over every split."""
    def usage(n, r):
        return {"completion_tokens": n, "completion_tokens_details": {"reasoning_tokens": r}}

    cont = [chunk({"reasoning_content": f"r{i}"}, usage=usage(i + 1, i + 1)) for i in range(3)]
    cont += [chunk({"content": f"a{i}"}, usage=usage(4 + i, 3)) for i in range(3)]
    for events in (THINK_THEN_ANSWER, cont, THINK_THEN_ANSWER + cont):
        data = stream_of(events)
        for step in (1, 7, 50, len(data)):
            results = [measure(m, data, range(0, len(data), step)) for m in cores()]
            assert all(r == results[0] for r in results)
            assert results[0][19][4] > 0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=3000), max_size=12))
def test_kept_reasoning_and_answer_are_the_same_on_both_cores(cuts):
    data = stream_of(THINK_THEN_ANSWER + VLLM_CHAT + TRICKY[-16:])
    kept = [(p.reasoning_text(), p.answer_text(), p.text()) for p in kept_over(data, cuts)]
    assert all(k == kept[0] for k in kept)
    assert kept[0][0].startswith("Let me think") and kept[0][1].startswith("Hi there!")


def test_an_error_key_that_is_null_is_no_error_event(stream_modules):
    """`"error": null` beside a healthy chunk made the stream an error event ("None"), on both
    cores (the compiled one hands chunks with an error key to the twin's reading)."""
    data = (b'data: {"choices":[{"delta":{"content":"a"}}],"error":null}\n\n'
            b'data: {"choices":[{"delta":{},"finish_reason":"stop"}],"error":null}\n\ndata: [DONE]\n\n')
    r = measure(stream_modules, data, [])
    assert r[10] is None and r[3] == 1 and r[7] == "stop"
