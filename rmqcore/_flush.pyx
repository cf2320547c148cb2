# cython: language_level=3, boundscheck=False, wraparound=False
"""The C half of SYNC_FLUSH group commit (flush.GroupCommitService is the Python half).

Leader/follower (include/rmq_group_commit.h): a put that needs the disk calls ``sync``; with no flush running it
msyncs the file being written itself, else it sleeps until a flush covers it, GIL released throughout. The
service thread (``serve``) leads flushes for requests nobody waits for (WAIT=false, put_async, aput). Whatever the
plain path cannot do (a flush reaching into the next file, a write buffer) goes through Python: the
``flush_all`` callable flushes every file and names the file now holding the flushed offset.
"""
from libc.errno cimport EIO
from libc.stdint cimport int64_t

from rmqcore._mapped_file cimport MappedFile
from rmqcore._message cimport Message, PutResult
from rmqcore._c cimport rmq_atomic_load_i64, rmq_now_ns

cdef extern from "rmq_group_commit.h" nogil:
    ctypedef struct rmq_group_commit:
        int64_t requested
        int64_t flushed
        int64_t arrivals
        int64_t failures
        int64_t flushes
        int64_t served
        int64_t led
        int64_t linger_ns
        int64_t stalls
        int64_t spin_ns
        int64_t catches
        int64_t flush_ewma_ns
        int closed
    int RMQ_GC_LEADER, RMQ_GC_FLUSHED, RMQ_GC_TIMEOUT, RMQ_GC_FAILED, RMQ_GC_CLOSED
    int rmq_gc_init(rmq_group_commit *g, int64_t flushed)
    void rmq_gc_destroy(rmq_group_commit *g)
    void rmq_gc_request(rmq_group_commit *g, int64_t offset)
    int rmq_gc_try_flushed(rmq_group_commit *g, int64_t offset)
    int rmq_gc_wait_or_lead(rmq_group_commit *g, int64_t offset, int64_t deadline_ns, int64_t failures0,
                            int64_t *target, int pass_baton)
    void rmq_gc_leader_done(rmq_group_commit *g, int64_t offset, int err, int leader_returns)
    int64_t rmq_gc_service_lead(rmq_group_commit *g)
    int64_t rmq_gc_wait_arrival(rmq_group_commit *g, int64_t seen, int64_t timeout_ns)
    int rmq_gc_wait_only(rmq_group_commit *g, int64_t offset, int64_t deadline_ns, int64_t failures0)
    void rmq_gc_fail(rmq_group_commit *g)
    void rmq_gc_publish(rmq_group_commit *g, int64_t offset)
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
STOPPED = _STOPPED


cdef int64_t _duration_ns(str name, int64_t ns) except -1:
    # The group commit's tunable waits (linger_ns, spin_ns): a duration, 0 turning the wait off.
    if ns < 0:
        raise ValueError(f"{name} must be >= 0, got {ns}")
    return ns


