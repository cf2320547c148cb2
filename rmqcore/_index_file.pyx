# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""IndexFile: RocketMQ's message-key index (``store/index/IndexFile.java``), byte for byte, on a posix mmap.

Layout (big-endian): a 40-byte header (beginTimestamp@0, endTimestamp@8, beginPhyOffset@16, endPhyOffset@24,
hashSlotCount@32, indexCount@36), ``hash_slot_num`` slots of 4 bytes (the newest item index of the slot, 0 = empty),
then ``index_num`` items of 20 bytes (keyHash 4, phyOffset 8, timeDiff 4 in seconds since beginTimestamp,
prevIndex 4 = the slot's previous head). Item 0 is never used: indexCount starts at 1.

``put_hash`` (IndexFile.putKey) and ``select_hash_c`` (IndexFile.selectPhyOffset) run without the GIL. Every GIL-free
section holds a reference (``hold``/``release``, RocketMQ's ReferenceResource) so ``close``/``destroy`` from another
thread unmaps only at the last release. One writer at a time, as RocketMQ (the reput thread); readers may run
concurrently with it: every index read from the file is checked against ``index_num`` before it is dereferenced,
so neither a torn read nor a hostile file can make a walk leave the mapping.
"""
import os

from rmqcore._mapped_file import fsync_dir

from cpython.object cimport PyObject
from libc.errno cimport EEXIST, errno
from libc.stdint cimport INT32_MAX, INT32_MIN, int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy
from posix.fcntl cimport O_CREAT, O_EXCL, O_RDONLY, O_RDWR, O_TRUNC, open as c_open
from posix.mman cimport MAP_FAILED, MAP_SHARED, PROT_READ, PROT_WRITE, mmap, munmap, msync, MS_SYNC
from posix.stat cimport fstat, struct_stat
from posix.types cimport off_t
from posix.unistd cimport close as c_close, ftruncate

cdef extern from *:
    void __builtin_prefetch(const void *addr, int rw) nogil

cdef enum:
    PREFETCH_AHEAD = 8      # keys ahead whose slot put_hashes prefetches

from rmqcore._c cimport (rmq_java_hash_utf8, rmq_load_be32, rmq_load_be64, rmq_runway_discard, rmq_runway_extend,
                         rmq_store_be32, rmq_store_be64)

from rmqcore.errors import StoreClosedError, StoreLayoutError

cdef extern from "<fcntl.h>" nogil:
    int posix_fallocate(int fd, off_t offset, off_t length)
    int O_CLOEXEC

cdef extern from *:
    """
    /* Items are written before the slot that publishes them: keep the compiler (and weakly ordered CPUs) from
     * sinking the item stores below the slot store, so a concurrent reader that sees the slot sees the item. */
    static inline void rmq_index_release_fence(void) { __atomic_thread_fence(__ATOMIC_RELEASE); }
    static inline void rmq_index_acquire_fence(void) { __atomic_thread_fence(__ATOMIC_ACQUIRE); }
    """
    void rmq_index_release_fence() noexcept nogil
    void rmq_index_acquire_fence() noexcept nogil

INDEX_HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
INDEX_SIZE = 20
INVALID_INDEX = 0
DEFAULT_HASH_SLOT_NUM = 5_000_000
DEFAULT_INDEX_NUM = 5_000_000 * 4

cdef enum:
    _HEADER = 40
    _SLOT = 4
    _ITEM = 20


def index_file_size(int64_t hash_slot_num, int64_t index_num):
    """Bytes of an index file: 40 + hash_slot_num * 4 + index_num * 20 (420,000,040 with RocketMQ's defaults)."""
    return _HEADER + hash_slot_num * _SLOT + index_num * _ITEM


cdef int32_t _java_hash_utf16(str s):
    # Java's String.hashCode over UTF-16 code units, for strings UTF-8 cannot carry (lone surrogates).
    cdef uint32_t h = 0
    cdef Py_UCS4 c
    for c in s:
        if c >= 0x10000:
            h = h * 31 + <uint32_t>(0xD800 + ((c - 0x10000) >> 10))
            h = h * 31 + <uint32_t>(0xDC00 + ((c - 0x10000) & 0x3FF))
        else:
            h = h * 31 + <uint32_t>c
    return <int32_t>h


cdef inline int32_t _key_hash(str key) except? -1:
    # IndexFile.indexKeyHashMethod: abs(key.hashCode()), 0 when abs overflows (hashCode == Integer.MIN_VALUE).
    cdef int32_t h
    cdef bytes raw
    try:
        raw = key.encode("utf-8")
    except UnicodeEncodeError:
        h = _java_hash_utf16(key)
    else:
        h = rmq_java_hash_utf8(<const unsigned char *>raw, <size_t>len(raw))
    if h == INT32_MIN:
        return 0
    return -h if h < 0 else h


def index_key_hash(str key):
    """IndexFile.indexKeyHashMethod(key): abs of Java's String.hashCode, 0 when that overflows."""
    return _key_hash(key)


cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL


cdef int32_t topic_key_hash(const char *topic, Py_ssize_t tn, const char *key, Py_ssize_t kn) except -1:
    """indexKeyHashMethod(IndexService.buildKey(topic, key)) over the UTF-8 of ``topic`` and ``key``, without
    building the Python string ``topic#key``."""
    cdef unsigned char stack[512]
    cdef unsigned char *buf = stack
    cdef int32_t h
    if tn + 1 + kn > 512:
        buf = <unsigned char *>malloc(<size_t>(tn + 1 + kn))
        if buf == NULL:
            raise MemoryError()
    memcpy(buf, topic, <size_t>tn)
    buf[tn] = 35     # '#': IndexService.buildKey
    memcpy(buf + tn + 1, key, <size_t>kn)
    h = rmq_java_hash_utf8(buf, <size_t>(tn + 1 + kn))
    if buf != stack:
        free(buf)
    return 0 if h == INT32_MIN else (-h if h < 0 else h)


cdef int64_t items_in(list files) except -1:
    """Items the index files hold (min(indexCount, index_num) each): no query can return more offsets."""
    cdef IndexFile f
    cdef int64_t n = 0
    for f in files:
        n += f._index_count if f._index_count < f.index_num else f.index_num
    return n


cdef enum:
    WALKS_ON_STACK = 8


cdef int32_t query_files_c(list files, int32_t key_hash, int32_t max_num, int64_t begin, int64_t end,
                           int64_t *out) except -1:
    """IndexService.queryOffset over ``files`` (the service's list, oldest first; the GIL is held, so the list
    cannot change under the call): at most ``max_num`` commitlog offsets into ``out``, newest file first; a file is
    searched when its time span meets [begin, end], and none older than the first file that began before ``begin``.
    Returns how many.

    Java walks one file after the other, each chain a run of dependent cache misses. Here the chains of all the
    files to search are walked in lockstep, one item of each per turn, so their misses overlap: a store of many
    index files costs about its longest chain, not the sum. Each file's walk is its selectPhyOffset for max_num (or
    for all its items, when fewer) into a room of its own; the answer is their concatenation, newest file first, cut
    at max_num (what the file-by-file walk, asking each file for the room left, returns). Walks stop once the files before them have
    filled max_num. The GIL is kept: a query is a few cache misses, less than a GIL hand-off."""
    cdef Py_ssize_t i, nfiles, nwalks = 0, k, first_open
    cdef IndexFile f
    cdef IndexWalk walks_stack[WALKS_ON_STACK]
    cdef int64_t found_stack[WALKS_ON_STACK * 64]
    cdef PyObject *picked_stack[WALKS_ON_STACK]
    cdef int32_t rooms_stack[WALKS_ON_STACK]
    cdef IndexWalk *walks = walks_stack
    cdef int64_t *found = found_stack
    cdef PyObject **picked = picked_stack     # borrowed from ``files``: no Python code runs until the return
    cdef int32_t *rooms = rooms_stack
    cdef int32_t n = 0, take, count
    cdef int64_t filled = 0, total = 0
    cdef bint active
    if files is None:
        raise TypeError("files must be a list of IndexFile, not None")
    if max_num <= 0 or key_hash < 0:
        return 0
    nfiles = len(files)
    if nfiles > WALKS_ON_STACK:
        walks = <IndexWalk *>malloc(<size_t>nfiles * sizeof(IndexWalk))
        picked = <PyObject **>malloc(<size_t>nfiles * sizeof(PyObject *))
        rooms = <int32_t *>malloc(<size_t>nfiles * sizeof(int32_t))
        if walks == NULL or picked == NULL or rooms == NULL:
            free(walks)
            free(picked)
            free(rooms)
            raise MemoryError()
    try:
        # The files to search, newest first, held: the file-by-file walk's choice (it stops at a file that began
        # before ``begin``, searched or not; a file closed meanwhile has nothing to read). Their slots are fetched
        # at once. A file yields at most min(indexCount, index_num) hits: its room in ``found``.
        for i in range(nfiles - 1, -1, -1):
            f = <IndexFile>files[i]
            if ((begin < f._begin_timestamp and end > f._end_timestamp)
                    or (f._begin_timestamp <= begin <= f._end_timestamp)
                    or (f._begin_timestamp <= end <= f._end_timestamp)) and f.hold():
                __builtin_prefetch(f.base + _HEADER + <int64_t>(key_hash % f.hash_slot_num) * _SLOT, 0)
                picked[nwalks] = <PyObject *>f
                count = f._index_count if f._index_count < f.index_num else f.index_num
                rooms[nwalks] = max_num if max_num < count else (count if count > 0 else 1)
                total += rooms[nwalks]
                nwalks += 1
            if f._begin_timestamp < begin:
                break
        if nwalks == 1:
            return (<IndexFile>picked[0]).select_hash_c(key_hash, max_num, begin, end, out)
        if total > WALKS_ON_STACK * 64:
            found = <int64_t *>malloc(<size_t>total * sizeof(int64_t))
            if found == NULL:
                raise MemoryError()
        total = 0
        for k in range(nwalks):
            _walk_start(<IndexFile>picked[k], &walks[k], key_hash, rooms[k], begin, end, found + total)
            total += rooms[k]
        first_open = 0
        while True:
            active = False
            for k in range(first_open, nwalks):
                if not walks[k].done:
                    _walk_step(&walks[k])
                    if not walks[k].done:
                        active = True
            # The newest files whose walks ended: once they hold max_num, older files cannot add to the answer.
            while first_open < nwalks and walks[first_open].done:
                filled += walks[first_open].n
                first_open += 1
            if not active or filled >= max_num:
                break
        for k in range(nwalks):
            take = walks[k].n
            if take > max_num - n:
                take = max_num - n
            memcpy(out + n, walks[k].out, <size_t>take * sizeof(int64_t))
            n += take
            if n >= max_num:
                break
        return n
    finally:
        for k in range(nwalks):
            (<IndexFile>picked[k]).release()
        if found != found_stack:
            free(found)
        if walks != walks_stack:
            free(walks)
            free(picked)
            free(rooms)


def query_files(list files not None, str topic not None, str key not None, int max_num, int64_t begin, int64_t end):
    """IndexService.queryOffset over ``files`` (oldest first, the service's list, read under its lock) for
    ``topic#key``: commitlog offsets newest file first, at most ``max_num``; a file is searched when its time span
    meets [begin, end] and the walk stops at a file that began before ``begin``. No Python string is built."""
    cdef Py_ssize_t tn, kn, i
    cdef const char *tu = PyUnicode_AsUTF8AndSize(topic, &tn)
    cdef const char *ku = PyUnicode_AsUTF8AndSize(key, &kn)
    cdef int64_t found[64]
    cdef int64_t *out = found
    cdef int32_t n
    cdef int64_t room = items_in(files)
    cdef list result = []
    if max_num <= 0:
        return result
    if max_num > room:               # no more hits than items: a huge max_num asks for no huge buffer
        max_num = <int>room if room > 0 else 1
    if max_num > 64:
        out = <int64_t *>malloc(<size_t>max_num * sizeof(int64_t))
        if out == NULL:
            raise MemoryError()
    try:
        n = query_files_c(files, topic_key_hash(tu, tn, ku, kn), max_num, begin, end, out)
        for i in range(n):
            result.append(out[i])
        return result
    finally:
        if out != found:
            free(out)


cdef inline int64_t _wrap_add(int64_t a, int64_t b) noexcept nogil:
    # Java long arithmetic wraps; C signed overflow is undefined: go through uint64.
    return <int64_t>(<uint64_t>a + <uint64_t>b)


cdef inline int64_t _wrap_sub(int64_t a, int64_t b) noexcept nogil:
    return <int64_t>(<uint64_t>a - <uint64_t>b)


# -- selectPhyOffset, one item at a time ---------------------------------------------------------------------------
# IndexFile.selectPhyOffset's chain walk as a start and a step, so one file's walk (select_hash_c) and the walks of
# several files in lockstep (query_files_c: their cache misses overlap) are the same code.

cdef void _walk_start(IndexFile f, IndexWalk *w, int32_t key_hash, int32_t max_num, int64_t begin, int64_t end,
                      int64_t *out) noexcept nogil:
    # Reads the slot (the caller holds ``f``); w.done when there is nothing to walk.
    cdef int32_t slot_value
    w.n = 0
    w.out = out
    w.done = True
    if f.base == NULL or key_hash < 0 or max_num <= 0:
        return
    w.count = f._index_count
    w.begin_ts = f._begin_timestamp
    w.index_num = f.index_num
    w.key_hash = key_hash
    w.max_num = max_num
    w.begin = begin
    w.end = end
    slot_value = <int32_t>rmq_load_be32(f.base + _HEADER + <int64_t>(key_hash % f.hash_slot_num) * _SLOT)
    if slot_value <= 0 or slot_value > w.count or w.count <= 1:
        return
    rmq_index_acquire_fence()
    w.items = f.base + _HEADER + <int64_t>f.hash_slot_num * _SLOT
    # A chain RocketMQ writes links each item to a strictly older one, so it visits fewer than index_count items;
    # the cap only ends cycles of a damaged file (Java would spin on those until maxNum matches).
    w.limit = w.count if w.count < w.index_num else w.index_num
    w.steps = 0
    w.next_index = slot_value
    w.done = False
    _walk_check(w)


cdef inline void _walk_check(IndexWalk *w) noexcept nogil:
    # The loop head of selectPhyOffset: maxNum reached, or an item past the file (Java's getInt throws
    # IndexOutOfBounds and the walk ends with what it has), or the cycle cap. Otherwise start loading the item.
    if w.n >= w.max_num or w.next_index >= w.index_num or w.steps >= w.limit:
        w.done = True
    else:
        __builtin_prefetch(w.items + <int64_t>w.next_index * _ITEM, 0)


cdef void _walk_step(IndexWalk *w) noexcept nogil:
    # One item of the chain (w.done is False): a match goes to w.out; then the previous item, or the end.
    cdef const unsigned char *item = w.items + <int64_t>w.next_index * _ITEM
    cdef int32_t key_hash_read, prev_index
    cdef int64_t phy_read, time_diff, time_read
    w.steps += 1
    key_hash_read = <int32_t>rmq_load_be32(item)
    phy_read = <int64_t>rmq_load_be64(item + 4)
    time_diff = <int32_t>rmq_load_be32(item + 12)
    prev_index = <int32_t>rmq_load_be32(item + 16)
    if time_diff < 0:
        w.done = True
        return
    time_read = _wrap_add(w.begin_ts, time_diff * 1000)
    if w.key_hash == key_hash_read and time_read >= w.begin and time_read <= w.end:
        w.out[w.n] = phy_read
        w.n += 1
    if prev_index <= 0 or prev_index > w.count or prev_index == w.next_index or time_read < w.begin:
        w.done = True
        return
    w.next_index = prev_index
    _walk_check(w)


cdef class IndexFile:
    """One index file. ``IndexFile(path, hash_slot_num, index_num, end_phy_offset, end_timestamp)`` creates it
    (pre-allocated with posix_fallocate, so a full disk fails here and not with SIGBUS on a later put) or opens it
    when it exists (its size must be exactly ``40 + hash_slot_num*4 + index_num*20``; the header is loaded, and
    ``end_phy_offset``/``end_timestamp`` are then ignored). ``read_only=True`` maps an existing file for reading.
    """

    def __cinit__(self, *args, **kwargs):
        self._fd = -1
        self.base = NULL
        self._closed = True
        self._holds = 0

    def __init__(self, path, int64_t hash_slot_num=DEFAULT_HASH_SLOT_NUM, int64_t index_num=DEFAULT_INDEX_NUM,
                 int64_t end_phy_offset=0, int64_t end_timestamp=0, *, bint read_only=False, int64_t runway=0, str tmp_path=None):
        cdef struct_stat st
        cdef int fd = -1
        cdef int err
        cdef int prot
        cdef bint created = False
        cdef int64_t size
        cdef void *p
        if self.base != NULL:
            raise RuntimeError("IndexFile.__init__ called twice")
        if hash_slot_num < 1 or hash_slot_num > INT32_MAX:
            raise ValueError(f"hash_slot_num must be in [1, {INT32_MAX}], got {hash_slot_num}")
        if index_num < 2 or index_num > INT32_MAX:
            raise ValueError(f"index_num must be in [2, {INT32_MAX}] (item 0 is never used), got {index_num}")
        size = index_file_size(hash_slot_num, index_num)
        if size > INT32_MAX:
            # RocketMQ sizes and addresses the file with Java ints (and one MappedByteBuffer): it could not open it.
            raise ValueError(f"index file of {size} bytes (40 + {hash_slot_num}*4 + {index_num}*20) exceeds "
                             f"{INT32_MAX}, the largest RocketMQ can map")
        name = os.fspath(path)
        if isinstance(name, bytes):
            name = os.fsdecode(name)
        self.file_name = name
        self.file_size = size
        self.hash_slot_num = <int32_t>hash_slot_num
        self.index_num = <int32_t>index_num
        self.read_only = read_only
        path_b = os.fsencode(name)
        # A new file is made and sized under ``tmp_path`` (outside the index directory) and renamed into place once
        # allocated: a kill mid-creation never leaves a file of the wrong length in the store.
        made = name

        if read_only:
            fd = c_open(path_b, O_RDONLY | O_CLOEXEC)
        elif tmp_path is not None and not os.path.exists(name):
            made = tmp_path
            fd = c_open(os.fsencode(made), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            created = fd >= 0
        else:
            fd = c_open(path_b, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
            if fd >= 0:
                created = True
            elif errno == EEXIST:
                fd = c_open(path_b, O_RDWR | O_CLOEXEC)
        if fd < 0:
            err = errno
            raise OSError(err, os.strerror(err), name)
        try:
            if created and runway > 0:
                # Sparse: header and slots (written at random) are allocated below, items as puts reach them.
                if ftruncate(fd, <off_t>size) != 0:
                    err = errno
                    raise OSError(err, f"ftruncate to {size} bytes: {os.strerror(err)}", name)
            elif created:
                err = posix_fallocate(fd, 0, <off_t>size)
                if err != 0:
                    raise OSError(err, f"posix_fallocate of {size} bytes: {os.strerror(err)}", name)
            else:
                if fstat(fd, &st) != 0:
                    err = errno
                    raise OSError(err, f"fstat: {os.strerror(err)}", name)
                if st.st_size != size:
                    raise StoreLayoutError(
                        f"{name}: index file has {st.st_size} bytes, expected {size} "
                        f"(40 + hash_slot_num {hash_slot_num} * 4 + index_num {index_num} * 20)")
            prot = PROT_READ if read_only else (PROT_READ | PROT_WRITE)
            p = mmap(NULL, <size_t>size, prot, MAP_SHARED, fd, 0)
            if p == MAP_FAILED:
                err = errno
                raise OSError(err, f"mmap of {size} bytes: {os.strerror(err)}", name)
            if runway > 0 and not read_only:
                # Allocate the header, the slots and the items written so far (a file of another writer may be
                # sparse anywhere: RocketMQ's are), so a put never writes into a hole (SIGBUS on a full disk):
                # ENOSPC here names what the file needs. The runway past them is best effort (issue 36: opening
                # must not need more space than it gives back): without room for it the puts extend it as they
                # come, and a full disk fails a put, not the open; a partly made runway is punched out again.
                self._allocated = _HEADER + hash_slot_num * _SLOT + (
                    0 if created else <int64_t>max(1, <int32_t>rmq_load_be32(<unsigned char *>p + 36)) * _ITEM)
                err = rmq_runway_extend(fd, <unsigned char *>p, size, 0, self._allocated, 0)
                if err != 0:
                    munmap(p, <size_t>size)
                    raise OSError(err, f"allocate {self._allocated} bytes (header, hash slots and items written): "
                                       f"{os.strerror(err)}", name)
                if rmq_runway_extend(fd, <unsigned char *>p, size, self._allocated, self._allocated + runway,
                                     0) == 0:
                    self._allocated = min(size, self._allocated + runway)
                else:
                    rmq_runway_discard(fd, size, self._allocated)
        except BaseException:
            c_close(fd)
            if created:
                try:
                    os.unlink(made)
                except OSError:
                    pass
            raise
        if runway > 0 and not read_only:
            self._fd = fd             # kept to extend the runway
            self._runway = runway
        else:
            c_close(fd)   # the mapping outlives the descriptor
            self._allocated = size
        self.base = <unsigned char *>p
        self._closed = False

        if created:
            # IndexFile's constructor: a new file continues where the previous one ended.
            self._begin_timestamp = 0
            self._end_timestamp = 0
            self._begin_phy_offset = 0
            self._end_phy_offset = 0
            self._hash_slot_count = 0
            self._index_count = 1
            if end_phy_offset > 0:
                self._begin_phy_offset = end_phy_offset
                self._end_phy_offset = end_phy_offset
            if end_timestamp > 0:
                self._begin_timestamp = end_timestamp
                self._end_timestamp = end_timestamp
            # RocketMQ leaves indexCount@36 at 0 until the first put or flush (load() reads <= 0 as 1); writing the
            # whole header now makes a fresh file read back the same either way.
            self._write_header()
            if made is not name:
                # Into place only now, header written: a reader (a live verify) never sees a file without one.
                try:
                    os.rename(made, name)
                    fsync_dir(os.path.dirname(name) or ".")
                except BaseException:
                    self.close()
                    os.unlink(made)
                    raise
        else:
            # IndexHeader.load
            self._begin_timestamp = <int64_t>rmq_load_be64(self.base)
            self._end_timestamp = <int64_t>rmq_load_be64(self.base + 8)
            self._begin_phy_offset = <int64_t>rmq_load_be64(self.base + 16)
            self._end_phy_offset = <int64_t>rmq_load_be64(self.base + 24)
            self._hash_slot_count = <int32_t>rmq_load_be32(self.base + 32)
            self._index_count = <int32_t>rmq_load_be32(self.base + 36)
            if self._index_count <= 0:
                self._index_count = 1

    def __dealloc__(self):
        if self.base != NULL:
            munmap(self.base, <size_t>self.file_size)
            self.base = NULL
        if self._fd >= 0:
            c_close(self._fd)
            self._fd = -1

    # -- reference counting (RocketMQ's ReferenceResource) -----------------------------------------------------

    cdef bint hold(self):
        if self._closed or self.base == NULL:
            return False
        self._holds += 1
        return True

    cdef void release(self):
        self._holds -= 1
        if self._holds <= 0:
            self._holds = 0
            if self._closed:
                self._unmap()

    cdef void _unmap(self):
        if self.base != NULL:
            munmap(self.base, <size_t>self.file_size)
            self.base = NULL
        if self._fd >= 0:
            # The runway past the items written goes back to the filesystem, as the commitlog's does at close: a
            # store closed on a nearly full disk gives back what its open took (the next open makes it again).
            rmq_runway_discard(self._fd, self.file_size,
                               _HEADER + <int64_t>self.hash_slot_num * _SLOT + <int64_t>self._index_count * _ITEM)
            c_close(self._fd)
            self._fd = -1

    cdef int _hold_or_raise(self) except -1:
        if not self.hold():
            raise StoreClosedError(f"{self.file_name}: index file is closed")
        return 0

    # -- the header ----------------------------------------------------------------------------------------------

    cdef void _write_header(self) noexcept nogil:
        # IndexHeader.updateByteBuffer. RocketMQ 4.9.x already writes each field as it changes and rewrites the whole
        # header at flush; rmqcore rewrites all 40 bytes after every put, so the mapping (and so the file after a
        # crash of this process, the kernel keeps the pages) always holds a header consistent with its items.
        cdef unsigned char *b = self.base
        rmq_store_be64(b, <uint64_t>self._begin_timestamp)
        rmq_store_be64(b + 8, <uint64_t>self._end_timestamp)
        rmq_store_be64(b + 16, <uint64_t>self._begin_phy_offset)
        rmq_store_be64(b + 24, <uint64_t>self._end_phy_offset)
        rmq_store_be32(b + 32, <uint32_t>self._hash_slot_count)
        rmq_store_be32(b + 36, <uint32_t>self._index_count)

    @property
    def begin_timestamp(self):
        return self._begin_timestamp

    @property
    def end_timestamp(self):
        return self._end_timestamp

    @property
    def begin_phy_offset(self):
        return self._begin_phy_offset

    @property
    def end_phy_offset(self):
        return self._end_phy_offset

    @property
    def hash_slot_count(self):
        return self._hash_slot_count

    @property
    def index_count(self):
        return self._index_count

    @property
    def closed(self):
        return self._closed

    def is_write_full(self):
        return self._index_count >= self.index_num

    def is_time_matched(self, int64_t begin, int64_t end):
        """IndexFile.isTimeMatched: [begin, end] covers the file's span or one of its ends falls inside it."""
        cdef int64_t b = self._begin_timestamp, e = self._end_timestamp
        return (begin < b and end > e) or (b <= begin <= e) or (b <= end <= e)

    # -- putKey ----------------------------------------------------------------------------------------------------

    cdef bint put_hash(self, int32_t key_hash, int64_t phy_offset, int64_t store_timestamp) noexcept nogil:
        """IndexFile.putKey for an already computed indexKeyHashMethod(key). False when the file is full (or not
        writable, or key_hash < 0, which indexKeyHashMethod never returns: Java's putKey would fail on it too)."""
        cdef int32_t count = self._index_count
        cdef int32_t slot_value
        cdef int64_t time_diff
        cdef unsigned char *slot
        cdef unsigned char *item
        if self.base == NULL or self.read_only or key_hash < 0 or count >= self.index_num:
            return False
        slot = self.base + _HEADER + <int64_t>(key_hash % self.hash_slot_num) * _SLOT
        slot_value = <int32_t>rmq_load_be32(slot)
        if slot_value <= 0 or slot_value > count:
            slot_value = 0

        # Seconds since the file's begin time (taken before the first put moves begin), clamped to [0, INT_MAX].
        time_diff = _wrap_sub(store_timestamp, self._begin_timestamp) // 1000   # cdivision: truncates, as Java
        if self._begin_timestamp <= 0:
            time_diff = 0
        elif time_diff > INT32_MAX:
            time_diff = INT32_MAX
        elif time_diff < 0:
            time_diff = 0

        item = self.base + _HEADER + <int64_t>self.hash_slot_num * _SLOT + <int64_t>count * _ITEM
        if item + _ITEM > self.base + self._allocated:
            self.alloc_error = rmq_runway_extend(self._fd, self.base, self.file_size, self._allocated,
                                                 (item - self.base) + _ITEM + self._runway, 0)
            if self.alloc_error != 0:
                return False
            self._allocated = min(self.file_size, (item - self.base) + _ITEM + self._runway)
        rmq_store_be32(item, <uint32_t>key_hash)
        rmq_store_be64(item + 4, <uint64_t>phy_offset)
        rmq_store_be32(item + 12, <uint32_t><int32_t>time_diff)
        rmq_store_be32(item + 16, <uint32_t>slot_value)
        rmq_index_release_fence()
        rmq_store_be32(slot, <uint32_t>count)

        if count <= 1:
            self._begin_phy_offset = phy_offset
            self._begin_timestamp = store_timestamp
        if slot_value == 0:
            self._hash_slot_count = <int32_t>(<uint32_t>self._hash_slot_count + 1)
        self._index_count = count + 1
        self._end_phy_offset = phy_offset
        self._end_timestamp = store_timestamp
        self._write_header()
        return True

    cdef int64_t put_hashes_c(self, const int32_t *key_hashes, const int64_t *phy_offsets,
                              const int64_t *timestamps, int64_t n, bint skip_indexed) noexcept nogil:
        # Returns how many entries were consumed before the file filled up. With skip_indexed, an entry whose offset
        # is below the file's endPhyOffset at its turn is consumed without being put (IndexService.buildIndex's
        # "already indexed" rule, checked as RocketMQ checks it: against the end offset left by the entries before).
        cdef int64_t i
        for i in range(n):
            # Each key's hash slot is a random spot in the slot table: a cache (and TLB) miss. Ask for the slot
            # of the key PREFETCH_AHEAD on while this one is put (110 -> 60 ns a key, 1 M keys into a 5 M-slot file).
            if i + PREFETCH_AHEAD < n and key_hashes[i + PREFETCH_AHEAD] >= 0:
                __builtin_prefetch(self.base + _HEADER
                                   + <int64_t>(key_hashes[i + PREFETCH_AHEAD] % self.hash_slot_num) * _SLOT, 1)
            if skip_indexed and phy_offsets[i] < self._end_phy_offset:
                continue
            if not self.put_hash(key_hashes[i], phy_offsets[i], timestamps[i]):
                return i
        return n

    def put_key(self, str key, int64_t phy_offset, int64_t store_timestamp):
        """IndexFile.putKey: index ``key`` (the caller builds ``topic#key``); False when the file is full."""
        cdef int32_t h = _key_hash(key)
        cdef bint ok
        if self.read_only:
            raise PermissionError(f"{self.file_name}: index file is open read-only")
        self._hold_or_raise()
        try:
            with nogil:
                ok = self.put_hash(h, phy_offset, store_timestamp)
        finally:
            self.release()
        return ok

    def put_key_hash(self, int32_t key_hash, int64_t phy_offset, int64_t store_timestamp):
        """putKey for a key already hashed with indexKeyHashMethod (>= 0)."""
        cdef bint ok
        if key_hash < 0:
            raise ValueError(f"key_hash must be >= 0 (indexKeyHashMethod's result), got {key_hash}")
        if self.read_only:
            raise PermissionError(f"{self.file_name}: index file is open read-only")
        self._hold_or_raise()
        try:
            with nogil:
                ok = self.put_hash(key_hash, phy_offset, store_timestamp)
        finally:
            self.release()
        return ok

    def put_hashes(self, const int32_t[::1] key_hashes, const int64_t[::1] phy_offsets,
                   const int64_t[::1] timestamps, *, bint skip_indexed=False):
        """Batch putKey of pre-hashed keys (contiguous int32 / int64 / int64 arrays of one length), in order, under
        one GIL-free section. Returns how many entries were consumed before the file filled up (== len when all went
        in); with ``skip_indexed`` entries below the running endPhyOffset are consumed without being put."""
        cdef Py_ssize_t n = key_hashes.shape[0]
        cdef Py_ssize_t i
        cdef int64_t done
        if phy_offsets.shape[0] != n or timestamps.shape[0] != n:
            raise ValueError(f"put_hashes: arrays differ in length ({n}, {phy_offsets.shape[0]}, "
                             f"{timestamps.shape[0]})")
        if self.read_only:
            raise PermissionError(f"{self.file_name}: index file is open read-only")
        for i in range(n):
            if key_hashes[i] < 0:
                raise ValueError(f"put_hashes: key_hashes[{i}] = {key_hashes[i]} < 0; pass indexKeyHashMethod results")
        if n == 0:
            return 0
        self._hold_or_raise()
        try:
            with nogil:
                done = self.put_hashes_c(&key_hashes[0], &phy_offsets[0], &timestamps[0], n, skip_indexed)
        finally:
            self.release()
        return done

    # -- selectPhyOffset ------------------------------------------------------------------------------------------

    cdef int32_t select_hash_c(self, int32_t key_hash, int32_t max_num, int64_t begin, int64_t end,
                               int64_t *out) noexcept nogil:
        """IndexFile.selectPhyOffset: walk the slot's chain newest first; write at most max_num offsets to ``out``
        (room for min(max_num, index_count) entries) and return how many. The caller holds the file."""
        cdef IndexWalk w
        _walk_start(self, &w, key_hash, max_num, begin, end, out)
        while not w.done:
            _walk_step(&w)
        return w.n

    def select_phy_offsets(self, str key, int max_num, int64_t begin, int64_t end):
        """IndexFile.selectPhyOffset(key, maxNum, begin, end): commitlog offsets of items whose key hash matches
        and whose time lies in [begin, end], newest first, at most ``max_num``."""
        return self.select_phy_offsets_by_hash(_key_hash(key), max_num, begin, end)

    def select_phy_offsets_by_hash(self, int32_t key_hash, int max_num, int64_t begin, int64_t end):
        cdef int64_t *out
        cdef int64_t room
        cdef int32_t n, i
        if max_num <= 0 or key_hash < 0:
            return []
        self._hold_or_raise()
        try:
            room = self._index_count
            if room > self.index_num:
                room = self.index_num
            if room > max_num:
                room = max_num
            if room < 1:
                room = 1
            out = <int64_t *>malloc(<size_t>room * sizeof(int64_t))
            if out == NULL:
                raise MemoryError()
            try:
                with nogil:
                    n = self.select_hash_c(key_hash, <int32_t>room, begin, end, out)
                return [out[i] for i in range(n)]
            finally:
                free(out)
        finally:
            self.release()

    def reachable_items(self, *, int64_t bound=0, bint with_times=False):
        """Every item a selectPhyOffset walk can reach, in one pass over the slots (verify's linear check).

        Returns ``(key_hashes, phy_offsets, problems)``: two bytearrays of native int32 / int64 (the keyHash and
        phyOffset of each reachable item whose hash belongs to the slot it hangs from, in item order: commitlog
        order for a file putKey wrote) and how many defects the walk met: a slot or link past the items written,
        an item reached twice (chains that merge or loop), an item hashed to another slot, a negative timeDiff.
        Each item is visited at most once, so a damaged file costs no more than a sound one.

        ``bound`` > 0: the items below it (at most index_num) count as written instead of the header's indexCount.
        A file another process is writing has slots that already point at items put after its header was read
        (putKey writes the item, then the slot, then the header), so a reader of a live file passes index_num.
        ``with_times``: a third bytearray (native int32) of each returned item's timeDiff follows the offsets, for
        checking the time a select computes (beginTimestamp + timeDiff * 1000) against the record's store time.
        """
        cdef int64_t count, slot, nslots, n = 0, problems = 0
        cdef int32_t head, idx, prev, h
        cdef unsigned char *items
        cdef unsigned char *item
        cdef unsigned char *seen
        cdef int32_t *hp
        cdef int64_t *pp
        cdef int32_t *tp
        self._hold_or_raise()
        try:
            count = self._index_count if bound <= 0 else bound
            if count > self.index_num:
                count = self.index_num
            if count < 1:
                count = 1
            hashes = bytearray(count * 4)
            phys = bytearray(count * 8)
            diffs = bytearray(count * 4 if with_times else 4)
            hp = <int32_t *><char *>hashes
            pp = <int64_t *><char *>phys
            tp = <int32_t *><char *>diffs
            seen = <unsigned char *>malloc(<size_t>count)
            if seen == NULL:
                raise MemoryError()
            nslots = self.hash_slot_num
            items = self.base + _HEADER + nslots * _SLOT
            try:
                with nogil:
                    rmq_index_acquire_fence()
                    for slot in range(count):
                        seen[slot] = 0
                    for slot in range(nslots):
                        head = <int32_t>rmq_load_be32(self.base + _HEADER + slot * _SLOT)
                        if head == 0:
                            continue
                        if head < 0 or head >= count:
                            problems += 1
                            continue
                        idx = head
                        while True:
                            if seen[idx]:
                                problems += 1
                                break
                            seen[idx] = 1
                            item = items + <int64_t>idx * _ITEM
                            h = <int32_t>rmq_load_be32(item)
                            if <int32_t>rmq_load_be32(item + 12) < 0:
                                problems += 1
                                break
                            if h < 0 or h % nslots != slot:
                                problems += 1
                            else:
                                seen[idx] = 2           # reachable by a select for its own key
                            prev = <int32_t>rmq_load_be32(item + 16)
                            if prev == 0:
                                break
                            if prev < 0 or prev >= count:
                                problems += 1
                                break
                            idx = prev
                    for idx in range(1, count):
                        if seen[idx] == 2:
                            item = items + <int64_t>idx * _ITEM
                            hp[n] = <int32_t>rmq_load_be32(item)
                            pp[n] = <int64_t>rmq_load_be64(item + 4)
                            if with_times:
                                tp[n] = <int32_t>rmq_load_be32(item + 12)
                            n += 1
            finally:
                free(seen)
            del hashes[n * 4:]
            del phys[n * 8:]
            if with_times:
                del diffs[n * 4:]
                return hashes, phys, problems, diffs
            return hashes, phys, problems
        finally:
            self.release()

    def item(self, int64_t index):
        """Item ``index`` as stored: (keyHash, phyOffset, timeDiff, prevIndex). IndexError outside [1, index_num)
        (item 0 is never written)."""
        cdef const unsigned char *it
        if index < 1 or index >= self.index_num:
            raise IndexError(f"item {index} is outside [1, {self.index_num})")
        self._hold_or_raise()
        try:
            it = self.base + _HEADER + <int64_t>self.hash_slot_num * _SLOT + index * _ITEM
            return (<int32_t>rmq_load_be32(it), <int64_t>rmq_load_be64(it + 4), <int32_t>rmq_load_be32(it + 12),
                    <int32_t>rmq_load_be32(it + 16))
        finally:
            self.release()

    # -- life cycle --------------------------------------------------------------------------------------------------

    def flush(self):
        """IndexFile.flush: msync the mapping. No-op when read-only or closed.

        RocketMQ rewrites the header here (updateByteBuffer); every put already wrote it, and rewriting it from a
        flush thread while the writer runs could put older figures back over newer ones, so it is not redone."""
        cdef int rc = 0
        cdef int err = 0
        if self.read_only or not self.hold():
            return
        try:
            with nogil:
                rc = msync(self.base, <size_t>self.file_size, MS_SYNC)
                if rc != 0:
                    err = errno
        finally:
            self.release()
        if rc != 0:
            raise OSError(err, f"msync: {os.strerror(err)}", self.file_name)

    def close(self):
        """Unmap (at once, or at the last release of a running put/select). Idempotent."""
        if not self._closed:
            self._closed = True
            if self._holds == 0:
                self._unmap()

    def shutdown(self):
        """5.x IndexFile.shutdown: flush, then close."""
        if not self._closed:
            self.flush()
        self.close()

    def destroy(self):
        """IndexFile.destroy: close and delete the file. True when the file was removed."""
        self.close()
        try:
            os.unlink(self.file_name)
        except FileNotFoundError:
            return False
        return True

    def header_bytes(self):
        """The 40 header bytes as they are in the mapping (for tests and tools)."""
        self._hold_or_raise()
        try:
            return (<char *>self.base)[:_HEADER]
        finally:
            self.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"IndexFile({self.file_name!r}, hash_slot_num={self.hash_slot_num}, index_num={self.index_num}, "
                f"index_count={self._index_count}, closed={self._closed})")
