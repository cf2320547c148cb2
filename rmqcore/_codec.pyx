# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The commitlog record codec, as RocketMQ's MessageExtEncoder, MessageDecoder and checkMessageAndReturnSize.

Every integer is big-endian. ``parse_record`` is the one place that decides whether bytes are a record: it never
trusts a length field, checks each against the record's totalSize and the bytes available, and returns a code
instead of raising so GIL-free scanners (dispatch, recovery) can use it; ``_raise_record_error`` is the one place
that turns those codes into exceptions.
"""
import os
import random
import time
import ipaddress

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem, PyDict_GetItemWithError, PyDict_SetItem
from cpython.object cimport PyObject
from cpython.unicode cimport PyUnicode_DecodeUTF8
from cpython.long cimport PyLong_AsLongLongAndOverflow
from libc.stdint cimport INT32_MAX, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memchr, memcmp, memcpy

from rmqcore._c cimport (rmq_atomic_load_i64, rmq_atomic_store_i64, rmq_crc32, rmq_dring_publish, rmq_dring_push,
                         rmq_event_poke, rmq_find_byte, rmq_java_hash_utf8, rmq_load_be16,
                         rmq_load_be32, rmq_load_be64,
                         rmq_store_be16, rmq_store_be32, rmq_store_be64)
from rmqcore._index_file cimport items_in, query_files_c, topic_key_hash
from rmqcore._mapped_file cimport MappedFile, WakeEvent

from rmqcore.errors import CorruptRecordError, MessageIllegalError
from rmqcore.status import PutStatus

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL

cdef extern from *:
    void __builtin_prefetch(const void *addr) noexcept nogil

cdef enum:
    SELECT_PREFETCH_AHEAD = 4       # units ahead select_messages prefetches records (see there)

# Public constants (Python names as RocketMQ's).
PY_MESSAGE_MAGIC_CODE = MESSAGE_MAGIC_CODE
PY_MESSAGE_MAGIC_CODE_V2 = MESSAGE_MAGIC_CODE_V2
PY_BLANK_MAGIC_CODE = BLANK_MAGIC_CODE
TOPIC_MAX_LENGTH = 127
PROPERTIES_MAX_LENGTH = 32767
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
cdef str _UNIQ_KEY_NAME = PROPERTY_UNIQ_KEY   # the key object a generated UNIQ_KEY is stored under (compared by address)
PROPERTY_CRC32 = "__CRC32#"
KEY_SEPARATOR = " "

cdef int32_t PAGE = 4096
cdef PUT_OK = PutStatus.PUT_OK


def current_millis():
    """Wall-clock milliseconds, as System.currentTimeMillis()."""
    return now_ms()


# ---------------------------------------------------------------------------------------------------------------
# Java String.hashCode and tags codes

def java_hash_code(str s not None):
    """Java's ``String.hashCode()`` of ``s`` (a signed 32-bit int), over UTF-16 code units as Java counts them."""
    cdef Py_ssize_t n
    cdef const char *u = PyUnicode_AsUTF8AndSize(s, &n)
    return rmq_java_hash_utf8(<const unsigned char *>u, <size_t>n)


def tags_code(tags):
    """RocketMQ's tagsString2tagsCode: the Java hash of the TAGS property, 0 when there is none."""
    if not tags:
        return 0
    return java_hash_code(tags)


# ---------------------------------------------------------------------------------------------------------------
# Properties: name \x01 value \x02 ...



cdef bint find_property(const unsigned char *props, int32_t props_len, const char *name, int32_t name_len,
                        int32_t *value_pos, int32_t *value_len) noexcept nogil:
    # Mirrors MessageDecoder.string2messageProperties: a pair counts only with a non-empty name and value, and
    # the last pair of a name wins.
    cdef int32_t index = 0, start, n, vp, vl
    cdef bint found = False
    while index < props_len:
        start = index
        index = next_pair(props, props_len, index, &n, &vp, &vl)
        if n == name_len and memcmp(props + start, name, <size_t>name_len) == 0:
            value_pos[0] = vp
            value_len[0] = vl
            found = True
    return found


cdef void dispatch_properties(const unsigned char *props, int32_t props_len, DispatchProps *out) noexcept nogil:
    # find_property's rules (a pair counts with a non-empty name and value, the last of a name wins) for the four
    # names dispatch reads, in one walk over the pairs instead of one walk per name.
    cdef int32_t index = 0, start, n, vp, vl
    cdef const unsigned char *name
    out.tags_pos = out.keys_pos = out.uniq_pos = out.delay_pos = -1
    out.tags_len = out.keys_len = out.uniq_len = out.delay_len = 0
    while index < props_len:
        start = index
        index = next_pair(props, props_len, index, &n, &vp, &vl)
        name = props + start
        if n == 4 and memcmp(name, "TAGS", 4) == 0:
            out.tags_pos = vp
            out.tags_len = vl
        elif n == 4 and memcmp(name, "KEYS", 4) == 0:
            out.keys_pos = vp
            out.keys_len = vl
        elif n == 8 and memcmp(name, "UNIQ_KEY", 8) == 0:
            out.uniq_pos = vp
            out.uniq_len = vl
        elif n == 5 and memcmp(name, "DELAY", 5) == 0:
            out.delay_pos = vp
            out.delay_len = vl


cdef int64_t tags_code_of(const unsigned char *props, int32_t props_len) noexcept nogil:
    cdef int32_t vpos = 0, vlen = 0
    if find_property(props, props_len, "TAGS", 4, &vpos, &vlen):
        return <int64_t>rmq_java_hash_utf8(props + vpos, <size_t>vlen)
    return 0


