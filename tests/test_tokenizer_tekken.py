"""Mistral's tekken.json against mistral-common's Tekkenizer (both files it ships), on both cores."""

import os
import shutil
from functools import cache

import pytest
from hypothesis import given, settings

from benchc.errors import UsageError
from benchc.tokenizer import tokenizer as T
from tests.tokenizer_fixtures import CORES, MISTRAL_DATA, TEKKEN, corpus, unicode_text

pytestmark = pytest.mark.slow  # mistral-common as the oracle

tekken = pytest.importorskip("mistral_common.tokens.tokenizers.tekken")
CORPUS = corpus()
FILES = [os.path.join(MISTRAL_DATA, f) for f in ("tekken_240718.json", "tekken_240911.json")]


@cache
def _ref(path: str):
    return tekken.Tekkenizer.from_file(path)


@cache
def _ours(path: str, core: str):
    return T.load(path, core)


@pytest.mark.parametrize("core", CORES)
@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_tekken_matches_mistral_common(path, core):
    ours, ref = _ours(path, core), _ref(path)
    assert ours.kind == "Mistral tekken.json"
    assert ours.pretokenizer == ("scanner" if core == "cython" else "regex")
    for text in CORPUS + ["[INST] a [/INST]</s><s>", ""]:
        ids = ref.encode(text, bos=False, eos=False)
        assert ours.encode(text) == ids, text[:60]
        assert ours.count(text) == len(ids)
    # the first ids are the control tokens: they decode, and text never produces them
    assert [ours.token_bytes(i) for i in range(3)] == [b"<unk>", b"<s>", b"</s>"]
    assert ours.decode(ours.encode("héllo wörld")) == "héllo wörld"


def test_tekken_on_generated_unicode():
    @settings(max_examples=80, deadline=None)
    @given(unicode_text(60))
    def check(text):
        ref = _ref(TEKKEN).encode(text, bos=False, eos=False)
        for core in CORES:
            assert _ours(TEKKEN, core).encode(text) == ref

    check()


def test_a_tekken_directory_and_a_broken_file(tmp_path):
    shutil.copy(TEKKEN, tmp_path / "tekken.json")
    assert T.load(str(tmp_path)).kind == "Mistral tekken.json"
    (tmp_path / "bad-tekken.json").write_text('{"config": {}}')
    with pytest.raises(UsageError, match="not a tekken tokenizer file"):
        T.load(str(tmp_path / "bad-tekken.json"))
