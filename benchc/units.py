"""Units people write in specs: durations, rates, token counts.

The regular expressions here are also in benchc/schemas/spec-v1.json (a test
keeps the two in sync), so the schema rejects what these functions cannot
parse and the compiler never sees a malformed unit.
"""

from __future__ import annotations

import re

# 500ms, 2s, 1.5s, 15m, 1h, 250us; a bare number means seconds.
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?)(us|ms|s|m|h)$"
# 10/s, 600/m, 0.5/s; a bare number means requests per second.
RATE_PATTERN = r"^([0-9]+(\.[0-9]+)?)/(s|m|h)$"
# 512, 1k (1000), 1K (1024), 32k, 1.5M -- vLLM's convention for --max-model-len:
# a lower-case suffix is decimal, an upper-case one binary.
TOKENS_PATTERN = r"^([0-9]+(\.[0-9]+)?)([kKmM])$"

_DURATION = re.compile(DURATION_PATTERN)
_RATE = re.compile(RATE_PATTERN)
_TOKENS = re.compile(TOKENS_PATTERN)

_SECONDS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PER_SECOND = {"s": 1.0, "m": 1 / 60.0, "h": 1 / 3600.0}
_TOKEN_FACTOR = {"k": 1000, "K": 1024, "m": 1_000_000, "M": 1024 * 1024}


def parse_duration(value: str | int | float) -> float:
    """'500ms' -> 0.5; numbers are seconds. Raises ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration like 500ms or 2s")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"{value!r} is a negative duration")
        return float(value)
    m = _DURATION.match(value.strip())
    if not m:
        raise ValueError(f"{value!r} is not a duration like 500ms or 2s")
    return float(m.group(1)) * _SECONDS[m.group(3)]


def parse_rate(value: str | int | float) -> float:
    """'10/s' -> 10.0, '600/m' -> 10.0 requests per second."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a rate like 10/s")
    if isinstance(value, (int, float)):
        if value <= 0:
            raise ValueError(f"{value!r} is not a positive rate")
        return float(value)
    m = _RATE.match(value.strip())
    if not m:
        raise ValueError(f"{value!r} is not a rate like 10/s or 600/m")
    rate = float(m.group(1)) * _PER_SECOND[m.group(3)]
    if rate <= 0:
        raise ValueError(f"{value!r} is not a positive rate")
    return rate


def parse_tokens(value: str | int) -> int:
    """'1k' -> 1000, '1K' -> 1024, 512 -> 512."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a token count like 512 or 32k")
    if isinstance(value, int):
        return value
    m = _TOKENS.match(value.strip())
    if not m:
        raise ValueError(f"{value!r} is not a token count like 512 or 32k")
    return int(round(float(m.group(1)) * _TOKEN_FACTOR[m.group(3)]))
