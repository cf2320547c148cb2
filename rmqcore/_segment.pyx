# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Columnar decoding of commitlog segments, for rmqcore.spark: records → numpy arrays in Arrow's memory layout.

``decode_segment`` walks a segment (or a list of record positions in it) and returns one bounded batch of rows
as plain numpy arrays: fixed-width columns as int32/int64 arrays, variable-width ones as Arrow offsets + data
(+ validity bitmap) buffers, lists and maps as nested offsets. ``rmqcore.spark`` wraps them with
``pyarrow.Array.from_buffers`` without copying; this module never imports pyarrow (nor does the core package).

The per-record work runs without the GIL, in two passes over the same records: pass 1 validates each record
with ``parse_record`` (the one validator: every length is checked against totalSize and the bytes available, so a
hostile file cannot make us read out of bounds), applies the row filters and sums every output column's size;
then the output arrays are allocated once, at their exact sizes, and pass 2 fills them. No per-row Python
object is ever made.

Strings in Arrow (and Spark) must be UTF-8. Topics and properties come from untrusted bytes, so every string is
re-encoded as Python's ``bytes.decode("utf-8", "replace")`` would (each maximal invalid subpart → U+FFFD): the
same text rmqcore's MessageExt and the reference decoder give, never invalid UTF-8 handed to Spark.
"""
import numpy as np
cimport numpy as cnp

from libc.stdint cimport INT32_MAX, INT64_MAX, INT64_MIN, int32_t, int64_t, uint8_t, uint32_t
from libc.stdlib cimport free, malloc
from libc.string cimport memchr, memcmp, memcpy, memset

from rmqcore._c cimport rmq_find_byte, rmq_load_be16, rmq_load_be32, rmq_load_be64s
from rmqcore._codec cimport (BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, PHY_POS_POSITION,
                             ERR_BODY_CRC, ERR_RECORD_CRC, FLAG_BORNHOST_V6, RECORD_BLANK, RECORD_END, RECORD_OK,
                             RecordView, _Buffer, find_property, parse_record)

cnp.import_array()

# Public names, in column-bit order (bit i = 1 << i). rmqcore.spark maps its schema onto these.
SEGMENT_COLUMNS = (
    "topic", "queue_id", "queue_offset", "commitlog_offset", "store_size", "store_timestamp", "born_timestamp",
    "born_host", "store_host", "sys_flag", "flag", "reconsume_times", "prepared_transaction_offset", "body_crc",
    "crc_ok", "tags", "keys", "uniq_key", "properties", "body", "position",
)
COLUMN_BITS = {name: 1 << i for i, name in enumerate(SEGMENT_COLUMNS)}
ALL_COLUMNS = (1 << len(SEGMENT_COLUMNS)) - 1

# What stopped a batch (besides the parse_record error codes, which are negative).
BATCH_FULL = RECORD_OK      # max_rows or max_bytes reached: call again from ``next``
SEGMENT_BLANK = RECORD_BLANK  # the end-of-file blank record: the segment holds nothing more
SEGMENT_END = RECORD_END    # totalSize 0 or the end of the buffer: no more data

# Arrow offsets are int32: a batch's variable-width data must stay below 2 GiB per column. One row alone is
# below that (a record is at most INT32_MAX bytes and only properties/topic text can grow, by at most 3×, when
# invalid UTF-8 becomes U+FFFD), so capping the batch budget at 1 GiB keeps every column's offsets in range.
MAX_BATCH_BYTES = 1 << 30

cdef enum:
    # A properties string is at most 32767 bytes and a counted pair needs >= 4 ("k\x01v\x02"): <= 8192 pairs.
    MAX_PAIRS = 8192 + 8
    HASH_SLOTS = 16384                  # power of two, >= 2 × MAX_PAIRS: short probe chains
    HOST_MAX = 64                       # "[" + 39 (IPv6) + "]:-" + 10 digits < 64


cdef struct Pair:
    int32_t kpos
    int32_t klen
    int32_t vpos
    int32_t vlen


# Scratch for the properties parser: kept pairs, and a hash set (generation-stamped, so it is never cleared per
# record) that finds repeated names. One per call, allocated with malloc: calls may run in parallel threads.
cdef struct Scratch:
    Pair *pairs
    uint32_t *gen
    int32_t *slot
    uint32_t cur_gen


cdef int _scratch_init(Scratch *s) except -1:
    s.pairs = <Pair *>malloc(MAX_PAIRS * sizeof(Pair))
    s.gen = <uint32_t *>malloc(HASH_SLOTS * sizeof(uint32_t))
    s.slot = <int32_t *>malloc(HASH_SLOTS * sizeof(int32_t))
    if s.pairs == NULL or s.gen == NULL or s.slot == NULL:
        _scratch_free(s)
        raise MemoryError()
    memset(s.gen, 0, HASH_SLOTS * sizeof(uint32_t))
    s.cur_gen = 0
    return 0


cdef void _scratch_free(Scratch *s) noexcept:
    free(s.pairs)
    free(s.gen)
    free(s.slot)
    s.pairs = NULL
    s.gen = NULL
    s.slot = NULL


# ---------------------------------------------------------------------------------------------------------------
# UTF-8 repair

cdef int64_t _utf8_fix(const unsigned char *s, int64_t n, unsigned char *out) noexcept nogil:
    """Copy ``s`` to ``out`` (or only measure when ``out`` is NULL) as decode("utf-8", "replace") → encode.

    Python replaces each *maximal subpart* of an ill-formed sequence (a valid lead plus the continuation bytes
    that were valid for it so far) with one U+FFFD, and a byte that cannot start a sequence with one U+FFFD."""
    cdef int64_t i = 0, o = 0, j
    cdef int need
    cdef unsigned char c, c1, lo, hi
    # Fast path: ASCII prefix (topics, tags and keys almost always are ASCII).
    while i < n and s[i] < 0x80:
        i += 1
    if out != NULL and i > 0:
        memcpy(out, s, <size_t>i)
    o = i
    while i < n:
        c = s[i]
        if c < 0x80:
            if out != NULL:
                out[o] = c
            o += 1
            i += 1
            continue
        lo = 0x80
        hi = 0xBF
        if 0xC2 <= c <= 0xDF:
            need = 1
        elif c == 0xE0:
            need = 2
            lo = 0xA0          # no overlong 3-byte forms
        elif c == 0xED:
            need = 2
            hi = 0x9F          # no surrogates
        elif 0xE1 <= c <= 0xEF:
            need = 2
        elif c == 0xF0:
            need = 3
            lo = 0x90          # no overlong 4-byte forms
        elif c == 0xF4:
            need = 3
            hi = 0x8F          # nothing above U+10FFFF
        elif 0xF1 <= c <= 0xF3:
            need = 3
        else:
            need = 0           # 0x80..0xC1, 0xF5..0xFF cannot start a sequence
        j = 1
        if need > 0:
            while j <= need and i + j < n:
                c1 = s[i + j]
                if j == 1:
                    if c1 < lo or c1 > hi:
                        break
                elif c1 < 0x80 or c1 > 0xBF:
                    break
                j += 1
        if need > 0 and j > need:
            if out != NULL:
                memcpy(out + o, s + i, <size_t>(need + 1))
            o += need + 1
            i += need + 1
        else:
            if out != NULL:
                out[o] = 0xEF
                out[o + 1] = 0xBF
                out[o + 2] = 0xBD
            o += 3
            i += j             # the lead and the continuation bytes that were valid for it
    return o


def utf8_repair(data):
    """``bytes(data).decode("utf-8", "replace").encode()`` computed by the decoder's own routine (for tests)."""
    cdef const unsigned char[::1] v = bytes(data)
    cdef int64_t n = v.shape[0]
    if n == 0:
        return b""
    cdef int64_t m = _utf8_fix(&v[0], n, NULL)
    out = bytearray(m)
    cdef unsigned char[::1] o = out
    _utf8_fix(&v[0], n, &o[0])
    return bytes(out)


