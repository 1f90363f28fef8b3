from libc.stdint cimport int64_t

cdef class Histogram:
    cdef readonly int64_t lowest, highest
    cdef readonly int digits
    cdef readonly int unit_magnitude, sub_half_mag, bucket_count
    cdef readonly int64_t sub_count, sub_half, sub_mask
    cdef readonly Py_ssize_t counts_len
    cdef int64_t* _counts
    cdef readonly int64_t total_count, out_of_range, min_value, max_value

    cdef inline int _bucket(self, int64_t v) noexcept nogil
    cdef inline Py_ssize_t _index(self, int64_t v) noexcept nogil
    cpdef Py_ssize_t index_of(self, int64_t v)
    cpdef int64_t value_at_index(self, Py_ssize_t i)
    cpdef int64_t lowest_equivalent(self, int64_t v)
    cdef inline int64_t _range_size(self, int64_t v)
    cpdef int64_t highest_equivalent(self, int64_t v)
    cpdef int64_t median_equivalent(self, int64_t v)
    cpdef bint record(self, int64_t value, int64_t count=*)
    cdef bint record_nogil(self, int64_t value, int64_t count) noexcept nogil
    cpdef int64_t value_at_percentile(self, double p)
