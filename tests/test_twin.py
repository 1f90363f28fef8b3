"""`benchc fit` and twin presets: the simulator fitted to measured results (issue 33).

The fast tests fit the result fixtures of tests/data (runs of the built-in presets, whose
parameters are the ground truth) and read twin files; the slow one fits a fresh run of a preset
and runs the twin beyond the fitted range, against the preset's own step law."""

import json
import os

import pytest
import yaml

from benchc.cli import main
from benchc.plan.compiler import compile_spec
from benchc.results.document import read
from benchc.sim.fit import fit, predict
from benchc.sim.model import KIMI_TABLE, MINIMAX_TABLE, SimConfig, make_config
from benchc.sim.twin import TWIN_VERSION, read_twin, twin_config
from benchc.spec.loader import load
from tests.conftest import REPO
from tests.test_point_document import point_of

DATA = os.path.join(REPO, "tests", "data")


def _fixture(name):
    path = os.path.join(DATA, name)
    return path, read(path)


@pytest.mark.parametrize("name, table", [("result-v1-kimi.json", KIMI_TABLE),
                                         ("result-v1-minimax.json", MINIMAX_TABLE)])
def test_fit_recovers_the_presets_step_times_at_the_measured_batch_sizes(name, table):
    twin = fit([_fixture(name)])
    truth = dict(table)
    fitted = dict(twin["sim"]["step_table"])
    assert sorted(fitted) == [1, 2, 4, 8]  # and 8: beyond them, the slope over all three
    for batch in (1, 2, 4):
        assert fitted[batch] == pytest.approx(truth[batch], rel=0.03), (batch, fitted[batch], truth[batch])
    slope = (fitted[8] - fitted[4]) / 4
    assert min(fitted[2] - fitted[1], (fitted[4] - fitted[2]) / 2) <= slope <= max(
        fitted[2] - fitted[1], (fitted[4] - fitted[2]) / 2)
    assert twin["benchc_twin"] == TWIN_VERSION
    assert twin["fitted_range"]["concurrency"] == twin["fitted_range"]["batch"] == [1, 4]
    (warning,) = twin["warnings"]
    assert warning.startswith("extrapolation:") and "past 4" in warning and "twin_extrapolated" in warning
    assert twin["sim"]["prefill_tok_s"] > 0
    # fresh prompts hit no cache, and no point queued: both said, neither guessed
    assert any(x.startswith("block_size") for x in twin["not_observed"])
    assert any(x.startswith("max_num_seqs") for x in twin["not_observed"])
    assert len(twin["residuals"]) == 3
    for row in twin["residuals"]:
        assert row["tpot_p50_ms"]["residual"] == pytest.approx(0, abs=1e-9)  # the table passes through them


