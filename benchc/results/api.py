"""Reading results from Python: `benchc.results.load(path)` -> Result, with typed points.

    import benchc.results
    r = benchc.results.load("results/demo.json")
    for p in r.points:
        print(p.id, p.output_tok_s, p.ttft.p99_ms, p.ttft.histogram().get_value_at_percentile(99.99))
    df = r.to_dataframe()          # pandas (pip install 'benchc[pandas]'): the CSV export's columns

Latencies are microseconds as in the document (`*_ms` properties divide by 1000). Histograms
come back as `hdrh.histogram.HdrHistogram` objects (the `hdrhistogram` package), decoded from
the stored "HISTFAAA..." encoding, so any HdrHistogram tool can read, query and merge them.
Every object keeps the document's own dict under `.raw` for fields not given a name here.

The same types write the document (pyperf's model: one class reads and writes its JSON). The
runner and `benchc merge` assemble a point as a `Point` (`Point.from_dict` of the measurement's
figures), each further block added by `with_blocks` (the cache verdict, the SLO verdict, the
trust checks, the energy: each reads the typed point), and the document holds `to_dict()`, the
point's blocks in the order they were added: the same bytes as the dict assembled before.
"""

from __future__ import annotations

import copy
import datetime
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from benchc.errors import UsageError
from benchc.plan.model import flat_step
from benchc.results.clock import parse_created, point_span
from benchc.results.document import is_closed_loop, metric_value
from benchc.results.table import CSV_COLUMNS, point_row

# the load part at the end of a point's id (plan/compiler.py, plan/search.py probe_step)
_LOAD_IN_ID = re.compile(r"(?:^|/)((?:c|users|speedup|rate)=[^/]*(?:/s)?|probe\d+:.*)$")

if TYPE_CHECKING:
    import pandas
    from hdrh.histogram import HdrHistogram


@dataclass(frozen=True)
class Latency:
    """One latency summary of a point (`ttft`, `itl`, `tpot`, `e2e`, ...), in microseconds."""

    name: str
    count: int
    out_of_range: int
    mean: float | None
    stdev: float | None
    min: float | None
    max: float | None
    percentiles: Mapping[float, float]  # {50: us, 90: us, 95: us, 99: us, 99.9: us} as stored
    hdr: str | None  # the stored encoding, "HISTFAAA..."

    @classmethod
    def from_block(cls, name: str, block: dict) -> Latency:
        pcts = {float(k[1:]): v for k, v in block.items()
                if k.startswith("p") and k[1:].replace(".", "").isdigit()}
        return cls(name=name, count=block["count"], out_of_range=block["out_of_range"],
                   mean=block.get("mean"), stdev=block.get("stdev"), min=block.get("min"),
                   max=block.get("max"), percentiles=MappingProxyType(pcts), hdr=block.get("hdr"))

    @property
    def p50_ms(self) -> float | None:
        return self._ms(50)

    @property
    def p99_ms(self) -> float | None:
        return self._ms(99)

    @property
    def mean_ms(self) -> float | None:
        return self.mean / 1000 if self.mean is not None else None

    def _ms(self, p: float) -> float | None:
        v = self.percentiles.get(float(p))
        return v / 1000 if v is not None else None

    def histogram(self) -> HdrHistogram | None:
        """The recorded histogram (values in microseconds) as an `hdrh` HdrHistogram, or None
        when nothing was recorded."""
        if not self.hdr:
            return None
        from hdrh.histogram import HdrHistogram

        return HdrHistogram.decode(self.hdr)


@dataclass(frozen=True)
class Energy:
    """A point's GPU energy over its window (`steady` span, else `whole`): docs/decide.md."""

    source: str  # simulator | nvml | nvidia-smi
    window: str
    window_s: float
    server_gpus: tuple[int, ...] | None  # None: which GPUs are the server's was not known
    server_power_w: float  # the server's GPUs' mean draw, summed
    server_joules: float
    machine_power_w: float  # every GPU of the machine
    machine_joules: float
    output_tokens: int
    # how output_tokens were counted: "decoded" (each request's pro-rated by the share of its
    # decode span inside the window), or "completed" (requests completed inside it: documents
    # written before the pro-rating, whose per-token figure is high with few requests per slot)
    output_tokens_counted: str
    joules_per_output_token: float | None
    joules_per_request: float | None
    gpus: tuple[Mapping[str, Any], ...]  # per GPU: index, name, server, samples, power_w, joules

    @classmethod
    def from_block(cls, b: Mapping[str, Any] | None) -> Energy | None:
        if not b or not b.get("available"):
            return None
        server = b["server"]
        return cls(source=b["source"], window=b["window"], window_s=b["window_s"],
                   server_gpus=tuple(server["gpus"]) if server["gpus"] is not None else None,
                   server_power_w=server["power_w"], server_joules=server["joules"],
                   machine_power_w=b["machine"]["power_w"], machine_joules=b["machine"]["joules"],
                   output_tokens=b["output_tokens"],
                   output_tokens_counted=b.get("output_tokens_counted", "completed"),
                   joules_per_output_token=b.get("joules_per_output_token"),
                   joules_per_request=b.get("joules_per_request"),
                   gpus=tuple(MappingProxyType(g) for g in b["gpus"]))


