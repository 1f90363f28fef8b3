"""The digital twin end to end (issue 33): fit, predict, measure and compare in one command.

1. measure the source (a simulator preset, or a real server) at the fit concurrencies (C=1,2,4),
   and at the smallest of them with a longer prompt (--fit-long);
2. `benchc fit` those results into a twin file;
3. measure the source at the predicted concurrencies, and take its capacity: the request rate
   at the largest of them;
4. measure the source at open-loop Poisson rates, fractions of that capacity;
5. run the same predicted points against the twin (`target.sim: {preset: twin.yaml}`);
6. print, per predicted point, the source's and the twin's output tok/s, TPOT p50, TTFT p50
   and p99, and the twin's error (twin / source - 1); the median of each over --repeats rounds.

    python benchmarks/twin.py --preset kimi-k2.5-nvfp4-tp8
    python benchmarks/twin.py --preset all                      # every built-in timed preset
    python benchmarks/twin.py --fit-timing                      # how long fitting 10 points takes
    python benchmarks/twin.py --base-url http://127.0.0.1:8020/v1 --model tiny-random \\
        --api completions --input 128 --fit-long 512 --predict 8,16 --rates 0.8 --repeats 3

Every spec, result and twin is kept in --keep DIR (default: a temporary folder), so the
figures can be read again with `benchc compare SOURCE.json TWIN.json`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from benchc.cli import main  # noqa: E402
from benchc.results.document import read  # noqa: E402
from benchc.sim.model import PRESETS  # noqa: E402

# the presets with a timing model to fit (`instant` has none: its figures are the client's)
TIMED_PRESETS = [p for p in PRESETS if p != "instant"]
FIGURES = (("output_tok_s", "output tok/s"), ("tpot_p50", "TPOT p50"), ("ttft_p50", "TTFT p50"),
           ("ttft_p99", "TTFT p99"))

SPEC = """\
version: 1
name: {name}
target:
{target}
  api: {api}
  model: {model}
workload:
  dataset:
    random: {{input_tokens: {input}, output_tokens: {output}, seed: {seed}}}
  sampling: {{temperature: 0, ignore_eos: true}}
load:
  warmup: {{requests: {warmup}}}
  sweep:
{sweep}
  requests: {requests}
