"""`benchc run` replays coding-agent traces (plan/shapes.AgentReplay, its driver in
run/agent_replay.py): the shipped specs/agent-traces.yaml on the embedded simulator (a real
subprocess on loopback, the ground truth for the tokens it counted and the blocks it found
cached), on both cores (BENCHC_NO_EXTENSIONS=1 forces the twins) and both HTTP paths (the own
reader, aiohttp). Every request of the sample is sent once with the trace's `in` tokens (the
simulator's count) and answered with `out`, its cached tokens the hash ids' prediction within
a block; no subagent request before its spawn, no parent request before its subagents ended;
at most `concurrency` sessions in flight; a verdict out of band is a doubt, `--strict` exits 6."""

import json
import os
import re
import subprocess
import sys

import pytest

from benchc.errors import EXIT_UNTRUSTED, EXIT_USAGE
from benchc.plan.agent_trace import predicted_cached_tokens, read_agent_traces

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = os.path.join(REPO, "specs", "agent-traces.yaml")
SAMPLE = os.path.join(REPO, "specs", "traces", "agentx-small")
BLOCK = 16  # the sample's block, and the simulator's


def run(tmp_path, *args, core="c", http="native"):
    """`benchc run` of the shipped spec in a process of its own (the core is chosen at import)."""
    out = tmp_path / f"{core}-{http}.json"
    env = {**os.environ, "BENCHC_NO_EXTENSIONS": "1" if core == "py" else ""}
    p = subprocess.run([sys.executable, "-m", "benchc", "run", SPEC, "--out", str(out), "--quiet",
                        "--http", http, "--set", "output.requests=true", "--force", *args],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    return p, out


@pytest.fixture(scope="module")
def traced():
    sessions = list(read_agent_traces(SAMPLE))
    reqs = [r for s in sessions for r in s.requests()]
    return sessions, reqs


@pytest.mark.parametrize("core,http", [("c", "native"), ("c", "aiohttp"), ("py", "native"),
                                       ("py", "aiohttp")])
def test_the_shipped_spec_replays_every_request_as_traced(tmp_path, traced, core, http):
    sessions, reqs = traced
    p, out = run(tmp_path, core=core, http=http)
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["core"] == ("python" if core == "py" else "cython")
    assert doc["environment"]["http_client"] == http
    (point,) = doc["points"]
    assert point["id"] == "sessions c=2" and point["params"]["concurrency"] == 2
    records = [json.loads(line) for line in (tmp_path / doc["requests_file"]).read_text().splitlines()]
    records = [r for r in records if "prompt_index" in r]
    # every traced request sent once, answered with the trace's `out` (the simulator's count)
    assert len(records) == len(reqs) == 149
    # each request's id (its x-request-id) names the trace request it replays: its session's
    # place and its JSON path, each traced request once
    named = [re.fullmatch(r"[0-9a-f]{32}-s(\d+)(\$\..+)", r["id"]) for r in records]
    assert all(named) and all(int(m.group(1)) == r["session"] for m, r in zip(named, records, strict=True))
    assert sorted((int(m.group(1)), m.group(2)) for m in named) == sorted(
        (j, r.path) for j, s in enumerate(sessions) for r in s.requests())
    assert sorted(r["output_tokens"] for r in records) == sorted(r.output_tokens for r in reqs)
    assert sum(r["sub_request"] for r in records if "sub_request" in r) == sum(
        len(e.requests) for s in sessions for e in s.entries if hasattr(e, "agent_id"))
    # a session's own requests, by turn: the cached tokens the simulator found are what the hash
    # ids predict (never a whole prompt: it computes a prompt's last token again, a block less)
    own = {(r["session"], r["turn"]): r for r in records if "turn" in r}
    for j, s in enumerate(sessions):
        pred = predicted_cached_tokens(s)
        for k, e in enumerate((e for e in s.entries if not hasattr(e, "agent_id")), 1):
            r = own[(j, k)]
            assert r["output_tokens"] == e.output_tokens and r["error"] is None, e.path
            assert 0 <= pred[e.path] - r["cached_tokens"] <= BLOCK, e.path
    v = point["agent_replay"]["fidelity"]
    assert (v["requests"], v["requests_traced"]) == (149, 149)
    assert (v["input_tokens_off"], v["output_tokens_off"]) == (0, 0)  # the simulator's counts: in, out
    assert (v["subagent_before_spawn"], v["parent_before_join"]) == (0, 0)
    assert v["cache_reported"] == 149 and v["cache_off_by_more_than_a_block"] == 0
    assert -BLOCK <= v["cache_diff_tokens"]["min"] <= v["cache_diff_tokens"]["max"] <= 0
    assert v["think_late_ms"]["min"] >= 0  # never sent before its think time ended
    assert v["subagents_at_once"]["traced"] >= 2 and v["subagents_at_once"]["replayed"] >= 1
    # on this shared machine the think times may be late past the 1 ms band: that warning only
    assert all(w.startswith("think times: ") for w in v["warnings"])
    # at most 2 sessions in flight, and at some point 2
    spans = {}
    for r in records:
        a, b = spans.get(r["session"], (r["t0_ns"], r["t0_ns"]))
        spans[r["session"]] = (min(a, r["t0_ns"]), max(b, r["t0_ns"] + round(r["e2e_us"] * 1000)))
    edges = sorted([(a, 1) for a, _ in spans.values()] + [(b, -1) for _, b in spans.values()])
    held = most = 0
    for _, step in edges:
        held += step
        most = max(most, held)
    assert len(spans) == 6 and most == 2
    # the steady state: from when 2 sessions were in flight to the first end after the last
    # session (the 6th, issued as the 4th of the others ended) started. Bounded by what caused
    # what, not by times: each request of the 3 sessions that ended first is in it, and none of
    # the last session's is (each ended after it started)
    steady = point["steady"]
    tokens = {j: sum(r["output_tokens"] for r in records if r["session"] == j) for j in spans}
    first_ended = sorted((end, j) for j, (_, end) in spans.items() if j != 5)[:3]
    least = sum(tokens[j] for _, j in first_ended)
    assert 0 < least <= steady["output_tokens"] <= sum(tokens.values()) - tokens[5]
    assert steady["duration_s"] > 0 and steady["decoded_tokens"] > 0
    if steady["output_tok_s"] is not None:  # None only where the span was under 50 ms
        rate = steady["output_tokens"] / steady["duration_s"]
        assert steady["output_tok_s"] == pytest.approx(rate, rel=1e-5)
    figures = point["agent_replay"]["sessions"]
    assert [f["id"] for f in figures] == [s.id for s in sessions]
    for f in figures:  # TTFT and E2E by turn depth and context bucket
        turns = [str(k) for k in range(1, f["turns"] + 1)]
        assert list(f["ttft_ms_by_turn"]) == list(f["e2e_ms_by_turn"]) == turns
        assert list(f["ttft_ms_p50_by_context"]) == list(f["e2e_ms_p50_by_context"]) == ["0-8k"]
        assert all(0 < f["ttft_ms_by_turn"][k] <= f["e2e_ms_by_turn"][k] for k in turns)
    assert [(f["turns"], f["requests"]) for f in figures] == [
        (sum(not hasattr(e, "agent_id") for e in s.entries), len(s.requests())) for s in sessions]


def test_sessions_at_a_rate_and_on_their_own_times(tmp_path, traced):
    p, out = run(tmp_path, "--set", "load.sweep={rate: [50]}", "--set", "load.sessions=2")
    assert p.returncode == 0, p.stderr
    (point,) = json.loads(out.read_text())["points"]
    assert point["id"] == "sessions rate=50/s" and point["params"]["arrival"] == "poisson"
    assert point["params"]["sessions"] == 2
    v = point["agent_replay"]["fidelity"]
    assert v["requests"] == v["requests_traced"] == sum(len(s.requests()) for s in traced[0][:2])
    p, out = run(tmp_path, "--set", "load.sweep={speedup: [1.0]}", "--set", "load.sessions=3")
    assert p.returncode == 0, p.stderr
    (point,) = json.loads(out.read_text())["points"]
    assert point["id"] == "speedup=1" and point["params"]["arrival"] == "trace"
    assert point["agent_replay"]["sessions_replayed"] == 3


def test_the_traces_model_is_mapped_to_a_served_one(tmp_path):
    # the sample's requests name model "agentx": mapped to one the simulator does not serve, the
    # requests are refused by that name (404), and the point stops (run/deadserver.py)
    p, out = run(tmp_path, "--set", "workload.dataset.agent_trace.models={agentx: not-served}",
                 "--set", "load.sessions=1")
    (point,) = json.loads(out.read_text())["points"]
    assert point["counts"]["completed"] == 0 and list(point["counts"]["errors"]) == ["http_status"]
    assert "The model `not-served` does not exist" in point["counts"]["error_examples"]["http_status"]
    p, out = run(tmp_path, "--set", "workload.dataset.agent_trace.models={agentx: benchc-sim}",
                 "--set", "load.sessions=1")
    assert p.returncode == 0, p.stderr
    (point,) = json.loads(out.read_text())["points"]
    assert point["counts"]["errors"] == {} and point["agent_replay"]["fidelity"]["input_tokens_off"] == 0


def test_a_replay_off_its_trace_is_a_doubt_and_strict_exits_6(tmp_path):
    # every answer cut to 4 tokens: each request's output differs from the trace's `out`
    p, out = run(tmp_path, "--set", "workload.sampling.max_tokens=4", "--set", "load.sessions=1", "--strict")
    assert p.returncode == EXIT_UNTRUSTED, p.stderr
    (point,) = json.loads(out.read_text())["points"]
    warnings = point["agent_replay"]["fidelity"]["warnings"]
    assert any(w.startswith("output tokens: ") and "differ from the trace's out (first $.requests[0])" in w
               for w in warnings), warnings
    assert point["trust"]["trusted"] is False
    # the server's output lengths doubt on their own too (output_length); the replay's names its figure
    assert [d["check"] for d in point["trust"]["doubts"]] == ["output_length", "agent_replay"]
    assert "the replay did not keep to its trace: output tokens: " in p.stderr
    assert "Traceback" not in p.stderr


def test_load_keys_a_replay_does_not_take_are_named(tmp_path, capsys):
    from benchc.cli import main

    assert main(["validate", SPEC, "--set", "load.requests=10"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert ("$.load.requests: every point replays the trace's sessions once; choose how many with "
            "load.sessions, not load.requests") in err
    assert main(["validate", SPEC, "--set", "load.sweep={users: [2], turn_interval: 1s}"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "$.load.sweep.users: a coding-agent replay starts sessions at a concurrency" in err
    assert main(["validate", SPEC, "--set", "target.api=completions"]) == EXIT_USAGE
    assert ("workload.dataset.agent_trace: a coding-agent replay sends each request as one chat message of "
            "exactly its `in` tokens: it needs target.api: chat, not completions") in capsys.readouterr().err
    assert main(["validate", SPEC, "--set", "load.warmup={requests: 2}"]) == EXIT_USAGE
    assert ("$.load.warmup: no warm-up runs before a coding-agent replay: it would put the sessions' blocks "
            "in the server's cache before they are measured") in capsys.readouterr().err


@pytest.mark.real
def test_benchc_run_replays_two_sessions_on_a_real_vllm(tmp_path, vllm):
    """Two sample sessions (56 requests, 9 subagents) by `benchc run` on the real vLLM with its
    tokenizer and chat template: no error, input and output tokens as its usage counts them the
    trace's, cached tokens within one of its KV blocks of the prediction (its CPU build's
    32-token blocks are coarser than the sample's 16: kv_block says so)."""
    spec = real_vllm_agent_spec(tmp_path, vllm)
    assert vllm.prompt_details
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "benchc", "run", spec, "--out", str(out), "--quiet"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert p.returncode == 0, p.stderr
    (point,) = json.loads(out.read_text())["points"]
    v = assert_replayed_as_traced_on_vllm(point, vllm)
    print("real vLLM:", json.dumps(v))


def real_vllm_agent_spec(tmp_path, vllm) -> str:
    """A spec replaying two sample sessions (56 requests, 9 subagents) on the real vLLM with its
    tokenizer and chat template, written in tmp_path (skipped where the served model's folder is
    not on this machine); its path."""
    from tests.vllm_server import VLLMSERVER_DIR

    model_dir = os.path.join(VLLMSERVER_DIR, "model")
    if not os.path.exists(os.path.join(model_dir, "tokenizer_config.json")):
        pytest.skip(f"the served model's folder ({model_dir}) is not on this machine")
    spec = tmp_path / "agent-real.yaml"
    spec.write_text(f"version: 1\nname: agent-real\ntarget:\n  base_url: {vllm.base_url}\n"
                    f"  model: {vllm.model}\n  api: chat\n  tokenizer: {model_dir}\n"
                    "workload:\n  dataset:\n    agent_trace:\n"
                    f"      path: {SAMPLE}\n      time_scale: 0.001\n      kv_block: {vllm.block_size}\n"
                    "  sampling: {temperature: 0}\nload:\n  sweep: {concurrency: [2]}\n  sessions: 2\n")
    return str(spec)


def assert_replayed_as_traced_on_vllm(point: dict, vllm) -> dict:
    """real_vllm_agent_spec's point followed its trace: no error of any kind, every request's
    input and output tokens as the server's usage counts them the trace's, no subagent before
    its spawn or parent before its join, cached tokens within one of vLLM's KV blocks under the
    prediction; its fidelity block."""
    assert point["counts"]["errors"] == {}  # none, of any kind
    v = point["agent_replay"]["fidelity"]
    assert (v["requests"], v["requests_traced"]) == (56, 56)
    assert (v["input_tokens_off"], v["output_tokens_off"]) == (0, 0)  # as the server's usage counts them
    assert (v["subagent_before_spawn"], v["parent_before_join"]) == (0, 0)
    assert v["cache_reported"] == 56 and v["cache_off_by_more_than_a_block"] == 0
    assert -vllm.block_size <= v["cache_diff_tokens"]["min"] <= v["cache_diff_tokens"]["max"] <= 0
    return v


def test_what_benchc_run_imports_before_its_first_request_leaves_numpy_out():
    """numpy is a tenth of a second of `benchc run`'s start: the modules cmd_run imports to
    compile and run a plan (the tokenizer's loaders among them) import it only where used."""
    code = ("import sys, benchc.cli, benchc.spec.loader, benchc.plan.compiler, benchc.run.runner, "
            "benchc.run.secrets, benchc.tokenizer.tokenizer; print('numpy' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout.strip() == "False"
