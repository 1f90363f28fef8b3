"""One streaming request against an OpenAI-compatible server, measured.

Timestamps are time.perf_counter_ns (CLOCK_MONOTONIC on Linux), one per socket
read, taken as soon as the read returns; every event in that read shares it.
TTFT counts from the first chunk that carries output of any kind (content, reasoning,
a completion's text, a tool call's name or arguments) -- never from a role-only first chunk.
Errors are classified, never raised: the run goes on.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import yarl

from benchc import redact
from benchc.client import http1
from benchc.client._body_py import ERROR_CHARS, ERROR_KEPT, EXAMPLE_BYTES, EXAMPLE_KEPT
from benchc.client._response_py import COMPRESSED, MAX_HEAD, compressed, error_detail
from benchc.client._sse_py import oversized_detail
from benchc.client._stream import StreamParser
from benchc.client._stream_py import REASON_CHARS, REASON_KEPT
from benchc.client.aioread import AnsweredWithoutHead, FramingBroken, HeadStalled, OneAnswerProtocol
from benchc.client.apis import APIS
from benchc.client.bounded import error_text
from benchc.client.eager import started
from benchc.metrics.record import (
    CANCELLED,
    CLIENT_EXHAUSTED,
    CONNECT,
    EMPTY,
    FIRST_BYTE_TIMEOUT,
    HTTP,
    IDLE_TIMEOUT,
    MALFORMED,
    NOT_SSE,
    OVERSIZED,
    STREAM_BROKEN,
    TIMEOUT,
    RequestRecord,
)
from benchc.plan.model import Sampling, Target
from benchc.plan.workload import Prompt

CLOCK = time.perf_counter_ns
# A socket that could not be made or bound: the client's own descriptors (EMFILE, ENFILE) or
# local ports (EADDRNOTAVAIL) ran out. Not the server's doing: CLIENT_EXHAUSTED, never CONNECT
# (which counts toward a dead server, benchc.run.deadserver).
_EXHAUSTED_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.EADDRNOTAVAIL})


def connect_failure(exc: BaseException) -> str:
    """The error kind of a request that could not connect: CLIENT_EXHAUSTED when the client
    ran out of descriptors or ports (the errno of `exc`, of aiohttp's wrapped os_error, or of
    an exception it was raised from), else CONNECT."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        for err in (e, getattr(e, "os_error", None)):
            if getattr(err, "errno", None) in _EXHAUSTED_ERRNOS:
                return CLIENT_EXHAUSTED
        e = e.__cause__ or e.__context__
    return CONNECT


def _is_event_stream(content_type: str | None) -> bool:
    return content_type is not None and content_type.split(";")[0].strip().lower() == "text/event-stream"


def not_sse_detail(content_type: str | None, first_bytes: bytes) -> str:
    """What a 200 that carried no event was: its Content-Type and its first bytes, with every
    secret value of the run replaced (a gateway's page may echo the request's headers)."""
    scrub = redact.active()
    began = first_bytes.decode("utf-8", "replace")
    began = scrub.cut(began, len(began))  # the parser kept the first bytes: hide a secret cut there
    what = f"Content-Type {content_type!r}" if content_type else "no Content-Type"
    body = f"its body began {began!r}" if first_bytes else "its body was empty"
    return scrub.cut(f"the 200 answer was not an event stream ({what}; {body})", 400)


def _take(rec: RequestRecord, parser: Any) -> None:
    """Copy what the parser measured into the record."""
    at, tokens = rec.times, rec.tokens
    at.first_text_ns = parser.first_text_ns or None
    at.first_reasoning_ns = parser.first_reasoning_ns or None
    at.first_answer_ns = parser.first_answer_ns or None
    at.first_tool_ns = parser.first_tool_ns or None
    tokens.reasoning_chunks = parser.reasoning_chunks
    tokens.tool_chunks = parser.tool_chunks
    tokens.unknown_events = parser.unknown_events
    tokens.usage_reasoning_tokens = parser.usage_reasoning if parser.usage_reasoning >= 0 else None
    tokens.text_chunks = parser.text_chunks
    tokens.text_bytes = parser.text_bytes
    tokens.usage_output_tokens = parser.usage_completion if parser.usage_completion >= 0 else None
    tokens.usage_input_tokens = parser.usage_prompt if parser.usage_prompt >= 0 else None
    tokens.multi_token_chunks = parser.multi_token_chunks
    rec.payload.results = parser.results if parser.results >= 0 else None
    finish = parser.finish_reason  # the server's words, shown scrubbed and cut
    if finish is not None:
        finish = redact.clip(finish, REASON_CHARS, len(finish) >= REASON_KEPT)
    outcome = rec.outcome
    outcome.finish_reason = finish
    timings = parser.server_timings
    outcome.server_timings = timings
    if parser.usage_cached >= 0:
        rec.cache.cached_tokens, rec.cache.cached_source = parser.usage_cached, "usage"
    elif timings is not None and "cache_n" in timings:
        rec.cache.cached_tokens, rec.cache.cached_source = timings["cache_n"], "timings"


