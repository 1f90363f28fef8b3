"""The simulator's prefix cache: vLLM's automatic prefix caching, reduced to what a client sees.

A prompt is cut into blocks of `block_size` tokens; only full blocks are cached, and each
block's key chains on the key of the block before it, so a block hits only when the whole
prompt up to and including it was seen before (vLLM's hash-chained KV blocks; its v1
KVCacheManager). A lookup walks the prompt's blocks from the start and stops at the first
miss. As in vLLM, a prompt is never hit in full: the last token is always computed again
(the model needs its logits), so the hit is capped at the blocks within the first n - 1
tokens. Cached blocks are evicted least recently used first once more than
`capacity_blocks` are held.

Simplification (said here so nobody reads more into it): blocks of running requests are
not pinned against eviction, and one request's blocks become cached when it is admitted
(its prefill is charged at that step), so a request admitted right after it at the same
step hits them. The full blocks its output filled become cached when it finishes (insert):
a multi-turn conversation's next turn finds its whole history, answers included.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


def block_keys(tokens: Sequence, block_size: int, after: list[int] | None = None) -> list[int]:
    """The chained keys of the prompt's full blocks, in order (a partial last block has none).
    `after`: the keys of the blocks before `tokens` (which then start at a block boundary),
    to continue their chain."""
    keys = []
    prev = after[-1] if after else 0
    for start in range(0, len(tokens) - block_size + 1, block_size):
        prev = hash((prev, tuple(tokens[start:start + block_size])))
        keys.append(prev)
    return keys


class PrefixCache:
    """An LRU set of block keys, with vLLM's counters (tokens queried, tokens hit)."""

    __slots__ = ("block_size", "capacity_blocks", "_blocks", "queries_total", "hits_total")

    def __init__(self, block_size: int, capacity_blocks: int):
        if block_size < 1 or capacity_blocks < 1:
            raise ValueError("prefix cache: block_size and capacity must be at least 1")
        self.block_size = block_size
        self.capacity_blocks = capacity_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self.queries_total = 0  # prompt tokens looked up (vllm:prefix_cache_queries)
        self.hits_total = 0  # of which found cached (vllm:prefix_cache_hits)

    def __len__(self) -> int:
        return len(self._blocks)

    def admit(self, keys: list[int], prompt_tokens: int) -> int:
        """Look the prompt up, then cache all its full blocks; returns the cached tokens."""
        blocks = self._blocks
        usable = max(0, (prompt_tokens - 1) // self.block_size)  # never the last token
        hit = 0
        for key in keys[:usable]:
            if key not in blocks:
                break
            blocks.move_to_end(key)
            hit += 1
        self.insert(keys[hit:])
        cached = hit * self.block_size
        self.queries_total += prompt_tokens
        self.hits_total += cached
        return cached

    def insert(self, keys: list[int]) -> None:
        """Cache blocks a finished request filled with its output (vLLM keeps a request's full
        blocks, generated tokens too, in its prefix cache when it frees them): the next turn
        of a conversation, whose prompt is this one plus its answer, finds them."""
        blocks = self._blocks
        for key in keys:
            if key in blocks:
                blocks.move_to_end(key)
            else:
                blocks[key] = None
        while len(blocks) > self.capacity_blocks:
            blocks.popitem(last=False)

    def reset(self) -> None:
        """Forget every block (vLLM's POST /reset_prefix_cache, SGLang's POST /flush_cache)."""
        self._blocks.clear()
