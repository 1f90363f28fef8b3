"""Deploy -> verify -> benchmark: a launched server (`benchc sim` as a real subprocess),
readiness, smoke checks, stop, a server killed mid-run, benchc stopped by SIGTERM,
telemetry from a fake nvidia-smi and the simulator's /metrics, and a matrix."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from benchc.cli import main
from benchc.results.document import read
from tests.conftest import wait_for

pytestmark = pytest.mark.slow  # every test here launches servers as real processes

SPEC = """\
version: 1
name: deploy
target:
  base_url: http://127.0.0.1:{{free}}/v1
  model: {model}
server:
  command: [{python}, -m, benchc, sim, --preset, {preset}, --port, "{{free}}", --model, {model},
            --trace, {trace}]
  ready: {{timeout: 30s, interval: 100ms}}
  stop_timeout: 5s
smoke:
  checks:
    - {{name: words, prompt: "say something", expect: "\\\\w+", max_tokens: 4}}
workload:
  dataset:
    random: {{input_tokens: 16, output_tokens: {out}}}
load:
  warmup: {{requests: 0}}
  sweep: {{concurrency: {conc}}}
  requests: {requests}
{extra}
output:
  path: {path}
"""


def write(tmp_path, model="sim-model", preset="minimax-m2.5-tp4", out=16, conc="[1, 2]", requests=4,
          extra=""):
    f = tmp_path / "deploy.yaml"
    f.write_text(SPEC.format(model=model, python=sys.executable, preset=preset, out=out, conc=conc,
                             requests=requests, extra=extra, path=str(tmp_path / "r.json"),
                             trace=str(tmp_path / "trace.jsonl")))
    return str(f)


def finished_requests(tmp_path) -> int:
    """Requests the launched simulator has finished (its trace file, one line each)."""
    trace = tmp_path / "trace.jsonl"
    return len(trace.read_text().splitlines()) if trace.exists() else 0


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_launch_ready_smoke_sweep_stop(tmp_path, capsys):
    spec = write(tmp_path)
    assert main(["run", spec, "--quiet"]) == 0
    doc = read(str(tmp_path / "r.json"))
    combo = doc["combinations"][0]
    assert combo["status"] == "ok" and combo["server"]["kind"] == "launched"
    assert 0 < combo["server"]["load_time_s"] < 30
    assert combo["smoke"]["passed"] is True
    check = combo["smoke"]["checks"][0]
    assert check["non_streaming"]["passed"] and check["streaming"]["passed"]
    assert len(check["streaming"]["excerpt"].split()) == 4
    assert [p["id"] for p in doc["points"]] == ["c=1", "c=2"]
    assert not alive(combo["server"]["pid"])  # stopped, whole process group
    log = Path(combo["server"]["log"]).read_text()
    assert "benchc: launching" in log and "listening on" in log


def test_failing_smoke_stops_before_the_benchmark(tmp_path, capsys):
    spec = write(tmp_path)
    Path(spec).write_text(Path(spec).read_text().replace('expect: "\\\\w+"', 'expect: "(?i)paris"'))
    assert main(["run", spec, "--quiet"]) == 3
    doc = read(str(tmp_path / "r.json"))
    assert doc["combinations"][0]["status"] == "smoke_failed" and doc["points"] == []
    assert "smoke checks failed" in capsys.readouterr().err


def test_server_that_never_becomes_ready_is_reported_with_its_log(tmp_path, capsys):
    spec = write(tmp_path)
    text = Path(spec).read_text().replace("--model, sim-model,", "--model, other-model,")
    Path(spec).write_text(text.replace("timeout: 30s", "timeout: 2s"))
    assert main(["run", spec, "--quiet"]) == 3
    doc = read(str(tmp_path / "r.json"))
    combo = doc["combinations"][0]
    assert combo["status"] == "server_failed"
    assert "not ready after 2s (/v1/models lists ['other-model'], not 'sim-model')" in combo["error"]
    assert "listening on" in combo["log_tail"]
    assert not alive(combo["server"]["pid"])


def _start_run(tmp_path, spec):
    p = subprocess.Popen([sys.executable, "-m", "benchc", "run", spec], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    pid = None
    for line in p.stderr:
        if "launched the server (pid " in line:
            pid = int(line.split("(pid ")[1].split(")")[0])
        if line.startswith("ready after "):
            break
    return p, pid


def test_server_killed_mid_run_is_reported_and_the_partial_result_written(tmp_path):
    spec = write(tmp_path, out=200, conc="[2, 4]", requests=40)
    p, pid = _start_run(tmp_path, spec)
    # the smoke check is one request; a second finished one is the sweep's
    wait_for(lambda: finished_requests(tmp_path) >= 3, "requests of the sweep to finish")
    os.kill(pid, signal.SIGKILL)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 3, err
    assert "the server exited with status -9 during the run" in err
    doc = read(str(tmp_path / "r.json"))
    assert doc["complete"] is False
    combo = doc["combinations"][0]
    assert combo["status"] == "server_died" and "listening on" in combo["log_tail"]
    point = doc["points"][0]
    assert point["complete"] is False and point["counts"]["failed"] >= 1


def test_sigterm_to_benchc_stops_the_server_and_writes(tmp_path):
    spec = write(tmp_path, out=200, conc="[2]", requests=40)
    p, pid = _start_run(tmp_path, spec)
    wait_for(lambda: finished_requests(tmp_path) >= 3, "requests of the sweep to finish")
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=60)
    assert p.returncode == 130
    assert not alive(pid)
    assert read(str(tmp_path / "r.json"))["interrupted"] is True


FAKE_SMI = """#!/usr/bin/env python3
import sys, time
busy = [(0, 97000, 97.0, 650.0), (1, 96900, 95.0, 640.0), (2, 96800, 96.0, 655.0), (3, 96700, 94.0, 630.0)]
idle = [(i, 4, 0.0, 33.0) for i in range(4, 8)]
while True:
    for i, mem, util, power in busy + idle:
        print(f"{i}, NVIDIA H200, {mem}, 143771, {util}, {power}", flush=True)
    time.sleep(0.1)
