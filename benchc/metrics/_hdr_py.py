"""HdrHistogram recorder, pure Python (the reference twin of csrc/metrics/_hdr_c.pyx).

The bucket layout, percentile and mean definitions are HdrHistogram's (as in
the `hdrhistogram` package, hdrh.histogram), so figures agree with any other
HdrHistogram implementation. Unlike that package, a value outside the
trackable range is not silently dropped: it is counted in `out_of_range`.
"""

from __future__ import annotations

import math
from array import array

from benchc.metrics import _hdr_codec


class Histogram:
    def __init__(self, lowest: int = 1, highest: int = 3_600_000_000, digits: int = 3):
        _hdr_codec.check_layout(lowest, highest, digits)  # a ValueError naming the field
        self.lowest, self.highest, self.digits = lowest, highest, digits
        self.unit_magnitude = int(math.floor(math.log2(lowest)))
        sub_count_mag = int(math.ceil(math.log2(2 * 10**digits)))
        self.sub_half_mag = sub_count_mag - 1 if sub_count_mag > 1 else 0
        self.sub_count = 1 << (self.sub_half_mag + 1)
        self.sub_half = self.sub_count // 2
        self.sub_mask = (self.sub_count - 1) << self.unit_magnitude
        smallest_untrackable, buckets = self.sub_count << self.unit_magnitude, 1
        while smallest_untrackable <= highest:
            smallest_untrackable <<= 1
            buckets += 1
        self.bucket_count = buckets
        self.counts_len = (buckets + 1) * self.sub_half
        self.counts = array("q", bytes(8 * self.counts_len))
        self.total_count = 0
        self.out_of_range = 0
        self.min_value = 2**63 - 1
        self.max_value = 0

    # ---------------------------------------------------------------- layout

    def _bucket(self, v: int) -> int:
        return (v | self.sub_mask).bit_length() - self.unit_magnitude - (self.sub_half_mag + 1)

    def index_of(self, v: int) -> int:
        b = self._bucket(v)
        sb = v >> (b + self.unit_magnitude)
        return ((b + 1) << self.sub_half_mag) + sb - self.sub_half

    def value_at_index(self, i: int) -> int:
        b = (i >> self.sub_half_mag) - 1
        sb = (i & (self.sub_half - 1)) + self.sub_half
        if b < 0:
            sb -= self.sub_half
            b = 0
        return sb << (b + self.unit_magnitude)

    def lowest_equivalent(self, v: int) -> int:
        b = self._bucket(v)
        return (v >> (b + self.unit_magnitude)) << (b + self.unit_magnitude)

    def _range_size(self, v: int) -> int:
        b = self._bucket(v)
        if (v >> (b + self.unit_magnitude)) >= self.sub_count:
            b += 1
        return 1 << (self.unit_magnitude + b)

    def highest_equivalent(self, v: int) -> int:
        return self.lowest_equivalent(v) + self._range_size(v) - 1

    def median_equivalent(self, v: int) -> int:
        return self.lowest_equivalent(v) + (self._range_size(v) >> 1)

    # ---------------------------------------------------------------- recording

    def record(self, value: int, count: int = 1) -> bool:
        """Add `count` of `value`; False (and counted in out_of_range) when it cannot be held."""
        if value < 0 or value > self.highest:
            self.out_of_range += count
            return False
        i = self.index_of(value)
        if i >= self.counts_len:
            self.out_of_range += count
            return False
        self.counts[i] += count
        self.total_count += count
        if value < self.min_value:
            self.min_value = value
        if value > self.max_value:
            self.max_value = value
        return True

    def merge(self, other: Histogram) -> None:
        """Add another histogram of the same layout, count for count."""
        if (other.lowest, other.highest, other.digits) != (self.lowest, self.highest, self.digits):
            raise ValueError("can only merge histograms of the same range and precision")
        for i, c in enumerate(other.counts):
            if c:
                self.counts[i] += c
        self.total_count += other.total_count
        self.out_of_range += other.out_of_range
        self.min_value = min(self.min_value, other.min_value)
        self.max_value = max(self.max_value, other.max_value)

    # ---------------------------------------------------------------- figures

    @property
    def min(self) -> int:
        if self.total_count == 0 or self.counts[0] > 0:
            return 0
        return self.lowest_equivalent(self.min_value)

    @property
    def max(self) -> int:
        return self.highest_equivalent(self.max_value) if self.max_value else 0

    @property
    def mean(self) -> float:
        if not self.total_count:
            return 0.0
        total = 0
        for i, c in enumerate(self.counts):
            if c:
                total += c * self.median_equivalent(self.value_at_index(i))
        return total / self.total_count

    @property
    def stdev(self) -> float:
        if not self.total_count:
            return 0.0
        mean = self.mean
        acc = 0.0
        for i, c in enumerate(self.counts):
            if c:
                d = self.median_equivalent(self.value_at_index(i)) - mean
                acc += d * d * c
        return math.sqrt(acc / self.total_count)

    def value_at_percentile(self, p: float) -> int:
        """HdrHistogram's definition: the highest value equivalent to the one at rank p."""
        target = max(int(min(p, 100.0) * self.total_count / 100 + 0.5), 1)
        running = 0
        for i, c in enumerate(self.counts):
            running += c
            if running >= target:
                v = self.value_at_index(i)
                return self.highest_equivalent(v) if p else self.lowest_equivalent(v)
        return 0

    def nonzero(self) -> list[tuple[int, int]]:
        """(lowest equivalent value, count) of every non-empty bucket."""
        return [(self.value_at_index(i), c) for i, c in enumerate(self.counts) if c]

    # ---------------------------------------------------------------- encoding

    def encode(self) -> str:
        limit = self.index_of(self.max_value) + 1 if self.total_count else 0
        return _hdr_codec.encode(self.counts, limit, self.lowest, self.highest, self.digits)

    @classmethod
    def decode(cls, text: str | bytes) -> Histogram:
        lowest, highest, digits, counts = _hdr_codec.decode(text)
        h = cls(lowest, highest, digits)
        if len(counts) > h.counts_len:
            raise _hdr_codec.HdrFormatError("more counts than the histogram's range holds")
        h._load(counts)
        return h

    def _load(self, counts: list[int]) -> None:
        for i, c in enumerate(counts):
            if c:
                self.counts[i] = c
                self.total_count += c
                v = self.value_at_index(i)
                self.min_value = min(self.min_value, v)
                self.max_value = max(self.max_value, v)
