"""The embedded simulated LLM server: OpenAI/vLLM-compatible HTTP on aiohttp, driven
by one engine loop that batches like a continuous-batching scheduler.

Each API it serves is one adapter (sim/adapter.py; chat and completions in sim/apis.py,
Responses and Messages in sim/wire.py, embeddings, rerank and score in sim/pooling.py): it
reads the API's requests and writes its events, answers and usage, so that the engine never
asks which API a request is of.

It is the ground truth of benchc's timing tests: it records, per request, when it
arrived, was admitted, and when every chunk was written with its token count
(`trace`), on time.perf_counter_ns -- CLOCK_MONOTONIC on Linux, the clock a
client reads in any process of the same machine.

Deliberate choices, each as vLLM's OpenAI server does unless noted:
- the first chat chunk carries the role only (`delta: {role, content: ""}`); the
  simulator sends it as soon as the request is accepted, *before* queueing and
  prefill, so a client that took it as the first token would visibly be wrong;
- `finish_reason` rides on the last token's chunk; `stream_options.include_usage`
  adds a final chunk with empty `choices` and `usage`;
  `stream_options.continuous_usage_stats` adds `usage` to every chunk;
- one word is one token; with `tokenizer` configured, the output is real tokens of
  it (each chunk one token's text) and every usage figure is that tokenizer's count;
- POST /v1/embeddings (vLLM's pooling runner): one JSON answer, never a stream. Its cost
  model is the engine's: the request joins a step as a prefill (`step_ms(batch)` plus its
  input tokens / `prefill_tok_s`, shared with every request admitted at that step) and is
  done at that step's end; each input gets a vector of `embed_dim` floats (or base64 with
  `encoding_format: base64`), usage.prompt_tokens is exact, the trace has the request's
  `inputs` and the write of its answer (`end_ns`); no prefix cache;
- a prefix cache (sim/prefix_cache.py) as vLLM's: the final usage carries
  `prompt_tokens_details.cached_tokens`, /metrics vLLM's prefix-cache counters, the trace
  each request's `cached_tokens`; POST /reset_prefix_cache (vLLM) and POST /flush_cache
  (SGLang) empty it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import random
import time
import uuid
from collections import deque
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from benchc.plan.workload import VOCABULARY
from benchc.sim.adapter import (
    REASONING,
    TOOL,
    Context,
    ParsedRequest,
    Reject,
    SimApi,
    error,
    runs,
    usage_dict,
)
from benchc.sim.apis import sim_apis
from benchc.sim.faults import Fault, FaultPicker, parse_faults
from benchc.sim.model import SimConfig
from benchc.sim.pooling import PooledSim
from benchc.sim.power import PowerMeter
from benchc.sim.prefix_cache import PrefixCache, block_keys
from benchc.sim.prompt_tokens import PromptCounter
from benchc.sim.responses_store import ResponseStore
from benchc.sim.server_metrics import Counters, render

CLOCK = time.perf_counter_ns
SHUTDOWN_TIMEOUT_S = 2.0  # how long a stop waits for requests still being answered
log = logging.getLogger(__name__)
# where a request's arrival stamp is kept (aiohttp >= 3.13 wants typed keys)
ARRIVAL_NS: Any = web.RequestKey("arrival_ns", int) if hasattr(web, "RequestKey") else "arrival_ns"
_WORDS = [(" " + w).encode() for w in VOCABULARY]


def _json_escape(b: bytes) -> bytes:
    """Token bytes as the inside of a JSON string (a token may be part of a UTF-8 character:
    such bytes are replaced, as a server decoding per token would)."""
    return json.dumps(b.decode("utf-8", "replace"))[1:-1].encode()


class _StampingHandler(RequestHandler):
    """aiohttp's connection protocol, stamping when a request's first bytes arrive.

    A handler starts only after aiohttp has read and parsed its request, and on a
    busy server that waits behind other work: arrival stamped in the handler would
    leave that queueing out of the ground truth. Clients do not pipeline, so the
    first bytes after a request's body was read belong to the next request.
    """

    __slots__ = ("rx_ns", "closing", "unread")

    def __init__(self, *args: Any, **kwargs: Any):
        self.rx_ns: int | None = None
        self.closing = False  # close_after_stream: the connection is done, whatever comes in
        self.unread = 0
        super().__init__(*args, **kwargs)

    def data_received(self, data: bytes) -> None:
        if self.closing:
            # A request sent after the response that ends this connection is never read, as
            # a server that closes after each response never reads one (the keep-alive race).
            self.unread += len(data)
            return
        if self.rx_ns is None:
            self.rx_ns = CLOCK()
        super().data_received(data)

    def close_after(self, delay_s: float) -> None:
        """Close the connection `delay_s` from now; a request arriving meanwhile is dropped."""
        self.closing = True
        asyncio.get_running_loop().call_later(delay_s, self._close_now)

    def _close_now(self) -> None:
        t = self.transport
        if t is None or t.is_closing():
            return
        if self.unread:
            t.abort()  # closing a socket with unread bytes sends a reset, as the kernel would
        else:
            t.close()


@web.middleware
async def _arrival_stamp(request: web.Request, handler: Any) -> web.StreamResponse:
    """Every request takes its connection's first-bytes stamp, and leaves it clear once
    handled (body read), so the next request on the connection is stamped afresh."""
    proto = request.protocol
    request[ARRIVAL_NS] = getattr(proto, "rx_ns", None) or CLOCK()
    try:
        return await handler(request)
    finally:
        if isinstance(proto, _StampingHandler):
            proto.rx_ns = None


class Seq:
    """One request inside the engine."""

    __slots__ = ("id", "adapter", "stream", "resp", "transport", "model", "created", "input_tokens",
                 "max_tokens", "min_tokens", "ignore_eos", "stop", "rng", "include_usage",
                 "continuous_usage", "emitted", "pending", "pending_steps", "words", "finish",
                 "done", "fault", "fault_at", "stall_until", "trace", "ready_at", "gone", "text",
                 "head", "tail", "block_keys", "cached", "prompt_tokens", "out_ids", "reasoning", "rhead",
                 "tool_at", "tool_end", "tool_finish", "calls", "wire", "inputs", "conversation")
    id: str  # the response id (chatcmpl-... / cmpl-... / embd-...)
    adapter: SimApi  # what reads and writes its API (sim/adapter.py): the engine asks it, never the API
    stream: bool
    resp: Any  # the aiohttp StreamResponse of a stream
    transport: Any  # the connection (a reset fault aborts it)
    model: bytes  # the model name as a JSON string
    created: bytes
    input_tokens: int
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    stop: set[str]
    rng: random.Random  # this request's own (output words, EOS draws)
    include_usage: bool
    continuous_usage: bool
    emitted: int  # output tokens decoded so far
    pending: list[tuple[bytes, int, int]]  # (chunk bytes, tokens, kind: ANSWER.. or -1) not yet written
    pending_steps: int
    words: list[bytes]  # the output of a non-streaming request
    finish: str | None  # finish_reason once decided
    done: asyncio.Future  # resolved with the retire reason
    fault: Fault | None
    fault_at: int | None  # the output token at which a mid-stream fault acts
    stall_until: int
    trace: dict
    ready_at: int  # ttft_ms / frontend_ms: not admitted before (CLOCK ns)
    gone: bool  # the client went away
    text: list[bytes]  # the whole output, drawn up front (JSON-escaped token bytes)
    head: bytes  # a chunk's bytes before and after its text (chat, completions: sim/apis.py)
    tail: bytes
    block_keys: list  # the prompt's prefix-cache block hashes
    cached: int  # prompt tokens found in the prefix cache
    prompt_tokens: list  # the prompt's tokens (words, or ids), kept while the prefix cache needs them
    out_ids: list | None  # with a tokenizer: the output's token ids
    reasoning: int  # the output's first tokens that are reasoning (reasoning_content deltas)
    rhead: bytes  # a reasoning chunk's bytes before its text (its tail is `tail`)
    tool_at: int | None  # a tool-call answer: the output token that names the tool (then its arguments)
    tool_end: int | None  # ... and the token after its last (within max_tokens)
    tool_finish: str | None  # the finish at tool_end: tool_calls, or length when max_tokens cut the call
    calls: int  # a tool-call answer's parallel calls, interleaved token by token (adapter.tool_call_at)
    wire: dict | None  # the Responses / Messages stream's state (sim/wire.py)
    inputs: int  # embeddings: the inputs of the request (one vector each)
    conversation: list | None  # Responses, stored: the prompt's tokens but the tools' (responses_store)

    def __init__(self, **kw: Any):
        for k in self.__slots__:
            setattr(self, k, kw.get(k))
        self.calls = kw.get("calls") or 1
        self.emitted = 0
        self.pending = []
        self.pending_steps = 0
        self.words = []
        self.gone = False
        self.stall_until = 0
        self.cached = 0


class Engine:
    """The continuous-batching loop: admit at step boundaries, one step for all running."""

    def __init__(self, cfg: SimConfig, trace_sink: Any = None):
        self.cfg = cfg
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.wake = asyncio.Event()
        self.rng = random.Random(cfg.seed)
        self.kv_used = 0
        self.generation_tokens_total = 0
        self.prompt_tokens_total = 0
        self.requests_total = 0
        self.trace: list[dict] = []
        self.trace_sink = trace_sink
        self.keep_trace = True
        self.prefix: PrefixCache | None = None
        if cfg.prefix_cache:
            blocks = max(1, cfg.prefix_cache_capacity_tokens() // cfg.block_size)
            self.prefix = PrefixCache(cfg.block_size, blocks)
        self.cache_resets_total = 0
        self.responses = ResponseStore(cfg.responses_kept_s, cfg.responses_kept)  # previous_response_id
        self.admitted_total = 0  # admissions so far: each request's place in the admission order
        # vLLM's per-request phase histograms, as sum and count: queue, prefill, decode, ttft
        self.phase_s = dict.fromkeys(("queue", "prefill", "decode", "ttft"), 0.0)
        self.phase_n = 0
        self.power = PowerMeter(cfg, CLOCK())  # the simulated GPUs' draw (sim/power.py)

    def submit(self, seq: Seq) -> None:
        self.waiting.append(seq)
        self.wake.set()

    def _kv_need(self, seq: Seq) -> int:
        return seq.input_tokens + seq.max_tokens

    def _admit(self, now: int) -> list[Seq]:
        admitted = []
        cfg = self.cfg
        while self.waiting and len(self.running) < cfg.max_num_seqs:
            seq = self.waiting[0]
            if seq.gone:
                self.waiting.popleft()
                continue
            if seq.ready_at and seq.ready_at > now:
                break  # FIFO: nobody overtakes a request still "prefilling"
            if cfg.kv_tokens and self.running and self.kv_used + self._kv_need(seq) > cfg.kv_tokens:
                break
            self.waiting.popleft()
            self.kv_used += self._kv_need(seq)
            seq.trace["admitted_ns"] = now
            # several requests admitted at one step share `now`: this says which came first (the
            # order its prefix cache saw them in)
            seq.trace["admitted_seq"] = self.admitted_total
            self.admitted_total += 1
            if self.prefix is not None and seq.block_keys is not None:
                # once per request, at admission: its prefill is charged at this step
                seq.cached = seq.trace["cached_tokens"] = self.prefix.admit(seq.block_keys, seq.input_tokens)
            self.prompt_tokens_total += seq.input_tokens  # processed from here, as its prefix hits count
            self.running.append(seq)
            admitted.append(seq)
        return admitted

    async def run(self) -> None:
        cfg = self.cfg
        next_t = 0
        while True:
            if not self.running:
                self.power.set(CLOCK(), 0)
                self.wake.clear()
                if not self.waiting:
                    await self.wake.wait()
                    next_t = 0
                    continue
                head = self.waiting[0]
                delay = ((head.ready_at or 0) - CLOCK()) / 1e9
                if delay > 0 and not head.gone:
                    # Sleep until the head is ready, or something new arrives.
                    try:
                        await asyncio.wait_for(self.wake.wait(), delay)
                    except TimeoutError:
                        pass
                    next_t = 0
            now = CLOCK()
            admitted = self._admit(now)
            if not self.running:
                # Nothing could be admitted (the head is not ready yet, or the parameters admit
                # nothing): wait for an arrival or the head's ready time, never spin without
                # yielding (the loop would starve the server and ignore SIGTERM).
                head_ready = self.waiting[0].ready_at if self.waiting else None
                wait_s = ((head_ready - CLOCK()) / 1e9) if head_ready else None
                self.wake.clear()
                if wait_s is None or wait_s > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.wake.wait(), wait_s)
                else:
                    await self.wake.wait()
                next_t = 0
                continue
            step_s = cfg.step_ms(len(self.running)) / 1000.0
            self.power.set(now, len(self.running))  # drawn from this step's start to the next's
            if cfg.jitter:
                step_s *= 1.0 + cfg.jitter * (2.0 * self.rng.random() - 1.0)
            if cfg.prefill_tok_s and cfg.ttft_ms is None:
                step_s += sum(s.input_tokens - s.cached for s in admitted) / cfg.prefill_tok_s
            # Absolute deadlines: sleep lateness does not accumulate into drift; if the
            # loop fell far behind (an overloaded machine) it restarts from now.
            if not next_t or now - next_t > 50_000_000:
                next_t = now
            next_t += int(step_s * 1e9)
            delay = (next_t - CLOCK()) / 1e9
            await asyncio.sleep(delay if delay > 0 else 0)
            await self._step(CLOCK())

    async def _step(self, t: int) -> None:
        cfg = self.cfg
        still = []
        for seq in self.running:
            if seq.gone:
                self._retire(seq, t, "client_gone")
                continue
            self._generate(seq)
            if seq.fault is not None and seq.fault_at is not None and seq.emitted >= seq.fault_at:
                self._mid_stream_fault(seq, t)
                if seq.gone:
                    self._retire(seq, t, "reset")
                    continue
            finished = seq.finish is not None
            if seq.stream and (finished or seq.pending_steps >= cfg.chunks_per_write) \
                    and t >= seq.stall_until:
                if finished:
                    self._append_tail(seq)
                await self._flush(seq, t)
            if seq.gone:
                self._retire(seq, t, "client_gone")
                continue
            if seq.finish is not None and not (seq.stream and seq.pending):
                self._retire(seq, t, seq.finish)
                continue
            still.append(seq)
        self.running = still

    def _generate(self, seq: Seq) -> None:
        """Decode this step's tokens for one sequence and queue its chunk."""
        if seq.finish is not None:
            return
        if seq.adapter.pooled:  # its one step was its prefill: the vectors (scores) are ready
            seq.finish = "stop"
            seq.trace["first_token_ns"] = CLOCK()
            return
        cfg = self.cfg
        start = seq.emitted
        end = seq.tool_end if seq.tool_end is not None else seq.max_tokens
        n = min(cfg.tokens_per_step, end - start)
        words = seq.text[start:start + n]
        if seq.tool_at is None and (seq.stop or (cfg.eos_prob and not seq.ignore_eos)):
            words = self._check_stop(seq, words, start)
        seq.emitted = start + len(words)
        if seq.finish is None and seq.emitted >= end:
            seq.finish = seq.tool_finish if seq.tool_end is not None else "length"
        tokens = len(words)
        self.generation_tokens_total += tokens
        if seq.trace["first_token_ns"] is None and tokens:
            seq.trace["first_token_ns"] = CLOCK()
        if not seq.stream:
            seq.words.extend(words)
            return
        if not (tokens or seq.finish):
            return
        seq.pending_steps += 1
        api = seq.adapter
        if not tokens:  # a finish without a token (a stop string): the API's own event, if it has one
            chunk = api.finish_event(seq)
            if chunk:
                seq.pending.append((chunk, 0, -1))
            return
        # One event per run of tokens of one kind (reasoning, answer, a tool call's name, its
        # arguments), as vLLM's delta carries reasoning_content or content, never both.
        for kind, a, b in runs(seq, start, seq.emitted):
            text = words[a - start] if b - a == 1 else b"".join(words[a - start:b - start])
            chunk = api.event(seq, kind, a, b, text, seq.finish if b == seq.emitted else None)
            seq.pending.append((chunk, b - a, kind))
            if kind == REASONING:
                seq.trace["reasoning_chunks"] += 1

    def _check_stop(self, seq: Seq, words: list[bytes], start: int) -> list[bytes]:
        """Cut `words` at a stop string or a drawn EOS, setting seq.finish."""
        eos = self.cfg.eos_prob if not seq.ignore_eos else 0.0
        for i, w in enumerate(words):
            if seq.stop and w.decode().strip() in seq.stop:
                seq.finish = "stop"  # the stop string is not part of the output
                return words[:i]
            if eos and start + i + 1 >= (seq.min_tokens or 0) and seq.rng.random() < eos:
                seq.finish = "stop"
                return words[:i + 1]
        return words

    def final_usage(self, seq: Seq) -> dict:
        """A request's usage at its end, chat-style (each adapter words it its API's way)."""
        usage = usage_dict(seq)
        if self.prefix is not None and self.cfg.usage_cached_tokens:
            # vLLM puts the details on the final usage only (and only when asked to)
            usage["prompt_tokens_details"] = seq.adapter.cached_details(seq)
        return usage

    def _timings(self, seq: Seq) -> bytes:
        """llama.cpp's per-response timings: its prompt (prefill) and decode time, from this
        simulator's own stamps; the trace keeps the same object."""
        tr = seq.trace
        first = tr["first_token_ns"] or tr["admitted_ns"] or tr["arrival_ns"]
        start = tr["admitted_ns"] or tr["arrival_ns"]
        t = {"cache_n": seq.cached, "prompt_n": seq.input_tokens - seq.cached,
             "prompt_ms": (first - start) / 1e6, "predicted_n": seq.emitted,
             "predicted_ms": (CLOCK() - first) / 1e6}
        tr["timings"] = t
        return json.dumps(t, separators=(",", ":")).encode()

    def _append_tail(self, seq: Seq) -> None:
        api = seq.adapter
        timings = b',"timings":' + self._timings(seq) if self.cfg.timings and api.llama_timings else b""
        end_event = not (seq.fault is not None and seq.fault.kind == "no_done")
        tail = api.closing(seq, self.final_usage(seq), end_event, timings)
        if tail:
            seq.pending.append((tail, 0, -1))

    def _cache_output(self, seq: Seq) -> None:
        """The full blocks of prompt and output, cached when the request finishes (what the
        next turn of a conversation sends again: its history ends with this answer)."""
        bs = self.cfg.block_size
        keys = seq.block_keys
        assert self.prefix is not None  # called only with the prefix cache on
        out = self._output_tokens(seq)
        self.prefix.insert(block_keys(list(seq.prompt_tokens[len(keys) * bs:]) + out, bs, keys))
        seq.prompt_tokens = []

    @staticmethod
    def _output_tokens(seq: Seq) -> list:
        """The output emitted so far as prompt tokens (words, or ids): what a conversation that
        goes on sends back of it."""
        return seq.out_ids[:seq.emitted] if seq.out_ids is not None else \
            [w.decode().strip() for w in seq.text[:seq.emitted]]

    def _mid_stream_fault(self, seq: Seq, t: int) -> None:
        fault = seq.fault
        assert fault is not None  # called only for a request with a fault
        kind = fault.kind
        seq.fault_at = None  # once
        if kind == "reset":  # what was already flushed reached the client; the rest never will
            if seq.transport is not None:
                seq.transport.abort()
            seq.gone = True
        elif kind == "stall":
            seq.stall_until = t + int(fault.arg_s * 1e9)
        elif kind == "malformed":
            seq.pending.append((b'data: {"choices":[{"index":0,"delta":{"content":"unterminated\n\n', 0, -1))

    async def _flush(self, seq: Seq, t: int) -> None:
        if not seq.pending:
            return
        data = b"".join(c for c, _, _ in seq.pending)
        tr = seq.trace
        chunks = tr["chunks"]
        # Stamp each stream's write itself: the streams of one step are written one after
        # another, and the last of 256 goes out well after the step began.
        t = CLOCK()
        tr["end_ns"] = t  # the last write of the stream is its end
        for _, tokens, kind in seq.pending:
            if tokens:
                chunks.append([t, tokens])
                if kind == TOOL:
                    tr["tool_chunks"] += 1
                    if tr["first_tool_ns"] is None:
                        tr["first_tool_ns"] = t
        seq.pending = []
        seq.pending_steps = 0
        try:
            await seq.resp.write(data)
        except (ConnectionError, RuntimeError, OSError):
            seq.gone = True

    def _retire(self, seq: Seq, t: int, reason: str) -> None:
        self.kv_used -= self._kv_need(seq)
        tr = seq.trace
        tr["reasoning_tokens"] = min(seq.reasoning, seq.emitted)
        # a finished answer's blocks stay cached whatever ended it, a tool call's too (vLLM's
        # blocks are the sequence's, not the finish reason's)
        if self.prefix is not None and reason in ("length", "stop", "tool_calls") and seq.emitted:
            self._cache_output(seq)
        if seq.conversation is not None and reason in ("length", "stop", "tool_calls"):
            # the Responses API's stored response: its conversation, then its output (as cached)
            self.responses.put("resp_" + tr["id"], seq.conversation + self._output_tokens(seq), t)
        if seq.tool_at is not None:
            tr["tool_call_tokens"] = max(0, seq.emitted - seq.tool_at)
        if self.cfg.trace_text:
            out = [json.loads(b'"' + w + b'"') for w in seq.text[:seq.emitted]]
            tool_at = seq.tool_at if seq.tool_at is not None else seq.emitted
            tr["reasoning"] = "".join(out[:seq.reasoning])
            tr["output"] = "".join(out[seq.reasoning:tool_at])
            if seq.tool_at is not None:
                tr["tool_call"] = "".join(out[tool_at:])
                if seq.calls > 1:  # each call's name and arguments, call by call (interleaved above)
                    tr["tool_calls"] = ["".join(out[tool_at + k::seq.calls]) for k in range(seq.calls)]
        if not seq.stream or tr["end_ns"] is None:
            tr["end_ns"] = CLOCK()
        tr["reason"] = reason
        tr["output_tokens"] = seq.emitted
        log.debug("request %s finished: %s, %d tokens%s", tr.get("id"), reason, seq.emitted,
                  f", fault {tr['fault']}" if tr.get("fault") else "")
        if reason not in ("reset", "client_gone"):  # vLLM's request_success_total: finished answers
            self.requests_total += 1
        if tr["first_token_ns"] is not None:
            p = self.phase_s
            p["queue"] += (tr["admitted_ns"] - tr["arrival_ns"]) / 1e9
            p["prefill"] += (tr["first_token_ns"] - tr["admitted_ns"]) / 1e9
            p["decode"] += (tr["end_ns"] - tr["first_token_ns"]) / 1e9
            p["ttft"] += (tr["first_token_ns"] - tr["arrival_ns"]) / 1e9
            self.phase_n += 1
        if not seq.adapter.pooled:  # an answer written by its handler is traced once written
            self.record(tr)
        if not seq.done.done():
            seq.done.set_result(reason)

    def record(self, tr: dict) -> None:
        """One finished request's trace."""
        if self.keep_trace:
            self.trace.append(tr)
        if self.trace_sink is not None:
            self.trace_sink.write(json.dumps(tr, separators=(",", ":")) + "\n")
            self.trace_sink.flush()


