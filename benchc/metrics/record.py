"""What one measured request did, and the kinds of failure results count.

The client fills a RequestRecord; the point recorder (recorder.py) aggregates it. The
error kinds live here, below both, so that the HTTP reader, the request code and the
aggregation name them from one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Error kinds, as counted in results (a result's counts.errors keys; never rename one).
CONNECT = "connect"
HTTP = "http_status"
TIMEOUT = "timeout"
IDLE_TIMEOUT = "idle_timeout"
STREAM_BROKEN = "stream_broken"
MALFORMED = "malformed_chunk"
EMPTY = "empty_output"
CANCELLED = "cancelled"
FIRST_BYTE_TIMEOUT = "first_byte_timeout"  # sent, but no answer began within target.first_byte_timeout
OVERSIZED = "oversized_event"  # an SSE line or event past the client's bounds (the connection is closed)
CLIENT_EXHAUSTED = "client_exhausted"  # the client ran out of descriptors or ports: not the server's doing
NOT_SSE = "not_event_stream"  # a 200 whose body framed no SSE event (HTML, a whole JSON answer)
CLIENT_ERROR = "client_error"  # benchc's own code failed on the request (a bug: the log has it)
ERROR_KINDS = (CONNECT, HTTP, TIMEOUT, IDLE_TIMEOUT, STREAM_BROKEN, MALFORMED, EMPTY, CANCELLED,
               FIRST_BYTE_TIMEOUT, OVERSIZED, CLIENT_EXHAUSTED, NOT_SSE, CLIENT_ERROR)


@dataclass(slots=True)
class Times:
    """When things happened to one request: absolute perf_counter_ns stamps, and the waits
    and reads that explain them."""

    # the three a load shape knows when it makes the record come first (given by position)
    scheduled_ns: int | None = None  # open loop: when it should have been sent
    ready_ns: int | None = None  # when the load shape let it go: schedule, or a free slot (loadgen)
    queued_ns: int = 0  # open loop: time it waited for a max_concurrency slot (the server's doing)
    t0_ns: int = 0  # when the request was written (see make_trace_config); a retry's own write
    t0_sent: bool = False  # t0_ns came from the write itself, not from before post()
    first_sent_ns: int | None = None  # the first attempt's write (before a keep-alive retry)
    connect_ns: int = 0  # time the first attempt spent opening its connection
    early_reads: int = 0  # reads the kernel stamped before t0 (a clock step): dated t0
    first_text_ns: int | None = None
    # Reasoning models: the first reasoning chunk and the first answer (content) chunk
    first_reasoning_ns: int | None = None
    first_answer_ns: int | None = None
    first_tool_ns: int | None = None  # the first chunk that streamed a tool call's name or arguments
    end_ns: int | None = None


@dataclass(slots=True)
class Tokens:
    """What the stream carried, chunk by kind, and what the server's usage counted."""

    text_chunks: int = 0
    text_bytes: int = 0
    reasoning_chunks: int = 0
    tool_chunks: int = 0  # chunks that streamed a tool call (its name or arguments)
    unknown_events: int = 0  # events of a type no API here has (skipped)
    multi_token_chunks: int = 0  # seen only with continuous usage stats
    usage_output_tokens: int | None = None
    usage_input_tokens: int | None = None
    usage_reasoning_tokens: int | None = None  # usage.completion_tokens_details.reasoning_tokens
    # With a chat template: the input as the server renders it (its exact tokens), known when
    # the request was built, or (a session's turn) counted after the point from its messages
    template_input_tokens: int | None = None


@dataclass(slots=True)
class CacheUse:
    """Prefix caching. By the spec: the prompt's first shared_tokens tokens are sent by other
    requests too (None: nobody can say, a user's file); reused: this prompt was sent before.
    By the server: its cached prompt tokens (usage.prompt_tokens_details.cached_tokens, else
    llama.cpp's timings.cache_n; None when it said nothing) and where that came from."""

    shared_tokens: int | None = 0
    reused: bool = False
    cached_tokens: int | None = None
    cached_source: str | None = None  # "usage" | "timings"


@dataclass(slots=True)
class Payload:
    """What the body carried beside text (metrics/payload.py), and what a non-streamed answer
    returned for its inputs."""

    images: int = 0
    tools: bool = False  # the body offered tools
    # Inputs the request carried (an embeddings request's batch; one prompt otherwise), and the
    # results a non-streamed answer returned for them (its `data`: vectors, scores; None: a stream)
    inputs: int = 1
    request_bytes: int = 0
    results: int | None = None
    unanswered: int = 0  # inputs the answer carried no result for (its `inputs` counts the answered)


@dataclass(slots=True)
class SessionPlace:
    """Where a request of a multi-turn session (run/sessions.py) sits: the session's index in
    its step, the turn (1, 2, ...; None: an agent loop's sub-request), when the turn before it
    ended (the think time runs from there), and the history it sent (counted after the point)."""

    session: int
    turn: int | None = None
    prev_end_ns: int | None = None
    messages: list | None = None


@dataclass(slots=True)
class Outcome:
    """How the request ended and what read it: its error (None: completed), the server's
    status, finish reason and own timings, and the connection that carried it."""

    error: str | None = None
    error_detail: str | None = None
    status: int | None = None
    finish_reason: str | None = None
    server_timings: dict | None = None  # llama.cpp's timings: prompt_ms, predicted_ms, ...
    # load.cancel chose it, load.graceful_stop's cap or a Ctrl-C closed it: a CANCELLED end is
    # benchc's doing, not an error (what it read before is kept)
    cancel_planned: bool = False
    interrupted: bool = False  # of those, one a Ctrl-C (or SIGTERM) cancelled in flight past the grace
    path: str | None = None  # the transport that read the response: rx_loop, asyncio or aiohttp
    reused_connection: bool = False  # the (last) attempt went on a kept-alive connection
    retried: bool = False  # the keep-alive race: sent again on a fresh connection


