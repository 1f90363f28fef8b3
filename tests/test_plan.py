"""Compiler and Plan: defaults, expansion, hashes, JSON round trip, redaction."""

import json
import os
from pathlib import Path

import jsonschema
import pytest

from benchc.cli import main
from benchc.errors import PlanError
from benchc.plan.compiler import DEFAULTS, compile_spec
from benchc.plan.model import Plan
from benchc.spec import loader as spec
from benchc.spec.loader import load_schema
from tests.conftest import REPO

VALID = os.path.join(REPO, "tests", "specs", "valid", "all-features.yaml")
DEMO = os.path.join(REPO, "specs", "demo.yaml")


def plan_of(path, overrides=(), env=None):
    return compile_spec(spec.load(path, overrides, env if env is not None else {}))


def test_demo_plan_is_byte_identical_across_runs(capsys):
    assert main(["plan", DEMO]) == 0
    first = capsys.readouterr().out
    assert main(["plan", DEMO]) == 0
    assert capsys.readouterr().out == first
    assert json.loads(first)["plan_hash"] == plan_of(DEMO).plan_hash


def test_hash_changes_with_the_workload_not_with_output_or_name():
    base = plan_of(DEMO)
    assert plan_of(DEMO, ["workload.dataset.random.output_tokens=65"]).plan_hash != base.plan_hash
    assert plan_of(DEMO, ["workload.dataset.random.output_tokens=65"]).workload_hash != base.workload_hash
    assert plan_of(DEMO, ["load.requests=13"]).plan_hash != base.plan_hash
    # how many requests is part of the plan, not of the workload's identity
    assert plan_of(DEMO, ["load.requests=13"]).workload_hash == base.workload_hash
    assert plan_of(DEMO, ["output.path=elsewhere/{name}.json"]).plan_hash == base.plan_hash
    assert plan_of(DEMO, ["name=renamed", "description=x"]).plan_hash == base.plan_hash
    assert plan_of(DEMO, ["target.api_key=sk-other"]).plan_hash == base.plan_hash


def test_round_trip_through_json_is_exact():
    plan = plan_of(VALID)
    again = Plan.from_dict(json.loads(plan.to_json(redact=False)))
    assert again == plan
    assert again.with_hashes().plan_hash == plan.plan_hash


def test_unknown_plan_version_is_refused_by_name():
    d = plan_of(DEMO).to_dict()
    d["plan_version"] = 99
    with pytest.raises(PlanError, match="plan_version 99"):
        Plan.from_dict(d)


def test_the_hash_of_a_spec_with_a_simulator_tokenizer_is_the_same_in_any_checkout(tmp_path):
    """The simulator's tokenizer path was hashed made absolute: the same spec in two checkouts
    had two plan hashes, and `merge` refused their shards as different plans."""
    hashes = set()
    for checkout in ("a", "b"):
        d = tmp_path / checkout
        d.mkdir()
        (d / "tok.json").write_text("{}")
        preset = "    preset: minimax-m2.5-tp4\n"
        spec = Path(DEMO).read_text().replace(preset, preset + "    tokenizer: tok.json\n")
        (d / "s.yaml").write_text(spec)
        plan = plan_of(str(d / "s.yaml"))
        assert plan.combinations[0].target.sim["tokenizer"] == str(d / "tok.json")  # for the subprocess
        hashes.add(plan.plan_hash)
    assert len(hashes) == 1


def test_secrets_never_appear_in_a_printed_plan(capsys):
    assert main(["plan", VALID]) == 0
    out = capsys.readouterr().out
    for secret in ("sk-test-secret", "sk-header-secret", "sk-argv-secret", "hf-env-secret"):
        assert secret not in out
    d = json.loads(out)
    t = d["combinations"][0]["target"]
    assert t["api_key"] == "***" and t["headers"]["Authorization"] == "***"
    assert d["combinations"][0]["server"]["env"] == {"HF_TOKEN": "***", "OMP_NUM_THREADS": "4"}


def test_matrix_expansion_with_exclude_and_typed_values():
    plan = plan_of(VALID)
    assert [c.matrix for c in plan.combinations] == [
        {"size": "small", "seqs": 64}, {"size": "large", "seqs": 64}, {"size": "large", "seqs": 128}]
    assert [c.target.model for c in plan.combinations] == ["m-small", "m-large", "m-large"]
    assert plan.combinations[1].server.command[:5] == ["vllm", "serve", "m", "--size", "large"]
    kinds = [(s.kind, s.combination) for s in plan.steps]
    assert kinds[:6] == [("server", 0), ("smoke", 0), ("warmup", 0), ("load", 0), ("load", 0), ("load", 0)]
    assert len(plan.load_steps()) == 9


