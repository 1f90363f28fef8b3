# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The receive loop in C: one thread, without the GIL, that reads the measured streams'
sockets; same API and results as benchc/client/_rxloop_py.py (the twin, which defines them).

Why: at one SSE event per read, the asyncio path costs a loop iteration, a callback and
Python bytecode per read (benchmarks/client_ingest.py). Here a read costs a recvmsg with the
kernel's receive stamp (_rx_c's core), then the response reader's core (_response_c: head,
de-chunking, the stream parser's fast path), all in C on structs Python created; Python is
woken through an eventfd once per batch of finished responses, never per read.

The loop owns nothing of the exchange's logic: benchc.client.http1 connects, writes the
request, keeps the pool, the timeouts, the retries and the error kinds, and reads the
outcome from the same ResponseReader object the asyncio path uses.

A connection's slot (RxConn) is IDLE (watched: a byte or an end there closes it), ACTIVE (a
reader is fed) or CLOSED (no longer watched; Python closes the socket). The loop's thread
and Python's hand a slot over under its mutex; the loop may take the GIL while holding it
(an event only json.loads reads), so Python takes that mutex with the GIL released.
Edge-triggered epoll: a read shorter than the buffer emptied the socket, and any later
bytes raise a new edge, so a token costs one recvmsg (as nginx reads).

