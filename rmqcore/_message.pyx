# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The message types, as RocketMQ's Message, MessageExt and PutMessageResult: ``Message`` (what a put takes),
``MessageExt`` (a stored record decoded zero-copy: fields read from the record when asked), ``PutResult`` (what
a put answers), and what makes MessageExts from bytes (``decode_message``, ``RecordIterator``: MessageDecoder).
"""

cimport cython
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.string cimport memcpy

from rmqcore._c cimport rmq_store_be64
from rmqcore._codec cimport (MESSAGE_MAGIC_CODE, RECORD_BLANK, RECORD_END, RECORD_OK, RecordView,
                             TRANSACTION_ROLLBACK_TYPE, _Buffer, _hex_upper, _host_str, _offset_msg_id,
                             _parse_properties, parse_record, tags_code_of)

from rmqcore._codec import KEY_SEPARATOR, PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, record_error, tags_code
from rmqcore.errors import CorruptRecordError, MessageIllegalError
from rmqcore.status import PutStatus


cdef PUT_OK = PutStatus.PUT_OK


# ---------------------------------------------------------------------------------------------------------------
# Value types

cdef inline object _java_int(str field, value, int bits):
    # The common case (an exact int in range: every default) without Python arithmetic or a method call; it was
    # a third of what building a Message costs.
    cdef int overflow = 0
    cdef long long v
    if type(value) is int:
        v = PyLong_AsLongLongAndOverflow(value, &overflow)
        if overflow == 0 and (bits == 64 or -2147483648 <= v <= 2147483647):
            return value
    return _java_int_checked(field, value, bits)


cdef object _java_int_checked(str field, value, int bits):
    cdef object hi = (<object>1 << (bits - 1)) - 1     # Python ints: 1 << 63 overflows a C int
    cdef object lo = -hi - 1
    try:
        value = value.__index__()
    except AttributeError:
        raise TypeError(f"{field} must be an int, got {type(value).__name__}") from None
    if not lo <= value <= hi:
        raise MessageIllegalError(field, f"{value} does not fit a Java {'int' if bits == 32 else 'long'} "
                                         f"[{lo}, {hi}]", (lo, hi))
    return value


@cython.freelist(64)
cdef class Message:
    """A message to put: topic, body, queue id, and RocketMQ's properties (TAGS, KEYS, UNIQ_KEY, ...).

    ``tags`` and ``keys`` are shorthands for the TAGS and KEYS properties (keys joined by a space).
    ``born_timestamp`` 0 means "now" at put; ``born_host`` None means the store's own host.
    """

    def __init__(self, str topic not None, body=b"", queue_id=0, tags=None, keys=None, dict properties=None,
                 *, flag=0, sys_flag=0, born_timestamp=0, born_host=None, reconsume_times=0,
                 prepared_transaction_offset=0):
        self.topic = topic
        self.body = b"" if body is None else body
        # Java int and long fields: a value out of range is an illegal message naming the field, not an
        # OverflowError from the C conversion.
        self._queue_id = _java_int("queue_id", queue_id, 32)
        self._flag = _java_int("flag", flag, 32)
        self._sys_flag = _java_int("sys_flag", sys_flag, 32)
        self._born_timestamp = _java_int("born_timestamp", born_timestamp, 64)
        self.born_host = born_host
        self._reconsume_times = _java_int("reconsume_times", reconsume_times, 32)
        self._prepared_transaction_offset = _java_int("prepared_transaction_offset", prepared_transaction_offset, 64)
        self.properties = {} if properties is None else dict(properties)
        if tags is not None:
            self.properties[PROPERTY_TAGS] = tags
        if keys is not None:
            self._set_keys(keys)

    @property
    def queue_id(self):
        return self._queue_id

    @queue_id.setter
    def queue_id(self, value):
        self._queue_id = _java_int("queue_id", value, 32)

    @property
    def flag(self):
        return self._flag

    @flag.setter
    def flag(self, value):
        self._flag = _java_int("flag", value, 32)

    @property
    def sys_flag(self):
        return self._sys_flag

    @sys_flag.setter
    def sys_flag(self, value):
        self._sys_flag = _java_int("sys_flag", value, 32)

    @property
    def born_timestamp(self):
        return self._born_timestamp

    @born_timestamp.setter
    def born_timestamp(self, value):
        self._born_timestamp = _java_int("born_timestamp", value, 64)

    @property
    def reconsume_times(self):
        return self._reconsume_times

    @reconsume_times.setter
    def reconsume_times(self, value):
        self._reconsume_times = _java_int("reconsume_times", value, 32)

    @property
    def prepared_transaction_offset(self):
        return self._prepared_transaction_offset

    @prepared_transaction_offset.setter
    def prepared_transaction_offset(self, value):
        self._prepared_transaction_offset = _java_int("prepared_transaction_offset", value, 64)

    cdef _set_keys(self, value):
        if value is None:
            self.properties.pop(PROPERTY_KEYS, None)
        elif isinstance(value, str):
            self.properties[PROPERTY_KEYS] = value
        else:
            self.properties[PROPERTY_KEYS] = KEY_SEPARATOR.join(value)

    @property
    def tags(self):
        return self.properties.get(PROPERTY_TAGS)

    @tags.setter
    def tags(self, value):
        if value is None:
            self.properties.pop(PROPERTY_TAGS, None)
        else:
            self.properties[PROPERTY_TAGS] = value

    @property
    def keys(self):
        k = self.properties.get(PROPERTY_KEYS)
        return [x for x in k.split(KEY_SEPARATOR) if x] if k else []

    @keys.setter
    def keys(self, value):
        self._set_keys(value)

    @property
    def uniq_key(self):
        return self.properties.get(PROPERTY_UNIQ_KEY)

    def __repr__(self):
        return (f"Message(topic={self.topic!r}, queue_id={self.queue_id}, body={len(self.body)} bytes, "
                f"properties={self.properties!r})")


@cython.no_gc
@cython.freelist(256)
cdef class MessageExt:
    """A stored message, decoded in place. ``body`` is a zero-copy memoryview into the source (a mapped file or
    bytes) while this object is held; ``properties`` are parsed on first use."""

    def __init__(self):
        raise TypeError("MessageExt objects come from decode_message, CommitLog and MessageStore reads")

    cdef inline const unsigned char *_ptr(self, _Buffer b) except NULL:
        b.acquire(self._src)
        return <const unsigned char *>b.view.buf + self._pos

    @property
    def store_size(self):
        return self.rv.total_size

    @property
    def magic_code(self):
        return self.rv.magic

    @property
    def version(self):
        return 1 if self.rv.magic == MESSAGE_MAGIC_CODE else 2

    @property
    def body_crc(self):
        return self.rv.body_crc

    @property
    def queue_id(self):
        return self.rv.queue_id

    @property
    def flag(self):
        return self.rv.flag

    @property
    def queue_offset(self):
        return self.rv.queue_offset

    @property
    def commitlog_offset(self):
        return self.rv.physical_offset

    @property
    def sys_flag(self):
        return self.rv.sys_flag

    @property
    def born_timestamp(self):
        return self.rv.born_timestamp

    @property
    def store_timestamp(self):
        return self.rv.store_timestamp

    @property
    def reconsume_times(self):
        return self.rv.reconsume_times

    @property
    def prepared_transaction_offset(self):
        return self.rv.prepared_transaction_offset

    @property
    def body(self):
        cdef Py_ssize_t start = self._pos + self.rv.body_pos
        if type(self._src) is memoryview:       # a pull's view of a file: slice it (one object, not two)
            return self._src[start:start + self.rv.body_len]
        return memoryview(self._src)[start:start + self.rv.body_len]

    @property
    def born_host(self):
        cdef _Buffer b = _Buffer()
        return _host_str(self._ptr(b) + self.rv.born_host_pos, self.rv.born_host_len)

    @property
    def store_host(self):
        cdef _Buffer b = _Buffer()
        return _host_str(self._ptr(b) + self.rv.store_host_pos, self.rv.store_host_len)

    @property
    def msg_id(self):
        """The offset msg id: store host + this record's physical offset, as MessageDecoder.decode sets it."""
        cdef _Buffer b = _Buffer()
        cdef const unsigned char *p = self._ptr(b)
        cdef unsigned char buf[28]
        memcpy(buf, p + self.rv.store_host_pos, self.rv.store_host_len)
        rmq_store_be64(buf + self.rv.store_host_len, <uint64_t>self.rv.physical_offset)
        return _hex_upper(buf, self.rv.store_host_len + 8)

    @property
    def properties(self):
        cdef _Buffer b
        if self._props is None:
            b = _Buffer()
            self._props = _parse_properties(self._ptr(b) + self.rv.props_pos, self.rv.props_len)
        return self._props

    @property
    def tags(self):
        return self.properties.get(PROPERTY_TAGS)

    @property
    def tags_code(self):
        cdef _Buffer b = _Buffer()
        return tags_code_of(self._ptr(b) + self.rv.props_pos, self.rv.props_len)

    @property
    def keys(self):
        k = self.properties.get(PROPERTY_KEYS)
        return [x for x in k.split(KEY_SEPARATOR) if x] if k else []

    @property
    def uniq_key(self):
        return self.properties.get(PROPERTY_UNIQ_KEY)

    @property
    def transaction_type(self):
        return self.rv.sys_flag & TRANSACTION_ROLLBACK_TYPE

    cdef object _record(self):
        # a memoryview source (a mapped file's) is sliced as it is: one view made, not two
        if type(self._src) is memoryview:
            return self._src[self._pos:self._pos + self.rv.total_size]
        return memoryview(self._src)[self._pos:self._pos + self.rv.total_size]

    def record(self):
        """Zero-copy view of the whole record."""
        return self._record()

    def as_dict(self):
        """Every field, the body as bytes: for comparisons and export."""
        return {
            "store_size": self.store_size, "magic_code": self.magic_code, "body_crc": self.body_crc,
            "queue_id": self.queue_id, "flag": self.flag, "queue_offset": self.queue_offset,
            "commitlog_offset": self.commitlog_offset, "sys_flag": self.sys_flag,
            "born_timestamp": self.born_timestamp, "born_host": self.born_host,
            "store_timestamp": self.store_timestamp, "store_host": self.store_host,
            "reconsume_times": self.reconsume_times,
            "prepared_transaction_offset": self.prepared_transaction_offset,
            "body": bytes(self.body), "topic": self.topic, "properties": dict(self.properties),
        }

    def __repr__(self):
        return (f"MessageExt(topic={self.topic!r}, queue_id={self.queue_id}, queue_offset={self.queue_offset}, "
                f"commitlog_offset={self.commitlog_offset}, store_size={self.store_size})")


