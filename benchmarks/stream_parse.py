"""Nanoseconds per SSE event in the stream parser alone (no sockets): the hot path every
transport runs (the own reader, aiohttp, the receive loop), on the compiled core and
optionally the Python twin.

    python benchmarks/stream_parse.py [--tokens 256] [--streams 2000] [--repeats 7] [--python]
    python benchmarks/stream_parse.py --tree /path/to/other/checkout   # its built benchc, to compare

Streams of --tokens one-token chat chunks shaped as vLLM writes them, fed to a fresh
StreamParser per stream, then its chunk gaps recorded (record_gaps, as the recorder does):
  content     every token a `content` delta (a model that does not reason)
  reasoning   the first half `reasoning_content` deltas, then `content` (a reasoning model)
  usage       content deltas with continuous usage (each chunk's usage object)
  non-ascii   content deltas of 3 CJK characters each (text whose UTF-8 the parser checks)
  tool-calls  a chat answer that is one tool call: its name, then `tool_calls` argument deltas
  responses   the Responses API as vLLM 0.32 streams it (tests/data/streams/vllm-responses.sse:
              response.created ... output_text.delta per token ... response.completed)
  messages    the Messages API as vLLM 0.32 streams it (tests/data/streams/vllm-messages.sse:
              message_start, content_block_delta text_delta per token, message_delta, message_stop)
Two feeds: `per-event` (one read per event, as a client that keeps up sees them) and
`coalesced` (the whole stream in one read). Prints the median over --repeats of ns per event
(each repeat runs every kind in turn) and its ratio to the content stream's, with the load
average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, __file__.rsplit("/", 2)[0])


def event(key: str, text: str | list, usage: dict | None = None) -> bytes:
    obj: dict = {"id": "chatcmpl-5d1f0c2b9c8e4a7f", "object": "chat.completion.chunk", "created": 1733000000,
                 "model": "MiniMaxAI/MiniMax-M2.5",
                 "choices": [{"index": 0, "delta": {key: text}, "logprobs": None, "finish_reason": None}]}
    if usage is not None:
        obj["usage"] = usage
    return b"data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


STREAMS = __file__.rsplit("/", 2)[0] + "/tests/data/streams/"


def captured(name: str, tokens: int) -> list[bytes]:
    """A captured stream with its per-token delta events repeated to `tokens`: the events before
    the first delta, `tokens` deltas shaped as the first (the Responses API's sequence_number
    counting on), the events after the last delta."""
    with open(STREAMS + name, "rb") as f:
        events = [e + b"\n\n" for e in f.read().split(b"\n\n") if e.strip()]
    deltas = [i for i, e in enumerate(events) if b'.delta"' in e or b'"content_block_delta"' in e]
    head, first, tail = events[:deltas[0]], events[deltas[0]], events[deltas[-1] + 1:]
    key = b'"delta":"' if b'"delta":"' in first else b'"text":"'
    before, rest = first.split(key, 1)
    after = rest.split(b'"', 1)[1]  # the captured texts hold no escaped quote
    body = []
    for i in range(tokens):  # the text as the chat kinds' (" w0", " w1", ...)
        e = before + key + f" w{i % 97}".encode() + b'"' + after
        if b'"sequence_number":' in e:
            a, z = e.split(b'"sequence_number":', 1)
            e = a + b'"sequence_number":' + str(len(head) + i).encode() + z[z.index(b","):]
        body.append(e)
    return head + body + tail


def stream(kind: str, tokens: int) -> list[bytes]:
    if kind == "responses":
        return captured("vllm-responses.sse", tokens)
    if kind == "messages":
        return captured("vllm-messages.sse", tokens)
    out = []
    for i in range(tokens):
        key = "reasoning_content" if kind == "reasoning" and i < tokens // 2 else "content"
        usage = {"prompt_tokens": 16, "total_tokens": 17 + i, "completion_tokens": i + 1}
        if kind != "usage":
            usage = None
        if kind == "tool-calls":
            fn = {"name": "get_weather", "arguments": ""} if i == 0 else {"arguments": f" w{i % 97}"}
            call = {"index": 0, "function": fn}
            if i == 0:
                call.update(id="chatcmpl-tool-1", type="function")
            out.append(event("tool_calls", [call]))  # type: ignore[arg-type]
            continue
        out.append(event(key, "漢字か" if kind == "non-ascii" else f" w{i % 97}", usage))
    out.append(b'data: {"id":"chatcmpl-5d1f0c2b9c8e4a7f","object":"chat.completion.chunk",'
               b'"created":1733000000,'
               b'"model":"MiniMaxAI/MiniMax-M2.5","choices":[],"usage":{"prompt_tokens":16,"total_tokens":'
               + str(16 + tokens).encode() + b',"completion_tokens":' + str(tokens).encode() + b"}}\n\n")
    out.append(b"data: [DONE]\n\n")
    return out


def per_event_ns(parser_cls, hist_cls, reads: list[bytes], streams: int, events: int) -> float:
    t = time.perf_counter_ns()
    for _ in range(streams):
        p = parser_cls()
        now = 1_000_000
        for r in reads:
            now += 1_000_003
            p.feed(r, now)
        p.close(now)
        p.record_gaps(hist_cls())
    return (time.perf_counter_ns() - t) / (streams * events)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--streams", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--python", action="store_true", help="also the Python twin (slow: fewer streams)")
    ap.add_argument("--tree", help="import benchc from this checkout (built in place) instead")
    a = ap.parse_args()
    if a.tree:
        sys.path.insert(0, a.tree)
    cores = []
    try:
        from benchc.client._stream_c import StreamParser as CParser
        from benchc.metrics._hdr_c import Histogram as CHist
        cores.append(("cython", CParser, CHist, a.streams))
    except ImportError:
        print("  (Cython core not built)")
    if a.python:
        from benchc.client._stream_py import StreamParser as PyParser
        from benchc.metrics._hdr_py import Histogram as PyHist
        cores.append(("python", PyParser, PyHist, max(1, a.streams // 20)))
    print(f"stream_parse: {a.tokens} tokens per stream, median of {a.repeats} (ns per event); "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at start")
    kinds = ("content", "reasoning", "usage", "non-ascii", "tool-calls", "responses", "messages")
    streams_of = {kind: stream(kind, a.tokens) for kind in kinds}
    times: dict = {}
    # the kinds in turn within each repeat, so that a busy machine's drift weighs on all alike;
    # the ratio to chat's content stream is of the medians
    for _ in range(a.repeats):
        for kind in kinds:
            events = streams_of[kind]
            for feed, reads in (("per-event", events), ("coalesced", [b"".join(events)])):
                for name, parser_cls, hist_cls, streams in cores:
                    times.setdefault((kind, feed, name), []).append(
                        per_event_ns(parser_cls, hist_cls, reads, streams, len(events)))
    for (kind, feed, name), ts in times.items():
        ratio = statistics.median(ts) / statistics.median(times[("content", feed, name)])
        print(f"  {kind:9s} {feed:9s} {name:6s} {statistics.median(ts):8.1f} ns/event  "
              f"(min {min(ts):.1f})  {ratio:4.2f}x content")
    print(f"  load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")


if __name__ == "__main__":
    main()
