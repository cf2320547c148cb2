# cython: language_level=3, boundscheck=False, wraparound=False
"""SendMessage's per-message work, compiled: the protocol's Messages → store Messages (``to_store_message``,
``to_store_messages``) and the answer's entries (``fill_send_entries``). converter.py holds the same three in
Python, the reference these are tested against (tests/test_server_converter.py: equal Messages, property order and
record bytes; equal errors, code and text; equal responses). And ``CommonSend``, the common request answered end
to end with them; its reference is the service's general path (tests/test_server_common_send.py: equal answers,
records and counters from two servers).

What made the Python one cost ~5 us a message (1 KiB body, a tag, a key) was Python around the protobuf calls
(generator expressions over each text, ``items()`` of the user properties, building the Message through its
keyword constructor) and the protobuf calls themselves: ~20 attribute reads and HasFields, each ~40-100 ns in upb's
attribute lookup. Here the system properties are read from their wire form (one SerializePartialToString, parsed
in C; by attribute when it holds what the reader cannot skip), the texts are scanned in C, the Message is made with
its fields set directly, and the answer's entries are encoded in protobuf's wire format and merged in one
``MergeFromString`` (an ``entries.add()`` and five attribute sets per entry cost ten times as much).

Imports neither grpc nor protobuf (only in the ``server`` extra; the core builds and imports without them): the
messages are taken duck-typed and the protocol's enum values (rmqcore/server/messaging.proto) are constants here.
"""
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.unicode cimport (Py_UNICODE_ISPRINTABLE, Py_UNICODE_ISSPACE, PyUnicode_AsUTF8AndSize,
                              PyUnicode_DecodeUTF8)
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

from rmqcore._message cimport Message, PutResult

import time

from rmqcore.server import message_const as _const
from rmqcore.status import PutStatus

# The protocol's enum values (messaging.proto: Code, MessageType, Encoding).
cdef enum:
    OK = 20000
    ILLEGAL_MESSAGE_TAG = 40004
    ILLEGAL_MESSAGE_KEY = 40005
    ILLEGAL_MESSAGE_GROUP = 40006
    ILLEGAL_MESSAGE_PROPERTY_KEY = 40007
    ILLEGAL_MESSAGE_ID = 40009
    ILLEGAL_DELIVERY_TIME = 40012
    MESSAGE_CORRUPTED = 40016
    MESSAGE_BODY_TOO_LARGE = 41301
    MESSAGE_BODY_EMPTY = 41302
    MESSAGE_PROPERTIES_TOO_LARGE = 43101
    INTERNAL_SERVER_ERROR = 50001
    MASTER_PERSISTENCE_TIMEOUT = 50401
    SLAVE_PERSISTENCE_TIMEOUT = 50402
    HA_NOT_AVAILABLE = 50002
    TRANSACTION = 4             # MessageType
    GZIP = 2                    # Encoding

# Typed module constants, so that the dict and set operations compile to direct C-API calls.
cdef str PROPERTY_TAGS = _const.PROPERTY_TAGS
cdef str PROPERTY_KEYS = _const.PROPERTY_KEYS
cdef str PROPERTY_UNIQ_KEY = _const.PROPERTY_UNIQ_KEY
cdef str PROPERTY_SHARDING_KEY = _const.PROPERTY_SHARDING_KEY
cdef str PROPERTY_TIMER_DELIVER_MS = _const.PROPERTY_TIMER_DELIVER_MS
cdef str PROPERTY_TRANSACTION_PREPARED = _const.PROPERTY_TRANSACTION_PREPARED
cdef str PROPERTY_PRODUCER_GROUP = _const.PROPERTY_PRODUCER_GROUP
cdef str PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = _const.PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS
cdef str PROPERTY_TRACE_CONTEXT = _const.PROPERTY_TRACE_CONTEXT
cdef frozenset SYSTEM_PROPERTIES = _const.SYSTEM_PROPERTIES
cdef Py_ssize_t DEFAULT_MAX_BODY = _const.DEFAULT_MAX_BODY
cdef object gzip_encoded_body = _const.gzip_encoded_body
cdef Py_ssize_t MAX_USER_PROPERTY_SIZE = _const.MAX_USER_PROPERTY_SIZE
cdef Py_ssize_t MAX_MESSAGE_GROUP_SIZE = _const.MAX_MESSAGE_GROUP_SIZE
cdef Py_ssize_t MAX_TAG_LENGTH = _const.MAX_TAG_LENGTH
cdef Py_ssize_t MAX_MESSAGE_ID_LENGTH = _const.MAX_MESSAGE_ID_LENGTH
cdef object InvalidMessage = _const.InvalidMessage
cdef object born_timestamp_refused = _const.born_timestamp_refused
cdef object PUT_OK = PutStatus.PUT_OK
cdef object FLUSH_DISK_TIMEOUT = PutStatus.FLUSH_DISK_TIMEOUT
cdef object FLUSH_SLAVE_TIMEOUT = PutStatus.FLUSH_SLAVE_TIMEOUT
cdef object SLAVE_NOT_AVAILABLE = PutStatus.SLAVE_NOT_AVAILABLE