# ---------------------------------------------------------------------------------------------------------------
# Hosts: "a.b.c.d:port", or "[v6]:port" in Python's ipaddress text form (RFC 5952: lower-case hex without
# leading zeros, the first longest run of two or more zero groups as "::"), as MessageExt.born_host gives them.

cdef int _put_uint(char *out, uint32_t v) noexcept nogil:
    cdef char tmp[12]
    cdef int n = 0, i
    if v == 0:
        out[0] = 48
        return 1
    while v > 0:
        tmp[n] = <char>(48 + v % 10)
        v //= 10
        n += 1
    for i in range(n):
        out[i] = tmp[n - 1 - i]
    return n


cdef int _put_port(char *out, const unsigned char *p) noexcept nogil:
    # Java reads the port with getInt(): signed, so a corrupt high bit shows as a negative port
    cdef int32_t port = <int32_t>rmq_load_be32(p)
    if port < 0:
        out[0] = 45                               # '-'
        return 1 + _put_uint(out + 1, <uint32_t>0 - <uint32_t>port)
    return _put_uint(out, <uint32_t>port)


cdef int _put_hex(char *out, uint32_t v) noexcept nogil:
    cdef char tmp[8]
    cdef int n = 0, i
    cdef const char *digits = "0123456789abcdef"
    if v == 0:
        out[0] = 48
        return 1
    while v > 0:
        tmp[n] = digits[v & 15]
        v >>= 4
        n += 1
    for i in range(n):
        out[i] = tmp[n - 1 - i]
    return n


cdef int _host_fmt(const unsigned char *p, int32_t n, char *out) noexcept nogil:
    cdef int o = 0, i, best = -1, best_len = 0, run = 0, run_start = 0
    cdef uint32_t h[8]
    if n == 8:
        for i in range(4):
            o += _put_uint(out + o, p[i])
            out[o] = 46 if i < 3 else 58        # '.' between bytes, ':' before the port
            o += 1
        o += _put_port(out + o, p + 4)
        return o
    for i in range(8):
        h[i] = rmq_load_be16(p + 2 * i)
        if h[i] == 0:
            if run == 0:
                run_start = i
            run += 1
            if run > best_len:
                best_len = run
                best = run_start
        else:
            run = 0
    if best_len < 2:
        best = -1
    out[0] = 91                                  # '['
    o = 1
    i = 0
    while i < 8:
        if i == best:
            out[o] = 58
            out[o + 1] = 58
            o += 2
            i += best_len
            continue
        if i > 0 and i != best + best_len:
            out[o] = 58
            o += 1
        o += _put_hex(out + o, h[i])
        i += 1
    out[o] = 93                                  # ']'
    out[o + 1] = 58
    o += 2
    o += _put_port(out + o, p + 16)
    return o


def format_host(data):
    """The decoder's host text for 8 or 20 host bytes (for tests)."""
    cdef const unsigned char[::1] v = bytes(data)
    cdef char out[HOST_MAX]
    if v.shape[0] not in (8, 20):
        raise ValueError("host bytes must be 8 or 20 long")
    cdef int n = _host_fmt(&v[0], <int32_t>v.shape[0], out)
    return out[:n].decode("ascii")


# ---------------------------------------------------------------------------------------------------------------
# Properties: MessageDecoder.string2messageProperties into a map without a dict: pairs with a non-empty name and
# value count, and the last pair of a name wins (HashMap.put), so earlier duplicates are dropped.



