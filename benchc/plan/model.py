"""The compiled Plan: frozen dataclasses with an exact JSON form.

A Plan holds everything `execute` needs and nothing it must discover: defaults
filled, units normalised (seconds as floats, rates in requests/s, tokens as
ints), matrix x sweep expanded into ordered steps. Containers are lists and
dicts (JSON's own types), so `Plan.from_dict(plan.to_dict(redact=False)) == plan`.

Format history (bump PLAN_VERSION on any change of meaning):
    1  first version: every step sent the same prompt set (prompt i of the dataset as its
       i-th request); Workload.prompts_sha256 hashed that set.
    2  fresh prompts (benchc/plan/prompts.py): each warmup and load step has a prompt stream
       (Step.prompt_stream) and Step.prompts_sha256 hashes its first prompts;
       Workload.prompts says fresh or shared, Workload.prompts_sha256 hashes what prompts
       are dealt from (a file's items, or a random generator's fingerprint);
       Server.reset_cache. A v1 plan reads as prompts: shared, which is what it did.
    3  answers, not only sweeps: a `search` step per combination (load.search, plan/search.py:
       probes decided at run time, probe k sending prompt stream Step.prompt_stream + k - 1,
       Step.search the definition with its most probes and requests); repeated points
       (load.repeats: Step.repeat, each run a load step of its own stream, passes
       interleaved); Plan.repeats, Plan.saturation (the sweep's early-stop rule) and
       Plan.budget (how many points, probes and requests at most). Additive: a v1 or v2 plan
       reads with none of them. Also optional (a plan without them reads as before): datasets trace and
       prefix_groups; Workload.trace (a trace file's sha256 and its slice's statistics);
       Step.speedup and arrival "trace" (a trace replayed on its own schedule).
       Target.first_byte_timeout_s (optional: a plan without it reads with 60 s). Also optional:
       multi-turn sessions (dataset sessions, sharegpt and trace with `sessions`;
       Workload.sessions; Step.sessions, the sessions a step starts; Step.users and
       Step.turn_interval_s, the user-centric pace); Workload.chat_template. Also optional:
       Workload.tools, Workload.images and Workload.agent (tools in every request, images
       in every prompt, agent loops in sessions). Also optional: Target.twin (a twin's fitted
       batch range, read from its file).
    4  load shapes as types (plan/shapes.py): a step's load fields (concurrency, rate_rps,
       arrival, burstiness, max_concurrency, requests, duration_s, ramp_up_s, cooldown_s,
       speedup, sessions, users, turn_interval_s), flat on the step until now, are its `load`:
       {"closed_loop" | "open_loop" | "replay" | "users" | "search": that shape's fields}, null
       for server and smoke steps. Steps of versions 1-3 read as the shape their fields say
       (plan/shapes.from_flat); the plan's hash is still taken over the flat form. Also
       optional: the shape's graceful_stop_s (load.graceful_stop, written only when set; a plan
       without it lets in-flight requests finish past the duration, and hashes as before).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from benchc.errors import PlanError
from benchc.plan.shapes import FLAT_FIELDS, PARAM_HEAD, Extent, from_flat, shape_from_dict
from benchc.redact import REDACTED, redact_argv, redact_env, redact_headers, redact_url

PLAN_VERSION = 4
READABLE_PLAN_VERSIONS = (1, 2, 3, 4)


# The server APIs a target may name (benchc.client.apis has one adapter each), and those that
# send a conversation (messages, rendered by the model's chat template) rather than a prompt
APIS = ("chat", "completions", "responses", "messages", "embeddings", "rerank", "score")
CONVERSATION_APIS = ("chat", "responses", "messages")
TWIN_SUFFIXES = (".yaml", ".yml")


def sim_preset_is_file(preset: str) -> bool:
    """A simulator preset named by a file (a twin that `benchc fit` wrote), not a built-in name."""
    return preset.endswith(TWIN_SUFFIXES) or "/" in preset or os.sep in preset


def sim_file_keys(sim: dict) -> list[str]:
    """The target.sim keys whose values are file paths: `tokenizer`, and `preset` when a twin."""
    keys = ["tokenizer"] if sim.get("tokenizer") else []
    return keys + (["preset"] if sim_preset_is_file(str(sim.get("preset", ""))) else [])


@dataclass(frozen=True)
class Target:
    base_url: str | None  # None for the simulator: its address is known only when it starts
    sim: dict | None  # simulator parameters (preset + overrides), or None
    api: str  # one of APIS
    model: str
    api_key: str | None
    headers: dict[str, str]
    timeout_s: float  # whole request
    idle_timeout_s: float  # longest gap between two reads of one stream
    tokenizer: str | None
    # ask for usage on every chunk (vLLM's stream_options.continuous_usage_stats), which
    # gives each chunk's token count: per-token ITL and visible multi-token chunks
    continuous_usage: bool = False
    # longest wait for the first byte of an answer (its status line); optional: older plans
    # read with the default
    first_byte_timeout_s: float = 60.0
    # a simulator playing a twin (`benchc fit`): {"fitted_batch_max": the largest batch its step
    # time was measured at, "max_num_seqs": its slots, or None where neither the spec nor the
    # twin says}; a point whose batch passes it says so (results/trust.py). None otherwise
    twin: dict | None = None


@dataclass(frozen=True)
class Server:
    attach: bool
    command: list[str] | None  # argv; a shell string is ["/bin/sh", "-c", "..."]
    env: dict[str, str]
    cwd: str | None
    ready_path: str
    ready_timeout_s: float
    ready_interval_s: float
    log: str | None
    stop_timeout_s: float
    # empty the server's prefix cache: between_points | between_combinations | never
    reset_cache: str = "never"
    # how often each load point samples the server's /metrics into its time series (seconds)
    metrics_interval_s: float = 1.0
    # server.gpus: a count, or the GPUs' indices (None: told from the matrix, the simulator
    # or CUDA_VISIBLE_DEVICES when the run starts: run/gpus.py)
    gpus: int | list[int] | None = None


@dataclass(frozen=True)
class SmokeCheck:
    name: str
    prompt: str | None
    messages: list[dict] | None
    expect: str | None
    max_tokens: int


@dataclass(frozen=True)
class Smoke:
    continue_on_fail: bool
    checks: list[SmokeCheck]


@dataclass(frozen=True)
class Sampling:
    temperature: float
    top_p: float | None
    max_tokens: int | None  # None: each prompt's own output length decides
    min_tokens: int | None
    ignore_eos: bool
    stop: list[str]
    seed: int | None
    extra_body: dict


@dataclass(frozen=True)
class Workload:
    dataset: str  # a kind of plan/datasets.py: random | jsonl | sharegpt | trace | prefix_groups
    params: dict  # the dataset's normalised parameters (lengths as {kind, ...})
    sampling: Sampling
    num_prompts: int | None  # the pool dealt in turn (files; prompts: shared); None: endless
    prompts_sha256: str  # of what prompts are dealt from, so execute can prove it rebuilt them
    input_tokens: dict  # {"method", "min", "mean", "max"} of the prompts
    output_tokens: dict  # {"min", "mean", "max"} asked of the server, or {} when unset
    tokenizer_sha256: str | None = None  # of the tokenizer file that sized the prompts
    prompts: str = "fresh"  # fresh: no request repeats another's prompt; shared: one set for all
    # a trace: its file's sha256 and what the slice holds (requests, token totals, duration_s
    # in trace time, clipped_requests, ...; plan/trace.py), else None
    trace: dict | None = None
    # multi-turn: what the sessions hold (source, turns per session, think time; plan/sessions.py),
    # else None (single prompts)
    sessions: dict | None = None
    # target.tokenizer's chat template: {source, sha256, counting[, note]} (input tokens are
    # counted as the server renders them, tokenizer/chat_template.py), else None
    chat_template: dict | None = None
    # what goes into every request beside the prompt (plan/tools.py, plan/images.py) and the
    # agent loop of sessions (plan/sessions.py): None when the spec has none. Left out of the
    # hashes when None, so a plan without them hashes as before.
    tools: dict | None = None  # {source, choice, tokens, definitions (chat form), ...}
    images: dict | None = None  # {count, width, height, format, source}
    agent: dict | None = None  # {tool_result_tokens, tool_latency, max_tool_calls}
    # inputs per request (workload.batch): an embeddings request sends this many prompts
    batch: int = 1
    # False when the spec left the dataset's `seed` out: params["seed"] was then drawn for the
    # run (`benchc run`; 0 in `benchc plan`), so two runs never share prompts by accident, and
    # the hashes leave it out (runs of one spec stay runs of one plan). Plans written before
    # it existed used the seed they name: pinned.
    seed_pinned: bool = True


@dataclass(frozen=True)
class Combination:
    index: int
    matrix: dict[str, Any]
    target: Target
    server: Server | None
    smoke: Smoke | None
    workload: Workload

    @property
    def metrics_interval_s(self) -> float:
        """The /metrics sampling interval of its points (server.metrics_interval; 1 s without
        a server section)."""
        return self.server.metrics_interval_s if self.server is not None else Server.metrics_interval_s


@dataclass(frozen=True)
class Step:
    """One thing execute does, in order. `kind` says what:

    server  -- launch (or attach to, or start the simulator for) a combination
    smoke   -- run the combination's smoke checks
    warmup  -- unrecorded requests: `requests` and/or `duration_s`, a closed loop at the
               first point's concurrency
    load    -- one sweep point; with load.repeats, one run of it (`repeat`); at run time, a
               search's probe (`probe`)
    search  -- a capacity search (`search`, plan/search.py): the probes' load steps are made
               from this one at run time; its load (plan/shapes.Search) is their template

    `load` is the step's load shape (plan/shapes.py: a closed loop, an open loop, a trace's
    replay, users at a pace, a search's template), None for server and smoke steps.
    """

    kind: str
    combination: int
    id: str  # stable, human: "c=4", "tp=8,ep=true/rate=10"
    load: Extent | None = None
    # warmup and load steps: request i sends prompt (prompt_stream, i) (plan/prompts.py), and
    # prompts_sha256 hashes the first of them (None where they depend on the run: a file)
    prompt_stream: int | None = None
    prompts_sha256: str | None = None
    repeat: int | None = None  # load: which run (1..N) of a point repeated N times
    search: dict | None = None  # search, and its probes: the search's definition (plan/search.py)
    probe: int | None = None  # a search's probe (1, 2, ...): set at run time, never in a plan
    # load.cancel: this fraction of the step's requests (chosen from the seed) closed after_s
    # after their write, or after after_tokens text chunks: {"fraction", "after_s" | "after_tokens"}
    cancel: dict | None = None

    @property
    def shape(self) -> Extent:
        """Its load: warmup, load and search steps have one."""
        assert self.load is not None, f"step {self.id} ({self.kind}) has no load"
        return self.load

    @property
    def inflight_target(self) -> int:
        """The units (requests, or sessions) the step keeps in flight (0: no bound, or no load)."""
        return self.load.inflight_target if self.load is not None else 0

    @property
    def requests(self) -> int | None:
        """The requests that end it (None: not bound by a count)."""
        return self.load.requests if self.load is not None else None

    @property
    def sessions(self) -> int | None:
        """The sessions it starts at most (None: not bound by a count)."""
        return self.load.sessions if self.load is not None else None

    @property
    def duration_s(self) -> float | None:
        return self.load.duration_s if self.load is not None else None

    @property
    def cooldown_s(self) -> float:
        return self.load.cooldown_s if self.load is not None else 0.0

    @property
    def graceful_stop_s(self) -> float | None:
        """load.graceful_stop, what its shape's Extent ends by past duration_s (None: none)."""
        return self.load.graceful_stop_s if self.load is not None else None

    def params(self) -> dict:
        """The result's params of a load step: its shape's, with which repeat and probe."""
        own = self.shape.params()
        out = {k: own.pop(k) for k in PARAM_HEAD}
        if self.repeat is not None:
            out["repeat"] = self.repeat  # which run of a repeated point
        if self.probe is not None:
            out["probe"] = self.probe  # which probe of the combination's capacity search
        out.update(own)
        return out

    def to_dict(self) -> dict:
        """Its plan JSON (version 4): the load as {shape key: its fields}."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["load"] = self.load.to_dict() if self.load is not None else None
        return d

    def flat(self) -> dict:
        """Its plan JSON as versions 1-3 wrote it, the load's fields flat on the step (the
        plan's hash is taken over it; readers of older results see it)."""
        return flat_step(self.to_dict())

    @classmethod
    def from_dict(cls, d: dict) -> Step:
        """A step of any readable plan version: version 4's `load`, or 1-3's flat fields."""
        if "load" in d:
            load = d["load"]
            return cls(**{**d, "load": shape_from_dict(load) if load is not None else None})
        own = {k: v for k, v in d.items() if k not in FLAT_FIELDS and k != "graceful_stop_s"}
        return cls(**own, load=from_flat(d["kind"], d, d.get("search")))


