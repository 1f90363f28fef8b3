"""Writes the example trace of specs/trace-replay.yaml: a synthetic Mooncake-format trace (no
third-party trace is copied; the format is Mooncake's published one).

    python specs/traces/make_traces.py            # rewrites specs/traces/mooncake-small.jsonl
    python specs/traces/make_traces.py -n 100000 -o /tmp/big.jsonl

The traffic is shaped like a chat service's: conversations arrive as a Poisson process whose
rate drifts (bursts), every conversation starts with one of a few system prompts (shared
blocks), and each of its turns re-sends the whole conversation so far (its hash ids extend
the previous turn's) plus a new message. Input lengths, turns and output lengths are drawn
from long-tailed (log-normal) distributions. Seeded: the same arguments write the same bytes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
from collections.abc import Iterator

HERE = os.path.dirname(os.path.abspath(__file__))
SMALL = os.path.join(HERE, "mooncake-small.jsonl")


def mooncake_rows(n: int, seed: int = 0, rate_rps: float = 4.0, block_size: int = 512,
                  system_prompts: int = 3) -> Iterator[dict]:
    """n Mooncake rows {timestamp (ms), input_length, output_length, hash_ids}, in time order."""
    rng = random.Random(seed)
    next_id = 0

    def grow(conv: dict, tokens: int) -> None:
        """The conversation is now `tokens` long: new ids for the blocks it has grown into (a
        partial last block keeps its id: its words are the first of that id's block)."""
        nonlocal next_id
        add = -(-tokens // block_size) - len(conv["ids"])
        conv["ids"] += range(next_id, next_id + add)
        next_id += max(0, add)
        conv["tokens"] = tokens

    systems = []
    for _ in range(system_prompts):  # 1 to 4 full blocks each
        k = rng.randint(1, 4)
        systems.append(list(range(next_id, next_id + k)))
        next_id += k
    t = 0.0
    live: list[dict] = []  # conversations with turns to come
    for _ in range(n):
        # a Poisson process whose rate wanders between a third and three times the mean
        t += rng.expovariate(rate_rps * math.exp(1.1 * math.sin(t / 20.0)))
        if live and rng.random() < 0.5:
            conv = rng.choice(live)
        else:
            ids = list(rng.choice(systems))
            conv = {"ids": ids, "tokens": len(ids) * block_size,
                    "turns": max(1, int(rng.lognormvariate(1.0, 0.8)))}
            live.append(conv)
        grow(conv, conv["tokens"] + max(1, int(rng.lognormvariate(6.0, 1.0))))  # the new message
        out = max(1, min(2048, int(rng.lognormvariate(5.0, 0.9))))
        yield {"timestamp": int(t * 1000), "input_length": conv["tokens"], "output_length": out,
               "hash_ids": list(conv["ids"])}
        grow(conv, conv["tokens"] + out)  # the reply: part of the next turn's input
        conv["turns"] -= 1
        if conv["turns"] <= 0:
            live.remove(conv)


def write(path: str, rows: Iterator[dict]) -> int:
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, separators=(", ", ": ")) + "\n")
            n += 1
    return n


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=240, help="requests (default 240: about a minute at 4/s)")
    ap.add_argument("-o", default=SMALL, help=f"output file (default {os.path.relpath(SMALL)})")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rate", type=float, default=4.0, help="mean conversation-turn rate, per second")
    args = ap.parse_args(argv)
    n = write(args.o, mooncake_rows(args.n, args.seed, args.rate))
    print(f"wrote {n} requests to {args.o}")


if __name__ == "__main__":
    main()
