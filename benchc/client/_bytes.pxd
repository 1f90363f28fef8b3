# Small byte helpers shared by the compiled modules (inline: nothing is imported at run time).

from libc.stdlib cimport realloc
from libc.string cimport memcpy


cdef struct Bytes:  # a growable byte buffer
    unsigned char* p
    Py_ssize_t n, cap


cdef inline int bytes_reserve(Bytes* b, Py_ssize_t extra) noexcept nogil:
    """Room for `extra` more bytes; -1 when memory ran out."""
    cdef Py_ssize_t cap = b.cap if b.cap else 64
    cdef unsigned char* q
    if b.n + extra <= b.cap:
        return 0
    while cap < b.n + extra:
        cap *= 2
    q = <unsigned char*>realloc(b.p, cap)
    if q == NULL:
        return -1
    b.p, b.cap = q, cap
    return 0


cdef inline int bytes_put(Bytes* b, const unsigned char* p, Py_ssize_t n) noexcept nogil:
    """Appends p[:n]; -1 when memory ran out."""
    if n <= 0:
        return 0
    if bytes_reserve(b, n) < 0:
        return -1
    memcpy(b.p + b.n, p, n)
    b.n += n
    return 0


cdef inline int bytes_set(Bytes* b, const unsigned char* p, Py_ssize_t n) noexcept nogil:
    """Holds p[:n] only; -1 when memory ran out."""
    b.n = 0
    return bytes_put(b, p, n)


cdef inline int hex_value(unsigned char c) noexcept nogil:
    """The value of one hex digit, or -1."""
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    if 65 <= c <= 70:
        return c - 55
    return -1
