"""Spec -> Plan: fill defaults, normalise units, expand matrix x sweep, give each step its
prompt stream and the sha256 of its first prompts (plan/prompts.py builds them on demand).

Every default lives here, once, in DEFAULTS (a test keeps it in step with the
schema's keys and the README's spec reference).
"""

from __future__ import annotations

import os
from dataclasses import replace
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
from benchc.plan.prompts import make_source, source_digest, step_digest
from benchc.plan.workload import normalise_length
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
    # Opt-in: a fresh prompt per request already keeps points from serving each other
    # from cache; a reset also empties what the warmup and the shared prefix left.
    "server.reset_cache": "never",
    "smoke.continue_on_fail": False,
    "smoke.checks.max_tokens": 64,
    "workload.dataset.*.seed": 0,
    "workload.dataset.random.prefix_tokens": 0,
    # Every request a prompt no other request of the run sent (but the shared prefix):
    # servers cache prompt prefixes by default, and a repeated prompt measures a cache hit.
    "workload.prompts": "fresh",
    # num_prompts, where prompts are dealt from a pool: prompts: shared (the largest number
    # of requests any step sends, or 1000 for duration-only points, reused in order,
    # cycling); a file in fresh mode deals all its items unless num_prompts says fewer.
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
    stream = 0  # every warmup and load step of the plan gets a prompt stream of its own
    for index, values in enumerate(mx.combinations(d.get("matrix"))):
        data = mx.expand(d, values)
        label = ",".join(f"{k}={mx.format_value(v)}" for k, v in values.items())
        points = _points(load, index, label)
        num_prompts = _num_prompts(load, points, data["workload"]["dataset"])
        workload, source = _workload(data["workload"], num_prompts, spec.file,
                                     data["target"].get("tokenizer"))
        server = _server(data.get("server"))
        _check_reset(server)
        combo = Combination(
            index=index,
            matrix=values,
            target=_target(data["target"], spec.file),
            server=server,
            smoke=_smoke(data.get("smoke")),
            workload=workload,
        )
        combos.append(combo)
        steps.append(Step("server", index, _join(label, "server")))
        if combo.smoke:
            steps.append(Step("smoke", index, _join(label, "smoke")))
        warmup = _warmup(load, points, index, label)
        for step in ([warmup] if warmup else []) + points:
            steps.append(replace(step, prompt_stream=stream,
                                 prompts_sha256=step_digest(source, stream, step.requests)))
            stream += 1
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
        reset_cache=s.get("reset_cache", DEFAULTS["server.reset_cache"]),
    )


# Servers known to have no endpoint that empties their prompt cache: the argv word that
# names them, and what to say.
_NO_RESET = {"llama-server": "llama.cpp's llama-server has no endpoint that empties its prompt cache"}


def _check_reset(server: Server | None) -> None:
    """A reset asked of a server the spec names, and that cannot do it: say so now."""
    if server is None or server.reset_cache == "never" or not server.command:
        return
    words = {os.path.basename(w) for arg in server.command for w in arg.split()}  # argv, or a shell line
    for name, why in _NO_RESET.items():
        if name in words:
            raise PlanError(f"server.reset_cache: {server.reset_cache}: {why}. Use reset_cache: never "
                            "(fresh prompts, the default, already keep points apart; its slot cache "
                            "can also be turned off per request with sampling.extra_body: "
                            "{cache_prompt: false})")


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


def tokenizer_path(path: str, spec_file: str) -> str:
    """target.tokenizer as `tokenizer.load` takes it: relative paths from the spec's folder."""
    if not os.path.isabs(path) and not spec_file.startswith("<"):
        return os.path.join(os.path.dirname(os.path.abspath(spec_file)), path)
    return path


def load_tokenizer(path: str | None, spec_file: str):
    """target.tokenizer (relative to the spec's folder), or None."""
    if not path:
        return None
    from benchc.tokenizer.tokenizer import load

    path = tokenizer_path(path, spec_file)
    try:
        return load(path)
    except Exception as e:  # noqa: BLE001 - any unreadable tokenizer is a plan error, said plainly
        raise PlanError(f"target.tokenizer: {e}") from e


def _workload(w: dict, num_prompts: int, spec_file: str, tokenizer_path: str | None = None):
    """(the Workload, its prompt source)."""
    (kind, cfg), = w["dataset"].items()
    mode = w.get("prompts", DEFAULTS["workload.prompts"])
    params: dict[str, Any] = {"seed": cfg.get("seed", DEFAULTS["workload.dataset.*.seed"])}
    # a pool only where prompts are dealt from one: a shared set, or a file's items
    pool = cfg.get("num_prompts", num_prompts if mode == "shared" else None)
    if kind == "random":
        params.update(
            input_tokens=normalise_length(cfg["input_tokens"]),
            output_tokens=normalise_length(cfg["output_tokens"]),
            prefix_tokens=parse_tokens(
                cfg.get("prefix_tokens", DEFAULTS["workload.dataset.random.prefix_tokens"])),
            num_prompts=pool,
        )
    else:
        params.update(path=cfg["path"], num_prompts=pool)
        if kind == "jsonl":
            params["shuffle"] = cfg.get("shuffle", False)
        if kind == "sharegpt" and "output_tokens" in cfg:
            params["output_tokens"] = normalise_length(cfg["output_tokens"])
    base_dir = os.path.dirname(os.path.abspath(spec_file)) if not spec_file.startswith("<") else "."
    tok = load_tokenizer(tokenizer_path, spec_file)
    source = make_source(kind, params, mode, base_dir, tok)
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
    if kind == "random":
        prefix = params["prefix_tokens"]
        ins = _length_stats(params["input_tokens"], prefix)
        outs = _length_stats(params["output_tokens"])
    else:
        ins = _stats([p.input_tokens for p in source.items])
        asked = [p.output_tokens for p in source.items if p.output_tokens is not None]
        outs = _stats(asked) if asked else {}
    if sampling.max_tokens is not None:
        outs = _stats([sampling.max_tokens])
    workload = Workload(
        dataset=kind,
        params=params,
        sampling=sampling,
        num_prompts=source.pool_size,
        prompts_sha256=source_digest(source),
        input_tokens={"method": "tokenizer" if tok else "words", **ins},
        tokenizer_sha256=tok.sha256 if tok else None,
        output_tokens=outs,
        prompts=mode,
    )
    return workload, source


def _stats(xs: list[int]) -> dict:
    return {"min": min(xs), "mean": round(sum(xs) / len(xs), 3), "max": max(xs)}


def _length_stats(length: dict, plus: int = 0) -> dict:
    """min, mean and max of a length distribution (workload.draw_length's), plus `plus`
    tokens; a normal one is cut below at 1 and has no maximum (None)."""
    if length["kind"] == "fixed":
        v = max(1, length["value"]) + plus
        return {"min": v, "mean": float(v), "max": v}
    if length["kind"] == "uniform":
        lo, hi = max(1, length["min"]), max(1, length["max"])
        return {"min": lo + plus, "mean": round((lo + hi) / 2 + plus, 3), "max": hi + plus}
    return {"min": 1 + plus, "mean": float(max(1, length["mean"]) + plus), "max": None,
            "stdev": length["stdev"]}


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
