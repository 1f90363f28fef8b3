"""How many streamed tokens a client ingests per CPU-second, one token per SSE event: benchc's
own HTTP/1.1 reader on its two transports side by side in one run -- the asyncio loop
(`asyncio`) and the receive loop in C (`rx-loop`) -- and, on request, the Python core, the
Cython core on aiohttp and a minimal aiohttp line reader that JSON-parses each event (what
most Python benchmark clients do).

    python benchmarks/client_ingest.py [--concurrency 256 1024] [--tokens 256] [--repeats 3]

Server (pinned to core 0, the client to core 1, where taskset exists): benchmarks/fast_server.py
by default (pre-encoded events, a bare asyncio protocol), or `--server sim` (the embedded
simulator, `instant` preset) to see what that one sustains.

Modes:
  per-token   one write per token per stream, every --interval-ms (raised where C streams
              would ask more writes per second than --server-rate: the server must not be
              what sets the pace), --seconds per request; a client that keeps up reads each
              event on its own (the receive loop counts its reads: reads/token 1.00)
  coalesced   each response (--tokens) in one write (the client's best case); the server
              writes each whole response encoded once, so that no API's answer costs it more
              per request (a slower server wakes the client for fewer responses at a time,
              which showed as client CPU per request)

Each repeat runs every --api and client in turn (interleaved: a slow spell on a shared machine
hits all of them). Prints per mode, C, API and client the medians over --repeats runs: tok/s,
client CPU seconds (user+sys of the whole process, every thread: getrusage), tokens per client
CPU-second, and for the receive loop its reads per token (1.0: one event per read), its own
CPU, and per request the CPU of the event loop's thread and of the receive loop's; then the
receive loop's ratio to the asyncio transport, the server's CPU and late ticks, and with
several APIs each one's tokens per CPU-second against chat's in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from contextlib import contextmanager

sys.path.insert(0, __file__.rsplit("/", 2)[0])
from benchmarks._harness import emit, pinned, simulator, worker  # noqa: E402

CLIENTS = {  # label: (kind, core)
    "asyncio": ("native-asyncio", "cython"),
    "rx-loop": ("native-rx", "cython"),
    "python-core": ("native-asyncio", "python"),
    "aiohttp": ("aiohttp", "cython"),
    "line-reader": ("reader", None),
}
SIM = {"coalesced": {"preset": "instant", "chunks_per_write": 100000, "max_num_seqs": 4096},
       "per-token": {"preset": "instant", "chunks_per_write": 1, "max_num_seqs": 4096}}


def body(tokens: int, api: str = "chat") -> bytes:
    """The request as benchc's adapter for `api` builds it (benchc.client.apis)."""
    from benchc.client.apis import APIS
    from benchc.plan.model import Sampling, Target
    from benchc.plan.workload import Prompt

    target = Target(None, None, api, "benchc-sim", None, {}, 600.0, 600.0, None)
    sampling = Sampling(0.0, None, tokens, None, True, [], None, {})
    return json.dumps(APIS[api].body(target, sampling, Prompt("go", None, 1, tokens))).encode()


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def measured(session, one, c: int, n: int, pool=None) -> dict:
    """One warm-up request per stream (connections open), then C streams x n requests,
    timed: only the request loop counts, not imports or session set-up. With a pool whose
    receive loop read, that loop's own CPU and reads over the timed part too."""
    await asyncio.gather(*(one(session) for _ in range(c)))
    rx = pool.rx_loop if pool is not None else None
    if rx is not None:
        rx.take_lag()
        rx_cpu0 = rx.cpu_s()
    cpu0, t0 = _cpu(), time.perf_counter()
    counts = await asyncio.gather(*(_loop(session, one, n) for _ in range(c)))
    out = {"requests": c * n, "tokens": sum(counts), "wall_s": time.perf_counter() - t0,
           "cpu_s": _cpu() - cpu0}
    if rx is not None:
        _, out["rx_reads"], _ = rx.take_lag()
        out["rx_cpu_s"] = rx.cpu_s() - rx_cpu0
    return out


async def _loop(session, one, n: int) -> int:
    total = 0
    for _ in range(n):
        total += await one(session)
    return total


