"""Spec -> Plan: fill defaults, normalise units, expand matrix x sweep, give each step its
prompt stream and the sha256 of its first prompts (plan/prompts.py builds them on demand).

Every default lives here, once, in DEFAULTS (a test keeps it in step with the
schema's keys and docs/spec.md).
"""

from __future__ import annotations

import os
import secrets
from dataclasses import asdict, replace
from typing import Any

from benchc.errors import PlanError
from benchc.plan.datasets import KINDS, is_multi_turn, make_source, spread
from benchc.plan.images import image_params
from benchc.plan.model import (
    CONVERSATION_APIS,
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
    sim_file_keys,
    sim_preset_is_file,
)
from benchc.plan.prompts import source_digest, step_count, step_digest
from benchc.plan.search import DEFAULT_TOLERANCE, REPROBES, worst_case_probes
from benchc.plan.sessions import think_params
from benchc.plan.shapes import SHAPES, AgentReplay, ClosedLoop, OpenLoop, Replay, Search
from benchc.plan.tools import compile_tools
from benchc.plan.twin_file import fitted_batch_max, read_twin_file
from benchc.plan.workload import normalise_length
from benchc.spec import matrix as mx
from benchc.spec.loader import Spec
from benchc.spec.thresholds import parse_threshold
from benchc.units import parse_duration, parse_rate, parse_tokens

DEFAULTS: dict[str, Any] = {
    "target.api": "chat",
    "target.timeout": "10m",
    "target.idle_timeout": "60s",
    # a server that took the connection and sends nothing is found in a minute, not at the
    # whole request's timeout; one that holds its answer while a request queues needs more
    "target.first_byte_timeout": "60s",
    "target.sim.preset": "minimax-m2.5-tp4",
    "server.ready.path": "/health",
    "server.ready.timeout": "20m",  # a 1T-parameter model took 13 minutes to load
    "server.ready.interval": "1s",
    "server.stop_timeout": "30s",
    # Opt-in: a fresh prompt per request already keeps points from serving each other
    # from cache; a reset also empties what the warmup and the shared prefix left.
    "server.reset_cache": "never",
    # each point's /metrics samples: AIPerf takes one every 100 ms; a second keeps a long point's
    # series small (60 samples a minute) and the server's /metrics handler off its hot loop
    "server.metrics_interval": "1s",
    "cost.currency": "USD",
    "smoke.continue_on_fail": False,
    "smoke.checks.max_tokens": 64,
    "workload.dataset.*.seed": 0,
    "workload.dataset.random.prefix_tokens": 0,
    "workload.dataset.trace.block_size": 512,  # the published Mooncake traces' block
    # sessions: no shared system prompt, and each turn goes as soon as the answer before it ended
    "workload.dataset.sessions.prefix_tokens": 0,
    "workload.dataset.sessions.think_time": 0,
    # Every request a prompt no other request of the run sent (but the shared prefix):
    # servers cache prompt prefixes by default, and a repeated prompt measures a cache hit.
    "workload.prompts": "fresh",
    # tools: the server decides whether to call one (OpenAI's own default)
    "workload.tools.choice": "auto",
    # agent loops: a tool answers at once, and a user message gets at most 8 tool rounds (a
    # model that never stops calling tools would otherwise hold its session forever)
    "workload.agent.tool_latency": 0,
    "workload.agent.max_tool_calls": 8,
    "workload.agent.fan_out": 1,  # no sub-agents: a tool round takes tool_latency
    # num_prompts, where prompts are dealt from a pool: prompts: shared (the largest number
    # of requests any step sends, or 1000 for duration-only points, reused in order,
    # cycling); a file in fresh mode deals all its items unless num_prompts says fewer.
    "workload.dataset.num_prompts_for_duration": 1000,
    "workload.sampling.temperature": 0.0,
    # Synthetic prompts (random, prefix_groups, a trace giving every output length) ask for
    # exact output lengths: the server must not stop early. A user's prompts do not.
    "workload.sampling.ignore_eos.exact_lengths": True,
    "workload.sampling.ignore_eos.files": False,
    # Warmup: as many requests as the first point's concurrency, so every
    # connection of the pool is open and warm before measuring.
    "load.warmup.requests": "first point's concurrency",
    "load.sweep.arrival": "poisson",
    "load.sweep.burstiness": 1.0,
    "load.ramp_up": 0.0,
    "load.cooldown": 0.0,
    # Runs of every sweep point; more than one gives each point's mean and 95% interval.
    "load.repeats": 1,
    # A search decides on the spec's SLO unless it names its own.
    "load.search.slo": "the spec's slo",
    # Integers are bisected to the exact largest concurrency; rates to 5% of the answer.
    "load.search.tolerance": "1 (concurrency), 5% (rate)",
    # Room for two re-probes of untrusted probes beyond what the policy needs at most.
    "load.search.max_probes": "worst case + 2",
    "load.search.arrival": "poisson",
    "load.saturation.latency": "e2e.p50",
    "output.path": "results/{name}-{timestamp}.json",
    "output.requests": False,
    "run.backend": "local",
}


