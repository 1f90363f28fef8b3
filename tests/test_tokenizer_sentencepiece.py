"""SentencePiece BPE against its oracles: `sentencepiece` for .model files (Mistral's, from
mistral-common, and models trained here with sentencepiece's own trainer to reach its other
options), HF `tokenizers` for SentencePiece-style tokenizer.json (converted from a Mistral
.model in each layout conversions write, and trained here with `tokenizers`); and the two
merge cores against each other."""

import glob
import io
import os
import random
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchc.errors import UsageError
from benchc.tokenizer import _spm_py
from benchc.tokenizer import tokenizer as T
from tests.conftest import both_cores
from tests.tokenizer_fixtures import (
    CORES,
    MISTRAL_DATA,
    MISTRAL_V1,
    MISTRAL_V3,
    corpus,
    llama_json,
    trained_spm_json,
)

spm = pytest.importorskip("sentencepiece")
from tokenizers import Tokenizer as HF  # noqa: E402

pytestmark = pytest.mark.slow  # sentencepiece and HF as the oracles

CORPUS = corpus()
MODELS = sorted(glob.glob(os.path.join(MISTRAL_DATA, "*.model*")))


@cache
def _model(path: str, core: str):
    return T.load(path, core), spm.SentencePieceProcessor(model_file=path)


@pytest.mark.parametrize("core", CORES)
@pytest.mark.parametrize("path", MODELS, ids=[os.path.basename(m) for m in MODELS])
def test_mistral_models_match_sentencepiece(path, core):
    ours, ref = _model(path, core)
    assert ours.kind == "SentencePiece .model, BPE" and ours.pretokenizer == "none"
    for text in CORPUS + ["[INST] user [/INST] [REF] x [/REF] <s> ▁▁ \u0000 \U0010FFFF", ""]:
        assert ours.encode(text) == ref.encode(text), text[:60]
        assert ours.count(text) == len(ref.encode(text))


def test_a_model_on_generated_unicode():
    @settings(max_examples=80, deadline=None)
    @given(st.text(max_size=60))
    def check(text):
        for core in CORES:
            ours, ref = _model(MISTRAL_V3, core)
            assert ours.encode(text) == ref.encode(text)

    check()


def _train(tmp_path, name: str, **options) -> str:
    """A small model trained here with sentencepiece's own trainer."""
    rng = random.Random(3)
    words = ["alpha", "beta", "gamma", "δέλτα", "中文"]
    lines = [t for t in CORPUS if t.strip()]
    lines += [" ".join(rng.choice(words) for _ in range(8)) for _ in range(200)]
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=out,
                                   **{"vocab_size": 600, "hard_vocab_limit": False, "model_type": "bpe",
                                      "minloglevel": 2, "character_coverage": 0.98, **options})
    path = tmp_path / name
    path.write_bytes(out.getvalue())
    return str(path)


@pytest.mark.parametrize("options", [
    {"byte_fallback": False},  # unknowns: one <unk> per run
    {"byte_fallback": True, "remove_extra_whitespaces": True, "user_defined_symbols": ["<tool>", "ab"]},
    {"add_dummy_prefix": False, "remove_extra_whitespaces": False, "control_symbols": ["<ctl>"]},
], ids=["unk", "bytes-user-defined", "no-dummy-prefix"])
def test_models_trained_with_other_options_match_sentencepiece(tmp_path, options):
    path = _train(tmp_path, "m.model", normalization_rule_name="identity", **options)
    ref = spm.SentencePieceProcessor(model_file=path)
    texts = CORPUS + ["  two  spaces  ", "<tool>ab<ctl>abab", "ÿ丂 rare ⁂ chars", "\t\n"]
    for core in CORES:
        ours = T.load(path, core)
        for text in texts:
            assert ours.encode(text) == ref.encode(text), text[:60]


