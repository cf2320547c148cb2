"""CRC32 throughput: rmqcore._crc.crc32 against the stdlib's zlib.crc32 on the same buffers (1 KiB and 64 KiB).
Compare the two rows of a group: ratios, not absolute figures, are what this noisy machine can tell."""
import os
import zlib

import pytest

from bench.workloads import record_rate as rate

SIZES = {"1KiB": 1024, "64KiB": 64 * 1024}


def _impl(name):
    if name == "zlib":
        return zlib.crc32
    from rmqcore import _crc
    return _crc.crc32


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("impl", ["rmqcore", "zlib"])
def test_crc32(benchmark, impl, size):
    data = os.urandom(SIZES[size])
    crc = _impl(impl)
    benchmark.group = f"crc32 {size}"
    benchmark.extra_info["bytes"] = len(data)
    value = benchmark(crc, data)
    assert value == zlib.crc32(data)
    rate(benchmark, len(data), "bytes_per_s")