def record_views(list messages not None):
    """[m.record() for m in messages] in one call: a pull's body, each record a zero-copy view of its file."""
    cdef MessageExt m
    cdef list out = []
    for m in messages:
        out.append(m._record())
    return out


cdef MessageExt _make_ext(object src, Py_ssize_t pos, const unsigned char *p, RecordView *rv, str topic=None):
    # ``topic``: a str whose UTF-8 the caller has found equal to the record's topic bytes (it is the decoded topic).
    cdef MessageExt m = MessageExt.__new__(MessageExt)
    m._src = src
    m._pos = pos
    m.rv = rv[0]
    m.topic = PyUnicode_DecodeUTF8(<const char *>p + rv.topic_pos, rv.topic_len, "replace") if topic is None else topic
    return m


def decode_message(data, Py_ssize_t offset=0, bint check_crc=False, int64_t base_offset=0):
    """Decode the record at ``offset`` of ``data`` (any buffer) into a zero-copy MessageExt.

    Raises CorruptRecordError naming the field when the bytes are not a whole valid record (blank and end-of-data
    markers included); ``base_offset`` is added to ``offset`` in that error.
    """
    cdef _Buffer b = _Buffer()
    cdef RecordView rv
    cdef int code
    cdef const unsigned char *p
    b.acquire(data)
    if offset < 0 or offset > b.view.len:
        raise ValueError(f"offset {offset} outside the buffer of {b.view.len} bytes")
    p = <const unsigned char *>b.view.buf + offset
    code = parse_record(p, b.view.len - offset, &rv, check_crc)
    if code == RECORD_OK:
        return _make_ext(data, offset, p, &rv)
    if code == RECORD_BLANK:
        raise CorruptRecordError(base_offset + offset, "magicCode", "blank (end of file) record, not a message")
    if code == RECORD_END:
        raise CorruptRecordError(base_offset + offset, "totalSize", "0: no record here (end of data)")
    raise record_error(code, base_offset + offset)


