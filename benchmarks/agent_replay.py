"""Coding-agent traces at the AgentX manifest's scale: what reading a set costs, and the client
CPU to build its longest request's prompt (the replay itself waits for the load-shape types).

    python benchmarks/agent_replay.py [--sessions 1000] [--repeats 5]

1. `--sessions` sessions drawn with the AgentX manifest's parameters (contexts to 200k
   tokens, plan/agent_trace_gen.AGENTX) written as one .jsonl, then read and checked
   (plan/agent_trace.read_agent_traces) in a fresh process: seconds to read the whole set,
   seconds to the first session (what a replay's first request would wait for), and the
   process's peak resident memory (VmHWM) holding every session.
2. The set's longest request (up to 200k tokens): the CPU time (time.process_time) to build
   its prompt text (plan/agent_trace_prompts.py, no tokenizer: one word a token), the first
   time (every block drawn) and again (its blocks cached, as a session's next turn finds
   them); medians of `--repeats`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

READ = """
import json, sys, time
t0 = time.perf_counter()
from benchc.plan.agent_trace import read_agent_traces
first = None
sessions = []
for s in read_agent_traces(sys.argv[1]):
    if first is None:
        first = time.perf_counter() - t0
    sessions.append(s)
total = time.perf_counter() - t0
hwm = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM"))
print(json.dumps({"first_s": first, "all_s": total, "sessions": len(sessions), "hwm_kib": hwm,
                  "requests": sum(len(s.requests()) for s in sessions)}))
"""


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    from benchc.plan.agent_trace import read_agent_traces
    from benchc.plan.agent_trace_gen import AGENTX, write_sessions
    from benchc.plan.agent_trace_prompts import AgentTracePrompts

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "agentx.jsonl"
        t0 = time.perf_counter()
        write_sessions(path, AGENTX, args.sessions, seed=0)
        print(f"generated {args.sessions} sessions in {time.perf_counter() - t0:.1f} s, "
              f"{os.path.getsize(path) / 2**20:.0f} MiB")
        reads = []
        for _ in range(args.repeats):
            out = subprocess.run([sys.executable, "-c", READ, str(path)], capture_output=True, text=True,
                                 check=True)
            reads.append(json.loads(out.stdout))
        med = {k: statistics.median(r[k] for r in reads) for k in ("first_s", "all_s", "hwm_kib")}
        print(f"read and checked: {reads[0]['sessions']} sessions, {reads[0]['requests']} requests; first "
              f"session after {med['first_s'] * 1000:.0f} ms, all after {med['all_s']:.1f} s, peak RSS "
              f"{med['hwm_kib'] / 1024:.0f} MiB (medians of {args.repeats})")
        longest = None
        for i, s in enumerate(read_agent_traces(path)):
            for r in s.requests():
                if longest is None or r.input_tokens > longest[2].input_tokens:
                    longest = (i, s, r)
        assert longest is not None
        i, s, r = longest
        cold, warm = [], []
        for k in range(args.repeats):
            prompts = AgentTracePrompts(seed=k)
            c0 = time.process_time()
            text = prompts.text(s, i, r)
            c1 = time.process_time()
            prompts.text(s, i, r)
            c2 = time.process_time()
            assert len(text.split()) == r.input_tokens
            cold.append(c1 - c0)
            warm.append(c2 - c1)
        print(f"longest request: {r.input_tokens:,} tokens; its prompt built in "
              f"{statistics.median(cold) * 1000:.1f} ms of CPU (blocks drawn), "
              f"{statistics.median(warm) * 1000:.1f} ms (blocks cached), medians of {args.repeats}")


if __name__ == "__main__":
    main()
