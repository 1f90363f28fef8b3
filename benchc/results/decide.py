"""From measurements to a decision: per-GPU figures, the Pareto frontier, the answer per SLO.

Every point of every combination (of one result or several) becomes a candidate, named by
its combination (matrix values) and load, with:
- `output_tok_s_per_user`: the speed one request sees once its answer streams, 1 / TPOT p50
  (the "interactivity" of vLLM's sweep plots and InferenceMAX): 1e6 / tpot.p50 in us;
- `output_tok_s_per_gpu`: output tok/s over the point's window / the combination's GPUs;
- `goodput_s_per_gpu`: requests per second that met every SLO of the spec / GPUs;
- where the point's GPU power was measured (its `energy` block): joules per output token and
  `goodput_per_kj`, requests that met every SLO per kilojoule of the server's GPUs;
- with a price per GPU-hour: `cost_per_mtok`, GPU time per million output tokens at the
  point's output tok/s (gpus x price / 3600 / output_tok_s x 1e6).
A repeated point (load.repeats) is one candidate: the mean of its runs, which keeps each run's
figure for the noise test below. Search probes are left out (the search has its answer), and
so are points without a GPU count or a TPOT (`left_out` says which and why).

The frontier: the candidates no other candidate beats on both axes (per-user speed, and
per-GPU output or goodput); ties on both stay. The decision, per SLO set (results measured
under other SLOs are decided apart): the candidate with the most goodput per GPU, the
runner-up (the best of another combination; with one combination, the next load), and the
margin between them against the noise floor: with both repeated, Welch's 95% interval of the
difference of their runs' means must exclude zero and the margin exceed the floor; single
runs give no spread, so the rule is the floor alone (stated in the answer). Per joule the
same, where both were measured. Then the same per item of the set a request meets or misses
(`per_slo`), goodput counting the requests that met that item alone (a point's
`goodput_per_slo`, counted at run time). docs/decide.md says all of this with an example.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchc.metrics.intervals import difference_interval
from benchc.results.api import Point, Result

PER_USER = "1 / TPOT p50: output tok/s one request sees once its answer streams"
AXES = ("output_tok_s_per_gpu", "goodput_s_per_gpu")
NOISE_FLOOR = 0.02  # as compare's --noise-floor default (results/compare.py says why 2%)
RULE_SINGLE = ("single runs: no spread measured (load.repeats gives one); the margin must exceed "
               "the noise floor of {floor:.0%}")
RULE_REPEATS = ("repeated points: Welch's 95% interval of the difference of the runs' means excludes "
                "zero, and the margin exceeds the noise floor of {floor:.0%}")


@dataclass(frozen=True)
class Candidate:
    """One point (a repeated point: the mean of its runs) with its per-GPU figures."""

    result: str  # which result it came from ("" when there is one)
    point: str  # the point's id (a repeated point's without `#run`)
    combination: int
    matrix: Mapping[str, Any]
    load: str  # `c=4`, `rate=2/s`
    gpus: int
    output_tok_s_per_user: float
    output_tok_s_per_gpu: float
    goodput_s_per_gpu: float
    slo: tuple[str, ...]
    joules_per_output_token: float | None = None
    goodput_per_kj: float | None = None
    cost_per_mtok: float | None = None
    # a repeated point: each run's figures by axis ({"goodput_s_per_gpu": [...], ...})
    runs: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    # every run's figures can be trusted (results/trust.py: not client-limited, ...)
    trusted: bool = True

    @property
    def name(self) -> str:
        """`tp=8,ep=enable c=4` (and the result, when several): what the console prints."""
        return _name(self.result, self.matrix, self.load)

    def figure(self, axis: str) -> float | None:
        return getattr(self, axis)

    def to_json(self) -> dict:
        out: dict = {"point": self.point, "combination": self.combination, "matrix": dict(self.matrix),
                     "load": self.load, "gpus": self.gpus}
        if self.result:
            out["result"] = self.result
        for k in ("output_tok_s_per_user", "output_tok_s_per_gpu", "goodput_s_per_gpu",
                  "joules_per_output_token", "goodput_per_kj", "cost_per_mtok"):
            v = getattr(self, k)
            if v is not None:
                out[k] = _sig(v)
        if self.runs:
            out["runs"] = len(next(iter(self.runs.values())))
        if not self.trusted:
            out["trusted"] = False
        return out


def _name(result: str, matrix: Mapping[str, Any], load: str) -> str:
    combo = ",".join(f"{k}={_show(v)}" for k, v in matrix.items())
    head = f"{result}: " if result else ""
    return head + (f"{combo} {load}" if combo else load)


def _show(v: Any) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def _sig(v: float) -> float:
    return float(f"{v:.6g}")


def _positive(x: float | None) -> bool:
    return x is not None and math.isfinite(x) and x > 0


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def _point_figures(p: Point, gpus: int, gpu_hour: float | None, goodput_s: float
                   ) -> dict[str, float | None] | None:
    """One run's figures, None without a TPOT. `goodput_s`: the SLO set's, or one item's."""
    tpot = p.latency.get("tpot")
    if tpot is None or not tpot.count or not tpot.percentiles.get(50.0):
        return None
    energy = p.energy
    # only energy that can be right is ranked: a draw above 0 and finite (a document read is
    # held to it by its schema; this keeps one built in memory to it too)
    server_w = energy.server_power_w if energy is not None and _positive(energy.server_power_w) else None
    per_token = energy.joules_per_output_token if energy is not None and server_w else None
    per_token = per_token if _positive(per_token) else None
    figures = {"output_tok_s_per_user": 1e6 / tpot.percentiles[50.0],
               "output_tok_s_per_gpu": p.output_tok_s / gpus,
               "goodput_s_per_gpu": goodput_s / gpus,
               "joules_per_output_token": per_token,
               "goodput_per_kj": goodput_s / server_w * 1000 if server_w else None,
               "cost_per_mtok": (gpu_hour * gpus / 3600 / p.output_tok_s * 1e6
                                 if gpu_hour and p.output_tok_s > 0 else None)}
    # an optional figure past a float (a price of 1e308 times the GPUs) is no figure: JSON
    # cannot say it (Python would write Infinity) and nothing can be ranked by it
    for k in ("joules_per_output_token", "goodput_per_kj", "cost_per_mtok"):
        v = figures[k]
        if v is not None and not math.isfinite(v):
            figures[k] = None
    return figures

