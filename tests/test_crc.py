"""CRC32: identical to zlib.crc32 / java.util.zip.CRC32 on every path (VPCLMUL, PCLMUL or ARMv8, and the table), on any
contiguous buffer, at any length, offset and split; the masked body CRC is RocketMQ's UtilAll.crc32."""
import array
import os
import platform
import random
import threading
import zlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmqcore import reference as R
from rmqcore._crc import body_crc, crc32, crc32_table, crc32_with, implementation, implementations


def _named(name):
    def checksum(data, value=0):
        return crc32_with(data, value, name)
    checksum.__name__ = f"crc32_with[{name}]"
    return checksum


# The dispatcher's choice, the table function, and every implementation this CPU can run by name.
IMPLEMENTATIONS = (crc32, crc32_table) + tuple(_named(name) for name in implementations())

# Lengths around every boundary of the folding code: 16-byte blocks, the 64-byte minimum, 4x64 lanes.
_rng = random.Random(0x5EED)
_DATA_0_300 = [_rng.randbytes(n) for n in range(301)]


def _both(data, value=0):
    expected = zlib.crc32(data, value)
    for impl in IMPLEMENTATIONS:
        assert impl(data, value) == expected, (impl.__name__, len(memoryview(data).cast("B")), value)
    return expected


@pytest.mark.parametrize("data, expected", [
    (b"", 0),
    (b"123456789", 0xCBF43926),           # the CRC-32/ISO-HDLC check value
    (b"a", 0xE8B7BE43),
    (b"The quick brown fox jumps over the lazy dog", 0x414FA339),
    (b"\x00" * 32, 0x190A55AD),
    (b"\xff" * 32, 0xFF6CAB0B),
])
def test_known_vectors(data, expected):
    assert _both(data) == expected


def test_all_lengths_0_to_300():
    for data in _DATA_0_300:
        _both(data)
        _both(data, 0xDEADBEEF)


@pytest.mark.parametrize("n", [64 * 1024, 64 * 1024 - 1, (1 << 20) + 7, 4095, 4096, 4097])
def test_large(n):
    data = os.urandom(n)
    _both(data)
    _both(data, 0x12345678)


def test_lengths_around_the_512_bit_path():
    # the 512-bit folding starts at 1 KiB and steps 256 bytes at a time; tails of 0..255 bytes follow it
    data = _rng.randbytes(2400)
    for n in list(range(1000, 1600)) + [2047, 2048, 2049, 2303, 2304, 2305]:
        _both(data[:n])
        _both(memoryview(data)[7:7 + n - 7], 0xCAFEBABE)


def test_named_implementations():
    names = implementations()
    assert names[0] == "table" and implementation() in names
    with pytest.raises(ValueError, match="unknown"):
        crc32_with(b"x", 0, "crc32c")
    for name in {"table", "pclmul", "vpclmul", "armv8-crc"} - set(names):
        with pytest.raises(ValueError, match="not available"):
            crc32_with(b"x", 0, name)


def test_unaligned_offsets():
    base = os.urandom(4096 + 64)
    for off in range(1, 16):
        for n in (0, 1, 15, 16, 63, 64, 65, 127, 128, 200, 1000, 4096):
            view = memoryview(base)[off:off + n]
            assert len(view) == n
            _both(view)


@given(st.binary(max_size=2048), st.data())
def test_running_value_composition(data, draw):
    split = draw.draw(st.integers(0, len(data)))
    whole = zlib.crc32(data)
    head, tail = data[:split], data[split:]
    for first in IMPLEMENTATIONS:
        for second in IMPLEMENTATIONS:
            assert second(tail, first(head)) == whole
    # and through views of the same buffer, with zlib in the middle
    mv = memoryview(data)
    assert crc32(mv[split:], zlib.crc32(mv[:split])) == whole


@given(st.binary(max_size=1024), st.integers(0, 0xFFFFFFFF))
def test_random_data_and_start_values(data, value):
    _both(data, value)


@pytest.mark.parametrize("value", [-1, -2**31, 2**32, 2**32 + 5, 2**40 + 123, True])
def test_start_value_is_masked_like_zlib(value):
    for data in (b"", b"abc", _DATA_0_300[200]):
        _both(data, value)


def test_start_value_must_be_an_integer():
    for bad in (1.5, "1", None):
        with pytest.raises(TypeError):
            zlib.crc32(b"x", bad)
        for impl in IMPLEMENTATIONS:
            with pytest.raises(TypeError):
                impl(b"x", bad)