@dataclass(frozen=True)
class Telemetry:
    """What was sampled around a point besides the requests (run/telemetry.py's summary)."""

    # the server's /metrics over the point, where it answered: gauges as {"mean", "max"}
    # (running, waiting, kv_cache_usage), prefix_cache_hit_rate, counter deltas
    server: Mapping[str, Any] | None
    host_busy_fraction: float | None  # the client machine's CPU, busy fraction, where sampled
    gpus: tuple[Mapping[str, Any], ...]  # per GPU nvidia-smi read: utilization_pct, memory_used_mib
    gpu_power_w: float | None  # the GPUs' power summed, mean over the point (with gpus)

    @classmethod
    def from_block(cls, b: Mapping[str, Any] | None) -> Telemetry:
        b = b or {}
        server, host, gpu = b.get("server") or {}, b.get("host") or {}, b.get("gpu") or {}
        gpus = tuple(gpu.get("gpus") or ()) if gpu.get("available") else ()
        return cls(server=server if server.get("available") else None,
                   host_busy_fraction=host["busy_fraction"] if host.get("available") else None,
                   gpus=gpus, gpu_power_w=gpu.get("power_w_total_mean") if gpus else None)


@dataclass(frozen=True)
class Point:
    """One load point: its load, counts, tokens, throughputs (per second) and latencies."""

    id: str
    combination: int
    matrix: Mapping[str, Any]
    concurrency: int | None
    rate_rps: float | None
    closed_loop: bool
    complete: bool
    duration_s: float
    sent: int
    completed: int
    failed: int
    errors: Mapping[str, int]
    error_rate: float
    input_tokens: int
    output_tokens: int
    output_method: str
    output_tok_s: float
    total_tok_s: float
    request_s: float
    goodput_s: float
    steady_output_tok_s: float | None
    client_limited: bool
    latency: Mapping[str, Latency]  # by name without the unit: "ttft", "itl", "tpot", "e2e", ...
    raw: Mapping[str, Any] = field(repr=False)
    gpus: int | None = None  # the GPUs its combination's server used (the result's combinations[].gpus)
    # goodput_s per SLO item a single request meets or misses, by the item's text (empty in
    # results before it was counted per item: they give the set's goodput_s only)
    goodput_per_slo: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, p: dict, gpus: int | None = None) -> Point:
        t, c = p["throughput"], p["counts"]
        latency = {k.removesuffix("_us"): Latency.from_block(k.removesuffix("_us"), v)
                   for k, v in p["latency"].items()}
        return cls(id=p["id"], combination=p["combination"],
                   matrix=MappingProxyType(dict(p.get("matrix", {}))),
                   concurrency=p["params"].get("concurrency"), rate_rps=p["params"].get("rate_rps"),
                   closed_loop=is_closed_loop(p), complete=p["complete"],
                   duration_s=p["window"]["duration_s"],
                   sent=c["sent"], completed=c["completed"], failed=c["failed"],
                   errors=MappingProxyType(dict(c["errors"])), error_rate=p["error_rate"],
                   input_tokens=p["tokens"]["input"], output_tokens=p["tokens"]["output"],
                   output_method=p["tokens"]["output_method"], output_tok_s=t["output_tok_s"],
                   total_tok_s=t["total_tok_s"], request_s=t["request_s"], goodput_s=t["goodput_s"],
                   steady_output_tok_s=t.get("steady_output_tok_s"),
                   client_limited=p["client"]["client_limited"], latency=MappingProxyType(latency),
                   raw=MappingProxyType(p), gpus=gpus,
                   goodput_per_slo=MappingProxyType({k: v["goodput_s"]
                                                     for k, v in (p.get("goodput_per_slo") or {}).items()}))

    def to_dict(self) -> dict:
        """The point as the result document holds it (a copy: the point stays as it is)."""
        return copy.deepcopy(dict(self.raw))

    def with_blocks(self, **blocks: Any) -> Point:
        """This point with `blocks` added to its document (after the ones it has) or put in place
        of the ones of the same name (where those were): the write side's one way to grow a point."""
        return Point.from_dict({**self.raw, **blocks}, self.gpus)

    def value(self, key: str) -> float | None:
        """A metric's value (`output_tok_s`, `error_rate`, `ttft.p99` in microseconds,
        `cached_fraction` ...) where its declaration says a point holds it; None if absent."""
        return metric_value(dict(self.raw), key)

    @property
    def start_ns(self) -> int | None:
        """The window's start on the run's monotonic clock (its first send); None without one."""
        return self.raw["window"].get("start_ns")

    @property
    def end_ns(self) -> int | None:
        """The window's end on the run's monotonic clock (its last request's end); None without one."""
        return self.raw["window"].get("end_ns")

    @property
    def client_check(self) -> Mapping[str, Any]:
        """The client's self-check (run/loadgen.py, run/effects.py): client_limited, reasons,
        effects (what a late client moved), and per shard of a distributed point."""
        return MappingProxyType(self.raw["client"])

    @property
    def output_lengths(self) -> Mapping[str, Any]:
        """The pinned output lengths checked (tokens.osl: requests_checked, mismatched); empty
        where no request pinned its length."""
        return MappingProxyType(self.raw["tokens"].get("osl") or {})

    @property
    def cache(self) -> Mapping[str, Any]:
        """The prefix-cache block (metrics/cache.py: counters, verdict, reset); empty in a point
        without one."""
        return MappingProxyType(self.raw.get("cache") or {})

    @property
    def stream_counts(self) -> Mapping[str, Any]:
        """What the answers held besides text (metrics/streams.py: tool-call answers, unknown
        events, short answers and their unanswered inputs); empty in a point without them."""
        return MappingProxyType(self.raw.get("stream") or {})

    @property
    def agent_replay(self) -> Mapping[str, Any] | None:
        """A coding-agent replay's verdict against its trace and per-session figures
        (run/agent_replay.py); None for any other point."""
        block = self.raw.get("agent_replay")
        return MappingProxyType(block) if block else None

    @property
    def twin(self) -> Mapping[str, Any] | None:
        """A point run against a twin: its fitted and run batch sizes (run/point.py twin_block)."""
        twin = self.raw.get("twin")
        return MappingProxyType(twin) if twin else None

    @property
    def energy(self) -> Energy | None:
        """The GPUs' energy over the point, where power was sampled (None otherwise)."""
        return Energy.from_block(self.raw.get("energy"))

    @property
    def telemetry(self) -> Telemetry:
        """The server's /metrics, the client host and the GPUs, sampled around the point."""
        return Telemetry.from_block(self.raw.get("telemetry"))

    @property
    def users(self) -> int | None:
        """A user-centric sessions point's users (each at its own pace); None otherwise."""
        return self.raw["params"].get("users")

    @property
    def speedup(self) -> float | None:
        """A replayed trace's speedup (its times divided by this); None otherwise."""
        return self.raw["params"].get("speedup")

    @property
    def trusted(self) -> bool:
        """Its figures can be trusted (its `trust`: not client-limited, ...); results before
        benchc judged trust say nothing against them."""
        return bool((self.raw.get("trust") or {}).get("trusted", True))

    @property
    def turns(self) -> tuple[Mapping[str, Any], ...]:
        """A sessions point's figures per turn (sessions.by_turn: turn, latency, cache), in turn
        order; empty for any other point."""
        return tuple((self.raw.get("sessions") or {}).get("by_turn") or ())

    @property
    def arrival(self) -> str | None:
        """An open-loop point's arrival process (poisson, gamma, constant, trace); None in a closed loop."""
        return self.raw["params"].get("arrival")

    @property
    def max_concurrency(self) -> int | None:
        """An open-loop point's cap on requests in flight, where its params state one."""
        return self.raw["params"].get("max_concurrency")

    @property
    def repeat(self) -> int | None:
        """Which run of a repeated point (load.repeats) this is, 1..N; None when not repeated."""
        r = self.raw["params"].get("repeat")
        return int(r) if r is not None else None

    @property
    def probe(self) -> bool:
        """A probe of a capacity search rather than a sweep point."""
        return self.raw["params"].get("probe") is not None

    @property
    def load(self) -> str:
        """The point's load as its id names it, without the matrix prefix or the run: `c=4`,
        `rate=2/s` (plan/compiler.py writes the ids: `LABEL/LOAD#RUN`; a rate's `/s` and a
        matrix value's `/` are no separators)."""
        base = self.id.split("#", 1)[0]
        m = _LOAD_IN_ID.search(base)
        return m.group(1) if m else base.rsplit("/", 1)[-1]

    @property
    def ttft(self) -> Latency:
        return self.latency["ttft"]

    @property
    def itl(self) -> Latency:
        return self.latency["itl"]

    @property
    def tpot(self) -> Latency:
        return self.latency["tpot"]

    @property
    def e2e(self) -> Latency:
        return self.latency["e2e"]

    def row(self) -> dict:
        """This point as a row of the CSV export (same columns, Python values)."""
        return point_row(dict(self.raw))


