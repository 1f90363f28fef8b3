"""What one API is to the simulator: how its requests are read, how its answers are written
(a stream's events, or one JSON answer) and how its usage is shaped. The engine
(sim/server.py) holds a request's adapter and asks it, never which API it serves; the
adapters are in sim/apis.py (chat, completions), sim/wire.py (Responses, Messages) and
sim/pooling.py (embeddings, rerank, score), as the client's are in client/apis.py.

An answer is a run of output tokens of three kinds (the stream parser's ANSWER, REASONING,
TOOL): reasoning first, then the answer or a tool call. `runs` cuts a step's tokens into runs
of one kind; each run is one event of the API's stream.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

from aiohttp import web

from benchc.sim.model import SimConfig
from benchc.sim.prompt_tokens import PromptCounter
from benchc.sim.responses_store import ResponseStore

CLOCK = time.perf_counter_ns
ANSWER, REASONING, TOOL = 0, 1, 2  # as benchc.client._stream_py (the sim does not import the client)


class Reject(Exception):  # noqa: N818 - a response, not an error of the simulator
    """A request the simulator answers with an error response instead of queueing it."""

    def __init__(self, response: web.Response):
        super().__init__(response.status)
        self.response = response


def error(status: int, message: str, kind: str) -> web.Response:
    """vLLM's error body shape."""
    body = {"object": "error", "message": message, "type": kind, "param": None, "code": status}
    return web.json_response(body, status=status)


def bad_request(message: str) -> Reject:
    return Reject(error(400, message, "BadRequestError"))


@dataclass
class Context:
    """What an adapter reads a request with: the server's parameters, its tokenizer (None: one
    word one token), its prompt counter and the Responses API's kept responses."""

    cfg: SimConfig
    tok: Any
    prompt_counter: PromptCounter
    responses: ResponseStore

    def tokens(self, text: str) -> list:
        """A text's tokens: the tokenizer's ids, else its words."""
        return self.tok.encode(text) if self.tok else text.split()

    def count(self, text: str) -> int:
        """A text's token count."""
        return len(self.tokens(text))


class ParsedRequest(NamedTuple):
    """A generating request as the engine takes it."""

    tokens: list  # the prompt's tokens (words, or ids): its length is the usage's prompt_tokens
    max_tokens: int
    image_tokens: int  # of `tokens`, those of images (sim/prompt_tokens.py)
    conversation: list | None  # Responses, stored: the prompt's tokens but the tools' (responses_store)


def usage_dict(seq: Any, upto: int | None = None) -> dict:
    """The chat-style usage of the tokens emitted so far (`upto`: of the first `upto`), without
    the prompt's cache details (the engine adds those to a final usage)."""
    n = seq.emitted if upto is None else upto
    usage: dict = {"prompt_tokens": seq.input_tokens, "total_tokens": seq.input_tokens + n,
                   "completion_tokens": n}
    if seq.reasoning:  # as OpenAI's API reports them (a completion's reasoning part)
        usage["completion_tokens_details"] = {"reasoning_tokens": min(seq.reasoning, n)}
    return usage


def json_text(words: list[bytes]) -> str:
    """The decoded text of JSON-escaped token bytes."""
    return json.loads(b'"' + b"".join(words) + b'"')


