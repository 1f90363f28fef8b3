"""The stream parser on the APIs beyond chat text: tool calls in chat streams, the Responses
API's events and the Messages API's events, on both cores, over any split of the bytes."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchc.client.request import _conclude
from benchc.metrics.record import RequestRecord, Times
from tests.conftest import core_of, histograms_of
from tests.test_stream import chunk, cores, fed_one_event_per_ms, fixture, kept_over, measure, stream_of

MS = 1_000_000


def tool_call(index=0, name=None, arguments=None, call_id=None):
    fn = {}
    if name is not None:
        fn["name"] = name
    if arguments is not None:
        fn["arguments"] = arguments
    call = {"index": index, "function": fn}
    if call_id is not None:
        call.update(id=call_id, type="function")
    return {"tool_calls": [call]}


# vLLM's chat stream answered by a tool call (serving_chat.py with a tool parser): the role,
# the call's id and name with empty arguments, the argument pieces, the finish, the usage.
CHAT_TOOL_CALL = [
    chunk({"role": "assistant", "content": ""}),
    chunk(tool_call(name="get_weather", arguments="", call_id="chatcmpl-tool-1")),
    chunk(tool_call(arguments='{"city": ')),
    chunk(tool_call(arguments='"Paris"}')),
    chunk({}, finish="tool_calls"),
    json.dumps({"id": "x", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 7,
                                                    "prompt_tokens_details": {"cached_tokens": 4}}}).encode(),
]


def test_a_chat_stream_answered_by_a_tool_call_is_output(stream_modules):
    p = fed_one_event_per_ms(stream_modules[0], CHAT_TOOL_CALL, keep_text=True)
    firsts = (p.first_text_ns, p.first_tool_ns, p.first_answer_ns, p.first_reasoning_ns)
    assert firsts == (2 * MS, 2 * MS, 0, 0)
    assert (p.text_chunks, p.tool_chunks, p.finish_reason) == (3, 3, "tool_calls")
    assert (p.usage_completion, p.usage_prompt, p.usage_cached) == (7, 9, 4)
    assert p.tool_text() == 'get_weather{"city": "Paris"}' and p.answer_text() == ""
    assert p.gaps_ns == [MS, MS] and p.answer_gaps_ns == []
    # never empty_output: a tool call is an answer
    rec = RequestRecord("r", 0, 9, None, times=Times(t0_ns=MS // 2, end_ns=7 * MS))
    _conclude(rec, p, "text/event-stream")
    assert rec.outcome.error is None and rec.output_tokens == 7 and rec.outcome.finish_reason == "tool_calls"


def test_text_then_a_tool_call(stream_modules):
    events = [chunk({"content": "Let me look."}), chunk(tool_call(name="f", arguments="{}", call_id="c")),
              chunk(tool_call(index=1, name="g", arguments="{}", call_id="d"), finish="tool_calls")]
    p = fed_one_event_per_ms(stream_modules[0], events, keep_text=True)
    assert (p.first_text_ns, p.first_answer_ns, p.first_tool_ns, p.tool_chunks) == (MS, MS, 2 * MS, 2)
    assert (p.answer_text(), p.tool_text()) == ("Let me look.", "f{}g{}")


def test_vllm_responses_stream_is_read_exactly(stream_modules):
    """Captured from vLLM 0.32's /v1/responses (a prompt whose first 160 tokens were cached)."""
    data = fixture("vllm-responses.sse")
    r = measure(stream_modules, data, range(0, len(data), 97))
    assert r[3] == 4 and r[5:8] == (4, 163, "length")  # response.completed, incomplete_details
    assert r[17] == 160 and r[19][5] == 0 and r[20][2] == 0 and r[8] == 0
    assert r[20][3] == "resp_8b00250bf2defc97"  # what a later request names as previous_response_id


def test_vllm_messages_stream_is_read_exactly(stream_modules):
    """Captured from vLLM 0.32's /v1/messages: message_start's input_tokens is the whole prompt,
    message_delta's the uncached part beside cache_read_input_tokens (Anthropic's meaning)."""
    data = fixture("vllm-messages.sse")
    r = measure(stream_modules, data, range(0, len(data), 89))
    assert r[3] == 4 and r[5:8] == (4, 163, "length")  # stop_reason max_tokens
    assert r[17] == 160 and r[20][2] == 0 and r[8] == 0 and r[20][3] is None


