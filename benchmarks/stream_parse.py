"""Nanoseconds per SSE event in the stream parser alone (no sockets, no server), so that a
change to the parser shows its own cost: the compiled core, and the Python twin with
--python. Streams of 256-event responses, vLLM's chunk shape:

- per-token   one event per feed (a real server's one write per token)
- coalesced   a whole response per feed (reads that carry many events)
- non-ascii   per-token, each token's text 3 CJK characters (UTF-8 the parser checks)

    python benchmarks/stream_parse.py [--repeats 7] [--responses 400] [--python]
    python benchmarks/stream_parse.py --tree /path/to/other/checkout   # its built benchc

Prints the median over the repeats of ns per event (process CPU time) per stream.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time

TOKENS = 256


def response(text: str) -> list[bytes]:
    head = {"id": "chatcmpl-0123456789abcdef", "object": "chat.completion.chunk", "created": 1733000000,
            "model": "MiniMaxAI/MiniMax-M2.5"}
    events = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                    "logprobs": None, "finish_reason": None}]}]
    events += [{**head, "choices": [{"index": 0, "delta": {"content": text}, "logprobs": None,
                                     "finish_reason": None}]} for _ in range(TOKENS - 2)]
    events.append({**head, "choices": [{"index": 0, "delta": {}, "logprobs": None,
                                        "finish_reason": "length"}],
                   "usage": {"prompt_tokens": 512, "completion_tokens": TOKENS - 2, "total_tokens": 766}})
    wire = [b"data: " + json.dumps(e, ensure_ascii=False).encode() + b"\n\n" for e in events]
    return wire + [b"data: [DONE]\n\n"]


def ns_per_event(parser_cls, feeds: list[bytes], responses: int) -> float:
    t = time.process_time_ns()
    for r in range(responses):
        p = parser_cls()
        for i, f in enumerate(feeds):
            p.feed(f, r * 1_000_000 + i)
        p.close(r * 1_000_000 + len(feeds))
    return (time.process_time_ns() - t) / (responses * (TOKENS + 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--responses", type=int, default=400)
    ap.add_argument("--python", action="store_true", help="the pure-Python twin instead of the compiled core")
    ap.add_argument("--tree", help="import benchc from this checkout (built in place) instead")
    args = ap.parse_args()
    if args.tree:
        sys.path.insert(0, args.tree)
    mod = importlib.import_module("benchc.client._stream_py" if args.python else "benchc.client._stream_c")
    per_token = response(" x")
    streams = {"per-token": per_token, "coalesced": [b"".join(per_token)], "non-ascii": response("漢字か")}
    results: dict[str, list[float]] = {k: [] for k in streams}
    for _ in range(args.repeats):  # interleaved, so that a busy spell hits every stream alike
        for name, feeds in streams.items():
            results[name].append(ns_per_event(mod.StreamParser, feeds, args.responses))
    print(f"stream_parse: {mod.__file__}, {args.repeats} repeats x {args.responses} responses of "
          f"{TOKENS} events")
    for name, values in results.items():
        print(f"  {name:10s} {statistics.median(values):8.1f} ns/event (min {min(values):.1f}, "
              f"max {max(values):.1f})")


if __name__ == "__main__":
    main()