def build_body(target: Target, sampling: Sampling, prompt: Prompt, stream: bool = True,
               continuous_usage: bool = False, max_tokens: int | None = None,
               tools: dict | None = None, previous_response_id: str | None = None) -> dict:
    """The request body for target.api (benchc.client.apis), offering `tools` where given, and
    naming the response a conversation's server-kept history ends with (`previous_response_id`)."""
    return APIS[target.api].body(target, sampling, prompt, stream=stream,
                                 continuous_usage=continuous_usage, max_tokens=max_tokens, tools=tools,
                                 previous_response_id=previous_response_id)


def streams(target: Target) -> bool:
    """Whether the target's API answers with an event stream (else one JSON body)."""
    return APIS[target.api].streams


def endpoint(target_base_url: str, api: str) -> str:
    """The URL of `api` under a /v1 root."""
    return APIS[api].url(target_base_url)


def headers_for(target: Target) -> dict[str, str]:
    """The request headers for target.api (benchc.client.apis)."""
    return APIS[target.api].headers(target)


AIOHTTP = "aiohttp"  # RequestRecord.path of a response aiohttp read (http1 names its own two)


class _EagerWriteRequest(aiohttp.ClientRequest):
    """aiohttp's request, its body's write task started eagerly before Python 3.12 as aiohttp
    starts it from 3.12 (client/eager.py): a request due now is written in the turn that sends
    it, not after whatever the loop holds (other requests' preparing)."""

    def write_bytes(self, *args: Any, **kw: Any) -> Any:
        return started(super().write_bytes(*args, **kw))


# How a measured session reads: bodies as they came (no decompression), and a head line up to
# the own reader's bound on a whole head (aiohttp's own limit, 8,190 bytes, refused heads the
# own reader read)
SESSION_OPTIONS: dict[str, Any] = {"read_bufsize": 1 << 20, "auto_decompress": False,
                                   "max_line_size": MAX_HEAD, "max_field_size": MAX_HEAD}
if sys.version_info < (3, 12):
    SESSION_OPTIONS["request_class"] = _EagerWriteRequest
AIOHTTP_ORIGIN = ("aiohttp connector",)  # the rules' origin key for a connector's connections


class _StampingProtocol(OneAnswerProtocol):
    """aiohttp's client connection protocol, stamping when bytes arrive, and keeping
    connections by benchc's keep-alive rules.

    The reading task resumes only when the loop gets to it; with many streams
    finishing together, the later ones would be stamped after the earlier ones'
    bookkeeping. `rx_ns` holds the arrival time of the oldest bytes not yet read.

    aiohttp pools a connection the moment a response's body ends, often before the
    reading task sees the response; the rules are therefore asked when the response
    head is parsed (feed_data), and aiohttp reads their verdict from should_close.
    A connector of benchc serves one server, so its connections share one origin key.
    """

    __slots__ = ("rx_ns", "rules", "use", "keep")

    def __init__(self, *args: Any, rules: http1.ReuseRules | None = None, **kwargs: Any):
        self.rx_ns = 0
        self.rules = rules
        self.use = rules.opened(AIOHTTP_ORIGIN) if rules is not None else None
        self.keep = True
        super().__init__(*args, **kwargs)

    def data_received(self, data: bytes) -> None:
        if not self.rx_ns:
            self.rx_ns = CLOCK()
        super().data_received(data)

    def feed_data(self, data: Any, *args: Any, **kwargs: Any) -> None:
        """One parsed response: (message head, body stream)."""
        if self.rules is not None and self.use is not None and self.answer is None:
            message = data[0]
            self.use.reused = self.use.exchanges > 0
            self.keep = self.rules.finished(self.use, not message.should_close,
                                            message.headers.get("Keep-Alive"), CLOCK())
        super().feed_data(data, *args, **kwargs)

    @property
    def should_close(self) -> bool:
        if OneAnswerProtocol.should_close.fget(self):  # type: ignore[attr-defined]
            return True
        return not self.keep or (self.rules is not None and not self.rules.pooled(AIOHTTP_ORIGIN))


