"""What a point's requests carried beside their text: bytes on the wire, images, tool
definitions, and the prompt tokens the server counted for them.

An image or a long tool list costs the server prompt tokens the client cannot count (an
image's tokens are the model's processor's rule), and costs the client bytes to send: the
point's `payload` block puts the bytes sent beside the server's own usage.prompt_tokens, for
the requests that carried images or tools. Counts only, so that shards add exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass
class PayloadCount:
    """Requests that carried images or tools: their bytes, images, and the server's prompt tokens."""

    requests: int = 0  # sent requests with images or tools
    bytes: int = 0  # their request bodies' bytes
    images: int = 0  # images they carried
    with_tools: int = 0  # of them, the requests that offered tools
    usage_requests: int = 0  # completed ones whose server reported usage.prompt_tokens ...
    prompt_tokens: int = 0  # ... and what it reported

    def add_request(self, body_bytes: int, images: int, tools: bool, ok: bool,
                    usage_prompt: int | None) -> None:
        if not images and not tools:
            return
        self.requests += 1
        self.bytes += body_bytes
        self.images += images
        self.with_tools += tools
        if ok and usage_prompt is not None:
            self.usage_requests += 1
            self.prompt_tokens += usage_prompt

    def merge(self, other: PayloadCount) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def block(self) -> dict | None:
        """The point's `payload` block; None when no request carried images or tools."""
        if not self.requests:
            return None
        out: dict = {"requests": self.requests, "bytes_sent": self.bytes,
                     "bytes_per_request": round(self.bytes / self.requests, 1),
                     "images": self.images, "requests_with_tools": self.with_tools}
        if self.usage_requests:
            out["usage"] = {"requests": self.usage_requests, "prompt_tokens": self.prompt_tokens,
                            "prompt_tokens_per_request": round(self.prompt_tokens / self.usage_requests, 3)}
        return out

    @classmethod
    def from_block(cls, b: dict | None) -> PayloadCount:
        if not b:
            return cls()
        u = b.get("usage") or {}
        return cls(b["requests"], b["bytes_sent"], b["images"], b["requests_with_tools"],
                   u.get("requests", 0), u.get("prompt_tokens", 0))


__all__ = ["PayloadCount"]