cdef dict _parse_properties(const unsigned char *props, int32_t props_len):
    cdef dict out = {}
    cdef int32_t index = 0, start, n, vp, vl
    while index < props_len:
        start = index
        index = next_pair(props, props_len, index, &n, &vp, &vl)
        if n > 0:
            out[PyUnicode_DecodeUTF8(<const char *>props + start, n, "replace")] = \
                PyUnicode_DecodeUTF8(<const char *>props + vp, vl, "replace")
    return out


def string_to_properties(data):
    """MessageDecoder.string2messageProperties over a str or the UTF-8 bytes of one."""
    cdef const unsigned char[::1] view
    if isinstance(data, str):
        data = (<str>data).encode("utf-8", "surrogatepass")
    view = data
    if view.shape[0] == 0:
        return {}
    return _parse_properties(&view[0], <int32_t>view.shape[0])


def properties_to_string(dict properties):
    """MessageDecoder.messageProperties2String: every pair followed by \\x02; pairs with a None value skipped."""
    if not properties:
        return ""
    return "".join([f"{k}\x01{v}\x02" for k, v in properties.items() if v is not None])


# ---------------------------------------------------------------------------------------------------------------
# Hosts

cdef dict _HOST_CACHE = {}


def host_to_bytes(host):
    """``"ip:port"`` (IPv6 as ``"[addr]:port"``) or ``(ip, port)`` → RocketMQ's socketAddress2ByteBuffer bytes:
    4 (or 16) address bytes then the port as a 4-byte int."""
    cached = _HOST_CACHE.get(host)
    if cached is not None:
        return cached
    if isinstance(host, tuple):
        ip, port = host
    elif isinstance(host, str):
        ip, sep, port = host.rpartition(":")
        if not sep:
            raise ValueError(f"host {host!r} must be 'ip:port'")
        if ip.startswith("[") and ip.endswith("]"):
            ip = ip[1:len(ip) - 1]
    else:
        raise TypeError(f"host must be 'ip:port' or (ip, port), got {type(host).__name__}")
    try:
        port = int(port)
        addr = ipaddress.ip_address(ip)
    except ValueError as e:
        raise ValueError(f"host {host!r}: {e}") from None
    if not 0 <= port <= 0x7FFFFFFF:
        raise ValueError(f"host {host!r}: port out of range")
    out = addr.packed + port.to_bytes(4, "big")
    if len(_HOST_CACHE) < 4096:
        _HOST_CACHE[host] = out
    return out


cdef str _host_str(const unsigned char *p, int32_t n):
    # Java reads the port with getInt(): signed, so a corrupt high bit shows as a negative port, as RocketMQ shows it
    cdef int32_t port
    if n == 8:
        port = <int32_t>rmq_load_be32(p + 4)
        return f"{p[0]}.{p[1]}.{p[2]}.{p[3]}:{port}"
    port = <int32_t>rmq_load_be32(p + 16)
    return f"[{ipaddress.IPv6Address(bytes(p[:16]))}]:{port}"


def bytes_to_host(data):
    """The inverse of host_to_bytes."""
    cdef const unsigned char[::1] v = data
    if v.shape[0] not in (8, 20):
        raise ValueError(f"host bytes must be 8 or 20 long, got {v.shape[0]}")
    return _host_str(&v[0], <int32_t>v.shape[0])


cdef extern from "Python.h":
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    void *PyUnicode_DATA(object o)

cdef const char *HEX_DIGITS = "0123456789ABCDEF"


