"""A minimal fast streaming server for the client harnesses: OpenAI-style chat-completion SSE
(or, at /v1/responses and /v1/messages, those APIs' events as vLLM 0.32 writes them),
every event pre-encoded as its own HTTP chunk, written by a bare asyncio protocol (uvloop when
installed). It exists so that the server is not what limits a client benchmark: the embedded
simulator builds each chunk and writes it through aiohttp, which caps it well below the write
rates a per-token client benchmark needs on one core.

    python benchmarks/fast_server.py [--port 0] [--interval-ms 5] [--tokens-per-write 1]

Every request streams `max_tokens` tokens (from its JSON body): per-token mode writes
`--tokens-per-write` events to every live stream every `--interval-ms` (one write per stream
per tick, so a client that keeps up reads each write on its own); `--interval-ms 0` writes the
whole response at once (coalesced), encoded once per length and API. Keep-alive; one
response per request.

Prints `listening on http://127.0.0.1:PORT/v1`; on SIGTERM prints one JSON line: writes,
tokens, the server's CPU seconds and wall seconds while streams were live, and how many ticks
started more than one interval late (then the server, not the client, set the pace).

What it sustains (2-core VM shared with other jobs, 256 streams drained by a bare asyncio
reader on the other core, ticks back to back): 7.8 us of CPU per write, most of it the
kernel's loopback send, so about 125k one-token writes/s for a core of its own; with the
core shared it wrote 24-31k/s at 20-24% of it, and kept its ticks on time (a few late in
thousands) up to about 12-15k writes/s, the default cap of client_ingest.py. The embedded
simulator, one write per token (`sim_throughput.py --chunks-per-write 1`), gave 30-71k/s
on the same machine, unpinned.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import signal
import sys
import time

HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n")


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(obj: dict) -> bytes:
    return _chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


# one token's event, as vLLM writes it (the same bytes for every token: pre-encoded)
TOKEN = _event({"id": "chatcmpl-fast", "object": "chat.completion.chunk", "created": 1, "model": "fast",
                "choices": [{"index": 0, "delta": {"content": " tok"}, "logprobs": None,
                             "finish_reason": None}]})


def _typed(kind: str, obj: dict) -> bytes:
    """An event of the Responses or Messages API, with its `event:` line, as vLLM writes them."""
    data = json.dumps({**obj, "type": kind}, separators=(",", ":")).encode()
    return _chunk(b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n")


def _response(status: str, usage: dict | None) -> dict:
    return {"id": "resp_fast", "created_at": 1, "incomplete_details": None, "model": "fast",
            "object": "response", "output": [], "status": status, "usage": usage}


MAX_TOKENS = 1 << 14  # the Responses API's events differ per token (sequence_number): pre-encoded
_RESPONSES_TOKENS: list[bytes] = []


def token(api: str, i: int) -> bytes:
    """Token i's event (i from 0) of `api`: chat's are all the same; the Responses API counts
    its events (sequence_number, after the 4 that open the response)."""
    if api == "responses":
        if not _RESPONSES_TOKENS:
            _RESPONSES_TOKENS.extend(
                _chunk(b'event: response.output_text.delta\ndata: {"content_index":0,"delta":" tok",'
                       b'"item_id":"msg_fast","logprobs":[],"output_index":0,"sequence_number":'
                       + str(k + 4).encode() + b',"type":"response.output_text.delta"}\n\n')
                for k in range(MAX_TOKENS))
        return _RESPONSES_TOKENS[i]
    if api == "messages":
        return MESSAGES_TOKEN
    return TOKEN


MESSAGES_TOKEN = _chunk(b'event: content_block_delta\ndata: {"type":"content_block_delta",'
                        b'"delta":{"type":"text_delta","text":" tok"},"index":0}\n\n')


def opening(api: str) -> bytes:
    """What goes before the first token (after the head): the events that open the answer."""
    if api == "responses":
        started = _response("in_progress", None)
        item = {"id": "msg_fast", "content": [], "role": "assistant", "status": "in_progress",
                "type": "message"}
        part = {"annotations": [], "text": "", "type": "output_text"}
        return (_typed("response.created", {"response": started, "sequence_number": 0})
                + _typed("response.in_progress", {"response": started, "sequence_number": 1})
                + _typed("response.output_item.added", {"item": item, "output_index": 0,
                                                        "sequence_number": 2})
                + _typed("response.content_part.added", {"content_index": 0, "item_id": "msg_fast",
                                                         "output_index": 0, "part": part,
                                                         "sequence_number": 3}))
    if api == "messages":
        return (_typed("message_start", {"message": {"id": "msg_fast", "type": "message", "role": "assistant",
                                                     "content": [], "model": "fast", "stop_reason": None,
                                                     "stop_sequence": None,
                                                     "usage": {"input_tokens": 1, "output_tokens": 0}}})
                + _typed("content_block_start", {"content_block": {"type": "text", "text": ""}, "index": 0}))
    return b""


def tail(tokens: int, api: str = "chat") -> bytes:
    if api == "responses":
        # as vLLM 0.32 ends a response (tests/data/streams/vllm-responses.sse): the text once
        # more in each of output_text.done, content_part.done, output_item.done and
        # response.completed's output, beside the usage the client reads
        n, text = tokens + 4, " tok" * tokens
        part = {"annotations": [], "text": text, "type": "output_text", "logprobs": None}
        item = {"id": "msg_fast", "content": [part], "role": "assistant", "status": "completed",
                "type": "message", "phase": None}
        usage = {"input_tokens": 1, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                 "output_tokens": tokens,
                 "output_tokens_details": {"reasoning_tokens": 0, "tool_output_tokens": 0},
                 "total_tokens": tokens + 1}
        resp = {**_response("incomplete", usage), "incomplete_details": {"reason": "max_output_tokens"},
                "output": [item]}
        return (_typed("response.output_text.done", {"content_index": 0, "item_id": "msg_fast",
                                                     "logprobs": [], "output_index": 0,
                                                     "sequence_number": n, "text": text})
                + _typed("response.content_part.done", {"content_index": 0, "item_id": "msg_fast",
                                                        "output_index": 0, "part": part,
                                                        "sequence_number": n + 1})
                + _typed("response.output_item.done", {"item": item, "output_index": 0,
                                                       "sequence_number": n + 2})
                + _typed("response.completed", {"response": resp, "sequence_number": n + 3}) + b"0\r\n\r\n")
    if api == "messages":
        return (_typed("content_block_stop", {"index": 0})
                + _typed("message_delta", {"delta": {"stop_reason": "max_tokens", "stop_sequence": None},
                                           "usage": {"input_tokens": 1, "output_tokens": tokens,
                                                     "cache_creation_input_tokens": 0,
                                                     "cache_read_input_tokens": 0}})
                + _typed("message_stop", {}) + b"0\r\n\r\n")
    return (_event({"id": "chatcmpl-fast", "object": "chat.completion.chunk", "created": 1, "model": "fast",
                    "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"}]})
            + _event({"id": "chatcmpl-fast", "object": "chat.completion.chunk", "created": 1, "model": "fast",
                      "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": tokens,
                                               "total_tokens": tokens + 1}})
            + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")


_WHOLE: dict[tuple[int, str], bytes] = {}


def whole(tokens: int, api: str) -> bytes:
    """A whole response (coalesced mode), encoded once per (tokens, api): building it per
    request cost the server 53 us for chat, 198 us for Responses and 126 us for Messages on
    this VM, so the server set a slower pace for the latter two and their client woke more
    often for fewer finished responses (more client CPU per request, not the client's own)."""
    got = _WHOLE.get((tokens, api))
    if got is None:
        body = TOKEN * tokens if api == "chat" else b"".join(token(api, i) for i in range(tokens))
        got = _WHOLE[(tokens, api)] = HEAD + opening(api) + body + tail(tokens, api)
    return got


class Stats:
    writes = 0
    tokens = 0
    late_ticks = 0
    ticks = 0


class Stream(asyncio.Protocol):
    def __init__(self, server: Server):
        self.server = server
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head, length = self.buf[:end].lower(), 0
            i = head.find(b"content-length:")
            if i >= 0:
                j = head.find(b"\r\n", i)
                length = int(head[i + 15:j if j >= 0 else len(head)])
            if len(self.buf) < end + 4 + length:
                return
            body, self.buf = self.buf[end + 4:end + 4 + length], self.buf[end + 4 + length:]
            if not head.startswith(b"post"):  # a run's control requests (models, metrics): none here
                self.transport.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                continue
            req = json.loads(body)
            tokens = min(int(req.get("max_tokens") or req.get("max_output_tokens") or 16), MAX_TOKENS)
            first = head.split(b"\r\n", 1)[0]
            api = "responses" if b"/responses" in first else "messages" if b"/messages" in first else "chat"
            self.server.start(self, tokens, api)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.gone(self)


class Server:
    def __init__(self, interval_s: float, per_write: int):
        self.interval_s = interval_s
        self.per_write = per_write
        self.live: dict[Stream, list] = {}  # stream -> [tokens still to write, tokens asked, api]
        self.ticking = False
        self.cpu0 = self.wall0 = None
        self.busy_s = 0.0

    def start(self, s: Stream, tokens: int, api: str = "chat") -> None:
        if self.interval_s <= 0:  # coalesced: the whole response in one write
            s.transport.write(whole(tokens, api))
            Stats.writes += 1
            Stats.tokens += tokens
            return
        s.transport.write(HEAD + opening(api))
        self.live[s] = [tokens, tokens, api]
        if not self.ticking:
            self.ticking = True
            loop = asyncio.get_running_loop()
            loop.call_at(loop.time() + self.interval_s, self._tick, loop.time() + self.interval_s)

    def gone(self, s: Stream) -> None:
        self.live.pop(s, None)

    def _tick(self, due: float) -> None:
        loop = asyncio.get_running_loop()
        if loop.time() - due > self.interval_s:
            Stats.late_ticks += 1
        Stats.ticks += 1
        done = []
        k = self.per_write
        chunk = TOKEN * k
        for s, todo in self.live.items():
            left, api = todo[0], todo[2]
            sent = todo[1] - left
            if left > k:
                more = chunk if api == "chat" else b"".join(token(api, sent + j) for j in range(k))
                s.transport.write(more)
                todo[0] = left - k
                Stats.tokens += k
            else:
                end = TOKEN * left if api == "chat" else b"".join(token(api, sent + j) for j in range(left))
                s.transport.write(end + tail(todo[1], api))
                Stats.tokens += left
                done.append(s)
            Stats.writes += 1
        for s in done:
            del self.live[s]
        if self.live:
            nxt = due + self.interval_s
            loop.call_at(max(nxt, loop.time()), self._tick, nxt)
        else:
            self.ticking = False


async def main(a: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    server = Server(a.interval_ms / 1000, a.tokens_per_write)
    srv = await loop.create_server(lambda: Stream(server), "127.0.0.1", a.port, backlog=4096)
    port = srv.sockets[0].getsockname()[1]
    print(f"listening on http://127.0.0.1:{port}/v1", flush=True)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    ru0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    await stop.wait()
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"writes": Stats.writes, "tokens": Stats.tokens, "ticks": Stats.ticks,
                      "late_ticks": Stats.late_ticks,
                      "cpu_s": round(ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime, 3),
                      "wall_s": round(time.perf_counter() - t0, 3)}), flush=True)
    srv.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--interval-ms", type=float, default=5.0, help="0: each response in one write")
    ap.add_argument("--tokens-per-write", type=int, default=1)
    args = ap.parse_args()
    try:
        import uvloop
    except ImportError:
        asyncio.run(main(args))
    else:
        uvloop.run(main(args))
    sys.exit(0)
