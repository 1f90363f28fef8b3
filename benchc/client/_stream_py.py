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
keys, else an answer chunk (a delta's `content`, a completion's `text`). Every text chunk
counts for TTFT and the chunk gaps (ITL), as before; the answer's own first chunk and its gaps
between consecutive answer chunks are kept beside them.

A non-streamed answer (`StreamParser(body=True)`: embeddings and the like, one JSON body) is
read by the same object, so every reader and transport feeds it as it feeds a stream: its
bytes go to a BodySkim (benchc.client._body_py), `done_ns` is the arrival of the read that
closed the JSON, and `close` interprets the skeleton once (`usage_prompt`, `results`,
`error_event`; a body that is not a JSON object counts as `malformed`). It carries no text.

Bounded (see _sse_py): a line or an event past MAX_SSE_BYTES stops the parser; `oversized`
then says which (the reader ends the response as an `oversized_event` error). The first
FIRST_BYTES_KEPT bytes of the stream are kept (`first_bytes`), to say what a 200 answer
that carried no event was.
"""

from __future__ import annotations

import json
import math

from benchc.client import _body_py
from benchc.client._sse_py import SSEDecoder
from benchc.metrics.latency import ns_to_us

_TEXT_KEYS = ("content", "reasoning_content", "reasoning")  # the first non-empty one is the text
_ANSWER_KEY = _TEXT_KEYS[0]  # the others are the reasoning's
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# llama.cpp's per-response `timings` object: the fields benchc keeps, and their JSON type
TIMINGS_INT = ("cache_n", "prompt_n", "predicted_n")
TIMINGS_MS = ("prompt_ms", "predicted_ms")
FIRST_BYTES_KEPT = 200  # bytes of the stream's start kept (StreamParser.first_bytes)


def _count(v) -> int | None:
    """A token count: a non-negative JSON integer that fits a signed 64-bit integer (the
    compiled core holds it in int64), else None."""
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _INT64_MAX else None


def _ms(v) -> float | None:
    """A duration in ms: a non-negative, finite JSON number (as a double), else None."""
    if not isinstance(v, int | float) or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except OverflowError:  # an integer no double holds
        return None
    return f if 0 <= f < math.inf else None


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


def interpret(payload: bytes) -> tuple | None:
    """One event's fields, by a full JSON parse: (UTF-8 bytes of its text, 0 when it carries
    none; finish_reason or None; usage completion_tokens or None; prompt_tokens or None; the
    message of an error object or None; the text or None; usage.prompt_tokens_details.
    cached_tokens or None; llama.cpp's `timings` as a dict of its kept fields, or None; whether
    the text is reasoning (a delta's reasoning_content / reasoning); usage.
    completion_tokens_details.reasoning_tokens or None).
    None when the payload is not a JSON object (or nests deeper than json.loads follows).
    Token counts outside a signed 64-bit integer are taken as absent (the compiled core
    holds them in int64).

    This is the definition both cores follow: the compiled core reads the common shapes
    in place and calls this function for everything else.
    """
    try:
        obj = json.loads(payload)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    error = None
    err = obj.get("error")
    if err is not None:  # `"error": null` is a chunk that says it carries none
        error = str(err.get("message", err) if isinstance(err, dict) else err)[:200]
    text, finish, reasoning = None, None, False
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        c0 = choices[0]
        delta = c0.get("delta")
        if isinstance(delta, dict):
            for k in _TEXT_KEYS:
                v = delta.get(k)
                if isinstance(v, str) and v:
                    text, reasoning = v, k != _ANSWER_KEY
                    break
        else:
            v = c0.get("text")
            if isinstance(v, str) and v:
                text = v
        fr = c0.get("finish_reason")
        if isinstance(fr, str) and fr:
            finish = fr
    completion = prompt = cached = reasoning_tokens = None
    usage = obj.get("usage")
    if isinstance(usage, dict):
        ct, pt = usage.get("completion_tokens"), usage.get("prompt_tokens")
        if isinstance(ct, int) and not isinstance(ct, bool) and _INT64_MIN <= ct <= _INT64_MAX:
            completion = ct
        if isinstance(pt, int) and not isinstance(pt, bool) and _INT64_MIN <= pt <= _INT64_MAX:
            prompt = pt
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict):  # vLLM, SGLang, llama.cpp: the prompt tokens served from cache
            cached = _count(details.get("cached_tokens"))
        details = usage.get("completion_tokens_details")
        if isinstance(details, dict):  # OpenAI's, and servers that follow it: the output's reasoning part
            reasoning_tokens = _count(details.get("reasoning_tokens"))
    text_bytes = len(text.encode("utf-8", "surrogatepass")) if text is not None else 0
    return (text_bytes, finish, completion, prompt, error, text, cached, _timings(obj.get("timings")),
            reasoning, reasoning_tokens)


class StreamParser:
    __slots__ = ("_sse", "first_text_ns", "last_text_ns", "done_ns", "text_chunks", "text_bytes",
                 "usage_completion", "usage_prompt", "finish_reason", "malformed", "malformed_example",
                 "error_event", "multi_token_chunks", "gaps_ns", "chunk_tokens", "_prev_usage", "events",
                 "_texts", "usage_cached", "server_timings", "first_bytes", "first_reasoning_ns",
                 "first_answer_ns", "reasoning_chunks", "usage_reasoning", "_kinds", "_text_kinds", "_skim",
                 "results")

    def __init__(self, keep_text: bool = False, body: bool = False) -> None:
        # a non-streamed answer: one JSON body, skimmed as it arrives (see the module)
        self._skim = _body_py.BodySkim() if body else None
        self.results = -1  # a body's results (vectors, scores); -1: none said
        self._texts: list | None = [] if keep_text else None  # the output, when asked to keep it
        self._text_kinds: list[bool] = []  # per kept piece: reasoning
        self._sse = SSEDecoder()
        self.first_text_ns = 0
        self.last_text_ns = 0
        self.done_ns = 0  # arrival of the read that carried [DONE]
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
        self.gaps_ns: list[int] = []  # between consecutive text-bearing chunks
        self.chunk_tokens: list[int] = []  # per text chunk: its token count, -1 when unknown
        self._kinds: list[bool] = []  # per text chunk: a reasoning chunk (else an answer chunk)
        self.first_reasoning_ns = 0  # the first reasoning chunk
        self.first_answer_ns = 0  # the first answer chunk (content, or a completion's text)
        self.reasoning_chunks = 0
        self.usage_reasoning = -1  # usage.completion_tokens_details.reasoning_tokens; -1: not reported
        self._prev_usage = 0
        self.events = 0
        self.first_bytes = b""  # the stream's first FIRST_BYTES_KEPT bytes

    @property
    def oversized(self) -> int:
        """0, or why the stream stopped being read (_sse_py's LINE_TOO_LONG, EVENT_TOO_LARGE,
        BODY_TOO_LARGE)."""
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
            self.malformed_example = kept[:200]
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
                self.malformed_example = bytes(payload[:200])
            return
        text_bytes, finish, completion, prompt, error, text, cached, timings, reasoning, rtokens = fields
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
                self._texts.append(text)
                self._text_kinds.append(reasoning)
            if self.first_text_ns:
                self.gaps_ns.append(now - self.last_text_ns)
            else:
                self.first_text_ns = now
            self.last_text_ns = now
            self.text_chunks += 1
            self.chunk_tokens.append(tokens)
            self._kinds.append(reasoning)
            if reasoning:
                self.reasoning_chunks += 1
                if not self.first_reasoning_ns:
                    self.first_reasoning_ns = now
            elif not self.first_answer_ns:
                self.first_answer_ns = now

    def text(self) -> str:
        """The whole output (kept only with keep_text=True; decoded here, off the hot path)."""
        if self._texts is None:
            raise ValueError("this parser was not asked to keep the text")
        return "".join(self._texts)

    def reasoning_text(self) -> str:
        """The reasoning chunks' text (keep_text=True)."""
        return self._kept(True)

    def answer_text(self) -> str:
        """The answer chunks' text (keep_text=True): what a chat's next turn sends back."""
        return self._kept(False)

    def _kept(self, reasoning: bool) -> str:
        if self._texts is None:
            raise ValueError("this parser was not asked to keep the text")
        return "".join(t for t, k in zip(self._texts, self._text_kinds, strict=True) if k == reasoning)

    @property
    def answer_gaps_ns(self) -> list[int]:
        """The gaps between consecutive answer chunks (gap i lies between chunks i and i+1):
        the answer's own ITL, without the reasoning's pace or the turn from reasoning to answer."""
        k = self._kinds
        return [g for i, g in enumerate(self.gaps_ns) if not (k[i] or k[i + 1])]

    def record_gaps(self, itl, itl_token=None) -> None:
        """Record the chunk gaps (us) into `itl`, and per token into `itl_token` where a chunk's
        token count is known: a chunk of k tokens after gap g is k tokens of g/k."""
        for g in self.gaps_ns:
            itl.record(ns_to_us(g))
        if itl_token is not None:
            for g, k in zip(self.gaps_ns, self.chunk_tokens[1:], strict=False):
                if k > 0:
                    itl_token.record(ns_to_us(g // k), k)

    def record_answer_gaps(self, itl_answer) -> None:
        """Record the answer's chunk gaps (us) into `itl_answer` (see answer_gaps_ns)."""
        for g in self.answer_gaps_ns:
            itl_answer.record(ns_to_us(g))
