# cython: language_level=3, boundscheck=False, wraparound=False
"""MappedFile: one commitlog or consume-queue segment on an mmap, as RocketMQ's DefaultMappedFile.

Appends go to the mapping (or to a borrowed TransientStorePool buffer), readers get zero-copy memoryviews of the
mapping, flush is msync over the dirty range. Every GIL-free section holds a reference (``hold``/``release``) so a
concurrent ``destroy`` never unmaps memory somebody still touches; the unmap happens at the last release.
"""
import os

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_FillInfo
from libc.errno cimport EBADF, ENOSPC, EROFS, errno
from libc.stdint cimport int64_t
from libc.string cimport memcpy, memset
from posix.fcntl cimport O_CREAT, O_RDONLY, O_RDWR, O_TRUNC, open as c_open
from posix.mman cimport MAP_ANONYMOUS, MAP_FAILED, MAP_PRIVATE, MAP_SHARED, PROT_READ, PROT_WRITE, mmap, munmap
from posix.stat cimport fstat, struct_stat
from posix.unistd cimport close as c_close, ftruncate

from rmqcore._c cimport (pthread_mutex_destroy, pthread_mutex_init, pthread_mutex_lock, pthread_mutex_unlock,
                         rmq_atomic_cas_i64, rmq_atomic_load_i64, rmq_atomic_store_i64, rmq_copy_size_last,
                         rmq_event, rmq_event_destroy, rmq_event_init, rmq_event_poke, rmq_event_stop,
                         rmq_event_wait, rmq_now_ns, rmq_pwrite_size_last, rmq_ring_commit, rmq_ring_copy_in,
                         rmq_runway_discard, rmq_runway_extend, rmq_runway_write_zeros)

from rmqcore.errors import StoreClosedError, StoreLayoutError

cdef enum:
    # A runway is made in steps this long (MappedFile.extend_c), SYNC_FLUSH's in whole stretches.
    RUNWAY_STEP = 4 * 1024 * 1024
    ZERO_EVIDENCE = 1024 * 1024       # bytes a writer must go before its pace is judged (MappedFile._zeros_ahead)

# Zeros go ahead of a writer that will reach the end of the new stretch within this long (ns) at its pace so far:
# well within the kernel's 30 s dirty expiry, so the data overwrites them before writeback (MappedFile._zeros_ahead).
cdef int64_t _zero_horizon_ns = 10 * 1000000000


def _set_zero_horizon_ns(int64_t ns):
    """Tests: how soon a writer must be expected at the end of a stretch for it to be zeroed ahead."""
    global _zero_horizon_ns
    _zero_horizon_ns = ns


cdef extern from "<fcntl.h>" nogil:
    int posix_fallocate(int fd, long offset, long length)
    int O_CLOEXEC

cdef extern from "rmq_mman.h" nogil:
    int RMQ_OS_PAGE_SIZE
    int rmq_prefault_write(unsigned char *p, size_t length)
    int rmq_msync_range(unsigned char *base, int64_t start, int64_t end)
    void rmq_unmap_written(unsigned char *base, int64_t start, int64_t end)

OS_PAGE_SIZE = RMQ_OS_PAGE_SIZE


def offset_to_file_name(int64_t offset):
    """RocketMQ's UtilAll.offset2FileName: the offset zero-padded to 20 digits."""
    if offset < 0:
        raise ValueError(f"file offset must be >= 0, got {offset}")
    return "%020d" % offset