def test_fit_cli_writes_a_twin_and_prints_residuals(tmp_path, capsys):
    out = tmp_path / "twin.yaml"
    assert main(["fit", os.path.join(DATA, "result-v1-kimi.json"), "-o", str(out)]) == 0
    text = capsys.readouterr()
    assert "c=4" in text.out and "TPOT p50 ms" in text.out
    assert "not observed: block_size" in text.err
    # how far it extrapolates: past the largest batch measured, said as a warning
    assert ("benchc: fit: warning: extrapolation: the step time was measured at batch sizes 1, 2, 4; "
            "past 4 the twin continues at") in text.err
    doc = read_twin(str(out))
    assert doc["model"] == doc["sim"]["model"] == "fixture-model"  # the model the run asked for
    cfg = twin_config(str(out))
    assert cfg.step_ms(4) == pytest.approx(KIMI_TABLE[2][1], rel=0.03)
    # never overwritten silently
    assert main(["fit", os.path.join(DATA, "result-v1-kimi.json"), "-o", str(out)]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["fit", os.path.join(DATA, "result-v1-kimi.json"), "-o", str(out), "--force",
                 "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["sim"]["step_table"][0][0] == 1


def test_noise_that_makes_a_larger_batch_look_faster_gives_a_non_decreasing_table(tmp_path):
    """A busy machine once measured vLLM's TPOT p50 at 30.4, 35.4, 25.9 ms for C=1, 2, 4: the
    table pools the violators (never a step that shrinks, nor a slope below zero beyond)."""
    path, doc = _fixture("result-v1-kimi.json")
    for p, tpot in zip(doc["points"], (30400, 35400, 25900), strict=True):
        p["latency"]["tpot_us"]["p50"] = tpot
    noisy = tmp_path / "noisy.json"
    noisy.write_text(json.dumps(doc))
    table = fit([(str(noisy), read(str(noisy)))])["sim"]["step_table"]
    assert table[:3] == [[1, 30.4], [2, 30.65], [4, 30.65]]
    assert table[3][0] == 8 and 30.65 <= table[3][1] < 31.5  # the pooled points' small slope


def test_a_single_concurrency_is_refused_saying_what_is_missing(tmp_path, capsys):
    path, doc = _fixture("result-v1-kimi.json")
    doc["points"] = [p for p in doc["points"] if p["params"]["concurrency"] == 4]
    thin = tmp_path / "thin.json"
    thin.write_text(json.dumps(doc))
    assert main(["fit", str(thin), "-o", str(tmp_path / "t.yaml")]) == 2
    err = capsys.readouterr().err
    assert "too thin to fit: only concurrency 4" in err and "two or more concurrencies" in err
    assert "Traceback" not in err
    assert not (tmp_path / "t.yaml").exists()


def test_results_of_two_servers_are_refused(tmp_path, capsys):
    out = tmp_path / "t.yaml"
    assert main(["fit", os.path.join(DATA, "result-v1-kimi.json"),
                 os.path.join(DATA, "result-v1-minimax.json"), "-o", str(out)]) == 2
    assert "different servers or models" in capsys.readouterr().err


def test_a_file_that_is_not_a_result_exits_5(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    assert main(["fit", str(bad), "-o", str(tmp_path / "t.yaml")]) == 5


def test_a_capacity_searchs_trusted_probes_are_fitted_as_closed_loop_points():
    """A concurrency search's probes reach the large batches a sweep at C=1,2,4 never shows: a
    trusted probe at C=8 puts the table through 8 (the preset's own step there), an untrusted
    one is left out."""
    path, doc = _fixture("result-v1-kimi.json")
    probe = json.loads(json.dumps(doc["points"][-1]))  # c=4, TPOT p50 27 ms
    probe["id"], probe["params"]["concurrency"], probe["params"]["probe"] = "probe3:c=8", 8, 3
    probe["latency"]["tpot_us"]["p50"] = 40000  # KIMI_TABLE at 8
    probe["trust"] = {"trusted": True, "doubts": []}
    doc["points"].append(probe)
    table = dict(fit([(path, doc)])["sim"]["step_table"])
    assert table[8] == 40.0 and max(table) == 16
    probe["trust"] = {"trusted": False, "doubts": [{"check": "client_limited", "message": "x",
                                                    "fails_strict": True}]}
    assert max(dict(fit([(path, doc)])["sim"]["step_table"])) == 8  # 4's table, continued to 8


def test_points_their_trust_checks_doubted_are_left_out_and_said(tmp_path, capsys):
    """A real server that kept an earlier run's prompts served the fit's from its prefix cache:
    that point's prefill looks free, and the fit leaves it out (a client-limited point is used
    with a warning; a warning-only doubt is not one)."""
    path, doc = _fixture("result-v1-kimi.json")
    cached = {"check": "prefix_cache", "message": "more cached than shared", "fails_strict": True}
    doc["points"][1]["trust"] = {"trusted": False, "doubts": [cached]}
    doc["points"][2]["trust"] = {"trusted": True, "doubts": [
        {"check": "twin_extrapolated", "message": "x", "fails_strict": False}]}
    # a client-limited point is used (on a busy 2-core host every point is), and said
    doc["points"][0]["trust"] = {"trusted": False, "doubts": [
        {"check": "client_limited", "message": "x", "fails_strict": True}]}
    twin = fit([(path, doc)])
    assert sorted(dict(twin["sim"]["step_table"])) == [1, 4, 8]
    assert "left out, as their trust checks doubted them: c=2 (prefix_cache)" in twin["notes"]
    assert "used, though their trust checks doubted them: c=1 (client_limited)" in twin["warnings"]
    # too few left: the refusal says why
    doc["points"][2]["trust"] = {"trusted": False, "doubts": [cached]}
    thin = tmp_path / "thin.json"
    thin.write_text(json.dumps(doc))
    assert main(["fit", str(thin), "-o", str(tmp_path / "t.yaml")]) == 2
    err = capsys.readouterr().err
    assert "too thin to fit: only concurrency 1 (left out, as their trust checks doubted them: " \
           "c=2 (prefix_cache); c=4 (prefix_cache))" in err


@pytest.mark.parametrize("running, waiting, slots", [
    # a server at 2 slots under C=4: 2 running and about 2 waiting in every sample
    ({"mean": 2.0, "max": 2.0, "samples": 8}, {"mean": 1.9, "max": 2.0, "samples": 8}, 2),
    # one sample between two waves (1 running, 3 waiting to be admitted at the next step)
    ({"mean": 1.0, "max": 1.0, "samples": 1}, {"mean": 3.0, "max": 3.0, "samples": 1}, None),
    # requests that waited now and then, the running count below C in the samples: no limit
    ({"mean": 3.1, "max": 3.0, "samples": 8}, {"mean": 0.2, "max": 1.0, "samples": 8}, None),
])
def test_slots_are_seen_only_where_requests_kept_waiting_below_the_concurrency(running, waiting, slots):
    path, doc = _fixture("result-v1-kimi.json")
    c4 = doc["points"][2]
    assert c4["params"]["concurrency"] == 4
    c4.setdefault("telemetry", {})["server"] = {"available": True, "kind": "vllm", "running": running,
                                                "waiting": waiting}
    twin = fit([(path, doc)])
    assert twin["sim"].get("max_num_seqs") == slots
    assert any(x.startswith("max_num_seqs") for x in twin["not_observed"]) == (slots is None)


def test_two_results_of_one_server_fit_together(tmp_path):
    a, b = _fixture("result-v1-shard-a.json"), _fixture("result-v1-minimax.json")
    twin = fit([a, b])
    assert len(twin["residuals"]) == 6
    assert dict(twin["sim"]["step_table"])[2] == pytest.approx(dict(MINIMAX_TABLE)[2], rel=0.03)


def test_two_prompt_lengths_give_the_prefill_rate_as_a_slope(tmp_path):
    """The same C=1 point again with 512 more prompt tokens and 512 / 20000 s more TTFT: the
    line's slope is 20,000 tok/s whatever fixed cost both first tokens carry."""
    path, doc = _fixture("result-v1-kimi.json")
    longer = json.loads(json.dumps(doc))
    for p in longer["points"]:
        p["tokens"]["input"] += 512 * p["counts"]["completed"]
        p["latency"]["ttft_us"]["p50"] += round(512 / 20000 * 1e6)
    other = tmp_path / "longer.json"
    other.write_text(json.dumps(longer))
    out = tmp_path / "t.yaml"
    assert main(["fit", path, str(other), "-o", str(out)]) == 0
    twin = read_twin(str(out))
    assert twin["sim"]["prefill_tok_s"] == pytest.approx(20000, rel=0.01)
    assert "a line over prompt lengths" in twin["notes"][0]
    assert twin["fixed_prefill_ms"] is not None


def _twin_file(tmp_path, **changes):
    twin = fit([_fixture("result-v1-kimi.json")])
    twin.update(changes)
    f = tmp_path / "twin.yaml"
    f.write_text(yaml.safe_dump(twin))
    return f


@pytest.mark.parametrize("changes, message", [
    ({"benchc_twin": TWIN_VERSION + 1}, "newer than this benchc reads"),
    ({"benchc_twin": "one"}, "must be a whole number"),
    ({"sim": {"step_tabel": [[1, 2.0]]}}, "unknown simulator parameter(s) in sim: step_tabel"),
    ({"sim": [1, 2]}, "`sim` must be a mapping"),
])
def test_a_bad_twin_file_is_refused_by_name(tmp_path, changes, message):
    f = _twin_file(tmp_path, **changes)
    with pytest.raises(ValueError, match="twin|sim") as e:
        read_twin(str(f))
    assert message in str(e.value)


def test_a_file_without_a_version_is_not_a_twin(tmp_path, capsys):
    f = tmp_path / "x.yaml"
    f.write_text("sim: {}\n")
    with pytest.raises(ValueError, match="is not a twin file"):
        read_twin(str(f))
    # the simulator refuses it as usage, not with a traceback
    assert main(["sim", "--preset", str(f), "--port", "0"]) == 2
    assert "is not a twin file" in capsys.readouterr().err


def test_twin_config_starts_from_the_defaults_and_takes_overrides(tmp_path):
    f = _twin_file(tmp_path)
    cfg = twin_config(str(f), max_num_seqs=8)
    assert cfg.max_num_seqs == 8
    assert cfg.model == "fixture-model"
    assert cfg.block_size == SimConfig().block_size  # not observed: the default, not the preset's


SPEC = """\
version: 1
name: t
target:
  sim: {{preset: {preset}}}
  model: m
workload:
  dataset:
    random: {{input_tokens: 32, output_tokens: 8}}
load:
  sweep:
    concurrency: [1]
  requests: 2
"""


def test_a_spec_names_a_twin_by_a_path_relative_to_itself(tmp_path):
    (tmp_path / "twins").mkdir()
    twin = _twin_file(tmp_path / "twins")
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(preset="twins/twin.yaml"))
    plan = compile_spec(load(str(spec), env={}))
    assert plan.combinations[0].target.sim["preset"] == str(twin)  # absolute, for the subprocess
    # the plan's hash does not depend on where the checkout is
    assert plan._plan_material()["combinations"][0]["sim"]["preset"] == os.path.join("twins", "twin.yaml")


def test_the_plan_keeps_the_twins_fitted_batch_and_its_slots(tmp_path):
    twin = _twin_file(tmp_path)
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(preset="twin.yaml"))
    assert compile_spec(load(str(spec), env={})).combinations[0].target.twin == {
        "fitted_batch_max": 4, "max_num_seqs": None}
    # the spec's slots over the twin's; a twin written before fitted_range.batch: its concurrency
    doc = yaml.safe_load(twin.read_text())
    del doc["fitted_range"]["batch"]
    doc["sim"]["max_num_seqs"] = 16
    twin.write_text(yaml.safe_dump(doc))
    spec.write_text(SPEC.format(preset="twin.yaml, max_num_seqs: 2"))
    plan = compile_spec(load(str(spec), env={}))
    assert plan.combinations[0].target.twin == {"fitted_batch_max": 4, "max_num_seqs": 2}
    # a built-in preset is no twin; nor is a real server
    spec.write_text(SPEC.format(preset="kimi-k2.5-nvfp4-tp8"))
    assert compile_spec(load(str(spec), env={})).combinations[0].target.twin is None


def test_a_bad_twin_file_is_a_plan_error_before_anything_runs(tmp_path, capsys):
    _twin_file(tmp_path, benchc_twin=TWIN_VERSION + 1)
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(preset="twin.yaml"))
    assert main(["validate", str(spec)]) == 2
    err = capsys.readouterr().err
    assert "target.sim.preset" in err and "newer than this benchc reads" in err and "Traceback" not in err


