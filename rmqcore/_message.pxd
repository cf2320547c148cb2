# The message types: what a put takes, what a read gives, what a put answers.
from libc.stdint cimport int32_t, int64_t

from rmqcore._codec cimport RecordView, _Buffer


cdef class Message:
    cdef public str topic
    cdef public object body
    # Java int/long fields, set through properties that check the range (MessageIllegalError naming the field)
    cdef int _queue_id
    cdef int _flag
    cdef int _sys_flag
    cdef int64_t _born_timestamp
    cdef public object born_host
    cdef int _reconsume_times
    cdef int64_t _prepared_transaction_offset
    cdef public dict properties
    cdef _set_keys(self, value)


cdef class MessageExt:
    cdef object _src                    # the bytes or memoryview the record lives in (kept alive)
    cdef Py_ssize_t _pos                # record start inside _src
    cdef RecordView rv
    cdef readonly str topic
    cdef dict _props                    # parsed lazily
    cdef const unsigned char *_ptr(self, _Buffer b) except NULL
    cdef object _record(self)


cdef class PutResult:
    cdef readonly object status
    cdef readonly int64_t commitlog_offset
    cdef readonly int64_t queue_offset
    cdef readonly int32_t wrote_bytes
    cdef readonly int64_t store_timestamp
    cdef readonly str uniq_key
    cdef bytes _store_host
    cdef PutResult with_status(self, status)


# A MessageExt over the record at ``p`` (``pos`` in ``src``), parsed into ``rv`` (the pull loop, look and query).
cdef MessageExt _make_ext(object src, Py_ssize_t pos, const unsigned char *p, RecordView *rv, str topic=*)
