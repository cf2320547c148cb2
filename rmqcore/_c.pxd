# The C world of include/: one `cdef extern` block per header, kept exactly in sync with the headers' signatures.
# Everything here is pure C (no Python objects), so every function is declared nogil and noexcept.
from libc.stdint cimport int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t


cdef extern from "rmq_endian.h" nogil:
    uint16_t rmq_load_be16(const unsigned char *p) noexcept
    uint32_t rmq_load_be32(const unsigned char *p) noexcept
    uint64_t rmq_load_be64(const unsigned char *p) noexcept
    int16_t rmq_load_be16s(const unsigned char *p) noexcept
    int32_t rmq_load_be32s(const unsigned char *p) noexcept
    int64_t rmq_load_be64s(const unsigned char *p) noexcept
    void rmq_store_be16(unsigned char *p, uint16_t v) noexcept
    void rmq_store_be32(unsigned char *p, uint32_t v) noexcept
    void rmq_store_be64(unsigned char *p, uint64_t v) noexcept


cdef extern from "rmq_crc32.h" nogil:
    # zlib's convention: start from 0, pass the previous result to continue.
    uint32_t rmq_crc32(uint32_t crc, const void *buf, size_t length) noexcept
    uint32_t rmq_crc32_table(uint32_t crc, const void *buf, size_t length) noexcept
    const char *rmq_crc32_impl() noexcept
    # One implementation by number (1 table, 2 pclmul, 3 armv8-crc, 4 vpclmul): 0 when this build or CPU lacks it.
    # The SIMD functions themselves exist only on some builds; reach them through these two, which check first.
    int rmq_crc32_by(int which, uint32_t *crc, const void *buf, size_t length) noexcept


cdef extern from "rmq_java_hash.h" nogil:
    # Java's String.hashCode() of new String(s[0:n], UTF_8).
    int32_t rmq_java_hash_utf8(const unsigned char *s, size_t n) noexcept


cdef extern from "rmq_clock.h" nogil:
    int64_t rmq_now_ns() noexcept                                              # CLOCK_MONOTONIC


cdef extern from "rmq_atomic.h" nogil:
    int64_t rmq_atomic_load_i64(const int64_t *p) noexcept                      # acquire
    void rmq_atomic_store_i64(int64_t *p, int64_t v) noexcept                   # release
    bint rmq_atomic_cas_i64(int64_t *p, int64_t *expected, int64_t desired) noexcept
    int64_t rmq_atomic_fetch_add_i64(int64_t *p, int64_t delta) noexcept        # returns the old value


cdef extern from "rmq_bytes.h" nogil:
    int32_t rmq_find_byte(const unsigned char *p, int32_t start, int32_t end, unsigned char c) noexcept
    void rmq_copy_size_last(unsigned char *dst, const unsigned char *src, size_t n) noexcept


cdef extern from "rmq_ring.h" nogil:
    void rmq_ring_copy_in(unsigned char *ring, int64_t mask, int64_t at, const unsigned char *src,
                          int64_t n) noexcept
    int rmq_ring_commit(int fd, const unsigned char *ring, int64_t mask, int64_t file_from, int64_t start,
                        int64_t end) noexcept


cdef extern from "rmq_dispatch_ring.h" nogil:
    ctypedef struct rmq_dring_entry:
        int64_t phys
        int32_t size
        int32_t slim_len
    ctypedef struct rmq_dring:
        unsigned char *buf
        int64_t size
        int64_t head
        int64_t tail
        int64_t pending
        int64_t dropped
    int rmq_dring_push(rmq_dring *r, int64_t phys, int32_t size, const unsigned char *head, int32_t head_len,
                       const unsigned char *tail, int32_t tail_len) noexcept     # 1, or 0: full (dropped)
    void rmq_dring_publish(rmq_dring *r) noexcept
    const rmq_dring_entry *rmq_dring_peek(const rmq_dring *r, int64_t *pos, int64_t head) noexcept
    int64_t rmq_dring_entry_bytes(const rmq_dring_entry *e) noexcept


cdef extern from "rmq_runway.h" nogil:
    ctypedef struct rmq_event:
        int poked
        int stopped
    int rmq_runway_extend(int fd, unsigned char *base, int64_t size, int64_t start, int64_t end,
                          int populate) noexcept
    int rmq_runway_discard(int fd, int64_t size, int64_t start) noexcept
    int rmq_runway_write_zeros(int fd, unsigned char *base, int64_t size, int64_t start, int64_t end,
                               int sync) noexcept
    int rmq_pwrite_size_last(int fd, const unsigned char *src, size_t n, int64_t pos, int size_last) noexcept
    int rmq_event_init(rmq_event *e) noexcept
    void rmq_event_destroy(rmq_event *e) noexcept
    void rmq_event_poke(rmq_event *e) noexcept
    void rmq_event_stop(rmq_event *e) noexcept
    int rmq_event_wait(rmq_event *e, int64_t timeout_ns) noexcept     # 1 poked, 0 timed out, -1 stopped


cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    int pthread_mutex_init(pthread_mutex_t *m, const void *attr) noexcept
    int pthread_mutex_destroy(pthread_mutex_t *m) noexcept
    int pthread_mutex_lock(pthread_mutex_t *m) noexcept
    int pthread_mutex_unlock(pthread_mutex_t *m) noexcept
