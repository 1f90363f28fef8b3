"""Ceilings on what a spec may ask for, checked before anything is built.

A spec of a few bytes can ask for a billion requests, a matrix of ten million
combinations, or prompts of a billion tokens; compiling such a plan would take minutes
and gigabytes before anything said no. Prompts are built one request at a time, and the
compiler builds a few per step to fingerprint them, so what compiling costs grows with
prompt size times load points (both bounded here), never with the number of requests.
These checks are arithmetic on the spec's numbers (nothing is enumerated), so a refusal
comes in milliseconds. docs/spec.md's "Limits" section states the same numbers.
"""

from __future__ import annotations

import math
from typing import Any

from benchc.errors import SpecProblem
from benchc.spec import matrix
from benchc.units import parse_duration, parse_rate, parse_tokens

MAX_REQUESTS = 1_000_000  # requests one point (or its warmup) sends; prompts one dataset builds
MAX_CONCURRENCY = 1_000_000  # requests in flight at once (sweep.concurrency, max_concurrency)
MAX_TOKENS = 10_000_000  # tokens of one request: input, shared prefix, output
MAX_COMBINATIONS = 1_000  # matrix combinations (before exclusions)
MAX_LOAD_POINTS = 10_000  # load points of a plan: combinations x sweep values
MAX_TURNS = 10_000  # turns of one session (its script is built when the session starts)

_HINT = " (benchc's ceiling; docs/spec.md: Limits)"


def _over(value: float, ceiling: int, what: str) -> str:
    return f"{value:,.0f} {what} is more than {ceiling:,}{_HINT}"


def count_problems(spec: Any, data: dict) -> list[SpecProblem]:
    """Requests, concurrency, combinations and load points of schema-valid `data` against
    their ceilings. Runs before matrix combinations are enumerated."""
    out: list[SpecProblem] = []
    load = data["load"]
    sweep = load.get("sweep") or {}  # a capacity search has none: its probes are bounded below
    search = load.get("search") or {}
    if load.get("requests", 0) > MAX_REQUESTS:
        out.append(spec.problem(("load", "requests"), _over(load["requests"], MAX_REQUESTS,
                                                            "requests per point")))
    warm = (load.get("warmup") or {}).get("requests", 0)
    if warm > MAX_REQUESTS:
        out.append(spec.problem(("load", "warmup", "requests"), _over(warm, MAX_REQUESTS,
                                                                      "warmup requests")))
    # sessions: each starts at least one request (its first turn)
    for where, n in ((("load", "sessions"), load.get("sessions", 0)),
                     (("load", "warmup", "sessions"), (load.get("warmup") or {}).get("sessions", 0))):
        if n > MAX_REQUESTS:
            out.append(spec.problem(where, _over(n, MAX_REQUESTS, "sessions per point")))
    for i, u in enumerate(sweep.get("users", [])):
        if u > MAX_CONCURRENCY:
            out.append(spec.problem(("load", "sweep", "users", i),
                                    _over(u, MAX_CONCURRENCY, "sessions at once")))
    for i, c in enumerate(sweep.get("concurrency", [])):
        if c > MAX_CONCURRENCY:
            out.append(spec.problem(("load", "sweep", "concurrency", i),
                                    _over(c, MAX_CONCURRENCY, "requests in flight")))
    if sweep.get("max_concurrency", 0) > MAX_CONCURRENCY:
        out.append(spec.problem(("load", "sweep", "max_concurrency"),
                                _over(sweep["max_concurrency"], MAX_CONCURRENCY, "requests in flight")))
    if search.get("over") == "concurrency" and isinstance(search.get("max"), int) \
            and search["max"] > MAX_CONCURRENCY:
        out.append(spec.problem(("load", "search", "max"), _over(search["max"], MAX_CONCURRENCY,
                                                                 "requests in flight")))
    if search.get("max_concurrency", 0) > MAX_CONCURRENCY:
        out.append(spec.problem(("load", "search", "max_concurrency"),
                                _over(search["max_concurrency"], MAX_CONCURRENCY, "requests in flight")))
    if "rate" in sweep and "duration" in load and "requests" not in load:
        # An open-loop point without a request count sends rate x duration requests, and
        # its arrival schedule is drawn in advance.
        duration_s = parse_duration(load["duration"])
        for i, r in enumerate(sweep["rate"]):
            n = parse_rate(r) * duration_s
            if n > MAX_REQUESTS:
                out.append(spec.problem(("load", "sweep", "rate", i), _over(
                    n, MAX_REQUESTS, f"requests per point ({r} for {load['duration']}; give "
                    "load.requests, or a lower rate or duration)")))
    axes = matrix.axes_of(data.get("matrix"))
    combos = math.prod(len(v) for v in axes.values())
    if combos > MAX_COMBINATIONS:
        sizes = " x ".join(f"{len(v)} {k}" for k, v in axes.items())
        out.append(spec.problem(("matrix",), _over(combos, MAX_COMBINATIONS,
                                                   f"matrix combinations ({sizes})")))
    else:
        # a sweep's points run `repeats` times each; a search probes at most max_probes times
        # (when not given, the policy's worst case, which a bounded range keeps small)
        values: list = next((sweep[k] for k in ("concurrency", "rate", "speedup", "users") if k in sweep), [])
        per_combo = len(values) * max(1, load.get("repeats", 1)) if sweep else search.get("max_probes", 0)
        if combos * per_combo > MAX_LOAD_POINTS:
            where = ("load", "sweep") if sweep else ("load", "search", "max_probes")
            what = "load points (combinations x sweep values x repeats)" if sweep else \
                "probes (combinations x max_probes)"
            out.append(spec.problem(where, _over(combos * per_combo, MAX_LOAD_POINTS, what)))
    return out