def compile_spec(spec: Spec, run_seed: int | None = None) -> Plan:
    """Compile a validated spec into a Plan with its hashes. `run_seed` is the prompt seed of a
    dataset whose spec leaves `seed` out: `benchc run` draws one per run (draw_seed), so a
    second run against a long-lived server does not resend the first one's prompts; None
    (`benchc plan`, `validate`) compiles with the default, 0."""
    d = spec.data
    load = d["load"]
    combos = []
    steps: list[Step] = []
    slo = _slo(d.get("slo") or {})
    repeats = load.get("repeats", DEFAULTS["load.repeats"])
    stream = 0  # every warmup and load step (every probe of a search) gets a prompt stream of its own
    for index, values in enumerate(mx.combinations(d.get("matrix"))):
        data = mx.expand(d, values)
        label = ",".join(f"{k}={mx.format_value(v)}" for k, v in values.items())
        points = [_search(load, index, label, slo)] if "search" in load else _points(load, index, label)
        batch = data["workload"].get("batch", 1)
        num_prompts = _num_prompts(load, points) * batch
        workload, source = _workload(data["workload"], num_prompts, spec.file,
                                     data["target"].get("tokenizer"), data["target"].get("api", "chat"),
                                     run_seed)
        if workload.trace is not None:
            points = [_replay(p, workload.trace) for p in points]
        if workload.dataset == "agent_trace":
            points = [_agent_replay(p, workload.params, label) for p in points]
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
        api = combo.target.api
        if workload.sessions is not None and api not in CONVERSATION_APIS:
            raise PlanError("sessions send their history as chat messages: they need target.api: "
                            + ", ".join(CONVERSATION_APIS))
        if workload.dataset == "agent_trace" and api != "chat":
            raise PlanError(f"workload.dataset.agent_trace: a coding-agent replay sends each request as one "
                            f"chat message of exactly its `in` tokens: it needs target.api: chat, not {api}")
        if workload.sessions is not None and "cancel" in load:
            raise PlanError("load.cancel with a sessions workload is not built yet (it cancels single "
                            "prompts' requests); remove load.cancel or use a single-turn dataset")
        if api == "messages" and workload.sampling.max_tokens is None and not workload.output_tokens:
            raise PlanError("target.api messages: the Messages API requires max_tokens; set "
                            "workload.sampling.max_tokens or the dataset's output length")
        if batch > 1 and api not in ("embeddings", "rerank", "score"):
            raise PlanError(f"workload.batch: {batch} sends several inputs in one request: only "
                            "target.api: embeddings, rerank and score take them (a generation request has "
                            "one prompt)")
        if batch < 2 and api in ("rerank", "score"):
            raise PlanError(f"target.api: {api} sends a query and its documents: workload.batch must be at "
                            "least 2 (the query, then batch - 1 documents)")
        combos.append(combo)
        steps.append(Step("server", index, _join(label, "server")))
        if combo.smoke:
            steps.append(Step("smoke", index, _join(label, "smoke")))
        # no warm-up before a coding-agent replay: it would put the sessions' blocks in the cache
        warmup = None if workload.dataset == "agent_trace" else _warmup(load, points, index, label)
        for step in ([warmup] if warmup else []) + _repeated(points, repeats):
            steps.append(replace(step, prompt_stream=stream,
                                 prompts_sha256=step_digest(source, stream, step_count(step, source))))
            # a search reserves one stream per probe it may make: probe k sends stream + k - 1
            stream += step.search["max_probes"] if step.search else 1
    plan = Plan(
        plan_version=PLAN_VERSION,
        name=d["name"],
        description=d.get("description", ""),
        spec={"path": spec.file, "sha256": spec.sha256},
        combinations=combos,
        steps=steps,
        slo=slo,
        repeats=repeats,
        saturation=_saturation(load.get("saturation")),
        budget=_budget(steps),
        cost=_cost(d.get("cost")),
        output={"path": d.get("output", {}).get("path", DEFAULTS["output.path"]),
                "requests": d.get("output", {}).get("requests", DEFAULTS["output.requests"])},
        run={"backend": d.get("run", {}).get("backend", DEFAULTS["run.backend"]),
             "ray_address": d.get("run", {}).get("ray_address"),
             "workers": d.get("run", {}).get("workers", 0)},
    )
    return plan.with_hashes()


