# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Reads, each one call over the live file lists, as RocketMQ's DefaultMessageStore: getMessage's pull loop over
consume-queue units (``select_messages``, ``select_queue``), lookMessageByOffset (``look_record``), queryMessage
(``query_messages``: the index walk, each hit checked against its own record), getOffsetInQueueByTime and
pickupStoreTimestamp. ``_RecordFinder`` finds the bytes a unit points at, also for recovery's ``check_units`` and
the schedule and timer services.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport INT32_MAX, int32_t, int64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcmp

from rmqcore._c cimport rmq_load_be32, rmq_load_be64
from rmqcore._codec cimport (RECORD_OK, RecordView, TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE, _Buffer,
                             find_property, now_ms, parse_record)
from rmqcore._index_file cimport items_in, query_files_c, topic_key_hash
from rmqcore._mapped_file cimport MappedFile
from rmqcore._message cimport MessageExt, _make_ext

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL

cdef extern from *:
    void __builtin_prefetch(const void *addr) noexcept nogil

cdef enum:
    SELECT_PREFETCH_AHEAD = 4       # units ahead select_messages prefetches records (see there)


@cython.freelist(8)
cdef class _RecordFinder:
    """The bytes a consume-queue unit points at (``files``: the commitlog's MappedFiles in order, ``file_size``
    each): ``locate`` gives them when the unit's file exists and holds them within what is readable, ``find`` when
    they are also one whole record of the unit's size. Only the current file is looked up again (a queue's units
    point into one file, then the next: no per-file table, which cost every pull O(files)); every file looked at
    stays held, so pointers handed out stay valid, until release()."""

    def __cinit__(self, list files not None, int64_t file_size):
        self.files = files
        self.nfiles = len(files)
        self.file_size = file_size
        self.first_from = (<MappedFile>files[0]).file_from_offset if self.nfiles else 0
        self.cur = -1

    cdef int _switch(self, Py_ssize_t findex) except -1:
        cdef MappedFile mf = <MappedFile>self.files[findex]
        cdef _Buffer b = None
        if self.cur_buf is not None:
            if self.held is None:
                self.held = []
            self.held.append(self.cur_buf)
        v = mf.select(0, mf.read_position_c())
        if v is not None:
            b = _Buffer()
            b.acquire(v)
        self.cur = findex
        self.cur_view = v
        self.cur_buf = b
        self.cur_base = <const unsigned char *>b.view.buf if b is not None else NULL
        self.cur_avail = b.view.len if b is not None else 0
        return 0

    cdef const unsigned char *locate(self, int64_t offset, int32_t size) except? NULL:
        cdef Py_ssize_t findex
        cdef int64_t pos
        if offset < self.first_from or size <= 0 or self.file_size <= 0:
            return NULL
        findex = (offset - self.first_from) // self.file_size
        if findex >= self.nfiles:
            return NULL
        if findex != self.cur:
            self._switch(findex)
        pos = offset - (self.first_from + findex * self.file_size)
        if self.cur_base == NULL or pos + size > self.cur_avail:
            return NULL
        return self.cur_base + pos

    cdef const unsigned char *find(self, int64_t offset, int32_t size, RecordView *rv) except? NULL:
        cdef const unsigned char *p = self.locate(offset, size)
        if p != NULL and parse_record(p, size, rv, False) == RECORD_OK and rv.total_size == size:
            return p
        return NULL

    cdef int release(self) except -1:
        cdef _Buffer b
        if self.held is not None:
            for b in self.held:
                b.release()
            self.held = None
        if self.cur_buf is not None:
            self.cur_buf.release()
        self.cur = -1
        self.cur_view = None
        self.cur_buf = None
        self.cur_base = NULL
        self.cur_avail = 0
        return 0


