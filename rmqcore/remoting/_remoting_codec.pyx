# cython: language_level=3, boundscheck=False, wraparound=False
"""RemotingCommand frames, compiled: the per-request path of the remoting front (frame scan, both header
serializations, the answer's header). remoting_command.py holds the same in Python, the reference this is tested
against (tests/test_remoting_codec.py: equal commands and equal errors for every input, equal answer bytes).

``FrameDecoder.feed`` takes what the socket gave and returns the whole commands it completes, keeping a partial
frame for the next call: the frame scan and the ROCKETMQ binary header are read in C from the buffer; a JSON header
of the common shape too (_json_fast), any other through the stdlib's C JSON scanner, its fields checked here. ``encode_header`` writes an answer's length,
type and header in one buffer (the body, a pull's records, is written after it by the caller, as it is).
"""
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeASCII, PyUnicode_DecodeUTF8, PyUnicode_GET_LENGTH

from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t
from libc.string cimport memcmp, memcpy, memmove
from cpython.mem cimport PyMem_Free, PyMem_Malloc

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
    """One decoded request (or response): remoting_command.RemotingCommand's fields (declared in the .pxd, so the
    compiled send reads them as a struct's)."""

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


# -- the common JSON header, read in one pass ------------------------------------------------------------------
# A client's header is a flat object: ints, strings, and extFields, an object of strings. _json_fast reads exactly
# that shape straight from the bytes into the command (no text object for the whole header, no dict for it, no
# second dict for extFields; JSON's escapes are undone here). Anything else -- an escape JSON does not have, a lone
# surrogate, a raw control character, a float, null, a nested value it does not expect, bytes that are not strict
# UTF-8, an int out of range, a missing code -- makes it give up having set nothing the caller keeps, and the header takes the general path below, whose results and errors are json.loads'
# own. So both paths give equal commands for every header the fast one takes (tests/test_remoting_codec.py).

cdef enum:
    F_CODE = 1
    F_LANGUAGE = 2
    F_VERSION = 4
    F_OPAQUE = 8
    F_FLAG = 16
    F_REMARK = 32
    F_EXT = 64


cdef inline Py_ssize_t _ws(const uint8_t* p, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    while i < n and (p[i] == 0x20 or p[i] == 0x0A or p[i] == 0x0D or p[i] == 0x09):
        i += 1
    return i


cdef inline Py_ssize_t _string_end(const uint8_t* p, Py_ssize_t i, Py_ssize_t n, int* kind) noexcept nogil:
    """``p[i]`` follows an opening quote: the index of the closing quote, or -1 for a string the fast path leaves
    (a control character, no end). ``kind``: 0 ASCII without escapes, 1 other bytes without escapes, 2 escapes
    (fastjson writes the properties' separators \\u0001 and \\u0002 so)."""
    cdef uint8_t c
    cdef int k = 0
    while i < n:
        c = p[i]
        if c == 0x22:
            kind[0] = k
            return i
        if c == 0x5C:
            k = 2
            i += 2
            continue
        if c < 0x20:
            return -1
        if c >= 0x80 and k == 0:
            k = 1
        i += 1
    return -1


cdef inline int _hex4(const uint8_t* p) noexcept nogil:
    cdef int v = 0, i, d
    cdef uint8_t c
    for i in range(4):
        c = p[i]
        if 0x30 <= c <= 0x39:
            d = c - 0x30
        elif 0x61 <= c <= 0x66:
            d = c - 0x61 + 10
        elif 0x41 <= c <= 0x46:
            d = c - 0x41 + 10
        else:
            return -1
        v = (v << 4) | d
    return v


cdef Py_ssize_t _unescape(const uint8_t* p, Py_ssize_t n, uint8_t* out) noexcept nogil:
    """A string's bytes with JSON's escapes undone, as UTF-8 into ``out`` (never longer than ``p``): its length, or
    -1 for an escape JSON does not have or a lone surrogate (the general path's to read or refuse)."""
    cdef Py_ssize_t i = 0, o = 0
    cdef int u, lo
    cdef uint8_t c
    while i < n:
        c = p[i]
        if c != 0x5C:
            out[o] = c
            o += 1
            i += 1
            continue
        if i + 1 >= n:
            return -1
        c = p[i + 1]
        i += 2
        if c == 0x22 or c == 0x5C or c == 0x2F:
            out[o] = c
        elif c == 0x62:
            out[o] = 0x08
        elif c == 0x66:
            out[o] = 0x0C
        elif c == 0x6E:
            out[o] = 0x0A
        elif c == 0x72:
            out[o] = 0x0D
        elif c == 0x74:
            out[o] = 0x09
        elif c == 0x75:
            if i + 4 > n:
                return -1
            u = _hex4(p + i)
            if u < 0:
                return -1
            i += 4
            if 0xDC00 <= u <= 0xDFFF:
                return -1
            if 0xD800 <= u <= 0xDBFF:
                if i + 6 > n or p[i] != 0x5C or p[i + 1] != 0x75:
                    return -1
                lo = _hex4(p + i + 2)
                if lo < 0xDC00 or lo > 0xDFFF:
                    return -1
                i += 6
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00)
            if u < 0x80:
                out[o] = u
            elif u < 0x800:
                out[o] = 0xC0 | (u >> 6)
                out[o + 1] = 0x80 | (u & 0x3F)
                o += 1
            elif u < 0x10000:
                out[o] = 0xE0 | (u >> 12)
                out[o + 1] = 0x80 | ((u >> 6) & 0x3F)
                out[o + 2] = 0x80 | (u & 0x3F)
                o += 2
            else:
                out[o] = 0xF0 | (u >> 18)
                out[o + 1] = 0x80 | ((u >> 12) & 0x3F)
                out[o + 2] = 0x80 | ((u >> 6) & 0x3F)
                out[o + 3] = 0x80 | (u & 0x3F)
                o += 3
        else:
            return -1
        o += 1
    return o


