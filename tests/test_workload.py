import json

import pytest

from benchc.errors import PlanError
from benchc.plan.workload import build_prompts, draw_length, normalise_length, prompts_sha256

RANDOM = {"seed": 3, "input_tokens": {"kind": "fixed", "value": 40},
          "output_tokens": {"kind": "uniform", "min": 5, "max": 9}, "prefix_tokens": 10, "num_prompts": 20}


def test_random_prompts_are_deterministic_with_exact_word_counts():
    a, b = build_prompts("random", RANDOM), build_prompts("random", dict(RANDOM))
    assert a == b and prompts_sha256(a) == prompts_sha256(b)
    for p in a:
        assert len(p.text.split()) == p.input_tokens == 50
        assert 5 <= p.output_tokens <= 9
    prefix = a[0].text.split()[:10]
    assert all(p.text.split()[:10] == prefix for p in a)
    assert len({p.text for p in a}) == 20
    assert prompts_sha256(build_prompts("random", {**RANDOM, "seed": 4})) != prompts_sha256(a)


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
    ps = build_prompts("jsonl", {"path": "d.jsonl", "seed": 0, "num_prompts": 5}, str(tmp_path))
    assert [p.input_tokens for p in ps] == [3, 2, 3, 2, 3]  # cycled in order
    assert ps[1].messages == [{"role": "user", "content": "hi there"}]
    g = tmp_path / "sg.json"
    g.write_text(json.dumps([{"conversations": [{"from": "human", "value": "a b c d"},
                                                {"from": "gpt", "value": "x y"}]},
                             {"conversations": [{"from": "human", "value": "only"}]}]))
    ps = build_prompts("sharegpt", {"path": str(g), "seed": 0}, ".")
    assert [(p.text, p.input_tokens, p.output_tokens) for p in ps] == [("a b c d", 4, 2)]


def test_bad_jsonl_line_names_file_and_line(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text('{"prompt": "ok"}\n{"nope": 1}\n')
    with pytest.raises(PlanError, match=r"d.jsonl:2: each line needs exactly one of 'prompt' or 'messages'"):
        build_prompts("jsonl", {"path": str(f), "seed": 0}, ".")
