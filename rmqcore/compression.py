"""A compressed message body, as RocketMQ writes it (its ``common/compression`` package): which compressor the
sysFlag names, and the body inflated, never past a limit.

A 4.x producer compresses a single body of at least ``compressMsgBodyOverHowmuch`` (4 KiB) and says so in the
record's sysFlag: COMPRESSED_FLAG (0x1), and since 4.9.5 the compression type in bits 8-10 (MessageSysFlag
COMPRESSION_TYPE_COMPARATOR: LZ4 1, ZSTD 2, ZLIB 3; 0, written by older producers and by the 5.x proxy for a
GZIP-encoded body, is ZLIB, CompressionType.findByValue). The broker stores the bytes as sent; the reader inflates
(MessageDecoder.decode with deCompressBody). The compressors' formats are their Java streams':

- ZLIB: java.util.zip.DeflaterOutputStream, a zlib stream (RFC 1950: ``78 9c`` ...), read by InflaterInputStream.
- LZ4: lz4-java's LZ4FrameOutputStream, an LZ4 frame (magic ``04 22 4d 18``), read by LZ4FrameInputStream; needs
  the ``lz4`` package (rmqcore[server]).
- ZSTD: zstd-jni's ZstdOutputStream, a zstd frame (magic ``28 b5 2f fd``), read by ZstdInputStream; needs the
  ``zstandard`` package (rmqcore[server]).

Inflation here is bounded where Java's is not: a body is inflated no further than ``limit`` + 1 bytes (a body
that inflates past it is refused, having cost at most that much memory), and a zstd frame may not ask for a
window larger than the limit needs.
"""
from __future__ import annotations

import io
import zlib

# MessageSysFlag
COMPRESSED_FLAG = 0x1
COMPRESSION_TYPE_COMPARATOR = 0x7 << 8
# CompressionType values (sysFlag bits 8-10)
LZ4 = 1
ZSTD = 2
ZLIB = 3
TYPE_NAMES = {LZ4: "LZ4", ZSTD: "ZSTD", ZLIB: "ZLIB"}
# The package each optional compressor needs, as pip names it.
PACKAGES = {LZ4: "lz4", ZSTD: "zstandard"}
# How far a body is inflated when no limit is given: StoreConfig.max_message_size's default (RocketMQ's
# maxMessageSize, which a producer checks its body against before compressing it).
DEFAULT_LIMIT = 4 * 1024 * 1024


class DecompressionError(ValueError):
    """A compressed body that cannot be inflated: not of its type, cut short, past the limit, or of a type whose
    package is not installed (``missing`` names it then)."""

    def __init__(self, text: str, missing: str | None = None):
        super().__init__(text)
        self.missing = missing


class BodyTooLarge(DecompressionError):
    """A body that inflates past the limit (read no further than that)."""


def is_compressed(sys_flag: int) -> bool:
    return bool(sys_flag & COMPRESSED_FLAG)


def compression_type(sys_flag: int) -> int:
    """MessageSysFlag.getCompressionType: the CompressionType value of a compressed record's sysFlag (0 is ZLIB).
    Raises DecompressionError for 4..7, which RocketMQ names none of."""
    value = (sys_flag & COMPRESSION_TYPE_COMPARATOR) >> 8
    if value == 0:
        return ZLIB
    if value not in TYPE_NAMES:
        raise DecompressionError(f"sysFlag 0x{sys_flag & 0xFFFFFFFF:x} names compression type {value}, which "
                                 "RocketMQ does not know (LZ4 1, ZSTD 2, ZLIB 3)")
    return value


def compression_name(sys_flag: int) -> str | None:
    """"ZLIB", "LZ4", "ZSTD" (or "type N" for one RocketMQ does not name) for a compressed record, else None."""
    if not is_compressed(sys_flag):
        return None
    value = (sys_flag & COMPRESSION_TYPE_COMPARATOR) >> 8
    return TYPE_NAMES.get(value or ZLIB, f"type {value}")


