"""One adapter per server API: the request body made from the plan's prompt, the path under
the /v1 root, the headers, and the answer's text for the smoke checks.

Everything that differs between APIs in what benchc *sends* lives here (the stream parser,
benchc.client._stream, reads every API's events into the same fields): a new API is one
adapter in APIS, not a branch in every function that builds or sends a request.
"""

from __future__ import annotations

import json
from typing import Any

from benchc.errors import PlanError
from benchc.plan.model import Sampling, Target
from benchc.plan.tools import CHOICES, chat_choice
from benchc.plan.workload import Prompt


def prompt_text(prompt: Prompt) -> str:
    """A prompt as one text: its own, or a dataset's messages with their contents joined."""
    if prompt.text is not None:
        return prompt.text
    return " ".join(str(m.get("content", "")) for m in prompt.messages or [])


def _delta_text(d: dict) -> str:
    return (d.get("content") or "") + (d.get("reasoning_content") or d.get("reasoning") or "")


class Api:
    """What one API sends and where. Subclasses set `name`, `path` and `streams`, and say
    how a prompt becomes the body (`_input`); sampling fields are common to the OpenAI-style
    APIs and added here."""

    name: str = ""
    path: str = ""  # appended to the /v1 root
    streams: bool = True  # answers as server-sent events (else one JSON body)

    def url(self, base_url: str) -> str:
        """The endpoint under a /v1 root."""
        return base_url.rstrip("/") + self.path

    def answered(self, inputs: int, results: int) -> tuple[int, int]:
        """(inputs answered, results counted) of a non-streamed answer that carried `results`
        to a request of `inputs`: what the point counts (client/request.py `_as_asked`)."""
        return inputs, results

    def _input(self, prompt: Prompt) -> dict[str, Any]:
        raise NotImplementedError

    max_tokens_key = "max_tokens"

    def _tools(self, tools: dict) -> dict[str, Any]:
        """The workload's tools (plan/tools.py: chat-form definitions and a choice) in this
        API's form."""
        raise PlanError(f"tools in the workload are not built yet for the {self.name} API")

    def _previous(self, response_id: str) -> dict[str, Any]:
        """A conversation the server keeps: the id of its last response, in this API's words."""
        raise PlanError(f"conversations kept by the server (previous_response_id) are the Responses "
                        f"API's, not the {self.name} API's")

    def _text_part(self, text: str) -> dict[str, Any]:
        return {"type": "text", "text": text}

    def _image_part(self, image: Any) -> dict[str, Any]:
        """An image (plan/images.Image) as this API's content part."""
        raise PlanError(f"images in prompts are not built yet for the {self.name} API")

    def with_images(self, messages: list[dict], images: tuple) -> list[dict]:
        """`messages` with `images` after the last one's text, as content parts in this API's
        form (a session's turn: its user message, kept so in the history)."""
        return self._with_images(messages, images)

    def _with_images(self, messages: list[dict], images: tuple) -> list[dict]:
        """The prompt's images after the last message's text, as content parts in this API's form."""
        if not images:
            return messages
        *head, last = messages
        parts = [self._text_part(last.get("content") or "")] + [self._image_part(im) for im in images]
        return [*head, {**last, "content": parts}]

    def body(self, target: Target, sampling: Sampling, prompt: Prompt, *, stream: bool = True,
             continuous_usage: bool = False, max_tokens: int | None = None,
             tools: dict | None = None, previous_response_id: str | None = None) -> dict:
        """The JSON body of one request. `max_tokens` overrides the sampling's and the
        prompt's output length; `continuous_usage` asks for usage on every chunk (vLLM);
        `tools`: the workload's tools (Workload.tools), offered in this API's form;
        `previous_response_id`: the prompt is a conversation's new input only, the server
        holding what came before under that id (the Responses API's)."""
        body: dict[str, Any] = {"model": target.model, **self._input(prompt)}
        if previous_response_id is not None:
            body.update(self._previous(previous_response_id))
        if tools:
            body.update(self._tools(tools))
        mt = max_tokens or sampling.max_tokens or prompt.output_tokens
        if mt is not None:
            body[self.max_tokens_key] = mt
        body["temperature"] = sampling.temperature
        if sampling.top_p is not None:
            body["top_p"] = sampling.top_p
        body.update(self._extensions(sampling))
        if stream:
            body["stream"] = True
            body.update(self._stream_options(continuous_usage))
        body.update(sampling.extra_body)
        return body

    def _extensions(self, sampling: Sampling) -> dict[str, Any]:
        """The sampling fields beyond OpenAI's own that vLLM and SGLang read (min_tokens,
        ignore_eos) and the stop strings and seed."""
        out: dict[str, Any] = {}
        if sampling.min_tokens is not None:
            out["min_tokens"] = sampling.min_tokens
        if sampling.ignore_eos:
            out["ignore_eos"] = True
        if sampling.stop:
            out["stop"] = sampling.stop
        if sampling.seed is not None:
            out["seed"] = sampling.seed
        return out

    def _stream_options(self, continuous_usage: bool) -> dict[str, Any]:
        """Ask for usage at the end of the stream (and on every chunk)."""
        opts = {"include_usage": True}
        if continuous_usage:
            opts["continuous_usage_stats"] = True
        return {"stream_options": opts}

    def headers(self, target: Target) -> dict[str, str]:
        """The request's headers: JSON, the spec's own, and the API key as a bearer token
        (unless the spec set Authorization itself)."""
        h = {"Content-Type": "application/json", **target.headers}
        if target.api_key:
            h.setdefault("Authorization", f"Bearer {target.api_key}")
        return h

    def answer_text(self, data: dict) -> str:
        """The text (answer and reasoning) of a whole, non-streamed answer."""
        raise NotImplementedError

    def event_text(self, data: dict) -> str:
        """The text (answer and reasoning) one streamed event carries."""
        raise NotImplementedError