class SimServer:
    """The HTTP face of the engine. `await start()` returns the port it listens on."""

    def __init__(self, cfg: SimConfig, port: int = 0, trace_path: str | None = None):
        self.cfg = cfg
        self.port = port
        self.faults, self.refuse_for_s = parse_faults(cfg.faults)
        self.picker = FaultPicker(self.faults, cfg.seed)
        self.trace_file = open(trace_path, "a", encoding="utf-8") if trace_path else None  # noqa: SIM115
        self.tok = None
        if cfg.tokenizer:
            from benchc.tokenizer.tokenizer import load

            self.tok = load(cfg.tokenizer)
        self.prompt_counter = PromptCounter(self.tok, cfg.image_patch_px, cfg.image_max_tokens)
        self.engine = Engine(cfg, self.trace_file)
        self.started_ns = CLOCK()
        self.started_s = time.time()  # /metrics' _created samples (wall clock, as Prometheus has them)
        self._runner: web.AppRunner | None = None
        self._engine_task: asyncio.Task | None = None
        self._server: asyncio.Server | None = None
        self._counter = 0
        self._close_rng = random.Random(cfg.seed ^ 0xC105E)  # close_after_stream delays
        # one adapter per API (sim/adapter.py): what reads its requests and writes its answers
        self.apis = sim_apis(Context(cfg, self.tok, self.prompt_counter, self.engine.responses))

    @property
    def trace(self) -> list[dict]:
        return self.engine.trace

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[_arrival_stamp])
        # the APIs it serves (another's path answers 404, as a server without that API does);
        # the pooling APIs always
        for api in self.apis.values():
            if isinstance(api, PooledSim):
                handler = functools.partial(self._pooled, api=api)
            elif api.name in self.cfg.apis:
                handler = functools.partial(self._generate, api=api)
            else:
                continue
            for path in api.paths:
                app.router.add_post(path, handler)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/sim/power", self.power_reading)
        app.router.add_post("/tokenize", self.tokenize)
        if self.cfg.reset_endpoints:
            app.router.add_post("/reset_prefix_cache", self.reset_prefix_cache_vllm)  # vLLM
            app.router.add_post("/flush_cache", self.reset_prefix_cache)  # SGLang
        return app

    async def start(self) -> int:
        import socket

        if self.port == 0:
            # Pick the port now, so that a refuse_for delay still has an address to report.
            with socket.socket() as s:
                s.bind((self.cfg.host, 0))
                self.port = s.getsockname()[1]
        # a stop waits this long for requests still being answered (aiohttp's default, 60 s,
        # made SIGTERM look ignored while a request waited for a place it would never get)
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False,
                                     shutdown_timeout=SHUTDOWN_TIMEOUT_S)
        await self._runner.setup()
        self._engine_task = asyncio.create_task(self.engine.run())
        if self.refuse_for_s:
            asyncio.get_running_loop().call_later(
                self.refuse_for_s, lambda: asyncio.ensure_future(self._listen()))
        else:
            await self._listen()
        return self.port

    async def _listen(self) -> None:
        assert self._runner is not None and self._runner.server is not None  # start() set it up
        server: Any = self._runner.server
        loop = asyncio.get_running_loop()
        # As web.TCPSite does, with a protocol that stamps arrivals (_StampingHandler).
        self._server = await loop.create_server(
            lambda: _StampingHandler(server, loop=loop, **server._kwargs), self.cfg.host, self.port,
            backlog=4096, reuse_address=True)
        log.info("accepting connections on %s:%d", self.cfg.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._engine_task:
            self._engine_task.cancel()
            try:
                await self._engine_task
            except asyncio.CancelledError:
                pass
        if self._runner:
            await self._runner.cleanup()
        if self.trace_file:
            self.trace_file.close()

    # ------------------------------------------------------------------ endpoints

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{
            "id": self.cfg.model, "object": "model", "created": int(time.time()), "owned_by": "benchc-sim",
            "root": self.cfg.model, "max_model_len": self.cfg.max_model_len}]})

    async def metrics(self, request: web.Request) -> web.Response:
        e, cfg = self.engine, self.cfg
        kv = (e.kv_used / cfg.kv_tokens) if cfg.kv_tokens else len(e.running) / max(1, cfg.max_num_seqs)
        prefix = e.prefix
        counters = Counters(running=len(e.running), waiting=len(e.waiting), kv_usage=kv,
                            prompt_tokens=e.prompt_tokens_total,
                            cached_prompt_tokens=prefix.hits_total if prefix is not None else 0,
                            generation_tokens=e.generation_tokens_total, requests=e.requests_total,
                            prefix_cache_queries=prefix.queries_total if prefix is not None else None,
                            phase_s=e.phase_s, phase_n=e.phase_n, cache_resets=e.cache_resets_total,
                            created_s=self.started_s)
        return web.Response(text=render(cfg.metrics_names, cfg.model, counters), content_type="text/plain")

    async def power_reading(self, request: web.Request) -> web.Response:
        """The simulated GPUs now (sim/power.py); ?log=1 adds the server GPUs' draw changes."""
        return web.json_response(self.engine.power.reading(CLOCK(), request.query.get("log") == "1"))

    async def reset_prefix_cache(self, request: web.Request) -> web.Response:
        """Empty the prefix cache, as vLLM's POST /reset_prefix_cache and SGLang's POST /flush_cache."""
        if self.engine.prefix is not None:
            self.engine.prefix.reset()
        self.engine.cache_resets_total += 1
        return web.Response(status=200)

    async def reset_prefix_cache_vllm(self, request: web.Request) -> web.Response:
        """vLLM 0.32's POST /reset_prefix_cache: 200 with {"success": false}, and nothing
        emptied, while a request holds blocks (it does not preempt running requests unless asked
        to); else the cache emptied and {"success": true}."""
        if self.engine.running:
            return web.json_response({"success": False})
        await self.reset_prefix_cache(request)
        return web.json_response({"success": True})

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        text = body.get("prompt")
        if text is None and "messages" in body:
            text = " ".join(str(m.get("content", "")) for m in body["messages"])
        if self.tok:
            ids = self.tok.encode(str(text or ""))
        else:
            ids = [VOCABULARY.index(w) if w in VOCABULARY else len(VOCABULARY) + (hash(w) % 100000)
                   for w in str(text or "").split()]
        return web.json_response({"tokens": ids, "count": len(ids), "max_model_len": self.cfg.max_model_len})

    async def _pooled(self, request: web.Request, api: PooledSim) -> web.StreamResponse:
        """One request of a pooling API (sim/pooling.py), written once the engine ran the
        request's prefill step (the trace's `end_ns` is that write). `inputs` in the trace: the
        vectors (embeddings) or documents (rerank) answered."""
        arrival = request[ARRIVAL_NS]
        try:
            body = await self._read_json(request)
            counts = api.inputs(body)
            fault = await self._pick_fault()
        except Reject as r:
            return r.response
        rid = request.headers.get("x-request-id") or uuid.uuid4().hex
        tokens = sum(counts)
        seq = Seq(id=api.id_prefix + rid, adapter=api, stream=False,
                  transport=request.transport, input_tokens=tokens, max_tokens=0, inputs=len(counts),
                  fault=fault, reasoning=0, text=[], done=asyncio.get_running_loop().create_future(),
                  ready_at=arrival + int(self.cfg.ttft_ms * 1e6) if self.cfg.ttft_ms is not None else 0,
                  trace={"id": rid, "api": api.name, "arrival_ns": arrival, "admitted_ns": None,
                         "first_token_ns": None, "chunks": [], "end_ns": None, "reason": None,
                         "input_tokens": tokens, "inputs": len(counts), "output_tokens": 0,
                         "cached_tokens": 0, "fault": fault.kind if fault else None,
                         "reasoning_tokens": 0, "reasoning_chunks": 0})
        self.engine.submit(seq)
        try:
            reason = await seq.done
            if reason == "client_gone":
                return web.Response(status=499)
            return await self._write_answer(request, seq, api.answer(seq, body))
        except asyncio.CancelledError:
            seq.gone = True
            seq.trace["reason"] = "client_gone"
            raise
        finally:
            self.engine.record(seq.trace)

    async def _read_json(self, request: web.Request) -> dict:
        """A pooling request's JSON object, for this server's model; Reject otherwise."""
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise Reject(error(400, "the request body is not valid JSON", "BadRequestError")) from None
        if not isinstance(body, dict) or body.get("model") != self.cfg.model:
            model = body.get("model") if isinstance(body, dict) else None
            raise Reject(error(404, f"The model `{model}` does not exist.", "NotFoundError"))
        return body

    async def _write_answer(self, request: web.Request, seq: Seq, out: bytes) -> web.StreamResponse:
        """A pooling answer; faults: `reset` drops the connection, `stall` waits before the
        answer, `malformed` sends its first half (a JSON cut short)."""
        tr, fault = seq.trace, seq.fault
        if fault is not None and fault.kind == "reset":
            tr["reason"] = "reset"
            if seq.transport is not None:
                seq.transport.abort()
            return web.Response(status=499)  # never sent: the connection is gone
        if fault is not None and fault.kind == "stall":
            await asyncio.sleep(fault.arg_s)
        if fault is not None and fault.kind == "malformed":
            out = out[:len(out) // 2]
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json",
                                                       "x-request-id": tr["id"]})
        resp.content_length = len(out)
        await resp.prepare(request)
        tr["end_ns"] = CLOCK()  # as a stream's chunks are stamped: just before the write
        try:
            await resp.write(out)
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            tr["reason"] = "client_gone"
        return resp

    async def _generate(self, request: web.Request, api: SimApi) -> web.StreamResponse:
        """One completion: read and check the request, queue it in the engine, stream (or
        return) what the engine decodes for it."""
        arrival = request[ARRIVAL_NS]
        try:
            body, parsed = await self._read_request(request, api)
            fault = await self._pick_fault()
        except Reject as r:
            return r.response
        seq = self._new_seq(request, body, api, arrival, parsed, fault)
        headers = {"x-request-id": seq.trace["id"]}
        if seq.stream and self.cfg.close_after_stream:
            headers["Keep-Alive"] = "timeout=5, max=100"  # what cpp-httplib says, then closes anyway
        if seq.stream:
            await self._open_stream(request, seq, headers)
        self.engine.submit(seq)
        try:
            reason = await seq.done
        except asyncio.CancelledError:
            seq.gone = True
            raise
        if not seq.stream:
            return web.json_response(api.whole(seq, self.engine.final_usage(seq)), headers=headers)
        if reason not in ("reset", "client_gone"):
            await self._end_stream(request, seq.resp)
        return seq.resp

    async def _read_request(self, request: web.Request, api: SimApi) -> tuple[dict, ParsedRequest]:
        """(body, what the engine takes of it) of a valid request; Reject with the error a
        vLLM server would answer otherwise (the API's own checks: its adapter's `read`)."""
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise Reject(error(400, "the request body is not valid JSON", "BadRequestError")) from None
        if body.get("model") != self.cfg.model:
            raise Reject(error(404, f"The model `{body.get('model')}` does not exist.", "NotFoundError"))
        return body, api.read(body)

    async def _pick_fault(self) -> Fault | None:
        """This request's injected fault, if any: an HTTP error is answered here (_Reject),
        slow headers wait here, the others act mid-stream (Engine._mid_stream_fault)."""
        fault = self.picker.pick()
        if fault and fault.kind.startswith("http_"):
            status = int(fault.kind[5:])
            message = {429: "Too many requests", 500: "Internal server error",
                       503: "Service unavailable"}[status]
            raise Reject(error(status, message, {429: "RateLimitError", 500: "InternalServerError",
                                                   503: "ServiceUnavailableError"}[status]))
        if fault and fault.kind == "slow_headers":
            await asyncio.sleep(fault.arg_s)
        return fault

    def _ready_at(self, arrival: int) -> int:
        """When a request may first be admitted (0: at once): after `ttft_ms` (instead of its
        prefill) and the front end's `frontend_ms` (off the engine's steps, as a real server's
        tokenizing and queueing process is), longer by `frontend_growth` with the requests
        the server holds (running: the front end streams their tokens meanwhile; waiting: it
        hands them over first)."""
        cfg = self.cfg
        held = len(self.engine.running) + len(self.engine.waiting)
        wait_ms = (cfg.ttft_ms or 0.0) + cfg.frontend_wait_ms(held)
        return arrival + int(wait_ms * 1e6) if wait_ms > 0 else 0

    def _new_seq(self, request: web.Request, body: dict, api: SimApi, arrival: int, parsed: ParsedRequest,
                 fault: Fault | None) -> Seq:
        """The engine's sequence for a request, with its whole output drawn up front."""
        rid = request.headers.get("x-request-id") or uuid.uuid4().hex
        self._counter += 1
        opts = body.get("stream_options") or {}
        ignored = self.cfg.ignored_params
        stop = body.get("stop") or []
        seed = body.get("seed")
        tokens, max_tokens = parsed.tokens, parsed.max_tokens
        input_tokens = len(tokens)
        seq = Seq(
            id=api.id_prefix + rid, adapter=api,
            stream=bool(body.get("stream", False)),
            transport=request.transport, model=json.dumps(self.cfg.model).encode(),
            created=str(int(time.time())).encode(), input_tokens=input_tokens, max_tokens=max_tokens,
            min_tokens=0 if "min_tokens" in ignored else int(body.get("min_tokens") or 0),
            ignore_eos=False if "ignore_eos" in ignored else bool(body.get("ignore_eos", False)),
            stop=set([stop] if isinstance(stop, str) else stop),
            rng=random.Random(seed if seed is not None else (self.cfg.seed << 32) + self._counter),
            include_usage=bool(opts.get("include_usage")) and "stream_options" not in ignored,
            continuous_usage=bool(opts.get("continuous_usage_stats")) and "stream_options" not in ignored,
            done=asyncio.get_running_loop().create_future(), fault=fault,
            fault_at=max(1, max_tokens // 2) if fault else None,
            ready_at=self._ready_at(arrival),
            trace={"id": rid, "api": api.name, "arrival_ns": arrival, "admitted_ns": None,
                   "first_token_ns": None, "chunks": [], "end_ns": None, "reason": None,
                   "input_tokens": input_tokens, "output_tokens": 0, "cached_tokens": 0,
                   "fault": fault.kind if fault else None, "reasoning_tokens": 0, "reasoning_chunks": 0,
                   "first_tool_ns": None, "tool_chunks": 0},
        )
        seq.conversation = parsed.conversation
        if body.get("previous_response_id") is not None:
            seq.trace["previous_response_id"] = body["previous_response_id"]
        if parsed.image_tokens or body.get("tools"):  # images (sim/prompt_tokens.py) or tools:
            seq.trace["image_tokens"] = parsed.image_tokens  # what they cost, as received
            seq.trace["body_bytes"] = request.content_length
        # reasoning and tool calls in the chat-like APIs, as vLLM's reasoning and tool parsers
        seq.reasoning = min(self.cfg.reasoning_tokens, max_tokens) if api.agentic else 0
        if self.cfg.trace_text:
            seq.trace[api.prompt_key] = body.get(api.prompt_key)
        if self.engine.prefix is not None:
            seq.block_keys = block_keys(tokens, self.cfg.block_size)
            seq.prompt_tokens = tokens
        # The whole output is drawn up front (one C call), and each chunk is built by
        # two concatenations around pre-encoded pieces: no json.dumps per token.
        seq.text = seq.rng.choices(_WORDS, k=max_tokens)
        if self.tok:
            # every vocabulary word is at least one token: these words give enough tokens
            ids = self.tok.encode(b"".join(seq.text).decode())[:max_tokens]
            seq.text = [_json_escape(self.tok.token_bytes(i)) for i in ids]
            seq.out_ids = ids
        if self.cfg.tool_call_fraction and api.agentic and \
                seq.rng.random() < self.cfg.tool_call_fraction and seq.reasoning < max_tokens:
            seq.tool_at = seq.reasoning  # the call follows the reasoning; no text answer
            seq.calls = self.cfg.parallel_tool_calls
            whole = seq.tool_at + seq.calls * (1 + self.cfg.tool_call_tokens)
            seq.tool_end = min(whole, max_tokens)
            seq.tool_finish = "tool_calls" if whole <= max_tokens else "length"
        api.prepare(seq)
        return seq

    async def _open_stream(self, request: web.Request, seq: Seq, headers: dict) -> None:
        """The 200 and the API's opening events (chat's role-only first chunk, Responses'
        response.created): sent before the request queues, as vLLM sends them."""
        resp = web.StreamResponse(status=200, headers={**headers, "Content-Type": "text/event-stream",
                                                       "Cache-Control": "no-cache"})
        await resp.prepare(request)
        seq.resp = resp
        opening = seq.adapter.opening(seq)
        if opening:
            await resp.write(opening)

    async def _end_stream(self, request: web.Request, resp: web.StreamResponse) -> None:
        proto = request.protocol
        if self.cfg.close_after_stream and isinstance(proto, _StampingHandler):
            # Before the stream's last bytes go out: the client cannot send its next request
            # on this connection until it has them, and that request must not be read.
            proto.close_after(self._close_rng.uniform(0.0, self.cfg.close_delay_ms) / 1e3)
        try:
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            pass


async def serve_forever(cfg: SimConfig, port: int, trace_path: str | None = None) -> None:
    """Run until SIGINT/SIGTERM; print the address first (a parent process reads it)."""
    import gc
    import signal
    import sys

    server = SimServer(cfg, port, trace_path)
    # As ground truth its stamps must not wait on the collector: the trace goes to the
    # file only (no in-memory copy to grow the heap), start-up objects are frozen out
    # of collections, and collections run less often.
    server.engine.keep_trace = False
    bound = await server.start()
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"benchc sim: listening on http://{cfg.host}:{bound}/v1 (model {cfg.model})", flush=True)
    sys.stdout.flush()
    await stop.wait()
    await server.stop()
