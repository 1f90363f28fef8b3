"""The simulator's Responses and Messages APIs (adapters of sim/adapter.py): how a request is
read, the events of one streamed answer and its whole (non-streamed) form, in the shapes vLLM
0.32 sends (field order included: benchc's tests/data/streams/vllm-responses.sse and
vllm-messages.sse were captured from it).

An answer is a run of tokens of three kinds (the stream parser's ANSWER, REASONING, TOOL:
reasoning first, then the answer or a tool call). Each kind is one output item (Responses) or
content block (Messages); an event for a token of a new kind first closes the open item and
opens the next. A tool call's first token is its name: the event that opens its item (an
`output_item.added` of a function_call, a `content_block_start` of a tool_use) carries it, so
that each token is one event, written at the time the trace records for it. Parallel calls
(sim/model.py parallel_tool_calls) are an item (block) each, all open at once, their events
interleaved token by token: each names its call by its output_index and item id (Responses) or
its block index (Messages).
"""

from __future__ import annotations

import json
from typing import Any

from benchc.sim.adapter import (
    ANSWER,
    CLOCK,
    REASONING,
    TOOL,
    Reject,
    SimApi,
    bad_request,
    error,
    kind_of,
    tool_call_at,
    tool_call_tokens,
)
from benchc.sim.adapter import json_text as _text

# Messages' stop reasons for the finish reasons the engine decides
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def _sse(kind: str, obj: dict) -> bytes:
    return (
        b"event: " + kind.encode() + b"\ndata: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
    )


def _runs(seq: Any, start: int, end: int) -> list[tuple[int, int]]:
    """(token index, kind) of every token in [start, end)."""
    return [(i, kind_of(seq, i)) for i in range(start, end)]


