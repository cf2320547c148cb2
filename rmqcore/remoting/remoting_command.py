"""RemotingCommand: RocketMQ's classic TCP frame, in Python — the readable reference of ``_remoting_codec.pyx``.

A frame (``remoting/.../protocol/RemotingCommand.java``, ``netty/NettyDecoder.java``, tag rocketmq-all-4.9.7)::

    int32 BE  length         4 + header length + body length (not counting itself); at most ``max_frame``
    int32 BE  serializeType << 24 | headerLength (24 bits)      0 = JSON, 1 = ROCKETMQ (binary)
    bytes     header
    bytes     body           the rest

The JSON header is fastjson's writing of RemotingCommand (``code``, ``language``, ``version``, ``opaque``, ``flag``,
``remark``, ``extFields`` and ``serializeTypeCurrentRPC``); the ROCKETMQ header is RocketMQSerializable's layout:
``int16 code, int8 language, int16 version, int32 opaque, int32 flag, int32 remarkLen + UTF-8, int32 extLen +
[int16 keyLen, key, int32 valLen, val]*``. ``extFields`` hold the request's "custom header", every value a string.

``decode_frames`` and ``encode_header`` here and in the compiled module give equal results for every input, errors
included (tests/test_remoting_codec.py holds them to it with hypothesis); the server uses the compiled ones.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field

from .codes import SYSTEM_ERROR

JSON = 0
ROCKETMQ = 1
# NettyDecoder's default frameMaxLength (-Dcom.rocketmq.remoting.frameMaxLength): 16 MiB
MAX_FRAME = 16 * 1024 * 1024
RESPONSE_FLAG = 1          # RemotingCommand's RPC_TYPE bit: this is a response
ONEWAY_FLAG = 2            # RPC_ONEWAY bit: no response is wanted
# LanguageCode, by ordinal (the binary header writes the ordinal, JSON the name)
LANGUAGES = ("JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP", "OMS",
             "RUST")
# The broker's MQVersion ordinal stamped on its answers: 4.9.7 (V4_9_7). The Java client keeps it per broker and
# refuses SQL92 filters below V4_1_0_SNAPSHOT.
BROKER_VERSION = 407


class FrameError(ValueError):
    """A frame or header that cannot be read: the connection is closed, as NettyDecoder closes it."""


@dataclass
class RemotingCommand:
    code: int
    language: str = "JAVA"
    version: int = 0
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    serialize_type: int = JSON
    body: bytes = b""

    def astuple(self) -> tuple:
        return (self.code, self.language, self.version, self.opaque, self.flag, self.remark, self.ext_fields,
                self.serialize_type, self.body)


class Refusal(Exception):
    """An answer other than SUCCESS: its response code and remark."""

    def __init__(self, code: int, remark: str):
        super().__init__(remark)
        self.code = code
        self.remark = remark


def need(ext: dict, name: str) -> str:
    """A @CFNotNull field of a request's custom header (extFields): Refusal when it is missing."""
    v = ext.get(name)
    if v is None:
        # RemotingCommand.decodeCommandCustomHeader's check of a @CFNotNull field
        raise Refusal(SYSTEM_ERROR, f"org.apache.rocketmq.remoting.exception.RemotingCommandException: the custom "
                                    f"field <{name}> is null")
    return v


def header_int(ext: dict, name: str, default: int | None = None) -> int:
    """An int field of a request's custom header; ``default`` when absent, else it is required."""
    v = ext.get(name)
    if v is None:
        if default is not None:
            return default
        need(ext, name)
    try:
        return int(v)
    except ValueError:
        raise Refusal(SYSTEM_ERROR, f"header field {name}: {v!r} is not a number") from None


def _java_string(key: str, value) -> str:
    """An extFields value as fastjson gives it to a HashMap<String, String>: strings as they are, numbers and
    booleans in Java's text."""
    if isinstance(value, str):
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    raise FrameError(f"extFields[{key!r}]: expected a string, got {type(value).__name__}")


def _int_field(h: dict, name: str, lo: int, hi: int, default: int | None) -> int:
    v = h.get(name)
    if v is None:
        if default is None:
            raise FrameError(f"header field {name!r} is missing")
        return default
    if type(v) is not int or not lo <= v <= hi:
        raise FrameError(f"header field {name!r}: {v!r} is not an int in [{lo}, {hi}]")
    return v


