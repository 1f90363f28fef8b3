"""tiktoken's encodings and Kimi's directory against tiktoken itself. The real rank files of
cl100k/o200k/r50k and Kimi are not in any package, so Qwen2.5's ranks stand in: what is
tested is the pattern (read exactly as tiktoken's engine reads it), the special tokens and
the loaders, on both cores."""

import json
import os
import random
import shutil
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings

from benchc.errors import UsageError
from benchc.tokenizer import _patterns, _tiktoken_file
from benchc.tokenizer import tokenizer as T
from tests.conftest import both_cores
from tests.tokenizer_fixtures import CORES, QWEN_DIR, corpus, unicode_text

pytestmark = pytest.mark.slow  # tiktoken's encodings as the oracle

tiktoken = pytest.importorskip("tiktoken")
tiktoken_load = pytest.importorskip("tiktoken.load")

CORPUS = corpus()
STAND_IN = os.path.join(QWEN_DIR, "qwen.tiktoken")
NAMES = ["r50k_base", "p50k_base", "cl100k_base", "o200k_base"]


def _openai_public(name: str) -> dict:
    """tiktoken's own definition of an encoding, without downloading its rank file."""
    import tiktoken_ext.openai_public as public

    saved = public.load_tiktoken_bpe
    public.load_tiktoken_bpe = lambda *a, **k: {}
    try:
        return getattr(public, name)()
    finally:
        public.load_tiktoken_bpe = saved


@cache
def _ranks() -> dict:
    return tiktoken_load.load_tiktoken_bpe(STAND_IN)


@cache
def _pair(name: str, core: str):
    """(ours loaded as NAME:PATH, tiktoken) with the encoding's pattern and the specials that
    fall clear of the stand-in's ranks."""
    ref_def = _openai_public(name)
    special = {t: i for t, i in ref_def["special_tokens"].items() if i > 151_700}
    ref = tiktoken.Encoding(name, pat_str=ref_def["pat_str"], special_tokens=special,
                            mergeable_ranks=_ranks())
    ours = T.from_tiktoken(STAND_IN, ref_def["pat_str"], special, core=core)
    return ours, ref


@pytest.mark.parametrize("name", NAMES)
def test_named_encodings_are_tiktokens_own(name):
    ref = _openai_public(name)
    assert T.ENCODINGS[name] == (ref["pat_str"], ref["special_tokens"])


@pytest.mark.parametrize("core", CORES)
@pytest.mark.parametrize("name", NAMES)
def test_every_encoding_matches_tiktoken(name, core):
    ours, ref = _pair(name, core)
    assert ours.pretokenizer == ("scanner" if core == "cython" else "regex")
    for text in CORPUS:
        text = text.replace("<|", "< |")  # specials differ between the two vocabularies
        assert ours.encode(text) == ref.encode(text), text[:60]


@pytest.mark.parametrize("name", NAMES)
def test_every_encoding_on_generated_unicode(name):
    @settings(max_examples=60, deadline=None)
    @given(unicode_text(60))
    def check(text):
        for core in CORES:
            ours, ref = _pair(name, core)
            assert ours.encode(text) == ref.encode(text, disallowed_special=())

    check()


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_a_rank_file_loads_by_encoding_name(name, tmp_path):
    """By file stem or as NAME:PATH, the name brings the encoding's pattern and specials (the
    ids with them are tested against tiktoken above)."""
    ranks_file = tmp_path / f"{name}.tiktoken"
    shutil.copy(STAND_IN, ranks_file)
    by_stem, by_prefix = T.load(str(ranks_file)), T.load(f"{name}:{ranks_file}")
    for tok in (by_stem, by_prefix):
        assert tok.kind == f"tiktoken {name}" and tok.special == T.ENCODINGS[name][1]
        assert tok.scanner.patterns == (T.ENCODINGS[name][0],)
    assert by_stem.sha256 == by_prefix.sha256 is not None
    assert by_stem.encode(CORPUS[0]) == by_prefix.encode(CORPUS[0])
    other = tmp_path / "mine.tiktoken"
    other.write_bytes(b"")
    with pytest.raises(UsageError, match="name the encoding"):
        T.load(str(other))


# ------------------------------------------------------------------------------ Kimi

KIMI_SPECIAL = {"[BOS]": 0, "[EOS]": 1, "<|im_end|>": 2, "<|im_user|>": 3, "<|im_assistant|>": 4}


