"""GPU energy per point (run/power.py): the simulator's modelled power integrated by the
test itself against the joules per token benchc reports, idle GPUs in the result, the
nvidia-smi path with a fake nvidia-smi, and the integration rules."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import urllib.request

import pytest

from benchc.cli import main
from benchc.results.document import read
from benchc.run.power import PowerSampler, energy_between
from benchc.run.telemetry import GpuSampler
from tests.conftest import wait_for

SPEC = """\
version: 1
name: energy
target: {{base_url: "{base}", model: sim-model}}
server: {{attach: true}}
workload:
  dataset:
    random: {{input_tokens: 16, output_tokens: {out}, seed: 5}}
load:
  warmup: {{requests: 0}}
  sweep: {{concurrency: [{conc}]}}
  requests: {requests}
output:
  path: {path}
"""


@pytest.fixture
def sim():
    """`benchc sim` on the MiniMax TP=4 preset (4 of 8 simulated GPUs), attached to as a server."""
    p = subprocess.Popen([sys.executable, "-m", "benchc", "sim", "--preset", "minimax-m2.5-tp4",
                          "--port", "0", "--model", "sim-model"], stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert "listening on " in line
        yield line.split("listening on ")[1].split()[0]
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=10)
        p.stdout.close()


def modelled_joules(log: dict, a: int, b: int) -> float:
    """One server GPU's energy over [a, b] from the simulator's own record of its draw: a step
    function that changes at each logged instant."""
    changes = log["server_changes"]
    total = 0.0
    for (t0, w), nxt in zip(changes, changes[1:] + [[b, None]], strict=True):
        lo, hi = max(t0, a), min(nxt[0], b)
        if hi > lo:
            total += w * (hi - lo) / 1e9
    return total


def test_joules_per_token_equal_the_modelled_power_over_the_window(tmp_path, sim):
    spec = tmp_path / "e.yaml"
    spec.write_text(SPEC.format(base=sim, out=32, conc=4, requests=16, path=tmp_path / "r.json"))
    assert main(["run", str(spec), "--quiet"]) == 0
    with urllib.request.urlopen(sim.removesuffix("/v1") + "/sim/power?log=1") as r:
        truth = json.load(r)["log"]
    doc = read(str(tmp_path / "r.json"))
    assert doc["combinations"][0]["gpus"] == {"count": 4, "source": "simulator", "indices": [0, 1, 2, 3]}
    (point,) = doc["points"]
    e = point["energy"]
    assert (e["available"], e["source"], e["window"]) == (True, "simulator", "steady")
    assert e["method"] == "energy counters"
    a, b = e["start_ns"], e["end_ns"]
    assert e["output_tokens"] == round(point["steady"]["decoded_tokens"]) > 0
    assert e["output_tokens_counted"] == "decoded"
    want = 4 * modelled_joules(truth, a, b) / e["output_tokens"]
    assert e["joules_per_output_token"] == pytest.approx(want, rel=0.01)
    # Four rounds per slot (16 requests at c=4) that end together: the steady span ends with
    # the last round, and its tokens are the ones decoded in it, the last round's too. So joules
    # per token agree with the model's over the whole point (every token the server produced);
    # counting only the requests completed in the span (3 rounds of 4) made them a third high.
    w = point["window"]
    whole = 4 * modelled_joules(truth, w["start_ns"], w["end_ns"]) / point["tokens"]["output"]
    assert e["joules_per_output_token"] == pytest.approx(whole, rel=0.03)
    assert point["steady"]["output_tokens"] == 3 * 4 * 32  # completed in the span: steady_output_tok_s's
    assert e["joules_per_request"] == pytest.approx(want * 32, rel=0.01)  # 32 tokens per request
    # every GPU of the (simulated) machine, the idle ones too, told apart
    assert [(g["index"], g["server"]) for g in e["gpus"]] == [(i, i < 4) for i in range(8)]
    for g in e["gpus"][4:]:
        assert g["power_w"] == pytest.approx(truth["idle_w"], rel=0.01)
    idle_j = sum(g["joules"] for g in e["gpus"][4:])
    assert e["machine"]["joules"] == pytest.approx(e["server"]["joules"] + idle_j)
    # the same through benchc.results
    import benchc.results

    got = benchc.results.load(str(tmp_path / "r.json")).points[0].energy
    assert (got.source, got.server_gpus, got.joules_per_output_token) == ("simulator", (0, 1, 2, 3),
                                                                          e["joules_per_output_token"])
    assert got.machine_joules == e["machine"]["joules"] and len(got.gpus) == 8
    # the decision per joule, where power was measured
    assert doc["frontier"]["points"][0]["goodput_per_kj"] == pytest.approx(
        point["throughput"]["goodput_s"] / e["server"]["power_w"] * 1000, rel=1e-4)
    assert doc["decision"][0]["per_joule"]["best"]["point"] == "c=4"


FAKE_SMI = """#!/usr/bin/env python3
import sys, time
rows = [(0, 650.0), (1, 640.0), (2, 655.0), (3, 630.0)] + [(i, 33.0) for i in range(4, 8)]
while True:
    for i, power in rows:
        print(f"{i}, NVIDIA H200, 1000, 143771, 50.0, {power}", flush=True)
    time.sleep(0.05)
