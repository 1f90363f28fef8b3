"""What the simulator counts as a chat request's prompt: the tokens its usage reports and its
prefix cache keys on, in the order a chat template would write them.

- tool definitions (`tools`) first, as templates put them in the system part: each one's
  JSON text (json.dumps' default separators), one word one token, or the configured
  tokenizer's tokens;
- then every message in order: its `content` when a string; a list of content parts
  (text parts' `text`, image parts); an assistant message's `tool_calls` (each call's
  function name and its `arguments` text, as the server streamed it); a tool message's
  content like any other.
- an image (`image_url` part with a data URL) counts by the documented rule, Qwen2-VL's: one
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
    """(the image's bytes or URL, its size) of an image content part, or None if not one."""
    if part.get("type") == "image_url":
        iu = part.get("image_url")
        url = iu.get("url") if isinstance(iu, dict) else iu
    elif part.get("type") == "input_image":  # the Responses API's form
        url = part.get("image_url")
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
        """A message's content as pieces: text (str) and images (their token lists)."""
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
        elif content is not None:
            into.append(str(content))

    def chat(self, body: dict) -> tuple[list, int]:
        """(tokens, of which image tokens) of a chat body: its tools, then its messages."""
        pieces: list = [json.dumps(t, ensure_ascii=False) for t in body.get("tools") or []]
        for m in body.get("messages") or []:
            if not isinstance(m, dict):
                continue
            self._pieces(m.get("content", ""), pieces)
            for call in m.get("tool_calls") or []:
                fn = call.get("function") if isinstance(call, dict) else None
                if isinstance(fn, dict):
                    pieces.append(f"{fn.get('name', '')} {fn.get('arguments', '')}")
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
