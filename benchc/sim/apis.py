"""The simulator's APIs, one adapter each (sim/adapter.py): chat and completions here (their
streams are `data:` chunks of one object, ended by `data: [DONE]`), Responses and Messages
in sim/wire.py, embeddings, rerank and score in sim/pooling.py; `sim_apis` builds them all
for one server.

Chat, as vLLM's OpenAI server: the first chunk carries the role only (`delta: {role,
content: ""}`), sent as soon as the request is accepted; `finish_reason` rides on the last
token's chunk; `stream_options.include_usage` adds a final chunk with empty `choices` and
`usage`, `continuous_usage_stats` adds `usage` to every chunk; reasoning is
`reasoning_content`, a tool call's first delta carries its id and name.
"""

from __future__ import annotations

import json
from typing import Any

from benchc.sim.adapter import REASONING, TOOL, Context, SimApi, bad_request, tool_call_at, usage_dict
from benchc.sim.pooling import EmbeddingsSim, RerankSim, ScoreSim
from benchc.sim.wire import MessagesSim, ResponsesSim


class _ChunksApi(SimApi):
    """The APIs of `data:` chunks (chat, completions): each chunk is built by two
    concatenations around pre-encoded pieces (`prepare`), no json.dumps per token."""

    object_name = ""  # the chunks' `object`
    llama_timings = True

    def chunk(self, seq: Any, text: bytes, finish: str | None, kind: int = 0, upto: int | None = None,
              name: bool = False, call: int = 0) -> bytes:
        """One chunk of `text` of `kind` (`name`: a tool call's first, its name; `call`: which of
        the answer's parallel calls); `upto`: the tokens its continuous usage counts (default:
        all emitted so far)."""
        raise NotImplementedError

    @staticmethod
    def _usage(seq: Any, upto: int | None) -> bytes:
        if not seq.continuous_usage:
            return b""
        return b',"usage":' + json.dumps(usage_dict(seq, upto), separators=(",", ":")).encode()

    def prepare(self, seq: Any) -> None:
        seq.head, seq.tail = self.chunk(seq, b"\x00", None).split(b"\x00")
        if seq.reasoning:
            seq.rhead = self.chunk(seq, b"\x00", None, REASONING).split(b"\x00")[0]

    def event(self, seq: Any, kind: int, start: int, end: int, text: bytes, finish: str | None) -> bytes:
        if finish is None and not seq.continuous_usage and kind != TOOL:
            return (seq.rhead if kind == REASONING else seq.head) + text + seq.tail  # two concatenations
        if kind != TOOL:
            return self.chunk(seq, text, finish, kind, upto=end)
        call, name = tool_call_at(seq, start)
        return self.chunk(seq, text, finish, kind, upto=end, name=name, call=call)

    def finish_event(self, seq: Any) -> bytes:
        return self.chunk(seq, b"", seq.finish)

    def closing(self, seq: Any, usage: dict, end_event: bool, timings: bytes) -> bytes:
        tail = b""
        if seq.include_usage:
            tail += (b'data: {"id":"' + seq.id.encode() + b'","object":"' + self.object_name.encode()
                     + b'","created":' + seq.created + b',"model":' + seq.model
                     + b',"choices":[],"usage":' + json.dumps(usage, separators=(",", ":")).encode()
                     + timings + b"}\n\n")
        elif timings:
            # llama.cpp without include_usage: the timings ride on a chunk of their own here
            tail += (b'data: {"id":"' + seq.id.encode() + b'","object":"' + self.object_name.encode()
                     + b'","created":' + seq.created + b',"model":' + seq.model
                     + b',"choices":[]' + timings + b"}\n\n")
        if end_event:
            tail += b"data: [DONE]\n\n"
        return tail

    @staticmethod
    def _texts(seq: Any) -> tuple[str, str]:
        """(answer, reasoning) of a whole answer."""
        words = [json.loads(b'"' + w + b'"') for w in seq.words]
        return "".join(words[seq.reasoning:]), "".join(words[:seq.reasoning])


