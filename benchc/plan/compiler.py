"""Spec -> Plan: fill defaults, normalise units, expand matrix x sweep, build prompts.

Every default lives here, once, in DEFAULTS (a test keeps it in step with the
schema's keys and the README's spec reference).
"""

from __future__ import annotations

import os
from typing import Any

from benchc.errors import PlanError
from benchc.plan.model import (
    PLAN_VERSION,
    Combination,
    Plan,
    Sampling,
    Server,
    SloItem,
    Smoke,
    SmokeCheck,
    Step,
    Target,
    Workload,
)
from benchc.plan.workload import build_prompts, normalise_length, prompts_sha256
from benchc.spec import matrix as mx
from benchc.spec.loader import Spec
from benchc.spec.thresholds import parse_threshold
from benchc.units import parse_duration, parse_rate, parse_tokens

DEFAULTS: dict[str, Any] = {
    "target.api": "chat",
    "target.timeout": "10m",
    "target.idle_timeout": "60s",
    "target.sim.preset": "minimax-m2.5-tp4",
    "server.ready.path": "/health",
    "server.ready.timeout": "20m",  # a 1T-parameter model took 13 minutes to load
    "server.ready.interval": "1s",
    "server.stop_timeout": "30s",
    "smoke.continue_on_fail": False,
    "smoke.checks.max_tokens": 64,
    "workload.dataset.*.seed": 0,
    "workload.dataset.random.prefix_tokens": 0,
    # num_prompts: the largest number of requests any step sends, or 1000 for
    # duration-only points (prompts are reused in order, cycling).
    "workload.dataset.num_prompts_for_duration": 1000,
    "workload.sampling.temperature": 0.0,
    # A random dataset asks for exact output lengths; the server must not stop early.
    "workload.sampling.ignore_eos.random": True,
    "workload.sampling.ignore_eos.files": False,
    # Warmup: as many requests as the first point's concurrency, so every
    # connection of the pool is open and warm before measuring.
    "load.warmup.requests": "first point's concurrency",
    "load.sweep.arrival": "poisson",
    "load.sweep.burstiness": 1.0,
    "load.ramp_up": 0.0,
    "load.cooldown": 0.0,
    "output.path": "results/{name}-{timestamp}.json",
    "output.requests": False,
    "run.backend": "local",
}


def compile_spec(spec: Spec) -> Plan:
    """Compile a validated spec into a Plan with its hashes."""
    d = spec.data
    load = d["load"]
    combos = []
    steps: list[Step] = []
    for index, values in enumerate(mx.combinations(d.get("matrix"))):
        data = mx.expand(d, values)
        label = ",".join(f"{k}={mx.format_value(v)}" for k, v in values.items())
        points = _points(load, index, label)
        num_prompts = _num_prompts(load, points, data["workload"]["dataset"])
        combo = Combination(
            index=index,
            matrix=values,
            target=_target(data["target"], spec.file),
            server=_server(data.get("server")),
            smoke=_smoke(data.get("smoke")),
            workload=_workload(data["workload"], num_prompts, spec.file, data["target"].get("tokenizer")),
        )
        combos.append(combo)
        steps.append(Step("server", index, _join(label, "server")))
        if combo.smoke:
            steps.append(Step("smoke", index, _join(label, "smoke")))
        warmup = _warmup(load, points, index, label)
        if warmup:
            steps.append(warmup)
        steps.extend(points)
    plan = Plan(
        plan_version=PLAN_VERSION,
        name=d["name"],
        description=d.get("description", ""),
        spec={"path": spec.file, "sha256": spec.sha256},
        combinations=combos,
        steps=steps,
        slo=_slo(d.get("slo") or {}),
        output={"path": d.get("output", {}).get("path", DEFAULTS["output.path"]),
                "requests": d.get("output", {}).get("requests", DEFAULTS["output.requests"])},
        run={"backend": d.get("run", {}).get("backend", DEFAULTS["run.backend"]),
             "ray_address": d.get("run", {}).get("ray_address"),
             "workers": d.get("run", {}).get("workers", 0)},
    )
    return plan.with_hashes()


def _join(label: str, what: str) -> str:
    return f"{label}/{what}" if label else what


