/* Memory-mapping helpers the mapped file needs beyond <sys/mman.h>. */
#ifndef RMQ_MMAN_H
#define RMQ_MMAN_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

/* Older libc headers lack the value although kernels >= 5.14 accept it. */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define RMQ_OS_PAGE_SIZE 4096

/* Pre-fault [p, p+len) for writing so that appends later run at memory speed instead of taking a page fault
 * per 4 KiB (limits.md: 0.3 GB/s faulting against 12 GB/s warm). MADV_POPULATE_WRITE does it in the kernel in one
 * call; where the kernel refuses it (EINVAL before 5.14) every page is dirtied by hand. The fallback writes zeros,
 * so callers warm only bytes past the wrote position of a file nobody else appends to yet. Returns 0 or errno. */
static inline int rmq_prefault_write(unsigned char *p, size_t len)
{
    if (len == 0)
        return 0;
    if (madvise(p, len, MADV_POPULATE_WRITE) == 0)
        return 0;
    if (errno != EINVAL && errno != EOPNOTSUPP)
        return errno;
    for (size_t off = 0; off < len; off += RMQ_OS_PAGE_SIZE)
        ((volatile unsigned char *)p)[off] = 0;
    return 0;
}

/* Drop this process's page-table entries for the whole pages of [from, to) of a shared file mapping; the pages stay
 * in the page cache, dirty or not, and a later access maps them again. Writeback must write-protect every page
 * mapped writable, with a TLB-shootdown IPI per page when another thread of the process runs (one put a message
 * copied into the mapping: 3 us of the flushing thread's time per message here, most of a core); zapping them first
 * costs one shootdown for the range. Only for pages no append touches again. Best effort: an error is ignored. */
static inline void rmq_unmap_written(unsigned char *base, int64_t from, int64_t to)
{
    int64_t start = from & ~((int64_t)RMQ_OS_PAGE_SIZE - 1);
    int64_t end = to & ~((int64_t)RMQ_OS_PAGE_SIZE - 1);
    if (end > start)
        (void)madvise(base + start, (size_t)(end - start), MADV_DONTNEED);
}

/* msync over [from, to) of a mapping: the start is rounded down to the page, as msync requires. */
static inline int rmq_msync_range(unsigned char *base, int64_t from, int64_t to)
{
    if (to <= from)
        return 0;
    int64_t start = from & ~((int64_t)RMQ_OS_PAGE_SIZE - 1);
    if (msync(base + start, (size_t)(to - start), MS_SYNC) != 0)
        return errno;
    return 0;
}

#endif