cdef class GroupCommit:
    """The commitlog's group commit. ``flush_all()`` (called with the GIL, by whichever thread leads a flush the
    plain path cannot do) flushes every appended byte and returns ``(flushed_offset, mapped_file_holding_it)``; the
    file may be None. Counters are for runtime_info and benches."""
    cdef rmq_group_commit g
    cdef MappedFile _mf                 # the file holding the flushed offset: the plain path flushes it
    cdef object _flush_all
    cdef readonly int64_t flushed_store_timestamp   # store time of the last record a plain flush covered (ms)
    cdef readonly str last_error

    def __cinit__(self, int64_t flushed=0, flush_all=None, MappedFile mf=None):
        cdef int err = rmq_gc_init(&self.g, flushed)
        if err != 0:
            raise OSError(err, f"group commit: {os.strerror(err)}")
        self._flush_all = flush_all
        self._mf = mf

    def __dealloc__(self):
        rmq_gc_destroy(&self.g)

    def set_file(self, MappedFile mf):
        """The file holding the flushed offset (after recovery, or when Python moved the flushed offset)."""
        self._mf = mf

    cdef int _lead_plain(self, MappedFile mf, int64_t target, int *rc, int put) noexcept nogil:
        # The leader's flush when ``mf`` holds everything up to target; 0 when it could not (Python must), else 1.
        # put: the leader is a waiting put (it returns to Python itself), not the service thread.
        cdef int64_t start = mf.file_from_offset, pos, ts
        cdef int err
        if target <= start or target > start + mf.file_size:
            return 0
        ts = mf._store_timestamp                # read before the flush: the flush covers it
        err = mf.flush_c(0)
        pos = start + rmq_atomic_load_i64(&mf._flushed)
        if err == 0 and ts > self.flushed_store_timestamp:
            self.flushed_store_timestamp = ts
        rmq_gc_leader_done(&self.g, pos, err, put)
        if err != 0:
            rc[0] = RMQ_GC_FAILED
        return 1

    cdef int _lead_python(self, int put) except -2:
        # Leader on the slow path: flush everything through Python, then hand the lead back.
        cdef int64_t pos = 0
        cdef int err
        try:
            pos, mf = self._flush_all()
        except OSError as e:
            self.last_error = f"flush failed: {e}"
            err = e.errno or EIO
            with nogil:
                rmq_gc_leader_done(&self.g, 0, err, put)
            return RMQ_GC_FAILED
        except BaseException:
            with nogil:
                rmq_gc_leader_done(&self.g, 0, EIO, put)
            raise
        self._mf = mf
        self.last_error = None
        with nogil:
            rmq_gc_leader_done(&self.g, pos, 0, put)
        return RMQ_GC_FLUSHED

    def sync(self, int64_t offset, double timeout):
        """A put's wait: lead the flush that covers ``offset``, or wait (GIL released) for one, at most ``timeout``
        s. Returns FLUSHED, TIMEOUT, FAILED (a flush failed meanwhile) or CLOSED."""
        return self._sync(offset, timeout)

    cdef int _sync(self, int64_t offset, double timeout) except -9:
        cdef int64_t failures0 = self.g.failures
        cdef int64_t deadline = rmq_now_ns() + (<int64_t>(timeout * 1e9) if timeout > 0 else 0)
        cdef int64_t target = 0
        cdef int rc
        cdef MappedFile mf
        cdef bint plain
        cdef int pass_baton = 1             # the first entry only: after leading, this thread goes back to Python
        if self.g.flushed >= offset and rmq_gc_try_flushed(&self.g, offset):
            return RMQ_GC_FLUSHED
        while True:
            mf = self._mf
            plain = mf is not None and mf.write_buffer == NULL and not mf.read_only and mf.hold()
            with nogil:
                rc = rmq_gc_wait_or_lead(&self.g, offset, deadline, failures0, &target, pass_baton)
                pass_baton = 0
                while rc == RMQ_GC_LEADER and plain and self._lead_plain(mf, target, &rc, 1):
                    if rc == RMQ_GC_FAILED:
                        break
                    rc = rmq_gc_wait_or_lead(&self.g, offset, deadline, failures0, &target, 0)
            if plain:
                mf.release()
            if rc != RMQ_GC_LEADER:
                return rc
            if self._flush_all is None:
                with nogil:
                    rmq_gc_leader_done(&self.g, 0, EIO, 1)
                self.last_error = "no file to flush"
                return RMQ_GC_FAILED
            if self._lead_python(1) == RMQ_GC_FAILED:
                return RMQ_GC_FAILED

    wait_flushed = sync

    def wait_only(self, int64_t offset, double timeout):
        """Wait (GIL released) for a flush that covers ``offset`` without leading one: the put_async completer,
        whose requests the service thread flushes. FLUSHED, TIMEOUT, FAILED or CLOSED."""
        cdef int64_t failures0 = self.g.failures
        cdef int64_t deadline = rmq_now_ns() + (<int64_t>(timeout * 1e9) if timeout > 0 else 0)
        cdef int rc
        with nogil:
            rc = rmq_gc_wait_only(&self.g, offset, deadline, failures0)
        return rc

    def request(self, int64_t offset):
        """Ask for a flush covering ``offset`` without waiting (WAIT=false, put_async). Keeps the GIL: the mutex is
        only ever held for a few instructions, and dropping the GIL here would hand it to another thread on every
        put."""
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

    def serve(self):
        """The service thread: lead a flush whenever a request nobody waits for is above the flushed offset, GIL
        released while it waits and while it msyncs the plain way. Returns STOPPED after stop(); raises what
        ``flush_all`` raises other than OSError (an OSError fails the waiting puts and the loop goes on)."""
        cdef int64_t target
        cdef int rc = 0
        cdef MappedFile mf
        cdef bint plain
        while True:
            mf = self._mf
            plain = mf is not None and mf.write_buffer == NULL and not mf.read_only and mf.hold()
            with nogil:
                while True:
                    target = rmq_gc_service_lead(&self.g)
                    if target < 0 or not plain or not self._lead_plain(mf, target, &rc, 0):
                        break
            if plain:
                mf.release()
            if target < 0:
                return _STOPPED
            self._lead_python(0)

    def publish(self, int64_t offset):
        """A flush made elsewhere reached ``offset``: wake the waits it covers."""
        with nogil:
            rmq_gc_publish(&self.g, offset)

    def fail(self):
        """Fail every current wait, as a failed flush does (tests and the shutdown path)."""
        with nogil:
            rmq_gc_fail(&self.g)

    def stop(self):
        """Ask the service thread to leave serve(); waits keep waiting for its last flush."""
        with nogil:
            rmq_gc_stop(&self.g)

    def close(self):
        """No flush will come any more: every wait returns now, later ones at once."""
        with nogil:
            rmq_gc_close(&self.g)

    @property
    def linger_ns(self):
        """How long a leader waits at most for as many requests as its last flush covered (0: never)."""
        return self.g.linger_ns

    @linger_ns.setter
    def linger_ns(self, int64_t ns):
        self.g.linger_ns = _duration_ns("linger_ns", ns)

    @property
    def spin_ns(self):
        """How long a blocking put woken on deck (the next to be released after a flush) spins at most, GIL
        released, for its turn before it goes on anyway (0: puts are woken one at a time; the default is 0 when
        the process may use only one CPU)."""
        return self.g.spin_ns

    @spin_ns.setter
    def spin_ns(self, int64_t ns):
        self.g.spin_ns = _duration_ns("spin_ns", ns)

    @property
    def catches(self):
        """Turns a put on deck caught while spinning (no wake-up of a sleeping thread)."""
        return self.g.catches

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
    def led_by_puts(self):
        """Flushes a waiting put led itself (the rest were the service thread's)."""
        return self.g.led

    @property
    def served(self):
        return self.g.served

    @property
    def flush_time_ns(self):
        """How long a flush takes, a moving average (ns)."""
        return self.g.flush_ewma_ns

    @property
    def stalls(self):
        """Covered puts that woke on their own timer (no put after them passed them the baton)."""
        return self.g.stalls

    @property
    def failures(self):
        return self.g.failures

    @property
    def closed(self):
        return bool(self.g.closed)


