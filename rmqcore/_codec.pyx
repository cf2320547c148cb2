# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The commitlog record layout and codec, as RocketMQ's MessageDecoder and checkMessageAndReturnSize.

Every integer is big-endian. ``parse_record`` is the one place that decides whether bytes are a record: it never
trusts a length field, checks each against the record's totalSize and the bytes available, and returns a code
instead of raising so GIL-free scanners (dispatch, recovery) can use it; ``record_error`` is the one place
that turns those codes into exceptions.

The rest of a record's life is in the modules above this one, which it never imports: the message types
(``_message``), the encoder (``_encoder``), the append path (``_commit_log``) and the reads (``_pull``).
"""

import ipaddress

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

from rmqcore._c cimport rmq_crc32, rmq_java_hash_utf8, rmq_load_be16, rmq_load_be32, rmq_load_be64, rmq_store_be64

from rmqcore.errors import CorruptRecordError

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL


# Public constants (Python names as RocketMQ's).
PY_MESSAGE_MAGIC_CODE = MESSAGE_MAGIC_CODE
PY_MESSAGE_MAGIC_CODE_V2 = MESSAGE_MAGIC_CODE_V2
PY_BLANK_MAGIC_CODE = BLANK_MAGIC_CODE
TOPIC_MAX_LENGTH = 127
PROPERTIES_MAX_LENGTH = 32767
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_CRC32 = "__CRC32#"
KEY_SEPARATOR = " "

cdef int32_t PAGE = 4096
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
    cdef int32_t index = 0, start, n, vp = 0, vl = 0   # zeroed: gcc cannot see next_pair always sets them
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


cdef void _hex_into(char *o, const unsigned char *p, Py_ssize_t n) noexcept nogil:
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