class ChatSim(_ChunksApi):
    name, paths, id_prefix = "chat", ("/v1/chat/completions",), "chatcmpl-"
    object_name = "chat.completion.chunk"

    def chunk(self, seq: Any, text: bytes, finish: str | None, kind: int = 0, upto: int | None = None,
              name: bool = False, call: int = 0) -> bytes:
        reason = b"null" if finish is None else b'"' + finish.encode() + b'"'
        if kind == TOOL:
            index = str(call).encode()
            one = (b'{"index":' + index + b',"id":"chatcmpl-tool-' + seq.trace["id"].encode()
                   + (b"-" + index if call else b"")
                   + b'","type":"function","function":{"name":"' + text + b'","arguments":""}}' if name
                   else b'{"index":' + index + b',"function":{"arguments":"' + text + b'"}}')
            delta = b'{"tool_calls":[' + one + b"]}"
        else:
            key = b"reasoning_content" if kind == REASONING else b"content"
            delta = b'{"' + key + b'":"' + text + b'"}'
        return (b'data: {"id":"' + seq.id.encode() + b'","object":"chat.completion.chunk","created":'
                + seq.created + b',"model":' + seq.model + b',"choices":[{"index":0,"delta":' + delta
                + b',"logprobs":null,"finish_reason":' + reason + b"}]" + self._usage(seq, upto) + b"}\n\n")

    def opening(self, seq: Any) -> bytes:
        """The role-only first chunk: sent before the request queues, as vLLM sends it, so a
        client that took it for the first token would be visibly wrong."""
        return (b'data: {"id":"' + seq.id.encode() + b'","object":"chat.completion.chunk",'
                b'"created":' + seq.created + b',"model":' + seq.model
                + b',"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
                  b'"logprobs":null,"finish_reason":null}]}\n\n')

    def whole(self, seq: Any, usage: dict) -> dict:
        text, reasoning = self._texts(seq)
        message = {"role": "assistant", "content": text}
        if reasoning:
            message["reasoning_content"] = reasoning
        return {"id": seq.id, "object": "chat.completion", "created": int(seq.created),
                "model": json.loads(seq.model),
                "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": seq.finish}],
                "usage": usage}

    def cached_details(self, seq: Any) -> dict:
        # vLLM 0.32's chat usage also says which of the prompt's whole blocks it computed and
        # cached now: all of them but those it found (a prompt of whole blocks found again
        # computes its last block again, for the last token)
        block = self.ctx.cfg.block_size
        return {"cached_tokens": seq.cached,
                "created_cache_tokens": seq.input_tokens // block * block - seq.cached}


class CompletionsSim(_ChunksApi):
    name, paths, id_prefix, object_name = "completions", ("/v1/completions",), "cmpl-", "text_completion"
    prompt_key = "prompt"
    agentic = False

    def check_prompt(self, body: dict) -> None:
        if not isinstance(body.get("prompt"), str):
            raise bad_request("prompt must be a string")

    def prompt_tokens(self, body: dict) -> tuple[list, int, list | None]:
        return self.ctx.tokens(body["prompt"]), 0, None

    def chunk(self, seq: Any, text: bytes, finish: str | None, kind: int = 0, upto: int | None = None,
              name: bool = False, call: int = 0) -> bytes:
        reason = b"null" if finish is None else b'"' + finish.encode() + b'"'
        return (b'data: {"id":"' + seq.id.encode() + b'","object":"text_completion","created":'
                + seq.created + b',"model":' + seq.model + b',"choices":[{"index":0,"text":"' + text
                + b'","logprobs":null,"finish_reason":' + reason + b',"stop_reason":null}]'
                + self._usage(seq, upto) + b"}\n\n")

    def whole(self, seq: Any, usage: dict) -> dict:
        text, _ = self._texts(seq)
        return {"id": seq.id, "object": "text_completion", "created": int(seq.created),
                "model": json.loads(seq.model),
                "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": seq.finish,
                             "stop_reason": None}], "usage": usage}


def sim_apis(ctx: Context) -> dict[str, SimApi]:
    """Every API the simulator knows, by name, for one server."""
    return {a.name: a for a in (ChatSim(ctx), CompletionsSim(ctx), ResponsesSim(ctx), MessagesSim(ctx),
                                EmbeddingsSim(ctx), RerankSim(ctx), ScoreSim(ctx))}
