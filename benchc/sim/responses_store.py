"""The simulator's kept responses (the Responses API's `store`): a later request that names one
as its `previous_response_id` is the conversation that response ended, then its own input.

vLLM (with VLLM_ENABLE_RESPONSES_API_STORE=1) keeps each stored response's input messages
and output, and renders a request naming it as those messages, that output, then the new
input, through the chat template: the prompt is the whole conversation, and its prefix cache
serves the part an earlier request computed. The simulator keeps the same thing as its own
tokens: a response's conversation (its prompt without the tool definitions, which every
request sends anew) and its output, as its prefix cache keys them, so a request naming it
counts them as prompt tokens and finds them cached.

Bounded, unlike vLLM's store (which never forgets): a response is kept `ttl_s` after it ended,
and at most `capacity` of them (the oldest go first); one past either answers 404 as a
response vLLM never stored does.
"""

from __future__ import annotations

from collections import OrderedDict


class ResponseStore:
    """Responses by id: their conversation's tokens, until they expire."""

    def __init__(self, ttl_s: float, capacity: int):
        self.ttl_ns, self.capacity = int(ttl_s * 1e9), capacity
        self._kept: OrderedDict[str, tuple[int, list]] = OrderedDict()  # id -> (expiry ns, tokens)

    def put(self, response_id: str, tokens: list, now_ns: int) -> None:
        self._kept.pop(response_id, None)
        self._kept[response_id] = (now_ns + self.ttl_ns, tokens)
        self._forget(now_ns)

    def get(self, response_id: str, now_ns: int) -> list | None:
        """The conversation a response ended (its tokens), or None: never kept, or forgotten."""
        self._forget(now_ns)
        kept = self._kept.get(response_id)
        return kept[1] if kept is not None else None

    def _forget(self, now_ns: int) -> None:
        """Drop the expired (kept in expiry order: each entry's ttl is the same) and the oldest
        past the capacity."""
        kept = self._kept
        while kept and (len(kept) > self.capacity or next(iter(kept.values()))[0] <= now_ns):
            kept.popitem(last=False)

    def __len__(self) -> int:
        return len(self._kept)


__all__ = ["ResponseStore"]
