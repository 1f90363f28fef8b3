"""One HTTP/1.1 response, read as its bytes arrive: pure Python (the reference twin of
csrc/client/_response_c.pyx).

`ResponseReader(parser, sent_ns)` takes every read of a connection from the moment its
request was written at `sent_ns` (`feed(data, arrival_ns)`) and the connection's end
(`lost(exc, now_ns)`): it reads the status line and the headers that frame the body, then
the body -- chunked (benchc.client._chunked), Content-Length or read-to-close -- into
`parser` (a StreamParser) when the status is 200, else into an excerpt. Once `finished`,
`error` is None or (kind, detail) and `keep_alive` says whether the response lets the
connection carry another request (`Connection`, HTTP/1.0, framing); `keep_alive_header` is
its `Keep-Alive` value, which http1's keep-alive rules judge (timeout, max); `content_type`
its `Content-Type` (lower case, what a 200 that carried no event was). A stream that passes
the parser's bounds (_sse_py.MAX_SSE_BYTES) ends the response as an `oversized_event` error
and the connection with it. Both transports
of benchc.client.http1 read through it: the asyncio protocol callback and the receive loop
(benchc.client._rxloop), so a response means the same on both.

No answer precedes its request: a read stamped before `sent_ns` (the kernel's stamp is
CLOCK_REALTIME moved onto the monotonic clock, so a clock step can put it there) is dated
`sent_ns` instead, and counted in `early_reads`.

Scope: no compression (Accept-Encoding: identity is asked for), 1xx heads skipped, a
3-digit status, the headers that frame a body and say whether the connection stays open.
"""

from __future__ import annotations

import re
from typing import Any

from benchc.client._chunked_py import ChunkedDecoder
from benchc.client._sse_py import oversized_detail
from benchc.metrics.record import OVERSIZED, STREAM_BROKEN

MAX_HEAD = 64 * 1024  # response status line and headers
EXCERPT = 300  # bytes of a non-200 body kept for the error detail
MAX_LENGTH_DIGITS = 18  # a Content-Length that fits a signed 64-bit integer
# A head ends at its first blank line, its lines ended by CRLF or a bare LF (or a mix): the
# earliest one, so that a bare-LF head is not read on into the body (a chunked body's
# closing "0\r\n\r\n" was taken for the head's end)
_BLANK_LINE = re.compile(rb"\r?\n\r?\n")
_FRAMING_HEADERS = re.compile(rb"\n ?(transfer-encoding|content-length|connection|content-encoding"
                              rb"|keep-alive|content-type):([^\r\n]*)")
# a folded line (obs-fold: a line break, then blanks) joins the line before it; a user agent
# reads it as one SP (RFC 9112 5.2), as aiohttp does
_OBS_FOLD = re.compile(rb"\r?\n[ \t]+")

# Why a response failed. The compiled core reports a code and the bytes it names; the words
# are made here, once, for both cores.
HEAD_TOO_LARGE, BAD_STATUS_LINE, BAD_CONTENT_LENGTH, COMPRESSED, BAD_CHUNKED, LOST = range(1, 7)
OVERSIZED_STREAM = 7  # the parser stopped at a line or event past its bounds (its `oversized` says which)
CONFLICTING_LENGTH = 8  # two Content-Length headers, or one beside Transfer-Encoding (RFC 9112 6.3)
BAD_HEADER_LINE = 9  # a field line that is not NAME ":" VALUE, NAME a token (RFC 9110 5.1)
# a token's characters (RFC 9110 5.6.2): what a field name may hold
TCHAR = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
KEPT = 80  # bytes of the offending line or value named in a message; of a Keep-Alive or Content-Type value


def error_detail(code: int, named: bytes, why: str | None = None) -> str:
    """The words of a failure: `named` are the bytes it is about; `why` the chunked
    decoder's own message (BAD_CHUNKED) or the connection's end (LOST, see lost_detail)."""
    if code == HEAD_TOO_LARGE:
        return "response head too large"
    if code == BAD_STATUS_LINE:
        return f"bad status line: {named[:KEPT]!r}"
    if code == BAD_CONTENT_LENGTH:
        return f"bad Content-Length: {named[:40]!r}"
    if code == BAD_HEADER_LINE:
        return f"bad header line: {named[:KEPT]!r}"
    if code == CONFLICTING_LENGTH:
        return ("more than one Content-Length, or one with Transfer-Encoding: the body's end is "
                f"ambiguous{f' (Content-Length: {named[:40]!r})' if named else ''}")
    if code == COMPRESSED:
        return f"compressed response ({named[:KEPT].decode('latin-1')}) although identity was asked for"
    if code == BAD_CHUNKED:
        return f"bad chunked encoding: {why}"
    return why or ""


