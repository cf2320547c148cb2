# RocketMQ's IndexFile on a posix mmap: 40-byte header, hash_slot_num 4-byte slots, index_num 20-byte items.
# put_hash / select_hash_c run without the GIL; callers from other Cython modules bracket them with
# hold() / release() (taken with the GIL) so a concurrent destroy() never unmaps under them.
from libc.stdint cimport int32_t, int64_t


# One file's selectPhyOffset walk in progress (see _walk_start / _walk_step in _index_file.pyx).
cdef struct IndexWalk:
    const unsigned char *items       # the file's first item (item 0)
    int64_t begin_ts                 # the header's beginTimestamp: an item's time is begin_ts + timeDiff s
    int64_t begin
    int64_t end
    int64_t steps                    # items visited
    int64_t limit                    # at most min(indexCount, index_num) items: ends cycles of a damaged file
    int64_t *out                     # hits, newest first
    int32_t count                    # the header's indexCount when the walk started
    int32_t index_num
    int32_t key_hash
    int32_t max_num
    int32_t next_index               # the item to read next
    int32_t n                        # hits in out
    bint done


cdef class IndexFile:
    cdef readonly str file_name          # full path, as RocketMQ's getFileName
    cdef readonly int64_t file_size      # 40 + hash_slot_num*4 + index_num*20
    cdef readonly int32_t hash_slot_num
    cdef readonly int32_t index_num
    cdef readonly bint read_only
    cdef unsigned char *base             # the mapping, file_size bytes; NULL once unmapped
    # IndexHeader's fields (the in-memory copy RocketMQ keeps in atomics); mirrored into the mapping on every put.
    cdef int64_t _begin_timestamp
    cdef int64_t _end_timestamp
    cdef int64_t _begin_phy_offset
    cdef int64_t _end_phy_offset
    cdef int32_t _hash_slot_count
    cdef int32_t _index_count
    cdef bint _closed
    # The write runway (rmq_runway.h): header and slots are allocated when the file is made, items only up to
    # _allocated, extended by _runway bytes as puts reach it. _fd stays open for that (-1 without a runway).
    cdef int _fd
    cdef int64_t _allocated
    cdef int64_t _runway
    cdef readonly int alloc_error       # errno of the last failed extension (puts stop: ENOSPC), 0 otherwise
    cdef int _holds                      # ReferenceResource: running GIL-free sections; unmap at the last release

    cdef bint put_hash(self, int32_t key_hash, int64_t phy_offset, int64_t store_timestamp) noexcept nogil
    cdef int64_t put_hashes_c(self, const int32_t *key_hashes, const int64_t *phy_offsets,
                              const int64_t *timestamps, int64_t n, bint skip_indexed) noexcept nogil
    cdef int32_t select_hash_c(self, int32_t key_hash, int32_t max_num, int64_t begin, int64_t end,
                               int64_t *out) noexcept nogil
    cdef void _write_header(self) noexcept nogil
    cdef bint hold(self)
    cdef void release(self)
    cdef void _unmap(self)
    cdef int _hold_or_raise(self) except -1


# IndexService.buildKey + indexKeyHashMethod over UTF-8 bytes, and queryOffset's walk over a list of files
# (oldest first) into ``out`` (room for max_num): MessageStore.query_message's kernel in _codec calls them.
cdef int64_t items_in(list files) except -1
cdef int32_t topic_key_hash(const char *topic, Py_ssize_t tn, const char *key, Py_ssize_t kn) except -1
cdef int32_t query_files_c(list files, int32_t key_hash, int32_t max_num, int64_t begin, int64_t end,
                           int64_t *out) except -1