async def run_benchc(url: str, c: int, n: int, tokens: int, kind: str) -> dict:
    """benchc's own client path: send() with its stream parser, then the point's recorders."""
    import aiohttp

    from benchc.client import http1
    from benchc.client.apis import APIS
    from benchc.client.request import make_connector, make_trace_config, send, send_native
    from benchc.metrics.record import RequestRecord
    from benchc.metrics.recorder import PointRecorder
    from benchc.plan.model import Target
    from benchc.run.prepare import measuring

    target = Target(url, None, API, "benchc-sim", None, {}, 600.0, 600.0, None)
    rec = PointRecorder(c)
    paths: Counter = Counter()  # as loadgen counts a point's transports
    payload, endpoint = body(tokens, API), APIS[API].url(url)
    headers = {"Content-Type": "application/json"}
    native = kind.startswith("native")

    async def one(s) -> int:
        r = RequestRecord("r", 0, 1, tokens)
        await (send_native if native else send)(s, endpoint, headers, payload, r, target)
        rec.add(r)
        paths[r.outcome.path] += 1
        return r.output_tokens if r.ok else 0

    # as `benchc run` does inside a measured point, the collector is held off
    if native:
        pool = http1.Pool(rx_loop="auto" if kind == "native-rx" else "off")
        try:
            with measuring():
                out = await measured(pool, one, c, n, pool)
        finally:
            await pool.close()
    else:
        with measuring():
            async with aiohttp.ClientSession(connector=make_connector(), read_bufsize=1 << 20,
                                             trace_configs=[make_trace_config()]) as s:
                out = await measured(s, one, c, n)
    out["paths"] = dict(paths)
    out["errors"] = dict(rec.tally.errors)
    return out


async def run_line_reader(url: str, c: int, n: int, tokens: int) -> dict:
    """The minimal aiohttp client: read lines, json.loads each `data:` event, count text."""
    import aiohttp

    payload, endpoint = body(tokens), url + "/chat/completions"

    async def one(s) -> int:
        total = 0
        async with s.post(endpoint, data=payload, headers={"Content-Type": "application/json"}) as r:
            async for line in r.content:
                if line.startswith(b"data: ") and line[6:11] != b"[DONE":
                    ev = json.loads(line[6:])
                    if ev["choices"] and ev["choices"][0]["delta"].get("content"):
                        total += 1
        return total

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        return await measured(s, one, c, n)


API = "chat"  # the API the benchc clients ask (--api; the worker gets it as its 6th argument)


def worker_main(a: list[str]) -> None:
    global API
    kind, url, c, n, tokens = a[0], a[1], int(a[2]), int(a[3]), int(a[4])
    API = a[5] if len(a) > 5 else "chat"
    run = run_line_reader(url, c, n, tokens) if kind == "reader" else run_benchc(url, c, n, tokens, kind)
    try:
        import uvloop
    except ImportError:
        emit(asyncio.run(run))
    else:
        emit(uvloop.run(run))


@contextmanager
def fast_server(interval_ms: float):
    """Yields (base URL, a list that receives the server's own figures when it stops)."""
    cmd = [sys.executable, os.path.join(os.path.dirname(__file__), "fast_server.py"),
           "--interval-ms", str(interval_ms)]
    p = subprocess.Popen(pinned(cmd, 0), stdout=subprocess.PIPE, text=True)
    figures: list[dict] = []
    try:
        line = p.stdout.readline()
        yield line.split("listening on ")[1].split()[0], figures
    finally:
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=30)
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        if lines:
            figures.append(json.loads(lines[-1]))


