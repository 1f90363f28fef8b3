"""One response stream, measured: pure Python (the reference twin of csrc/client/_stream_c.pyx).

Feed it every socket read with the read's arrival time; it frames SSE events,
extracts from each chunk the text (delta content / reasoning_content /
reasoning, or completions' text), finish_reason and usage (with the cached prompt tokens
of usage.prompt_tokens_details and the reasoning tokens of usage.completion_tokens_details),
llama.cpp's per-response `timings`, and times the text-bearing chunks. This twin parses each
event with json.loads: it is the definition of the results the compiled core must reproduce
exactly.

Reasoning models (vLLM, SGLang and llama.cpp stream their thinking as `reasoning_content` or
`reasoning` deltas): a text chunk is a reasoning chunk when its text came from one of those
keys, else an answer chunk (a delta's `content`, a completion's `text`). Tool calls (a chat
delta's `tool_calls` names and arguments, and the same in the Responses and Messages APIs) are
output too: a tool-call chunk. Every text chunk of any kind counts for TTFT and the chunk gaps
(ITL); the answer's own first chunk and its gaps between consecutive answer chunks, and the
first tool-call chunk, are kept beside them. The Responses and Messages APIs' events are read
into the same fields (see `interpret`); an event of a type no API here has is skipped and
counted (`unknown_events`).

A non-streamed answer (`StreamParser(body=True)`: embeddings and the like, one JSON body) is
read by the same object, so every reader and transport feeds it as it feeds a stream: its
bytes go to a BodySkim (benchc.client._body_py), `done_ns` is the arrival of the read that
closed the JSON, and `close` interprets the skeleton once (`usage_prompt`, `results`,
`error_event`; a body that is not a JSON object counts as `malformed`). It carries no text.

Bounded (see _sse_py): a line or an event past MAX_SSE_BYTES stops the parser; `oversized`
then says which (the reader ends the response as an `oversized_event` error). The first
FIRST_BYTES_KEPT bytes of the stream are kept (`first_bytes`), to say what a 200 answer
that carried no event was. A stream's chunk gaps are bounded too: the first GAPS_KEPT are kept
as a list (`gaps_ns`, with their chunks' tokens and kinds), and every later gap goes, as it
arrives, into the parser's own histograms (the point's layout: ITL, per-token ITL, answer ITL),
which `record_gaps` and `record_answer_gaps` merge into the point's; `max_gap_ns` is the
largest gap of all. (An endless stream of 1-token chunks kept every gap: 2.3 GB at 20 s.)
"""

from __future__ import annotations

import json

from benchc.client import _body_py, _sse_py
from benchc.client._body_py import ERROR_KEPT, EXAMPLE_KEPT, MAX_COUNT
from benchc.client._sse_py import SSEDecoder
from benchc.metrics.latency import new_histogram, ns_to_us
from benchc.redact import KEEP_PAST_CUT

_TEXT_KEYS = ("content", "reasoning_content", "reasoning")  # the first non-empty one is the text
_ANSWER_KEY = _TEXT_KEYS[0]  # the others are the reasoning's
# What a server says it counted enters up to _body_py.MAX_COUNT, else it is taken as not
# reported (both cores: the compiled one leaves a count past it to this twin).
MAX_MS = 1e12  # a server's own duration (llama.cpp's timings), ms: 31 years
# llama.cpp's per-response `timings` object: the fields benchc keeps, and their JSON type
TIMINGS_INT = ("cache_n", "prompt_n", "predicted_n")
TIMINGS_MS = ("prompt_ms", "predicted_ms")
FIRST_BYTES_KEPT = 200  # bytes of the stream's start kept (StreamParser.first_bytes)
# A finish, stop or incomplete reason is shown cut to REASON_CHARS characters (an error event's
# message and a malformed event's start: as _body_py says), by the client, after the run's
# secrets are scrubbed (benchc.redact.clip). The parser keeps KEEP_PAST_CUT more, so that a
# secret across the shown bound is whole when it is scrubbed.
REASON_CHARS = 100
REASON_KEPT = REASON_CHARS + KEEP_PAST_CUT
# Chunk gaps kept as a list per stream (StreamParser.gaps_ns); later ones go to its histograms.
# A long answer (8k tokens) never reaches it; past it a stream holds up to three histograms
# (about 190 KB each, in the point's layout) whatever its length.
GAPS_KEPT = 8192
RUN_PIECES = 4096  # kept text pieces of one kind joined into one (StreamParser._keep)
_ITL, _ITL_TOKEN, _ITL_ANSWER = range(3)  # StreamParser._spill: a histogram each, made when needed


