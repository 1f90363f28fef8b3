"""The Tokenizer every loader builds: one encoding pipeline for every kind of file.

    text -> (runs cut, Kimi only) -> special tokens matched in the raw text, never split
         -> each other segment normalized (NFC, Prepend, Replace, SentencePiece's own, ...)
         -> tokens matched in the normalized text (HF's `normalized` added tokens,
            SentencePiece's user-defined symbols)
         -> pre-tokenized (the scanner: hand-written in C for the known pattern families,
            else `regex`; or, for SentencePiece, cut at "▁" in C)
         -> merged (byte-level BPE from bytes, or SentencePiece BPE from characters)

The merger and the scanner each come from the selected core (compiled or pure Python);
both cores give identical ids (tests/test_tokenizer_*.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

import regex

from benchc.tokenizer import _bpe, _spm

Normalizer = Callable[[str, bool], str]  # (segment, is it at the start of the text) -> text


class Core(NamedTuple):
    BPE: type
    SPM: type
    Scanner: type
    run_cuts: Callable[[str, int], list[int]]


def cores(core: str | None) -> Core:
    """The compiled pieces of the selected core, or of the one named ("python" / "cython")."""
    if core is None:
        from benchc.tokenizer import _pretok
        return Core(_bpe.BPE, _spm.SPM, _pretok.Scanner, _pretok.run_cuts)
    if core == "python":
        from benchc.tokenizer import _bpe_py, _pretok_py, _spm_py
        return Core(_bpe_py.BPE, _spm_py.SPM, _pretok_py.Scanner, _pretok_py.run_cuts)
    if core == "cython":
        from benchc.tokenizer import _bpe_c, _pretok_c, _spm_c  # type: ignore[attr-defined]
        return Core(_bpe_c.BPE, _spm_c.SPM, _pretok_c.Scanner, _pretok_c.run_cuts)
    raise ValueError(f"core must be python or cython, not {core!r}")


class _Matcher:
    """Finds whole tokens in text: leftmost, longest at a position (as HF's added
    vocabulary and SentencePiece's prefix matcher do)."""

    def __init__(self, tokens: dict[str, int]):
        self.tokens = tokens
        self._re = (regex.compile("|".join(regex.escape(s) for s in sorted(tokens, key=len, reverse=True)))
                    if tokens else None)

    def split(self, text: str) -> Iterator[tuple[str, int | None, int]]:
        """(piece, token id or None, start offset) in order; empty pieces left out."""
        if self._re is None:
            if text:
                yield text, None, 0
            return
        pos = 0
        for m in self._re.finditer(text):
            if m.start() > pos:
                yield text[pos:m.start()], None, pos
            yield m.group(), self.tokens[m.group()], m.start()
            pos = m.end()
        if pos < len(text):
            yield text[pos:], None, pos


class Tokenizer:
    """encode / count / decode, the same interface for every kind of tokenizer file.

    kind: what was loaded, in words; `pretokenizer`: what runs the pre-tokenization;
    sha256: of the bytes it was read from."""

    def __init__(self, *, kind: str, merger, vocab: dict[int, bytes], special: dict[str, int] | None = None,
                 normalize: Normalizer | None = None, frozen: dict[str, int] | None = None,
                 patterns: list | None = None, cut: int | None = None, prefix_space: bool = False,
                 chunks: Callable[[str], Iterator[str]] | None = None,
                 decode_only: dict[int, bytes] | None = None, core: str | None = None):
        """merger: a BPE (byte-level: pieces are bytes) or an SPM (pieces are characters);
        vocab: id -> the bytes it stands for; special: matched in the raw text;
        frozen: matched after normalization; patterns: the pre-tokenizer's chain for the
        scanner (None: SentencePiece's cut `cut` instead); prefix_space: ByteLevel's
        add_prefix_space; chunks: cuts the raw text first (Kimi's run limit);
        decode_only: ids never produced from text (Mistral's control tokens)."""
        scanner_cls = cores(core).Scanner
        self.kind = kind
        self.merger = merger
        self.special = dict(special or {})
        self.frozen = dict(frozen or {})
        self.scanner = scanner_cls(patterns) if patterns is not None else None
        self.cut = cut
        self.prefix_space = prefix_space
        self._normalize = normalize
        self._chunks = chunks
        self._special = _Matcher(self.special)
        self._frozen = _Matcher(self.frozen)
        self._decode = dict(vocab)
        for text, i in self.special.items():
            self._decode[i] = text.encode()
        self._decode.update(decode_only or {})
        self.sha256: str | None = None
        # byte-level kinds only, set by their loaders: token bytes -> id, the merges, the
        # ids of the single bytes (what a second merger for the same vocabulary needs)
        self.ids: dict[bytes, int] | None = None
        self.pairs: dict[tuple[int, int], tuple[int, int]] | None = None
        self.byte_ids: list[int] | None = None

    @property
    def pretokenizer(self) -> str:
        """What runs the pre-tokenization: "scanner" (compiled, hand-written), "regex"
        (the `regex` package: exact, slower), or "none" (SentencePiece: the merger itself
        takes the text, cut at "▁" where the vocabulary allows)."""
        if self.scanner is None:
            return "none"
        return "scanner" if self.scanner.fast else "regex"

    # ------------------------------------------------------------------ encoding

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for piece, token_id in self._pieces(text):
            if token_id is not None:
                out.append(token_id)
            elif self.scanner is not None:
                out += self.scanner.encode(piece, self.merger)
            else:
                out += self.merger.encode_text(piece.encode("utf-8", "surrogatepass"), self.cut)
        return out

    def count(self, text: str) -> int:
        n = 0
        for piece, token_id in self._pieces(text):
            if token_id is not None:
                n += 1
            elif self.scanner is not None:
                n += self.scanner.count(piece, self.merger)
            else:
                n += self.merger.count_text(piece.encode("utf-8", "surrogatepass"), self.cut)
        return n

    def _pieces(self, text: str) -> Iterator[tuple[str, int | None]]:
        """Normalized pieces to pre-tokenize and merge (id None), and whole tokens (their id)."""
        for chunk in (self._chunks(text) if self._chunks else (text,)):
            for segment, special_id, start in self._special.split(chunk):
                if special_id is not None:
                    yield segment, special_id
                    continue
                if self._normalize is not None:
                    segment = self._normalize(segment, start == 0)
                for piece, frozen_id, _ in self._frozen.split(segment):
                    if frozen_id is not None:
                        yield piece, frozen_id
                    elif self.prefix_space and piece[0] != " ":  # HF's ByteLevel: a space, not \n
                        yield " " + piece, None
                    else:
                        yield piece, None

    # ------------------------------------------------------------------ decoding

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes one token stands for."""
        return self._decode[token_id]

    def decode(self, ids: list[int]) -> str:
        return b"".join(self._decode[i] for i in ids).decode("utf-8", "replace")
