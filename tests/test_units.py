import json
import re

import pytest

from benchc import units
from benchc.spec.loader import load_schema


@pytest.mark.parametrize("text,seconds", [
    ("500ms", 0.5), ("2s", 2.0), ("1.5s", 1.5), ("15m", 900.0), ("1h", 3600.0), ("250us", 0.00025),
    (3, 3.0), (0.25, 0.25),
])
def test_durations(text, seconds):
    assert units.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["fast", "2 s", "-1s", "1d", "", True, -1])
def test_bad_durations(bad):
    with pytest.raises(ValueError):
        units.parse_duration(bad)


@pytest.mark.parametrize("text,rps", [("10/s", 10.0), ("600/m", 10.0), ("3600/h", 1.0), (2, 2.0)])
def test_rates(text, rps):
    assert units.parse_rate(text) == pytest.approx(rps)


@pytest.mark.parametrize("bad", ["10", "10 per s", "0/s", 0, -1])
def test_bad_rates(bad):
    with pytest.raises(ValueError):
        units.parse_rate(bad)


@pytest.mark.parametrize("text,n", [(512, 512), ("1k", 1000), ("1K", 1024), ("32k", 32000),
                                    ("1.5M", 1572864), ("2m", 2000000)])
def test_tokens(text, n):
    assert units.parse_tokens(text) == n


def test_schema_patterns_match_the_parsers():
    """The schema rejects exactly what units.py cannot parse: the regexes are one and the same."""
    text = json.dumps(load_schema("spec-v1"))
    for pattern in (units.DURATION_PATTERN, units.RATE_PATTERN, units.TOKENS_PATTERN):
        assert json.dumps(pattern) in text
        re.compile(pattern)