@pytest.fixture(scope="module")
def kimi_dir(tmp_path_factory):
    """Kimi K2's directory layout: tiktoken.model (stand-in ranks) and tokenizer_config.json
    naming tokenization_kimi, with added_tokens_decoder for some of the 256 reserved ids."""
    d = tmp_path_factory.mktemp("kimi")
    shutil.copy(STAND_IN, d / "tiktoken.model")
    n = len(_ranks())
    config = {"tokenizer_class": "TikTokenTokenizer",
              "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
              "added_tokens_decoder": {str(n + k): {"content": t, "special": True}
                                       for t, k in KIMI_SPECIAL.items()}}
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    return d


@cache
def _kimi_ref():
    n = len(_ranks())
    special = {f"<|reserved_token_{i}|>": i for i in range(n, n + 256)}
    for t, k in KIMI_SPECIAL.items():
        del special[f"<|reserved_token_{n + k}|>"]
        special[t] = n + k
    return tiktoken.Encoding("kimi", pat_str=_patterns.KIMI, mergeable_ranks=_ranks(), special_tokens=special)


@cache
def _kimi(path: str, core: str):
    return T.load(path, core)


@pytest.mark.parametrize("core", CORES)
def test_kimi_directory_matches_tiktoken_with_kimis_pattern(kimi_dir, core):
    ours, ref = _kimi(str(kimi_dir), core), _kimi_ref()
    assert ours.kind == "Kimi tiktoken.model"
    assert ours.pretokenizer == ("scanner" if core == "cython" else "regex")
    texts = CORPUS + ["[BOS]<|im_user|>你好，世界<|im_end|><|reserved_token_151650|>[EOS]",
                      "汉字和English混合 HTTPServer々〇⺀ I'M"]
    for text in texts:
        assert ours.encode(text) == ref.encode(text, allowed_special="all"), text[:60]
    assert ours.count(texts[-2]) == len(ref.encode(texts[-2], allowed_special="all"))


def test_kimi_pattern_on_generated_unicode(kimi_dir):
    toks = [_kimi(str(kimi_dir), core) for core in CORES]

    @settings(max_examples=100, deadline=None)
    @given(unicode_text(60))
    def check(text):
        ref = _kimi_ref().encode(text, allowed_special="all")
        for ours in toks:
            assert ours.encode(text) == ref

    check()


def _kimi_reference_split(s: str, max_len: int):
    """tokenization_kimi.py's _split_whitespaces_or_nonwhitespaces, as written there."""
    current_len, current_is_space, start = 0, s[0].isspace() if s else False, 0
    for i in range(len(s)):
        is_space = s[i].isspace()
        if current_is_space ^ is_space:
            current_len, current_is_space = 1, is_space
        else:
            current_len += 1
            if current_len > max_len:
                yield s[start:i]
                start, current_len = i, 1
    yield s[start:]


@pytest.mark.parametrize("module", both_cores("benchc.tokenizer._pretok"), ids=lambda m: m.__name__[-2:])
def test_kimi_cuts_long_runs_as_its_encode_does(module):
    rng = random.Random(1)
    text = ("x" * 60_001 + " " * 25_001 + "ab \x1c" * 10 + "中" * 50_000 + "\u3000" * 3
            + "".join(rng.choice("a \n") for _ in range(1000)))
    ours = list(_tiktoken_file.kimi_chunks(module.run_cuts)(text))
    assert ours == [c for c in _kimi_reference_split(text, 25_000) if c]
    assert len(ours) == 5 and "".join(ours) == text  # x-run cut twice, spaces once, Han once
    for _ in range(300):  # small limits, where runs pass them often; str.isspace's own classes
        t = "".join(rng.choice("ab \t\x1c\x85\u3000\u200b中") for _ in range(rng.randint(0, 40)))
        limit = rng.randint(1, 5)
        assert module.run_cuts(t, limit) == _reference_cuts(t, limit), (t, limit)


def _reference_cuts(s: str, limit: int) -> list[int]:
    cuts, pos = [], 0
    for piece in list(_kimi_reference_split(s, limit))[:-1]:
        pos += len(piece)
        cuts.append(pos)
    return cuts


def test_a_tiktoken_model_without_kimis_config_is_refused(tmp_path):
    shutil.copy(STAND_IN, tmp_path / "tiktoken.model")
    with pytest.raises(UsageError, match="no tokenizer at"):
        T.load(str(tmp_path))
    with pytest.raises(UsageError, match="needs its pattern"):
        T.load(str(tmp_path / "tiktoken.model"))
    assert Path(tmp_path / "tiktoken.model").exists()
