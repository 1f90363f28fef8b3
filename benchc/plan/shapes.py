"""Load shapes: what load a step offers, one frozen type per shape (k6's executors are the
model: each its own options and one driver, benchc/run/drivers.py).

A shape holds its own fields and what ends it (`requests`, `duration_s`, `sessions`: the
`Extent` every shape has), and says the rest itself: its label for the console and the
result (`c=4`, `rate=5/s`), its `params()` for the result, the units it keeps in flight,
and how it divides across workers (`divide`). Whether a step's unit is a single prompt or a
session is the workload's, not the shape's: every shape drives either.

Plan JSON (version 4): a step's `load` is `{KEY: {fields}}`, KEY one of SHAPES' keys.
`from_flat` reads the flat step fields of plan versions 1-3, `flat()` writes them back (the
plan's hash and the readers of results written before version 4 see those).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any, ClassVar

from benchc.errors import PlanError
from benchc.plan.trace import speedup_for, trace_rate
from benchc.units import parse_duration, parse_rate

# A step's load fields as plan versions 1-3 held them, flat on the step, with their defaults
# (in that order: the plan's hash is taken over the flat form)
FLAT_FIELDS: dict[str, Any] = {
    "concurrency": None, "rate_rps": None, "arrival": None, "burstiness": None, "max_concurrency": None,
    "requests": None, "duration_s": None, "ramp_up_s": 0.0, "cooldown_s": 0.0,
    "speedup": None, "sessions": None, "users": None, "turn_interval_s": None,
}
# the result's params: these five always, then a shape's own (after the step's repeat, probe)
PARAM_HEAD = ("concurrency", "rate_rps", "arrival", "requests", "duration_s")


@dataclass(frozen=True)
class Shard:
    """Worker `index` of `count` in one step, and which of the step's request indices it sends
    (run/shards.py tells the arithmetic)."""

    index: int = 0
    count: int = 1
    offset: int = 0  # its first lane in each round
    width: int = 1  # its lanes per round
    period: int = 1  # the lanes of a round, all shards'

    def request_index(self, j: int) -> int:
        """The step's request index of this shard's j-th request (j from 0, in issue order)."""
        return (j // self.width) * self.period + self.offset + j % self.width

    def share(self, total: int | None) -> int | None:
        """How many of a step's `total` requests are this shard's (None: bound by time only)."""
        if total is None:
            return None
        rounds, rest = divmod(total, self.period)
        return rounds * self.width + min(max(rest - self.offset, 0), self.width)

    def reach(self, issued: int) -> int:
        """1 + the highest step index among this shard's first `issued` requests: every
        index the step sent is below the largest reach of its shards."""
        return self.request_index(issued - 1) + 1 if issued else 0

    @property
    def schedule_slice(self) -> tuple[int, int]:
        """(index, count) for an open loop's schedule: this shard's arrivals are index::count."""
        return self.index, self.count


WHOLE = Shard()  # one shard, every request


def even(total: int, n: int) -> list[int]:
    """`total` over n parts, remainders to the first ones."""
    return [total // n + (1 if i < total % n else 0) for i in range(n)]


def slots(concurrency: int, units: int | None, workers: int) -> list[tuple[int, Shard]]:
    """`concurrency` slots over at most `workers` workers, each with its Shard of `units` (a
    closed loop's requests, a replay's sessions; None: unbounded): more slots than units are
    never all used, so the lanes are the slots that are, and a worker gets its share of both."""
    lanes = min(concurrency, units) if units else concurrency
    n = min(workers, lanes)
    out, offset = [], 0
    for k, (c, width) in enumerate(zip(even(concurrency, n), even(lanes, n), strict=True)):
        out.append((c, Shard(k, n, offset, width, lanes)))
        offset += width
    return out


@dataclass(frozen=True, kw_only=True)
class Extent:
    """What every shape has: what ends it, and the pause after it. `requests` counts requests
    (a sessions workload's turns), `sessions` the sessions it starts at most; `ramp_up_s`
    spreads a closed loop's first units (kept on every shape as the spec gave it)."""

    requests: int | None = None
    duration_s: float | None = None
    sessions: int | None = None
    ramp_up_s: float = 0.0
    cooldown_s: float = 0.0
    # load.graceful_stop (k6's name): past duration_s, the requests still in flight get this long,
    # then are cancelled and counted as cancelled (0: a hard cap at the duration); None: they
    # finish, however long they take. Written only when set: plans without it keep their bytes.
    graceful_stop_s: float | None = None

    key: ClassVar[str]
    open_loop: ClassVar[bool] = True  # its units go on a schedule, not as others end
    # its driver in benchc/run/, "module:class": named, not imported (plan/ may not import
    # run/), so a new shape is its type and its driver, and run/loadgen.py never changes
    driver: ClassVar[str]

    @classmethod
    def from_load(cls, load: dict, bounds: dict, defaults: dict) -> list[Extent]:
        """The points of a spec's `load` (validated) when their shape is this type's, else
        []: the compiler asks each type in turn (`bounds`: the Extent's fields the spec gave;
        `defaults`: plan/compiler.DEFAULTS)."""
        return []

    @property
    def label(self) -> str:
        raise NotImplementedError

    @property
    def inflight_target(self) -> int:
        """The units (requests, or sessions) it keeps in flight; 0: no bound (an open loop
        without a cap)."""
        return 0

    @property
    def first_inflight(self) -> int:
        """The units its first load keeps in flight (what a warm-up before it holds)."""
        return self.inflight_target

    @property
    def cap(self) -> int | None:
        """The most units in flight at once, where bounded."""
        return self.inflight_target or None

    @property
    def mean_rate_rps(self) -> float | None:
        """The units it sends a second on average, where its schedule says (an open loop)."""
        return None

    def params(self) -> dict:
        """The result's load params (run/point.py): PARAM_HEAD, then its own."""
        out: dict[str, Any] = {k: None for k in PARAM_HEAD}
        out.update(requests=self.requests, duration_s=self.duration_s)
        return out

    def _tail(self, out: dict) -> dict:
        if self.sessions is not None:
            out["sessions"] = self.sessions  # a sessions workload: the sessions it starts
        return out

    def flat(self) -> dict:
        """Its fields as plan versions 1-3 held them, flat on the step."""
        own = {f.name: getattr(self, f.name) for f in fields(self)}
        flat = {k: own.get(k, v) for k, v in FLAT_FIELDS.items()}
        if self.graceful_stop_s is not None:  # after the flat fields, as the step held it
            flat["graceful_stop_s"] = self.graceful_stop_s
        return flat

    def to_dict(self) -> dict:
        own = asdict(self)
        if own["graceful_stop_s"] is None:
            del own["graceful_stop_s"]
        return {self.key: own}

    def divide(self, workers: int) -> list[tuple[Extent, Shard]]:
        """Its parts on at most `workers` workers (at least one): an open loop's every shard
        keeps the plan's rate and request count and takes every n-th arrival of the one
        schedule; only a concurrency cap is split."""
        cap = self.cap
        n = min([workers] + [x for x in (cap, self.requests) if x])
        caps = even(cap, n) if cap else [None] * n
        return [(self._capped(m), Shard(k, n, k, 1, n)) for k, m in enumerate(caps)]

    def _capped(self, cap: int | None) -> Extent:
        return self

    def replayed(self, trace: dict) -> Extent:
        """The shape of a point of a trace dataset (Workload.trace: its slice's statistics): it
        sends the slice's requests (or its sessions, each with all its turns) once; a closed
        loop as they end, an open loop on the trace's own times (OpenLoop, Replay)."""
        if "sessions" in trace:
            return replace(self, requests=None, duration_s=None, sessions=trace["sessions"])
        return replace(self, requests=trace["requests"], duration_s=None)

    def bounds(self) -> dict:
        """Its Extent's fields (what a shape made from it keeps)."""
        return {f.name: getattr(self, f.name) for f in fields(Extent)}


@dataclass(frozen=True, kw_only=True)
class ClosedLoop(Extent):
    """`concurrency` units in flight, a new one as one ends (warm-ups too); the first ones
    spread over ramp_up_s."""

    concurrency: int
    key: ClassVar[str] = "closed_loop"
    open_loop: ClassVar[bool] = False
    driver: ClassVar[str] = "benchc.run.closed_loop:ClosedLoopDriver"

    @classmethod
    def from_load(cls, load: dict, bounds: dict, defaults: dict) -> list[Extent]:
        return [cls(concurrency=c, **bounds) for c in load.get("sweep", {}).get("concurrency", [])]

    @property
    def label(self) -> str:
        return f"c={self.concurrency}"

    @property
    def inflight_target(self) -> int:
        return self.concurrency

    def params(self) -> dict:
        return self._tail({**super().params(), "concurrency": self.concurrency})

    def divide(self, workers: int) -> list[tuple[Extent, Shard]]:
        """Its slots over the workers: more slots than requests are never all used, so the
        lanes are the slots that are, and a worker gets its share of both. With `sessions`
        (a sessions workload's) the unit is a whole session: the slots deal sessions, each
        worker its share of them (a turn count, `requests`, does not split by session: the
        Ray runner refuses it)."""
        if self.sessions is not None:
            return [(replace(self, concurrency=c, sessions=shard.share(self.sessions)), shard)
                    for c, shard in slots(self.concurrency, self.sessions, workers)]
        return [(replace(self, concurrency=c, requests=shard.share(self.requests)), shard)
                for c, shard in slots(self.concurrency, self.requests, workers)]


class _RateCapped:
    """What the shapes on a schedule with a cap have alike (OpenLoop, Replay): a mean rate,
    and at most `max_concurrency` units in flight, the one thing a split divides."""

    rate_rps: float | None
    max_concurrency: int | None

    @property
    def inflight_target(self) -> int:
        return self.max_concurrency or 0

    @property
    def mean_rate_rps(self) -> float | None:
        return self.rate_rps

    def _capped(self, cap: int | None) -> Extent:
        shape: Any = self  # a dataclass Extent, as each class that takes this in is
        return replace(shape, max_concurrency=cap)


@dataclass(frozen=True, kw_only=True)
class OpenLoop(_RateCapped, Extent):
    """Units at `rate_rps` on a seeded arrival process (poisson, gamma of `burstiness`,
    constant), at most `max_concurrency` in flight."""

    rate_rps: float
    arrival: str = "poisson"
    burstiness: float | None = None  # gamma's shape; 1.0 is Poisson
    max_concurrency: int | None = None
    key: ClassVar[str] = "open_loop"
    driver: ClassVar[str] = "benchc.run.open_loop:OpenLoopDriver"

    @classmethod
    def from_load(cls, load: dict, bounds: dict, defaults: dict) -> list[Extent]:
        sweep = load.get("sweep", {})
        arrival = sweep.get("arrival", defaults["load.sweep.arrival"])
        burst = sweep.get("burstiness", defaults["load.sweep.burstiness"]) if arrival == "gamma" else None
        return [cls(rate_rps=parse_rate(r), arrival=arrival, burstiness=burst,
                    max_concurrency=sweep.get("max_concurrency"), **bounds) for r in sweep.get("rate", [])]

    @property
    def label(self) -> str:
        return f"rate={self.rate_rps:g}/s"

    def params(self) -> dict:
        return self._tail({**super().params(), "rate_rps": self.rate_rps, "arrival": self.arrival})

    def replayed(self, trace: dict) -> Extent:
        """A rate over a trace: the trace's own times, over the speedup that gives the rate."""
        base = super().replayed(trace)
        return Replay(speedup=round(speedup_for(trace, self.rate_rps), 9), rate_rps=self.rate_rps,
                      max_concurrency=self.max_concurrency, **base.bounds())


@dataclass(frozen=True, kw_only=True)
class Replay(_RateCapped, Extent):
    """A trace's requests (or sessions) on the trace's own times divided by `speedup`;
    `rate_rps` the mean rate that gives. Splits as an open loop: by its rows."""

    speedup: float
    rate_rps: float | None = None
    max_concurrency: int | None = None
    key: ClassVar[str] = "replay"
    driver: ClassVar[str] = "benchc.run.open_loop:ReplayDriver"
    arrival: ClassVar[str] = "trace"  # its arrivals are the trace's

    @classmethod
    def from_load(cls, load: dict, bounds: dict, defaults: dict) -> list[Extent]:
        """A trace on its own times (the compiler's _replay fills in the rate)."""
        sweep = load.get("sweep", {})
        return [cls(speedup=float(x), max_concurrency=sweep.get("max_concurrency"), **bounds)
                for x in sweep.get("speedup", [])]

    @property
    def label(self) -> str:
        return f"speedup={self.speedup:g}"

    def params(self) -> dict:
        return self._tail({**super().params(), "rate_rps": self.rate_rps, "arrival": self.arrival,
                           "speedup": self.speedup})

    def flat(self) -> dict:
        return {**super().flat(), "arrival": self.arrival}

    def replayed(self, trace: dict) -> Extent:
        """Its speedup's mean rate filled in."""
        base = super().replayed(trace)
        assert isinstance(base, Replay)
        return replace(base, rate_rps=trace_rate(trace, self.speedup))


@dataclass(frozen=True, kw_only=True)
class Users(Extent):
    """User-centric pace: `users` sessions at once, each sending its next turn
    turn_interval_s after its previous turn's send (not before that turn ended), a new
    session when one ends."""

    users: int
    turn_interval_s: float
    key: ClassVar[str] = "users"
    driver: ClassVar[str] = "benchc.run.users:UsersDriver"

    @classmethod
    def from_load(cls, load: dict, bounds: dict, defaults: dict) -> list[Extent]:
        """Sessions at a per-user pace (AIPerf's user-centric rate)."""
        sweep = load.get("sweep", {})
        if "users" not in sweep:
            return []
        interval = parse_duration(sweep["turn_interval"])
        return [cls(users=u, turn_interval_s=interval, **bounds) for u in sweep["users"]]

    @property
    def label(self) -> str:
        return f"users={self.users}"

    @property
    def inflight_target(self) -> int:
        return self.users

    @property
    def cap(self) -> int | None:
        return None  # each shard keeps its users (split as plan versions 1-3 did)

    def params(self) -> dict:
        return {**self._tail(super().params()), "users": self.users, "turn_interval_s": self.turn_interval_s}


@dataclass(frozen=True, kw_only=True)
class Search(Extent):
    """A capacity search's template (plan/search.py): its probes are closed loops at the
    probed concurrency, or open loops at the probed rate, with these fields. `least`,
    `largest`: its range (a concurrency search's first probe holds the first in flight, and
    the last it may hold the second)."""

    over: str  # concurrency | rate
    least: float
    largest: float
    arrival: str | None = None  # a rate search's arrival process
    burstiness: float | None = None
    max_concurrency: int | None = None
    key: ClassVar[str] = "search"
    driver: ClassVar[str] = ""  # never driven: its probes are (plan/search.py)

    @property
    def label(self) -> str:
        return "search"

    @property
    def inflight_target(self) -> int:
        return int(self.largest) if self.over == "concurrency" else self.max_concurrency or 0

    @property
    def first_inflight(self) -> int:
        return int(self.least) if self.over == "concurrency" else self.max_concurrency or 0

    def probe(self, load: float) -> ClosedLoop | OpenLoop:
        """The shape of a probe at `load` (a concurrency, or a rate)."""
        bounds = self.bounds()
        if self.over == "concurrency":
            return ClosedLoop(concurrency=int(load), **bounds)
        return OpenLoop(rate_rps=float(load), arrival=self.arrival or "poisson", burstiness=self.burstiness,
                        max_concurrency=self.max_concurrency, **bounds)

    def flat(self) -> dict:
        return {**super().flat(), "arrival": self.arrival}


def _stages(load: dict, over: str, bounds: dict) -> list[tuple[dict, float, dict]]:
    """load.stages' stages when they are of `over` (concurrency | rate): each with the target
    its ramp starts from (the stage before's; the first's: 0) and the fields every stage shape
    takes alike (its place from 1, its ramp, `bounds` with its own duration)."""
    stages = load.get("stages") or []
    if not stages or over not in stages[0]:
        return []
    out, before = [], 0.0
    for i, stage in enumerate(stages, 1):
        target = float(stage[over]) if over == "concurrency" else parse_rate(stage[over])
        alike = {**bounds, "duration_s": parse_duration(stage["duration"]), "stage": i,
                 "ramp_s": parse_duration(stage.get("ramp", 0))}
        out.append((stage, before, alike))
        before = target
    return out


class _Staged(Extent):
    """What a stage of either kind writes of itself: its place, the target its ramp starts
    from (`ramp_from`), its ramp."""

    stage: int
    ramp_s: float

    @property
    def ramp_from(self) -> float:
        raise NotImplementedError

    def params(self) -> dict:
        stage = {"index": self.stage, "from": self.ramp_from, "ramp_s": self.ramp_s}
        return {**super().params(), "stage": stage}

    def flat(self) -> dict:
        return {**super().flat(), "stage": [self.stage, self.ramp_from, self.ramp_s]}


@dataclass(frozen=True, kw_only=True)
class ConcurrencyStage(_Staged, ClosedLoop):
    """A stage of a staged profile (load.stages, k6's ramping-vus): its units in flight go
    linearly from `start` to `concurrency` over its first ramp_s, then hold to its end
    (duration_s). Each stage is a point of its own: its row, its figures, its SLO verdict."""

    start: int = 0
    ramp_s: float = 0.0
    stage: int = 1  # its place in the profile, from 1
    key: ClassVar[str] = "concurrency_stage"
    driver: ClassVar[str] = "benchc.run.stages:ConcurrencyStageDriver"

    @classmethod
    def from_load(cls, load: dict, bounds: dict, defaults: dict) -> list[Extent]:
        return [cls(concurrency=int(st["concurrency"]), start=int(before), **alike)
                for st, before, alike in _stages(load, "concurrency", bounds)]

    @property
    def label(self) -> str:
        ramp = f"{self.start}..{self.concurrency}" if self.ramp_s else f"{self.concurrency}"
        return f"stage={self.stage},c={ramp}"

    @property
    def inflight_target(self) -> int:
        return max(self.start, self.concurrency)

    def target_at(self, t_s: float) -> int:
        """The units in flight it asks `t_s` seconds into the stage (the ramp's, rounded)."""
        if self.ramp_s <= 0 or t_s >= self.ramp_s:
            return self.concurrency
        return round(self.start + (self.concurrency - self.start) * max(t_s, 0.0) / self.ramp_s)

    @property
    def ramp_from(self) -> float:
        return self.start

    def divide(self, workers: int) -> list[tuple[Extent, Shard]]:
        """As a closed loop, its ramp's start split as its target is."""
        parts = super().divide(workers)
        starts = even(self.start, len(parts))
        return [(replace(part, start=s) if isinstance(part, ConcurrencyStage) else part, shard)
                for (part, shard), s in zip(parts, starts, strict=True)]


@dataclass(frozen=True, kw_only=True)
class RateStage(_Staged, OpenLoop):
    """A stage of a staged profile (load.stages, k6's ramping-arrival-rate): its rate goes
    linearly from `start_rps` to rate_rps over its first ramp_s, then holds to its end
    (duration_s); arrivals poisson or constant on that rate (run/stages.py). Splits as an
    open loop: each worker takes every n-th arrival of the one schedule."""

    start_rps: float = 0.0
    ramp_s: float = 0.0
    stage: int = 1
    key: ClassVar[str] = "rate_stage"
    driver: ClassVar[str] = "benchc.run.stages:RateStageDriver"

    @classmethod
    def from_load(cls, load: dict, bounds: dict, defaults: dict) -> list[Extent]:
        return [cls(rate_rps=parse_rate(st["rate"]), start_rps=before, arrival=st.get("arrival", "poisson"),
                    max_concurrency=st.get("max_concurrency"), **alike)
                for st, before, alike in _stages(load, "rate", bounds)]

    @property
    def label(self) -> str:
        ramp = f"{self.start_rps:g}..{self.rate_rps:g}" if self.ramp_s else f"{self.rate_rps:g}"
        return f"stage={self.stage},rate={ramp}/s"

    @property
    def mean_rate_rps(self) -> float | None:
        d = self.duration_s or 0.0
        return self.offered(d) / d if d else self.rate_rps

    def offered(self, t_s: float) -> float:
        """The arrivals its rate offers in its first `t_s` seconds (the rate's integral)."""
        r, a, b = self.ramp_s, self.start_rps, self.rate_rps
        if t_s <= r:
            return a * t_s + (b - a) * t_s * t_s / (2 * r)
        return (a + b) * r / 2 + b * (t_s - r)

    @property
    def ramp_from(self) -> float:
        return self.start_rps

    def replayed(self, trace: dict) -> Extent:
        raise PlanError("load.stages over a trace dataset is not built yet: sweep the trace's speedup")


@dataclass(frozen=True, kw_only=True)
class AgentReplay(Extent):
    """Coding-agent sessions (workload.dataset.agent_trace, run/agent_replay.py): each
    session's requests in order after their think times (times `time_scale`, at most
    `max_think_s`), its subagents spawned and joined; the sessions started `concurrency` at a
    time, at a seeded Poisson `rate_rps` of session arrivals, or on the traces' own start times
    over `speedup` (one of the three). A session's requests wait on its own answers, so the
    shape is closed per session whatever starts the sessions. `sessions`: how many of the
    trace's it replays (its first ones; all of them when None)."""

    concurrency: int | None = None
    rate_rps: float | None = None
    speedup: float | None = None
    time_scale: float = 1.0
    max_think_s: float | None = None
    kv_block: int | None = None  # the server's KV block (the verdict's cache band); None: the trace's
    key: ClassVar[str] = "agent_replay"
    driver: ClassVar[str] = "benchc.run.agent_replay:AgentReplayDriver"
    # open_loop stays True (as Users'): its sessions' requests go when their think times say,
    # not as other requests end, so no closed loop's slot bound applies to them

    @property
    def cap(self) -> int | None:
        return None  # sessions in flight, not requests: a session's requests are one at a time

    @property
    def label(self) -> str:
        if self.concurrency is not None:
            return f"sessions c={self.concurrency}"
        if self.rate_rps is not None:
            return f"sessions rate={self.rate_rps:g}/s"
        return f"speedup={self.speedup:g}"

    @property
    def inflight_target(self) -> int:
        return self.concurrency or 0

    @property
    def arrival(self) -> str | None:
        """How its sessions arrive: poisson (a rate), trace (their own times), None (a concurrency)."""
        return "poisson" if self.rate_rps is not None else "trace" if self.speedup is not None else None

    def params(self) -> dict:
        out = {**super().params(), "concurrency": self.concurrency, "rate_rps": self.rate_rps,
               "arrival": self.arrival}
        if self.speedup is not None:
            out["speedup"] = self.speedup
        return {**self._tail(out), "time_scale": self.time_scale, "max_think_s": self.max_think_s}

    def divide(self, workers: int) -> list[tuple[Extent, Shard]]:
        """By session: a session and its subagents on one worker, its requests waiting on its own
        answers there. A concurrency (sessions in flight) splits as a closed loop's slots: a
        worker with c of the C slots replays c of every C sessions, in session order (lanes as
        ClosedLoop's). A rate or the traces' own times split as an open loop's arrivals: worker k
        of n replays sessions k, k + n, ... at their times in the one schedule (the plan's rate,
        the traces' start times from the whole set's first), so the times stay absolute. Each
        part's `sessions` is its share (None: all the trace's, dealt alike)."""
        if self.concurrency is None:
            n = min(workers, self.sessions) if self.sessions else workers
            return [(replace(self, sessions=s.share(self.sessions)), s)
                    for s in (Shard(k, n, k, 1, n) for k in range(n))]
        return [(replace(self, concurrency=c, sessions=shard.share(self.sessions)), shard)
                for c, shard in slots(self.concurrency, self.sessions, workers)]


Shape = ClosedLoop | OpenLoop | Replay | Users | Search | AgentReplay | ConcurrencyStage | RateStage
SHAPES: dict[str, type[Extent]] = {t.key: t for t in (ClosedLoop, OpenLoop, Replay, Users, Search,
                                                         AgentReplay, ConcurrencyStage, RateStage)}


def shape_from_dict(d: dict) -> Extent:
    """A plan's (version 4) `load`: {KEY: fields}."""
    (key, value), = d.items()
    return SHAPES[key](**value)


def from_flat(kind: str, flat: dict, search: dict | None) -> Extent | None:
    """The shape of a step written by plan versions 1-3 (its load fields flat on the step);
    None for a step without load (server, smoke)."""
    f = {**FLAT_FIELDS, **{k: v for k, v in flat.items() if k in FLAT_FIELDS}}
    bounds = {k: f[k] for k in ("requests", "duration_s", "sessions", "ramp_up_s", "cooldown_s")}
    bounds["graceful_stop_s"] = flat.get("graceful_stop_s")
    if kind == "search" and search is not None:
        return Search(over=search["over"], least=search["min"], largest=search["max"], arrival=f["arrival"],
                      burstiness=f["burstiness"], max_concurrency=f["max_concurrency"], **bounds)
    if f["concurrency"]:
        return ClosedLoop(concurrency=f["concurrency"], **bounds)
    if f["users"] is not None:
        return Users(users=f["users"], turn_interval_s=f["turn_interval_s"], **bounds)
    if f["arrival"] == "trace":
        return Replay(speedup=f["speedup"], rate_rps=f["rate_rps"], max_concurrency=f["max_concurrency"],
                      **bounds)
    if f["rate_rps"] is not None:
        return OpenLoop(rate_rps=f["rate_rps"], arrival=f["arrival"] or "poisson", burstiness=f["burstiness"],
                        max_concurrency=f["max_concurrency"], **bounds)
    return None


__all__ = ["ClosedLoop", "OpenLoop", "Replay", "Users", "Search", "AgentReplay", "ConcurrencyStage",
           "RateStage", "Shape", "Extent", "SHAPES", "Shard", "WHOLE", "even", "slots", "shape_from_dict",
           "from_flat", "FLAT_FIELDS", "PARAM_HEAD"]
