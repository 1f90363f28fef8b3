"""What `benchc run`'s step costs per request beside the component benchmark's loop, with the
send itself taken out: both send through the same stub (it stamps the record as a coalesced
answer would and yields to the event loop once; no I/O), so what differs is the step's own
bookkeeping (run/loadgen.py StepRun: the record's fields, the slot ledger, the send check, the
stop and steady-state checks, the feed's take) against client_ingest.py's loop (a bare record,
the point recorder, the transport count).

    python benchmarks/step_bookkeeping.py [--concurrency 256] [--requests-per-slot 8] [--repeats 7]

One process (pinned to core 1 where taskset exists), uvloop; benchmarks/fast_server.py answers
what the run asks besides the measured requests. Keep C x requests-per-slot within the feed's
first window (run/feed.py builds the rest during the step, which is not bookkeeping). Prints
the medians of client CPU per request: the step's (the point's cpu_s over its requests), the
component loop's, and their difference.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import tempfile

sys.path.insert(0, __file__.rsplit("/", 2)[0])
from benchmarks.client_ingest import fast_server  # noqa: E402
from benchmarks.run_ingest import SPEC  # noqa: E402

TOKENS = 256


class _Parser:
    """What the point recorder reads of a stream's parser (its gaps are not this harness's)."""

    events = text_chunks = TOKENS
    max_gap_ns = 10

    def record_gaps(self, *hists) -> None:
        pass


PARSER = _Parser()


async def stub_send(pool, url, headers, body, rec, target, keep_text=False, due=None):
    """As send_native() leaves a coalesced answer's record, without sending anything."""
    from benchc.client.request import CLOCK

    rec.times.t0_ns = rec.times.first_sent_ns = CLOCK()
    rec.times.t0_sent = True
    await asyncio.sleep(0)
    rec.times.first_text_ns = CLOCK()
    rec.times.end_ns = rec.times.first_text_ns + 5
    rec.tokens.text_chunks, rec.parser, rec.outcome.path = TOKENS, PARSER, "rx_loop"
    rec.outcome.status, rec.outcome.reused_connection = 200, True
    return rec


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def component(c: int, n: int) -> float:
    """client_ingest.py's loop (run_benchc's `one`) on the stub: client CPU us per request."""
    from benchc.metrics.record import RequestRecord
    from benchc.metrics.recorder import PointRecorder

    rec, paths = PointRecorder(c), {}

    async def loop() -> None:
        for _ in range(n):
            r = RequestRecord("r", 0, 1, TOKENS)
            await stub_send(None, "", {}, b"", r, None)
            rec.add(r)
            paths[r.outcome.path] = paths.get(r.outcome.path, 0) + 1

    cpu0 = _cpu()
    await asyncio.gather(*(loop() for _ in range(c)))
    return (_cpu() - cpu0) / (c * n) * 1e6


def step(url: str, c: int, n: int) -> float:
    """`benchc run` of one closed-loop point on the stub: its client CPU us per request."""
    from benchc.cli import main

    with tempfile.TemporaryDirectory() as d:
        spec, out = os.path.join(d, "s.yaml"), os.path.join(d, "r.json")
        with open(spec, "w") as f:
            f.write(SPEC.format(url=url, tokens=TOKENS, c=c, requests=c * n, out=out))
        if main(["run", spec, "--quiet", "--force"]) != 0:
            raise SystemExit("benchc run failed")
        with open(out) as f:
            (p,) = json.load(f)["points"]
    return p["client"]["cpu_s"] / (c * n) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--requests-per-slot", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    if sys.platform.startswith("linux") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {1})
    import uvloop

    from benchc.run import loadgen

    loadgen.send_native = stub_send  # the step's sends (warm-up and point) go to the stub
    c, n = a.concurrency, a.requests_per_slot
    load = os.getloadavg()
    runs, comps = [], []
    with fast_server(0.0) as (url, _):
        for _ in range(a.repeats):
            comps.append(uvloop.run(component(c, n)))
            runs.append(step(url, c, n))
    run, comp = statistics.median(runs), statistics.median(comps)
    print(f"step_bookkeeping C={c}, {c * n} requests, {a.repeats} repeats (medians), load average "
          f"{load[0]:.2f}: benchc run {run:.1f} us/request, component loop {comp:.1f} us/request, "
          f"the step's own {run - comp:.1f} us/request")


if __name__ == "__main__":
    main()
