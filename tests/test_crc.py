"""CRC32: identical to zlib.crc32 / java.util.zip.CRC32 on every path (PCLMUL or ARMv8 and the table)."""
import os
import zlib

import pytest
from hypothesis import given, strategies as st

from rmqcore import _crc
from rmqcore import reference as R


def test_check_value():
    assert _crc.crc32(b"123456789") == 0xCBF43926 == _crc.crc32_table(b"123456789")


@pytest.mark.parametrize("n", list(range(0, 300)) + [1023, 1024, 4095, 65536, 65537, (1 << 20) + 3])
def test_every_length_matches_zlib(n):
    data = os.urandom(n)
    assert _crc.crc32(data) == zlib.crc32(data) == _crc.crc32_table(data)


@given(st.binary(max_size=5000), st.integers(0, 5000), st.integers(0, 15))
def test_running_value_and_unaligned_views(data, split, shift):
    split = min(split, len(data))
    assert _crc.crc32(data[split:], _crc.crc32(data[:split])) == zlib.crc32(data)
    view = memoryview(bytes(16) + data)[shift:]
    assert _crc.crc32(view) == zlib.crc32(view)


def test_buffers_of_any_kind():
    import numpy as np
    data = os.urandom(4096)
    assert _crc.crc32(bytearray(data)) == _crc.crc32(np.frombuffer(data, np.uint8)) == zlib.crc32(data)
    with pytest.raises((BufferError, ValueError, TypeError)):
        _crc.crc32(memoryview(data)[::2])       # not contiguous: refused, never read out of bounds


def test_body_crc_is_rocketmq_masked():
    data = os.urandom(1000)
    assert _crc.body_crc(data) == zlib.crc32(data) & 0x7FFFFFFF == R.crc32(data)


def test_implementation_is_picked_at_run_time():
    impl = _crc.implementation()
    assert impl in ("pclmul", "armv8-crc", "table")
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    if " pclmulqdq" in flags:
        assert impl == "pclmul"
