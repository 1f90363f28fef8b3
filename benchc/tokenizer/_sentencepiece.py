"""SentencePiece .model files (BPE models), read with benchc's own protobuf reader
(_protobuf.py) and encoded as sentencepiece encodes them:

- normalization with the identity character map (Llama 2, Mistral, Gemma ship it):
  remove_extra_whitespaces, add_dummy_prefix, escape_whitespaces; a precompiled character
  map (nmt_nfkc...) is refused, not approximated;
- user-defined symbols matched first in the normalized text, never split;
- BPE merges by piece score (_spm_vocab.pairs_by_score); a piece missing from the
  vocabulary becomes its <0xXX> bytes with byte_fallback, else the unknown id (runs fused);
- control symbols (<s>, </s>) are never produced from text, as sentencepiece's Encode.
"""

from __future__ import annotations

import hashlib

from benchc.errors import UsageError
from benchc.tokenizer import _normalize, _spm_vocab
from benchc.tokenizer._protobuf import BYTES, FIXED32, VARINT, ProtobufError, as_float, fields
from benchc.tokenizer.encoder import Tokenizer, cores

# sentencepiece_model.proto: ModelProto.pieces = 1, trainer_spec = 2, normalizer_spec = 3;
# SentencePiece.piece = 1, score = 2, type = 3; TrainerSpec.model_type = 3,
# treat_whitespace_as_suffix = 24, byte_fallback = 35; NormalizerSpec.name = 1,
# precompiled_charsmap = 2, add_dummy_prefix = 3, remove_extra_whitespaces = 4,
# escape_whitespaces = 5 (the last three default to true)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
_MODEL_TYPES = {1: "Unigram", 2: "BPE", 3: "word", 4: "char"}


def _message(v: int | bytes) -> bytes:
    """A length-delimited field's value (the caller checked its wire type)."""
    if not isinstance(v, bytes):
        raise ProtobufError("a number where a string or message belongs")
    return v


def _number(v: int | bytes) -> int:
    """A varint or fixed field's value (the caller checked its wire type)."""
    if not isinstance(v, int):
        raise ProtobufError("a string where a number belongs")
    return v


def read_model(raw: bytes) -> dict:
    """The parts of a ModelProto benchc uses, as plain values."""
    pieces: list[tuple[str, float, int]] = []
    trainer: dict[int, int] = {}
    norm: dict[int, int | bytes] = {}
    for number, wire, value in fields(raw):
        if number == 1 and wire == BYTES:
            piece, score, kind = "", 0.0, NORMAL
            for n, w, v in fields(_message(value)):
                if n == 1 and w == BYTES:
                    piece = _message(v).decode("utf-8")
                elif n == 2 and w == FIXED32:
                    score = as_float(_number(v))
                elif n == 3 and w == VARINT:
                    kind = _number(v)
            pieces.append((piece, score, kind))
        elif number == 2 and wire == BYTES:
            trainer = {n: _number(v) for n, w, v in fields(_message(value)) if w == VARINT}
        elif number == 3 and wire == BYTES:
            norm = {n: v for n, w, v in fields(_message(value))}
    normalizer = norm.get(1, b"")
    return {
        "pieces": pieces,
        "model_type": trainer.get(3, 1),
        "byte_fallback": bool(trainer.get(35, 0)),
        "whitespace_as_suffix": bool(trainer.get(24, 0)),
        "normalizer": normalizer.decode() if isinstance(normalizer, bytes) else "",
        "charsmap": norm.get(2, b""),
        "add_dummy_prefix": bool(norm.get(3, 1)),
        "remove_extra_whitespaces": bool(norm.get(4, 1)),
        "escape_whitespaces": bool(norm.get(5, 1)),
    }


def from_sentencepiece(path: str, core: str | None = None) -> Tokenizer:
    with open(path, "rb") as f:
        raw = f.read()
    try:
        m = read_model(raw)
    except (ProtobufError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: not a SentencePiece model ({e})") from e
    if not m["pieces"]:
        raise UsageError(f"{path}: not a SentencePiece model (no pieces)")
    if m["model_type"] != 2:
        raise UsageError(f"{path}: SentencePiece {_MODEL_TYPES.get(m['model_type'], m['model_type'])} models "
                         "are not supported yet (BPE only)")
    if m["charsmap"]:
        raise UsageError(f"{path}: normalizer {m['normalizer']!r} (a precompiled character map) is not "
                         "supported yet")
    if m["whitespace_as_suffix"]:
        raise UsageError(f"{path}: treat_whitespace_as_suffix is not supported yet")
    if any(kind == UNUSED for _, _, kind in m["pieces"]):
        raise UsageError(f"{path}: unused pieces (re-segmented by sentencepiece) are not supported yet")
    tok = build_spm(m["pieces"], byte_fallback=m["byte_fallback"], kind="SentencePiece .model, BPE",
                    normalize=_normalize.sentencepiece(m["add_dummy_prefix"], m["remove_extra_whitespaces"],
                                                       m["escape_whitespaces"]),
                    special_types=(), frozen_types=(USER_DEFINED,), core=core)
    tok.sha256 = hashlib.sha256(raw).hexdigest()
    return tok


def build_spm(pieces: list[tuple[str, float, int]], *, byte_fallback: bool, kind: str, normalize,
              special_types: tuple[int, ...], frozen_types: tuple[int, ...], core: str | None) -> Tokenizer:
    """A SentencePiece BPE tokenizer from (piece, score, type) by id; special_types are
    matched in the raw text, frozen_types after normalization (both never split)."""
    spm_cls = cores(core).SPM
    vocab = {p: i for i, (p, _, _) in enumerate(pieces)}
    mergeable = {p: i for i, (p, _, t) in enumerate(pieces) if t in (NORMAL, USER_DEFINED)}
    scores = {i: s for i, (_, s, _) in enumerate(pieces)}
    unk = next((i for i, (_, _, t) in enumerate(pieces) if t == UNKNOWN), None)
    byte_ids = None
    if byte_fallback:
        byte_ids = _spm_vocab.byte_ids({p: i for i, (p, _, t) in enumerate(pieces) if t == BYTE})
    merger = spm_cls(_spm_vocab.char_ids(mergeable), _spm_vocab.pairs_by_score(mergeable, scores),
                     byte_ids, unk, True)  # sentencepiece fuses runs of unknowns
    return Tokenizer(kind=kind, merger=merger, vocab=_spm_vocab.piece_bytes(vocab, byte_fallback),
                     special={p: i for i, (p, _, t) in enumerate(pieces) if t in special_types},
                     frozen={p: i for i, (p, _, t) in enumerate(pieces) if t in frozen_types},
                     normalize=normalize, cut=_spm_vocab.safe_cut(mergeable), core=core)
