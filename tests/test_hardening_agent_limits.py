"""Hardening round 4, the spec half of class 4 (issue 44): the ceilings count what an agent
loop grows to (max_tool_calls x (tool_result_tokens + output) per user message, every turn's
images sent again), every duration of a spec has one, and the open-file check counts an
agent loop's fan-out, not only its sessions."""

import resource
import subprocess
import sys

import pytest

from benchc.cli import main

AGENT = """\
version: 1
name: a
target:
  sim: {{preset: instant}}
  model: m
workload:
  dataset:
    sessions:
      turns: {turns}
      input_tokens: 32
      output_tokens: 16
  tools:
    synthetic: {{count: 2, tokens: 20}}
  agent:
    tool_result_tokens: {result}
    max_tool_calls: {calls}
    fan_out: {fan_out}
{images}load:
  sweep:
    concurrency: [4]
  sessions: 4
  duration: {duration}
output: {{path: {out}}}
"""


def _spec(tmp_path, turns=2, result=100, calls=4, fan_out=1, images="", duration="10s") -> str:
    f = tmp_path / "s.yaml"
    f.write_text(AGENT.format(turns=turns, result=result, calls=calls, fan_out=fan_out, images=images,
                              duration=duration, out=tmp_path / "r.json"))
    return str(f)


def _refused(spec: str, capsys) -> str:
    assert main(["validate", spec]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_the_spec_as_written_is_valid(tmp_path, capsys):
    assert main(["validate", _spec(tmp_path, images="  images: {count: 1, width: 64, height: 64}\n")]) == 0


def test_tool_rounds_of_ten_billion_tokens_are_refused(tmp_path, capsys):
    err = _refused(_spec(tmp_path, result=10_000_000, calls=1000), capsys)
    assert f"{tmp_path / 's.yaml'}:15:5: $.workload.agent: " in err
    assert ("10,000,016,000 tokens in one user message's tool rounds (max_tool_calls 1000 x "
            "(tool_result_tokens + output)) is more than 10,000,000") in err


def test_a_tool_result_past_the_token_ceiling_is_refused_at_its_key(tmp_path, capsys):
    err = _refused(_spec(tmp_path, result=20_000_000, calls=1), capsys)
    assert "$.workload.agent.tool_result_tokens: 20,000,000 tokens per request is more than 10,000,000" in err


def test_the_last_turn_counts_every_turns_tool_rounds(tmp_path, capsys):
    # 100 turns x (32 + 16 + 8 x (12,000 + 16)): 9,617,600 tokens in the last request, within
    assert main(["validate", _spec(tmp_path, turns=100, result=12_000, calls=8)]) == 0
    err = _refused(_spec(tmp_path, turns=110, result=12_000, calls=8), capsys)
    assert ("$.workload.dataset.sessions.turns: 10,579,360 tokens in a session's last turn (turns x "
            "(input + output + max_tool_calls x (tool_result_tokens + output))) is more than") in err


def test_the_last_turn_counts_every_turns_images(tmp_path, capsys):
    images = "  images: {count: 4, width: 1024, height: 1024}\n"
    assert main(["validate", _spec(tmp_path, turns=16, images=images)]) == 0  # 2^26 exactly
    err = _refused(_spec(tmp_path, turns=17, images=images), capsys)
    assert ("$.workload.images: 71,303,168 pixels of images in a session's last turn (17 turns x 4 images "
            "of 1024 x 1024, every turn's sent again) is more than 67,108,864") in err


@pytest.mark.parametrize("duration", ["1.0e+20", "100000000000000000000s", "1000000h"])
def test_a_duration_past_thirty_days_fails_validate(tmp_path, capsys, duration):
    err = _refused(_spec(tmp_path, duration=duration), capsys)
    assert f"{tmp_path / 's.yaml'}:22:13: $.load.duration: " in err
    assert "more than the 2,592,000 s (30 days) benchc takes" in err


def test_a_think_time_and_a_timeout_are_durations_too(tmp_path, capsys):
    spec = _spec(tmp_path)
    assert main(["validate", spec, "--set", "workload.agent.tool_latency={min: 1s, max: 1.0e+20}"]) == 2
    assert "$.workload.agent.tool_latency.max: " in capsys.readouterr().err
    assert main(["validate", spec, "--set", "target.timeout=99999999h"]) == 2
    assert "$.target.timeout: '99999999h' is a duration of" in capsys.readouterr().err


def test_fan_out_counts_against_the_open_file_limit_before_anything_runs(tmp_path):
    """4 sessions x fan-out 256 under `ulimit -n 256`: refused up front, exit 2 (it once ran
    and gave 785 client_exhausted requests)."""
    spec = _spec(tmp_path, fan_out=256, duration="2s")

    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    p = subprocess.run([sys.executable, "-m", "benchc", "run", spec], preexec_fn=low_limit,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "4 sessions x fan-out 256 (the plan's widest point) need about 1088 file descriptors" in p.stderr
    assert "may open at most 256 (ulimit -Hn)" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "r.json").exists()