cdef object _utf8_or_none(const uint8_t* p, Py_ssize_t n):
    try:
        return PyUnicode_DecodeUTF8(<const char*>p, n, NULL)
    except UnicodeDecodeError:
        return None


cdef object _fast_str(const uint8_t* p, Py_ssize_t n, int kind):
    """The string's text; None where the fast path leaves it (see _unescape; bytes that are not strict UTF-8)."""
    cdef uint8_t small[512]
    cdef uint8_t* buf
    cdef Py_ssize_t m
    if kind == 0:
        return PyUnicode_DecodeASCII(<const char*>p, n, NULL)
    if kind == 1:
        return _utf8_or_none(p, n)
    if n <= 512:
        small[0] = 0            # (gcc cannot see that _unescape writes what is read)
        buf = &small[0]
    else:
        buf = <uint8_t*>PyMem_Malloc(n)
    if buf == NULL:
        raise MemoryError()
    m = _unescape(p, n, buf)
    text = _utf8_or_none(buf, m) if m >= 0 else None
    if buf != &small[0]:
        PyMem_Free(buf)
    return text


cdef inline Py_ssize_t _fast_int(const uint8_t* p, Py_ssize_t i, Py_ssize_t n, long long* out) noexcept nogil:
    """A JSON integer at ``p[i]`` within [INT_MIN, INT_MAX]: the index after it, or -1 (a fraction, an exponent,
    a leading zero, out of range: the general path's to read or refuse)."""
    cdef bint neg = False
    cdef long long v = 0
    cdef Py_ssize_t start
    if i < n and p[i] == 0x2D:
        neg = True
        i += 1
    start = i
    while i < n and 0x30 <= p[i] <= 0x39:
        v = v * 10 + (p[i] - 0x30)
        i += 1
        if i - start > 10:
            return -1
    if i == start or (p[start] == 0x30 and i - start > 1):
        return -1
    if i < n and (p[i] == 0x2E or p[i] == 0x65 or p[i] == 0x45):
        return -1
    if neg:
        v = -v
    if v < INT_MIN or v > INT_MAX:
        return -1
    out[0] = v
    return i