def _largest(length: Any) -> int:
    """The largest token count a spec length (512, '1k', {mean, stdev}, {min, max}) asks for;
    a normal distribution counts at its mean plus four standard deviations."""
    if isinstance(length, dict) and "mean" in length:
        return parse_tokens(length["mean"]) + math.ceil(4 * float(length["stdev"]))
    if isinstance(length, dict):
        return parse_tokens(length["max"])
    return parse_tokens(length)


def combination_problems(spec: Any, d: dict) -> list[SpecProblem]:
    """Token and prompt counts of one expanded, schema-valid combination."""
    out: list[SpecProblem] = []
    (kind, cfg), = d["workload"]["dataset"].items()
    where = ("workload", "dataset", kind)
    for key in ("input_tokens", "prefix_tokens", "output_tokens", "suffix_tokens"):
        n = _largest(cfg[key]) if key in cfg else 0
        if n > MAX_TOKENS:
            out.append(spec.problem(where + (key,), _over(n, MAX_TOKENS, "tokens per request")))
    sampling = d["workload"].get("sampling", {})
    for key in ("max_tokens", "min_tokens"):
        if key in sampling and parse_tokens(sampling[key]) > MAX_TOKENS:
            out.append(spec.problem(("workload", "sampling", key),
                                    _over(parse_tokens(sampling[key]), MAX_TOKENS, "tokens per request")))
    if "turns" in cfg:  # a session's last turn sends every turn before it: one request's input
        turns = _largest(cfg["turns"])
        per_turn = _largest(cfg["input_tokens"]) + _largest(cfg["output_tokens"])
        if turns > MAX_TURNS:
            out.append(spec.problem(where + ("turns",), _over(turns, MAX_TURNS, "turns per session")))
        elif turns * per_turn + _largest(cfg.get("prefix_tokens", 0)) > MAX_TOKENS:
            out.append(spec.problem(where + ("turns",), _over(
                turns * per_turn, MAX_TOKENS, "tokens in a session's last turn (turns x (input + output))")))
    if cfg.get("num_prompts", 0) > MAX_REQUESTS:
        out.append(spec.problem(where + ("num_prompts",), _over(cfg["num_prompts"], MAX_REQUESTS, "prompts")))
    return out
