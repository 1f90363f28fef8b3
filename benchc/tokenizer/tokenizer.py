"""Exact token counts without the Rust `tokenizers` or `tiktoken` packages.

Two file families, each following its own reference implementation:
- HuggingFace tokenizer.json with a byte-level BPE model: added tokens matched first
  and never split; normalizers NFC / Sequence; pre-tokenizers Split (behaviour
  Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous; invert),
  ByteLevel (with or without its own regex, add_prefix_space) and Sequence of those;
  merges as "a b" strings or [a, b] pairs; ignore_merges.
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

from benchc.errors import UsageError
from benchc.tokenizer import _bpe
from benchc.tokenizer._pretok_py import BEHAVIOURS

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# tiktoken's encodings by name: (pattern, special tokens), as tiktoken_ext.openai_public
# defines them (the rank file itself is given as a path: nothing is downloaded).
_EOT, _FIM, _EOP = "<|endoftext|>", ("<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>"), "<|endofprompt|>"
_R50K = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
ENCODINGS: dict[str, tuple[str, dict[str, int]]] = {
    "r50k_base": (_R50K, {_EOT: 50256}),
    "p50k_base": (_R50K, {_EOT: 50256}),
    "cl100k_base": (
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
        r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
        {_EOT: 100257, _FIM[0]: 100258, _FIM[1]: 100259, _FIM[2]: 100260, _EOP: 100276}),
    "o200k_base": ("|".join([
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]), {_EOT: 199999, _EOP: 200018}),
}

# HF's regex engine (Oniguruma, Ruby syntax) reads X{n,m}+ as (?:X{n,m})+, not as the
# possessive `regex` (and tiktoken) read it; for one-character X with n = 1 that is X+.
_ONIG_REPEATED_INTERVAL = regex.compile(r"(\\p\{\w+\}|\\[dwsDWS]|\[[^\]]*\]|[^\\()\[\]])\{1,\d+\}\+")


def _as_onig_reads(pattern: str) -> str:
    return _ONIG_REPEATED_INTERVAL.sub(r"\1+", pattern)


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


def _cores(core: str | None) -> tuple[type, type]:
    """(BPE, Scanner) of the selected core, or of the one named ("python" / "cython")."""
    if core is None:
        from benchc.tokenizer import _pretok
        return _bpe.BPE, _pretok.Scanner
    if core == "python":
        from benchc.tokenizer import _bpe_py, _pretok_py
        return _bpe_py.BPE, _pretok_py.Scanner
    if core == "cython":
        from benchc.tokenizer import _bpe_c, _pretok_c  # type: ignore[attr-defined]
        return _bpe_c.BPE, _pretok_c.Scanner
    raise ValueError(f"core must be python or cython, not {core!r}")


class Tokenizer:
    """encode / count / decode; the same interface for both families."""

    def __init__(self, *, ids: dict[bytes, int], pairs: dict[tuple[int, int], tuple[int, int]],
                 special: dict[str, int], nfc: bool, patterns: list[str], prefix_space: bool = False,
                 ignore_merges: bool = False, core: str | None = None):
        bpe_cls, scanner_cls = _cores(core)
        self.ids = ids
        self.pairs = pairs
        self.byte_ids = [ids.get(bytes([b]), -1) for b in range(256)]
        self.bpe = bpe_cls(self.byte_ids, pairs, ids if ignore_merges else None)
        self.scanner = scanner_cls(patterns)  # HF Splits / the tiktoken pattern, in order
        self.special = special
        self.nfc = nfc
        self.prefix_space = prefix_space
        self._decode = {i: b for b, i in ids.items()}
        self._special_re = (regex.compile("|".join(regex.escape(s) for s in
                                                   sorted(special, key=len, reverse=True)))
                            if special else None)
        self.sha256: str | None = None  # of the file it was loaded from

    # ------------------------------------------------------------------ encoding

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for chunk, special_id in self._split_special(text):
            if special_id is not None:
                out.append(special_id)
            else:
                out += self.scanner.encode(self._prefixed(chunk), self.bpe)
        return out

    def count(self, text: str) -> int:
        return sum(1 if special_id is not None else self.scanner.count(self._prefixed(chunk), self.bpe)
                   for chunk, special_id in self._split_special(text))

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
            yield self._norm(text), None
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

    def _prefixed(self, text: str) -> str:
        return " " + text if self.prefix_space and text and not text[0].isspace() else text


# ---------------------------------------------------------------------- loaders


def from_tokenizer_json(path: str, core: str | None = None) -> Tokenizer:
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
            behaviour, invert = pt.get("behavior", "Isolated"), bool(pt.get("invert"))
            if behaviour not in BEHAVIOURS:
                raise UsageError(f"{path}: Split behaviour {behaviour!r} is not one of "
                                 f"{', '.join(BEHAVIOURS)}")
            pat = pt["pattern"]
            pattern = _as_onig_reads(pat["Regex"]) if "Regex" in pat else regex.escape(pat["String"])
            # plain strings are Isolated splits: the chains the compiled scanner knows
            splits.append(pattern if behaviour == "Isolated" and not invert else (pattern, behaviour, invert))
        elif kind == "ByteLevel":
            prefix_space = prefix_space or bool(pt.get("add_prefix_space"))
            if pt.get("use_regex", True):
                splits.append(GPT2_PATTERN)
        else:
            raise UsageError(f"{path}: pre-tokenizer {kind!r} is not supported yet")
    tok = Tokenizer(ids=ids, pairs=pairs, special=special, nfc=nfc, patterns=splits,
                    prefix_space=prefix_space, ignore_merges=bool(model.get("ignore_merges")),
                    core=core)
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
    special = dict(special or {})
    with open(path, "rb") as f:
        raw = f.read()
    ranks: dict[bytes, int] = {}
    for line in raw.splitlines():
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
    tok = Tokenizer(ids=ranks, pairs=pairs, special=special, nfc=nfc, patterns=[pattern],
                    ignore_merges=True, core=core)
    tok.sha256 = hashlib.sha256(raw).hexdigest()
    return tok


def load(path: str, core: str | None = None) -> Tokenizer:
    """A tokenizer.json file, a model directory holding one, or a tiktoken rank file named
    after its encoding (cl100k_base.tiktoken) or given as ENCODING:PATH."""
    file, encoding = tokenizer_file(path)
    return load_file(file, encoding, core)


def tokenizer_file(path: str) -> tuple[str, str | None]:
    """(the file `load(path)` reads, the tiktoken encoding it is read with or None for a
    tokenizer.json): what a copy of the tokenizer elsewhere needs (run/prepare.py)."""
    name, sep, rest = path.partition(":")
    if sep and name in ENCODINGS:
        return rest, name
    stem, ext = os.path.splitext(os.path.basename(path))
    if ext == ".tiktoken":
        if stem not in ENCODINGS:
            raise UsageError(f"{path}: name the encoding of a tiktoken file, as ENCODING:{path} "
                             f"(one of {', '.join(ENCODINGS)})")
        return path, stem
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    return path, None


def load_file(file: str, encoding: str | None, core: str | None = None) -> Tokenizer:
    """The tokenizer in `file`: a tiktoken rank file of `encoding`, else a tokenizer.json."""
    if not os.path.exists(file):
        raise UsageError(f"no tokenizer at {file}")
    if encoding is not None:
        return from_tiktoken(file, encoding=encoding, core=core)
    return from_tokenizer_json(file, core)
