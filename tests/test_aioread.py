"""The aiohttp path's connection protocol (benchc.client.aioread) reads one answer per request
whatever the reads: fed an answer and the bytes past it split at every point (the head's blank
line across two reads included), it hands over the same head and body and drops the rest.
tests/test_hardening_transports.py reads the same answers from real sockets, where the
kernel decides the reads."""

from __future__ import annotations

import asyncio

import pytest

from benchc.client.aioread import OneAnswerProtocol

BODY = b"data: [DONE]\n\n"
ANSWERS = {
    "length": b"HTTP/1.1 200 OK\r\nContent-Length: 14\r\n\r\n" + BODY,
    "chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\ne\r\n" + BODY + b"\r\n0\r\n\r\n",
    "bare-lf": b"HTTP/1.1 200 OK\nContent-Length: 14\n\n" + BODY,
    "interim-first": b"\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 14\r\n\r\n" + BODY,
}
PAST = [b"junk\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nab"]


class _Transport(asyncio.Transport):
    def __init__(self):
        super().__init__()
        self.closed = False

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def read(reads: list[bytes]):
    """(status, body, connection closed by the protocol, the protocol's exception)."""
    loop = asyncio.new_event_loop()
    try:
        proto = OneAnswerProtocol(loop)
        transport = _Transport()
        proto.connection_made(transport)
        proto.set_response_params(read_bufsize=1 << 20, auto_decompress=False)
        for r in reads:
            proto.data_received(r)
        answers = [m for m, _ in proto._buffer if not 100 <= m[0].code < 200]  # as ClientResponse skips 1xx
        if not answers:  # no answer was handed over
            return None, b"", transport.closed, proto.exception()
        message, payload = answers[0]
        body = b"".join(getattr(payload, "_buffer", ()))  # a 204's is aiohttp's empty stream
        return message.code, body, transport.closed, payload.exception()
    finally:
        loop.close()


@pytest.mark.parametrize("past", PAST)
@pytest.mark.parametrize("name", ANSWERS)
def test_an_answer_is_read_alike_at_every_split_and_bytes_past_it_are_dropped(name, past):
    answer = ANSWERS[name]
    wire = answer + past
    for cut in range(1, len(wire)):
        assert read([wire[:cut], wire[cut:]]) == (200, BODY, True, None), (name, cut)
    assert read([answer]) == (200, BODY, False, None)  # nothing past it: the connection stays


def test_a_204_ends_at_its_head():
    assert read([b"HTTP/1.1 204 No Content\r\n\r\n" + BODY]) == (204, b"", True, None)
