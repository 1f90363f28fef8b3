"""How many streamed tokens a client can ingest per CPU-second: benchc's client on
its own HTTP/1.1 reader (Cython and Python cores), on aiohttp (Cython core), and a
minimal aiohttp line reader that
JSON-parses each event (what most Python benchmark clients do), against the same
simulator in another process (`instant` preset: no delays), one token per SSE event.

    python benchmarks/client_ingest.py [--concurrency 64 256 1024] [--tokens 256]

Server modes:
  coalesced      the simulator writes each response at once (the client's best case)
  per-token      one write per token per stream, a step every 2 ms (the worst case)

Prints, per mode and C: tok/s achieved, client CPU seconds (user+sys, getrusage),
and tokens per client CPU-second; then the Cython core's ratio to the line reader.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time

sys.path.insert(0, __file__.rsplit("/", 2)[0])
from benchmarks._harness import simulator, worker  # noqa: E402

MODES = {
    "coalesced": {"preset": "instant", "chunks_per_write": 100000, "max_num_seqs": 4096},
    "per-token": {"preset": "instant", "chunks_per_write": 1, "max_num_seqs": 4096,
                  "step_table": [[1, 2.0]]},
}


def body(tokens: int) -> bytes:
    return json.dumps({"model": "benchc-sim", "messages": [{"role": "user", "content": "go"}],
                       "max_tokens": tokens, "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def measured(session, one, c: int, n: int) -> dict:
    """One warm-up request per stream (connections open), then C streams x n requests,
    timed: only the request loop counts, not imports or session set-up."""
    await asyncio.gather(*(one(session) for _ in range(c)))
    cpu0, t0 = _cpu(), time.perf_counter()
    counts = await asyncio.gather(*(_loop(session, one, n) for _ in range(c)))
    return {"tokens": sum(counts), "wall_s": time.perf_counter() - t0, "cpu_s": _cpu() - cpu0}


async def _loop(session, one, n: int) -> int:
    total = 0
    for _ in range(n):
        total += await one(session)
    return total


async def run_benchc(url: str, c: int, n: int, tokens: int, http: str = "native") -> dict:
    """benchc's own client path: send() with its stream parser, then the point's recorders."""
    import aiohttp

    from benchc.client import http1
    from benchc.client.request import make_connector, make_trace_config, send, send_native
    from benchc.metrics.record import RequestRecord
    from benchc.metrics.recorder import PointRecorder
    from benchc.plan.model import Target
    from benchc.run.prepare import measuring

    target = Target(url, None, "chat", "benchc-sim", None, {}, 600.0, 600.0, None)
    rec = PointRecorder(c)
    payload, endpoint = body(tokens), url + "/chat/completions"
    headers = {"Content-Type": "application/json"}

    async def one(s) -> int:
        r = RequestRecord("r", 0, 1, tokens)
        await (send_native if http == "native" else send)(s, endpoint, headers, payload, r, target)
        rec.add(r)
        return r.output_tokens if r.ok else 0

    # as `benchc run` does inside a measured point, the collector is held off
    if http == "native":
        pool = http1.Pool()
        try:
            with measuring():
                return await measured(pool, one, c, n)
        finally:
            await pool.close()
    with measuring():
        async with aiohttp.ClientSession(connector=make_connector(), read_bufsize=1 << 20,
                                         trace_configs=[make_trace_config()]) as s:
            return await measured(s, one, c, n)


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


def worker_main(a: list[str]) -> None:
    kind, url, c, n, tokens, loop = a[0], a[1], int(a[2]), int(a[3]), int(a[4]), a[5]
    if kind == "reader":
        run = run_line_reader(url, c, n, tokens)
    else:
        run = run_benchc(url, c, n, tokens, "aiohttp" if kind == "benchc-aiohttp" else "native")
    if loop == "uvloop":
        import uvloop

        print(json.dumps(uvloop.run(run)))
    else:
        print(json.dumps(asyncio.run(run)))


def default_loop() -> str:
    """The loop `benchc run` uses: uvloop when installed (pip install 'benchc[fast]')."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--requests-per-stream", type=int, default=4)
    ap.add_argument("--modes", nargs="+", default=list(MODES))
    ap.add_argument("--loop", choices=["asyncio", "uvloop"], default=default_loop(),
                    help="event loop of every client (default: what benchc run uses)")
    a = ap.parse_args()
    import os
    print(f"client_ingest: {a.tokens} tokens/request, one token per SSE event, "
          f"{a.requests_per_stream} requests per stream, {a.loop} loop; cpus={os.cpu_count()}")
    for mode in a.modes:
        with simulator(MODES[mode]) as url:
            for c in a.concurrency:
                rows = {}
                for label, kind, core in (("benchc cython", "benchc", "cython"),
                                          ("benchc python", "benchc", "python"),
                                          ("benchc cython/aiohttp", "benchc-aiohttp", "cython"),
                                          ("aiohttp line reader", "reader", None)):
                    args = [kind, url, str(c), str(a.requests_per_stream), str(a.tokens), a.loop]
                    r = worker(__file__, args, core)
                    rows[label] = r
                    per_cpu = r["tokens"] / r["cpu_s"] if r["cpu_s"] else float("nan")
                    print(f"  {mode:<9} C={c:<5} {label:<21} {r['tokens'] / r['wall_s']:>11,.0f} tok/s  "
                          f"cpu {r['cpu_s']:6.2f}s  {per_cpu:>11,.0f} tok/cpu-s")
                cy, rd = rows["benchc cython"], rows["aiohttp line reader"]
                ratio = (cy["tokens"] / cy["cpu_s"]) / (rd["tokens"] / rd["cpu_s"])
                print(f"  {mode:<9} C={c:<5} cython core vs line reader: {ratio:.2f}x tokens per CPU-second")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker_main(sys.argv[2:])
    else:
        main()
