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


def test_an_untrusted_runner_up_is_marked_in_the_decision_too():
    """The lead over a runner-up whose figures cannot be trusted is no answer either: the line
    says so for the runner-up as it does for the best (it said so for the best only)."""
    from benchc.results.decide import describe

    doc = _doc_with_gpus()
    (answer,) = decision([api.from_document(doc)])
    runner = next(p for p in doc["points"] if p["id"] == answer["runner_up"]["point"])
    runner["trust"] = {"trusted": False, "doubts": [{"message": "client-limited", "fails_strict": True}]}
    (answer,) = decision([api.from_document(doc)])
    assert answer["runner_up"]["trusted"] is False and "trusted" not in answer["best"]
    line = describe(answer)[1]
    assert line.count("NOT TRUSTED") == 1 and line.index("NOT TRUSTED") > line.index("runner-up")


def test_two_results_of_one_file_name_stay_apart(tmp_path):
    """compare base/r.json new/r.json, the usual layout: each result's rows carry its own per-GPU
    figures and the runner-up is the other result's. Named by file name alone, the two were one
    result: the side-by-side rows of both showed the second's figures, and the runner-up came
    from the best's own result."""
    from benchc.results.sidebyside import side_by_side

    results = []
    for folder, scale in (("base", 1.0), ("new", 2.0)):
        (tmp_path / folder).mkdir()
        path = tmp_path / folder / "r.json"
        path.write_text(json.dumps(_doc_with_gpus(scale)))
        results.append(api.load(str(path)))
    cands, _ = candidates(results)
    assert len({c.result for c in cands}) == 2
    rows = side_by_side(results)[0]["rows"]
    assert len({r["combination"] for r in rows}) == 2
    for row in rows:
        assert row["output_tok_s_per_gpu"] == pytest.approx(row["output_tok_s"] / 4)
    (answer,) = decision(results)
    assert answer["runner_up"]["result"] != answer["best"]["result"]
    assert answer["runner_up"]["load"] == answer["best"]["load"]  # the same load of the other result


def test_a_points_load_is_its_ids_load_part_whatever_the_matrix_and_the_rate_say():
    """An open-loop point's id ends in `rate=2/s`: its load is that, not `s` (every rate point of a
    result was load `s`, one side-by-side table, every candidate named `... s`); a matrix value
    with a `/` in it (a model name) is not the load either."""
    from benchc.results.sidebyside import side_by_side

    doc = _doc_with_gpus()
    ids = ["tp=8/rate=2/s", "model=org/name/rate=2.5/s#2", "model=org/name/c=4"]
    doc["points"] = [dict(p, id=i) for p, i in zip(doc["points"], ids, strict=True)]
    r = api.from_document(doc)
    assert [p.load for p in r.points] == ["rate=2/s", "rate=2.5/s", "c=4"]
    assert [t["load"] for t in side_by_side([r])] == ["rate=2/s", "rate=2.5/s", "c=4"]
    plain = api.from_document(_doc_with_gpus())
    assert [p.load for p in plain.points] == [p["id"] for p in _doc_with_gpus()["points"]]


# --------------------------------------------------------------------------- per SLO item

