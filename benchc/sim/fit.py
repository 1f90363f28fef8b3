"""`benchc fit`: the simulator's parameters (sim/model.py) fitted to measured results of one server.

What a closed-loop point at concurrency C with O output tokens and U uncached prompt tokens per
request says about the engine the simulator plays (sim/server.py's Engine):
- decode step time: every running sequence gets one token per step, so the step time at batch
  C is the point's TPOT p50 (the prefill of requests admitted during a request's decode adds
  (C-1) * P / (O-1) at most, none when the batch runs in lock step, as identical requests in a
  closed loop settle into; the residuals show what is left). The step table is piecewise linear
  through the measured batch sizes (made non-decreasing); beyond the largest it grows at the
  least-squares slope over all of them, the extrapolation docs/twin.md warns about.
- prefill: at the smallest concurrency the first token costs one step plus the prefill P of the
  request's uncached tokens. With two or more prompt lengths there, a least-squares line of P on U
  gives prefill_tok_s (its slope) apart from a fixed per-request overhead (its intercept, which
  the twin's own HTTP server plays); with one length, P / U includes that overhead. The server's
  own prefill time (vLLM's prometheus phases, when the result has them) is used in preference to
  the client's TTFT, which also holds the front end and the transport.
- front end: the server's own time to first token beyond its queue and prefill phases
  (tokenizing, handing over between processes): `frontend_ms`, a wait before admission that
  does not hold up the engine's steps; and its growth with the requests the server holds
  (`frontend_growth`, from the same time at each concurrency).
- delivery: the client's TTFT minus the server's own TTFT (prometheus), the time between the
  first token's computation and its arrival: reported (`delivery_ms`); its part of the first
  token is in frontend_ms, and the simulator writes every later token when it computes it.
- slots (max_num_seqs): seen only when a point queued (server telemetry: waiting > 0 with fewer
  running than its concurrency); else not observed and left at SimConfig's default.
- block size: not observed: a point keeps only the sum of its requests' cached tokens, a
  multiple of the block size (per-request counts would tell it).
- chunks per write: output tokens per text-bearing chunk (usage / chunks).

Not fitted, because the simulator has no parameter for it: context length's effect on step
time, chunked prefill's token budget, speculative decoding, preemption. docs/twin.md says so.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from benchc.sim.model import SimConfig
from benchc.sim.twin import TWIN_VERSION

# the widest concurrency a point may have to be fitted: what a spec may ask for
# (spec/limits.py MAX_CONCURRENCY); a result saying more was not measured as asked, and its
# batch doubled for the table's last row could pass int64
MAX_FIT_CONCURRENCY = 1_000_000


def _too_wide(point: dict) -> bool:
    c = point.get("params", {}).get("concurrency")
    return isinstance(c, int | float) and c > MAX_FIT_CONCURRENCY


class FitRefused(ValueError):
    """The results cannot be fitted; the message says what is missing."""


@dataclass(frozen=True)
class Observation:
    """One closed-loop point's figures, per request means (ms, tokens)."""

    source: str
    point: str
    concurrency: int
    output_tokens: float
    input_tokens: float
    uncached_tokens: float
    tpot_p50_ms: float
    ttft_p50_ms: float
    output_tok_s: float
    server_prefill_ms: float | None
    server_frontend_ms: float | None
    delivery_ms: float | None
    running_max: float | None
    waiting_max: float | None
    waiting_mean: float | None
    server_samples: int  # /metrics samples the point's telemetry took
    cached_tokens: int
    tokens_per_chunk: float