@contextmanager
def sim_server(mode: str, interval_ms: float):
    params = dict(SIM[mode])
    if mode == "per-token":
        params["step_table"] = [[1, interval_ms]]
    with simulator(params) as url:
        yield url, []


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--requests-per-stream", type=int, default=1)
    ap.add_argument("--coalesced-requests", type=int, default=8, help="coalesced: requests per stream")
    ap.add_argument("--seconds", type=float, default=4.0, help="per-token: about this long per request")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--modes", nargs="+", default=["per-token", "coalesced"],
                    choices=["per-token", "coalesced"])
    ap.add_argument("--clients", nargs="+", default=["asyncio", "rx-loop"], choices=list(CLIENTS))
    ap.add_argument("--server", choices=["fast", "sim"], default="fast")
    ap.add_argument("--api", nargs="+", default=["chat"], choices=["chat", "responses", "messages"],
                    help="the APIs benchc's clients stream (the line reader: chat only)")
    ap.add_argument("--interval-ms", type=float, default=5.0, help="per-token: ms between a stream's tokens")
    ap.add_argument("--server-rate", type=float, default=12_000,
                    help="per-token: the most writes per second asked of the server (it sets the interval "
                         "at high C; on 2 shared cores the fast server kept to about 15k)")
    a = ap.parse_args()
    load = os.getloadavg()
    print(f"client_ingest: one token per SSE event, {a.repeats} repeats (medians), server {a.server}; "
          f"cpus={os.cpu_count()}, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start")
    for mode, c in itertools.product(a.modes, a.concurrency):
        if mode == "per-token":
            interval = max(a.interval_ms, 1000.0 * c / a.server_rate)
            tokens = max(16, min(a.tokens, int(a.seconds * 1000 / interval)))
            n = a.requests_per_stream
        else:
            interval, tokens, n = 0.0, a.tokens, a.coalesced_requests
        rows: dict[tuple[str, str], list[dict]] = {(api, label): [] for api in a.api for label in a.clients}
        servers: dict[str, list[dict]] = {api: [] for api in a.api}
        for _ in range(a.repeats):
            # interleaved: a slow spell on the shared machine hits every API and client alike,
            # so their ratios within one run hold even when the absolute figures move
            for api, label in rows:
                kind, core = CLIENTS[label]
                ctx = fast_server(interval) if a.server == "fast" else sim_server(mode, interval)
                with ctx as (url, figures):
                    args = [kind, url, str(c), str(n), str(tokens), api]
                    rows[api, label].append(worker(__file__, args, core))
                servers[api] += figures
        desc = f"{interval:.3g} ms between tokens" if mode == "per-token" else "whole response per write"
        desc += f", {tokens} tokens x {n} requests per stream"
        per_cpu: dict[tuple[str, str], float] = {}
        for api in a.api:
            print(f"  {mode} C={c} api={api} ({desc})")
            for label in a.clients:
                per_cpu[api, label] = _client_row(label, rows[api, label], tokens)
            if "rx-loop" in a.clients and "asyncio" in a.clients:
                ratio = per_cpu[api, "rx-loop"] / per_cpu[api, "asyncio"]
                print(f"    rx-loop vs asyncio: {ratio:.2f}x tokens per CPU-second")
            if servers[api]:
                cpu = statistics.median(s["cpu_s"] / s["wall_s"] for s in servers[api])
                late = sum(s["late_ticks"] for s in servers[api])
                ticks = sum(s["ticks"] for s in servers[api])
                print(f"    server: {cpu:.0%} of its core (median over its runs), "
                      f"{late} of {ticks} ticks late")
        if "chat" in a.api and len(a.api) > 1:
            for label in a.clients:
                ratios = "  ".join(f"{api} {per_cpu[api, label] / per_cpu['chat', label]:.2f}x"
                                   for api in a.api if api != "chat")
                print(f"  {mode} C={c} {label}: tokens per CPU-second against chat's, same run: {ratios}")


def _client_row(label: str, rs: list[dict], tokens: int) -> float:
    """Print one client's medians; returns its tokens per CPU-second. Every API's answers hold
    `tokens` tokens each (the server's usage): a run that counted more or fewer (a Responses
    stream repeats its text in its last events) is flagged, not figured."""
    tps = statistics.median(r["tokens"] / r["wall_s"] for r in rs)
    cpu = statistics.median(r["cpu_s"] for r in rs)
    per_cpu = statistics.median(r["tokens"] / r["cpu_s"] for r in rs)
    extra = ""
    rx_rows = [r for r in rs if "rx_reads" in r]  # a run whose pool had no receive loop has none
    if rx_rows:
        rpt = statistics.median(r["rx_reads"] / max(r["tokens"], 1) for r in rx_rows)
        loop_cpu = statistics.median(r["rx_cpu_s"] for r in rx_rows)
        extra = f"  reads/token {rpt:.2f}  loop thread cpu {loop_cpu:.2f}s"
        # per request, the process's CPU outside the receive loop's thread (the event loop's
        # thread: sending, the pool, the record) and the loop thread's own
        main_us = statistics.median((r["cpu_s"] - r["rx_cpu_s"]) / r["requests"] * 1e6 for r in rx_rows)
        rx_us = statistics.median(r["rx_cpu_s"] / r["requests"] * 1e6 for r in rx_rows)
        extra += f"  per request: {main_us:.0f} us event loop + {rx_us:.0f} us receive loop"
    bad = sum(sum(r.get("errors", {}).values()) for r in rs)
    miscounted = sum(r["tokens"] != r["requests"] * tokens for r in rs if "requests" in r)
    print(f"    {label:<12} {tps:>11,.0f} tok/s  cpu {cpu:6.2f}s  {per_cpu:>11,.0f} "
          f"tok/cpu-s  paths {rs[0].get('paths', {})}{extra}{f'  ERRORS {bad}' if bad else ''}"
          f"{f'  TOKENS MISCOUNTED in {miscounted} runs' if miscounted else ''}")
    return per_cpu

if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker_main(sys.argv[2:])
    else:
        main()