def _point(concurrency=None, in_flight_max=None, running_max=None):
    point = {"params": {"concurrency": concurrency}, "telemetry": {"server": {}}}
    if running_max is not None:
        point["telemetry"]["server"]["running"] = {"max": running_max}
    if in_flight_max is not None:
        point["timeseries"] = {"client": {"in_flight_max": in_flight_max}}
    return point


@pytest.mark.parametrize("twin, point, block", [
    # a closed loop within the fitted batch sizes, and above them
    ({"fitted_batch_max": 4, "max_num_seqs": None}, _point(concurrency=4),
     {"fitted_batch_max": 4, "batch_max": 4, "extrapolated": False}),
    ({"fitted_batch_max": 4, "max_num_seqs": None}, _point(concurrency=8),
     {"fitted_batch_max": 4, "batch_max": 8, "extrapolated": True}),
    # an open loop: the most in flight the client sampled, or the simulator's own gauge
    ({"fitted_batch_max": 4, "max_num_seqs": None}, _point(in_flight_max=[1, 3, None, 6], running_max=5),
     {"fitted_batch_max": 4, "batch_max": 6, "extrapolated": True}),
    ({"fitted_batch_max": 8, "max_num_seqs": None}, _point(running_max=5),
     {"fitted_batch_max": 8, "batch_max": 5, "extrapolated": False}),
    # slots cap the batch: the rest wait, which the twin models
    ({"fitted_batch_max": 4, "max_num_seqs": 4}, _point(concurrency=16),
     {"fitted_batch_max": 4, "batch_max": 4, "extrapolated": False}),
    # nothing to tell
    ({"fitted_batch_max": None, "max_num_seqs": None}, _point(concurrency=8), None),
    ({"fitted_batch_max": 4, "max_num_seqs": None}, _point(), None),
])
def test_a_twins_point_says_whether_its_batch_passed_the_fitted_range(twin, point, block):
    from benchc.results.trust import judge
    from benchc.run.point import twin_block

    assert twin_block(twin, point) == block
    doubts = [d for d in judge(point_of(**({"twin": block} if block is not None else {})))["doubts"]
              if d["check"] == "twin_extrapolated"]
    if block and block["extrapolated"]:
        (d,) = doubts
        assert not d["fails_strict"]  # a warning: --strict runs a twin past its range
        said = f"up to {block['fitted_batch_max']}, this point ran {block['batch_max']} at once"
        assert said in d["message"]
    else:
        assert doubts == []