def _observation(source: str, point: dict) -> Observation | None:
    params = point.get("params", {})
    completed = point.get("counts", {}).get("completed", 0)
    lat = point.get("latency", {})
    # a capacity search's probe at a concurrency is a closed-loop point as a sweep's is (often the
    # only one at a large batch, which the fit most needs); a point its trust checks doubted is
    # left out (untrusted())
    if not params.get("concurrency") or untrusted(point) or completed < 1 or _too_wide(point):
        return None
    tpot, ttft = lat.get("tpot_us"), lat.get("ttft_us")
    if not tpot or not ttft or not tpot.get("count") or tpot.get("p50") is None:
        return None  # no request with two or more tokens
    tokens = point.get("tokens", {})
    out = tokens.get("output", 0) / completed
    inp = tokens.get("input", 0) / completed
    cached = (point.get("cache") or {}).get("cached_tokens") or 0
    prom = point.get("server_timings_prometheus") or {}
    server_prefill = prom.get("prefill_ms_mean")
    # the server's time to first token that none of its engine phases holds (vLLM: tokenizing
    # and handing over between its processes before the request is queued)
    frontend = None
    if None not in (server_prefill, prom.get("ttft_ms_mean"), prom.get("queue_ms_mean")):
        frontend = max(0.0, prom["ttft_ms_mean"] - prom["queue_ms_mean"] - server_prefill)
    delivery = None
    if prom.get("ttft_ms_mean") is not None and prom.get("client_ttft_ms_mean") is not None:
        delivery = prom["client_ttft_ms_mean"] - prom["ttft_ms_mean"]
    server = ((point.get("telemetry") or {}).get("server") or {})
    cvu = tokens.get("chunks_vs_usage") or {}
    per_chunk = (cvu["usage"] / cvu["chunks"]) if cvu.get("chunks") and cvu.get("usage") else 1.0
    return Observation(
        source=source, point=point.get("id", "?"), concurrency=int(params["concurrency"]),
        output_tokens=out, input_tokens=inp, uncached_tokens=max(0.0, inp - cached / completed),
        tpot_p50_ms=tpot["p50"] / 1000, ttft_p50_ms=ttft["p50"] / 1000,
        output_tok_s=point.get("throughput", {}).get("output_tok_s", 0.0),
        server_prefill_ms=server_prefill, server_frontend_ms=frontend, delivery_ms=delivery,
        running_max=(server.get("running") or {}).get("max"),
        waiting_max=(server.get("waiting") or {}).get("max"),
        waiting_mean=(server.get("waiting") or {}).get("mean"),
        server_samples=int((server.get("running") or {}).get("samples") or 0),
        cached_tokens=int(cached), tokens_per_chunk=per_chunk)


# doubts that say the server did other work than the spec asked (results/trust.py): prefix-cache
# hits the spec did not share make a prefill look free (a real server kept an earlier run's
# prompts: 2 uncached tokens of 130 gave a prefill rate of 784 tok/s), other output lengths
# another decode. Such a point is left out; one doubted otherwise (a client-limited point, whose
# latencies the client moved) is used, and named in a warning
NOT_THIS_WORKLOAD = ("prefix_cache", "output_length")


def doubts(point: dict) -> list[str]:
    """The checks that doubted a point so that --strict would fail it; empty for a trusted point,
    or one written before trust checks."""
    trust = point.get("trust") or {}
    if trust.get("trusted", True):
        return []
    return [d["check"] for d in trust.get("doubts", []) if d.get("fails_strict", True)] or ["untrusted"]


def untrusted(point: dict) -> list[str]:
    """The doubts that leave a point out of the fit (NOT_THIS_WORKLOAD), and for a search's probe
    any doubt (a probe's own search did not trust it either)."""
    found = doubts(point)
    if point.get("params", {}).get("probe") is not None:
        return found
    return [c for c in found if c in NOT_THIS_WORKLOAD]


def observations(docs: list[tuple[str, dict]]) -> list[Observation]:
    """The closed-loop points of `docs` ((path, result document) pairs) that can be fitted."""
    obs = []
    for path, doc in docs:
        obs += [o for p in doc.get("points", []) if (o := _observation(path, p)) is not None]
    return obs


def _server_identity(doc: dict) -> tuple:
    """Model and server: the simulator's settings when simulated (its port is a new one each
    run), else the --base-url or spec's base_url (one server, measured on several days)."""
    ids = set()
    for c in (doc.get("plan") or {}).get("combinations", []):
        t = c.get("target") or {}
        if t.get("sim"):
            ids.add((t.get("model"), json.dumps(t["sim"], sort_keys=True)))
    for t in doc.get("target") or []:
        if not t.get("simulated"):
            ids.add((t.get("model"), t.get("base_url")))
    return tuple(sorted(ids, key=str))


