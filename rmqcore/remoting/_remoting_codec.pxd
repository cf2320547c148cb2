cimport cython
from cpython.dict cimport PyDict_GetItemWithError
from cpython.object cimport PyObject
from cpython.unicode cimport PyUnicode_GET_LENGTH
from libc.stdint cimport uint8_t


cdef extern from "Python.h":
    bint PyUnicode_IS_COMPACT_ASCII(object o)
    void* PyUnicode_1BYTE_DATA(object o)


@cython.final
cdef class RemotingCommand:
    cdef public int code
    cdef public str language
    cdef public int version
    cdef public int opaque
    cdef public int flag
    cdef public object remark
    cdef public dict ext_fields
    cdef public int serialize_type
    cdef public bytes body


# Helpers of the compiled request paths (_send_message.pyx, _pull_message.pyx), which read a decoded command's
# extFields in C and give up (the Python path takes the request) on anything they do not read exactly as it does.

cdef inline object dict_get(dict d, str key):
    """d.get(key): the value, or None."""
    cdef PyObject *v = PyDict_GetItemWithError(d, key)
    return None if v is NULL else <object>v


cdef inline bint decimal_field(object value, long long lo, long long hi, long long *out):
    """``value`` (a str or None) as int() reads a plain decimal: an optional minus, 1-18 ASCII digits, in [lo, hi].
    False for anything else (None, a sign +, spaces, underscores, other digits, too long): the Python path reads it
    (and refuses it, or takes what int() takes)."""
    if type(value) is not str or not PyUnicode_IS_COMPACT_ASCII(value):
        return False
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(value), i = 0
    cdef const uint8_t *p = <const uint8_t *>PyUnicode_1BYTE_DATA(value)
    cdef bint neg = n > 0 and p[0] == 0x2D
    if neg:
        i = 1
    if n - i < 1 or n - i > 18:
        return False
    cdef long long v = 0
    while i < n:
        if p[i] < 0x30 or p[i] > 0x39:
            return False
        v = v * 10 + (p[i] - 0x30)
        i += 1
    if neg:
        v = -v
    if v < lo or v > hi:
        return False
    out[0] = v
    return True