def compressed(content_encoding: bytes) -> bool:
    """A Content-Encoding value (lower case, stripped) that is not identity: benchc asks for
    identity and reads no compressed answer (the aiohttp path asks the same of its responses)."""
    return content_encoding not in (b"", b"identity")


_INTERIM = object()  # _one_head read a 1xx head; the next head follows in the same bytes


def lost_detail(exc_text: str | None, status: int | None, got_bytes: bool) -> str:
    """How a connection that ended under a response broke: the exception's words (None: the
    server closed it) and where in the response it was."""
    why = exc_text or "the server closed the connection"
    if status is None:
        why += " before any response" if not got_bytes else " inside the response head"
    else:
        why += " mid-response"
    return why[:200]


def exc_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class _Failed(Exception):
    def __init__(self, code: int, named: bytes):
        self.code, self.named = code, named


class ResponseReader:
    __slots__ = ("parser", "status", "got_bytes", "keep_alive", "keep_alive_header", "excerpt", "finished",
                 "error", "end_ns", "sent_ns", "early_reads", "last_rx_ns", "_head", "_mode", "_remaining",
                 "_decoder", "content_type")

    def __init__(self, parser: Any, sent_ns: int = 0) -> None:
        self.parser = parser
        self.status: int | None = None
        self.got_bytes = False
        self.keep_alive = True
        self.keep_alive_header: bytes | None = None  # `Keep-Alive: timeout=5, max=100`, lower case
        self.content_type: bytes | None = None  # lower case, KEPT bytes at most
        self.excerpt = b""
        self.finished = False
        self.error: tuple[str, str] | None = None
        self.end_ns = 0
        self.sent_ns = sent_ns  # taken just before the request was handed to the socket
        self.early_reads = 0  # reads stamped before sent_ns (dated sent_ns instead)
        self.last_rx_ns = sent_ns  # the last read's arrival (the idle timeout counts from it)
        self._head = b""
        self._mode = ""  # "chunked", "length" or "close", once the head is read
        self._remaining = 0
        self._decoder: ChunkedDecoder | None = None

    def feed(self, data: bytes, now: int) -> None:
        """One read's bytes, arrived at `now`."""
        if self.finished:
            return
        if now < self.sent_ns:
            now = self.sent_ns
            self.early_reads += 1
        self.got_bytes = True
        self.last_rx_ns = now
        if not self._mode:
            body = self._read_head(data)
            if body is None or self.finished:
                return
            data = body
        if self._mode == "chunked":
            decoder = self._decoder
            assert decoder is not None  # made with the chunked head
            payload = decoder.feed(data)
            if payload:
                self._deliver(payload, now)
                if self.finished:
                    return
            if decoder.done:
                self.keep_alive = self.keep_alive and not decoder.excess
                self._finish(now)
            elif decoder.error:
                self.keep_alive = False
                self._finish(now, (STREAM_BROKEN, error_detail(BAD_CHUNKED, b"", decoder.error)))
        elif self._mode == "length":
            if len(data) > self._remaining:
                self.keep_alive = False  # bytes past the body: the connection is out of step
                data = data[:self._remaining]
            self._remaining -= len(data)
            if data:
                self._deliver(data, now)
                if self.finished:
                    return
            if self._remaining == 0:
                self._finish(now)
        elif data:  # "close": the body ends when the server closes
            self._deliver(data, now)

    def lost(self, exc: BaseException | None, now: int) -> None:
        """The connection ended (`exc` None: the server closed it): the end of a read-to-close
        body; the end of a 200 whose answer had said it ended (`[DONE]`, or a whole JSON body)
        before its framing did (a server that closes without the closing chunk: every event
        came); else a broken response."""
        if self.finished:
            return
        if self._mode == "close" and exc is None:
            self._finish(now)
            return
        self.keep_alive = False
        if self.status == 200 and self.parser.done_ns:
            self._finish(now)
            return
        why = lost_detail(exc_text(exc) if exc is not None else None, self.status, self.got_bytes)
        self._finish(now, (STREAM_BROKEN, why))

    def _finish(self, now: int, error: tuple[str, str] | None = None) -> None:
        self.finished = True
        self.end_ns = now
        self.error = error

    def _deliver(self, payload: bytes, now: int) -> None:
        if self.status == 200:
            parser = self.parser
            parser.feed(payload, now)
            if parser.oversized:  # the parser stopped reading: so does the connection
                self.keep_alive = False
                self._finish(now, (OVERSIZED, oversized_detail(parser.oversized)))
        elif len(self.excerpt) < EXCERPT:
            self.excerpt += payload[:EXCERPT - len(self.excerpt)]

    def _read_head(self, data: bytes) -> bytes | None:
        """Consumes the status line and headers; returns the body bytes that followed them,
        or None while the head is incomplete (or broken: the response is then finished).
        Interim 1xx heads are skipped in a loop: a server may send thousands in one read."""
        body = self._one_head(data)
        while body is _INTERIM:
            body = self._one_head(b"")
        return body  # type: ignore[return-value]

    def _one_head(self, data: bytes) -> bytes | None | object:
        # empty lines before a status line are skipped, as aiohttp's parser skips them (a
        # server's stray CRLF after an answer); what is held never begins with one
        buf = (self._head + data).lstrip(b"\r\n")
        blank = _BLANK_LINE.search(buf)
        end, sep = (blank.start(), blank.end() - blank.start()) if blank else (-1, 0)
        if end >= 0 and end + sep > MAX_HEAD:  # whole, as when it comes in pieces (below): one verdict
            self.keep_alive = False
            self._finish(self.last_rx_ns, (STREAM_BROKEN, error_detail(HEAD_TOO_LARGE, b"")))
            return None
        if end < 0:
            if len(buf) > MAX_HEAD:
                self.keep_alive = False
                self._finish(self.last_rx_ns, (STREAM_BROKEN, error_detail(HEAD_TOO_LARGE, b"")))
            self._head = buf
            return None
        head, rest = buf[:end], buf[end + sep:]
        self._head = b""
        try:
            self._parse_head(head)
        except _Failed as e:
            # a head benchc cannot read has no status, whatever its first line said (as aiohttp,
            # which refuses the head before it names one): stream_broken, not http_status
            self.status = None
            self.keep_alive = False
            self._finish(self.last_rx_ns, (STREAM_BROKEN, error_detail(e.code, e.named)))
            return None
        if self.status is not None and 100 <= self.status < 200:  # 100 Continue and friends
            self.status, self._mode = None, ""
            self._head = rest
            return _INTERIM if rest else None
        if self._mode == "length" and self._remaining == 0:
            self.keep_alive = self.keep_alive and not rest  # bytes past the answer: out of step
            self._finish(self.last_rx_ns)
            return None
        return rest

    def _parse_head(self, head: bytes) -> None:
        status_line, _, fields = head.partition(b"\n")
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or len(parts[1]) != 3 \
                or not parts[1].isdigit():
            raise _Failed(BAD_STATUS_LINE, status_line)
        self.status = int(parts[1])
        lines = fields.split(b"\n") if fields else []
        for k, line in enumerate(lines):  # each NAME ":" VALUE, as aiohttp requires
            line = line[:-1] if line.endswith(b"\r") else line
            if line[:1] in (b" ", b"\t"):
                if k:
                    continue  # a folded line continues the one before (obsolete; joined below)
                # the first line led by one SP: a field all the same, as aiohttp's parser reads
                # it; by more blanks or a tab, a head RFC 9112 2.2 lets a recipient refuse, as
                # aiohttp does
                if line[:1] == b"\t" or line[1:2] in (b" ", b"\t"):
                    raise _Failed(BAD_HEADER_LINE, line)
                line = line[1:]
            # no blank before the colon (RFC 9112 5.1: such a line is invalid; aiohttp refuses it)
            name, colon, _ = line.partition(b":")
            if not colon or not name or not TCHAR.issuperset(name):
                raise _Failed(BAD_HEADER_LINE, line)
        if parts[0] == b"HTTP/1.0":
            self.keep_alive = False
        length, chunked, transfer_encoding = None, False, False
        # only the headers that frame the body or say whether the connection stays open
        # matter; one regex pass finds them
        for name, value in _FRAMING_HEADERS.findall(b"\n" + _OBS_FOLD.sub(b" ", fields.lower())):
            value = value.strip()
            if name == b"transfer-encoding":
                chunked = chunked or b"chunked" in value
                transfer_encoding = True
            elif name == b"content-length":
                if not value.isdigit() or len(value) > MAX_LENGTH_DIGITS:
                    raise _Failed(BAD_CONTENT_LENGTH, value)
                if length is not None:  # aiohttp refuses it too; which one would end the body?
                    raise _Failed(CONFLICTING_LENGTH, value)
                length = int(value)
            elif name == b"connection":
                if b"close" in value:
                    self.keep_alive = False
                elif b"keep-alive" in value:
                    self.keep_alive = True
            elif name == b"keep-alive":
                self.keep_alive_header = value[:KEPT]
            elif name == b"content-type":
                self.content_type = value[:KEPT]
            elif name == b"content-encoding" and compressed(value):
                raise _Failed(COMPRESSED, value)
        if transfer_encoding and length is not None:
            raise _Failed(CONFLICTING_LENGTH, b"")
        if 100 <= self.status < 200:
            return
        if self.status in (204, 304):  # ends at its head, whatever its headers say (RFC 9112 6.3)
            self._mode, self._remaining = "length", 0
        elif chunked:
            self._mode, self._decoder = "chunked", ChunkedDecoder()
        elif length is not None:
            self._mode, self._remaining = "length", length
        else:
            self._mode, self.keep_alive = "close", False
