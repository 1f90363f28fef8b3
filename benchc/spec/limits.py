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
from benchc.spec.schemas import load_schema
from benchc.units import parse_duration, parse_rate, parse_tokens

MAX_REQUESTS = 1_000_000  # requests one point (or its warmup) sends; prompts one dataset builds
MAX_CONCURRENCY = 1_000_000  # requests in flight at once (sweep.concurrency, max_concurrency)
MAX_TOKENS = 10_000_000  # tokens of one request: input, shared prefix, output
MAX_COMBINATIONS = 1_000  # matrix combinations (before exclusions)
MAX_LOAD_POINTS = 10_000  # load points of a plan: combinations x sweep values
MAX_TURNS = 10_000  # turns of one session (its script is built when the session starts)
# images one request carries: past 2^26 pixels (about 200 MB of raw RGB to encode) they are
# beyond any served model's context; a session's last turn carries every turn's again
MAX_IMAGE_PIXELS = 1 << 26
# a duration anywhere in a spec (a point's, a timeout, a think time): past 30 days it is no
# benchmark's, and times are kept in integer nanoseconds (1e20 s would pass int64 by 10^10)
MAX_DURATION_S = 30 * 86_400
DEFAULT_MAX_TOOL_CALLS = 8  # workload.agent.max_tool_calls when not given (plan/compiler.py DEFAULTS)

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
    out += _stage_problems(spec, load.get("stages") or [])
    axes = matrix.axes_of(data.get("matrix"))
    combos = math.prod(len(v) for v in axes.values())
    if combos > MAX_COMBINATIONS:
        sizes = " x ".join(f"{len(v)} {k}" for k, v in axes.items())
        out.append(spec.problem(("matrix",), _over(combos, MAX_COMBINATIONS,
                                                   f"matrix combinations ({sizes})")))
    else:
        # a sweep's points run `repeats` times each; a search probes at most max_probes times
        # (when not given, the policy's worst case, which a bounded range keeps small)
        values: list = next((sweep[k] for k in ("concurrency", "rate", "speedup", "users") if k in sweep),
                            load.get("stages") or [])  # a profile's stages are points too
        kind = "sweep" if sweep else "stages" if load.get("stages") else None
        per_combo = len(values) * max(1, load.get("repeats", 1)) if kind else search.get("max_probes", 0)
        if combos * per_combo > MAX_LOAD_POINTS:
            where = ("load", kind) if kind else ("load", "search", "max_probes")
            per = "sweep values" if sweep else "stages"
            what = f"load points (combinations x {per} x repeats)" if kind else \
                "probes (combinations x max_probes)"
            out.append(spec.problem(where, _over(combos * per_combo, MAX_LOAD_POINTS, what)))
    return out


def _stage_problems(spec: Any, stages: list) -> list[SpecProblem]:
    """load.stages: each stage's concurrency and cap, and what a rate stage sends (its rate
    for its duration, at most: a ramp offers less), against the sweep's ceilings."""
    out: list[SpecProblem] = []
    for i, st in enumerate(stages):
        for k in ("concurrency", "max_concurrency"):
            if st.get(k, 0) > MAX_CONCURRENCY:
                out.append(spec.problem(("load", "stages", i, k), _over(st[k], MAX_CONCURRENCY,
                                                                        "requests in flight")))
        if "rate" in st and parse_rate(st["rate"]) * parse_duration(st["duration"]) > MAX_REQUESTS:
            n = parse_rate(st["rate"]) * parse_duration(st["duration"])
            out.append(spec.problem(("load", "stages", i, "rate"), _over(
                n, MAX_REQUESTS, f"requests per stage ({st['rate']} for {st['duration']}; give a lower rate "
                                 "or duration)")))
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
    out += _agent_problems(spec, d, cfg, where)
    if cfg.get("num_prompts", 0) > MAX_REQUESTS:
        out.append(spec.problem(where + ("num_prompts",), _over(cfg["num_prompts"], MAX_REQUESTS, "prompts")))
    return out + duration_problems(spec, d)


