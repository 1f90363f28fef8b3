"""One adapter per server API: the request body made from the plan's prompt, the path under
the /v1 root, the headers, and the answer's text for the smoke checks.

Everything that differs between APIs in what benchc *sends* lives here (the stream parser,
benchc.client._stream, reads every API's events into the same fields): a new API is one
adapter in APIS, not a branch in every function that builds or sends a request.
"""

from __future__ import annotations

from typing import Any

from benchc.plan.model import Sampling, Target
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

    def _input(self, prompt: Prompt) -> dict[str, Any]:
        raise NotImplementedError

    def body(self, target: Target, sampling: Sampling, prompt: Prompt, *, stream: bool = True,
             continuous_usage: bool = False, max_tokens: int | None = None) -> dict:
        """The JSON body of one request. `max_tokens` overrides the sampling's and the
        prompt's output length; `continuous_usage` asks for usage on every chunk (vLLM)."""
        body: dict[str, Any] = {"model": target.model, **self._input(prompt)}
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
        return {"messages": prompt.messages or [{"role": "user", "content": prompt.text}]}

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


class EmbeddingsApi(Api):
    """OpenAI's /v1/embeddings (vLLM's pooling runner, SGLang, TEI): one JSON answer, never a
    stream (the stream parser reads it in body mode: docs/embeddings.md)."""

    name, path, streams = "embeddings", "/embeddings", False

    def _input(self, prompt: Prompt) -> dict[str, Any]:
        # a batch (workload.batch) is its inputs; one prompt is a list of one
        return {"input": list(prompt.inputs) if prompt.inputs is not None else [prompt_text(prompt)]}

    def body(self, target: Target, sampling: Sampling, prompt: Prompt, *, stream: bool = True,
             continuous_usage: bool = False, max_tokens: int | None = None) -> dict:
        """The inputs and the spec's extra_body: nothing of sampling or streaming applies."""
        return {"model": target.model, **self._input(prompt), **sampling.extra_body}

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

    def _input(self, prompt: Prompt) -> dict[str, Any]:
        inputs = list(prompt.inputs) if prompt.inputs is not None else [prompt_text(prompt)]
        return {"query": inputs[0], "documents": inputs[1:] or inputs}

    def answer_text(self, data: dict) -> str:
        """What a smoke check's `expect` sees of an answer: `N results`."""
        results = data.get("results")
        return f"{len(results)} results" if isinstance(results, list) and results else ""


APIS: dict[str, Api] = {a.name: a for a in (ChatApi(), CompletionsApi(), EmbeddingsApi(), RerankApi())}
