"""How the aiohttp path reads a connection: one answer per request, as the own reader does.

aiohttp's response protocol reads a connection as a stream of answers, and its verdict on
some hostile answers depended on how the server's bytes fell into reads. OneAnswerProtocol
reads each request's answer as the own reader (benchc.client._response_py) does:

- The answer's head is handed to aiohttp's parser alone, before the bytes that follow it in
  the same read: the parser yields the head before it meets anything past the body. Without
  this, a body followed by bytes that are no answer (past a `Content-Length`, a 204's body,
  a broken chunked framing) made the parser refuse the whole read and lose the head, so the
  verdict was `stream_broken` when they came in the head's read, and the head's status
  (`http_status`, or the answer itself) when they came later.
- Bytes past the end of the answer are dropped and the connection closed: RFC 9112 6.3 lets
  a user agent discard them and forbids reading them as a separate answer (the next request
  on a kept connection would have been given them). The answer stands.
- A body whose framing breaks after its head came (a bad chunk size) fails the body
  (FramingBroken); aiohttp's compiled parser closed the connection without telling the body,
  which then waited for the idle timeout.
- A field name with a blank before its colon is refused (RFC 9112 5.1) after every name:
  aiohttp's compiled parser passed it after the few names it tracks itself.
- A server that sent bytes and then closed before any answer's head (blank lines only, a
  head cut short) is to aiohttp a server that disconnected, which benchc would count as
  `connect`: it answered, so it is `stream_broken` (AnsweredWithoutHead). One that sent such
  bytes and then nothing ran out a timer that named no byte (`first_byte_timeout`): it is a
  `timeout` (HeadStalled).
"""

from __future__ import annotations

import re
from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler
from aiohttp.http_exceptions import BadHttpMessage, HttpProcessingError

from benchc.client._response_py import BAD_HEADER_LINE, TCHAR, error_detail, exc_text, lost_detail

# the end of a blank line (LF CR? LF: also a CRLF CRLF), where a head ends or an empty line
# before a status line does (aiohttp skips those)
_BLANK_LINE = re.compile(rb"\n\r?\n")
_NOT_TOKEN = re.compile(b"[^" + re.escape(bytes(sorted(TCHAR))) + b"]")  # a byte no field name holds


class AnsweredWithoutHead(aiohttp.ServerDisconnectedError):
    """The connection ended after the server had sent bytes of an answer, but before the
    answer's head was whole: the server answered (`stream_broken`, as on the own reader),
    and the request is not the keep-alive race (nothing to retry)."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail

    def __str__(self) -> str:
        return self.detail


class HeadStalled(aiohttp.ServerTimeoutError):
    """The read timer ran out after the server had sent bytes of an answer, but before its
    head was whole: a `timeout` between reads, as on the own reader, not `first_byte_timeout`
    (some byte came)."""


class FramingBroken(aiohttp.ClientPayloadError):
    """The body's framing broke (a chunk size that is not one): the answer is broken whatever
    it said before, as on the own reader, unlike a body cut short by the connection's end."""


def blank_line_end(carry: bytes, data: bytes, pos: int) -> int:
    """Where the first blank line at or after data[pos] ends (an offset in `data`), `carry`
    being the last bytes before data[pos] (a blank line may begin in them); -1 when none."""
    if carry:
        joint = carry + data[pos:pos + 2]
        m = _BLANK_LINE.search(joint)
        if m is not None and m.end() > len(carry):
            return pos + m.end() - len(carry)
    m = _BLANK_LINE.search(data, pos)
    return m.end() if m is not None else -1