# ---------------------------------------------------------------------------------------------------------------
# A protocol Message → a store Message

cdef int _refuse_text(str value, int code, str what) except -1:
    raise InvalidMessage(code, f"{what} {value[:64]!r} is blank or holds a control character")


cdef int _check_text(str value, int code, str what) except -1:
    # converter._check_text: no NUL, \x01, \x02, \n or \r, and not blank (str.strip() strips exactly the
    # characters Py_UNICODE_ISSPACE says are space).
    cdef Py_UCS4 ch
    cdef bint blank = True
    for ch in value:
        if ch == u'\x00' or ch == u'\x01' or ch == u'\x02' or ch == u'\n' or ch == u'\r':
            return _refuse_text(value, code, what)
        if blank and not Py_UNICODE_ISSPACE(ch):
            blank = False
    if blank:
        return _refuse_text(value, code, what)
    return 0


cdef inline bint _has_separator(str s):
    # The property separators of a record (NAME_VALUE_SEPARATOR \x01, PROPERTY_SEPARATOR \x02).
    cdef Py_UCS4 ch
    for ch in s:
        if ch == u'\x01' or ch == u'\x02':
            return True
    return False


cdef inline bint _printable(str s):
    # str.isprintable, character by character (the same test CPython makes); ASCII (a message id's alphabet)
    # without the call: of it, exactly ' '..'~' is printable.
    cdef Py_UCS4 ch
    for ch in s:
        if ch < 128:
            if ch < 32 or ch == 127:
                return False
        elif not Py_UNICODE_ISPRINTABLE(ch):
            return False
    return True


cdef object _born_host(str host):
    """converter._born_host in one pass: "a:b" (one colon) as it is, a dotted quad of ASCII numbers < 256 with
    ":0", anything else None (the store's own host)."""
    cdef Py_UCS4 ch
    cdef Py_ssize_t colons = 0, dots = 0, digits = 0
    cdef int value = 0
    cdef bint quad = True
    if not host:
        return None
    for ch in host:
        if ch == u':':
            colons += 1
            quad = False
        elif ch == u'.':
            if digits == 0 or value >= 256:
                quad = False
            dots += 1
            digits = 0
            value = 0
        elif 48 <= ch <= 57:                 # '0'..'9'
            digits += 1
            if value < 256:         # saturates: any number >= 256 is refused, however long
                value = value * 10 + <int>ch - 48
        else:
            quad = False
    if colons == 1:
        return host
    if quad and dots == 3 and digits > 0 and value < 256:
        return host + ":0"
    return None


@cython.freelist(8)
cdef class _Sys:
    """The system properties a conversion reads, and which of the optional ones are set."""
    cdef bint has_tag, has_group, has_trace, has_delivery, has_orphaned, has_born
    cdef str tag, message_id, group, trace, born_host
    cdef list keys
    cdef int32_t body_encoding, message_type
    cdef int64_t delivery_s, born_s, orphaned_s
    cdef int32_t delivery_n, born_n

    def __cinit__(self):
        self.tag = self.message_id = self.group = self.trace = self.born_host = u""
        self.keys = None


cdef _Sys _read_attributes(sp):
    """The system properties by attribute (what _read_wire falls back to)."""
    cdef _Sys f = _Sys.__new__(_Sys)
    # An optional string that reads non-empty is set; only an empty one needs HasField.
    f.tag = sp.tag
    f.has_tag = bool(f.tag) or sp.HasField("tag")
    keys = sp.keys
    if len(keys):
        f.keys = list(keys)
    f.message_id = sp.message_id
    f.message_type = sp.message_type
    f.group = sp.message_group
    f.has_group = bool(f.group) or sp.HasField("message_group")
    if sp.HasField("delivery_timestamp"):
        f.has_delivery = True
        f.delivery_s = sp.delivery_timestamp.seconds
        f.delivery_n = sp.delivery_timestamp.nanos
    if sp.HasField("orphaned_transaction_recovery_duration"):
        f.has_orphaned = True
        f.orphaned_s = sp.orphaned_transaction_recovery_duration.seconds
    f.trace = sp.trace_context
    f.has_trace = bool(f.trace) or sp.HasField("trace_context")
    f.body_encoding = sp.body_encoding
    if sp.HasField("born_timestamp"):
        f.has_born = True
        f.born_s = sp.born_timestamp.seconds
        f.born_n = sp.born_timestamp.nanos
    f.born_host = sp.born_host
    return f


