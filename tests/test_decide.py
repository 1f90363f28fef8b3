"""GPUs per combination, the Pareto frontier and the decision (results/decide.py, run/gpus.py):
the frontier of a matrix run on the simulator's presets against one found by hand from its
points, the answer against the numbers, and the GPU count's sources."""

import itertools
import json
import os
import random

import pytest

from benchc.cli import main
from benchc.plan.model import Combination, Server
from benchc.results import api
from benchc.results.decide import Candidate, candidates, decision, frontier_block, margin, pareto
from benchc.results.document import read
from benchc.run.gpus import combination_gpus, matrix_gpus, visible_devices

DATA = os.path.join(os.path.dirname(__file__), "data")

SPEC = """\
version: 1
name: decide
target:
  sim: {{preset: "${{matrix.preset}}"}}
  model: sim-model
workload:
  dataset:
    random: {{input_tokens: 16, output_tokens: {out}, seed: 3}}
load:
  warmup: {{requests: 0}}
  sweep: {{concurrency: {conc}}}
  requests: {requests}
matrix:
  preset: [minimax-m2.5-tp4, kimi-k2.5-nvfp4-tp8]
slo:
  tpot: "p50 < 40ms"
  ttft: "p99 < 2s"
output:
  path: {path}
"""


def _dominated(p: dict, q: dict, axis: str) -> bool:
    """q beats p: at least as good on per-user speed and on `axis`, better on one."""
    x, y = "output_tok_s_per_user", axis
    return q[x] >= p[x] and q[y] >= p[y] and (q[x] > p[x] or q[y] > p[y])


def by_hand(points: list[dict], axis: str) -> set[str]:
    """The frontier by the definition: every point no other point dominates (O(n^2))."""
    return {p["point"] for p in points if not any(_dominated(p, q, axis) for q in points if q is not p)}


def hand_figures(doc: dict) -> list[dict]:
    """Each point's per-GPU figures from its own fields and its combination's GPU count."""
    gpus = {c["combination"]: c["gpus"]["count"] for c in doc["combinations"]}
    return [{"point": p["id"], "combination": p["combination"],
             "output_tok_s_per_user": 1e6 / p["latency"]["tpot_us"]["p50"],
             "output_tok_s_per_gpu": p["throughput"]["output_tok_s"] / gpus[p["combination"]],
             "goodput_s_per_gpu": p["throughput"]["goodput_s"] / gpus[p["combination"]]}
            for p in doc["points"]]


def run_matrix(tmp_path, conc: str, requests: int, out: int = 8, quiet: bool = True, *more: str) -> dict:
    spec = tmp_path / "decide.yaml"
    spec.write_text(SPEC.format(out=out, conc=conc, requests=requests, path=tmp_path / "r.json"))
    assert main(["run", str(spec), *(["--quiet"] if quiet else []), *more]) in (0, 1)  # 1: an SLO missed
    return read(str(tmp_path / "r.json"))


def check_matrix_result(doc: dict) -> None:
    assert [c["gpus"] for c in doc["combinations"]] == [
        {"count": 4, "source": "simulator", "indices": [0, 1, 2, 3]},
        {"count": 8, "source": "simulator", "indices": list(range(8))}]
    mine = hand_figures(doc)
    f = doc["frontier"]
    assert {p["point"] for p in f["points"]} == {p["id"] for p in doc["points"]}
    for axis in ("output_tok_s_per_gpu", "goodput_s_per_gpu"):
        assert set(f[axis]) == by_hand(mine, axis), axis
        speeds = [next(p for p in f["points"] if p["point"] == i)["output_tok_s_per_user"] for i in f[axis]]
        assert speeds == sorted(speeds)
    # the decision: the point the numbers say, and the best point of the other combination
    (answer,) = doc["decision"]
    assert answer["slo"] == ["tpot: p50 < 40ms", "ttft: p99 < 2s"]
    best = max(mine, key=lambda p: (p["goodput_s_per_gpu"], p["output_tok_s_per_user"]))
    assert answer["best"]["point"] == best["point"]
    other = max((p for p in mine if p["combination"] != best["combination"]),
                key=lambda p: (p["goodput_s_per_gpu"], p["output_tok_s_per_user"]))
    assert answer["runner_up"]["point"] == other["point"]
    lead = (best["goodput_s_per_gpu"] - other["goodput_s_per_gpu"]) / other["goodput_s_per_gpu"]
    assert answer["margin"]["relative"] == pytest.approx(lead, rel=1e-4)
    assert answer["margin"]["beyond_noise"] is (lead > 0.02)
    assert "single runs" in answer["margin"]["method"]