def _cost(c: dict | None) -> dict | None:
    """The spec's price of GPU time, with its currency."""
    if not c:
        return None
    return {"gpu_hour": float(c["gpu_hour"]), "currency": c.get("currency", DEFAULTS["cost.currency"])}


def _join(label: str, what: str) -> str:
    return f"{label}/{what}" if label else what


def _target(t: dict, spec_file: str) -> Target:
    sim = twin = None
    if "sim" in t:
        sim = {"preset": DEFAULTS["target.sim.preset"], **t["sim"]}
        for key in sim_file_keys(sim):
            if not os.path.isabs(sim[key]) and not spec_file.startswith("<"):
                # the simulator runs as a subprocess; give it a path that does not depend on cwd
                sim[key] = os.path.join(os.path.dirname(os.path.abspath(spec_file)), sim[key])
        twin = _twin(sim) if sim_preset_is_file(sim["preset"]) else None
    return Target(
        base_url=t["base_url"].rstrip("/") if "base_url" in t else None,
        sim=sim,
        api=t.get("api", DEFAULTS["target.api"]),
        model=t["model"],
        api_key=t.get("api_key"),
        headers=dict(t.get("headers", {})),
        timeout_s=parse_duration(t.get("timeout", DEFAULTS["target.timeout"])),
        idle_timeout_s=parse_duration(t.get("idle_timeout", DEFAULTS["target.idle_timeout"])),
        first_byte_timeout_s=parse_duration(t.get("first_byte_timeout",
                                                  DEFAULTS["target.first_byte_timeout"])),
        tokenizer=t.get("tokenizer"),
        continuous_usage=bool(t.get("continuous_usage_stats", False)),
        twin=twin,
    )


def _twin(sim: dict) -> dict:
    """What a run needs of the twin file the simulator will play: the largest batch its step time
    was measured at, and its slots (the spec's target.sim override first). A missing or bad twin
    is refused here, before anything runs."""
    path = sim["preset"]
    if not os.path.isfile(path):
        raise PlanError(f"target.sim.preset: {path}: no such twin file (a path names "
                        "a twin that `benchc fit` wrote, relative to the spec's folder; a "
                        "built-in preset is a name: minimax-m2.5-tp4, kimi-k2.5-nvfp4-tp8, instant)")
    try:
        doc = read_twin_file(path)
    except ValueError as e:
        raise PlanError(f"target.sim.preset: {e}") from e
    slots = sim.get("max_num_seqs", doc["sim"].get("max_num_seqs"))
    number = isinstance(slots, int | float) and not isinstance(slots, bool)
    return {"fitted_batch_max": fitted_batch_max(doc), "max_num_seqs": int(slots) if number else None}