# SystemProperties' field numbers (messaging.proto), and Timestamp's and Duration's (seconds 1, nanos 2).
cdef enum:
    SP_TAG = 1
    SP_KEYS = 2
    SP_MESSAGE_ID = 3
    SP_BODY_ENCODING = 5
    SP_MESSAGE_TYPE = 6
    SP_BORN_TIMESTAMP = 7
    SP_BORN_HOST = 8
    SP_DELIVERY_TIMESTAMP = 11
    SP_MESSAGE_GROUP = 17
    SP_TRACE_CONTEXT = 18
    SP_ORPHANED_DURATION = 19
    WIRE_VARINT = 0
    WIRE_I64 = 1
    WIRE_LEN = 2
    WIRE_I32 = 5


cdef inline const unsigned char *_get_varint(const unsigned char *p, const unsigned char *end,
                                             uint64_t *out) noexcept nogil:
    """The varint at p into *out; the byte after it, or NULL when it runs past ``end`` or past 10 bytes."""
    cdef uint64_t v = 0
    cdef int shift = 0
    while p < end and shift < 70:
        v |= <uint64_t>(p[0] & 0x7F) << shift
        if p[0] < 0x80:
            out[0] = v
            return p + 1
        p += 1
        shift += 7
    return NULL


cdef inline const unsigned char *_skip(const unsigned char *p, const unsigned char *end, int wire) noexcept nogil:
    """Past one field's value of wire type ``wire``; NULL when it cannot be skipped here (groups: the caller reads
    by attribute instead)."""
    cdef uint64_t v
    if wire == WIRE_VARINT:
        return _get_varint(p, end, &v)
    if wire == WIRE_I64:
        return p + 8 if end - p >= 8 else NULL
    if wire == WIRE_I32:
        return p + 4 if end - p >= 4 else NULL
    if wire == WIRE_LEN:
        p = _get_varint(p, end, &v)
        return p + v if p != NULL and v <= <uint64_t>(end - p) else NULL
    return NULL


cdef int _read_seconds_nanos(const unsigned char *p, const unsigned char *end, int64_t *seconds,
                             int32_t *nanos) noexcept nogil:
    """A Timestamp or Duration into *seconds and *nanos, merged as protobuf merges a message field written twice
    (each field it holds replaces the value); -1 when it does not parse."""
    cdef uint64_t key, v
    cdef int wire
    while p < end:
        p = _get_varint(p, end, &key)
        if p == NULL:
            return -1
        wire = <int>(key & 7)
        if wire == WIRE_VARINT and ((key >> 3) == 1 or (key >> 3) == 2):
            p = _get_varint(p, end, &v)
            if p == NULL:
                return -1
            if (key >> 3) == 1:
                seconds[0] = <int64_t>v
            else:
                nanos[0] = <int32_t>v           # int32: the low 32 bits of the (sign-extended) varint
        else:
            p = _skip(p, end, wire)             # unknown to this reader: kept by protobuf, never read
        if p == NULL:
            return -1
    return 0


cdef str _utf8(const unsigned char *p, uint64_t n):
    return PyUnicode_DecodeUTF8(<const char *>p, <Py_ssize_t>n, NULL)


