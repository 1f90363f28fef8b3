"""GPT-2's byte <-> printable-character map, which byte-level BPE vocabularies are written in
(HF tokenizer.json, GGUF's gpt2 kind)."""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def byte_decoder() -> dict[str, int]:
    """GPT-2's byte <-> printable-unicode map, inverted."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


def to_bytes(token: str) -> bytes:
    """A vocabulary entry's bytes; an added token, stored as written rather than in the
    byte-level alphabet, as its UTF-8."""
    dec = byte_decoder()
    try:
        return bytes(dec[ch] for ch in token)
    except KeyError:
        return token.encode("utf-8")


def merge_pairs(ids: dict[bytes, int], merges: list) -> dict[tuple[int, int], tuple[int, int]]:
    """{(id_a, id_b): (rank, id_ab)} from merges as "a b" strings or [a, b] pairs, in
    byte-level spelling; a merge's priority is its place in the list."""
    pairs: dict[tuple[int, int], tuple[int, int]] = {}
    for r, m in enumerate(merges):
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        ba, bb = to_bytes(a), to_bytes(b)
        ia, ib, iab = ids.get(ba), ids.get(bb), ids.get(ba + bb)
        if ia is not None and ib is not None and iab is not None:
            pairs.setdefault((ia, ib), (r, iab))
    return pairs