def result_labels(results: Sequence[Result]) -> list[str]:
    """How candidates name their results: "" for one; for several, each file's name, or its path
    where two share a name (base/r.json, new/r.json), and its place in the list where two share
    a path. Candidates are told apart by this label: two results under one would be one."""
    if len(results) < 2:
        return [""] * len(results)
    names = [r.path.rsplit("/", 1)[-1] or r.name for r in results]
    if len(set(names)) < len(names):
        names = [r.path or r.name for r in results]
    if len(set(names)) < len(names):
        names = [f"{n} ({i + 1})" for i, n in enumerate(names)]
    return names


def point_groups(r: Result) -> dict[tuple[int, str], list[Point]]:
    """`r`'s points by (combination, point id without `#run`): a repeated point's runs together;
    search probes left out."""
    groups: dict[tuple[int, str], list[Point]] = {}
    for p in r.points:
        if not p.probe:
            groups.setdefault((p.combination, p.id.split("#", 1)[0]), []).append(p)
    return groups


def candidates(results: Sequence[Result], gpu_hour: float | None = None, slo_item: str | None = None
               ) -> tuple[list[Candidate], list[dict]]:
    """(candidates, left out) of every point of `results`: see the module's docstring.
    gpu_hour: the price of one GPU-hour (None: each result's own spec's, if it gave one).
    slo_item: goodput counts the requests that met this SLO item (its text) rather than every
    item of the set; points that did not count it (older results) are left out."""
    out: list[Candidate] = []
    left: list[dict] = []
    for r, label in zip(results, result_labels(results), strict=True):
        price = gpu_hour if gpu_hour is not None else (r.cost or {}).get("gpu_hour")
        for (combo, pid), runs in point_groups(r).items():
            first = runs[0]
            gone = {"point": pid, **({"result": label} if label else {})}
            if first.gpus is None:
                left.append({**gone, "reason": "no GPU count (server.gpus, or a matrix tp/pp/dp/ep axis)"})
                continue
            if slo_item is not None and any(slo_item not in p.goodput_per_slo for p in runs):
                left.append({**gone, "reason": f"no goodput for the SLO item {slo_item!r} alone "
                                               "(a result from before goodput was counted per item)"})
                continue
            per_run = [_point_figures(p, first.gpus, price,
                                      p.goodput_s if slo_item is None else p.goodput_per_slo[slo_item])
                       for p in runs]
            if any(f is None for f in per_run):
                left.append({**gone, "reason": "no TPOT (no completed request of 2 or more tokens)"})
                continue
            figs = [f for f in per_run if f is not None]
            mean: dict[str, float | None] = {}
            for k in figs[0]:
                vals = [f[k] for f in figs]
                mean[k] = None if any(v is None for v in vals) else _mean([v for v in vals if v is not None])
            runs_of: dict[str, tuple[float, ...]] = {}
            for k in ("goodput_s_per_gpu", "goodput_per_kj", "output_tok_s_per_gpu"):
                vals = [f[k] for f in figs]
                if len(figs) > 1 and all(v is not None for v in vals):
                    runs_of[k] = tuple(v for v in vals if v is not None)
            out.append(Candidate(result=label, point=pid, combination=combo, matrix=first.matrix,
                                 load=first.load, gpus=first.gpus, slo=r.slo,
                                 output_tok_s_per_user=mean["output_tok_s_per_user"] or 0.0,
                                 output_tok_s_per_gpu=mean["output_tok_s_per_gpu"] or 0.0,
                                 goodput_s_per_gpu=mean["goodput_s_per_gpu"] or 0.0,
                                 joules_per_output_token=mean["joules_per_output_token"],
                                 goodput_per_kj=mean["goodput_per_kj"], cost_per_mtok=mean["cost_per_mtok"],
                                 runs=runs_of,
                                 trusted=all(p.trusted for p in runs)))
    return out, left