cdef _Sys _read_wire(sp):
    """The system properties from their wire form: one SerializePartialToString where reading them by attribute
    takes a dozen attribute reads and a HasField for each optional field that is empty (most of a conversion's
    cost, by perf: upb's attribute lookup). Field presence is in the wire form itself: protobuf writes an optional
    field that is set even when empty, a message field that is set even when it holds nothing, and never a
    scalar that is not set and zero. Fields this reader does not know are skipped, as are known numbers in the
    wrong wire type (protobuf's parser kept those as unknown fields, so they never were the field). None when the
    wire form holds what this reader cannot skip, or text that is not UTF-8: the caller reads by attribute."""
    cdef bytes data = sp.SerializePartialToString()
    cdef const unsigned char *p = <const unsigned char *>PyBytes_AS_STRING(data)
    cdef const unsigned char *end = p + PyBytes_GET_SIZE(data)
    cdef const unsigned char *v
    cdef uint64_t key, n
    cdef int wire, field
    cdef int32_t orphaned_n = 0
    cdef _Sys f = _Sys.__new__(_Sys)
    try:
        while p < end:
            p = _get_varint(p, end, &key)
            if p == NULL:
                return None
            wire = <int>(key & 7)
            field = <int>(key >> 3) if (key >> 3) < 64 else 64
            if wire == WIRE_LEN and field in (SP_TAG, SP_KEYS, SP_MESSAGE_ID, SP_BORN_TIMESTAMP, SP_BORN_HOST,
                                              SP_DELIVERY_TIMESTAMP, SP_MESSAGE_GROUP, SP_TRACE_CONTEXT,
                                              SP_ORPHANED_DURATION):
                p = _get_varint(p, end, &n)
                if p == NULL or n > <uint64_t>(end - p):
                    return None
                v = p
                p += n
                if field == SP_TAG:
                    f.has_tag = True
                    f.tag = _utf8(v, n)
                elif field == SP_KEYS:
                    if f.keys is None:
                        f.keys = []
                    f.keys.append(_utf8(v, n))
                elif field == SP_MESSAGE_ID:
                    f.message_id = _utf8(v, n)
                elif field == SP_BORN_HOST:
                    f.born_host = _utf8(v, n)
                elif field == SP_MESSAGE_GROUP:
                    f.has_group = True
                    f.group = _utf8(v, n)
                elif field == SP_TRACE_CONTEXT:
                    f.has_trace = True
                    f.trace = _utf8(v, n)
                elif field == SP_BORN_TIMESTAMP:
                    f.has_born = True
                    if _read_seconds_nanos(v, p, &f.born_s, &f.born_n):
                        return None
                elif field == SP_DELIVERY_TIMESTAMP:
                    f.has_delivery = True
                    if _read_seconds_nanos(v, p, &f.delivery_s, &f.delivery_n):
                        return None
                else:                                           # SP_ORPHANED_DURATION
                    f.has_orphaned = True
                    if _read_seconds_nanos(v, p, &f.orphaned_s, &orphaned_n):   # (its seconds only are read)
                        return None
            elif wire == WIRE_VARINT and (field == SP_BODY_ENCODING or field == SP_MESSAGE_TYPE):
                p = _get_varint(p, end, &n)
                if p == NULL:
                    return None
                if field == SP_BODY_ENCODING:       # enums are int32, as the varint's low 32 bits
                    f.body_encoding = <int32_t>n
                else:
                    f.message_type = <int32_t>n
            else:
                p = _skip(p, end, wire)
            if p == NULL:
                return None
    except UnicodeDecodeError:
        return None
    if f.keys is not None and not f.keys:
        f.keys = None
    return f
cdef object _millis(int64_t seconds, int32_t nanos):
    # seconds * 1000 + nanos // 1_000_000 as Python computes it: floor division (nanos may be negative), and in
    # Python ints where seconds * 1000 would pass 2**63.
    if -9_000_000_000_000_000 < seconds < 9_000_000_000_000_000:
        return seconds * 1000 + nanos // 1000000
    return <object>seconds * 1000 + <object>nanos // 1000000


