"""The client self-check, judged by effect: which figures a late client (its event loop, its
receive loop, its CPU) can move, how far each moved at this point, against a stated bound.

A busy host makes benchc's loops run late now and then; that alone says nothing about the
figures. A point is client-limited only when a figure a late client can move moved past its
bound (`client.effects`, one entry per effect); a loop that ran late while nothing it can
move moved is told in `client.self_check_note`, not held against the point.

What a late client can move, and how each is measured:
- offered load (`load`, `throughput`). Closed loop: the concurrency held. A slot the client
  leaves idle between a request's end (its kernel stamp where there is one) and the next
  write is load the server never got: the share of the slots' time left idle is the send
  delays summed over the requests, over the time from each request's ready to its end. With
  one slot no request shares the server with another, so idle time moves the throughput
  only, never the load any request saw. Open loop: the arrival process itself. The share of
  sends later than SEND_LATE_US with a free slot (the schedule's own queueing at
  max_concurrency is the server's, not counted), and the achieved send rate against the rate
  the schedule let go, for the record.
- latencies (`ttft`, `itl`, `tpot`, `e2e`) of requests whose reads the event loop dates
  (aiohttp, https): a late loop dates their reads late by up to its lag. Where the kernel
  stamps each read (the receive loop; the own reader over plain http) a late read keeps its
  stamp, with one exception: a read that finds several of a stream's packets waiting is
  stamped with the last one's arrival, so the earlier chunks in it are dated late (their
  ITL gap reads 0; a TTFT whose first chunk was merged reads late; E2E, dated by the last
  read, never moves). Measured: the share of ITL gaps that fell inside one read, judged only
  when the reads were late (a server that writes several events at once merges them too).
  The delay from a read's kernel stamp to the read says what a loop-stamped path would have
  been off by.
- requests the client could not make (out of file descriptors or ports): `errors`, `load`.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from benchc.results.document import metric_value
from benchc.results.trust import SHARED_CPUS
from benchc.spec.thresholds import Threshold

# Bounds: past one, the figures it names moved and the point is client-limited.
IDLE_SHARE_BOUND = 0.05  # closed loop: the client left more than 5% of its slots' time idle
SEND_LATE_US = 10_000  # open loop: a send more than 10 ms late with a free slot is late ...
LATE_SHARE_BOUND = 0.05  # ... and more than 5% of the sends were
LOOP_LAG_P99_US = 5_000  # a loop (event loop ticker, or reads after their kernel stamp) late by 5 ms p99 ...
LOOP_LAG_MIN_TICKS = 5  # ... in at least 5 ticks or reads: one OS hiccup on a small machine is not lateness
MERGED_SHARE_BOUND = 0.05  # kernel-stamped reads late, and more than 5% of ITL gaps inside one read
CPU_BUSY_FRACTION = 0.90  # a thread at 90% of a core: reported as a cause, judged by its effects

LOAD, THROUGHPUT, ERRORS = "load", "throughput", "errors"
LATENCIES = ("ttft", "itl", "tpot", "e2e")
MERGED_MOVES = ("ttft", "itl", "tpot")  # a merged read's stamp is its last packet's: E2E stays exact


def _share(part: float, whole: float) -> float:
    return round(part / whole, 4) if whole > 0 else 0.0


def _ms(us: float) -> str:
    return f"{us / 1000:.1f} ms"


def offered_load(closed: bool, sends: dict, slots: int | None = None) -> dict:
    """The offered-load effect of the client's send delays (`sends`: SendCheck.effect_inputs());
    `slots`: a closed loop's concurrency."""
    if closed:
        idle = _share(sends["delay_ns"], sends["slot_ns"])
        figures = [THROUGHPUT] if slots == 1 else [LOAD, THROUGHPUT]
        return {"figures": figures, "measure": "idle_share", "value": idle,
                "bound": IDLE_SHARE_BOUND, "moved": idle > IDLE_SHARE_BOUND,
                "how": f"the client left {idle:.1%} of its slots' time idle (bound {IDLE_SHARE_BOUND:.0%})"}
    late = _share(sends["late"], sends["sent"])
    out = {"figures": [LOAD, THROUGHPUT, "latencies from schedule"], "measure": "late_share", "value": late,
           "bound": LATE_SHARE_BOUND, "moved": late > LATE_SHARE_BOUND, "late_sends": sends["late"],
           "sends": sends["sent"],
           "how": f"{sends['late']} of {sends['sent']} sends ({late:.1%}) went more than "
                  f"{_ms(SEND_LATE_US)} late with a free slot (bound {LATE_SHARE_BOUND:.0%})"}
    if sends["sent_span_ns"] > 0 and sends["ready_span_ns"] > 0:
        # achieved over intended: the sends' own span against the span the schedule (and the
        # cap) let them go in
        out["rate_ratio"] = round(sends["ready_span_ns"] / sends["sent_span_ns"], 4)
    return out