@pytest.mark.parametrize("prefill_tok_s", [0.0, 1000.0])
def test_frontend_ms_holds_a_request_before_admission_and_keeps_its_prefill(prefill_tok_s):
    """frontend_ms: admitted no sooner than that after arrival (by the simulator's own trace),
    its prefill still charged to its first step (unlike ttft_ms, which replaces it)."""
    import asyncio

    import aiohttp

    from benchc.sim.model import make_config
    from benchc.sim.server import SimServer

    cfg = make_config("minimax-m2.5-tp4", frontend_ms=40.0, prefill_tok_s=prefill_tok_s)

    async def go():
        server = SimServer(cfg)
        port = await server.start()
        try:
            async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as s:
                body = {"model": cfg.model, "prompt": "w " * 200, "max_tokens": 2, "stream": True}
                async with s.post("/v1/completions", json=body) as r:
                    await r.read()
            return server.trace
        finally:
            await server.stop()

    (tr,) = asyncio.run(go())
    assert tr["admitted_ns"] - tr["arrival_ns"] >= 40_000_000
    first_step_ns = tr["first_token_ns"] - tr["admitted_ns"]
    prefill_ns = tr["input_tokens"] / prefill_tok_s * 1e9 if prefill_tok_s else 0
    assert first_step_ns >= cfg.step_ms(1) * 1e6 + prefill_ns