cdef tuple _convert(m, bytes body, Py_ssize_t max_body, Py_ssize_t *budget):
    """converter.to_store_message, check for check in the same order (the first error found is the same one), the
    properties inserted in the same order (it decides the record's bytes); ``body`` is ``m.body``, read once by
    the caller; ``budget``: how far a gzip body may still expand (of its request's max_body), less what this one
    expanded to."""
    cdef dict props = {}
    cdef Py_ssize_t size = 0
    cdef str k, v, text, topic
    cdef int overflow = 0
    cdef int sys_flag = 0
    cdef Message msg
    sp = m.system_properties
    up = m.user_properties
    if len(up):
        # Iterating the keys and indexing is what up.items() does (Mapping.items: an ItemsView), in its order.
        for k in up:
            v = up[k]
            if k in SYSTEM_PROPERTIES:
                raise InvalidMessage(ILLEGAL_MESSAGE_PROPERTY_KEY, f"property key {k!r} is reserved by the system")
            if not k or _has_separator(k) or _has_separator(v):
                raise InvalidMessage(ILLEGAL_MESSAGE_PROPERTY_KEY, f"property {k[:64]!r} holds a separator character")
            size += len(k) + len(v)
            props[k] = v
        if size > MAX_USER_PROPERTY_SIZE:
            raise InvalidMessage(MESSAGE_PROPERTIES_TOO_LARGE,
                                 f"user properties are {size} bytes, more than {MAX_USER_PROPERTY_SIZE}")
    cdef _Sys f = _read_wire(sp)
    if f is None:
        f = _read_attributes(sp)
    if f.has_tag:
        text = f.tag
        _check_text(text, ILLEGAL_MESSAGE_TAG, "tag")
        if u'|' in text or len(text) > MAX_TAG_LENGTH:
            raise InvalidMessage(ILLEGAL_MESSAGE_TAG, f"tag {text[:64]!r} holds '|' or is too long")
        props[PROPERTY_TAGS] = text
    if f.keys is not None:
        for k in f.keys:
            _check_text(k, ILLEGAL_MESSAGE_KEY, "key")
        props[PROPERTY_KEYS] = u" ".join(f.keys)
    text = f.message_id
    if not text:
        raise InvalidMessage(ILLEGAL_MESSAGE_ID, "message_id is empty")
    if len(text) > MAX_MESSAGE_ID_LENGTH or not _printable(text):
        raise InvalidMessage(ILLEGAL_MESSAGE_ID, f"message_id {text[:64]!r} is not a message id")
    props[PROPERTY_UNIQ_KEY] = text
    if f.has_group:
        text = f.group
        _check_text(text, ILLEGAL_MESSAGE_GROUP, "message group")
        if len(text) > MAX_MESSAGE_GROUP_SIZE:
            raise InvalidMessage(ILLEGAL_MESSAGE_GROUP, f"message group is {len(text)} characters, more than "
                                 f"{MAX_MESSAGE_GROUP_SIZE}")
        props[PROPERTY_SHARDING_KEY] = text
    if f.has_delivery:
        ms = _millis(f.delivery_s, f.delivery_n)
        if ms <= 0:
            raise InvalidMessage(ILLEGAL_DELIVERY_TIME, f"delivery timestamp {ms} is not a time")
        props[PROPERTY_TIMER_DELIVER_MS] = str(ms)
    topic = m.topic.name
    if f.message_type == TRANSACTION:
        props[PROPERTY_TRANSACTION_PREPARED] = "true"
        # converter.to_store_message says why: a gRPC producer's group is its topic.
        props[PROPERTY_PRODUCER_GROUP] = topic
        if f.has_orphaned:
            props[PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS] = str(f.orphaned_s)
    if f.has_trace:
        props[PROPERTY_TRACE_CONTEXT] = f.trace
    if f.body_encoding == GZIP:
        body, sys_flag = gzip_encoded_body(body, max_body, budget[0])
        if sys_flag == 0:                   # a gzip body, inflated
            budget[0] -= len(body)
    born = _millis(f.born_s, f.born_n) if f.has_born else time.time_ns() // 1000000
    host = _born_host(f.born_host)
    PyLong_AsLongLongAndOverflow(born, &overflow)
    if overflow:
        raise born_timestamp_refused(born)       # not a Java long: a malformed request
    # Message(topic, body, -1, properties=props, born_timestamp=born, born_host=host) without its keyword call and
    # its copy of props (a fresh dict here); every other field keeps its default, 0.
    msg = Message.__new__(Message)
    msg.topic = topic
    msg.body = body
    msg._sys_flag = sys_flag
    msg._queue_id = -1
    msg._born_timestamp = born
    msg.born_host = host
    msg.properties = props
    return msg, f.message_type


def to_store_message(m, Py_ssize_t max_body=DEFAULT_MAX_BODY):
    """converter.to_store_message: a protocol Message → (store Message with queue_id -1, MessageType). Raises
    InvalidMessage."""
    cdef Py_ssize_t budget = max_body
    return _convert(m, m.body, max_body, &budget)


def to_store_messages(messages, Py_ssize_t max_body):
    """converter.to_store_messages: a SendMessage request's messages → [(store Message, MessageType)], every body
    checked first (empty, or longer than ``max_body``); gzip bodies expand to no more than ``max_body`` together.
    Raises InvalidMessage."""
    cdef Py_ssize_t budget = max_body
    cdef list srcs = []
    cdef list bodies = []
    cdef list out
    cdef bytes body
    cdef Py_ssize_t i, n
    for m in messages:
        body = m.body
        n = len(body)
        if n == 0:
            raise InvalidMessage(MESSAGE_BODY_EMPTY, "message body is empty")
        if n > max_body:
            raise InvalidMessage(MESSAGE_BODY_TOO_LARGE, f"message body is {n} bytes, more than {max_body} "
                                 f"(max_message_size)")
        srcs.append(m)
        bodies.append(body)
    out = []
    for i in range(len(srcs)):
        out.append(_convert(srcs[i], <bytes>bodies[i], max_body, &budget))
    return out