def _count(v) -> int | None:
    """A token count: a non-negative JSON integer up to MAX_COUNT, else None (not reported)."""
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_COUNT else None


def _ms(v) -> float | None:
    """A duration in ms: a non-negative, finite JSON number (as a double) up to MAX_MS, else None."""
    if not isinstance(v, int | float) or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except OverflowError:  # an integer no double holds
        return None
    return f if 0 <= f <= MAX_MS else None


def _timings(t) -> dict | None:
    """The kept fields of a `timings` object that hold the right type; None when none do."""
    if not isinstance(t, dict):
        return None
    out: dict = {}
    for k in TIMINGS_INT:
        if _count(t.get(k)) is not None:
            out[k] = t[k]
    for k in TIMINGS_MS:
        v = _ms(t.get(k))
        if v is not None:
            out[k] = v
    return out or None


# What a text-bearing event's text is (StreamParser keeps one per chunk): the answer (a delta's
# content, a completion's text, Responses' output_text, Messages' text_delta), reasoning, or a
# tool call (its name, and its arguments as they stream)
ANSWER, REASONING, TOOL = 0, 1, 2


# A tool piece's call: its index in the answer (chat's tool_calls[].index, Responses'
# output_index, Messages' content-block index), so that interleaved parallel calls are kept
# apart. Indices past MAX_CALL_INDEX share one (the compiled core keeps it in a byte of a
# piece's tag); an answer's first 128 calls alone are sent back (run/sessions.py).
MAX_CALL_INDEX = 255


def call_index(v) -> int:
    """An event's call index: a non-negative integer, at most MAX_CALL_INDEX; 0 otherwise."""
    return min(v, MAX_CALL_INDEX) if type(v) is int and v >= 0 else 0


def _tool_parts(calls) -> tuple | None:
    """A chat delta's tool_calls: ((call index, the name and argument pieces it carries), ...)
    per call that carries any (None: none)."""
    if not isinstance(calls, list):
        return None
    parts = []
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            text = "".join(v for v in (fn.get("name"), fn.get("arguments")) if isinstance(v, str))
            if text:
                parts.append((call_index(call.get("index")), text))
    return tuple(parts) or None


class _Fields:
    """One event's fields as `interpret` gathers them (see there)."""

    __slots__ = ("text", "kind", "finish", "completion", "prompt", "cached", "rtokens", "error", "unknown",
                 "response_id", "ends", "calls")

    def __init__(self) -> None:
        self.text: str | None = None
        self.kind = ANSWER
        self.finish: str | None = None
        self.completion: int | None = None
        self.prompt: int | None = None
        self.cached: int | None = None
        self.rtokens: int | None = None
        self.error: str | None = None
        self.unknown = False
        self.response_id: str | None = None
        self.ends = False  # the response's end (response.completed / .incomplete / .failed, message_stop)
        self.calls: tuple | None = None  # a tool text's ((call index, piece), ...), in order

    def set_text(self, v, kind: int, call: int = 0) -> None:
        if isinstance(v, str) and v and self.text is None:
            self.text, self.kind = v, kind
            if kind == TOOL:
                self.calls = ((call, v),)

    def set_tool_parts(self, parts: tuple | None) -> None:
        if parts and self.text is None:
            self.text, self.kind, self.calls = "".join(t for _, t in parts), TOOL, parts


def _error_message(err) -> str:
    return str(err.get("message", err) if isinstance(err, dict) else err)[:ERROR_KEPT]


def _chat(obj: dict, f: _Fields) -> None:
    """A chat or completions chunk: choices[0]'s delta (or text) and finish_reason, and usage."""
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        c0 = choices[0]
        delta = c0.get("delta")
        if isinstance(delta, dict):
            for k in _TEXT_KEYS:
                f.set_text(delta.get(k), REASONING if k != _ANSWER_KEY else ANSWER)
            f.set_tool_parts(_tool_parts(delta.get("tool_calls")))
        else:
            f.set_text(c0.get("text"), ANSWER)
        fr = c0.get("finish_reason")
        if isinstance(fr, str) and fr:
            f.finish = fr
    usage = obj.get("usage")
    if isinstance(usage, dict):
        f.completion, f.prompt = _count(usage.get("completion_tokens")), _count(usage.get("prompt_tokens"))
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict):  # vLLM, SGLang, llama.cpp: the prompt tokens served from cache
            f.cached = _count(details.get("cached_tokens"))
        details = usage.get("completion_tokens_details")
        if isinstance(details, dict):  # OpenAI's, and servers that follow it: the output's reasoning part
            f.rtokens = _count(details.get("reasoning_tokens"))


