"""Server-sent events framing, pure Python (the framer of the Python core; the compiled parser,
csrc/client/_stream_c.pyx, frames SSE inline).

Follows the WHATWG event-stream rules that matter for LLM servers: lines end
in CRLF, LF or a lone CR (also when the CR and LF arrive in different reads);
a blank line ends an event; `data:` lines (with or without the space after the
colon) are joined with LF; comment lines (`:` first) and other fields (`event`,
`id`, `retry`) are ignored.
"""

from __future__ import annotations

import re

_EOL = re.compile(rb"\r\n|\r|\n")


class SSEDecoder:
    """Incremental SSE decoder: feed it reads of any size, get complete data payloads."""

    __slots__ = ("_buf", "_data", "_has_data", "_skip_lf")

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] = []
        self._has_data = False
        self._skip_lf = False  # the last read ended in CR; an LF first in the next belongs to it

    @property
    def buffered(self) -> int:
        """Bytes held back because their line has not ended yet."""
        return len(self._buf)

    def feed(self, chunk: bytes) -> list[bytes]:
        """The data payloads of every event completed by `chunk`, in order."""
        buf = self._buf + chunk if self._buf else bytes(chunk)
        start = 0
        if self._skip_lf and buf[:1] == b"\n":
            start = 1
        self._skip_lf = False
        events: list[bytes] = []
        n = len(buf)
        for m in _EOL.finditer(buf, start):
            self._line(buf[start:m.start()], events)
            start = m.end()
            if m.group() == b"\r" and start == n:
                self._skip_lf = True
        self._buf = buf[start:]
        return events

    def close(self) -> list[bytes]:
        """End of stream: an unterminated last line and event still count.

        Strict SSE would drop an event missing its blank line; servers that
        close right after `data: [DONE]` exist, and dropping their last chunk
        would lose tokens, so it is delivered.
        """
        events: list[bytes] = []
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
            return
        if line[0] == 0x3A:  # ':' comment
            return
        name, sep, value = line.partition(b":")
        if name != b"data":
            return
        if value[:1] == b" ":
            value = value[1:]
        self._data.append(value)
        self._has_data = True
