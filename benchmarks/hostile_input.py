"""What refusing hostile input and scrubbing secrets cost (issue 15):

- `benchc validate` in-process on a YAML billion laughs (9 levels of 9 aliases), a spec
  nested 900 deep, `requests: 1e9`, and a 10^7-combination matrix: wall time to the
  refusal and the tracemalloc peak (before the bounds: 2.5 GB then MemoryError, a
  RecursionError, and minutes);
- the secret scrubber on 200,000 per-request JSON lines (~24 MB) holding no secret, one
  echoed secret, and one on every line (a gateway that refused every request and echoed
  its headers): time to scrub, after the measurement.

    python benchmarks/hostile_input.py [--repeats 5]

Prints each case's median of the repeats.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import tempfile
import time
import tracemalloc

from benchc.cli import main
from benchc.redact import Scrubber

BASE = """\
version: 1
name: t
target: {base_url: "http://localhost:8000/v1", model: m}
workload:
  dataset:
    random: {input_tokens: 16, output_tokens: 8}
load:
  sweep: {concurrency: [1, 2]}
  requests: 4
"""


def bomb() -> str:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    return "\n".join(lines) + "\n"


SPECS = {
    "billion laughs": bomb(),
    "nested 900 deep": "version: 1\nx: " + "[" * 900 + "]" * 900 + "\n",
    "requests: 1e9": BASE.replace("requests: 4", "requests: 1000000000"),
    "10^7-combination matrix": BASE + "matrix:\n" + "".join(
        f"  a{i}: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n" for i in range(7)),
}


def refuse(text: str) -> tuple[float, int, int]:
    """(seconds, peak bytes, exit code) of `benchc validate` on `text`."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "s.yaml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        tracemalloc.start()
        t0 = time.perf_counter()
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            code = main(["validate", path])
        seconds = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return seconds, peak, code


def records(detail: str | None, every: bool) -> str:
    return "".join(json.dumps({"id": f"r{i}", "point": "c=1", "t0_ns": 10**12 + i, "error_detail":
                               detail if every or i == 7 else None}) + "\n" for i in range(200_000))


def main_() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    refuse(BASE)  # imports, outside the measurement
    for name, text in SPECS.items():
        runs = [refuse(text) for _ in range(args.repeats)]
        print(f"{name:>26}: exit {runs[0][2]}, median {statistics.median(r[0] for r in runs) * 1e3:7.1f} ms, "
              f"peak {statistics.median(r[1] for r in runs) / 1e6:6.1f} MB")
    s = Scrubber(["sk-apikey-0001", "hf_token_0003"])
    echoed = "401 unauthorized, you sent Authorization: Bearer sk-apikey-0001"
    for name, text in (("no secret", records(None, False)), ("one echoed secret", records(echoed, False)),
                       ("a secret on every line", records(echoed, True))):
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            out = s.json(text)
            times.append(time.perf_counter() - t0)
        assert "sk-apikey-0001" not in out
        print(f"scrub {len(text) / 1e6:.0f} MB, {name:>22}: median {statistics.median(times) * 1e3:7.1f} ms")


if __name__ == "__main__":
    main_()
