"""tiktoken rank files (base64 token, rank per line) with a pattern and special tokens:
OpenAI's encodings by name, explicit ones, and Kimi's model directory (tiktoken.model +
tokenizer_config.json).

tiktoken merges the pair whose concatenation has the lowest rank, and takes a piece that is
itself a token whole; its patterns are read by the `regex` package (possessive quantifiers
as tiktoken's engine), or by the compiled scanner where _patterns.KNOWN lists the spelling.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Callable, Iterator

from benchc.errors import UsageError
from benchc.tokenizer import _normalize, _patterns
from benchc.tokenizer.encoder import Tokenizer, cores

# tiktoken's encodings by name: (pattern, special tokens), as tiktoken_ext.openai_public
# defines them (the rank file itself is given as a path: nothing is downloaded).
_EOT, _FIM, _EOP = "<|endoftext|>", ("<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>"), "<|endofprompt|>"
ENCODINGS: dict[str, tuple[str, dict[str, int]]] = {
    "r50k_base": (_patterns.R50K, {_EOT: 50256}),
    "p50k_base": (_patterns.R50K, {_EOT: 50256}),
    "cl100k_base": (_patterns.CL100K,
                    {_EOT: 100257, _FIM[0]: 100258, _FIM[1]: 100259, _FIM[2]: 100260, _EOP: 100276}),
    "o200k_base": (_patterns.O200K, {_EOT: 199999, _EOP: 200018}),
}


def read_ranks(raw: bytes) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    for line in raw.splitlines():
        if line.strip():
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    return ranks


def rank_pairs(ranks: dict[bytes, int], offset: int = 0) -> dict[tuple[int, int], tuple[int, int]]:
    """Every split of a token into two tokens is a merge at that token's rank (ids are
    ranks + offset: tekken puts its special tokens first)."""
    pairs: dict[tuple[int, int], tuple[int, int]] = {}
    for tok, r in ranks.items():
        for k in range(1, len(tok)):
            ia, ib = ranks.get(tok[:k]), ranks.get(tok[k:])
            if ia is not None and ib is not None:
                pairs[(ia + offset, ib + offset)] = (r, r + offset)
    return pairs


def build(ranks: dict[bytes, int], pattern: str, special: dict[str, int], *, kind: str, nfc: bool = False,
          offset: int = 0, core: str | None = None, **extra) -> Tokenizer:
    """A tiktoken-style tokenizer: ids = ranks + offset; a whole piece that is a token is
    taken whole (ignore_merges: some vocabularies hold tokens merges alone never make)."""
    bpe_cls = cores(core).BPE
    ids = {tok: r + offset for tok, r in ranks.items()}
    pairs = rank_pairs(ranks, offset)
    byte_ids = [ids.get(bytes([b]), -1) for b in range(256)]
    tok = Tokenizer(kind=kind, merger=bpe_cls(byte_ids, pairs, ids), vocab={i: b for b, i in ids.items()},
                    special=special, normalize=_normalize.nfc if nfc else None, patterns=[pattern], core=core,
                    **extra)
    tok.ids, tok.pairs, tok.byte_ids = ids, pairs, byte_ids
    return tok


def from_tiktoken(path: str, pattern: str | None = None, special: dict[str, int] | None = None,
                  nfc: bool = False, core: str | None = None, encoding: str | None = None) -> Tokenizer:
    """A tiktoken rank file with its pattern and special tokens, given explicitly or by the
    name of a tiktoken encoding (cl100k_base, o200k_base, p50k_base, r50k_base)."""
    if encoding is not None:
        if encoding not in ENCODINGS:
            raise UsageError(f"unknown tiktoken encoding {encoding!r}; known: {', '.join(ENCODINGS)}")
        pattern, special = ENCODINGS[encoding]
    if pattern is None:
        raise UsageError(f"{path}: a tiktoken file needs its pattern, or the encoding's name")
    with open(path, "rb") as f:
        raw = f.read()
    tok = build(read_ranks(raw), pattern, dict(special or {}), nfc=nfc, core=core,
                kind=f"tiktoken {encoding}" if encoding else "tiktoken rank file")
    tok.sha256 = hashlib.sha256(raw).hexdigest()
    return tok


# ------------------------------------------------------------------------ Kimi

KIMI_RESERVED = 256  # tokenization_kimi.py: num_reserved_special_tokens
_KIMI_MAX_CHARS, _KIMI_MAX_RUN = 400_000, 25_000


def is_kimi_dir(path: str) -> bool:
    """A directory with tiktoken.model whose tokenizer_config.json names Kimi's tokenizer."""
    config = os.path.join(path, "tokenizer_config.json")
    if not (os.path.isfile(os.path.join(path, "tiktoken.model")) and os.path.isfile(config)):
        return False
    with open(config, "rb") as f:
        return b"tokenization_kimi" in f.read()


def from_kimi(path: str, core: str | None = None) -> Tokenizer:
    """Kimi K2's model directory: tiktoken.model, its pattern (_patterns.KIMI), and the special
    tokens of tokenizer_config.json's added_tokens_decoder over the 256 ids after the ranks
    (unnamed ones are <|reserved_token_ID|>), matched in text as its encode does."""
    with open(os.path.join(path, "tiktoken.model"), "rb") as f:
        raw = f.read()
    with open(os.path.join(path, "tokenizer_config.json"), "rb") as f:
        raw_config = f.read()
    try:
        decoder = json.loads(raw_config).get("added_tokens_decoder") or {}
        named = {int(i): e["content"] for i, e in decoder.items()}
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        raise UsageError(f"{path}/tokenizer_config.json: unreadable added_tokens_decoder ({e})") from e
    ranks = read_ranks(raw)
    n = len(ranks)
    special = {named.get(i, f"<|reserved_token_{i}|>"): i for i in range(n, n + KIMI_RESERVED)}
    tok = build(ranks, _patterns.KIMI, special, kind="Kimi tiktoken.model", core=core,
                chunks=kimi_chunks(cores(core).run_cuts))
    tok.sha256 = hashlib.sha256(raw + raw_config).hexdigest()
    return tok


def kimi_chunks(run_cuts) -> Callable[[str], Iterator[str]]:
    """Kimi's encode cuts text into 400,000-character windows, and a window wherever a run of
    spaces or of non-spaces passes 25,000 characters (every 25,000 of the run); run_cuts is
    the selected core's (benchc/tokenizer/_pretok_py.py)."""

    def chunks(text: str) -> Iterator[str]:
        for w in range(0, len(text), _KIMI_MAX_CHARS):
            window = text[w:w + _KIMI_MAX_CHARS]
            start = 0
            for cut in run_cuts(window, _KIMI_MAX_RUN):
                yield window[start:cut]
                start = cut
            yield window[start:]
    return chunks
