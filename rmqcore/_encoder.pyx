# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The record encoder, as RocketMQ's MessageExtEncoder (with MessageExtBatchEncoder's batch properties and
MessageClientIDSetter's UNIQ_KEY): ``MessageEncoder`` validates a Message (MessageIllegalError naming the field
and the limit, nothing written) and lays its v1 record out in an ``EncodeBuffer``, leaving the per-put fields
(queue offset, physical offset, store time, record CRC) to the append path (``_commit_log``), which sets them
under the put lock; ``encode_arrow`` does the same from Arrow columns.
"""

import os
import random
import time

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.object cimport PyObject
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memchr, memcmp, memcpy

from rmqcore._c cimport rmq_crc32, rmq_store_be16, rmq_store_be32, rmq_store_be64
from rmqcore._codec cimport (CRC32_RESERVED_LEN, FLAG_BORNHOST_V6, FLAG_STOREHOSTADDRESS_V6, MESSAGE_MAGIC_CODE,
                             TRANSACTION_ROLLBACK_TYPE, _Buffer, _hex_into, _hex_upper, cal_msg_length_c, now_ms,
                             put_crc_placeholder, put_pair)
from rmqcore._message cimport Message

from rmqcore._codec import PROPERTIES_MAX_LENGTH, PROPERTY_UNIQ_KEY, TOPIC_MAX_LENGTH, host_to_bytes
from rmqcore.errors import MessageIllegalError
from rmqcore.status import PutStatus

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    void *PyUnicode_DATA(object o)


cdef str _UNIQ_KEY_NAME = PROPERTY_UNIQ_KEY   # the key object a generated UNIQ_KEY is stored under (compared by address)


# ---------------------------------------------------------------------------------------------------------------
# Encoding

cdef bint _valid_topic_char[128]
for _c in range(128):
    _valid_topic_char[_c] = (chr(_c).isascii() and chr(_c).isalnum()) or chr(_c) in "%|_-"


cdef inline int _check_utf8_separators(const char *s, Py_ssize_t n) noexcept nogil:
    return memchr(s, 1, <size_t>n) != NULL or memchr(s, 2, <size_t>n) != NULL


cdef bint _is_timing_name(const char *u, Py_ssize_t n) noexcept nogil:
    # A property that reroutes a message (delay level or timer) to the schedule or timer topic.
    return ((n == 5 and memcmp(u, "DELAY", 5) == 0) or (n == 18 and memcmp(u, "__STARTDELIVERTIME", 18) == 0)
            or (n == 16 and memcmp(u, "TIMER_DELIVER_MS", 16) == 0)
            or (n == 15 and memcmp(u, "TIMER_DELAY_SEC", 15) == 0)
            or (n == 14 and memcmp(u, "TIMER_DELAY_MS", 14) == 0))


cdef bint _has_timing_property(dict props):
    # One pass over the names (a handful): is any of them one that reroutes a message? Cheaper than five lookups.
    cdef Py_ssize_t n
    cdef const char *u
    for k in props:
        if not isinstance(k, str):
            continue
        u = PyUnicode_AsUTF8AndSize(k, &n)
        if u == NULL:
            return False
        if _is_timing_name(u, n):
            return True
    return False


cdef void fill_body_crcs(EncodeBuffer b) noexcept nogil:
    # The body CRCs encode_into deferred (EncodeBuffer.defer_body_crc), in one pass without the GIL: put_batch's
    # producer then holds the GIL only for what needs Python objects, and a second producer runs meanwhile.
    cdef Py_ssize_t i
    cdef unsigned char *p
    for i in range(b.count):
        if b.rec[i].body_crc_pos > 0:
            p = b.data + b.rec[i].pos
            rmq_store_be32(p + 8, rmq_crc32(0, p + b.rec[i].body_crc_pos, <size_t>b.rec[i].body_crc_len) & 0x7FFFFFFF)
            b.rec[i].body_crc_pos = 0


cdef inline bint _name_is(const unsigned char *p, Py_ssize_t n, const char *name, Py_ssize_t name_n) noexcept nogil:
    return n == name_n and memcmp(p, name, <size_t>n) == 0


cdef unsigned char *_put_keys(unsigned char *q, int64_t k0, int64_t k1, const uint8_t[::1] key_valid,
                              const int64_t[::1] key_off, const unsigned char[::1] key_data, int32_t keys_n):
    # KEYS \x01 key1 key2 ... \x02: the list joined by a space, as Message.setKeys(Collection)
    cdef int64_t j
    cdef Py_ssize_t kn
    cdef bint first = True
    memcpy(q, "KEYS", 4)
    q[4] = 1
    q += 5
    for j in range(k0, k1):
        if key_valid is not None and not key_valid[j]:
            continue
        if not first:
            q[0] = 32
            q += 1
        kn = <Py_ssize_t>(key_off[j + 1] - key_off[j])
        if kn:
            memcpy(q, &key_data[0] + key_off[j], <size_t>kn)
            q += kn
        first = False
    q[0] = 2
    return q + 1


cdef class UniqKeyGenerator:
    """MessageClientIDSetter: 32 hex chars (IPv4) = ip + pid(2) + a per-process int(4) fixed prefix, then the
    milliseconds since the start of this month (4) and a counter (2)."""

    def __init__(self, bytes ip not None):
        if len(ip) not in (4, 16):
            raise ValueError("ip must be 4 or 16 bytes")
        fix = ip + (os.getpid() & 0xFFFF).to_bytes(2, "big") + random.getrandbits(32).to_bytes(4, "big")
        self._prefix = _hex_upper(fix, len(fix)).encode("ascii")
        self._counter = random.getrandbits(16)
        self._set_month(now_ms())

    cdef _set_month(self, int64_t now):
        t = time.localtime(now / 1000.0)
        start = time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1))
        nxt = time.mktime((t.tm_year + (t.tm_mon // 12), t.tm_mon % 12 + 1, 1, 0, 0, 0, 0, 0, -1))
        self._start = <int64_t>(start * 1000)
        self._next_start = <int64_t>(nxt * 1000)

    cdef Py_ssize_t next_key_into(self, char *o) noexcept:
        # The next key's ASCII characters into o (room for 44 + 12); returns its length.
        cdef int64_t now = now_ms()
        cdef unsigned char tail[6]
        cdef Py_ssize_t plen = len(self._prefix)
        if now >= self._next_start:
            try:
                self._set_month(now)
            except BaseException:
                pass
        rmq_store_be32(tail, <uint32_t>(now - self._start))
        rmq_store_be16(tail + 4, self._counter)
        self._counter += 1
        memcpy(o, PyBytes_AS_STRING(self._prefix), plen)
        _hex_into(o + plen, tail, 6)
        return plen + 12

    cpdef str next_key(self):
        return self.key_at(now_ms())

    cdef str key_at(self, int64_t now):
        # next_key with the clock read by the caller (the encoder's, shared with the born time)
        cdef unsigned char tail[6]
        cdef Py_ssize_t plen = len(self._prefix)
        cdef object out
        cdef char *o
        if now >= self._next_start:
            self._set_month(now)
        rmq_store_be32(tail, <uint32_t>(now - self._start))
        rmq_store_be16(tail + 4, self._counter)
        self._counter += 1
        out = PyUnicode_New(plen + 12, 127)
        o = <char *>PyUnicode_DATA(out)
        memcpy(o, PyBytes_AS_STRING(self._prefix), plen)
        _hex_into(o + plen, tail, 6)
        return <str>out


cdef class EncodeBuffer:
    """Records encoded outside the put lock, back to back in one reusable C buffer (RocketMQ keeps a thread-local
    encoder buffer for the same reason: no allocation per message). Under the lock only the queue offset, the
    physical offset and the store time are patched as each record is copied into the file."""

    def __cinit__(self):
        self.data = NULL
        self.rec = NULL
        self.size = 0
        self.capacity = 0
        self.count = 0
        self.rec_capacity = 0
        self.topics = []
        self.uniq_keys = []

    def __dealloc__(self):
        free(self.data)
        free(self.rec)

    cdef int reserve(self, Py_ssize_t nbytes) except -1:
        cdef Py_ssize_t cap
        cdef void *p
        if self.size + nbytes > self.capacity:
            cap = max(self.capacity * 2, self.size + nbytes, 64 * 1024)
            p = realloc(self.data, <size_t>cap)
            if p == NULL:
                raise MemoryError()
            self.data = <unsigned char *>p
            self.capacity = cap
        if self.count == self.rec_capacity:
            cap = max(self.rec_capacity * 2, 64)
            p = realloc(self.rec, <size_t>cap * sizeof(EncodedRecord))
            if p == NULL:
                raise MemoryError()
            self.rec = <EncodedRecord *>p
            self.rec_capacity = cap
        return 0

    def clear(self):
        self.size = 0
        self.count = 0
        self.topics = []
        self.uniq_keys = []

    def __len__(self):
        return self.count

    def record(self, Py_ssize_t i):
        """A copy of encoded record ``i`` (queue offset, physical offset and store time still 0)."""
        if i < 0 or i >= self.count:
            raise IndexError(i)
        return PyBytes_FromStringAndSize(<const char *>self.data + self.rec[i].pos, self.rec[i].length)

    def length(self, Py_ssize_t i):
        if i < 0 or i >= self.count:
            raise IndexError(i)
        return self.rec[i].length

    @property
    def max_length(self):
        cdef Py_ssize_t i
        cdef int32_t m = 0
        for i in range(self.count):
            if self.rec[i].length > m:
                m = self.rec[i].length
        return m


cdef class BatchProperties:
    """Properties common to every message of one put_batch, validated and encoded once per call (RocketMQ's
    MessageExtBatchEncoder encodes its batch's properties, batchPropData, once and appends them to every inner
    record; CommitLog.java, rocketmq-all-4.9.7). Built by MessageEncoder.batch_properties.

    The rule, for each message: the record is the one ``encode_into`` gives for the message after
    ``msg.properties[name] = value`` for every (name, value) here, in this dict's order — the batch's value wins
    over a message's own (it takes that property's place among the message's own), and names the message lacks
    follow its own properties, before a UNIQ_KEY the put generates. That is what RocketMQ's reader sees of a
    batch record: Java appends batchPropData after each inner message's properties, duplicates included, and
    MessageDecoder.string2messageProperties keeps the last value of a name, the batch's. Here a name is written
    once, so the record holds no duplicate. The messages' own dicts are not changed (only a generated UNIQ_KEY is
    added to them, as by every put), but for a message a delay or timer reroutes: the reroute rewrites its dict, so
    it gets the batch's properties set there first."""

    def __init__(self):
        raise TypeError("use MessageEncoder.batch_properties(properties)")

    def __dealloc__(self):
        free(self.pair)