cdef int32_t _props_pairs(const unsigned char *props, int32_t plen, Scratch *s) noexcept nogil:
    cdef int32_t index = 0, nxt, kv, m = 0, i, k, slot
    cdef uint32_t h
    cdef Pair *pp
    while index < plen and m < MAX_PAIRS:
        nxt = rmq_find_byte(props, index, plen, 2)
        if nxt < 0:
            nxt = plen
        kv = rmq_find_byte(props, index, plen, 1)
        if kv > index and kv < nxt - 1:
            s.pairs[m].kpos = index
            s.pairs[m].klen = kv - index
            s.pairs[m].vpos = kv + 1
            s.pairs[m].vlen = nxt - kv - 1
            m += 1
        index = nxt + 1
    if m <= 1:
        return m
    s.cur_gen += 1
    if s.cur_gen == 0:                            # stamps wrapped: forget them all once
        memset(s.gen, 0, HASH_SLOTS * sizeof(uint32_t))
        s.cur_gen = 1
    # Newest first: a name already in the set was seen later in the string, so this earlier pair loses.
    i = m - 1
    while i >= 0:
        pp = &s.pairs[i]
        h = 2166136261u                          # FNV-1a
        for k in range(pp.klen):
            h = (h ^ props[pp.kpos + k]) * 16777619u
        slot = <int32_t>(h & (HASH_SLOTS - 1))
        while s.gen[slot] == s.cur_gen:
            k = s.slot[slot]
            if s.pairs[k].klen == pp.klen and memcmp(props + s.pairs[k].kpos, props + pp.kpos,
                                                     <size_t>pp.klen) == 0:
                pp.klen = -1                     # dropped
                break
            slot = (slot + 1) & (HASH_SLOTS - 1)
        if pp.klen >= 0:
            s.gen[slot] = s.cur_gen
            s.slot[slot] = i
        i -= 1
    k = 0
    for i in range(m):
        if s.pairs[i].klen >= 0:
            s.pairs[k] = s.pairs[i]
            k += 1
    return k


# ---------------------------------------------------------------------------------------------------------------
# The decoder

cdef inline int64_t _ms_to_us(int64_t ms) noexcept nogil:
    # Spark timestamps are microseconds; saturate instead of overflowing on a hostile millisecond value.
    if ms > INT64_MAX // 1000:
        return INT64_MAX
    if ms < INT64_MIN // 1000:
        return INT64_MIN
    return ms * 1000


cdef inline void _bit_set(uint8_t *bits, int64_t i) noexcept nogil:
    bits[i >> 3] |= <uint8_t>(1 << (i & 7))


cdef struct Totals:
    int64_t topic, born_host, store_host, tags, uniq_key, body, key_items, key_bytes, props, prop_k, prop_v


cdef struct Filters:
    const unsigned char *topics       # concatenated topic bytes
    const int64_t *topic_off          # n_topics + 1 offsets into topics
    int32_t n_topics                  # -1: no topic filter
    const int32_t *queue_ids
    int32_t n_queue_ids               # -1: no queue filter
    int64_t min_ts                    # storeTimestamp window [min_ts, max_ts)
    int64_t max_ts


cdef inline bint _accept(const unsigned char *p, RecordView *rv, Filters *f) noexcept nogil:
    cdef int32_t i
    cdef bint hit
    if rv.store_timestamp < f.min_ts or rv.store_timestamp >= f.max_ts:
        return False
    if f.n_queue_ids >= 0:
        hit = False
        for i in range(f.n_queue_ids):
            if f.queue_ids[i] == rv.queue_id:
                hit = True
                break
        if not hit:
            return False
    if f.n_topics >= 0:
        hit = False
        for i in range(f.n_topics):
            if f.topic_off[i + 1] - f.topic_off[i] == rv.topic_len and memcmp(
                    f.topics + f.topic_off[i], p + rv.topic_pos, <size_t>rv.topic_len) == 0:
                hit = True
                break
        if not hit:
            return False
    return True


cdef int _parse_row(const unsigned char *p, int64_t avail, RowRef *row, bint check_crc) noexcept nogil:
    # parse_record decides; a CRC failure means the structure was fully valid (CRCs are checked last), so the
    # record is parsed again without them and returned as a row with crc_state 0 instead of stopping the walk.
    cdef int code = parse_record(p, avail, &row.rv, check_crc)
    if code == RECORD_OK:
        row.crc_state = 1 if check_crc else 2
        return RECORD_OK
    if code == ERR_BODY_CRC or code == ERR_RECORD_CRC:
        code = parse_record(p, avail, &row.rv, False)
        row.crc_state = 0
    return code


cdef int64_t _row_sizes(const unsigned char *p, RecordView *rv, int columns, Totals *t, Scratch *s) noexcept nogil:
    """Add one row's output sizes to ``t``; return its variable-width bytes (the batch budget)."""
    cdef int64_t add = 0, n, tok_start, i
    cdef int32_t vpos = 0, vlen = 0, m, j
    cdef char host[HOST_MAX]
    cdef const unsigned char *props = p + rv.props_pos
    cdef const unsigned char *v
    if columns & COL_TOPIC:
        n = _utf8_fix(p + rv.topic_pos, rv.topic_len, NULL)
        t.topic += n
        add += n
    if columns & COL_BORN_HOST:
        n = _host_fmt(p + rv.born_host_pos, rv.born_host_len, host)
        t.born_host += n
        add += n
    if columns & COL_STORE_HOST:
        n = _host_fmt(p + rv.store_host_pos, rv.store_host_len, host)
        t.store_host += n
        add += n
    if (columns & COL_TAGS) and find_property(props, rv.props_len, "TAGS", 4, &vpos, &vlen):
        n = _utf8_fix(props + vpos, vlen, NULL)
        t.tags += n
        add += n
    if (columns & COL_UNIQ_KEY) and find_property(props, rv.props_len, "UNIQ_KEY", 8, &vpos, &vlen):
        n = _utf8_fix(props + vpos, vlen, NULL)
        t.uniq_key += n
        add += n
    if (columns & COL_KEYS) and find_property(props, rv.props_len, "KEYS", 4, &vpos, &vlen):
        v = props + vpos
        tok_start = 0
        for i in range(vlen + 1):
            if i == vlen or v[i] == 32:
                if i > tok_start:
                    n = _utf8_fix(v + tok_start, i - tok_start, NULL)
                    t.key_items += 1
                    t.key_bytes += n
                    add += n
                tok_start = i + 1
    if columns & COL_PROPERTIES:
        m = _props_pairs(props, rv.props_len, s)
        t.props += m
        for j in range(m):
            n = _utf8_fix(props + s.pairs[j].kpos, s.pairs[j].klen, NULL)
            t.prop_k += n
            add += n
            n = _utf8_fix(props + s.pairs[j].vpos, s.pairs[j].vlen, NULL)
            t.prop_v += n
            add += n
    if columns & COL_BODY:
        t.body += rv.body_len
        add += rv.body_len
    return add


