"""`benchc run` end to end beside its parts: tokens ingested per client CPU-second by a whole
`benchc run` point (its own process, pinned to core 1) against benchmarks/fast_server.py
(core 0), and, in the same run, interleaved, the component figure of
benchmarks/client_ingest.py for the same transport (the receive loop, `rx-loop`, which
`benchc run` reads plain http with) and the same stream.

    python benchmarks/run_ingest.py [--concurrency 256 1024] [--repeats 3] [--modes per-token coalesced]

`benchc run`'s figure is the point's output tokens over its client block's cpu_s (user+sys
of the whole process, every thread, over the point's own window: not the start, the plan,
the warm-up or the result's writing). Prints per mode and C the medians of both and their
ratio (the target: at least 0.8), and of each side's CPU per request split by thread: the
receive loop's (its own clock, `rx_loop.cpu_s` in the point) and the rest of the process
(the event loop's thread: sending, the step's bookkeeping, the recorders), so that a gap
shows where it lies; and each repeat's ratio (its two runs back to back), which on a shared
machine moves more from repeat to repeat than the medians do.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, __file__.rsplit("/", 2)[0])
from benchmarks._harness import pinned, worker  # noqa: E402
from benchmarks.client_ingest import CLIENTS, fast_server  # noqa: E402

SPEC = """\
version: 1
name: run-ingest
target: {{base_url: "{url}", model: fast, api: chat}}
workload:
  dataset:
    random: {{input_tokens: 8, output_tokens: {tokens}}}
  sampling: {{ignore_eos: true}}
load:
  warmup: {{requests: {c}}}
  sweep: {{concurrency: [{c}]}}
  requests: {requests}
output: {{path: {out}}}
"""


def run_point(url: str, c: int, n: int, tokens: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        spec, out = os.path.join(d, "s.yaml"), os.path.join(d, "r.json")
        with open(spec, "w") as f:
            f.write(SPEC.format(url=url, tokens=tokens, c=c, requests=c * n, out=out))
        subprocess.run(pinned([sys.executable, "-m", "benchc", "run", spec, "--quiet", "--force"], 1),
                       check=True, stdout=subprocess.DEVNULL, timeout=600)
        with open(out) as f:
            (p,) = json.load(f)["points"]
    client = p["client"]
    return {"tokens": p["tokens"]["output"], "cpu_s": client["cpu_s"], "wall_s": client["wall_s"],
            "requests": p["counts"]["sent"], "rx_cpu_s": client.get("rx_loop", {}).get("cpu_s"),
            "failed": p["counts"]["failed"], "limited": client["client_limited"]}


def split_us(rows: list[dict]) -> str:
    """Medians of CPU per request: the event loop's thread (the process less the receive
    loop's) and the receive loop's thread."""
    rows = [r for r in rows if r.get("rx_cpu_s") is not None]
    if not rows:
        return "no receive loop"
    loop = statistics.median((r["cpu_s"] - r["rx_cpu_s"]) / r["requests"] * 1e6 for r in rows)
    rx = statistics.median(r["rx_cpu_s"] / r["requests"] * 1e6 for r in rows)
    return f"{loop:.0f} + {rx:.0f} us/request (event loop + receive loop)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--modes", nargs="+", default=["per-token", "coalesced"],
                    choices=["per-token", "coalesced"])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=4.0, help="per-token: about this long per request")
    ap.add_argument("--interval-ms", type=float, default=5.0)
    ap.add_argument("--server-rate", type=float, default=12_000)
    ap.add_argument("--coalesced-requests", type=int, default=8)
    a = ap.parse_args()
    load = os.getloadavg()
    print(f"run_ingest: {a.repeats} repeats (medians); cpus={os.cpu_count()}, load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start", flush=True)
    kind, core = CLIENTS["rx-loop"]
    for mode in a.modes:
        for c in a.concurrency:
            if mode == "per-token":  # as client_ingest.py chooses them
                interval = max(a.interval_ms, 1000.0 * c / a.server_rate)
                tokens, n = max(16, min(a.tokens, int(a.seconds * 1000 / interval))), 1
            else:
                interval, tokens, n = 0.0, a.tokens, a.coalesced_requests
            comp, run = [], []
            for _ in range(a.repeats):
                with fast_server(interval) as (url, _):
                    comp.append(worker(os.path.join(os.path.dirname(__file__), "client_ingest.py"),
                                       [kind, url, str(c), str(n), str(tokens)], core))
                with fast_server(interval) as (url, _):
                    run.append(run_point(url, c, n, tokens))
            comp_fig = statistics.median(r["tokens"] / r["cpu_s"] for r in comp)
            run_fig = statistics.median(r["tokens"] / r["cpu_s"] for r in run)
            bad = sum(r["failed"] for r in run) + sum(sum(r.get("errors", {}).values()) for r in comp)
            print(f"  {mode} C={c} ({tokens} tokens x {n} per stream): component (rx-loop) "
                  f"{comp_fig:,.0f} tok/cpu-s; benchc run {run_fig:,.0f} tok/cpu-s; "
                  f"ratio {run_fig / comp_fig:.2f}" + (f"  ERRORS {bad}" if bad else ""), flush=True)
            # each repeat's pair (the two ran back to back): how far the ratio moves between
            # repeats on a shared machine, beside the ratio of the medians above
            pairs = " ".join(f"{(b['tokens'] / b['cpu_s']) / (a['tokens'] / a['cpu_s']):.2f}"
                             for a, b in zip(comp, run, strict=True))
            print(f"    per request: component {split_us(comp)}; benchc run {split_us(run)}; "
                  f"ratio per repeat {pairs}", flush=True)


if __name__ == "__main__":
    main()
