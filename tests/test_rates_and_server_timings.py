"""The total token rate and the server's own timings on the console and in the report (issue 45,
item 11): they were recorded (a point's throughput.total_tok_s, server_timings from llama.cpp's
`timings`, server_timings_prometheus from vLLM's phase histograms) and shown nowhere."""

import json

import pytest

from benchc.cli import main
from benchc.results.document import read
from benchc.results.html_report import SERVER_HEADER, report_data
from tests.simrun import Sim, write_spec
from tests.test_first_hour import MINIMAX


def _ms(us):
    return f"{us / 1000:.1f}ms"


@pytest.mark.slow  # runs against a simulator subprocess giving llama.cpp's timings and vLLM's /metrics
def test_the_console_and_the_report_show_the_total_rate_and_the_server_s_timings(tmp_path, capsys):
    sim = Sim(tmp_path, "--preset", "minimax-m2.5-tp4", "--param", "timings=true")
    try:
        spec = write_spec(tmp_path, sweep="    concurrency: [2]", out=8, extra="  requests: 4")
        assert main(["run", spec, "--base-url", sim.url]) == 0
    finally:
        sim.close()
    err = capsys.readouterr().err
    doc = json.loads((tmp_path / "r.json").read_text())
    (p,) = doc["points"]
    tok = p["tokens"]
    assert (f"  c=2: total {p['throughput']['total_tok_s']:,.1f} tok/s ({tok['input']:,} input + "
            f"{tok['output']:,} output tokens)") in err
    t = p["server_timings"]
    assert t["requests"] == 4
    assert (f"  c=2: server timings (4 requests, llama.cpp timings): prompt p50 "
            f"{_ms(t['server_prompt_us']['p50'])}, decode p50 {_ms(t['server_decode_us']['p50'])}; "
            f"client TTFT p50 {_ms(t['ttft_us']['p50'])}, of it "
            f"beyond the server's prompt p50 {_ms(t['ttft_minus_server_prompt_us']['p50'])}") in err
    v = p["server_timings_prometheus"]  # the simulator's /metrics carries vLLM's phase histograms
    assert f"  c=2: server phases (/metrics, means over {v['requests']} requests): queue " in err
    assert f"; client TTFT {v['client_ttft_ms_mean']:.1f}ms, E2E - TTFT " in err
    # the report: a table of the same, one row per point
    table = report_data([doc])["server_table"]
    assert table["header"] == SERVER_HEADER
    (row,) = table["rows"]
    assert row[1:4] == ["c=2", f"{p['throughput']['total_tok_s']:,.1f}", "llama.cpp timings, p50 of 4"]
    assert row[5] == f"{t['server_prompt_us']['p50'] / 1000:,.1f}"


def test_a_point_of_a_server_without_timings_says_none_given():
    doc = read(MINIMAX)
    rows = report_data([doc])["server_table"]["rows"]
    assert [r[1] for r in rows] == ["c=1", "c=2", "c=4"]
    assert all(r[3] == "none given" and r[4:] == ["-"] * 5 for r in rows)
    assert rows[0][2] == f"{doc['points'][0]['throughput']['total_tok_s']:,.1f}"