def _check_enough(docs: list[tuple[str, dict]], obs: list[Observation], doubted: list[str]) -> None:
    identities = {_server_identity(doc) for _, doc in docs}
    if len(identities) > 1:
        raise FitRefused("the results are of different servers or models ("
                         + "; ".join(str(i) for i in sorted(identities, key=str))
                         + "): fit one server at a time")
    levels = sorted({o.concurrency for o in obs})
    if len(levels) < 2:
        found = f"only concurrency {levels[0]}" if levels else "no closed-loop point with TPOT"
        left = f" (left out, as their trust checks doubted them: {'; '.join(doubted)})" if doubted else ""
        raise FitRefused(
            f"too thin to fit: {found}{left}; the decode step's growth with batch size needs closed-loop "
            "points at two or more concurrencies with outputs of 2+ tokens (a sweep such as "
            "concurrency: [1, 2, 4])")


def _prefill(obs: list[Observation], step_at: dict[int, float]) -> tuple[float, float, float | None, str]:
    """(prefill_tok_s, frontend_ms, fixed_prefill_ms or None, how), from the smallest
    concurrency's points.

    The first token costs, in the engine, one step plus the prefill of the request's uncached
    tokens: the server's own prefill time (vLLM's prometheus phase, scheduled to first token)
    when the result has it, else the client's TTFT p50 less its steps. That time also holds a
    fixed cost per request (an engine waking from idle, its scheduler), which one prompt length
    cannot tell from the prefill: with two or more lengths (several results may be fitted
    together) a least-squares line over them gives the rate as its slope, and the fixed cost as
    its intercept, reported but not simulated (the twin's own engine and HTTP server pay theirs).
    The server's front end (its time to first token outside its queue and prefill phases) is
    frontend_ms: a wait before admission, beside the engine's steps."""
    c0 = min(o.concurrency for o in obs)
    base = [o for o in obs if o.concurrency == c0]
    server = all(o.server_prefill_ms is not None for o in base)
    # the first token's steps as the client sees them: admitted at once at C=1, behind the
    # step under way above it
    waits = 1 if c0 == 1 else 2
    ys, xs = [], []
    for o in base:
        if server and o.server_prefill_ms is not None:
            ys.append(o.server_prefill_ms - step_at[c0])
        else:
            ys.append(o.ttft_p50_ms - waits * step_at[c0])
        xs.append(o.uncached_tokens)
    # at most what the client saw beyond the prefill: the phases are means, which a server's
    # slow outliers inflate, where the client's TTFT is a median
    fronts = [max(0.0, min(o.server_frontend_ms,
                           o.ttft_p50_ms - (waits - 1) * step_at[c0] - o.server_prefill_ms))
              for o in base if o.server_frontend_ms is not None and o.server_prefill_ms is not None]
    frontend = float(np.median(fronts)) if server and fronts else 0.0
    how = "the server's prefill time" if server else "the client's TTFT p50"
    lengths = sorted({round(x) for x in xs})
    if len(lengths) >= 2:
        slope, intercept = np.polyfit(np.array(xs), np.array(ys), 1)
        if slope > 0:
            return (1000.0 / float(slope), frontend, float(intercept),
                    f"{how}, a line over prompt lengths {lengths}")
    mean_ms, mean_u = float(np.mean(ys)), float(np.mean(xs))
    if mean_ms <= 0 or mean_u <= 0:
        return 0.0, frontend, None, f"{how}: no time left for prefill after the first step (prefill free)"
    return mean_u * 1000.0 / mean_ms, frontend, None, (
        f"{how} at one prompt length ({lengths[0]} tokens): its fixed cost per request is counted "
        "as prefill (fit a second result with another prompt length to separate them)")


