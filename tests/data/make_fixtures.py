"""How the result fixtures in this folder were made (kept so they can be made again).

    python tests/data/make_fixtures.py

Runs one small spec against the simulator's two presets (same workload: compare
minimax vs kimi), and twice more on the minimax preset as two shards of one plan
(for merge), each shard with its per-request records. A fixture is kept for every
result version ever written; these are schema_version 1.

result-v1-run-bound.json and its .requests.jsonl are not made here: per-request records of
version 1 as written last (each naming its run_id, before requests_version), from a run of
benchc at stop 47 (concurrency 1 and 2, 3 requests of 32 words in and 4 tokens out on
minimax-m2.5-tp4, seed 7), kept as it wrote them; a run now writes version 2.
"""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = """\
version: 1
name: fixture
target:
  sim: {{preset: {preset}}}
  model: fixture-model
workload:
  dataset:
    random: {{input_tokens: 64, output_tokens: 32, seed: 7}}
load:
  warmup: {{requests: 1}}
  sweep:
    concurrency: [1, 2, 4]
  requests: 8
output:
  path: unused.json
  requests: {requests}
"""


def run(preset: str, out: str, requests: bool) -> None:
    spec = os.path.join(HERE, "fixture-spec.yaml")
    with open(spec, "w") as f:
        f.write(SPEC.format(preset=preset, requests="true" if requests else "false"))
    try:
        subprocess.run([sys.executable, "-m", "benchc", "run", spec, "--quiet", "--force", "--out",
                        os.path.join(HERE, out)], check=True)
    finally:
        os.unlink(spec)


if __name__ == "__main__":
    run("minimax-m2.5-tp4", "result-v1-minimax.json", False)
    run("kimi-k2.5-nvfp4-tp8", "result-v1-kimi.json", False)
    run("minimax-m2.5-tp4", "result-v1-shard-a.json", True)
    run("minimax-m2.5-tp4", "result-v1-shard-b.json", True)