def decode_json_header(header: bytes) -> tuple:
    """(code, language, version, opaque, flag, remark, ext_fields) of a JSON header."""
    try:
        h = json.loads(header)
    except (ValueError, UnicodeDecodeError) as e:
        raise FrameError(f"header is not JSON: {e}") from None
    if type(h) is not dict:
        raise FrameError(f"header is not a JSON object but {type(h).__name__}")
    code = _int_field(h, "code", -(1 << 31), (1 << 31) - 1, None)
    language = h.get("language", "JAVA")
    if language is None:
        language = "JAVA"
    if type(language) is not str:
        raise FrameError(f"header field 'language': {language!r} is not a string")
    version = _int_field(h, "version", -(1 << 31), (1 << 31) - 1, 0)
    opaque = _int_field(h, "opaque", -(1 << 31), (1 << 31) - 1, 0)
    flag = _int_field(h, "flag", -(1 << 31), (1 << 31) - 1, 0)
    remark = h.get("remark")
    if remark is not None and type(remark) is not str:
        raise FrameError(f"header field 'remark': {remark!r} is not a string")
    raw = h.get("extFields")
    ext: dict[str, str] = {}
    if raw is not None:
        if type(raw) is not dict:
            raise FrameError(f"header field 'extFields' is not an object but {type(raw).__name__}")
        for k, v in raw.items():
            if v is not None:
                ext[k] = _java_string(k, v)
    return code, language, version, opaque, flag, remark, ext


def decode_binary_header(header: bytes) -> tuple:
    """(code, language, version, opaque, flag, remark, ext_fields) of a ROCKETMQ (binary) header."""
    n = len(header)
    if n < 21:
        raise FrameError(f"binary header of {n} bytes is shorter than its 21 fixed bytes")
    code, lang, version, opaque, flag, remark_len = struct.unpack_from(">hbhiii", header, 0)
    pos = 17
    if remark_len < 0 or pos + remark_len + 4 > n:
        raise FrameError(f"binary header: remark length {remark_len} runs past the header ({n} bytes)")
    remark = None
    if remark_len > 0:
        try:
            remark = header[pos:pos + remark_len].decode("utf-8")
        except UnicodeDecodeError as e:
            raise FrameError(f"binary header: remark is not UTF-8: {e}") from None
    pos += remark_len
    (ext_len,) = struct.unpack_from(">i", header, pos)
    pos += 4
    if ext_len < 0 or pos + ext_len != n:
        raise FrameError(f"binary header: extFields length {ext_len} does not end the header ({n} bytes)")
    ext: dict[str, str] = {}
    while pos < n:
        if pos + 2 > n:
            raise FrameError("binary header: extFields key length cut short")
        (klen,) = struct.unpack_from(">h", header, pos)
        pos += 2
        if klen < 0 or pos + klen + 4 > n:
            raise FrameError(f"binary header: extFields key length {klen} runs past the header")
        key = header[pos:pos + klen]
        pos += klen
        (vlen,) = struct.unpack_from(">i", header, pos)
        pos += 4
        if vlen < 0 or pos + vlen > n:
            raise FrameError(f"binary header: extFields value length {vlen} runs past the header")
        val = header[pos:pos + vlen]
        pos += vlen
        try:
            k = key.decode("utf-8")         # the key first, as the compiled decoder reads them
            ext[k] = val.decode("utf-8")
        except UnicodeDecodeError as e:
            raise FrameError(f"binary header: an extFields entry is not UTF-8: {e}") from None
    language = LANGUAGES[lang] if 0 <= lang < len(LANGUAGES) else "OTHER"
    return code, language, version, opaque, flag, remark, ext


