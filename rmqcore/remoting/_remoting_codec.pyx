# cython: language_level=3, boundscheck=False, wraparound=False
"""RemotingCommand frames, compiled: the per-request path of the remoting front (frame scan, both header
serializations, the answer's header). remoting_command.py holds the same in Python, the reference this is tested
against (tests/test_remoting_codec.py: equal commands and equal errors for every input, equal answer bytes).

``FrameDecoder.feed`` takes what the socket gave and returns the whole commands it completes, keeping a partial
frame for the next call: the frame scan and the ROCKETMQ binary header are read in C from the buffer; a JSON header
goes through the stdlib's C JSON scanner, its fields checked here. ``encode_header`` writes an answer's length,
type and header in one buffer (the body, a pull's records, is written after it by the caller, as it is).
"""
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8, PyUnicode_GET_LENGTH


cdef extern from "Python.h":
    bint PyUnicode_IS_COMPACT_ASCII(object o)
    void* PyUnicode_1BYTE_DATA(object o)
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t
from libc.string cimport memcpy, memmove

import json

from rmqcore.remoting.remoting_command import BROKER_VERSION as _BROKER_VERSION
from rmqcore.remoting.remoting_command import LANGUAGES as _LANGUAGES
from rmqcore.remoting.remoting_command import MAX_FRAME as _MAX_FRAME
from rmqcore.remoting.remoting_command import FrameError

cdef object _json_loads = json.loads
cdef object _json_dumps = json.dumps
cdef tuple LANGUAGES = _LANGUAGES
cdef int BROKER_VERSION = _BROKER_VERSION
cdef long long INT_MIN = -(1 << 31)
cdef long long INT_MAX = (1 << 31) - 1


@cython.final
cdef class RemotingCommand:
    """One decoded request (or response): remoting_command.RemotingCommand's fields."""
    cdef public int code
    cdef public str language
    cdef public int version
    cdef public int opaque
    cdef public int flag
    cdef public object remark
    cdef public dict ext_fields
    cdef public int serialize_type
    cdef public bytes body

    def astuple(self):
        return (self.code, self.language, self.version, self.opaque, self.flag, self.remark, self.ext_fields,
                self.serialize_type, self.body)

    def __repr__(self):
        return (f"RemotingCommand(code={self.code}, opaque={self.opaque}, flag={self.flag}, "
                f"ext_fields={self.ext_fields!r}, body={len(self.body)} bytes)")


cdef inline int32_t _i32(const uint8_t* p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3])


cdef inline int16_t _i16(const uint8_t* p) noexcept nogil:
    return <int16_t>((<uint32_t>p[0] << 8) | <uint32_t>p[1])