cdef inline int _field(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    """Which header field the key's bytes name (F_*), 0 for another; told by length first."""
    cdef int f = 0
    if n == 4:
        f = F_CODE if memcmp(p, b"code", 4) == 0 else (F_FLAG if memcmp(p, b"flag", 4) == 0 else 0)
    elif n == 6:
        f = F_OPAQUE if memcmp(p, b"opaque", 6) == 0 else (F_REMARK if memcmp(p, b"remark", 6) == 0 else 0)
    elif n == 7 and memcmp(p, b"version", 7) == 0:
        f = F_VERSION
    elif n == 8 and memcmp(p, b"language", 8) == 0:
        f = F_LANGUAGE
    elif n == 9 and memcmp(p, b"extFields", 9) == 0:
        f = F_EXT
    return f


cdef Py_ssize_t _fast_ext(const uint8_t* p, Py_ssize_t i, Py_ssize_t n, dict ext) except -2:
    """extFields' object at ``p[i]`` (after its ``{``) into ``ext``: the index after its ``}``, or -1."""
    cdef Py_ssize_t ks, ke, vs, ve
    cdef int ka, va
    i = _ws(p, i, n)
    if i < n and p[i] == 0x7D:
        return i + 1
    while True:
        if i >= n or p[i] != 0x22:
            return -1
        ks = i + 1
        ke = _string_end(p, ks, n, &ka)
        if ke < 0:
            return -1
        i = _ws(p, ke + 1, n)
        if i >= n or p[i] != 0x3A:
            return -1
        i = _ws(p, i + 1, n)
        if i < n and p[i] == 0x22:
            vs = i + 1
            ve = _string_end(p, vs, n, &va)
            if ve < 0:
                return -1
            key = _fast_str(p + ks, ke - ks, ka)
            value = _fast_str(p + vs, ve - vs, va)
            if key is None or value is None:
                return -1
            ext[key] = value
            i = ve + 1
        else:
            return -1           # null (fastjson leaves null fields out), a number, a boolean: the general path's
        i = _ws(p, i, n)
        if i < n and p[i] == 0x2C:
            i = _ws(p, i + 1, n)
            continue
        if i < n and p[i] == 0x7D:
            return i + 1
        return -1


cdef bint _json_fast(RemotingCommand cmd, const uint8_t* p, Py_ssize_t n) except -1:
    """The header's fields into ``cmd`` if it has the common shape (see above): True; else False."""
    cdef Py_ssize_t i = _ws(p, 0, n), ks, ke, vs, ve
    cdef int ka, va
    cdef long long v
    cdef int seen = 0, f
    cdef long long code = 0, version = 0, opaque = 0, flag = 0
    cdef object language = None, remark = None
    cdef dict ext = None
    if i >= n or p[i] != 0x7B:
        return False
    i = _ws(p, i + 1, n)
    if i < n and p[i] == 0x7D:
        return False            # {}: no code; the general path names it
    while True:
        if i >= n or p[i] != 0x22:
            return False
        ks = i + 1
        ke = _string_end(p, ks, n, &ka)
        if ke < 0:
            return False
        i = _ws(p, ke + 1, n)
        if i >= n or p[i] != 0x3A:
            return False
        i = _ws(p, i + 1, n)
        if i >= n:
            return False
        f = _field(p + ks, ke - ks)
        if f == F_EXT:
            if p[i] != 0x7B:
                return False
            ext = {}
            i = _fast_ext(p, i + 1, n, ext)
            if i < 0:
                return False
        elif p[i] == 0x22:
            vs = i + 1
            ve = _string_end(p, vs, n, &va)
            if ve < 0:
                return False
            if f == F_LANGUAGE or f == F_REMARK:
                text = _fast_str(p + vs, ve - vs, va)
                if text is None:
                    return False
                if f == F_LANGUAGE:
                    language = text
                else:
                    remark = text
            elif f != 0:
                return False    # a string where an int belongs: the general path's error
            elif ka or (va and _fast_str(p + vs, ve - vs, va) is None):
                return False    # a field not read here: still text the general path would take
            i = ve + 1
        elif p[i] == 0x2D or 0x30 <= p[i] <= 0x39:
            i = _fast_int(p, i, n, &v)
            if i < 0 or f == F_LANGUAGE or f == F_REMARK or (f == 0 and ka):
                return False    # (an int where a string belongs: the general path's error)
            if f == F_CODE:
                code = v
            elif f == F_VERSION:
                version = v
            elif f == F_OPAQUE:
                opaque = v
            elif f == F_FLAG:
                flag = v
        else:
            return False        # null, true, false, an array, an object: the general path's
        seen |= f
        i = _ws(p, i, n)
        if i < n and p[i] == 0x2C:
            i = _ws(p, i + 1, n)
            continue
        if i < n and p[i] == 0x7D:
            break
        return False
    if _ws(p, i + 1, n) != n or not (seen & F_CODE):
        return False
    cmd.code = code
    cmd.language = language if seen & F_LANGUAGE else "JAVA"
    cmd.version = version
    cmd.opaque = opaque
    cmd.flag = flag
    cmd.remark = remark
    cmd.ext_fields = ext if ext is not None else {}
    return True


cdef int _json_header(RemotingCommand cmd, const uint8_t* p, Py_ssize_t n) except -1:
    if _json_fast(cmd, p, n):
        return 0
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