def decompress(body, sys_flag: int, limit: int, *, head: bool = False) -> bytes:
    """The body a producer sent: ``body`` inflated by the compressor ``sys_flag`` names when it says COMPRESSED
    (CompressorFactory.getCompressor(getCompressionType(sysFlag)).decompress), else ``body`` as it is. Raises
    DecompressionError (BodyTooLarge past ``limit`` bytes). ``head``: only the first ``limit`` bytes are wanted
    (a preview): neither a longer body nor a stream that does not end there is an error."""
    if not sys_flag & COMPRESSED_FLAG:
        return bytes(body[:limit] if head else body)
    ctype = compression_type(sys_flag)
    data = bytes(body)
    if ctype == ZLIB:
        return inflate_zlib(data, limit, head)
    if ctype == LZ4:
        return _inflate_lz4(data, limit, head)
    return _inflate_zstd(data, limit, head)


def _too_large(name: str, limit: int) -> BodyTooLarge:
    return BodyTooLarge(f"{name} body inflates past {limit} bytes")


def inflate_zlib(data: bytes, limit: int, head: bool = False) -> bytes:
    """A zlib stream inflated (ZlibCompressor.decompress), at most ``limit`` bytes. What follows the stream's end
    is ignored, as InflaterInputStream ignores it."""
    d = zlib.decompressobj()
    try:
        out = d.decompress(data, limit if head else limit + 1)
    except zlib.error as e:
        raise DecompressionError(f"ZLIB body does not inflate: {e}") from None
    if head:
        return out
    if len(out) > limit:
        raise _too_large("ZLIB", limit)
    if not d.eof:
        raise DecompressionError("ZLIB body is cut short (the stream does not end)")
    return out


def _module(ctype: int):
    name = PACKAGES[ctype]
    try:
        if ctype == LZ4:
            import lz4.frame as mod
        else:
            import zstandard as mod
    except ImportError:
        raise DecompressionError(f"{TYPE_NAMES[ctype]} body needs the {name} package (pip install {name}, or "
                                 f"rmqcore[server])", missing=name) from None
    return mod


def _inflate_lz4(data: bytes, limit: int, head: bool) -> bytes:
    frame = _module(LZ4)
    d = frame.LZ4FrameDecompressor()
    try:
        out = d.decompress(data, max_length=limit if head else limit + 1)
    except RuntimeError as e:           # the lz4 package's error for a bad frame
        raise DecompressionError(f"LZ4 body does not inflate: {e}") from None
    if head:
        return out
    if len(out) > limit:
        raise _too_large("LZ4", limit)
    if not d.eof:
        raise DecompressionError("LZ4 body is cut short (the frame does not end)")
    return out


def _inflate_zstd(data: bytes, limit: int, head: bool) -> bytes:
    zstd = _module(ZSTD)
    # A frame says how large a window it decodes with, and the decoder allocates it: no more than the limit needs
    # (and 8 MiB, what zstd's levels up to 19 use, for a preview).
    d = zstd.ZstdDecompressor(max_window_size=1 << max(23, limit.bit_length()))
    try:
        # Read no further than the limit (the decompression object has no such bound) ...
        with d.stream_reader(io.BytesIO(data), read_across_frames=False) as r:
            first = r.read(limit if head else limit + 1)
        if head:
            return first
        if len(first) > limit:
            raise _too_large("ZSTD", limit)
        # ... then, known to fit, once more through the object that tells whether the frame ended.
        obj = d.decompressobj()
        out = obj.decompress(data)
    except zstd.ZstdError as e:
        raise DecompressionError(f"ZSTD body does not inflate: {e}") from None
    if not obj.eof:
        raise DecompressionError("ZSTD body is cut short (the frame does not end)")
    return out


def is_zlib_header(data: bytes) -> bool:
    """The two bytes a zlib stream starts with (RFC 1950): deflate with a window of at most 32 KiB, the check bits
    right, no preset dictionary (Java's Inflater would ask for one)."""
    if len(data) < 2:
        return False
    cmf, flg = data[0], data[1]
    return cmf & 0x0F == 8 and cmf >> 4 <= 7 and (cmf << 8 | flg) % 31 == 0 and not flg & 0x20


def producer_body(body, sys_flag: int, limit: int) -> tuple[bytes, str | None, str | None]:
    """What a reader of the store shows of a body (``rmqcore get``/``export``, the console): (the body the
    producer sent, or the stored bytes when they do not inflate; the compression's name, None when the record is
    not compressed; why the body did not inflate, else None)."""
    name = compression_name(sys_flag)
    if name is None:
        return bytes(body), None, None
    try:
        return decompress(body, sys_flag, limit), name, None
    except DecompressionError as e:
        return bytes(body), name, str(e)
