"""vLLM's own `vllm bench serve` beside benchc's vLLM-style spec, against one simulator: the same
prompts, output lengths, concurrency or rate; each figure of vLLM's JSON beside benchc's export
of it (`benchc export --format vllm`), and each pair's difference.

One `benchc sim` (loopback) serves both. The prompts are written once to a ShareGPT-layout
file that both read as that dataset (vLLM's `--dataset-name sharegpt --sharegpt-output-len`,
benchc's `sharegpt: {output_tokens}`; vLLM's `custom` JSON lines need pandas, which the vLLM
install lacks): the first human turn is the user message of an `openai-chat` request, every
request asks for OUTPUT tokens with ignore_eos, so the simulator answers both alike (vLLM
shuffles the file; the set of prompts is the same). Each side runs REPEATS
times, interleaved (vLLM, benchc, vLLM, benchc, ...), so the run-to-run spread of each side is
printed beside the difference: a difference inside that spread is noise, one beyond it is a
difference of definition or clock (docs/results.md's table of definitions; benchc stamps a
read when the kernel received it, vLLM when its event loop got to the chunk).

Needs vLLM (`vllm bench serve`; by default the shared install of the lead's vLLM start,
/tmp/vllmserver) and a tokenizer folder for it. Open-loop arrivals are each side's own Poisson
draws at the same rate (vLLM's seed is not benchc's): the same process, not the same instants.

    python benchmarks/vllm_parity.py --requests 100 --concurrency 4 --rate 6 [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
VLLM = "/tmp/vllmserver/venv/bin/python /tmp/vllmserver/vllm_cli.py"
TOKENIZER = "/tmp/vllmserver/model"
WORDS = ("time person year way day thing man world life hand part child eye woman place work week "
         "case point government company number group problem fact").split()

# vLLM's figures as its JSON names them, shown in this order
FIGURES = ("completed", "failed", "duration", "total_input_tokens", "total_output_tokens",
           "request_throughput", "output_throughput", "total_token_throughput",
           *(f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el")
             for s in ("mean", "median", "p99", "std")))

SPEC = """\
version: 1
name: vllm-parity
target:
  base_url: {url}
  model: parity-model
  api: chat
workload:
  dataset:
    sharegpt: {{path: {prompts}, output_tokens: {output}}}
  sampling: {{max_tokens: {output}, ignore_eos: true}}
load:
  sweep:
    {load}
  requests: {requests}
output:
  path: {out}
