# The record encoder: Messages (or Arrow rows) into v1 records in an EncodeBuffer, per-put fields left empty.
from cpython.bytes cimport PyBytes_AS_STRING
from cpython.dict cimport PyDict_GetItemWithError
from cpython.object cimport PyObject
from libc.stdint cimport int32_t, int64_t, uint16_t, uint32_t
from libc.string cimport memcmp

from rmqcore._c cimport rmq_crc32
from rmqcore._codec cimport CRC32_RESERVED_LEN
from rmqcore._message cimport Message


cdef struct EncodedRecord:
    Py_ssize_t pos          # where the record starts in EncodeBuffer.data
    int32_t length
    int32_t tran_type
    int32_t store_ts_pos    # 56, or 68 with an IPv6 born host
    int32_t queue_id
    bint record_crc         # ends with the 5.x __CRC32# property, filled in once the per-put fields are set
    int32_t body_crc_pos    # > 0: the body (from here, body_crc_len bytes) still needs its CRC (deferred)
    int32_t body_crc_len


cdef class EncodeBuffer:
    cdef unsigned char *data
    cdef Py_ssize_t size
    cdef Py_ssize_t capacity
    cdef EncodedRecord *rec
    cdef Py_ssize_t count
    cdef Py_ssize_t rec_capacity
    cdef list topics            # topic per record (with EncodedRecord.queue_id: the topic-queue key)
    cdef list uniq_keys
    cdef bint defer_body_crc    # encode_into leaves body CRCs to fill_body_crcs (put_batch: one GIL-free pass)
    cdef int reserve(self, Py_ssize_t nbytes) except -1


# MessageClientIDSetter
cdef class UniqKeyGenerator:
    cdef bytes _prefix
    cdef int64_t _start
    cdef int64_t _next_start
    cdef uint16_t _counter
    cdef _set_month(self, int64_t now)
    cdef Py_ssize_t next_key_into(self, char *o) noexcept
    cpdef str next_key(self)
    cdef str key_at(self, int64_t now)


cdef class BatchProperties:
    cdef readonly dict properties     # the names and values applied (a __CRC32# dropped when the encoder writes its own)
    cdef readonly bytes encoded       # name \x01 value \x02 ..., in the dict's order: appended as is
    cdef list names
    cdef dict index                   # name -> its number (a lookup for batches of many names)
    cdef object uniq                  # the batch's UNIQ_KEY (every message's then), or None
    cdef Py_ssize_t count
    cdef Py_ssize_t *pair             # per name: where its pair starts in ``encoded``, its name's and value's length
    cdef Py_ssize_t *name_n
    cdef Py_ssize_t *value_n

    cdef inline Py_ssize_t find(self, object k, const char *ku, Py_ssize_t kn) except -2:
        # The number of the batch's name equal to a message's property name (its UTF-8 ku/kn), or -1. A few
        # names (the broker's one) are compared as bytes: cheaper than a dict lookup per message.
        cdef Py_ssize_t j
        cdef const char *e
        cdef PyObject *found
        if self.count <= 8:
            e = PyBytes_AS_STRING(self.encoded)
            for j in range(self.count):
                if self.name_n[j] == kn and memcmp(e + self.pair[j], ku, <size_t>kn) == 0:
                    return j
            return -1
        found = PyDict_GetItemWithError(self.index, k)
        return -1 if found is NULL else <Py_ssize_t><object>found


cdef class MessageEncoder:
    cdef readonly int max_message_size
    cdef readonly bytes store_host_bytes
    cdef readonly UniqKeyGenerator uniq_keys
    cdef bint check_topic_chars
    # reroute(msg): called before a message carrying a delay or timer property (DELAY, __STARTDELIVERTIME,
    # TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS) is encoded, to move it to the schedule or timer topic as
    # RocketMQ's CommitLog.putMessage does; None (a bare commit log) stores such messages as they are. A delivery
    # (encode_into's broker_topic_rule False) calls reroute(msg, False): its later delivery is one too.
    cdef public object reroute
    # RocketMQ 5's enabledAppendPropCRC: every record ends with a __CRC32# property holding the CRC of the record
    # before it, so damage anywhere in it is caught (the v1 body CRC covers the body only).
    cdef public bint append_prop_crc
    cdef int _check_topic(self, topic, bint broker_rule=*) except -1
    cpdef int encode_into(self, Message msg, EncodeBuffer out, BatchProperties batch=*,
                          bint broker_topic_rule=*) except -1


cdef void fill_body_crcs(EncodeBuffer b) noexcept nogil


cdef inline void _fill_record_crc(unsigned char *rec, int32_t total) noexcept nogil:
    # MessageDecoder.createCrc32 after DefaultAppendMessageCallback's CRC of the record before the property (all
    # per-put fields set): 10 decimal digits, least significant first, of crc32 & 0x7FFFFFFF.
    cdef uint32_t crc = rmq_crc32(0, rec, <size_t>(total - CRC32_RESERVED_LEN)) & 0x7FFFFFFF
    cdef unsigned char *d = rec + total - CRC32_RESERVED_LEN + 9
    cdef int i
    for i in range(10):
        d[i] = <unsigned char>(48 + crc % 10)
        crc //= 10
