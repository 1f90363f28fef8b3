"""Fault injection for the simulator, deterministic by seed.

A fault is written `KIND:RATE[:ARG]` (RATE is the chance per request, 0..1):

    http_429:0.1            reply 429 with vLLM's JSON error body, before any stream
    http_500:0.1, http_503:0.1
    reset:0.1               reset the connection halfway through the stream
    stall:0.1:500ms         stop writing for ARG halfway through the stream
    malformed:0.1           one chunk halfway through is not valid JSON
    no_done:0.1             end the stream without `data: [DONE]`
    slow_headers:0.1:2s     wait ARG before sending the response headers
    refuse_for:5s           refuse connections for the first ARG after start (a loading server)

Each request draws once per fault kind, in the order given, from one generator
seeded with the simulator's seed; the first kind that hits applies.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from benchc.units import parse_duration

REQUEST_FAULTS = ("http_429", "http_500", "http_503", "reset", "stall", "malformed", "no_done",
                  "slow_headers")
WITH_ARG = ("stall", "slow_headers")


@dataclass(frozen=True)
class Fault:
    kind: str
    rate: float
    arg_s: float = 0.0


def parse_faults(items: list[str]) -> tuple[list[Fault], float]:
    """(per-request faults, refuse_for seconds); ValueError says what is wrong."""
    faults, refuse_for = [], 0.0
    for item in items:
        parts = item.split(":")
        kind = parts[0]
        if kind == "refuse_for":
            if len(parts) != 2:
                raise ValueError(f"fault {item!r}: write refuse_for:DURATION, e.g. refuse_for:5s")
            refuse_for = parse_duration(parts[1])
            continue
        if kind not in REQUEST_FAULTS:
            raise ValueError(f"unknown fault {kind!r}; known: {', '.join(REQUEST_FAULTS)}, refuse_for")
        want = 3 if kind in WITH_ARG else 2
        if len(parts) != want:
            example = f"{kind}:0.1:500ms" if kind in WITH_ARG else f"{kind}:0.1"
            raise ValueError(f"fault {item!r}: write {example}")
        rate = float(parts[1])
        if not 0 <= rate <= 1:
            raise ValueError(f"fault {item!r}: the rate is a probability between 0 and 1")
        faults.append(Fault(kind, rate, parse_duration(parts[2]) if kind in WITH_ARG else 0.0))
    return faults, refuse_for


class FaultPicker:
    def __init__(self, faults: list[Fault], seed: int):
        self.faults = faults
        self.rng = random.Random(seed ^ 0xFA17)

    def pick(self) -> Fault | None:
        hit = None
        for f in self.faults:
            if self.rng.random() < f.rate and hit is None:
                hit = f
        return hit