# The Responses API (/v1/responses): every event names its type. The deltas that carry output ...
_RESPONSES_DELTAS = {"response.output_text.delta": ANSWER, "response.refusal.delta": ANSWER,
                     "response.reasoning_text.delta": REASONING,
                     "response.reasoning_summary_text.delta": REASONING,
                     "response.function_call_arguments.delta": TOOL}
# ... the events that end the response (it carries its usage and status) ...
_RESPONSES_ENDS = {"response.completed", "response.incomplete", "response.failed"}
# ... and those that carry nothing benchc reads (any other type is unknown: skipped and counted)
_RESPONSES_QUIET = frozenset(
    "response." + t for t in (
        "created", "in_progress", "queued", "output_item.added", "output_item.done", "content_part.added",
        "content_part.done", "output_text.done", "output_text.annotation.added", "refusal.done",
        "reasoning_text.done", "reasoning_part.added", "reasoning_part.done",
        "reasoning_summary_part.added", "reasoning_summary_part.done", "reasoning_summary_text.done",
        "function_call_arguments.done"))


def _responses_end(kind: str, obj: dict, f: _Fields) -> None:
    """response.completed / .incomplete / .failed: the usage, and a finish reason in chat's
    words (stop, length, tool_calls), or the failure as an error event."""
    f.ends = True
    resp = obj.get("response")
    if not isinstance(resp, dict):
        return
    rid = resp.get("id")
    if isinstance(rid, str) and rid:  # what a later request names as its previous_response_id
        f.response_id = rid
    usage = resp.get("usage")
    if isinstance(usage, dict):
        f.completion, f.prompt = _count(usage.get("output_tokens")), _count(usage.get("input_tokens"))
        details = usage.get("input_tokens_details")
        if isinstance(details, dict):
            f.cached = _count(details.get("cached_tokens"))
        details = usage.get("output_tokens_details")
        if isinstance(details, dict):
            f.rtokens = _count(details.get("reasoning_tokens"))
    why = resp.get("incomplete_details")
    reason = why.get("reason") if isinstance(why, dict) else None
    if kind == "response.failed":
        err = resp.get("error")
        f.error = _error_message(err) if err is not None else "response.failed"
    elif kind == "response.incomplete" or reason is not None:
        # vLLM ends a response cut short by max_output_tokens with response.completed, its
        # status "incomplete" and the reason in incomplete_details
        f.finish = "length" if reason in (None, "max_output_tokens") else str(reason)[:REASON_KEPT]
    else:
        out = resp.get("output")
        called = isinstance(out, list) and any(isinstance(i, dict) and i.get("type") == "function_call"
                                               for i in out)
        f.finish = "tool_calls" if called else "stop"


def _responses(kind: str, obj: dict, f: _Fields) -> None:
    if kind in _RESPONSES_DELTAS:
        f.set_text(obj.get("delta"), _RESPONSES_DELTAS[kind], call_index(obj.get("output_index")))
    elif kind == "response.output_item.added":  # a function call's name comes with its item
        item = obj.get("item")
        if isinstance(item, dict) and item.get("type") == "function_call":
            f.set_text(item.get("name"), TOOL, call_index(obj.get("output_index")))
    elif kind in _RESPONSES_ENDS:
        _responses_end(kind, obj, f)
    elif kind == "error":
        f.error = _error_message(obj.get("message", obj))
    elif kind not in _RESPONSES_QUIET:
        f.unknown = True


# The Messages API (Anthropic's /v1/messages): content_block_delta's delta types and what they carry
_MESSAGES_DELTAS = {"text_delta": ("text", ANSWER), "thinking_delta": ("thinking", REASONING),
                    "input_json_delta": ("partial_json", TOOL)}
_MESSAGES_QUIET = frozenset(("message_stop", "content_block_stop", "ping"))
_MESSAGES_TYPES = _MESSAGES_QUIET | {"message_start", "message_delta", "content_block_start",
                                     "content_block_delta", "error"}