"""


def start_sim() -> tuple[subprocess.Popen, str]:
    sim = subprocess.Popen([sys.executable, "-m", "benchc", "sim", "--port", "0", "--model", "parity-model"],
                           stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert sim.stdout is not None
    url = sim.stdout.readline().split("listening on ")[1].split()[0]
    return sim, url


def write_prompts(path: str, n: int, words: int, seed: int) -> None:
    """N conversations of a fresh prompt (numbered: no two alike, no prefix-cache hits) and a reply."""
    rng = random.Random(seed)
    convs = [{"id": str(i), "conversations": [
        {"from": "human", "value": f"{i} " + " ".join(rng.choice(WORDS) for _ in range(words))},
        {"from": "gpt", "value": " ".join(rng.choice(WORDS) for _ in range(8))}]} for i in range(n)]
    with open(path, "w") as f:
        json.dump(convs, f)


def run_vllm(vllm: str, url: str, prompts: str, n: int, output: int, load: dict, out_dir: str,
             name: str) -> dict:
    base = url.removesuffix("/v1")
    argv = [*shlex.split(vllm), "bench", "serve", "--backend", "openai-chat", "--base-url", base,
            "--endpoint", "/v1/chat/completions", "--model", "parity-model", "--tokenizer", TOKENIZER,
            "--dataset-name", "sharegpt", "--dataset-path", prompts, "--sharegpt-output-len", str(output),
            "--num-prompts", str(n), "--ignore-eos", "--save-result", "--save-detailed",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
            "--result-dir", out_dir, "--result-filename", name, "--disable-tqdm", "--seed", "0"]
    if "concurrency" in load:
        argv += ["--max-concurrency", str(load["concurrency"])]
    else:
        argv += ["--request-rate", str(load["rate"]), "--burstiness", "1.0"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        sys.exit(f"vllm bench serve failed ({done.returncode}):\n{done.stderr[-3000:]}")
    with open(os.path.join(out_dir, name)) as f:
        return json.load(f)


def run_benchc(url: str, prompts: str, n: int, output: int, load: dict, out_dir: str, name: str) -> dict:
    sweep = (f"concurrency: [{load['concurrency']}]" if "concurrency" in load
             else f"rate: [{load['rate']}]\n    arrival: poisson")
    spec = os.path.join(out_dir, name + ".yaml")
    result = os.path.join(out_dir, name + ".json")
    with open(spec, "w") as f:
        f.write(SPEC.format(url=url, prompts=prompts, output=output, load=sweep, requests=n, out=result))
    bench = [sys.executable, "-m", "benchc"]
    subprocess.run([*bench, "run", spec, "--quiet"], check=True, cwd=REPO, timeout=900)
    done = subprocess.run([*bench, "export", result, "--format", "vllm"], check=True, cwd=REPO,
                          capture_output=True, text=True)
    return json.loads(done.stdout.splitlines()[0])


def spread(values: list[float]) -> str:
    return f"{(max(values) - min(values)):.3g}" if len(values) > 1 else "-"


def table(label: str, vllm_runs: list[dict], benchc_runs: list[dict]) -> None:
    print(f"\n{label}  (vLLM runs: {len(vllm_runs)}, benchc runs: {len(benchc_runs)}; values are each "
          "side's mean, spread = max - min across its runs)")
    header = (f"{'figure':24} {'vllm':>12} {'benchc':>12} {'benchc-vllm':>12} {'vllm spread':>12} "
              f"{'benchc spread':>13}")
    print(header)
    print("-" * len(header))
    for key in FIGURES:
        v = [r[key] for r in vllm_runs if isinstance(r.get(key), int | float)]
        b = [r[key] for r in benchc_runs if isinstance(r.get(key), int | float)]
        if not v or not b:
            print(f"{key:24} {'-' if not v else f'{statistics.mean(v):.4g}':>12} "
                  f"{'-' if not b else f'{statistics.mean(b):.4g}':>12}")
            continue
        vm, bm = statistics.mean(v), statistics.mean(b)
        print(f"{key:24} {vm:12.4g} {bm:12.4g} {bm - vm:+12.4g} {spread(v):>12} {spread(b):>13}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--rate", type=float, default=6.0)
    ap.add_argument("--words", type=int, default=40, help="words per prompt")
    ap.add_argument("--output", type=int, default=32, help="output tokens per request")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--vllm", default=VLLM, help="the command that is vLLM's CLI")
    args = ap.parse_args()
    sim, url = start_sim()
    try:
        with tempfile.TemporaryDirectory() as d:
            prompts = os.path.join(d, "prompts.json")
            write_prompts(prompts, args.requests, args.words, seed=1)
            for label, load in ((f"closed loop C={args.concurrency}", {"concurrency": args.concurrency}),
                                (f"Poisson {args.rate:g}/s", {"rate": args.rate})):
                vr, br = [], []
                for i in range(args.repeats):
                    vr.append(run_vllm(args.vllm, url, prompts, args.requests, args.output, load, d,
                                       f"v{label[:6]}{i}.json"))
                    br.append(run_benchc(url, prompts, args.requests, args.output, load, d,
                                         f"b{label[:6]}{i}"))
                table(label, vr, br)
    finally:
        sim.terminate()
        sim.wait(timeout=30)


if __name__ == "__main__":
    main()
