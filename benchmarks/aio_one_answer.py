"""What reading one answer per request costs the aiohttp path (benchc/client/aioread.py):
aiohttp's own connection protocol against OneAnswerProtocol, which hands the parser an
answer's head alone and drops bytes past the answer, on the same bytes, in one process.

    python benchmarks/aio_one_answer.py [--answers 20000] [--repeats 5]

Each answer is a vLLM-like streamed head and a chunked body of --events SSE events, fed as
aiohttp's loop would: `whole` (head and body in one read, a short answer), `head-first` (the
head alone, then the body). Prints per protocol and form the median over --repeats of the
microseconds per answer (the parser's work included; the two interleaved), and
OneAnswerProtocol's extra.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time

sys.path.insert(0, __file__.rsplit("/", 2)[0])

from aiohttp.client_proto import ResponseHandler  # noqa: E402

from benchc.client.aioread import OneAnswerProtocol  # noqa: E402

HEAD = (b"HTTP/1.1 200 OK\r\ndate: Tue, 01 Dec 2026 21:00:00 GMT\r\nserver: uvicorn\r\n"
        b"content-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n")


def body(events: int) -> bytes:
    out = b""
    for i in range(events):
        e = b"data: " + json.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": {"content": f"t{i}"}, "finish_reason": None}]}).encode() + b"\n\n"
        out += b"%x\r\n%s\r\n" % (len(e), e)
    return out + b"5\r\ndata:\r\n0\r\n\r\n"


class _Transport(asyncio.Transport):
    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


def per_answer_us(cls: type, reads: list[bytes], answers: int) -> float:
    loop = asyncio.new_event_loop()
    try:
        proto = cls(loop)
        proto.connection_made(_Transport())
        t = time.perf_counter()
        for _ in range(answers):
            proto.set_response_params(read_bufsize=1 << 20, auto_decompress=False,
                                      max_line_size=65536, max_field_size=65536)
            for r in reads:
                proto.data_received(r)
            message, payload = proto._buffer.popleft()[0]  # what ClientResponse.start reads
            payload._buffer.clear()
        return (time.perf_counter() - t) / answers * 1e6
    finally:
        loop.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--answers", type=int, default=20000)
    ap.add_argument("--events", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    b = body(args.events)
    forms = {"whole": [HEAD + b], "head-first": [HEAD, b]}
    for form, reads in forms.items():
        runs: dict[str, list[float]] = {"ResponseHandler": [], "OneAnswerProtocol": []}
        for _ in range(args.repeats):  # interleaved: a busy machine slows both alike
            for cls in (ResponseHandler, OneAnswerProtocol):
                runs[cls.__name__].append(per_answer_us(cls, reads, args.answers))
        med = {k: statistics.median(v) for k, v in runs.items()}
        extra = med["OneAnswerProtocol"] - med["ResponseHandler"]
        print(f"{form:10s} aiohttp {med['ResponseHandler']:6.2f} us/answer  one-answer "
              f"{med['OneAnswerProtocol']:6.2f} us/answer  extra {extra:+.2f} us "
              f"({med['OneAnswerProtocol'] / med['ResponseHandler']:.2f} x)")


if __name__ == "__main__":
    main()