def pareto(cands: Iterable[Candidate], axis: str) -> list[Candidate]:
    """The candidates that no other beats on both per-user speed and `axis` (at least as good on
    both, better on one), by per-user speed ascending. A sweep from the fastest per-user speed
    down: a candidate stays when its axis figure beats every faster one's (ties on both stay)."""
    ordered = sorted(cands, key=lambda c: (-c.output_tok_s_per_user, -_y(c, axis)))
    kept: list[Candidate] = []
    best = float("-inf")  # the best axis figure of every candidate faster per user
    i = 0
    while i < len(ordered):
        x = ordered[i].output_tok_s_per_user
        group = [c for c in ordered[i:] if c.output_tok_s_per_user == x]
        top = _y(group[0], axis)
        if top > best:
            kept += [c for c in group if _y(c, axis) == top]
            best = top
        i += len(group)
    return sorted(kept, key=lambda c: (c.output_tok_s_per_user, _y(c, axis)))


def _y(c: Candidate, axis: str) -> float:
    v = c.figure(axis)
    return v if v is not None else float("-inf")


def frontier_block(results: Sequence[Result], gpu_hour: float | None = None) -> dict | None:
    """The result's (and compare's, report's) `frontier`: every candidate, and per axis the ids
    of those on the frontier; None when no point has both a GPU count and a TPOT."""
    cands, left = candidates(results, gpu_hour)
    if not cands and not left:
        return None
    block: dict = {"per_user": PER_USER, "points": [c.to_json() for c in cands]}
    for axis in AXES:
        block[axis] = [_ref(c) for c in pareto(cands, axis)]
    if left:
        block["left_out"] = left
    return block


