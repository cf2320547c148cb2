# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Delayed delivery in bulk: the records of due SCHEDULE_TOPIC_XXXX units, rebuilt as RocketMQ's messageTimeup
builds them, straight into an EncodeBuffer that the commitlog writer then appends (no Python object per message).

``time_up_into`` reads each due unit's raw record from the commitlog files and writes the record that
``ScheduleMessageService``'s per-message path (decode into a MessageExt, ``Message(...)``, ``put_delivered``) writes
for it, byte for byte: the same v1 record, topic and queue from REAL_TOPIC / REAL_QID, the properties in the same
order (``MessageDecoder.string2messageProperties``'s map: a name keeps its first place and takes its last value;
pairs with an empty name or value dropped) without DELAY, TIMER_DELIVER_MS and TIMER_DELAY_SEC, a generated
UNIQ_KEY last when there is none, then the 5.x ``__CRC32#`` placeholder when the store writes it; flag, sysFlag,
born time and host, reconsume times kept; prepared offset 0; the store's host; the body CRC computed again. The
queue offset, physical offset, store time and record CRC are set by the writer at append, as for every put.

A record this cannot rebuild exactly the way that path does (no or unparsable REAL_TOPIC / REAL_QID, the half
topic, a topic the store refuses (over 127 bytes; any characters are taken, as put_delivered takes them), a
value the encoder refuses, a size over a limit, properties that are not UTF-8 or have more than ``MAX_PAIRS``
pairs, a timer property that reroutes the message again) is left to that path: a run of them
is reported to the caller instead of being encoded, so order is kept.
"""
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport INT64_MIN, int32_t, int64_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcmp, memcpy

from rmqcore._c cimport rmq_crc32, rmq_find_byte, rmq_load_be32, rmq_load_be64, rmq_store_be16, rmq_store_be32, \
    rmq_store_be64
from rmqcore._codec cimport (CRC32_RESERVED_LEN, FLAG_BORNHOST_V6, FLAG_STOREHOSTADDRESS_V6, MESSAGE_MAGIC_CODE,
                             cal_msg_length_c, next_pair, now_ms, put_crc_placeholder, put_pair,
                             TRANSACTION_ROLLBACK_TYPE, RecordView, find_property, parse_record)
from rmqcore._encoder cimport EncodeBuffer, EncodedRecord
from rmqcore._pull cimport _RecordFinder

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize_ "PyUnicode_AsUTF8AndSize" (object s, Py_ssize_t *size) except NULL


MAX_PAIRS = 64                       # more property pairs than this: the per-message path (duplicate names cost n²)
cdef enum:
    C_MAX_PAIRS = 64
    TOPIC_MAX_LENGTH = 127
    PROPERTIES_MAX_LENGTH = 32767
    INT32_MAX_ = 2147483647

# What _plan found for a unit.
cdef enum:
    PLAN_FAST = 0        # rebuilt here
    PLAN_SLOW = 1        # the per-message path must handle it
    PLAN_MISSING = 2     # no whole valid record of the unit's size there: skipped, as select_messages skips it

cdef struct Plan:
    const unsigned char *rec          # the source record
    RecordView rv
    int32_t npairs                    # pairs[] of the source properties: name pos/len, value pos/len
    int32_t pairs[C_MAX_PAIRS][4]
    int32_t emit[C_MAX_PAIRS]         # emit[j]: the pair whose value name j takes (-1: name j is not written)
    int32_t topic_pair                # REAL_TOPIC's pair
    int32_t queue_id
    int32_t props_n                   # the new properties' length
    bint uniq                         # the source has a UNIQ_KEY


cdef inline bint _is(const unsigned char *p, int32_t n, const char *name, int32_t name_n) noexcept nogil:
    return n == name_n and memcmp(p, name, <size_t>n) == 0


cdef bint _java_int(const unsigned char *p, int32_t n, int32_t *out) noexcept nogil:
    # Integer.parseInt as rmqcore.schedule.parse_java_int: an optional sign, ASCII digits, within int32.
    cdef int32_t i = 0
    cdef bint neg = False
    cdef int64_t v = 0
    if n > 0 and (p[0] == 43 or p[0] == 45):
        neg = p[0] == 45
        i = 1
    if i >= n:
        return False
    while i < n:
        if p[i] < 48 or p[i] > 57:
            return False
        v = v * 10 + (p[i] - 48)
        if v > <int64_t>INT32_MAX_ + 1:
            return False
        i += 1
    if neg:
        v = -v
    if v > INT32_MAX_:
        return False
    out[0] = <int32_t>v
    return True


cdef int _plan(Plan *pl, bint append_prop_crc, bint reroute, int32_t max_message_size, int32_t store_len,
               bint timer) except -1:
    # messageTimeup's decisions (``timer``: the timer wheel's, 5.x TimerMessageStore.convertMessage) for the record
    # in pl.rec / pl.rv, and the new properties' length; PLAN_SLOW for anything the per-message path would treat
    # differently from a plain rebuild.
    cdef const unsigned char *props = pl.rec + pl.rv.props_pos
    cdef int32_t plen = pl.rv.props_len
    cdef int32_t index = 0, start, vpos, j, k, n, vlen, qid_pair = -1, born_len, total
    cdef const unsigned char *name
    cdef const unsigned char *value
    cdef bint ascii = True
    cdef bint timer_out = False, timer_name = False
    pl.npairs = 0
    # MessageDecoder.string2messageProperties: split at \x02, then at the first \x01; a pair needs a name and a value.
    while index < plen:
        start = index
        index = next_pair(props, plen, index, &n, &vpos, &vlen)
        if n > 0:
            if pl.npairs == C_MAX_PAIRS:
                return PLAN_SLOW
            pl.pairs[pl.npairs][0] = start
            pl.pairs[pl.npairs][1] = n
            pl.pairs[pl.npairs][2] = vpos
            pl.pairs[pl.npairs][3] = vlen
            pl.npairs += 1
    for j in range(plen):
        if props[j] >= 128:
            ascii = False
            break
    if not ascii:
        # Python decodes names and values with "replace": only valid UTF-8 comes back as the same bytes.
        try:
            PyUnicode_DecodeUTF8(<const char *>props, plen, "strict")
        except UnicodeDecodeError:
            return PLAN_SLOW
    pl.topic_pair = -1
    pl.uniq = False
    pl.props_n = 0
    for j in range(pl.npairs):
        name = props + pl.pairs[j][0]
        n = pl.pairs[j][1]
        pl.emit[j] = -1
        for k in range(j):                # a name seen before: its place is taken
            if pl.pairs[k][1] == n and memcmp(props + pl.pairs[k][0], name, <size_t>n) == 0:
                break
        else:
            pl.emit[j] = j
            for k in range(j + 1, pl.npairs):
                if pl.pairs[k][1] == n and memcmp(props + pl.pairs[k][0], name, <size_t>n) == 0:
                    pl.emit[j] = k        # the last value of the name
        if pl.emit[j] < 0:
            continue
        if timer:
            # convertMessage takes the destination out of REAL_TOPIC / REAL_QID and clears both, keeping every
            # other property (TIMER_OUT_MS too: that is what stops the put from rerouting it to the wheel again).
            if _is(name, n, "DELAY", 5):
                return PLAN_SLOW          # the put would move it to the schedule topic
            if _is(name, n, "TIMER_OUT_MS", 12):
                timer_out = True
            elif (_is(name, n, "__STARTDELIVERTIME", 18) or _is(name, n, "TIMER_DELAY_MS", 14)
                    or _is(name, n, "TIMER_DELIVER_MS", 16) or _is(name, n, "TIMER_DELAY_SEC", 15)):
                timer_name = True
            if _is(name, n, "REAL_TOPIC", 10) or _is(name, n, "REAL_QID", 8):
                if n == 10:
                    pl.topic_pair = pl.emit[j]
                else:
                    qid_pair = pl.emit[j]
                pl.emit[j] = -1
                continue
            if append_prop_crc and _is(name, n, "__CRC32#", 8):
                pl.emit[j] = -1
                continue
        else:
            # messageTimeup clears DELAY (and the 5.x timer properties); the encoder drops a copied __CRC32#.
            if (_is(name, n, "DELAY", 5) or _is(name, n, "TIMER_DELIVER_MS", 16)
                    or _is(name, n, "TIMER_DELAY_SEC", 15) or (append_prop_crc and _is(name, n, "__CRC32#", 8))):
                pl.emit[j] = -1
                continue
            if reroute and (_is(name, n, "__STARTDELIVERTIME", 18) or _is(name, n, "TIMER_DELAY_MS", 14)):
                return PLAN_SLOW          # the put would move it to the timer topic again
        k = pl.emit[j]
        value = props + pl.pairs[k][2]
        vlen = pl.pairs[k][3]
        if rmq_find_byte(value, 0, vlen, 1) >= 0:
            return PLAN_SLOW              # the encoder refuses a separator in a value
        if _is(name, n, "REAL_TOPIC", 10):
            pl.topic_pair = k
        elif _is(name, n, "REAL_QID", 8):
            qid_pair = k
        elif _is(name, n, "UNIQ_KEY", 8):
            pl.uniq = True
        pl.props_n += n + vlen + 2
    if timer and reroute and timer_name and not timer_out:
        return PLAN_SLOW                  # no TIMER_OUT_MS: the put would read the timer properties again
    if pl.topic_pair < 0 or qid_pair < 0:
        return PLAN_SLOW
    value = props + pl.pairs[pl.topic_pair][2]
    vlen = pl.pairs[pl.topic_pair][3]
    # The store's topic rule, as MessageStore.put_delivered applies it (not the broker's characters: another
    # broker's send path may have taken the real topic by its own rules, and RocketMQ's store checks only the
    # length): 1..127 bytes (an empty value makes no pair), valid UTF-8 (checked above with the properties). A
    # topic that names no directory is written all the same; dispatch keeps its record undispatchable.
    if vlen > TOPIC_MAX_LENGTH or _is(value, vlen, "RMQ_SYS_TRANS_HALF_TOPIC", 24):
        return PLAN_SLOW
    if not _java_int(props + pl.pairs[qid_pair][2], pl.pairs[qid_pair][3], &pl.queue_id) or pl.queue_id < 0:
        return PLAN_SLOW
    if append_prop_crc:
        pl.props_n += CRC32_RESERVED_LEN
    total = cal_msg_length_c(1, (pl.rv.sys_flag & FLAG_BORNHOST_V6)
                             | (FLAG_STOREHOSTADDRESS_V6 if store_len == 20 else 0), pl.rv.body_len, vlen, pl.props_n)
    if pl.props_n > PROPERTIES_MAX_LENGTH or pl.rv.body_len > max_message_size or total > max_message_size:
        return PLAN_SLOW                  # (a generated UNIQ_KEY is counted by the caller)
    return PLAN_FAST


cdef int64_t _TIMER_NO_RECORD = INT64_MIN    # not -(1 << 63): C reads that literal as an unsigned one


def timer_out_times(const unsigned char[::1] units, list files not None, int64_t file_size,
                    int64_t[::1] out not None):
    """The TIMER_OUT_MS of the records of ``units`` (raw 20-byte consume-queue units of the timer topic) into
    ``out``, read straight from the commitlog files (what rmqcore.timer's wheel sorts them by), without a Python
    object per record. A record without a TIMER_OUT_MS Long.parseLong reads (an optional sign, ASCII digits, within
    a long; the last value of the name, as MessageDecoder.string2messageProperties keeps) gets 0: delivered at
    once rather than never. A unit without a valid record of its size (select_messages would skip it) gets
    ``NO_RECORD`` (Long.MIN_VALUE; a TIMER_OUT_MS of that value reads as MIN_VALUE + 1, due at once all the same)."""
    cdef Py_ssize_t nunits = units.shape[0] // 20, i
    cdef int32_t vpos, vlen, j
    cdef const unsigned char *u
    cdef const unsigned char *p
    cdef const unsigned char *q
    cdef RecordView rv
    cdef int64_t value
    cdef uint64_t mag
    cdef bint neg, ok
    cdef _RecordFinder finder
    if out.shape[0] < nunits:
        raise ValueError(f"out holds {out.shape[0]} entries, {nunits} units given")
    if nunits == 0:
        return
    finder = _RecordFinder(files, file_size)
    try:
        for i in range(nunits):
            u = &units[0] + i * 20
            p = finder.find(<int64_t>rmq_load_be64(u), <int32_t>rmq_load_be32(u + 8), &rv)
            if p == NULL:
                out[i] = _TIMER_NO_RECORD
                continue
            value = 0
            if find_property(p + rv.props_pos, rv.props_len, "TIMER_OUT_MS", 12, &vpos, &vlen):
                q = p + rv.props_pos + vpos
                j = 0
                neg = q[0] == 45
                if q[0] == 43 or q[0] == 45:
                    j = 1
                ok = j < vlen
                mag = 0
                while ok and j < vlen:
                    if q[j] < 48 or q[j] > 57 or mag > (<uint64_t>1 << 63) // 10:
                        ok = False
                        break
                    mag = mag * 10 + (q[j] - 48)
                    j += 1
                if ok and mag < (<uint64_t>1 << 63):
                    value = -<int64_t>mag if neg else <int64_t>mag
                elif ok and neg and mag == (<uint64_t>1 << 63):
                    value = _TIMER_NO_RECORD + 1      # Long.MIN_VALUE: due at once, told apart from no record
            out[i] = value
    finally:
        finder.release()


NO_RECORD = _TIMER_NO_RECORD


def time_up_into(EncodeBuffer out not None, const unsigned char[::1] units, Py_ssize_t start, list files not None,
                 int64_t file_size, bytes store_host not None, int32_t max_message_size, bint append_prop_crc,
                 bint reroute, uniq_keys, int64_t[::1] unit_of not None, dict topics not None,
                 int64_t max_bytes=32 * 1024 * 1024, bint timer=False):
    """Rebuild the records of the due units ``units[start:]`` (raw 20-byte consume-queue units of the schedule
    topic) into ``out`` (cleared first), as messageTimeup + the encoder build them for the real topic and queue.

    ``files``/``file_size``: the commitlog's MappedFiles and file size; ``store_host``, ``max_message_size``,
    ``append_prop_crc``, ``reroute`` (the encoder reroutes timing properties) and ``uniq_keys`` (a
    UniqKeyGenerator, for a record without UNIQ_KEY) are the store's encoder's. ``unit_of[k]`` receives the unit
    index of record k in ``out``; ``topics`` interns the topic strs the writer needs per record.

    Returns ``(next, per_message)``: with ``per_message`` False, ``out`` holds the records of the units
    ``start .. next - 1`` (units without a valid record are skipped); with True, ``out`` is empty and the units
    ``start .. next - 1`` need the per-message path (a run of them; units without a record inside count too).
    Stops after a record that takes the buffer past ``max_bytes``.

    ``timer``: the units are the timer topic's (rmqcore.timer), rebuilt as its per-message path (5.x
    TimerMessageStore.convertMessage) builds them: REAL_TOPIC / REAL_QID cleared, every other property kept.
    """
    cdef Py_ssize_t nunits = units.shape[0] // 20, i = start, nfiles = len(files), k
    cdef const unsigned char *u
    cdef const unsigned char *p
    cdef const unsigned char *src
    cdef unsigned char *q
    cdef int64_t born_ts
    cdef int32_t size, born_len, store_len = <int32_t>len(store_host), topic_len, sys_flag, total, props_n, j
    cdef int32_t uniq_len
    cdef int code
    cdef Plan pl
    cdef _RecordFinder finder
    cdef const unsigned char *prev_topic = NULL
    cdef int32_t prev_topic_len = -1
    cdef object topic_obj = None
    cdef object uniq = None
    cdef const char *uniq_p = NULL
    cdef EncodedRecord *rec
    cdef const unsigned char **body_src = NULL
    cdef Py_ssize_t *body_dst = NULL
    cdef Py_ssize_t cap = 0
    cdef bint slow_run = False
    cdef uint32_t crc
    if store_len not in (8, 20):
        raise ValueError(f"store_host must be 8 or 20 bytes, got {store_len}")
    if unit_of.shape[0] < nunits - start:
        raise ValueError(f"unit_of holds {unit_of.shape[0]} entries, {nunits - start} units given")
    out.size = 0
    out.count = 0
    out.topics = []
    out.uniq_keys = []
    if nfiles == 0 or start >= nunits:
        return max(start, 0), False
    finder = _RecordFinder(files, file_size)
    cap = nunits - start
    body_src = <const unsigned char **>malloc(<size_t>cap * sizeof(void *))
    body_dst = <Py_ssize_t *>malloc(<size_t>cap * sizeof(Py_ssize_t))
    if body_src == NULL or body_dst == NULL:
        free(body_src)
        free(body_dst)
        raise MemoryError()
    try:
        while i < nunits:
            u = &units[0] + i * 20
            code = PLAN_MISSING
            p = finder.find(<int64_t>rmq_load_be64(u), <int32_t>rmq_load_be32(u + 8), &pl.rv)
            if p != NULL:
                pl.rec = p
                code = _plan(&pl, append_prop_crc, reroute, max_message_size, store_len, timer)
            if i == start:
                slow_run = code == PLAN_SLOW
            if slow_run:
                if code == PLAN_FAST:
                    break
                i += 1
                continue
            if code == PLAN_SLOW:
                break
            if code == PLAN_MISSING:
                i += 1
                continue

            # -- the record, as MessageEncoder.encode_into writes it (body and its CRC in the pass below) --
            props_n = pl.props_n
            uniq_len = 0
            if not pl.uniq:
                uniq = uniq_keys.next_key()
                uniq_p = PyUnicode_AsUTF8AndSize_(uniq, &k)
                uniq_len = <int32_t>k
                props_n += 8 + uniq_len + 2
            born_len = 8 if (pl.rv.sys_flag & FLAG_BORNHOST_V6) == 0 else 20
            topic_len = pl.pairs[pl.topic_pair][3]
            total = cal_msg_length_c(1, (pl.rv.sys_flag & FLAG_BORNHOST_V6)
                                     | (FLAG_STOREHOSTADDRESS_V6 if store_len == 20 else 0),
                                     pl.rv.body_len, topic_len, props_n)
            if props_n > PROPERTIES_MAX_LENGTH or total > max_message_size:
                if i == start:            # the generated UNIQ_KEY took it over a limit: the per-message path says how
                    i += 1
                    slow_run = True
                    continue
                break
            sys_flag = pl.rv.sys_flag & ~(FLAG_BORNHOST_V6 | FLAG_STOREHOSTADDRESS_V6)
            if born_len == 20:
                sys_flag |= FLAG_BORNHOST_V6
            if store_len == 20:
                sys_flag |= FLAG_STOREHOSTADDRESS_V6
            born_ts = pl.rv.born_timestamp if pl.rv.born_timestamp != 0 else now_ms()
            src = pl.rec
            out.reserve(total)
            q = out.data + out.size
            rmq_store_be32(q, <uint32_t>total)
            rmq_store_be32(q + 4, <uint32_t>MESSAGE_MAGIC_CODE)
            rmq_store_be32(q + 8, 0)                          # body CRC: below
            rmq_store_be32(q + 12, <uint32_t>pl.queue_id)
            rmq_store_be32(q + 16, <uint32_t>pl.rv.flag)
            rmq_store_be64(q + 20, 0)                         # queue offset, physical offset: at append
            rmq_store_be64(q + 28, 0)
            rmq_store_be32(q + 36, <uint32_t>sys_flag)
            rmq_store_be64(q + 40, <uint64_t>born_ts)
            memcpy(q + 48, src + pl.rv.born_host_pos, <size_t>born_len)
            q += 48 + born_len
            rmq_store_be64(q, 0)                              # store time: at append
            memcpy(q + 8, <const char *>store_host, <size_t>store_len)
            q += 8 + store_len
            rmq_store_be32(q, <uint32_t>pl.rv.reconsume_times)
            rmq_store_be64(q + 4, 0)                          # prepared transaction offset
            rmq_store_be32(q + 12, <uint32_t>pl.rv.body_len)
            q += 16
            k = out.count
            body_src[k] = src + pl.rv.body_pos
            body_dst[k] = q - out.data
            q += pl.rv.body_len
            q[0] = <unsigned char>topic_len
            memcpy(q + 1, src + pl.rv.props_pos + pl.pairs[pl.topic_pair][2], <size_t>topic_len)
            q += 1 + topic_len
            rmq_store_be16(q, <uint16_t>props_n)
            q += 2
            for j in range(pl.npairs):
                if pl.emit[j] < 0:
                    continue
                q = put_pair(q, src + pl.rv.props_pos + pl.pairs[j][0], pl.pairs[j][1],
                              src + pl.rv.props_pos + pl.pairs[pl.emit[j]][2], pl.pairs[pl.emit[j]][3])
            if uniq_len:
                q = put_pair(q, <const unsigned char *>"UNIQ_KEY", 8, <const unsigned char *>uniq_p, uniq_len)
            if append_prop_crc:
                # "__CRC32#" \x01 + 10 digits + \x02, the digits set by the writer once the record is placed.
                q = put_crc_placeholder(q)
            if q != out.data + out.size + total:
                raise AssertionError("time_up_into: record length miscounted")

            # One str per topic run (a level's messages go to a few topics): no object per record.
            src = pl.rec + pl.rv.props_pos + pl.pairs[pl.topic_pair][2]
            if topic_obj is None or topic_len != prev_topic_len or memcmp(src, prev_topic, <size_t>topic_len) != 0:
                topic_obj = PyUnicode_DecodeUTF8(<const char *>src, topic_len, "strict")
                topic_obj = topics.setdefault(topic_obj, topic_obj)
                prev_topic = src
                prev_topic_len = topic_len
            rec = &out.rec[k]
            rec.pos = out.size
            rec.length = total
            rec.tran_type = sys_flag & TRANSACTION_ROLLBACK_TYPE
            rec.store_ts_pos = 48 + born_len
            rec.queue_id = pl.queue_id
            rec.record_crc = append_prop_crc
            out.topics.append(topic_obj)
            out.size += total
            out.count += 1
            unit_of[k] = i
            i += 1
            if out.size >= max_bytes:
                break

        # The bodies and their CRCs, without the GIL: the bulk of the bytes.
        with nogil:
            for k in range(out.count):
                size = <int32_t>rmq_load_be32(out.data + body_dst[k] - 4)
                if size:
                    memcpy(out.data + body_dst[k], body_src[k], <size_t>size)
                    crc = rmq_crc32(0, body_src[k], <size_t>size) & 0x7FFFFFFF
                    rmq_store_be32(out.data + out.rec[k].pos + 8, crc)
    finally:
        free(body_src)
        free(body_dst)
        finder.release()
    return i, slow_run



# -- where a record came from: what a restart reads to find the deliveries and commits made after the last persist --

# scan_provenance's modes: which records it reports.
PROVENANCE_DELAYED = 1      # a delay level's delivery: REAL_TOPIC and REAL_QID kept, not in a system topic that holds
                            # messages still to be delivered (messageTimeup clears neither)
PROVENANCE_TIMED = 2        # the timer wheel's delivery: TIMER_OUT_MS kept, not in the timer topic (convertMessage)
PROVENANCE_COMMITTED = 3    # a transaction commit: the COMMIT type (its preparedTransactionOffset names the half)

# The columns of a provenance row (scan_provenance, record_keys).
FACT_PHYS = 0
FACT_SIZE = 1
FACT_BORN_TS = 2
FACT_BODY_CRC = 3
FACT_BODY_LEN = 4
FACT_FLAG = 5
FACT_STORE_TS = 6
FACT_PREPARED = 7
FACT_COLUMNS = 8


cdef inline void _facts(int64_t *row, int64_t phys, const RecordView *rv) noexcept nogil:
    row[0] = phys
    row[1] = rv.total_size
    row[2] = rv.born_timestamp
    row[3] = <uint32_t>rv.body_crc
    row[4] = rv.body_len
    row[5] = <uint32_t>rv.flag
    row[6] = rv.store_timestamp
    row[7] = rv.prepared_transaction_offset


cdef bint _provenance(const unsigned char *rec, const RecordView *rv, int mode) noexcept nogil:
    cdef int32_t vp, vl
    cdef const unsigned char *topic = rec + rv.topic_pos
    cdef const unsigned char *props = rec + rv.props_pos
    if mode == 3:
        return (rv.sys_flag & TRANSACTION_ROLLBACK_TYPE) == 0x8
    if mode == 2:
        return (not _is(topic, rv.topic_len, "rmq_sys_wheel_timer", 19)
                and find_property(props, rv.props_len, "TIMER_OUT_MS", 12, &vp, &vl))
    if (_is(topic, rv.topic_len, "SCHEDULE_TOPIC_XXXX", 19) or _is(topic, rv.topic_len, "rmq_sys_wheel_timer", 19)
            or _is(topic, rv.topic_len, "RMQ_SYS_TRANS_HALF_TOPIC", 24)):
        return False
    return (find_property(props, rv.props_len, "REAL_TOPIC", 10, &vp, &vl)
            and find_property(props, rv.props_len, "REAL_QID", 8, &vp, &vl))


def scan_provenance(data, int64_t base_offset, Py_ssize_t start, int mode, int64_t[:, ::1] out not None,
                    Py_ssize_t end=-1):
    """Walk the records of ``data`` (a commitlog file's readable bytes; byte 0 is global ``base_offset``) from
    ``start`` and write a row of facts (``FACT_*`` columns) into ``out`` for each record ``mode`` asks for
    (``PROVENANCE_*``), without a Python object per record. Returns ``(rows, next position, code)``: the walk
    stops when ``out`` is full, at ``end``, at a blank record (the end of the file's data) or at a record that
    does not parse (``code``: rmqcore._codec's parse_record result there, 1 when it stopped at a full ``out``)."""
    cdef const unsigned char[::1] buf = data
    cdef Py_ssize_t length = buf.shape[0], pos = start
    cdef Py_ssize_t rows = 0, cap = out.shape[0]
    cdef const unsigned char *base
    cdef const unsigned char *rec
    cdef RecordView rv
    cdef int code = 1
    if out.shape[1] < FACT_COLUMNS:
        raise ValueError(f"out needs {FACT_COLUMNS} columns, has {out.shape[1]}")
    if end < 0 or end > length:
        end = length
    if start < 0 or start > end:
        raise ValueError(f"start {start} outside [0, {end}]")
    if length == 0 or cap == 0:
        return 0, start, code
    base = &buf[0]
    with nogil:
        while rows < cap:
            rec = base + pos
            code = parse_record(rec, end - pos, &rv, False)
            if code != 1:
                break
            if _provenance(rec, &rv, mode):
                _facts(&out[rows, 0], base_offset + pos, &rv)
                rows += 1
            pos += rv.total_size
    return rows, pos, code


def record_keys(const unsigned char[::1] units, list files not None, int64_t file_size,
                int64_t[:, ::1] out not None):
    """The facts (``FACT_*`` columns) of the records of ``units`` (raw 20-byte consume-queue units) into ``out``,
    read straight from the commitlog files; a unit without a whole valid record of its size gets FACT_SIZE -1 (as
    select_messages skips it)."""
    cdef Py_ssize_t nunits = units.shape[0] // 20, i
    cdef const unsigned char *u
    cdef const unsigned char *p
    cdef RecordView rv
    cdef _RecordFinder finder
    if out.shape[0] < nunits or out.shape[1] < FACT_COLUMNS:
        raise ValueError(f"out must hold {nunits} rows of {FACT_COLUMNS} columns")
    if nunits == 0:
        return
    finder = _RecordFinder(files, file_size)
    try:
        for i in range(nunits):
            u = &units[0] + i * 20
            p = finder.find(<int64_t>rmq_load_be64(u), <int32_t>rmq_load_be32(u + 8), &rv)
            if p == NULL:
                out[i, 0] = <int64_t>rmq_load_be64(u)
                out[i, 1] = -1
                continue
            _facts(&out[i, 0], <int64_t>rmq_load_be64(u), &rv)
    finally:
        finder.release()