cdef inline void _put_str(const unsigned char *src, int64_t n, unsigned char *data, int32_t *offsets,
                          int64_t *cursor, int64_t row) noexcept nogil:
    cursor[0] += _utf8_fix(src, n, data + cursor[0])
    offsets[row + 1] = <int32_t>cursor[0]


cdef class _Out:
    # The output arrays of one batch; typed views for pass 2, the numpy objects for the caller.
    cdef dict arrays
    cdef int32_t[::1] queue_id, store_size, sys_flag, flag, reconsume_times, body_crc
    cdef int64_t[::1] queue_offset, commitlog_offset, store_ts, born_ts, prepared, position
    cdef uint8_t[::1] crc_values, crc_valid
    cdef int32_t[::1] topic_off, born_off, store_off, tags_off, uniq_off, body_off
    cdef uint8_t[::1] topic_data, born_data, store_data, tags_data, uniq_data, body_data, tags_valid, uniq_valid
    cdef int32_t[::1] keys_off, key_off
    cdef uint8_t[::1] key_data
    cdef int32_t[::1] props_off, pk_off, pv_off
    cdef uint8_t[::1] pk_data, pv_data


cdef object _alloc(dict arrays, str name, Py_ssize_t n, dtype, bint zero=False):
    a = np.zeros(n, dtype=dtype) if zero else np.empty(n, dtype=dtype)
    arrays[name] = a
    return a


cdef inline Py_ssize_t _bitmap_len(Py_ssize_t n):
    return (n + 7) // 8


cdef _Out _allocate(int columns, Py_ssize_t n, Totals *t):
    cdef _Out o = _Out()
    cdef dict a = {}
    o.arrays = a
    cdef Py_ssize_t nb = max(1, _bitmap_len(n))
    # Every view needs a non-empty array behind it; the unused ones get a one-element dummy.
    dummy32 = np.zeros(1, dtype=np.int32)
    dummy64 = np.zeros(1, dtype=np.int64)
    dummy8 = np.zeros(1, dtype=np.uint8)
    o.queue_id = _alloc(a, "queue_id", n, np.int32) if columns & COL_QUEUE_ID and n else dummy32
    o.store_size = _alloc(a, "store_size", n, np.int32) if columns & COL_STORE_SIZE and n else dummy32
    o.sys_flag = _alloc(a, "sys_flag", n, np.int32) if columns & COL_SYS_FLAG and n else dummy32
    o.flag = _alloc(a, "flag", n, np.int32) if columns & COL_FLAG and n else dummy32
    o.reconsume_times = _alloc(a, "reconsume_times", n, np.int32) if columns & COL_RECONSUME_TIMES and n else dummy32
    o.body_crc = _alloc(a, "body_crc", n, np.int32) if columns & COL_BODY_CRC and n else dummy32
    o.queue_offset = _alloc(a, "queue_offset", n, np.int64) if columns & COL_QUEUE_OFFSET and n else dummy64
    o.commitlog_offset = (_alloc(a, "commitlog_offset", n, np.int64) if columns & COL_COMMITLOG_OFFSET and n
                          else dummy64)
    o.store_ts = _alloc(a, "store_timestamp", n, np.int64) if columns & COL_STORE_TIMESTAMP and n else dummy64
    o.born_ts = _alloc(a, "born_timestamp", n, np.int64) if columns & COL_BORN_TIMESTAMP and n else dummy64
    o.prepared = (_alloc(a, "prepared_transaction_offset", n, np.int64)
                  if columns & COL_PREPARED_TRANSACTION_OFFSET and n else dummy64)
    o.position = _alloc(a, "position", n, np.int64) if columns & COL_POSITION and n else dummy64
    if columns & COL_CRC_OK:
        o.crc_values = _alloc(a, "crc_ok.values", nb, np.uint8, True)
        o.crc_valid = _alloc(a, "crc_ok.validity", nb, np.uint8, True)
    else:
        o.crc_values = o.crc_valid = dummy8
    o.topic_off, o.topic_data = _strcol(a, "topic", columns & COL_TOPIC, n, t.topic)
    o.born_off, o.born_data = _strcol(a, "born_host", columns & COL_BORN_HOST, n, t.born_host)
    o.store_off, o.store_data = _strcol(a, "store_host", columns & COL_STORE_HOST, n, t.store_host)
    o.tags_off, o.tags_data = _strcol(a, "tags", columns & COL_TAGS, n, t.tags)
    o.uniq_off, o.uniq_data = _strcol(a, "uniq_key", columns & COL_UNIQ_KEY, n, t.uniq_key)
    o.body_off, o.body_data = _strcol(a, "body", columns & COL_BODY, n, t.body)
    o.tags_valid = _alloc(a, "tags.validity", nb, np.uint8, True) if columns & COL_TAGS else dummy8
    o.uniq_valid = _alloc(a, "uniq_key.validity", nb, np.uint8, True) if columns & COL_UNIQ_KEY else dummy8
    if columns & COL_KEYS:
        o.keys_off = _alloc(a, "keys.offsets", n + 1, np.int32, True)
        o.key_off, o.key_data = _strcol(a, "keys.item", True, t.key_items, t.key_bytes)
    else:
        o.keys_off = o.key_off = dummy32
        o.key_data = dummy8
    if columns & COL_PROPERTIES:
        o.props_off = _alloc(a, "properties.offsets", n + 1, np.int32, True)
        o.pk_off, o.pk_data = _strcol(a, "properties.key", True, t.props, t.prop_k)
        o.pv_off, o.pv_data = _strcol(a, "properties.value", True, t.props, t.prop_v)
    else:
        o.props_off = o.pk_off = o.pv_off = dummy32
        o.pk_data = o.pv_data = dummy8
    return o