class _Connector(aiohttp.TCPConnector):
    """aiohttp's pooled connector with benchc's keep-alive rules (`rules`, http1.ReuseRules)."""

    def __init__(self, keepalive_s: float = 60.0, force_close: bool = False, **kwargs: Any):
        if force_close:
            super().__init__(force_close=True, **kwargs)
        else:
            super().__init__(keepalive_timeout=keepalive_s, **kwargs)
        self.rules = http1.ReuseRules(keepalive_s)


def make_connector(force_close: bool = False) -> aiohttp.TCPConnector:
    """A pooled connector (no limit, DNS cached) whose connections stamp arrivals and follow
    benchc's keep-alive rules; `force_close`: one connection per request (keep-alive retries).

    The protocol factory is a private attribute of aiohttp's connector; if a
    future aiohttp renames it, reads are stamped when the reading task resumes and
    aiohttp's own keep-alive rules apply.
    """
    conn = _Connector(limit=0, ttl_dns_cache=300, force_close=force_close)
    if hasattr(conn, "_factory") and hasattr(conn, "_loop"):
        # setattr: a private attribute, typed by aiohttp for its own protocol class
        setattr(conn, "_factory", functools.partial(_StampingProtocol, loop=conn._loop, rules=conn.rules))  # noqa: B010
    return conn


def reuse_rules(session: aiohttp.ClientSession | None, pool: http1.Pool | None) -> http1.ReuseRules | None:
    """The keep-alive rules the measured requests go by: the own reader's pool's, else the
    aiohttp connector's (None for a connector benchc did not make)."""
    if pool is not None:
        return pool.rules
    return getattr(session.connector, "rules", None) if session is not None else None


async def open_ahead(session: aiohttp.ClientSession, url: str, n: int) -> int:
    """The aiohttp path's http1.Pool.open_ahead: `n` connections to `url`'s origin opened in
    the session's connector and left idle in its pool, so that `n` requests sent together each
    find one (aiohttp otherwise opens a connection only as a request goes). Through the
    connector's own connect, as a request would; a connector or an aiohttp that does not take
    that opens none (0). Connect failures raise (OSError, aiohttp.ClientError)."""
    loop, connector = asyncio.get_running_loop(), session.connector
    if connector is None:
        return 0
    try:
        asks = [aiohttp.ClientRequest("POST", yarl.URL(url), loop=loop) for _ in range(n)]
        timeout = aiohttp.ClientTimeout(total=None)
        got = await asyncio.gather(*(connector.connect(q, [], timeout) for q in asks), return_exceptions=True)
    except (TypeError, AttributeError):  # its parts renamed: requests connect as they go
        return 0
    conns = [c for c in got if not isinstance(c, BaseException)]
    for c in conns:
        c.release()  # idle in the pool, as after an answer
    failed = next((e for e in got if isinstance(e, BaseException)), None)
    if isinstance(failed, TypeError | AttributeError):
        return len(conns)
    if failed is not None:
        raise failed
    return len(conns)


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
        if isinstance(rec, RequestRecord) and not rec.times.t0_sent:
            rec.times.t0_ns = CLOCK()
            rec.times.t0_sent = True
            if rec.times.first_sent_ns is None:
                rec.times.first_sent_ns = rec.times.t0_ns

    # Whether the request went on a pooled connection (the keep-alive retry rule needs it),
    # and how long the first attempt spent connecting (not the client's delay, for the
    # self-check).
    async def on_reuse(session: aiohttp.ClientSession, ctx: Any, params: Any) -> None:
        if isinstance(ctx.trace_request_ctx, RequestRecord):
            ctx.trace_request_ctx.outcome.reused_connection = True

    async def on_create_start(session: aiohttp.ClientSession, ctx: Any, params: Any) -> None:
        ctx.connect_start_ns = CLOCK()

    async def on_create_end(session: aiohttp.ClientSession, ctx: Any, params: Any) -> None:
        rec = ctx.trace_request_ctx
        if isinstance(rec, RequestRecord) and rec.times.first_sent_ns is None:
            rec.times.connect_ns += CLOCK() - getattr(ctx, "connect_start_ns", CLOCK())

    tc = aiohttp.TraceConfig()
    tc.on_request_chunk_sent.append(on_chunk_sent)
    tc.on_connection_reuseconn.append(on_reuse)
    tc.on_connection_create_start.append(on_create_start)
    tc.on_connection_create_end.append(on_create_end)
    return tc


