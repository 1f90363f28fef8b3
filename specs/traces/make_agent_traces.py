"""Writes the example coding-agent trace of docs/traces.md: synthetic sessions in the Weka /
AgentX format (benchc/plan/agent_trace_gen.py: the AgentX manifest's distributions; no
third-party trace is copied), one .json per session.

    python specs/traces/make_agent_traces.py              # rewrites specs/traces/agentx-small/
    python specs/traces/make_agent_traces.py --agentx -n 1000 -o /tmp/agentx-1k   # full size

Seeded: the same arguments write the same bytes.
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

from benchc.plan.agent_trace_gen import AGENTX, SMALL, write_sessions

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE = os.path.join(HERE, "agentx-small")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=6, help="sessions (default 6)")
    ap.add_argument("-o", default=SAMPLE,
                    help=f"output directory, or a .jsonl file (default {os.path.relpath(SAMPLE)})")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--agentx", action="store_true",
                    help="the AgentX manifest's sizes (contexts to 200k tokens), not the small sample's")
    ap.add_argument("--relative", action="store_true", help="subagents' inner times from their spawn")
    args = ap.parse_args(argv)
    out = Path(args.o)
    if out.suffix != ".jsonl" and out.is_dir():
        shutil.rmtree(out)  # the same arguments write the same files, and no others
    write_sessions(out, AGENTX if args.agentx else SMALL, args.n, args.seed, args.relative)
    print(f"wrote {args.n} sessions to {out}")


if __name__ == "__main__":
    main()
