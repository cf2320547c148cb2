# The pull loop's record lookup, shared with the schedule and timer services (rmqcore._schedule).
from libc.stdint cimport int32_t, int64_t

from rmqcore._codec cimport RecordView, _Buffer


# The bytes a consume-queue unit points at in the commitlog's files (select_messages, check_units, the schedule and
# timer services): the file by offset, within what is readable. Every file looked at stays held until release().
cdef class _RecordFinder:
    cdef list files
    cdef list held                      # the buffers of the files looked at before the current one (or None)
    cdef int64_t file_size, first_from
    cdef Py_ssize_t nfiles, cur
    cdef object cur_view                # the memoryview of file ``cur`` (None: unreadable)
    cdef _Buffer cur_buf
    cdef const unsigned char *cur_base
    cdef int64_t cur_avail
    cdef int _switch(self, Py_ssize_t findex) except -1
    cdef const unsigned char *locate(self, int64_t offset, int32_t size) except? NULL
    cdef const unsigned char *find(self, int64_t offset, int32_t size, RecordView *rv) except? NULL
    cdef int release(self) except -1