# -- put_async / aput completions -----------------------------------------------------------------------------------

import collections
import concurrent.futures
import logging

from rmqcore.status import PutStatus

_log = logging.getLogger("rmqcore.flush")
_FLUSH_DISK_TIMEOUT = PutStatus.FLUSH_DISK_TIMEOUT
_InvalidState = concurrent.futures.InvalidStateError
cdef object _CALLBACK = object()        # an entry's "result" when its target is a callback(flushed: bool)
CALLBACK = _CALLBACK
cdef int64_t _IDLE_NS = 500000000       # between checks for shutdown while nothing is pending


cdef inline void _complete_one(target, result, bint ok):
    # A future gets the PutResult, or FLUSH_DISK_TIMEOUT when no flush covered it in time; one its caller cancelled
    # (or completed) is left alone: the record is stored either way. A callback gets the flag.
    try:
        if result is _CALLBACK:
            target(ok)
        elif not target.done():
            target.set_result(result if ok else result.replace_status(_FLUSH_DISK_TIMEOUT))
    except _InvalidState:                   # a concurrent future cancelled between done() and set_result
        pass
    except Exception:
        _log.exception("put_async completion failed")


def complete_all(list calls):
    """Complete a flush's share of one event loop's futures, in that loop: ``calls`` is flat, (target, result,
    flushed) per entry."""
    cdef Py_ssize_t i, n = len(calls)
    for i in range(0, n - 2, 3):
        _complete_one(calls[i], calls[i + 1], calls[i + 2] is True)


