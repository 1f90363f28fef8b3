"""Prompt sources: fresh prompts from (seed, stream, index), the shared pool, files dealt
across a run with their reuse counted; length distributions; dataset files."""

import json
import tracemalloc

import pytest

from benchc.errors import PlanError
from benchc.plan.datasets import make_source
from benchc.plan.prompts import Deal, prompts_digest, step_digest
from benchc.plan.workload import draw_length, load_items, normalise_length

RANDOM = {"seed": 3, "input_tokens": {"kind": "fixed", "value": 40},
          "output_tokens": {"kind": "uniform", "min": 5, "max": 9}, "prefix_tokens": 10, "num_prompts": 20}


def test_fresh_random_prompts_are_unique_across_steps_but_the_declared_prefix():
    src = make_source("random", RANDOM, "fresh")
    again = make_source("random", dict(RANDOM), "fresh")
    prompts = [src.prompt(stream, i) for stream in range(4) for i in range(30)]
    assert prompts == [again.prompt(stream, i) for stream in range(4) for i in range(30)]
    assert len({p.text for p in prompts}) == 120  # 4 steps x 30 requests, no repeat
    prefix = prompts[0].text.split()[:10]
    for p in prompts:
        words = p.text.split()
        assert len(words) == p.input_tokens == 50 and 5 <= p.output_tokens <= 9
        assert words[:10] == prefix and p.shared_tokens == 10 and not p.reused
    # no two prompts share more than the prefix: they differ at the first word after it
    assert len({p.text.split()[10] for p in prompts}) == 120
    # built alone, in any order, the same prompt
    assert src.prompt(3, 29) == prompts[-1]
    assert make_source("random", {**RANDOM, "seed": 4}, "fresh").prompt(0, 0) != prompts[0]


def test_shared_prompts_repeat_the_pool_on_every_step_and_say_so():
    src = make_source("random", {**RANDOM, "num_prompts": 5}, "shared")
    first = [src.prompt(0, i) for i in range(5)]
    assert [p.reused for p in first] == [False] * 5
    # the pool goes round within a step
    assert [(p.text, p.reused) for p in (src.prompt(0, i) for i in range(5, 7))] == \
        [(first[0].text, True), (first[1].text, True)]
    # a later step sends the same prompts; what an earlier step sent is reused
    later = [src.prompt(7, i, Deal(seen=3)) for i in range(5)]
    assert [p.text for p in later] == [p.text for p in first]
    assert [p.reused for p in later] == [True, True, True, False, False]
    assert step_digest(src, 0, 12) == step_digest(src, 1, 12)