def test_the_front_ends_growth_is_interpolated_and_flat_past_its_last_pair():
    cfg = SimConfig(frontend_ms=8.0, frontend_growth=[(0, 0.0), (1, 12.0), (3, 22.0)])
    assert [cfg.frontend_wait_ms(h) for h in (0, 1, 2, 3, 10)] == [8.0, 20.0, 25.0, 30.0, 30.0]
    assert SimConfig(frontend_ms=5.0).frontend_wait_ms(100) == 5.0
    with pytest.raises(ValueError, match="must increase"):
        make_config("instant", frontend_growth=[[3, 1.0], [1, 2.0]])


def test_fit_recovers_the_front_ends_growth_from_the_servers_phases():
    """A server whose own time to first token outside its queue and prefill phases is 8, 20 and
    30 ms at C=1, 2, 4 (a real vLLM's API process on a busy host): frontend_ms 8, growing by 12
    with one other request held and by 22 with three."""
    path, doc = _fixture("result-v1-kimi.json")
    for p, front in zip(doc["points"], (8.0, 20.0, 30.0), strict=True):
        ttft = p["latency"]["ttft_us"]["p50"] / 1000
        p["server_timings_prometheus"] = {"source": "prometheus", "queue_ms_mean": 0.5,
                                          "prefill_ms_mean": 30.0, "ttft_ms_mean": 30.5 + front,
                                          "client_ttft_ms_mean": ttft + front + 5,
                                          "decode_ms_mean": 1000.0, "requests": 8}
        p["latency"]["ttft_us"]["p50"] = round((ttft + front + 30) * 1000)
    twin = fit([(path, doc)])
    sim = twin["sim"]
    assert sim["frontend_ms"] == pytest.approx(8.0)
    assert sim["frontend_growth"] == [[0, 0.0], [1, 12.0], [3, 22.0]]
    assert "front end: 8 ms at C=1, and more with the requests held (0: +0, 1: +12, 3: +22 ms; flat past 3)" \
        in twin["notes"]
    # noise that makes a larger concurrency's front end look faster: never a shrinking wait
    doc["points"][2]["server_timings_prometheus"]["ttft_ms_mean"] = 30.5 + 14.0
    assert fit([(path, doc)])["sim"]["frontend_growth"] == [[0, 0.0], [1, 9.0], [3, 9.0]]
    # without the server's phases: no growth, said by its absence
    for p in doc["points"]:
        del p["server_timings_prometheus"]
    assert fit([(path, doc)])["sim"]["frontend_growth"] is None


