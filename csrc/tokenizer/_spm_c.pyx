# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""SentencePiece-style BPE in C; same API and results as benchc/tokenizer/_spm_py.py.

Characters are looked up in an open-addressing hash of code points, unknown ones become
byte-fallback or unknown tokens, and the symbols are merged by the compiled byte-pair
merger's loop (BPE.merge_ids_into, csrc/tokenizer/_bpe_c.pyx), so the two kinds of BPE
share one merge. `encode_text` cuts a whole normalized segment into pieces in C as well:
no Python object is made per piece.
"""

from libc.stdint cimport int32_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc

from benchc.tokenizer._bpe_c cimport BPE
from benchc.tokenizer._piece_cache cimport (
    CACHE_KEY, CACHE_SLOTS, CacheSlot, cache_get, cache_put, mix64, piece_hash)

from benchc.tokenizer._spm_py import CUT_METASPACE, CUT_NONE, CUT_WORDS

cdef int _CUT_NONE = CUT_NONE
cdef int _CUT_METASPACE = CUT_METASPACE
cdef int _CUT_WORDS = CUT_WORDS


cdef inline bint _is_space(const unsigned char* p, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    # "▁" (U+2581) is E2 96 81
    return i + 2 < n and p[i] == 0xE2 and p[i + 1] == 0x96 and p[i + 2] == 0x81


cdef inline Py_ssize_t _char_len(unsigned char b) noexcept nogil:
    if b < 0x80:
        return 1
    if b < 0xE0:
        return 2
    if b < 0xF0:
        return 3
    return 4


cdef class SPM:
    cdef BPE _bpe
    cdef uint32_t* _keys   # code point + 1, 0 = empty
    cdef int32_t* _vals
    cdef uint64_t _mask
    cdef int32_t _byte_ids[256]
    cdef bint _byte_fallback, _fuse_unk, _has_unk
    cdef int32_t _unk_id
    cdef readonly dict char_ids
    cdef readonly dict pairs
    cdef CacheSlot* _cache  # encode_into's memo of pieces

    def __init__(self, dict char_ids, dict pairs, byte_ids=None, unk_id=None, bint fuse_unk=False):
        cdef Py_ssize_t cap = 16, i
        cdef uint64_t h
        cdef uint32_t key
        if byte_ids is not None and len(byte_ids) != 256:
            raise ValueError("byte_ids needs one id per byte value")
        self.char_ids = char_ids
        self.pairs = pairs
        self._bpe = BPE([-1] * 256, pairs)
        while cap < 2 * len(char_ids) + 16:
            cap *= 2
        self._mask = cap - 1
        self._keys = <uint32_t*>calloc(cap, sizeof(uint32_t))
        self._vals = <int32_t*>malloc(cap * sizeof(int32_t))
        if self._keys == NULL or self._vals == NULL:
            raise MemoryError()
        for cp, tid in char_ids.items():
            key = <uint32_t>cp + 1
            h = mix64(key) & self._mask
            while self._keys[h] != 0 and self._keys[h] != key:
                h = (h + 1) & self._mask
            self._keys[h] = key
            self._vals[h] = tid
        self._byte_fallback = byte_ids is not None
        for i in range(256):
            self._byte_ids[i] = byte_ids[i] if byte_ids is not None else -1
        self._has_unk = unk_id is not None
        self._unk_id = unk_id if unk_id is not None else -1
        self._fuse_unk = fuse_unk
        self._cache = <CacheSlot*>calloc(CACHE_SLOTS, sizeof(CacheSlot))
        if self._cache == NULL:
            raise MemoryError()
        top = max(self._unk_id, max(char_ids.values(), default=-1), max(byte_ids or [-1]),
                  max([m for _, m in pairs.values()], default=-1))
        self._bpe._ints = list(range(top + 1))  # every id this merger writes, for ids_list

    def __dealloc__(self):
        free(self._keys)
        free(self._vals)
        free(self._cache)

    @property
    def byte_ids(self):
        return [self._byte_ids[i] for i in range(256)] if self._byte_fallback else None

    @property
    def unk_id(self):
        return self._unk_id if self._has_unk else None

    @property
    def fuse_unk(self):
        return self._fuse_unk

    cdef inline int32_t _char_id(self, uint32_t cp) noexcept nogil:
        cdef uint32_t key = cp + 1
        cdef uint64_t h = mix64(key) & self._mask
        while self._keys[h] != 0:
            if self._keys[h] == key:
                return self._vals[h]
            h = (h + 1) & self._mask
        return -1

    cdef Py_ssize_t _symbols(self, const unsigned char* p, Py_ssize_t n, int32_t* out) noexcept nogil:
        """The starting symbols of p[:n] (at most n), as the twin's `symbols`."""
        cdef Py_ssize_t i = 0, m = 0, w, k
        cdef uint32_t cp
        cdef int32_t tid
        cdef bint unk = False, all_bytes
        while i < n:
            w = _char_len(p[i])
            if i + w > n:
                w = n - i
            if w == 1:
                cp = p[i]
            elif w == 2:
                cp = ((p[i] & 0x1F) << 6) | (p[i + 1] & 0x3F)
            elif w == 3:
                cp = ((p[i] & 0x0F) << 12) | ((p[i + 1] & 0x3F) << 6) | (p[i + 2] & 0x3F)
            else:
                cp = ((p[i] & 0x07) << 18) | ((p[i + 1] & 0x3F) << 12) | ((p[i + 2] & 0x3F) << 6) | (p[i + 3] & 0x3F)
            tid = self._char_id(cp)
            if tid >= 0:
                if unk:
                    out[m] = self._unk_id
                    m += 1
                    unk = False
                out[m] = tid
                m += 1
            else:
                all_bytes = self._byte_fallback
                if all_bytes:
                    for k in range(w):
                        if self._byte_ids[p[i + k]] < 0:
                            all_bytes = False
                if all_bytes:
                    for k in range(w):
                        out[m] = self._byte_ids[p[i + k]]
                        m += 1
                elif self._has_unk:
                    if unk and not self._fuse_unk:
                        out[m] = self._unk_id
                        m += 1
                    unk = True
            i += w
        if unk:
            out[m] = self._unk_id
            m += 1
        return m

    cdef Py_ssize_t encode_into(self, const unsigned char* p, Py_ssize_t n, int32_t* sym,
                                int32_t* out) except -1:
        """Encodes p[:n] into out (room for n), with sym as scratch (room for n); short pieces
        are memoized."""
        cdef uint64_t h = 0
        cdef Py_ssize_t m
        if n <= CACHE_KEY:
            h = piece_hash(p, n)
            m = cache_get(self._cache, h, p, n, out)
            if m >= 0:
                return m
        m = self._bpe.merge_ids_into(sym, self._symbols(p, n, sym), out)
        if n <= CACHE_KEY:
            cache_put(self._cache, h, p, n, out, m)
        return m

    def encode_piece(self, bytes piece):
        return self.encode_text(piece, _CUT_NONE)

    def encode_text(self, bytes text, int cut=0):
        cdef int32_t* ids = NULL
        cdef Py_ssize_t n = self._encode(text, cut, &ids)
        try:
            return self._bpe.ids_list(ids, n)
        finally:
            free(ids)

    def count_text(self, bytes text, int cut=0):
        return self._encode(text, cut, NULL)

    cdef Py_ssize_t _encode(self, bytes text, int cut, int32_t** ids_out) except -1:
        """Encodes text cut into pieces and returns how many ids; with ids_out, they are kept
        in a buffer handed to the caller (who frees it)."""
        cdef const unsigned char* p = text
        cdef Py_ssize_t n = len(text), a = 0, b, total = 0
        cdef int32_t* sym
        cdef int32_t* ids
        sym = <int32_t*>malloc((n + 1) * sizeof(int32_t))
        ids = <int32_t*>malloc((n + 1) * sizeof(int32_t))  # at most one id per byte
        if sym == NULL or ids == NULL:
            free(sym)
            free(ids)
            raise MemoryError()
        try:
            while a < n:
                b = a + 1
                if cut == _CUT_NONE:
                    b = n
                else:
                    while b < n and not (_is_space(p, b, n) and (
                            cut == _CUT_METASPACE or not (b >= 3 and _is_space(p, b - 3, n)))):
                        b += 1
                total += self.encode_into(p + a, b - a, sym, ids + total if ids_out != NULL else ids)
                a = b
            if ids_out != NULL:
                ids_out[0] = ids
                ids = NULL
            return total
        finally:
            free(sym)
            free(ids)
