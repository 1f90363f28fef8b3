import pytest

from benchc.spec.thresholds import parse_gate, parse_threshold


def test_latency_threshold_in_microseconds():
    t = parse_threshold("ttft", "p99 < 2s")
    assert (t.metric, t.stat, t.op, t.value, t.relative) == ("ttft", "p99", "<", 2_000_000, False)
    assert t.holds(1_999_999) and not t.holds(2_000_000)
    assert parse_threshold("itl", "p99.9 <= 100ms").value == 100_000


def test_ratio_and_rate_thresholds():
    assert parse_threshold("error_rate", "< 1%").value == pytest.approx(0.01)
    assert parse_threshold("error_rate", "<= 0.02").value == pytest.approx(0.02)
    t = parse_threshold("output_tok_s", ">= 300")
    assert t.holds(300) and not t.holds(299.9)


@pytest.mark.parametrize("metric,expr,fragment", [
    ("ttft", "< 2s", "name the statistic"),
    ("ttft", "p99 < 2", "duration with its unit"),
    ("error_rate", "p99 < 1%", "takes no statistic"),
    ("output_tok_s", "> 100ms", "plain number"),
    ("ttft", "p99 == 2s", "not a threshold"),
    ("ttft", "p101 < 2s", "outside p0..p100"),
    ("ttfb", "p99 < 2s", "unknown metric"),
    ("ttft", "p99 < +10%", "only meaningful in compare"),
])
def test_threshold_errors(metric, expr, fragment):
    with pytest.raises(ValueError, match=fragment):
        parse_threshold(metric, expr)


def test_compare_gates_relative_and_absolute():
    g = parse_gate("output_tok_s < -5%")
    assert (g.metric, g.stat, g.relative, g.value) == ("output_tok_s", None, True, pytest.approx(-0.05))
    g = parse_gate("ttft.p99 > +10%")
    assert (g.key, g.relative, g.value) == ("ttft.p99", True, pytest.approx(0.10))
    g = parse_gate("error_rate > 1%")
    assert (g.relative, g.value) == (False, pytest.approx(0.01))
