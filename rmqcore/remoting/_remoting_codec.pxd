cimport cython


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
