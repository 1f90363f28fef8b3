"""How close benchc's TTFT and ITL are to the truth: the simulator with a fixed 50 ms
TTFT and 10 ms steps (ITL), C concurrent streams, one token per event, its trace as
ground truth, for each transport and core of benchc's client: the receive loop in C
(cython/rx-loop), the asyncio transport on both cores, aiohttp.

    python benchmarks/accuracy.py [--concurrency 256 1024] [--tokens 24] [--stagger-ms 0]

Prints p50, p99 and max of |measured - true| per client and C, for TTFT (per request)
and ITL (per chunk gap, matched by position in the stream), and whether the client ran late
by the self-check's causes (event-loop lag p99 over 5 ms, or the receive loop's lag from a
read's kernel stamp over 5 ms, in at least 5 ticks or reads: what the errors beside it show
such lateness moved; the self-check judges a point by those effects, run/effects.py). Then the two
parts of the TTFT difference, on the one monotonic clock both processes share: the
client's stamp of every text chunk minus the simulator's write of it (the client's own
error), and the simulator's arrival stamp minus the client's send (how late the
single-threaded simulator read the request: the trace's TTFT leaves that wait out). So
TTFT is also compared with the simulator's write of the first chunk counted from the
client's send (stamped right after the send call returns).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, __file__.rsplit("/", 2)[0])
from benchmarks._harness import emit, simulator, worker  # noqa: E402

# prefill_tok_s: a rate so high that prefill takes no time (the simulator's parameters refuse 0)
SIM = {"preset": "minimax-m2.5-tp4", "step_table": [[1, 10.0]], "ttft_ms": 50.0, "prefill_tok_s": 1e12,
       "max_num_seqs": 4096, "chunks_per_write": 1}


async def run(url: str, c: int, tokens: int, http: str = "native", stagger_ms: float = 0.0) -> dict:
    import aiohttp

    from benchc.client import http1
    from benchc.client.request import make_connector, make_trace_config, send, send_native
    from benchc.metrics.record import RequestRecord
    from benchc.plan.model import Target
    from benchc.run.effects import causes
    from benchc.run.selfcheck import SelfCheck as _SelfCheck
    from benchc.run.selfcheck import rx_check as _rx_check

    target = Target(url, None, "completions", "MiniMaxAI/MiniMax-M2.5", None, {}, 600.0, 600.0, None)
    payload = json.dumps({"model": "MiniMaxAI/MiniMax-M2.5", "prompt": "go", "max_tokens": tokens,
                          "ignore_eos": True, "stream": True}).encode()
    headers = {"Content-Type": "application/json"}
    out = []
    if http.startswith("native"):
        s, sender = http1.Pool(rx_loop="off" if http == "native-asyncio" else "auto"), send_native
    else:
        s, sender = aiohttp.ClientSession(connector=make_connector(), read_bufsize=1 << 20,
                                          trace_configs=[make_trace_config()]), send
    try:
        # open the connections first, so the measured requests do not wait on connects
        await asyncio.gather(*(sender(s, url + "/completions", headers, payload,
                                      RequestRecord(f"warm-{i}", 0, 1, tokens), target) for i in range(c)))
        check = _SelfCheck()
        check.start()
        rx = http1.RxFigures(s) if isinstance(s, http1.Pool) else None
        t0 = time.perf_counter()
        recs = [RequestRecord(f"r{i}", 0, 1, tokens) for i in range(c)]

        async def one(i: int, r: RequestRecord) -> None:
            await asyncio.sleep(i * stagger_ms / 1000)  # 0: all C requests in one burst
            await sender(s, url + "/completions", headers, payload, r, target)

        await asyncio.gather(*(one(i, r) for i, r in enumerate(recs)))
        await check.stop()
        lag = check.lag.summary()
        rx_figures = rx.take() if rx is not None else None
        rx_block = _rx_check(rx_figures, time.perf_counter() - t0) if rx_figures else None
        # the receive loop's lateness, as the self-check names its causes (run/effects.py)
        reasons = causes({}, 0, 0.0, rx_block) if rx_block else []
    finally:
        await s.close()
    for r in recs:
        at = r.times
        out.append({"id": r.id, "t0_ns": at.t0_ns, "first_ns": at.first_text_ns or 0,
                    "ttft_ns": (at.first_text_ns or 0) - at.t0_ns, "gaps": r.parser.gaps_ns, "ok": r.ok})
    return {"requests": out, "lag_p99_us": lag.get("p99", 0), "late_ticks": check.late_ticks,
            "rx_lag_p99_us": rx_block["lag_us"].get("p99", 0) if rx_block else None,
            "rx_late_reads": rx_block["late_reads"] if rx_block else None, "rx_reasons": reasons,
            "paths": sorted({r.outcome.path for r in recs})}


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--stagger-ms", type=float, default=0.0,
                    help="start the C requests this far apart (default 0: one burst; the simulator, "
                         "one thread, then reads the last of them late)")
    a = ap.parse_args()
    print(f"accuracy: simulator TTFT 50 ms, ITL 10 ms, {a.tokens} tokens/request, requests started "
          f"{a.stagger_ms:g} ms apart; cpus={os.cpu_count()}")
    for c in a.concurrency:
        for label, core, http in (("cython/rx-loop", "cython", "native"),
                                  ("cython/asyncio", "cython", "native-asyncio"),
                                  ("python/asyncio", "python", "native-asyncio"),
                                  ("cython/aiohttp", "cython", "aiohttp")):
            with tempfile.TemporaryDirectory() as d:
                trace = os.path.join(d, "trace.jsonl")
                with simulator(SIM, trace) as url:
                    got = worker(__file__, [url, str(c), str(a.tokens), http, str(a.stagger_ms)], core)
                time.sleep(0.2)
                truth = {t["id"]: t for t in map(json.loads, open(trace))}
            ttft_err, itl_err, stamp_err, read_lag, ttft_send_err = [], [], [], [], []
            for r in got["requests"]:
                t = truth.get(r["id"])
                if not r["ok"] or t is None:
                    continue
                times = [ts for ts, _ in t["chunks"]]
                ttft_err.append(abs(r["ttft_ns"] - (times[0] - t["arrival_ns"])) / 1e6)
                true_gaps = [b - x for x, b in zip(times, times[1:], strict=False)]
                itl_err += [abs(m - g) / 1e6 for m, g in zip(r["gaps"], true_gaps, strict=False)]
                # one clock for both processes: the client's stamp of each text chunk against
                # the simulator's write of it, and the simulator's arrival against the send
                stamps = [r["first_ns"]]
                for g in r["gaps"]:
                    stamps.append(stamps[-1] + g)
                stamp_err += [(m - w) / 1e6 for m, w in zip(stamps, times, strict=False)]
                read_lag.append((t["arrival_ns"] - r["t0_ns"]) / 1e6)
                # TTFT against the simulator's write of the first chunk, counted from the send
                ttft_send_err.append(abs(r["ttft_ns"] - (times[0] - r["t0_ns"])) / 1e6)
            flagged = (got["lag_p99_us"] > 5000 and got["late_ticks"] >= 5) or bool(got["rx_reasons"])
            rx = (f" | receive-loop lag p99 {got['rx_lag_p99_us'] / 1000:.2f} ms"
                  if got["rx_lag_p99_us"] is not None else "")
            print(f"  C={c:<5} {label:<14}  TTFT |err| p50 {pct(ttft_err, 50):6.3f} "
                  f"p99 {pct(ttft_err, 99):6.3f} max {max(ttft_err):6.3f} ms | "
                  f"ITL |err| p50 {pct(itl_err, 50):6.3f} "
                  f"p99 {pct(itl_err, 99):6.3f} max {max(itl_err):6.3f} ms | loop lag p99 "
                  f"{got['lag_p99_us'] / 1000:.1f} ms{rx}{' -> the client ran late' if flagged else ''} "
                  f"(read by {'/'.join(got['paths'])})")
            print(f"  {'':<22}TTFT |err| against send -> first write p50 {pct(ttft_send_err, 50):6.3f} "
                  f"p99 {pct(ttft_send_err, 99):6.3f} max {max(ttft_send_err):6.3f} ms")
            print(f"  {'':<22}chunk stamp - server write p50 {pct(stamp_err, 50):6.3f} "
                  f"p99 {pct(stamp_err, 99):6.3f} max {max(stamp_err):6.3f} ms | "
                  f"server read lag (arrival - send) p50 {pct(read_lag, 50):6.3f} "
                  f"p99 {pct(read_lag, 99):6.3f} ms")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        url, c, tokens, http, stagger = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], \
            float(sys.argv[6])
        try:  # the loop `benchc run` uses: uvloop when installed
            import uvloop
        except ImportError:
            emit(asyncio.run(run(url, c, tokens, http, stagger)))
        else:
            emit(uvloop.run(run(url, c, tokens, http, stagger)))
    else:
        main()