def test_units_and_defaults_are_normalised():
    plan = plan_of(VALID)
    t = plan.combinations[0].target
    assert (t.timeout_s, t.idle_timeout_s, t.api) == (90.0, 0.5, "completions")
    s = plan.combinations[0].server
    assert (s.ready_timeout_s, s.ready_interval_s, s.stop_timeout_s) == (900.0, 0.25, 10.0)
    rates = [st.load.rate_rps for st in plan.load_steps()[:3]]
    assert rates == [1.0, 2.5, 10.0]
    first = plan.load_steps()[0]
    assert (first.load.arrival, first.load.burstiness, first.load.max_concurrency, first.duration_s,
            first.load.ramp_up_s, first.load.cooldown_s) == ("gamma", 0.5, 32, 60.0, 2.0, 1.0)
    assert plan.saturation == {"min_gain": 0.05, "latency": "ttft.p99", "max_error_rate": 0.1}
    demo = plan_of(DEMO)
    c = demo.combinations[0]
    assert c.target.sim == {"preset": "minimax-m2.5-tp4"}
    assert c.workload.sampling.ignore_eos is True  # DEFAULTS: random datasets ask for exact lengths
    assert c.workload.input_tokens == {"method": "words", "min": 256, "mean": 256.0, "max": 256}
    warm = [s for s in demo.steps if s.kind == "warmup"][0]
    assert (warm.requests, warm.load.concurrency) == (2, 1)


def test_slo_compiled_to_microseconds():
    slo = plan_of(VALID).slo
    assert [(s.metric, s.stat, s.op, s.value) for s in slo] == [
        ("ttft", "p50", "<", 500_000), ("ttft", "p99", "<", 2_000_000), ("itl", "p99.9", "<", 100_000),
        ("error_rate", None, "<=", 0.01), ("output_tok_s", None, ">", 100)]


def test_missing_dataset_file_is_a_plan_error(tmp_path):
    f = tmp_path / "s.yaml"
    with open(DEMO) as fh:
        text = fh.read()
    f.write_text(text.replace("random:\n      input_tokens: 256\n      output_tokens: 64\n"
                                           "      seed: 1", "jsonl: {path: nowhere.jsonl}"))
    with pytest.raises(PlanError, match="nowhere.jsonl"):
        plan_of(str(f))


def test_defaults_name_real_schema_keys():
    """Every DEFAULTS entry names a key the schema knows, so the table cannot drift."""
    schema = load_schema("spec-v1")

    def has(node, parts):
        if not parts:
            return True
        props = node.get("properties", {})
        head = parts[0]
        if head == "*":
            return any(has(v, parts[1:]) for v in props.values())
        if head in props:
            sub = props[head]
            if "$ref" in sub:
                sub = schema["$defs"][sub["$ref"].rsplit("/", 1)[1]]
            if sub.get("type") == "array":
                sub = sub["items"]
            return has(sub, parts[1:])
        return False

    for key in DEFAULTS:
        parts = key.split(".")
        # a few entries qualify a key by case (ignore_eos.random) or name a derived value
        assert has(schema, parts) or has(schema, parts[:-1]), key


def test_all_example_specs_validate(capsys):
    specs = sorted(os.path.join(REPO, "specs", f) for f in os.listdir(os.path.join(REPO, "specs"))
                   if f.endswith(".yaml"))
    assert main(["validate", *specs]) == 0
    # every spec there, however many a user has added (the README invites adding one's own)
    assert capsys.readouterr().out.count("valid (") == len(specs)
    assert {"demo.yaml", "my-server.yaml", "stress.yaml"} <= {os.path.basename(s) for s in specs}


def test_schema_itself_is_valid_draft_2020_12(capsys):
    assert main(["schema", "spec"]) == 0
    jsonschema.Draft202012Validator.check_schema(json.loads(capsys.readouterr().out))


def test_every_step_has_its_own_prompt_stream_and_digest():
    plan = plan_of(DEMO)
    steps = [s for s in plan.steps if s.kind in ("warmup", "load")]
    assert [s.prompt_stream for s in steps] == list(range(len(steps)))
    assert len({s.prompts_sha256 for s in steps}) == len(steps)  # fresh: no two alike
    assert plan.combinations[0].workload.prompts == "fresh"
    shared = plan_of(DEMO, ["workload.prompts=shared"])
    assert len({s.prompts_sha256 for s in shared.load_steps()}) == 1  # one set for every point
    assert shared.plan_hash != plan.plan_hash and shared.workload_hash != plan.workload_hash
    # the seed decides every prompt: another seed, another plan
    assert plan_of(DEMO, ["workload.dataset.random.seed=2"]).plan_hash != plan.plan_hash
    # a reset changes what is measured: part of the plan's identity
    assert plan_of(DEMO, ["server={attach: true, reset_cache: between_points}"]).plan_hash != plan.plan_hash


def test_a_v1_plan_reads_as_shared_prompts():
    d = plan_of(DEMO).to_dict()
    d["plan_version"] = 1
    for c in d["combinations"]:
        del c["workload"]["prompts"]
    for s in d["steps"]:
        del s["prompt_stream"], s["prompts_sha256"]
    old = Plan.from_dict(d)
    assert old.plan_version == 1 and old.combinations[0].workload.prompts == "shared"