cdef class FlushedFutures:
    """The put_async / aput completions of a GroupCommit: entries (offset, deadline, target, result, loop) in
    append order; ``run`` (the completer thread) sleeps in C, without the GIL, on the flush of the oldest entry (or
    on the next request when there is none) and completes everything one flush covered in one pass: futures of no
    loop there, each event loop's share in one call_soon_threadsafe of ``complete_all``. No Python frame runs per
    message, neither here nor in the loop."""
    cdef GroupCommit core
    cdef object pending
    cdef public bint stopped

    def __cinit__(self, GroupCommit core not None):
        self.core = core
        self.pending = collections.deque()

    def add(self, int64_t offset, double timeout, target, result=_CALLBACK, loop=None):
        """Complete ``target`` once a flush covers ``offset``: a future gets ``result`` (FLUSH_DISK_TIMEOUT in its
        place after ``timeout`` s or a failed flush), a callback (``result`` left out) the flag; in ``loop`` when
        given. Then asks for the flush (after the entry is in: the completer, woken by the request, finds it)."""
        self._add(offset, timeout, target, result, loop)

    cdef int _add(self, int64_t offset, double timeout, target, result, loop) except -1:
        cdef int64_t deadline = rmq_now_ns() + (<int64_t>(timeout * 1e9) if timeout > 0 else 0)
        if self.core.g.closed:
            # No flush will come and the completer may have left already (it stops once closed with nothing
            # pending): answer now, flushed or not, rather than leave the entry to nobody.
            ok = rmq_atomic_load_i64(&self.core.g.flushed) >= offset
            if loop is None:
                _complete_one(target, result, ok)
            else:
                loop.call_soon_threadsafe(complete_all, [target, result, ok])
            return 0
        self.pending.append((offset, deadline, target, result, loop))
        rmq_gc_request(&self.core.g, offset)
        return 0

    def __len__(self):
        return len(self.pending)

    def run(self):
        """The completer thread's loop, until ``stopped`` (or the group commit closed) with nothing pending."""
        cdef rmq_group_commit *g = &self.core.g
        cdef int64_t seen = g.arrivals, offset, deadline, flushed, now, failures0
        cdef int code
        cdef bint ok
        cdef tuple entry
        cdef list calls
        pending = self.pending
        while True:
            if not pending:
                if self.stopped or g.closed:
                    return
                with nogil:
                    seen = rmq_gc_wait_arrival(g, seen, _IDLE_NS)
                continue
            entry = pending[0]
            offset = entry[0]
            deadline = entry[1]
            failures0 = g.failures
            with nogil:
                code = rmq_gc_wait_only(g, offset, deadline, failures0)
            flushed = rmq_atomic_load_i64(&g.flushed)
            now = rmq_now_ns()
            loops = {}
            # Offsets arrive nearly in order (appended after the put lock): take every covered one from the front;
            # after a failed flush or shutdown every uncovered one fails, after a timeout the expired ones.
            while pending:
                entry = pending[0]
                if <int64_t>entry[0] <= flushed:
                    ok = True
                elif code == RMQ_GC_FAILED or code == RMQ_GC_CLOSED or <int64_t>entry[1] <= now:
                    ok = False
                else:
                    break
                pending.popleft()
                loop = entry[4]
                if loop is None:
                    _complete_one(entry[2], entry[3], ok)
                else:
                    calls = loops.get(loop)
                    if calls is None:
                        calls = loops[loop] = []
                    calls.append(entry[2])
                    calls.append(entry[3])
                    calls.append(ok)
            for loop, calls in loops.items():
                try:
                    loop.call_soon_threadsafe(complete_all, calls)
                except RuntimeError:        # the loop was closed: nobody is left to await these
                    _log.warning("%d aput completions dropped: their event loop is closed", len(calls) // 3)


# -- SYNC_FLUSH puts in one call -------------------------------------------------------------------------------------

import asyncio

_PUT_OK = PutStatus.PUT_OK
_Future = concurrent.futures.Future
_get_running_loop = asyncio.get_running_loop


cdef class DurablePuts:
    """SYNC_FLUSH's put, put_async and aput, each one call below the store's own frame: the append
    (``append``: CommitLogWriter.put), then the group commit's wait (put), a completion entry (put_async, aput), or
    for a message with WAIT "false" (RocketMQ's isWaitStoreMsgOK off) only a request for the flush. With 16 × 64
    puts in flight the Python frames this replaces were a tenth of a put. ``completer()`` gives the FlushedFutures
    (its thread starts on first use); ``timed_out(result)`` (Python: it logs) makes a put's FLUSH_DISK_TIMEOUT
    result."""
    cdef object _append
    cdef GroupCommit core
    cdef object _completer
    cdef FlushedFutures _futures
    cdef object _timed_out
    cdef public double timeout

    def __init__(self, append, GroupCommit core not None, completer, timed_out, double timeout):
        self._append = append
        self.core = core
        self._completer = completer
        self._timed_out = timed_out
        self.timeout = timeout

    cdef inline int64_t _end(self, PutResult r, Message msg) except -2:
        # The offset a flush must reach before the put is acknowledged; -1: nothing to wait for (a failed put, or
        # WAIT "false", whose flush is asked for here and not awaited).
        cdef int64_t end
        if r.status is not _PUT_OK:
            return -1
        end = r.commitlog_offset + r.wrote_bytes
        if msg.properties and msg.properties.get("WAIT") == "false":
            rmq_gc_request(&self.core.g, end)
            return -1
        return end

    cdef FlushedFutures _entries(self):
        if self._futures is None:
            self._futures = self._completer()
        return self._futures

    def put(self, Message msg):
        """Append, then lead or wait for the flush that covers the record: its PutResult, or FLUSH_DISK_TIMEOUT."""
        cdef PutResult r = self._append(msg)
        cdef int64_t end = self._end(r, msg)
        if end < 0 or self.core._sync(end, self.timeout) == RMQ_GC_FLUSHED:
            return r
        return self._timed_out(r)

    def put_async(self, Message msg):
        """Append; a concurrent.futures.Future that completes once a flush covers the record."""
        cdef PutResult r = self._append(msg)
        cdef int64_t end = self._end(r, msg)
        out = _Future()
        if end < 0:
            out.set_result(r)
        else:
            self._entries()._add(end, self.timeout, out, r, None)
        return out

    def aput(self, Message msg):
        """Append; a future of the running loop that completes there once a flush covers the record. Outside a
        running loop: RuntimeError, nothing written."""
        loop = _get_running_loop()
        cdef PutResult r = self._append(msg)
        cdef int64_t end = self._end(r, msg)
        out = loop.create_future()
        if end < 0:
            out.set_result(r)
        else:
            self._entries()._add(end, self.timeout, out, r, loop)
        return out