def test_matrix_on_two_presets_frontier_and_decision(tmp_path, capsys):
    doc = run_matrix(tmp_path, "[1, 4]", 4, 8, False, "--gpu-hour", "3")
    check_matrix_result(doc)
    # --gpu-hour: the plan's price, and each point's GPU time per million output tokens
    assert doc["plan"]["cost"] == {"gpu_hour": 3.0, "currency": "USD"}
    gpus = {c["combination"]: c["gpus"]["count"] for c in doc["combinations"]}
    for c, p in zip(doc["frontier"]["points"], doc["points"], strict=True):
        tok_s = p["throughput"]["output_tok_s"]
        assert c["cost_per_mtok"] == pytest.approx(3 * gpus[p["combination"]] / 3600 / tok_s * 1e6, rel=1e-5)
    best = doc["decision"][0]["best"]
    said = capsys.readouterr().err  # the console's last lines: the decision
    assert f"most goodput per GPU: preset={best['matrix']['preset']} {best['load']}: " in said
    # the same from the file through benchc.results, as compare and report compute it
    r = api.load(str(tmp_path / "r.json"))
    assert frontier_block([r]) == doc["frontier"] and decision([r]) == doc["decision"]


@pytest.mark.slow
def test_matrix_on_two_presets_concurrency_1_to_64(tmp_path):
    doc = run_matrix(tmp_path, "[1, 2, 4, 8, 16, 32, 64]", requests=64, out=16)
    check_matrix_result(doc)
    # Kimi on 8 GPUs is slower per user and per GPU at every load here: MiniMax TP=4 wins
    assert doc["decision"][0]["best"]["matrix"] == {"preset": "minimax-m2.5-tp4"}
    assert doc["decision"][0]["margin"]["beyond_noise"] is True


def _cand(i: int, x: float, y: float, g: float, combo: int = 0, runs: dict | None = None) -> Candidate:
    return Candidate(result="", point=f"p{i}", combination=combo, matrix={"k": combo}, load=f"c={i}", gpus=1,
                     output_tok_s_per_user=x, output_tok_s_per_gpu=y, goodput_s_per_gpu=g, slo=(),
                     runs=runs or {})


def test_pareto_sweep_equals_the_definition_with_ties():
    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(1, 25)
        # few distinct values: ties on one axis and on both are common
        cands = [_cand(i, rng.choice([1, 2, 3, 5, 8]), rng.choice([1, 2, 3, 5]), rng.choice([0, 1, 4]))
                 for i in range(n)]
        rows = [c.to_json() for c in cands]
        for axis in ("output_tok_s_per_gpu", "goodput_s_per_gpu"):
            assert {c.point for c in pareto(cands, axis)} == by_hand(rows, axis)


def test_margin_with_repeats_uses_the_runs_spread():
    tight_a = _cand(1, 50, 10, 2.0, 0, {"goodput_s_per_gpu": (2.0, 2.01, 1.99)})
    tight_b = _cand(2, 50, 10, 1.9, 1, {"goodput_s_per_gpu": (1.9, 1.91, 1.89)})
    m = margin(tight_a, tight_b, "goodput_s_per_gpu")
    assert m["beyond_noise"] is True and "Welch" in m["method"] and m["interval"][0] > 0
    loose_b = _cand(2, 50, 10, 1.9, 1, {"goodput_s_per_gpu": (1.2, 2.6, 1.9)})
    m = margin(tight_a, loose_b, "goodput_s_per_gpu")
    assert m["beyond_noise"] is False and m["interval"][0] < 0 < m["interval"][1]
    # single runs: the floor is the rule
    assert margin(_cand(1, 5, 1, 1.01), _cand(2, 5, 1, 1.0), "goodput_s_per_gpu")["beyond_noise"] is False
    assert margin(_cand(1, 5, 1, 1.05), _cand(2, 5, 1, 1.0), "goodput_s_per_gpu")["beyond_noise"] is True


def test_results_without_gpus_are_left_out_by_name():
    """Results written before GPU counts existed stay readable; their points are left out, saying why."""
    r = api.load(os.path.join(DATA, "result-v1-minimax.json"))
    assert all(p.gpus is None for p in r.points)
    cands, left = candidates([r])
    assert cands == [] and {x["point"] for x in left} == {p.id for p in r.points}
    assert all("no GPU count" in x["reason"] for x in left)
    assert decision([r]) == []