class ChatApi(Api):
    name, path = "chat", "/chat/completions"

    def _input(self, prompt: Prompt) -> dict[str, Any]:
        return {"messages": self._with_images(_conversation(prompt), prompt.images)}

    def _image_part(self, image: Any) -> dict[str, Any]:
        return {"type": "image_url", "image_url": {"url": image.data_url()}}

    def _tools(self, tools: dict) -> dict[str, Any]:
        out: dict[str, Any] = {"tools": tools["definitions"]}
        if tools["choice"] != "auto":  # auto is the default: left out, as clients leave it
            out["tool_choice"] = chat_choice(tools["choice"])
        return out

    def answer_text(self, data: dict) -> str:
        return "".join(_delta_text(c.get("message") or {}) for c in (data.get("choices") or [])[:1])

    def event_text(self, data: dict) -> str:
        return "".join(_delta_text(c.get("delta") or {}) for c in (data.get("choices") or [])[:1])


class CompletionsApi(Api):
    name, path = "completions", "/completions"

    def _input(self, prompt: Prompt) -> dict[str, Any]:
        # messages (a dataset's conversation) are sent as one prompt: their contents joined
        return {"prompt": prompt_text(prompt)}

    def answer_text(self, data: dict) -> str:
        return "".join(c.get("text") or "" for c in (data.get("choices") or [])[:1])

    event_text = answer_text


def _conversation(prompt: Prompt) -> list[dict]:
    return prompt.messages or [{"role": "user", "content": prompt.text}]


class _TypedEventsApi(Api):
    """The APIs whose streams are typed events (Responses, Messages): their end events carry
    the usage, so no stream_options."""

    def _stream_options(self, continuous_usage: bool) -> dict[str, Any]:
        return {}