def fsync_dir(str path):
    """Make a directory's entries (a file renamed into it) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _raise_os(int err, str what, str path):
    raise OSError(err, f"{what}: {os.strerror(err)}", path)


cdef class WriteRing:
    """Memory where a SYNC_FLUSH commitlog's appends wait until the flush that covers them commits them into the
    file with pwrite (rmq_ring.h says why). ``size``: a power of two, at least a page; private anonymous memory,
    resident only as far as it is used."""

    def __cinit__(self, int64_t size):
        cdef void *p
        if size < RMQ_OS_PAGE_SIZE or size & (size - 1):
            raise ValueError(f"write ring size must be a power of two >= {RMQ_OS_PAGE_SIZE}, got {size}")
        p = mmap(NULL, <size_t>size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        if p == MAP_FAILED:
            _raise_os(errno, "mmap", "write ring")
        self.data = <unsigned char *>p
        self.size = size

    def __dealloc__(self):
        if self.data != NULL:
            munmap(self.data, <size_t>self.size)
            self.data = NULL


cdef class MappedFile:
    """One mapped segment. ``MappedFile(path, file_size)`` opens it, creating it when absent.

    The file name must be the 20-digit start offset. An existing file must have exactly ``file_size`` bytes.
    ``read_only=True`` maps an existing file for reading only (stores copied off a broker).

    ``runway`` > 0: a new file is sparse and only ``runway`` bytes ahead of the write position are allocated
    (and pre-faulted when ``populate``); appends extend the runway as they reach its end (rmq_runway.h). ``runway``
    0 allocates a new file whole at once (posix_fallocate), as before. ``sync_writes`` (SYNC_FLUSH commitlogs):
    the runway is written with zeros and synced ahead of the writer, so that each group commit sync writes data
    only. ``ring`` (a WriteRing; SYNC_FLUSH commitlogs): appends are copied into it and reach the file when a
    flush (or ``commit``) commits them with pwrite; readers see them from then on (the read position is the
    committed one), as with a TransientStorePool buffer.

    ``pwrite_min`` >= 0: appends of at least that many bytes (and commits from a write buffer) go into the page
    cache through pwrite(2) instead of through the mapping: pages written that way are never mapped writable, so
    writeback need not write-protect them with a TLB shootdown IPI per page (a fifth of the CPU time of a
    full-speed put_batch here). Smaller appends (one message) are cheaper as a copy into the mapping than as a
    system call. Each stretch of runway is written with zeros ahead of a writer that goes fast (always under
    SYNC_FLUSH), and then pre-faulted when copies into the mapping came since the last one (ASYNC);
    ``copies_expected`` and ``zeros_expected`` say how to make the first stretch (what the file before did).
    -1: every append through the mapping.
    """

    def __cinit__(self, str file_name, int64_t file_size, *, bint read_only=False, pool=None, int64_t runway=0,
                  bint populate=True, bint sync_writes=False, int64_t pwrite_min=0,
                  bint copies_expected=True, bint zeros_expected=False, WriteRing ring=None, str tmp_path=None):
        self.fd = -1
        self.base = NULL
        self.write_buffer = NULL
        self._ring = NULL
        self._poke = NULL
        pthread_mutex_init(&self._extend_mu, NULL)
        pthread_mutex_init(&self._commit_mu, NULL)

    def __init__(self, str file_name, int64_t file_size, *, bint read_only=False, pool=None, int64_t runway=0,
                 bint populate=True, bint sync_writes=False, int64_t pwrite_min=0,
                 bint copies_expected=True, bint zeros_expected=False, WriteRing ring=None, str tmp_path=None):
        cdef struct_stat st
        cdef int flags
        cdef int err
        cdef void *p
        if file_size <= 0:
            raise ValueError(f"file_size must be > 0, got {file_size}")
        base_name = os.path.basename(file_name)
        if len(base_name) != 20 or not base_name.isdigit():
            raise StoreLayoutError(f"{file_name}: a mapped file is named by its start offset in 20 digits")
        self.file_name = file_name
        self.file_from_offset = int(base_name)
        self.file_size = file_size
        self.read_only = read_only
        # A new file is made and sized under ``tmp_path`` (outside every directory RocketMQ lists) and renamed into
        # place once allocated and mapped: a kill mid-creation never leaves a file of the wrong length, which
        # RocketMQ's MappedFileQueue.load refuses with the whole store ("length not matched").
        made = file_name
        if tmp_path is not None and not read_only and not os.path.exists(file_name):
            made = tmp_path
            flags = O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC
        else:
            flags = (O_RDONLY if read_only else (O_RDWR | O_CREAT)) | O_CLOEXEC
        path_b = os.fsencode(made)
        self.fd = c_open(path_b, flags, 0o644)
        if self.fd < 0:
            _raise_os(errno, "open", made)
        if fstat(self.fd, &st) != 0:
            err = errno
            self._close_fd()
            _raise_os(err, "fstat", file_name)
        self._runway = runway if runway > 0 and not read_only else 0
        self._sync_writes = sync_writes and not read_only and pool is None
        if ring is not None and not read_only and pool is None:
            self._ring_owner = ring
            self._ring = ring.data
            self._ring_mask = ring.size - 1
        self._populate = populate
        self._pwrite_min = pwrite_min if not read_only else -1
        # How the first stretch of runway is made (see extend_c): for copies unless every append is a pwrite, and
        # with zeros when the writer went fast in the file before (_zeros_ahead).
        self._copied = 1 if copies_expected and pwrite_min != 0 else 0
        self._runway_zeroed = zeros_expected
        self._stretch_ns = rmq_now_ns()
        if st.st_size == 0 and not read_only:
            # Allocate blocks now: a sparse file would turn a full disk into SIGBUS on the put path; this way it
            # is an error here, when the file is made (CREATE_MAPPED_FILE_FAILED). With a runway only its first
            # stretch is allocated now (below, once mapped), the rest as appends approach it.
            err = ftruncate(self.fd, file_size) if self._runway else posix_fallocate(self.fd, 0, file_size)
            if self._runway and err != 0:
                err = errno
            if err != 0:
                self._close_fd()
                os.unlink(made)
                _raise_os(err, "allocate", file_name)
            self._allocated = 0 if self._runway else file_size
        elif st.st_size != file_size:
            self._close_fd()
            raise StoreLayoutError(
                f"{file_name}: size {st.st_size} differs from the configured mapped file size {file_size}")
        with nogil:
            p = mmap(NULL, <size_t>file_size, PROT_READ if read_only else (PROT_READ | PROT_WRITE),
                     MAP_SHARED, self.fd, 0)
        if p == MAP_FAILED:
            err = errno
            self._close_fd()
            _raise_os(err, "mmap", file_name)
        self.base = <unsigned char *>p
        if self._runway and st.st_size == 0:
            with nogil:
                err = self.extend_c(0, 0)
            if err != 0:
                self._unmap()
                os.unlink(made)
                _raise_os(err, "allocate", file_name)
        if made is not file_name:
            try:
                os.rename(made, file_name)
                fsync_dir(os.path.dirname(file_name) or ".")
            except OSError:
                self._unmap()
                os.unlink(made)
                raise
        if pool is not None:
            buf = pool.borrow_buffer()
            if buf is not None:
                self._attach_write_buffer(pool, buf)

    cdef _attach_write_buffer(self, pool, buf):
        cdef unsigned char[::1] view = buf
        if view.shape[0] < self.file_size:
            raise ValueError("transient store pool buffer is smaller than the mapped file")
        self._pool = pool
        self._pool_buffer = buf
        self.write_buffer = &view[0]

    cdef _close_fd(self):
        if self.fd >= 0:
            c_close(self.fd)
            self.fd = -1

    def __dealloc__(self):
        if self.base != NULL:
            munmap(self.base, <size_t>self.file_size)
            self.base = NULL
        if self.fd >= 0:
            c_close(self.fd)
            self.fd = -1
        pthread_mutex_destroy(&self._extend_mu)
        pthread_mutex_destroy(&self._commit_mu)

    # -- reference counting (RocketMQ's ReferenceResource) ------------------------------------------------------

    cdef bint hold(self) noexcept:
        if self._closed:
            return False
        self._holds += 1
        return True

    cdef void release(self) noexcept:
        # Runs from __releasebuffer__ too, possibly while another exception is being raised: never raise here.
        self._holds -= 1
        if self._closed and self._holds == 0:
            try:
                self._unmap()
            except BaseException:
                pass

    cdef _unmap(self):
        if self.base != NULL:
            munmap(self.base, <size_t>self.file_size)
            self.base = NULL
        self._close_fd()
        self._give_back_buffer()

    cdef _give_back_buffer(self):
        if self._pool is not None:
            self.write_buffer = NULL
            pool, buf = self._pool, self._pool_buffer
            self._pool = None
            self._pool_buffer = None
            pool.return_buffer(buf)

    def _check_open(self):
        if self._closed:
            raise StoreClosedError(f"{self.file_name} is closed")

    # -- positions ----------------------------------------------------------------------------------------------

    @property
    def wrote_position(self):
        return rmq_atomic_load_i64(&self._wrote)

    @property
    def committed_position(self):
        return rmq_atomic_load_i64(&self._committed)

    @property
    def flushed_position(self):
        return rmq_atomic_load_i64(&self._flushed)

    @property
    def read_position(self):
        """Bytes readers may see: committed ones when a write buffer or ring is in use, else every appended
        byte."""
        return self.read_position_c()

    @property
    def store_timestamp(self):
        return self._store_timestamp

    @property
    def has_write_buffer(self):
        return self.write_buffer != NULL

    @property
    def closed(self):
        return self._closed

    def is_full(self):
        return rmq_atomic_load_i64(&self._wrote) == self.file_size

    def set_positions(self, int64_t position):
        """Set wrote, committed and flushed to ``position`` (used when loading and recovering files)."""
        if position < 0 or position > self.file_size:
            raise ValueError(f"position {position} outside [0, {self.file_size}] of {self.file_name}")
        # Written bytes are allocated; whatever lies past them (a file of another writer, a runway cut short by a
        # crash) is allocated again from there before anything is written to it.
        if self._runway:
            # (a runway is written with zeros: it must start exactly past the data, not at its page)
            rmq_atomic_store_i64(&self._allocated, position)
        elif self._allocated > position:
            rmq_atomic_store_i64(&self._allocated, position & ~(<int64_t>RMQ_OS_PAGE_SIZE - 1))
        rmq_atomic_store_i64(&self._wrote, position)
        rmq_atomic_store_i64(&self._committed, position)
        rmq_atomic_store_i64(&self._flushed, position)
        self._direct_end = 0
        self._stretch_ns = rmq_now_ns()       # the writer's pace is measured from here
        self._stretch_wrote = position

    def set_store_timestamp(self, int64_t ts):
        self._store_timestamp = ts

    cdef int64_t readable_through(self, int64_t end):
        """The read position, after committing the write ring first when the bytes up to ``end`` were appended but
        are still in it (SYNC_FLUSH before their flush): a put's record is readable by its offset once the put
        returns, as RocketMQ's is. A failed commit leaves them unreadable."""
        cdef int64_t readable = self.read_position_c()
        if self._ring != NULL and readable < end <= rmq_atomic_load_i64(&self._wrote) and self.hold():
            try:
                if self.commit_ring_c() == 0:
                    readable = self.read_position_c()
            finally:
                self.release()
        return readable

    cdef int64_t read_position_c(self) noexcept nogil:
        if self.write_buffer != NULL or self._ring != NULL:
            return rmq_atomic_load_i64(&self._committed)
        return rmq_atomic_load_i64(&self._wrote)

    @property
    def allocated_position(self):
        """Bytes from the start known to be allocated on disk (the runway's end)."""
        return rmq_atomic_load_i64(&self._allocated)

    # -- the runway ---------------------------------------------------------------------------------------------

    cdef int extend_c(self, int64_t need, int64_t ahead) noexcept nogil:
        """Make sure [0, need) is allocated (and pre-faulted), then extend up to ``need + ahead``; 0 or an errno.

        With a runway the stretch is allocated, written with zeros (pwrite: the page cache fills by the write path
        at ~5 GB/s, where faulting fallocated pages in through the read path ran at 0.5 GB/s here) and then mapped
        (MADV_POPULATE_WRITE) or, for sync writes, synced. Zeros must never land on data: one extender at a time,
        and only past what is allocated by then, which never lies below the data (set_positions, truncate_to).

        The allocate thread asks for a whole runway ahead; a writer that outran it asks for nothing ahead (it
        makes one step past what it needs), and a new file's first stretch is one step (RUNWAY_STEP). A stretch
        is made a step at a time, each published at once and the lock let go in between (SYNC_FLUSH syncs its
        stretches whole: a step is a runway), so a writer that needs bytes the allocate thread is still preparing
        waits for one step, not for a whole runway. The first put of a store, which makes its first file, wrote
        and mapped a whole runway of zeros before it returned (32 MiB: 8-13 ms, 22-35 ms under SYNC_FLUSH)."""
        cdef int64_t have = rmq_atomic_load_i64(&self._allocated)
        cdef int64_t end, step, stop
        cdef int err = 0
        cdef bint first = True, mapped = False, zeros = True
        if need > 0 and need + ahead <= have:
            return 0
        if self.base == NULL or self.read_only:
            return EBADF
        if self._runway > 0:
            step = self._runway if self._sync_writes or self._runway < RUNWAY_STEP else RUNWAY_STEP
            # need 0: a new file's first stretch, one step (even under SYNC_FLUSH: the first put waits for it)
            end = need + ahead if need > 0 else (RUNWAY_STEP if self._runway > RUNWAY_STEP else self._runway)
            if end > self.file_size:
                end = self.file_size
            while err == 0:
                pthread_mutex_lock(&self._extend_mu)
                have = rmq_atomic_load_i64(&self._allocated)
                if have >= end:
                    pthread_mutex_unlock(&self._extend_mu)
                    break
                if first:
                    # Which kind of appends came since the last stretch, and how fast, decide how this one is made
                    # (see _extend_step); its steps are all made alike.
                    mapped = self._ring == NULL and (
                        self._pwrite_min < 0 or self._sync_writes
                        or rmq_atomic_load_i64(&self._copied) > rmq_atomic_load_i64(&self._pwritten))
                    self._runway_mapped = mapped
                    rmq_atomic_store_i64(&self._copied, 0)
                    rmq_atomic_store_i64(&self._pwritten, 0)
                    zeros = self._zeros_ahead(end)
                    first = False
                # A writer's step (nothing ahead asked) goes a whole step past what it needs.
                stop = have + step
                if (need <= 0 or ahead > 0) and stop > end:
                    stop = end
                if stop > self.file_size:
                    stop = self.file_size
                err = self._extend_step(have, stop, mapped, zeros)
                pthread_mutex_unlock(&self._extend_mu)
            return err
        end = need + 4 * 1024 * 1024
        if end > self.file_size:
            end = self.file_size
        # A file allocated whole when made (no runway): nothing to write, fault the pages in.
        err = rmq_runway_extend(self.fd, self.base, self.file_size, have, end, self._populate)
        if err != 0:
            return err
        while have < end and not rmq_atomic_cas_i64(&self._allocated, &have, end):
            pass
        return 0

    cdef bint _zeros_ahead(self, int64_t end) noexcept nogil:
        # Whether a stretch up to ``end`` is written with zeros (under _extend_mu). SYNC_FLUSH: always (extent
        # conversions, rmq_runway_write_zeros). Else only ahead of a writer expected there within
        # _zero_horizon_ns at its pace since the last verdict: zeros are dirty pages, and those a slow writer
        # leaves for longer than the kernel's dirty expiry (30 s) would reach the disk before its data, which is
        # to write to disk what is not data. A slow writer gains nothing from them; its copies fault pages in.
        # Until the writer went ZERO_EVIDENCE bytes or the horizon passed, the last verdict stands (a new file:
        # the file before's, zeros_expected; a store's first file: none).
        cdef int64_t now = rmq_now_ns()
        cdef int64_t wrote = rmq_atomic_load_i64(&self._wrote)
        cdef int64_t since = now - self._stretch_ns, went = wrote - self._stretch_wrote
        if self._sync_writes:
            self._runway_zeroed = True
        elif went >= ZERO_EVIDENCE or since >= _zero_horizon_ns:
            # (end - wrote) / (went / since) < horizon, without dividing
            self._runway_zeroed = went > 0 and (
                <double>(end - wrote) * <double>since < <double>_zero_horizon_ns * <double>went)
            self._stretch_ns = now
            self._stretch_wrote = wrote
        return self._runway_zeroed

    cdef int _extend_step(self, int64_t have, int64_t end, bint mapped, bint zeros) noexcept nogil:
        # One step of a runway, [have, end), under _extend_mu; publishes end. ``mapped``: for copies into the
        # mapping, ``zeros``: written with zeros ahead of the writer (extend_c decides both).
        cdef int err = rmq_runway_extend(self.fd, self.base, self.file_size, have, end, 0)
        cdef int64_t page
        # The zeros go ahead of every kind of append: they bring the stretch's pages into the page cache on
        # this thread, and the data's own copy then lands in pages that are there (9 GB/s in a pwrite loop
        # here, against 1.1-7 GB/s into new pages). A page's first use is the costly part of an append
        # where the guest's free memory went back to the host (free page reporting: each such page is a
        # host fault): 1 M put_batch messages (1.17 GB) took the producer 2.6-2.9 us of CPU a message
        # without the zeros and 1.5-2.0 with them (0.33-0.36 M -> 0.42-0.51 M msgs/s until dispatched;
        # alike at 0.5 M). Appends by pwrite (not SYNC) leave the stretch unmapped: pages mapped writable
        # cost an IPI each at writeback (``pwrite_min``). Appends copied into the mapping (one message a
        # put) want it mapped too, or each page faults through the read path. Which kind came since the
        # last stretch decides (a new file: what the file before it ended with). A ring's commits are
        # pwrites too; SYNC_FLUSH also syncs the zeros (see rmq_runway_write_zeros) and maps nothing.
        if err == 0 and zeros:
            err = rmq_runway_write_zeros(self.fd, self.base, self.file_size, have, end, self._sync_writes)
        # From the next page: the page holding ``have`` may hold data (and rmq_prefault_write's fallback for old
        # kernels writes a byte per page).
        page = (have + RMQ_OS_PAGE_SIZE - 1) & ~(<int64_t>RMQ_OS_PAGE_SIZE - 1)
        if err == 0 and mapped and zeros and self._populate and end > page:
            err = rmq_prefault_write(self.base + page, <size_t>(end - page))
        if err == 0:
            rmq_atomic_store_i64(&self._allocated, end)
        return err

    def prepare_runway(self):
        """The allocate thread's step: when the write position is within half a runway of the allocated end, extend
        the runway (GIL released). Returns True once the runway reaches the end of the file."""
        cdef int err = 0
        cdef int64_t wrote, have
        if self.read_only or not self.hold():
            return True
        try:
            wrote = rmq_atomic_load_i64(&self._wrote)
            have = rmq_atomic_load_i64(&self._allocated)
            if self._runway and wrote + self._runway // 2 >= have:
                # A runway past the write position, made in steps (extend_c); under SYNC_FLUSH a whole runway past
                # the allocated end, in one synced stretch (half as many syncs of zeros, which the group commit's
                # syncs queue behind: 16 blocking producers lost 15-20 % with 4 MiB synced steps).
                with nogil:
                    err = self.extend_c((have if self._sync_writes else wrote) + 1, self._runway)
                if err != 0:
                    _raise_os(err, "allocate", self.file_name)
            return rmq_atomic_load_i64(&self._allocated) >= self.file_size
        finally:
            self.release()

    @property
    def runway_zeroed(self):
        """Whether the last stretch of runway was written with zeros ahead of the writer (always under SYNC_FLUSH;
        otherwise when the writer was expected at its end within 10 s at its pace): what a next file's first
        stretch gets (``zeros_expected``)."""
        return self._runway_zeroed

    @property
    def runway_mapped(self):
        """Whether the last stretch of runway was written and mapped for appends copied into the mapping (else
        left to pwrite): what a next file's first stretch is made for (``copies_expected``)."""
        return self._runway_mapped

    def set_allocator(self, WakeEvent runway):
        """Poke ``runway`` (the allocate thread's event) whenever appends come within half a runway of its end."""
        self._poke_owner = runway
        self._poke = &runway.ev if runway is not None else NULL

    # -- appending (the caller serialises appends: CommitLog's put lock, one dispatcher per consume queue) -------

    cdef int write_c(self, int64_t pos, const unsigned char *src, int64_t n, bint size_last) noexcept nogil:
        """Put ``n`` bytes at ``pos`` (at or past the wrote position; ``advance`` publishes them): into the write
        buffer when there is one, else into the mapping, with ``size_last`` its first 4 bytes last (commitlog
        records: rmq_copy_size_last). Returns 0 or an errno: EROFS (mapped read-only), EBADF (closed) or ENOSPC
        (past the end of the file)."""
        if self.read_only:
            return EROFS
        if self.base == NULL:
            return EBADF
        if pos < 0 or n < 0 or pos + n > self.file_size:
            return ENOSPC
        cdef int err
        if pos + n > rmq_atomic_load_i64(&self._allocated):
            # The allocate thread fell behind (or there is none): allocate here, or fail with ENOSPC, never SIGBUS.
            err = self.extend_c(pos + n, 0)
            if err != 0:
                return err
        if self.write_buffer != NULL:
            memcpy(self.write_buffer + pos, src, <size_t>n)
        elif self._ring != NULL:
            return self._ring_write(pos, src, n, size_last)
        elif (0 <= self._pwrite_min <= n
              or (self._sync_writes and pos < ((rmq_atomic_load_i64(&self._flushed) + RMQ_OS_PAGE_SIZE - 1)
                                               & ~(<int64_t>RMQ_OS_PAGE_SIZE - 1)))):
            # Large appends (``pwrite_min``), and SYNC_FLUSH appends into a page just msync'ed, which the kernel
            # write-protected: a store through the mapping would take a fault (ext4's page_mkwrite) on the put path
            # of every blocking SYNC_FLUSH put; pwrite does not.
            # The first record's size goes last, in a second pwrite, unless the write lies within one page: a
            # record's __CRC32# (if any) is not enough, since a tear that leaves its properties' tail as zeros
            # leaves no CRC to check, and the body CRC does not cover the properties.
            rmq_atomic_store_i64(&self._pwritten, rmq_atomic_load_i64(&self._pwritten) + n)
            return rmq_pwrite_size_last(self.fd, src, <size_t>n, pos, size_last)
        elif size_last:
            rmq_copy_size_last(self.base + pos, src, <size_t>n)
        else:
            memcpy(self.base + pos, src, <size_t>n)
        rmq_atomic_store_i64(&self._copied, rmq_atomic_load_i64(&self._copied) + n)
        rmq_atomic_store_i64(&self._mapped_dirty, 1)
        return 0

    cdef int _ring_write(self, int64_t pos, const unsigned char *src, int64_t n, bint size_last) noexcept nogil:
        # write_c into the ring. An append of more than a quarter of it (a large batch) goes into the file at once
        # instead, after what waits before it; the commit that finds it published skips it (_direct_end).
        cdef int64_t size = self._ring_mask + 1
        cdef int err
        if n > size // 4:
            pthread_mutex_lock(&self._commit_mu)
            err = self._commit_ring_locked()
            if err == 0:
                self._direct_end = pos + n
            pthread_mutex_unlock(&self._commit_mu)
            if err == 0:
                err = rmq_pwrite_size_last(self.fd, src, <size_t>n, pos, size_last)
                if err != 0:
                    pthread_mutex_lock(&self._commit_mu)
                    self._direct_end = 0
                    pthread_mutex_unlock(&self._commit_mu)
            return err
        if pos + n - rmq_atomic_load_i64(&self._committed) > size:
            # The flushes fell a ring behind: commit here rather than overwrite what they have not taken yet.
            err = self.commit_ring_c()
            if err != 0:
                return err
        rmq_ring_copy_in(self._ring, self._ring_mask, self.file_from_offset + pos, src, n)
        return 0

    cdef int _commit_ring_locked(self) noexcept nogil:
        cdef int64_t c = rmq_atomic_load_i64(&self._committed)
        cdef int64_t w = rmq_atomic_load_i64(&self._wrote)
        cdef int err
        if c < self._direct_end <= w:
            c = self._direct_end
            rmq_atomic_store_i64(&self._committed, c)
        if c >= w:
            return 0
        err = rmq_ring_commit(self.fd, self._ring, self._ring_mask, self.file_from_offset, c, w)
        if err == 0:
            rmq_atomic_store_i64(&self._committed, w)
        return err

    cdef int commit_ring_c(self) noexcept nogil:
        """Commit the ring's bytes of this file into it (pwrite); 0 or an errno. The caller holds a reference."""
        cdef int err
        if self._ring == NULL or self.fd < 0:
            return 0
        pthread_mutex_lock(&self._commit_mu)
        err = self._commit_ring_locked()
        pthread_mutex_unlock(&self._commit_mu)
        return err

    cdef void advance(self, int64_t n, int64_t store_timestamp) noexcept nogil:
        cdef int64_t wrote = rmq_atomic_load_i64(&self._wrote) + n
        if store_timestamp > 0:
            self._store_timestamp = store_timestamp
        rmq_atomic_store_i64(&self._wrote, wrote)
        if self._poke != NULL and wrote + self._runway // 2 >= rmq_atomic_load_i64(&self._allocated) \
                and rmq_atomic_load_i64(&self._allocated) < self.file_size:
            rmq_event_poke(self._poke)

    def append(self, data):
        """Append raw bytes (consume-queue units, blank fill); returns False when they do not fit."""
        cdef const unsigned char[::1] src = data
        cdef Py_ssize_t n = src.shape[0]
        cdef int64_t pos
        cdef int err
        self._check_open()
        if self.read_only:
            raise PermissionError(f"{self.file_name} is mapped read-only")
        pos = rmq_atomic_load_i64(&self._wrote)
        if pos + n > self.file_size:
            return False
        if n:
            err = self.write_c(pos, &src[0], n, False)
            if err != 0:
                _raise_os(err, "write", self.file_name)
        self.advance(n, 0)
        return True

    def write_at(self, int64_t position, data):
        """Overwrite bytes at ``position`` below the wrote position (consume-queue repair on recovery)."""
        cdef const unsigned char[::1] src = data
        cdef Py_ssize_t n = src.shape[0]
        self._check_open()
        if self.read_only:
            raise PermissionError(f"{self.file_name} is mapped read-only")
        if position < 0 or position + n > self.file_size:
            raise ValueError(f"write of {n} bytes at {position} outside {self.file_name}")
        cdef int err = 0
        if n and self._pwrite_min >= 0:
            with nogil:
                err = rmq_pwrite_size_last(self.fd, &src[0], <size_t>n, position, 0)
            if err != 0:
                _raise_os(err, "write", self.file_name)
        elif n:
            memcpy(self.base + position, &src[0], n)
            rmq_atomic_store_i64(&self._mapped_dirty, 1)

    # -- commit and flush ---------------------------------------------------------------------------------------

    def commit(self, int commit_least_pages=0):
        """Copy appended bytes from the write buffer into the file; returns the committed position.

        RocketMQ's isAbleToCommit rule: a full file always commits; otherwise at least ``commit_least_pages``
        whole pages must be waiting (0: any byte). A full, committed file gives its buffer back to the pool.
        """
        cdef int64_t wrote, committed
        cdef int err = 0
        if self.write_buffer == NULL and self._ring == NULL:
            return rmq_atomic_load_i64(&self._wrote)
        if self._ring != NULL:
            if self.read_only or not self.hold():
                return rmq_atomic_load_i64(&self._committed)
            try:
                with nogil:
                    err = self.commit_ring_c()
                if err != 0:
                    _raise_os(err, "commit", self.file_name)
                return rmq_atomic_load_i64(&self._committed)
            finally:
                self.release()
        if not self.hold():
            return rmq_atomic_load_i64(&self._committed)
        try:
            wrote = rmq_atomic_load_i64(&self._wrote)
            committed = rmq_atomic_load_i64(&self._committed)
            if _able(wrote, committed, self.file_size, commit_least_pages):
                # Only commitlog files have write buffers: the range starts with a record, whose size goes last
                with nogil:
                    err = self.extend_c(wrote, 0) if wrote > rmq_atomic_load_i64(&self._allocated) else 0
                    if err == 0 and self._pwrite_min >= 0:
                        # RocketMQ's commit is a FileChannel.write too: no page of the file is mapped writable.
                        err = rmq_pwrite_size_last(self.fd, self.write_buffer + committed, <size_t>(wrote - committed),
                                                   committed, 1)
                    elif err == 0:
                        rmq_copy_size_last(self.base + committed, self.write_buffer + committed,
                                           <size_t>(wrote - committed))
                        rmq_atomic_store_i64(&self._mapped_dirty, 1)
                if err != 0:
                    _raise_os(err, "commit", self.file_name)
                rmq_atomic_store_i64(&self._committed, wrote)
            if rmq_atomic_load_i64(&self._committed) == self.file_size:
                self._give_back_buffer()
            return rmq_atomic_load_i64(&self._committed)
        finally:
            self.release()

    cdef int flush_c(self, int flush_least_pages) noexcept nogil:
        """msync [flushed, read position) when RocketMQ's isAbleToFlush allows; 0 or errno. The caller holds a
        reference. The flushed position only moves forward, whichever of two flushers finishes last. With a ring,
        what waits in it is committed first."""
        cdef bint mapped_dirty
        cdef int64_t value, flushed
        cdef int err
        if self._ring != NULL:
            err = self.commit_ring_c()
            if err != 0:
                return err
        mapped_dirty = rmq_atomic_load_i64(&self._mapped_dirty) != 0
        if mapped_dirty:
            rmq_atomic_store_i64(&self._mapped_dirty, 0)
        value = self.read_position_c()
        flushed = rmq_atomic_load_i64(&self._flushed)
        if not _able(value, flushed, self.file_size, flush_least_pages):
            if mapped_dirty:
                rmq_atomic_store_i64(&self._mapped_dirty, 1)
            return 0
        if mapped_dirty:
            # Pages below the read position's are final (appends go past it): unmapped first, they cost writeback
            # one TLB shootdown for all instead of one each (rmq_unmap_written). A copy after the flag was read
            # sets it again for the next flush.
            rmq_unmap_written(self.base, flushed, value)
        err = rmq_msync_range(self.base, flushed, value)
        if err != 0:
            return err
        while flushed < value and not rmq_atomic_cas_i64(&self._flushed, &flushed, value):
            pass
        return 0

    def flush(self, int flush_least_pages=0):
        """msync the dirty range; returns the flushed position. Same least-pages rule as commit."""
        cdef int err = 0
        if self.read_only or not self.hold():
            return rmq_atomic_load_i64(&self._flushed)
        try:
            with nogil:
                err = self.flush_c(flush_least_pages)
            if err != 0:
                _raise_os(err, "msync", self.file_name)
            return rmq_atomic_load_i64(&self._flushed)
        finally:
            self.release()

    def warm_up(self, bint flush=False):
        """Pre-fault the pages past the wrote position (RocketMQ's warmMappedFile), with the GIL released.

        Done by the allocate service on the next file before the writer reaches it, so puts never page-fault.
        ``flush`` also writes the zeroed pages to disk, as RocketMQ's warm-up does under SYNC_FLUSH: the file's
        blocks are then allocated and written, so a later sync flush writes only data and no extent metadata.
        """
        cdef int64_t start
        cdef int err = 0
        if self.read_only or not self.hold():
            return
        try:
            start = rmq_atomic_load_i64(&self._wrote)
            start = (start + RMQ_OS_PAGE_SIZE - 1) & ~(<int64_t>RMQ_OS_PAGE_SIZE - 1)
            if start < self.file_size:
                with nogil:
                    err = rmq_prefault_write(self.base + start, <size_t>(self.file_size - start))
                    if err == 0 and flush:
                        err = rmq_msync_range(self.base, start, self.file_size)
                if err != 0:
                    _raise_os(err, "warm up", self.file_name)
        finally:
            self.release()

    # -- reading ------------------------------------------------------------------------------------------------

    def __getbuffer__(self, Py_buffer *buffer, int flags):
        if flags & PyBUF_WRITABLE:
            raise BufferError("mapped files are exported read-only")
        if not self.hold():
            raise StoreClosedError(f"{self.file_name} is closed")
        PyBuffer_FillInfo(buffer, self, self.base, self.file_size, 1, flags)

    def __releasebuffer__(self, Py_buffer *buffer):
        self.release()

    def select(self, int64_t pos, int64_t size=-1):
        """Zero-copy memoryview of ``size`` bytes at ``pos`` (to the read position when size < 0), or None when
        the range is not readable (yet). The view keeps the mapping alive while it exists."""
        cdef int64_t readable = self.readable_through(pos + size) if size >= 0 else self.read_position_c()
        if self._closed or pos < 0 or pos > readable:
            return None
        if size < 0:
            size = readable - pos
        if pos + size > readable:
            return None
        return memoryview(self)[pos:pos + size]

    def view(self):
        """Zero-copy read-only memoryview of the whole file (including bytes past the read position)."""
        self._check_open()
        return memoryview(self)

    # -- lifecycle ----------------------------------------------------------------------------------------------

    def truncate_to(self, int64_t position):
        """Drop everything after ``position``: zero the tail (as RocketMQ's truncateDirtyFiles leaves a file to be
        rewritten) and set the positions there."""
        self._check_open()
        if position < 0 or position > self.file_size:
            raise ValueError(f"position {position} outside [0, {self.file_size}] of {self.file_name}")
        cdef int64_t page_end
        if not self.read_only and position < self.file_size:
            # Zero the rest of the page by hand and hand the pages after it back to the file system: a sparse tail
            # reads as zeros without being faulted in (memset of a 1 GiB tail would allocate and dirty all of it).
            page_end = (position + RMQ_OS_PAGE_SIZE - 1) & ~(<int64_t>RMQ_OS_PAGE_SIZE - 1)
            if page_end > self.file_size:
                page_end = self.file_size
            memset(self.base + position, 0, <size_t>(page_end - position))
            if rmq_runway_discard(self.fd, self.file_size, position) != 0:
                memset(self.base + page_end, 0, <size_t>(self.file_size - page_end))
            if rmq_atomic_load_i64(&self._allocated) > page_end:
                rmq_atomic_store_i64(&self._allocated, page_end & ~(<int64_t>RMQ_OS_PAGE_SIZE - 1))
            if self.write_buffer != NULL:
                memset(self.write_buffer + position, 0, <size_t>(self.file_size - position))
        self.set_positions(position)

    def close(self):
        """Unmap and close once no reader holds a view; idempotent. The runway past the written bytes goes back to
        the file system (its zeros are never written to disk)."""
        cdef int64_t keep
        if self._closed:
            return
        if self._ring != NULL and self.base != NULL:
            # Best effort: what still waits in the ring was never acknowledged (a SYNC put is once a flush, which
            # commits first, covers it); a commit failing here failed the store's last flush already.
            with nogil:
                self.commit_ring_c()
        if self._runway and not self.read_only and self.fd >= 0 and self.write_buffer == NULL:
            keep = rmq_atomic_load_i64(&self._wrote)
            if keep < self.file_size and rmq_atomic_load_i64(&self._allocated) > keep:
                rmq_runway_discard(self.fd, self.file_size, keep)
        self._closed = True
        if self._holds == 0:
            self._unmap()

    def destroy(self):
        """Close and delete the file from disk."""
        self.close()
        try:
            os.unlink(self.file_name)
        except FileNotFoundError:
            pass

    def __repr__(self):
        return (f"MappedFile({self.file_name!r}, size={self.file_size}, wrote={self.wrote_position}, "
                f"committed={self.committed_position}, flushed={self.flushed_position})")