class DueBody(aiohttp.payload.BytesPayload):
    """A request body whose write waits for `due()` first: aiohttp prepares the request
    meanwhile (its connection taken, its headers, which it buffers and writes with the body),
    so only the write waits, as the own reader's readied request waits for the step's alarm
    (http1.Due). Without it a request handed to aiohttp at its due time went 0.3-0.5 ms later,
    aiohttp's own work, and of several due at once the last by their sum (a coding-agent
    replay's subagents spawned together: benchmarks/think_lateness.py's `send`). The same
    bytes, Content-Length and headers as `data=body`; a retry's write does not wait again."""

    def __init__(self, value: bytes, due: Callable[[], Awaitable[None]]) -> None:
        super().__init__(value)
        self._due: Callable[[], Awaitable[None]] | None = due

    async def _wait(self) -> None:
        due, self._due = self._due, None
        if due is not None:
            await due()

    async def write(self, writer: Any) -> None:  # aiohttp before 3.12 writes a body by write()
        await self._wait()
        await super().write(writer)

    async def write_with_length(self, writer: Any, content_length: int | None) -> None:
        await self._wait()
        await super().write_with_length(writer, content_length)


async def send(session: aiohttp.ClientSession, url: str, headers: dict, body: bytes,
               rec: RequestRecord, target: Target, keep_text: bool = False,
               due: http1.Due | None = None) -> RequestRecord:
    """Send one streaming request and fill `rec`; never raises except on cancellation.
    `keep_text` keeps the output for counting with a tokenizer after the point. `due`: its
    write waits for its time (DueBody), aiohttp's preparing it does not (the own reader's
    http1.Due: its connection and request readied ahead).

    The keep-alive rules are the own reader's (http1.ReuseRules, retry_on_fresh), applied
    when a response head is parsed (_StampingProtocol). What differs, because aiohttp does
    not expose it: a failure counts as "before any response byte" when no status line was
    read; the retry goes on a one-off session whose connector never pools (aiohttp cannot be
    asked for a fresh connection; it sends `Connection: close`); a Keep-Alive timeout is not
    read (aiohttp's own keepalive_timeout, 60 s here, applies); an idle connection's EOF is
    seen by aiohttp itself, not by a peek, and does not count toward the pooling verdict."""
    outcome = rec.outcome
    parser = StreamParser(keep_text, body=not streams(target))
    rec.parser = parser
    outcome.path = AIOHTTP
    rules = getattr(session.connector, "rules", None)
    data = body if due is None else DueBody(body, functools.partial(due.wait, due.at_ns))
    kw = {"data": data,
          "headers": {**{k: v for k, v in headers.items() if k.lower() != "x-request-id"},
                      "x-request-id": rec.id},
          # aiohttp's read timer runs from the request's write: the first-byte limit until the
          # response head came, then the idle limit (_after_head)
          "timeout": aiohttp.ClientTimeout(total=target.timeout_s, sock_read=target.first_byte_timeout_s),
          "trace_request_ctx": rec,
          # a redirect is the status it is (http_status), as on the own reader: following it
          # would send the request's credentials to another origin and measure its answer
          "allow_redirects": False}
    start = CLOCK()
    retry, content_type = await _post(session, url, kw, rec, target, parser, rules, attempt=0)
    if retry:
        if rules is not None:
            rules.server_closed(AIOHTTP_ORIGIN, None)
        outcome.retried, outcome.status, outcome.error, outcome.error_detail = True, None, None, None
        # both attempts share target.timeout, as on the own reader (http1.exchange)
        left = max(target.timeout_s - (CLOCK() - start) / 1e9, 0.001)
        kw["timeout"] = aiohttp.ClientTimeout(total=left, sock_read=target.first_byte_timeout_s)
        async with aiohttp.ClientSession(connector=make_connector(force_close=True), **SESSION_OPTIONS,
                                         trace_configs=session.trace_configs) as fresh:
            _, content_type = await _post(fresh, url, kw, rec, target, parser, None, attempt=1)
    return _as_asked(_conclude(rec, parser, content_type), target)


