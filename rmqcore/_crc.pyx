# cython: language_level=3, boundscheck=False, wraparound=False
"""CRC-32 (IEEE, as zlib.crc32 and java.util.zip.CRC32) over any buffer, and RocketMQ's masked body CRC.

The checksum runs in include/rmq_crc32.h: carry-less multiply folding on x86 CPUs that have it (512-bit VPCLMULQDQ
with AVX-512, else 128-bit PCLMULQDQ), the ARMv8 CRC instructions on arm builds that target them, slicing-by-8
tables otherwise. Results are bit-identical to zlib.crc32 whichever path runs, so values can be mixed and chained
freely.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.number cimport PyNumber_Index
from libc.stdint cimport uint32_t

from rmqcore._c cimport rmq_crc32, rmq_crc32_by, rmq_crc32_impl

__all__ = ["crc32", "crc32_table", "crc32_with", "body_crc", "implementation", "implementations"]

# rmq_crc32_by's numbers; 0 is rmq_crc32's own choice.
_IMPLEMENTATIONS = {"table": 1, "pclmul": 2, "armv8-crc": 3, "vpclmul": 4}

# Below this a checksum takes well under a microsecond: dropping and retaking the GIL would cost more than it lets
# other threads gain.
cdef enum:
    _NOGIL_THRESHOLD = 4096


cdef uint32_t body_crc_ptr(const unsigned char *p, size_t n) noexcept nogil:
    return rmq_crc32(0, p, n) & 0x7FFFFFFF


cdef inline uint32_t _run(uint32_t value, const void *p, size_t n, int which) noexcept nogil:
    if which == 0:
        return rmq_crc32(value, p, n)
    rmq_crc32_by(which, &value, p, n)      # which was checked to be available (_implementation_number)
    return value


cdef int _checksum(object data, uint32_t value, int which, uint32_t *out) except -1:
    cdef Py_buffer view
    cdef const void *p
    cdef size_t n
    # bytes is what callers pass almost always: skip the buffer protocol's bookkeeping for it.
    if type(data) is bytes:
        p = PyBytes_AS_STRING(data)
        n = <size_t>PyBytes_GET_SIZE(data)
        if n >= _NOGIL_THRESHOLD:
            with nogil:
                out[0] = _run(value, p, n, which)
        else:
            out[0] = _run(value, p, n, which)
        return 0
    # PyBUF_SIMPLE asks for one contiguous block of bytes, exactly what zlib.crc32 asks for: exporters refuse
    # (BufferError) when they cannot hand out one, e.g. strided memoryviews or non-contiguous numpy arrays, so
    # nothing outside the buffer is ever read. str has no buffer and raises TypeError, as in zlib.
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        p = view.buf
        n = <size_t>view.len
        if n >= _NOGIL_THRESHOLD:
            with nogil:
                out[0] = _run(value, p, n, which)
        else:
            out[0] = _run(value, p, n, which)
    finally:
        PyBuffer_Release(&view)
    return 0


cdef inline uint32_t _start_value(object value) except? 0xFFFFFFFF:
    # zlib.crc32 converts its start value with a 32-bit mask (negative values and larger ints wrap); do the same
    # so the two stay drop-in replacements, including for -1 or values carried over as Java ints.
    return <uint32_t>(PyNumber_Index(value) & 0xFFFFFFFF)


def crc32(data, value=0):
    """CRC-32 of ``data`` (any C-contiguous buffer), continuing from ``value``: a drop-in for ``zlib.crc32``.

    Returns an unsigned int. The GIL is released for buffers of 4 KiB and more.
    """
    cdef uint32_t out = 0
    _checksum(data, _start_value(value), 0, &out)
    return out


cdef int _implementation_number(str name) except -1:
    cdef uint32_t probe = 0
    which = _IMPLEMENTATIONS.get(name)
    if which is None:
        raise ValueError(f"unknown CRC-32 implementation {name!r}; known: {', '.join(_IMPLEMENTATIONS)}")
    if not rmq_crc32_by(which, &probe, NULL, 0):
        raise ValueError(f"CRC-32 implementation {name!r} is not available on this CPU or build")
    return which


def crc32_with(data, value=0, str implementation="table"):
    """Same result as :func:`crc32`, through one named implementation (differential tests, benchmarks); raises
    ValueError for one this CPU or build lacks (see :func:`implementations`)."""
    cdef uint32_t out = 0
    _checksum(data, _start_value(value), _implementation_number(implementation), &out)
    return out


def crc32_table(data, value=0):
    """Same result as :func:`crc32`, always through the portable table code (for differential tests)."""
    return crc32_with(data, value, "table")


def implementations():
    """The implementations this CPU and build can run, :func:`implementation`'s choice among them."""
    cdef uint32_t probe = 0
    return [name for name, which in _IMPLEMENTATIONS.items() if rmq_crc32_by(which, &probe, NULL, 0)]


def body_crc(data):
    """RocketMQ's ``UtilAll.crc32``: the CRC-32 of ``data`` masked with ``0x7FFFFFFF``, as stored in a record."""
    cdef uint32_t out = 0
    _checksum(data, 0, 0, &out)
    return out & 0x7FFFFFFF


def implementation():
    """Which CRC-32 code this process uses: ``"vpclmul"``, ``"pclmul"``, ``"armv8-crc"`` or ``"table"``."""
    return rmq_crc32_impl().decode("ascii")
