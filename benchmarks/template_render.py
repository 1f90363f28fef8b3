"""The cost of a chat template's bounds, per render, on the thread that builds request bodies
(the event loop): benchc's bounded render (tokenizer/_template_bounds.py: the watchdog's
registration, output counted piece by piece, `+ * ** %`, calls and filters checked) against
the plain Jinja sandbox it replaces, and against the alternative that was not taken, a
worker process per run rendering over a pipe (the loop waits for the round trip).

Medians of --repeats rounds of --renders renders each, of a DeepSeek-style template (system
prompts gathered with `+`, roles, `trim`) over a system prompt and a user turn of
--words words, as the calling thread's CPU time and as wall time; the ratios to the plain
sandbox. On a shared machine wall time measures the neighbours too: the in-process ways are
judged by CPU time, the worker by wall time (the loop waits for its answer).

    python benchmarks/template_render.py [--renders 2000] [--repeats 7] [--words 800]
"""

from __future__ import annotations

import argparse
import json
import statistics
import struct
import subprocess
import sys
import time

TEMPLATE = """\
{{ bos_token }}
{%- set ns = namespace(system='') %}
{%- for m in messages %}
    {%- if m['role'] == 'system' %}
        {%- set ns.system = ns.system + m['content'] + '\\n' %}
    {%- endif %}
{%- endfor %}
{{ ns.system }}
{%- for m in messages %}
    {%- if m['role'] == 'user' %}
<｜User｜>{{ m['content'] }}
    {%- elif m['role'] == 'assistant' %}
<｜Assistant｜>{{ m['content'] | trim }}<｜end▁of▁sentence｜>
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
<｜Assistant｜>
{%- endif %}
"""

WORKER = """
import json, struct, sys
from benchc.tokenizer.chat_template import ChatTemplate
t = ChatTemplate(sys.argv[1], "bench", {"bos_token": "<s>"})
r, w = sys.stdin.buffer, sys.stdout.buffer
while h := r.read(4):
    m = json.loads(r.read(struct.unpack("<I", h)[0]))
    out = t.render(m).encode()
    w.write(struct.pack("<I", len(out)) + out)
    w.flush()
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--renders", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--words", type=int, default=800)
    args = ap.parse_args()

    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from benchc.tokenizer.chat_template import ChatTemplate

    messages = [{"role": "system", "content": "Answer briefly."},
                {"role": "user", "content": "word " * args.words}]
    bounded = ChatTemplate(TEMPLATE, "bench", {"bos_token": "<s>"})
    plain = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(TEMPLATE)
    variables = {"messages": messages, "tools": None, "documents": None, "add_generation_prompt": True,
                 "bos_token": "<s>"}
    worker = subprocess.Popen([sys.executable, "-c", WORKER, TEMPLATE], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
    assert worker.stdin is not None and worker.stdout is not None

    def remote(m: list) -> str:
        b = json.dumps(m).encode()
        worker.stdin.write(struct.pack("<I", len(b)) + b)  # type: ignore[union-attr]
        worker.stdin.flush()  # type: ignore[union-attr]
        n = struct.unpack("<I", worker.stdout.read(4))[0]  # type: ignore[union-attr]
        return worker.stdout.read(n).decode()  # type: ignore[union-attr]

    ways = {"plain sandbox": lambda: plain.render(**variables),
            "bounded (benchc)": lambda: bounded.render(messages), "worker process": lambda: remote(messages)}
    first = {name: f() for name, f in ways.items()}
    assert len(set(first.values())) == 1, "the three ways render different text"
    cpu: dict[str, list[float]] = {name: [] for name in ways}
    wall: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.repeats):
        for name, f in ways.items():  # round-robin: a busy neighbour hits each alike
            c0, w0 = time.thread_time(), time.perf_counter()
            for _ in range(args.renders):
                f()
            cpu[name].append((time.thread_time() - c0) / args.renders * 1e6)
            wall[name].append((time.perf_counter() - w0) / args.renders * 1e6)
    worker.stdin.close()
    worker.wait()
    chars = len(first["plain sandbox"])
    print(f"{args.renders} renders x {args.repeats} repeats, {chars:,} characters each; per render, medians "
          "(min..max)")
    print("the calling thread's CPU time (what rendering in-process costs the event loop; a busy "
          "machine does not inflate it), and wall time (what the loop waits for the worker)")
    base_cpu, base_wall = statistics.median(cpu["plain sandbox"]), statistics.median(wall["plain sandbox"])
    for name in ways:
        c, w = statistics.median(cpu[name]), statistics.median(wall[name])
        print(f"{name:>18}: CPU {c:6.1f} us ({min(cpu[name]):.1f}..{max(cpu[name]):.1f}) "
              f"{c / base_cpu:.2f} x; wall {w:6.1f} us ({min(wall[name]):.1f}..{max(wall[name]):.1f}) "
              f"{w / base_wall:.2f} x")


if __name__ == "__main__":
    main()
