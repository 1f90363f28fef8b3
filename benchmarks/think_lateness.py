"""Coding-agent replays' think-time lateness (issue 43: within 1 ms at p99), and where it
comes from. `benchc run` of specs/agent-traces.yaml (the shipped sample on the embedded
simulator, 149 requests) in a process of its own per run, watched; its point's
agent_replay.fidelity.think_late_ms (each request's send stamp minus the end of what it
waited on minus its due wait), and each request's lateness split into
- heard: the answer it followed ended ([DONE]'s read stamp) to the session's next wait, less
  its body's build; of it, done_to_end the server's end of the response after [DONE] (the
  client's exchange ends only then) and end_to_loop that end to the loop hearing of it (the
  receive loop's thread, or the event loop busy); notice the whole, end stamp to heard;
- build: its body's build (AgentFeed.body), between hearing and the wait;
- past due: the wait began after its due time (heard + build outran a short think time);
- wake: the wake-up after its due time (the step's alarm, or the loop's timers);
- send: the wake-up to the send's stamp (the send path's own steps; a connect among them);
- run_queue: the loop thread's time runnable but not running within its waits (schedstat);
- gc: GC pauses within its waits (and the GC pauses within the replay, counted apart).

    python benchmarks/think_lateness.py [--repeats 5] [--http native aiohttp] [--core c py]
        [--spec specs/agent-traces.yaml] [--against DIR] [--plain] [benchc run options: --rx-loop off ...]

`--plain`: the product's lateness alone. The watches that split it into parts run on the
event loop's thread, per request (a schedstat read at each wait's start and end, the stamps
of builds, answers and exchanges), so they add to what they measure; plain keeps only each
session's requests as sent (replay_session's result, once per session).

`--against DIR`: each run is also made with DIR's benchc (PYTHONPATH=DIR, a checkout of
another commit with its extensions built), interleaved with this one's, so that both see the
same load. Prints per run the lateness p50/p99/max (ms), the parts' medians over the
requests late by 0.5 ms or more and the three latest requests' parts, then per version, core
and path the medians over the repeats, with the load averages at the runs' starts (the
machine is shared: a run's figures are the machine's too). Linux (timerfd, schedstat).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

CLOCK = time.perf_counter_ns
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LATE_NS = 500_000  # the requests whose parts are shown


_SCHEDSTAT: dict[int, int] = {}  # thread id -> its schedstat file, kept open (a pread: 1 us, an open: 12)


def _run_queue_ns() -> int:
    """The thread's time runnable but not running so far (0 where schedstat is not kept)."""
    try:
        fd = _SCHEDSTAT.get(threading.get_ident())
        if fd is None:
            fd = _SCHEDSTAT[threading.get_ident()] = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        return int(os.pread(fd, 128, 0).split()[1])
    except OSError:
        return 0


