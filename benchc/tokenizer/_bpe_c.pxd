from libc.stdint cimport int32_t, int64_t, uint64_t

from benchc.tokenizer._piece_cache cimport CacheSlot

cdef struct Cand:
    int64_t rank
    int32_t pos
    int32_t a
    int32_t b
    int32_t merged

cdef class BPE:
    cdef uint64_t* _keys
    cdef int64_t* _ranks
    cdef int32_t* _merged
    cdef uint64_t _mask
    cdef int32_t _byte_ids[256]
    # whole-piece lookup (tiktoken, ignore_merges): token bytes in one arena
    cdef unsigned char* _arena
    cdef int64_t* _w_off
    cdef int32_t* _w_len
    cdef int32_t* _w_id
    cdef int32_t* _w_slots
    cdef uint64_t _w_mask
    cdef readonly bint has_whole
    # scratch reused by every merge: ids/next/prev and the heap
    cdef int32_t* _scratch
    cdef Cand* _heap
    cdef Py_ssize_t _cap
    cdef CacheSlot* _cache  # encode_into's memo of pieces
    cdef list _ints         # the int objects of every id, shared by the lists returned

    cdef void _put(self, uint64_t key, int64_t rank, int32_t merged)
    cdef int _grow(self, Py_ssize_t n) except -1
    cdef list _to_list(self, bytes piece, bint whole)
    cdef bint _get(self, int32_t a, int32_t b, int64_t* rank, int32_t* merged) noexcept nogil
    cdef int32_t _whole_id(self, const unsigned char* p, Py_ssize_t n) noexcept nogil
    cdef Py_ssize_t merge_into(self, const unsigned char* p, Py_ssize_t n, int32_t* out) except -1
    cdef Py_ssize_t merge_ids_into(self, const int32_t* ids, Py_ssize_t n, int32_t* out) except -1
    cdef Py_ssize_t _merge_scratch(self, Py_ssize_t n, int32_t* out) except -1
    cdef Py_ssize_t encode_into(self, const unsigned char* p, Py_ssize_t n, int32_t* out) except -1
    cdef list ids_list(self, const int32_t* ids, Py_ssize_t n)