output: {{path: {path}}}
"""


def run_spec(d: str, name: str, target: str, sweep: str, args: argparse.Namespace, seed: int,
             input_tokens: int | None = None, requests: int | None = None) -> dict:
    spec, out = os.path.join(d, f"{name}.yaml"), os.path.join(d, f"{name}.json")
    with open(spec, "w") as f:
        f.write(SPEC.format(name=name, target=target, api=args.api, model=args.model_name,
                            input=input_tokens or args.input, output=args.output, seed=seed,
                            warmup=args.warmup, sweep=sweep, requests=requests or args.requests,
                            path=out))
    with contextlib.redirect_stdout(io.StringIO()):
        if main(["run", spec, "--quiet", "--force"]) != 0:
            raise SystemExit(f"the run {spec} failed")
    return read(out)


def figures(point: dict) -> dict[str, float]:
    lat = point["latency"]
    return {"output_tok_s": point["throughput"]["output_tok_s"],
            "tpot_p50": lat["tpot_us"]["p50"] / 1000, "ttft_p50": lat["ttft_us"]["p50"] / 1000,
            "ttft_p99": lat["ttft_us"]["p99"] / 1000}


def label(point: dict) -> str:
    p = point["params"]
    return f"C={p['concurrency']}" if p.get("concurrency") else f"{p['rate_rps']:.3g}/s"


def one_round(d: str, source: str, args: argparse.Namespace, seed: int) -> dict[str, dict]:
    """One fit-predict-measure round: {point label: {figure: (source, twin)}}."""
    conc = lambda cs: "    concurrency: [" + ", ".join(map(str, cs)) + "]"  # noqa: E731
    # every source run its own prompts (a seed each): a real server's prefix cache keeps what
    # an earlier run sent; the twin's runs take the source's seeds (the same workload)
    run_spec(d, "fit", source, conc(args.fit), args, seed)
    fits = [os.path.join(d, "fit.json")]
    if args.fit_long:  # a second prompt length at the smallest concurrency: the prefill's slope
        run_spec(d, "fit-long", source, conc(args.fit[:1]), args, seed + 1, input_tokens=args.fit_long)
        fits.append(os.path.join(d, "fit-long.json"))
    twin = os.path.join(d, "twin.yaml")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        if main(["fit", *fits, "-o", twin, "--force"]) != 0:
            raise SystemExit("benchc fit refused the source's run")
    many = max(args.requests, 2 * max(args.predict))  # two waves of the largest concurrency
    measured = run_spec(d, "source-closed", source, conc(args.predict), args, seed + 2, requests=many)
    capacity = max(p["throughput"]["request_s"] for p in measured["points"])
    rates = [round(capacity * f, 4) for f in args.rates]
    rate_sweep = "    rate: [" + ", ".join(f"{r}/s" for r in rates) + "]\n    arrival: poisson"
    measured_open = run_spec(d, "source-open", source, rate_sweep, args, seed + 3, requests=many)
    twin_target = f"  sim: {{preset: {twin}}}"
    predicted = run_spec(d, "twin-closed", twin_target, conc(args.predict), args, seed + 2,
                         requests=many)
    predicted_open = run_spec(d, "twin-open", twin_target, rate_sweep, args, seed + 3, requests=many)
    del measured_open, predicted, predicted_open
    print(f"  round {seed}: capacity {capacity:.3f} req/s at C<={max(args.predict)}; files in {d}",
          file=sys.stderr)
    return compared(d, args.rates)


def compared(d: str, fractions: list[float]) -> dict[str, dict]:
    """A round's figures from its folder: {point: {figure: (source, twin)}}; open-loop points
    named by their fraction of capacity (each round measures its own capacity)."""
    out: dict[str, dict] = {}
    for kind in ("closed", "open"):
        src, tw = (read(os.path.join(d, f"{who}-{kind}.json")) for who in ("source", "twin"))
        for i, (ps, pt) in enumerate(zip(src["points"], tw["points"], strict=True)):
            fs, ft = figures(ps), figures(pt)
            name = label(ps) if kind == "closed" else f"{fractions[i]:.0%} cap"
            out[name] = {k: (fs[k], ft[k]) for k in fs}
    return out


def report(name: str, rounds: list[dict[str, dict]], limits: dict[str, float]) -> bool:
    """Print the medians over rounds; True when every error is within its limit."""
    ok = True
    print(f"\n{name}: twin vs source, median of {len(rounds)} round(s) (error = twin / source - 1)")
    head = f"{'point':<10}" + "".join(f"{title:>28}" for _, title in FIGURES)
    print(head)
    for point in rounds[0]:
        cells = []
        for key, _ in FIGURES:
            src = statistics.median(r[point][key][0] for r in rounds)
            tw = statistics.median(r[point][key][1] for r in rounds)
            err = statistics.median(r[point][key][1] / r[point][key][0] - 1 for r in rounds)
            flag = "" if abs(err) <= limits[key] else "!"
            ok = ok and not flag
            cells.append(f"{src:>9.2f} {tw:>9.2f} {err:>+6.1%}{flag:1}")
        print(f"{point:<10}" + "".join(f"{c:>28}" for c in cells))
    print("limits: " + ", ".join(f"{t} {limits[k]:.0%}" for k, t in FIGURES) + " ('!' beyond)")
    return ok


def fit_timing(repeats: int = 5) -> None:
    """`benchc fit` on a 10-point result (tests/data's Kimi fixture, its points spread over ten
    concurrencies), whole command included (start, reading, schema validation): the median."""
    import copy
    import json
    import time

    doc = read(os.path.join(os.path.dirname(__file__), "..", "tests", "data", "result-v1-kimi.json"))
    points = []
    for i, c in enumerate([1, 2, 3, 4, 5, 6, 8, 10, 12, 16]):
        p = copy.deepcopy(doc["points"][min(i, len(doc["points"]) - 1)])
        p["params"]["concurrency"], p["id"] = c, f"c={c}"
        points.append(p)
    doc["points"] = points
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ten.json")
        with open(path, "w") as f:
            json.dump(doc, f)
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                if main(["fit", path, "-o", os.path.join(d, "t.yaml"), "--force"]) != 0:
                    raise SystemExit("fit failed")
            times.append(time.perf_counter() - t)
    print(f"benchc fit, a 10-point result: median {statistics.median(times):.3f} s of {repeats} "
          f"(in-process; load average {os.getloadavg()[0]:.1f})")


def main_() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", help="a built-in simulator preset, or 'all' (the timed ones)")
    ap.add_argument("--base-url", help="a real server's /v1 root instead of a preset")
    ap.add_argument("--model", help="the served model name (with --base-url)")
    ap.add_argument("--api", default="chat", choices=["chat", "completions"])
    ap.add_argument("--fit", default="1,2,4", help="concurrencies to fit from")
    ap.add_argument("--fit-long", type=int, default=1024,
                    help="a second prompt length, measured at the smallest fit concurrency "
                         "(0: none; the prefill rate then holds a first token's fixed cost)")
    ap.add_argument("--predict", default="8,16,32,64", help="concurrencies to predict")
    ap.add_argument("--rates", default="0.5,0.8,1.2", help="open-loop rates, fractions of capacity")
    ap.add_argument("--input", type=int, default=256)
    ap.add_argument("--output", type=int, default=64)
    ap.add_argument("--requests", type=int, default=32, help="per point")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1, help="rounds; medians are printed")
    ap.add_argument("--keep", help="keep specs, results and twins in this folder")
    ap.add_argument("--fit-timing", action="store_true", help="only time `benchc fit` on 10 points")
    ap.add_argument("--report-only", action="store_true",
                    help="measure nothing: the tables again from the rounds kept in --keep")
    args = ap.parse_args()
    if args.fit_timing:
        fit_timing()
        return
    args.fit = [int(x) for x in args.fit.split(",")]
    args.predict = [int(x) for x in args.predict.split(",")]
    args.rates = [float(x) for x in args.rates.split(",")]
    if bool(args.preset) == bool(args.base_url):
        ap.error("give --preset or --base-url")
    if args.report_only and not args.keep:
        ap.error("--report-only reads the rounds kept in --keep")
    if args.base_url:
        if not args.model:
            ap.error("--base-url needs --model")
        sources = {args.base_url: f"  base_url: {args.base_url}"}
        limits = {"output_tok_s": 0.10, "tpot_p50": 0.10, "ttft_p50": 0.20, "ttft_p99": float("inf")}
    else:
        names = TIMED_PRESETS if args.preset == "all" else [args.preset]
        sources = {n: f"  sim: {{preset: {n}}}" for n in names}
        limits = dict.fromkeys(("output_tok_s", "tpot_p50", "ttft_p50", "ttft_p99"), 0.03)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; "
          f"fit C={args.fit}, predict C={args.predict} and rates {args.rates} x capacity; "
          f"{args.requests} requests of {args.input} -> {args.output} tokens a point")
    ok = True
    for name, target in sources.items():
        args.model_name = args.model or PRESETS[name].model
        rounds = []
        for i in range(args.repeats):
            base = args.keep or tempfile.mkdtemp(prefix="benchc-twin-")
            d = os.path.join(base, name.replace("/", "_").replace(":", "_"), f"round{i}")
            os.makedirs(d, exist_ok=True)
            if args.report_only:
                rounds.append(compared(d, args.rates))
            else:
                rounds.append(one_round(d, target, args, seed=1000 + 100 * i))
        ok = report(name, rounds, limits) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main_()
