"""GGUF tokenizers: files written here with the `gguf` package (llama.cpp's writer) from a
tokenizer.json (gpt2 kind) and from a SentencePiece .model (llama kind) give the ids of what
they were written from; benchc's metadata reader agrees with the `gguf` package's reader."""

import os

import pytest

from benchc.errors import UsageError
from benchc.tokenizer import tokenizer as T
from benchc.tokenizer._gguf_reader import read_metadata
from tests.tokenizer_fixtures import (
    CORES,
    DEEPSEEK,
    MISTRAL_V3,
    corpus,
    gguf_from_sentencepiece,
    gguf_from_tokenizer_json,
)

gguf = pytest.importorskip("gguf")
spm = pytest.importorskip("sentencepiece")
from tokenizers import Tokenizer as HF  # noqa: E402

pytestmark = pytest.mark.slow  # the gguf package writes and reads the fixtures

CORPUS = corpus()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("gguf")
    return {"bpe": gguf_from_tokenizer_json(DEEPSEEK, str(d / "deepseek.gguf"), "deepseek-v3"),
            "spm": gguf_from_sentencepiece(MISTRAL_V3, str(d / "mistral.gguf"))}


@pytest.mark.parametrize("core", CORES)
def test_a_gguf_of_the_gpt2_kind_gives_the_ids_of_its_tokenizer_json(files, core):
    ours, hf = T.load(files["bpe"], core), HF.from_file(DEEPSEEK)
    assert ours.kind == "GGUF gpt2 (byte-level BPE, pre-tokenizer deepseek-v3)"
    assert ours.pretokenizer == ("scanner" if core == "cython" else "regex")
    for text in CORPUS:
        ids = hf.encode(text, add_special_tokens=False).ids
        assert ours.encode(text) == ids, text[:60]


@pytest.mark.parametrize("core", CORES)
def test_a_gguf_of_the_llama_kind_gives_the_ids_of_its_model(files, core):
    ours, ref = T.load(files["spm"], core), spm.SentencePieceProcessor(model_file=MISTRAL_V3)
    assert ours.kind == "GGUF llama (SentencePiece BPE)"
    for text in CORPUS:  # no control token spelled in these texts: llama.cpp matches them, sentencepiece not
        assert ours.encode(text) == ref.encode(text), text[:60]
    # control tokens are matched in text as llama.cpp's server does, and never split
    assert ours.encode("[INST]hi[/INST]") == [3, *ref.encode("hi"), 4]


def test_the_reader_agrees_with_the_gguf_package(files, tmp_path):
    """Every value type, and a real tokenizer's arrays (the llama kind's: 32k pieces)."""
    w = gguf.GGUFWriter(str(tmp_path / "types.gguf"), arch="llama")
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -5)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4_000_000_000)
    w.add_int32("t.i32", -2_000_000_000)
    w.add_float32("t.f32", 1.5)
    w.add_uint64("t.u64", 2**63)
    w.add_int64("t.i64", -(2**62))
    w.add_float64("t.f64", -0.25)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo ▁ 中")
    w.add_array("t.ints", [1, 2, 3])
    w.add_array("t.strs", ["a", "▁b", ""])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    for path in (str(tmp_path / "types.gguf"), files["spm"]):
        with open(path, "rb") as f:
            ours, raw = read_metadata(f)
        theirs = gguf.GGUFReader(path)
        keys = [k for k in theirs.fields if not k.startswith("GGUF.")]
        assert sorted(ours) == sorted(keys)
        for key in keys:
            assert ours[key] == pytest.approx(theirs.fields[key].contents()), key
        assert len(raw) <= os.path.getsize(path)


def test_what_is_not_built_yet_is_refused(tmp_path):
    w = gguf.GGUFWriter(str(tmp_path / "odd.gguf"), arch="llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("starcoder")
    w.add_token_list(["a", "b"])
    w.add_token_types([1, 1])
    w.add_token_merges([])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(UsageError, match="pre-tokenizer 'starcoder' is not supported yet"):
        T.load(str(tmp_path / "odd.gguf"))
    (tmp_path / "none.gguf").write_bytes(b"GGUF" + (3).to_bytes(4, "little") + bytes(16))
    with pytest.raises(UsageError, match="carries no tokenizer"):
        T.load(str(tmp_path / "none.gguf"))
    (tmp_path / "cut.gguf").write_bytes(b"GGUF" + (3).to_bytes(4, "little") + bytes(3))
    with pytest.raises(UsageError, match="truncated"):
        T.load(str(tmp_path / "cut.gguf"))