def test_a_file_is_dealt_across_the_run_and_its_reuse_counted(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text("".join(json.dumps({"prompt": f"prompt number {i}"}) + "\n" for i in range(5)))
    src = make_source("jsonl", {"path": "d.jsonl", "seed": 0, "num_prompts": None}, "fresh", str(tmp_path))
    assert src.pool_size == 5
    warm = [src.prompt(0, i) for i in range(2)]
    point = [src.prompt(1, i, Deal(start=2)) for i in range(4)]
    assert [p.text for p in warm + point] == [f"prompt number {i}" for i in (0, 1, 2, 3, 4, 0)]
    assert [p.reused for p in warm + point] == [False] * 5 + [True]
    # benchc adds nothing to a user's prompts, and cannot say what they share
    assert all(p.shared_tokens is None for p in warm + point[:3])
    assert step_digest(src, 1, 4) is None  # depends on what earlier steps took


def test_step_digests_cover_the_first_prompts_and_change_with_them():
    src = make_source("random", RANDOM, "fresh")
    d = step_digest(src, 2, 100)
    assert d == prompts_digest([src.prompt(2, i) for i in range(8)])
    assert d != step_digest(src, 3, 100)
    assert step_digest(src, 2, 3) == prompts_digest([src.prompt(2, i) for i in range(3)])


def test_a_million_request_plan_holds_no_prompt_bodies(tmp_path):
    """10^6 requests over 5 points: compiling costs the same memory as a small plan (each
    step's first 8 prompts are built for its digest, then dropped)."""
    from benchc.plan.compiler import compile_spec
    from benchc.spec import loader

    spec = tmp_path / "big.yaml"
    spec.write_text("""\
version: 1
name: big
target: {base_url: "http://127.0.0.1:9/v1", model: m}
workload:
  dataset:
    random: {input_tokens: 1k, output_tokens: 16}
load:
  sweep: {concurrency: [64, 128, 256, 512, 1024]}
  requests: 200000
""")
    loaded = loader.load(str(spec), env={})
    compile_spec(loaded)  # imports and caches, outside the measurement
    tracemalloc.start()
    plan = compile_spec(loaded)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert sum(s.requests for s in plan.load_steps()) == 10**6
    # 10^6 prompts of 1k words would be ~6 GB; the plan's own objects are a few hundred kB
    assert peak < 2 << 20, peak


def test_length_distributions():
    import random
    rng = random.Random(0)
    normal = normalise_length({"mean": "1k", "stdev": 100})
    xs = [draw_length(rng, normal) for _ in range(2000)]
    assert 980 < sum(xs) / len(xs) < 1020
    assert normalise_length("1K") == {"kind": "fixed", "value": 1024}
    assert draw_length(rng, {"kind": "normal", "mean": 1, "stdev": 50}) >= 1


def test_jsonl_and_sharegpt(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text('{"prompt": "one two three", "output_tokens": 5}\n\n'
                 '{"messages": [{"role": "user", "content": "hi there"}]}\n')
    ps = load_items("jsonl", {"path": "d.jsonl", "seed": 0, "num_prompts": None}, str(tmp_path))
    assert [p.input_tokens for p in ps] == [3, 2]
    assert ps[1].messages == [{"role": "user", "content": "hi there"}]
    g = tmp_path / "sg.json"
    g.write_text(json.dumps([{"conversations": [{"from": "human", "value": "a b c d"},
                                                {"from": "gpt", "value": "x y"}]},
                             {"conversations": [{"from": "human", "value": "only"}]}]))
    ps = load_items("sharegpt", {"path": str(g), "seed": 0}, ".")
    assert [(p.text, p.input_tokens, p.output_tokens) for p in ps] == [("a b c d", 4, 2)]


def test_bad_jsonl_line_names_file_and_line(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text('{"prompt": "ok"}\n{"nope": 1}\n')
    with pytest.raises(PlanError, match=r"d.jsonl:2: each line needs exactly one of 'prompt' or 'messages'"):
        load_items("jsonl", {"path": str(f), "seed": 0}, ".")


def test_a_shared_prefix_has_its_exact_length_whatever_its_first_word():
    """The prefix is the one text that starts with a word and no space before it: a word that
    is one token after a space may be two there ("university" is "un" "iversity" to
    DeepSeek-V3's tokenizer, the one a real vLLM served: seed 38's prefix of 64 could not be
    built, 13 seeds in 300 failed). Every seed builds it now, and a seed whose first word was
    one token anyway keeps its prefix."""
    from benchc.tokenizer.tokenizer import load
    from tests.tokenizer_fixtures import DEEPSEEK

    tok = load(DEEPSEEK)
    params = {"input_tokens": normalise_length(8), "output_tokens": normalise_length(2),
              "prefix_tokens": 64, "num_prompts": None}
    firsts = set()
    for seed in range(60):
        src = make_source("random", {**params, "seed": seed}, "fresh", ".", tok)
        assert tok.count(src.prefix) == 64, seed
        assert tok.count(src.prompt(0, 0).text) == 72
        firsts.add(src.prefix.split()[0])
    assert all(tok.count(w) == 1 for w in firsts)
    # seed 0's first word was one token already: its prefix is the one benchc always built
    seed0 = make_source("random", {**params, "seed": 0}, "fresh", ".", tok)
    assert seed0.prefix.startswith("or each its young national")
    groups = make_source("prefix_groups", {**params, "seed": 38, "groups": 3,
                                           "suffix_tokens": normalise_length(8)}, "fresh", ".", tok)
    assert [tok.count(p) for p in groups.prefixes] == [64] * 3
