"""The compiled pre-tokenizer against its `regex` twin: every spelling in the table of
equivalent spellings (_patterns.KNOWN) is proven here, on the corpus and on generated text
(any Unicode, and an alphabet of the characters where a hand-written scan could go wrong)."""

from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchc.tokenizer import _patterns
from tests.conftest import both_cores
from tests.tokenizer_fixtures import corpus

_MODULES = both_cores("benchc.tokenizer._pretok")
_CHAINS = list(_patterns.KNOWN)
_IDS = [f"{k}-{_patterns.KNOWN[c][0]}" for k, c in enumerate(_CHAINS)]
CORPUS = corpus()
# contraction letters and their case folds (ſ), every space class (NEL, NBSP, U+2028, ogham),
# marks, CJK/kana edges and Han symbols (々 Lm, 〇 Nl, ⺀ So), case classes (ǅ Lt, ʰ Lm, ª Lo,
# ᾈ Lt), digits of other scripts and number forms, ASCII punctuation and "/", lone surrogates
_TRICKY = ("'sStTrReEvVmMlLdDſKk \t\r\n\x0b\x0c\x85\xa0\u1680\u2028\u3000!\"#-./:@[\\]^_`{|}~"
           "aZé\u0301\u0308\u20dd\u0345中龥龦ぁゟ゠ヿ・ー가々〇⺀0123456789٣४²½Ⅻⅰ\u200d\ue000😀ǅʰªᾈ\ud800\udc00")
pytestmark = pytest.mark.skipif(len(_MODULES) < 2, reason="compiled core not built")


@cache
def _scanners(k: int):
    return tuple(m.Scanner(_CHAINS[k]) for m in _MODULES)


@pytest.mark.parametrize("k", range(len(_CHAINS)), ids=_IDS)
def test_every_known_spelling_splits_as_the_regex_twin(k):
    py, c = _scanners(k)
    assert c.fast and not py.fast
    for text in CORPUS:
        assert c.split(text) == py.split(text), text[:60]


@pytest.mark.parametrize("k", range(len(_CHAINS)), ids=_IDS)
def test_every_known_spelling_on_generated_text(k):
    @settings(max_examples=120, deadline=None)
    @given(st.one_of(st.text(max_size=60), st.text(alphabet=_TRICKY, max_size=60)))
    def check(text):
        py, c = _scanners(k)
        assert c.split(text) == py.split(text)
        assert "".join(c.split(text)) == text

    check()


def test_an_unknown_pattern_falls_back_to_regex_on_both_cores():
    for m in _MODULES:
        s = m.Scanner([r"\d+"])
        assert not s.fast
        assert s.split("ab12cd345") == ["ab", "12", "cd", "345"]


def test_every_tiktoken_encoding_and_model_family_has_a_compiled_scan():
    from benchc.tokenizer._gguf import PRE
    from benchc.tokenizer._tiktoken_file import ENCODINGS

    chains = [(p,) for p, _ in ENCODINGS.values()] + [c for c, _, _ in PRE.values()]
    chains += [(_patterns.GPT2,), (_patterns.CL100K_JSON,), (_patterns.TEKKEN,), (_patterns.KIMI,)]
    assert [c for c in chains if c not in _patterns.KNOWN] == []