class ResponsesSim(SimApi):
    """/v1/responses: response.created and .in_progress when the request is accepted, an output
    item per kind of output, response.completed (vLLM ends a response cut at max_output_tokens
    with it too, status incomplete) with the usage. A request's prompt is its `instructions` and
    `input` (a string, or a list of items), after the conversation of the response its
    `previous_response_id` names; a stored response (`store`, the default) keeps its own."""

    name, paths, prompt_key = "responses", ("/v1/responses",), "input"

    def check_prompt(self, body: dict) -> None:
        items = body.get("input")
        if not (isinstance(items, str) or (isinstance(items, list) and items)):
            raise bad_request("input must be a string or a non-empty list")

    def prompt_tokens(self, body: dict) -> tuple[list, int, list | None]:
        """The tools' tokens, then the conversation's: that of the previous response, then this
        request's input (the conversation apart: a stored response keeps it)."""
        tools, conversation, images = self.ctx.prompt_counter.parts(self.name, body)
        previous = body.get("previous_response_id")
        if previous is not None:
            held = self.ctx.responses.get(str(previous), CLOCK())
            if held is None:
                raise Reject(error(404, f"Response with id '{previous}' not found.", "invalid_request_error"))
            conversation = held + conversation
        kept = conversation if body.get("store", True) is not False else None
        return tools + conversation, images, kept

    def requested_max_tokens(self, body: dict) -> Any:
        return body.get("max_output_tokens")

    def _next(self, seq: Any) -> int:
        seq.wire["n"] += 1
        return seq.wire["n"] - 1

    def _response(self, seq: Any, status: str, usage: dict | None, output: list) -> dict:
        return {
            "id": "resp_" + seq.trace["id"],
            "created_at": int(seq.created),
            "incomplete_details": None,
            "model": json.loads(seq.model),
            "object": "response",
            "output": output,
            "status": status,
            "usage": usage,
        }

    def opening(self, seq: Any) -> bytes:
        seq.wire = {"n": 0, "kind": None, "index": -1, "from": 0, "items": [], "calls": []}
        out = b""
        for kind in ("response.created", "response.in_progress"):
            out += _sse(
                kind,
                {
                    "response": self._response(seq, "in_progress", None, []),
                    "sequence_number": self._next(seq),
                    "type": kind,
                },
            )
        return out

    def _item(self, seq: Any, kind: int, start: int, name: str, call: int = 0) -> dict:
        rid = seq.trace["id"]
        if kind == REASONING:
            return {
                "id": "rs_" + rid,
                "summary": [],
                "type": "reasoning",
                "content": [],
                "status": "in_progress",
            }
        if kind == TOOL:
            rid += f"_{call}" if call else ""  # a parallel call's own ids
            return {
                "id": "fc_" + rid,
                "call_id": "call_" + rid,
                "name": name,
                "arguments": "",
                "type": "function_call",
                "status": "in_progress",
            }
        return {
            "id": "msg_" + rid,
            "content": [],
            "role": "assistant",
            "status": "in_progress",
            "type": "message",
        }

    def _done(self, seq: Any, name: str, item: dict, index: int, **fields: Any) -> bytes:
        """One of the `.done` events that close an item: what it repeats (`fields`), and the
        item's id, index and the sequence number, keys in vLLM's (alphabetical) order."""
        obj = {**fields, "item_id": item["id"], "output_index": index, "sequence_number": self._next(seq),
               "type": name}
        return _sse(name, dict(sorted(obj.items())))

    def _close(self, seq: Any, upto: int) -> bytes:
        """The open item's closing events (its whole text, as vLLM repeats it)."""
        w = seq.wire
        kind, index = w["kind"], w["index"]
        if kind is None:
            return b""
        if kind == TOOL:  # every call's item, in their order (parallel calls are all open)
            out = b"".join(self._close_item(seq, item, index, _text(tool_call_tokens(seq, call, upto)))
                           for call, (item, index) in enumerate(w["calls"]))
            w["kind"], w["calls"] = None, []
            return out
        item = w["items"][-1]
        words = seq.text[w["from"] : upto]
        if kind == ANSWER:
            text = _text(words)
            out = self._done(seq, "response.output_text.done", item, index, content_index=0, logprobs=[],
                             text=text)
            item["content"] = [{"annotations": [], "text": text, "type": "output_text"}]
        else:  # REASONING
            text = _text(words)
            out = self._done(seq, "response.reasoning_text.done", item, index, content_index=0, text=text)
            item["content"] = [{"text": text, "type": "reasoning_text"}]
        w["kind"] = None
        return out + self._item_done(seq, item, index)

    def _close_item(self, seq: Any, item: dict, index: int, args: str) -> bytes:
        """A function_call item's closing events: its whole arguments, then the item."""
        out = self._done(seq, "response.function_call_arguments.done", item, index, arguments=args)
        item["arguments"] = args
        return out + self._item_done(seq, item, index)

    def _item_done(self, seq: Any, item: dict, index: int) -> bytes:
        item["status"] = "completed"
        return _sse(
            "response.output_item.done",
            {
                "item": item,
                "output_index": index,
                "sequence_number": self._next(seq),
                "type": "response.output_item.done",
            },
        )

    def event(self, seq: Any, kind: int, start: int, end: int, text: bytes, finish: str | None) -> bytes:
        w = seq.wire
        out = b""
        call, name = tool_call_at(seq, start) if kind == TOOL else (0, False)
        if kind != w["kind"] or name:
            if not call:  # a parallel call's name leaves the calls before it open
                out += self._close(seq, start)
            w["kind"], w["index"], w["from"] = kind, w["index"] + 1, start
            item = self._item(seq, kind, start, _text([text]), call)
            w["items"].append(item)
            if kind == TOOL:
                w["calls"].append((item, w["index"]))
            out += _sse(
                "response.output_item.added",
                {
                    "item": item,
                    "output_index": w["index"],
                    "sequence_number": self._next(seq),
                    "type": "response.output_item.added",
                },
            )
            if kind == TOOL:
                return out  # the name token: its item is its event
            if kind == ANSWER:
                out += _sse(
                    "response.content_part.added",
                    {
                        "content_index": 0,
                        "item_id": item["id"],
                        "output_index": w["index"],
                        "part": {"annotations": [], "text": "", "type": "output_text", "logprobs": []},
                        "sequence_number": self._next(seq),
                        "type": "response.content_part.added",
                    },
                )
        item, at = w["calls"][call] if kind == TOOL else (w["items"][-1], w["index"])
        item_id = item["id"].encode()
        index = str(at).encode()
        n = str(self._next(seq)).encode()
        if kind == ANSWER:
            return out + (
                b'event: response.output_text.delta\ndata: {"content_index":0,"delta":"'
                + text
                + b'","item_id":"'
                + item_id
                + b'","logprobs":[],"output_index":'
                + index
                + b',"sequence_number":'
                + n
                + b',"type":"response.output_text.delta"}\n\n'
            )
        if kind == REASONING:
            return out + (
                b'event: response.reasoning_text.delta\ndata: {"content_index":0,"delta":"'
                + text
                + b'","item_id":"'
                + item_id
                + b'","output_index":'
                + index
                + b',"sequence_number":'
                + n
                + b',"type":"response.reasoning_text.delta"}\n\n'
            )
        return out + (
            b'event: response.function_call_arguments.delta\ndata: {"delta":"'
            + text
            + b'","item_id":"'
            + item_id
            + b'","output_index":'
            + index
            + b',"sequence_number":'
            + n
            + b',"type":"response.function_call_arguments.delta"}\n\n'
        )

    @staticmethod
    def usage(u: dict) -> dict:
        """The engine's chat-style usage in the Responses API's words."""
        n = u["completion_tokens"]
        return {
            "input_tokens": u["prompt_tokens"],
            "input_tokens_details": {
                "cached_tokens": u.get("prompt_tokens_details", {}).get("cached_tokens", 0)
            },
            "output_tokens": n,
            "output_tokens_details": {
                "reasoning_tokens": u.get("completion_tokens_details", {}).get("reasoning_tokens", 0)
            },
            "total_tokens": u["prompt_tokens"] + n,
        }

    def closing(self, seq: Any, usage: dict, end_event: bool, timings: bytes) -> bytes:
        finish = seq.finish
        out = self._close(seq, seq.emitted)
        if not end_event:  # the no_done fault: the stream stops before its end
            return out
        resp = self._response(
            seq, "completed" if finish != "length" else "incomplete", self.usage(usage), seq.wire["items"]
        )
        if finish == "length":
            resp["incomplete_details"] = {"reason": "max_output_tokens"}
        return out + _sse(
            "response.completed",
            {"response": resp, "sequence_number": self._next(seq), "type": "response.completed"},
        )

    def whole(self, seq: Any, usage: dict) -> dict:
        finish = seq.finish
        seq.wire = {"n": 0, "kind": None, "index": -1, "from": 0, "items": [], "calls": []}
        for start, kind in _runs(seq, 0, seq.emitted):
            self.event(seq, kind, start, start + 1, seq.text[start], None)
        self._close(seq, seq.emitted)
        resp = self._response(
            seq, "completed" if finish != "length" else "incomplete", self.usage(usage), seq.wire["items"]
        )
        if finish == "length":
            resp["incomplete_details"] = {"reason": "max_output_tokens"}
        return resp


