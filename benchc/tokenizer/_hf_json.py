"""HuggingFace tokenizer.json with a BPE model, as `tokenizers` runs it.

Two kinds, told apart by the pre-tokenizer:
- byte-level BPE (a ByteLevel pre-tokenizer: GPT-2, Llama 3, Qwen, DeepSeek): the vocabulary
  is in GPT-2's byte alphabet; Split (every behaviour, invert) / ByteLevel / Sequence
  pre-tokenizers; merges as "a b" or [a, b]; ignore_merges.
- char-level BPE (no ByteLevel: the SentencePiece conversions, Llama 2, Mistral 7B, Gemma):
  pieces spelled with "▁"; Prepend / Replace normalizers, Metaspace (prepend_scheme, split)
  and Split pre-tokenizers; byte_fallback, unk_token, fuse_unk.
Both: NFC/NFD/NFKC/NFKD/Lowercase/Sequence normalizers; added tokens matched first and
never split (in the raw text, or after normalization where marked `normalized`).
"""

from __future__ import annotations

import hashlib
import json

import regex

from benchc.errors import UsageError
from benchc.tokenizer import _normalize, _spm_vocab
from benchc.tokenizer._bytelevel import merge_pairs, to_bytes
from benchc.tokenizer._patterns import GPT2
from benchc.tokenizer._pretok_py import BEHAVIOURS
from benchc.tokenizer._spm_py import CUT_METASPACE, SPACE
from benchc.tokenizer.encoder import Tokenizer, cores

# HF's regex engine (Oniguruma, Ruby syntax) reads X{n,m}+ as (?:X{n,m})+, not as the
# possessive `regex` (and tiktoken) read it; for one-character X with n = 1 that is X+.
_ONIG_REPEATED_INTERVAL = regex.compile(r"(\\p\{\w+\}|\\[dwsDWS]|\[[^\]]*\]|[^\\()\[\]])\{1,\d+\}\+")


def _as_onig_reads(pattern: str) -> str:
    return _ONIG_REPEATED_INTERVAL.sub(r"\1+", pattern)


def from_tokenizer_json(path: str, core: str | None = None) -> Tokenizer:
    with open(path, "rb") as f:
        raw = f.read()
    d = json.loads(raw)
    model = d.get("model") or {}
    if model.get("type") != "BPE":
        raise UsageError(f"{path}: only BPE tokenizer.json models are supported (this is "
                         f"{model.get('type')!r})")
    for key in ("continuing_subword_prefix", "end_of_word_suffix", "dropout"):
        if model.get(key):
            raise UsageError(f"{path}: BPE {key} is not supported yet")
    pre = _flatten(d.get("pre_tokenizer"))
    byte_level = any(p.get("type") == "ByteLevel" for p in pre)
    added = d.get("added_tokens", [])
    special = {t["content"]: t["id"] for t in added if t.get("special") or not t.get("normalized", False)}
    frozen = {t["content"]: t["id"] for t in added if t["content"] not in special}
    steps = _normalize.hf_steps(d.get("normalizer"), path)
    tok = (_byte_level(path, model, pre, special, frozen, steps, core) if byte_level
           else _char_level(path, model, pre, special, frozen, steps, core))
    tok.sha256 = hashlib.sha256(raw).hexdigest()
    return tok


def _flatten(pt: dict | None) -> list[dict]:
    if not pt:
        return []
    if pt.get("type") == "Sequence":
        return [x for p in pt.get("pretokenizers", []) for x in _flatten(p)]
    return [pt]


def _split(path: str, pt: dict):
    """A Split pre-tokenizer as a scanner pattern (plain string: an Isolated split)."""
    behaviour, invert = pt.get("behavior", "Isolated"), bool(pt.get("invert"))
    if behaviour not in BEHAVIOURS:
        raise UsageError(f"{path}: Split behaviour {behaviour!r} is not one of {', '.join(BEHAVIOURS)}")
    pat = pt["pattern"]
    pattern = _as_onig_reads(pat["Regex"]) if "Regex" in pat else regex.escape(pat["String"])
    # plain strings are Isolated splits: the chains the compiled scanner knows
    return pattern if behaviour == "Isolated" and not invert else (pattern, behaviour, invert)