@cython.final
cdef class RecordIterator:
    """Iterate the messages of ``data`` from ``start``: stops at end of data (totalSize 0) or at a blank record;
    raises CorruptRecordError (offset = base_offset + position) at the first bad record.

    ``position`` is where the next record starts, so a caller that catches the error knows the last good end.
    """
    cdef object src
    cdef _Buffer buf
    cdef readonly Py_ssize_t position
    cdef Py_ssize_t end
    cdef bint check_crc
    cdef readonly int64_t base_offset
    cdef readonly bint hit_blank

    def __init__(self, data, Py_ssize_t start=0, Py_ssize_t end=-1, bint check_crc=False, int64_t base_offset=0):
        self.src = data
        self.buf = _Buffer()
        self.buf.acquire(data)
        if end < 0 or end > self.buf.view.len:
            end = self.buf.view.len
        if start < 0 or start > end:
            raise ValueError(f"start {start} outside [0, {end}]")
        self.position = start
        self.end = end
        self.check_crc = check_crc
        self.base_offset = base_offset

    def __iter__(self):
        return self

    def __next__(self):
        cdef RecordView rv
        cdef const unsigned char *p = <const unsigned char *>self.buf.view.buf + self.position
        cdef int code = parse_record(p, self.end - self.position, &rv, self.check_crc)
        cdef MessageExt m
        if code == RECORD_OK:
            m = _make_ext(self.src, self.position, p, &rv)
            self.position += rv.total_size
            return m
        if code == RECORD_BLANK:
            self.hit_blank = True
            raise StopIteration
        if code == RECORD_END:
            raise StopIteration
        raise record_error(code, self.base_offset + self.position)


