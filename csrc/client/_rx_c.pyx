# cython: language_level=3, boundscheck=False, wraparound=False
"""One socket read with the kernel's receive stamp, in C; same API and results as
benchc/client/_rx_py.py. The Python twin costs a 4-tuple, a list of ancillary tuples and a
struct unpack per read; at one read per token that showed as the client's CPU. The read
itself is `recv_stamped` (benchc/client/_rx_c.pxd), run without the GIL: read_stamped and
the receive loop (_rxloop_c) share it."""

import os

from benchc.client._rx_py import IDLE_BYTES, IDLE_CLOSED, IDLE_QUIET

from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.errno cimport EAGAIN, EINTR, errno
from libc.stdint cimport int64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy
from posix.time cimport CLOCK_MONOTONIC, CLOCK_REALTIME, clock_gettime, timespec
from posix.uio cimport iovec


cdef extern from "<errno.h>":
    int EWOULDBLOCK


cdef extern from *:
    """
    #include <sys/socket.h>
    #ifndef SO_TIMESTAMPNS  /* not Linux: no stamps, the read's own time is used */
    #define SO_TIMESTAMPNS -1
    #endif
    """


cdef extern from "<sys/socket.h>" nogil:
    ctypedef unsigned int socklen_t
    struct msghdr:
        void* msg_name
        socklen_t msg_namelen
        iovec* msg_iov
        size_t msg_iovlen
        void* msg_control
        size_t msg_controllen
        int msg_flags
    struct cmsghdr:
        size_t cmsg_len
        int cmsg_level
        int cmsg_type
    ssize_t recvmsg(int fd, msghdr* msg, int flags)
    cmsghdr* CMSG_FIRSTHDR(msghdr* msg)
    cmsghdr* CMSG_NXTHDR(msghdr* msg, cmsghdr* c)
    unsigned char* CMSG_DATA(cmsghdr* c)
    int SOL_SOCKET
    int SO_TIMESTAMPNS
    ssize_t recv(int fd, void* buf, size_t n, int flags)
    int MSG_PEEK
    int MSG_DONTWAIT


cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    int poll(pollfd* fds, unsigned long nfds, int timeout)
    short POLLIN


cdef inline int64_t _ns(int clock) noexcept nogil:
    cdef timespec ts
    clock_gettime(clock, &ts)
    return <int64_t>ts.tv_sec * 1000000000 + ts.tv_nsec


# as benchc/client/_rx_py.py's (which says why): a realtime read between two monotonic reads,
# a pair further apart than this read again, up to this many pairs, the closest kept
cdef enum:
    _OFFSET_WIDTH_NS = 20000
    _OFFSET_TRIES = 3
OFFSET_WIDTH_NS = _OFFSET_WIDTH_NS
OFFSET_TRIES = _OFFSET_TRIES


cdef inline int64_t _realtime_offset(int64_t now) noexcept nogil:
    """CLOCK_REALTIME less CLOCK_MONOTONIC, read just after `now` (a monotonic read)."""
    cdef int64_t a = now, real, b, width, best = -1, offset = 0
    cdef int i
    for i in range(_OFFSET_TRIES):
        real = _ns(CLOCK_REALTIME)
        b = _ns(CLOCK_MONOTONIC)
        width = b - a
        if best < 0 or width < best:
            best = width
            offset = real - a - width // 2
        if width <= _OFFSET_WIDTH_NS:
            break
        a = _ns(CLOCK_MONOTONIC)
    return offset


def realtime_offset_ns(int64_t now):
    """CLOCK_REALTIME less the monotonic clock, read just after `now` (a monotonic read)."""
    return _realtime_offset(now)


cdef int64_t monotonic_ns() noexcept nogil:
    """time.perf_counter_ns()'s clock."""
    return _ns(CLOCK_MONOTONIC)


cdef Py_ssize_t recv_stamped(int fd, unsigned char* buf, Py_ssize_t size, int64_t* stamp,
                             int64_t* now) noexcept nogil:
    """recvmsg into buf: the byte count (0 at end of stream, -1 with errno set), the bytes'
    arrival in stamp (the kernel's receive stamp when the socket asked for SO_TIMESTAMPNS,
    else now) and the time of the read in now, both on the monotonic clock."""
    cdef char control[128]
    cdef iovec iov
    cdef msghdr msg
    cdef cmsghdr* c
    cdef timespec ts
    cdef ssize_t n
    cdef int64_t t = -1
    iov.iov_base = buf
    iov.iov_len = size
    msg.msg_name = NULL
    msg.msg_namelen = 0
    msg.msg_iov = &iov
    msg.msg_iovlen = 1
    msg.msg_control = control
    msg.msg_controllen = sizeof(control)
    msg.msg_flags = 0
    n = recvmsg(fd, &msg, 0)
    now[0] = _ns(CLOCK_MONOTONIC)
    stamp[0] = now[0]
    if n <= 0:
        return n
    c = CMSG_FIRSTHDR(&msg)
    while c != NULL:
        if c.cmsg_level == SOL_SOCKET and c.cmsg_type == SO_TIMESTAMPNS:
            memcpy(&ts, CMSG_DATA(c), sizeof(ts))
            # the kernel stamps in CLOCK_REALTIME: moved onto the monotonic clock with the
            # offset between the two read now (_realtime_offset)
            t = (<int64_t>ts.tv_sec * 1000000000 + ts.tv_nsec) - _realtime_offset(now[0])
            break
        c = CMSG_NXTHDR(&msg, c)
    if 0 <= t <= now[0]:
        stamp[0] = t
    return n


def read_stamped(sock, Py_ssize_t size):
    """(bytes read, b"" at end of stream; their arrival on the monotonic clock of
    time.perf_counter_ns): the kernel's receive stamp when the socket asked for
    SO_TIMESTAMPNS, else now. BlockingIOError when nothing is there, OSError on failure."""
    cdef int fd = sock.fileno()
    cdef unsigned char* buf = <unsigned char*>malloc(size)
    cdef Py_ssize_t n
    cdef int64_t stamp, now
    cdef int err
    if buf == NULL:
        raise MemoryError()
    try:
        with nogil:
            n = recv_stamped(fd, buf, size, &stamp, &now)
        if n < 0:
            err = errno
            if err == EAGAIN or err == EWOULDBLOCK or err == EINTR:
                raise BlockingIOError(err, os.strerror(err))
            raise OSError(err, os.strerror(err))  # its subclass by errno, as socket.recvmsg raises
        return PyBytes_FromStringAndSize(<char*>buf, n), stamp
    finally:
        free(buf)


def peek_idle(sock):
    """What an idle connection holds that was not read yet, without reading it (see the
    twin): one poll and, when readable, one peek, without a Python object per call."""
    cdef int fd = sock.fileno()
    cdef pollfd pfd
    cdef int r
    cdef ssize_t n
    cdef char c
    pfd.fd = fd
    pfd.events = POLLIN
    pfd.revents = 0
    r = poll(&pfd, 1, 0)
    if r == 0:
        return IDLE_QUIET
    if r < 0:
        return IDLE_QUIET if errno == EINTR else IDLE_CLOSED
    n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT)
    if n == 0:
        return IDLE_CLOSED
    if n > 0:
        return IDLE_BYTES
    return IDLE_QUIET if errno == EAGAIN or errno == EWOULDBLOCK or errno == EINTR else IDLE_CLOSED