# A flat step's keys in the order versions 1-3 wrote them
_FLAT_ORDER = ("kind", "combination", "id", "concurrency", "rate_rps", "arrival", "burstiness",
               "max_concurrency", "requests", "duration_s", "ramp_up_s", "cooldown_s", "prompt_stream",
               "prompts_sha256", "repeat", "search", "probe", "speedup", "sessions", "users",
               "turn_interval_s", "cancel")


def flat_step(d: dict) -> dict:
    """A plan step's JSON, of any version, with its load's fields flat on it (as versions 1-3
    wrote steps): what readers of a result's plan steps (its burstiness, max_concurrency...) read."""
    if "load" not in d:
        return d
    load = shape_from_dict(d["load"]).flat() if d["load"] is not None else dict(FLAT_FIELDS)
    merged = {**{k: v for k, v in d.items() if k != "load"}, **load}
    return {k: merged[k] for k in _FLAT_ORDER if k in merged} | \
        {k: v for k, v in merged.items() if k not in _FLAT_ORDER}


@dataclass(frozen=True)
class SloItem:
    metric: str
    stat: str | None
    op: str
    value: float  # microseconds for latencies, a fraction for error_rate
    text: str


@dataclass(frozen=True)
class Plan:
    plan_version: int
    name: str
    description: str
    spec: dict  # {"path", "sha256"}
    combinations: list[Combination]
    steps: list[Step]
    slo: list[SloItem]
    output: dict  # {"path", "requests"}
    workload_hash: str = ""
    plan_hash: str = ""
    run: dict = field(default_factory=dict)  # how to run it (backend); not part of plan_hash
    repeats: int = 1  # load.repeats: runs of every sweep point
    # load.saturation: stop a sweep once throughput stops rising while latency rises, or
    # errors pass a bound (run/saturation.py); None: every point runs
    saturation: dict | None = None
    # the most the plan may do: load points, searches and their probes, requests (None when
    # a step is bound by duration only); derived from the steps
    budget: dict = field(default_factory=dict)
    # cost: {"gpu_hour": price of one GPU for an hour, "currency"} (None: no price given)
    cost: dict | None = None

    # ------------------------------------------------------------------ JSON form

    def to_dict(self, redact: bool = True) -> dict:
        d = asdict(self)
        d["steps"] = [s.to_dict() for s in self.steps]
        if redact:
            for c in d["combinations"]:
                _redact_combination(c)
        return d

    def to_json(self, redact: bool = True) -> str:
        return json.dumps(self.to_dict(redact), indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_dict(cls, d: dict) -> Plan:
        version = d.get("plan_version")
        if version not in READABLE_PLAN_VERSIONS:
            raise PlanError(f"plan_version {version!r} is not one this benchc reads "
                             f"(it reads {', '.join(map(str, READABLE_PLAN_VERSIONS))})")
        combos = []
        for c in d["combinations"]:
            w = c["workload"]
            if version == 1:
                w = {**w, "prompts": "shared"}  # what version 1 did
            smoke = c["smoke"]
            combos.append(Combination(
                index=c["index"], matrix=c["matrix"], target=Target(**c["target"]),
                server=Server(**c["server"]) if c["server"] else None,
                smoke=Smoke(smoke["continue_on_fail"], [SmokeCheck(**x) for x in smoke["checks"]])
                if smoke else None,
                workload=Workload(**{**w, "sampling": Sampling(**w["sampling"])}),
            ))
        return cls(**{**d, "combinations": combos, "steps": [Step.from_dict(s) for s in d["steps"]],
                      "slo": [SloItem(**s) for s in d["slo"]]})

    def aimed_at(self, base_url: str) -> Plan:
        """This plan with every combination's target at `base_url` (`run`/`plan --base-url`):
        the simulator a spec names is replaced, not kept beside the server, so the result, its
        identity, report, compare and exports name the server that was measured. The plan hash
        follows (a simulator's settings are part of it; the URL never is)."""
        combos = [replace(c, target=replace(c.target, base_url=base_url, sim=None, twin=None))
                  for c in self.combinations]
        return replace(self, combinations=combos).with_hashes()

    # ------------------------------------------------------------------ hashing

    def with_hashes(self) -> Plan:
        return replace(self, workload_hash=_sha(self._workload_material()),
                       plan_hash=_sha(self._plan_material()))

    def _workload_material(self) -> list:
        """What makes two runs' requests alike: dataset and sampling, not how many were sent
        (prompt i of a dataset is the same whatever num_prompts is)."""
        out = []
        for c in self.combinations:
            w = c.workload
            material = {"dataset": w.dataset, "prompts": w.prompts, "sampling": asdict(w.sampling),
                        "params": {k: v for k, v in w.params.items()
                                   if k != "num_prompts" and (k != "seed" or w.seed_pinned)},
                        "tokenizer_sha256": w.tokenizer_sha256}
            if w.trace is not None:  # the trace's content, not only its path
                material["trace_sha256"] = w.trace["sha256"]
            material.update(_agentic(w))
            out.append(material)
        return out

    def _plan_material(self) -> dict:
        """Everything that defines the work; not names, paths, URLs, credentials or output, nor
        a seed drawn for the run (nor the prompt digests that follow from it)."""
        pinned = {c.index: c.workload.seed_pinned for c in self.combinations}
        return {
            "plan_version": self.plan_version,
            "combinations": [
                {"matrix": c.matrix, "api": c.target.api, "model": c.target.model,
                 "sim": self._sim_material(c.target.sim), "workload": _workload_dict(c.workload),
                 "reset_cache": c.server.reset_cache if c.server else "never"}
                for c in self.combinations
            ],
            # fields added since with their default left out: older plans keep their hash
            "steps": [{k: v for k, v in s.flat().items()
                       if k != "id" and (k != "prompts_sha256" or pinned[s.combination])
                       and not (k in ("cancel", "graceful_stop_s") and v is None)}
                      for s in self.steps if s.kind in ("warmup", "load", "search")],
            "saturation": self.saturation,
        }

    def _sim_material(self, sim: dict | None) -> dict | None:
        """The simulator's settings with its file paths (tokenizer, a twin preset) relative to
        the spec's folder (the compiler made them absolute for the subprocess): one spec, one
        hash in any checkout."""
        if not sim or self.spec["path"].startswith("<"):
            return sim
        spec_dir = os.path.dirname(os.path.abspath(self.spec["path"]))
        return {**sim, **{k: os.path.relpath(sim[k], spec_dir) for k in sim_file_keys(sim)}}

    def load_steps(self) -> list[Step]:
        return [s for s in self.steps if s.kind == "load"]

    def search_steps(self) -> list[Step]:
        return [s for s in self.steps if s.kind == "search"]


_AGENTIC = ("tools", "images", "agent")


def _agentic(w: Workload) -> dict:
    """The workload's tools, images and agent loop, where it has them."""
    return {k: getattr(w, k) for k in _AGENTIC if getattr(w, k) is not None}


def _workload_dict(w: Workload) -> dict:
    """A workload as the plan hash sees it: asdict(w) without the optional additions it does not
    use (tools, images, an agent loop when None; batch at 1), so a plan that has none of them
    hashes as it did before they existed; a drawn seed and what it decides (the prompts'
    digest) left out, so runs of one spec are runs of one plan whatever seed each drew."""
    d = {k: v for k, v in asdict(w).items()
         if not (k in _AGENTIC and v is None) and not (k == "batch" and v == 1)}
    if not w.seed_pinned:
        d["params"] = {k: v for k, v in d["params"].items() if k != "seed"}
        d.pop("prompts_sha256")
    d.pop("seed_pinned")  # a plan written before the field hashes as it did
    return d


def _sha(material: Any) -> str:
    canonical = json.dumps(material, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _redact_combination(c: dict) -> None:
    t = c["target"]
    if t["api_key"] is not None:
        t["api_key"] = REDACTED
    t["headers"] = redact_headers(t["headers"])
    if t["base_url"]:
        t["base_url"] = redact_url(t["base_url"])
    s = c["server"]
    if s:
        s["env"] = redact_env(s["env"])
        if s["command"]:
            s["command"] = redact_argv(s["command"])



__all__ = ["Plan", "Step", "flat_step", "Combination", "Target", "Server", "Smoke", "SmokeCheck", "Sampling",
           "Workload", "SloItem", "PLAN_VERSION"]
