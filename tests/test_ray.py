"""Distributed runs on a local Ray cluster (two worker processes) against the simulator."""

import threading

import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # a Ray cluster in worker processes

from benchc.cli import main  # noqa: E402
from benchc.metrics._hdr import Histogram  # noqa: E402
from benchc.plan.model import Step  # noqa: E402
from benchc.plan.search import UNTRUSTED  # noqa: E402
from benchc.results.document import read  # noqa: E402
from benchc.run.ray_backend import shard_steps, split  # noqa: E402
from benchc.sim.model import make_config  # noqa: E402
from tests.test_search import predicted_tpot_p50_ms, predicted_within, write  # noqa: E402

SPEC = """\
version: 1
name: ray
target:
  sim: {{preset: minimax-m2.5-tp4}}
  model: m
workload:
  dataset:
    random: {{input_tokens: 32, output_tokens: {out}}}
load:
  warmup: {{requests: 0}}
  sweep: {{{sweep}}}
  requests: {requests}
"""


@pytest.fixture(scope="module", autouse=True)
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def spec(tmp_path, sweep="concurrency: [4]", out=48, requests=16):
    f = tmp_path / "ray.yaml"
    f.write_text(SPEC.format(sweep=sweep, out=out, requests=requests))
    return str(f)


def test_splitting_rules():
    assert split(256, 4) == [64, 64, 64, 64] and split(7, 3) == [3, 2, 2] and split(None, 2) == [None, None]
    closed = shard_steps(Step("load", 0, "c=5", concurrency=5, requests=11), 2)
    assert [(s.concurrency, s.requests) for s in closed] == [(3, 6), (2, 5)]
    opened = shard_steps(Step("load", 0, "r", rate_rps=10.0, requests=30, max_concurrency=5), 2)
    assert [(s.rate_rps, s.requests, s.max_concurrency) for s in opened] == [(10.0, 30, 3), (10.0, 30, 2)]


def test_two_workers_merge_exactly_and_match_one_worker(tmp_path):
    path = spec(tmp_path)
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    assert main(["run", path, "--backend", "ray", "--workers", "1", "--out", str(one), "--quiet"]) == 0
    assert main(["run", path, "--backend", "ray", "--workers", "2", "--out", str(two), "--quiet"]) == 0
    p1, p2 = read(str(one))["points"][0], read(str(two))["points"][0]
    assert p2["backend"]["workers"] == 2 and p2["backend"]["completed_shards"] == 2
    assert p2["counts"]["sent"] == p2["counts"]["completed"] == 16  # the plan's count
    # the shards sent disjoint fresh prompts: a prompt sent twice would be half cached
    # in the simulator (16 of its 32 tokens), and the merged point would say so
    assert (p2["cache"]["requests"], p2["cache"]["cached_tokens"], p2["cache"]["above_declared"]) == \
        (16, 0, False)
    assert [s["params"]["concurrency"] for s in p2["shards"]] == [2, 2]
    for key in ("ttft_us", "itl_us", "e2e_us"):
        total = Histogram()
        for s in p2["shards"]:
            total.merge(Histogram.decode(s["hdr"][key]))
        assert Histogram.decode(p2["latency"][key]["hdr"]).nonzero() == total.nonzero()
    # the same work either way: every request and token of the plan, on one worker or two
    assert p1["counts"] == {**p2["counts"], "error_examples": p1["counts"]["error_examples"]}
    assert p1["tokens"]["output"] == p2["tokens"]["output"] == 16 * 48


def test_open_loop_shards_take_the_plans_schedule(tmp_path):
    out = tmp_path / "open.json"
    assert main(["run", spec(tmp_path, sweep="rate: [20/s]", out=8, requests=15), "--backend", "ray",
                 "--workers", "2", "--out", str(out), "--quiet"]) == 0
    p = read(str(out))["points"][0]
    assert p["counts"]["sent"] == 15 and sorted(s["counts"]["sent"] for s in p["shards"]) == [7, 8]
    assert "e2e_from_schedule_us" in p["latency"]


def test_a_dead_worker_is_reported_and_the_others_kept(tmp_path, capsys):
    from tests.conftest import wait_for
    from tests.test_run import Sim

    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4", "--model", "m")
    path = spec(tmp_path, out=200, requests=8)

    def kill_mid_point():
        # a first request finished: both workers are inside the point, each with a second round
        # of requests to go
        wait_for(lambda: sim.trace.exists() and sim.trace.read_text().strip(), timeout_s=120,
                 what="a first finished request in the simulator's trace")
        ray.kill(ray.get_actor("benchc-worker-1", namespace="benchc"))

    killer = threading.Thread(target=kill_mid_point)
    killer.start()
    out = tmp_path / "dead.json"
    try:
        assert main(["run", path, "--backend", "ray", "--workers", "2", "--out", str(out), "--quiet",
                     "--base-url", sim.url]) == 3
    finally:
        killer.join()
        sim.close()
    doc = read(str(out))
    p = doc["points"][0]
    assert p["complete"] is False and doc["complete"] is False
    assert p["backend"]["completed_shards"] == 1 and "worker 1 failed" in p["backend"]["failures"][0]
    assert p["counts"]["completed"] == 4  # the surviving shard's share, all measured
    assert "worker 1 failed" in capsys.readouterr().err


def test_the_spec_can_choose_the_backend(tmp_path):
    path = spec(tmp_path, requests=4)
    with open(path, "a") as f:
        f.write("run: {backend: ray, workers: 2}\n")
    out = tmp_path / "spec.json"
    assert main(["run", path, "--out", str(out), "--quiet"]) == 0
    p = read(str(out))["points"][0]
    assert p["backend"]["workers"] == 2 and p["counts"]["sent"] == 4
    local = tmp_path / "local.json"
    assert main(["run", path, "--backend", "local", "--out", str(local), "--quiet"]) == 0
    assert "backend" not in read(str(local))["points"][0]


def test_a_search_splits_each_probe_across_workers_held_to_the_search_slo(tmp_path):
    """On Ray every probe is measured in shards by the workers, which hold each request to the
    search's SLO (goodput) as the driver does. The workers' own self-checks cannot be relaxed from
    here: where the busy test machine made one flag a probe, the search may end undecided, and
    then only for that reason; where it concluded, its answer is the table's."""
    cfg = make_config("minimax-m2.5-tp4")
    requests, threshold_ms = 8, 20.0
    predicted = {c: predicted_tpot_p50_ms(cfg, c, requests) for c in range(4, 13)}
    expected = max(c for c, v in predicted.items() if v < threshold_ms)
    slo = f"{{tpot: 'p50 < {threshold_ms:g}ms'}}"
    spec = write(tmp_path, f"{{over: concurrency, min: 4, max: 12, slo: {slo}}}")
    assert main(["run", spec, "--quiet", "--backend", "ray", "--workers", "2"]) == 0
    doc = read(str(tmp_path / "r.json"))
    (search,) = doc["search"]
    for p in doc["points"]:
        assert len(p["shards"]) == 2 and p["counts"]["completed"] == requests
        assert p["cache"]["cached_tokens"] == 0
        # the workers held each request to the search's SLO: the goodput counts what the table says
        assert p["counts"]["slo_met"] == predicted_within(cfg, p["params"]["concurrency"], requests,
                                                          threshold_ms)
    if search["status"] == "found":
        assert search["answer"] == expected
    else:
        assert search["status"] == "undecided"
        assert any(p["verdict"] == UNTRUSTED for p in search["probes"])
