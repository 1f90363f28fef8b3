"""Unicode classes of every code point, as the `regex` package reads them.

The compiled pre-tokenizer looks classes up in this table instead of running `regex`;
taking the table from `regex` itself (one pass per class over all code points, about
0.3 s once per process) keeps the two cores on the same Unicode version.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import regex

LETTER, NUMBER, MARK, PUNCT, SYMBOL, SPACE = 1, 2, 4, 8, 16, 32
# o200k's case-aware letter sets (marks are added by the scanner where a pattern says so):
# UPPER = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}], LOWER = [\p{Ll}\p{Lm}\p{Lo}]; HAN = \p{Han} (Kimi)
UPPER, LOWER, HAN = 64, 128, 256
_CLASSES = ((LETTER, r"\p{L}+"), (NUMBER, r"\p{N}+"), (MARK, r"\p{M}+"), (PUNCT, r"\p{P}+"),
            (SYMBOL, r"\p{S}+"), (SPACE, r"\s+"), (UPPER, r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}]+"),
            (LOWER, r"[\p{Ll}\p{Lm}\p{Lo}]+"), (HAN, r"\p{Han}+"))
FOLD_LIMIT = 0x200  # every code point that case-folds to an ASCII contraction letter is below


@lru_cache(maxsize=1)
def class_table() -> bytes:
    """Two bytes per code point (0 .. 0x10FFFF, native uint16): an OR of the class bits above."""
    every = _every_code_point()
    table = np.zeros(0x110000, np.uint16)
    for bit, pattern in _CLASSES:
        for m in regex.finditer(pattern, every):
            table[m.start():m.end()] |= bit
    return table.tobytes()


@lru_cache(maxsize=1)
def contraction_folds() -> bytes:
    """For code points below FOLD_LIMIT: the ASCII letter of "strevmld" that `(?i:x)`
    matches it as (e.g. 'ſ' -> 's'), else 0."""
    table = bytearray(FOLD_LIMIT)
    every = _every_code_point()
    for letter in "strevmld":
        for m in regex.finditer(f"(?i:{letter})", every):
            cp = m.start()
            if cp >= FOLD_LIMIT:
                raise RuntimeError(f"U+{cp:04X} folds to {letter!r}: raise FOLD_LIMIT")
            table[cp] = ord(letter)
    return bytes(table)


def _every_code_point() -> str:
    return "".join(map(chr, range(0x110000)))