# its stop reasons in chat's words, so that one count of tool-call finishes serves every API
_MESSAGES_STOPS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
                   "tool_use": "tool_calls"}


def _messages_usage(usage, f: _Fields) -> None:
    """Messages' usage: input_tokens are the prompt's uncached part (Anthropic's meaning; vLLM
    sends the whole prompt there and no cache fields), cache_read_input_tokens the cached."""
    if not isinstance(usage, dict):
        return
    f.completion = _count(usage.get("output_tokens"))
    inp = _count(usage.get("input_tokens"))
    read = _count(usage.get("cache_read_input_tokens"))
    made = _count(usage.get("cache_creation_input_tokens"))
    if inp is not None:
        f.prompt = inp + (read or 0) + (made or 0)
    f.cached = read


def _messages(kind: str, obj: dict, f: _Fields) -> None:
    if kind == "content_block_delta":
        delta = obj.get("delta")
        if isinstance(delta, dict) and delta.get("type") in _MESSAGES_DELTAS:
            key, what = _MESSAGES_DELTAS[delta["type"]]
            f.set_text(delta.get(key), what, call_index(obj.get("index")))
    elif kind == "content_block_start":  # a tool call's name comes with its block
        block = obj.get("content_block")
        if isinstance(block, dict) and block.get("type") == "tool_use":
            f.set_text(block.get("name"), TOOL, call_index(obj.get("index")))
    elif kind == "message_start":
        msg = obj.get("message")
        if isinstance(msg, dict):
            _messages_usage(msg.get("usage"), f)
            f.completion = None  # message_start's output_tokens count nothing streamed yet
    elif kind == "message_delta":
        delta = obj.get("delta")
        stop = delta.get("stop_reason") if isinstance(delta, dict) else None
        if isinstance(stop, str) and stop:
            f.finish = _MESSAGES_STOPS.get(stop, stop[:REASON_KEPT])
        _messages_usage(obj.get("usage"), f)
    elif kind == "message_stop":
        f.ends = True
    elif kind == "error":
        f.error = _error_message(obj.get("error", obj))


def interpret(payload: bytes) -> tuple | None:
    """One event's fields, by a full JSON parse: (UTF-8 bytes of its text, 0 when it carries
    none; finish_reason or None; output tokens (usage completion_tokens) or None; prompt tokens
    or None; the message of an error or None; the text or None; the cached prompt tokens or
    None; llama.cpp's `timings` as a dict of its kept fields, or None; what the text is (ANSWER,
    REASONING or TOOL); the output's reasoning tokens or None; whether the event is of a type
    benchc does not know (skipped, and counted); the Responses API's response id (the end
    event's `response.id`) or None; whether the event ends the response (response.completed,
    .incomplete, .failed; message_stop): the stream's end for E2E, and nothing after it
    is read, so a second completion cannot replace the first's usage); for a tool text, its
    pieces by call, ((call index, text), ...), joined the text (None for any other).
    None when the payload is not a JSON object (or nests deeper than json.loads follows).
    Token counts outside a signed 64-bit integer are taken as absent (the compiled core
    holds them in int64).

    Chat and completions chunks carry `choices`; the Responses and Messages APIs' events carry
    a `type` instead (their names do not overlap), each read by its own function above into
    the same fields, so that the record and the result have no branch per API.

    This is the definition both cores follow: the compiled core reads the common shapes
    in place and calls this function for everything else.
    """
    try:
        obj = json.loads(payload)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    f = _Fields()
    kind = obj.get("type")
    if not isinstance(kind, str) or "choices" in obj:
        kind = None
    if kind is not None and (kind.startswith("response.") or kind == "error" and "error" not in obj):
        _responses(kind, obj, f)
    elif kind in _MESSAGES_TYPES:
        _messages(kind, obj, f)
    else:
        err = obj.get("error")
        if err is not None:  # `"error": null` is a chunk that says it carries none
            f.error = _error_message(err)
        _chat(obj, f)
        # an event that names a type no API here has, and carries nothing a chunk would
        f.unknown = kind is not None and f.error is None and "usage" not in obj
    text = f.text
    text_bytes = len(text.encode("utf-8", "surrogatepass")) if text is not None else 0
    return (text_bytes, f.finish, f.completion, f.prompt, f.error, text, f.cached,
            _timings(obj.get("timings")), f.kind, f.rtokens, f.unknown, f.response_id, f.ends, f.calls)


