# cython: language_level=3, boundscheck=False, wraparound=False
"""The C half of SYNC_FLUSH group commit (flush.GroupCommitService is the Python half).

A put that must wait for the disk blocks in ``wait_flushed`` with the GIL released; the flush thread runs ``serve``
over the file being written, also without the GIL: wait for a request, msync, wake everybody it covered, again.
Neither side takes the GIL between a flush and the wake-up, so N producers really do share one msync (the Python
version lost most of a flush's time to GIL hand-offs among the woken threads). Whatever is not the plain case (a
request reaching into the next file, a write buffer to commit first) goes back to Python, which flushes the slow
way and calls ``serve`` again.
"""
from libc.stdint cimport int64_t

from rmqcore._mapped_file cimport MappedFile
from rmqcore._c cimport rmq_atomic_load_i64

cdef extern from "rmq_group_commit.h" nogil:
    ctypedef struct rmq_group_commit:
        int64_t requested
        int64_t flushed
        int64_t arrivals
        int64_t failures
        int64_t flushes
        int64_t served
        int closed
    int RMQ_GC_FLUSHED, RMQ_GC_TIMEOUT, RMQ_GC_FAILED, RMQ_GC_CLOSED
    int rmq_gc_init(rmq_group_commit *g, int64_t flushed)
    void rmq_gc_destroy(rmq_group_commit *g)
    void rmq_gc_request(rmq_group_commit *g, int64_t offset)
    int rmq_gc_wait_flushed(rmq_group_commit *g, int64_t offset, int64_t timeout_ns)
    int rmq_gc_try_flushed(rmq_group_commit *g, int64_t offset)
    int64_t rmq_gc_next_target(rmq_group_commit *g, int64_t *arrivals_seen, int64_t last_batch, int64_t linger_ns)
    void rmq_gc_publish(rmq_group_commit *g, int64_t offset)
    void rmq_gc_publish_gen(rmq_group_commit *g, int64_t offset)
    int64_t rmq_gc_wait_arrival(rmq_group_commit *g, int64_t seen, int64_t timeout_ns)
    void rmq_gc_fail(rmq_group_commit *g)
    void rmq_gc_stop(rmq_group_commit *g)
    void rmq_gc_close(rmq_group_commit *g)

import os

FLUSHED = RMQ_GC_FLUSHED
TIMEOUT = RMQ_GC_TIMEOUT
FAILED = RMQ_GC_FAILED
CLOSED = RMQ_GC_CLOSED

# What serve() returns.
cdef enum:
    _STOPPED = -1       # stop() was called: flush the rest from Python and close()
    _NEEDS_PYTHON = 0   # a request the plain loop cannot serve: flush from Python, then serve again
STOPPED = _STOPPED
NEEDS_PYTHON = _NEEDS_PYTHON