def test_what_is_not_built_yet_is_refused(tmp_path):
    unigram = _train(tmp_path, "u.model", model_type="unigram", normalization_rule_name="identity")
    with pytest.raises(UsageError, match="Unigram models are not supported yet"):
        T.load(unigram)
    nfkc = _train(tmp_path, "n.model", normalization_rule_name="nmt_nfkc")
    with pytest.raises(UsageError, match="nmt_nfkc.*not supported yet"):
        T.load(nfkc)
    (tmp_path / "junk.model").write_bytes(b"\n\xff\xff")
    with pytest.raises(UsageError, match="not a SentencePiece model"):
        T.load(str(tmp_path / "junk.model"))


# ------------------------------------------------- SentencePiece-style tokenizer.json

LAYOUTS = ["legacy", "metaspace", "metaspace-split", "gemma"]


@pytest.fixture(scope="module")
def spm_json(tmp_path_factory):
    d = tmp_path_factory.mktemp("spm-json")
    files = {layout: llama_json(MISTRAL_V1, str(d / f"{layout}.json"), layout) for layout in LAYOUTS}
    files["no-byte-fallback"] = llama_json(MISTRAL_V3, str(d / "nbf.json"), "legacy", byte_fallback=False)
    files["trained"] = trained_spm_json(str(d / "trained.json"), CORPUS[:20])
    return files


@pytest.mark.parametrize("core", CORES)
@pytest.mark.parametrize("layout", [*LAYOUTS, "no-byte-fallback", "trained"])
def test_spm_style_tokenizer_json_matches_hf(spm_json, layout, core):
    ours, hf = T.load(spm_json[layout], core), HF.from_file(spm_json[layout])
    assert ours.kind == "tokenizer.json, SentencePiece-style BPE"
    texts = CORPUS + ["<s>after a special</s> and <unk>", "ÿ丂 rare ⁂ chars 𝔘", "[INST] x [/INST]"]
    for text in texts:
        assert ours.encode(text) == hf.encode(text, add_special_tokens=False).ids, text[:60]


def test_legacy_layout_on_generated_unicode(spm_json):
    toks = [T.load(spm_json["legacy"], core) for core in CORES]
    hf = HF.from_file(spm_json["legacy"])

    @settings(max_examples=80, deadline=None)
    @given(st.text(max_size=60))
    def check(text):
        ref = hf.encode(text, add_special_tokens=False).ids
        for ours in toks:
            assert ours.encode(text) == ref

    check()


# ------------------------------------------------------------------- the merge twins

_MERGERS = both_cores("benchc.tokenizer._spm")


@cache
def _mergers():
    ours = T.load(MISTRAL_V1, "python").merger
    return [m.SPM(ours.char_ids, ours.pairs, ours.byte_ids, ours.unk_id, ours.fuse_unk) for m in _MERGERS] + \
        [m.SPM(ours.char_ids, ours.pairs, None, 0, fuse) for m in _MERGERS for fuse in (False, True)]


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("▁▁abcdefghij kl中文😀ÿ") + ["\u0378", "\udcff"]), max_size=300),
       st.sampled_from([_spm_py.CUT_NONE, _spm_py.CUT_METASPACE, _spm_py.CUT_WORDS]))
def test_cores_merge_identically(text, cut):
    """Long texts of known, unknown and byte-fallback characters through both merge cores,
    with and without byte fallback and unknown fusing, in every cut mode; and CUT_WORDS gives
    the ids of CUT_NONE on a vocabulary that allows it (Mistral's)."""
    data = text.replace(" ", "▁").encode("utf-8", "surrogatepass")
    ms = _mergers()
    k = len(_MERGERS)
    for group in (ms[:k], ms[k::2], ms[k + 1::2]):
        results = [m.encode_text(data, cut) for m in group]
        assert all(r == results[0] for r in results)
        assert all(m.count_text(data, cut) == len(results[0]) for m in group)
    assert ms[0].encode_text(data, _spm_py.CUT_WORDS) == ms[0].encode_text(data, _spm_py.CUT_NONE)