# ---------------------------------------------------------------------------------------------------------------
# The answer's entries, in protobuf's wire format (messaging.proto's field numbers):
#   SendMessageResponse.entries = 2 (SendResultEntry, length-delimited)
#   SendResultEntry: status = 1 (Status), message_id = 2, transaction_id = 3 (strings), offset = 4 (int64 varint)
#   Status: code = 1 (enum varint), message = 2 (string)
# Zero and empty fields are left out, as protobuf leaves them out (proto3: parsing them or not is the same).

cdef enum:
    TAG_RESPONSE_ENTRIES = (2 << 3) | 2
    TAG_ENTRY_STATUS = (1 << 3) | 2
    TAG_ENTRY_MESSAGE_ID = (2 << 3) | 2
    TAG_ENTRY_TRANSACTION_ID = (3 << 3) | 2
    TAG_ENTRY_OFFSET = (4 << 3) | 0
    TAG_STATUS_CODE = (1 << 3) | 0
    TAG_STATUS_MESSAGE = (2 << 3) | 2


cdef inline Py_ssize_t _varint_len(uint64_t v) noexcept nogil:
    cdef Py_ssize_t n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


cdef inline unsigned char *_put_varint(unsigned char *p, uint64_t v) noexcept nogil:
    while v >= 0x80:
        p[0] = <unsigned char>(v | 0x80)
        p += 1
        v >>= 7
    p[0] = <unsigned char>v
    return p + 1


cdef inline Py_ssize_t _field_len(Py_ssize_t n) noexcept nogil:
    # A length-delimited field of n bytes (tags here are one byte), nothing when empty.
    return 0 if n == 0 else 1 + _varint_len(<uint64_t>n) + n


cdef inline unsigned char *_put_field(unsigned char *p, int tag, const char *data, Py_ssize_t n) noexcept nogil:
    if n == 0:
        return p
    p[0] = <unsigned char>tag
    p = _put_varint(p + 1, <uint64_t>n)
    memcpy(p, data, <size_t>n)
    return p + n


cdef struct _Out:
    unsigned char *data
    Py_ssize_t size
    Py_ssize_t capacity


cdef int _reserve(_Out *o, Py_ssize_t n) except -1:
    cdef Py_ssize_t cap
    cdef void *p
    if o.size + n > o.capacity:
        cap = max(o.capacity * 2, o.size + n, 4096)
        p = realloc(o.data, <size_t>cap)
        if p == NULL:
            raise MemoryError()
        o.data = <unsigned char *>p
        o.capacity = cap
    return 0


cdef int _put_entry(_Out *o, str message_id, int code, str status_text, str transaction_id,
                    int64_t offset) except -1:
    cdef Py_ssize_t mid_n, text_n, tx_n = 0, status_n, entry_n
    cdef const char *mid = PyUnicode_AsUTF8AndSize(message_id, &mid_n)
    cdef const char *text = PyUnicode_AsUTF8AndSize(status_text, &text_n)
    cdef const char *tx = NULL
    cdef unsigned char *p
    if transaction_id is not None:
        tx = PyUnicode_AsUTF8AndSize(transaction_id, &tx_n)
    status_n = (1 + _varint_len(<uint64_t><int64_t>code)) + _field_len(text_n)
    entry_n = (1 + _varint_len(<uint64_t>status_n) + status_n) + _field_len(mid_n) + _field_len(tx_n)
    if offset != 0:
        entry_n += 1 + _varint_len(<uint64_t>offset)
    _reserve(o, 1 + _varint_len(<uint64_t>entry_n) + entry_n)
    p = o.data + o.size
    p[0] = TAG_RESPONSE_ENTRIES
    p = _put_varint(p + 1, <uint64_t>entry_n)
    p[0] = TAG_ENTRY_STATUS
    p = _put_varint(p + 1, <uint64_t>status_n)
    p[0] = TAG_STATUS_CODE
    p = _put_varint(p + 1, <uint64_t><int64_t>code)       # an enum is a sign-extended varint
    p = _put_field(p, TAG_STATUS_MESSAGE, text, text_n)
    p = _put_field(p, TAG_ENTRY_MESSAGE_ID, mid, mid_n)
    p = _put_field(p, TAG_ENTRY_TRANSACTION_ID, tx, tx_n)
    if offset != 0:
        p[0] = TAG_ENTRY_OFFSET
        p = _put_varint(p + 1, <uint64_t>offset)
    o.size = p - o.data
    return 0


