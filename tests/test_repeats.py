"""Repeats and the sweep's early stop: t intervals, the plan's passes, compare on repeated runs,
the saturation rule; end to end on the simulator (marked slow): intervals that contain what the
simulator's trace says, presets 10% apart told apart and a preset against itself not, a sweep
stopped after the knee of a server of hard capacity."""

import json
import math

import pytest

from benchc.cli import main
from benchc.metrics._hdr import Histogram
from benchc.metrics.intervals import difference_interval, mean_interval, t_cdf, t_quantile
from benchc.plan.compiler import compile_spec
from benchc.plan.search import CapacitySearch
from benchc.results.compare import NOISE_FLOOR, compare_docs
from benchc.results.document import read
from benchc.run.saturation import SweepStop, why_stop
from benchc.sim.model import MINIMAX_TABLE, make_config
from benchc.spec import loader
from tests.simrun import Sim

# --------------------------------------------------------------------------- intervals


def t_density(x: float, df: float) -> float:
    return math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi) \
        * (1 + x * x / df) ** (-(df + 1) / 2)


@pytest.mark.parametrize("df", [1, 2, 4, 9.5, 30, 200])
def test_t_quantile_matches_the_integrated_density(df):
    """P(0 < T < q) by Simpson's rule on the density itself must be 0.475 at q = t(0.975)."""
    q = t_quantile(0.975, df)
    n = 20000
    h = q / n
    area = h / 3 * sum((1 if i in (0, n) else 4 if i % 2 else 2) * t_density(i * h, df) for i in range(n + 1))
    assert area == pytest.approx(0.475, abs=1e-7)
    assert t_cdf(q, df) == pytest.approx(0.975, abs=1e-12)
    assert t_cdf(-q, df) == pytest.approx(0.025, abs=1e-12)
    assert t_quantile(0.025, df) == -q


def test_mean_and_welch_intervals_from_their_formulas():
    xs, ys = [10.0, 12.0, 11.0, 13.0, 9.0], [14.0, 15.0, 13.5, 16.0, 15.5, 14.5]
    a = mean_interval(xs)
    s = math.sqrt(sum((x - 11.0) ** 2 for x in xs) / 4)
    assert (a.mean, a.stdev, a.df) == (11.0, pytest.approx(s), 4)
    assert a.high - a.mean == pytest.approx(t_quantile(0.975, 4) * s / math.sqrt(5))
    d = difference_interval(xs, ys)
    va, vb = s * s / 5, mean_interval(ys).stdev ** 2 / 6
    df = (va + vb) ** 2 / (va * va / 4 + vb * vb / 5)
    assert d.mean == pytest.approx(sum(ys) / 6 - 11.0) and d.df == pytest.approx(df)
    assert d.high - d.mean == pytest.approx(t_quantile(0.975, df) * math.sqrt(va + vb))
    assert d.excludes_zero()
    assert mean_interval([5.0]) is None and difference_interval([1.0], xs) is None
    flat = difference_interval([2.0, 2.0], [3.0, 3.0])  # no spread at all: the difference stands
    assert (flat.low, flat.high) == (1.0, 1.0)


def run_point(runs: list[float], p99: list[float]) -> list[dict]:
    """Result points of a repeated point whose runs gave these figures (what compare reads)."""
    return [{"id": f"c=4#{i + 1}", "combination": 0, "matrix": {},
             "params": {"concurrency": 4, "repeat": i + 1},
             "throughput": {"output_tok_s": t, "total_tok_s": t, "request_s": t / 100},
             "error_rate": 0.0, "latency": {"ttft_us": {"p99": q}}, "client": {"client_limited": False},
             "trust": {"trusted": True}}
            for i, (t, q) in enumerate(zip(runs, p99, strict=True))]


def doc(points: list[dict]) -> dict:
    return {"plan": {"name": "x"}, "target": [{"model": "m"}], "workload_hash": "w", "points": points}


