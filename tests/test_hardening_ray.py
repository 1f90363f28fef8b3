"""Hardening round 4, class 9 (issue 44): `--backend ray` without `--ray-address` starts a
Ray instance of its own (address "local": never the cluster a `ray start` on the machine
last recorded, nor RAY_ADDRESS's), and the workers get only the secrets they need: the
target's credentials, not the server's launch command and environment."""

import json
import sys
import types

import pytest

from benchc.plan.compiler import compile_spec
from benchc.run import ray_backend
from benchc.run.ray_backend import RayBackend
from benchc.spec.loader import load


class FakeRay(types.ModuleType):
    """The calls RayBackend._connect makes, recorded."""

    def __init__(self):
        super().__init__("ray")
        self.inits: list[dict] = []

    def is_initialized(self):
        return False

    def init(self, **kwargs):
        self.inits.append(kwargs)


@pytest.mark.parametrize("address, joins", [(None, "local"), ("auto", "auto"), ("ray://10.0.0.1:10001",
                                                                                  "ray://10.0.0.1:10001")])
def test_without_an_address_ray_starts_an_instance_of_its_own(monkeypatch, address, joins):
    fake = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setenv("RAY_ADDRESS", "10.9.9.9:6379")  # another user's cluster: not for a run without one
    monkeypatch.setattr("benchc.run.ray_backend._check_reachable", lambda a: None)
    backend = RayBackend(address, workers=1)
    backend._connect()
    assert [i["address"] for i in fake.inits] == [joins]
    assert backend.where == (address or "local (a Ray instance of this run's own)")


SPEC = """\
version: 1
name: w
target:
  base_url: http://127.0.0.1:8000/v1
  model: m
  api_key: sk-target-key-1234567890
  headers: {X-Team: blue}
server:
  command: [vllm, serve, m, --api-key, sk-server-key-1234567890]
  env: {HF_TOKEN: hf_launch_secret_1234567890}
workload:
  dataset:
    random: {input_tokens: 8, output_tokens: 8}
load:
  sweep:
    concurrency: [1]
  requests: 1
"""


def test_workers_get_the_targets_credentials_not_the_servers_launch_secrets(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC)
    plan = compile_spec(load(str(spec), env={}))
    shipped = ray_backend.worker_plan(plan)
    text = json.dumps(shipped)
    assert shipped["combinations"][0]["target"]["api_key"] == "sk-target-key-1234567890"  # it sends requests
    assert "hf_launch_secret_1234567890" not in text and "sk-server-key-1234567890" not in text
    assert shipped["plan_hash"] == plan.plan_hash
    # what a worker builds from it is the driver's plan but for the server it never launches
    from benchc.plan.model import Plan

    assert Plan.from_dict(shipped).combinations[0].target == plan.combinations[0].target


@pytest.mark.slow  # a Ray instance of its own, started and stopped by the run
def test_a_run_without_an_address_ignores_ray_address_and_runs_on_its_own_instance(tmp_path):
    """RAY_ADDRESS names a cluster where nothing answers (another user's, gone): the run does not
    try it (it did: `cannot join the Ray cluster at auto`, exit 3) and measures on its own."""
    import os
    import subprocess

    pytest.importorskip("ray")
    spec = tmp_path / "s.yaml"
    spec.write_text("version: 1\nname: r\ntarget: {sim: {preset: instant}, model: m}\n"
                    "workload: {dataset: {random: {input_tokens: 8, output_tokens: 4}}}\n"
                    "load: {sweep: {concurrency: [1]}, requests: 2}\n")
    env = {**os.environ, "RAY_ADDRESS": "127.0.0.1:9"}
    argv = [sys.executable, "-m", "benchc", "run", str(spec), "--backend", "ray", "--workers", "1",
            "--out", str(tmp_path / "r.json")]
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["backend"]["kind"] == "ray" and doc["points"][0]["counts"]["completed"] == 2