class StreamParser:
    __slots__ = ("_sse", "first_text_ns", "last_text_ns", "done_ns", "text_chunks", "text_bytes",
                 "usage_completion", "usage_prompt", "finish_reason", "malformed", "malformed_example",
                 "error_event", "multi_token_chunks", "gaps_ns", "chunk_tokens", "_prev_usage", "events",
                 "_texts", "usage_cached", "server_timings", "first_bytes", "first_reasoning_ns",
                 "first_answer_ns", "reasoning_chunks", "usage_reasoning", "_kinds", "_text_kinds",
                 "first_tool_ns", "tool_chunks", "unknown_events", "_skim", "results", "response_id",
                 "max_gap_ns", "_last_kind", "_spill", "_ended", "_run")

    def __init__(self, keep_text: bool = False, body: bool = False) -> None:
        # a non-streamed answer: one JSON body, skimmed as it arrives (see the module)
        self._skim = _body_py.BodySkim() if body else None
        self.results = -1  # a body's results (vectors, scores); -1: none said
        self._texts: list | None = [] if keep_text else None  # the output, when asked to keep it
        self._text_kinds: list[int] = []  # per kept piece: ANSWER, REASONING or TOOL, + 4 * its call
        self._run: list[str] = []  # the latest pieces, of the last kept kind, not yet one piece
        self._sse = SSEDecoder()
        self.first_text_ns = 0
        self.last_text_ns = 0
        self.done_ns = 0  # arrival of the read that carried [DONE] (or the response's end event)
        self._ended = False  # the response's end event came: later events are not read
        self.text_chunks = 0
        self.text_bytes = 0  # UTF-8 bytes of the decoded text
        self.usage_completion = -1  # -1: the stream carried no usage
        self.usage_prompt = -1
        self.usage_cached = -1  # usage.prompt_tokens_details.cached_tokens; -1: not reported
        self.server_timings: dict | None = None  # llama.cpp's `timings` (the last one sent)
        self.finish_reason: str | None = None
        self.malformed = 0
        self.malformed_example: bytes | None = None
        self.error_event: str | None = None
        self.multi_token_chunks = 0
        # between consecutive text-bearing chunks: the first GAPS_KEPT (the later ones: _spill)
        self.gaps_ns: list[int] = []
        self.chunk_tokens: list[int] = []  # per kept text chunk: its token count, -1 when unknown
        self._kinds: list[int] = []  # per kept text chunk: ANSWER, REASONING or TOOL
        self.max_gap_ns = 0  # the largest gap (0 until there is one)
        self._last_kind = ANSWER  # the last text chunk's kind
        # the gaps past GAPS_KEPT, recorded as they come: [ITL, per-token ITL, answer ITL]
        self._spill: list = [None, None, None]
        self.first_reasoning_ns = 0  # the first reasoning chunk
        self.first_answer_ns = 0  # the first answer chunk (content, or a completion's text)
        self.reasoning_chunks = 0
        self.usage_reasoning = -1  # usage.completion_tokens_details.reasoning_tokens; -1: not reported
        self.first_tool_ns = 0  # the first tool-call chunk (a name or an argument piece)
        self.tool_chunks = 0
        self.unknown_events = 0  # events of a type no API here has: skipped
        self.response_id: str | None = None  # the Responses API's id of this response (its end event's)
        self._prev_usage = 0
        self.events = 0
        self.first_bytes = b""  # the stream's first FIRST_BYTES_KEPT bytes

    @property
    def oversized(self) -> int:
        """0, or why the stream stopped being read (_sse_py's LINE_TOO_LONG, EVENT_TOO_LARGE,
        BODY_TOO_LARGE, TEXT_TOO_LARGE)."""
        return self._skim.oversized if self._skim is not None else self._sse.oversized

    @property
    def body(self) -> bool:
        """This parser reads one JSON body, not an event stream."""
        return self._skim is not None

    def feed(self, data: bytes, now_ns: int) -> None:
        if len(self.first_bytes) < FIRST_BYTES_KEPT:
            self.first_bytes += bytes(data[:FIRST_BYTES_KEPT - len(self.first_bytes)])
        if self._skim is not None:
            if self._skim.feed(bytes(data)):
                self.done_ns = now_ns
            return
        for payload in self._sse.feed(data):
            self._event(payload, now_ns)
            # stopped by this event's kept text: the read's later events are not read (a line
            # past its bound stopped the decoder before it gave its events)
            if self._sse.oversized == _sse_py.TEXT_TOO_LARGE:
                break

    def close(self, now_ns: int) -> None:
        if self._skim is not None:
            self._close_body()
            return
        for payload in self._sse.close():
            self._event(payload, now_ns)

    def _close_body(self) -> None:
        """The body's one interpretation (_body_py.interpret), once, when its reading ended."""
        skim = self._skim
        assert skim is not None  # a body parser
        if self.events or skim.oversized:
            return
        self.events = 1
        kept = bytes(skim.kept)
        skim.kept = bytearray()  # given back: what is needed is read now
        self.apply_body(_body_py.interpret(kept), kept)

    def apply_body(self, fields: tuple | None, kept: bytes) -> None:
        """Take a body's fields (see _body_py.interpret)."""
        if fields is None:
            self.malformed += 1
            self.malformed_example = kept[:EXAMPLE_KEPT]
            return
        prompt, results, error = fields
        if prompt is not None:
            self.usage_prompt = prompt
        if results is not None:
            self.results = results
        if error is not None:
            self.error_event = error

    def _event(self, payload: bytes, now: int) -> None:
        self.events += 1
        if self._ended:
            return  # one completion per response: what follows its end is not its answer
        if payload == b"[DONE]":
            if not self.done_ns:
                self.done_ns = now
            return
        self.apply(interpret(payload), payload, now)

    def apply(self, fields: tuple | None, payload: bytes, now: int) -> None:
        """Update the stream's state with one event's fields (see `interpret`)."""
        if fields is None:
            self.malformed += 1
            if self.malformed_example is None:
                self.malformed_example = bytes(payload[:EXAMPLE_KEPT])
            return
        (text_bytes, finish, completion, prompt, error, text, cached, timings, kind, rtokens, unknown,
         rid, ends, calls) = fields
        if ends:  # the response ended here: its E2E too (the own reader reads on to the framing's end)
            self._ended = True
            if not self.done_ns:
                self.done_ns = now
        if unknown:
            self.unknown_events += 1
            return
        if rid is not None:
            self.response_id = rid
        if error is not None:
            self.error_event = error
        if cached is not None:
            self.usage_cached = cached
        if timings is not None:
            self.server_timings = timings
        if finish is not None:
            self.finish_reason = finish
        tokens = -1
        if completion is not None:
            if text_bytes:
                tokens = completion - self._prev_usage
                if tokens > 1:
                    self.multi_token_chunks += 1
            self._prev_usage = completion
            self.usage_completion = completion
        if prompt is not None:
            self.usage_prompt = prompt
        if rtokens is not None:
            self.usage_reasoning = rtokens
        if text_bytes:
            self.text_bytes += text_bytes
            if self._texts is not None:
                for call, piece in calls or ((0, text),):
                    self._keep(piece, kind, call)
                if self.text_bytes > _sse_py.MAX_KEPT_TEXT_BYTES and not self._sse.oversized:
                    self._sse._stop(_sse_py.TEXT_TOO_LARGE)  # the stream is no longer read
            if self.first_text_ns:
                self._gap(now - self.last_text_ns, tokens, kind)
            else:
                self.first_text_ns = now
            self.last_text_ns = now
            self.text_chunks += 1
            if len(self.chunk_tokens) <= GAPS_KEPT:  # the chunks on either side of the kept gaps
                self.chunk_tokens.append(tokens)
                self._kinds.append(kind)
            self._last_kind = kind
            if kind == REASONING:
                self.reasoning_chunks += 1
                if not self.first_reasoning_ns:
                    self.first_reasoning_ns = now
            elif kind == TOOL:
                self.tool_chunks += 1
                if not self.first_tool_ns:
                    self.first_tool_ns = now
            elif not self.first_answer_ns:
                self.first_answer_ns = now

    def _gap(self, gap: int, tokens: int, kind: int) -> None:
        """One gap, ended by a chunk of `tokens` tokens (-1: unknown) and of `kind`: kept in the
        list, or past GAPS_KEPT recorded as record_gaps and record_answer_gaps would record it."""
        if self.text_chunks == 1 or gap > self.max_gap_ns:
            self.max_gap_ns = gap
        if len(self.gaps_ns) < GAPS_KEPT:
            self.gaps_ns.append(gap)
            return
        self._spilled(_ITL).record(ns_to_us(gap))
        if tokens > 0:
            self._spilled(_ITL_TOKEN).record(ns_to_us(gap // tokens), tokens)
        if not (self._last_kind or kind):  # between two answer chunks
            self._spilled(_ITL_ANSWER).record(ns_to_us(gap))

    def _spilled(self, which: int):
        h = self._spill[which]
        if h is None:
            h = self._spill[which] = new_histogram()
        return h

    def _keep(self, text: str, kind: int, call: int = 0) -> None:
        """Keep a text piece: a run of pieces of one kind and call becomes one piece, RUN_PIECES
        at a time (a list entry per piece cost 8 bytes or more per 1-byte piece, as the compiled
        core's index did: 16 MiB of them held 145 MB)."""
        assert self._texts is not None  # keep_text
        tag = kind + 4 * call
        if self._run and tag != self._text_kinds[-1]:
            self._flush()
        if not self._run:
            self._texts.append("")
            self._text_kinds.append(tag)
        self._run.append(text)
        if len(self._run) >= RUN_PIECES:
            self._flush()

    def _flush(self) -> None:
        """The pending run joins the last kept piece's kind as a piece of its own."""
        assert self._texts is not None
        if self._run:
            self._texts[-1] = "".join(self._run)
            self._run = []

    def text(self) -> str:
        """The whole output (kept only with keep_text=True; decoded here, off the hot path)."""
        if self._texts is None:
            raise ValueError("this parser was not asked to keep the text")
        self._flush()
        return "".join(self._texts)

    def reasoning_text(self) -> str:
        """The reasoning chunks' text (keep_text=True)."""
        return self._kept(REASONING)

    def answer_text(self) -> str:
        """The answer chunks' text (keep_text=True): what a chat's next turn sends back."""
        return self._kept(ANSWER)

    def tool_text(self) -> str:
        """The tool-call chunks' text (keep_text=True): the names and arguments, as streamed."""
        return self._kept(TOOL)

    def tool_call_texts(self) -> list[str]:
        """Each tool call's text (keep_text=True), its name and arguments, in the order the
        calls first streamed: interleaved parallel calls apart (by their call index)."""
        if self._texts is None:
            raise ValueError("this parser was not asked to keep the text")
        self._flush()
        calls: dict[int, list[str]] = {}
        for t, k in zip(self._texts, self._text_kinds, strict=True):
            if k & 3 == TOOL:
                calls.setdefault(k >> 2, []).append(t)
        return ["".join(v) for v in calls.values()]

    def _kept(self, kind: int) -> str:
        if self._texts is None:
            raise ValueError("this parser was not asked to keep the text")
        self._flush()
        return "".join(t for t, k in zip(self._texts, self._text_kinds, strict=True) if k & 3 == kind)

    @property
    def answer_gaps_ns(self) -> list[int]:
        """The kept gaps between consecutive answer chunks (gap i lies between chunks i and i+1):
        the answer's own ITL, without the reasoning's (or a tool call's) pace or the turn from one
        to the other."""
        k = self._kinds
        return [g for i, g in enumerate(self.gaps_ns) if not (k[i] or k[i + 1])]

    def record_gaps(self, itl, itl_token=None) -> None:
        """Record every chunk gap (us) into `itl`, and per token into `itl_token` where a chunk's
        token count is known: a chunk of k tokens after gap g is k tokens of g/k. The gaps past
        GAPS_KEPT come from this parser's histograms, merged count for count."""
        for g in self.gaps_ns:
            itl.record(ns_to_us(g))
        _merge(itl, self._spill[_ITL])
        if itl_token is not None:
            for g, k in zip(self.gaps_ns, self.chunk_tokens[1:], strict=False):
                if k > 0:
                    itl_token.record(ns_to_us(g // k), k)
            _merge(itl_token, self._spill[_ITL_TOKEN])

    def record_answer_gaps(self, itl_answer) -> None:
        """Record every gap between answer chunks (us) into `itl_answer` (see answer_gaps_ns)."""
        for g in self.answer_gaps_ns:
            itl_answer.record(ns_to_us(g))
        _merge(itl_answer, self._spill[_ITL_ANSWER])


def _merge(into, spilled) -> None:
    """Add a parser's histogram of the gaps past GAPS_KEPT (None: it has none) to `into`."""
    if spilled is not None:
        into.merge(spilled)