def _after_head(proto: Any, idle_s: float) -> None:
    """The response head came: aiohttp's read timer (sock_read, the first-byte limit until
    now) becomes the idle limit between reads (aiohttp re-arms it on each read)."""
    if proto is not None and hasattr(proto, "start_timeout") and hasattr(type(proto), "read_timeout"):
        proto.read_timeout = idle_s
        proto.start_timeout()


async def _post(session: aiohttp.ClientSession, url: str, kw: dict, rec: RequestRecord, target: Target,
                parser: Any, rules: http1.ReuseRules | None, attempt: int) -> tuple[bool, str | None]:
    """One attempt of send(): whether it is to go again on a fresh connection, and the
    response's Content-Type."""
    outcome, at = rec.outcome, rec.times
    # t0 starts before aiohttp prepares the request; the session's trace hook
    # (make_trace_config) moves it to the moment the request was written, so the
    # client's own request preparation and connection-pool wait stay out of TTFT.
    at.t0_ns, at.t0_sent, outcome.reused_connection, at.end_ns = CLOCK(), False, False, None
    content_type = None
    try:
        async with session.post(url, **kw) as resp:
            outcome.status = resp.status
            # the last one, as the own reader takes it (a head may repeat it)
            content_type = resp.headers.getall("Content-Type", [None])[-1]
            proto = resp.connection.protocol if resp.connection else None
            _after_head(proto, target.idle_timeout_s)
            encoding = resp.headers.get("Content-Encoding", "").strip().lower()
            if compressed(encoding.encode("latin-1", "replace")):  # a head the own reader refuses
                outcome.status, outcome.error = None, STREAM_BROKEN
                outcome.error_detail = error_detail(COMPRESSED, encoding.encode("latin-1", "replace"))
                at.end_ns = CLOCK()
                return False, content_type
            if resp.status != 200:
                text = await error_text(resp)
                outcome.error, outcome.error_detail = HTTP, f"{resp.status}: {text}"
                at.end_ns = CLOCK()
                return False, content_type
            content = resp.content
            if proto is not None and hasattr(proto, "rx_ns") and (
                    not getattr(content, "total_bytes", 0) or proto.rx_ns < at.t0_ns):
                # bytes before here were headers; the body's own arrive next. Body bytes that
                # came in the head's read (a whole JSON answer does) keep that read's arrival,
                # unless it is older than this request's send: then it is another exchange's
                # (a TTFT of -4.7 ms was recorded so, under faults on a closing server)
                proto.rx_ns = 0
            # The hot loop: one parser call per read, with the read's arrival time; the
            # parser frames events, extracts text/usage/finish and times text chunks.
            while True:
                try:
                    data = await content.readany()
                except aiohttp.ClientPayloadError as e:
                    if isinstance(e, FramingBroken) or not _ended_before_its_framing(content, parser, proto):
                        raise
                    break
                if not data:
                    break
                parser.feed(data, _arrival(proto))
                if parser.oversized:  # the parser stopped reading: the connection goes with it
                    outcome.error, outcome.error_detail = OVERSIZED, oversized_detail(parser.oversized)
                    resp.close()
                    break
            parser.close(CLOCK())
            at.end_ns = parser.done_ns or CLOCK()
    except asyncio.CancelledError:
        outcome.error, at.end_ns = outcome.error or CANCELLED, CLOCK()
        if outcome.cancel_planned:  # load.cancel closed the stream: what it read before is kept
            _take(rec, parser)
        raise
    except aiohttp.ClientConnectorError as e:
        outcome.error, outcome.error_detail = connect_failure(e), str(e)[:200]
    except asyncio.TimeoutError as e:  # noqa: UP041 - aiohttp raises this alias on 3.11
        outcome.error_detail = str(e)[:200] or type(e).__name__
        if not isinstance(e, aiohttp.ServerTimeoutError):  # the total limit (aiohttp's own clock)
            outcome.error = TIMEOUT
        elif outcome.status is None and at.t0_sent and not isinstance(e, HeadStalled):
            # sock_read, sent and no byte came: the first-byte limit
            outcome.error = FIRST_BYTE_TIMEOUT
            outcome.error_detail = http1.first_byte_detail(target.first_byte_timeout_s)
        else:  # sock_read between reads
            outcome.error = IDLE_TIMEOUT if outcome.status == 200 else TIMEOUT
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError,
            ConnectionError) as e:
        answered = outcome.status is not None or isinstance(e, AnsweredWithoutHead)  # bytes of an answer came
        if rules is not None and http1.retry_on_fresh(outcome.reused_connection, attempt, answered, False):
            return True, None
        outcome.error = (STREAM_BROKEN if outcome.status == 200 or (answered and outcome.status is None)
                         else HTTP if outcome.status is not None else connect_failure(e))
        outcome.error_detail = (f"{outcome.status}: " if outcome.error == HTTP else "") + str(e)[:200]
    except aiohttp.ClientError as e:
        outcome.error, outcome.error_detail = STREAM_BROKEN, f"{type(e).__name__}: {e}"[:200]
    if outcome.error is not None and attempt == 1:
        detail = (outcome.error_detail or "") + " (a retry after a reused connection failed)"
        outcome.error_detail = detail[:200]
    return False, content_type


