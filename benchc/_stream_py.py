"""One response stream, measured: pure Python (the reference twin of csrc/_stream_c.pyx).

Feed it every socket read with the read's arrival time; it frames SSE events,
extracts from each chunk the text (delta content / reasoning_content /
reasoning, or completions' text), finish_reason and usage, and times the
text-bearing chunks. This twin parses each event with json.loads: it is the
definition of the results the compiled core must reproduce exactly.
"""

from __future__ import annotations

import json

from benchc._sse_py import SSEDecoder

_TEXT_KEYS = ("content", "reasoning_content", "reasoning")


def ns_to_us(ns: int) -> int:
    """Recorded latencies are whole microseconds, rounded half up, at least 1."""
    us = (ns + 500) // 1000
    return us if us > 0 else 1


class StreamParser:
    __slots__ = ("_sse", "first_text_ns", "last_text_ns", "done_ns", "text_chunks", "text_bytes",
                 "usage_completion", "usage_prompt", "finish_reason", "malformed", "malformed_example",
                 "error_event", "multi_token_chunks", "gaps_ns", "chunk_tokens", "_prev_usage", "events")

    def __init__(self) -> None:
        self._sse = SSEDecoder()
        self.first_text_ns = 0
        self.last_text_ns = 0
        self.done_ns = 0  # arrival of the read that carried [DONE]
        self.text_chunks = 0
        self.text_bytes = 0  # UTF-8 bytes of the decoded text
        self.usage_completion = -1  # -1: the stream carried no usage
        self.usage_prompt = -1
        self.finish_reason: str | None = None
        self.malformed = 0
        self.malformed_example: bytes | None = None
        self.error_event: str | None = None
        self.multi_token_chunks = 0
        self.gaps_ns: list[int] = []  # between consecutive text-bearing chunks
        self.chunk_tokens: list[int] = []  # per text chunk: its token count, -1 when unknown
        self._prev_usage = 0
        self.events = 0

    def feed(self, data: bytes, now_ns: int) -> None:
        for payload in self._sse.feed(data):
            self._event(payload, now_ns)

    def close(self, now_ns: int) -> None:
        for payload in self._sse.close():
            self._event(payload, now_ns)

    def _event(self, payload: bytes, now: int) -> None:
        self.events += 1
        if payload == b"[DONE]":
            if not self.done_ns:
                self.done_ns = now
            return
        try:
            obj = json.loads(payload)
        except (ValueError, UnicodeDecodeError):
            obj = None
        if not isinstance(obj, dict):
            self.malformed += 1
            if self.malformed_example is None:
                self.malformed_example = bytes(payload[:200])
            return
        if "error" in obj:
            err = obj["error"]
            self.error_event = str(err.get("message", err) if isinstance(err, dict) else err)[:200]
        text = None
        choices = obj.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            c0 = choices[0]
            delta = c0.get("delta")
            if isinstance(delta, dict):
                for k in _TEXT_KEYS:
                    v = delta.get(k)
                    if isinstance(v, str) and v:
                        text = v
                        break
            else:
                v = c0.get("text")
                if isinstance(v, str) and v:
                    text = v
            fr = c0.get("finish_reason")
            if isinstance(fr, str) and fr:
                self.finish_reason = fr
        tokens = -1
        usage = obj.get("usage")
        if isinstance(usage, dict):
            ct = usage.get("completion_tokens")
            if isinstance(ct, int) and not isinstance(ct, bool):
                if text is not None:
                    tokens = ct - self._prev_usage
                    if tokens > 1:
                        self.multi_token_chunks += 1
                self._prev_usage = ct
                self.usage_completion = ct
            pt = usage.get("prompt_tokens")
            if isinstance(pt, int) and not isinstance(pt, bool):
                self.usage_prompt = pt
        if text is not None:
            self.text_bytes += len(text.encode("utf-8", "surrogatepass"))
            if self.first_text_ns:
                self.gaps_ns.append(now - self.last_text_ns)
            else:
                self.first_text_ns = now
            self.last_text_ns = now
            self.text_chunks += 1
            self.chunk_tokens.append(tokens)

    def record_gaps(self, itl, itl_token=None) -> None:
        """Record the chunk gaps (us) into `itl`, and per token into `itl_token` where a chunk's
        token count is known: a chunk of k tokens after gap g is k tokens of g/k."""
        for g in self.gaps_ns:
            itl.record(ns_to_us(g))
        if itl_token is not None:
            for g, k in zip(self.gaps_ns, self.chunk_tokens[1:], strict=False):
                if k > 0:
                    itl_token.record(ns_to_us(g // k), k)