cdef inline void _hex_into(char *o, const unsigned char *p, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        o[2 * i] = HEX_DIGITS[p[i] >> 4]
        o[2 * i + 1] = HEX_DIGITS[p[i] & 15]


cdef str _hex_upper(const unsigned char *p, Py_ssize_t n):
    # Upper-case hex as UtilAll.bytes2string, written straight into a new ASCII str (one allocation).
    cdef object out = PyUnicode_New(n * 2, 127)
    _hex_into(<char *>PyUnicode_DATA(out), p, n)
    return <str>out


cdef str _offset_msg_id(bytes store_host, int64_t offset):
    cdef unsigned char buf[28]
    cdef Py_ssize_t n = len(store_host)
    memcpy(buf, PyBytes_AS_STRING(store_host), n)
    rmq_store_be64(buf + n, <uint64_t>offset)
    return _hex_upper(buf, n + 8)


def offset_msg_id(store_host, int64_t offset):
    """MessageDecoder.createMessageId: hex of store host bytes + the 8-byte commitlog offset (upper case)."""
    if not isinstance(store_host, bytes):
        store_host = host_to_bytes(store_host)
    return _offset_msg_id(store_host, offset)


def decode_offset_msg_id(str msg_id not None):
    """MessageDecoder.decodeMessageId: (store host "ip:port", commitlog offset)."""
    raw = bytes.fromhex(msg_id)
    if len(raw) not in (16, 28):
        raise ValueError(f"offset msg id must be 32 or 56 hex chars, got {len(msg_id)}")
    return bytes_to_host(raw[:len(raw) - 8]), int.from_bytes(raw[len(raw) - 8:], "big", signed=True)


# ---------------------------------------------------------------------------------------------------------------
# Record parsing

def cal_msg_length(int32_t sys_flag, int32_t body_len, int32_t topic_len, int32_t props_len, int version=1):
    """MessageExtEncoder.calMsgLength: the record size for these parts (v1: 1-byte topic length, v2: 2)."""
    if version not in (1, 2):
        raise ValueError("version must be 1 or 2")
    return cal_msg_length_c(version, sys_flag, body_len, topic_len, props_len)


cdef int parse_record(const unsigned char *p, int64_t avail, RecordView *rv, bint check_crc) noexcept nogil:
    cdef int64_t pos
    cdef int32_t total, version, expected, digit, i
    cdef const unsigned char *tail
    if avail < 4:
        return RECORD_END if avail <= 0 else ERR_TRUNCATED
    total = <int32_t>rmq_load_be32(p)
    rv.total_size = total
    if total == 0:
        return RECORD_END
    if avail < 8:
        return ERR_TRUNCATED
    rv.magic = <int32_t>rmq_load_be32(p + 4)
    if rv.magic == BLANK_MAGIC_CODE:
        return RECORD_BLANK if total >= END_FILE_MIN_BLANK_LENGTH and total <= avail else ERR_TOTAL_SIZE
    if rv.magic == MESSAGE_MAGIC_CODE:
        version = 1
    elif rv.magic == MESSAGE_MAGIC_CODE_V2:
        version = 2
    else:
        return ERR_MAGIC
    if total < cal_msg_length_c(version, 0, 0, 0, 0):
        return ERR_TOTAL_SIZE
    if total > avail:
        return ERR_TRUNCATED
    rv.body_crc = <int32_t>rmq_load_be32(p + 8)
    rv.queue_id = <int32_t>rmq_load_be32(p + 12)
    rv.flag = <int32_t>rmq_load_be32(p + 16)
    rv.queue_offset = <int64_t>rmq_load_be64(p + 20)
    rv.physical_offset = <int64_t>rmq_load_be64(p + 28)
    rv.sys_flag = <int32_t>rmq_load_be32(p + 36)
    rv.born_timestamp = <int64_t>rmq_load_be64(p + 40)
    rv.born_host_pos = 48
    rv.born_host_len = 8 if (rv.sys_flag & FLAG_BORNHOST_V6) == 0 else 20
    pos = 48 + rv.born_host_len
    rv.store_host_len = 8 if (rv.sys_flag & FLAG_STOREHOSTADDRESS_V6) == 0 else 20
    # The minimum size checked above assumed IPv4 hosts; the fixed fields up to bodyLength must fit.
    if pos + 8 + rv.store_host_len + 4 + 8 + 4 > total:
        return ERR_TOTAL_SIZE
    rv.store_timestamp = <int64_t>rmq_load_be64(p + pos)
    pos += 8
    rv.store_host_pos = <int32_t>pos
    pos += rv.store_host_len
    rv.reconsume_times = <int32_t>rmq_load_be32(p + pos)
    rv.prepared_transaction_offset = <int64_t>rmq_load_be64(p + pos + 4)
    rv.body_len = <int32_t>rmq_load_be32(p + pos + 12)
    pos += 16
    rv.body_pos = <int32_t>pos
    if rv.body_len < 0 or pos + rv.body_len > total:
        return ERR_BODY_LENGTH
    pos += rv.body_len
    if version == 1:
        if pos + 1 > total:
            return ERR_TOPIC_LENGTH
        rv.topic_len = p[pos]
        pos += 1
    else:
        if pos + 2 > total:
            return ERR_TOPIC_LENGTH
        rv.topic_len = rmq_load_be16(p + pos)
        pos += 2
    rv.topic_pos = <int32_t>pos
    if pos + rv.topic_len > total:
        return ERR_TOPIC_LENGTH
    pos += rv.topic_len
    if pos + 2 > total:
        return ERR_PROPERTIES_LENGTH
    rv.props_len = <int16_t>rmq_load_be16(p + pos)
    pos += 2
    rv.props_pos = <int32_t>pos
    if rv.props_len < 0 or pos + rv.props_len > total:
        return ERR_PROPERTIES_LENGTH
    if cal_msg_length_c(version, rv.sys_flag, rv.body_len, rv.topic_len, rv.props_len) != total:
        return ERR_LENGTH_MISMATCH
    # What RocketMQ's checkMessageAndReturnSize can read: Java reads the v1 topic length as a signed byte and the
    # v2 one as a signed short, so a length of 128..255 (v1) or 32768.. (v2) fails there as it fails here. The
    # topic's bytes and the queue id are NOT damage evidence: Java's store writes any topic of 1..127 bytes (only
    # the broker's send path applies ^[%|a-zA-Z0-9_-]+$) and any queue id. Whether a record can be dispatched
    # (its topic and queue id become directory names) is topic_dispatchable's question, asked by dispatch only.
    if rv.topic_len > (127 if version == 1 else 32767):
        return ERR_TOPIC
    if check_crc:
        if rv.body_len > 0 and <int32_t>(rmq_crc32(0, p + rv.body_pos, <size_t>rv.body_len) & 0x7FFFFFFF) != rv.body_crc:
            return ERR_BODY_CRC
        # 5.x appends "__CRC32#\x01" + 10 digits (least significant first) + "\x02": a CRC of the record before it.
        if rv.props_len >= CRC32_RESERVED_LEN:
            tail = p + total - CRC32_RESERVED_LEN
            if memcmp(tail, b"__CRC32#\x01", 9) == 0 and tail[19] == 2:
                expected = 0
                for i in range(18, 8, -1):
                    digit = tail[i] - 48
                    if digit < 0 or digit > 9:
                        return ERR_RECORD_CRC
                    expected = expected * 10 + digit
                if <int32_t>(rmq_crc32(0, p, <size_t>(total - CRC32_RESERVED_LEN)) & 0x7FFFFFFF) != expected:
                    return ERR_RECORD_CRC
    return RECORD_OK


cdef dict _ERROR_FIELDS = {
    ERR_TRUNCATED: ("totalSize", "record runs past the end of the data (truncated file?)"),
    ERR_MAGIC: ("magicCode", "not a RocketMQ v1/v2 message or blank magic code"),
    ERR_TOTAL_SIZE: ("totalSize", "smaller than the fixed part of a record or than its hosts need"),
    ERR_BODY_LENGTH: ("bodyLength", "negative or past the record's totalSize"),
    ERR_TOPIC_LENGTH: ("topicLength", "past the record's totalSize"),
    ERR_PROPERTIES_LENGTH: ("propertiesLength", "negative or past the record's totalSize"),
    ERR_LENGTH_MISMATCH: ("totalSize", "differs from the sum of the record's parts"),
    ERR_BODY_CRC: ("bodyCRC", "does not match the CRC32 of the body"),
    ERR_RECORD_CRC: ("__CRC32#", "the 5.x record CRC property does not match the record"),
    ERR_TOPIC: ("topicLength", "longer than 127 bytes (v1) or 32767 (v2): a negative length to RocketMQ's reader"),
    ERR_PHYSICAL_OFFSET: ("physicalOffset", "differs from the record's own position in the commitlog"),
}


cdef bint _dir_safe_ascii[128]
for _c in range(128):
    # A byte that may stand in a directory name of its own: no control character, no path separator.
    _dir_safe_ascii[_c] = 32 <= _c < 127 and chr(_c) not in "/\\"


cdef int topic_dispatchable(const unsigned char *t, int32_t n) noexcept nogil:
    """Whether a topic read from a record may become consumequeue/{topic}: 1..255 bytes (NAME_MAX), not "." or
    "..", well-formed UTF-8 (no overlong form, surrogate or code point past U+10FFFF), and no control character
    (C0, DEL, C1), '/' or '\\'. Records whose topic is not are kept and readable, but not dispatched."""
    cdef int32_t i = 0
    cdef uint32_t c, b1, b2, b3
    if n <= 0 or n > 255:
        return 0
    if t[0] == 46 and (n == 1 or (n == 2 and t[1] == 46)):
        return 0
    while i < n:
        c = t[i]
        if c < 128:
            if not _dir_safe_ascii[c]:
                return 0
            i += 1
        elif 0xC2 <= c <= 0xDF:
            if i + 1 >= n or (t[i + 1] & 0xC0) != 0x80:
                return 0
            if c == 0xC2 and t[i + 1] < 0xA0:          # U+0080..U+009F: the C1 controls
                return 0
            i += 2
        elif 0xE0 <= c <= 0xEF:
            if i + 2 >= n:
                return 0
            b1 = t[i + 1]
            b2 = t[i + 2]
            if (b1 & 0xC0) != 0x80 or (b2 & 0xC0) != 0x80:
                return 0
            if (c == 0xE0 and b1 < 0xA0) or (c == 0xED and b1 >= 0xA0):   # overlong; surrogates
                return 0
            i += 3
        elif 0xF0 <= c <= 0xF4:
            if i + 3 >= n:
                return 0
            b1 = t[i + 1]
            b2 = t[i + 2]
            b3 = t[i + 3]
            if (b1 & 0xC0) != 0x80 or (b2 & 0xC0) != 0x80 or (b3 & 0xC0) != 0x80:
                return 0
            if (c == 0xF0 and b1 < 0x90) or (c == 0xF4 and b1 >= 0x90):   # overlong; past U+10FFFF
                return 0
            i += 4
        else:
            return 0
    return 1


cdef int record_dispatchable(const unsigned char *rec, const RecordView *rv) noexcept nogil:
    """Whether dispatch may turn this record into a consume-queue unit and index keys: its topic is
    topic_dispatchable and its queue id names a directory (not negative)."""
    return rv.queue_id >= 0 and topic_dispatchable(rec + rv.topic_pos, rv.topic_len)


def topic_is_dispatchable(name):
    """Whether ``name`` (str or bytes) is a topic dispatch turns into consumequeue/{topic} (see
    topic_dispatchable): the check every name read from a file or a directory listing passes before it becomes a
    path. Wider than what ``put`` accepts (RocketMQ's broker rule ^[%|a-zA-Z0-9_-]+$, up to 127 bytes)."""
    cdef const unsigned char[::1] v
    if isinstance(name, str):
        try:
            name = (<str>name).encode("utf-8")
        except UnicodeEncodeError:
            return False
    v = name
    if v.shape[0] == 0:
        return False
    return bool(topic_dispatchable(&v[0], <int32_t>min(v.shape[0], 256)))


def record_error(int code, int64_t offset, path=None):
    """The CorruptRecordError for a parse_record code (the one place codes become exceptions)."""
    field, why = _ERROR_FIELDS.get(code, ("record", f"unknown parse result {code}"))
    return CorruptRecordError(offset, field, why, path)


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


cdef class _Buffer:
    # Scoped Py_buffer acquisition (released in __dealloc__ or release()).

    cdef int acquire(self, obj) except -1:
        PyObject_GetBuffer(obj, &self.view, PyBUF_SIMPLE)
        self.held = True
        return 0

    cdef void release(self):
        if self.held:
            PyBuffer_Release(&self.view)
            self.held = False

    def __dealloc__(self):
        self.release()


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

    def record(self):
        """Zero-copy view of the whole record."""
        return memoryview(self._src)[self._pos:self._pos + self.rv.total_size]

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


cdef inline void _fill_record_crc(unsigned char *rec, int32_t total) noexcept nogil:
    # MessageDecoder.createCrc32 after DefaultAppendMessageCallback's CRC of the record before the property (all
    # per-put fields set): 10 decimal digits, least significant first, of crc32 & 0x7FFFFFFF.
    cdef uint32_t crc = rmq_crc32(0, rec, <size_t>(total - CRC32_RESERVED_LEN)) & 0x7FFFFFFF
    cdef unsigned char *d = rec + total - CRC32_RESERVED_LEN + 9
    cdef int i
    for i in range(10):
        d[i] = <unsigned char>(48 + crc % 10)
        crc //= 10


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
    cdef bytes _prefix
    cdef int64_t _start
    cdef int64_t _next_start
    cdef uint16_t _counter

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
    cdef readonly dict properties     # the names and values applied (a __CRC32# dropped when the encoder writes its own)
    cdef readonly bytes encoded       # name \x01 value \x02 ..., in the dict's order: appended as is
    cdef list names
    cdef dict index                   # name -> its number (a lookup for batches of many names)
    cdef object uniq                  # the batch's UNIQ_KEY (every message's then), or None
    cdef Py_ssize_t count
    cdef Py_ssize_t *pair             # per name: where its pair starts in ``encoded``, its name's and value's length
    cdef Py_ssize_t *name_n
    cdef Py_ssize_t *value_n

    def __init__(self):
        raise TypeError("use MessageEncoder.batch_properties(properties)")

    def __dealloc__(self):
        free(self.pair)

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
    """Validates and encodes Messages into v1 commitlog records for one store (its host and size limit)."""
    cdef readonly int max_message_size
    cdef readonly bytes store_host_bytes
    cdef readonly UniqKeyGenerator uniq_keys
    cdef bint check_topic_chars
    # reroute(msg): called before a message carrying a delay or timer property (DELAY, __STARTDELIVERTIME,
    # TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS) is encoded, to move it to the schedule or timer topic as
    # RocketMQ's CommitLog.putMessage does; None (a bare commit log) stores such messages as they are.
    cdef public object reroute
    # RocketMQ 5's enabledAppendPropCRC: every record ends with a __CRC32# property holding the CRC of the record
    # before it, so damage anywhere in it is caught (the v1 body CRC covers the body only).
    cdef public bint append_prop_crc

    def __init__(self, store_host="127.0.0.1:10911", int max_message_size=4 * 1024 * 1024,
                 bint check_topic_chars=True):
        if max_message_size <= 0:
            raise ValueError("max_message_size must be > 0")
        self.max_message_size = max_message_size
        self.store_host_bytes = host_to_bytes(store_host)
        self.uniq_keys = UniqKeyGenerator(self.store_host_bytes[:len(self.store_host_bytes) - 4])
        self.check_topic_chars = check_topic_chars

    cdef int _check_topic(self, topic) except -1:
        # put's topic rule: 1..127 UTF-8 bytes, each in the broker's ^[%|a-zA-Z0-9_-]+$ (check_topic_chars).
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
        if self.check_topic_chars:
            for i in range(topic_n):
                if (<unsigned char>topic_u[i]) >= 128 or not _valid_topic_char[<unsigned char>topic_u[i]]:
                    raise MessageIllegalError(
                        "topic", f"{topic!r} has an illegal character at byte {i}; allowed: ^[%|a-zA-Z0-9_-]+$",
                        "^[%|a-zA-Z0-9_-]+$")
        return 0

    cpdef int encode_into(self, Message msg, EncodeBuffer out, BatchProperties batch=None) except -1:
        """Validate ``msg`` and append its record to ``out``; ``batch``: properties common to a put_batch's
        messages, applied as BatchProperties says (encoded once, copied into each record)."""
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
            self._check_topic(msg.topic)
            self.reroute(msg)
        topic = msg.topic
        self._check_topic(topic)
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
        cdef Py_ssize_t r, t_n, b_n, tg_n, k, kn, vn, j, jj, nkeys, props_n, klen, vlen
        cdef const unsigned char *t_p
        cdef const unsigned char *prev_t = NULL
        cdef Py_ssize_t prev_n = -1
        cdef const unsigned char *b_p
        cdef const unsigned char *tg_p
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


cdef class AppendMessageCallback:
    """RocketMQ's DefaultAppendMessageCallback: runs under the put lock, owns the topic-queue table
    ((topic, queue_id) → next queue offset)."""

    def __init__(self, bytes store_host_bytes not None):
        self._table = {}
        self.store_host_bytes = store_host_bytes

    @property
    def topic_queue_table(self):
        """{(topic, queue_id): next queue offset} (a copy)."""
        return {(t, q): o for t, queues in self._table.items() for q, o in queues.items()}

    @topic_queue_table.setter
    def topic_queue_table(self, table):
        inner = {}
        for (t, q), o in table.items():
            inner.setdefault(t, {})[q] = o
        self._table = inner
        self._last_topic = None
        self._last_queues = None

    cdef int write_blank(self, MappedFile mf) except -1:
        # The record does not fit: a blank record fills the rest of the file (END_OF_FILE), the caller goes on in
        # the next file.
        cdef int64_t wrote = rmq_atomic_load_i64(&mf._wrote)
        cdef int64_t max_blank = mf.file_size - wrote
        cdef unsigned char blank[8]
        cdef int err
        if max_blank >= END_FILE_MIN_BLANK_LENGTH:
            rmq_store_be32(blank, <uint32_t>max_blank)
            rmq_store_be32(blank + 4, <uint32_t>BLANK_MAGIC_CODE)
            err = mf.write_c(wrote, blank, 8, True)
            if err != 0:
                raise OSError(err, f"end-of-file blank: {os.strerror(err)}", mf.file_name)
        mf.advance(max_blank, 0)
        return 0

    cdef PutResult assign(self, MappedFile mf, EncodeBuffer eb, Py_ssize_t i, int64_t store_timestamp,
                          int64_t wrote):
        # Record i goes to ``wrote`` in ``mf``: take its queue offset from the table and set the per-put fields in
        # the encoded bytes (queue offset, physical offset, store time); the caller writes it. Returns its result.
        cdef int64_t queue_offset = self.assign_raw(mf, eb, i, store_timestamp, wrote)
        cdef PutResult r = PutResult.__new__(PutResult)
        r.status = PUT_OK
        r.commitlog_offset = mf.file_from_offset + wrote
        r.queue_offset = queue_offset
        r.wrote_bytes = eb.rec[i].length
        r.store_timestamp = store_timestamp
        r.uniq_key = eb.uniq_keys[i]
        r._store_host = self.store_host_bytes
        return r

    cdef int64_t assign_raw(self, MappedFile mf, EncodeBuffer eb, Py_ssize_t i, int64_t store_timestamp,
                            int64_t wrote) except -1:
        # assign() without the result object: returns the queue offset (0 for prepared/rolled-back records).
        cdef EncodedRecord *rec = &eb.rec[i]
        cdef int64_t queue_offset
        cdef unsigned char *src
        cdef PyObject *cur
        cdef object topic = eb.topics[i]
        cdef object queues
        cdef bint consumable = rec.tran_type != TRANSACTION_PREPARED_TYPE and rec.tran_type != TRANSACTION_ROLLBACK_TYPE
        if topic is self._last_topic:         # runs of one topic (batches, Arrow rows) skip the outer lookup
            cur = <PyObject *>self._last_queues
        else:
            cur = PyDict_GetItem(self._table, topic)
        if cur == NULL:
            queues = {}
            PyDict_SetItem(self._table, topic, queues)
        else:
            queues = <object>cur
        self._last_topic = topic
        self._last_queues = queues
        qid = rec.queue_id
        cur = PyDict_GetItem(queues, qid)
        queue_offset = 0 if cur == NULL else <int64_t>(<object>cur)
        src = eb.data + rec.pos
        rmq_store_be64(src + QUEUE_OFFSET_POSITION, <uint64_t>(queue_offset if consumable else 0))
        rmq_store_be64(src + PHY_POS_POSITION, <uint64_t>(mf.file_from_offset + wrote))
        rmq_store_be64(src + rec.store_ts_pos, <uint64_t>store_timestamp)
        if consumable:
            PyDict_SetItem(queues, qid, queue_offset + 1)
            return queue_offset
        return 0

    cdef unassign(self, EncodeBuffer eb, Py_ssize_t i):
        # Give back the queue offset assign() took for record i (its write failed); newest first.
        cdef EncodedRecord *rec = &eb.rec[i]
        if rec.tran_type != TRANSACTION_PREPARED_TYPE and rec.tran_type != TRANSACTION_ROLLBACK_TYPE:
            queues = self._table[eb.topics[i]]
            queues[rec.queue_id] = queues[rec.queue_id] - 1

    cdef PutResult do_append(self, MappedFile mf, EncodeBuffer eb, Py_ssize_t i, int64_t store_timestamp):
        # Returns None when the file cannot take the record: a blank record then fills the rest of the file
        # (END_OF_FILE) and the caller retries on the next file.
        cdef EncodedRecord *rec = &eb.rec[i]
        cdef int32_t n = rec.length
        cdef int64_t wrote = rmq_atomic_load_i64(&mf._wrote)
        cdef PutResult r
        cdef int err
        if n + END_FILE_MIN_BLANK_LENGTH > mf.file_size - wrote:
            self.write_blank(mf)
            return None
        r = self.assign(mf, eb, i, store_timestamp, wrote)
        if rec.record_crc:
            _fill_record_crc(eb.data + rec.pos, n)
        err = mf.write_c(wrote, eb.data + rec.pos, n, True)
        if err != 0:
            self.unassign(eb, i)
            raise OSError(err, f"append: {os.strerror(err)}", mf.file_name)
        mf.advance(n, store_timestamp)
        return r

    def append(self, MappedFile mf not None, EncodeBuffer eb not None, Py_ssize_t i=0, int64_t store_timestamp=0):
        """Append encoded record ``i``; returns its PutResult, or None when the file was full (blank written)."""
        if i < 0 or i >= eb.count:
            raise IndexError(i)
        return self.do_append(mf, eb, i, store_timestamp if store_timestamp else now_ms())

    def append_batch(self, MappedFile mf not None, EncodeBuffer eb not None, Py_ssize_t start, list results not None,
                     int64_t store_timestamp=0):
        """Append records start.. until the file fills; results are appended to ``results``. Returns the index of
        the first record not appended (len(eb) when all went in)."""
        cdef Py_ssize_t i
        cdef PutResult r
        if store_timestamp == 0:
            store_timestamp = now_ms()
        for i in range(start, eb.count):
            r = self.do_append(mf, eb, i, store_timestamp)
            if r is None:
                return i
            results.append(r)
        return eb.count


def scan_records(data, Py_ssize_t start=0, Py_ssize_t end=-1, bint check_crc=False, int64_t base_offset=-1):
    """Walk records from ``start`` without building objects (GIL released): recovery's and verify's inner loop.

    Returns ``(position, count, code)``: ``position`` is the end of the last good record, ``count`` how many
    records were good, ``code`` what stopped the walk: RESULT_END (no more data: end of buffer or zeros),
    RESULT_BLANK (the end-of-file padding, which starts at ``position``), or a negative error code for
    ``record_error``. With ``base_offset`` >= 0 (the global offset of ``data[0]``) a record whose physicalOffset
    field is not ``base_offset + position`` is corrupt too (ERR_PHYSICAL_OFFSET): no CRC covers that field.
    """
    cdef _Buffer b = _Buffer()
    cdef RecordView rv
    cdef const unsigned char *base
    cdef Py_ssize_t pos, count = 0
    cdef int code = RECORD_END
    b.acquire(data)
    if end < 0 or end > b.view.len:
        end = b.view.len
    if start < 0 or start > end:
        raise ValueError(f"start {start} outside [0, {end}]")
    base = <const unsigned char *>b.view.buf
    pos = start
    with nogil:
        while True:
            code = parse_record(base + pos, end - pos, &rv, check_crc)
            if code != RECORD_OK:
                break
            if base_offset >= 0 and rv.physical_offset != base_offset + pos:
                code = ERR_PHYSICAL_OFFSET
                break
            pos += rv.total_size
            count += 1
    return pos, count, code


RESULT_OK = RECORD_OK
RESULT_BLANK = RECORD_BLANK
RESULT_END = RECORD_END


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


# ---------------------------------------------------------------------------------------------------------------
# The put path in one call

cdef class DispatchRing:
    """What the writer hands the dispatcher: every record it appends, without its body (rmq_dispatch_ring.h), so
    that dispatch reads no commitlog bytes for them (``_dispatch.drain_dispatch_ring``). A hint: the dispatcher
    scans the commitlog for any record the ring lacks. ``size``: bytes (rounded down to 8), allocated at once but
    touched only as entries come (~150 bytes a record with a tag and a key)."""

    def __cinit__(self, int64_t size=4 * 1024 * 1024):
        size &= ~7
        if size < 4096:
            raise ValueError(f"dispatch ring size {size} is below 4096 bytes")
        self.r.buf = <unsigned char *>malloc(<size_t>size)
        if self.r.buf == NULL:
            raise MemoryError()
        self.r.size = size
        self.r.head = self.r.tail = self.r.pending = self.r.dropped = 0

    def __dealloc__(self):
        free(self.r.buf)
        self.r.buf = NULL

    @property
    def size(self):
        return self.r.size

    @property
    def dropped(self):
        """Records the writer could not hand over (the ring was full): the dispatcher scanned them."""
        return self.r.dropped

    @property
    def pending_bytes(self):
        """Bytes of entries handed over and not yet taken."""
        return rmq_atomic_load_i64(&self.r.head) - rmq_atomic_load_i64(&self.r.tail)


cdef void _push_slim(rmq_dring *r, const unsigned char *data, const EncodedRecord *rec, Py_ssize_t start,
                     Py_ssize_t end, int64_t phys) noexcept nogil:
    # Records start..end of an encode buffer, appended back to back from commitlog offset ``phys`` (their offsets,
    # queue offsets and store times already in place), into the ring, then published.
    cdef Py_ssize_t k
    cdef RecordView rv
    cdef const unsigned char *p
    cdef int32_t after_body
    for k in range(start, end):
        p = data + rec[k].pos
        if parse_record(p, rec[k].length, &rv, False) == RECORD_OK:
            after_body = rv.body_pos + rv.body_len
            rmq_dring_push(r, phys + (rec[k].pos - rec[start].pos), rv.total_size, p, rv.body_pos - 4,
                           p + after_body, rv.total_size - after_body)
        else:
            r.dropped += 1
    rmq_dring_publish(r)


cdef class CommitLogWriter:
    """CommitLog's put path without Python frames between the API and the copy: encode + CRC outside the put lock
    into a reusable buffer, then under the lock take queue offsets and append, rolling to the next file (through
    the MappedFileQueue) when a record does not fit. Raises MessageIllegalError before anything is written."""
    cdef MessageEncoder encoder
    cdef readonly AppendMessageCallback callback
    cdef object lock
    cdef object mapped_file_queue
    cdef MappedFile current
    cdef int32_t max_record
    cdef int64_t file_size
    cdef list _free
    cdef object _failed
    cdef readonly int64_t put_messages  # messages every put path took (stats' put_calls)
    cdef WakeEvent _arrivals            # the dispatcher's, poked after an append while it idles
    cdef int64_t _dispatcher_idle
    cdef DispatchRing _dring            # the dispatcher's: every appended record goes in, body left out

    def __init__(self, MessageEncoder encoder not None, AppendMessageCallback callback not None, lock,
                 mapped_file_queue, int32_t max_record, int64_t file_size, failed_result):
        self.encoder = encoder
        self.callback = callback
        self.lock = lock
        self.mapped_file_queue = mapped_file_queue
        self.max_record = max_record
        self.file_size = file_size
        self._free = []
        self._failed = failed_result

    cdef EncodeBuffer _take(self):
        cdef EncodeBuffer b
        if self._free:
            b = <EncodeBuffer>self._free.pop()
            b.size = 0
            b.count = 0
            b.topics = []
            b.uniq_keys = []
            b.defer_body_crc = False
            return b
        return EncodeBuffer()

    cdef _give(self, EncodeBuffer b):
        if len(self._free) < 16 and b.capacity <= 8 * 1024 * 1024:
            self._free.append(b)

    cdef int _check(self, EncodeBuffer b, bint rows=False, Py_ssize_t first_row=0) except -1:
        cdef Py_ssize_t i
        for i in range(b.count):
            if b.rec[i].length > self.max_record:
                raise MessageIllegalError(
                    f"body[{first_row + i}]" if rows else "body",
                    f"record of {b.rec[i].length} bytes does not fit a commitlog file of "
                    f"{self.file_size} bytes with its end-of-file blank", self.max_record)
        return 0

    cdef MappedFile _file(self):
        # The file to append to: the cached one unless full; else the queue's last or a new one (None: failed).
        cdef MappedFile mf = self.current
        if mf is not None and not mf._closed and rmq_atomic_load_i64(&mf._wrote) < mf.file_size:
            return mf
        if mf is not None and mf._ring != NULL and not mf._closed:
            # The full file's last records may still wait in the write ring, where the next file's go on: into
            # the file with them before they can be overwritten.
            mf.commit()
        mf = self.mapped_file_queue.get_last_mapped_file()
        self.current = mf
        return mf

    def reset(self):
        """Forget the cached file (after truncation or deletion by recovery and cleaning)."""
        self.current = None

    def set_dispatcher(self, WakeEvent arrivals):
        """The dispatcher's event: poked after appends while it idles (``dispatcher_idle``). In C, so that a put
        costs no Python call for it (a threading.Event.set was ~1 us a put when the dispatcher slept)."""
        self._arrivals = arrivals

    def set_dispatch_ring(self, DispatchRing ring):
        """The dispatcher's ring (None: none): each record appended from now on is handed over in it."""
        with self.lock:
            self._dring = ring

    def dispatcher_idle(self, bint idle):
        """The dispatcher says it sleeps long (appends poke it) or runs again (they do not)."""
        rmq_atomic_store_i64(&self._dispatcher_idle, idle)

    cdef inline void _arrived(self, Py_ssize_t n) noexcept:
        self.put_messages += n
        if rmq_atomic_load_i64(&self._dispatcher_idle) and self._arrivals is not None:
            rmq_event_poke(&self._arrivals.ev)

    cpdef object put(self, Message msg):
        cdef EncodeBuffer b = self._take()
        cdef MappedFile mf
        cdef PutResult r
        cdef int64_t ts
        self.encoder.encode_into(msg, b)
        self._check(b)
        with self.lock:
            mf = self._file()
            if mf is None:
                return self._failed()
            ts = now_ms()
            r = self.callback.do_append(mf, b, 0, ts)
            if r is None:
                mf = self._file()
                if mf is None:
                    return self._failed()
                r = self.callback.do_append(mf, b, 0, ts)
            if self._dring is not None and r.commitlog_offset >= 0:
                _push_slim(&self._dring.r, b.data, b.rec, 0, 1, r.commitlog_offset)
        self._give(b)
        self._arrived(1)
        return r

    cpdef list put_batch(self, messages, dict properties=None):
        # ``properties``: common to every message, encoded once (MessageEncoder.batch_properties), before the
        # buffer is taken so a refusal leaves nothing to give back.
        cdef BatchProperties batch = self.encoder.batch_properties(properties) if properties else None
        cdef EncodeBuffer b = self._take()
        cdef list out = []
        b.defer_body_crc = True
        for m in messages:
            self.encoder.encode_into(<Message?>m, b, batch)
        b.defer_body_crc = False
        self._check(b, True)
        with nogil:
            fill_body_crcs(b)
        self._append_all(b, out, None)
        self._give(b)
        self._arrived(len(out))
        return out

    def check_record_length(self, int64_t length, Py_ssize_t row):
        """MessageIllegalError (field ``body[row]``) when a record of ``length`` bytes cannot fit a file."""
        if length > self.max_record:
            raise MessageIllegalError(
                f"body[{row}]", f"record of {length} bytes does not fit a commitlog file of {self.file_size} bytes "
                "with its end-of-file blank", self.max_record)

    def put_arrow_rows(self, EncodeBuffer b not None, int64_t[:, ::1] result not None, Py_ssize_t first_row=0):
        """Append the records Arrow rows were encoded into (MessageEncoder.encode_arrow): row i's store time,
        commitlog offset, queue offset and size go to result[i, 0..3] (commitlog offset -1: no file could be made,
        CREATE_MAPPED_FILE_FAILED). No Python object per row."""
        if result.shape[0] < b.count or result.shape[1] < 4:
            raise ValueError(f"result must be at least ({b.count}, 4)")
        self._check(b, True, first_row)
        self._append_all(b, None, result)
        self._arrived(b.count)

    cdef _append_all(self, EncodeBuffer b, list out, int64_t[:, ::1] raw):
        # The put lock's part of put_batch / put_arrow: the records that fit the current file take their offsets
        # with the GIL; then they are copied as one range (they lie back to back in the buffer) with the GIL
        # released, so the dispatcher and other producers run meanwhile, and published with one advance. The first
        # size goes last, so a copy cut by a kill reads as the end of data. Results go to ``out`` (PutResults) or
        # ``raw`` rows (store time, commitlog offset, queue offset, size).
        cdef MappedFile mf
        cdef int64_t ts, wrote, pos, total
        cdef Py_ssize_t i = 0, j, k
        cdef const unsigned char *src
        cdef int err
        cdef rmq_dring *dring = NULL
        with self.lock:
            if self._dring is not None:
                dring = &self._dring.r
            ts = now_ms()
            while i < b.count:
                mf = self._file()
                if mf is None:
                    while i < b.count:
                        if out is not None:
                            out.append(self._failed())
                        else:
                            raw[i, 0] = ts
                            raw[i, 1] = -1
                            raw[i, 2] = -1
                            raw[i, 3] = 0
                        i += 1
                    break
                wrote = rmq_atomic_load_i64(&mf._wrote)
                pos = wrote
                j = i
                while j < b.count and pos + b.rec[j].length + END_FILE_MIN_BLANK_LENGTH <= mf.file_size:
                    if out is not None:
                        out.append(self.callback.assign(mf, b, j, ts, pos))
                    else:
                        raw[j, 0] = ts
                        raw[j, 1] = mf.file_from_offset + pos
                        raw[j, 2] = self.callback.assign_raw(mf, b, j, ts, pos)
                        raw[j, 3] = b.rec[j].length
                    pos += b.rec[j].length
                    j += 1
                if j > i:
                    total = pos - wrote
                    src = b.data + b.rec[i].pos
                    with nogil:
                        for k in range(i, j):
                            if b.rec[k].record_crc:
                                _fill_record_crc(b.data + b.rec[k].pos, b.rec[k].length)
                        err = mf.write_c(wrote, src, total, True)
                        if err == 0 and dring != NULL:
                            _push_slim(dring, b.data, b.rec, i, j, mf.file_from_offset + wrote)
                    if err != 0:
                        for k in range(j - 1, i - 1, -1):
                            self.callback.unassign(b, k)
                        if out is not None:
                            del out[len(out) - (j - i):]
                        raise OSError(err, f"append: {os.strerror(err)}", mf.file_name)
                    mf.advance(total, ts)
                    i = j
                if i < b.count:
                    self.callback.write_blank(mf)


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
