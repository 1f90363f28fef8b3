# The stamped read's core (csrc/client/_rx_c.pyx), without the GIL: read_stamped wraps it, the
# receive loop (_rxloop_c) calls it for every read.

from libc.stdint cimport int64_t

cdef int64_t monotonic_ns() noexcept nogil
cdef Py_ssize_t recv_stamped(int fd, unsigned char* buf, Py_ssize_t size, int64_t* stamp,
                             int64_t* now) noexcept nogil