def test_compare_calls_a_change_beyond_noise_only_when_the_runs_say_so():
    base = doc(run_point([100.0, 101.0, 99.0, 100.5, 99.5], [50.0, 52.0, 51.0, 49.0, 50.0]))
    faster = doc(run_point([110.0, 111.0, 109.5, 110.5, 109.0], [50.5, 51.0, 49.5, 50.0, 52.0]))
    row = compare_docs(base, faster)["points"][0]
    assert row["runs"] == [5, 5] and row["point"] == "c=4"
    tput = row["metrics"]["output_tok_s"]
    assert tput["significant"] == "yes" and tput["delta_ci95"][0] > 0
    assert row["metrics"]["ttft.p99"]["significant"] == "no"  # the interval of the difference holds 0
    # a change the intervals see but smaller than the floor is not called one
    tiny = doc(run_point([100.6, 100.65, 100.7, 100.62, 100.68], [50.0] * 5))
    steady = doc(run_point([100.0, 100.05, 100.1, 100.02, 100.08], [50.0] * 5))
    t = compare_docs(steady, tiny)["points"][0]["metrics"]["output_tok_s"]
    assert t["delta_ci95"][0] > 0 and abs(t["change"]) < NOISE_FLOOR and t["significant"] == "no"
    # one run on a side: throughputs stay n/a
    single = doc(run_point([110.0], [50.0]))
    single["points"][0]["latency"] = {}
    assert compare_docs(base, single)["points"][0]["metrics"]["output_tok_s"]["significant"] == "n/a"


# --------------------------------------------------------------------------- saturation rule


def sat_point(pid: str, tok_s: float, e2e_p50: float, error_rate: float = 0.0, repeat=None) -> dict:
    return {"id": pid, "params": {"repeat": repeat}, "throughput": {"output_tok_s": tok_s},
            "latency": {"e2e_us": {"p50": e2e_p50}}, "error_rate": error_rate,
            "client": {"client_limited": False}}


def test_the_saturation_rule_needs_flat_throughput_and_rising_latency_or_errors():
    rule = {"min_gain": 0.1, "latency": "e2e.p50", "max_error_rate": 0.05}
    a = sat_point("c=2", 140.0, 200_000)
    assert why_stop(rule, None, a) is None
    assert why_stop(rule, a, sat_point("c=4", 200.0, 300_000)) is None  # +43%: still gaining
    assert why_stop(rule, a, sat_point("c=4", 145.0, 190_000)) is None  # flat, but latency fell
    assert "saturated" in why_stop(rule, a, sat_point("c=4", 145.0, 400_000))
    assert "error rate 6.00% is above" in why_stop(rule, None, sat_point("c=1", 10.0, 1, error_rate=0.06))


def test_a_stop_in_one_pass_skips_those_loads_in_every_later_pass():
    stop = SweepStop({"min_gain": 0.1, "latency": "e2e.p50", "max_error_rate": None})
    ids = ["c=1", "c=2", "c=4", "c=8"]
    figures = [(80, 100), (140, 110), (142, 220), (143, 440)]
    ran = []
    for r in (1, 2):
        for pos, (pid, (tok, lat)) in enumerate(zip(ids, figures, strict=True)):
            if stop.skips(f"{pid}#{r}", pos):
                continue
            ran.append(f"{pid}#{r}")
            stop.after(sat_point(f"{pid}#{r}", tok, lat, repeat=r), pos)
    assert ran == ["c=1#1", "c=2#1", "c=4#1", "c=1#2", "c=2#2", "c=4#2"]
    rec = stop.record()
    assert rec["after"] == "c=4#1" and rec["skipped"] == ["c=8#1", "c=8#2"]


def test_repeats_compile_to_interleaved_passes_of_their_own_streams():
    text = """\
version: 1
name: t
target: {sim: {preset: instant}, model: m}
workload: {dataset: {random: {input_tokens: 8, output_tokens: 4}}}
load:
  sweep: {concurrency: [1, 4]}
  requests: 5
  repeats: 3
  saturation: {min_gain: 5%}
"""
    plan = compile_spec(loader.load_text(text, "s.yaml", [], {}))
    loads = plan.load_steps()
    assert [s.id for s in loads] == ["c=1#1", "c=4#1", "c=1#2", "c=4#2", "c=1#3", "c=4#3"]
    assert [s.repeat for s in loads] == [1, 1, 2, 2, 3, 3]
    assert len({s.prompt_stream for s in loads}) == len({s.prompts_sha256 for s in loads}) == 6
    assert plan.repeats == 3 and plan.saturation == {"min_gain": 0.05, "latency": "e2e.p50",
                                                     "max_error_rate": None}
    warmup = [s for s in plan.steps if s.kind == "warmup"][0]
    assert plan.budget == {"load_points": 6, "searches": 0, "probes_max": 0,
                           "requests_max": 6 * 5 + warmup.requests}


# --------------------------------------------------------------------------- end to end

SPEC = """\
version: 1
name: r
target:
  sim: {{preset: minimax-m2.5-tp4{sim}}}
  model: MiniMaxAI/MiniMax-M2.5
workload:
  dataset:
    random: {{input_tokens: 16, output_tokens: {out}}}
load:
  warmup: {{requests: 1}}
  sweep: {{concurrency: {sweep}}}
  requests: {requests}
{extra}
output:
  path: {path}
  requests: true
"""