cdef inline void _put32(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = v >> 24
    p[1] = (v >> 16) & 0xFF
    p[2] = (v >> 8) & 0xFF
    p[3] = v & 0xFF


cdef str _java_string(str key, object value):
    if type(value) is str:
        return <str>value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    raise FrameError(f"extFields[{key!r}]: expected a string, got {type(value).__name__}")


cdef long long _int_field(dict h, str name, object default) except? -1:
    v = h.get(name)
    if v is None:
        if default is None:
            raise FrameError(f"header field {name!r} is missing")
        return default
    if type(v) is not int or not INT_MIN <= v <= INT_MAX:
        raise FrameError(f"header field {name!r}: {v!r} is not an int in [{INT_MIN}, {INT_MAX}]")
    return v


cdef object _scan_once = json.JSONDecoder().scan_once     # the stdlib's C scanner (json.loads' own)


cdef object _json_object(const uint8_t* p, Py_ssize_t n):
    """json.loads of the header's bytes. A header that starts with ``{`` and a second byte that is not NUL (so
    json.detect_encoding says UTF-8) and decodes as strict UTF-8 goes to the C scanner directly, skipping loads'
    encoding detection and its two whitespace regexes; anything else, and any header the scanner does not take
    whole, goes through json.loads itself, so results and errors are loads' own."""
    cdef str text
    cdef Py_ssize_t end
    if n >= 2 and p[0] == 0x7B and p[1] != 0:
        try:
            text = PyUnicode_DecodeUTF8(<const char*>p, n, NULL)
            h, end = _scan_once(text, 0)
            if end == PyUnicode_GET_LENGTH(text):
                return h
        except Exception:
            pass
    try:
        return _json_loads(PyBytes_FromStringAndSize(<const char*>p, n))
    except (ValueError, UnicodeDecodeError) as e:
        raise FrameError(f"header is not JSON: {e}") from None


cdef int _json_header(RemotingCommand cmd, const uint8_t* p, Py_ssize_t n) except -1:
    h = _json_object(p, n)
    if type(h) is not dict:
        raise FrameError(f"header is not a JSON object but {type(h).__name__}")
    cdef dict d = <dict>h
    cmd.code = _int_field(d, "code", None)
    language = d.get("language", "JAVA")
    if language is None:
        language = "JAVA"
    if type(language) is not str:
        raise FrameError(f"header field 'language': {language!r} is not a string")
    cmd.language = language
    cmd.version = _int_field(d, "version", 0)
    cmd.opaque = _int_field(d, "opaque", 0)
    cmd.flag = _int_field(d, "flag", 0)
    remark = d.get("remark")
    if remark is not None and type(remark) is not str:
        raise FrameError(f"header field 'remark': {remark!r} is not a string")
    cmd.remark = remark
    raw = d.get("extFields")
    cdef dict ext = {}
    if raw is not None:
        if type(raw) is not dict:
            raise FrameError(f"header field 'extFields' is not an object but {type(raw).__name__}")
        for k, v in (<dict>raw).items():
            if v is not None:
                ext[k] = _java_string(k, v)
    cmd.ext_fields = ext
    return 0


cdef str _utf8(const uint8_t* p, Py_ssize_t n, str what):
    try:
        return PyUnicode_DecodeUTF8(<const char*>p, n, NULL)
    except UnicodeDecodeError as e:
        raise FrameError(f"binary header: {what} is not UTF-8: {e}") from None


cdef int _binary_header(RemotingCommand cmd, const uint8_t* p, Py_ssize_t n) except -1:
    if n < 21:
        raise FrameError(f"binary header of {n} bytes is shorter than its 21 fixed bytes")
    cmd.code = _i16(p)
    cdef int lang = <signed char>p[2]
    cmd.version = _i16(p + 3)
    cmd.opaque = _i32(p + 5)
    cmd.flag = _i32(p + 9)
    cdef long long remark_len = _i32(p + 13)
    cdef Py_ssize_t pos = 17
    if remark_len < 0 or pos + remark_len + 4 > n:
        raise FrameError(f"binary header: remark length {remark_len} runs past the header ({n} bytes)")
    cmd.remark = _utf8(p + pos, remark_len, "remark") if remark_len > 0 else None
    pos += remark_len
    cdef long long ext_len = _i32(p + pos)
    pos += 4
    if ext_len < 0 or pos + ext_len != n:
        raise FrameError(f"binary header: extFields length {ext_len} does not end the header ({n} bytes)")
    cdef dict ext = {}
    cdef long long klen, vlen
    cdef Py_ssize_t kpos
    while pos < n:
        if pos + 2 > n:
            raise FrameError("binary header: extFields key length cut short")
        klen = _i16(p + pos)
        pos += 2
        if klen < 0 or pos + klen + 4 > n:
            raise FrameError(f"binary header: extFields key length {klen} runs past the header")
        kpos = pos
        pos += klen
        vlen = _i32(p + pos)
        pos += 4
        if vlen < 0 or pos + vlen > n:
            raise FrameError(f"binary header: extFields value length {vlen} runs past the header")
        key = _utf8(p + kpos, klen, "an extFields entry")
        ext[key] = _utf8(p + pos, vlen, "an extFields entry")
        pos += vlen
    cmd.ext_fields = ext
    cmd.language = LANGUAGES[lang] if 0 <= lang < len(LANGUAGES) else "OTHER"
    return 0


cdef RemotingCommand _decode_one(const uint8_t* p, Py_ssize_t length):
    """The frame whose length field is at ``p`` (``length`` already checked: the whole frame is there)."""
    cdef uint32_t ori = <uint32_t>_i32(p + 4)
    cdef int stype = ori >> 24
    cdef Py_ssize_t hlen = ori & 0xFFFFFF
    if hlen > length - 4:
        raise FrameError(f"header length {hlen} runs past the frame ({length - 4} bytes after it)")
    cdef RemotingCommand cmd = RemotingCommand.__new__(RemotingCommand)
    if stype == 0:
        _json_header(cmd, p + 8, hlen)
    elif stype == 1:
        _binary_header(cmd, p + 8, hlen)
    else:
        raise FrameError(f"serialize type {stype} is neither JSON (0) nor ROCKETMQ (1)")
    cmd.serialize_type = stype
    cmd.body = PyBytes_FromStringAndSize(<const char*>p + 8 + hlen, length - 4 - hlen)
    return cmd


cdef tuple _scan(const uint8_t* p, Py_ssize_t n, long long max_frame):
    cdef list out = []
    cdef Py_ssize_t pos = 0
    cdef long long length
    while n - pos >= 4:
        length = _i32(p + pos)
        if length < 4 or length > max_frame:
            raise FrameError(f"frame length {length} is not in [4, {max_frame}]")
        if n - pos - 4 < length:
            break
        out.append(_decode_one(p + pos, length))
        pos += 4 + length
    return out, pos


def decode_frames(const uint8_t[::1] buf, long long max_frame=_MAX_FRAME):
    """remoting_command.decode_frames: (the whole commands at the start of ``buf``, bytes they took)."""
    if buf.shape[0] == 0:
        return [], 0
    return _scan(&buf[0], buf.shape[0], max_frame)


@cython.final
cdef class FrameDecoder:
    """One connection's incoming bytes: ``feed(data)`` returns the commands completed so far, in order. A frame
    that can never be read raises FrameError (the connection is then closed, as NettyDecoder closes it); the
    decoder is not used after that."""
    cdef bytearray _buf
    cdef readonly long long max_frame

    def __init__(self, long long max_frame=_MAX_FRAME):
        self._buf = bytearray()
        self.max_frame = max_frame

    @property
    def pending(self):
        """Bytes of a partial frame kept for the next feed."""
        return len(self._buf)

    def feed(self, data):
        cdef const uint8_t[::1] view
        cdef list out
        cdef Py_ssize_t used
        if not self._buf:
            # the common case: whole frames in one read, decoded straight from it
            view = data
            if view.shape[0] == 0:
                return []
            out, used = _scan(&view[0], view.shape[0], self.max_frame)
            if used < view.shape[0]:
                self._buf += data[used:]
            return out
        self._buf += data
        view = self._buf
        out, used = _scan(&view[0], view.shape[0], self.max_frame)
        view = None
        if used:
            del self._buf[:used]
        return out


cdef bytes _json_text(str s):
    """``s`` as a JSON string (json.dumps with ensure_ascii=False). Printable ASCII without a quote or backslash,
    what header names and values nearly always are, is written here as it is; anything else goes to json.dumps."""
    cdef Py_ssize_t n, i
    cdef const uint8_t* src
    cdef uint8_t c
    cdef bytes out
    cdef char* dst
    if PyUnicode_IS_COMPACT_ASCII(s):
        n = PyUnicode_GET_LENGTH(s)
        src = <const uint8_t*>PyUnicode_1BYTE_DATA(s)
        for i in range(n):
            c = src[i]
            if c < 0x20 or c == 0x22 or c == 0x5C or c == 0x7F:
                break
        else:
            out = PyBytes_FromStringAndSize(NULL, n + 2)
            dst = PyBytes_AS_STRING(out)
            dst[0] = 0x22
            memcpy(dst + 1, src, n)
            dst[n + 1] = 0x22
            return out
    return _json_dumps(s, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def encode_header(int serialize_type, int code, int opaque, int flag, remark, dict ext_fields,
                  long long body_length):
    """remoting_command.encode_header: length, type and header of an answer whose body follows."""
    cdef list parts
    cdef bytes header, kb, vb, r
    cdef bytearray ext
    cdef uint8_t fixed[21]
    cdef uint8_t head[8]
    if serialize_type == 0:
        parts = [b'{"code":%d' % code]
        if ext_fields:
            parts.append(b',"extFields":{')
            first = True
            for k, v in ext_fields.items():
                if not first:
                    parts.append(b",")
                first = False
                parts.append(_json_text(k))
                parts.append(b":")
                parts.append(_json_text(v))
            parts.append(b"}")
        parts.append(b',"flag":%d,"language":"JAVA","opaque":%d' % (flag, opaque))
        if remark is not None:
            parts.append(b',"remark":')
            parts.append(_json_text(remark))
        parts.append(b',"serializeTypeCurrentRPC":"JSON","version":%d}' % BROKER_VERSION)
        header = b"".join(parts)
    elif serialize_type == 1:
        r = (<str>remark).encode("utf-8") if remark is not None else b""
        ext = bytearray()
        if ext_fields:
            for k, v in ext_fields.items():
                kb = (<str>k).encode("utf-8")
                vb = (<str>v).encode("utf-8")
                ext += (<int16_t>len(kb)).to_bytes(2, "big", signed=True) + kb
                ext += (<int32_t>len(vb)).to_bytes(4, "big", signed=True) + vb
        fixed[0] = (code >> 8) & 0xFF
        fixed[1] = code & 0xFF
        fixed[2] = 0
        fixed[3] = (BROKER_VERSION >> 8) & 0xFF
        fixed[4] = BROKER_VERSION & 0xFF
        _put32(fixed + 5, <uint32_t>opaque)
        _put32(fixed + 9, <uint32_t>flag)
        _put32(fixed + 13, <uint32_t>len(r))
        header = PyBytes_FromStringAndSize(<const char*>fixed, 17) + r + \
            (<int32_t>len(ext)).to_bytes(4, "big", signed=True) + bytes(ext)
    else:
        raise ValueError(f"serialize type {serialize_type} is neither JSON (0) nor ROCKETMQ (1)")
    cdef Py_ssize_t hlen = PyBytes_GET_SIZE(header)
    _put32(head, <uint32_t>(4 + hlen + body_length))
    _put32(head + 4, (<uint32_t>serialize_type << 24) | <uint32_t>hlen)
    return PyBytes_FromStringAndSize(<const char*>head, 8) + header