def responses(kind, **fields):
    return json.dumps({"type": kind, "sequence_number": 1, **fields}).encode()


def message(kind, **fields):
    return json.dumps({"type": kind, **fields}).encode()


RESPONSES_TOOL = [
    responses("response.created", response={"status": "in_progress", "usage": None}),
    responses("response.output_item.added", output_index=0,
              item={"type": "reasoning", "id": "rs_1", "summary": []}),
    responses("response.reasoning_text.delta", item_id="rs_1", output_index=0, content_index=0,
              delta="Think"),
    responses("response.reasoning_summary_text.delta", item_id="rs_1", output_index=0, summary_index=0,
              delta="ing"),
    responses("response.output_item.added", output_index=1,
              item={"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
                    "arguments": "", "status": "in_progress"}),
    responses("response.function_call_arguments.delta", item_id="fc_1", output_index=1, delta='{"city":'),
    responses("response.function_call_arguments.delta", item_id="fc_1", output_index=1, delta='"Oslo"}'),
    responses("response.function_call_arguments.done", item_id="fc_1", output_index=1,
              arguments='{"city":"Oslo"}'),
    responses("response.brand_new_event", x=1),
    responses("response.completed", response={
        "status": "completed", "incomplete_details": None,
        "output": [{"type": "reasoning"}, {"type": "function_call", "name": "get_weather"}],
        "usage": {"input_tokens": 20, "input_tokens_details": {"cached_tokens": 16}, "output_tokens": 9,
                  "output_tokens_details": {"reasoning_tokens": 2}, "total_tokens": 29}}),
]


def test_responses_reasoning_and_a_function_call(stream_modules):
    p = fed_one_event_per_ms(stream_modules[0], RESPONSES_TOOL, keep_text=True)
    assert (p.first_text_ns, p.first_reasoning_ns, p.first_tool_ns, p.first_answer_ns) == (3 * MS, 3 * MS,
                                                                                           5 * MS, 0)
    assert (p.text_chunks, p.reasoning_chunks, p.tool_chunks, p.unknown_events) == (5, 2, 3, 1)
    assert (p.usage_completion, p.usage_prompt, p.usage_cached, p.usage_reasoning) == (9, 20, 16, 2)
    assert p.finish_reason == "tool_calls" and p.error_event is None
    assert (p.reasoning_text(), p.tool_text()) == ("Thinking", 'get_weather{"city":"Oslo"}')


MESSAGES_TOOL = [
    message("message_start", message={"id": "m", "type": "message", "role": "assistant", "content": [],
                                      "usage": {"input_tokens": 5, "cache_read_input_tokens": 30,
                                                "cache_creation_input_tokens": 0, "output_tokens": 1}}),
    message("ping"),
    message("content_block_start", index=0, content_block={"type": "thinking", "thinking": ""}),
    message("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": "Hm"}),
    message("content_block_delta", index=0, delta={"type": "signature_delta", "signature": "abc"}),
    message("content_block_stop", index=0),
    message("content_block_start", index=1, content_block={"type": "text", "text": ""}),
    message("content_block_delta", index=1, delta={"type": "text_delta", "text": "Sure."}),
    message("content_block_stop", index=1),
    message("content_block_start", index=2, content_block={"type": "tool_use", "id": "toolu_1",
                                                           "name": "get_weather", "input": {}}),
    message("content_block_delta", index=2, delta={"type": "input_json_delta", "partial_json": '{"city"'}),
    message("content_block_delta", index=2, delta={"type": "input_json_delta", "partial_json": ':"Rome"}'}),
    message("content_block_stop", index=2),
    message("message_delta", delta={"stop_reason": "tool_use", "stop_sequence": None},
            usage={"output_tokens": 12}),
    message("message_stop"),
]