def _combo(matrix: dict, gpus=None, env: dict | None = None) -> Combination:
    server = Server(attach=False, command=["x"], env=env or {}, cwd=None, ready_path="/health",
                    ready_timeout_s=1, ready_interval_s=1, log=None, stop_timeout_s=1, gpus=gpus)
    return Combination(index=0, matrix=matrix, target=None, server=server, smoke=None,  # type: ignore[arg-type]
                       workload=None)  # type: ignore[arg-type]


SIM = {"gpus": [{"index": i, "server": i < 4, "power_w": 60.0, "energy_j": 0.0} for i in range(8)]}


@pytest.mark.parametrize(("matrix", "gpus", "sim", "env", "want"), [
    ({"tp": 4}, 2, SIM, {"CUDA_VISIBLE_DEVICES": "0,1"},
     {"count": 2, "source": "server.gpus", "indices": [0, 1]}),
    ({}, [4, 5, 6, 7], None, None, {"count": 4, "source": "server.gpus", "indices": [4, 5, 6, 7]}),
    ({"tp": 4, "dp": 2, "ep": "enable"}, None, None, None,
     {"count": 8, "source": "matrix: tp x dp", "indices": None}),
    ({"tp": 4, "ep": True}, None, SIM, None, {"count": 4, "source": "matrix: tp", "indices": [0, 1, 2, 3]}),
    ({"model": "a"}, None, SIM, None, {"count": 4, "source": "simulator", "indices": [0, 1, 2, 3]}),
    ({}, None, None, {"CUDA_VISIBLE_DEVICES": "2,3"}, {"count": 2, "source": "CUDA_VISIBLE_DEVICES",
                                                      "indices": [2, 3]}),
    ({}, None, None, {"CUDA_VISIBLE_DEVICES": "GPU-a1,GPU-b2,GPU-c3"},
     {"count": 3, "source": "CUDA_VISIBLE_DEVICES", "indices": None}),
    ({"tp": 8}, None, None, {"CUDA_VISIBLE_DEVICES": "0,1"},
     {"count": 8, "source": "matrix: tp", "indices": None}),
    ({}, None, None, {}, None),
])
def test_gpus_per_combination_sources_in_order(matrix, gpus, sim, env, want):
    assert combination_gpus(_combo(matrix, gpus), sim, env) == want


def test_gpu_helpers():
    assert visible_devices({"CUDA_VISIBLE_DEVICES": " "}) == (None, None)
    assert matrix_gpus({"TP": 2, "pipeline_parallel_size": 2, "seqs": 64}) == (
        4, ["TP", "pipeline_parallel_size"])
    assert matrix_gpus({"tp": True}) is None  # a flag is not a count


