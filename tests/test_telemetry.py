"""Server telemetry by kind: the /metrics texts of vLLM, SGLang, llama.cpp and TGI
(tests/data/metrics, written from each server's documented names) each give the point's
figures with token agreement; and end to end, the simulator's /metrics under each
server's names gives them in a real run."""

from __future__ import annotations

import os

import pytest

from benchc.cli import main
from benchc.results.document import read
from benchc.run.telemetry import parse_prometheus, server_summary
from tests.conftest import REPO
from tests.simrun import write_spec

DATA = os.path.join(REPO, "tests", "data", "metrics")

# (file prefix, kind, generation, prompt, cached, running, waiting): docs/running.md's table
EXPECTED = [
    ("vllm", "vllm", 4096, 4096, 1536, 5, 1),
    ("sglang", "sglang", 2048, 2000, 600, 6, 2),
    ("llamacpp", "llama.cpp", 512, 448, 64, 8, 3),
    ("tgi", "tgi", 512, 1024, None, 8, 4),
]


def text(name: str) -> str:
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        return f.read()


def pair(prefix: str) -> tuple[dict, dict]:
    return parse_prometheus(text(f"{prefix}.before.prom")), parse_prometheus(text(f"{prefix}.after.prom"))


@pytest.mark.parametrize("prefix,kind,gen,prompt,cached,running,waiting", EXPECTED,
                         ids=[e[0] for e in EXPECTED])
def test_each_servers_metrics_give_the_points_figures(prefix, kind, gen, prompt, cached, running, waiting):
    before, after = pair(prefix)
    assert before["kind"] == after["kind"] == kind
    s = server_summary(before, after, [after], benchc_tokens=gen, benchc_input_tokens=prompt)
    assert s["available"] is True and s["kind"] == kind
    assert s["generation_tokens_delta"] == gen and s["prompt_tokens_delta"] == prompt
    assert s["token_agreement"] == {"server": gen, "benchc": gen, "relative_difference": 0.0}
    assert s["prompt_token_agreement"]["relative_difference"] == 0.0
    assert s.get("cached_prompt_tokens_delta") == cached
    assert s["running"] == {"mean": running, "max": running, "samples": 1}
    assert s["waiting"] == {"mean": waiting, "max": waiting, "samples": 1}
    # a client that received fewer tokens than the server generated is a finding, not averaged away
    short = server_summary(before, after, [], benchc_tokens=gen // 2)
    assert short["token_agreement"]["relative_difference"] == -0.5


def test_kind_specific_figures_and_their_meaning():
    v = server_summary(*pair("vllm"), [pair("vllm")[1]], 4096)
    assert v["prefix_cache_hit_rate"] == 0.375  # 1536 hit of 4096 queried tokens, both engines summed
    assert v["kv_cache_usage"]["mean"] == 0.2  # a ratio is averaged over engines, not summed
    lc = server_summary(*pair("llamacpp"), [], 512)
    # llama.cpp's prompt counter leaves out cached tokens: both parts are kept, their sum is the prompt
    assert lc["prompt_tokens_processed_delta"] == 384 and lc["cached_prompt_tokens_delta"] == 64
    assert "running" not in lc  # no sample during the point: no figure, rather than a made-up one
    unknown = parse_prometheus("# TYPE http_requests_total counter\nhttp_requests_total 3\n")
    assert unknown == {"kind": None}
    assert server_summary(unknown, unknown, [], 1)["available"] is False
    assert server_summary(None, unknown, [], 1) == {"available": False}


@pytest.mark.slow  # a run per server kind
@pytest.mark.parametrize("names,kind", [("vllm", "vllm"), ("sglang", "sglang"), ("llamacpp", "llama.cpp"),
                                        ("tgi", "tgi")])
def test_a_run_reads_each_servers_names_from_the_simulator(tmp_path, names, kind):
    spec = write_spec(tmp_path, sweep="    concurrency: [2]", out=8, extra="  requests: 4",
                      sim=f", metrics_names: {names}")
    assert main(["run", spec, "--quiet"]) == 0
    p = read(str(tmp_path / "r.json"))["points"][0]
    server = p["telemetry"]["server"]
    assert server["available"] is True and server["kind"] == kind
    assert server["token_agreement"] == {"server": 32, "benchc": 32, "relative_difference": 0.0}
    assert server["prompt_token_agreement"]["server"] == p["tokens"]["input"]


def test_a_small_gauge_keeps_its_digits_and_its_mean_never_exceeds_its_max():
    # a real vLLM 0.32's KV-cache usage on a tiny model (tests/test_real_vllm.py): three
    # samples of 0.000183; rounded to 4 places the mean read 0.0002, above its max
    before, after = pair("vllm")
    during = [{**after, "kv_cache_usage": v} for v in (0.00018311105685597795, 0.000183111, 0.00018311)]
    kv = server_summary(before, after, during, 4096)["kv_cache_usage"]
    assert kv["max"] == 0.00018311105685597795 and kv["samples"] == 3
    assert 0.00018311 <= kv["mean"] <= kv["max"] and kv["mean"] != 0.0002
    same = [{**after, "kv_cache_usage": 0.0001831115}] * 2  # a mean that 6 digits would round up
    kv = server_summary(before, after, same, 4096)["kv_cache_usage"]
    assert kv["mean"] == kv["max"] == 0.0001831115
    thirds = [{**after, "running": v} for v in (1, 1, 2)]
    assert server_summary(before, after, thirds, 4096)["running"] == {"mean": 1.33333, "max": 2, "samples": 3}