def check_units(units, int64_t first_index, list files, int64_t file_size, bytes topic not None, int32_t queue_id,
                int64_t min_phy_offset):
    """How many of ``units`` (raw consume-queue bytes, 20 per unit; the first is unit ``first_index`` of the queue
    ``topic``/``queue_id``) are whole before the first that does not point at its own record: a record that
    parses (no CRC) with exactly the unit's size, whose physicalOffset is the unit's offset, whose topic, queue id
    and queueOffset are the queue's and the unit's index, and that is not a prepared or rollback transaction.

    Recovery cuts a queue at that unit. Units pointing below ``min_phy_offset`` (files cleaned away) and the blank
    fillers before a queue's first entry (offset 0, size MAX_INT) are passed over: they point at nothing by design.
    ``files`` are the commitlog's MappedFiles (consecutive, ``file_size`` each).
    """
    cdef _Buffer ub = _Buffer()
    cdef _RecordFinder finder = _RecordFinder(files, file_size)
    cdef const unsigned char *u
    cdef const unsigned char *p
    cdef int64_t offset, first_from, i, n
    cdef int32_t size, tran
    cdef Py_ssize_t nfiles = len(files)
    cdef RecordView rv
    cdef const unsigned char *t = <const unsigned char *>PyBytes_AS_STRING(topic)
    cdef Py_ssize_t tlen = len(topic)
    ub.acquire(units)
    n = ub.view.len // 20
    first_from = (<MappedFile>files[0]).file_from_offset if nfiles else 0
    try:
        for i in range(n):
            u = <const unsigned char *>ub.view.buf + i * 20
            offset = <int64_t>rmq_load_be64(u)
            size = <int32_t>rmq_load_be32(u + 8)
            if offset == 0 and size == 0x7FFFFFFF:
                continue
            if offset < min_phy_offset or offset < first_from:
                if offset < 0 or size <= 0:
                    return i
                continue
            p = finder.find(offset, size, &rv)
            if p == NULL:
                return i
            tran = rv.sys_flag & TRANSACTION_ROLLBACK_TYPE
            if (rv.physical_offset != offset or rv.queue_id != queue_id or rv.queue_offset != first_index + i
                    or rv.topic_len != tlen or memcmp(p + rv.topic_pos, t, <size_t>tlen) != 0
                    or tran == TRANSACTION_PREPARED_TYPE or tran == TRANSACTION_ROLLBACK_TYPE):
                return i
        return n
    finally:
        finder.release()        # mapped-file views hold their file until released


# ---------------------------------------------------------------------------------------------------------------
# Reading a batch for a pull: DefaultMessageStore.getMessage's inner loop over consume-queue units

SELECT_FOUND = 0
SELECT_NO_MATCHED_MESSAGE = 1
SELECT_MESSAGE_WAS_REMOVING = 2


def select_messages(const unsigned char[::1] units, list files, int64_t file_size, int max_count,
                    int64_t max_transfer_bytes, int max_transfer_count, tag_codes=None, exact_tags=None):
    """Walk consume-queue units (raw 20-byte big-endian units) and decode the messages they point at, zero-copy.

    ``files`` are the commitlog's MappedFiles in order; ``tag_codes`` a set of tag hash codes to match first and
    ``exact_tags`` the set of tag strings the record must then carry. Returns ``(messages, units_consumed,
    status, buffer_total_size, max_phy_offset_pulling)`` with RocketMQ's batch-full rule (count, bytes) and its
    statuses (SELECT_FOUND / SELECT_NO_MATCHED_MESSAGE / SELECT_MESSAGE_WAS_REMOVING). A unit that points at
    bytes which are not a whole valid record of its size is skipped as removed.
    """
    return _select(&units[0] if units.shape[0] >= 20 else NULL, units.shape[0] // 20, files, file_size, max_count,
                   max_transfer_bytes, max_transfer_count, tag_codes, exact_tags)


