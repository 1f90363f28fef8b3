"""Which prompt each request of a run sends: the prompt source.

Every request is named by (prompt stream, index): each warmup and load step of a plan has a
stream of its own (Step.prompt_stream), and its i-th request sends prompt (stream, i).

`workload.prompts: fresh` (the default): no request of a run sends what another sent,
except what the spec asks to share. Prefix caches (vLLM's automatic prefix caching, SGLang's
radix cache, llama.cpp's slot cache, all on by default) would otherwise serve every sweep
point after the first from cache, and TTFT would measure cache hits.
- random datasets: prompt (stream, i) is a pure function of the seed, the stream and i: the
  shared prefix (prefix_tokens), then a marker naming (stream, i), then words drawn from a
  generator seeded with all three. Nothing is held: any prompt is built on demand, so a
  plan of 10^6 requests costs no memory for them.
- file datasets (jsonl, sharegpt): the file's items are dealt in order across the whole run
  (warmup, every point, every combination); a file with fewer items than the run sends goes
  round again, and each request that gets an item sent before is counted (`reused`): benchc
  cannot invent uniqueness for a user's prompts and does not add anything to them.

`workload.prompts: shared`: every step sends the same prompt set, from its start (the pool
of `num_prompts`), as benchc 0.1 did: cache-warm numbers, on purpose.

Where a step's requests fall in a pool is a `Deal`, given by the runner, which counts what
the run has dealt so far (a duration-bound step's count is known only once it ran).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from benchc.errors import PlanError
from benchc.plan.workload import VOCABULARY, Prompt, draw_length

# How many prompts of each step the plan hashes: every prompt is built by the same pure
# function of (seed, stream, index), so the first few prove that the same ones are rebuilt.
SAMPLE = 8
# The stream of the shared pool (prompts: shared); steps' streams are 0, 1, 2, ...
POOL_STREAM = -1
_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class Deal:
    """Where a step's requests fall in a pool of N prompts: request i sends item
    (start + i) mod N, and reuses a prompt when start + i >= N (the pool went round) or
    start + i < seen (an earlier step sent that item)."""

    start: int = 0
    seen: int = 0


NO_DEAL = Deal()  # a step's first deal: nothing dealt before it


def pooled(pool_size: int, index: int, deal: Deal) -> tuple[int, int, bool]:
    """prompts: shared: (POOL_STREAM, the pool's item, whether it was sent before) of a step's
    request `index`: every step deals the one pool from its start."""
    pos = deal.start + index
    return POOL_STREAM, pos % pool_size, pos >= pool_size or pos < deal.seen


class PromptSource(Protocol):
    """Prompt i of a prompt stream; `mode` is fresh or shared; `pool_size` is the number of
    distinct prompts dealt in turn (None: endless, every prompt new)."""

    # read-only here (a property), so that a source whose pool always has a size fits too
    @property
    def mode(self) -> str: ...

    @property
    def pool_size(self) -> int | None: ...

    def prompt(self, stream: int, index: int, deal: Deal = NO_DEAL) -> Prompt: ...


def prompts_digest(prompts: list) -> str:
    """sha256 of prompts' (or sessions') content, in order (text, messages and token counts)."""
    h = hashlib.sha256()
    for p in prompts:
        h.update(json.dumps(p.to_json(), sort_keys=True, ensure_ascii=False).encode())
        h.update(b"\n")
    return h.hexdigest()


def step_digest(source: PromptSource, stream: int, requests: int | None) -> str | None:
    """sha256 of a step's first SAMPLE prompts, when they do not depend on the run (a
    file's items in fresh mode depend on how many earlier steps took: None; a trace's rows
    do not, every step replays them from the first)."""
    if source.pool_size is not None and source.mode == "fresh" and not getattr(source, "replays", False):
        return None
    n = min(SAMPLE, requests) if requests else SAMPLE
    return prompts_digest([_item(source)(stream, i) for i in range(n)])


def _item(source: PromptSource):
    """How a source builds item i of a stream: a prompt, or a session's script (plan/sessions.py,
    whose sources deal sessions; a session step's count is its sessions')."""
    return source.session if getattr(source, "sessions", False) else source.prompt  # type: ignore[attr-defined]


def step_count(step, source: PromptSource) -> int | None:
    """How many items a step takes from its stream, where the plan says: requests, or sessions."""
    return step.sessions if getattr(source, "sessions", False) else step.requests


def source_digest(source: PromptSource) -> str:
    """sha256 of what the source deals from: its own digest where it has one (a trace: its
    file's sha256 and the slice), a pool's every prompt in order, or the first SAMPLE
    prompts of the pool stream of an endless source (its generator's fingerprint)."""
    digest = getattr(source, "digest", None)
    if digest is not None:
        return digest()
    if isinstance(source, FilePrompts):
        return prompts_digest(source.items)
    return prompts_digest([_item(source)(POOL_STREAM, i) for i in range(SAMPLE)])


# --------------------------------------------------------------------------- random


class RandomPrompts:
    """Random prompts: `prefix_tokens` shared by all, then a marker naming the request, then
    words. Without a tokenizer a token is a word; with one, every prompt has exactly the
    asked number of tokens by it (the prompt text alone: a chat template's tokens come on
    top, as the server's usage.prompt_tokens shows)."""

    def __init__(self, params: dict, mode: str, tokenizer=None):
        self.mode = mode
        self.params = params
        self.seed = params["seed"]
        self.prefix_n = params["prefix_tokens"]
        self.tok = tokenizer
        self.pool_size = params["num_prompts"] if mode == "shared" else None
        self.words = one_token_words(tokenizer)
        # The shared prefix comes from its own generator, so that changing prefix_tokens
        # leaves the rest of every prompt unchanged.
        self.prefix = self._make_prefix(random.Random(self.seed ^ 0x5EED), self.prefix_n)

    def _make_prefix(self, rng: random.Random, n: int) -> str:
        """n tokens of words from `rng` (n words without a tokenizer)."""
        if self.tok is None:
            return " ".join(rng.choice(VOCABULARY) for _ in range(n))
        return self._extend("", n, rng) if n else ""

    def _first_words(self) -> list[str]:
        """The words that are one token at the very start of a text, too."""
        first = [w for w in self.words if self.tok.count(w) == 1]
        if not first:
            raise PlanError("the tokenizer makes none of benchc's one-token words one token at the start "
                            "of a text; use a jsonl dataset")
        return first

    def _prefix(self, stream: int, index: int) -> tuple[str, int]:
        """The shared prefix prompt (stream, index) starts with, and its tokens."""
        return self.prefix, self.prefix_n

    def prompt(self, stream: int, index: int, deal: Deal = NO_DEAL) -> Prompt:
        reused = False
        if self.pool_size is not None:  # shared: every step deals the one pool from its start
            stream, index, reused = pooled(self.pool_size, index, deal)
        # One generator per prompt, seeded by (seed, stream, index): any prompt can be built
        # alone, in any order, by any worker.
        rng = random.Random(((self.seed & _MASK64) << 96) | ((stream + 1) << 48) | index)
        n_in = draw_length(rng, self.params["input_tokens"])
        n_out = draw_length(rng, self.params["output_tokens"])
        # The marker first after the prefix: no two prompts share more than the prefix
        # (and what a server's tokenizer makes of the marker's first characters).
        head = f"{stream}.{index}" if stream != POOL_STREAM else f"{index}"
        prefix, prefix_n = self._prefix(stream, index)
        if prefix:
            head = f"{prefix} {head}"
        total = prefix_n + n_in
        text = self.text(head, total, rng, n_in, f"prompt {stream}.{index}")
        return Prompt(text, None, total, n_out, shared_tokens=prefix_n, reused=reused)

    def text(self, head: str, total: int, rng: random.Random, words: int, what: str) -> str:
        """`head` (a marker, after any prefix) grown to `total` tokens with words drawn from
        `rng`: without a tokenizer `words` words in all (the marker counts as one), with one
        exactly `total` tokens by it."""
        if self.tok is None:
            return head + " " + " ".join(rng.choices(self.words, k=words - 1)) if words > 1 else head
        if self.tok.count(head) > total:
            raise PlanError(f"{words} input tokens is too short for {what}'s marker and prefix")
        return self._extend(head, total, rng)

    def _extend(self, text: str, target: int, rng: random.Random) -> str:
        """`text` grown by one-token words to exactly `target` tokens (checked by counting)."""
        n = self.tok.count(text) if text else 0
        if n < target:
            add = rng.choices(self.words, k=target - n)
            if not text and self.tok.count(add[0]) != 1:
                # the first word has no space before it: one token after a space may be two
                # at the start ("university" is "un" "iversity" to DeepSeek-V3's tokenizer)
                add[0] = rng.choice(self._first_words())
            text = f"{text} {' '.join(add)}" if text else " ".join(add)
        if self.tok.count(text) != target:
            raise PlanError(f"could not build a prompt of exactly {target} tokens with this tokenizer")
        return text


# --------------------------------------------------------------------------- files


class FilePrompts:
    """A user's prompts (jsonl, sharegpt), dealt in order; a prompt sent before is `reused`
    (its whole length may be cached: sharing is what the file holds, not what benchc knows)."""

    def __init__(self, items: list[Prompt], mode: str):
        self.items = items
        self.mode = mode
        self.pool_size = len(items)

    def prompt(self, stream: int, index: int, deal: Deal = NO_DEAL) -> Prompt:
        pos = deal.start + index
        item = self.items[pos % self.pool_size]
        reused = pos >= self.pool_size or pos < deal.seen
        return replace(item, reused=True) if reused else item


def one_token_words(tokenizer=None) -> list[str]:
    """The vocabulary words a prompt is built of: all of them without a tokenizer (a word is a
    token), else those that add exactly one token after text, so that n of them, each after a
    space, are exactly n tokens (" the" alone is two tokens to a SentencePiece tokenizer: its
    own prefix space, then the word; after a word it is one)."""
    if tokenizer is None:
        return list(VOCABULARY)
    base = tokenizer.count("x")
    words = [w for w in VOCABULARY if tokenizer.count("x " + w) - base == 1]
    if not words:
        raise PlanError("the tokenizer has none of benchc's one-token words; use a jsonl dataset")
    return words


class WordBlocks:
    """Blocks of words a trace's hash ids stand for, each a pure function of (seed, its key),
    the last `keep` built kept: a trace sends its earlier blocks again and again (a system
    prompt, a session's growing context), and drawing them once is what keeps that cheap."""

    def __init__(self, words: Sequence[str], seed: int, keep: int):
        self.words, self.seed, self.keep = words, seed, keep
        self._built: OrderedDict[tuple[int, ...], tuple[str, ...]] = OrderedDict()

    def get(self, key: tuple[int, ...], size: int) -> tuple[str, ...]:
        """The `size` words of block `key`, drawn from the seed the 64-bit parts (seed, 1, *key)
        make."""
        words = self._built.get(key)
        if words is None:
            v = 0
            for p in (self.seed, 1, *key):
                v = (v << 64) | (p & _MASK64)
            words = tuple(random.Random(v).choices(self.words, k=size))
            self._built[key] = words
            if len(self._built) > self.keep:
                self._built.popitem(last=False)
        else:
            self._built.move_to_end(key)
        return words


__all__ = ["Deal", "NO_DEAL", "pooled", "PromptSource", "RandomPrompts", "FilePrompts", "step_digest",
           "step_count", "source_digest", "prompts_digest", "one_token_words", "WordBlocks", "SAMPLE",
           "POOL_STREAM"]
