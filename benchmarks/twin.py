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
    python benchmarks/twin.py --indistinguishable --preset all  # why C<=4 cannot tell C=8..64
    python benchmarks/twin.py --base-url http://127.0.0.1:8020/v1 --model tiny-random \\
        --api completions --input 128 --fit-long 512 --predict 8,16 --rates 0.8 --repeats 3

Every spec, result and twin is kept in --keep DIR (default: a temporary folder), so the
figures can be read again with `benchc compare SOURCE.json TWIN.json`, the tables with
--report-only, and a change of the fit measured against the same measurements of the source with
--refit (the same command line and --keep: each round fitted again, its twin run again).
With --repeats 2 or more, the source's own figures round by round and their spread follow the
table, beside the server's own timings where its /metrics phases were kept: an error within
that spread says nothing about the twin.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from benchc.cli import main  # noqa: E402
from benchc.results.document import read  # noqa: E402
from benchc.sim.fit import fit  # noqa: E402
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
    if os.path.exists(out):  # a run again in a kept folder (--refit): benchc run would pick a new name
        os.remove(out)
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


def server_figures(point: dict) -> dict[str, float] | None:
    """The server's own figures of a point (vLLM's /metrics phases, kept in the result): TPOT
    as its decode phase over a request's later tokens, TTFT as its own; None without them.
    Beside the client's, they tell the server's noise (its own figures moved) from the
    transport's and the client's."""
    prom = point.get("server_timings_prometheus") or {}
    done = point["counts"]["completed"]
    if prom.get("decode_ms_mean") is None or prom.get("ttft_ms_mean") is None or not done:
        return None
    out_tokens = point["tokens"]["output"] / done
    return {"tpot_p50": prom["decode_ms_mean"] / max(1.0, out_tokens - 1), "ttft_p50": prom["ttft_ms_mean"]}


def compared(d: str, fractions: list[float], twin: str = "twin") -> dict[str, dict]:
    """A round's figures from its folder: {point: {figure: (source, twin)}}, and under "server"
    the source's own server-side figures (server_figures); open-loop points named by their
    fraction of capacity (each round measures its own capacity). `twin`: the files' prefix of
    the twin's runs (twin-refit: a --refit's)."""
    out: dict[str, dict] = {}
    for kind in ("closed", "open"):
        src, tw = (read(os.path.join(d, f"{who}-{kind}.json")) for who in ("source", twin))
        for i, (ps, pt) in enumerate(zip(src["points"], tw["points"], strict=True)):
            fs, ft = figures(ps), figures(pt)
            name = label(ps) if kind == "closed" else f"{fractions[i]:.0%} cap"
            out[name] = {k: (fs[k], ft[k]) for k in fs}
            out[name]["server"] = server_figures(ps)
    return out


def refit(d: str, args: argparse.Namespace) -> None:
    """Fit a kept round's fit results again with this checkout's `benchc fit` and run the new
    twin at the round's own predicted points (its kept source runs say which): a change of the
    fit measured against the same measurements of the source, without measuring it again."""
    fits = [os.path.join(d, f) for f in ("fit.json", "fit-long.json") if os.path.exists(os.path.join(d, f))]
    twin = os.path.join(d, "twin-refit.yaml")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        if main(["fit", *fits, "-o", twin, "--force"]) != 0:
            raise SystemExit(f"benchc fit refused {fits}")
    closed, opened = (read(os.path.join(d, f"source-{k}.json")) for k in ("closed", "open"))
    cs = [p["params"]["concurrency"] for p in closed["points"]]
    rates = [p["params"]["rate_rps"] for p in opened["points"]]
    seed = lambda doc: doc["plan"]["combinations"][0]["workload"]["params"]["seed"]  # noqa: E731
    many = closed["points"][0]["params"]["requests"]
    target = f"  sim: {{preset: {twin}}}"
    run_spec(d, "twin-refit-closed", target, "    concurrency: [" + ", ".join(map(str, cs)) + "]",
             args, seed(closed), requests=many)
    run_spec(d, "twin-refit-open", target, "    rate: [" + ", ".join(f"{r}/s" for r in rates)
             + "]\n    arrival: poisson", args, seed(opened), requests=many)


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
    if len(rounds) > 1:
        spread(rounds)
    return ok


def spread(rounds: list[dict[str, dict]]) -> None:
    """The source's own figures round by round, their spread ((max - min) / median), and the
    server's own (its /metrics phases) where the result has them: how much of an error the
    source's noise alone can make."""
    print("\nthe source round by round (spread = (max - min) / median); server: its own /metrics phases")
    print(f"{'point':<10}" + "".join(f"{title:>34}" for _, title in FIGURES[:3])
          + f"{'server TPOT':>26}{'server TTFT':>26}")
    for point in rounds[0]:
        cells = []
        for key, _ in FIGURES[:3]:
            vals = [r[point][key][0] for r in rounds]
            cells.append(_round_cell(vals, 34))
        for key in ("tpot_p50", "ttft_p50"):
            srv = [r[point]["server"][key] for r in rounds if r[point].get("server")]
            cells.append(_round_cell(srv, 26) if srv else f"{'-':>26}")
        print(f"{point:<10}" + "".join(cells))


def _round_cell(vals: list[float], width: int) -> str:
    med = statistics.median(vals)
    text = "/".join(f"{v:.1f}" for v in vals) + f" {(max(vals) - min(vals)) / med:>4.0%}"
    return f"{text:>{width}}"