def test_messages_thinking_text_and_a_tool_use(stream_modules):
    p = fed_one_event_per_ms(stream_modules[0], MESSAGES_TOOL, keep_text=True)
    assert (p.first_text_ns, p.first_reasoning_ns, p.first_answer_ns, p.first_tool_ns) == (4 * MS, 4 * MS,
                                                                                           8 * MS, 10 * MS)
    assert (p.text_chunks, p.reasoning_chunks, p.tool_chunks, p.unknown_events) == (5, 1, 3, 0)
    # input_tokens are the uncached part: the prompt is 35 tokens, 30 of them cached
    assert (p.usage_completion, p.usage_prompt, p.usage_cached) == (12, 35, 30)
    assert p.finish_reason == "tool_calls"
    kept = (p.reasoning_text(), p.answer_text(), p.tool_text())
    assert kept == ("Hm", "Sure.", 'get_weather{"city":"Rome"}')


def test_errors_and_unfinished_responses(stream_modules):
    mod = stream_modules[0]
    failed = responses("response.failed", response={"status": "failed", "error": {"code": "server_error",
                                                                                  "message": "engine died"}})
    p = fed_one_event_per_ms(mod, [responses("response.output_text.delta", delta="a"), failed])
    assert p.error_event == "engine died"
    p = fed_one_event_per_ms(mod, [responses("error", code="x", message="bad request", param=None)])
    assert p.error_event == "bad request" and p.text_chunks == 0
    overloaded = message("error", error={"type": "overloaded_error", "message": "Overloaded"})
    p = fed_one_event_per_ms(mod, [overloaded])
    assert p.error_event == "Overloaded"
    cut = responses("response.incomplete", response={
        "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
        "usage": {"input_tokens": 3, "output_tokens": 1}})
    p = fed_one_event_per_ms(mod, [responses("response.output_text.delta", delta="a"), cut])
    assert (p.finish_reason, p.usage_completion) == ("length", 1)


def test_unknown_event_types_are_skipped_and_counted(stream_modules):
    events = [message("message_start", message={"usage": {"input_tokens": 2}}),
              message("content_block_delta", index=0, delta={"type": "text_delta", "text": "a"}),
              message("a_future_event", text="not output"), responses("response.future.delta", delta="no"),
              chunk({"content": "b"}), json.dumps({"type": "mystery", "delta": "x"}).encode()]
    p = fed_one_event_per_ms(stream_modules[0], events)
    assert (p.unknown_events, p.text_chunks, p.malformed) == (3, 2, 0)


API_STREAMS = [CHAT_TOOL_CALL, RESPONSES_TOOL, MESSAGES_TOOL]


def test_cores_agree_on_every_api_stream():
    for events in [*API_STREAMS, RESPONSES_TOOL + MESSAGES_TOOL + CHAT_TOOL_CALL]:
        for crlf in (False, True):
            data = stream_of(events, crlf)
            for step in (1, 13, len(data)):
                results = [measure(m, data, range(0, len(data), step)) for m in cores()]
                assert all(r == results[0] for r in results)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=6000), max_size=20), st.sampled_from(
    ["vllm-responses.sse", "vllm-messages.sse", None]))
def test_cores_agree_on_the_apis_over_any_split(cuts, name):
    data = fixture(name) if name else stream_of(RESPONSES_TOOL + MESSAGES_TOOL + CHAT_TOOL_CALL)
    cut = [c % (len(data) + 1) for c in cuts]
    results = [measure(m, data, cut) for m in cores()]
    assert all(r == results[0] for r in results)
    kept = [(p.text(), p.answer_text(), p.reasoning_text(), p.tool_text()) for p in kept_over(data, cuts)]
    assert all(k == kept[0] for k in kept)


_TYPES = ["response.output_text.delta", "response.reasoning_text.delta",
          "response.function_call_arguments.delta",
          "response.reasoning_summary_text.delta", "response.completed", "response.output_item.added",
          "content_block_delta", "content_block_start", "message_start", "message_delta", "error", "ping",
          "text_delta", "thinking_delta", "input_json_delta", "tool_use", "x", "response.incomplete",
          "response.output_text.done", "function_call", "max_output_tokens", "end_turn", "max_tokens",
          "stop_sequence", "response.function_call_arguments.done"]
