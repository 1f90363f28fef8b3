"""Pre-tokenization, pure Python (the reference twin of csrc/_pretok_c.pyx).

`Scanner(patterns)` cuts text into the pieces BPE merges within: each pattern is applied
in turn to every piece the previous one left, and both what it matches and the gaps
between matches become pieces (HF's Split with behaviour Isolated; a tiktoken pattern
is one such split, and it matches everywhere). The `regex` package runs the patterns:
it knows Unicode property classes and possessive quantifiers as tiktoken does, so
this module is the definition the compiled scanner is tested against.

`encode(text, bpe)` / `count(text, bpe)` add the merge of each piece (utf-8 bytes,
lone surrogates kept as `surrogatepass` writes them).
"""

from __future__ import annotations

import regex

# Pattern chains the compiled core has a hand-written scanner for, and how to run them.
# ("cl100k", n, marks): the GPT-4 family with digit runs of at most n (Qwen: 1), and with
# marks (\p{M}) counted as letters (Qwen3.5+). ("deepseek",): DeepSeek's three chained
# Splits (digits by three, CJK and kana runs, then its word/punctuation pattern).
_CL100K = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
         r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN35 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
           r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_DEEPSEEK = (r"\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
             "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?"
             "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+")
KNOWN: dict[tuple[str, ...], tuple] = {
    (_CL100K,): ("cl100k", 3, False),
    (_CL100K.replace("{1,3}", "{1,3}+"),): ("cl100k", 3, False),  # the same match, possessive
    (_QWEN,): ("cl100k", 1, False),
    (_QWEN35,): ("cl100k", 1, True),
    _DEEPSEEK: ("deepseek",),
}


def piece_bytes(piece: str) -> bytes:
    return piece.encode("utf-8", "surrogatepass")


class Scanner:
    """Same API as the compiled Scanner; `fast` says whether a hand-written scan is used
    (always False here)."""

    fast = False

    def __init__(self, patterns: list[str] | tuple[str, ...]):
        self.patterns = tuple(patterns)
        self._compiled = [regex.compile(p) for p in self.patterns]

    def split(self, text: str) -> list[str]:
        pieces = [text] if text else []
        for pattern in self._compiled:
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

    def encode(self, text: str, bpe) -> list[int]:
        out: list[int] = []
        for piece in self.split(text):
            out += bpe.encode_piece(piece_bytes(piece))
        return out

    def count(self, text: str, bpe) -> int:
        return sum(len(bpe.encode_piece(piece_bytes(piece))) for piece in self.split(text))
