"""One adapter per server API: the request body made from the plan's prompt, the path under
the /v1 root, the headers, and the answer's text for the smoke checks.

Everything that differs between APIs in what benchc *sends* lives here (the stream parser,
benchc.client._stream, reads every API's events into the same fields): a new API is one
adapter in APIS, not a branch in every function that builds or sends a request.
"""

from __future__ import annotations

from typing import Any

from benchc.errors import PlanError
from benchc.plan.model import Sampling, Target
from benchc.plan.tools import chat_choice
from benchc.plan.workload import Prompt


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

    def _tools(self, tools: dict) -> dict[str, Any]:
        """The workload's tools (plan/tools.py: chat-form definitions and a choice) in this
        API's form."""
        raise PlanError(f"tools in the workload are not built yet for the {self.name} API")

    def body(self, target: Target, sampling: Sampling, prompt: Prompt, *, stream: bool = True,
             continuous_usage: bool = False, max_tokens: int | None = None,
             tools: dict | None = None) -> dict:
        """The JSON body of one request. `max_tokens` overrides the sampling's and the
        prompt's output length; `continuous_usage` asks for usage on every chunk (vLLM);
        `tools`: the workload's tools (Workload.tools), offered in this API's form."""
        body: dict[str, Any] = {"model": target.model, **self._input(prompt)}
        if tools:
            body.update(self._tools(tools))
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
        messages = prompt.messages or [{"role": "user", "content": prompt.text}]
        if prompt.images:  # the last message's text, then its images as image_url parts
            *head, last = messages
            parts = [{"type": "text", "text": last.get("content") or ""}] + [
                {"type": "image_url", "image_url": {"url": im.data_url()}} for im in prompt.images]
            messages = [*head, {**last, "content": parts}]
        return {"messages": messages}

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
        text = prompt.text if prompt.text is not None else " ".join(
            str(m.get("content", "")) for m in prompt.messages or [])
        return {"prompt": text}

    def answer_text(self, data: dict) -> str:
        return "".join(c.get("text") or "" for c in (data.get("choices") or [])[:1])

    event_text = answer_text


APIS: dict[str, Api] = {a.name: a for a in (ChatApi(), CompletionsApi())}
