# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""HdrHistogram recorder in C; same API and results as benchc/metrics/_hdr_py.py.

Counts live in a C array of int64; `record` is O(1) with no Python object
created. Encoding and decoding go through benchc/metrics/_hdr_codec.py (once per point).
"""

from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport calloc, free
from libc.math cimport sqrt, log2, floor, ceil

from benchc.metrics import _hdr_codec


cdef inline int _bit_length(uint64_t v) nogil:
    if v == 0:
        return 0
    return 64 - __builtin_clzll(v)


cdef extern from *:
    int __builtin_clzll(unsigned long long) nogil


cdef class Histogram:
    # attributes are declared in benchc/_hdr_c.pxd (the stream parser records into it from C)

    def __cinit__(self, lowest=1, highest=3600000000, digits=3):
        # Python ints, checked before they become int64 (as the twin checks them): a ValueError
        # naming the field; past 2^62 the sizing loop below would overflow and never end
        _hdr_codec.check_layout(lowest, highest, digits)
        self.lowest, self.highest, self.digits = lowest, highest, digits
        self.unit_magnitude = <int>floor(log2(<double>lowest))
        cdef int sub_count_mag = <int>ceil(log2(2.0 * 10 ** digits))
        self.sub_half_mag = sub_count_mag - 1 if sub_count_mag > 1 else 0
        self.sub_count = (<int64_t>1) << (self.sub_half_mag + 1)
        self.sub_half = self.sub_count // 2
        self.sub_mask = (self.sub_count - 1) << self.unit_magnitude
        cdef int64_t smallest_untrackable = self.sub_count << self.unit_magnitude
        cdef int buckets = 1
        while smallest_untrackable <= self.highest:
            smallest_untrackable <<= 1
            buckets += 1
        self.bucket_count = buckets
        self.counts_len = (buckets + 1) * self.sub_half
        self._counts = <int64_t*>calloc(self.counts_len, sizeof(int64_t))
        if self._counts == NULL:
            raise MemoryError()
        self.total_count = 0
        self.out_of_range = 0
        self.min_value = 9223372036854775807
        self.max_value = 0

    def __dealloc__(self):
        free(self._counts)

    # ---------------------------------------------------------------- layout

    cdef inline int _bucket(self, int64_t v) noexcept nogil:
        return _bit_length(<uint64_t>(v | self.sub_mask)) - self.unit_magnitude - (self.sub_half_mag + 1)

    cdef inline Py_ssize_t _index(self, int64_t v) noexcept nogil:
        cdef int b = self._bucket(v)
        cdef int64_t sb = v >> (b + self.unit_magnitude)
        return ((<int64_t>(b + 1)) << self.sub_half_mag) + sb - self.sub_half

    cpdef Py_ssize_t index_of(self, int64_t v):
        return self._index(v)

    cpdef int64_t value_at_index(self, Py_ssize_t i):
        cdef int64_t b = (i >> self.sub_half_mag) - 1
        cdef int64_t sb = (i & (self.sub_half - 1)) + self.sub_half
        if b < 0:
            sb -= self.sub_half
            b = 0
        return sb << (b + self.unit_magnitude)

    cpdef int64_t lowest_equivalent(self, int64_t v):
        cdef int b = self._bucket(v)
        return (v >> (b + self.unit_magnitude)) << (b + self.unit_magnitude)

    cdef inline int64_t _range_size(self, int64_t v):
        cdef int b = self._bucket(v)
        if (v >> (b + self.unit_magnitude)) >= self.sub_count:
            b += 1
        return (<int64_t>1) << (self.unit_magnitude + b)

    cpdef int64_t highest_equivalent(self, int64_t v):
        return self.lowest_equivalent(v) + self._range_size(v) - 1

    cpdef int64_t median_equivalent(self, int64_t v):
        return self.lowest_equivalent(v) + (self._range_size(v) >> 1)

    # ---------------------------------------------------------------- recording

    cpdef bint record(self, int64_t value, int64_t count=1):
        """Add `count` of `value`; False (and counted in out_of_range) when it cannot be held."""
        return self.record_nogil(value, count)

    cdef bint record_nogil(self, int64_t value, int64_t count) noexcept nogil:
        """record() for a thread without the GIL (the receive loop's own lag); the caller
        keeps other threads off this histogram meanwhile."""
        cdef Py_ssize_t i
        if value < 0 or value > self.highest:
            self.out_of_range += count
            return False
        i = self._index(value)
        if i >= self.counts_len:
            self.out_of_range += count
            return False
        self._counts[i] += count
        self.total_count += count
        if value < self.min_value:
            self.min_value = value
        if value > self.max_value:
            self.max_value = value
        return True

    def merge(self, Histogram other):
        """Add another histogram of the same layout, count for count."""
        cdef Py_ssize_t i
        if (other.lowest, other.highest, other.digits) != (self.lowest, self.highest, self.digits):
            raise ValueError("can only merge histograms of the same range and precision")
        for i in range(self.counts_len):
            self._counts[i] += other._counts[i]
        self.total_count += other.total_count
        self.out_of_range += other.out_of_range
        self.min_value = min(self.min_value, other.min_value)
        self.max_value = max(self.max_value, other.max_value)

    # ---------------------------------------------------------------- figures

    @property
    def counts(self):
        return [self._counts[i] for i in range(self.counts_len)]

    @property
    def min(self):
        if self.total_count == 0 or self._counts[0] > 0:
            return 0
        return self.lowest_equivalent(self.min_value)

    @property
    def max(self):
        return self.highest_equivalent(self.max_value) if self.max_value else 0

    @property
    def mean(self):
        cdef Py_ssize_t i
        cdef double total = 0
        if not self.total_count:
            return 0.0
        # Python ints for the sum, as the twin: identical rounding on both cores
        cdef object acc = 0
        for i in range(self.counts_len):
            if self._counts[i]:
                acc += self._counts[i] * self.median_equivalent(self.value_at_index(i))
        return acc / self.total_count

    @property
    def stdev(self):
        cdef Py_ssize_t i
        cdef double mean, d, acc = 0.0
        if not self.total_count:
            return 0.0
        mean = self.mean
        for i in range(self.counts_len):
            if self._counts[i]:
                d = self.median_equivalent(self.value_at_index(i)) - mean
                acc += d * d * self._counts[i]
        return sqrt(acc / self.total_count)

    cpdef int64_t value_at_percentile(self, double p):
        """HdrHistogram's definition: the highest value equivalent to the one at rank p."""
        cdef int64_t target = <int64_t>(min(p, 100.0) * self.total_count / 100 + 0.5)
        cdef int64_t running = 0
        cdef Py_ssize_t i
        cdef int64_t v
        if target < 1:
            target = 1
        for i in range(self.counts_len):
            running += self._counts[i]
            if running >= target:
                v = self.value_at_index(i)
                return self.highest_equivalent(v) if p else self.lowest_equivalent(v)
        return 0

    def nonzero(self):
        """(lowest equivalent value, count) of every non-empty bucket."""
        cdef Py_ssize_t i
        return [(self.value_at_index(i), self._counts[i]) for i in range(self.counts_len)
                if self._counts[i]]

    # ---------------------------------------------------------------- encoding

    def encode(self):
        cdef Py_ssize_t limit = self.index_of(self.max_value) + 1 if self.total_count else 0
        return _hdr_codec.encode(self.counts, limit, self.lowest, self.highest, self.digits)

    @classmethod
    def decode(cls, text):
        lowest, highest, digits, counts = _hdr_codec.decode(text)
        cdef Histogram h = cls(lowest, highest, digits)
        if len(counts) > h.counts_len:
            raise _hdr_codec.HdrFormatError("more counts than the histogram's range holds")
        h._load(counts)
        return h

    def _load(self, counts):
        cdef Py_ssize_t i
        cdef int64_t c, v
        for i in range(len(counts)):
            c = counts[i]
            if c:
                self._counts[i] = c
                self.total_count += c
                v = self.value_at_index(i)
                self.min_value = min(self.min_value, v)
                self.max_value = max(self.max_value, v)