def write(tmp_path, name="s", sweep="[4]", out=16, requests=8, sim="", extra="  repeats: 5"):
    f = tmp_path / f"{name}.yaml"
    f.write_text(SPEC.format(sweep=sweep, out=out, requests=requests, sim=sim, extra=extra,
                             path=str(tmp_path / f"{name}.json")))
    return str(f)


def nearest_rank(values: list[float], pct: float) -> float:
    return sorted(values)[math.ceil(pct / 100 * len(values)) - 1]


@pytest.mark.slow
def test_five_repeats_give_intervals_that_contain_the_traces_value(tmp_path):
    """Steps jittered by up to +-30% make the runs differ; per run, the simulator's trace gives
    output tok/s (its tokens over its own window) and the p50 TPOT (from its chunk writes). The
    mean of those over the runs lies in the 95% interval benchc gives from its own measurement,
    and the pooled histograms hold every request of every run."""
    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4", "--param", "jitter=0.3")
    try:
        spec = write(tmp_path, out=24)
        assert main(["run", spec, "--base-url", sim.url, "--quiet"]) == 0
    finally:
        sim.close()
    trace = sim.records()
    doc_ = read(str(tmp_path / "s.json"))
    (rep,) = doc_["repeats"]
    assert rep["point"] == "c=4" and rep["n"] == 5 and rep["runs"] == [f"c=4#{r}" for r in range(1, 6)]
    records = [json.loads(x) for x in (tmp_path / "s.requests.jsonl").read_text().splitlines()]
    tok_s, tpot = [], []
    for run in rep["runs"]:
        tr = [trace[r["id"]] for r in records if r["point"] == run]
        assert len(tr) == 8 and all(t["cached_tokens"] == 0 for t in tr)  # fresh prompts every run
        window_s = (max(t["end_ns"] for t in tr) - min(t["arrival_ns"] for t in tr)) / 1e9
        tok_s.append(sum(t["output_tokens"] for t in tr) / window_s)
        tpot.append(nearest_rank([(t["end_ns"] - t["chunks"][0][0]) / (t["output_tokens"] - 1) / 1e3
                                  for t in tr], 50))
    m = rep["metrics"]
    lo, hi = m["output_tok_s"]["ci95"]
    assert lo <= sum(tok_s) / 5 <= hi, (tok_s, m["output_tok_s"])
    lo, hi = m["tpot.p50"]["ci95"]
    assert lo <= sum(tpot) / 5 <= hi, (tpot, m["tpot.p50"])
    assert lo < hi  # the runs did differ: the interval is not a point
    # pooled: every request of every run, the runs' histograms added bucket for bucket
    runs = [p for p in doc_["points"] if p["id"] in rep["runs"]]
    for name in ("ttft_us", "tpot_us", "e2e_us"):
        pooled = Histogram.decode(rep["pooled"]["latency"][name]["hdr"])
        hists = [Histogram.decode(p["latency"][name]["hdr"]) for p in runs]
        assert pooled.total_count == sum(h.total_count for h in hists) == 40
        summed = Histogram.decode(runs[0]["latency"][name]["hdr"])
        for h in hists[1:]:
            summed.merge(h)
        assert dict(pooled.nonzero()) == dict(summed.nonzero())


def scaled_table(factor: float) -> str:
    """The minimax preset's step table with every step time divided by `factor`."""
    return json.dumps([[b, round(ms / factor, 4)] for b, ms in MINIMAX_TABLE])


@pytest.mark.slow
def test_compare_tells_presets_10_percent_apart_and_not_a_preset_from_itself(tmp_path, capsys):
    """Three runs a side of a point at C=8 (one batch of 8 requests of 32 tokens each, so that a
    run is one wave, without the jitter of refilling the batch): the minimax preset, again, and
    the same with every step 1.1x as fast (10% more output tok/s, from the table). Measured on
    a 2-core machine under load 6.5: runs of one preset spread by 0.55-0.66% (sd), so the means
    of three differ by 0.5% (sd) at most: the floor (2%) is four of those away, and the 95%
    interval of a 10% difference (t(0.975, 2..4) x 0.5%, under 2.2%) is far from 0."""
    paths = {}
    for name, sim in (("base", ""), ("again", ""), ("faster", f", step_table: {scaled_table(1.1)}")):
        spec = write(tmp_path, name, sweep="[8]", out=32, sim=sim, extra="  repeats: 3")
        assert main(["run", spec, "--quiet"]) == 0
        paths[name] = str(tmp_path / f"{name}.json")
    docs = {k: read(v) for k, v in paths.items()}
    same = compare_docs(docs["base"], docs["again"])["points"][0]
    diff = compare_docs(docs["base"], docs["faster"])["points"][0]
    faster = make_config(step_table=json.loads(scaled_table(1.1))).step_ms(8)
    expected = make_config().step_ms(8) / faster - 1  # +10%, the tables' ratio at batch 8
    for key in ("output_tok_s", "total_tok_s", "request_s"):
        assert diff["metrics"][key]["significant"] == "yes", diff["metrics"][key]
        assert diff["metrics"][key]["change"] == pytest.approx(expected, abs=0.03)
        assert same["metrics"][key]["significant"] == "no", same["metrics"][key]
    assert main(["compare", paths["base"], paths["faster"]]) == 0
    out = capsys.readouterr().out
    assert "c=8 (3+3 runs)" in out and "Welch" in out


