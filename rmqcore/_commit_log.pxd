# The commitlog append path: what the writer uses and what it hands the dispatcher.
from libc.stdint cimport int64_t

from rmqcore._c cimport rmq_dring
from rmqcore._encoder cimport EncodeBuffer
from rmqcore._mapped_file cimport MappedFile
from rmqcore._message cimport PutResult


# What the writer hands the dispatcher (include/rmq_dispatch_ring.h): each appended record without its body.
cdef class DispatchRing:
    cdef rmq_dring r


cdef class AppendMessageCallback:
    cdef dict _table            # topic → {queue_id → next queue offset}: no tuple per put
    cdef object _last_topic     # the topic of the last assign and its queues dict (runs of one topic skip a lookup)
    cdef object _last_queues
    cdef bytes store_host_bytes
    cdef int write_blank(self, MappedFile mf) except -1
    cdef PutResult assign(self, MappedFile mf, EncodeBuffer eb, Py_ssize_t i, int64_t store_timestamp,
                          int64_t wrote)
    cdef int64_t assign_raw(self, MappedFile mf, EncodeBuffer eb, Py_ssize_t i, int64_t store_timestamp,
                            int64_t wrote) except -1
    cdef unassign(self, EncodeBuffer eb, Py_ssize_t i)
    cdef PutResult do_append(self, MappedFile mf, EncodeBuffer eb, Py_ssize_t i, int64_t store_timestamp)