cdef class MessageEncoder:
    """Validates and encodes Messages into v1 commitlog records for one store (its host and size limit)."""

    def __init__(self, store_host="127.0.0.1:10911", int max_message_size=4 * 1024 * 1024,
                 bint check_topic_chars=True):
        if max_message_size <= 0:
            raise ValueError("max_message_size must be > 0")
        self.max_message_size = max_message_size
        self.store_host_bytes = host_to_bytes(store_host)
        self.uniq_keys = UniqKeyGenerator(self.store_host_bytes[:len(self.store_host_bytes) - 4])
        self.check_topic_chars = check_topic_chars

    cdef int _check_topic(self, topic, bint broker_rule=True) except -1:
        # put's topic rule: 1..127 UTF-8 bytes (the store's: a v1 record's topic length is one signed byte), each
        # in the broker's ^[%|a-zA-Z0-9_-]+$ (check_topic_chars) unless ``broker_rule`` is False: a delivery of
        # the schedule or timer service, whose real topic another broker's send path may have accepted by other
        # rules (RocketMQ's store checks only the length; TopicValidator runs in the broker's send processor).
        cdef Py_ssize_t topic_n, i
        cdef const char *topic_u
        if topic is None or not isinstance(topic, str):
            raise MessageIllegalError("topic", "must be a str", None)
        topic_u = PyUnicode_AsUTF8AndSize(topic, &topic_n)
        if topic_n == 0:
            raise MessageIllegalError("topic", "must not be empty", 1)
        if topic_n > TOPIC_MAX_LENGTH:
            raise MessageIllegalError("topic", f"{topic_n} UTF-8 bytes, longer than {TOPIC_MAX_LENGTH}",
                                      TOPIC_MAX_LENGTH)
        if broker_rule and self.check_topic_chars:
            for i in range(topic_n):
                if (<unsigned char>topic_u[i]) >= 128 or not _valid_topic_char[<unsigned char>topic_u[i]]:
                    raise MessageIllegalError(
                        "topic", f"{topic!r} has an illegal character at byte {i}; allowed: ^[%|a-zA-Z0-9_-]+$",
                        "^[%|a-zA-Z0-9_-]+$")
        return 0

    cpdef int encode_into(self, Message msg, EncodeBuffer out, BatchProperties batch=None,
                          bint broker_topic_rule=True) except -1:
        """Validate ``msg`` and append its record to ``out``; ``batch``: properties common to a put_batch's
        messages, applied as BatchProperties says (encoded once, copied into each record). ``broker_topic_rule``
        False: the topic is held to the store's rule only (1..127 UTF-8 bytes), for the schedule and timer
        services' deliveries (MessageStore.put_delivered); every send keeps the broker's."""
        cdef Py_ssize_t topic_n, body_n, props_n = 0, kn, vn, i
        cdef Py_ssize_t n_over = 0     # the message's own property names the batch's override
        cdef Py_ssize_t j
        cdef bint generated = False    # a UNIQ_KEY made here: written after the batch's properties
        cdef int64_t now = 0           # the clock, read once for a generated UNIQ_KEY and a born time of "now"
        cdef const char *be = NULL
        cdef const char *topic_u
        cdef const char *ku
        cdef const char *vu
        cdef dict props
        cdef bytes born, store = self.store_host_bytes
        cdef int32_t sys_flag, total
        cdef int64_t born_ts
        cdef unsigned char *p
        cdef unsigned char *q
        cdef uint32_t crc = 0
        cdef _Buffer body = _Buffer()
        cdef EncodedRecord *rec
        cdef str uniq

        if msg is None:
            raise TypeError("put needs a Message, got None")
        if self.reroute is not None and msg.properties and _has_timing_property(msg.properties):
            if batch is not None:
                # The reroute reads and rewrites the message's properties (REAL_TOPIC, REAL_QID, ...): it gets the
                # batch's in the dict, where they would be had the caller put them there.
                for k, v in batch.properties.items():
                    msg.properties[k] = v
                batch = None
            # The topic the message is for is checked before it moves to the schedule or timer topic: a topic the
            # broker would refuse must not be acknowledged now and refused at delivery.
            self._check_topic(msg.topic, broker_topic_rule)
            if broker_topic_rule:
                self.reroute(msg)
            else:
                self.reroute(msg, False)       # what it checks of the later delivery: the store's rule too
        topic = msg.topic
        self._check_topic(topic, broker_topic_rule)
        topic_u = PyUnicode_AsUTF8AndSize(topic, &topic_n)     # the str's cached UTF-8: no copy
        if msg._queue_id < 0:
            raise MessageIllegalError("queue_id", f"{msg._queue_id} is negative", 0)

        props = msg.properties
        if props is None:
            props = msg.properties = {}
        if batch is not None:
            be = PyBytes_AS_STRING(batch.encoded)
        # With a batch, the common case (no name in both) copies batch.encoded as is; an override makes both passes
        # below write the batch's value in the message's place and the batch's other pairs after the message's.
        if batch is not None and batch.uniq is not None:
            uniq = batch.uniq
        elif PROPERTY_UNIQ_KEY not in props:
            now = now_ms()
            uniq = self.uniq_keys.key_at(now)
            props[_UNIQ_KEY_NAME] = uniq
            generated = True
        else:
            uniq = props[PROPERTY_UNIQ_KEY]
        for k, v in props.items():
            if batch is not None and isinstance(k, str):
                ku = PyUnicode_AsUTF8AndSize(k, &kn)
                j = batch.find(k, ku, kn)
                if j >= 0:
                    n_over += 1           # its pair is counted with batch.encoded's
                    continue
            if v is None:
                continue
            if not isinstance(k, str) or not isinstance(v, str):
                raise MessageIllegalError(f"properties[{k!r}]", "names and values must be str", None)
            ku = PyUnicode_AsUTF8AndSize(k, &kn)
            vu = PyUnicode_AsUTF8AndSize(v, &vn)
            if self.append_prop_crc and kn == 8 and memcmp(ku, "__CRC32#", 8) == 0:
                continue                  # a copied record's: the put writes its own, last
            if kn == 0:
                raise MessageIllegalError("properties", "a property name is empty", None)
            if _check_utf8_separators(ku, kn) or _check_utf8_separators(vu, vn):
                raise MessageIllegalError(f"properties[{k!r}]", "contains \\x01 or \\x02, RocketMQ's separators",
                                          None)
            props_n += kn + vn + 2
        if batch is not None:
            props_n += PyBytes_GET_SIZE(batch.encoded)     # the overridden pairs counted in their message's place
        if self.append_prop_crc:
            props_n += CRC32_RESERVED_LEN
        if props_n > PROPERTIES_MAX_LENGTH:
            raise MessageIllegalError("properties", f"{props_n} bytes, more than {PROPERTIES_MAX_LENGTH}",
                                      PROPERTIES_MAX_LENGTH, PutStatus.PROPERTIES_SIZE_EXCEEDED)

        body.acquire(msg.body)
        body_n = body.view.len
        born = store if msg.born_host is None else host_to_bytes(msg.born_host)
        sys_flag = msg._sys_flag & ~(FLAG_BORNHOST_V6 | FLAG_STOREHOSTADDRESS_V6)
        if len(born) == 20:
            sys_flag |= FLAG_BORNHOST_V6
        if len(store) == 20:
            sys_flag |= FLAG_STOREHOSTADDRESS_V6
        total = cal_msg_length_c(1, sys_flag, <int32_t>body_n, <int32_t>topic_n, <int32_t>props_n)
        if body_n > self.max_message_size or total > self.max_message_size:
            raise MessageIllegalError("body", f"record of {body_n if body_n > self.max_message_size else total} "
                                      f"bytes exceeds max_message_size {self.max_message_size}",
                                      self.max_message_size)
        born_ts = msg._born_timestamp if msg._born_timestamp != 0 else now if now != 0 else now_ms()

        out.reserve(total)
        p = out.data + out.size
        if body_n and not out.defer_body_crc:
            if body_n >= 65536:
                with nogil:
                    crc = rmq_crc32(0, body.view.buf, <size_t>body_n) & 0x7FFFFFFF
            else:
                crc = rmq_crc32(0, body.view.buf, <size_t>body_n) & 0x7FFFFFFF
        rmq_store_be32(p, <uint32_t>total)
        rmq_store_be32(p + 4, <uint32_t>MESSAGE_MAGIC_CODE)
        rmq_store_be32(p + 8, crc)
        rmq_store_be32(p + 12, <uint32_t>msg._queue_id)
        rmq_store_be32(p + 16, <uint32_t>msg._flag)
        rmq_store_be64(p + 20, 0)
        rmq_store_be64(p + 28, 0)
        rmq_store_be32(p + 36, <uint32_t>sys_flag)
        rmq_store_be64(p + 40, <uint64_t>born_ts)
        q = p + 48
        memcpy(q, PyBytes_AS_STRING(born), len(born))
        q += len(born)
        rmq_store_be64(q, 0)                                      # store timestamp: set under the put lock
        q += 8
        memcpy(q, PyBytes_AS_STRING(store), len(store))
        q += len(store)
        rmq_store_be32(q, <uint32_t>msg._reconsume_times)
        rmq_store_be64(q + 4, <uint64_t>msg._prepared_transaction_offset)
        rmq_store_be32(q + 12, <uint32_t>body_n)
        q += 16
        if body_n:
            memcpy(q, body.view.buf, body_n)
            q += body_n
        body.release()
        q[0] = <unsigned char>topic_n
        memcpy(q + 1, topic_u, topic_n)
        q += 1 + topic_n
        rmq_store_be16(q, <uint16_t>props_n)
        q += 2
        for k, v in props.items():
            if generated and <PyObject *>k == <PyObject *>_UNIQ_KEY_NAME:
                continue                  # goes after the batch's, as if put after them into the dict
            if n_over and isinstance(k, str):
                ku = PyUnicode_AsUTF8AndSize(k, &kn)
                j = batch.find(k, ku, kn)
                if j >= 0:                # the batch's value, in the message's place
                    q = put_pair(q, <const unsigned char *>ku, kn,
                                  <const unsigned char *>be + batch.pair[j] + kn + 1, batch.value_n[j])
                    continue
            if v is None:
                continue
            ku = PyUnicode_AsUTF8AndSize(k, &kn)
            vu = PyUnicode_AsUTF8AndSize(v, &vn)
            if self.append_prop_crc and kn == 8 and memcmp(ku, "__CRC32#", 8) == 0:
                continue
            memcpy(q, ku, kn)
            q[kn] = 1
            memcpy(q + kn + 1, vu, vn)
            q[kn + 1 + vn] = 2
            q += kn + vn + 2
        if batch is not None:
            if n_over == 0:
                vn = PyBytes_GET_SIZE(batch.encoded)
                memcpy(q, be, <size_t>vn)
                q += vn
            else:                         # the batch's pairs the message does not have
                for j in range(batch.count):
                    if batch.names[j] not in props:
                        vn = batch.name_n[j] + batch.value_n[j] + 2
                        memcpy(q, be + batch.pair[j], <size_t>vn)
                        q += vn
        if generated:
            ku = PyUnicode_AsUTF8AndSize(uniq, &vn)
            q = put_pair(q, <const unsigned char *>"UNIQ_KEY", 8, <const unsigned char *>ku, vn)
        if self.append_prop_crc:
            q = put_crc_placeholder(q)
        if q != p + total:  # properties changed size under us (another thread mutated the dict)
            raise RuntimeError("message properties changed while the message was being encoded")

        rec = &out.rec[out.count]
        rec.pos = out.size
        rec.length = total
        rec.tran_type = sys_flag & TRANSACTION_ROLLBACK_TYPE
        rec.store_ts_pos = 48 + <int32_t>len(born)
        rec.queue_id = msg._queue_id
        rec.record_crc = self.append_prop_crc
        rec.body_crc_pos = 0
        if body_n and out.defer_body_crc:
            rec.body_crc_pos = 48 + <int32_t>len(born) + 8 + <int32_t>len(store) + 16
            rec.body_crc_len = <int32_t>body_n
        out.topics.append(topic)
        out.uniq_keys.append(uniq)
        out.size += total
        out.count += 1
        return 0

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def encode_arrow(self, EncodeBuffer out, Py_ssize_t nrows,
                     const int64_t[::1] topic_off, const unsigned char[::1] topic_data,
                     const int32_t[::1] queue_id,
                     const int64_t[::1] body_off, const unsigned char[::1] body_data,
                     const uint8_t[::1] tags_valid, const int64_t[::1] tags_off, const unsigned char[::1] tags_data,
                     const uint8_t[::1] keys_valid, const int64_t[::1] keys_list, const uint8_t[::1] key_valid,
                     const int64_t[::1] key_off, const unsigned char[::1] key_data,
                     const uint8_t[::1] props_valid, const int64_t[::1] props_list,
                     const int64_t[::1] pname_off, const unsigned char[::1] pname_data,
                     const uint8_t[::1] pvalue_valid, const int64_t[::1] pvalue_off,
                     const unsigned char[::1] pvalue_data,
                     const int64_t[::1] born_ms, const int32_t[::1] flag,
                     unsigned char[::1] uniq_out, int64_t[::1] uniq_off, Py_ssize_t first_row=0,
                     bint check_only=False, const uint8_t[::1] uniq_valid=None, const int64_t[::1] uniq_in_off=None,
                     const unsigned char[::1] uniq_in_data=None, const int32_t[::1] born_host_idx=None,
                     const unsigned char[::1] host_table=None, const int32_t[::1] host_len=None,
                     const int32_t[::1] reconsume=None):
        """Encode ``nrows`` Arrow rows into ``out`` without a Python object per row: what ``encode_into`` does for a
        Message (same checks, same record bytes, properties in the same order: the row's map, then TAGS, then KEYS
        joined by a space, then a generated UNIQ_KEY unless the map has one), from the columns' raw buffers.
        Offsets arrays have nrows + 1 entries into their data; ``*_valid`` are byte masks or None (no nulls);
        ``tags``/``keys``/``props``/``born_ms``/``flag`` may be None (absent). ``out.topics`` gets one str per row
        (the same object for equal neighbours) for the put's topic-queue table. The generated or given
        UNIQ_KEY of row i goes to uniq_out[uniq_off[i]:uniq_off[i + 1]] (uniq_out: 64 bytes per row).
        ``check_only``: every check, nothing written (the first pass of a put that must refuse a bad row before
        anything is stored); returns (row of the longest record, its length) then, else nrows. Optional: the
        producer's UNIQ_KEY per row (``uniq_*``: it replaces a map's, else goes last), the born host per row as an
        index into ``host_table`` (20 bytes per host, ``host_len`` 8 or 20 of them used; -1: the store's host) and
        reconsume times."""
        cdef Py_ssize_t r, t_n, b_n, tg_n = 0, k, kn, vn, j, jj, nkeys, props_n, klen, vlen
        cdef const unsigned char *t_p
        cdef const unsigned char *prev_t = NULL
        cdef Py_ssize_t prev_n = -1
        cdef const unsigned char *b_p
        cdef const unsigned char *tg_p = NULL    # tg_n/tg_p zeroed: set and read only when has_tags, which gcc cannot see
        cdef const unsigned char *kp
        cdef const unsigned char *vp
        cdef bint has_tags, has_keys, map_tags, map_keys, map_uniq, dup
        cdef int64_t p0, p1, k0, k1, born_ts, now = now_ms()
        cdef int32_t sys_flag, total, keys_n, qid
        cdef bytes store = self.store_host_bytes
        cdef Py_ssize_t store_n = len(store)
        cdef unsigned char *p
        cdef unsigned char *q
        cdef char uniq_buf[64]
        cdef Py_ssize_t uniq_n
        cdef uint32_t crc
        cdef EncodedRecord *rec
        cdef object topic_obj = None
        cdef dict topic_cache = {}
        cdef Py_ssize_t base_uniq = 0
        cdef Py_ssize_t longest_row = 0
        cdef int32_t longest = 0
        cdef Py_ssize_t generated_n = len(self.uniq_keys._prefix) + 12
        cdef bint has_uniq, uniq_from_col
        cdef Py_ssize_t uq_n = 0, born_n
        cdef const unsigned char *uq_p = NULL
        cdef const unsigned char *born_p
        cdef int32_t hidx
        if not check_only:
            uniq_off[0] = 0
        for r in range(nrows):
            t_p = &topic_data[0] + topic_off[r] if topic_data.shape[0] else NULL
            t_n = <Py_ssize_t>(topic_off[r + 1] - topic_off[r])
            if t_n != prev_n or (t_n and memcmp(t_p, prev_t, <size_t>t_n) != 0):
                if t_n == 0:
                    raise MessageIllegalError(f"topic[{r + first_row}]", "must not be empty", 1)
                if t_n > TOPIC_MAX_LENGTH:
                    raise MessageIllegalError(f"topic[{r + first_row}]", f"{t_n} UTF-8 bytes, longer than {TOPIC_MAX_LENGTH}",
                                              TOPIC_MAX_LENGTH)
                if self.check_topic_chars:
                    for j in range(t_n):
                        if t_p[j] >= 128 or not _valid_topic_char[t_p[j]]:
                            raise MessageIllegalError(
                                f"topic[{r + first_row}]", f"{(<const char *>t_p)[:t_n]!r} has an illegal character at byte "
                                f"{j}; allowed: ^[%|a-zA-Z0-9_-]+$", "^[%|a-zA-Z0-9_-]+$")
                key = (<const char *>t_p)[:t_n]
                topic_obj = topic_cache.get(key)
                if topic_obj is None:
                    topic_obj = topic_cache[key] = key.decode("ascii")
                prev_t = t_p
                prev_n = t_n
            qid = queue_id[r]
            if qid < 0:
                raise MessageIllegalError(f"queue_id[{r + first_row}]", f"{qid} is negative", 0)
            b_p = &body_data[0] + body_off[r] if body_data.shape[0] else NULL
            b_n = <Py_ssize_t>(body_off[r + 1] - body_off[r])

            # Properties: the map's pairs (a later duplicate name replaces the value in place, as a dict does),
            # TAGS and KEYS replacing or following them, UNIQ_KEY last unless given.
            has_tags = tags_off is not None and (tags_valid is None or tags_valid[r])
            has_keys = keys_list is not None and (keys_valid is None or keys_valid[r])
            map_tags = map_keys = map_uniq = False
            props_n = 0
            p0 = p1 = 0
            if props_list is not None and (props_valid is None or props_valid[r]):
                p0 = props_list[r]
                p1 = props_list[r + 1]
            for j in range(p0, p1):
                if pvalue_valid is not None and not pvalue_valid[j]:
                    continue
                klen = <Py_ssize_t>(pname_off[j + 1] - pname_off[j])
                vlen = <Py_ssize_t>(pvalue_off[j + 1] - pvalue_off[j])
                kp = &pname_data[0] + pname_off[j] if klen else NULL
                vp = &pvalue_data[0] + pvalue_off[j] if vlen else NULL
                if self.append_prop_crc and _name_is(kp, klen, "__CRC32#", 8):
                    continue
                if klen == 0:
                    raise MessageIllegalError(f"properties[{r + first_row}]", "a property name is empty", None)
                if _check_utf8_separators(<const char *>kp, klen) or (
                        vlen and _check_utf8_separators(<const char *>vp, vlen)):
                    raise MessageIllegalError(f"properties[{r + first_row}]", "contains \\x01 or \\x02, RocketMQ's separators",
                                              None)
                if _name_is(kp, klen, "TAGS", 4):
                    map_tags = True
                elif _name_is(kp, klen, "KEYS", 4):
                    map_keys = True
                elif _name_is(kp, klen, "UNIQ_KEY", 8):
                    map_uniq = True
                props_n += klen + vlen + 2      # duplicates are corrected below, when written
            if has_tags:
                tg_n = <Py_ssize_t>(tags_off[r + 1] - tags_off[r])
                tg_p = &tags_data[0] + tags_off[r] if tg_n else NULL
                if tg_n and _check_utf8_separators(<const char *>tg_p, tg_n):
                    raise MessageIllegalError(f"tags[{r + first_row}]", "contains \\x01 or \\x02, RocketMQ's separators", None)
                props_n += 4 + tg_n + 2
            keys_n = 0
            if has_keys:
                k0 = keys_list[r]
                k1 = keys_list[r + 1]
                nkeys = 0
                for j in range(k0, k1):
                    if key_valid is not None and not key_valid[j]:
                        continue
                    kn = <Py_ssize_t>(key_off[j + 1] - key_off[j])
                    if kn and _check_utf8_separators(<const char *>&key_data[0] + key_off[j], kn):
                        raise MessageIllegalError(f"keys[{r + first_row}]", "contains \\x01 or \\x02, RocketMQ's separators",
                                                  None)
                    keys_n += <int32_t>kn + (1 if nkeys else 0)
                    nkeys += 1
                props_n += 4 + keys_n + 2
            has_uniq = uniq_from_col = uniq_in_off is not None and (uniq_valid is None or uniq_valid[r])
            uniq_n = 0
            if has_uniq:
                uq_n = <Py_ssize_t>(uniq_in_off[r + 1] - uniq_in_off[r])
                uq_p = &uniq_in_data[0] + uniq_in_off[r] if uq_n else NULL
                if uq_n and _check_utf8_separators(<const char *>uq_p, uq_n):
                    raise MessageIllegalError(f"uniq_key[{r + first_row}]", "contains \\x01 or \\x02, RocketMQ's "
                                              "separators", None)
                props_n += 8 + uq_n + 2
                uniq_n = min(uq_n, 64)
                if uniq_n:
                    memcpy(uniq_buf, uq_p, <size_t>uniq_n)
            elif not map_uniq:
                uniq_n = generated_n if check_only else self.uniq_keys.next_key_into(uniq_buf)
                props_n += 8 + uniq_n + 2
            if self.append_prop_crc:
                props_n += CRC32_RESERVED_LEN
            if props_n > PROPERTIES_MAX_LENGTH:
                raise MessageIllegalError(f"properties[{r + first_row}]", f"{props_n} bytes, more than {PROPERTIES_MAX_LENGTH}",
                                          PROPERTIES_MAX_LENGTH, PutStatus.PROPERTIES_SIZE_EXCEEDED)
            born_p = <const unsigned char *>PyBytes_AS_STRING(store)
            born_n = store_n
            if born_host_idx is not None and born_host_idx[r] >= 0:
                hidx = born_host_idx[r]
                born_p = &host_table[0] + <Py_ssize_t>hidx * 20
                born_n = host_len[hidx]
            sys_flag = (FLAG_STOREHOSTADDRESS_V6 if store_n == 20 else 0) | (FLAG_BORNHOST_V6 if born_n == 20 else 0)
            total = cal_msg_length_c(1, sys_flag, <int32_t>b_n, <int32_t>t_n, <int32_t>props_n)
            if b_n > self.max_message_size or total > self.max_message_size:
                raise MessageIllegalError(f"body[{r + first_row}]", f"record of {b_n if b_n > self.max_message_size else total} "
                                          f"bytes exceeds max_message_size {self.max_message_size}",
                                          self.max_message_size)
            born_ts = born_ms[r] if born_ms is not None and born_ms[r] != 0 else now
            if check_only:
                if total > longest:
                    longest = total
                    longest_row = r
                continue

            out.reserve(total)
            p = out.data + out.size
            crc = rmq_crc32(0, b_p, <size_t>b_n) & 0x7FFFFFFF if b_n else 0
            rmq_store_be32(p, <uint32_t>total)
            rmq_store_be32(p + 4, <uint32_t>MESSAGE_MAGIC_CODE)
            rmq_store_be32(p + 8, crc)
            rmq_store_be32(p + 12, <uint32_t>qid)
            rmq_store_be32(p + 16, <uint32_t>(flag[r] if flag is not None else 0))
            rmq_store_be64(p + 20, 0)
            rmq_store_be64(p + 28, 0)
            rmq_store_be32(p + 36, <uint32_t>sys_flag)
            rmq_store_be64(p + 40, <uint64_t>born_ts)
            q = p + 48
            memcpy(q, born_p, <size_t>born_n)                       # born host (default: the store's own)
            q += born_n
            rmq_store_be64(q, 0)                                      # store timestamp: set under the put lock
            q += 8
            memcpy(q, PyBytes_AS_STRING(store), store_n)
            q += store_n
            rmq_store_be32(q, <uint32_t>(reconsume[r] if reconsume is not None else 0))   # reconsume times
            rmq_store_be64(q + 4, 0)                                  # prepared transaction offset
            rmq_store_be32(q + 12, <uint32_t>b_n)
            q += 16
            if b_n:
                memcpy(q, b_p, <size_t>b_n)
                q += b_n
            q[0] = <unsigned char>t_n
            memcpy(q + 1, t_p, <size_t>t_n)
            q += 1 + t_n
            rmq_store_be16(q, <uint16_t>props_n)
            q += 2
            for j in range(p0, p1):
                if pvalue_valid is not None and not pvalue_valid[j]:
                    continue
                klen = <Py_ssize_t>(pname_off[j + 1] - pname_off[j])
                kp = &pname_data[0] + pname_off[j]
                if self.append_prop_crc and _name_is(kp, klen, "__CRC32#", 8):
                    continue
                dup = False
                for jj in range(p0, j):          # the first of equal names holds the last one's value
                    if (pvalue_valid is None or pvalue_valid[jj]) and pname_off[jj + 1] - pname_off[jj] == klen \
                            and memcmp(&pname_data[0] + pname_off[jj], kp, <size_t>klen) == 0:
                        dup = True
                        break
                if dup:
                    continue
                jj = j                            # the value is the last one given for this name
                for k in range(j + 1, p1):
                    if (pvalue_valid is None or pvalue_valid[k]) and pname_off[k + 1] - pname_off[k] == klen \
                            and memcmp(&pname_data[0] + pname_off[k], kp, <size_t>klen) == 0:
                        jj = k
                if has_tags and _name_is(kp, klen, "TAGS", 4):
                    q = put_pair(q, kp, klen, tg_p, tg_n)
                    has_tags = False
                elif has_keys and _name_is(kp, klen, "KEYS", 4):
                    q = _put_keys(q, keys_list[r], keys_list[r + 1], key_valid, key_off, key_data, keys_n)
                    has_keys = False
                elif has_uniq and _name_is(kp, klen, "UNIQ_KEY", 8):
                    q = put_pair(q, kp, klen, uq_p, uq_n)
                    has_uniq = False
                else:
                    vlen = <Py_ssize_t>(pvalue_off[jj + 1] - pvalue_off[jj])
                    q = put_pair(q, kp, klen, &pvalue_data[0] + pvalue_off[jj] if vlen else NULL, vlen)
                    if not uniq_from_col and _name_is(kp, klen, "UNIQ_KEY", 8):
                        memcpy(uniq_buf, &pvalue_data[0] + pvalue_off[jj], <size_t>min(vlen, 64))
                        uniq_n = min(vlen, 64)
            if has_tags:
                q = put_pair(q, <const unsigned char *>"TAGS", 4, tg_p, tg_n)
            if has_keys:
                q = _put_keys(q, keys_list[r], keys_list[r + 1], key_valid, key_off, key_data, keys_n)
            if has_uniq:                  # the producer's key, no UNIQ_KEY in the map to replace
                q = put_pair(q, <const unsigned char *>"UNIQ_KEY", 8, uq_p, uq_n)
            elif not uniq_from_col and not map_uniq:       # generated
                q = put_pair(q, <const unsigned char *>"UNIQ_KEY", 8, <const unsigned char *>uniq_buf, uniq_n)
            if self.append_prop_crc:
                q = put_crc_placeholder(q)
            if q != p + total:       # duplicate names made the map shorter than counted: fix the lengths
                props_n -= <int32_t>((p + total) - q)
                total = <int32_t>(q - p)
                rmq_store_be32(p, <uint32_t>total)
                rmq_store_be16(p + total - props_n - 2, <uint16_t>props_n)
            memcpy(&uniq_out[base_uniq], uniq_buf, <size_t>uniq_n)
            base_uniq += uniq_n
            uniq_off[r + 1] = base_uniq

            rec = &out.rec[out.count]
            rec.pos = out.size
            rec.length = total
            rec.tran_type = 0
            rec.store_ts_pos = 48 + <int32_t>born_n
            rec.queue_id = qid
            rec.record_crc = self.append_prop_crc
            rec.body_crc_pos = 0
            out.topics.append(topic_obj)
            out.size += total
            out.count += 1
        if check_only:
            return first_row + longest_row, longest
        return nrows

    def encode(self, Message msg):
        """Encode one message into a fresh EncodeBuffer (tests, tools)."""
        cdef EncodeBuffer b = EncodeBuffer()
        self.encode_into(msg, b)
        return b

    def encode_batch(self, messages, EncodeBuffer out=None, dict properties=None):
        """Encode every message into ``out`` (cleared first) so a bad one raises before anything is written;
        ``properties``: common to all of them (see batch_properties)."""
        cdef BatchProperties batch = self.batch_properties(properties) if properties else None
        if out is None:
            out = EncodeBuffer()
        else:
            out.clear()
        for m in messages:
            self.encode_into(<Message?>m, out, batch)
        return out

    def batch_properties(self, dict properties not None):
        """Validate and encode, once, properties common to a batch (BatchProperties). Refused with
        MessageIllegalError naming the property: a name or value that is not a str, an empty name, RocketMQ's
        separators \\x01 / \\x02, more than 32767 bytes, and a delay or timer property (it reroutes one message; RocketMQ
        refuses a batch with a delay level, CommitLog.asyncPutMessages). A __CRC32# is dropped when this encoder
        writes its own (append_prop_crc), as from a message's properties."""
        cdef BatchProperties bp = BatchProperties.__new__(BatchProperties)
        cdef Py_ssize_t kn, vn, total = 0
        cdef const char *ku
        cdef const char *vu
        cdef unsigned char *q
        cdef Py_ssize_t j = 0, at = 0
        bp.properties = {}
        bp.names = []
        bp.index = {}
        for k, v in properties.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise MessageIllegalError(f"properties[{k!r}]", "batch property names and values must be str", None)
            ku = PyUnicode_AsUTF8AndSize(k, &kn)
            vu = PyUnicode_AsUTF8AndSize(v, &vn)
            if kn == 0:
                raise MessageIllegalError("properties", "a batch property name is empty", None)
            if _check_utf8_separators(ku, kn) or _check_utf8_separators(vu, vn):
                raise MessageIllegalError(f"properties[{k!r}]", "contains \\x01 or \\x02, RocketMQ's separators",
                                          None)
            if _is_timing_name(ku, kn):
                raise MessageIllegalError(f"properties[{k!r}]", "a delay or timer is a message's own property, not "
                                          "a batch's (RocketMQ refuses a delayed batch)", None)
            if self.append_prop_crc and kn == 8 and memcmp(ku, "__CRC32#", 8) == 0:
                continue
            bp.index[k] = len(bp.names)
            bp.properties[k] = v
            bp.names.append(k)
            total += kn + vn + 2
            if total > PROPERTIES_MAX_LENGTH:
                raise MessageIllegalError("properties", f"batch properties of more than {PROPERTIES_MAX_LENGTH} "
                                          "bytes", PROPERTIES_MAX_LENGTH, PutStatus.PROPERTIES_SIZE_EXCEEDED)
        bp.count = len(bp.names)
        bp.pair = <Py_ssize_t *>malloc(<size_t>(3 * bp.count + 1) * sizeof(Py_ssize_t))
        if bp.pair == NULL:
            raise MemoryError()
        bp.name_n = bp.pair + bp.count
        bp.value_n = bp.name_n + bp.count
        bp.encoded = PyBytes_FromStringAndSize(NULL, total)
        q = <unsigned char *>PyBytes_AS_STRING(bp.encoded)
        for k, v in bp.properties.items():
            ku = PyUnicode_AsUTF8AndSize(k, &kn)
            vu = PyUnicode_AsUTF8AndSize(v, &vn)
            bp.pair[j] = at
            bp.name_n[j] = kn
            bp.value_n[j] = vn
            q = put_pair(q, <const unsigned char *>ku, kn, <const unsigned char *>vu, vn)
            at += kn + vn + 2
            j += 1
        bp.uniq = bp.properties.get(PROPERTY_UNIQ_KEY)
        return bp
