"""Exact token counts without the Rust `tokenizers` or `tiktoken` packages.

Two file families, each following its own reference implementation:
- HuggingFace tokenizer.json with a byte-level BPE model: added tokens matched first
  and never split; normalizers NFC / Sequence; pre-tokenizers Split (behaviour
  Isolated), ByteLevel (with or without its own regex, add_prefix_space) and
  Sequence of those; merges as "a b" strings or [a, b] pairs; ignore_merges.
  Merge priority is the merge's position in the list.
- tiktoken rank files (base64 token, rank per line) with a pattern and special
  tokens; a piece that is itself a token is taken whole, else merge priority is
  the rank of the merged token. tiktoken's patterns are
  read by the `regex` package, which knows possessive quantifiers as tiktoken does.

A model directory is accepted where a tokenizer.json sits inside it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import unicodedata
from functools import lru_cache

import regex

from benchc import _bpe
from benchc.errors import UsageError

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte <-> printable-unicode map, inverted (byte-level BPE vocabularies use it)."""
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


def _to_bytes(token: str) -> bytes:
    dec = _byte_decoder()
    try:
        return bytes(dec[ch] for ch in token)
    except KeyError:
        return token.encode("utf-8")  # an added token, stored as written rather than byte-level


class Tokenizer:
    """encode / count / decode; the same interface for both families."""

    def __init__(self, *, ids: dict[bytes, int], pairs: dict[tuple[int, int], tuple[int, int]],
                 special: dict[str, int], nfc: bool, splits: list, prefix_space: bool = False,
                 ignore_merges: bool = False, bpe_cls: type | None = None):
        self.ids = ids
        self.pairs = pairs
        self.byte_ids = [ids.get(bytes([b]), -1) for b in range(256)]
        self.bpe = (bpe_cls or _bpe.BPE)(self.byte_ids, pairs)
        self.special = special
        self.nfc = nfc
        self.splits = splits  # compiled regexes, applied in order (HF Split / tiktoken pattern)
        self.prefix_space = prefix_space
        self.ignore_merges = ignore_merges
        self._decode = {i: b for b, i in ids.items()}
        self._special_re = (regex.compile("|".join(regex.escape(s) for s in
                                                   sorted(special, key=len, reverse=True)))
                            if special else None)
        self._cache: dict[bytes, list[int]] = {}
        self.sha256: str | None = None  # of the file it was loaded from

    # ------------------------------------------------------------------ encoding

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for chunk, special_id in self._split_special(text):
            if special_id is not None:
                out.append(special_id)
                continue
            for piece in self._pretokenize(chunk):
                out += self._piece_ids(piece.encode("utf-8", "surrogatepass"))
        return out

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes one token stands for."""
        for text, i in self.special.items():
            if i == token_id:
                return text.encode()
        return self._decode[token_id]

    def decode(self, ids: list[int]) -> str:
        inv_special = {v: k.encode() for k, v in self.special.items()}
        return b"".join(inv_special.get(i) or self._decode[i] for i in ids).decode("utf-8", "replace")

    def _split_special(self, text: str):
        if self._special_re is None:
            yield (unicodedata.normalize("NFC", text) if self.nfc else text), None
            return
        pos = 0
        for m in self._special_re.finditer(text):
            if m.start() > pos:
                yield self._norm(text[pos:m.start()]), None
            yield m.group(), self.special[m.group()]
            pos = m.end()
        if pos < len(text):
            yield self._norm(text[pos:]), None

    def _norm(self, s: str) -> str:
        return unicodedata.normalize("NFC", s) if self.nfc else s

    def _pretokenize(self, text: str) -> list[str]:
        if self.prefix_space and text and not text[0].isspace():
            text = " " + text
        pieces = [text]
        for pattern in self.splits:
            nxt = []
            for p in pieces:
                pos = 0
                for m in pattern.finditer(p):
                    if m.start() > pos:
                        nxt.append(p[pos:m.start()])
                    if m.end() > m.start():
                        nxt.append(m.group())
                    pos = m.end()
                if pos < len(p):
                    nxt.append(p[pos:])
            pieces = nxt
        return pieces

    def _piece_ids(self, piece: bytes) -> list[int]:
        hit = self._cache.get(piece)
        if hit is not None:
            return hit
        if self.ignore_merges and piece in self.ids:
            ids = [self.ids[piece]]
        else:
            ids = self.bpe.merge(piece)
        if len(self._cache) < 100_000:
            self._cache[piece] = ids
        return ids


# ---------------------------------------------------------------------- loaders


def from_tokenizer_json(path: str, bpe_cls: type | None = None) -> Tokenizer:
    with open(path, "rb") as f:
        raw = f.read()
    d = json.loads(raw)
    model = d.get("model") or {}
    if model.get("type") != "BPE":
        raise UsageError(f"{path}: only BPE tokenizer.json models are supported (this is "
                         f"{model.get('type')!r})")
    ids = {_to_bytes(tok): i for tok, i in model["vocab"].items()}
    pairs: dict[tuple[int, int], tuple[int, int]] = {}
    for r, m in enumerate(model["merges"]):
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        ba, bb = _to_bytes(a), _to_bytes(b)
        ia, ib, iab = ids.get(ba), ids.get(bb), ids.get(ba + bb)
        if ia is not None and ib is not None and iab is not None:
            pairs.setdefault((ia, ib), (r, iab))  # a merge's priority is its place in the list
    special = {t["content"]: t["id"] for t in d.get("added_tokens", [])}
    nfc = _has_nfc(d.get("normalizer"))
    splits, prefix_space = [], False
    for pt in _flatten(d.get("pre_tokenizer")):
        kind = pt.get("type")
        if kind == "Split":
            if pt.get("behavior", "Isolated") != "Isolated" or pt.get("invert"):
                raise UsageError(f"{path}: Split behaviour {pt.get('behavior')!r} is not supported yet")
            pat = pt["pattern"]
            splits.append(regex.compile(pat["Regex"] if "Regex" in pat else regex.escape(pat["String"])))
        elif kind == "ByteLevel":
            prefix_space = prefix_space or bool(pt.get("add_prefix_space"))
            if pt.get("use_regex", True):
                splits.append(regex.compile(GPT2_PATTERN))
        else:
            raise UsageError(f"{path}: pre-tokenizer {kind!r} is not supported yet")
    tok = Tokenizer(ids=ids, pairs=pairs, special=special, nfc=nfc, splits=splits,
                    prefix_space=prefix_space, ignore_merges=bool(model.get("ignore_merges")),
                    bpe_cls=bpe_cls)
    tok.sha256 = hashlib.sha256(raw).hexdigest()
    return tok


def _flatten(pt: dict | None) -> list[dict]:
    if not pt:
        return []
    if pt.get("type") == "Sequence":
        return [x for p in pt.get("pretokenizers", []) for x in _flatten(p)]
    return [pt]


def _has_nfc(norm: dict | None) -> bool:
    if not norm:
        return False
    if norm.get("type") == "Sequence":
        return any(_has_nfc(n) for n in norm.get("normalizers", []))
    if norm.get("type") == "NFC":
        return True
    raise UsageError(f"normalizer {norm.get('type')!r} is not supported yet")


def from_tiktoken(path: str, pattern: str, special: dict[str, int], nfc: bool = False,
                  bpe_cls: type | None = None) -> Tokenizer:
    ranks: dict[bytes, int] = {}
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                tok, rank = line.split()
                ranks[base64.b64decode(tok)] = int(rank)
    # tiktoken merges the pair whose concatenation has the lowest rank: every split of a
    # token into two tokens is a merge at that token's rank.
    pairs: dict[tuple[int, int], tuple[int, int]] = {}
    for tok, r in ranks.items():
        for k in range(1, len(tok)):
            ia, ib = ranks.get(tok[:k]), ranks.get(tok[k:])
            if ia is not None and ib is not None:
                pairs[(ia, ib)] = (r, r)
    # tiktoken looks a whole piece up before merging (so do we: ignore_merges); some
    # vocabularies hold tokens that merges alone would never produce.
    return Tokenizer(ids=ranks, pairs=pairs, special=special, nfc=nfc, splits=[regex.compile(pattern)],
                     ignore_merges=True, bpe_cls=bpe_cls)


def load(path: str, bpe_cls: type | None = None) -> Tokenizer:
    """A tokenizer.json file, or a model directory holding one."""
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    if not os.path.exists(path):
        raise UsageError(f"no tokenizer at {path}")
    return from_tokenizer_json(path, bpe_cls)
