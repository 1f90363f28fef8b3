"""Pre-tokenization, pure Python (the reference twin of csrc/tokenizer/_pretok_c.pyx).

`Scanner(patterns)` cuts text into the pieces BPE merges within: each pattern is applied
in turn to every piece the previous one left, and both what it matches and the gaps
between matches become pieces (HF's Split with behaviour Isolated; a tiktoken pattern
is one such split, and it matches everywhere). A pattern may also be given as
(pattern, behaviour, invert) for HF's other Split behaviours: Removed,
MergedWithPrevious, MergedWithNext, Contiguous. The `regex` package runs the patterns:
it knows Unicode property classes and possessive quantifiers as tiktoken does, so
this module is the definition the compiled scanner is tested against (a pattern `regex`
cannot read as written, Kimi's class intersections, runs in the spelling
_patterns.REGEX_SPELLING gives).

`encode(text, bpe)` / `count(text, bpe)` add the merge of each piece (utf-8 bytes,
lone surrogates kept as `surrogatepass` writes them). `run_cuts(text, limit)`: where
Kimi's encode cuts long runs of spaces or non-spaces.
"""

from __future__ import annotations

import re
from functools import lru_cache

import regex

from benchc.tokenizer._patterns import KNOWN, REGEX_SPELLING

__all__ = ["BEHAVIOURS", "KNOWN", "Scanner", "piece_bytes", "run_cuts"]

BEHAVIOURS = ("Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous")


def _split(text: str, pattern, behaviour: str, invert: bool) -> list[str]:
    """One HF Split over one piece, as tokenizers' SplitDelimiterBehavior does it: the
    text as spans flagged matched or not (invert swaps the flags), then joined per
    behaviour."""
    spans: list = []  # (start, end, is_match): tuples, lists where pieces merge
    pos = 0
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


def _compile(pattern: str):
    return regex.compile(REGEX_SPELLING.get(pattern, pattern))


def piece_bytes(piece: str) -> bytes:
    return piece.encode("utf-8", "surrogatepass")


class Scanner:
    """Same API as the compiled Scanner; `fast` says whether a hand-written scan is used
    (always False here)."""

    fast = False

    def __init__(self, patterns: list | tuple):
        self.patterns = tuple(patterns)
        self._splits = [(_compile(p), "Isolated", False) if isinstance(p, str)
                        else (_compile(p[0]), p[1], bool(p[2])) for p in self.patterns]
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


@lru_cache(maxsize=4)
def _long_run(limit: int) -> re.Pattern:
    # Python's `re` reads \s as str.isspace; a lookbehind anchors each try at the start of a
    # run, so the scan is linear in the text's length
    return re.compile(rf"(?<!\S)\S{{{limit + 1},}}|(?<!\s)\s{{{limit + 1},}}")


def run_cuts(text: str, limit: int) -> list[int]:
    """Offsets where a run of spaces or of non-spaces (str.isspace) longer than `limit` is cut,
    every `limit` characters into it (Kimi's encode cuts its text so)."""
    return [cut for m in _long_run(limit).finditer(text) for cut in range(m.start() + limit, m.end(), limit)]