cdef tuple _strcol(dict a, str name, bint wanted, Py_ssize_t n, int64_t nbytes):
    if not wanted:
        return np.zeros(1, dtype=np.int32), np.zeros(1, dtype=np.uint8)
    off = _alloc(a, name + ".offsets", n + 1, np.int32, True)
    data = _alloc(a, name + ".data", max(1, nbytes), np.uint8)
    return off, data


cdef void _fill(const unsigned char *base, RowRef *rows, int64_t n, int columns, int64_t base_offset, _Out o,
                Scratch *s) noexcept nogil:
    cdef int64_t r, i, tok_start
    cdef int64_t c_topic = 0, c_born = 0, c_store = 0, c_tags = 0, c_uniq = 0, c_body = 0, c_key = 0, c_pk = 0
    cdef int64_t c_pv = 0, n_keys = 0, n_props = 0
    cdef int32_t vpos = 0, vlen = 0, m, j
    cdef const unsigned char *p
    cdef const unsigned char *props
    cdef const unsigned char *v
    cdef RecordView *rv
    cdef char host[HOST_MAX]
    cdef int hn
    for r in range(n):
        p = base + rows[r].pos
        rv = &rows[r].rv
        props = p + rv.props_pos
        if columns & COL_QUEUE_ID:
            o.queue_id[r] = rv.queue_id
        if columns & COL_STORE_SIZE:
            o.store_size[r] = rv.total_size
        if columns & COL_SYS_FLAG:
            o.sys_flag[r] = rv.sys_flag
        if columns & COL_FLAG:
            o.flag[r] = rv.flag
        if columns & COL_RECONSUME_TIMES:
            o.reconsume_times[r] = rv.reconsume_times
        if columns & COL_BODY_CRC:
            o.body_crc[r] = rv.body_crc
        if columns & COL_QUEUE_OFFSET:
            o.queue_offset[r] = rv.queue_offset
        if columns & COL_COMMITLOG_OFFSET:
            o.commitlog_offset[r] = rv.physical_offset
        if columns & COL_STORE_TIMESTAMP:
            o.store_ts[r] = _ms_to_us(rv.store_timestamp)
        if columns & COL_BORN_TIMESTAMP:
            o.born_ts[r] = _ms_to_us(rv.born_timestamp)
        if columns & COL_PREPARED_TRANSACTION_OFFSET:
            o.prepared[r] = rv.prepared_transaction_offset
        if columns & COL_POSITION:
            o.position[r] = base_offset + rows[r].pos
        if columns & COL_CRC_OK:
            if rows[r].crc_state != 2:
                _bit_set(&o.crc_valid[0], r)
                if rows[r].crc_state == 1:
                    _bit_set(&o.crc_values[0], r)
        if columns & COL_TOPIC:
            _put_str(p + rv.topic_pos, rv.topic_len, &o.topic_data[0], &o.topic_off[0], &c_topic, r)
        if columns & COL_BORN_HOST:
            hn = _host_fmt(p + rv.born_host_pos, rv.born_host_len, host)
            _put_str(<const unsigned char *>host, hn, &o.born_data[0], &o.born_off[0], &c_born, r)
        if columns & COL_STORE_HOST:
            hn = _host_fmt(p + rv.store_host_pos, rv.store_host_len, host)
            _put_str(<const unsigned char *>host, hn, &o.store_data[0], &o.store_off[0], &c_store, r)
        if columns & COL_TAGS:
            if find_property(props, rv.props_len, "TAGS", 4, &vpos, &vlen):
                _bit_set(&o.tags_valid[0], r)
                _put_str(props + vpos, vlen, &o.tags_data[0], &o.tags_off[0], &c_tags, r)
            else:
                o.tags_off[r + 1] = <int32_t>c_tags
        if columns & COL_UNIQ_KEY:
            if find_property(props, rv.props_len, "UNIQ_KEY", 8, &vpos, &vlen):
                _bit_set(&o.uniq_valid[0], r)
                _put_str(props + vpos, vlen, &o.uniq_data[0], &o.uniq_off[0], &c_uniq, r)
            else:
                o.uniq_off[r + 1] = <int32_t>c_uniq
        if columns & COL_KEYS:
            if find_property(props, rv.props_len, "KEYS", 4, &vpos, &vlen):
                v = props + vpos
                tok_start = 0
                for i in range(vlen + 1):
                    if i == vlen or v[i] == 32:
                        if i > tok_start:
                            _put_str(v + tok_start, i - tok_start, &o.key_data[0], &o.key_off[0], &c_key, n_keys)
                            n_keys += 1
                        tok_start = i + 1
            o.keys_off[r + 1] = <int32_t>n_keys
        if columns & COL_PROPERTIES:
            m = _props_pairs(props, rv.props_len, s)
            for j in range(m):
                _put_str(props + s.pairs[j].kpos, s.pairs[j].klen, &o.pk_data[0], &o.pk_off[0], &c_pk, n_props)
                _put_str(props + s.pairs[j].vpos, s.pairs[j].vlen, &o.pv_data[0], &o.pv_off[0], &c_pv, n_props)
                n_props += 1
            o.props_off[r + 1] = <int32_t>n_props
        if columns & COL_BODY:
            memcpy(&o.body_data[0] + c_body, p + rv.body_pos, <size_t>rv.body_len)
            c_body += rv.body_len
            o.body_off[r + 1] = <int32_t>c_body