def _tool_input(arguments: str) -> dict:
    """A call's arguments as Messages' tool_use `input` (an object): the streamed text when it
    is a JSON object (real servers stream one), else that text under "arguments" (the
    simulator streams words, and a call cut by max_tokens is not whole)."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except (ValueError, RecursionError):  # not JSON, or nested past what the decoder follows
        value = None
    return value if isinstance(value, dict) else {"arguments": arguments}


class ResponsesApi(_TypedEventsApi):
    """OpenAI's Responses API (/v1/responses), as vLLM serves it: the prompt as `input` (a string,
    or the conversation as a list of messages), `max_output_tokens`; vLLM's sampling extensions
    as on chat (a server that ignores them shows in the output-length check)."""

    name, path = "responses", "/responses"
    max_tokens_key = "max_output_tokens"

    def _input(self, prompt: Prompt) -> dict[str, Any]:
        if prompt.images:  # images need the message form: input_text, then input_image parts
            return {"input": self._with_images(self._items(_conversation(prompt)), prompt.images)}
        return {"input": self._items(prompt.messages) if prompt.messages else prompt.text}

    @staticmethod
    def _items(messages: list[dict]) -> list[dict]:
        """A conversation in chat form (an agent loop's history: run/sessions.py) as input
        items: an assistant's tool calls are `function_call` items (its text, if any, a message
        before them), a tool message a `function_call_output`; other messages as they are."""
        out: list[dict] = []
        for m in messages:
            if m.get("role") == "tool":
                out.append({"type": "function_call_output", "call_id": m.get("tool_call_id"),
                            "output": m.get("content") or ""})
            elif m.get("tool_calls"):
                if m.get("content"):
                    out.append({"role": "assistant", "content": m["content"]})
                out += [{"type": "function_call", "call_id": c["id"], "name": c["function"]["name"],
                         "arguments": c["function"]["arguments"]} for c in m["tool_calls"]]
            else:
                out.append(m)
        return out

    def _text_part(self, text: str) -> dict[str, Any]:
        return {"type": "input_text", "text": text}

    def _previous(self, response_id: str) -> dict[str, Any]:
        return {"previous_response_id": response_id}

    def _image_part(self, image: Any) -> dict[str, Any]:
        return {"type": "input_image", "image_url": image.data_url()}

    def _tools(self, tools: dict) -> dict[str, Any]:
        """Flat function tools: {type, name, description, parameters}; a forced one by name."""
        flat = [{"type": "function", **d["function"]} for d in tools["definitions"]]
        out: dict[str, Any] = {"tools": flat}
        choice = tools["choice"]
        if choice != "auto":
            out["tool_choice"] = choice if choice in CHOICES else {"type": "function", "name": choice}
        return out

    def answer_text(self, data: dict) -> str:
        out = []
        for item in data.get("output") or []:
            for part in (item.get("content") or []) if isinstance(item, dict) else []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    out.append(part["text"])
        return "".join(out)

    def event_text(self, data: dict) -> str:
        kind = data.get("type")
        if kind in ("response.output_text.delta", "response.reasoning_text.delta",
                    "response.reasoning_summary_text.delta"):
            return str(data.get("delta") or "")
        return ""


ANTHROPIC_VERSION = "2023-06-01"  # the Messages API version every server benchc meets accepts


class MessagesApi(_TypedEventsApi):
    """Anthropic's Messages API (/v1/messages): system messages go to the top-level `system`,
    `max_tokens` is required (the plan refuses a workload without an output length), stop
    strings are `stop_sequences`, the key goes in `x-api-key` beside `anthropic-version`.
    Anthropic's API refuses fields it does not define: vLLM's extensions (ignore_eos,
    min_tokens, seed) go only through sampling.extra_body."""

    name, path = "messages", "/messages"

    def _input(self, prompt: Prompt) -> dict[str, Any]:
        msgs = _conversation(prompt)
        system = [str(m.get("content", "")) for m in msgs if m.get("role") == "system"]
        rest = self._blocks([m for m in msgs if m.get("role") != "system"])
        out: dict[str, Any] = {"messages": self._with_images(rest, prompt.images)}
        if system:
            out["system"] = "\n".join(system)
        return out

    @staticmethod
    def _blocks(messages: list[dict]) -> list[dict]:
        """A conversation in chat form (an agent loop's history: run/sessions.py) in Anthropic's:
        an assistant's tool calls are `tool_use` blocks after its text, and the tool messages
        that follow them one user message of `tool_result` blocks; other messages as they are."""
        out: list[dict] = []
        for m in messages:
            if m.get("role") == "tool":
                block = {"type": "tool_result", "tool_use_id": m.get("tool_call_id"),
                         "content": m.get("content") or ""}
                if out and out[-1].get("role") == "user" and isinstance(out[-1]["content"], list) and \
                        out[-1]["content"] and out[-1]["content"][-1].get("type") == "tool_result":
                    out[-1]["content"].append(block)  # the results of one answer's calls: one message
                else:
                    out.append({"role": "user", "content": [block]})
            elif m.get("tool_calls"):
                text = [{"type": "text", "text": m["content"]}] if m.get("content") else []
                out.append({"role": "assistant", "content": text + [
                    {"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                     "input": _tool_input(c["function"]["arguments"])} for c in m["tool_calls"]]})
            else:
                out.append(m)
        return out

    def _image_part(self, image: Any) -> dict[str, Any]:
        return {"type": "image",
                "source": {"type": "base64", "media_type": image.media_type, "data": image.data}}

    # tool_choice by Anthropic's names: required is `any`, a forced tool is {type: tool, name}
    _CHOICES = {"none": {"type": "none"}, "required": {"type": "any"}}

    def _tools(self, tools: dict) -> dict[str, Any]:
        """{name, description, input_schema} per tool (a definition without parameters takes
        an empty object schema: Anthropic requires one)."""
        out: dict[str, Any] = {"tools": [
            {"name": fn["name"], "description": fn.get("description", ""),
             "input_schema": fn.get("parameters") or {"type": "object", "properties": {}}}
            for fn in (d["function"] for d in tools["definitions"])]}
        choice = tools["choice"]
        if choice != "auto":
            out["tool_choice"] = self._CHOICES.get(choice) or {"type": "tool", "name": choice}
        return out

    def _extensions(self, sampling: Sampling) -> dict[str, Any]:
        return {"stop_sequences": sampling.stop} if sampling.stop else {}

    def headers(self, target: Target) -> dict[str, str]:
        h = {"Content-Type": "application/json", **target.headers}
        names = {k.lower() for k in h}
        if target.api_key and "x-api-key" not in names and "authorization" not in names:
            h["x-api-key"] = target.api_key
        if "anthropic-version" not in names:
            h["anthropic-version"] = ANTHROPIC_VERSION
        return h

    def answer_text(self, data: dict) -> str:
        return "".join(str(b.get("text") or b.get("thinking") or "") for b in data.get("content") or []
                       if isinstance(b, dict))

    def event_text(self, data: dict) -> str:
        delta = data.get("delta") if data.get("type") == "content_block_delta" else None
        return str(delta.get("text") or delta.get("thinking") or "") if isinstance(delta, dict) else ""


class EmbeddingsApi(Api):
    """OpenAI's /v1/embeddings (vLLM's pooling runner, SGLang, TEI): one JSON answer, never a
    stream (the stream parser reads it in body mode: docs/embeddings.md)."""

    name, path, streams = "embeddings", "/embeddings", False

    def _input(self, prompt: Prompt) -> dict[str, Any]:
        # a batch (workload.batch) is its inputs; one prompt is a list of one
        return {"input": list(prompt.inputs) if prompt.inputs is not None else [prompt_text(prompt)]}

    def body(self, target: Target, sampling: Sampling, prompt: Prompt, *, stream: bool = True,
             continuous_usage: bool = False, max_tokens: int | None = None,
             tools: dict | None = None, previous_response_id: str | None = None) -> dict:
        """The inputs and the spec's extra_body: nothing of sampling, streaming or tools applies."""
        return {"model": target.model, **self._input(prompt), **sampling.extra_body}

    def answered(self, inputs: int, results: int) -> tuple[int, int]:
        """(inputs answered, results counted) of an answer of `results` to `inputs`, checked
        against what was asked: a vector per input, no more counted than were asked for;
        fewer answer only that many inputs."""
        n = min(results, inputs)
        return n, n

    def answer_text(self, data: dict) -> str:
        """What a smoke check's `expect` sees of an answer: `N embeddings of D floats`."""
        items = data.get("data")
        if not isinstance(items, list) or not items:
            return ""
        first = items[0].get("embedding") if isinstance(items[0], dict) else None
        size = f" of {len(first)} floats" if isinstance(first, list) else ""
        return f"{len(items)} embeddings{size}"

    def event_text(self, data: dict) -> str:
        return self.answer_text(data)  # never streamed: the smoke check reads one answer