def select_queue(MappedFile queue_file not None, int64_t pos, list files, int64_t file_size, int max_count,
                 int64_t max_transfer_bytes, int max_transfer_count, tag_codes=None, exact_tags=None):
    """select_messages over a consume-queue file's units from byte ``pos`` to its read position, read in place
    (RocketMQ's getIndexBuffer and the pull loop in one call, no view made of the units); None when nothing is
    readable there."""
    cdef int64_t readable = queue_file.read_position_c() - pos
    if pos < 0 or readable <= 0 or not queue_file.hold():      # hold: the mapping stays while the units are read
        return None
    try:
        return _select(<const unsigned char *>queue_file.base + pos, <Py_ssize_t>(readable // 20), files, file_size,
                       max_count, max_transfer_bytes, max_transfer_count, tag_codes, exact_tags)
    finally:
        queue_file.release()


cdef tuple _select(const unsigned char *units, Py_ssize_t nunits, list files, int64_t file_size, int max_count,
                   int64_t max_transfer_bytes, int max_transfer_count, tag_codes, exact_tags):
    cdef Py_ssize_t i = 0, max_filter = max(16000, max_count * 20) // 20
    cdef const unsigned char *u
    cdef int64_t offset, tags, first_from, next_phy_file_start = -1, total = 0, max_phy = 0
    cdef int32_t size
    cdef Py_ssize_t nfiles = len(files), count = 0
    cdef int status = SELECT_NO_MATCHED_MESSAGE
    cdef list out = []
    cdef _RecordFinder finder
    cdef RecordView rv
    cdef MessageExt m
    cdef const unsigned char *p
    cdef bint filtering = tag_codes is not None
    cdef object topic_obj = None
    cdef const unsigned char *prev_topic = NULL
    cdef int32_t prev_topic_len = -1
    cdef const unsigned char *ahead
    cdef int64_t ahead_pos
    cdef int32_t ahead_size
    if nfiles == 0 or nunits == 0:
        return out, 0, status, 0, 0
    first_from = (<MappedFile>files[0]).file_from_offset
    finder = _RecordFinder(files, file_size)
    while i < nunits and i < max_filter:
        u = units + i * 20
        offset = <int64_t>rmq_load_be64(u)
        size = <int32_t>rmq_load_be32(u + 8)
        tags = <int64_t>rmq_load_be64(u + 12)
        max_phy = offset
        if next_phy_file_start != -1 and offset < next_phy_file_start:
            i += 1
            continue
        # RocketMQ's isTheBatchFull (every page counts as in memory: the files are mapped).
        if total != 0 and count != 0:
            if count >= max_count or total + size > max_transfer_bytes or count > max_transfer_count - 1:
                break
        if filtering and tags not in tag_codes:
            i += 1
            continue
        p = finder.locate(offset, size)
        if p == NULL:
            if total == 0:
                status = SELECT_MESSAGE_WAS_REMOVING
            next_phy_file_start = (offset // file_size + 1) * file_size
            i += 1
            continue
        if i + SELECT_PREFETCH_AHEAD < nunits:
            # A queue's records lie a record of every other queue apart, so each is a cache (and TLB) miss the
            # hardware prefetcher does not see coming: ask for the head and the tail (topic, properties) of the
            # record a few units on, when it is in this file (a prefetch never faults).
            u = units + (i + SELECT_PREFETCH_AHEAD) * 20
            ahead_pos = <int64_t>rmq_load_be64(u) - (first_from + finder.cur * file_size)
            ahead_size = <int32_t>rmq_load_be32(u + 8)
            if 0 <= ahead_pos and ahead_size > 128 and ahead_pos + ahead_size <= finder.cur_avail:
                ahead = finder.cur_base + ahead_pos
                __builtin_prefetch(ahead)
                __builtin_prefetch(ahead + ahead_size - 128)
                __builtin_prefetch(ahead + ahead_size - 64)
        if parse_record(p, size, &rv, False) != RECORD_OK or rv.total_size != size:
            if total == 0:
                status = SELECT_MESSAGE_WAS_REMOVING
            i += 1
            continue
        # One str for a run of records of the same topic (a queue's records all have one): no decode per message.
        if topic_obj is None or rv.topic_len != prev_topic_len or memcmp(p + rv.topic_pos, prev_topic,
                                                                          <size_t>rv.topic_len) != 0:
            topic_obj = PyUnicode_DecodeUTF8(<const char *>p + rv.topic_pos, rv.topic_len, "replace")
            prev_topic = p + rv.topic_pos
            prev_topic_len = rv.topic_len
        m = MessageExt.__new__(MessageExt)
        m._src = finder.cur_view     # each message keeps the view of the file it lies in
        m._pos = <Py_ssize_t>(p - finder.cur_base)
        m.rv = rv
        m.topic = topic_obj
        if exact_tags is not None and m.tags not in exact_tags:
            i += 1
            continue
        out.append(m)
        count += 1
        total += size
        status = SELECT_FOUND
        next_phy_file_start = -1
        i += 1
    return out, i, status, total, max_phy


cdef int64_t _store_time_at(list files, int64_t first_from, int64_t file_size, int64_t offset, int32_t size):
    # pickupStoreTimestamp: the store time in the record header at ``offset``, -1 when no whole record is there.
    cdef Py_ssize_t findex
    cdef MappedFile mf
    cdef _Buffer b
    cdef RecordView rv
    cdef int64_t pos
    if offset < first_from or size <= 0:
        return -1
    findex = (offset - first_from) // file_size
    if findex >= len(files):
        return -1
    mf = <MappedFile>files[findex]
    v = mf.select(0, mf.read_position_c())
    if v is None:
        return -1
    b = _Buffer()
    b.acquire(v)
    pos = offset - mf.file_from_offset
    if pos + size > b.view.len:
        return -1
    if parse_record(<const unsigned char *>b.view.buf + pos, size, &rv, False) != RECORD_OK or rv.total_size != size:
        return -1
    return rv.store_timestamp


def offset_in_queue_by_time(const unsigned char[::1] units, int64_t low, list files, int64_t file_size,
                            int64_t timestamp, int64_t min_physic_offset):
    """ConsumeQueue.getOffsetInQueueByTime's search inside one consume-queue file's readable ``units``: returns
    the byte offset of the chosen unit in the file (exact store time, else the nearer neighbour, the right one
    when the left is farther), or -1 when a unit points at an unreadable record (RocketMQ then answers 0)."""
    cdef int64_t high = units.shape[0] - 20
    cdef int64_t mid, target = -1, left = -1, right = -1, left_value = -1, right_value = -1, phy, t
    cdef int32_t size
    cdef int64_t first_from
    if not files:
        return -1
    first_from = (<MappedFile>files[0]).file_from_offset
    while high >= low:
        mid = (low + high) // 40 * 20
        phy = <int64_t>rmq_load_be64(&units[0] + mid)
        size = <int32_t>rmq_load_be32(&units[0] + mid + 8)
        if phy < min_physic_offset:
            low = mid + 20
            left = mid
            continue
        t = _store_time_at(files, first_from, file_size, phy, size)
        if t < 0:
            return -1
        if t == timestamp:
            target = mid
            break
        if t > timestamp:
            high = mid - 20
            right, right_value = mid, t
        else:
            low = mid + 20
            left, left_value = mid, t
    if target != -1:
        return target
    if left_value == -1:
        return right
    if right_value == -1:
        return left
    return right if abs(timestamp - left_value) > abs(timestamp - right_value) else left


def pickup_store_timestamp(list files, int64_t file_size, int64_t offset, int32_t size):
    """The store time of the record of ``size`` bytes at commitlog ``offset`` (``files``: the commitlog's mapped
    files in order), or -1 when no such whole record is readable there."""
    if not files:
        return -1
    return _store_time_at(files, (<MappedFile>files[0]).file_from_offset, file_size, offset, size)


cdef bint _has_key(const unsigned char *props, int32_t props_len, const char *key, Py_ssize_t key_n) noexcept:
    # The record's UNIQ_KEY is ``key``, or ``key`` is one of its space-separated KEYS (MessageExt.getKeys).
    cdef int32_t vpos = 0, vlen = 0, i, start
    if find_property(props, props_len, "UNIQ_KEY", 8, &vpos, &vlen) and vlen == key_n \
            and memcmp(props + vpos, key, <size_t>key_n) == 0:
        return True
    if not find_property(props, props_len, "KEYS", 4, &vpos, &vlen):
        return False
    start = 0
    for i in range(vlen + 1):
        if i == vlen or props[vpos + i] == 32:
            if i - start == key_n and memcmp(props + vpos + start, key, <size_t>key_n) == 0:
                return True
            start = i + 1
    return False


cdef MappedFile _hold_record(list files, int64_t first_from, int64_t file_size, int64_t offset, bint check_crc,
                             RecordView *rv, const unsigned char **record):
    """The mapped file, held, in which a whole valid record starts at global ``offset`` (``rv`` and ``*record``
    then describe it; the caller releases the file), or None: before the first file, past the readable bytes,
    a file closed or being deleted, or no valid record there (CommitLog.lookMessageByOffset's null)."""
    cdef Py_ssize_t findex
    cdef int64_t pos, readable
    cdef MappedFile mf
    if offset < first_from:
        return None
    findex = (offset - first_from) // file_size
    if findex >= len(files):
        return None
    mf = <MappedFile>files[findex]
    pos = offset - mf.file_from_offset
    if pos < 0 or pos >= mf.file_size or not mf.hold():
        return None
    readable = mf.readable_through(pos + 1)       # a record still in the write ring is committed first
    if pos >= readable or parse_record(mf.base + pos, readable - pos, rv, check_crc) != RECORD_OK:
        mf.release()
        return None
    record[0] = mf.base + pos
    return mf


def look_record(list files not None, int64_t file_size, int64_t offset, bint check_crc=False):
    """The zero-copy MessageExt of the record that starts at global ``offset`` in ``files`` (a mapped file queue's
    list, equal-size files from the first's offset on), or None when no whole valid record starts there (a bad one
    included: CommitLog.lookMessageByOffset's null). One call, no Python frame, no view object per read."""
    cdef MappedFile mf
    cdef RecordView rv
    cdef const unsigned char *p
    if not files or file_size <= 0:
        return None
    mf = _hold_record(files, (<MappedFile>files[0]).file_from_offset, file_size, offset, check_crc, &rv, &p)
    if mf is None:
        return None
    try:
        return _make_ext(mf, p - mf.base, p, &rv)       # the MessageExt holds the file through its buffer
    finally:
        mf.release()


cdef void _prefetch_record(list files, int64_t first_from, int64_t file_size, int64_t offset, bint tail):
    # Prefetch the head of the record at ``offset`` (no load: harmless on any address), or with ``tail`` its last
    # two lines, at the size its head gives (a load, so only within the readable bytes of a held file).
    cdef Py_ssize_t findex
    cdef int64_t pos, readable
    cdef int32_t total
    cdef MappedFile mf
    if offset < first_from:
        return
    findex = (offset - first_from) // file_size
    if findex >= len(files):
        return
    mf = <MappedFile>files[findex]
    pos = offset - mf.file_from_offset
    if pos < 0 or pos >= mf.file_size or mf.base == NULL:
        return
    if not tail:
        __builtin_prefetch(mf.base + pos)
        return
    if not mf.hold():
        return
    readable = mf.read_position_c()
    if pos + 4 <= readable:
        total = <int32_t>rmq_load_be32(mf.base + pos)
        if total > 128 and pos + total <= readable:
            __builtin_prefetch(mf.base + pos + total - 128)
            __builtin_prefetch(mf.base + pos + total - 64)
    mf.release()


cdef enum:
    QUERY_ROUNDS = 3        # DefaultMessageStore.queryMessage's rounds


def query_messages(list index_files not None, list files not None, int64_t file_size, str topic not None,
                   str key not None, int64_t max_num, int64_t begin, end, int64_t max_batch):
    """DefaultMessageStore.queryMessage in one call: the messages of ``topic`` with ``key`` among their KEYS or as
    their UNIQ_KEY, stored in [begin, end] (ms; ``end`` None: now + 1 s), newest index file first, at most
    ``max_num``.

    ``index_files``: the IndexService's list (oldest first), ``files``: the commitlog's mapped files, both read as
    they are (the GIL is held throughout, so neither list changes under the call; each file is held while read).
    Each round asks the index for at most min(max_num, ``max_batch``) offsets (maxMsgsNumBatch); an offset counts
    when a whole record of ``topic`` carrying ``key`` starts there (hash collisions and entries of removed records
    are dropped), each offset once. A round that found nothing is followed by another whose window ends at the
    store time of its lowest offset's record (Java's ``lastQueryMsgTime``, taken after sorting the offsets), up to
    three rounds, none once that time falls before ``begin``. Zero-copy MessageExts over the mapped files; no
    Python object is made but the result list and its messages."""
    cdef Py_ssize_t tn, kn, nseen = 0, j
    cdef const char *tu = PyUnicode_AsUTF8AndSize(topic, &tn)
    cdef const char *ku = PyUnicode_AsUTF8AndSize(key, &kn)
    cdef int64_t offs_stack[64]
    cdef int64_t seen_stack[64]
    cdef int64_t *offs = offs_stack
    cdef int64_t *seen = seen_stack
    cdef int64_t last_query_time = now_ms() + 1000 if end is None else end
    cdef int64_t offset, lowest, first_from
    cdef int32_t batch, n, i, rnd, h
    cdef Py_ssize_t nout = 0
    cdef MappedFile mf
    cdef RecordView rv
    cdef const unsigned char *p
    cdef bint dup
    cdef list out = []
    cdef str exact_topic = topic if type(topic) is str else None     # a str subclass is not handed out as topic
    if max_num <= 0 or max_batch <= 0 or file_size <= 0:
        return out
    # At most maxMsgsNumBatch offsets a round, and never more than the index holds (a huge max_num and batch size
    # ask for no huge buffer).
    batch = <int32_t>min(max_num, max_batch, INT32_MAX, max(1, items_in(index_files)))
    h = topic_key_hash(tu, tn, ku, kn)
    if batch > 64:
        offs = <int64_t *>malloc(<size_t>batch * sizeof(int64_t))
        seen = <int64_t *>malloc(<size_t>batch * sizeof(int64_t))
        if offs == NULL or seen == NULL:
            free(offs)
            free(seen)
            raise MemoryError()
    try:
        for rnd in range(QUERY_ROUNDS):
            n = query_files_c(index_files, h, batch, begin, last_query_time, offs)
            if n == 0 or not files:
                break
            first_from = (<MappedFile>files[0]).file_from_offset
            lowest = offs[0]
            for i in range(1, n):
                if offs[i] < lowest:
                    lowest = offs[i]
            if n > 1:
                # The hits lie anywhere in the commitlog: a cache and TLB miss for each record's head, and another
                # for its tail (topic, properties) a body further. Ask for every head at once, then every tail, so
                # the misses overlap instead of queueing behind each parse.
                for i in range(n):
                    _prefetch_record(files, first_from, file_size, offs[i], False)
                for i in range(n):
                    _prefetch_record(files, first_from, file_size, offs[i], True)
            for i in range(n):
                if nout >= max_num:
                    break
                offset = offs[i]
                mf = _hold_record(files, first_from, file_size, offset, False, &rv, &p)
                if mf is None:
                    continue
                try:
                    if offset == lowest:
                        last_query_time = rv.store_timestamp
                    # An offset the index holds twice (its UNIQ_KEY also among its KEYS, a key repeated) counts
                    # once; results come from one round only, so the round's own offsets are all to compare.
                    dup = False
                    for j in range(nseen):
                        if seen[j] == offset:
                            dup = True
                            break
                    if dup or rv.topic_len != tn or memcmp(p + rv.topic_pos, tu, <size_t>tn) != 0:
                        continue
                    if not _has_key(p + rv.props_pos, rv.props_len, ku, kn):
                        continue
                    seen[nseen] = offset
                    nseen += 1
                    # The MessageExt holds the file through its buffer; its topic is the caller's (same bytes).
                    out.append(_make_ext(mf, p - mf.base, p, &rv, exact_topic))
                    nout += 1
                finally:
                    mf.release()
            if nout > 0 or last_query_time < begin:
                break
        return out
    finally:
        if offs != offs_stack:
            free(offs)
            free(seen)