# Two combinations built so that each SLO item has its own winner: MiniMax TP=4 steps fast
# (TPOT 11.9-15.7 ms at C=1-4) behind a 250 ms front end (every TTFT over 250 ms); Kimi TP=8
# steps slowly at C=4 (27 ms) with no front end (TTFT tens of ms). Under `tpot < 24ms` alone
# MiniMax C=4 serves the most per GPU, under `ttft < 150ms` alone Kimi C=4, and under both only
# Kimi C=1 (TPOT 16.4 ms) has any goodput. A loaded machine only adds to the latencies: the
# bounds the answers hang on (Kimi C=4's TPOT, MiniMax's TTFT) are missed by more, not less.
PER_ITEM_SPEC = """\
version: 1
name: per-slo
target:
  sim: {{preset: "${{matrix.preset}}", frontend_ms: "${{matrix.frontend_ms}}"}}
  model: sim-model
workload:
  dataset:
    random: {{input_tokens: 16, output_tokens: 16, seed: 3}}
load:
  warmup: {{requests: 0}}
  sweep: {{concurrency: [1, 4]}}
  requests: 4
matrix:
  preset: [minimax-m2.5-tp4, kimi-k2.5-nvfp4-tp8]
  frontend_ms: [0, 250]
  exclude: [{{preset: minimax-m2.5-tp4, frontend_ms: 0}}, {{preset: kimi-k2.5-nvfp4-tp8, frontend_ms: 250}}]
slo:
  tpot: "p50 < 24ms"
  ttft: "p99 < 150ms"
output:
  path: {path}
  requests: true
"""
TPOT_ITEM, TTFT_ITEM = "tpot: p50 < 24ms", "ttft: p99 < 150ms"


def met_by_hand(records: list[dict], items: dict[str, tuple[str, float]]) -> dict[str, dict[str, int]]:
    """Per point, the completed requests that met each item ({text: (ttft|tpot, limit in us)}),
    from the per-request records: TPOT as docs/metrics.md defines it ((E2E - TTFT) / (output
    tokens - 1))."""
    out: dict[str, dict[str, int]] = {}
    for r in records:
        mine = out.setdefault(r["point"], dict.fromkeys(items, 0))
        if r["error"] is not None:
            continue
        values = {"ttft": r["ttft_us"], "tpot": (r["e2e_us"] - r["ttft_us"]) / (r["output_tokens"] - 1)}
        for text, (metric, limit) in items.items():
            mine[text] += values[metric] < limit
    return out


def _best_by_hand(doc: dict, item: str | None) -> tuple[str, float]:
    """(point, goodput per GPU) with the most goodput per GPU under `item` alone (None: the set)."""
    gpus = {c["combination"]: c["gpus"]["count"] for c in doc["combinations"]}

    def goodput(p: dict) -> float:
        g = p["throughput"]["goodput_s"] if item is None else p["goodput_per_slo"][item]["goodput_s"]
        return g / gpus[p["combination"]]

    best = max(doc["points"], key=lambda p: (goodput(p), 1e6 / p["latency"]["tpot_us"]["p50"]))
    return best["id"], goodput(best)


