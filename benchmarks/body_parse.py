"""The cost of reading a non-streamed embeddings answer (the stream parser's body mode: the
skimmer, then one interpretation of the skeleton), beside json.loads of the whole body, and
what each holds. No sockets: the parser alone, as every client path runs it.

    python benchmarks/body_parse.py [--inputs 8] [--dim 1024] [--answers 200] [--repeats 7] [--python]

Answers shaped as vLLM writes them (`data` of --inputs vectors of --dim floats, `usage`
last), fed to a fresh StreamParser(body=True) per answer in 64 KiB reads (a socket read's
size on the receive loop), then closed. Prints the median over --repeats of MB/s and us per
answer, the answer's and the skeleton's bytes, and the same for json.loads(body) (which
holds the whole decoded answer, vectors included).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time

sys.path.insert(0, __file__.rsplit("/", 2)[0])

READ = 64 * 1024


def answer(inputs: int, dim: int, seed: int = 0) -> bytes:
    rng = random.Random(seed)
    data = [{"index": i, "object": "embedding",
             "embedding": [round(rng.uniform(-0.1, 0.1), 8) for _ in range(dim)]} for i in range(inputs)]
    return json.dumps({"id": "embd-5d1f0c2b9c8e4a7f", "object": "list", "created": 1733000000,
                       "model": "intfloat/e5-mistral-7b-instruct", "data": data,
                       "usage": {"prompt_tokens": 8 * inputs, "total_tokens": 8 * inputs,
                                 "completion_tokens": 0, "prompt_tokens_details": None}},
                      separators=(",", ":")).encode()


def parse_s(parser_cls, reads: list[bytes], answers: int) -> float:
    t = time.perf_counter_ns()
    for _ in range(answers):
        p = parser_cls(body=True)
        for i, r in enumerate(reads):
            p.feed(r, i)
        p.close(len(reads))
        assert p.results > 0 and p.usage_prompt > 0
    return (time.perf_counter_ns() - t) / 1e9


def loads_s(body: bytes, answers: int) -> float:
    t = time.perf_counter_ns()
    for _ in range(answers):
        json.loads(body)
    return (time.perf_counter_ns() - t) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--inputs", type=int, default=8)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--answers", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--python", action="store_true", help="also the pure-Python twin")
    a = ap.parse_args()
    from benchc.client import _body_py, _stream_py

    cores = []
    try:
        from benchc.client import _stream_c

        cores.append(("compiled", _stream_c.StreamParser))
    except ImportError:
        print("the compiled core is not built: python setup.py build_ext --inplace", file=sys.stderr)
    if a.python or not cores:
        cores.append(("python", _stream_py.StreamParser))
    body = answer(a.inputs, a.dim)
    reads = [body[i:i + READ] for i in range(0, len(body), READ)]
    skim = _body_py.BodySkim()
    skim.feed(body)
    mb = len(body) / 1e6
    print(f"answer: {a.inputs} vectors of {a.dim} floats, {len(body):,} bytes in {len(reads)} reads; "
          f"skeleton kept: {len(skim.kept):,} bytes")
    print(f"{'reader':<22} {'MB/s':>9} {'us/answer':>10}   (median of {a.repeats})")
    runs = [("json.loads (whole)", lambda: loads_s(body, a.answers))]
    runs += [(f"body mode, {name}", lambda cls=cls: parse_s(cls, reads, a.answers)) for name, cls in cores]
    for name, fn in runs:
        secs = statistics.median(fn() for _ in range(a.repeats))
        print(f"{name:<22} {mb * a.answers / secs:>9.1f} {secs / a.answers * 1e6:>10.1f}")


if __name__ == "__main__":
    main()