def _ref(c: Candidate) -> str:
    return f"{c.result}: {c.point}" if c.result else c.point


# --------------------------------------------------------------------------- the decision


def margin(best: Candidate, runner: Candidate, axis: str, floor: float = NOISE_FLOOR) -> dict:
    """How far `best` leads `runner` on `axis`, and whether that is beyond noise."""
    b, r = best.figure(axis), runner.figure(axis)
    assert b is not None and r is not None  # both were ranked on this axis
    # over a runner-up of 0 any lead is unbounded; none at all (both 0: no point met the SLO) is a tie
    relative = (b - r) / r if r else (float("inf") if b > r else 0.0)
    out: dict = {"relative": _sig(relative) if r else None, "floor": floor}
    runs_b, runs_r = best.runs.get(axis), runner.runs.get(axis)
    interval = difference_interval(runs_r, runs_b) if runs_b and runs_r else None
    if interval is not None:
        out["method"] = RULE_REPEATS.format(floor=floor)
        out["interval"] = [_sig(interval.low), _sig(interval.high)]
        out["beyond_noise"] = bool(interval.excludes_zero() and relative > floor)
    else:
        out["method"] = RULE_SINGLE.format(floor=floor)
        out["beyond_noise"] = bool(relative > floor)
    return out


def _answer(cands: list[Candidate], axis: str, floor: float) -> dict | None:
    ranked = sorted((c for c in cands if c.figure(axis) is not None),
                    key=lambda c: (-_y(c, axis), -c.output_tok_s_per_user))
    if not ranked:
        return None
    best = ranked[0]
    others = [c for c in ranked[1:] if (c.result, c.combination) != (best.result, best.combination)]
    runner = others[0] if others else (ranked[1] if len(ranked) > 1 else None)
    out: dict = {"by": axis, "best": best.to_json(), "runner_up": runner.to_json() if runner else None}
    if runner is not None:
        out["margin"] = margin(best, runner, axis, floor)
    return out


def _decide(slo: Sequence[str], group: list[Candidate], floor: float) -> dict | None:
    """The answer under `slo` among `group`: most goodput per GPU, and per joule where measured."""
    answer: dict = {"slo": list(slo)}
    per_gpu = _answer(group, "goodput_s_per_gpu", floor)
    if per_gpu is None:
        return None
    answer.update(per_gpu)
    per_joule = _answer(group, "goodput_per_kj", floor)
    if per_joule is not None:
        answer["per_joule"] = per_joule
    return answer


def _per_item(results: Sequence[Result], slo: tuple[str, ...], group: list[Candidate],
              gpu_hour: float | None, floor: float) -> list[dict]:
    """The answer per item of the set `slo`, goodput counting the requests that met that item
    alone; only where two or more items were counted per request (with one, the set's answer
    is that item's; throughput and error-rate items hold a point, not a request)."""
    out = []
    for item in slo:
        mine = [c for c in candidates(results, gpu_hour, item)[0] if c.slo == slo]
        answer = _decide([item], mine, floor) if mine else None
        if answer is None:
            continue
        missing = {_ref(c) for c in group} - {_ref(c) for c in mine}
        if missing:
            answer["left_out"] = sorted(missing)
        out.append(answer)
    return out if len(out) > 1 else []


def decision(results: Sequence[Result], gpu_hour: float | None = None,
             floor: float = NOISE_FLOOR) -> list[dict]:
    """One answer per SLO set of `results`, and in it one per item of the set (`per_slo`):
    see the module's docstring."""
    cands, _ = candidates(results, gpu_hour)
    by_slo: dict[tuple[str, ...], list[Candidate]] = {}
    for c in cands:
        by_slo.setdefault(c.slo, []).append(c)
    out = []
    for slo, group in by_slo.items():
        answer = _decide(slo, group, floor)
        if answer is None:
            continue
        items = _per_item(results, slo, group, gpu_hour, floor)
        if items:
            answer["per_slo"] = items
        out.append(answer)
    return out


