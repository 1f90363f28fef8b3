"""How the aiohttp path reads a connection: one answer per request, as the own reader does.

aiohttp's response protocol reads a connection as a stream of answers and lets the server
decide what each read holds. Two of its verdicts differ from the own reader's
(benchc.client._response_py), and one of them depends on how the bytes arrive:

- a server that sent bytes and then closed before any answer's head (blank lines only, a
  head cut short) is to aiohttp a server that disconnected, which benchc would count as
  `connect`: it answered, so it is `stream_broken` (AnsweredWithoutHead).

RFC 9112 is cited where it decides.
"""

from __future__ import annotations

from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler

from benchc.client._response_py import exc_text, lost_detail


class AnsweredWithoutHead(aiohttp.ServerDisconnectedError):
    """The connection ended after the server had sent bytes of an answer, but before the
    answer's head was whole: the server answered (`stream_broken`, as on the own reader),
    and the request is not the keep-alive race (nothing to retry)."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail

    def __str__(self) -> str:
        return self.detail


class OneAnswerProtocol(ResponseHandler):
    """aiohttp's client connection protocol, knowing whether the server has sent any byte for
    the request now on the connection (`got_bytes`) and whether its answer's head came
    (`answered`): each request's exchange starts at set_response_params, which aiohttp calls
    before it writes the request."""

    def __init__(self, *args: Any, **kwargs: Any):
        self.got_bytes = False
        self.answered = False
        super().__init__(*args, **kwargs)

    def set_response_params(self, *args: Any, **kwargs: Any) -> None:
        self.got_bytes = self.answered = False
        super().set_response_params(*args, **kwargs)

    def data_received(self, data: bytes) -> None:
        if data:
            self.got_bytes = True
        super().data_received(data)

    def feed_data(self, data: Any, *args: Any, **kwargs: Any) -> None:
        """One parsed answer: (message head, body stream); a 1xx head is interim."""
        code = data[0].code
        if not 100 <= code < 200 or code == 101:  # aiohttp reads on past 1xx heads but 101
            self.answered = True
        super().feed_data(data, *args, **kwargs)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self.got_bytes and not self.answered and not self.is_eof():
            # aiohttp would say ServerDisconnectedError (or ClientOSError): a `connect` to
            # benchc. Leading blank lines, which aiohttp skips (RFC 9112 2.2 asks it of a
            # server reading requests), are bytes all the same
            why = lost_detail(exc_text(exc) if exc is not None else None, None, True)
            self.set_exception(AnsweredWithoutHead(why))
        super().connection_lost(exc)
