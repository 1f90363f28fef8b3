"""Confidence intervals across repeated runs: Student's t interval of a mean, and Welch's
interval of a difference of two means.

Why t intervals on the runs' figures: each repeat of a point yields one figure per metric
(its output tok/s, its TTFT p99, ...), and the question is how far the mean of a few such
figures may be from the figure the setup would give on average. With 3 to 10 runs and an
unknown spread, Student's t interval (mean +- t(1 - a/2, n - 1) s / sqrt(n)) is the
standard answer (NIST/SEMATECH e-Handbook, 7.2.2.1); it assumes the runs' figures are
independent and roughly normal, which means over many requests are. The percentile
bootstrap of one run's histogram (results/compare.py) sees only the spread of requests
within that run, not the run-to-run spread that a rebuilt server, a warmer machine or
another placement adds, which is the noise a "did the new build get faster" question is
about.

Welch's interval (unequal variances, Welch-Satterthwaite degrees of freedom) is the one for
a difference between two sets of runs; a difference is beyond noise at 95% when that
interval excludes zero.

The t quantile is computed here (no scipy): the t CDF through the regularized incomplete
beta function (continued fraction, modified Lentz), inverted by bisection.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    """A mean (or a difference of means) with its confidence interval."""

    mean: float
    stdev: float  # of the values (n - 1 denominator); for a difference, its standard error
    n: int
    low: float
    high: float
    df: float  # degrees of freedom of the t quantile used

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def to_json(self, digits: int = 6) -> dict:
        return {"mean": round(self.mean, digits), "stdev": round(self.stdev, digits), "n": self.n,
                "ci95": [round(self.low, digits), round(self.high, digits)], "df": round(self.df, 3)}


def mean_interval(values: Sequence[float], level: float = LEVEL) -> Interval | None:
    """Student's t interval of the mean of `values`; None for fewer than two."""
    n = len(values)
    if n < 2:
        return None
    mean = math.fsum(values) / n
    stdev = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile(0.5 + level / 2, n - 1) * stdev / math.sqrt(n)
    return Interval(mean, stdev, n, mean - half, mean + half, float(n - 1))


def difference_interval(base: Sequence[float], new: Sequence[float], level: float = LEVEL) -> Interval | None:
    """Welch's interval of mean(new) - mean(base); None when either side has fewer than two."""
    a, b = mean_interval(base, level), mean_interval(new, level)
    if a is None or b is None:
        return None
    va, vb = a.stdev ** 2 / a.n, b.stdev ** 2 / b.n
    se = math.sqrt(va + vb)
    diff = b.mean - a.mean
    if se == 0.0:  # both sides without any spread: the difference is what it is
        return Interval(diff, 0.0, a.n + b.n, diff, diff, float(a.n + b.n - 2))
    # Welch-Satterthwaite; a side without spread contributes no term
    df = (va + vb) ** 2 / sum(v ** 2 / (n - 1) for v, n in ((va, a.n), (vb, b.n)) if v > 0)
    half = t_quantile(0.5 + level / 2, df) * se
    return Interval(diff, se, a.n + b.n, diff - half, diff + half, df)


# --------------------------------------------------------------------------- Student's t


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` (> 0, not necessarily whole) degrees of freedom."""
    x = df / (df + t * t)
    tail = 0.5 * _betainc(df / 2.0, 0.5, x)  # P(T > |t|)
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p, for 0 < p < 1 (bisection on t_cdf to 1e-12)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), not {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), 0 <= x <= 1 (continued fraction of
    DLMF 8.17.22, evaluated with the modified Lentz method; the symmetry
    I_x(a, b) = 1 - I_{1-x}(b, a) keeps x on the side where it converges fast)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - _betainc(b, a, 1.0 - x)
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    return math.exp(log_front) * _beta_fraction(a, b, x) / a


def _beta_fraction(a: float, b: float, x: float) -> float:
    tiny, eps = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        # the even and the odd term of the fraction
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


__all__ = ["Interval", "mean_interval", "difference_interval", "t_cdf", "t_quantile", "LEVEL"]