def _target(t: dict, spec_file: str) -> Target:
    sim = None
    if "sim" in t:
        sim = {"preset": DEFAULTS["target.sim.preset"], **t["sim"]}
        if sim.get("tokenizer") and not os.path.isabs(sim["tokenizer"]) and not spec_file.startswith("<"):
            # the simulator runs as a subprocess; give it a path that does not depend on cwd
            sim["tokenizer"] = os.path.join(os.path.dirname(os.path.abspath(spec_file)), sim["tokenizer"])
    return Target(
        base_url=t["base_url"].rstrip("/") if "base_url" in t else None,
        sim=sim,
        api=t.get("api", DEFAULTS["target.api"]),
        model=t["model"],
        api_key=t.get("api_key"),
        headers=dict(t.get("headers", {})),
        timeout_s=parse_duration(t.get("timeout", DEFAULTS["target.timeout"])),
        idle_timeout_s=parse_duration(t.get("idle_timeout", DEFAULTS["target.idle_timeout"])),
        tokenizer=t.get("tokenizer"),
        continuous_usage=bool(t.get("continuous_usage_stats", False)),
    )


def _server(s: dict | None) -> Server | None:
    if not s:
        return None
    cmd = s.get("command")
    if isinstance(cmd, str):
        argv = ["/bin/sh", "-c", cmd]
    else:
        argv = [mx.format_value(a) for a in cmd] if cmd else None
    ready = s.get("ready", {})
    return Server(
        attach=bool(s.get("attach", False)),
        command=argv,
        env={k: mx.format_value(v) for k, v in s.get("env", {}).items()},
        cwd=s.get("cwd"),
        ready_path=ready.get("path", DEFAULTS["server.ready.path"]),
        ready_timeout_s=parse_duration(ready.get("timeout", DEFAULTS["server.ready.timeout"])),
        ready_interval_s=parse_duration(ready.get("interval", DEFAULTS["server.ready.interval"])),
        log=s.get("log"),
        stop_timeout_s=parse_duration(s.get("stop_timeout", DEFAULTS["server.stop_timeout"])),
    )


def _smoke(s: dict | None) -> Smoke | None:
    if not s:
        return None
    checks = [
        SmokeCheck(
            name=c.get("name", f"check-{i + 1}"),
            prompt=c.get("prompt"),
            messages=c.get("messages"),
            expect=c.get("expect"),
            max_tokens=parse_tokens(c.get("max_tokens", DEFAULTS["smoke.checks.max_tokens"])),
        )
        for i, c in enumerate(s["checks"])
    ]
    return Smoke(bool(s.get("continue_on_fail", DEFAULTS["smoke.continue_on_fail"])), checks)


def load_tokenizer(path: str | None, spec_file: str):
    """target.tokenizer (relative to the spec's folder), or None."""
    if not path:
        return None
    from benchc.tokenizer.tokenizer import load

    if not os.path.isabs(path) and not spec_file.startswith("<"):
        path = os.path.join(os.path.dirname(os.path.abspath(spec_file)), path)
    try:
        return load(path)
    except Exception as e:  # noqa: BLE001 - any unreadable tokenizer is a plan error, said plainly
        raise PlanError(f"target.tokenizer: {e}") from e


