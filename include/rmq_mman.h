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