def decode_segment(data, Py_ssize_t start=0, Py_ssize_t end=-1, int64_t base_offset=0, int columns=ALL_COLUMNS,
                   int max_rows=8192, int64_t max_bytes=16 << 20, bint check_crc=True, topics=None,
                   queue_ids=None, int64_t min_timestamp=INT64_MIN, int64_t max_timestamp=INT64_MAX,
                   positions=None, Py_ssize_t stop=-1):
    """Decode one bounded batch of rows from ``data`` (a segment's bytes; byte 0 is global ``base_offset``).

    Walk mode (``positions`` None): records are walked from ``start`` to ``end`` (the buffer end when < 0).
    ``stop`` (walk mode, ``end`` when < 0): only records that *start* before it are read; they may reach past
    it up to ``end``. A split of a segment is [start, stop) with ``start`` a record start (``sync_record``):
    consecutive splits then read every record exactly once.
    Point mode: ``positions`` (int64 array of record starts inside ``data``) are read from index ``start``;
    ``next`` is then an index into ``positions``.

    Rows are kept when their topic is in ``topics`` (bytes), queue id in ``queue_ids`` and storeTimestamp in
    ``[min_timestamp, max_timestamp)`` (ms); the others are skipped before anything is copied.
    A batch stops after ``max_rows`` rows or once its variable-width data would pass ``max_bytes`` (one row
    always fits). A record whose structure is valid but whose CRC is not is a row with crc_ok false.

    Returns a dict: ``n`` rows, ``next`` (where to continue), ``code`` (BATCH_FULL: call again; SEGMENT_END /
    SEGMENT_BLANK: nothing more; negative: parse_record's error code for the record at ``next``, which is not
    decoded), ``scanned`` (records walked, filtered ones included) and ``arrays``: name → numpy array, with
    Arrow's layout: ``X`` for fixed-width columns (timestamps in µs), ``X.offsets``/``X.data``/``X.validity``
    for strings and binary, ``keys.offsets`` + ``keys.item.*``, ``properties.offsets`` + ``properties.key.*`` +
    ``properties.value.*``, ``crc_ok.values``/``crc_ok.validity`` as bitmaps (LSB first).
    """
    cdef _Buffer b = _Buffer()
    cdef const unsigned char *base
    cdef Py_ssize_t buf_len
    cdef RowRef *rows = NULL
    cdef Scratch scratch
    cdef Totals t
    cdef Filters f
    cdef RowRef cur
    cdef int64_t pos, n = 0, scanned = 0, used = 0, add, budget, npos = 0, k
    cdef int code = RECORD_END
    cdef bint point_mode = positions is not None
    cdef const int64_t[::1] pos_view
    cdef const int64_t[::1] topic_off_view
    cdef const int32_t[::1] qid_view
    cdef const unsigned char[::1] topic_view
    cdef _Out out
    if max_rows <= 0:
        raise ValueError(f"max_rows must be > 0, got {max_rows}")
    budget = max(1, min(max_bytes, MAX_BATCH_BYTES))
    b.acquire(data)
    base = <const unsigned char *>b.view.buf
    buf_len = b.view.len
    if end < 0 or end > buf_len:
        end = buf_len
    memset(&t, 0, sizeof(Totals))
    memset(&f, 0, sizeof(Filters))
    f.min_ts = min_timestamp
    f.max_ts = max_timestamp
    f.n_topics = -1
    f.n_queue_ids = -1
    if topics is not None:
        tlist = [bytes(x) for x in topics]
        joined = b"".join(tlist) + b"\0"
        offs = np.zeros(len(tlist) + 1, dtype=np.int64)
        offs[1:] = np.cumsum([len(x) for x in tlist]) if tlist else []
        topic_view = joined
        topic_off_view = offs
        f.topics = &topic_view[0]
        f.topic_off = &topic_off_view[0]
        f.n_topics = <int32_t>len(tlist)
    if queue_ids is not None:
        qids = np.ascontiguousarray(np.append(np.asarray(list(queue_ids), dtype=np.int32), np.int32(0)))
        qid_view = qids
        f.queue_ids = &qid_view[0]
        f.n_queue_ids = <int32_t>(len(qids) - 1)
    if point_mode:
        parr = np.ascontiguousarray(np.append(np.asarray(positions, dtype=np.int64), np.int64(0)))
        pos_view = parr
        npos = len(parr) - 1
        if start < 0 or start > npos:
            raise ValueError(f"start {start} outside [0, {npos}] positions")
    elif start < 0 or start > end:
        raise ValueError(f"start {start} outside [0, {end}]")
    if stop < 0 or stop > end:
        stop = end
    rows = <RowRef *>malloc(max_rows * sizeof(RowRef))
    if rows == NULL:
        raise MemoryError()
    try:
        _scratch_init(&scratch)
        try:
            pos = start
            with nogil:
                # Pass 1: validate, filter, measure.
                while n < max_rows:
                    if point_mode:
                        if pos >= npos:
                            code = RECORD_END
                            break
                        k = pos_view[pos]
                        if k < 0 or k >= end:
                            code = -1            # ERR_TRUNCATED: a position outside the data
                            break
                        code = _parse_row(base + k, end - k, &cur, check_crc)
                        cur.pos = k
                        if code != RECORD_OK:
                            # Only records count here: blank or end markers at a position are errors too.
                            if code == RECORD_BLANK or code == RECORD_END:
                                code = -2        # ERR_MAGIC
                            break
                    else:
                        if pos >= stop:
                            code = RECORD_END    # the next record belongs to the next split
                            break
                        code = _parse_row(base + pos, end - pos, &cur, check_crc)
                        cur.pos = pos
                        if code != RECORD_OK:
                            break
                    scanned += 1
                    if _accept(base + cur.pos, &cur.rv, &f):
                        add = _row_sizes(base + cur.pos, &cur.rv, columns, &t, &scratch)
                        if n > 0 and used + add > budget:
                            # This row starts the next batch: undo its sizes by re-measuring next call.
                            _row_sizes_undo(base + cur.pos, &cur.rv, columns, &t, &scratch)
                            scanned -= 1
                            code = RECORD_OK
                            break
                        used += add
                        rows[n] = cur
                        n += 1
                    pos += 1 if point_mode else cur.rv.total_size
                else:
                    code = RECORD_OK
            out = _allocate(columns, n, &t)
            with nogil:
                _fill(base, rows, n, columns, base_offset, out, &scratch)
        finally:
            _scratch_free(&scratch)
    finally:
        free(rows)
    if code == RECORD_OK and not point_mode and pos >= stop:
        code = RECORD_END
    if code == RECORD_OK and point_mode and pos >= npos:
        code = RECORD_END
    return {"n": n, "next": pos, "code": code, "scanned": scanned, "arrays": out.arrays}


