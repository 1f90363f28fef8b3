"""The tokenizer inside a GGUF file (llama.cpp's model format), of either kind:

- "gpt2" (byte-level BPE): tokens in GPT-2's byte alphabet, merges, and the pre-tokenizer
  named by tokenizer.ggml.pre. llama.cpp's converter picks that name by hashing what HF
  `tokenizers` makes of a probe text (convert_hf_to_gguf.py, get_vocab_base_pre), so a name
  stands for a tokenizer.json's pre-tokenization: PRE maps each name benchc knows to the
  patterns (and normalizer) of that tokenizer.json.
- "llama" (SentencePiece BPE): pieces, scores and types; a space put before each text
  segment (tokenizer.ggml.add_space_prefix, default true), spaces written as "▁", merges by
  score, byte fallback through the <0xXX> pieces.
Control and user-defined tokens are matched in the text and never split, as llama.cpp's
server does when it counts a prompt.
"""

from __future__ import annotations

import hashlib

from benchc.errors import UsageError
from benchc.tokenizer import _normalize, _patterns
from benchc.tokenizer._bytelevel import merge_pairs, to_bytes
from benchc.tokenizer._gguf_reader import GGUFError, read_metadata
from benchc.tokenizer._normalize import SPACE, chain
from benchc.tokenizer._sentencepiece import CONTROL, NORMAL, USER_DEFINED, build_spm
from benchc.tokenizer.encoder import Tokenizer, cores

# tokenizer.ggml.pre -> (pattern chain, NFC, ignore_merges) of the tokenizer.json it names
PRE: dict[str, tuple[tuple[str, ...], bool, bool]] = {
    "gpt-2": ((_patterns.GPT2,), False, False),
    "llama-bpe": ((_patterns.CL100K_JSON,), False, True),  # Llama 3
    "qwen2": ((_patterns.QWEN,), True, False),
    "qwen35": ((_patterns.QWEN35,), True, False),
    "deepseek-v3": (_patterns.DEEPSEEK, False, False),
    "gpt-4o": ((_patterns.O200K,), False, False),
    "tekken": ((_patterns.TEKKEN,), False, False),
    "kimi-k2": ((_patterns.KIMI,), False, False),
}


def from_gguf(path: str, core: str | None = None) -> Tokenizer:
    try:
        with open(path, "rb") as f:
            meta, raw = read_metadata(f)
    except GGUFError as e:
        raise UsageError(f"{path}: {e}") from e
    kind = meta.get("tokenizer.ggml.model")
    tokens = meta.get("tokenizer.ggml.tokens")
    if kind is None or tokens is None:
        raise UsageError(f"{path}: this GGUF file carries no tokenizer")
    types = meta.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens)
    if kind == "gpt2":
        tok = _bpe(path, meta, tokens, types, core)
    elif kind == "llama":
        tok = _spm(meta, tokens, types, core)
    else:
        raise UsageError(f"{path}: GGUF tokenizer kind {kind!r} is not supported yet (gpt2 and llama are)")
    tok.sha256 = hashlib.sha256(raw).hexdigest()  # of the metadata, which holds the tokenizer
    return tok


def _specials(tokens: list[str], types: list[int]) -> dict[str, int]:
    return {t: i for i, (t, k) in enumerate(zip(tokens, types, strict=True)) if k in (CONTROL, USER_DEFINED)}


def _bpe(path: str, meta: dict, tokens: list[str], types: list[int], core: str | None) -> Tokenizer:
    pre = meta.get("tokenizer.ggml.pre", "default")
    if pre not in PRE:
        raise UsageError(f"{path}: GGUF pre-tokenizer {pre!r} is not supported yet; known: {', '.join(PRE)}")
    patterns, nfc, ignore_merges = PRE[pre]
    bpe_cls = cores(core).BPE
    ids = {to_bytes(t): i for i, (t, k) in enumerate(zip(tokens, types, strict=True)) if k == NORMAL}
    pairs = merge_pairs(ids, meta.get("tokenizer.ggml.merges") or [])
    byte_ids = [ids.get(bytes([b]), -1) for b in range(256)]
    return Tokenizer(kind=f"GGUF gpt2 (byte-level BPE, pre-tokenizer {pre})",
                     merger=bpe_cls(byte_ids, pairs, ids if ignore_merges else None),
                     vocab={i: b for b, i in ids.items()}, special=_specials(tokens, types),
                     normalize=_normalize.nfc if nfc else None, patterns=list(patterns),
                     prefix_space=bool(meta.get("tokenizer.ggml.add_space_prefix")), core=core)


def _spm(meta: dict, tokens: list[str], types: list[int], core: str | None) -> Tokenizer:
    scores = meta.get("tokenizer.ggml.scores") or [0.0] * len(tokens)
    steps = []
    if meta.get("tokenizer.ggml.add_space_prefix", True):
        steps.append(lambda t, _: SPACE + t if t else t)  # before every segment, as llama.cpp
    steps.append(lambda t, _: t.replace(" ", SPACE))
    return build_spm(list(zip(tokens, scores, types, strict=True)), byte_fallback=True,
                     kind="GGUF llama (SentencePiece BPE)", normalize=chain(steps),
                     special_types=(CONTROL, USER_DEFINED), frozen_types=(), core=core)