@dataclass(frozen=True)
class Probe:
    """One probe of a capacity search: its load, and each SLO item's value there (None where the
    probe measured none), in the search's SLO order."""

    load: float
    values: tuple[float | None, ...]
    untrusted: bool  # its verdict: figures not to be trusted, so it decided nothing


@dataclass(frozen=True)
class Search:
    """One capacity search (load.search) of one combination: its answer and every probe."""

    combination: int
    matrix: Mapping[str, Any]
    over: str  # concurrency | rate
    slo: tuple[str, ...]  # its SLO items as written
    thresholds: tuple[float, ...]  # each item's bound, in the unit the probes' values are in
    status: str
    answer: float | None
    goodput_s: float | None  # at the answer
    bracket: tuple[float | None, float | None]  # (lo, hi) when it ended
    binding: tuple[str, ...]  # the SLO items that bound it
    probes: tuple[Probe, ...]

    @classmethod
    def from_block(cls, b: Mapping[str, Any], thresholds: tuple[float, ...]) -> Search:
        return cls(combination=b["combination"], matrix=MappingProxyType(dict(b.get("matrix", {}))),
                   over=b["over"], slo=tuple(b["slo"]), thresholds=thresholds, status=b["status"],
                   answer=b["answer"], goodput_s=b.get("goodput_s"),
                   bracket=(b.get("bracket", {}).get("lo"), b.get("bracket", {}).get("hi")),
                   binding=tuple(b.get("binding", ())),
                   probes=tuple(Probe(p["load"], tuple(c["value"] for c in p["checks"]),
                                      p["verdict"] == "untrusted") for p in b["probes"]))


