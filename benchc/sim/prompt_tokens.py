"""What the simulator counts as a chat, Responses or Messages request's prompt: the tokens
its usage reports and its prefix cache keys on, in the order a chat template would write them.

- tool definitions (`tools`) first, as templates put them in the system part: each one's
  JSON text (json.dumps' default separators), one word one token, or the configured
  tokenizer's tokens;
- then the instructions or system prompt and every message (Responses: input item) in order:
  its `content` when a string; a list of content parts
  (text parts' `text`, image parts); an assistant message's `tool_calls` (each call's
  function name and its `arguments` text, as the server streamed it), Responses'
  function_call items (the same) and Messages' tool_use blocks (name, input's JSON); a tool
  result (a tool message, a function_call_output, a tool_result block) as its text.
- an image (chat's `image_url` part, Responses' `input_image`, Messages' `image` block, with
  a data URL or base64 source) counts by the documented rule, Qwen2-VL's: one
  token per `image_patch_px` x `image_patch_px` patch of the image resized to the nearest
  multiple of the patch (at least one patch a side), at most `image_max_tokens`:
      tokens = min(image_max_tokens, max(1, round(w / p)) * max(1, round(h / p)))
  Its size is read from the PNG's IHDR; an image whose size cannot be read (not a PNG, a
  remote URL) counts `image_max_tokens`. Its tokens are keyed on the image's bytes, so the
  prefix cache finds an image again only where a request sends the very same image.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any

from benchc.plan.images import png_size


def image_tokens(width: int | None, height: int | None, patch: int, cap: int) -> int:
    """The rule above, for an image of width x height pixels (None: unreadable, the cap)."""
    if width is None or height is None:
        return cap
    return min(cap, max(1, round(width / patch)) * max(1, round(height / patch)))


def _image_part(part: dict) -> tuple[bytes, tuple[int, int] | None] | None:
    """(the image's bytes or URL, its size) of an image content part in any API's form (chat's
    image_url, Responses' input_image, Messages' image with a base64 source), or None."""
    kind = part.get("type")
    if kind == "image_url":
        iu = part.get("image_url")
        url = iu.get("url") if isinstance(iu, dict) else iu
    elif kind == "input_image":
        url = part.get("image_url")
    elif kind == "image":
        src = part.get("source")
        if isinstance(src, dict) and src.get("type") == "base64":
            url = f"data:{src.get('media_type')};base64,{src.get('data', '')}"
        else:
            url = str(src.get("url", "")) if isinstance(src, dict) else ""
    else:
        return None
    url = url if isinstance(url, str) else ""
    if url.startswith("data:") and "," in url:
        try:
            data = base64.b64decode(url.split(",", 1)[1], validate=False)
        except (binascii.Error, ValueError):
            return url.encode(), None
        return data, png_size(data)
    return url.encode(), None


class PromptCounter:
    """A chat body's prompt as the simulator's tokens (words, or a tokenizer's ids; images as
    `image_tokens` placeholders keyed on their bytes), and the images' share of them. Text
    between two images is joined with spaces and tokenized in one piece, as the simulator
    always tokenized a chat's contents."""

    def __init__(self, tokenizer: Any, patch: int, cap: int):
        self.tok, self.patch, self.cap = tokenizer, patch, cap

    def _image(self, key: bytes, size: tuple[int, int] | None) -> list:
        w, h = size if size is not None else (None, None)
        n = image_tokens(w, h, self.patch, self.cap)
        digest = hashlib.sha256(key).hexdigest()[:16]
        if self.tok:  # ids no tokenizer has (negative), one per patch, distinct per image
            base = -(int(digest, 16) % (1 << 40)) * 65536
            return [base - i for i in range(n)]
        return [f"<img:{digest}:{i}>" for i in range(n)]

    def _pieces(self, content: Any, into: list) -> None:
        """A message's content as pieces: text (str) and images (their token lists); the
        blocks of Anthropic's tool calls and results as their text."""
        if isinstance(content, str):
            into.append(content)
        elif isinstance(content, list):
            for part in content:
                if not isinstance(part, dict):
                    continue
                img = _image_part(part)
                if img is not None:
                    into.append(self._image(*img))
                elif isinstance(part.get("text"), str):
                    into.append(part["text"])
                elif part.get("type") == "tool_use":
                    into.append(f"{part.get('name', '')} {json.dumps(part.get('input'), ensure_ascii=False)}")
                elif part.get("type") == "tool_result":
                    self._pieces(part.get("content"), into)
        elif content is not None:
            into.append(str(content))

    def prompt(self, api: str, body: dict) -> tuple[list, int]:
        """(tokens, of which image tokens) of a chat, Responses or Messages body (checked
        before: its adapter's check_prompt, sim/adapter.py): its tools, then its instructions or
        system prompt, then its messages (Responses' input items) in order."""
        pieces: list = [json.dumps(t, ensure_ascii=False) for t in body.get("tools") or []]
        if api == "responses":
            if body.get("instructions"):
                pieces.append(str(body["instructions"]))
            items = body.get("input")
            for item in [{"content": items}] if isinstance(items, str) else items or []:
                if not isinstance(item, dict):
                    continue
                if item.get("type") == "function_call":
                    pieces.append(f"{item.get('name', '')} {item.get('arguments', '')}")
                elif item.get("type") == "function_call_output":
                    pieces.append(str(item.get("output", "")))
                else:
                    self._pieces(item.get("content"), pieces)
            return self._tokens(pieces)
        if api == "messages" and body.get("system"):
            self._pieces(body["system"], pieces)
        for m in body.get("messages") or []:
            if not isinstance(m, dict):
                continue
            self._pieces(m.get("content", ""), pieces)
            for call in m.get("tool_calls") or []:
                fn = call.get("function") if isinstance(call, dict) else None
                if isinstance(fn, dict):
                    pieces.append(f"{fn.get('name', '')} {fn.get('arguments', '')}")
        return self._tokens(pieces)

    def parts(self, api: str, body: dict) -> tuple[list, list, int]:
        """(the tool definitions' tokens, the conversation's, of which image tokens): `prompt`'s
        count in two parts, each tokenized alone. The Responses API's stored conversation is
        the second (sim/responses_store.py): a later request sends its tools anew."""
        tools, _ = self._tokens([json.dumps(t, ensure_ascii=False) for t in body.get("tools") or []])
        conversation, images = self.prompt(api, {k: v for k, v in body.items() if k != "tools"})
        return tools, conversation, images

    def chat(self, body: dict) -> tuple[list, int]:
        """(tokens, of which image tokens) of a chat body."""
        return self.prompt("chat", body)

    def _tokens(self, pieces: list) -> tuple[list, int]:
        """Pieces as tokens: each run of text joined with spaces and tokenized in one piece."""
        out: list = []
        images = 0
        text: list[str] = []
        for piece in pieces + [None]:
            if isinstance(piece, str):
                text.append(piece)
                continue
            if text:
                joined = " ".join(text)
                out += self.tok.encode(joined) if self.tok else joined.split()
                text = []
            if piece is not None:
                out += piece
                images += len(piece)
        return out, images


__all__ = ["PromptCounter", "image_tokens"]