def other_server(table: list[tuple[int, float]], fit_top: int) -> list[tuple[int, float]]:
    """A step law that is `table`'s own up to batch `fit_top` and a straight line beyond it, at
    the slope of its last measured segment: a server no run at C <= fit_top tells apart from
    the preset (the simulator's step at batch b <= C is all such a run depends on)."""
    inside = [(b, ms) for b, ms in table if b <= fit_top]
    (b0, y0), (b1, y1) = inside[-2], inside[-1]
    slope = (y1 - y0) / (b1 - b0)
    top = table[-1][0]
    return inside + [(top, round(y1 + slope * (top - b1), 4))]


def indistinguishable(args: argparse.Namespace, names: list[str]) -> None:
    """Each preset beside another server with its step law up to the largest fit concurrency and
    a line beyond: both measured at the fit concurrencies (the data a fit would see) and at the
    predicted ones. The first differ by the machine's noise only; where the second differ by
    more than twice a tolerance, no fit of the first can be within that tolerance of both."""
    conc = lambda cs: "    concurrency: [" + ", ".join(map(str, cs)) + "]"  # noqa: E731
    for name in names:
        table = PRESETS[name].step_table or []
        alt = other_server(table, max(args.fit))
        args.model_name = PRESETS[name].model
        d = os.path.join(args.keep or tempfile.mkdtemp(prefix="benchc-twin-"), "indistinguishable",
                         name)
        os.makedirs(d, exist_ok=True)
        servers = {"preset": f"  sim: {{preset: {name}}}",
                   "other": f"  sim: {{preset: {name}, step_table: {[list(x) for x in alt]}}}"}
        docs = {}
        for who, target in servers.items():
            for part, cs in (("fit", args.fit), ("predict", args.predict)):
                many = max(args.requests, 2 * max(cs))
                if args.report_only:
                    docs[who, part] = read(os.path.join(d, f"{who}-{part}.json"))
                else:
                    docs[who, part] = run_spec(d, f"{who}-{part}", target, conc(cs), args, seed=1000,
                                               requests=many)
        print(f"\n{name}: the preset's step law (ms) {table}\n  another server's: {alt}")
        # what a fit sees: the step table each server's runs at the fit concurrencies give
        for who in servers:
            fitted = fit([(os.path.join(d, f"{who}-fit.json"), docs[who, "fit"])])["sim"]["step_table"]
            print(f"  fitted from the {who}'s C={args.fit}: "
                  + ", ".join(f"{b}: {ms:.2f}" for b, ms in fitted[:-1]) + " ms")
        print(f"{'point':<8}" + "".join(f"{title:>30}" for _, title in FIGURES)
              + "   (preset / other server, other / preset - 1)")
        for part in ("fit", "predict"):
            for pa, pb in zip(docs["preset", part]["points"], docs["other", part]["points"], strict=True):
                fa, fb = figures(pa), figures(pb)
                cells = [f"{fa[k]:>9.2f} {fb[k]:>9.2f} {fb[k] / fa[k] - 1:>+7.1%}" for k, _ in FIGURES]
                print(f"{label(pa):<8}" + "".join(f"{c:>30}" for c in cells))
        print(f"  files in {d}")


def fit_timing(repeats: int = 5) -> None:
    """`benchc fit` on a 10-point result (tests/data's Kimi fixture, its points spread over ten
    concurrencies), whole command included (start, reading, schema validation): the median."""
    import copy
    import json

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
    # a real server's prefix cache keeps the prompts of an earlier invocation: seeds that
    # repeated them served the fit's prompts from the cache (2 uncached tokens of 130), and the
    # prefill rate fitted from that was 784 tok/s
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100_000 * 1000,
                    help="the first round's workload seed (default: from the clock, so a real "
                         "server's prefix cache holds none of an earlier invocation's prompts)")
    ap.add_argument("--keep", help="keep specs, results and twins in this folder")
    ap.add_argument("--fit-timing", action="store_true", help="only time `benchc fit` on 10 points")
    ap.add_argument("--indistinguishable", action="store_true",
                    help="each preset beside a server with its step law up to the largest --fit "
                         "concurrency and a line beyond: what no fit from those concurrencies can tell")
    ap.add_argument("--report-only", action="store_true",
                    help="measure nothing: the tables again from the rounds kept in --keep")
    ap.add_argument("--refit", action="store_true",
                    help="measure the source no more: fit each round kept in --keep again with this "
                         "checkout's fit, run the new twins, and compare them with the kept source runs "
                         "(with --report-only: the tables of the last --refit again)")
    args = ap.parse_args()
    if args.fit_timing:
        fit_timing()
        return
    args.fit = [int(x) for x in args.fit.split(",")]
    args.predict = [int(x) for x in args.predict.split(",")]
    args.rates = [float(x) for x in args.rates.split(",")]
    if bool(args.preset) == bool(args.base_url):
        ap.error("give --preset or --base-url")
    if args.indistinguishable:
        if not args.preset:
            ap.error("--indistinguishable compares built-in presets (--preset NAME or all)")
        indistinguishable(args, TIMED_PRESETS if args.preset == "all" else [args.preset])
        return
    if (args.report_only or args.refit) and not args.keep:
        ap.error("--report-only and --refit read the rounds kept in --keep")
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
            if args.refit or args.report_only:
                if not args.report_only:
                    refit(d, args)
                rounds.append(compared(d, args.rates, twin="twin-refit" if args.refit else "twin"))
            else:
                rounds.append(one_round(d, target, args, seed=args.seed + 100 * i))
        ok = report(name, rounds, limits) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main_()
