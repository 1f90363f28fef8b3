"""Server-sent events framing, pure Python (the framer of the Python core; the compiled parser,
csrc/client/_stream_c.pyx, frames SSE inline).

Follows the WHATWG event-stream rules that matter for LLM servers: lines end
in CRLF, LF or a lone CR (also when the CR and LF arrive in different reads);
a blank line ends an event; `data:` lines (with or without the space after the
colon) are joined with LF; comment lines (`:` first) and other fields (`event`,
`id`, `retry`) are ignored; one UTF-8 BOM at the very start of the stream is dropped
(also when its bytes arrive in separate reads), as the standard's UTF-8 decode step does
(it was read as part of the first line's field name, and that event was lost).

Input is bounded: a line longer than MAX_SSE_BYTES (ended or not), or an event whose data
lines joined pass it, stops the decoder (`oversized` says which): it returns the events
completed before that line, drops what it held, and ignores every later byte, so a server
that streams one endless line costs at most MAX_SSE_BYTES and a read of memory. The
compiled parser (csrc/client/_stream_c.pyx) stops at the same line.
"""

from __future__ import annotations

import re

_EOL = re.compile(rb"\r\n|\r|\n")
# The longest SSE line, and the most data one event may carry (its data lines joined with LF).
# LLM servers send events of a few hundred bytes; a final event with usage and logprobs is a
# few KiB; 1 MiB is far past any of them and small enough to hold per stream.
MAX_SSE_BYTES = 1 << 20
LINE_TOO_LONG, EVENT_TOO_LARGE = 1, 2  # SSEDecoder.oversized (0: within the bounds)
BODY_TOO_LARGE = 3  # a non-streamed answer's skeleton past its bound (benchc.client._body_py)
TEXT_TOO_LARGE = 4  # an answer's kept text (keep_text: a session's next turn, the tokenizer) past its bound
# The most output text a stream keeps when asked to (bytes of its text pieces, text_bytes): an
# answer of a million tokens is some 4 MiB; a server that streams for ever past max_tokens would
# otherwise grow the kept text without end.
MAX_KEPT_TEXT_BYTES = 16 << 20
BOM = b"\xef\xbb\xbf"  # UTF-8's byte order mark: dropped once, first in a stream


def oversized_detail(code: int) -> str:
    """The words of an `oversized_event` error, for both cores' code."""
    if code == LINE_TOO_LONG:
        return f"an SSE line longer than {MAX_SSE_BYTES} bytes; the connection was closed"
    if code == TEXT_TOO_LARGE:
        return (f"an answer whose output text (kept for the next turn or the tokenizer) passed "
                f"{MAX_KEPT_TEXT_BYTES} bytes; the connection was closed")
    if code == BODY_TOO_LARGE:
        return (f"a JSON answer whose skeleton (all but its vectors and nested strings) passed "
                f"{MAX_SSE_BYTES} bytes; the connection was closed")
    return f"an SSE event carrying more than {MAX_SSE_BYTES} bytes of data; the connection was closed"


class SSEDecoder:
    """Incremental SSE decoder: feed it reads of any size, get complete data payloads."""

    __slots__ = ("_buf", "_data", "_has_data", "_skip_lf", "_size", "oversized", "_bom")

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] = []
        self._has_data = False
        self._skip_lf = False  # the last read ended in CR; an LF first in the next belongs to it
        self._size = 0  # the current event's data bytes, joined
        self.oversized = 0  # LINE_TOO_LONG or EVENT_TOO_LARGE once a bound was passed (then final)
        self._bom = 0  # the stream's first bytes so far that began a BOM (held back); -1 once past them

    @property
    def buffered(self) -> int:
        """Bytes held back because their line has not ended yet."""
        return len(self._buf)

    def feed(self, chunk: bytes) -> list[bytes]:
        """The data payloads of every event completed by `chunk`, in order (up to a line past
        the bounds, after which it returns nothing)."""
        if self.oversized:
            return []
        if self._bom < 0:
            return self._feed(chunk)
        held, data = self._bom, bytes(chunk)
        m = 0  # bytes of this read that go on with the BOM
        while held + m < 3 and m < len(data) and data[m] == BOM[held + m]:
            m += 1
        if held + m == 3:  # a whole BOM: dropped
            self._bom = -1
            return self._feed(data[m:])
        if m == len(data):  # still a BOM's beginning: held back
            self._bom = held + m
            return []
        self._bom = -1  # no BOM: what was held back is the stream's start
        events = self._feed(BOM[:held]) if held else []
        return events + self._feed(data) if not self.oversized else events

    def _feed(self, chunk: bytes) -> list[bytes]:
        buf = self._buf + chunk if self._buf else bytes(chunk)
        start = 0
        if self._skip_lf and buf[:1] == b"\n":
            start = 1
        self._skip_lf = False
        events: list[bytes] = []
        n = len(buf)
        for m in _EOL.finditer(buf, start):
            if m.start() - start > MAX_SSE_BYTES:
                self._stop(LINE_TOO_LONG)
                return events
            self._line(buf[start:m.start()], events)
            if self.oversized:
                return events
            start = m.end()
            if m.group() == b"\r" and start == n:
                self._skip_lf = True
        if n - start > MAX_SSE_BYTES:  # a line not ended yet, already too long
            self._stop(LINE_TOO_LONG)
            return events
        self._buf = buf[start:]
        return events

    def _stop(self, code: int) -> None:
        self.oversized = code
        self._buf, self._data, self._has_data, self._size = b"", [], False, 0

    def close(self) -> list[bytes]:
        """End of stream: an unterminated last line and event still count.

        Strict SSE would drop an event missing its blank line; servers that
        close right after `data: [DONE]` exist, and dropping their last chunk
        would lose tokens, so it is delivered.
        """
        events: list[bytes] = []
        if self._bom > 0 and not self.oversized:  # a BOM's beginning, and the stream ended
            events = self._feed(BOM[:self._bom])
        self._bom = -1
        if self.oversized:
            return events
        if self._buf:
            self._line(self._buf, events)
            self._buf = b""
        self._line(b"", events)
        return events

    def _line(self, line: bytes, events: list[bytes]) -> None:
        if not line:
            if self._has_data:
                events.append(b"\n".join(self._data))
                self._data = []
                self._has_data = False
                self._size = 0
            return
        if line[0] == 0x3A:  # ':' comment
            return
        name, sep, value = line.partition(b":")
        if name != b"data":
            return
        if value[:1] == b" ":
            value = value[1:]
        self._size += len(value) + (1 if self._has_data else 0)
        if self._size > MAX_SSE_BYTES:
            self._stop(EVENT_TOO_LARGE)
            return
        self._data.append(value)
        self._has_data = True