_KEYS = ["type", "delta", "text", "thinking", "partial_json", "usage", "choices", "response", "item",
         "content_block", "message", "name", "output_tokens", "input_tokens", "cache_read_input_tokens",
         "stop_reason", "error", "message", "output", "tool_calls", "function", "arguments", "index", "id",
         "incomplete_details", "reason", "input_tokens_details", "cached_tokens", "output_tokens_details",
         "reasoning_tokens", "cache_creation_input_tokens"]
_VALUES = st.recursive(
    st.none() | st.integers(-3, 50) | st.sampled_from(_TYPES) | st.text(alphabet='ab "\\é😀', max_size=5),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from(_KEYS), inner, max_size=4),
    max_leaves=10)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=4), st.booleans(), st.booleans())
def test_cores_agree_on_random_typed_events(obj, ascii_only, spaced):
    """Events with the Responses and Messages APIs' keys and type names, any values: the
    compiled core's in-place reading of their deltas gives the twin's results."""
    event = json.dumps(obj, ensure_ascii=ascii_only, separators=(", ", ": ") if spaced else (",", ":"))
    data = stream_of([event.encode()] * 2)
    results = [measure(m, data, []) for m in cores()]
    assert all(r == results[0] for r in results), event


def test_cores_agree_where_only_a_counter_in_the_tail_changes():
    """The compiled core reads a Responses delta whose bytes after the text differ from the
    previous one's only in digits (its sequence_number) as the same shape; a letter or a
    length that changed is another shape. (Invalid JSON that passes the compiled core's screen,
    such as a number with a leading zero, is outside what the cores agree on, as on chat.)"""
    head = b'{"content_index":0,"delta":"'

    def tail(n):
        return (b'","item_id":"msg_1","output_index":0,"sequence_number":' + n
                + b',"type":"response.output_text.delta"}')

    numbers = [b"5", b"6", b"7", b"10", b"11", b"1e1", b"12", b"0", b"9", b"-1", b"8", b"19", b"20"]
    texts = [b"a", b"b", b'c\\"', b"\\u00e9", b"d"]
    events = [head + texts[i % len(texts)] + tail(n) for i, n in enumerate(numbers)]
    events.insert(5, head + b"x" + tail(b"11").replace(b"msg_1", b"msg_2"))
    for order in (events, events[::-1]):
        data = stream_of(order)
        results = [measure(m, data, []) for m in cores()]
        assert all(r == results[0] for r in results)
        assert results[0][3] == len(events) and results[0][8] == 0


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["", "f", "get_x"]), st.text(alphabet='ab "{}:\\é😀', max_size=6),
                          st.booleans()), min_size=1, max_size=8))
def test_cores_agree_on_tool_call_argument_pieces(pieces):
    """Chat deltas of tool calls with names and argument pieces of any text, one call or two per
    delta: the compiled core reads a call's argument pieces in place once the twin has read one
    (the stream's shape), and gives the twin's results."""
    events = []
    for name, args, two in pieces:
        calls = [{"index": 0, "function": {"arguments": args, **({"name": name} if name else {})}}]
        if two:
            calls.append({"index": 1, "function": {"arguments": args[::-1]}})
        events.append(chunk({"tool_calls": calls}))
        events.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": args + "z"}}]}))
    data = stream_of(events)
    results = [measure(m, data, []) for m in cores()]
    assert all(r == results[0] for r in results)
    kept = [(p.tool_text(), p.text()) for p in kept_over(data, [])]
    assert all(k == kept[0] for k in kept)


