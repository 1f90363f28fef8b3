"""Coding-agent traces at the AgentX manifest's scale: what reading a set costs, the client
CPU to build its longest request's prompt, and (--run) `benchc run` of the set end to end.

    python benchmarks/agent_replay.py [--sessions 1000] [--repeats 5] [--run [--replay 8]]

1. `--sessions` sessions drawn with the AgentX manifest's parameters (contexts to 200k
   tokens, plan/agent_trace_gen.AGENTX) written as one .jsonl, then read and checked
   (plan/agent_trace.read_agent_traces) in a fresh process: seconds to read the whole set,
   seconds to the first session (what a replay's first request would wait for), and the
   process's peak resident memory (VmHWM) holding every session.
2. The set's longest request (up to 200k tokens): the CPU time (time.thread_time) to build
   its prompt's JSON text (plan/agent_trace_prompts.AgentTracePrompts.content, no tokenizer:
   one word a token), the first time (every block drawn) and again (its blocks cached, as a
   session's next turn finds them); medians of `--repeats`.
3. With --run: `benchc run` of a spec replaying the set on the embedded simulator (4 sessions
   in flight, its max_model_len 262,144, think times at 1e-5 of the trace's, capped at 1 ms),
   in a process of its own, `--repeats` times: seconds from the process's launch to its first
   request's send (the requests file's t0_ns: perf_counter_ns, CLOCK_MONOTONIC, the launcher's
   clock too) and the CPU the benchc process had used by then, the run's peak client RSS
   (VmHWM of the benchc process at its exit; the simulator is a process of its own), and its
   wall time; benchc's modules compiled to bytecode first, as an installed benchc has them.
   The whole set is read and checked before the first request; `--replay` sessions of it
   (load.sessions, the first N) are replayed, since replaying all 48,000 requests of up to
   200k tokens takes hours of this machine.
   Then, in this process, the client CPU (time.thread_time of the one thread that does it) to
   build the longest request's body through the run's own feed (run/agent_replay.AgentFeed:
   prompt, API body, JSON) and send it whole over a local socket (sendall; a drain thread
   reads it), its blocks drawn and cached; medians of `--repeats`.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
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
cpu = time.process_time()  # the interpreter's start and imports too
hwm = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM"))
print(json.dumps({"first_s": first, "all_s": total, "cpu_s": cpu, "sessions": len(sessions), "hwm_kib": hwm,
                  "requests": sum(len(s.requests()) for s in sessions)}))
"""

# `benchc run` in this process, its peak RSS written at exit (the simulator is a child of its own)
# beside the CPU time the process had used when its first request went (imports, the plan, the
# trace read and checked, the first bodies: the part of the time to the first request that a
# busy machine does not stretch)
RUN = """
import atexit, json, runpy, sys, time
from benchc.run import loadgen
out, cpu = sys.argv[1], []
measured = loadgen.StepRun.measured
async def first(self, *a, **k):
    if not cpu:
        cpu.append(time.process_time())
    return await measured(self, *a, **k)
loadgen.StepRun.measured = first
def hwm():
    kib = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM"))
    open(out, "w").write(json.dumps({"hwm_kib": kib, "first_cpu_s": cpu[0] if cpu else None}))
atexit.register(hwm)
sys.argv = ["benchc", *sys.argv[2:]]
runpy.run_module("benchc", run_name="__main__")
"""

SPEC = """version: 1
name: agentx-scale
target: {{sim: {{preset: instant, max_model_len: 262144}}, api: chat, model: benchc-sim}}
workload:
  dataset:
    agent_trace: {{path: {path}, time_scale: 0.00001, max_think: 1ms}}
load:
  sessions: {replay}
  sweep: {{concurrency: [4]}}
output: {{path: {out}, requests: true}}
"""


def load() -> str:
    """The machine's load: these figures are wall times and CPU times on a shared machine."""
    one, five, _ = os.getloadavg()
    return f"load {one:.1f} (5 min {five:.1f}) on {os.cpu_count()} CPUs"