A socket is read in runs of at most RUN_READS reads (the twin's bound): a server that keeps
its socket full (a flood) would otherwise hold the loop, and the slot's mutex, for as long as
it wrote, so no other connection was read and Python's take_back (a timeout, on the event
loop's thread) waited. A run that ends with the socket maybe not empty puts the slot on the
loop's list of slots due (no new edge would come for those bytes), read again next turn after
the ready ones. A Python thread that waits for a slot's mutex says so first (`wanted`): the
loop passes that slot over until Python has had it, rather than racing it for the mutex
(a mutex is not fair: the loop, locking it again microseconds later, would win again).
"""

import threading
import time

from libc.errno cimport EAGAIN, EINTR, errno
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc

from benchc.client._response_c cimport ResponseCore, response_feed, response_lost
from benchc.client._response_c cimport ResponseReader as CReader
from benchc.client._rx_c cimport recv_stamped
from benchc.metrics._hdr_c cimport Histogram

from benchc.client._response_c import ResponseReader as _Reader
from benchc.client._stream_c import StreamParser as _Parser
from benchc.metrics.latency import new_histogram


cdef extern from "<sys/epoll.h>" nogil:
    ctypedef union epoll_data_t:
        void* ptr
        int fd
        uint32_t u32
        uint64_t u64
    struct epoll_event:
        uint32_t events
        epoll_data_t data
    int epoll_create1(int flags)
    int epoll_ctl(int epfd, int op, int fd, epoll_event* event)
    int epoll_wait(int epfd, epoll_event* events, int maxevents, int timeout)
    enum:
        EPOLLIN
        EPOLLET
        EPOLLRDHUP
        EPOLLHUP
        EPOLLERR
        EPOLL_CTL_ADD
        EPOLL_CTL_DEL
        EPOLL_CLOEXEC

cdef extern from "<sys/eventfd.h>" nogil:
    int eventfd(unsigned int initval, int flags)
    enum:
        EFD_NONBLOCK
        EFD_CLOEXEC

cdef extern from "<errno.h>" nogil:
    int EWOULDBLOCK
    int ENOMEM

cdef extern from "<unistd.h>" nogil:
    ssize_t c_read "read"(int fd, void* buf, size_t n)
    ssize_t c_write "write"(int fd, const void* buf, size_t n)
    int c_close "close"(int fd)

cdef extern from *:
    """
    static inline void benchc_atomic_add(int* p, int v) { __atomic_add_fetch(p, v, __ATOMIC_SEQ_CST); }
    static inline int benchc_atomic_load(int* p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
    """
    void atomic_add "benchc_atomic_add"(int* p, int v) nogil
    int atomic_load "benchc_atomic_load"(int* p) nogil

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    int pthread_mutex_init(pthread_mutex_t* m, void* attr)
    int pthread_mutex_destroy(pthread_mutex_t* m)
    int pthread_mutex_lock(pthread_mutex_t* m)
    int pthread_mutex_unlock(pthread_mutex_t* m)


cdef enum:
    RECV_SIZE = 64 * 1024  # as http1.RECV_SIZE
    BATCH = 256  # epoll events per wait
    RUN_READS = 4  # reads of one socket in a row before the loop turns to the others (the twin's)
    IDLE = 0
    ACTIVE = 1
    CLOSED = 2
    FOR_RESPONSE = 1  # why the loop closed a slot (the twin's RESPONSE, LOST, END, STRAY)
    FOR_LOST = 2
    FOR_END = 3
    FOR_STRAY = 4

MAX_RUN_BYTES = RUN_READS * RECV_SIZE  # the most one run reads from one socket
# the slot's states as the twin names them (poll() returns these)
STATES = ("idle", "active", "closed")
CLOSED_FOR = (None, "response", "lost", "end", "stray")
ResponseReader = _Reader  # the reader and parser this loop feeds (http1 makes them per exchange)
StreamParser = _Parser


cdef struct Slot:
    int fd
    int state
    bint watched  # registered with epoll
    int closed_for  # why the loop closed it (FOR_RESPONSE .. FOR_STRAY), 0 otherwise
    int64_t token
    ResponseCore* reader  # ACTIVE: the exchange's reader
    pthread_mutex_t mu
    int wanted  # Python threads waiting for mu (atomic): the loop passes the slot over meanwhile
    bint due  # (the loop's thread) on its list of slots to read again without an edge
    bint hup  # (the loop's thread) the peer's end or an error was seen: read on to the end
    Slot* next_due
    Slot* next  # in the list of slots waiting to be freed


cdef inline int64_t _us(int64_t ns) noexcept nogil:
    cdef int64_t us = (ns + 500) // 1000  # as metrics.latency.ns_to_us
    return us if us > 0 else 1


cdef class RxLoop:
    """The loop and its thread (started at once). `fileno()` turns readable when finished()
    has tokens; attach() hands it a connected socket."""

    cdef int epfd, wake_fd, stop_fd
    cdef pthread_mutex_t qmu  # the finished tokens, the wake flag, the slots to free
    cdef int64_t* done
    cdef Py_ssize_t n_done, cap_done
    cdef bint wake_pending, need_wake, stopped
    cdef Slot* retired
    cdef Slot* due  # (the loop's thread) slots whose last run may have left bytes unread
    cdef pthread_mutex_t smu  # the loop's own figures
    cdef Histogram lag
    cdef int64_t reads, nbytes, longest_run
    cdef object thread

    def __cinit__(self):
        cdef epoll_event ev
        self.epfd = self.wake_fd = self.stop_fd = -1
        pthread_mutex_init(&self.qmu, NULL)
        pthread_mutex_init(&self.smu, NULL)
        self.cap_done = 256
        self.done = <int64_t*>malloc(self.cap_done * sizeof(int64_t))
        if self.done == NULL:
            raise MemoryError()
        self.epfd = epoll_create1(EPOLL_CLOEXEC)
        self.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)
        self.stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)
        if self.epfd < 0 or self.wake_fd < 0 or self.stop_fd < 0:
            raise OSError(errno, "cannot set up the receive loop")
        ev.events = EPOLLIN
        ev.data.ptr = NULL  # the stop signal
        if epoll_ctl(self.epfd, EPOLL_CTL_ADD, self.stop_fd, &ev) < 0:
            raise OSError(errno, "cannot set up the receive loop")
        self.lag = new_histogram()
        self.thread = threading.Thread(target=self._run, name="benchc-rxloop", daemon=True)
        self.thread.start()

    def __dealloc__(self):
        cdef Slot* s
        # close() joined the thread; without it (an interpreter exiting) nothing is freed
        if self.stopped:
            self._free_retired()
            if self.epfd >= 0:
                c_close(self.epfd)
            if self.wake_fd >= 0:
                c_close(self.wake_fd)
            if self.stop_fd >= 0:
                c_close(self.stop_fd)
            free(self.done)

    def fileno(self):
        return self.wake_fd

    def attach(self, sock, int64_t token):
        """Watch a connected socket (non-blocking, SO_TIMESTAMPNS set before its connect);
        its finished responses and its end come back as `token`."""
        return RxConn(self, sock.fileno(), token)

    def finished(self):
        """Tokens of the slots that finished a response or closed since the last call."""
        cdef uint64_t count
        cdef Py_ssize_t i
        c_read(self.wake_fd, &count, 8)
        with nogil:
            pthread_mutex_lock(&self.qmu)
        out = [self.done[i] for i in range(self.n_done)]
        self.n_done = 0
        self.wake_pending = False
        pthread_mutex_unlock(&self.qmu)
        return out

    def take_lag(self):
        """The histogram of the loop's lag (us from a read's kernel stamp to the read) since the
        last call, and the reads and bytes since then."""
        cdef Histogram fresh = new_histogram()
        with nogil:
            pthread_mutex_lock(&self.smu)
        old, self.lag = self.lag, fresh
        reads, nbytes = self.reads, self.nbytes
        self.reads = self.nbytes = 0
        pthread_mutex_unlock(&self.smu)
        return old, reads, nbytes

    def take_longest_run(self):
        """The most bytes the loop read from one connection in one run (one after another,
        serving no other connection and letting Python take no slot meanwhile) since the last
        call."""
        with nogil:
            pthread_mutex_lock(&self.smu)
        out, self.longest_run = self.longest_run, 0
        pthread_mutex_unlock(&self.smu)
        return out

    @property
    def thread_id(self):
        """The loop's thread, as the system knows it (for perf, top -H)."""
        return self.thread.native_id

    def cpu_s(self):
        """CPU seconds the loop's thread used so far."""
        return time.clock_gettime(time.pthread_getcpuclockid(self.thread.ident))

    def close(self):
        """Stops the thread (slots still attached stop being read)."""
        cdef uint64_t one = 1
        if self.stopped:
            return
        c_write(self.stop_fd, &one, 8)
        self.thread.join()
        self.stopped = True
        self._free_retired()
        self.due = NULL  # the thread's list: slots let go from now on are freed at once

    # ---------------------------------------------------------------- the thread

    def _run(self):
        with nogil:
            self._loop()

    cdef void _loop(self) noexcept nogil:
        cdef epoll_event evs[BATCH]
        cdef unsigned char* buf = <unsigned char*>malloc(RECV_SIZE)
        cdef int n, i, timeout
        cdef bint stop = False
        cdef uint64_t one = 1
        cdef Slot* s
        cdef Slot* todo
        if buf == NULL:
            return
        while not stop:
            self._free_retired()
            # the slots due are read this turn, after the ready ones; they keep `due` set until
            # then, so that an edge of theirs in this batch does not read them twice
            todo, self.due = self.due, NULL
            timeout = -1  # nothing due: wait for an edge
            s = todo
            while s != NULL:
                timeout = 1  # only slots Python is taking: give it a millisecond
                if not atomic_load(&s.wanted):
                    timeout = 0
                    break
                s = s.next_due
            n = epoll_wait(self.epfd, evs, BATCH, timeout)
            if n < 0:
                if errno != EINTR:
                    break
                n = 0
            for i in range(n):
                s = <Slot*>evs[i].data.ptr
                if s == NULL:
                    stop = True
                    continue
                if evs[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR):
                    s.hup = True
                if not s.due:
                    self._serve(s, buf)
            while todo != NULL:
                s, todo = todo, todo.next_due
                s.due = False
                self._serve(s, buf)
            if self.need_wake:  # once per batch: Python drains every finished token at once
                self.need_wake = False
                c_write(self.wake_fd, &one, 8)
        free(buf)

    cdef void _serve(self, Slot* s, unsigned char* buf) noexcept nogil:
        """One run of reads of a slot: at most RUN_READS, until a read comes short (the socket
        is empty: later bytes raise a new edge) or, after the peer's end, until the end."""
        cdef Py_ssize_t n
        cdef int64_t stamp, now, run = 0
        cdef int err, reads = 0
        cdef ResponseCore* r
        if atomic_load(&s.wanted):
            self._read_later(s)
            return
        pthread_mutex_lock(&s.mu)
        while s.state != CLOSED:
            if reads == RUN_READS or (reads > 0 and atomic_load(&s.wanted)):
                self._read_later(s)  # the others' turn, and Python's
                break
            n = recv_stamped(s.fd, buf, RECV_SIZE, &stamp, &now)
            if n > 0:
                reads += 1
                pthread_mutex_lock(&self.smu)
                self.reads += 1
                self.nbytes += n
                run += n
                if run > self.longest_run:
                    self.longest_run = run
                self.lag.record_nogil(_us(now - stamp), 1)
                pthread_mutex_unlock(&self.smu)
                if s.state == IDLE:  # bytes nobody asked for: the connection is out of step
                    self._close(s, FOR_STRAY)
                    break
                r = s.reader
                response_feed(r, buf, n, stamp)
                if r.failed and not r.finished:
                    response_lost(r, ENOMEM, now)
                if r.finished:
                    s.reader = NULL
                    if r.keep_alive:
                        s.state = IDLE
                        self._push(s.token)
                    else:
                        self._close(s, FOR_RESPONSE)
                        break
                if n < RECV_SIZE and not s.hup:
                    break  # the socket is empty: later bytes raise a new edge
            elif n == 0 or (errno != EAGAIN and errno != EWOULDBLOCK and errno != EINTR):
                err = 0 if n == 0 else errno
                if s.state == ACTIVE:
                    response_lost(s.reader, err, now)
                    s.reader = NULL
                    self._close(s, FOR_LOST)
                else:
                    self._close(s, FOR_END)
            elif errno != EINTR:
                break
        pthread_mutex_unlock(&s.mu)

    cdef void _read_later(self, Slot* s) noexcept nogil:
        """The slot's socket may hold bytes no new edge will announce: read it next turn."""
        if not s.due:
            s.due = True
            s.next_due = self.due
            self.due = s

    cdef void _close(self, Slot* s, int why) noexcept nogil:
        """Stops watching a slot (the loop's thread, holding s.mu) and tells Python."""
        _unwatch(self.epfd, s)
        s.state = CLOSED
        s.closed_for = why
        self._push(s.token)

    cdef void _push(self, int64_t token) noexcept nogil:
        cdef int64_t* d
        pthread_mutex_lock(&self.qmu)
        if self.n_done == self.cap_done:
            d = <int64_t*>realloc(self.done, 2 * self.cap_done * sizeof(int64_t))
            if d != NULL:
                self.done, self.cap_done = d, 2 * self.cap_done
        if self.n_done < self.cap_done:
            self.done[self.n_done] = token
            self.n_done += 1
        if not self.wake_pending:
            self.wake_pending = True
            self.need_wake = True
        pthread_mutex_unlock(&self.qmu)

    cdef void _retire(self, Slot* s) noexcept nogil:
        """A slot Python let go of: freed at the top of the loop's next turn, after any batch
        that may still name it (or now, once the thread has stopped)."""
        if self.stopped:
            pthread_mutex_destroy(&s.mu)
            free(s)
            return
        pthread_mutex_lock(&self.qmu)
        s.next = self.retired
        self.retired = s
        pthread_mutex_unlock(&self.qmu)

    cdef void _free_retired(self) noexcept nogil:
        cdef Slot* s
        cdef Slot* nxt
        pthread_mutex_lock(&self.qmu)
        s = self.retired
        self.retired = NULL
        pthread_mutex_unlock(&self.qmu)
        while s != NULL:
            nxt = s.next
            if s.due:
                self._forget_due(s)
            pthread_mutex_destroy(&s.mu)
            free(s)
            s = nxt

    cdef void _forget_due(self, Slot* s) noexcept nogil:
        """Takes a slot off the list of slots due (before it is freed)."""
        cdef Slot** at = &self.due
        while at[0] != NULL:
            if at[0] == s:
                at[0] = s.next_due
                return
            at = &at[0].next_due


cdef inline void _hold(Slot* s) noexcept nogil:
    """Python takes a slot's mutex: the loop passes the slot over while Python waits."""
    atomic_add(&s.wanted, 1)
    pthread_mutex_lock(&s.mu)
    atomic_add(&s.wanted, -1)


cdef inline void _unwatch(int epfd, Slot* s) noexcept nogil:
    if s.watched:
        epoll_ctl(epfd, EPOLL_CTL_DEL, s.fd, NULL)
        s.watched = False


cdef class RxConn:
    """One connection's slot in the loop, driven from Python (see the twin)."""

    cdef RxLoop loop
    cdef Slot* slot
    cdef readonly int64_t token
    cdef object _reader  # the ACTIVE exchange's reader: alive while the loop feeds it
    cdef int _closed_for  # the slot's closed_for, kept when Python lets the slot go

    def __cinit__(self, RxLoop loop, int fd, int64_t token):
        cdef epoll_event ev
        cdef Slot* s
        if loop.stopped:
            raise RuntimeError("the receive loop is closed")
        s = <Slot*>malloc(sizeof(Slot))
        if s == NULL:
            raise MemoryError()
        s.fd = fd
        s.state = IDLE
        s.token = token
        s.reader = NULL
        s.next = NULL
        s.closed_for = 0
        s.wanted = 0
        s.due = s.hup = False
        s.next_due = NULL
        pthread_mutex_init(&s.mu, NULL)
        s.watched = True
        self.loop, self.slot, self.token = loop, s, token
        ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET
        ev.data.ptr = s
        if epoll_ctl(loop.epfd, EPOLL_CTL_ADD, fd, &ev) < 0:
            s.watched = False
            raise OSError(errno, "the receive loop cannot watch this socket")

    def __dealloc__(self):
        if self.slot != NULL:
            self._let_go()

    def begin(self, CReader reader):
        """IDLE -> ACTIVE: the loop feeds `reader` from now on. False when the loop saw the
        connection end (or bytes nobody asked for) while it was idle."""
        cdef Slot* s = self.slot
        cdef bint ok
        if s == NULL:
            return False
        with nogil:
            _hold(s)
            ok = s.state == IDLE
            if ok:
                s.reader = &reader.core
                s.state = ACTIVE
            pthread_mutex_unlock(&s.mu)
        if ok:
            self._reader = reader
        return ok

    def poll(self):
        """The slot's state: "idle", "active" or "closed" (taken under its mutex: what the loop
        wrote into the reader before is visible after)."""
        cdef Slot* s = self.slot
        cdef int state
        if s == NULL:
            return "closed"
        with nogil:
            _hold(s)
            state = s.state
            pthread_mutex_unlock(&s.mu)
        if state != ACTIVE:
            self._reader = None
        return STATES[state]

    @property
    def closed_for(self):
        """Why the loop closed the slot (see the twin), read once poll() said "closed": the loop
        writes it before that, under the slot's mutex."""
        return CLOSED_FOR[self.slot.closed_for if self.slot != NULL else self._closed_for]

    def take_back(self):
        """ACTIVE -> CLOSED with the reader unfinished, for Python to end (a timeout, a
        cancellation): True. False when the loop had finished it (its token is on the way)."""
        cdef bint was_active
        if self.slot == NULL:
            return False
        with nogil:
            was_active = _stop(self.slot, self.loop.epfd, True)
        self._reader = None
        return was_active

    def detach(self):
        """-> CLOSED and forgotten, before Python closes the socket. True when a reader was
        still being fed (now Python's, unfinished)."""
        if self.slot == NULL:
            return False
        return self._let_go()

    cdef bint _let_go(self):
        cdef Slot* s = self.slot
        cdef bint was_active
        self.slot = NULL
        with nogil:
            was_active = _stop(s, -1 if self.loop.stopped else self.loop.epfd, False)
            self._closed_for = s.closed_for  # final: the slot is CLOSED now, the loop done with it
            self.loop._retire(s)
        self._reader = None
        return was_active


cdef bint _stop(Slot* s, int epfd, bint only_active) noexcept nogil:
    """-> CLOSED under the slot's mutex (only from ACTIVE with only_active), no longer watched
    (epfd -1: the loop's thread is gone); True when it was ACTIVE (the reader, unfinished,
    is now Python's)."""
    cdef bint was_active
    _hold(s)
    was_active = s.state == ACTIVE
    if was_active or not only_active:
        s.reader = NULL
        if epfd >= 0:
            _unwatch(epfd, s)
        s.state = CLOSED
    pthread_mutex_unlock(&s.mu)
    return was_active
