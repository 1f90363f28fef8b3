"""Pre-tokenization, pure Python (the reference twin of csrc/tokenizer/_pretok_c.pyx).

`Scanner(patterns)` cuts text into the pieces BPE merges within: each pattern is applied
in turn to every piece the previous one left, and both what it matches and the gaps
between matches become pieces (HF's Split with behaviour Isolated; a tiktoken pattern
is one such split, and it matches everywhere). A pattern may also be given as
(pattern, behaviour, invert) for HF's other Split behaviours: Removed,
MergedWithPrevious, MergedWithNext, Contiguous. The `regex` package runs the patterns:
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


BEHAVIOURS = ("Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous")


def _split(text: str, pattern, behaviour: str, invert: bool) -> list[str]:
    """One HF Split over one piece, as tokenizers' SplitDelimiterBehavior does it: the
    text as spans flagged matched or not (invert swaps the flags), then joined per
    behaviour."""
    spans, pos = [], 0  # (start, end, is_match)
    for m in pattern.finditer(text):
        if m.end() == m.start():
            continue
        if m.start() > pos:
            spans.append((pos, m.start(), invert))
        spans.append((m.start(), m.end(), not invert))
        pos = m.end()
    if pos < len(text):
        spans.append((pos, len(text), invert))
    if behaviour == "Removed":
        spans = [s for s in spans if not s[2]]
    elif behaviour in ("MergedWithPrevious", "MergedWithNext"):
        forward = behaviour == "MergedWithPrevious"
        out: list[list] = []
        previous_match = False
        for a, b, is_match in (spans if forward else reversed(spans)):
            if is_match and not previous_match and out:
                if forward:
                    out[-1][1] = b  # the match joins the piece before it
                else:
                    out[-1][0] = a  # the match joins the piece after it
            else:
                out.append([a, b, False])
            previous_match = is_match
        spans = out if forward else out[::-1]
    elif behaviour == "Contiguous":
        out = []
        previous_match = None
        for a, b, is_match in spans:
            if is_match == previous_match and out:
                out[-1][1] = b  # neighbours of one kind make one piece
            else:
                out.append([a, b, is_match])
            previous_match = is_match
        spans = out
    return [text[a:b] for a, b, *_ in spans]


def piece_bytes(piece: str) -> bytes:
    return piece.encode("utf-8", "surrogatepass")


class Scanner:
    """Same API as the compiled Scanner; `fast` says whether a hand-written scan is used
    (always False here)."""

    fast = False

    def __init__(self, patterns: list | tuple):
        self.patterns = tuple(patterns)
        self._splits = [(regex.compile(p), "Isolated", False) if isinstance(p, str)
                        else (regex.compile(p[0]), p[1], bool(p[2])) for p in self.patterns]
        for _, behaviour, _ in self._splits:
            if behaviour not in BEHAVIOURS:
                raise ValueError(f"Split behaviour {behaviour!r} is not one of {', '.join(BEHAVIOURS)}")

    def split(self, text: str) -> list[str]:
        pieces = [text] if text else []
        for pattern, behaviour, invert in self._splits:
            pieces = [x for p in pieces for x in _split(p, pattern, behaviour, invert)]
        return pieces

    def encode(self, text: str, bpe) -> list[int]:
        out: list[int] = []
        for piece in self.split(text):
            out += bpe.encode_piece(piece_bytes(piece))
        return out

    def count(self, text: str, bpe) -> int:
        return sum(len(bpe.encode_piece(piece_bytes(piece))) for piece in self.split(text))