def with_decision(doc: dict) -> dict:
    """`doc` with its `frontier` and `decision` computed from its own points (replaced where it
    had them: a merge's points are not its first shard's), where its points allow them."""
    from benchc.results.api import from_document

    doc.pop("frontier", None)
    doc.pop("decision", None)
    result = from_document(doc)
    frontier = frontier_block([result])
    if frontier is not None:
        doc["frontier"] = frontier
    answers = decision([result])
    if answers:
        doc["decision"] = answers
    return doc


def describe(answer: dict, item: bool = False) -> list[str]:
    """The console's lines of one answer (and of its answers per SLO item, after it)."""
    def name(e: dict) -> str:  # a candidate's to_json(): its name as Candidate.name gives it
        return _name(e.get("result", ""), e["matrix"], e["load"])

    def doubt(e: dict) -> str:  # a margin over (or under) an untrusted point is no answer either
        return " [NOT TRUSTED: see the point's trust doubts]" if e.get("trusted") is False else ""

    def line(a: dict, unit: str, scale: float = 1.0) -> str:
        b = a["best"]
        cost = f", cost {b['cost_per_mtok']:,.4g} per million output tokens" if "cost_per_mtok" in b else ""
        gpus = f"{b['gpus']} GPU{'s' if b['gpus'] != 1 else ''}"
        text = f"{name(b)}: {b[a['by']] * scale:,.4g} {unit} ({gpus}{cost}){doubt(b)}"
        r = a.get("runner_up")
        if r is None:
            return text + "; no runner-up"
        m = a["margin"]
        if m["relative"] is None:  # the runner-up's figure is 0: no ratio, any lead is all of it
            lead = "the runner-up has none"
        else:
            lead = f"lead {m['relative']:+.1%}, {'beyond noise' if m['beyond_noise'] else 'within noise'}"
        return text + f"; runner-up {name(r)}: {r[a['by']] * scale:,.4g} {unit}{doubt(r)}; {lead}"

    slo = "; ".join(answer["slo"]) or "no SLO: every completed request counts"
    head = f"decision under the SLO item [{slo}] alone:" if item else f"decision under SLO [{slo}]:"
    out = [head, "  most goodput per GPU: " + line(answer, "req/s per GPU")]
    if "per_joule" in answer:
        out.append("  most goodput per joule: " + line(answer["per_joule"], "req per kJ"))
    m = answer.get("margin")
    if m is not None:
        out.append(f"  noise: {m['method']}")
    if answer.get("left_out"):
        n = len(answer["left_out"])
        out.append(f"  left out: {n} point{'s' if n != 1 else ''} of results that did not count goodput "
                   "per SLO item")
    agree = []
    for sub in answer.get("per_slo", []):
        if _same_answer(sub, answer):
            agree.append("; ".join(sub["slo"]))
        else:
            out += describe(sub, item=True)
    if agree:  # told once, not a copy of the block above per item
        out.append(f"  each SLO item alone ([{'], ['.join(agree)}]) gives the same answer")
    return out


def _same_answer(a: dict, b: dict) -> bool:
    """Two answers name the same best and runner-up, by the same figures."""
    def names(x: dict) -> tuple:
        return tuple((e or {}).get(k) for e in (x.get("best"), x.get("runner_up"))
                     for k in ("result", "matrix", "load", x.get("by")))
    return names(a) == names(b) and names(a.get("per_joule") or {}) == names(b.get("per_joule") or {})


__all__ = ["Candidate", "candidates", "pareto", "frontier_block", "decision", "describe", "margin",
           "AXES", "PER_USER", "NOISE_FLOOR"]

