"""What a SentencePiece-style merger needs from a vocabulary of pieces (strings with "▁"
for spaces), whichever file it came from: tokenizer.json's char-level BPE, a .model, a
GGUF of the llama kind."""

from __future__ import annotations

from benchc.tokenizer._spm_py import CUT_NONE, CUT_WORDS, SPACE

_BYTE_TOKEN = "<0x{:02X}>"


def char_ids(pieces: dict[str, int]) -> dict[int, int]:
    """{code point: id} of the one-character pieces."""
    return {ord(p): i for p, i in pieces.items() if len(p) == 1}


def byte_ids(vocab: dict[str, int]) -> list[int]:
    """The ids of the byte-fallback tokens <0x00> .. <0xFF> (-1 where missing)."""
    return [vocab.get(_BYTE_TOKEN.format(b), -1) for b in range(256)]


def pairs_by_score(pieces: dict[str, int],
                   scores: dict[int, float]) -> dict[tuple[int, int], tuple[int, int]]:
    """SentencePiece's merges (bpe_model.cc): any two adjacent symbols whose concatenation is
    a piece merge, the piece of highest score first; as ranks, the place of the piece's
    score in descending order (equal scores share a rank, leftmost then goes first)."""
    rank_of = {s: r for r, s in enumerate(sorted(set(scores.values()), reverse=True))}
    pairs: dict[tuple[int, int], tuple[int, int]] = {}
    for piece, i in pieces.items():
        for k in range(1, len(piece)):
            a, b = pieces.get(piece[:k]), pieces.get(piece[k:])
            if a is not None and b is not None:
                pairs[(a, b)] = (rank_of[scores[i]], i)
    return pairs


def pairs_by_rank(vocab: dict[str, int], merges: list) -> dict[tuple[int, int], tuple[int, int]]:
    """HF's merges ("a b" or [a, b]) over a char-level vocabulary: rank = place in the list."""
    pairs: dict[tuple[int, int], tuple[int, int]] = {}
    for r, m in enumerate(merges):
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        ia, ib, iab = vocab.get(a), vocab.get(b), vocab.get(a + b)
        if ia is not None and ib is not None and iab is not None:
            pairs.setdefault((ia, ib), (r, iab))
    return pairs


def safe_cut(vocab: dict[str, int]) -> int:
    """CUT_WORDS where no token holds "▁" after another character (so no merge can cross a
    cut made before such a "▁") and "▁" itself is a token, else CUT_NONE."""
    if SPACE not in vocab:
        return CUT_NONE
    for p in vocab:
        k = p.find(SPACE, 1)
        while k > 0:
            if p[k - 1] != SPACE:
                return CUT_NONE
            k = p.find(SPACE, k + 1)
    return CUT_WORDS


def piece_bytes(vocab: dict[str, int], byte_fallback: bool) -> dict[int, bytes]:
    """id -> the bytes each piece stands for ("▁" is a space; <0xXX> its byte)."""
    out = {i: p.replace(SPACE, " ").encode("utf-8") for p, i in vocab.items()}
    if byte_fallback:
        for b in range(256):
            i = vocab.get(_BYTE_TOKEN.format(b))
            if i is not None:
                out[i] = bytes([b])
    return out