def test_each_slo_item_gets_its_own_answer(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text(PER_ITEM_SPEC.format(path=tmp_path / "r.json"))
    assert main(["run", str(spec)]) == 1  # every point misses one item or the other
    doc = read(str(tmp_path / "r.json"))
    records = [json.loads(x) for x in (tmp_path / "r.requests.jsonl").read_text().splitlines()]
    # counted per item at run time: as the per-request records say, the set's within each item's
    hand = met_by_hand(records, {TPOT_ITEM: ("tpot", 24_000), TTFT_ITEM: ("ttft", 150_000)})
    for p in doc["points"]:
        per = p["goodput_per_slo"]
        assert list(per) == [TPOT_ITEM, TTFT_ITEM]
        assert {k: v["slo_met"] for k, v in per.items()} == hand[p["id"]], p["id"]
        for v in per.values():
            assert v["goodput_s"] == pytest.approx(v["slo_met"] / p["window"]["duration_s"], abs=1e-3)
        assert p["counts"]["slo_met"] <= min(v["slo_met"] for v in per.values())
    # the answers: the set's, then one per item, each the point the numbers imply
    (answer,) = doc["decision"]
    assert [a["slo"] for a in answer["per_slo"]] == [[TPOT_ITEM], [TTFT_ITEM]]
    for a, item in [(answer, None), *zip(answer["per_slo"], (TPOT_ITEM, TTFT_ITEM), strict=True)]:
        point, per_gpu = _best_by_hand(doc, item)
        assert a["best"]["point"] == point
        assert a["best"]["goodput_s_per_gpu"] == pytest.approx(per_gpu, rel=1e-4)
    # what the construction implies: three different winners
    assert answer["best"]["point"] == "preset=kimi-k2.5-nvfp4-tp8,frontend_ms=0/c=1"
    assert answer["per_slo"][0]["best"]["point"] == "preset=minimax-m2.5-tp4,frontend_ms=250/c=4"
    assert answer["per_slo"][1]["best"]["point"] == "preset=kimi-k2.5-nvfp4-tp8,frontend_ms=0/c=4"
    for a in answer["per_slo"]:  # the runner-up is the other combination's best under that item
        assert a["runner_up"]["combination"] != a["best"]["combination"]
        assert a["margin"]["beyond_noise"] is True and "per_joule" in a
    said = capsys.readouterr().err
    assert f"decision under the SLO item [{TPOT_ITEM}] alone:" in said
    assert f"decision under the SLO item [{TTFT_ITEM}] alone:" in said
    # compare and report read the same answers from the file
    assert main(["compare", str(tmp_path / "r.json"), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["decision"] == doc["decision"]
    assert main(["report", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html")]) == 0
    assert f"decision under the SLO item [{TTFT_ITEM}] alone:" in capsys.readouterr().err
    from benchc.results.html_report import report_data

    lines = [x for a in report_data([doc])["decision"] for x in a]
    assert f"decision under the SLO item [{TPOT_ITEM}] alone:" in lines


def test_an_old_result_decides_per_slo_set_only():
    """A result written before goodput was counted per SLO item: read, decided per set, and no
    answer per item (its points have no figure for one)."""
    doc = _doc_with_gpus()
    doc["plan"]["slo"] = [
        {"metric": "ttft", "stat": "p99", "op": "<", "value": 2e6, "text": "ttft: p99 < 2s"},
        {"metric": "tpot", "stat": "p50", "op": "<", "value": 5e4, "text": "tpot: p50 < 50ms"}]
    r = api.from_document(doc)
    assert all(p.goodput_per_slo == {} for p in r.points)
    (answer,) = decision([r])
    assert answer["slo"] == ["ttft: p99 < 2s", "tpot: p50 < 50ms"] and "per_slo" not in answer
    cands, left = candidates([r], slo_item="ttft: p99 < 2s")
    assert cands == [] and all("no goodput for the SLO item" in x["reason"] for x in left)


def test_per_item_counts_add_exactly_and_survive_a_round_trip():
    """Shards' tallies (the Ray backend's merge, `benchc merge`) add the per-item counts as they
    add the set's; a point read back gives the tally it was made from."""
    from benchc.metrics.aggregate import Tally, figures

    a, b = Tally(), Tally()
    a.slo_met_by_item.update({"x": 3, "y": 0})
    b.slo_met_by_item.update({"x": 1, "y": 2})
    a.start_ns, a.end_ns, b.start_ns, b.end_ns = 1, 2_000_000_001, 500, 1_000_000_000
    total = Tally.total([a, b])
    assert dict(total.slo_met_by_item) == {"x": 4, "y": 2}
    point = figures(total)
    assert point["goodput_per_slo"] == {"x": {"slo_met": 4, "goodput_s": 2.0},
                                        "y": {"slo_met": 2, "goodput_s": 1.0}}
    point["params"], point["client"] = {}, {"client_limited": False}
    assert dict(Tally.from_point(point).slo_met_by_item) == {"x": 4, "y": 2}
    assert "goodput_per_slo" not in figures(Tally())  # no SLO item counted: no block


def test_a_tie_at_zero_is_no_lead():
    m = margin(_cand(1, 5, 1, 0.0), _cand(2, 4, 1, 0.0), "goodput_s_per_gpu")
    assert (m["relative"], m["beyond_noise"]) == (None, False)
    m = margin(_cand(1, 5, 1, 0.5), _cand(2, 4, 1, 0.0), "goodput_s_per_gpu")
    assert (m["relative"], m["beyond_noise"]) == (None, True)
