"""How much repeated runs of one setup differ, and whether `compare` tells a 10% faster one
apart: the figures behind compare's noise floor (results/compare.NOISE_FLOOR, docs/answers.md).

With --pairs N: compare's false-positive rate at its default settings. N single runs (no
repeats) of specs/demo.yaml, every pair compared as `benchc compare` would: the share of
latency figures called beyond noise between identical runs (each such call is a false
positive), per metric, and how often a `--fail-on 'METRIC > +10%'` gate would fire where
the table says the change is noise.

Three result files, each one point at C=8 (one batch of 8 requests of 32 tokens, so a run is
one wave) repeated N times on the embedded simulator: the minimax preset, the same again, and
the same with every step 1.1x as fast. Prints each side's spread of output tok/s between runs
(sd, % of the mean), the difference of the means of the two same-preset sides, and what
compare says of same vs same and same vs faster.

    python benchmarks/noise_floor.py [--repeats 5]
    python benchmarks/noise_floor.py --pairs 6
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from benchc.cli import main  # noqa: E402
from benchc.results.compare import LATENCIES, NOISE_FLOOR, check_gates, compare_docs  # noqa: E402
from benchc.results.document import read  # noqa: E402
from benchc.sim.model import MINIMAX_TABLE  # noqa: E402

SPEC = """\
version: 1
name: noise
target:
  sim: {{preset: minimax-m2.5-tp4{sim}}}
  model: MiniMaxAI/MiniMax-M2.5
workload:
  dataset:
    random: {{input_tokens: 16, output_tokens: 32}}
load:
  warmup: {{requests: 1}}
  sweep: {{concurrency: [8]}}
  requests: 8
  repeats: {repeats}
output: {{path: {path}}}
"""


def run_side(d: str, name: str, repeats: int, speedup: float) -> dict:
    sim = ""
    if speedup != 1.0:
        table = [[b, round(ms / speedup, 4)] for b, ms in MINIMAX_TABLE]
        sim = f", step_table: {json.dumps(table)}"
    spec = os.path.join(d, f"{name}.yaml")
    out = os.path.join(d, f"{name}.json")
    with open(spec, "w") as f:
        f.write(SPEC.format(sim=sim, repeats=repeats, path=out))
    with contextlib.redirect_stdout(io.StringIO()):
        if main(["run", spec, "--quiet"]) != 0:
            raise SystemExit(f"the {name} run failed")
    return read(out)


def runs_tok_s(doc: dict) -> list[float]:
    return [p["throughput"]["output_tok_s"] for p in doc["points"]]


def demo_runs(n: int, keep: str | None) -> list[dict]:
    """N single runs of the demo; with `keep`, kept in that folder and reused from it."""
    demo = os.path.join(os.path.dirname(__file__), "..", "specs", "demo.yaml")
    with tempfile.TemporaryDirectory() as scratch:
        d = keep or scratch
        os.makedirs(d, exist_ok=True)
        docs = []
        for i in range(n):
            out = os.path.join(d, f"run{i}.json")
            if not os.path.exists(out):
                with contextlib.redirect_stdout(io.StringIO()):
                    code = main(["run", demo, "--quiet", "--out", out])
                if code != 0:
                    raise SystemExit(f"demo run {i} exited {code}")
            docs.append(read(out))
    return docs


def false_positives(n: int, keep: str | None) -> None:
    """N identical single runs of the demo, every pair compared at the default settings."""
    from itertools import combinations

    from benchc.spec.thresholds import parse_gate

    docs = demo_runs(n, keep)
    gates = []
    for m in LATENCIES:
        try:
            gates.append(parse_gate(f"{m} > +10%"))
        except ValueError:
            pass  # a figure gates cannot name (the reasoning ones)
    figures = judged = called = fired = fired_on_noise = 0
    per_metric: dict[str, int] = {}
    for a, b in combinations(docs, 2):
        cmp = compare_docs(a, b)
        for row in cmp["points"]:
            for key, m in row["metrics"].items():
                if "." not in key:
                    continue
                figures += 1
                judged += m["significant"] != "n/a"
                if m["significant"] == "yes":
                    called += 1
                    per_metric[key] = per_metric.get(key, 0) + 1
        for breach in check_gates(cmp, gates):
            fired += 1
            point, gate = breach.split(": ", 1)
            metric = gate.split()[0]
            row = next(r for r in cmp["points"] if r["point"] == point)
            if row["metrics"][metric]["significant"] == "no":
                fired_on_noise += 1
    pairs = n * (n - 1) // 2
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; {n} single runs of "
          f"specs/demo.yaml, {pairs} identical pairs compared at the default settings")
    by_metric = ", ".join(f"{k} {v}" for k, v in sorted(per_metric.items()))
    print(f"  latency figures: {figures}; judged (not n/a: enough samples, no client-limited side) "
          f"{judged}; called beyond noise {called} ({called / max(judged, 1):.2%} of those judged)"
          + (f"; by metric: {by_metric}" if per_metric else ""))
    print(f"  'METRIC > +10%' gates fired: {fired}; on a change the table calls noise: {fired_on_noise}")


def main_() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--pairs", type=int, default=0, metavar="N",
                    help="compare's false-positive rate over every pair of N identical single runs")
    ap.add_argument("--keep", metavar="DIR", help="--pairs: keep the runs in DIR (and reuse those there)")
    args = ap.parse_args()
    if args.pairs:
        false_positives(args.pairs, args.keep)
        return
    with tempfile.TemporaryDirectory() as d:
        docs = {name: run_side(d, name, args.repeats, speed)
                for name, speed in (("base", 1.0), ("again", 1.0), ("faster", 1.1))}
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; "
          f"{args.repeats} runs a side of C=8, 8 x 32 tokens")
    means = {}
    for name, doc in docs.items():
        v = runs_tok_s(doc)
        means[name] = statistics.fmean(v)
        sd = statistics.stdev(v) / means[name]
        print(f"  {name:<7} output tok/s mean {means[name]:8.1f}  spread sd {sd:.2%}"
              f"  runs {', '.join(f'{x:.1f}' for x in v)}")
    print(f"  means of the two same-preset sides differ by {means['again'] / means['base'] - 1:+.2%}; "
          f"faster vs base {means['faster'] / means['base'] - 1:+.2%} (the tables say +10%)")
    for other in ("again", "faster"):
        m = compare_docs(docs["base"], docs[other])["points"][0]["metrics"]["output_tok_s"]
        print(f"  compare base vs {other}: change {m['change']:+.2%}, beyond noise: {m['significant']} "
              f"(floor {NOISE_FLOOR:.0%})")


if __name__ == "__main__":
    main_()