def latencies(paths: dict, loop_lag: dict, late_ticks: int, read_delay: dict | None, late_reads: int,
              merged_share: float | None) -> dict:
    """The latency effect: `paths` {"kernel": requests whose reads the kernel stamped, "loop":
    those the event loop dated}; `loop_lag` the ticker's summary (us); `read_delay` the reads'
    kernel stamp to read (us) and `late_reads` those past the bound; `merged_share` the share
    of ITL gaps inside one read."""
    lag_p99 = loop_lag.get("p99", 0)
    out: dict = {"figures": list(LATENCIES), "requests": dict(paths)}
    if read_delay:
        out["read_delay_us"] = read_delay
    if paths.get("loop"):
        moved = lag_p99 > LOOP_LAG_P99_US and late_ticks >= LOOP_LAG_MIN_TICKS
        out.update(measure="loop_lag_p99_us", value=lag_p99, bound=LOOP_LAG_P99_US, moved=moved,
                   how=f"{paths['loop']} requests read by the event loop, which ran {_ms(lag_p99)} late "
                       f"at p99 (bound {_ms(LOOP_LAG_P99_US)}): their reads are dated up to that late")
        return out
    reads_late = read_delay is not None and read_delay.get("p99", 0) > LOOP_LAG_P99_US \
        and late_reads >= LOOP_LAG_MIN_TICKS
    merged = merged_share or 0.0
    moved = reads_late and merged > MERGED_SHARE_BOUND
    when = f", the reads {_ms(read_delay['p99'])} after their stamps at p99" if read_delay else ""
    out.update(figures=list(MERGED_MOVES), measure="merged_share", value=merged, bound=MERGED_SHARE_BOUND,
               moved=moved,
               how=(f"reads stamped by the kernel; {merged:.1%} of ITL gaps fell inside one read "
                    f"(bound {MERGED_SHARE_BOUND:.0%} while reads were late){when}"))
    return out


def client_resources(exhausted: int) -> dict:
    return {"figures": [ERRORS, LOAD], "measure": "requests", "value": exhausted, "bound": 0,
            "moved": exhausted > 0,
            "how": f"{exhausted} requests failed for want of client resources (file descriptors or "
                   "local ports; counted as client_exhausted)"}


def reasons(effects: dict) -> list[str]:
    """One line per effect that moved: the figures, and by how much."""
    return [f"{name.replace('_', ' ')} moved ({', '.join(e['figures'])}): {e['how']}"
            for name, e in effects.items() if e["moved"]]


def causes(loop_lag: dict, late_ticks: int, loop_cpu: float, rx: dict | None) -> list[str]:
    """What made the client late at this point, whatever it moved."""
    out = []
    if loop_lag.get("p99", 0) > LOOP_LAG_P99_US and late_ticks >= LOOP_LAG_MIN_TICKS:
        out.append(f"event-loop lag p99 {_ms(loop_lag['p99'])} ({late_ticks} ticks late)")
    if loop_cpu >= CPU_BUSY_FRACTION:
        out.append(f"client CPU {loop_cpu:.0%} of one core")
    if rx is not None:
        if rx["lag_us"].get("p99", 0) > LOOP_LAG_P99_US and rx["late_reads"] >= LOOP_LAG_MIN_TICKS:
            out.append(f"receive-loop lag p99 {_ms(rx['lag_us']['p99'])} ({rx['late_reads']} reads late)")
        if rx["cpu_fraction"] >= CPU_BUSY_FRACTION:
            out.append(f"receive-loop CPU {rx['cpu_fraction']:.0%} of one core")
    return out


