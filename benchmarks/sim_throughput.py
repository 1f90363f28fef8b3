"""How fast the simulator's engine loop emits tokens: the `instant` preset (no
delays) with 256 concurrent streams, served from its own process, read by a raw
asyncio byte counter in this one (so the client is as cheap as it can be).

    python benchmarks/sim_throughput.py [--streams 256] [--tokens 2000] [--repeats 3]

Prints tokens/s as the simulator's trace saw them (first chunk to last chunk of
the run) for each repeat, and the median. Target (issue 3): >= 200,000 tok/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile


async def drain(host: str, port: int, max_tokens: int, chunks_per_write: int) -> None:
    body = json.dumps({"model": "benchc-sim", "prompt": "x", "max_tokens": max_tokens,
                       "stream": True, "ignore_eos": True}).encode()
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    while await reader.read(1 << 16):
        pass
    writer.close()


def one_run(streams: int, tokens: int, chunks_per_write: int) -> float:
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "trace.jsonl")
        cmd = [sys.executable, "-m", "benchc", "sim", "--preset", "instant", "--port", "0",
               "--trace", trace, "--param", f"chunks_per_write={chunks_per_write}"]
        if sys.platform.startswith("linux") and os.cpu_count() and os.cpu_count() > 1:
            cmd = ["taskset", "-c", "0", *cmd]  # the server on core 0, this client elsewhere
            os.sched_setaffinity(0, {1})
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        try:
            line = p.stdout.readline()
            port = int(line.split("http://127.0.0.1:")[1].split("/")[0])

            async def go():
                await asyncio.gather(*(drain("127.0.0.1", port, tokens, chunks_per_write)
                                       for _ in range(streams)))

            asyncio.run(go())
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait()
            p.stdout.close()
        recs = [json.loads(x) for x in open(trace)]
    first = min(r["chunks"][0][0] for r in recs)
    last = max(r["chunks"][-1][0] for r in recs)
    total = sum(r["output_tokens"] for r in recs)
    return total / ((last - first) / 1e9)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--chunks-per-write", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    rates = [one_run(a.streams, a.tokens, a.chunks_per_write) for _ in range(a.repeats)]
    print(f"sim_throughput: instant preset, {a.streams} streams x {a.tokens} tokens, "
          f"chunks_per_write={a.chunks_per_write}, cpus={os.cpu_count()}")
    for r in rates:
        print(f"  run: {r:,.0f} tok/s")
    print(f"  median: {statistics.median(rates):,.0f} tok/s (target >= 200,000)")


if __name__ == "__main__":
    main()