def worker(spec: str, http: str, out: str, extra: list[str], plain: bool = False) -> None:
    """One `benchc run` in this process, watched; writes its figures to `out` (JSON). `plain`:
    only each session's requests as sent are kept (once per session, at its end), none of the
    per-request watches, which run on the loop's thread and so add to the lateness they split."""
    import benchc.run.agent_replay as agent_replay
    import benchc.run.alarm as alarm
    import benchc.run.loadgen as loadgen
    from benchc.cli import main as benchc_main
    from benchc.run.open_loop import SEND_LEAD_NS  # there too in checkouts before it moved (--against)

    # the step's waits (ended SEND_LEAD_NS ahead of a punctual send's time) and the alarm's:
    # by the time waited for -> (began, returned, run-queue ns within, GC ns within)
    waits: dict[int, tuple[int, int, int, int]] = {}
    alarms: dict[int, tuple[int, int, int, int]] = {}
    # (session object's id, request path) -> (when its body's build began, ns it took)
    builds: dict[tuple[int, str], tuple[int, int]] = {}
    gcs: list[tuple[int, int]] = []
    gc_start = [0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            gc_start[0] = CLOCK()
        else:
            gcs.append((gc_start[0], CLOCK()))

    if not plain:
        gc.callbacks.append(on_gc)

    def watch(wait, into):
        async def watched(self, due_ns: int):
            began, rq, n_gc = CLOCK(), _run_queue_ns(), len(gcs)
            got = await wait(self, due_ns)
            back = CLOCK()
            into[due_ns] = (began, back, _run_queue_ns() - rq, sum(b - a for a, b in gcs[n_gc:]))
            return got
        return watched

    if not plain:
        loadgen.StepRun.until = watch(loadgen.StepRun.until, waits)
        alarm.Alarm.until = watch(alarm.Alarm.until, alarms)
    body = agent_replay.AgentFeed.body

    def watched_body(self, j, req):
        t = CLOCK()
        made = body(self, j, req)
        builds[(id(self.sessions[j]), req.path)] = (t, CLOCK() - t)
        return made

    sent: list = []  # (session object's id, Sent)
    replay = agent_replay.replay_session

    async def watched_replay(session, *args, **kw):
        got = await replay(session, *args, **kw)
        sent.extend((id(session), x) for x in got)
        return got

    # a request's end stamp -> (when the loop heard of it, GC ns in between)
    notices: dict[int, tuple[int, int]] = {}
    measured = loadgen.StepRun.measured

    async def watched_measured(self, body, r, *args, **kw):
        await measured(self, body, r, *args, **kw)
        now, end = CLOCK(), r.times.end_ns
        notices[end] = (now, sum(min(b, now) - max(a, end) for a, b in gcs if b > end and a < now))

    import benchc.client.http1 as http1

    # [DONE]'s read stamp -> (the exchange's end stamp, when the exchange returned)
    exchanges: dict[int, tuple[int, int]] = {}
    exchange = http1.exchange

    async def watched_exchange(pool, origin, request_id, body, parser, *args, **kw):
        ex = await exchange(pool, origin, request_id, body, parser, *args, **kw)
        exchanges[parser.done_ns or ex.end_ns] = (ex.end_ns, CLOCK())
        return ex

    if not plain:
        loadgen.StepRun.measured = watched_measured
        http1.exchange = watched_exchange
        agent_replay.AgentFeed.body = watched_body
    agent_replay.replay_session = watched_replay
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as d:
        out_json = os.path.join(d, "r.json")
        rc = benchc_main(["run", spec, "--quiet", "--force", "--out", out_json, "--http", http, *extra])
        with open(out_json) as f:
            point = json.load(f)["points"][0]
    rows = []
    own_ends = {x.end_ns for _, x in sent if not x.agent}
    sub_ends = {x.end_ns for _, x in sent if x.agent}
    for sid, s in sent:
        due = s.after_ns + s.wait_ns
        w = waits.get(due) or waits.get(due - SEND_LEAD_NS)  # a plain wait, or one ended ahead
        late = s.send_ns - due
        if w is None:
            rows.append({"late": late})
            continue
        began, back, rq, paused = w
        a = alarms.get(due)
        woke = max(back, a[1]) if a is not None else back
        built_at, took = builds.get((sid, s.path), (0, 0))
        build = took if built_at >= s.after_ns else 0  # built after what it waited on ended (not ahead)
        heard_at, gc_heard = notices.get(s.after_ns, (0, 0))  # the answer (or subagent) it waited on
        ex_end, ex_back = exchanges.get(s.after_ns, (s.after_ns, 0))
        # which request: a subagent's first (after its spawn), another of a subagent's, the
        # parent's after a join, the parent's after its own answer, or the session's first
        kind = ("spawned" if s.spawn_ns == s.after_ns else "subagent") if s.agent else \
            "parent" if s.after_ns in own_ends else "joined" if s.after_ns in sub_ends else "first"
        rows.append({"late": late, "kind": kind, "think": s.wait_ns, "heard": began - s.after_ns - build,
                     "build": build,
                     "past_due": max(0, began - due), "wake": max(0, woke - max(began, due)),
                     "send": s.send_ns - woke, "run_queue": rq + (a[2] if a else 0),
                     "gc": paused + (a[3] if a else 0), "notice": heard_at - s.after_ns if heard_at else 0,
                     "gc_heard": gc_heard, "done_to_end": ex_end - s.after_ns,
                     "end_to_loop": ex_back - ex_end if ex_back else 0})
    first = min((x.send_ns for _, x in sent), default=0)
    last = max((x.end_ns for _, x in sent), default=0)
    in_step = [b - a for a, b in gcs if a >= first and b <= last]
    late_ms = point["agent_replay"]["fidelity"]["think_late_ms"]
    result = {"rc": rc, "load": load, "think_late_ms": late_ms, "rows": rows,
              "build_us_p50": statistics.median(b for _, b in builds.values()) / 1e3 if builds else None,
              "gc_pauses": len(in_step), "gc_max_us": max(in_step, default=0) / 1e3,
              "send_priority": point["client"].get("send_priority"), "plain": plain}
    with open(out, "w") as f:
        json.dump(result, f)


def _med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else 0.0


def one(spec: str, http: str, core: str, extra: list[str], pythonpath: str | None,
        plain: bool = False) -> dict:
    env = dict(os.environ)
    if core == "py":
        env["BENCHC_NO_EXTENSIONS"] = "1"
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "w.json")
        watch = ["--plain"] if plain else []
        subprocess.run([sys.executable, __file__, "--worker", spec, http, out, *watch, *extra], env=env,
                       check=True, cwd=REPO, stdout=subprocess.DEVNULL, timeout=600)
        with open(out) as f:
            return json.load(f)


