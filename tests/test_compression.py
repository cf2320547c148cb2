"""rmqcore.compression: a compressed body inflated as RocketMQ's compressors write it (ZLIB: DeflaterOutputStream;
LZ4: lz4-java's LZ4FrameOutputStream; ZSTD: zstd-jni's ZstdOutputStream, sysFlag bits 8-10 saying which), never
past the limit, and a clear error for one that does not inflate."""
from __future__ import annotations

import os
import subprocess
import sys
import zlib

import pytest

from rmqcore import compression as c

LIMIT = 64 * 1024
BODY = b"".join(b"order %d: %s\n" % (i, os.urandom(8).hex().encode()) for i in range(400))      # ~13 KiB
CUT = "cut short"


def zlib_java(data: bytes) -> bytes:
    # ZlibCompressor.compress: DeflaterOutputStream(new Deflater(level)), level 5 (compressMsgBodyOverHowmuch's
    # producer default): a zlib stream, the same bytes as zlib's compress at that level.
    return zlib.compress(data, 5)


def lz4_java(data: bytes) -> bytes:
    # Lz4Compressor.compress: new LZ4FrameOutputStream(out): an LZ4 frame, 4 MB blocks, independent blocks, no
    # content size or checksum.
    lz4_frame = pytest.importorskip("lz4.frame")
    return lz4_frame.compress(data, block_size=lz4_frame.BLOCKSIZE_MAX4MB, block_linked=False,
                              content_checksum=False)


def zstd_java(data: bytes) -> bytes:
    # ZstdCompressor.compress: new ZstdOutputStream(out, level), streamed: the frame does not carry the size.
    zstd = pytest.importorskip("zstandard")
    obj = zstd.ZstdCompressor(level=5, write_content_size=False).compressobj()
    return obj.compress(data) + obj.flush()


# (the sysFlag a producer writes, its compressor); 0x1 alone is a producer before 4.9.5's (and the proxy's): ZLIB
KINDS = [(0x1, zlib_java), (0x301, zlib_java), (0x101, lz4_java), (0x201, zstd_java)]
KIND_IDS = ["ZLIB-legacy", "ZLIB", "LZ4", "ZSTD"]


@pytest.mark.parametrize("sys_flag, pack", KINDS, ids=KIND_IDS)
def test_each_compressor_inflates_to_the_body_sent(sys_flag, pack):
    packed = pack(BODY)
    assert len(packed) < len(BODY)
    assert c.decompress(packed, sys_flag | 0x4 | 0x10, LIMIT) == BODY        # other bits mean nothing here
    assert c.decompress(memoryview(packed), sys_flag, len(BODY)) == BODY      # exactly the limit: taken
    assert c.compression_name(sys_flag) == KIND_IDS[KINDS.index((sys_flag, pack))].split("-")[0]
    assert c.producer_body(packed, sys_flag, LIMIT) == (BODY, c.compression_name(sys_flag), None)
    # a preview: the first bytes only, whatever follows
    assert c.decompress(packed, sys_flag, 100, head=True) == BODY[:100]


def test_an_uncompressed_body_is_as_stored():
    assert c.decompress(b"plain", 0x4, 3) == b"plain"
    assert c.producer_body(b"plain", 0, 3) == (b"plain", None, None)
    assert c.compression_name(0x300) is None        # a type without COMPRESSED says nothing


@pytest.mark.parametrize("sys_flag, pack", KINDS, ids=KIND_IDS)
def test_a_body_that_inflates_past_the_limit_is_refused_having_inflated_no_further(sys_flag, pack):
    import tracemalloc
    bomb = pack(bytes(64 * 1024 * 1024))               # 64 MiB of zeros: a few KiB packed
    assert len(bomb) < 300 * 1024
    tracemalloc.start()
    try:
        with pytest.raises(c.BodyTooLarge, match=f"inflates past {LIMIT} bytes"):
            c.decompress(bomb, sys_flag, LIMIT)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 1024 * 1024
    raw, name, error = c.producer_body(bomb, sys_flag, LIMIT)
    assert raw == bomb and name and "inflates past" in error


@pytest.mark.parametrize("sys_flag, pack", KINDS, ids=KIND_IDS)
def test_a_cut_or_corrupt_body_is_an_error_not_a_shorter_body(sys_flag, pack):
    packed = pack(BODY)
    with pytest.raises(c.DecompressionError, match=CUT):
        c.decompress(packed[:len(packed) // 2], sys_flag, LIMIT)
    with pytest.raises(c.DecompressionError):
        c.decompress(b"\x00" * 4 + packed[4:], sys_flag, LIMIT)
    with pytest.raises(c.DecompressionError):
        c.decompress(b"", sys_flag, LIMIT)


def test_a_zlib_stream_with_bytes_after_its_end_inflates_as_java_reads_it():
    assert c.decompress(zlib_java(BODY) + b"tail", 0x301, LIMIT) == BODY


def test_a_compression_type_rocketmq_does_not_name_is_an_error():
    for value in (4, 5, 6, 7):
        with pytest.raises(c.DecompressionError, match=f"compression type {value}"):
            c.decompress(zlib_java(BODY), 0x1 | value << 8, LIMIT)
        assert c.compression_name(0x1 | value << 8) == f"type {value}"


def test_a_zstd_frame_asking_for_a_huge_window_is_refused():
    zstd = pytest.importorskip("zstandard")
    # window_log 27: the frame asks for a 128 MiB window to decode with
    params = zstd.ZstdCompressionParameters.from_level(3, window_log=27, write_content_size=False)
    obj = zstd.ZstdCompressor(compression_params=params).compressobj()
    frame = obj.compress(BODY) + obj.flush()
    with pytest.raises(c.DecompressionError, match="ZSTD body does not inflate"):
        c.decompress(frame, 0x201, LIMIT)


@pytest.mark.parametrize("package, sys_flag", [("lz4", 0x101), ("zstandard", 0x201)])
def test_without_the_optional_package_the_error_says_which_to_install(package, sys_flag):
    # A child where the package cannot be imported (as on an install without rmqcore[server]).
    code = (f"import sys; sys.modules[{package!r}] = None; sys.modules[{package + '.frame'!r}] = None\n"
            "from rmqcore import compression as c\n"
            "try:\n"
            f"    c.decompress(b'xxxx', {sys_flag}, 100)\n"
            "except c.DecompressionError as e:\n"
            "    print(e.missing, '|', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(c.__file__))))
    missing, text = out.stdout.strip().split(" | ")
    assert missing == package and f"needs the {package} package" in text and "rmqcore[server]" in text


def test_zlib_header():
    assert c.is_zlib_header(zlib_java(b"x")) and c.is_zlib_header(zlib.compress(b"x", 9))
    assert not c.is_zlib_header(b"\x1f\x8b\x08\x00")           # gzip
    assert not c.is_zlib_header(b"\x78\xbb")                   # a preset dictionary
    assert not c.is_zlib_header(b"\x78")