"""


def test_nvidia_smi_rows_give_energy_with_idle_gpus_apart(tmp_path, monkeypatch):
    """The nvidia-smi path: its stamped rows integrated; GPUs 4-7 idle, GPUs 0-3 the server's."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")

    async def sample() -> dict:
        gpu = GpuSampler(interval_ms=50)
        assert await gpu.start()
        await asyncio.to_thread(wait_for, lambda: len(gpu.stamped.get("7", [])) >= 6, "nvidia-smi rows")
        await gpu.stop()
        power = PowerSampler(None, gpu)
        rows = gpu.stamped["0"]
        a, b = rows[1][0], rows[-2][0]
        return power.block(a, b, "whole", 1000, 10.0, [0, 1, 2, 3])

    e = asyncio.run(sample())
    assert (e["source"], e["method"]) == ("nvidia-smi", "power samples, trapezoid rule")
    assert [(g["index"], g["server"], g["power_w"]) for g in e["gpus"]] == [
        (0, True, 650.0), (1, True, 640.0), (2, True, 655.0), (3, True, 630.0),
        *((i, False, 33.0) for i in range(4, 8))]
    assert e["server"]["power_w"] == pytest.approx(2575.0, rel=1e-5)
    assert e["joules_per_output_token"] == pytest.approx(2575.0 * e["window_s"] / 1000, rel=1e-5)
    assert e["joules_per_request"] == pytest.approx(e["joules_per_output_token"] * 10)
    assert e["machine"]["power_w"] == pytest.approx(2575.0 + 4 * 33.0, rel=1e-5)


def test_unknown_server_gpus_count_the_machine_and_say_so():
    power = PowerSampler(None)
    power.samples = {0: [(0, 100.0, None), (2_000_000_000, 100.0, None)],
                     1: [(0, 50.0, None), (2_000_000_000, 50.0, None)]}
    e = power.block(0, 1_000_000_000, "whole", 10, None, None)
    assert e["server"] == {"gpus": None, "power_w": 150.0, "joules": 150.0} and "not known" in e["note"]
    assert "joules_per_request" not in e and e["joules_per_output_token"] == 15.0
    assert PowerSampler(None).block(0, 1, "whole", 1, None, None) == {"available": False}