def _byte_level(path, model, pre, special, frozen, steps, core) -> Tokenizer:
    bpe_cls = cores(core).BPE
    splits, prefix_space = [], False
    for pt in pre:
        kind = pt.get("type")
        if kind == "Split":
            splits.append(_split(path, pt))
        elif kind == "ByteLevel":
            if pt.get("add_prefix_space") and splits:
                # HF prefixes each piece the Splits before it made; benchc prefixes each segment
                raise UsageError(f"{path}: a ByteLevel with add_prefix_space after a Split is not "
                                 "supported yet")
            prefix_space = prefix_space or bool(pt.get("add_prefix_space"))
            if pt.get("use_regex", True):
                splits.append(GPT2)
        else:
            raise UsageError(f"{path}: pre-tokenizer {kind!r} is not supported yet")
    ids = {to_bytes(tok): i for tok, i in model["vocab"].items()}
    pairs = merge_pairs(ids, model["merges"])
    byte_ids = [ids.get(bytes([b]), -1) for b in range(256)]
    merger = bpe_cls(byte_ids, pairs, ids if model.get("ignore_merges") else None)
    tok = Tokenizer(kind="tokenizer.json, byte-level BPE", merger=merger,
                    vocab={i: b for b, i in ids.items()}, special=special, frozen=frozen,
                    normalize=_normalize.chain(steps), patterns=splits, prefix_space=prefix_space, core=core)
    tok.ids, tok.pairs, tok.byte_ids = ids, pairs, byte_ids
    return tok


def _char_level(path, model, pre, special, frozen, steps, core) -> Tokenizer:
    spm_cls = cores(core).SPM
    if model.get("ignore_merges"):
        raise UsageError(f"{path}: ignore_merges on a char-level BPE is not supported yet")
    splits, metaspace_split = [], False
    for k, pt in enumerate(pre):
        kind = pt.get("type")
        if kind == "Metaspace" and k == 0:
            steps = [*steps, _normalize.metaspace(pt)]
            metaspace_split = pt.get("split", True)
            if metaspace_split:
                if pt.get("replacement", SPACE) != SPACE:
                    raise UsageError(f"{path}: a Metaspace replacement other than '▁' is not supported yet")
        elif kind == "Split":
            splits.append(_split(path, pt))
        else:
            raise UsageError(f"{path}: pre-tokenizer {kind!r} is not supported yet"
                             + (" after another" if kind == "Metaspace" else ""))
    vocab: dict[str, int] = model["vocab"]
    unk = model.get("unk_token")
    if unk is not None and unk not in vocab:
        raise UsageError(f"{path}: unk_token {unk!r} is not in the vocabulary")
    byte_fallback = bool(model.get("byte_fallback"))
    merger = spm_cls(_spm_vocab.char_ids(vocab), _spm_vocab.pairs_by_rank(vocab, model["merges"]),
                     _spm_vocab.byte_ids(vocab) if byte_fallback else None,
                     vocab[unk] if unk is not None else None, bool(model.get("fuse_unk")))
    if metaspace_split:
        # Metaspace's own split is a Split on "▁", merged with the piece after it
        if splits:
            splits.insert(0, (regex.escape(SPACE), "MergedWithNext", False))
        cut = CUT_METASPACE
    else:
        cut = _spm_vocab.safe_cut(vocab)
    return Tokenizer(kind="tokenizer.json, SentencePiece-style BPE", merger=merger,
                     vocab=_spm_vocab.piece_bytes(vocab, byte_fallback), special=special, frozen=frozen,
                     normalize=_normalize.chain(steps), patterns=splits or None, cut=cut, core=core)