cdef inline bint _able(int64_t value, int64_t done, int64_t file_size, int least_pages) noexcept nogil:
    # RocketMQ's isAbleToFlush / isAbleToCommit.
    if done >= value:
        return False
    if value == file_size:
        return True
    if least_pages > 0:
        return (value // RMQ_OS_PAGE_SIZE) - (done // RMQ_OS_PAGE_SIZE) >= least_pages
    return True


cdef extern from "<sys/mman.h>" nogil:
    int mlock(const void *addr, size_t length)


def lock_memory(buffer):
    """mlock a writable buffer (TransientStorePool); returns "" or the OS's reason for refusing."""
    cdef unsigned char[::1] view = buffer
    if view.shape[0] == 0:
        return ""
    if mlock(&view[0], <size_t>view.shape[0]) != 0:
        return os.strerror(errno)
    return ""


cdef class WakeEvent:
    """An event poked from C without the GIL and waited on with the GIL released. The allocate thread's
    (AllocateMappedFileService: appends poke it when they come within half a runway of a file's allocated end) and
    the dispatcher's (ReputMessageService: the writer pokes it after appending while the dispatcher idles)."""

    def __cinit__(self):
        cdef int err = rmq_event_init(&self.ev)
        if err != 0:
            raise OSError(err, f"wake event: {os.strerror(err)}")

    def __dealloc__(self):
        rmq_event_destroy(&self.ev)

    def wait(self, double timeout):
        """Block (GIL released) until poked, stopped or ``timeout`` s: 1 poked, 0 timed out, -1 stopped."""
        cdef int rc
        cdef int64_t ns = <int64_t>(timeout * 1e9) if timeout > 0 else 0
        with nogil:
            rc = rmq_event_wait(&self.ev, ns)
        return rc

    def poke(self):
        rmq_event_poke(&self.ev)

    def stop(self):
        rmq_event_stop(&self.ev)
