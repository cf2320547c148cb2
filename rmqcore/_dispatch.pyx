# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The reput pass: records → consume-queue units and index key hashes, in bulk.

One GIL-free pass parses records (``parse_record``), computes each record's tagsCode and the Java hashes of its
index keys (``topic#UNIQ_KEY`` then ``topic#key`` for each of KEYS, RocketMQ's order) into numpy arrays, notes
where the topic changes from the record before and applies the delay-topic rule (``_take``); with the GIL only the
topics at those changes are interned (one dict lookup each), no record is looked at twice. The records come from
the writer's dispatch ring (``drain_dispatch_ring``: each record as appended, without its body) or, for records
the ring lacks, from the commitlog's bytes (``scan_for_dispatch``, also recovery's); both go through ``_take``.
``queue_runs`` then splits a batch into per-queue runs of consume-queue units, which the Python dispatcher appends
with one copy per run.
"""
import numpy as np
cimport numpy as cnp

from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcmp, memcpy, memset

from rmqcore._c cimport (rmq_atomic_load_i64, rmq_atomic_store_i64, rmq_dring, rmq_dring_entry, rmq_dring_entry_bytes,
                         rmq_dring_peek, rmq_java_hash_utf8, rmq_store_be32, rmq_store_be64)
from rmqcore._mapped_file cimport MappedFile
from rmqcore._codec cimport (DispatchProps, RECORD_END, RECORD_OK, RecordView, TRANSACTION_ROLLBACK_TYPE,
                             dispatch_properties, parse_record, record_dispatchable)
from rmqcore._commit_log cimport DispatchRing
from rmqcore._index_file cimport IndexFile

cnp.import_array()

cdef extern from *:
    void __builtin_prefetch(const void *addr) nogil

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
cdef bytes _SCHEDULE_TOPIC_B = b"SCHEDULE_TOPIC_XXXX"

cdef enum:
    # The scratch key is topic (≤ 32767 bytes in v2) + '#' + a key (≤ the properties' 32767 bytes).
    KEY_SCRATCH = 65536 + 16
    # Undispatchable records a batch lists by offset (the rest are counted).
    SKIPPED_LISTED = 16
    # How many records ahead the scan prefetches (1 KiB bodies: 9 KB ahead). Measured on a 23 MB commitlog
    # stretch out of cache: 440 ns a record without, 150-300 with 8 (2 and 4 were between).
    PREFETCH_AHEAD = 8
    # Below this many bytes to parse (~30 commitlog records of 1 KiB, ~150 ring entries: some 10-30 us) a pass
    # keeps the GIL.
    GIL_FREE_BYTES = 32768


cdef inline int32_t _index_hash(const unsigned char *topic, int32_t topic_len, const unsigned char *key,
                                int32_t key_len, unsigned char *scratch) noexcept nogil:
    # IndexFile.indexKeyHashMethod(topic + "#" + key): abs of the Java hash, 0 when abs overflows.
    cdef int32_t h
    memcpy(scratch, topic, <size_t>topic_len)
    scratch[topic_len] = 35  # '#'
    memcpy(scratch + topic_len + 1, key, <size_t>key_len)
    h = rmq_java_hash_utf8(scratch, <size_t>(topic_len + 1 + key_len))
    if h < 0:
        if h == -2147483648:
            return 0
        return -h
    return h


cdef struct _Taker:
    # What a pass fills (the ScanBuffers' memory) and its running state; one per pass, on the stack.
    int64_t *phys
    int32_t *size
    int64_t *tags
    int64_t *ts
    int64_t *qo
    int32_t *qid
    int32_t *sf
    int64_t *tpos
    int32_t *tlen
    int32_t *tix
    int32_t *kh
    int64_t *kp
    int64_t *kt
    int32_t *kr
    int max_records
    int max_keys
    int n
    int nk
    int ntopics
    const unsigned char *base          # tpos counts from here
    const unsigned char *prev          # the last topic noted
    int32_t prev_len
    unsigned char *scratch
    const int64_t *delay_ms            # NULL: no delay rule
    int32_t max_level
    int skipped                        # records not record_dispatchable, passed over
    int64_t skipped_at[SKIPPED_LISTED]


cdef int64_t *_i64(object a) except NULL:
    # The data of a non-empty int64 array its owner keeps alive (the ScanBuffers).
    cdef int64_t[::1] v = a
    return &v[0]


cdef int32_t *_i32(object a) except NULL:
    cdef int32_t[::1] v = a
    return &v[0]


cdef class ScanBuffers:
    """The arrays one scan fills, kept by the dispatcher from pass to pass: a pass allocated ~5 MB of fresh
    arrays, and re-faulting fresh pages cost more than the scan. A batch's arrays are views into these: valid
    until the next scan with the same buffers. With them is kept what every pass set up again: the arrays' data
    pointers, the key scratch and the delay table (~2 us of a pass of a few records)."""
    cdef readonly int max_records, max_keys
    cdef object phys, size, tags, ts, qo, qid, sf, tpos, tlen, topic, kh, kp, kt, kr
    cdef _Taker proto                   # pointers into the arrays above and the scratch; the counters unset
    cdef object delay_src               # the delay_level_ms the table below was made from (by identity)
    cdef object delay                   # its int64 copy (None: no delay rule)

    def __cinit__(self, *args, **kwargs):
        self.proto.scratch = <unsigned char *>malloc(KEY_SCRATCH)
        if self.proto.scratch == NULL:
            raise MemoryError()

    def __dealloc__(self):
        free(self.proto.scratch)

    def __init__(self, int max_records, int max_keys):
        if max_records < 1 or max_keys < 1:
            raise ValueError(f"ScanBuffers needs room for a record and a key, got {max_records} / {max_keys}")
        self.max_records = max_records
        self.max_keys = max_keys
        self.phys = np.empty(max_records, np.int64)
        self.size = np.empty(max_records, np.int32)
        self.tags = np.empty(max_records, np.int64)
        self.ts = np.empty(max_records, np.int64)
        self.qo = np.empty(max_records, np.int64)
        self.qid = np.empty(max_records, np.int32)
        self.sf = np.empty(max_records, np.int32)
        self.tpos = np.empty(max_records, np.int64)     # where the topic bytes lie, where the topic differs from before
        self.tlen = np.empty(max_records, np.int32)     # and their length
        self.topic = np.empty(max_records, np.int32)    # per record: index into the topic changes, then its id
        self.kh = np.empty(max_keys, np.int32)
        self.kp = np.empty(max_keys, np.int64)
        self.kt = np.empty(max_keys, np.int64)
        self.kr = np.empty(max_keys, np.int32)
        cdef _Taker *t = &self.proto
        t.phys, t.tags, t.ts, t.qo = _i64(self.phys), _i64(self.tags), _i64(self.ts), _i64(self.qo)
        t.tpos, t.kp, t.kt = _i64(self.tpos), _i64(self.kp), _i64(self.kt)
        t.size, t.qid, t.sf = _i32(self.size), _i32(self.qid), _i32(self.sf)
        t.tlen, t.tix, t.kh, t.kr = _i32(self.tlen), _i32(self.topic), _i32(self.kh), _i32(self.kr)
        t.max_records = max_records
        t.max_keys = max_keys
        self.delay_src = None
        self.delay = None


cdef class DispatchBatch:
    """What one scan found: per-record arrays (``n`` records) and per-key arrays (``nkeys`` keys), views of the
    scan's ScanBuffers made when asked for (a pass of a few records paid ~2 us for fourteen views it did not
    read: queue_runs and index_batch read the buffers in place)."""
    cdef readonly int n
    cdef readonly int nkeys
    cdef readonly int64_t start_offset     # global offset of the first byte scanned
    cdef readonly int64_t end_offset       # global offset after the last record taken
    cdef readonly int code                 # what stopped the scan (parse_record code, or RECORD_OK at max)
    cdef readonly int64_t last_store_ts    # the last record's store timestamp (0 without records)
    cdef readonly list topics
    cdef readonly int skipped              # records passed over: not record_dispatchable (kept, not dispatched)
    cdef readonly list skipped_offsets     # the commitlog offsets of the first SKIPPED_LISTED of them
    cdef ScanBuffers buffers

    @property
    def phys(self):
        return self.buffers.phys[:self.n]

    @property
    def size(self):
        return self.buffers.size[:self.n]

    @property
    def tags_code(self):
        return self.buffers.tags[:self.n]

    @property
    def store_ts(self):
        return self.buffers.ts[:self.n]

    @property
    def queue_offset(self):
        return self.buffers.qo[:self.n]

    @property
    def queue_id(self):
        return self.buffers.qid[:self.n]

    @property
    def sys_flag(self):
        return self.buffers.sf[:self.n]

    @property
    def topic_idx(self):
        return self.buffers.topic[:self.n]

    @property
    def key_hash(self):
        return self.buffers.kh[:self.nkeys]

    @property
    def key_phys(self):
        return self.buffers.kp[:self.nkeys]

    @property
    def key_ts(self):
        return self.buffers.kt[:self.nkeys]

    @property
    def key_record(self):
        return self.buffers.kr[:self.nkeys]


cdef ScanBuffers _buffers_for(int max_records, int max_keys, ScanBuffers buffers):
    if buffers is None or buffers.max_records < max_records or buffers.max_keys < max_keys:
        buffers = ScanBuffers(max(max_records, 1), max(max_keys, 1))
    return buffers


cdef int _start_pass(_Taker *t, ScanBuffers buffers, int max_records, int max_keys, delay_level_ms) except -1:
    # A pass's _Taker: the buffers' pointers, the counters at zero, the delay table (copied once per table given).
    t[0] = buffers.proto
    t.max_records = max_records
    t.max_keys = max_keys
    t.n = t.nk = t.ntopics = t.skipped = 0
    t.base = NULL
    t.prev = NULL
    t.prev_len = -1
    t.delay_ms = NULL
    t.max_level = 0
    if delay_level_ms is None:
        return 0
    if delay_level_ms is not buffers.delay_src:
        # By identity: the store's table is fixed for its life; another one (a test's, recovery's) is copied anew.
        buffers.delay = (np.ascontiguousarray(delay_level_ms, dtype=np.int64) if len(delay_level_ms) > 1
                         else None)
        buffers.delay_src = delay_level_ms
    if buffers.delay is not None:
        t.delay_ms = _i64(buffers.delay)
        t.max_level = <int32_t>len(buffers.delay) - 1
    return 0


cdef bint _take(_Taker *t, const unsigned char *rec, const RecordView *rv, int64_t phys,
                int32_t total_size) noexcept nogil:
    # Record ``rec`` (parsed into ``rv``; at commitlog offset ``phys``, ``total_size`` bytes there) into the
    # arrays: False when its keys do not fit (it is left for the next batch; a record never splits).
    # ``total_size`` differs from rv.total_size for a slim record from the dispatch ring.
    cdef DispatchProps dp
    cdef int32_t vpos, vlen, kend, i, j, level
    cdef int kstart, n = t.n, nk = t.nk
    if not record_dispatchable(rec, rv):
        # Kept in the commitlog (its checksums hold: RocketMQ's store can write it), but its topic or queue id
        # cannot name a directory; dispatch passes over it and says so.
        if t.skipped < SKIPPED_LISTED:
            t.skipped_at[t.skipped] = phys
        t.skipped += 1
        return True
    dispatch_properties(rec + rv.props_pos, rv.props_len, &dp)
    # Reserve room for this record's keys first.
    if (rv.sys_flag & TRANSACTION_ROLLBACK_TYPE) != TRANSACTION_ROLLBACK_TYPE:
        kstart = nk
        if dp.uniq_pos >= 0:
            if nk >= t.max_keys:
                return False
            t.kh[nk] = _index_hash(rec + rv.topic_pos, rv.topic_len, rec + rv.props_pos + dp.uniq_pos,
                                   dp.uniq_len, t.scratch)
            nk += 1
        if dp.keys_pos >= 0:
            vpos = dp.keys_pos
            vlen = dp.keys_len
            kend = 0
            i = 0
            while i <= vlen:
                if i == vlen or rec[rv.props_pos + vpos + i] == 32:
                    if i > kend:
                        if nk >= t.max_keys:
                            return False
                        t.kh[nk] = _index_hash(rec + rv.topic_pos, rv.topic_len,
                                               rec + rv.props_pos + vpos + kend, i - kend, t.scratch)
                        nk += 1
                    kend = i + 1
                i += 1
        for i in range(kstart, nk):
            t.kp[i] = phys
            t.kt[i] = rv.store_timestamp
            t.kr[i] = n
    t.nk = nk
    t.phys[n] = phys
    t.size[n] = total_size
    t.tags[n] = (<int64_t>rmq_java_hash_utf8(rec + rv.props_pos + dp.tags_pos, <size_t>dp.tags_len)
                 if dp.tags_pos >= 0 else 0)
    t.ts[n] = rv.store_timestamp
    t.qo[n] = rv.queue_offset
    t.qid[n] = rv.queue_id
    t.sf[n] = rv.sys_flag
    if (t.prev == NULL or rv.topic_len != t.prev_len
            or memcmp(rec + rv.topic_pos, t.prev, <size_t>rv.topic_len) != 0):
        t.tpos[t.ntopics] = (rec + rv.topic_pos) - t.base
        t.tlen[t.ntopics] = rv.topic_len
        t.ntopics += 1
        t.prev = rec + rv.topic_pos
        t.prev_len = rv.topic_len
    t.tix[n] = t.ntopics - 1
    # ScheduleMessageService's rule at dispatch: a SCHEDULE_TOPIC_XXXX unit's tagsCode is its delivery time
    # (store time + the DELAY level's delay; levels past the last are the last).
    if (t.delay_ms != NULL and rv.topic_len == 19
            and memcmp(rec + rv.topic_pos, <const char *>"SCHEDULE_TOPIC_XXXX", 19) == 0
            and dp.delay_pos >= 0):
        vpos = dp.delay_pos
        vlen = dp.delay_len
        level = 0
        j = 1 if vlen > 1 and rec[rv.props_pos + vpos] == 43 else 0      # Integer.parseInt's '+'
        while j < vlen and j < 10 and 48 <= rec[rv.props_pos + vpos + j] <= 57:
            level = level * 10 + (rec[rv.props_pos + vpos + j] - 48)
            j += 1
        if j == vlen and vlen > 0:
            if level > t.max_level:
                level = t.max_level
            if level > 0:
                t.tags[n] = rv.store_timestamp + t.delay_ms[level]
    t.n = n + 1
    return True


cdef Py_ssize_t _scan_records(_Taker *t, const unsigned char *base, Py_ssize_t pos, Py_ssize_t end,
                              int64_t base_offset, int max_records, bint check_crc, int *code) noexcept nogil:
    # scan_for_dispatch's loop: records from ``pos`` into ``t``; returns where the next scan starts.
    cdef RecordView rv
    cdef const unsigned char *ahead
    cdef const unsigned char *rec
    while t.n < max_records and base != NULL:
        rec = base + pos
        code[0] = parse_record(rec, end - pos, &rv, check_crc)
        if code[0] != RECORD_OK:
            break
        if not _take(t, rec, &rv, base_offset + pos, rv.total_size):
            break
        pos += rv.total_size
        # The scan touches two spots per record, its header and its properties a body's length further:
        # each a cache miss once records stream past the caches, which the hardware prefetcher does not
        # follow. Ask for both of a record PREFETCH_AHEAD records on, guessed from this one's layout
        # (records of one producer look alike; a wrong guess costs a useless prefetch, never a fault).
        if pos + PREFETCH_AHEAD * <Py_ssize_t>rv.total_size < end:
            ahead = rec + PREFETCH_AHEAD * rv.total_size
            __builtin_prefetch(ahead)
            __builtin_prefetch(ahead + 64)
            __builtin_prefetch(ahead + rv.props_pos)
            __builtin_prefetch(ahead + rv.props_pos + 64)
    return pos


cdef int _drain_entries(_Taker *t, rmq_dring *r, int64_t *pos, int64_t head, int64_t *at, int64_t readable_end,
                        int max_records) noexcept nogil:
    # drain_dispatch_ring's loop: entries from ring byte ``pos`` for commitlog offset ``at`` on (both moved past
    # what was taken); returns the batch's code.
    cdef const rmq_dring_entry *e
    cdef const unsigned char *slim
    cdef RecordView rv
    while True:
        e = rmq_dring_peek(r, pos, head)
        if e == NULL:
            return RECORD_END
        if e.phys < at[0]:
            pos[0] += rmq_dring_entry_bytes(e)
            continue
        if e.phys != at[0] or at[0] + e.size > readable_end:
            return RECORD_END
        if t.n >= max_records:
            return RECORD_OK
        slim = <const unsigned char *>e + sizeof(rmq_dring_entry)
        if parse_record(slim, e.slim_len, &rv, False) != RECORD_OK:
            return RECORD_END       # never written so; the scan reads this record from the commitlog
        if not _take(t, slim, &rv, e.phys, e.size):
            return RECORD_OK
        at[0] += e.size
        pos[0] += rmq_dring_entry_bytes(e)


cdef DispatchBatch _finish(_Taker *t, ScanBuffers buffers, dict topic_ids, list topics, int64_t start_offset,
                           int64_t end_offset, int code):
    # Topic interning, with the GIL: one dict lookup per topic change the pass noted. Then the batch over the
    # buffers.
    cdef int i, j
    cdef int32_t few[16]
    cdef int32_t *ids = few
    if t.ntopics > 16:
        ids = <int32_t *>malloc(t.ntopics * sizeof(int32_t))
        if ids == NULL:
            raise MemoryError()
    try:
        for j in range(t.ntopics):
            tb = (<const char *>t.base)[t.tpos[j]:t.tpos[j] + t.tlen[j]]
            t_id = topic_ids.get(tb, -1)
            if t_id < 0:
                t_id = len(topics)
                topic_ids[tb] = t_id
                topics.append(tb.decode("utf-8", "replace"))
            ids[j] = t_id
        for i in range(t.n):
            t.tix[i] = ids[t.tix[i]]
    finally:
        if ids != few:
            free(ids)
    cdef DispatchBatch b = DispatchBatch.__new__(DispatchBatch)
    b.n = t.n
    b.nkeys = t.nk
    b.start_offset = start_offset
    b.end_offset = end_offset
    b.code = code
    b.last_store_ts = t.ts[t.n - 1] if t.n else 0
    b.buffers = buffers
    b.topics = topics
    b.skipped = t.skipped
    b.skipped_offsets = [t.skipped_at[i] for i in range(min(t.skipped, SKIPPED_LISTED))] if t.skipped else []
    return b


def scan_for_dispatch(data, int64_t base_offset, Py_ssize_t start=0, Py_ssize_t end=-1, int max_records=8192,
                      int max_keys=32768, bint check_crc=False, dict topic_ids=None, list topics=None,
                      delay_level_ms=None, ScanBuffers buffers=None):
    """Scan ``data`` (a mapped file's readable bytes; byte 0 is global ``base_offset``) from ``start``.

    Stops at ``max_records``, when the key arrays are full, at ``end`` (default: end of data), at a blank record
    or at the first bad record (``code`` says which; ``end_offset`` is where the next scan starts).
    ``topic_ids``/``topics`` intern topic names across scans; ``delay_level_ms`` (level → ms, index 0 unused)
    turns the tagsCode of SCHEDULE_TOPIC_XXXX messages with a DELAY property into their delivery time, as
    RocketMQ does. ``buffers`` (sized at least max_records / max_keys) are filled instead of new arrays.
    """
    cdef const unsigned char[::1] buf = data
    cdef Py_ssize_t length = buf.shape[0]
    cdef Py_ssize_t pos
    cdef int code = RECORD_OK
    cdef _Taker t
    cdef const unsigned char *base
    if end < 0 or end > length:
        end = length
    if start < 0 or start > end:
        raise ValueError(f"start {start} outside [0, {end}]")
    if topic_ids is None:
        topic_ids = {}
    if topics is None:
        topics = []
    buffers = _buffers_for(max_records, max_keys, buffers)
    _start_pass(&t, buffers, max_records, max_keys, delay_level_ms)
    pos = start
    base = &buf[0] if length > 0 else NULL
    t.base = base
    # A few records' worth keeps the GIL: giving it up and taking it back costs more than they do, and when
    # another thread wants it the retake waits for that thread's switch interval.
    if end - start > GIL_FREE_BYTES:
        with nogil:
            pos = _scan_records(&t, base, pos, end, base_offset, max_records, check_crc, &code)
    else:
        pos = _scan_records(&t, base, pos, end, base_offset, max_records, check_crc, &code)
    return _finish(&t, buffers, topic_ids, topics, base_offset + start, base_offset + pos, code)


def drain_dispatch_ring(DispatchRing ring not None, int64_t from_offset, int64_t readable_end,
                        int max_records=8192, int max_keys=32768, dict topic_ids=None, list topics=None,
                        delay_level_ms=None, ScanBuffers buffers=None):
    """What ``scan_for_dispatch`` would find from commitlog offset ``from_offset``, taken from the writer's
    dispatch ring instead of the commitlog: its entries from the one at ``from_offset`` on, back to back, each
    whole below ``readable_end`` (entries before ``from_offset`` are dropped: the scan took those records).
    Stops at ``max_records``, when the key arrays are full (``code`` RECORD_OK) or where the ring has no entry
    for the next offset (RESULT_END): ``n`` 0 means the commitlog must be scanned there (``ring_next_offset``
    says how far). The entries taken are released once the batch is built."""
    cdef rmq_dring *r = &ring.r
    cdef int64_t head = rmq_atomic_load_i64(&r.head)
    cdef int64_t pos = r.tail, at = from_offset
    cdef _Taker t
    cdef int code
    if topic_ids is None:
        topic_ids = {}
    if topics is None:
        topics = []
    buffers = _buffers_for(max_records, max_keys, buffers)
    _start_pass(&t, buffers, max_records, max_keys, delay_level_ms)
    t.base = r.buf
    if head - pos > GIL_FREE_BYTES:         # as in scan_for_dispatch: a few entries keep the GIL
        with nogil:
            code = _drain_entries(&t, r, &pos, head, &at, readable_end, max_records)
    else:
        code = _drain_entries(&t, r, &pos, head, &at, readable_end, max_records)
    batch = _finish(&t, buffers, topic_ids, topics, from_offset, at, code)
    rmq_atomic_store_i64(&r.tail, pos)          # after _finish: it read the topics out of these entries
    return batch


def ring_next_offset(DispatchRing ring not None, int64_t from_offset):
    """The commitlog offset of the ring's first entry at or after ``from_offset`` (older ones are dropped), or -1
    when it holds none: the dispatcher scans the commitlog up to there."""
    cdef rmq_dring *r = &ring.r
    cdef int64_t head = rmq_atomic_load_i64(&r.head)
    cdef int64_t pos = r.tail
    cdef const rmq_dring_entry *e
    cdef int64_t found = -1
    while True:
        e = rmq_dring_peek(r, &pos, head)
        if e == NULL:
            break
        if e.phys >= from_offset:
            found = e.phys
            break
        pos += rmq_dring_entry_bytes(e)
    rmq_atomic_store_i64(&r.tail, pos)
    return found


cdef enum:
    CQ_UNIT_SIZE = 20


cdef int _append_run(object cq, const unsigned char *units, int64_t count, int64_t first_queue_offset,
                     const int64_t *ends, int64_t last_ts) except -1:
    # ConsumeQueue.append_units' common case without a Python frame: the run continues the queue's last file
    # (its first unit goes where that file's data ends), holds only units the queue lacks, and fits the file.
    # 1: appended (and the queue's max physical offset moved); 0: the caller goes the general way.
    cdef MappedFile mf
    cdef int64_t wrote, nbytes = count * CQ_UNIT_SIZE
    if count <= 0 or cq.max_physic_offset >= ends[0]:
        return 0
    files = cq.mapped_file_queue._files
    if not files:
        return 0
    mf = files[len(files) - 1]
    if mf._closed or mf.read_only:
        return 0
    wrote = rmq_atomic_load_i64(&mf._wrote)
    if mf.file_from_offset + wrote != first_queue_offset * CQ_UNIT_SIZE or wrote + nbytes > mf.file_size:
        return 0
    if mf.write_c(wrote, units, nbytes, False) != 0:
        return 0                        # the general way retries, and raises what it meets
    mf.advance(nbytes, last_ts)
    cq.max_physic_offset = ends[count - 1]
    return 1


def queue_runs(DispatchBatch b not None, unit_dtype, find_queue=None, dict queues=None):
    """The batch's consumable records (not prepared, not rolled back) split per (topic, queue id), each run in
    commitlog order: a list of ``(topic, queue_id, units, queue_offsets, ends, contiguous, last_store_ts)`` with
    ``units`` the consume-queue units (``unit_dtype``: 20 bytes, big-endian offset, size, tagsCode), ``queue_offsets``
    and ``ends`` (offset + size) int64 arrays, ``contiguous`` whether the queue offsets follow each other. Runs come
    in the order of their first record.

    ``find_queue`` (the store's find_consume_queue): a contiguous run that continues its queue's last file with
    units the queue lacks and fits it is appended there directly (one copy, the file's wrote position and store
    time published, the queue's max physical offset moved) and left out of the list; the rest (a new file, a
    rebuild after recovery, a gap) are returned for ConsumeQueue.append_units. Per run that saves the Python
    frames that cost ~6 us (16 queues, passes of 256 records: ~400 ns a record with the GIL held). ``queues``
    (the store's {topic: {queue_id: queue}}): the queues found there without a call of ``find_queue``.

    Plain C loops that keep the GIL: numpy's sorts and ufuncs release and retake it on arrays of a few hundred
    items, and every retake waits for the producer's switch interval (5 ms), which left the dispatcher behind a
    full-speed producer.
    """
    cdef int n = b.n, i, g, ng = 0, bits = 4
    cdef int64_t cap = 16, k, j, c
    cdef uint64_t h
    cdef int32_t tran
    if unit_dtype.itemsize != CQ_UNIT_SIZE:
        raise ValueError(f"unit_dtype must be {CQ_UNIT_SIZE} bytes, got {unit_dtype.itemsize}")
    out = []
    if n == 0:
        return out
    # The batch's arrays in place (its ScanBuffers), not through views of them.
    cdef const _Taker *bt = &b.buffers.proto
    cdef const int64_t *phys = bt.phys
    cdef const int64_t *tags = bt.tags
    cdef const int64_t *ts = bt.ts
    cdef const int64_t *qo = bt.qo
    cdef const int32_t *size = bt.size
    cdef const int32_t *qid = bt.qid
    cdef const int32_t *sf = bt.sf
    cdef const int32_t *tix = bt.tix
    while cap < 2 * n:
        cap <<= 1
        bits += 1
    # One allocation for every scratch array (a pass of a few records made twelve).
    cdef size_t nn = <size_t>n
    cdef char *block = <char *>malloc(<size_t>cap * (sizeof(int64_t) + sizeof(int))
                                      + nn * (sizeof(int) * 2 + sizeof(int64_t) * 6 + CQ_UNIT_SIZE + 1))
    if block == NULL:
        raise MemoryError()
    cdef int64_t *keys = <int64_t *>block
    cdef int64_t *count = keys + cap
    cdef int64_t *start = count + nn                  # a group's first slot in the buffers below
    cdef int64_t *filled = start + nn
    cdef int64_t *qo_buf = filled + nn
    cdef int64_t *end_buf = qo_buf + nn
    cdef int64_t *last_ts = end_buf + nn
    cdef int *slot = <int *>(last_ts + nn)
    cdef int *rec_group = slot + cap
    cdef int *first = rec_group + nn
    cdef unsigned char *unit_buf = <unsigned char *>(first + nn)
    cdef char *contiguous = <char *>(unit_buf + nn * CQ_UNIT_SIZE)
    cdef unsigned char *u
    cdef cnp.ndarray units, queue_offsets, ends
    try:
        memset(slot, 0xFF, cap * sizeof(int))            # -1: empty slot
        # Group ids by first appearance, through an open-addressing table on (topic index, queue id).
        for i in range(n):
            tran = sf[i] & TRANSACTION_ROLLBACK_TYPE
            if tran != 0x0 and tran != 0x8:
                rec_group[i] = -1
                continue
            k = (<int64_t>tix[i] << 32) | <uint32_t>qid[i]
            h = (<uint64_t>k * <uint64_t>0x9E3779B97F4A7C15) >> (64 - bits)
            while slot[h] != -1 and keys[h] != k:
                h = (h + 1) & <uint64_t>(cap - 1)
            if slot[h] == -1:
                keys[h] = k
                slot[h] = ng
                first[ng] = i
                count[ng] = 0
                ng += 1
            g = slot[h]
            rec_group[i] = g
            count[g] += 1
        c = 0
        for g in range(ng):
            start[g] = c
            c += count[g]
            filled[g] = 0
            contiguous[g] = 1
        for i in range(n):
            g = rec_group[i]
            if g < 0:
                continue
            j = start[g] + filled[g]
            u = unit_buf + j * CQ_UNIT_SIZE
            rmq_store_be64(u, <uint64_t>phys[i])
            rmq_store_be32(u + 8, <uint32_t>size[i])
            rmq_store_be64(u + 12, <uint64_t>tags[i])
            qo_buf[j] = qo[i]
            end_buf[j] = phys[i] + size[i]
            if filled[g] > 0 and qo[i] != qo_buf[j - 1] + 1:
                contiguous[g] = 0
            filled[g] += 1
            last_ts[g] = ts[i]
        for g in range(ng):
            j = start[g]
            topic = b.topics[tix[first[g]]]
            if find_queue is not None and contiguous[g]:
                cq = None
                if queues is not None:
                    per_topic = queues.get(topic)
                    if per_topic is not None:
                        cq = per_topic.get(qid[first[g]])
                if cq is None:
                    cq = find_queue(topic, qid[first[g]])
                if _append_run(cq, unit_buf + j * CQ_UNIT_SIZE, count[g], qo_buf[j], end_buf + j, last_ts[g]):
                    continue
            units = np.empty(count[g], unit_dtype)
            queue_offsets = np.empty(count[g], np.int64)
            ends = np.empty(count[g], np.int64)
            memcpy(cnp.PyArray_DATA(units), unit_buf + j * CQ_UNIT_SIZE, count[g] * CQ_UNIT_SIZE)
            memcpy(cnp.PyArray_DATA(queue_offsets), qo_buf + j, count[g] * sizeof(int64_t))
            memcpy(cnp.PyArray_DATA(ends), end_buf + j, count[g] * sizeof(int64_t))
            out.append((topic, qid[first[g]], units, queue_offsets, ends, bool(contiguous[g]), last_ts[g]))
        return out
    finally:
        free(block)


def index_batch(DispatchBatch b not None, IndexFile f not None, int start=0):
    """IndexFile.put_hashes(skip_indexed=True) of the batch's keys from ``start`` on, read in place (no views, no
    copies): how many were consumed (all of them unless ``f`` filled up). IndexService.build_index_batch's kernel;
    a few keys keep the GIL, as the scans do."""
    cdef const _Taker *bt = &b.buffers.proto
    cdef int64_t n = b.nkeys - start, done
    if start < 0 or n < 0:
        raise ValueError(f"start {start} outside [0, {b.nkeys}]")
    if n == 0:
        return 0
    if f.read_only:
        raise PermissionError(f"{f.file_name}: index file is open read-only")
    f._hold_or_raise()
    try:
        if n > 4096:
            with nogil:
                done = f.put_hashes_c(bt.kh + start, bt.kp + start, bt.kt + start, n, True)
        else:
            done = f.put_hashes_c(bt.kh + start, bt.kp + start, bt.kt + start, n, True)
    finally:
        f.release()
    return done
