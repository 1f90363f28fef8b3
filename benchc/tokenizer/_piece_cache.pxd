# A memo of encoded pieces for the compiled mergers (csrc/tokenizer/_bpe_c.pyx, _spm_c.pyx):
# words repeat, and a hit costs a hash and a compare instead of a merge. Direct-mapped (a
# colliding piece replaces the slot's), short pieces only, so it needs no eviction and
# stays a fixed 2 MiB; results are those of the merge by construction (a pure memo).
# With the hashes both mergers use. Inline functions only: nothing here is compiled on its own.

from libc.stdint cimport int32_t, uint8_t, uint64_t
from libc.string cimport memcmp, memcpy

cdef enum:
    CACHE_SLOTS = 32768  # a power of two
    CACHE_KEY = 22       # bytes of the longest piece kept
    CACHE_IDS = 8        # ids of the longest result kept

cdef struct CacheSlot:
    uint64_t hash
    int32_t ids[8]
    uint8_t len          # 0: empty
    uint8_t nids
    unsigned char key[22]


cdef inline uint64_t mix64(uint64_t x) noexcept nogil:
    # splitmix64's finaliser: spreads sequential ids over a hash table
    x ^= x >> 30
    x *= 0xbf58476d1ce4e5b9ULL
    x ^= x >> 27
    x *= 0x94d049bb133111ebULL
    x ^= x >> 31
    return x


cdef inline uint64_t piece_hash(const unsigned char* p, Py_ssize_t n) noexcept nogil:
    # FNV-1a
    cdef uint64_t h = 0xcbf29ce484222325ULL
    cdef Py_ssize_t i
    for i in range(n):
        h = (h ^ p[i]) * 0x100000001b3ULL
    return h


cdef inline Py_ssize_t cache_get(CacheSlot* cache, uint64_t h, const unsigned char* p, Py_ssize_t n,
                                 int32_t* out) noexcept nogil:
    """The ids kept for p[:n] written to out and their number, or -1."""
    cdef CacheSlot* s = &cache[h & (CACHE_SLOTS - 1)]
    if s.len != n or s.hash != h or memcmp(s.key, p, n) != 0:
        return -1
    memcpy(out, s.ids, s.nids * sizeof(int32_t))
    return s.nids


cdef inline void cache_put(CacheSlot* cache, uint64_t h, const unsigned char* p, Py_ssize_t n,
                           const int32_t* ids, Py_ssize_t m) noexcept nogil:
    cdef CacheSlot* s
    if n > CACHE_KEY or m > CACHE_IDS or n == 0:
        return
    s = &cache[h & (CACHE_SLOTS - 1)]
    s.hash = h
    s.len = <uint8_t>n
    s.nids = <uint8_t>m
    memcpy(s.key, p, n)
    memcpy(s.ids, ids, m * sizeof(int32_t))
