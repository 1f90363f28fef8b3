"""The prefix-groups dataset: G groups, each with a shared prefix of its own, and per request
a suffix no other request sends (SGLang's generated-shared-prefix, vLLM's prefix_repetition).

Prompt (stream, i) is random prompt (stream, i) of plan/prompts.py with its group's prefix in
place of the one shared prefix: the prefix, the marker naming the request, then its suffix
words. Requests are dealt to groups in a seeded, balanced order: each run of G consecutive
requests of a step holds every group once, in an order drawn from (seed, stream, run), so
any request's group is known alone, by any worker, and a cache sees the groups interleaved.

A group's prefix is the same on every step of the run (as random's prefix_tokens is): a
second load point finds every group's prefix cached unless the server's cache is reset.
"""

from __future__ import annotations

import random

from benchc.plan.prompts import RandomPrompts
from benchc.plan.workload import normalise_length
from benchc.units import parse_tokens

_MASK64 = (1 << 64) - 1


def prefix_group_params(cfg: dict, pool: int | None) -> dict:
    """workload.dataset.prefix_groups, normalised."""
    return {"groups": cfg["groups"], "prefix_tokens": parse_tokens(cfg["prefix_tokens"]),
            "suffix_tokens": normalise_length(cfg["suffix_tokens"]),
            "output_tokens": normalise_length(cfg["output_tokens"]),
            "min_tokens": bool(cfg.get("min_tokens", False)), "num_prompts": pool}


class PrefixGroupPrompts(RandomPrompts):
    """Random prompts whose shared prefix is their group's (group_of)."""

    def __init__(self, params: dict, mode: str, tokenizer=None):
        super().__init__({**params, "input_tokens": params["suffix_tokens"], "prefix_tokens": 0}, mode,
                         tokenizer)
        self.groups = params["groups"]
        self.prefix_n = params["prefix_tokens"]
        # each group's prefix from a generator of its own: adding groups leaves the others' alone
        self.prefixes = [self._make_prefix(random.Random(((self.seed & _MASK64) << 64) | (0x5EED << 32) | g),
                                           self.prefix_n) for g in range(self.groups)]
        self._order: tuple[tuple[int, int], list[int]] | None = None

    def group_of(self, stream: int, index: int) -> int:
        """The group of request `index` of `stream` (the pool's position in shared mode)."""
        run, at = divmod(index, self.groups)
        if self._order is None or self._order[0] != (stream, run):
            rng = random.Random(((self.seed & _MASK64) << 128) | (((stream + 1) & _MASK64) << 64) | run)
            self._order = ((stream, run), rng.sample(range(self.groups), self.groups))
        return self._order[1][at]

    def _prefix(self, stream: int, index: int) -> tuple[str, int]:
        return self.prefixes[self.group_of(stream, index)], self.prefix_n


__all__ = ["PrefixGroupPrompts", "prefix_group_params"]
