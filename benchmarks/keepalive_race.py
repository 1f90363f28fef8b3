"""The keep-alive race at volume: a simulator that behaves like llama.cpp on the connection
(`close_after_stream`: Keep-Alive promised, the connection closed after every stream after
a seeded random delay of 0..close_delay_ms) against both HTTP clients.

    python benchmarks/keepalive_race.py [--requests 10000] [--concurrency 64] [--delay-ms 5]

Two modes per client:
- `run`: `benchc run` itself (a subprocess on its own core), as a user would: the client
  learns that the server closes every connection and stops pooling after a few races;
- `always-pool`: the client driven directly with the rules' pooling verdict switched off
  (ReuseRules(stop_pooling_after=None)), so every reuse within the close delay races: the
  retry rule under the most stress.
Prints per mode: completed, errors, retries, connections pooled or not, and the smallest
and largest TTFT/E2E of the requests (every latency must be >= 0, every request complete).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._harness import pinned, simulator  # noqa: E402

SPEC = """\
version: 1
name: keepalive-race
target:
  base_url: {url}
  model: benchc-sim
workload:
  dataset:
    random: {{input_tokens: 16, output_tokens: 8}}
load:
  warmup: {{requests: 0}}
  sweep:
    concurrency: [{c}]
  requests: {n}
output:
  path: {out}
  requests: true
"""


def run_mode(url: str, http: str, n: int, c: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        spec, out = os.path.join(d, "spec.yaml"), os.path.join(d, "r.json")
        with open(spec, "w") as f:
            f.write(SPEC.format(url=url, c=c, n=n, out=out))
        t = time.perf_counter()
        subprocess.run(pinned([sys.executable, "-m", "benchc", "run", spec, "--quiet", "--http", http], 1),
                       check=True, stdout=subprocess.DEVNULL, timeout=1800)
        wall = time.perf_counter() - t
        with open(out) as f:
            p = json.load(f)["points"][0]
        with open(os.path.splitext(out)[0] + ".requests.jsonl") as f:
            recs = [json.loads(x) for x in f]
    return {"completed": p["counts"]["completed"], "errors": p["counts"]["failed"],
            "retries": p["counts"]["retries"], "pooled": p["client"]["connections"]["pooled"],
            **extremes([(r["ttft_us"], r["e2e_us"]) for r in recs if r["error"] is None]),
            "missing_latency": sum(r["error"] is None and r["e2e_us"] is None for r in recs),
            "wall_s": round(wall, 1)}


def always_pool(url: str, http: str, n: int, c: int) -> dict:
    import aiohttp

    from benchc.client import http1
    from benchc.client.request import make_connector, make_trace_config, send, send_native
    from benchc.metrics.record import RequestRecord
    from benchc.plan.model import Target

    target = Target(url, None, "chat", "benchc-sim", None, {}, 60.0, 60.0, None)
    body = json.dumps({"model": "benchc-sim", "messages": [{"role": "user", "content": "a b c"}],
                       "max_tokens": 8, "stream": True, "stream_options": {"include_usage": True}}).encode()
    endpoint = url + "/chat/completions"

    async def go() -> list[RequestRecord]:
        done: list[RequestRecord] = []
        left = [n]
        async with aiohttp.ClientSession(connector=make_connector(), trace_configs=[make_trace_config()],
                                         auto_decompress=False) as session:
            session.connector.rules.stop_pooling_after = None
            pool = http1.Pool(rules=http1.ReuseRules(stop_pooling_after=None)) if http == "native" else None

            async def worker() -> None:
                while left[0] > 0:
                    left[0] -= 1
                    r = RequestRecord(f"r{left[0]}", 0, 3, None)
                    if pool is not None:
                        await send_native(pool, endpoint, {}, body, r, target)
                    else:
                        await send(session, endpoint, {}, body, r, target)
                    done.append(r)

            await asyncio.gather(*(worker() for _ in range(c)))
            if pool is not None:
                await pool.close()
        return done

    t = time.perf_counter()
    gc.collect()
    gc.disable()  # as `benchc run` measures a point: no collector pause between a write and its stamp
    try:
        recs = asyncio.run(go())
    finally:
        gc.enable()
    lines = [r.to_json() for r in recs]
    return {"completed": sum(r.ok for r in recs), "errors": sum(not r.ok for r in recs),
            "retries": sum(r.outcome.retried for r in recs), "pooled": True,
            **extremes([(x["ttft_us"], x["e2e_us"]) for x in lines if x["error"] is None]),
            "missing_latency": sum(x["error"] is None and x["e2e_us"] is None for x in lines),
            "reads_stamped_before_send": sum(r.times.early_reads for r in recs),
            "error_examples": sorted({r.outcome.error_detail for r in recs if not r.ok})[:3],
            "wall_s": round(time.perf_counter() - t, 1)}


def extremes(pairs: list[tuple[float, float]]) -> dict:
    if not pairs:
        return {}
    ttft, e2e = [p[0] for p in pairs], [p[1] for p in pairs]
    return {"ttft_min_us": min(ttft), "e2e_min_us": min(e2e), "e2e_max_ms": round(max(e2e) / 1e3, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--delay-ms", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    params = {"preset": "instant", "model": "benchc-sim", "close_after_stream": True,
              "close_delay_ms": a.delay_ms, "seed": a.seed}
    print(f"simulator: close_after_stream, close delay uniform 0..{a.delay_ms:g} ms (seed {a.seed}); "
          f"{a.requests} requests at C={a.concurrency}")
    for mode, fn in (("run", run_mode), ("always-pool", always_pool)):
        for http in ("native", "aiohttp"):
            with simulator(params) as url:  # a fresh server per mode: no state carried over
                res = fn(url, http, a.requests, a.concurrency)
            print(f"{mode:<12} {http:<8} " + " ".join(f"{k}={v}" for k, v in res.items()), flush=True)


if __name__ == "__main__":
    main()