def test_server_gpus_in_the_spec(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    base = ("version: 1\nname: g\ntarget: {{base_url: 'http://127.0.0.1:9/v1', model: m}}\n"
            "server: {{command: [x], gpus: {gpus}}}\n"
            "workload: {{dataset: {{random: {{input_tokens: 8, output_tokens: 8}}}}}}\n"
            "load: {{sweep: {{concurrency: [1]}}, requests: 1}}\ncost: {{gpu_hour: 2.5}}\n")
    spec.write_text(base.format(gpus="[0, 1]"))
    assert main(["plan", str(spec)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["combinations"][0]["server"]["gpus"] == [0, 1]
    assert plan["cost"] == {"gpu_hour": 2.5, "currency": "USD"}
    for bad in ("0", "[1, 1]", "four"):
        spec.write_text(base.format(gpus=bad))
        assert main(["validate", str(spec)]) == 2
        assert "$.server.gpus" in capsys.readouterr().err


def test_frontier_across_results_names_each_result(tmp_path):
    one = api.from_document(_doc_with_gpus(), str(tmp_path / "a.json"))
    two = api.from_document(_doc_with_gpus(scale=2.0), str(tmp_path / "b.json"))
    block = frontier_block([one, two])
    assert {p["result"] for p in block["points"]} == {"a.json", "b.json"}
    # b's points are a's with twice the throughput at the same per-user speed: only b's are on it
    on = block["output_tok_s_per_gpu"]
    assert on and all(i.startswith("b.json: ") for i in on)
    assert decision([one, two])[0]["best"]["result"] == "b.json"


def _doc_with_gpus(scale: float = 1.0) -> dict:
    doc = read(os.path.join(DATA, "result-v1-minimax.json"))
    doc["combinations"] = [{"combination": 0, "matrix": {}, "status": "ok",
                            "gpus": {"count": 4, "source": "server.gpus", "indices": None}}]
    for p in doc["points"]:
        for k in ("output_tok_s", "goodput_s"):
            p["throughput"][k] *= scale
    return doc


def test_candidate_names():
    c = _cand(1, 1, 1, 1, combo=3)
    assert c.name == "k=3 c=1"
    assert list(itertools.islice(iter(c.to_json()), 2)) == ["point", "combination"]


def test_compare_one_matrix_result_side_by_side_and_decision(tmp_path, capsys):
    """One matrix result: its combinations at each load, and the decision, in every format."""
    path = str(tmp_path / "m.json")
    doc = _doc_with_gpus()
    second = [dict(p, combination=1, matrix={"tp": 8}, id="tp=8/" + p["id"]) for p in doc["points"]]
    for p in second:
        p["throughput"] = dict(p["throughput"], output_tok_s=p["throughput"]["output_tok_s"] / 2)
    doc["points"] = [dict(p, matrix={"tp": 4}, id="tp=4/" + p["id"]) for p in doc["points"]] + second
    doc["combinations"] = [{"combination": i, "matrix": {"tp": n}, "status": "ok",
                            "gpus": {"count": n, "source": "matrix: tp", "indices": None}}
                           for i, n in enumerate((4, 8))]
    with open(path, "w") as f:
        json.dump(doc, f)
    assert main(["compare", path, "--format", "json", "--gpu-hour", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    loads = [t["load"] for t in out["side_by_side"]]
    assert loads == list(dict.fromkeys(p["id"].split("/")[1] for p in doc["points"]))
    row4, row8 = out["side_by_side"][0]["rows"]
    assert (row4["combination"], row4["gpus"], row8["combination"], row8["gpus"]) == ("tp=4", 4, "tp=8", 8)
    assert row8["output_tok_s_per_gpu"] == pytest.approx(row4["output_tok_s_per_gpu"] / 4)
    assert row4["cost_per_mtok"] == pytest.approx(2 * 4 / 3600 / row4["output_tok_s"] * 1e6)
    (answer,) = out["decision"]
    assert answer["best"]["matrix"] == {"tp": 4} and answer["runner_up"]["matrix"] == {"tp": 8}
    assert main(["compare", path]) == 0
    text = capsys.readouterr().out
    assert "load c=1:" in text and "most goodput per GPU: tp=4 " in text
    assert main(["compare", path, "--format", "markdown"]) == 0
    assert "#### load c=1" in capsys.readouterr().out
    assert main(["compare", path, "--fail-on", "output_tok_s < -5%"]) == 2
    with pytest.raises(SystemExit) as e:
        main(["compare", path, "--gpu-hour", "-1"])
    assert e.value.code == 2


def test_merge_recomputes_frontier_and_decision_from_the_merged_points(tmp_path):
    """A merge starts from its first shard's document: its frontier would be that shard's alone."""
    paths = []
    for name in ("result-v1-shard-a.json", "result-v1-shard-b.json"):
        doc = read(os.path.join(DATA, name))
        doc["combinations"] = [dict(c, gpus={"count": 2, "source": "server.gpus", "indices": None})
                               for c in doc["combinations"]]
        doc["frontier"] = {"per_user": "stale", "points": [], "output_tok_s_per_gpu": [],
                           "goodput_s_per_gpu": []}
        path = tmp_path / name
        path.write_text(json.dumps(doc))
        paths.append(str(path))
    assert main(["merge", *paths, "-o", str(tmp_path / "m.json")]) == 0
    merged = read(str(tmp_path / "m.json"))
    points = {p["point"]: p for p in merged["frontier"]["points"]}
    assert set(points) == {p["id"] for p in merged["points"]}
    for p in merged["points"]:
        want = p["throughput"]["goodput_s"] / 2
        assert points[p["id"]]["goodput_s_per_gpu"] == pytest.approx(want, rel=1e-5)
    assert merged["decision"][0]["best"]["point"] in points


def test_an_untrusted_point_is_marked_in_the_decision():
    doc = _doc_with_gpus()
    best = max(doc["points"], key=lambda p: p["throughput"]["goodput_s"])
    best["trust"] = {"trusted": False, "doubts": [{"message": "client-limited", "fails_strict": True}]}
    (answer,) = decision([api.from_document(doc)])
    assert answer["best"]["point"] == best["id"] and answer["best"]["trusted"] is False
    assert "trusted" not in answer["runner_up"]
    from benchc.results.decide import describe

    assert "NOT TRUSTED" in describe(answer)[1]