def decode_frames(buf, max_frame: int = MAX_FRAME) -> tuple[list[RemotingCommand], int]:
    """The whole frames at the start of ``buf``: (commands, bytes they took). A partial frame at the end is left
    for the next call; FrameError for a frame that can never be read (the connection is to be closed)."""
    out = []
    pos = 0
    n = len(buf)
    mv = memoryview(buf)
    while n - pos >= 4:
        (length,) = struct.unpack_from(">i", buf, pos)
        if length < 4 or length > max_frame:
            raise FrameError(f"frame length {length} is not in [4, {max_frame}]")
        if n - pos - 4 < length:
            break
        (ori,) = struct.unpack_from(">I", buf, pos + 4)
        stype = ori >> 24
        hlen = ori & 0xFFFFFF
        if hlen > length - 4:
            raise FrameError(f"header length {hlen} runs past the frame ({length - 4} bytes after it)")
        header = bytes(mv[pos + 8:pos + 8 + hlen])
        if stype == JSON:
            fields = decode_json_header(header)
        elif stype == ROCKETMQ:
            fields = decode_binary_header(header)
        else:
            raise FrameError(f"serialize type {stype} is neither JSON (0) nor ROCKETMQ (1)")
        body = bytes(mv[pos + 8 + hlen:pos + 4 + length])
        out.append(RemotingCommand(*fields, serialize_type=stype, body=body))
        pos += 4 + length
    return out, pos


def _json_string(s: str) -> str:
    return json.dumps(s, ensure_ascii=False, separators=(",", ":"))


def encode_header(serialize_type: int, code: int, opaque: int, flag: int, remark: str | None,
                  ext_fields: dict | None, body_length: int) -> bytes:
    """Length, type and header of a frame whose ``body_length`` bytes of body follow (sent by the caller, so a
    pull's records go out as they are). The language is JAVA and the version BROKER_VERSION, as the broker's.
    JSON keys in fastjson's order (sorted), compact; extFields values must be strings."""
    if serialize_type == JSON:
        parts = [f'{{"code":{code}']
        if ext_fields:
            parts.append(',"extFields":{' + ",".join(
                f"{_json_string(k)}:{_json_string(v)}" for k, v in ext_fields.items()) + "}")
        parts.append(f',"flag":{flag},"language":"JAVA","opaque":{opaque}')
        if remark is not None:
            parts.append(f',"remark":{_json_string(remark)}')
        parts.append(f',"serializeTypeCurrentRPC":"JSON","version":{BROKER_VERSION}}}')
        header = "".join(parts).encode("utf-8", "surrogatepass")
    elif serialize_type == ROCKETMQ:
        r = remark.encode("utf-8") if remark is not None else b""
        ext = bytearray()
        for k, v in (ext_fields or {}).items():
            kb, vb = k.encode("utf-8"), v.encode("utf-8")
            ext += struct.pack(">h", len(kb)) + kb + struct.pack(">i", len(vb)) + vb
        header = struct.pack(">HbhIIi", code & 0xFFFF, 0, BROKER_VERSION, opaque & 0xFFFFFFFF, flag & 0xFFFFFFFF,
                             len(r)) + r + \
            struct.pack(">i", len(ext)) + bytes(ext)
    else:
        raise ValueError(f"serialize type {serialize_type} is neither JSON (0) nor ROCKETMQ (1)")
    return struct.pack(">iI", 4 + len(header) + body_length, (serialize_type << 24) | len(header)) + header


def encode_request(cmd: RemotingCommand) -> bytes:
    """A whole frame for ``cmd`` as a client writes it (language and version from ``cmd``): for tests and the
    broker's own requests to clients."""
    if cmd.serialize_type == JSON:
        h = {"code": cmd.code, "extFields": cmd.ext_fields, "flag": cmd.flag, "language": cmd.language,
             "opaque": cmd.opaque, "serializeTypeCurrentRPC": "JSON", "version": cmd.version}
        if cmd.remark is not None:
            h["remark"] = cmd.remark
        header = json.dumps(h, separators=(",", ":")).encode()
    else:
        r = cmd.remark.encode() if cmd.remark is not None else b""
        ext = b"".join(struct.pack(">h", len(k.encode())) + k.encode() + struct.pack(">i", len(v.encode()))
                       + v.encode() for k, v in cmd.ext_fields.items())
        lang = LANGUAGES.index(cmd.language) if cmd.language in LANGUAGES else 7
        header = struct.pack(">hbhiii", cmd.code, lang, cmd.version, cmd.opaque, cmd.flag, len(r)) + r + \
            struct.pack(">i", len(ext)) + ext
    return struct.pack(">iI", 4 + len(header) + len(cmd.body), (cmd.serialize_type << 24) | len(header)) + \
        header + cmd.body