def _server(s: dict | None) -> Server | None:
    if not s:
        return None
    cmd = s.get("command")
    argv: list[str] | None
    if isinstance(cmd, str):
        argv = ["/bin/sh", "-c", cmd]
    else:
        argv = [mx.format_value(a) for a in cmd] if cmd else None
    ready = s.get("ready", {})
    return Server(
        attach=bool(s.get("attach", "command" not in s)),  # no command: the target's server
        command=argv,
        env={k: mx.format_value(v) for k, v in s.get("env", {}).items()},
        cwd=s.get("cwd"),
        ready_path=ready.get("path", DEFAULTS["server.ready.path"]),
        ready_timeout_s=parse_duration(ready.get("timeout", DEFAULTS["server.ready.timeout"])),
        ready_interval_s=parse_duration(ready.get("interval", DEFAULTS["server.ready.interval"])),
        log=s.get("log"),
        stop_timeout_s=parse_duration(s.get("stop_timeout", DEFAULTS["server.stop_timeout"])),
        reset_cache=s.get("reset_cache", DEFAULTS["server.reset_cache"]),
        metrics_interval_s=parse_duration(s.get("metrics_interval", DEFAULTS["server.metrics_interval"])),
        gpus=s.get("gpus"),
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


def find_template(path: str | None, spec_file: str, api: str = "chat") -> tuple[str, str, dict] | None:
    """target.tokenizer's chat template as found beside it (tokenizer/chat_template.find: its
    text, file and tokenizer_config.json) where benchc counts with it -- the chat API (a
    completions prompt is sent as it is), jinja2 installed; else None (describe_template
    says why)."""
    if not path or api not in CONVERSATION_APIS:
        return None
    from benchc.tokenizer.chat_template import ChatTemplate, find

    if not ChatTemplate.available():
        return None
    try:
        return find(tokenizer_path(path, spec_file))
    except Exception as e:  # noqa: BLE001 - an unreadable tokenizer_config.json, said plainly
        raise PlanError(f"target.tokenizer: {e}") from e


def bind_template(found: tuple[str, str, dict] | None, tokenizer):
    """A found chat template bound to the tokenizer that counts its text, or None."""
    if found is None or tokenizer is None:
        return None
    from benchc.tokenizer.chat_template import ChatTemplate

    return ChatTemplate(*found, tokenizer=tokenizer)


def describe_template(path: str | None, spec_file: str, api: str) -> dict | None:
    """What the plan keeps of target.tokenizer's chat template: where it is, its sha256, and
    whether benchc counts input tokens with it (jinja2 installed, the chat API)."""
    if not path:
        return None
    from benchc.tokenizer.chat_template import JINJA_MISSING, ChatTemplate, find

    found = find(tokenizer_path(path, spec_file))
    if found is None:
        return None
    template = ChatTemplate(*found)
    out = {"source": os.path.basename(template.source), "sha256": template.sha256,
           "counting": api in CONVERSATION_APIS and ChatTemplate.available()}
    if not out["counting"]:
        out["note"] = (JINJA_MISSING if api in CONVERSATION_APIS
                       else f"the {api} API sends prompts as they are")
    return out


def draw_seed() -> int:
    """A run's prompt seed (for datasets whose spec pins none): 31 random bits, so that it
    reads back from JSON exactly and fits every dataset's generator."""
    return secrets.randbits(31)


def _workload(w: dict, num_prompts: int, spec_file: str, tokenizer_path: str | None = None,
              api: str = "chat", run_seed: int | None = None):
    """(the Workload, its prompt source)."""
    (name, cfg), = w["dataset"].items()
    kind = KINDS[name]
    cfg = {**_dataset_defaults(name), **cfg}
    mode = w.get("prompts", DEFAULTS["workload.prompts"])
    # a pool only where prompts are dealt from one: a shared set, or a file's items
    pool = cfg.get("num_prompts", num_prompts if mode == "shared" else None)
    pinned = "seed" in cfg
    default_seed = DEFAULTS["workload.dataset.*.seed"] if run_seed is None else run_seed
    params: dict[str, Any] = {"seed": cfg["seed"] if pinned else default_seed, **kind.params(cfg, pool)}
    base_dir = os.path.dirname(os.path.abspath(spec_file)) if not spec_file.startswith("<") else "."
    tok = load_tokenizer(tokenizer_path, spec_file)
    source = make_source(name, params, mode, base_dir, tok)
    s = w.get("sampling", {})
    exact = "exact_lengths" if kind.exact_lengths(source) else "files"
    sampling = Sampling(
        temperature=float(s.get("temperature", DEFAULTS["workload.sampling.temperature"])),
        top_p=s.get("top_p"),
        max_tokens=parse_tokens(s["max_tokens"]) if "max_tokens" in s else None,
        min_tokens=parse_tokens(s["min_tokens"]) if "min_tokens" in s else None,
        ignore_eos=bool(s.get("ignore_eos", DEFAULTS["workload.sampling.ignore_eos." + exact])),
        stop=[s["stop"]] if isinstance(s.get("stop"), str) else list(s.get("stop", [])),
        seed=s.get("seed"),
        extra_body=dict(s.get("extra_body", {})),
    )
    ins, outs = kind.lengths(source, params)
    if sampling.max_tokens is not None:
        outs = spread([sampling.max_tokens])
    workload = Workload(
        dataset=name,
        params=params,
        sampling=sampling,
        num_prompts=source.pool_size,
        prompts_sha256=source_digest(source),
        input_tokens={"method": "tokenizer" if tok else "words", **ins},
        tokenizer_sha256=tok.sha256 if tok else None,
        output_tokens=outs,
        prompts=mode,
        trace=kind.describe(source) if kind.describe else None,
        sessions=_sessions(source, name, params, w.get("history", "full")),
        chat_template=describe_template(tokenizer_path, spec_file, api),
        tools=compile_tools(w.get("tools"), params["seed"], base_dir, tok),
        images=image_params(w.get("images")),
        agent=agent_params(w["agent"]) if "agent" in w else None,
        batch=w.get("batch", 1),
        seed_pinned=pinned,
    )
    return workload, source


def _sessions(source, name: str, params: dict, history: str) -> dict | None:
    """What a multi-turn workload's sessions hold (Workload.sessions), with how a request carries
    its history where it is not the whole of it (so a plan without the key hashes as before)."""
    if not is_multi_turn(name, params):
        return None
    out = source.stats().to_json()
    if history != "full":
        out["history"] = history
    return out


def agent_params(cfg: dict) -> dict:
    """workload.agent, normalised: each tool result's length, the tool's latency (as a think
    time: fixed, uniform, normal or exponential), the tool rounds a user message may take."""
    return {"tool_result_tokens": normalise_length(cfg["tool_result_tokens"]),
            "tool_latency": think_params(cfg.get("tool_latency", DEFAULTS["workload.agent.tool_latency"])),
            "max_tool_calls": cfg.get("max_tool_calls", DEFAULTS["workload.agent.max_tool_calls"]),
            "fan_out": cfg.get("fan_out", DEFAULTS["workload.agent.fan_out"])}


def _dataset_defaults(name: str) -> dict:
    """The DEFAULTS of workload.dataset.NAME's keys."""
    head = f"workload.dataset.{name}."
    return {k[len(head):]: v for k, v in DEFAULTS.items() if k.startswith(head)}


def _points(load: dict, index: int, label: str) -> list[Step]:
    """The load points of a combination: the shape type whose the spec's load is makes them
    (plan/shapes.py, from_load; the spec's checks saw to it that exactly one is)."""
    bounds: dict[str, Any] = dict(
        requests=load.get("requests"), sessions=load.get("sessions"),
        duration_s=parse_duration(load["duration"]) if "duration" in load else None,
        ramp_up_s=parse_duration(load.get("ramp_up", DEFAULTS["load.ramp_up"])),
        cooldown_s=parse_duration(load.get("cooldown", DEFAULTS["load.cooldown"])),
    )
    shapes = next(made for kind in SHAPES.values() if (made := kind.from_load(load, bounds, DEFAULTS)))
    cancel = _cancel(load.get("cancel"))
    grace = parse_duration(load["graceful_stop"]) if "graceful_stop" in load else None
    return [Step("load", index, _join(label, shape.label), load=replace(shape, graceful_stop_s=grace),
                 cancel=cancel) for shape in shapes]


def _repeated(points: list[Step], repeats: int) -> list[Step]:
    """Each point `repeats` times, in interleaved passes (the whole sweep, then again): a
    drift of the server or the machine over the run then spreads over every point's runs,
    widening their intervals, instead of shifting the points measured last."""
    if repeats <= 1:
        return points
    return [replace(p, id=f"{p.id}#{r}", repeat=r) for r in range(1, repeats + 1) for p in points]


def _search(load: dict, index: int, label: str, slo: list[SloItem]) -> Step:
    """The combination's capacity search (plan/search.py): its definition, and the load
    fields its probes take (requests, duration, ramp-up, cooldown; arrivals for a rate)."""
    s = load["search"]
    over = s["over"]
    lo: float
    hi: float
    if over == "concurrency":
        lo, hi = int(s["min"]), int(s["max"])
        tolerance = ({"kind": "absolute", "value": int(s["tolerance"])} if "tolerance" in s
                     else DEFAULT_TOLERANCE["concurrency"])
    else:
        lo, hi = parse_rate(s["min"]), parse_rate(s["max"])
        tolerance = _rate_tolerance(s["tolerance"]) if "tolerance" in s else DEFAULT_TOLERANCE["rate"]
    items = _slo(s["slo"]) if "slo" in s else slo
    worst = worst_case_probes(over, lo, hi, tolerance)
    max_probes = int(s.get("max_probes", worst + 2 * REPROBES))
    requests = load.get("requests")
    duration = parse_duration(load["duration"]) if "duration" in load else None
    definition = {
        "over": over, "min": lo, "max": hi, "tolerance": tolerance,
        "slo": [asdict(x) for x in items],
        "worst_case_probes": worst,  # with every probe trusted
        "max_probes": max_probes,  # never more, re-probes included
        "max_requests": max_probes * requests if requests else None,
        "max_duration_s": max_probes * duration if duration else None,
        "probe_streams": "probe k sends prompt stream prompt_stream + k - 1",
    }
    arrival = s.get("arrival", DEFAULTS["load.search.arrival"]) if over == "rate" else None
    template = Search(over=over, least=lo, largest=hi, arrival=arrival,
                      burstiness=(s.get("burstiness", DEFAULTS["load.sweep.burstiness"]) if arrival == "gamma"
                                  else None),
                      max_concurrency=s.get("max_concurrency") if over == "rate" else None,
                      requests=requests, duration_s=duration, sessions=load.get("sessions"),
                      ramp_up_s=parse_duration(load.get("ramp_up", DEFAULTS["load.ramp_up"])),
                      cooldown_s=parse_duration(load.get("cooldown", DEFAULTS["load.cooldown"])))
    return Step("search", index, _join(label, "search"), load=template, cancel=_cancel(load.get("cancel")),
                search=definition)


def _cancel(rule: dict | None) -> dict | None:
    """load.cancel as the plan holds it (run/loadgen.py applies it)."""
    if rule is None:
        return None
    out: dict = {"fraction": float(rule["fraction"])}
    if "after" in rule:
        out["after_s"] = parse_duration(rule["after"])
    else:
        out["after_tokens"] = int(rule["after_tokens"])
    return out


def _rate_tolerance(value: Any) -> dict:
    """`5%` (of the bracket's lower end) or a rate (`0.5/s`, or a number of req/s)."""
    if isinstance(value, str) and value.endswith("%"):
        return {"kind": "relative", "value": float(value[:-1]) / 100.0}
    return {"kind": "absolute", "value": parse_rate(value)}


def _saturation(rule: dict | None) -> dict | None:
    """load.saturation as fractions; None without one (run/saturation.py applies it)."""
    if not rule:
        return None
    return {"min_gain": _fraction(rule["min_gain"]) if "min_gain" in rule else None,
            "latency": rule.get("latency", DEFAULTS["load.saturation.latency"]),
            "max_error_rate": _fraction(rule["max_error_rate"]) if "max_error_rate" in rule else None}


def _fraction(value: Any) -> float:
    """`5%` or 0.05."""
    return float(value[:-1]) / 100.0 if isinstance(value, str) else float(value)


def _budget(steps: list[Step]) -> dict:
    """The most the plan may do: load points, searches and their probes, and requests sent
    (warm-ups included; None when a step is bound by duration only)."""
    loads = [s for s in steps if s.kind == "load"]
    searches = [s.search for s in steps if s.kind == "search" and s.search]
    counts = ([s.requests for s in steps if s.kind in ("warmup", "load")]
              + [s["max_requests"] for s in searches])
    return {"load_points": len(loads), "searches": len(searches),
            "probes_max": sum(s["max_probes"] for s in searches),
            "requests_max": sum(counts) if all(counts) else None}
def _replay(step: Step, trace: dict) -> Step:
    """A point of a trace dataset: it sends the slice's requests once (its shape says how:
    plan/shapes.py, replayed)."""
    return replace(step, load=step.shape.replayed(trace))


def _agent_replay(step: Step, params: dict, label: str) -> Step:
    """A point of a coding-agent trace (plan/shapes.AgentReplay): a concurrency is sessions in
    flight, a rate their arrivals, a speedup the traces' own start times."""
    shape = step.shape
    keep = dict(sessions=shape.sessions, time_scale=params["time_scale"], max_think_s=params["max_think_s"],
                kv_block=params["kv_block"],
                ramp_up_s=shape.ramp_up_s, cooldown_s=shape.cooldown_s)
    agent: AgentReplay
    if isinstance(shape, ClosedLoop):
        agent = AgentReplay(concurrency=shape.concurrency, **keep)
    elif isinstance(shape, OpenLoop):
        agent = AgentReplay(rate_rps=shape.rate_rps, **keep)
    elif isinstance(shape, Replay):
        agent = AgentReplay(speedup=shape.speedup, **keep)
    else:
        raise PlanError(f"workload.dataset.agent_trace: a {shape.key} point does not replay sessions: sweep "
                        "concurrency, rate or speedup")
    return replace(step, id=_join(label, agent.label), load=agent)


def _warmup(load: dict, points: list[Step], index: int, label: str) -> Step | None:
    w = load.get("warmup")
    # the first point's in flight (a search's first probe: its min concurrency, or the rate's cap)
    width = points[0].shape.first_inflight or 1
    sessions = None
    if w is None:
        requests, duration = width, None
    else:
        requests, sessions = w.get("requests"), w.get("sessions")
        duration = parse_duration(w["duration"]) if "duration" in w else None
    if not requests and not duration and not sessions:
        return None
    return Step("warmup", index, _join(label, "warmup"),
                load=ClosedLoop(concurrency=width, requests=requests, duration_s=duration, sessions=sessions))


def _num_prompts(load: dict, points: list[Step]) -> int:
    counts = [n for p in points for n in (p.requests, p.sessions) if n]
    warm = max((load.get("warmup") or {}).get(k) or 0 for k in ("requests", "sessions"))
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