class OneAnswerProtocol(ResponseHandler):
    """aiohttp's client connection protocol, reading one answer per request (see the module).

    Each request's exchange starts at set_response_params, which aiohttp calls before it
    writes the request. `got_bytes`: the server has sent a byte since; `answer`: the body
    stream of its answer once the answer's (final, not 1xx) head came; `spare`: bytes came
    past the answer's end, so the connection is out of step and is not reused."""

    def __init__(self, *args: Any, **kwargs: Any):
        self.got_bytes = False
        self.answer: Any = None
        self.spare = False
        self._carry = b""  # the last bytes read while no head had come (a blank line may straddle reads)
        super().__init__(*args, **kwargs)

    def set_response_params(self, *args: Any, **kwargs: Any) -> None:
        self.got_bytes, self.answer, self._carry = False, None, b""
        super().set_response_params(*args, **kwargs)

    @property
    def should_close(self) -> bool:
        return self.spare or bool(ResponseHandler.should_close.fget(self))  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        answer = self.answer
        if answer is not None and data:  # the body's reads
            if answer.is_eof():
                self._past_the_answer()
            else:
                super().data_received(data)
            return
        if not data or self._parser is None or self._upgraded or self._payload_parser is not None:
            super().data_received(data)  # between requests (aiohttp keeps the bytes), or not HTTP/1
            return
        self.got_bytes = True
        pos, n = 0, len(data)
        while pos < n:  # up to each blank line, until the answer's head has come
            end = blank_line_end(self._carry, data, pos)
            if end < 0:
                end = n
            piece = data if pos == 0 and end == n else data[pos:end]
            super().data_received(piece)
            pos = end
            if self.answer is not None:
                break
            if self.exception() is not None:  # the parser refused the head
                return
            self._carry = (self._carry + piece[-2:])[-2:]
        if pos < n:
            if self.answer.is_eof():
                self._past_the_answer()
            else:
                super().data_received(data[pos:])

    def set_exception(self, exc: BaseException, *args: Any, **kwargs: Any) -> None:
        """aiohttp's parser failed (HttpProcessingError; a lost connection is another): after
        the answer's head came, its body fails too (FramingBroken). aiohttp's compiled parser
        told the body nothing, and a read of it waited for the idle timeout."""
        answer = self.answer
        if isinstance(exc, aiohttp.ServerTimeoutError) and self.got_bytes and answer is None:
            exc = HeadStalled(str(exc))
        if isinstance(exc, HttpProcessingError) and answer is not None and not answer.is_eof() \
                and answer.exception() is None:
            # aiohttp's words span lines (a caret under the byte): one line of them
            answer.set_exception(FramingBroken(" ".join(str(exc.message).split())[:200]))
        super().set_exception(exc, *args, **kwargs)

    def _past_the_answer(self) -> None:
        """Bytes past the end of the answer: dropped, and the connection with them."""
        self.spare = True
        if self.transport is not None:
            self.transport.close()

    def feed_data(self, data: Any, *args: Any, **kwargs: Any) -> None:
        """One parsed answer: (message head, body stream); a 1xx head is interim."""
        message = data[0]
        code = message.code
        if self.answer is not None:  # a second answer to one request: not this request's
            self._past_the_answer()
            return
        names = [name for name, _ in message.raw_headers]
        if _NOT_TOKEN.search(b"-".join(names)) is not None:  # one search for them all
            # a field name that is not a token: aiohttp's compiled parser passes a blank
            # before the colon after a few names it tracks (`Connection :`,
            # `Content-Length :`) and refuses it after any other, as the own reader does
            # (RFC 9112 5.1)
            bad = next(name for name in names if _NOT_TOKEN.search(name) is not None)
            self.set_exception(BadHttpMessage(error_detail(BAD_HEADER_LINE, bad + b":")))
            if self.transport is not None:
                self.transport.close()
            return
        if not 100 <= code < 200 or code == 101:  # aiohttp reads on past 1xx heads but 101
            self.answer = data[1]
        super().feed_data(data, *args, **kwargs)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self.got_bytes and self.answer is None and not self.is_eof():
            # aiohttp would say ServerDisconnectedError (or ClientOSError): a `connect` to
            # benchc. Leading blank lines, which aiohttp skips (RFC 9112 2.2 asks it of a
            # server reading requests), are bytes all the same
            why = lost_detail(exc_text(exc) if exc is not None else None, None, True)
            self.set_exception(AnsweredWithoutHead(why))
        super().connection_lost(exc)