def test_a_point_counts_tool_calls_and_unknown_events_and_reads_them_back(stream_modules):
    """The point's stream block and its time to first tool call, from the records of two
    requests (a tool call, and text with an unknown event); the tally read back from the
    result point gives the same block (shards and merges add it)."""
    from benchc.metrics.aggregate import Tally
    from benchc.metrics.recorder import PointRecorder

    with histograms_of(core_of(stream_modules[0])):  # the recorder's on this core too
        rec = PointRecorder(2)
        for events in (CHAT_TOOL_CALL, [chunk({"content": "a"}), message("mystery"),
                                        chunk({"content": "b"}, finish="stop")]):
            p = fed_one_event_per_ms(stream_modules[0], events)
            r = RequestRecord("r", 0, 9, None, parser=p, times=Times(t0_ns=MS // 2, end_ns=9 * MS))
            _conclude(r, p, "text/event-stream")  # copies the parser's measures (request._take)
            rec.add(r)
    point = rec.summary()
    assert point["stream"] == {"tool_call_requests": 1, "tool_call_finishes": 1, "unknown_events": 1}
    assert point["latency"]["ttf_tool_call_us"]["count"] == 1
    again = Tally.from_point({**point, "latency": point["latency"]})
    assert again.stream.block() == point["stream"]


# The events a response sends once (its end, usage, a tool call's name), which the compiled
# core reads in place: every value benchc reads drawn from its usual shapes and the odd ones
# (null, negative, floats, strings with escapes, very long or non-ASCII reasons)
_COUNT = (st.none() | st.integers(-2, 2**53) | st.sampled_from([0, 7, 4096])
          | st.floats(0, 10, allow_nan=False) | st.just("7"))
_WORD = st.none() | st.integers(0, 3) | st.text(alphabet='ab_"\\é😀', max_size=6) | st.sampled_from(
    ["function_call", "tool_use", "message", "text", "max_output_tokens", "content_filter", "end_turn",
     "stop_sequence", "max_tokens", "resp_1", "x" * 120, "get_weather", ""])


def _maybe(d):
    return st.fixed_dictionaries({}, optional=d)


_RESPONSE_END = st.fixed_dictionaries({
    "type": st.sampled_from(["response.completed", "response.incomplete"]),
    "response": st.none() | _maybe({
        "id": _WORD, "status": _WORD,
        "usage": st.none() | _maybe({
            "input_tokens": _COUNT, "output_tokens": _COUNT,
            "input_tokens_details": st.none() | _maybe({"cached_tokens": _COUNT}),
            "output_tokens_details": st.none() | _maybe({"reasoning_tokens": _COUNT})}),
        "incomplete_details": st.none() | _maybe({"reason": _WORD}),
        "output": st.none() | st.lists(st.none() | _maybe({"type": _WORD, "name": _WORD}), max_size=3)})},
    optional={"sequence_number": st.integers(0, 99)})
_ITEM_ADDED = st.fixed_dictionaries({
    "type": st.just("response.output_item.added"),
    "item": st.none() | _WORD | _maybe({"type": _WORD, "name": _WORD, "id": _WORD})},
    optional={"output_index": st.integers(0, 3)})
_MESSAGES_USAGE = st.none() | _maybe({"input_tokens": _COUNT, "output_tokens": _COUNT,
                                      "cache_read_input_tokens": _COUNT,
                                      "cache_creation_input_tokens": _COUNT})
_MESSAGE_START = st.fixed_dictionaries({
    "type": st.just("message_start"),
    "message": st.none() | _maybe({"id": _WORD, "usage": _MESSAGES_USAGE})})
_MESSAGE_DELTA = st.fixed_dictionaries({"type": st.just("message_delta")}, optional={
    "delta": st.none() | _maybe({"stop_reason": _WORD, "stop_sequence": _WORD}), "usage": _MESSAGES_USAGE})
_BLOCK_START = st.fixed_dictionaries({"type": st.just("content_block_start")}, optional={
    "content_block": st.none() | _maybe({"type": _WORD, "name": _WORD, "input": st.just({})}),
    "index": st.integers(0, 3)})


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(_RESPONSE_END, _ITEM_ADDED, _MESSAGE_START, _MESSAGE_DELTA, _BLOCK_START),
                min_size=1, max_size=3), st.booleans(), st.booleans())
def test_cores_agree_on_the_events_a_response_sends_once(events, ascii_only, spaced):
    """The compiled core reads these events in place (the twin with json.loads): the same
    usage, cached tokens, finish, tool-call chunks, response id, and kept text."""
    seps = (", ", ": ") if spaced else (",", ":")
    data = stream_of([json.dumps(e, ensure_ascii=ascii_only, separators=seps).encode() for e in events])
    results = [measure(m, data, []) for m in cores()]
    assert all(r == results[0] for r in results), data
    kept = [(p.text(), p.tool_text(), p.response_id) for p in kept_over(data, [])]
    assert all(k == kept[0] for k in kept), data