def fill_send_entries(resp, messages, converted, results):
    """converter.fill_send_entries: one SendResultEntry per message appended to ``resp.entries`` (all in one
    ``resp.MergeFromString``); returns (the body sizes of the messages stored, the code and text for the
    response's status: OK, or those of the last entry that failed)."""
    return _fill(resp, messages, converted if type(converted) is list else list(converted),
                 results if type(results) is list else list(results))


cdef tuple _fill(resp, messages, list conv, list res):
    cdef Py_ssize_t i = 0, count = min(len(conv), len(res))
    cdef list sizes = []
    cdef int worst = OK, code
    cdef str text = "OK", entry_text, tx
    cdef int64_t offset
    cdef _Out o
    o.data = NULL
    o.size = 0
    o.capacity = 0
    try:
        for src in messages:
            if i >= count:
                break
            mtype = conv[i][1]
            r = res[i]
            i += 1
            if type(r) is PutResult:
                status = (<PutResult>r).status
            else:
                status = r.status
            tx = None
            offset = 0
            if status is PUT_OK:
                code = OK
                entry_text = "OK"
                offset = (<PutResult>r).queue_offset if type(r) is PutResult else r.queue_offset
                sizes.append(len(src.body))
                if mtype == TRANSACTION:
                    tx = r.msg_id or f"{r.commitlog_offset:032X}"
            elif status is FLUSH_DISK_TIMEOUT:
                code = worst = MASTER_PERSISTENCE_TIMEOUT
                entry_text = text = "stored, but no flush covered it in time"
            elif status is FLUSH_SLAVE_TIMEOUT:       # the proxy's SendStatus mapping (SendMessageActivity)
                code = worst = SLAVE_PERSISTENCE_TIMEOUT
                entry_text = text = "stored, but no slave acknowledged it in time"
            elif status is SLAVE_NOT_AVAILABLE:
                code = worst = HA_NOT_AVAILABLE
                entry_text = text = "stored, but no slave is available (none connected, or too far behind)"
            else:
                code = worst = INTERNAL_SERVER_ERROR
                entry_text = text = f"put failed: {status.name}"
            _put_entry(&o, src.system_properties.message_id, code, entry_text, tx, offset)
        if o.size:
            resp.MergeFromString(PyBytes_FromStringAndSize(<char *>o.data, o.size))
    finally:
        free(o.data)
    return sizes, worst, text


# ---------------------------------------------------------------------------------------------------------------
# The common SendMessage, end to end

cdef enum:
    NORMAL = 1                  # MessageType


cdef inline double _monotonic() noexcept nogil:
    # time.monotonic() and time.perf_counter() on Linux, without their Python calls
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <double>ts.tv_sec + <double>ts.tv_nsec * 1e-9


