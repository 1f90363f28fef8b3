"""A non-streamed answer (one JSON body: /v1/embeddings and the like), read as its bytes
arrive without holding what benchc does not read: pure Python (the twin of the body mode of
csrc/client/_stream_c.pyx, which keeps the same bytes).

An embeddings answer is mostly vectors (a 1024-float vector is ~20 KB of JSON, a batch of
64 over a megabyte), and the usage benchc reads sits at its end (vLLM, SGLang, OpenAI and TEI
all write `usage` last). BodySkim keeps the body's *skeleton*, as it arrives, and drops the
rest. Depth is the number of containers around a byte (the top-level object's members are at
depth 1, the elements of `data` at 2, their members at 3):

- every byte at depth 4 or deeper is dropped: the contents of a vector (`"embedding": []`),
  of a rerank result's document (`"document": {}`);
- a string *value* at depth 3 is emptied (`"object": ""`, a base64 vector `"embedding": ""`);
  keys stay, so `usage.prompt_tokens_details.cached_tokens` is still read;
- everything else is kept byte for byte (ids, usage, an error's message, the list of results).

The kept skeleton is then read by `interpret` (json.loads), the one interpretation of a body on
every client path and both cores. The skeleton is bounded: past MAX_KEPT_BODY bytes (a
million results, a top-level string of megabytes, an HTML page) the answer stops being read
(`oversized`), as an SSE stream does at its bounds. The top-level value is complete when its
closing bracket comes (`done`); bytes after it are ignored.
"""

from __future__ import annotations

import json
import re

from benchc.client._sse_py import BODY_TOO_LARGE, MAX_SSE_BYTES
from benchc.redact import KEEP_PAST_CUT

# What a server said that benchc shows cut (an error's message to ERROR_CHARS characters, a
# malformed answer's or event's start to EXAMPLE_BYTES): cut by the client after the run's
# secrets are scrubbed (benchc.redact.clip); the parsers keep KEEP_PAST_CUT more, so that a
# secret across the shown bound is whole when it is scrubbed (both cores keep the same).
ERROR_CHARS = 200
ERROR_KEPT = ERROR_CHARS + KEEP_PAST_CUT
EXAMPLE_BYTES = 200
EXAMPLE_KEPT = EXAMPLE_BYTES + KEEP_PAST_CUT
# A server's count (tokens) enters up to this bound, else it is taken as not reported, on both
# cores: a point adds its requests' counts (Messages' prompt adds three), and a sum must stay
# an integer its result may hold (int64). 2^32 tokens is 400 times the spec's ceiling for one
# request, and a billion requests at it still add up within int64.
MAX_COUNT = 2**32

MAX_KEPT_BODY = MAX_SSE_BYTES  # bytes of a body's skeleton: the bound of one SSE event
DEEPEST_KEPT = 3  # depth of the deepest byte kept (a string value there is emptied)
# the bytes that change the skimmer's state, by where it is
_IN_STRING = re.compile(rb'["\\]')
_DROPPED = re.compile(rb'["\[\]{}]')
_KEPT = re.compile(rb'["\[\]{},:]')
# what a string being read is: kept whole, emptied (its quotes kept), dropped
_KEEP, _EMPTY, _DROP = 1, 2, 3


class BodySkim:
    """Feed it a body's bytes in any pieces; `kept` is its skeleton so far (see the module)."""

    __slots__ = ("kept", "depth", "done", "oversized", "_string", "_escape", "_object3", "_key3")

    def __init__(self) -> None:
        self.kept = bytearray()
        self.depth = 0
        self.done = False  # the top-level container closed
        self.oversized = 0  # BODY_TOO_LARGE once the skeleton passed MAX_KEPT_BODY (then final)
        self._string = 0  # 0 outside a string, else how the string is read
        self._escape = False  # the last byte read was a string's backslash
        self._object3 = False  # the container whose members are at depth 3 is an object
        self._key3 = False  # the next string at depth 3 is a key

    def feed(self, data: bytes) -> bool:
        """Skim one piece; True when the top-level value ended in it."""
        if self.done or self.oversized:
            return False
        out = self.kept
        i, n = 0, len(data)
        while i < n:
            if self._string:
                keep = self._string == _KEEP
                if self._escape:  # the byte after a backslash is never the string's end
                    self._escape = False
                    if keep:
                        out += data[i:i + 1]
                    i += 1
                    continue
                m = _IN_STRING.search(data, i)
                j = m.start() if m is not None else n
                if keep:
                    out += data[i:j + 1]
                if m is None:
                    break
                i = j + 1
                if data[j] == 92:
                    self._escape = True
                else:
                    if self._string == _EMPTY:
                        out += b'"'
                    self._string = 0
                continue
            if self.depth > DEEPEST_KEPT:
                m = _DROPPED.search(data, i)
                if m is None:
                    break
                i = m.end()
                c = data[m.start()]
                if c == 34:
                    self._string = _DROP
                elif c == 91 or c == 123:
                    self.depth += 1
                else:
                    self.depth -= 1
                    if self.depth == DEEPEST_KEPT:  # the dropped container's own closing bracket
                        out.append(c)
                continue
            m = _KEPT.search(data, i)
            if m is None:
                out += data[i:]
                break
            j = m.start()
            out += data[i:j + 1]
            i = j + 1
            c = data[j]
            if c == 34:
                value = self.depth == DEEPEST_KEPT and not self._key3
                self._string = _EMPTY if value else _KEEP
            elif c == 91 or c == 123:
                self.depth += 1
                if self.depth == DEEPEST_KEPT:
                    self._object3 = self._key3 = c == 123
            elif c == 93 or c == 125:
                if self.depth > 0:
                    self.depth -= 1
                    if self.depth == 0:
                        self.done = True
                        break
            elif self.depth == DEEPEST_KEPT:
                self._key3 = self._object3 if c == 44 else False  # after ',' a key again; after ':' a value
        if len(out) > MAX_KEPT_BODY:
            self.oversized = BODY_TOO_LARGE
            self.kept = bytearray()
        return self.done


def interpret(kept: bytes) -> tuple | None:
    """A body's fields, from its skeleton: (usage.prompt_tokens, else usage.total_tokens (a
    rerank answer's only count: such an answer has no output), or None; the number of
    results -- the length of `data`, else of `results` -- or None; the message of an error
    object or None). None when the skeleton is not a JSON object. A token count outside a
    signed 64-bit integer is taken as absent (the compiled core holds it in int64).

    This is the one interpretation of a non-streamed answer, on both cores."""
    try:
        obj = json.loads(kept)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    error = None
    err = obj.get("error")
    if err is not None:
        error = str(err.get("message", err) if isinstance(err, dict) else err)[:ERROR_KEPT]
    elif obj.get("object") == "error":  # vLLM's own error shape
        error = str(obj.get("message"))[:ERROR_KEPT]
    prompt = None
    usage = obj.get("usage")
    if isinstance(usage, dict):
        for key in ("prompt_tokens", "total_tokens"):
            pt = usage.get(key)
            if isinstance(pt, int) and not isinstance(pt, bool) and 0 <= pt <= MAX_COUNT:
                prompt = pt
                break
    results = None
    for key in ("data", "results"):
        v = obj.get(key)
        if isinstance(v, list):
            results = len(v)
            break
    return prompt, results, error
