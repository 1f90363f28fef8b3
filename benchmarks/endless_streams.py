"""What one endless answer costs the client in memory (issue 29, class 2), on every HTTP path
and both cores: the growth of the client process's peak resident size (VmHWM) while it reads

- `tokens`: an endless stream of one-token chat chunks, written as fast as the client takes
  them, for `--seconds` (the request is then cancelled);
- `line`: one SSE line that never ends (the parser refuses it at 1 MiB: oversized_event).

    python benchmarks/endless_streams.py [--seconds 20] [--repeats 3] [--case tokens|line]
                                         [--repo DIR]

The server (tests/endless.py) runs in this process; each read runs in a client process of its
own (`python -m tests.endless`, from `--repo`: another checkout's benchc measured with this
harness, to compare before and after). Prints per case, path and core the median over the
repeats of the growth (KiB) and of the text chunks read.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.endless import EndlessServer  # noqa: E402

PATHS = ["native-asyncio", "native-rx-py", "native-rx-c", "aiohttp"]


def read_one(repo: str, path: str, url: str, core: str, seconds: float) -> dict:
    env = dict(os.environ)
    if core == "py":
        env["BENCHC_NO_EXTENSIONS"] = "1"
    out = subprocess.run([sys.executable, "-m", "tests.endless", path, url, "--seconds", str(seconds)],
                         cwd=repo, env=env, capture_output=True, text=True, timeout=seconds + 600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--case", choices=["tokens", "line"], action="append")
    ap.add_argument("--core", choices=["c", "py"], action="append")
    ap.add_argument("--path", choices=PATHS, action="append")
    ap.add_argument("--repo", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    a = ap.parse_args()
    print(f"{'case':7} {'path':15} {'core':5} {'peak RSS growth KiB':>20} {'text chunks':>12}  (medians of "
          f"{a.repeats}, {a.seconds:g} s each)")
    for case in a.case or ["tokens", "line"]:
        with EndlessServer(case) as srv:
            for core in a.core or ["c", "py"]:
                for path in a.path or PATHS:
                    if core == "py" and path == "native-rx-c":
                        continue  # the compiled receive loop runs the compiled parser only
                    runs = [read_one(a.repo, path, srv.url, core, a.seconds) for _ in range(a.repeats)]
                    grew = statistics.median(r["grew_kib"] for r in runs)
                    chunks = statistics.median(r["text_chunks"] for r in runs)
                    errors = sorted({str(r["error"]) for r in runs})
                    print(f"{case:7} {path:15} {core:5} {grew:>20,.0f} {chunks:>12,.0f}  {','.join(errors)}",
                          flush=True)


if __name__ == "__main__":
    main()