cdef void _row_sizes_undo(const unsigned char *p, RecordView *rv, int columns, Totals *t, Scratch *s) noexcept nogil:
    # Subtract what _row_sizes added for a row that did not fit (measured again: cheaper than keeping a copy of
    # Totals per row, and it only happens once per batch).
    cdef Totals d
    memset(&d, 0, sizeof(Totals))
    _row_sizes(p, rv, columns, &d, s)
    t.topic -= d.topic
    t.born_host -= d.born_host
    t.store_host -= d.store_host
    t.tags -= d.tags
    t.uniq_key -= d.uniq_key
    t.body -= d.body
    t.key_items -= d.key_items
    t.key_bytes -= d.key_bytes
    t.props -= d.props
    t.prop_k -= d.prop_k
    t.prop_v -= d.prop_v


# ---------------------------------------------------------------------------------------------------------------
# Header probes and verification

def first_store_timestamp(data, Py_ssize_t start=0):
    """storeTimestamp (ms) of the record at ``start``, or None when no valid record starts there (time pruning:
    a segment's first record bounds the times of everything in it)."""
    cdef _Buffer b = _Buffer()
    cdef RecordView rv
    cdef int code
    b.acquire(data)
    if start < 0 or start >= b.view.len:
        return None
    code = parse_record(<const unsigned char *>b.view.buf + start, b.view.len - start, &rv, False)
    return rv.store_timestamp if code == RECORD_OK else None


def verify_segment(data, int64_t base_offset=0, Py_ssize_t end=-1, bint check_crc=True, int max_bad=1000):
    """Walk every record of a segment checking structure and CRCs (GIL released).

    A CRC failure is recorded and the walk goes on (the structure, hence the next record's start, is sound);
    a structural failure is recorded and ends the walk (nothing after it can be located). After the end of
    data (totalSize 0) every remaining byte must be zero: anything else is data the walk could not reach.

    Returns a dict: ``records`` (valid structure), ``bytes`` (end of the last record), ``code`` (what ended the
    walk: SEGMENT_END, SEGMENT_BLANK or a negative parse_record code), ``bad``: a list of
    ``(global offset, code)`` (at most ``max_bad``; ``bad_total`` counts all), ``stray`` (global offset of the
    first non-zero byte after the end of data, or -1), ``first_timestamp``/``last_timestamp`` (ms, or None).
    """
    cdef _Buffer b = _Buffer()
    cdef const unsigned char *base
    cdef Py_ssize_t n
    cdef RowRef cur
    cdef int64_t pos = 0, records = 0, bad_total = 0, stray = -1, first_ts = 0, last_ts = 0, i
    cdef int code = RECORD_END
    cdef int64_t *bad_off = NULL
    cdef int *bad_code = NULL
    cdef int nbad = 0
    b.acquire(data)
    base = <const unsigned char *>b.view.buf
    n = b.view.len if end < 0 or end > b.view.len else end
    if max_bad < 1:
        max_bad = 1
    bad_off = <int64_t *>malloc(max_bad * sizeof(int64_t))
    bad_code = <int *>malloc(max_bad * sizeof(int))
    if bad_off == NULL or bad_code == NULL:
        free(bad_off)
        free(bad_code)
        raise MemoryError()
    try:
        with nogil:
            while True:
                code = _parse_row(base + pos, n - pos, &cur, check_crc)
                if code != RECORD_OK:
                    if code < 0:
                        if nbad < max_bad:
                            bad_off[nbad] = base_offset + pos
                            bad_code[nbad] = code
                            nbad += 1
                        bad_total += 1
                    break
                if cur.crc_state == 0:
                    if nbad < max_bad:
                        bad_off[nbad] = base_offset + pos
                        bad_code[nbad] = ERR_BODY_CRC if _body_crc_bad(base + pos, &cur.rv) else ERR_RECORD_CRC
                        nbad += 1
                    bad_total += 1
                if records == 0:
                    first_ts = cur.rv.store_timestamp
                last_ts = cur.rv.store_timestamp
                records += 1
                pos += cur.rv.total_size
            if code == RECORD_END:
                for i in range(pos, n):
                    if base[i] != 0:
                        stray = base_offset + i
                        break
        bad = [(bad_off[i], bad_code[i]) for i in range(nbad)]
    finally:
        free(bad_off)
        free(bad_code)
    return {"records": records, "bytes": pos, "code": code, "bad": bad, "bad_total": bad_total, "stray": stray,
            "first_timestamp": first_ts if records else None, "last_timestamp": last_ts if records else None}


cdef bint _body_crc_bad(const unsigned char *p, RecordView *rv) noexcept nogil:
    # Which CRC failed, for the report: parse_record with CRCs on says ERR_BODY_CRC before it looks at __CRC32#.
    cdef RecordView tmp
    return parse_record(p, rv.total_size, &tmp, True) == ERR_BODY_CRC