@dataclass(frozen=True)
class Result:
    """A result document: what ran, where, and its points in order."""

    path: str
    schema_version: int
    benchc_version: str
    core: str
    created: datetime.datetime | None
    complete: bool
    name: str
    plan_hash: str
    workload_hash: str | None
    points: tuple[Point, ...]
    raw: Mapping[str, Any] = field(repr=False)
    # per combination index: {"count", "source", "indices"} as the run stated them
    gpus: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    # the SLO texts goodput counted requests against (the plan's slo), empty without SLOs
    slo: tuple[str, ...] = ()
    # the spec's price of GPU time, {"gpu_hour", "currency"}, or None
    cost: Mapping[str, Any] | None = None

    @property
    def created_text(self) -> str | None:
        """`created` as the document wrote it (ISO 8601), for identities made from it."""
        return self.raw.get("created")

    @property
    def environment(self) -> Mapping[str, Any]:
        """Where it ran: host, os, python, cpu_count, ... (the result's environment)."""
        return self.raw.get("environment") or {}

    @property
    def workers(self) -> int | None:
        """The Ray workers of a distributed run (backend.workers); None for a local run."""
        return (self.raw.get("backend") or {}).get("workers")

    def target(self, combination: int) -> Mapping[str, Any]:
        """The run's record of combination `combination`'s target: model, models (what /v1/models
        answered), simulated, server; empty when it has none."""
        return next((t for t in self.raw.get("target") or [] if t.get("combination") == combination), {})

    @property
    def description(self) -> str:
        """The spec's description (plan.description), "" without one."""
        return self.raw["plan"].get("description") or ""

    @property
    def slo_defined(self) -> bool:
        """The spec had SLOs (the result's slo.defined): goodput counted requests against them."""
        return bool((self.raw.get("slo") or {}).get("defined"))

    def combination(self, index: int) -> Mapping[str, Any]:
        """The plan's combination `index` (its target, server and workload as compiled); empty
        when the plan has none of that index."""
        for c in self.raw["plan"]["combinations"]:
            if c["index"] == index:
                return c
        return {}

    def step(self, point: Point) -> Mapping[str, Any]:
        """The plan's load step that `point` ran (its burstiness, max_concurrency, ... as plan
        versions 1-3 held them: plan/model.flat_step); empty
        when the plan has none of its id (a probe made at run time)."""
        for s in self.raw["plan"].get("steps", []):
            if s.get("kind") == "load" and s["combination"] == point.combination and s["id"] == point.id:
                return flat_step(s)  # a plan of any version: its load's fields flat on it
        return {}

    def span(self, point: Point) -> tuple[datetime.datetime, datetime.datetime] | None:
        """The point's window on the wall clock (results/clock.py), None where it cannot be placed."""
        return point_span(dict(self.raw), dict(point.raw))

    @property
    def searches(self) -> tuple[Search, ...]:
        """The result's capacity searches, each with its SLO items' bounds from the plan's search step."""
        bounds: dict[int, tuple[float, ...]] = {}
        for st in self.raw["plan"]["steps"]:
            if st["kind"] == "search":
                bounds.setdefault(st["combination"], tuple(item["value"] for item in st["search"]["slo"]))
        return tuple(Search.from_block(s, bounds[s["combination"]]) for s in self.raw.get("search") or [])

    def to_dict(self) -> dict:
        """The document as written: its points from their own `to_dict`."""
        return {k: [p.to_dict() for p in self.points] if k == "points" else copy.deepcopy(v)
                for k, v in self.raw.items()}

    def point(self, point_id: str) -> Point:
        for p in self.points:
            if p.id == point_id:
                return p
        raise KeyError(f"no point {point_id!r} (points: {', '.join(p.id for p in self.points)})")

    def to_dataframe(self) -> pandas.DataFrame:
        """One row per point with the CSV export's columns (needs pandas: `benchc[pandas]`)."""
        try:
            import pandas
        except ImportError as e:
            raise UsageError("to_dataframe() needs pandas: pip install 'benchc[pandas]'") from e
        return pandas.DataFrame([p.row() for p in self.points], columns=CSV_COLUMNS)


