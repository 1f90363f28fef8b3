"""-v/--verbose: what a run does, logged to stderr for diagnosing a hung or slow run, never a
secret; nothing at all without it."""

import sys

import pytest

from benchc.cli import main

pytestmark = pytest.mark.slow  # every test here launches a server as a real process

API_KEY = "sk-test-key-4f1c9e"

SPEC = f"""\
version: 1
name: verbose
target:
  base_url: http://127.0.0.1:{{free}}/v1
  model: m
  api_key: {API_KEY}
server:
  command: [{sys.executable}, -m, benchc, sim, --preset, instant, --port, "{{free}}", --model, m, -vv]
  ready: {{timeout: 30s, interval: 100ms}}
workload:
  dataset:
    random: {{input_tokens: 8, output_tokens: 4}}
load:
  warmup: {{requests: 1}}
  sweep: {{concurrency: [2]}}
  requests: 4
"""


def run(tmp_path, *flags: str, spec_text: str = SPEC) -> int:
    spec = tmp_path / "s.yaml"
    spec.write_text(spec_text)
    return main(["run", str(spec), "--quiet", "--out", str(tmp_path / "r.json"), *flags])


def test_vv_logs_the_run_and_no_secret(tmp_path, capfd):
    assert run(tmp_path, "-vv") == 0
    err = capfd.readouterr().err
    for line in ("benchc.run.server: launched (pid ", "benchc.run.server: waiting for http://127.0.0.1:",
                 "benchc.run.server: ready: /health answered 200", "benchc.run.runner: c=2: start",
                 "benchc.run.runner: c=2: end: 4 sent, 4 completed, 0 failed",
                 "benchc.client.http1: opened a connection to 127.0.0.1:"):
        assert line in err, line
    assert API_KEY not in err
    # `benchc sim -vv` logs into the launched server's log file
    server_log = (tmp_path / "r.server-0.log").read_text()
    assert "benchc.sim.server: accepting connections on 127.0.0.1:" in server_log
    assert server_log.count("benchc.sim.server: request ") == 5  # the warm-up request and 4 measured


def test_v_logs_points_but_not_connections(tmp_path, capfd):
    assert run(tmp_path, "--verbose") == 0
    err = capfd.readouterr().err
    assert "benchc.run.runner: c=2: start" in err and "opened a connection" not in err


def test_silent_without_v(tmp_path, capfd):
    assert run(tmp_path) == 0
    assert "benchc." not in capfd.readouterr().err


def test_url_credentials_are_not_logged(tmp_path, capfd):
    password = "pw-7d2a0b"
    # (without api_key: aiohttp refuses an Authorization header beside credentials in the URL)
    text = SPEC.replace("http://127.0.0.1", f"http://user:{password}@127.0.0.1")
    text = text.replace(f"  api_key: {API_KEY}\n", "")
    assert run(tmp_path, "-vv", spec_text=text) == 0
    err = capfd.readouterr().err
    assert "benchc.run.server: waiting for http://***@127.0.0.1:" in err and password not in err