cdef class GroupCommit:
    """Producers' wait and the flush thread's wake-up for one commitlog. Counters are for runtime_info/benches."""
    cdef rmq_group_commit g
    cdef int64_t _arrivals_seen
    cdef int64_t _last_batch
    cdef readonly int64_t flushed_store_timestamp   # store time of the last record a C-side flush covered (ms)

    def __cinit__(self, int64_t flushed=0):
        cdef int err = rmq_gc_init(&self.g, flushed)
        if err != 0:
            raise OSError(err, f"group commit: {os.strerror(err)}")

    def __dealloc__(self):
        rmq_gc_destroy(&self.g)

    def wait_flushed(self, int64_t offset, double timeout):
        """Block (GIL released) until a flush covers ``offset``; returns FLUSHED, TIMEOUT, FAILED or CLOSED."""
        cdef int rc
        cdef int64_t ns = <int64_t>(timeout * 1e9) if timeout > 0 else 0
        if rmq_gc_try_flushed(&self.g, offset):
            return RMQ_GC_FLUSHED
        with nogil:
            rc = rmq_gc_wait_flushed(&self.g, offset, ns)
        return rc

    def request(self, int64_t offset):
        """Ask for a flush covering ``offset`` without waiting (put_async). Keeps the GIL: the mutex is only ever
        held for a few instructions, and dropping the GIL here would hand it to another thread on every put."""
        rmq_gc_request(&self.g, offset)

    def wait_arrival(self, int64_t seen, double timeout):
        """Block (GIL released) until the request count passes ``seen``, close() or ``timeout``; returns the count.
        The put_async completer sleeps here when it has nothing to complete."""
        cdef int64_t n
        cdef int64_t ns = <int64_t>(timeout * 1e9) if timeout > 0 else 0
        with nogil:
            n = rmq_gc_wait_arrival(&self.g, seen, ns)
        return n

    @property
    def arrivals(self):
        return self.g.arrivals

    def next_target(self, double linger):
        """The flush thread's wait for work (GIL released): the offset to flush to, or -1 once stop() was called."""
        cdef int64_t target, seen = self._arrivals_seen
        cdef int64_t linger_ns = <int64_t>(linger * 1e9)
        with nogil:
            target = rmq_gc_next_target(&self.g, &seen, self._last_batch, linger_ns)
        self._last_batch = seen - self._arrivals_seen
        self._arrivals_seen = seen
        return target

    def publish(self, int64_t offset):
        """A flush reached ``offset``: wake the waits it covers."""
        rmq_gc_publish(&self.g, offset)

    def fail(self):
        """A flush failed: every current wait returns FAILED (its put reports FLUSH_DISK_TIMEOUT)."""
        with nogil:
            rmq_gc_fail(&self.g)

    def stop(self):
        """Ask the flush thread to leave serve()/next_target(); waits keep waiting for its last flush."""
        with nogil:
            rmq_gc_stop(&self.g)

    def close(self):
        """No flush will come any more: every wait returns now, later ones at once."""
        with nogil:
            rmq_gc_close(&self.g)

    def serve(self, MappedFile mf, double linger):
        """The flush loop over ``mf`` (the file holding the flushed offset, or None), GIL released throughout.

        Waits for a request first, always. Returns STOPPED after stop(), or NEEDS_PYTHON with a request this loop
        cannot serve: ``mf`` is None, has a write buffer, or the request reaches past its end (Python then
        flushes every file and publishes). Raises OSError, after failing the waits, when msync fails.
        """
        cdef int64_t start = 0, end = 0
        cdef int64_t target, seen = self._arrivals_seen, batch = self._last_batch, pos, ts
        cdef int64_t linger_ns = <int64_t>(linger * 1e9)
        cdef int err = 0
        cdef int code = _NEEDS_PYTHON
        cdef bint plain = mf is not None and mf.write_buffer == NULL and not mf.read_only and mf.hold()
        if plain:
            start = mf.file_from_offset
            end = start + mf.file_size
        try:
            with nogil:
                while True:
                    target = rmq_gc_next_target(&self.g, &seen, batch, linger_ns)
                    batch = seen - self._arrivals_seen
                    self._arrivals_seen = seen
                    if target < 0:
                        code = _STOPPED
                        break
                    if not plain or target <= start or target > end:
                        break
                    ts = mf._store_timestamp          # read before the flush: the flush covers it
                    err = mf.flush_c(0)
                    if err != 0:
                        break
                    pos = start + rmq_atomic_load_i64(&mf._flushed)
                    if ts > self.flushed_store_timestamp:
                        self.flushed_store_timestamp = ts
                    rmq_gc_publish_gen(&self.g, pos)
                    if pos < target:
                        break
        finally:
            self._last_batch = batch
            if plain:
                mf.release()
        if err != 0:
            self.fail()
            raise OSError(err, f"msync: {os.strerror(err)}", mf.file_name)
        return code

    @property
    def flushed_where(self):
        return self.g.flushed

    @property
    def requested(self):
        return self.g.requested

    @property
    def flushes(self):
        return self.g.flushes

    @property
    def served(self):
        return self.g.served

    @property
    def failures(self):
        return self.g.failures

    @property
    def closed(self):
        return bool(self.g.closed)