def fit(docs: list[tuple[str, dict]]) -> dict:
    """The twin document fitted to `docs` ((path, result document) pairs of one server).
    FitRefused says what is missing when they are too thin."""
    obs = observations(docs)
    closed = [p for _, doc in docs for p in doc.get("points", []) if p.get("params", {}).get("concurrency")]
    doubted = [f"{p.get('id', '?')} ({', '.join(checks)})" for p in closed if (checks := untrusted(p))]
    used_doubted = [f"{p.get('id', '?')} ({', '.join(doubts(p))})" for p in closed
                    if doubts(p) and not untrusted(p)]
    _check_enough(docs, obs, doubted)
    levels = sorted({o.concurrency for o in obs})
    # the decode step at each measured batch size: the median of its points' TPOT p50, made
    # non-decreasing (a busy machine's noise can make a larger batch look faster; an engine's
    # step does not shrink with more sequences)
    medians = [float(np.median(ys)) for ys in _by_level(obs, lambda o: o.tpot_p50_ms).values()]
    step_at = dict(zip(levels, _non_decreasing(medians), strict=True))
    prefill_tok_s, frontend_ms, fixed_prefill_ms, prefill_how = _prefill(obs, step_at)
    growth = _frontend_growth(obs)
    defaults = SimConfig()
    sim: dict = {
        "model": _model_name(docs),
        "step_table": _step_table(step_at),
        "prefill_tok_s": round(prefill_tok_s, 1),
        "frontend_ms": round(frontend_ms, 3),
        "frontend_growth": growth,
        "chunks_per_write": max(1, round(float(np.median([o.tokens_per_chunk for o in obs])))),
        "jitter": 0.0,
        "max_model_len": max(defaults.max_model_len,
                             int(max(o.input_tokens + o.output_tokens for o in obs)) + 1),
    }
    notes, not_observed = [f"prefill: {prefill_how}"], []
    wide = [p.get("id", "?") for p in closed if _too_wide(p)]
    if wide:
        notes.append(f"left out, at a concurrency past {MAX_FIT_CONCURRENCY:,} (more than a spec may ask "
                     f"for): {', '.join(wide[:5])}{' and more' if len(wide) > 5 else ''}")
    if doubted:
        notes.append(f"left out, as their trust checks doubted them: {'; '.join(doubted)}")
    if growth:
        notes.append(f"front end: {frontend_ms:.3g} ms at C={levels[0]}, and more with the requests held "
                     f"({', '.join(f'{h}: +{ms:g}' for h, ms in growth)} ms; flat past {growth[-1][0]})")
    capped = [o for o in obs if _slots_seen(o)]
    if capped:
        sim["max_num_seqs"] = int(min(o.running_max for o in capped if o.running_max))
        notes.append(f"max_num_seqs: the most running while requests waited ({sim['max_num_seqs']})")
    else:
        not_observed.append(f"max_num_seqs (no point queued in {SLOT_SAMPLES}+ samples; at least "
                            f"{max(levels)}; default {defaults.max_num_seqs} kept)")
    # a point's cached tokens are a sum over its requests: a multiple of the block size, not
    # the block size (that needs per-request counts, which a result's points do not keep)
    hit = any(o.cached_tokens > 0 for o in obs)
    why = "only sums of cached tokens" if hit else "no prompt tokens were served from the cache"
    not_observed.append(f"block_size ({why}; default {defaults.block_size} kept)")
    delivery = [o.delivery_ms for o in obs if o.delivery_ms is not None]
    table = sim["step_table"]
    slope = (table[-1][1] - table[-2][1]) / (table[-1][0] - table[-2][0])
    top = levels[-1]
    warnings = [f"used, though their trust checks doubted them: {'; '.join(used_doubted)}"
                ] if used_doubted else []
    warnings += [f"extrapolation: the step time was measured at batch sizes {', '.join(map(str, levels))}; "
                f"past {top} the twin continues at {slope:.3g} ms a sequence (the least-squares slope "
                f"over them), which no measurement shows: a load whose batch passes {top} (a closed "
                f"loop above C={top}, a rate whose in-flight count does) is a guess, and its points "
                "say twin_extrapolated (docs/twin.md: how far to trust it)"]
    twin = {
        "benchc_twin": TWIN_VERSION,
        "model": sim["model"],
        "sim": sim,
        "fitted_range": {
            "concurrency": [levels[0], levels[-1]],
            # the batch sizes the step time was measured at: a closed loop's is its concurrency
            "batch": [levels[0], levels[-1]],
            "input_tokens": _span(o.input_tokens for o in obs),
            "output_tokens": _span(o.output_tokens for o in obs),
        },
        "delivery_ms": round(float(np.median(delivery)), 3) if delivery else None,
        "fixed_prefill_ms": round(fixed_prefill_ms, 3) if fixed_prefill_ms is not None else None,
        "notes": notes,
        "warnings": warnings,
        "not_observed": not_observed,
        "sources": sorted({o.source for o in obs}),
    }
    twin["residuals"] = residuals(obs, sim)
    return twin


