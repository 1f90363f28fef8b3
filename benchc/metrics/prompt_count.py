"""The prompt tokens the server counted against the ones benchc sent, for the same requests:
the completed requests whose server reported usage.prompt_tokens, with benchc's count of what
each carried (its content, and the tools it offered) and what they carried beside text.

A server that renders fewer tokens than it was sent dropped something (a chat template without
a tool section ignores the tools: llama.cpp's Gemma 3 counted 282 of 856 a request); one that
counts many more, beyond its chat template's share, counts with another tokenizer than the
lengths were planned in. results/trust.py judges the point by these counts. Counts only, so
that shards add exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass
class PromptCount:
    requests: int = 0  # completed requests whose server reported usage.prompt_tokens
    sent: int = 0  # benchc's count of their prompts (content and tool definitions)
    counted: int = 0  # the server's usage.prompt_tokens of the same requests
    with_tools: int = 0  # of them, requests that offered tools ...
    with_images: int = 0  # ... and requests that carried images

    def add_request(self, sent: int, counted: int, tools: bool, images: int) -> None:
        self.requests += 1
        self.sent += sent
        self.counted += counted
        self.with_tools += tools
        self.with_images += images > 0

    def merge(self, other: PromptCount) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def block(self) -> dict | None:
        """The point's `tokens.prompt_counted` block; None when no server count came back."""
        if not self.requests:
            return None
        return {"requests": self.requests, "sent": self.sent, "server": self.counted,
                "requests_with_tools": self.with_tools, "requests_with_images": self.with_images}

    @classmethod
    def from_block(cls, b: dict | None) -> PromptCount:
        if not b:
            return cls()
        return cls(b["requests"], b["sent"], b["server"], b["requests_with_tools"], b["requests_with_images"])


__all__ = ["PromptCount"]