def test_a_request_arriving_while_others_are_held_waits_the_front_ends_growth():
    """By the simulator's own trace: the k-th of requests sent together is admitted no sooner
    than frontend_wait_ms(k - 1) after it arrived (the others are still held: 40 tokens each)."""
    import asyncio

    import aiohttp

    from benchc.sim.model import make_config
    from benchc.sim.server import SimServer

    cfg = make_config("minimax-m2.5-tp4", frontend_ms=10.0, frontend_growth=[[0, 0.0], [2, 400.0]])

    async def go():
        server = SimServer(cfg)
        port = await server.start()
        try:
            async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as s:
                async def one():
                    body = {"model": cfg.model, "prompt": "w " * 20, "max_tokens": 40, "stream": True}
                    async with s.post("/v1/completions", json=body) as r:
                        await r.read()
                await asyncio.gather(*(one() for _ in range(3)))
            return server.trace
        finally:
            await server.stop()

    trace = sorted(asyncio.run(go()), key=lambda t: t["arrival_ns"])
    for k, tr in enumerate(trace):
        assert tr["admitted_ns"] - tr["arrival_ns"] >= cfg.frontend_wait_ms(k) * 1e6, k
    assert cfg.frontend_wait_ms(2) == 410.0


def test_compare_says_a_twins_run_is_a_prediction(tmp_path, capsys):
    _, doc = _fixture("result-v1-kimi.json")
    doc["plan"]["combinations"][0]["target"]["sim"] = {"preset": "/somewhere/twin.yaml"}
    twin_run = tmp_path / "twin-run.json"
    twin_run.write_text(json.dumps(doc))
    assert main(["compare", os.path.join(DATA, "result-v1-kimi.json"), str(twin_run)]) == 0
    out = capsys.readouterr().out
    assert ("TWIN: new ran against the twin /somewhere/twin.yaml: its figures are the twin's "
            "predictions, each change the prediction's error") in out
    assert main(["compare", str(twin_run), os.path.join(DATA, "result-v1-kimi.json"),
                 "--format", "json"]) == 0
    (note,) = json.loads(capsys.readouterr().out)["twins"]
    assert note.startswith("base ran against the twin /somewhere/twin.yaml") and "sign reversed" in note
    # two measured runs: no such line
    assert main(["compare", os.path.join(DATA, "result-v1-kimi.json"),
                 os.path.join(DATA, "result-v1-kimi.json")]) == 0
    assert "TWIN" not in capsys.readouterr().out


RUN_SPEC = """\
version: 1
name: {name}
target:
  sim: {{preset: {preset}}}
  model: moonshotai/Kimi-K2.5
workload:
  dataset:
    random: {{input_tokens: {input}, output_tokens: 32, seed: 5}}
load:
  warmup: {{requests: 1}}
  sweep:
    concurrency: {concurrency}
  requests: 8
output:
  path: {path}
"""


def _run(tmp_path, name, preset, concurrency, input_tokens=64):
    spec, out = tmp_path / f"{name}.yaml", tmp_path / f"{name}.json"
    spec.write_text(RUN_SPEC.format(name=name, preset=preset, concurrency=concurrency, path=out,
                                    input=input_tokens))
    assert main(["run", str(spec), "--quiet"]) == 0
    return read(str(out))