def _frontend_growth(obs: list[Observation]) -> list[list[float]] | None:
    """How the server's front end (its time to first token outside its queue and prefill
    phases) grows with the requests it holds: at each closed-loop concurrency C, C - 1 others
    are held when a request arrives; the growth over the smallest concurrency's (the twin's
    frontend_ms), made non-decreasing. The simulator holds it flat past the largest
    measured: beyond it, a guess either way, and flat is the one that does not compound (a real
    vLLM on a busy 2-core host took 8, 20, 30 ms at C=1, 2, 4 and about 50 from C=8 to 16).
    None without the server's own timings at two concurrencies."""
    by_level = _by_level([o for o in obs if o.server_frontend_ms is not None], lambda o: o.server_frontend_ms)
    levels = list(by_level)
    if len(levels) < 2:
        return None
    ys = _non_decreasing([float(np.median(v)) for v in by_level.values()])
    growth = [[c - 1, round(max(0.0, y - ys[0]), 3)] for c, y in zip(levels, ys, strict=True)]
    return None if all(g == 0 for _, g in growth) else growth


# /metrics samples a point needs before its running and waiting counts can tell a slot limit:
# one sample at 1 s caught a closed loop at C=4 between two waves (1 running, 3 waiting to be
# admitted at the next step), and a twin of one slot ran C=8 one request at a time
SLOT_SAMPLES = 5


def _slots_seen(o: Observation) -> bool:
    """A slot limit below the point's concurrency: requests waited in most of its samples
    (mean waiting at least 0.5) while the running count never reached the concurrency, over
    SLOT_SAMPLES samples or more."""
    return (o.server_samples >= SLOT_SAMPLES and o.running_max is not None and o.running_max >= 1
            and o.running_max < o.concurrency and (o.waiting_mean or 0.0) >= 0.5)


def _by_level(obs: list[Observation], figure: Callable[[Observation], float | None]
              ) -> dict[int, list[float]]:
    """`figure` of every observation, grouped by concurrency, in increasing concurrency: one
    pass (a median per level over every point was quadratic in points)."""
    out: dict[int, list[float]] = {}
    for o in obs:
        out.setdefault(o.concurrency, []).append(float(figure(o)))  # type: ignore[arg-type]
    return dict(sorted(out.items()))


def _non_decreasing(ys: list[float]) -> list[float]:
    """The least-squares non-decreasing fit to `ys` (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, weight]
    for y in ys:
        blocks.append([y, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m1, w1), (m2, w2) = blocks.pop(-2), blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2])
    return [m for m, w in blocks for _ in range(int(w))]


def _step_table(step_at: dict[int, float]) -> list[list[float]]:
    """The table through the measured batch sizes, and one point at twice the largest on the
    least-squares slope over all of them: the simulator continues a table's last segment, so
    beyond the measurements the step grows at the slope every point supports, not at the one
    the last two points' noise gives."""
    levels = sorted(step_at)
    table = [[c, round(step_at[c], 4)] for c in levels]
    slope = max(0.0, float(np.polyfit(np.array(levels, dtype=float),
                                      np.array([step_at[c] for c in levels]), 1)[0]))
    top = levels[-1]
    table.append([2 * top, round(step_at[top] + slope * top, 4)])
    return table


def _span(values: object) -> list[int]:
    vals = [round(v) for v in values]  # type: ignore[attr-defined]
    return [min(vals), max(vals)]