class MessagesSim(SimApi):
    """/v1/messages (Anthropic's): message_start (and a ping) when the request is accepted, a
    content block per kind of output, message_delta with the stop reason and usage (input_tokens
    the uncached part, cache_read_input_tokens the cached, as Anthropic and vLLM 0.32 count),
    message_stop. A request's prompt is its `system` and `messages`; `max_tokens` is required."""

    name, paths = "messages", ("/v1/messages",)

    def requested_max_tokens(self, body: dict) -> Any:
        if body.get("max_tokens") is None:
            raise bad_request("max_tokens: Field required")
        return super().requested_max_tokens(body)

    def opening(self, seq: Any) -> bytes:
        seq.wire = {"kind": None, "index": -1, "calls": []}
        msg = {
            "id": "msg_" + seq.trace["id"],
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": json.loads(seq.model),
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": seq.input_tokens, "output_tokens": 0},
        }
        return _sse("message_start", {"type": "message_start", "message": msg}) + _sse(
            "ping", {"type": "ping"}
        )

    def _close(self, seq: Any) -> bytes:
        """The open block's stop; of a tool call, every parallel call's block, in their order."""
        w = seq.wire
        if w["kind"] is None:
            return b""
        w["kind"] = None
        indices, w["calls"] = w["calls"] or [w["index"]], []
        return b"".join(_sse("content_block_stop", {"type": "content_block_stop", "index": i})
                        for i in indices)

    def event(self, seq: Any, kind: int, start: int, end: int, text: bytes, finish: str | None) -> bytes:
        w = seq.wire
        out = b""
        call, name = tool_call_at(seq, start) if kind == TOOL else (0, False)
        if kind != w["kind"] or name:
            if not call:  # a parallel call's name leaves the calls before it open
                out += self._close(seq)
            w["kind"], w["index"] = kind, w["index"] + 1
            if kind == TOOL:  # the name token: the block's start is its event
                w["calls"].append(w["index"])
                block = {
                    "type": "tool_use",
                    "id": "toolu_" + seq.trace["id"] + (f"_{call}" if call else ""),
                    "name": _text([text]),
                    "input": {},
                }
                return out + _sse(
                    "content_block_start",
                    {"type": "content_block_start", "content_block": block, "index": w["index"]},
                )
            block = (
                {"type": "thinking", "thinking": ""} if kind == REASONING else {"type": "text", "text": ""}
            )
            out += _sse(
                "content_block_start",
                {"type": "content_block_start", "content_block": block, "index": w["index"]},
            )
        what = {
            ANSWER: b'"text_delta","text":"',
            REASONING: b'"thinking_delta","thinking":"',
            TOOL: b'"input_json_delta","partial_json":"',
        }[kind]
        return out + (
            b'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"type":'
            + what
            + text
            + b'"},"index":'
            + str(w["calls"][call] if kind == TOOL else w["index"]).encode()
            + b"}\n\n"
        )

    @staticmethod
    def usage(u: dict) -> dict:
        cached = u.get("prompt_tokens_details", {}).get("cached_tokens", 0)
        return {
            "input_tokens": u["prompt_tokens"] - cached,
            "output_tokens": u["completion_tokens"],
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
        }

    def closing(self, seq: Any, usage: dict, end_event: bool, timings: bytes) -> bytes:
        finish = seq.finish
        out = self._close(seq)
        if not end_event:
            return out
        out += _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": _STOP_REASONS.get(finish or "stop", finish), "stop_sequence": None},
                "usage": self.usage(usage),
            },
        )
        return out + _sse("message_stop", {"type": "message_stop"})

    def whole(self, seq: Any, usage: dict) -> dict:
        finish = seq.finish
        content: list[dict] = []
        calls: list[dict] = []  # the tool_use blocks, by call
        for start, kind in _runs(seq, 0, seq.emitted):
            text = _text([seq.text[start]])
            call, name = tool_call_at(seq, start) if kind == TOOL else (0, False)
            if name:
                uid = "toolu_" + seq.trace["id"] + (f"_{call}" if call else "")
                calls.append({"type": "tool_use", "id": uid, "name": text, "input": {}})
                content.append(calls[-1])
            elif kind == TOOL:
                calls[call]["partial"] = calls[call].get("partial", "") + text
            elif (
                content
                and content[-1]["type"] == {ANSWER: "text", REASONING: "thinking", TOOL: "tool_use"}[kind]
            ):
                block = content[-1]
                key = {ANSWER: "text", REASONING: "thinking", TOOL: "partial"}[kind]
                block[key] = block.get(key, "") + text
            else:
                content.append(
                    {"type": "thinking", "thinking": text}
                    if kind == REASONING
                    else {"type": "text", "text": text}
                )
        for block in content:
            if block["type"] == "tool_use":
                block["input"] = {"arguments": block.pop("partial", "")}
        return {
            "id": "msg_" + seq.trace["id"],
            "type": "message",
            "role": "assistant",
            "content": content,
            "model": json.loads(seq.model),
            "stop_reason": _STOP_REASONS.get(finish or "stop", finish),
            "stop_sequence": None,
            "usage": self.usage(usage),
        }