def _workload(w: dict, num_prompts: int, spec_file: str, tokenizer_path: str | None = None) -> Workload:
    (kind, cfg), = w["dataset"].items()
    params: dict[str, Any] = {"seed": cfg.get("seed", DEFAULTS["workload.dataset.*.seed"])}
    if kind == "random":
        params.update(
            input_tokens=normalise_length(cfg["input_tokens"]),
            output_tokens=normalise_length(cfg["output_tokens"]),
            prefix_tokens=parse_tokens(
                cfg.get("prefix_tokens", DEFAULTS["workload.dataset.random.prefix_tokens"])),
            num_prompts=cfg.get("num_prompts", num_prompts),
        )
    else:
        params.update(path=cfg["path"], num_prompts=cfg.get("num_prompts", num_prompts))
        if kind == "jsonl":
            params["shuffle"] = cfg.get("shuffle", False)
        if kind == "sharegpt" and "output_tokens" in cfg:
            params["output_tokens"] = normalise_length(cfg["output_tokens"])
    base_dir = os.path.dirname(os.path.abspath(spec_file)) if not spec_file.startswith("<") else "."
    tok = load_tokenizer(tokenizer_path, spec_file)
    prompts = build_prompts(kind, params, base_dir, tok)
    s = w.get("sampling", {})
    ignore_default = DEFAULTS["workload.sampling.ignore_eos." + ("random" if kind == "random" else "files")]
    sampling = Sampling(
        temperature=float(s.get("temperature", DEFAULTS["workload.sampling.temperature"])),
        top_p=s.get("top_p"),
        max_tokens=parse_tokens(s["max_tokens"]) if "max_tokens" in s else None,
        min_tokens=parse_tokens(s["min_tokens"]) if "min_tokens" in s else None,
        ignore_eos=bool(s.get("ignore_eos", ignore_default)),
        stop=[s["stop"]] if isinstance(s.get("stop"), str) else list(s.get("stop", [])),
        seed=s.get("seed"),
        extra_body=dict(s.get("extra_body", {})),
    )
    ins = [p.input_tokens for p in prompts]
    outs = [p.output_tokens for p in prompts if p.output_tokens is not None]
    if sampling.max_tokens is not None:
        outs = [sampling.max_tokens] * len(prompts)
    return Workload(
        dataset=kind,
        params=params,
        sampling=sampling,
        num_prompts=len(prompts),
        prompts_sha256=prompts_sha256(prompts),
        input_tokens={"method": "tokenizer" if tok else "words", **_stats(ins)},
        tokenizer_sha256=tok.sha256 if tok else None,
        output_tokens=_stats(outs) if outs else {},
    )


def _stats(xs: list[int]) -> dict:
    return {"min": min(xs), "mean": round(sum(xs) / len(xs), 3), "max": max(xs)}


def _points(load: dict, index: int, label: str) -> list[Step]:
    sweep = load["sweep"]
    common = dict(
        requests=load.get("requests"),
        duration_s=parse_duration(load["duration"]) if "duration" in load else None,
        ramp_up_s=parse_duration(load.get("ramp_up", DEFAULTS["load.ramp_up"])),
        cooldown_s=parse_duration(load.get("cooldown", DEFAULTS["load.cooldown"])),
    )
    if "concurrency" in sweep:
        return [Step("load", index, _join(label, f"c={c}"), concurrency=c, **common)
                for c in sweep["concurrency"]]
    arrival = sweep.get("arrival", DEFAULTS["load.sweep.arrival"])
    burst = sweep.get("burstiness", DEFAULTS["load.sweep.burstiness"]) if arrival == "gamma" else None
    out = []
    for r in sweep["rate"]:
        rps = parse_rate(r)
        out.append(Step("load", index, _join(label, f"rate={rps:g}/s"), rate_rps=rps, arrival=arrival,
                        burstiness=burst, max_concurrency=sweep.get("max_concurrency"), **common))
    return out


def _warmup(load: dict, points: list[Step], index: int, label: str) -> Step | None:
    w = load.get("warmup")
    first = points[0]
    width = first.concurrency or first.max_concurrency or 1
    if w is None:
        requests, duration = width, None
    else:
        requests = w.get("requests")
        duration = parse_duration(w["duration"]) if "duration" in w else None
    if not requests and not duration:
        return None
    return Step("warmup", index, _join(label, "warmup"), concurrency=width,
                requests=requests, duration_s=duration)


def _num_prompts(load: dict, points: list[Step], dataset: dict) -> int:
    counts = [p.requests for p in points if p.requests]
    warm = (load.get("warmup") or {}).get("requests") or 0
    if counts:
        return max(counts + [warm, 1])
    return DEFAULTS["workload.dataset.num_prompts_for_duration"]


def _slo(slo: dict) -> list[SloItem]:
    out = []
    for metric, exprs in slo.items():
        for expr in exprs if isinstance(exprs, list) else [exprs]:
            t = parse_threshold(metric, expr)
            out.append(SloItem(t.metric, t.stat, t.op, t.value, t.text))
    return out


__all__ = ["compile_spec", "DEFAULTS"]