cdef class CommonSend:
    """SendMessage's common request answered in one call: one message of type NORMAL, no namespace, no delivery
    time, no message group, to a topic whose checks the broker has cached (its send cache: a topic that exists, may
    be written and needs no per-message handling; emptied on every change of the topic table) and that the service
    has validated; on a server without accounts and under ASYNC_FLUSH (the service's to know). Such a request is
    converted, given the next queue of the service's round robin, stored, answered, counted (the client heard
    from, the message in and the RPC) and its topic's dispatch and waiting receives asked for, without the
    service's Python around each step: in the server's loop those ~40 steps and three coroutines cost ~25 us of CPU
    a message.

    Holds none of SendMessage's rules, only the test of whether a request may skip them (as the broker's Sender
    does for a send, rmqcore/broker/_send.pyx): ``answer`` returns None for anything else (a batch, a refusal to
    give, a type to check, a put that refuses the message: it raises before writing anything) and the service's
    Python path takes the request whole. What it does after the put is what that path does after its own."""
    cdef dict entries
    cdef set topics_ok
    cdef frozenset other_types
    cdef object put
    cdef object rr
    cdef Py_ssize_t max_body
    cdef object on_sent
    cdef object wake
    cdef object response_type
    cdef dict seen
    cdef object producer_info
    cdef object client
    cdef object on_rpc
    cdef dict code_names
    cdef object internal_error
    cdef tuple refusals

    def __init__(self, dict entries not None, set topics_ok not None, other_types, put, rr, Py_ssize_t max_body,
                 on_sent, wake, response_type, dict seen not None, producer_info, client, on_rpc,
                 dict code_names not None, internal_error, tuple refusals not None):
        """``entries``: the broker's send cache (topic -> SendEntry); ``topics_ok``: the names the service has
        validated; ``other_types``: the topics' message.type values other than NORMAL that the service knows;
        ``put``: Broker.send; ``rr``: the service's round-robin counter; ``max_body``: max_message_size;
        ``on_sent(topic, sizes, type, code name, seconds)`` (ServerEvents') and ``wake(topic)`` (the service's),
        after a message is stored; ``response_type``: SendMessageResponse; ``seen``: the service's client id ->
        (monotonic time, what the client's last RPC said of it), and ``client(metadata, context)`` to call when a
        producer's entry is a second old or says otherwise (``producer_info``); ``on_rpc(method, code name,
        seconds)`` with ``code_names`` (Code -> name) for an answer that stored nothing; ``internal_error(exc,
        response)``: answers any other error; ``refusals``: what the put raises for a message it refuses before
        writing anything (the service answers those)."""
        self.entries = entries
        self.topics_ok = topics_ok
        self.other_types = frozenset(other_types)
        self.put = put
        self.rr = rr
        self.max_body = max_body
        self.on_sent = on_sent
        self.wake = wake
        self.response_type = response_type
        self.seen = seen
        self.producer_info = producer_info
        self.client = client
        self.on_rpc = on_rpc
        self.code_names = code_names
        self.internal_error = internal_error
        self.refusals = refusals

    def answer(self, req, context):
        """The SendMessageResponse to ``req``, if it is the common case; else None, nothing changed."""
        cdef double t0 = _monotonic()
        cdef tuple seen
        cdef tuple done
        md = context.invocation_metadata()
        cid = None
        if md:
            for item in md:
                if item[0] == "x-mq-client-id":
                    cid = item[1]
                    break
        if cid:
            seen = self.seen.get(cid)
            if seen is None or t0 - <double>seen[0] > 1.0 or seen[1] != self.producer_info:
                self.client(md, context)
        resp = self.response_type()
        try:
            done = self._send(req, resp)
            if done is None:
                return None
            topic, sizes, worst, text = done
            status = resp.status
            status.code = worst
            status.message = text
            if sizes:
                # the message in and the RPC counted together (the general path counts them one after the other)
                self.on_sent(topic, sizes, "NORMAL", self.code_names.get(worst) or str(worst), _monotonic() - t0)
                self.wake(topic)
                return resp
        except Exception as e:
            self.internal_error(e, resp)
        status = resp.status
        self.on_rpc("SendMessage", self.code_names.get(status.code) or str(status.code), _monotonic() - t0)
        return resp

    cdef tuple _send(self, req, resp):
        # Store ``req`` if it is the common case and answer its entry: (topic, sizes stored, status code, text);
        # else None, nothing changed (a put that refuses the message writes nothing: None too).
        messages = req.messages
        if len(messages) != 1:
            return None
        m = messages[0]
        resource = m.topic
        if resource.resource_namespace:
            return None
        cdef str name = resource.name
        if name not in self.topics_ok:
            return None
        entry = self.entries.get(name)
        if entry is None or entry.slow:
            return None
        if entry.topic_config.message_type in self.other_types:
            return None
        cdef Py_ssize_t queues = entry.write_queue_nums
        if queues <= 0:
            return None
        cdef bytes body = m.body
        cdef Py_ssize_t n = len(body)
        if n == 0 or n > self.max_body:
            return None
        cdef const unsigned char *head = <const unsigned char *>PyBytes_AS_STRING(body)
        if n >= 2 and head[0] == 0x1f and head[1] == 0x8b:
            return None         # perhaps a gzip file to inflate: the service does that off its loop
        cdef Py_ssize_t budget = self.max_body
        try:
            converted = _convert(m, body, self.max_body, &budget)
        except InvalidMessage:
            return None
        cdef Message msg = <Message>converted[0]
        if converted[1] != NORMAL or PROPERTY_TIMER_DELIVER_MS in msg.properties \
                or PROPERTY_SHARDING_KEY in msg.properties:
            return None
        msg.queue_id = next(self.rr) % queues
        try:
            result = self.put(msg)
        except self.refusals:
            return None
        return (name,) + _fill(resp, messages, [converted], [result])