def test_energy_between_counters_and_trapezoid():
    s = 1_000_000_000
    # counters: read at the window's edges, linear between samples
    counted = [(0, 100.0, 0.0), (s, 300.0, 200.0), (2 * s, 100.0, 400.0)]
    assert energy_between(counted, 0, 2 * s) == (400.0, True)
    # draws of 100 W and 300 W at the ends of an interval that took 200 J: one change, at
    # 0.5 s; the counter at 0.5 s and 1.5 s follows it
    assert energy_between(counted, s // 2, 3 * s // 2) == (pytest.approx(300.0), True)
    # a load that starts at 0.8 s inside a 1 s poll: idle 60 W, then 300 W
    start = [(0, 60.0, 0.0), (s, 300.0, 60 * 0.8 + 300 * 0.2)]
    assert energy_between(start, s // 2, s)[0] == pytest.approx(60 * 0.3 + 300 * 0.2)
    # equal draws at both ends: linear between the counters
    flat = [(0, 100.0, 0.0), (s, 100.0, 150.0)]
    assert energy_between(flat, 0, s // 2)[0] == pytest.approx(75.0)
    # power only: trapezoid, the edge draw interpolated, held beyond the samples
    powered = [(0, 100.0, None), (s, 300.0, None)]
    assert energy_between(powered, 0, s) == (pytest.approx(200.0), False)
    assert energy_between(powered, s // 2, 2 * s) == (pytest.approx(0.5 * (200 + 300) / 2 + 300.0), False)
    assert energy_between([(5, 42.0, None)], 0, s) == (pytest.approx(42.0), False)


class FakeNvml:
    """pynvml's calls benchc makes, over two GPUs whose counters rise at 300 W and 40 W."""

    def __init__(self):
        self.t = 0.0  # seconds, moved by the test

    def nvmlInit(self):
        pass

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA H200"

    def nvmlDeviceGetPowerUsage(self, h):
        return (300_000, 40_000)[h]  # mW

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        return int((300_000, 40_000)[h] * self.t)  # mJ


def test_nvml_source_reads_power_and_counters(monkeypatch):
    from benchc.run.power import NvmlSource

    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    source = NvmlSource.open()
    assert source is not None and source.names == ["NVIDIA H200", "NVIDIA H200"]
    power = PowerSampler(source)
    for t in (0.0, 1.0, 2.0):
        fake.t = t
        stamp, rows = asyncio.run(source.read())
        assert stamp is None and rows[0][2:] == (300.0, 300.0 * t) and rows[1][2:] == (40.0, 40.0 * t)
        for index, name, w, j in rows:
            power.samples.setdefault(index, []).append((int(t * 1e9), w, j))
            power.names[index] = name
    e = power.block(500_000_000, 1_500_000_000, "steady", 100, None, [0])
    assert (e["source"], e["method"]) == ("nvml", "energy counters")
    assert e["server"] == {"gpus": [0], "power_w": 300.0, "joules": 300.0}
    assert e["machine"]["joules"] == 340.0 and e["joules_per_output_token"] == 3.0
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed: no NVML, no error
    assert NvmlSource.open() is None


def test_shards_steady_spans_merge_to_the_span_all_were_steady():
    """A Ray point's energy window (run/point.py): where every shard was steady, with each
    shard's steady tokens scaled to it; none where a shard had no steady span or they miss."""
    from benchc.metrics.aggregate import Tally
    from benchc.run.point import Measurement, common_steady_span

    def shard(span, tokens):
        return Measurement(tally=Tally(), client={}, steady={}, mean_inflight=None, params={},
                           steady_ns=span, steady_tokens=tokens)

    s = 1_000_000_000
    span, tokens = common_steady_span([shard((0, 10 * s), 1000), shard((2 * s, 12 * s), 500)])
    assert span == (2 * s, 10 * s) and tokens == pytest.approx(1000 * 0.8 + 500 * 0.8)
    assert common_steady_span([shard((0, 10 * s), 1000)]) == ((0, 10 * s), 1000)  # one shard: its own
    assert common_steady_span([shard((0, s), 10), shard((2 * s, 3 * s), 10)]) == (None, None)
    assert common_steady_span([shard((0, s), 10), shard(None, None)]) == (None, None)


def test_a_requests_tokens_count_by_the_share_of_its_decode_span_in_the_window():
    """RequestRecord.tokens_within: the steady span's token count (and so joules per token)."""
    from benchc.metrics.record import RequestRecord, Times, Tokens

    def req(first, end, tokens=100, tool=None, t0=0):
        return RequestRecord(id="r", prompt_index=0, input_tokens=1, expected_output_tokens=None,
                             times=Times(t0_ns=t0, first_text_ns=first, first_tool_ns=tool, end_ns=end),
                             tokens=Tokens(usage_output_tokens=tokens))

    assert req(10, 20).tokens_within(0, 30) == 100  # wholly inside
    assert req(10, 20).tokens_within(20, 30) == 0 and req(10, 20).tokens_within(0, 10) == 0  # outside
    assert req(10, 20).tokens_within(15, 30) == 50  # an edge inside
    assert req(10, 20).tokens_within(0, 12) == 20
    assert req(10, 20).tokens_within(12, 14) == 20  # the window inside the span
    assert req(10, 20).tokens_within(15, None) == 50  # the span not ended yet
    assert req(10, 20, tool=5).tokens_within(0, 10) == 100 * 5 / 15  # a tool call is output too
    assert req(None, 20, t0=10).tokens_within(15, 30) == 50  # no stamp on an output: from its send
    assert req(20, 20).tokens_within(0, 20) == 100 and req(20, 20).tokens_within(21, 30) == 0  # one read
    assert req(10, 20, tokens=0).tokens_within(0, 30) == 0 and req(10, None).tokens_within(0, 30) == 0


def test_an_energy_block_written_before_the_pro_rating_says_it_counted_completions():
    """Results written before `output_tokens_counted` counted the requests completed in the window."""
    import benchc.results
    from tests.test_golden import SEARCH

    old = benchc.results.load(SEARCH).points[0].energy
    assert old is not None and old.output_tokens_counted == "completed"