# ---------------------------------------------------------------------------------------------------------------
# Split points: finding record starts inside a segment without walking it from its first byte

cdef enum:
    _SYNC_FOUND = 0
    _SYNC_NONE = 1
    _SYNC_MORE = 2

# sync_record statuses
SYNC_FOUND = _SYNC_FOUND    # a record (or the end-of-file blank) starts at the returned position
SYNC_NONE = _SYNC_NONE      # no record starts in [start, stop)
SYNC_MORE = _SYNC_MORE      # a candidate at the returned position needs bytes past the buffer: read on from there


cdef inline bint _is_magic(int32_t m) noexcept nogil:
    return m == MESSAGE_MAGIC_CODE or m == MESSAGE_MAGIC_CODE_V2 or m == BLANK_MAGIC_CODE


cdef int _header_fits(const unsigned char *p, int64_t q, int64_t n, bint more_after, int64_t base_offset,
                      int64_t file_end) noexcept nogil:
    """Is a plausible record header (or the end of data) at buffer position ``q``? 1 yes, 0 no, 2 need more."""
    cdef int32_t total, magic
    if q >= n:
        return 2 if more_after else 1
    if n - q < 4:
        return 2 if more_after else 0
    total = <int32_t>rmq_load_be32(p + q)
    if total == 0:
        return 1                                   # end of data
    if n - q < PHY_POS_POSITION + 8:
        return 2 if more_after else 0
    magic = <int32_t>rmq_load_be32(p + q + 4)
    if magic == BLANK_MAGIC_CODE:
        return 1 if total >= 8 and q + total == file_end else 0
    if magic != MESSAGE_MAGIC_CODE and magic != MESSAGE_MAGIC_CODE_V2:
        return 0
    if total < 0 or q + total > file_end:
        return 0
    return 1 if rmq_load_be64s(p + q + PHY_POS_POSITION) == base_offset + q else 0


def sync_record(data, Py_ssize_t start, Py_ssize_t stop, int64_t base_offset, Py_ssize_t file_end=-1,
                bint more_after=False):
    """The first record start at or after ``start`` and before ``stop`` in ``data`` (byte 0 = global
    ``base_offset``): how a split of a segment finds where its records begin (GIL released).

    A position is a record start when the record there is structurally sound (``parse_record``, lengths
    consistent with totalSize) *and* stores its own global offset in its physicalOffset field, *and* what
    follows it is again such a header, the end of data (totalSize 0) or the end-of-file blank; a blank
    qualifies when its totalSize reaches exactly ``file_end`` (the file's length in ``data``'s coordinates;
    the buffer length when < 0). Bytes inside a body would have to forge two consecutive headers naming their
    own offsets to pass. CRCs are not required (a record with a bad body CRC is still a record: the reader
    reports it as a row with crc_ok false).

    ``more_after``: the buffer is a window and the file goes on past it. Returns ``(position, status)``:
    SYNC_FOUND, SYNC_NONE (position = stop) or SYNC_MORE (a candidate at ``position`` needs bytes past the
    buffer: read a window starting there).
    """
    cdef _Buffer b = _Buffer()
    cdef const unsigned char *p
    cdef Py_ssize_t n, i, hit = -1
    cdef int status = _SYNC_NONE, nxt, code
    cdef int32_t total, magic
    cdef RecordView rv
    b.acquire(data)
    p = <const unsigned char *>b.view.buf
    n = b.view.len
    if file_end < 0:
        file_end = n
    if stop < 0 or stop > file_end:
        stop = file_end
    if start < 0:
        raise ValueError(f"start {start} < 0")
    with nogil:
        i = start
        while i < stop:
            if i + 8 > n:
                if more_after:
                    status = _SYNC_MORE
                    hit = i
                break
            magic = <int32_t>rmq_load_be32(p + i + 4)
            if not _is_magic(magic):
                i += 1
                continue
            total = <int32_t>rmq_load_be32(p + i)
            if magic == BLANK_MAGIC_CODE:
                if total >= 8 and i + total == file_end:
                    status = _SYNC_FOUND
                    hit = i
                    break
                i += 1
                continue
            if total <= 0 or i + total > file_end:
                i += 1
                continue
            if i + total > n:
                if more_after:
                    status = _SYNC_MORE
                    hit = i
                    break
                i += 1
                continue
            code = parse_record(p + i, total, &rv, False)
            if code != RECORD_OK or rv.physical_offset != base_offset + i:
                i += 1
                continue
            nxt = _header_fits(p, i + total, n, more_after, base_offset, file_end)
            if nxt == 1:
                status = _SYNC_FOUND
                hit = i
                break
            if nxt == 2:
                status = _SYNC_MORE
                hit = i
                break
            i += 1
    if hit < 0:
        return stop, SYNC_NONE
    return hit, status


def data_end(data, Py_ssize_t start=0):
    """Where the record chain that starts at ``start`` ends: the position after the last complete record
    (structure sound, and the last one's CRC too: a writer may have stored its size before its body), or the
    buffer length when the chain ends with the end-of-file blank. A snapshot of a live segment (GIL released)."""
    cdef _Buffer b = _Buffer()
    cdef const unsigned char *p
    cdef Py_ssize_t n, pos, last = -1
    cdef int code = RECORD_END
    cdef RecordView rv
    b.acquire(data)
    p = <const unsigned char *>b.view.buf
    n = b.view.len
    pos = start
    with nogil:
        while pos < n:
            code = parse_record(p + pos, n - pos, &rv, False)
            if code != RECORD_OK:
                break
            last = pos
            pos += rv.total_size
        if code == RECORD_BLANK:
            pos = n
        elif last >= 0 and parse_record(p + last, n - last, &rv, True) != RECORD_OK:
            pos = last
    return pos