class RerankApi(EmbeddingsApi):
    """vLLM's /v1/rerank (Jina's and Cohere's shape): a query and documents, one JSON answer of
    the documents by relevance. A request's inputs (workload.batch, at least 2) are its query,
    then its documents."""

    name, path = "rerank", "/rerank"
    fields = ("query", "documents")  # the body's names of the query and of the documents

    def _input(self, prompt: Prompt) -> dict[str, Any]:
        inputs = list(prompt.inputs) if prompt.inputs is not None else [prompt_text(prompt)]
        query, documents = self.fields
        return {query: inputs[0], documents: inputs[1:] or inputs}

    def answered(self, inputs: int, results: int) -> tuple[int, int]:
        """At most a result per document (the inputs after the query) is counted; fewer are
        what `top_n` asks for, and answer every input."""
        return inputs, min(results, max(1, inputs - 1))

    def answer_text(self, data: dict) -> str:
        """What a smoke check's `expect` sees of an answer: `N results`."""
        results = data.get("results")
        return f"{len(results)} results" if isinstance(results, list) and results else ""


class ScoreApi(RerankApi):
    """vLLM's score API (a cross-encoder's, or an embedding model's cosine): `text_1` and
    `text_2`, one JSON answer of a score per pair (`data`, `usage.prompt_tokens`). A request's
    inputs (workload.batch, at least 2) are its query (text_1), then its documents (text_2):
    vLLM scores the query against each. vLLM serves it at the server's root, `POST /score`
    (its `/v1/score` says it moved and logs a warning per request): the URL is the /v1 root's
    server with /score."""

    name, path = "score", "/score"
    fields = ("text_1", "text_2")

    def url(self, base_url: str) -> str:
        root = base_url.rstrip("/")
        return (root[:-3] if root.endswith("/v1") else root) + self.path

    def answered(self, inputs: int, results: int) -> tuple[int, int]:
        """A score per document (the inputs after the query), no more counted; fewer answer
        the query and that many documents."""
        documents = max(1, inputs - 1)
        n = min(results, documents)
        return (inputs if n == documents else n + 1), n

    def answer_text(self, data: dict) -> str:
        """What a smoke check's `expect` sees of an answer: `N scores`."""
        scores = data.get("data")
        return f"{len(scores)} scores" if isinstance(scores, list) and scores else ""


APIS: dict[str, Api] = {a.name: a for a in (ChatApi(), CompletionsApi(), ResponsesApi(), MessagesApi(),
                                             EmbeddingsApi(), RerankApi(), ScoreApi())}