@pytest.mark.slow
def test_a_sweep_stops_after_the_knee_of_a_hard_capacity_and_says_why(tmp_path):
    """At most 2 sequences decode at once: past C=2 more load buys no throughput, only waiting.
    The table says how much each point below the capacity gains; the first point beyond it is
    where the sweep must stop, and the points after it are skipped."""
    max_seqs, sweep, min_gain = 2, [1, 2, 4, 8, 16], 0.10
    cfg = make_config(max_num_seqs=max_seqs)
    tok_s = {c: min(c, max_seqs) / cfg.step_ms(min(c, max_seqs)) for c in sweep}
    below = [c for c in sweep if c <= max_seqs]
    assert all(tok_s[b] / tok_s[a] - 1 > 2 * min_gain for a, b in zip(below, below[1:], strict=False))
    knee = next(c for c in sweep if c > max_seqs)
    spec = write(tmp_path, sweep=json.dumps(sweep), out=12, sim=f", max_num_seqs: {max_seqs}",
                 extra=f"  saturation: {{min_gain: {min_gain:.0%}}}")
    assert main(["run", spec, "--quiet"]) == 0
    doc_ = read(str(tmp_path / "s.json"))
    ran = [p["params"]["concurrency"] for p in doc_["points"]]
    assert ran == [c for c in sweep if c <= knee]
    stop = doc_["combinations"][0]["sweep_stop"]
    assert stop["after"] == f"c={knee}" and stop["skipped"] == [f"c={c}" for c in sweep if c > knee]
    assert "saturated" in stop["reason"] and "less than min_gain 10%" in stop["reason"]
    assert doc_["complete"] is True  # skipped by the rule, not lost


def as_runs_of_one_point(path, out):
    """A fixture's three points made the three runs of one repeated point (c=1#1..#3)."""
    from benchc.results.repeats import summaries

    with open(path) as f:
        d = json.load(f)
    for r, p in enumerate(d["points"], 1):
        p["params"].update(concurrency=1, repeat=r)
        p["id"] = f"c=1#{r}"
    d["repeats"] = summaries(d["points"])
    out.write_text(json.dumps(d))
    return str(out), d


def test_merge_recomputes_the_repeats_and_refuses_searches(tmp_path, capsys):
    from tests.test_results_tools import SHARD_A, SHARD_B

    a, da = as_runs_of_one_point(SHARD_A, tmp_path / "a.json")
    b, db = as_runs_of_one_point(SHARD_B, tmp_path / "b.json")
    assert main(["merge", a, b, "-o", str(tmp_path / "m.json")]) == 0
    merged = read(str(tmp_path / "m.json"))
    (rep,) = merged["repeats"]
    assert rep["runs"] == ["c=1#1", "c=1#2", "c=1#3"]  # run k of one shard merged with run k of the other
    assert rep["pooled"]["counts"]["sent"] == sum(p["counts"]["sent"] for p in da["points"] + db["points"])
    assert rep["metrics"]["output_tok_s"]["values"] == [p["throughput"]["output_tok_s"]
                                                        for p in merged["points"]]
    search = CapacitySearch({"over": "concurrency", "min": 1, "max": 2, "max_probes": 3, "slo": [],
                             "tolerance": {"kind": "absolute", "value": 1}})
    search.abort("the run stopped")
    da["search"] = [{"combination": 0, "matrix": {}, "id": "search", "answer_point": None, "goodput_s": None,
                     **search.block()}]
    (tmp_path / "a.json").write_text(json.dumps(da))
    assert main(["merge", a, b, "-o", str(tmp_path / "m2.json")]) == 2
    assert "results of a capacity search do not merge" in capsys.readouterr().err