def load(path: str) -> Result:
    """Read and validate a result document (any version this benchc reads), or another tool's
    result read as one (read_document)."""
    return from_document(read_document(path), path)


def read_document(path: str) -> dict:
    """A benchc result document as document.read gives it, or another tool's results (vLLM
    `bench serve`, GuideLLM, AIPerf, inference-perf, llm-d Benchmark Reports) in its shape,
    recognised by content and marked as that tool's measurement (`peer`: results/peers/)."""
    from benchc.results.peers import read_any

    return read_any(path)


def peer_of(doc: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A document read from another tool's file: its `peer` block (tool, version, definitions,
    unmapped figures, where its histograms came from); None for benchc's own."""
    peer = doc.get("peer")
    return peer if isinstance(peer, Mapping) else None


def from_document(doc: dict, path: str = "") -> Result:
    """Typed objects over a document already read and validated (or one the runner is writing)."""
    gpus = {c["combination"]: MappingProxyType(c["gpus"]) for c in doc.get("combinations") or []
            if isinstance(c.get("gpus"), dict)}

    def count(p: dict) -> int | None:
        g = gpus.get(p["combination"])
        return g["count"] if g is not None else None

    cost = doc["plan"].get("cost")
    return Result(path=path, schema_version=doc["schema_version"], benchc_version=doc["benchc_version"],
                  core=doc["core"], created=parse_created(doc), complete=doc["complete"],
                  name=doc["plan"].get("name", ""), plan_hash=doc["plan_hash"],
                  workload_hash=doc.get("workload_hash"),
                  points=tuple(Point.from_dict(p, count(p)) for p in doc["points"]),
                  raw=MappingProxyType(doc),
                  gpus=MappingProxyType(gpus), slo=tuple(s["text"] for s in doc["plan"].get("slo") or []),
                  cost=MappingProxyType(cost) if isinstance(cost, dict) else None)
