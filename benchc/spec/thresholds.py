"""The threshold grammar shared by the spec's `slo` and `compare --fail-on`.

    threshold  :=  [STAT] OP VALUE
    STAT       :=  mean | min | max | p50 | p90 | p99.9 | pN     (latency metrics only)
    OP         :=  <  |  <=  |  >  |  >=
    VALUE      :=  a duration (250ms, 2s) for latency metrics,
                   a percentage (1%) or fraction (0.01) for error_rate,
                   a plain number for throughputs (tok/s, req/s)

In `compare --fail-on` a VALUE with a sign and a `%` (`-5%`, `+10%`) is a
change relative to the baseline: `output_tok_s < -5%` fails when the new run's
output throughput is more than 5% below the base's. There the metric and the
statistic come first, joined by a dot or a space: `ttft.p99 > +10%`, and a signed
change may go without its OP (`ttf_tool_call p99 +10%` is `> +10%`, `-5%` is `< -5%`).

Latency thresholds are held in microseconds, as results record latencies.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass, replace

from benchc import catalog
from benchc.catalog import threshold_kind
from benchc.units import parse_duration

# metric name -> kind of value it takes: the declared metrics the spec's `slo` may name
METRICS: dict[str, str] = {m.name: threshold_kind(m) for m in catalog.METRICS if m.slo}

# the unit a point holds each metric in (result figures and `slo.checks` values)
_RATE_UNITS = {m.name: m.unit for m in catalog.METRICS if m.slo and threshold_kind(m) == "rate"}
UNITS = ("us", "fraction", "tok/s", "req/s")


def value_unit(metric: str) -> str:
    """The unit of `metric`'s values in a result: `us` for latencies (`ttft`, `turn2.ttft`),
    `fraction` for error_rate, `tok/s` or `req/s` for throughputs."""
    base = metric.rsplit(".", 1)[-1]
    kind = METRICS.get(base)
    if kind == "latency":
        return "us"
    if kind == "ratio":
        return "fraction"
    return _RATE_UNITS.get(base, "req/s")


def show_value(value: float | None, unit: str) -> str:
    """A value for a person, with its unit: `502.3ms`, `2.00%`, `83.4 tok/s`; `-` for none."""
    if value is None:
        return "-"
    if unit == "us":
        return f"{value / 1000:.1f}ms"
    if unit == "fraction":
        return f"{value:.2%}"
    return f"{value:,.1f} {unit}"


_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_EXPR = re.compile(
    r"^\s*(?:(?P<stat>mean|min|max|p[0-9]+(?:\.[0-9]+)?)\s*)?"
    r"(?P<op><=|>=|<|>)\s*"
    r"(?P<sign>[+-])?(?P<value>[0-9]+(?:\.[0-9]+)?)(?P<unit>us|ms|s|m|h|%)?\s*$"
)


@dataclass(frozen=True)
class Threshold:
    metric: str
    stat: str | None  # None for throughputs and error_rate
    op: str
    value: float  # microseconds for latencies, a fraction for ratios and relative changes
    relative: bool  # a change against a baseline (compare only)
    text: str  # as written, for messages

    def holds(self, actual: float) -> bool:
        """True when `actual` (same unit as `value`) satisfies the threshold."""
        return _OPS[self.op](actual, self.value)

    @property
    def key(self) -> str:
        """`ttft.p99`, `output_tok_s`: where the value sits in a point."""
        return f"{self.metric}.{self.stat}" if self.stat else self.metric


def parse_threshold(metric: str, expr: str, *, allow_relative: bool = False) -> Threshold:
    """Parse `expr` (`p99 < 2s`) as a threshold on `metric`; ValueError says why not."""
    kind = METRICS.get(metric)
    if kind is None:
        raise ValueError(f"unknown metric {metric!r}; known: {', '.join(METRICS)}")
    m = _EXPR.match(expr)
    if not m:
        raise ValueError(
            f"{expr!r} is not a threshold like 'p99 < 2s' (grammar: [STAT] OP VALUE)"
        )
    stat, op, sign, unit = m["stat"], m["op"], m["sign"], m["unit"]
    number = float(m["value"])
    relative = sign is not None
    if relative:
        if not allow_relative:
            raise ValueError(f"{expr!r}: a signed change is only meaningful in compare --fail-on")
        if unit != "%":
            raise ValueError(f"{expr!r}: a relative change is written as a percentage, e.g. -5%")
        value = number / 100.0 * (-1 if sign == "-" else 1)
    elif kind == "latency":
        if unit in (None, "%"):
            raise ValueError(f"{expr!r}: give {metric} a duration with its unit, e.g. 500ms or 2s")
        value = parse_duration(f"{m['value']}{unit}") * 1e6
    elif kind == "ratio":
        if unit not in (None, "%"):
            raise ValueError(f"{expr!r}: {metric} is a percentage like 1% or a fraction like 0.01")
        value = number / 100.0 if unit == "%" else number
    else:
        if unit is not None:
            raise ValueError(f"{expr!r}: {metric} is a plain number (per second), without a unit")
        value = number
    if kind == "latency" and stat is None:
        raise ValueError(f"{expr!r}: name the statistic of {metric}, e.g. 'p99 < 2s'")
    if kind != "latency" and stat is not None:
        raise ValueError(f"{expr!r}: {metric} takes no statistic; write e.g. '< 1%'")
    if stat and stat.startswith("p") and not 0 < float(stat[1:]) <= 100:
        raise ValueError(f"{expr!r}: percentile {stat} is outside p0..p100")
    return Threshold(metric, stat, op, value, relative, f"{metric}: {expr.strip()}")


# ratios a service level wants high (the share of prompt tokens served from the prefix cache);
# error_rate, like every latency, is wanted low
_MORE_IS_BETTER = frozenset({"cached_fraction"})


def parse_slo(metric: str, expr: str) -> Threshold:
    """Parse an SLO item (the spec's `slo`, `load.search.slo`): a threshold that bounds its metric
    the way a service level does, latencies and error_rate from above (`p99 < 2s`), throughputs
    from below (`> 100`). An inverted one (`tpot: "p50 > 100ms"`) would pass only the slow
    points and is refused; ValueError says why."""
    t = parse_threshold(metric, expr)
    upper = METRICS[metric] == "latency" or (METRICS[metric] == "ratio" and metric not in _MORE_IS_BETTER)
    if upper and t.op in (">", ">="):
        raise ValueError(f"{expr!r}: an SLO bounds {metric} from above (it is met when {metric} is "
                         f"small enough); write '{(t.stat + ' ') if t.stat else ''}<{t.op[1:]} ...', "
                         f"e.g. '{'p99 < 500ms' if t.stat else '< 1%'}'")
    if not upper and t.op in ("<", "<="):
        raise ValueError(f"{expr!r}: an SLO bounds {metric} from below (it is met when {metric} is "
                         f"high enough); write '>{t.op[1:]} ...', e.g. '> 100'")
    return t


_GATE = re.compile(r"^\s*([a-z_0-9]+)(?:(?:\.|\s+)(mean|min|max|p[0-9]+(?:\.[0-9]+)?)(?![0-9.]))?\s*(.*)$")


def parse_gate(text: str) -> Threshold:
    """Parse a `compare --fail-on` gate: `ttft.p99 > +10%`, `output_tok_s < -5%`. The statistic
    may follow the metric after a space (`ttf_tool_call p99 > +10%`), and a signed change may
    leave its operator out: `+10%` means `> +10%` (worse when it grows), `-5%` means `< -5%`."""
    m = _GATE.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a gate like 'ttft.p99 > +10%'")
    metric, stat, rest = m.groups()
    if rest[:1] in ("+", "-"):
        rest = f"{'>' if rest[0] == '+' else '<'} {rest}"
    gate = parse_threshold(metric, f"{stat or ''} {rest}", allow_relative=True)
    return replace(gate, text=text.strip())