# Two parallel calls whose pieces alternate (issue 44): get_weather {"city":"Paris"} and search
# {"q":"x"}, each piece tagged with its call's index. Chat names it in tool_calls[].index,
# Responses in output_index (here after the delta, where a learned shape's tail holds it),
# Messages in the content block's index.
INTERLEAVED_CALLS = [(0, "get_weather"), (1, "search"), (0, '{"city":'), (1, '{"q":'), (0, '"Paris"}'),
                     (1, '"x"}')]
INTERLEAVED = {
    "chat": [chunk(tool_call(i, name=t, arguments="", call_id=f"c{i}") if k < 2
                   else tool_call(i, arguments=t)) for k, (i, t) in enumerate(INTERLEAVED_CALLS)],
    "responses": [
        responses("response.output_item.added", output_index=i,
                  item={"type": "function_call", "id": f"fc_{i}", "name": t, "arguments": ""}) if k < 2
        else json.dumps({"type": "response.function_call_arguments.delta", "delta": t, "item_id": "fc_1",
                         "output_index": i, "sequence_number": 10 + k}).encode()
        for k, (i, t) in enumerate(INTERLEAVED_CALLS)],
    "messages": [
        message("content_block_start", index=i, content_block={"type": "tool_use", "id": f"tu_{i}", "name": t,
                                                               "input": {}}) if k < 2
        else message("content_block_delta", index=i, delta={"type": "input_json_delta", "partial_json": t})
        for k, (i, t) in enumerate(INTERLEAVED_CALLS)],
}


@pytest.mark.parametrize("api", sorted(INTERLEAVED))
def test_interleaved_parallel_tool_calls_are_kept_apart(stream_modules, api):
    p = fed_one_event_per_ms(stream_modules[0], INTERLEAVED[api], keep_text=True)
    assert p.tool_call_texts() == ['get_weather{"city":"Paris"}', 'search{"q":"x"}']
    assert p.tool_text() == 'get_weathersearch{"city":{"q":"Paris"}"x"}'  # as streamed: counts unchanged
    assert (p.tool_chunks, p.text_chunks) == (6, 6)


def test_a_chat_delta_with_two_calls_keeps_each_apart(stream_modules):
    both = {"tool_calls": [{"index": 0, "function": {"arguments": '{"a":1}'}},
                           {"index": 1, "function": {"arguments": '{"b":2}'}}]}
    events = [chunk(tool_call(0, name="f", arguments="")), chunk(tool_call(1, name="g", arguments="")),
              chunk(both)]
    p = fed_one_event_per_ms(stream_modules[0], events, keep_text=True)
    assert p.tool_call_texts() == ['f{"a":1}', 'g{"b":2}'] and p.tool_chunks == 3


def test_a_responses_piece_of_another_call_is_not_read_as_the_learned_shapes():
    """The compiled core learns a function_call_arguments.delta's shape from call 0's pieces;
    call 1's, its output_index in the tail beside the sequence_number, differ by digits only."""
    events = [json.dumps({"type": "response.function_call_arguments.delta", "delta": d, "item_id": "fc_1",
                          "output_index": i, "sequence_number": 10 + k}).encode()
              for k, (i, d) in enumerate([(0, "ab"), (0, "cd"), (1, "ef"), (0, "gh"), (1, "ij")])]
    for stream_mod, _ in cores():
        p = fed_one_event_per_ms(stream_mod, events, keep_text=True)
        assert p.tool_call_texts() == ["abcdgh", "efij"] and p.tool_text() == "abcdefghij"


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(sorted(INTERLEAVED)), st.lists(st.integers(0, 4000), max_size=12))
def test_interleaved_calls_are_kept_alike_by_both_cores_over_any_split(api, cuts):
    kept = [p.tool_call_texts() for p in kept_over(stream_of(INTERLEAVED[api]), cuts)]
    assert kept[0] == kept[-1] == ['get_weather{"city":"Paris"}', 'search{"q":"x"}']
