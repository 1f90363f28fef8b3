"""`benchc run` against the simulator, for tests: a spec written for a run (write_spec), `benchc
sim` as a subprocess with a trace file (Sim), and the two together (run_on_sim)."""

import json
import signal
import subprocess
import sys

from benchc.cli import main
from benchc.results.document import read

SPEC = """\
version: 1
name: t
target:
  sim: {{preset: minimax-m2.5-tp4{sim}}}
  model: MiniMaxAI/MiniMax-M2.5{target}
workload:
  dataset:
    random: {{input_tokens: 32, output_tokens: {out}}}
load:
  warmup: {{requests: 1}}
  sweep:
{sweep}
{extra}
output:
  path: {path}
  requests: true
"""


def write_spec(tmp_path, sweep="    concurrency: [1, 4]", out=24, extra="  requests: 8", sim="", target=""):
    f = tmp_path / "s.yaml"
    f.write_text(SPEC.format(sweep=sweep, out=out, extra=extra, path=str(tmp_path / "r.json"), sim=sim,
                             target=target))
    return str(f)


class Sim:
    """`benchc sim` as a real subprocess with a trace file, for --base-url runs."""

    def __init__(self, tmp_path, *args):
        self.trace = tmp_path / "trace.jsonl"
        self.p = subprocess.Popen([sys.executable, "-m", "benchc", "sim", "--port", "0", "--trace",
                                   str(self.trace), *args], stdout=subprocess.PIPE, text=True)
        self.url = self.p.stdout.readline().split("listening on ")[1].split()[0]

    def records(self):
        return {r["id"]: r for r in map(json.loads, self.trace.read_text().splitlines())}

    def close(self):
        self.p.send_signal(signal.SIGTERM)
        self.p.wait(timeout=10)
        self.p.stdout.close()


def requests_of(tmp_path):
    return [json.loads(x) for x in (tmp_path / "r.requests.jsonl").read_text().splitlines()]


def run_on_sim(tmp_path, *sim_args, run_args=(), **spec) -> tuple[dict, dict]:
    """Runs a spec (write_spec(tmp_path, **spec)) against `benchc sim` on the MiniMax TP=4 preset
    (with `sim_args`), started for it and closed after: the run must exit 0. Returns the result
    document and the simulator's trace records by request id."""
    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4", *sim_args)
    try:
        path = write_spec(tmp_path, **spec)
        assert main(["run", path, "--base-url", sim.url, "--quiet", *run_args]) == 0
    finally:
        sim.close()
    return read(str(tmp_path / "r.json")), sim.records()