def _model_name(docs: list[tuple[str, dict]]) -> str:
    for _, doc in docs:
        for t in doc.get("target") or []:
            if t.get("model"):
                return str(t["model"])
    return SimConfig().model


def predict(sim: dict, concurrency: int, input_tokens: float, uncached_tokens: float,
            output_tokens: float) -> dict[str, float]:
    """The fitted model's figures for a closed-loop point, the same rules the fit used (lock-step
    batches: TPOT is the step time, TTFT one step plus the prefill of the whole batch): for
    residuals, not for predictions (run the twin for those: queueing is the simulator's)."""
    cfg = SimConfig(step_table=[tuple(x) for x in sim["step_table"]])
    front = SimConfig(frontend_ms=sim.get("frontend_ms", 0.0),
                      frontend_growth=sim.get("frontend_growth")).frontend_wait_ms(concurrency - 1)
    return _predict(sim, concurrency, uncached_tokens, output_tokens, cfg.step_ms(concurrency), front)


def _predict(sim: dict, concurrency: int, uncached_tokens: float, output_tokens: float, step: float,
             front: float) -> dict[str, float]:
    """predict's figures from the step time and the front end's wait at `concurrency`."""
    prefill = uncached_tokens * 1000.0 / sim["prefill_tok_s"] if sim["prefill_tok_s"] else 0.0
    # a lock-step batch's prefills share its first step
    ttft = front + step + prefill * concurrency
    e2e = ttft + step * max(0.0, output_tokens - 1)
    return {"tpot_p50_ms": step, "ttft_p50_ms": ttft,
            "output_tok_s": concurrency * output_tokens * 1000.0 / e2e if e2e > 0 else 0.0}


def residuals(obs: list[Observation], sim: dict) -> list[dict]:
    """Per point: measured, modelled and the relative residual (model / measured - 1)."""
    out = []
    # the step time and the front end's wait at every concurrency, interpolated in one call
    # each (SimConfig's per-call lookups made this quadratic in points): the table's rule
    # within it (every concurrency fitted is within it) and the growth's, flat past its ends
    levels = sorted({o.concurrency for o in obs})
    table = sim["step_table"]
    steps = dict(zip(levels, np.interp(levels, [b for b, _ in table], [ms for _, ms in table]).tolist(),
                     strict=True))
    growth = sim.get("frontend_growth") or [[0, 0.0]]
    extra = np.interp([c - 1 for c in levels], [h for h, _ in growth], [ms for _, ms in growth]).tolist()
    fronts = {c: sim.get("frontend_ms", 0.0) + g for c, g in zip(levels, extra, strict=True)}
    for o in obs:
        model = _predict(sim, o.concurrency, o.uncached_tokens, o.output_tokens, steps[o.concurrency],
                         fronts[o.concurrency])
        row: dict = {"source": o.source, "point": o.point, "concurrency": o.concurrency}
        for key, measured in (("tpot_p50_ms", o.tpot_p50_ms), ("ttft_p50_ms", o.ttft_p50_ms),
                              ("output_tok_s", o.output_tok_s)):
            row[key] = {"measured": round(measured, 3), "model": round(model[key], 3),
                        "residual": round(model[key] / measured - 1, 4) if measured else None}
        out.append(row)
    return out


def residual_table(twin: dict) -> str:
    """The residuals as a text table (what `benchc fit` prints)."""
    head = f"{'source':<28} {'point':<8} {'TPOT p50 ms':>22} {'TTFT p50 ms':>22} {'output tok/s':>24}"
    lines = [head, "-" * len(head)]
    for r in twin["residuals"]:
        cells = []
        for key in ("tpot_p50_ms", "ttft_p50_ms", "output_tok_s"):
            v = r[key]
            res = f"{v['residual']:+.1%}" if v["residual"] is not None else "n/a"
            cells.append(f"{v['measured']:>8.2f} ->{v['model']:>8.2f} {res:>7}")
        src = r["source"] if len(r["source"]) <= 28 else "..." + r["source"][-25:]
        lines.append(f"{src:<28} {r['point']:<8} {cells[0]:>22} {cells[1]:>22} {cells[2]:>24}")
    return "\n".join(lines) + "\n"