def test_buffer_types():
    raw = _DATA_0_300[257] + _DATA_0_300[300]
    objects = [
        raw,
        bytearray(raw),
        memoryview(raw),
        memoryview(bytearray(raw)),
        np.frombuffer(raw, dtype=np.uint8),
        np.frombuffer(raw[:556], dtype=np.int32),     # multi-byte items: the CRC is over the bytes
        array.array("B", raw),
        memoryview(raw[:556]).cast("B", shape=[4, 139]),   # 2-D but C-contiguous: accepted, as by zlib
        memoryview(raw)[5:-5],
    ]
    for obj in objects:
        want = zlib.crc32(obj)
        assert crc32(obj) == crc32_table(obj) == want
    big = np.random.default_rng(1).integers(0, 256, size=70000, dtype=np.uint8)
    assert crc32(big) == zlib.crc32(big)
    assert crc32(big.reshape(700, 100)) == zlib.crc32(big.reshape(700, 100))


def test_non_contiguous_buffers_are_refused():
    # Refused exactly as zlib.crc32 refuses them (memoryview says BufferError, numpy ValueError): never read past
    # the buffer, never checksum the wrong bytes.
    raw = bytes(range(256)) * 4
    strided = [memoryview(raw)[::2], memoryview(raw)[::-1],
               np.frombuffer(raw, dtype=np.uint8)[::3], np.frombuffer(raw, dtype=np.uint8).reshape(32, 32).T]
    for obj in strided:
        with pytest.raises((BufferError, ValueError)) as refused:
            zlib.crc32(obj)
        for impl in (crc32, crc32_table, body_crc):
            with pytest.raises(refused.type):
                impl(obj)


def test_non_buffers_are_refused():
    for obj in ("text", 123, None, [1, 2, 3]):
        for impl in (crc32, crc32_table, body_crc):
            with pytest.raises(TypeError):
                impl(obj)


def test_empty_buffers():
    for obj in (b"", bytearray(), memoryview(b""), np.zeros(0, dtype=np.uint8)):
        assert crc32(obj) == crc32_table(obj) == 0
        assert crc32(obj, 0xABCDEF01) == zlib.crc32(obj, 0xABCDEF01) == 0xABCDEF01
        assert body_crc(obj) == 0


def test_body_crc_masks_to_a_java_int():
    assert zlib.crc32(b"123456789") & 0x80000000          # the high bit is set ...
    assert body_crc(b"123456789") == 0x4BF43926              # ... and UtilAll.crc32 drops it
    for data in _DATA_0_300:
        assert body_crc(data) == zlib.crc32(data) & 0x7FFFFFFF == R.crc32(data)
        assert 0 <= body_crc(data) <= 0x7FFFFFFF
    big = os.urandom(100_000)
    assert body_crc(big) == zlib.crc32(big) & 0x7FFFFFFF
    assert body_crc(memoryview(big)[3:]) == zlib.crc32(big[3:]) & 0x7FFFFFFF


@given(st.binary(max_size=4096))
def test_body_crc_property(data):
    assert body_crc(data) == zlib.crc32(data) & 0x7FFFFFFF


def test_threads_without_the_gil_give_the_same_results():
    # Buffers >= 4 KiB are checksummed with the GIL released; results must not depend on interleaving.
    buffers = [os.urandom(256 * 1024 + i) for i in range(8)]
    expected = [zlib.crc32(b) for b in buffers]
    results = [None] * len(buffers)

    def work(i):
        for _ in range(5):
            v = crc32(bytearray(buffers[i]))
            assert results[i] in (None, v)
            results[i] = v

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(buffers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == expected


def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            return next((set(line.split(":", 1)[1].split()) for line in f if line.startswith("flags")), set())
    except OSError:
        return set()


def test_implementation_name():
    name = implementation()
    assert name in ("vpclmul", "pclmul", "armv8-crc", "table")
    assert implementation() == name                        # cached, stable
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64", "i386", "i686"):
        assert name in ("vpclmul", "pclmul", "table")
        flags = _cpu_flags()
        if {"pclmulqdq", "sse4_1"} <= flags:
            assert name in ("vpclmul", "pclmul")
            if {"vpclmulqdq", "avx512f", "avx512vl"} <= flags:
                assert name == "vpclmul"
    elif machine in ("aarch64", "arm64"):
        assert name in ("armv8-crc", "table")