def run_end_to_end(path: Path, tmp: Path, replay: int, repeats: int) -> None:
    """`benchc run` of the set: time to its first request, peak client RSS, wall time."""
    spec = tmp / "agentx.yaml"
    spec.write_text(SPEC.format(path=path, replay=replay, out=tmp / "result.json"))
    # benchc's modules as an installed benchc has them, compiled to bytecode: under
    # PYTHONDONTWRITEBYTECODE (set where these figures were first taken) a run compiled a hundred
    # of them from source every time, a tenth of a second or more before its first request
    import benchc

    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.dirname(benchc.__file__)], check=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    runs = []
    for k in range(repeats):
        hwm, out = tmp / f"hwm{k}", tmp / f"result{k}.json"  # each run its own requests file
        t0 = time.perf_counter_ns()
        p = subprocess.run([sys.executable, "-c", RUN, str(hwm), "run", str(spec), "--quiet", "--force",
                            "--out", str(out)],
                           capture_output=True, text=True, cwd=tmp, env=env)
        wall = (time.perf_counter_ns() - t0) / 1e9
        if p.returncode not in (0, 6):  # 6: a doubt (think times late on a busy machine)
            raise SystemExit(f"benchc run exited {p.returncode}: {p.stderr[-2000:]}")
        doc = json.loads(out.read_text())
        recs = [json.loads(line) for line in (tmp / doc["requests_file"]).read_text().splitlines()]
        sends = [r["t0_ns"] for r in recs if r.get("t0_ns") and r.get("run_id") == doc["run_id"]]
        errors = sum(r.get("error") is not None for r in recs)
        at_exit = json.loads(hwm.read_text())
        runs.append({"first_s": (min(sends) - t0) / 1e9, "hwm_kib": at_exit["hwm_kib"], "wall_s": wall,
                     "first_cpu_s": at_exit["first_cpu_s"], "requests": len(sends), "errors": errors,
                     "exit": p.returncode})
    med = {k: statistics.median(r[k] for r in runs) for k in ("first_s", "first_cpu_s", "hwm_kib", "wall_s")}
    each = ", ".join(f"{r['first_s']:.2f}" for r in runs)
    print(f"benchc run: first request {med['first_s']:.2f} s after launch ({med['first_cpu_s']:.2f} s of the "
          f"benchc process's CPU by then; each: {each} s), peak client RSS {med['hwm_kib'] / 1024:.0f} MiB, "
          f"{med['wall_s']:.1f} s wall, {runs[0]['requests']} requests of {replay} sessions replayed, "
          f"{sum(r['errors'] for r in runs)} errors, exit {sorted({r['exit'] for r in runs})} (medians of "
          f"{repeats}; {load()})")
    build_and_send(spec, repeats)


def build_and_send(spec: Path, repeats: int) -> None:
    """The client CPU to build the set's longest request's body as the run does and send it."""
    from benchc.plan.compiler import compile_spec
    from benchc.run.agent_replay import AgentFeed
    from benchc.run.prepare import prepare
    from benchc.spec import loader

    plan = compile_spec(loader.load(str(spec), env={}))
    combo, step = plan.combinations[0], plan.steps[0]
    prepared = prepare(plan, combo)
    feed = AgentFeed(prepared.source, combo, step, prepared.tokenizer, prepared.template)
    j, req = max(((j, r) for j, s in enumerate(feed.sessions) for r in s.requests()),
                 key=lambda x: x[1].input_tokens)
    a, b = socket.socketpair()

    def drain() -> None:
        while b.recv(1 << 20):
            pass

    drained = threading.Thread(target=drain, daemon=True)
    drained.start()
    cold, warm = [], []
    for k in range(repeats):
        feed.prompts = prepared.source.prompts(prepared.tokenizer, prepared.template)  # no block built yet
        feed.stream = k
        for into in (cold, warm):
            c0 = time.thread_time()
            body = feed.body(j, req)
            a.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            into.append(time.thread_time() - c0)
    a.close()
    drained.join()
    print(f"build and send its longest request ({req.input_tokens:,} tokens, {len(body) / 2**20:.1f} MiB "
          f"body): {statistics.median(cold) * 1000:.1f} ms of client CPU (blocks drawn), "
          f"{statistics.median(warm) * 1000:.1f} ms (blocks cached), medians of {repeats} ({load()})")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--run", action="store_true", help="also `benchc run` the set on the simulator")
    ap.add_argument("--replay", type=int, default=8, help="sessions --run replays (load.sessions)")
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
        med = {k: statistics.median(r[k] for r in reads) for k in ("first_s", "all_s", "cpu_s", "hwm_kib")}
        print(f"read and checked: {reads[0]['sessions']} sessions, {reads[0]['requests']} requests; first "
              f"session after {med['first_s'] * 1000:.0f} ms, all after {med['all_s']:.2f} s "
              f"({med['cpu_s']:.2f} s of CPU, the process's start included), peak RSS "
              f"{med['hwm_kib'] / 1024:.0f} MiB (medians of {args.repeats}; {load()})")
        longest = None
        for i, s in enumerate(read_agent_traces(path)):
            for r in s.requests():
                if longest is None or r.input_tokens > longest[2].input_tokens:
                    longest = (i, s, r)
        assert longest is not None
        i, s, r = longest
        cold, warm = [], []
        t0 = time.thread_time()
        AgentTracePrompts(seed=0)  # its vocabulary's word table: once a process
        table_ms = (time.thread_time() - t0) * 1000
        for k in range(args.repeats):
            prompts = AgentTracePrompts(seed=k + 1)
            c0 = time.thread_time()
            text = prompts.content(s, i, r)
            c1 = time.thread_time()
            prompts.content(s, i, r)
            c2 = time.thread_time()
            assert len(text.split()) == r.input_tokens
            cold.append(c1 - c0)
            warm.append(c2 - c1)
        print(f"longest request: {r.input_tokens:,} tokens; its prompt's JSON text built in "
              f"{statistics.median(cold) * 1000:.1f} ms of CPU (blocks drawn), "
              f"{statistics.median(warm) * 1000:.1f} ms (blocks cached), medians of {args.repeats}; the "
              f"vocabulary's word table once a process: {table_ms:.1f} ms ({load()})")
        if args.run:
            run_end_to_end(path, Path(tmp), args.replay, args.repeats)


if __name__ == "__main__":
    main()