@pytest.mark.slow  # three end-to-end runs
def test_a_twin_fitted_at_c1_2_4_predicts_c8_of_the_preset_it_was_fitted_to(tmp_path, capsys):
    """Self-consistency on Kimi's preset (its step law stays near-linear from 2 to 8, so a fit
    from C=1,2,4 can know C=8): the fitted steps are the preset's, and the twin's figures at C=8
    are the preset's own. Both sides of that comparison are the simulator's model (fit.predict
    of the twin's parameters and of the preset's: lock-step batches of 8, no queueing), not two
    timed runs: two runs of 8 requests on a loaded machine differed by more than 3% (one under
    `-n 2 --slow`). The fit itself reads timed runs, whose steps the simulator keeps on absolute
    deadlines. benchmarks/twin.py measures every preset and the open-loop rates, with medians
    over repeats (docs/twin.md: where it holds and where not)."""
    source = _run(tmp_path, "fit", "kimi-k2.5-nvfp4-tp8", "[1, 2, 4]")
    # a second prompt length at C=1 tells the prefill rate from the fixed cost of a first token
    _run(tmp_path, "fit-long", "kimi-k2.5-nvfp4-tp8", "[1]", input_tokens=512)
    assert main(["fit", str(tmp_path / "fit.json"), str(tmp_path / "fit-long.json"),
                 "-o", str(tmp_path / "twin.yaml")]) == 0
    cfg = twin_config(str(tmp_path / "twin.yaml"))
    preset = make_config("kimi-k2.5-nvfp4-tp8")
    for batch in (1, 2, 4, 8):
        assert cfg.step_ms(batch) == pytest.approx(preset.step_ms(batch), rel=0.03), \
            (batch, cfg.step_ms(batch), preset.step_ms(batch))
    # C=8 of 64-token prompts (fresh: none cached) and 32-token answers, as the runs above
    fitted = yaml.safe_load((tmp_path / "twin.yaml").read_text())["sim"]
    twin_says = predict(fitted, 8, 64, 64, 32)
    preset_sim = {"step_table": preset.step_table, "prefill_tok_s": preset.prefill_tok_s}
    preset_says = predict(preset_sim, 8, 64, 64, 32)
    assert twin_says["tpot_p50_ms"] == pytest.approx(preset_says["tpot_p50_ms"], rel=0.03), \
        (twin_says, preset_says)
    assert twin_says["output_tok_s"] == pytest.approx(preset_says["output_tok_s"], rel=0.03), \
        (twin_says, preset_says)
    # the first token: the prefill rate from two prompt lengths, each first token timed by
    # two event loops on a machine whose every core may be busy (3% of the harness's medians;
    # 20% of one run's; a prefill from one length is +50%)
    assert twin_says["ttft_p50_ms"] == pytest.approx(preset_says["ttft_p50_ms"], rel=0.20), \
        (twin_says, preset_says)
    # the twin's own run at C=8 is past the fitted batch sizes: the point says so, as a warning
    # --strict keeps
    twin = _run(tmp_path, "predicted", str(tmp_path / "twin.yaml"), "[8]")["points"][0]
    assert twin["twin"] == {"fitted_batch_max": 4, "batch_max": 8, "extrapolated": True}
    (doubt,) = [d for d in twin["trust"]["doubts"] if d["check"] == "twin_extrapolated"]
    assert not doubt["fails_strict"]
    # nothing else of the twin's doubts fails --strict; a busy machine may make the client limit
    # the run (client_limited: a doubt of the machine, not of the twin)
    strict = [d["check"] for d in twin["trust"]["doubts"] if d["fails_strict"]]
    assert set(strict) <= {"client_limited"}, twin["trust"]["doubts"]
    assert all("twin" not in p for p in source["points"])  # a built-in preset is no twin


def test_a_missing_twin_file_is_a_plan_error_before_anything_runs(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(preset="twins/nothing.yaml"))
    assert main(["validate", str(spec)]) == 2
    err = capsys.readouterr().err
    assert "target.sim.preset" in err and "no such twin file" in err and "Traceback" not in err