class SimApi:
    """One API of the simulator. A generating API (the base's default) reads a request into a
    ParsedRequest and writes its answer as a stream (opening, an event per run of tokens, a
    finish without a token, closing) or whole; a pooled one (sim/pooling.py) answers once."""

    name = ""
    paths: tuple[str, ...] = ()  # where the server routes it
    id_prefix = ""  # the response id: this, then the request id
    prompt_key = "messages"  # the body's key the trace keeps (trace_text)
    agentic = True  # reasoning and tool calls answer it (vLLM's reasoning and tool parsers)
    pooled = False  # answered once its prefill step ran (sim/pooling.py)
    llama_timings = False  # llama.cpp's per-response `timings` ride on its stream's end

    def __init__(self, ctx: Context):
        self.ctx = ctx

    # ------------------------------------------------------------------ requests

    def read(self, body: dict) -> ParsedRequest:
        """A valid request's prompt and output length; Reject with the error a vLLM server
        answers otherwise (in the order it checks)."""
        self.check_prompt(body)
        tokens, image_tokens, conversation = self.prompt_tokens(body)
        if int(body.get("n", 1)) != 1:
            raise bad_request("only n=1 is supported")
        input_tokens = len(tokens)
        max_tokens = self.requested_max_tokens(body)
        cfg = self.ctx.cfg
        if max_tokens is None:
            max_tokens = max(cfg.max_model_len - input_tokens, 1)
        max_tokens = int(max_tokens)
        if input_tokens + max_tokens > cfg.max_model_len:
            raise bad_request(
                f"This model's maximum context length is {cfg.max_model_len} tokens. However, you "
                f"requested {input_tokens + max_tokens} tokens ({input_tokens} in the messages, "
                f"{max_tokens} in the completion). Please reduce the length of the messages or "
                "completion.")
        return ParsedRequest(tokens, max_tokens, image_tokens, conversation)

    def check_prompt(self, body: dict) -> None:
        """Reject a body without a prompt of this API's shape (a 400)."""
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise bad_request("messages must be a non-empty list")

    def prompt_tokens(self, body: dict) -> tuple[list, int, list | None]:
        """(the prompt's tokens, of which image tokens, the conversation a stored response
        keeps): tools, messages, content parts, images, tool calls (sim/prompt_tokens.py)."""
        tokens, images = self.ctx.prompt_counter.prompt(self.name, body)
        return tokens, images, None

    def requested_max_tokens(self, body: dict) -> Any:
        """The body's output length (None: up to the context length)."""
        return body.get("max_completion_tokens", body.get("max_tokens"))

    # ------------------------------------------------------------------ answers

    def prepare(self, seq: Any) -> None:
        """Whatever the sequence's events are built from, once its output is drawn."""

    def opening(self, seq: Any) -> bytes:
        """What a stream sends once the request is accepted, before it queues."""
        return b""

    def event(self, seq: Any, kind: int, start: int, end: int, text: bytes, finish: str | None) -> bytes:
        """The event of the tokens seq.text[start:end] (JSON-escaped `text`), all of `kind`;
        `finish`: the finish reason when they are the answer's last."""
        raise NotImplementedError

    def finish_event(self, seq: Any) -> bytes:
        """The event of a finish without a token (a stop string), if the API has one."""
        return b""

    def closing(self, seq: Any, usage: dict, end_event: bool, timings: bytes) -> bytes:
        """A stream's last events: `usage` the final one, `end_event` False under the no_done
        fault (the stream stops before its end), `timings` llama.cpp's (llama_timings)."""
        raise NotImplementedError

    def whole(self, seq: Any, usage: dict) -> dict:
        """The answer of a request that did not stream."""
        raise NotImplementedError

    def cached_details(self, seq: Any) -> dict:
        """The final usage's prompt_tokens_details (with the prefix cache on)."""
        return {"cached_tokens": seq.cached}


def kind_of(seq: Any, i: int) -> int:
    """What output token i is: reasoning first, then the tool call (from seq.tool_at), else answer."""
    if i < seq.reasoning:
        return REASONING
    if seq.tool_at is not None and i >= seq.tool_at:
        return TOOL
    return ANSWER


def tool_call_at(seq: Any, i: int) -> tuple[int, bool]:
    """Output token i of a tool-call answer (i >= seq.tool_at): (its call, whether it is that
    call's name). The seq.calls parallel calls interleave token by token: the names first,
    call by call, then each call's next argument token in turn (sim/model.py parallel_tool_calls)."""
    j = i - seq.tool_at
    return j % seq.calls, j < seq.calls


def tool_call_tokens(seq: Any, call: int, upto: int) -> list[bytes]:
    """The argument tokens of tool call `call` among the output's first `upto` tokens."""
    return seq.text[seq.tool_at + seq.calls + call:upto:seq.calls]


def runs(seq: Any, start: int, end: int) -> list[tuple[int, int, int]]:
    """The tokens [start, end) as runs of one kind, (kind, first, end): one event each. A tool
    call's name token is a run of its own (its event is the one that names the call), and so is
    every token of parallel calls (each names its own call)."""
    out: list[tuple[int, int, int]] = []
    i = start
    while i < end:
        kind = kind_of(seq, i)
        j = i + 1
        if not (kind == TOOL and (i == seq.tool_at or seq.calls > 1)):
            while j < end and kind_of(seq, j) == kind and j != seq.tool_at:
                j += 1
        out.append((kind, i, j))
        i = j
    return out
