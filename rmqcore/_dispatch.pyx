# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The reput scan: committed commitlog bytes → consume-queue units and index key hashes, in bulk.

One GIL-free pass parses records (``parse_record``), computes each record's tagsCode and the Java hashes of its
index keys (``topic#UNIQ_KEY`` then ``topic#key`` for each of KEYS, RocketMQ's order) into numpy arrays; a short
pass with the GIL then interns topics (one dict lookup only where the topic changes) and applies the delay-topic
rule. The Python dispatcher groups the arrays per queue and appends them with one copy per run.
"""
import numpy as np
cimport numpy as cnp

from libc.stdint cimport int32_t, int64_t, uint32_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcmp, memcpy

from rmqcore._c cimport rmq_java_hash_utf8
from rmqcore._codec cimport (RECORD_OK, RecordView, TRANSACTION_ROLLBACK_TYPE, find_property, parse_record,
                             tags_code_of)

cnp.import_array()

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
cdef bytes _SCHEDULE_TOPIC_B = b"SCHEDULE_TOPIC_XXXX"

cdef enum:
    # The scratch key is topic (≤ 32767 bytes in v2) + '#' + a key (≤ the properties' 32767 bytes).
    KEY_SCRATCH = 65536 + 16


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


cdef class DispatchBatch:
    """What one scan found: per-record arrays (``n`` records) and per-key arrays (``nkeys`` keys)."""
    cdef readonly int n
    cdef readonly int nkeys
    cdef readonly int64_t start_offset     # global offset of the first byte scanned
    cdef readonly int64_t end_offset       # global offset after the last record taken
    cdef readonly int code                 # what stopped the scan (parse_record code, or RECORD_OK at max)
    cdef readonly object phys, size, tags_code, store_ts, queue_offset, queue_id, sys_flag, topic_idx
    cdef readonly object key_hash, key_phys, key_ts, key_record
    cdef readonly list topics


def scan_for_dispatch(data, int64_t base_offset, Py_ssize_t start=0, Py_ssize_t end=-1, int max_records=8192,
                      int max_keys=32768, bint check_crc=False, dict topic_ids=None, list topics=None,
                      delay_level_ms=None):
    """Scan ``data`` (a mapped file's readable bytes; byte 0 is global ``base_offset``) from ``start``.

    Stops at ``max_records``, when the key arrays are full, at end of data, at a blank record or at the first bad
    record (``code`` says which; ``end_offset`` is where the next scan starts). ``topic_ids``/``topics`` intern
    topic names across scans; ``delay_level_ms`` (level → ms, index 0 unused) turns the tagsCode of
    SCHEDULE_TOPIC_XXXX messages with a DELAY property into their delivery time, as RocketMQ does.
    """
    cdef const unsigned char[::1] buf = data
    cdef Py_ssize_t length = buf.shape[0]
    cdef Py_ssize_t pos
    cdef int n = 0, nk = 0, code = RECORD_OK, i
    cdef RecordView rv
    cdef const unsigned char *base
    cdef const unsigned char *rec
    cdef int32_t vpos = 0, vlen = 0, kstart, kend
    cdef unsigned char *scratch
    if end < 0 or end > length:
        end = length
    if start < 0 or start > end:
        raise ValueError(f"start {start} outside [0, {end}]")
    if topic_ids is None:
        topic_ids = {}
    if topics is None:
        topics = []

    phys_a = np.empty(max_records, np.int64)
    size_a = np.empty(max_records, np.int32)
    tags_a = np.empty(max_records, np.int64)
    ts_a = np.empty(max_records, np.int64)
    qo_a = np.empty(max_records, np.int64)
    qid_a = np.empty(max_records, np.int32)
    sf_a = np.empty(max_records, np.int32)
    tpos_a = np.empty(max_records, np.int64)     # record start, for topic interning
    kh_a = np.empty(max_keys, np.int32)
    kp_a = np.empty(max_keys, np.int64)
    kt_a = np.empty(max_keys, np.int64)
    kr_a = np.empty(max_keys, np.int32)
    cdef int64_t[::1] phys = phys_a, tags = tags_a, ts = ts_a, qo = qo_a, tpos = tpos_a, kp = kp_a, kt = kt_a
    cdef int32_t[::1] size = size_a, qid = qid_a, sf = sf_a, kh = kh_a, kr = kr_a

    scratch = <unsigned char *>malloc(KEY_SCRATCH)
    if scratch == NULL:
        raise MemoryError()
    pos = start
    base = &buf[0] if length > 0 else NULL
    try:
        with nogil:
            while n < max_records and base != NULL:
                rec = base + pos
                code = parse_record(rec, end - pos, &rv, check_crc)
                if code != RECORD_OK:
                    break
                # Reserve room for this record's keys first: a record never splits across batches.
                if (rv.sys_flag & TRANSACTION_ROLLBACK_TYPE) != TRANSACTION_ROLLBACK_TYPE:
                    kstart = nk
                    if find_property(rec + rv.props_pos, rv.props_len, "UNIQ_KEY", 8, &vpos, &vlen):
                        if nk >= max_keys:
                            break
                        kh[nk] = _index_hash(rec + rv.topic_pos, rv.topic_len, rec + rv.props_pos + vpos, vlen,
                                             scratch)
                        nk += 1
                    if find_property(rec + rv.props_pos, rv.props_len, "KEYS", 4, &vpos, &vlen):
                        kend = 0
                        i = 0
                        while i <= vlen:
                            if i == vlen or rec[rv.props_pos + vpos + i] == 32:
                                if i > kend:
                                    if nk >= max_keys:
                                        break
                                    kh[nk] = _index_hash(rec + rv.topic_pos, rv.topic_len,
                                                         rec + rv.props_pos + vpos + kend, i - kend, scratch)
                                    nk += 1
                                kend = i + 1
                            i += 1
                        if i <= vlen:      # key arrays full: leave this record for the next batch
                            nk = kstart
                            break
                    for i in range(kstart, nk):
                        kp[i] = base_offset + pos
                        kt[i] = rv.store_timestamp
                        kr[i] = n
                phys[n] = base_offset + pos
                size[n] = rv.total_size
                tags[n] = tags_code_of(rec + rv.props_pos, rv.props_len)
                ts[n] = rv.store_timestamp
                qo[n] = rv.queue_offset
                qid[n] = rv.queue_id
                sf[n] = rv.sys_flag
                tpos[n] = pos
                n += 1
                pos += rv.total_size
    finally:
        free(scratch)

    # Topic interning and the delay rule, with the GIL; a dict lookup only where the topic changes.
    topic_a = np.empty(n, np.int32)
    cdef int32_t[::1] tix = topic_a
    cdef const unsigned char *prev = NULL
    cdef int32_t prev_len = -1, prev_id = -1, tlen
    cdef bint is_schedule
    cdef int64_t level
    for i in range(n):
        rec = base + tpos[i]
        parse_record(rec, end - tpos[i], &rv, False)
        tlen = rv.topic_len
        if prev == NULL or tlen != prev_len or memcmp(rec + rv.topic_pos, prev, <size_t>tlen) != 0:
            tb = (<const char *>rec)[rv.topic_pos:rv.topic_pos + tlen]
            prev_id = topic_ids.get(tb, -1)
            if prev_id < 0:
                prev_id = len(topics)
                topic_ids[tb] = prev_id
                topics.append(tb.decode("utf-8", "replace"))
            prev = rec + rv.topic_pos
            prev_len = tlen
        tix[i] = prev_id
        if delay_level_ms is not None and tlen == 19 and memcmp(rec + rv.topic_pos, <const char *>_SCHEDULE_TOPIC_B,
                                                               19) == 0:
            if find_property(rec + rv.props_pos, rv.props_len, "DELAY", 5, &vpos, &vlen):
                try:
                    level = int((<const char *>rec)[rv.props_pos + vpos:rv.props_pos + vpos + vlen])
                except ValueError:
                    level = 0
                if level > len(delay_level_ms) - 1:
                    level = len(delay_level_ms) - 1
                if level > 0:
                    tags[i] = ts[i] + <int64_t>delay_level_ms[level]

    cdef DispatchBatch b = DispatchBatch.__new__(DispatchBatch)
    b.n = n
    b.nkeys = nk
    b.start_offset = base_offset + start
    b.end_offset = base_offset + pos
    b.code = code
    b.phys = phys_a[:n]
    b.size = size_a[:n]
    b.tags_code = tags_a[:n]
    b.store_ts = ts_a[:n]
    b.queue_offset = qo_a[:n]
    b.queue_id = qid_a[:n]
    b.sys_flag = sf_a[:n]
    b.topic_idx = topic_a
    b.key_hash = kh_a[:nk]
    b.key_phys = kp_a[:nk]
    b.key_ts = kt_a[:nk]
    b.key_record = kr_a[:nk]
    b.topics = topics
    return b
