"""Pre-tokenizer patterns by family, and the table of spellings the compiled scanner knows.

A family is one way of cutting text; the same family is spelled several ways (tiktoken's
possessive `++`, tokenizer.json's plain `+`, `'(?i:[sdmt]|ll|ve|re)` for
`(?i:'s|'t|...)`). KNOWN maps every spelling, as the chain of patterns a tokenizer
applies in turn, to the family and parameters of the hand-written scan in
csrc/tokenizer/_pretok_c.pyx. Only spellings that mean the same cut are listed, and each
one is proven by tests/test_tokenizer_scanner.py against the `regex` twin
(benchc/tokenizer/_pretok_py.py) on a corpus and on generated Unicode. A chain that is not
listed runs through `regex`: exact, slower.

Families and their parameters (the scanner's branches follow the pattern's alternation):
    ("gpt2",)                                  GPT-2 / r50k / p50k: ' ?\\p{L}+' and kin
    ("cl100k", max_digits, marks, ws_to_end)   GPT-4 / Llama 3 / Qwen: digits by max_digits,
                                               marks counted as letters (Qwen3.5+), and
                                               tiktoken's `\\s++$` (a trailing run whole)
    ("o200k", max_digits, contractions, slash, han)
                                               GPT-4o / gpt-oss / tekken / Kimi: case-aware
                                               words, optional contraction suffix, `/` after
                                               punctuation, Han runs first (Kimi)
    ("deepseek",)                              DeepSeek's three chained Splits
"""

from __future__ import annotations

# --- GPT-2 (HF ByteLevel's own regex) and tiktoken's r50k_base / p50k_base
GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
R50K = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""

# --- cl100k: tokenizer.json's spelling (GPT-4 ports, Llama 3), tiktoken's own, Qwen's
CL100K_JSON = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CL100K = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
          r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s""")
QWEN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
        r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
          r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# --- o200k: tiktoken's o200k_base (GPT-4o, gpt-oss), Mistral's tekken, Kimi K2
_UP = r"\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}"
_LO = r"\p{Ll}\p{Lm}\p{Lo}\p{M}"
_CONTRACTION = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
O200K = "|".join([
    rf"[^\r\n\p{{L}}\p{{N}}]?[{_UP}]*[{_LO}]+{_CONTRACTION}?",
    rf"[^\r\n\p{{L}}\p{{N}}]?[{_UP}]+[{_LO}]*{_CONTRACTION}?",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])
TEKKEN = "|".join([
    rf"[^\r\n\p{{L}}\p{{N}}]?[{_UP}]*[{_LO}]+",
    rf"[^\r\n\p{{L}}\p{{N}}]?[{_UP}]+[{_LO}]*",
    r"\p{N}",
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])
# Kimi K2's pat_str (tokenization_kimi.py), as tiktoken (Rust fancy-regex) reads it: class
# intersections `[...&&[^\p{Han}]]`.
KIMI = "|".join([
    r"[\p{Han}]+",
    rf"[^\r\n\p{{L}}\p{{N}}]?[{_UP}&&[^\p{{Han}}]]*[{_LO}&&[^\p{{Han}}]]+{_CONTRACTION}?",
    rf"[^\r\n\p{{L}}\p{{N}}]?[{_UP}&&[^\p{{Han}}]]+[{_LO}&&[^\p{{Han}}]]*{_CONTRACTION}?",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])
# The `regex` package reads `&&` as set intersection only in its VERSION1 mode, which also
# switches (?i) to full case folding; the same sets as a lookahead keep VERSION0 (simple
# folding, as Rust's). Proven against tiktoken itself by tests/test_tokenizer_tiktoken.py.
_KIMI_V0 = "|".join([
    r"[\p{Han}]+",
    rf"[^\r\n\p{{L}}\p{{N}}]?(?:(?!\p{{Han}})[{_UP}])*(?:(?!\p{{Han}})[{_LO}])+{_CONTRACTION}?",
    rf"[^\r\n\p{{L}}\p{{N}}]?(?:(?!\p{{Han}})[{_UP}])+(?:(?!\p{{Han}})[{_LO}])*{_CONTRACTION}?",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])
# Patterns `regex` cannot read as written, and the spelling it runs instead.
REGEX_SPELLING: dict[str, str] = {KIMI: _KIMI_V0}

# --- DeepSeek V3: three chained Splits (digits by three, CJK and kana runs, words)
DEEPSEEK = (r"\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
            "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?"
            "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+")

KNOWN: dict[tuple[str, ...], tuple] = {
    (GPT2,): ("gpt2",),
    (R50K,): ("gpt2",),  # `\s++$` adds nothing to `\s+(?!\S)`; `\s` = `\s+` last
    (CL100K_JSON,): ("cl100k", 3, False, False),
    (CL100K_JSON.replace("{1,3}", "{1,3}+"),): ("cl100k", 3, False, False),  # possessive, same match
    (CL100K,): ("cl100k", 3, False, True),  # `\s++$` takes a trailing run whole
    (QWEN,): ("cl100k", 1, False, False),
    (QWEN35,): ("cl100k", 1, True, False),
    (O200K,): ("o200k", 3, True, True, False),
    (O200K.replace("{1,3}", "{1,3}+"),): ("o200k", 3, True, True, False),
    (TEKKEN,): ("o200k", 1, False, True, False),
    (KIMI,): ("o200k", 3, True, False, True),
    (_KIMI_V0,): ("o200k", 3, True, False, True),
    DEEPSEEK: ("deepseek",),
}
