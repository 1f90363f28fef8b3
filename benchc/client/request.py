"""One streaming request against an OpenAI-compatible server, measured.

Timestamps are time.perf_counter_ns (CLOCK_MONOTONIC on Linux), one per socket
read, taken as soon as the read returns; every event in that read shares it.
TTFT counts from the first chunk that carries text (content, reasoning_content
or text) -- never from a role-only first chunk. Errors are classified, never
raised: the run goes on.
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler

from benchc.client import http1
from benchc.client._stream import StreamParser
from benchc.metrics.record import (
    CANCELLED,
    CONNECT,
    EMPTY,
    HTTP,
    IDLE_TIMEOUT,
    MALFORMED,
    STREAM_BROKEN,
    TIMEOUT,
    RequestRecord,
)
from benchc.plan.model import Sampling, Target
from benchc.plan.workload import Prompt

CLOCK = time.perf_counter_ns



def _take(rec: RequestRecord, parser: Any) -> None:
    """Copy what the parser measured into the record."""
    rec.first_text_ns = parser.first_text_ns or None
    rec.text_chunks = parser.text_chunks
    rec.text_bytes = parser.text_bytes
    rec.usage_output_tokens = parser.usage_completion if parser.usage_completion >= 0 else None
    rec.usage_input_tokens = parser.usage_prompt if parser.usage_prompt >= 0 else None
    rec.multi_token_chunks = parser.multi_token_chunks
    rec.finish_reason = parser.finish_reason


def build_body(target: Target, sampling: Sampling, prompt: Prompt, stream: bool = True,
               continuous_usage: bool = False, max_tokens: int | None = None) -> dict:
    body: dict[str, Any] = {"model": target.model}
    if target.api == "chat":
        body["messages"] = prompt.messages or [{"role": "user", "content": prompt.text}]
    else:
        body["prompt"] = prompt.text if prompt.text is not None else " ".join(
            str(m.get("content", "")) for m in prompt.messages or [])
    mt = max_tokens or sampling.max_tokens or prompt.output_tokens
    if mt is not None:
        body["max_tokens"] = mt
    body["temperature"] = sampling.temperature
    if sampling.top_p is not None:
        body["top_p"] = sampling.top_p
    if sampling.min_tokens is not None:
        body["min_tokens"] = sampling.min_tokens
    if sampling.ignore_eos:
        body["ignore_eos"] = True
    if sampling.stop:
        body["stop"] = sampling.stop
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    if stream:
        body["stream"] = True
        opts = {"include_usage": True}
        if continuous_usage:
            opts["continuous_usage_stats"] = True
        body["stream_options"] = opts
    body.update(sampling.extra_body)
    return body


def endpoint(target_base_url: str, api: str) -> str:
    return target_base_url.rstrip("/") + ("/chat/completions" if api == "chat" else "/completions")


def headers_for(target: Target) -> dict[str, str]:
    h = {"Content-Type": "application/json", **target.headers}
    if target.api_key:
        h.setdefault("Authorization", f"Bearer {target.api_key}")
    return h


class _StampingProtocol(ResponseHandler):
    """aiohttp's client connection protocol, stamping when bytes arrive.

    The reading task resumes only when the loop gets to it; with many streams
    finishing together, the later ones would be stamped after the earlier ones'
    bookkeeping. `rx_ns` holds the arrival time of the oldest bytes not yet read.
    """

    __slots__ = ("rx_ns",)

    def __init__(self, *args: Any, **kwargs: Any):
        self.rx_ns = 0
        super().__init__(*args, **kwargs)

    def data_received(self, data: bytes) -> None:
        if not self.rx_ns:
            self.rx_ns = CLOCK()
        super().data_received(data)


def make_connector() -> aiohttp.TCPConnector:
    """A pooled connector (no limit, DNS cached) whose connections stamp arrivals.

    The protocol factory is a private attribute of aiohttp's connector; if a
    future aiohttp renames it, reads are stamped when the reading task resumes.
    """
    conn = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=60)
    if hasattr(conn, "_factory") and hasattr(conn, "_loop"):
        conn._factory = functools.partial(_StampingProtocol, loop=conn._loop)
    return conn


def _arrival(proto: Any) -> int:
    """When the bytes just read arrived (and start afresh for the next ones)."""
    now = CLOCK()
    rx = getattr(proto, "rx_ns", 0)
    if rx:
        proto.rx_ns = 0
        return rx
    return now


def make_trace_config() -> aiohttp.TraceConfig:
    """A trace hook that stamps RequestRecord.t0_ns when the request goes out.

    aiohttp buffers the headers and writes them with the body from a task of
    its own, a loop iteration or more after `post()` is called; the body-chunk
    signal fires right after that write (a non-blocking socket send), which is
    the closest aiohttp lets a client get to "just before the request is written".
    """

    async def on_chunk_sent(session: aiohttp.ClientSession, ctx: Any, params: Any) -> None:
        rec = ctx.trace_request_ctx
        if isinstance(rec, RequestRecord) and not rec.t0_sent:
            rec.t0_ns = CLOCK()
            rec.t0_sent = True

    tc = aiohttp.TraceConfig()
    tc.on_request_chunk_sent.append(on_chunk_sent)
    return tc


async def send(session: aiohttp.ClientSession, url: str, headers: dict, body: bytes,
               rec: RequestRecord, target: Target, keep_text: bool = False) -> RequestRecord:
    """Send one streaming request and fill `rec`; never raises except on cancellation.
    `keep_text` keeps the output for counting with a tokenizer after the point."""
    parser = StreamParser(keep_text)
    rec.parser = parser
    rec.path = "aiohttp"
    timeout = aiohttp.ClientTimeout(total=target.timeout_s, sock_read=target.idle_timeout_s)
    # t0 starts before aiohttp prepares the request; the session's trace hook
    # (make_trace_config) moves it to the moment the request was written, so the
    # client's own request preparation and connection-pool wait stay out of TTFT.
    rec.t0_ns = CLOCK()
    try:
        async with session.post(url, data=body, headers={**headers, "x-request-id": rec.id},
                                timeout=timeout, trace_request_ctx=rec) as resp:
            rec.status = resp.status
            if resp.status != 200:
                text = (await resp.read())[:300].decode("utf-8", "replace")
                rec.error, rec.error_detail = HTTP, f"{resp.status}: {text}"
                rec.end_ns = CLOCK()
                return rec
            content = resp.content
            proto = resp.connection.protocol if resp.connection else None
            if proto is not None and hasattr(proto, "rx_ns"):
                proto.rx_ns = 0  # bytes before here were headers; the body's own arrive next
            # The hot loop: one parser call per read, with the read's arrival time; the
            # parser frames events, extracts text/usage/finish and times text chunks.
            while True:
                data = await content.readany()
                if not data:
                    break
                parser.feed(data, _arrival(proto))
            parser.close(CLOCK())
            rec.end_ns = parser.done_ns or CLOCK()
    except asyncio.CancelledError:
        rec.error, rec.end_ns = rec.error or CANCELLED, CLOCK()
        raise
    except aiohttp.ClientConnectorError as e:
        rec.error, rec.error_detail = CONNECT, str(e)[:200]
    except asyncio.TimeoutError as e:  # noqa: UP041 - aiohttp raises this alias on 3.11
        rec.error = IDLE_TIMEOUT if rec.first_text_ns is not None or rec.status == 200 else TIMEOUT
        if (CLOCK() - rec.t0_ns) / 1e9 >= target.timeout_s * 0.999:
            rec.error = TIMEOUT
        rec.error_detail = str(e)[:200] or type(e).__name__
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError,
            ConnectionError) as e:
        rec.error, rec.error_detail = STREAM_BROKEN if rec.status == 200 else CONNECT, str(e)[:200]
    except aiohttp.ClientError as e:
        rec.error, rec.error_detail = STREAM_BROKEN, f"{type(e).__name__}: {e}"[:200]
    return _conclude(rec, parser)


def _conclude(rec: RequestRecord, parser: Any) -> RequestRecord:
    """Copy the parser's measures into the record and judge a stream that ended without
    a transport error: malformed chunks, an error event, no text, no ending."""
    if rec.end_ns is None:
        rec.end_ns = CLOCK()
    _take(rec, parser)
    if rec.error is None and parser.malformed:
        rec.error = MALFORMED
        rec.error_detail = (parser.malformed_example or b"").decode("utf-8", "replace")
    if rec.error is None and parser.error_event is not None:
        rec.error, rec.error_detail = STREAM_BROKEN, f"error event: {parser.error_event}"
    if rec.error is None and rec.text_chunks == 0:
        rec.error, rec.error_detail = EMPTY, "the stream carried no text"
    if rec.error is None and not parser.done_ns and rec.finish_reason is None:
        rec.error, rec.error_detail = STREAM_BROKEN, "the stream ended without [DONE] or a finish_reason"
    return rec


async def send_native(pool: http1.Pool, url: str, headers: dict, body: bytes, rec: RequestRecord,
                      target: Target, keep_text: bool = False) -> RequestRecord:
    """As send(), on benchc's own HTTP/1.1 connections (benchc.client.http1): each socket read
    is stamped, de-chunked and parsed in one protocol callback, and t0 is taken right
    after the request is handed to the socket. `rec.path` says which transport read the
    response: the receive loop or the asyncio loop (see benchc.client.http1)."""
    parser = pool.StreamParser(keep_text)
    rec.parser = parser
    rec.t0_ns = CLOCK()

    def sent() -> None:
        rec.t0_ns = CLOCK()
        rec.t0_sent = True

    try:
        ex = await http1.exchange(pool, pool.origin(url, headers), rec.id, body, parser,
                                  target.timeout_s, target.idle_timeout_s, sent)
    except asyncio.CancelledError:
        rec.error, rec.end_ns = rec.error or CANCELLED, CLOCK()
        raise
    except asyncio.TimeoutError as e:  # noqa: UP041 - the connect did not finish in time
        rec.error, rec.error_detail = TIMEOUT, f"connect: {e or type(e).__name__}"[:200]
        return _conclude(rec, parser)
    except (OSError, ValueError) as e:
        rec.error, rec.error_detail = CONNECT, (str(e) or type(e).__name__)[:200]
        return _conclude(rec, parser)
    rec.status = ex.status
    rec.path = ex.path
    if ex.error is None and ex.status != 200:
        rec.error = HTTP
        rec.error_detail = f"{ex.status}: {ex.excerpt.decode('utf-8', 'replace')}"
        rec.end_ns = ex.end_ns
        return rec
    if ex.error is not None:
        kind, rec.error_detail = ex.error
        # as on aiohttp: a connection lost before a 200 arrived is a connect failure
        rec.error = CONNECT if kind == STREAM_BROKEN and ex.status != 200 else kind
    parser.close(ex.end_ns)
    rec.end_ns = parser.done_ns or ex.end_ns
    return _conclude(rec, parser)
