# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Byte-pair merging in C; same API and results as benchc/tokenizer/_bpe_py.py.

The pair table is an open-addressing hash of 64-bit keys (id_a << 32 | id_b) to
(rank, merged id); the merge runs over C arrays with a binary heap of candidate
pairs, O(n log n) in the piece's length, and creates no Python object but the
returned list. `merge_into` / `encode_into` are the C entry points the compiled
pre-tokenizer calls for each piece without leaving C; `merge_ids_into` starts from
symbols already mapped to ids (SentencePiece's characters, csrc/tokenizer/_spm_c.pyx).
"""

from cpython.list cimport PyList_GET_ITEM, PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.stdlib cimport malloc, calloc, realloc, free
from libc.string cimport memcmp

from benchc.tokenizer._piece_cache cimport (
    CACHE_KEY, CACHE_SLOTS, CacheSlot, cache_get, cache_put, mix64, piece_hash)


cdef inline bint _less(Cand* x, Cand* y) noexcept nogil:
    return x.rank < y.rank or (x.rank == y.rank and x.pos < y.pos)


cdef inline void _push(Cand* heap, Py_ssize_t* n, Cand c) noexcept nogil:
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


cdef inline Cand _pop(Cand* heap, Py_ssize_t* n) noexcept nogil:
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

    def __cinit__(self, byte_ids, pairs, whole=None):
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
        if whole is not None:
            self._build_whole(whole)
        self._grow(256)
        self._cache = <CacheSlot*>calloc(CACHE_SLOTS, sizeof(CacheSlot))
        if self._cache == NULL:
            raise MemoryError()
        top = max(max(byte_ids), max([m for _, m in pairs.values()], default=-1),
                  max(whole.values(), default=-1) if whole else -1)
        self._ints = list(range(top + 1))

    def __dealloc__(self):
        free(self._keys)
        free(self._ranks)
        free(self._merged)
        free(self._arena)
        free(self._w_off)
        free(self._w_len)
        free(self._w_id)
        free(self._w_slots)
        free(self._scratch)
        free(self._heap)
        free(self._cache)

    cdef void _put(self, uint64_t key, int64_t rank, int32_t merged):
        cdef uint64_t h = mix64(key) & self._mask
        while self._keys[h] != 0 and self._keys[h] != key:
            h = (h + 1) & self._mask
        self._keys[h] = key
        self._ranks[h] = rank
        self._merged[h] = merged

    cdef bint _get(self, int32_t a, int32_t b, int64_t* rank, int32_t* merged) noexcept nogil:
        cdef uint64_t key = _key(a, b)
        cdef uint64_t h = mix64(key) & self._mask
        while self._keys[h] != 0:
            if self._keys[h] == key:
                rank[0] = self._ranks[h]
                merged[0] = self._merged[h]
                return True
            h = (h + 1) & self._mask
        return False

    def _build_whole(self, dict whole):
        cdef Py_ssize_t n = len(whole), total = 0, k = 0, cap = 16
        cdef bytes tok
        cdef uint64_t h
        for tok in whole:
            total += len(tok)
        while cap < 2 * n + 16:
            cap *= 2
        self._w_mask = cap - 1
        self._arena = <unsigned char*>malloc(total + 1)
        self._w_off = <int64_t*>malloc((n + 1) * sizeof(int64_t))
        self._w_len = <int32_t*>malloc((n + 1) * sizeof(int32_t))
        self._w_id = <int32_t*>malloc((n + 1) * sizeof(int32_t))
        self._w_slots = <int32_t*>malloc(cap * sizeof(int32_t))
        if (self._arena == NULL or self._w_off == NULL or self._w_len == NULL
                or self._w_id == NULL or self._w_slots == NULL):
            raise MemoryError()
        for i in range(cap):
            self._w_slots[i] = -1
        total = 0
        for tok, tid in whole.items():
            self._w_off[k] = total
            self._w_len[k] = len(tok)
            self._w_id[k] = tid
            for i in range(len(tok)):
                self._arena[total + i] = tok[i]
            total += len(tok)
            h = piece_hash(<const unsigned char*>tok, len(tok)) & self._w_mask
            while self._w_slots[h] != -1:
                h = (h + 1) & self._w_mask
            self._w_slots[h] = k
            k += 1
        self.has_whole = True

    cdef int32_t _whole_id(self, const unsigned char* p, Py_ssize_t n) noexcept nogil:
        """The id of the token whose bytes are exactly p[:n], or -1."""
        cdef uint64_t h = piece_hash(p, n) & self._w_mask
        cdef int32_t k
        while True:
            k = self._w_slots[h]
            if k == -1:
                return -1
            if self._w_len[k] == n and memcmp(self._arena + self._w_off[k], p, n) == 0:
                return self._w_id[k]
            h = (h + 1) & self._w_mask

    cdef int _grow(self, Py_ssize_t n) except -1:
        cdef int32_t* s
        cdef Cand* hp
        if n <= self._cap:
            return 0
        s = <int32_t*>realloc(self._scratch, 3 * n * sizeof(int32_t))
        if s == NULL:
            raise MemoryError()
        self._scratch = s
        hp = <Cand*>realloc(self._heap, (3 * n + 1) * sizeof(Cand))
        if hp == NULL:
            raise MemoryError()
        self._heap = hp
        self._cap = n
        return 0

    cdef Py_ssize_t merge_into(self, const unsigned char* p, Py_ssize_t n, int32_t* out) except -1:
        """Merges p[:n] and writes the ids to out (room for n); returns how many."""
        cdef Py_ssize_t i
        if n == 0:
            return 0
        self._grow(n)
        for i in range(n):
            self._scratch[i] = self._byte_ids[p[i]]
            if self._scratch[i] < 0:
                raise KeyError(f"byte {p[i]} has no token in this vocabulary")
        return self._merge_scratch(n, out)

    cdef Py_ssize_t merge_ids_into(self, const int32_t* ids, Py_ssize_t n, int32_t* out) except -1:
        """Merges the symbols ids[:n] (SentencePiece starts from characters, not bytes)."""
        cdef Py_ssize_t i
        if n == 0:
            return 0
        self._grow(n)
        for i in range(n):
            self._scratch[i] = ids[i]
        return self._merge_scratch(n, out)

    cdef Py_ssize_t _merge_scratch(self, Py_ssize_t n, int32_t* out) except -1:
        """The merge loop over the n ids in the scratch array (n >= 1, room grown)."""
        cdef Py_ssize_t i, j, k, hn = 0, m = 0
        cdef int32_t* ids = self._scratch
        cdef int32_t* nxt = ids + n
        cdef int32_t* prev = ids + 2 * n
        cdef Cand* heap = self._heap
        cdef Cand c
        cdef int64_t rank
        cdef int32_t merged
        if n == 1:
            out[0] = ids[0]
            return 1
        for i in range(n):
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
                continue  # stale: one side was merged since this pair was queued
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
        i = 0
        while i != -1:
            out[m] = ids[i]
            m += 1
            i = nxt[i]
        return m

    cdef Py_ssize_t encode_into(self, const unsigned char* p, Py_ssize_t n, int32_t* out) except -1:
        """A piece that is itself a token is taken whole when a whole-piece table was given
        (as tiktoken does); else it is merged. Short pieces are memoized."""
        cdef int32_t t
        cdef uint64_t h = 0
        cdef Py_ssize_t m
        if n <= CACHE_KEY:
            h = piece_hash(p, n)
            m = cache_get(self._cache, h, p, n, out)
            if m >= 0:
                return m
        if self.has_whole and n > 1:
            t = self._whole_id(p, n)
            if t >= 0:
                out[0] = t
                return 1
        m = self.merge_into(p, n, out)
        if n <= CACHE_KEY:
            cache_put(self._cache, h, p, n, out, m)
        return m

    cdef list ids_list(self, const int32_t* ids, Py_ssize_t n):
        """A list of ids[:n], built at its final size from shared int objects (no int is made
        per token: a list of a million tokens costs references only)."""
        cdef list out = PyList_New(n)
        cdef Py_ssize_t i, known = len(self._ints)
        cdef object o
        for i in range(n):
            if 0 <= ids[i] < known:
                o = <object>PyList_GET_ITEM(self._ints, ids[i])
            else:
                o = ids[i]
            Py_INCREF(o)
            PyList_SET_ITEM(out, i, o)
        return out

    def merge(self, bytes piece):
        return self._to_list(piece, False)

    def merge_ids(self, ids):
        """The merge of a list of symbol ids (the twin's merge_ids)."""
        cdef Py_ssize_t n = len(ids), i, m
        cdef int32_t* buf = <int32_t*>malloc((2 * n + 1) * sizeof(int32_t))
        if buf == NULL:
            raise MemoryError()
        try:
            for i in range(n):
                buf[i] = ids[i]
            m = self.merge_ids_into(buf, n, buf + n)
            return [buf[n + i] for i in range(m)]
        finally:
            free(buf)

    def encode_piece(self, bytes piece):
        return self._to_list(piece, True)

    cdef list _to_list(self, bytes piece, bint whole):
        cdef Py_ssize_t n = len(piece), m, i
        cdef int32_t* out = <int32_t*>malloc((n + 1) * sizeof(int32_t))
        if out == NULL:
            raise MemoryError()
        try:
            if whole:
                m = self.encode_into(piece, n, out)
            else:
                m = self.merge_into(piece, n, out)
            return [out[i] for i in range(m)]
        finally:
            free(out)


cdef inline uint64_t _key(int64_t a, int64_t b) noexcept nogil:
    # +1 keeps 0 free as the empty-slot marker
    return ((<uint64_t>(a + 1)) << 32) | <uint64_t>(b + 1)
