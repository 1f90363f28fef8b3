"""A model's chat template: the exact text, and so the exact tokens, a server makes of chat
messages.

A chat server (vLLM, SGLang, TGI) renders a request's messages with the model's Jinja template
(`chat_template` in tokenizer_config.json, or chat_template.jinja beside it) and tokenizes the
result without adding special tokens: the template writes the BOS and role markers itself.
benchc does the same, the way Hugging Face's `apply_chat_template` does it: a sandboxed Jinja
environment with trim_blocks and lstrip_blocks, the loopcontrols extension, a `tojson` filter
that does not escape HTML, `raise_exception` and `strftime_now`, and the tokenizer's special
tokens (bos_token, eos_token, ...) as variables beside `messages`, `tools` (the request's
tool definitions, or None) and `add_generation_prompt` (true: the prompt ends where the
answer starts). A render is bounded in time and output (tokenizer/_template_bounds.py).

jinja2 is an optional extra (`pip install 'benchc[template]'`); without it a template is
found but not used, and the plan says so.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import datetime
from typing import Any

from benchc.errors import UsageError
from benchc.inputs import TEMPLATE_BYTES, input_problem
from benchc.tokenizer._template_bounds import RenderBound, bounded_environment, render_bounded

_SPECIAL = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
JINJA_MISSING = "jinja2 is not installed: pip install 'benchc[template]'"


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json gives it: a string, or an AddedToken object."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def find(tokenizer_path: str) -> tuple[str, str, dict] | None:
    """(template text, the file it came from, tokenizer_config.json's contents) of the model
    directory that holds the tokenizer (the path itself, or the folder of a tokenizer file),
    or None when it has no chat template."""
    folder = tokenizer_path if os.path.isdir(tokenizer_path) else os.path.dirname(tokenizer_path)
    config: dict = {}
    cfg_path = os.path.join(folder, "tokenizer_config.json")
    if os.path.isfile(cfg_path):
        if why := input_problem(cfg_path, TEMPLATE_BYTES, "tokenizer config"):
            raise UsageError(why)
        try:
            with open(cfg_path, encoding="utf-8") as f:
                config = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise UsageError(f"{cfg_path}: not readable JSON ({e})") from e
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: the default one
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    if isinstance(template, str) and template:
        return template, cfg_path, config
    jinja = os.path.join(folder, "chat_template.jinja")  # where transformers >= 4.43 saves it
    if os.path.isfile(jinja):
        if why := input_problem(jinja, TEMPLATE_BYTES, "chat template"):
            raise UsageError(why)
        with open(jinja, encoding="utf-8") as f:
            return f.read(), jinja, config
    return None


class ChatTemplate:
    """A chat template bound to its tokenizer: render(messages) and count(messages)."""

    def __init__(self, template: str, source: str, config: dict, tokenizer: Any = None):
        self.text, self.source = template, source
        self.sha256 = hashlib.sha256(template.encode()).hexdigest()
        self.tokenizer = tokenizer
        self.variables: dict[str, Any] = {}
        for k in _SPECIAL:
            v = _token_text(config.get(k))
            if v is not None:
                self.variables[k] = v
        extra = [t for t in (_token_text(x) for x in config.get("additional_special_tokens") or []) if t]
        self.variables["additional_special_tokens"] = extra
        self._compiled: Any = None

    def _template(self) -> Any:
        if self._compiled is None:
            try:
                import jinja2
                import jinja2.ext
            except ImportError as e:
                raise UsageError(f"target.tokenizer's chat template ({self.source}): {JINJA_MISSING}") from e

            def raise_exception(message: str) -> None:
                raise jinja2.exceptions.TemplateError(message)

            def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
                       sort_keys: bool = False) -> str:
                return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                                  sort_keys=sort_keys)

            env = bounded_environment()(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
            env.filters["tojson"] = tojson
            env.globals["raise_exception"] = raise_exception
            env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
            try:
                self._compiled = env.from_string(self.text)
            except jinja2.exceptions.TemplateError as e:
                raise UsageError(f"{self.source}: its chat template does not compile: {e}") from e
        return self._compiled

    def render(self, messages: list[dict], add_generation_prompt: bool = True,
               tools: list | None = None) -> str:
        """The text a server makes of `messages` (ready for the answer, by default), with the
        request's tool definitions where it offers tools (chat form, as the request carries
        them: HF's apply_chat_template passes them on as they are)."""
        try:
            return render_bounded(self._template(), lambda: len(json.dumps([messages, tools], default=str)),
                                  {"messages": messages, "tools": tools or None, "documents": None,
                                   "add_generation_prompt": add_generation_prompt, **self.variables})
        except UsageError:
            raise
        except RenderBound as e:
            raise UsageError(f"{self.source}: its chat template's rendering passed its bound: {e}") from None
        except Exception as e:  # noqa: BLE001 - a template's own error (raise_exception, a bad field)
            raise UsageError(f"{self.source}: its chat template fails on these messages: {e}") from e

    def count(self, messages: list[dict], tools: list | None = None) -> int:
        """The tokens a server sees for `messages` (and `tools`): the rendered text, no special
        tokens added."""
        return self.tokenizer.count(self.render(messages, tools=tools))

    @staticmethod
    def available() -> bool:
        """jinja2 can be imported (the template can be used)."""
        try:
            import jinja2  # noqa: F401
        except ImportError:
            return False
        return True


def load_chat_template(tokenizer_path: str, tokenizer: Any) -> ChatTemplate | None:
    """The chat template of the model directory holding the tokenizer, or None."""
    found = find(tokenizer_path)
    if found is None:
        return None
    return ChatTemplate(*found, tokenizer=tokenizer)


__all__ = ["ChatTemplate", "load_chat_template", "find", "JINJA_MISSING"]