"""


def test_gpu_and_server_telemetry(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    spec = write(tmp_path, out=32, conc="[4]", requests=8)
    assert main(["run", spec, "--quiet"]) == 0
    t = read(str(tmp_path / "r.json"))["points"][0]["telemetry"]
    gpus = t["gpu"]["gpus"]
    assert len(gpus) == 8 and [g["index"] for g in gpus] == [str(i) for i in range(8)]
    assert gpus[0]["memory_used_mib"]["mean"] == 97000 and gpus[0]["name"] == "NVIDIA H200"
    assert all(g["power_w"]["mean"] == 33.0 and g["utilization_pct"]["max"] == 0.0 for g in gpus[4:])
    assert t["gpu"]["power_w_total_mean"] == 650 + 640 + 655 + 630 + 4 * 33
    assert t["gpu"]["joules_per_output_token"] > 0 and t["gpu"]["output_tok_s_per_watt"] > 0
    agree = t["server"]["token_agreement"]
    assert agree["server"] == agree["benchc"] == 8 * 32 and agree["relative_difference"] == 0
    assert t["server"]["running"]["max"] <= 4
    assert t["host"]["available"] is True and 0 < t["host"]["busy_fraction"] <= 1


def test_matrix_with_two_presets_gives_one_result(tmp_path):
    spec = write(tmp_path, preset='"${matrix.preset}"', conc="[1]", requests=3,
                 extra="matrix:\n  preset: [minimax-m2.5-tp4, kimi-k2.5-nvfp4-tp8]")
    assert main(["run", spec, "--quiet"]) == 0
    doc = read(str(tmp_path / "r.json"))
    assert [c["matrix"] for c in doc["combinations"]] == [{"preset": "minimax-m2.5-tp4"},
                                                          {"preset": "kimi-k2.5-nvfp4-tp8"}]
    assert [(p["id"], p["matrix"]["preset"]) for p in doc["points"]] == [
        ("preset=minimax-m2.5-tp4/c=1", "minimax-m2.5-tp4"), ("preset=kimi-k2.5-nvfp4-tp8/c=1",
                                                              "kimi-k2.5-nvfp4-tp8")]
    minimax, kimi = (p["throughput"]["output_tok_s"] for p in doc["points"])
    assert minimax > kimi  # ~84 vs ~61 tok/s single-stream
    assert json.dumps(doc["combinations"]).count('"status": "ok"') == 2