def note(effects: dict, seen: list[str]) -> str | None:
    """A late client that moved nothing: said, with what it could have moved and how little it did."""
    if not seen or any(e["moved"] for e in effects.values()):
        return None
    held = "; ".join(f"{name.replace('_', ' ')}: {e['how']}" for name, e in effects.items()
                     if name != "client_resources")
    return f"the client ran late ({'; '.join(seen)}), but no figure it can move moved past its bound ({held})"



# A late client's bias on a latency figure judged against the figure itself: past 1% of its
# median (the smallest of its percentiles, so the largest share) it is doubted, unless an SLO
# holds the figure and the bias cannot carry it across the SLO's bound either way.
FIGURE_SHARE_BOUND = 0.01


def latency_bias_us(e: dict) -> float:
    """How late the client could date a read at this point (us): the event loop's lag p99 for
    the reads it dated, else the delay of the kernel-stamped reads that merged chunks."""
    if e.get("measure") == "loop_lag_p99_us":
        return float(e["value"])
    return float((e.get("read_delay_us") or {}).get("p99", 0))


def judge_by_figure(client: dict, point: dict, checks: list[Threshold]) -> None:
    """The latency effect judged per figure, once the point's figures are known: a figure the
    bias cannot move past FIGURE_SHARE_BOUND of its median, or past its SLO bound, is not
    doubted (a 7 ms late read on a 40.6 ms TTFT p99 held to 500 ms, or spread over the 126
    gaps of a TPOT). Rewrites `client`'s latency effect (`by_figure`; `figures`: the doubted
    ones), its reasons and verdict, and the note of a client late to no effect. `checks`: the
    point's SLO (thresholds on a latency's percentile)."""
    e = (client.get("effects") or {}).get("latencies")
    if not e or not e["moved"]:
        return
    bias = latency_bias_us(e)
    completed = point["counts"]["completed"]
    gaps = point["tokens"]["output"] / completed - 1 if completed else 0.0
    verdicts: dict[str, dict] = {}
    for f in e["figures"]:
        size = metric_value(point, f"{f}.p50")
        if not size:
            continue  # not measured at this point: nothing to doubt
        fb = bias / gaps if f == "tpot" and gaps > 1 else bias
        bounds = [t for t in checks if t.metric == f and t.stat and not t.relative]
        share = fb / size
        if bounds:
            margins = {t.text: (v - t.value if (v := metric_value(point, t.key)) is not None else 0.0)
                       for t in bounds}
            doubted = any(abs(m) <= fb for m in margins.values())
            held = "; ".join(f"SLO {text} ({abs(m) / 1000:.1f} ms from its bound)"
                             for text, m in margins.items())
            how = f"{f}: {fb / 1000:.2f} ms against the {held}"
        else:
            doubted = share > FIGURE_SHARE_BOUND
            how = f"{f}: {fb / 1000:.2f} ms against its p50 {size / 1000:.1f} ms ({share:.1%}, bound " \
                  f"{FIGURE_SHARE_BOUND:.0%})"
        verdicts[f] = {"bias_us": round(fb, 1), "doubted": doubted, "how": how}
    e["by_figure"] = verdicts
    e["figures"] = [f for f, v in verdicts.items() if v["doubted"]]
    e["moved"] = bool(e["figures"])
    e["how"] += "; by figure: " + "; ".join(
        v["how"] + (" (doubted)" if v["doubted"] else " (held)") for v in verdicts.values())
    client["reasons"] = reasons(client["effects"])
    client["client_limited"] = bool(client["reasons"])
    seen = client.get("causes") or []
    if (n := note(client["effects"], seen)) is not None:
        client["self_check_note"] = n


def on_loopback(url: str) -> bool:
    """Whether a base URL names this machine (the server then shares its CPUs with benchc)."""
    host = urlsplit(url).hostname or ""
    return host == "localhost" or host == "::1" or host.startswith("127.")


def shares_cpus(loop_lag: dict, late_ticks: int, loop_cpu: float, loopback: bool) -> str | None:
    """The cause a loaded small machine shows: the server on loopback, and the client's loop
    late while it used well under a core of its own (it waited for a CPU others held)."""
    late = loop_lag.get("p99", 0) > LOOP_LAG_P99_US and late_ticks >= LOOP_LAG_MIN_TICKS
    if not (loopback and late and loop_cpu < CPU_BUSY_FRACTION):
        return None
    return (f"{SHARED_CPUS} (on loopback): its event loop ran "
            f"{_ms(loop_lag['p99'])} late at p99 while using {loop_cpu:.0%} of a core")