def _agent_problems(spec: Any, d: dict, cfg: dict, where: tuple) -> list[SpecProblem]:
    """What a session grows to by its last request: every turn before it sent again, each with
    its input, its answer and, in an agent loop, up to max_tool_calls rounds of a tool call
    answered (output) and its result; and every turn's images."""
    out: list[SpecProblem] = []
    agent = d["workload"].get("agent")
    sampling = d["workload"].get("sampling", {})
    # a file's sessions say their own lengths: then the answer is bounded by max_tokens, if given
    output = _largest(cfg["output_tokens"]) if "output_tokens" in cfg else \
        parse_tokens(sampling["max_tokens"]) if "max_tokens" in sampling else 0
    loop = 0  # tokens one user message's tool rounds add at most
    if agent:
        result = _largest(agent["tool_result_tokens"])
        calls = agent.get("max_tool_calls", DEFAULT_MAX_TOOL_CALLS)
        loop = calls * (result + output)
        if result > MAX_TOKENS:
            out.append(spec.problem(("workload", "agent", "tool_result_tokens"),
                                    _over(result, MAX_TOKENS, "tokens per request")))
            return out
        if loop > MAX_TOKENS:
            out.append(spec.problem(("workload", "agent"), _over(
                loop, MAX_TOKENS, f"tokens in one user message's tool rounds (max_tool_calls {calls} x "
                "(tool_result_tokens + output))")))
            return out
    if "turns" in cfg:  # a session's last turn sends every turn before it: one request's input
        turns = _largest(cfg["turns"])
        per_turn = _largest(cfg["input_tokens"]) + output + loop
        if turns > MAX_TURNS:
            out.append(spec.problem(where + ("turns",), _over(turns, MAX_TURNS, "turns per session")))
            return out
        if turns * per_turn + _largest(cfg.get("prefix_tokens", 0)) > MAX_TOKENS:
            what = "turns x (input + output + max_tool_calls x (tool_result_tokens + output))" if agent \
                else "turns x (input + output)"
            out.append(spec.problem(where + ("turns",), _over(
                turns * per_turn, MAX_TOKENS, f"tokens in a session's last turn ({what})")))
        img = d["workload"].get("images")
        if img and turns * img["count"] * img["width"] * img["height"] > MAX_IMAGE_PIXELS:
            out.append(spec.problem(("workload", "images"), _over(
                turns * img["count"] * img["width"] * img["height"], MAX_IMAGE_PIXELS,
                f"pixels of images in a session's last turn ({turns} turns x {img['count']} images of "
                f"{img['width']} x {img['height']}, every turn's sent again)")))
    return out


def _duration_paths(schema: dict, node: Any, data: Any, path: tuple, out: list[tuple]) -> None:
    """Paths of `data` that `node` (a part of the spec schema) says are durations."""
    if not isinstance(node, dict):
        return
    ref = node.get("$ref")
    if ref == "#/$defs/duration":
        if isinstance(data, int | float | str) and not isinstance(data, bool):
            out.append((path, data))
        return
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        _duration_paths(schema, schema["$defs"][ref.split("/")[-1]], data, path, out)
    for key in ("anyOf", "oneOf", "allOf"):
        for branch in node.get(key, []):
            _duration_paths(schema, branch, data, path, out)
    if isinstance(data, dict):
        props = node.get("properties", {})
        extra = node.get("additionalProperties")
        for k, v in data.items():
            sub = props.get(k, extra if isinstance(extra, dict) else None)
            _duration_paths(schema, sub, v, path + (k,), out)
    elif isinstance(data, list):
        for i, v in enumerate(data):
            prefix = node.get("prefixItems", [])
            _duration_paths(schema, prefix[i] if i < len(prefix) else node.get("items"), v, path + (i,), out)


def duration_problems(spec: Any, d: dict) -> list[SpecProblem]:
    """Every duration of schema-valid `d` against MAX_DURATION_S, wherever the schema has one."""
    schema = load_schema("spec-v1")
    found: list[tuple] = []
    _duration_paths(schema, schema, d, (), found)
    out = []
    for path, value in dict(found).items():  # a path reached by two branches is one duration
        try:
            seconds = parse_duration(value)
        except ValueError:
            continue  # the schema's to say
        if seconds > MAX_DURATION_S:
            out.append(spec.problem(path, f"{value!r} is a duration of {seconds:,.3g} s, more than the "
                                    f"{MAX_DURATION_S:,} s (30 days) benchc takes{_HINT}"))
    return out
