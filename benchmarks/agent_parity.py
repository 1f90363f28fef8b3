"""Parity with AIPerf on coding-agent traces: the cache hit each request's hash ids predict, as
AIPerf's Weka loader computes it and as benchc does, against what the simulator (its prefix
cache keyed by the same blocks: its block size set to the trace's) reports when benchc replays
the same files. Not in CI: it needs AIPerf's source (Apache-2.0), e.g.

    pip download --no-deps aiperf -d /tmp/aiperf && unzip -q /tmp/aiperf/aiperf-*.whl -d /tmp/aiperf/x
    python benchmarks/agent_parity.py --aiperf /tmp/aiperf/x [TRACE ...]

Only AIPerf's pure pre-pass is loaded (aiperf/dataset/loader/weka_metric_prepass.py:
compute_shared_prefix_cache_metrics, one seen-set per trace file in time order); its replayer
is not run here (its install and its own load generator are beyond this harness), so the
comparison is of the prediction, and of each against the simulator's count. Per trace: the
requests, those where the two predictions differ, and for each prediction the requests where
the simulator's cached tokens equal it. Without TRACE: the shipped sample and a session that
re-sends an earlier request's partial last block (published captures can; benchc's generator
never does).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

# block size 4: request 1's last block (id 5) holds 2 of its 4 tokens; request 2 re-sends it whole
PARTIAL = {
    "id": "partial", "models": ["m"], "block_size": 4, "hash_id_scope": "local", "requests": [
        {"t": 0.0, "type": "n", "in": 10, "out": 2, "hash_ids": [1, 2, 3], "api_time": 0.1},
        {"t": 1.0, "type": "n", "in": 14, "out": 2, "hash_ids": [1, 2, 4, 5], "api_time": 0.1},
        {"t": 2.0, "type": "n", "in": 20, "out": 2, "hash_ids": [1, 2, 4, 5, 6], "api_time": 0.1}]}


def aiperf_prediction(aiperf_dir: str, session) -> dict[str, int]:
    """AIPerf's predicted hit per request (by JSON path), in tokens: its hit blocks times the
    block size, at most the request's input."""
    from benchc.plan.agent_trace import Subagent

    path = os.path.join(aiperf_dir, "aiperf", "dataset", "loader", "weka_metric_prepass.py")
    spec = importlib.util.spec_from_file_location("weka_metric_prepass", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["weka_metric_prepass"] = mod
    spec.loader.exec_module(mod)
    records, paths = [], {}
    for outer, e in enumerate(session.entries):
        reqs = [(e.agent_id, k, r) for k, r in enumerate(e.requests)] if isinstance(e, Subagent) \
            else [("", outer, e)]
        for sid, k, r in reqs:
            records.append(mod.MetricRecord((r.t_s, outer, 0, k), sid, k, list(r.hash_ids)))
            paths[(sid, k)] = r
    hits = mod.compute_shared_prefix_cache_metrics(records)
    return {r.path: min(hits[key][0] * session.block_size, r.input_tokens) for key, r in paths.items()}


def sim_cached(sessions, block_size: int) -> list[dict[str, int]]:
    """The simulator's cached tokens per request when benchc replays the sessions."""
    import aiohttp

    from benchc.plan.agent_trace_prompts import AgentTracePrompts
    from benchc.run.agent_replay import Answer, replay_sessions
    from tests.simrun import Sim

    with tempfile.TemporaryDirectory() as tmp:
        sim = Sim(Path(tmp), "--preset", "instant", "--param", f"block_size={block_size}")
        prompts = AgentTracePrompts(seed=1)

        async def main():
            async with aiohttp.ClientSession() as http:
                def preparer(i):
                    return lambda req: {"model": "benchc-sim", "max_tokens": req.output_tokens, "messages": [
                        {"role": "user", "content": prompts.text(sessions[i], i, req)}]}

                async def send(req, body):
                    async with http.post(sim.url + "/chat/completions", json=body) as r:
                        usage = (await r.json())["usage"]
                    return Answer(usage["prompt_tokens"], usage["completion_tokens"],
                                  usage["prompt_tokens_details"]["cached_tokens"])
                return await replay_sessions(sessions, preparer, send, time_scale=0.0)

        try:
            replay = asyncio.run(main())
        finally:
            sim.close()
    return [{x.path: x.answer.cached_tokens for x in sent} for sent in replay.sessions]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aiperf", required=True, help="a folder holding AIPerf's source (aiperf/dataset/...)")
    ap.add_argument("traces", nargs="*")
    args = ap.parse_args(argv)
    from benchc.plan.agent_trace import predicted_cached_tokens, read_agent_traces

    with tempfile.TemporaryDirectory() as tmp:
        traces = args.traces
        if not traces:
            partial = Path(tmp) / "partial.json"
            partial.write_text(json.dumps(PARTIAL))
            traces = [os.path.join(REPO, "specs", "traces", "agentx-small"), str(partial)]
        for trace in traces:
            sessions = list(read_agent_traces(trace))
            for bs in sorted({s.block_size for s in sessions}):
                group = [s for s in sessions if s.block_size == bs]
                measured = sim_cached(group, bs)
                n = differ = ai_ok = ours_ok = 0
                for s, got in zip(group, measured, strict=True):
                    ours, theirs = predicted_cached_tokens(s), aiperf_prediction(args.aiperf, s)
                    for path, cached in got.items():
                        n += 1
                        differ += ours[path] != theirs[path]
                        ai_ok += theirs[path] == cached
                        ours_ok += ours[path] == cached
                print(f"{os.path.basename(trace)} (block {bs}): {n} requests, predictions differ on "
                      f"{differ}; "
                      f"the simulator's cached tokens equal AIPerf's on {ai_ok}, benchc's on {ours_ok}")


if __name__ == "__main__":
    main()