@cython.no_gc
@cython.freelist(256)
cdef class PutResult:
    """RocketMQ's PutMessageResult + AppendMessageResult: status, where the record went, when."""

    def __init__(self, status, int64_t commitlog_offset=-1, int64_t queue_offset=-1, int32_t wrote_bytes=0,
                 int64_t store_timestamp=0, str uniq_key=None, bytes store_host=None):
        self.status = status
        self.commitlog_offset = commitlog_offset
        self.queue_offset = queue_offset
        self.wrote_bytes = wrote_bytes
        self.store_timestamp = store_timestamp
        self.uniq_key = uniq_key
        self._store_host = store_host

    @property
    def ok(self):
        return self.status is PUT_OK

    @property
    def msg_id(self):
        """The offset msg id (store host + commitlog offset), computed on demand as RocketMQ's msgIdSupplier."""
        if self._store_host is None or self.commitlog_offset < 0:
            return None
        return _offset_msg_id(self._store_host, self.commitlog_offset)

    cdef PutResult with_status(self, status):
        cdef PutResult r = PutResult.__new__(PutResult)
        r.status = status
        r.commitlog_offset = self.commitlog_offset
        r.queue_offset = self.queue_offset
        r.wrote_bytes = self.wrote_bytes
        r.store_timestamp = self.store_timestamp
        r.uniq_key = self.uniq_key
        r._store_host = self._store_host
        return r

    def replace_status(self, status):
        return self.with_status(status)

    def __repr__(self):
        return (f"PutResult({self.status.name}, commitlog_offset={self.commitlog_offset}, "
                f"queue_offset={self.queue_offset}, wrote_bytes={self.wrote_bytes}, msg_id={self.msg_id!r})")