PARTS = ("past_due", "heard", "notice", "done_to_end", "end_to_loop", "build", "wake", "send", "run_queue",
         "gc")


def show(label: str, k: int, r: dict) -> None:
    lm = r["think_late_ms"]
    late = [x for x in r["rows"] if x["late"] >= LATE_NS and "wake" in x]
    medians = ", ".join(f"{p} {_med([x[p] / 1e3 for x in late]):.0f}" for p in PARTS)
    head = (f"  {label} run {k + 1}: load {r['load']:.2f}, exit {r['rc']}, late ms p50 {lm['p50']} "
            f"p99 {lm['p99']} max {lm['max']}; send_priority {r['send_priority']}")
    if r.get("plain"):  # no parts were watched
        print(head, flush=True)
        return
    print(f"{head}; body build p50 {r['build_us_p50'] or 0:.0f} us; "
          f"{r['gc_pauses']} GC pauses in the replay (max {r['gc_max_us']:.0f} us)", flush=True)
    print(f"    {len(late)} of {len(r['rows'])} late >= {LATE_NS / 1e6} ms, their medians (us): {medians}")
    worst = sorted(r["rows"], key=lambda x: -x["late"])[:3]
    print("    the 3 latest (us): " + "; ".join(
        " ".join(f"{p} {v / 1e3:.0f}" if isinstance(v, int) else f"{p} {v}" for p, v in x.items())
        for x in worst), flush=True)
    kinds: dict[str, int] = {}
    for x in late:
        kinds[x["kind"]] = kinds.get(x["kind"], 0) + 1
    print(f"    late >= {LATE_NS / 1e6} ms by kind: {kinds}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--http", nargs="+", default=["native", "aiohttp"], choices=["native", "aiohttp"])
    ap.add_argument("--core", nargs="+", default=["c"], choices=["c", "py"])
    ap.add_argument("--spec", default=os.path.join(REPO, "specs", "agent-traces.yaml"))
    ap.add_argument("--against", help="another checkout's benchc, run interleaved with this one")
    ap.add_argument("--plain", action="store_true",
                    help="no per-request watches (they run on the loop): the lateness only, not its parts")
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    a, extra = ap.parse_known_args()  # the rest goes to `benchc run` (--rx-loop off, --send-priority off)
    if a.worker:
        spec, http, out = a.worker
        worker(spec, http, out, extra, a.plain)
        return
    print(f"think_lateness: {os.path.relpath(a.spec, REPO)} {' '.join(extra)}, cpus={os.cpu_count()}, "
          f"{a.repeats} repeats", flush=True)
    versions = [("this", None)] + ([("against", a.against)] if a.against else [])
    runs: dict[str, list[dict]] = {}
    for k in range(a.repeats):
        for core in a.core:
            for http in a.http:
                for name, path in versions:
                    label = f"{name} {core} {http}"
                    r = one(a.spec, http, core, extra, path, a.plain)
                    runs.setdefault(label, []).append(r)
                    show(label, k, r)
    for label, rs in runs.items():
        med = {q: _med([r["think_late_ms"][q] for r in rs]) for q in ("p50", "p99", "max")}
        loads = [r["load"] for r in rs]
        # one run's p99 is its second latest request of 149: the pooled one (every run's
        # requests together) tells versions apart where the runs' medians are noise
        pooled = sorted(x["late"] / 1e6 for r in rs for x in r["rows"])
        p99 = pooled[min(len(pooled) - 1, int(0.99 * len(pooled)))] if pooled else 0.0
        print(f"{label}: median of {len(rs)}: late p50 {med['p50']:.3f} ms, p99 {med['p99']:.3f} ms, "
              f"max {med['max']:.3f} ms; pooled p99 {p99:.3f} ms over {len(pooled)} requests; "
              f"load {min(loads):.1f}-{max(loads):.1f}", flush=True)


if __name__ == "__main__":
    main()