def _ended_before_its_framing(content: Any, parser: Any, proto: Any) -> bool:
    """aiohttp found the body cut short (the connection ended before its framing did): whether
    the answer had said it ended before that ([DONE], or a whole JSON body), as the own reader
    asks (_response_py.ResponseReader.lost). aiohttp raises before handing over what it had
    read when the connection ended: those bytes are fed first (a private method; without it,
    the answer is judged on what was handed over)."""
    read_left = getattr(content, "_read_nowait", None)
    if read_left is not None and not parser.done_ns:
        try:
            left = read_left(-1)
        except Exception:  # noqa: BLE001 - aiohttp's own state: judge on what was handed over
            left = b""
        if left:
            parser.feed(left, _arrival(proto))
    return bool(parser.done_ns) and not parser.oversized


def _conclude(rec: RequestRecord, parser: Any, content_type: str | None = None) -> RequestRecord:
    """Copy the parser's measures into the record and judge a stream that ended without
    a transport error: not an event stream at all, malformed chunks, an error event, no
    text, no ending. `content_type`: the response's Content-Type, when one came."""
    outcome, at = rec.outcome, rec.times
    if at.end_ns is None or at.end_ns < at.t0_ns:
        # a failure known before the send returned (a write refused at once) ended at the send
        at.end_ns = max(at.end_ns or CLOCK(), at.t0_ns)
    _take(rec, parser)
    if parser.body:
        return _conclude_body(rec, parser)
    if outcome.error is None and not parser.events and (parser.first_bytes
                                                        or not _is_event_stream(content_type)):
        # a 200 whose body framed no event: an HTML page, the whole answer as JSON (a server
        # that ignored "stream": true), a proxy's notice; say what it was
        outcome.error, outcome.error_detail = NOT_SSE, not_sse_detail(content_type, parser.first_bytes)
    if outcome.error is None and parser.malformed:
        outcome.error, outcome.error_detail = MALFORMED, _example(parser)
    if outcome.error is None and parser.error_event is not None:
        outcome.error, outcome.error_detail = STREAM_BROKEN, f"error event: {_said(parser.error_event)}"
    if outcome.error is None and rec.tokens.text_chunks == 0:
        outcome.error, outcome.error_detail = EMPTY, "the stream carried no text"
    if outcome.error is None and not parser.done_ns and outcome.finish_reason is None:
        outcome.error = STREAM_BROKEN
        outcome.error_detail = "the stream ended without [DONE] or a finish_reason"
    return rec


def _as_asked(rec: RequestRecord, target: Target) -> RequestRecord:
    """A completed non-streamed answer checked against its request (the API's `answered`):
    results past what the request could get are not counted (rerank results past the
    documents); an answer short of its inputs counts the inputs it answered, and the rest
    are `unanswered` (the point's stream.short_answers; a doubt)."""
    payload = rec.payload
    if rec.ok and payload.results is not None:
        answered, payload.results = APIS[target.api].answered(payload.inputs, payload.results)
        payload.unanswered, payload.inputs = payload.inputs - answered, answered
    return rec


def _example(parser: Any) -> str:
    """The first malformed event's (or answer's) start, as shown: scrubbed, then cut."""
    kept = parser.malformed_example or b""
    return redact.clip(kept.decode("utf-8", "replace"), EXAMPLE_BYTES, len(kept) >= EXAMPLE_KEPT)


def _said(message: str) -> str:
    """An error event's (or object's) message, as shown: scrubbed, then cut."""
    return redact.clip(message, ERROR_CHARS, len(message) >= ERROR_KEPT)


