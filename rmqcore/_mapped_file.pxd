# A fixed-size file named by its first global offset, mmap'ed, with RocketMQ's three positions:
# wrote (appended), committed (copied from a TransientStorePool buffer into the file) and flushed (on disk).
from libc.stdint cimport int64_t

from rmqcore._c cimport pthread_mutex_t, rmq_event


cdef class WakeEvent:
    cdef rmq_event ev                   # poked from C without the GIL; the waiting thread waits here without it


cdef class WriteRing:
    cdef unsigned char *data
    cdef readonly int64_t size


cdef class MappedFile:
    cdef readonly str file_name          # full path
    cdef readonly int64_t file_from_offset  # global offset of byte 0: the file's 20-digit name
    cdef readonly int64_t file_size
    cdef readonly bint read_only
    cdef int fd
    cdef unsigned char *base            # the mapping, file_size bytes
    cdef unsigned char *write_buffer    # TransientStorePool buffer (appends land here until commit), or NULL
    cdef object _pool                   # the pool write_buffer came from, to give it back
    cdef object _pool_buffer            # keeps the pool's buffer object alive while borrowed
    # Positions are read by flush, commit and reader threads without the put lock: C11 atomics via rmq_atomic.h.
    cdef int64_t _wrote
    cdef int64_t _committed
    cdef int64_t _flushed
    cdef int64_t _store_timestamp       # store time of the last message appended (ms), for find-by-time
    # The write runway (rmq_runway.h): [0, _allocated) is allocated on disk, and faulted in when _populate; appends
    # past it extend it first. _runway is how far ahead of the write position the allocate thread keeps it (0: the
    # whole file was allocated when it was made); _poke, when set, is that thread's event, signalled once the write
    # position comes within half a runway of _allocated.
    cdef int64_t _allocated
    cdef int64_t _runway
    cdef bint _populate
    # SYNC_FLUSH commitlog files: the runway's blocks are written with zeros and synced ahead of the writer (a
    # group-commit sync then writes data only); _extend_mu keeps the zeroing of a stretch from racing with data.
    cdef bint _sync_writes
    # ... and appends wait in the store's write ring (rmq_ring.h) until a flush commits them with pwrite:
    # [_committed, _wrote) is in the ring. _direct_end: an append too large for the ring went into the file
    # directly, up to there (a commit that reaches it skips it). _commit_mu: one committer at a time.
    cdef unsigned char *_ring
    cdef int64_t _ring_mask
    cdef object _ring_owner             # the WriteRing, kept alive while this file uses it
    cdef int64_t _direct_end
    cdef pthread_mutex_t _commit_mu
    cdef int64_t _pwrite_min            # appends of at least this many bytes go through pwrite (-1: none do)
    cdef int64_t _copied                # bytes appended through the mapping since the last runway stretch
    cdef int64_t _pwritten              # ... and through pwrite: which is more decides how the next is made
    cdef int64_t _mapped_dirty          # 1 once bytes were stored through the mapping since the last flush
    cdef bint _runway_mapped
    cdef bint _runway_zeroed
    cdef int64_t _stretch_ns            # when the last stretch was decided (monotonic), and the write position
    cdef int64_t _stretch_wrote         # then: how fast the writer goes decides whether zeros go ahead of it
    cdef pthread_mutex_t _extend_mu
    cdef rmq_event *_poke
    cdef object _poke_owner             # keeps the object owning *_poke alive
    cdef bint _closed
    cdef int _holds                     # RocketMQ's ReferenceResource: GIL-free sections and exported views

    cdef int extend_c(self, int64_t need, int64_t ahead) noexcept nogil
    cdef bint _zeros_ahead(self, int64_t end) noexcept nogil
    cdef int _extend_step(self, int64_t have, int64_t end, bint mapped, bint zeros) noexcept nogil
    cdef int write_c(self, int64_t pos, const unsigned char *src, int64_t n, bint size_last) noexcept nogil
    cdef void advance(self, int64_t n, int64_t store_timestamp) noexcept nogil
    cdef int64_t read_position_c(self) noexcept nogil
    cdef int64_t readable_through(self, int64_t end)
    cdef int flush_c(self, int flush_least_pages) noexcept nogil
    cdef int commit_ring_c(self) noexcept nogil
    cdef int _commit_ring_locked(self) noexcept nogil
    cdef int _ring_write(self, int64_t pos, const unsigned char *src, int64_t n, bint size_last) noexcept nogil
    cdef bint hold(self) noexcept
    cdef void release(self) noexcept
    cdef _attach_write_buffer(self, pool, buf)
    cdef _close_fd(self)
    cdef _unmap(self)
    cdef _give_back_buffer(self)