@dataclass(slots=True)
class RequestRecord:
    """What one request did, grouped by concern: its times (absolute perf_counter_ns), its
    tokens, its cache use, its payload, its outcome and (a session's request) its place.
    Every class slotted: one record is made per request on the load generator's path; the
    groups a request always fills are made with it, a session's place only for a session."""

    id: str
    prompt_index: int
    input_tokens: int
    expected_output_tokens: int | None
    # what a load shape knows when it makes the record (loadgen gives these by position)
    times: Times = field(default_factory=Times)
    cache: CacheUse = field(default_factory=CacheUse)
    payload: Payload = field(default_factory=Payload)
    tokens: Tokens = field(default_factory=Tokens)
    outcome: Outcome = field(default_factory=Outcome)
    place: SessionPlace | None = None
    parser: Any = None  # the StreamParser that read the stream (its chunk gaps go to the ITL histograms)

    @property
    def ok(self) -> bool:
        return self.outcome.error is None

    @property
    def output_tokens(self) -> int:
        """Usage when the server sent it, else one token per text-bearing chunk."""
        tokens = self.tokens
        usage = tokens.usage_output_tokens
        return usage if usage is not None else tokens.text_chunks

    @property
    def reasoned(self) -> bool:
        """The request streamed reasoning, or its server counted reasoning tokens."""
        return self.times.first_reasoning_ns is not None or bool(self.tokens.usage_reasoning_tokens)

    @property
    def reasoning_tokens(self) -> int:
        """The server's count of the output's reasoning tokens, else one per reasoning chunk."""
        usage = self.tokens.usage_reasoning_tokens
        return usage if usage is not None else self.tokens.reasoning_chunks

    def tokens_within(self, start_ns: int, end_ns: int | None) -> float:
        """Its output tokens decoded within [start_ns, end_ns] (end_ns None: open-ended): all of
        them pro-rated by the share of its decode span inside, the span running from its first
        output (text, reasoning or a tool call; a non-streamed answer: its send) to its end. A
        request wholly inside counts fully, one before or after not at all. The steady state's
        token count (run/loadgen.py) is the sum of these: counting only requests that complete
        inside a span leaves out the last round's tokens though the span held their decoding."""
        at, counted = self.times, self.tokens
        tokens = counted.usage_output_tokens  # output_tokens, without a second call per request
        if tokens is None:
            tokens = counted.text_chunks
        end = at.end_ns
        if not tokens or end is None:
            return 0.0
        first, tool = at.first_text_ns, at.first_tool_ns  # once per request: no list, no min()
        if first is None or (tool is not None and tool < first):
            first = tool
        if first is None:
            first = at.t0_ns
        lo, hi = max(first, start_ns), end if end_ns is None else min(end, end_ns)
        if end <= first:  # one read held it all: a point in time, in or out
            return float(tokens) if lo <= hi else 0.0
        return tokens * max(0, hi - lo) / (end - first)

    def to_json(self) -> dict:
        """One line of the per-request records. A failed request has no latencies (null): what
        it measured before failing is not a TTFT or an E2E, and the point counts it as an error."""
        at, outcome, counted, payload = self.times, self.outcome, self.tokens, self.payload
        ok = outcome.error is None
        t0 = at.t0_ns
        ttft = e2e = None
        if ok:
            ttft = (at.first_text_ns - t0) / 1e3 if at.first_text_ns else None
            e2e = (at.end_ns - t0) / 1e3 if at.end_ns else None
        usage = counted.usage_output_tokens
        out = {"id": self.id, "prompt_index": self.prompt_index, "t0_ns": t0,
               "scheduled_ns": at.scheduled_ns, "ttft_us": ttft, "e2e_us": e2e,
               "queued_us": at.queued_ns / 1e3 if at.scheduled_ns is not None else None,
               "input_tokens": self.input_tokens,
               "output_tokens": usage if usage is not None else counted.text_chunks,
               "usage_output_tokens": usage, "text_chunks": counted.text_chunks,
               "cached_tokens": self.cache.cached_tokens, "reused_prompt": self.cache.reused,
               "finish_reason": outcome.finish_reason, "error": outcome.error,
               "error_detail": outcome.error_detail, "status": outcome.status,
               "reused_connection": outcome.reused_connection, "retried": outcome.retried,
               "path": outcome.path}
        place = self.place
        if place is not None:
            if place.turn is not None:
                out.update(session=place.session, turn=place.turn)
            else:  # an agent loop's sub-request (fan-out), not a turn
                out.update(session=place.session, sub_request=True)
        if payload.results is not None or payload.inputs != 1:  # a non-streamed answer (embeddings)
            out.update(inputs=payload.inputs, results=payload.results,
                       usage_input_tokens=counted.usage_input_tokens)
            if payload.unanswered:
                out["unanswered"] = payload.unanswered
        if at.first_reasoning_ns is not None or counted.usage_reasoning_tokens:  # self.reasoned
            out.update(ttf_reasoning_us=_since(at.first_reasoning_ns, t0) if ok else None,
                       ttf_answer_us=_since(at.first_answer_ns, t0) if ok else None,
                       reasoning_tokens=self.reasoning_tokens)
        if at.first_tool_ns is not None:
            out["ttf_tool_call_us"] = _since(at.first_tool_ns, t0) if ok else None
        return out


def _since(t_ns: int | None, t0_ns: int) -> float | None:
    return (t_ns - t0_ns) / 1e3 if t_ns else None