def _conclude_body(rec: RequestRecord, parser: Any) -> RequestRecord:
    """Judge a non-streamed answer (one JSON body, benchc.client._body_py) that ended without a
    transport error: not a JSON object, an error object, no results, cut short."""
    outcome, payload = rec.outcome, rec.payload
    if outcome.error is None and parser.malformed:
        outcome.error = MALFORMED
        outcome.error_detail = redact.clip(f"the answer is not a JSON object: {_example(parser)!r}", 400)
    if outcome.error is None and parser.error_event is not None:
        outcome.error, outcome.error_detail = STREAM_BROKEN, f"error object: {_said(parser.error_event)}"
    if outcome.error is None and not parser.done_ns:
        outcome.error, outcome.error_detail = STREAM_BROKEN, "the answer ended before its JSON did"
    if outcome.error is None and not payload.results:
        outcome.error = EMPTY
        outcome.error_detail = "the answer carried no results (its `data` was empty or absent)"
    return rec


async def send_native(pool: http1.Pool, url: str, headers: dict, body: bytes, rec: RequestRecord,
                      target: Target, keep_text: bool = False, due: http1.Due | None = None) -> RequestRecord:
    """As send(), on benchc's own HTTP/1.1 connections (benchc.client.http1): each socket read
    is stamped, de-chunked and parsed in one C call (on the receive loop's thread, or in a
    protocol callback of the event loop), and t0 is taken just before the request is handed
    to the socket. `rec.outcome.path` says which transport read the response: the receive loop
    or the asyncio loop (see benchc.client.http1). `due`: the request goes at that time, its
    connection taken or opened before it (http1.exchange)."""
    outcome, at = rec.outcome, rec.times
    parser = pool.StreamParser(keep_text, body=not streams(target))
    rec.parser = parser
    at.t0_ns = CLOCK()

    def sent(sent_ns: int, reused: bool, connect_ns: int) -> None:
        if at.first_sent_ns is None:
            at.first_sent_ns, at.connect_ns = sent_ns, connect_ns
        else:
            outcome.retried = True  # the keep-alive race: timing starts again at the retry's send
        at.t0_ns, at.t0_sent, outcome.reused_connection = sent_ns, True, reused

    try:
        ex = await http1.exchange(pool, pool.origin(url, headers), rec.id, body, parser,
                                  target.timeout_s, target.idle_timeout_s, sent, target.first_byte_timeout_s,
                                  due)
    except asyncio.CancelledError:
        outcome.error, at.end_ns = outcome.error or CANCELLED, CLOCK()
        if outcome.cancel_planned:  # load.cancel closed the stream: what it read before is kept
            _take(rec, parser)
        raise
    except asyncio.TimeoutError as e:  # noqa: UP041 - the connect did not finish in time
        outcome.error, outcome.error_detail = TIMEOUT, f"connect: {e or type(e).__name__}"[:200]
        return _conclude(rec, parser)
    except (OSError, ValueError) as e:
        outcome.error, outcome.error_detail = connect_failure(e), (str(e) or type(e).__name__)[:200]
        return _conclude(rec, parser)
    outcome.status = ex.status
    at.early_reads = ex.early_reads
    outcome.path = ex.path
    if ex.error is None and ex.status != 200:
        outcome.error = HTTP
        # the reader kept the body's first bytes: a secret cut there is hidden, not half shown
        excerpt = ex.excerpt.decode('utf-8', 'replace')
        outcome.error_detail = f"{ex.status}: {redact.active().cut(excerpt, len(excerpt))}"
        at.end_ns = ex.end_ns
        return rec
    if ex.error is not None:
        kind, outcome.error_detail = ex.error
        # as on aiohttp: a connection lost before any byte came back is a connect failure, and
        # after an error status (its body cut short) that status's error; a server that sent
        # bytes that never made a head (not HTTP at all: an SSH banner) answered: stream_broken
        if kind == STREAM_BROKEN and ex.status != 200 and (ex.status or not ex.got_bytes):
            outcome.error = HTTP if ex.status else CONNECT
            if ex.status:
                outcome.error_detail = f"{ex.status}: {outcome.error_detail}"
        else:
            outcome.error = kind
    parser.close(ex.end_ns)
    at.end_ns = parser.done_ns or ex.end_ns
    ct = ex.reader.content_type
    return _as_asked(_conclude(rec, parser, ct.decode("latin-1") if ct is not None else None), target)
