# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Byte-pair merging in C; same API and results as benchc/_bpe_py.py.

The pair table is an open-addressing hash of 64-bit keys (id_a << 32 | id_b) to
(rank, merged id); the merge runs over C arrays with a binary heap of candidate
pairs, O(n log n) in the piece's length, and creates no Python object but the
returned list.
"""

from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.stdlib cimport malloc, calloc, free


cdef struct Cand:
    int64_t rank
    int32_t pos
    int32_t a
    int32_t b
    int32_t merged


cdef inline bint _less(Cand* x, Cand* y) nogil:
    return x.rank < y.rank or (x.rank == y.rank and x.pos < y.pos)


cdef inline void _push(Cand* heap, Py_ssize_t* n, Cand c) nogil:
    cdef Py_ssize_t i = n[0]
    cdef Py_ssize_t parent
    n[0] += 1
    heap[i] = c
    while i > 0:
        parent = (i - 1) >> 1
        if _less(&heap[i], &heap[parent]):
            heap[i], heap[parent] = heap[parent], heap[i]
            i = parent
        else:
            break


cdef inline Cand _pop(Cand* heap, Py_ssize_t* n) nogil:
    cdef Cand top = heap[0]
    cdef Py_ssize_t i = 0, l, r, m
    n[0] -= 1
    heap[0] = heap[n[0]]
    while True:
        l = 2 * i + 1
        r = l + 1
        m = i
        if l < n[0] and _less(&heap[l], &heap[m]):
            m = l
        if r < n[0] and _less(&heap[r], &heap[m]):
            m = r
        if m == i:
            break
        heap[i], heap[m] = heap[m], heap[i]
        i = m
    return top


cdef class BPE:
    cdef uint64_t* _keys
    cdef int64_t* _ranks
    cdef int32_t* _merged
    cdef uint64_t _mask
    cdef int32_t _byte_ids[256]

    def __cinit__(self, byte_ids, pairs):
        cdef Py_ssize_t cap = 16
        cdef int i
        if len(byte_ids) != 256:
            raise ValueError("byte_ids needs one id per byte value")
        for i in range(256):
            self._byte_ids[i] = byte_ids[i]
        while cap < 2 * len(pairs) + 16:
            cap *= 2
        self._mask = cap - 1
        self._keys = <uint64_t*>calloc(cap, sizeof(uint64_t))
        self._ranks = <int64_t*>malloc(cap * sizeof(int64_t))
        self._merged = <int32_t*>malloc(cap * sizeof(int32_t))
        if self._keys == NULL or self._ranks == NULL or self._merged == NULL:
            raise MemoryError()
        for (a, b), (rank, merged) in pairs.items():
            self._put(_key(a, b), rank, merged)

    def __dealloc__(self):
        free(self._keys)
        free(self._ranks)
        free(self._merged)

    cdef void _put(self, uint64_t key, int64_t rank, int32_t merged):
        cdef uint64_t h = _hash(key) & self._mask
        while self._keys[h] != 0 and self._keys[h] != key:
            h = (h + 1) & self._mask
        self._keys[h] = key
        self._ranks[h] = rank
        self._merged[h] = merged

    cdef inline bint _get(self, int32_t a, int32_t b, int64_t* rank, int32_t* merged) nogil:
        cdef uint64_t key = _key(a, b)
        cdef uint64_t h = _hash(key) & self._mask
        while self._keys[h] != 0:
            if self._keys[h] == key:
                rank[0] = self._ranks[h]
                merged[0] = self._merged[h]
                return True
            h = (h + 1) & self._mask
        return False

    def merge(self, bytes piece):
        cdef const unsigned char* p = piece
        cdef Py_ssize_t n = len(piece), i, j, k, hn = 0
        cdef int32_t* ids
        cdef int32_t* nxt
        cdef int32_t* prev
        cdef Cand* heap
        cdef Cand c
        cdef int64_t rank
        cdef int32_t merged
        if n == 0:
            return []
        ids = <int32_t*>malloc(n * 3 * sizeof(int32_t))
        heap = <Cand*>malloc((3 * n + 1) * sizeof(Cand))
        if ids == NULL or heap == NULL:
            free(ids)
            free(heap)
            raise MemoryError()
        nxt = ids + n
        prev = ids + 2 * n
        try:
            for i in range(n):
                ids[i] = self._byte_ids[p[i]]
                if ids[i] < 0:
                    raise KeyError(f"a byte of {piece!r} has no token in this vocabulary")
                nxt[i] = i + 1
                prev[i] = i - 1
            nxt[n - 1] = -1
            for i in range(n - 1):
                if self._get(ids[i], ids[i + 1], &rank, &merged):
                    _push(heap, &hn, Cand(rank, i, ids[i], ids[i + 1], merged))
            while hn > 0:
                c = _pop(heap, &hn)
                i = c.pos
                j = nxt[i]
                if ids[i] != c.a or j == -1 or ids[j] != c.b:
                    continue
                ids[i] = c.merged
                ids[j] = -1
                nxt[i] = nxt[j]
                if nxt[j] != -1:
                    prev[nxt[j]] = i
                k = prev[i]
                if k != -1 and self._get(ids[k], c.merged, &rank, &merged):
                    _push(heap, &hn, Cand(rank, k, ids[k], c.merged, merged))
                k = nxt[i]
                if k != -1 and self._get(c.merged, ids[k], &rank, &merged):
                    _push(heap, &hn, Cand(rank, i, c.merged, ids[k], merged))
            out = []
            i = 0
            while i != -1:
                out.append(ids[i])
                i = nxt[i]
            return out
        finally:
            free(ids)
            free(heap)


cdef inline uint64_t _key(int64_t a, int64_t b) nogil:
    # +1 keeps 0 free as the empty-slot marker
    return ((<uint64_t>(a + 1)) << 32) | <uint64_t>(b + 1)


cdef inline uint64_t _hash(uint64_t x) nogil:
    # splitmix64's finaliser: spreads sequential ids over the table
    x ^= x >> 30
    x *= 0xbf58476d1ce4e5b9ULL
    x ^= x >> 27
    x *= 0x94d049bb133111ebULL
    x ^= x >> 31
    return x
