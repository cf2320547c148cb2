/* Byte search shared by the codec (properties) and the segment decoder; the commitlog's publishing copy. */
#ifndef RMQ_BYTES_H
#define RMQ_BYTES_H

#include <stdint.h>
#include <string.h>

/* Index of the first byte c in p[start:end), or -1: memchr with the bounds RocketMQ's indexOf loops need. */
static inline int32_t rmq_find_byte(const unsigned char *p, int32_t start, int32_t end, unsigned char c)
{
    if (start >= end)
        return -1;
    const void *hit = memchr(p + start, c, (size_t)(end - start));
    return hit == NULL ? -1 : (int32_t)((const unsigned char *)hit - p);
}

/* Copy n bytes so that the first 4 (a commitlog record's totalSize) land last. Bytes past a file's write position
 * are zero (new files are, truncation zeroes the tail), so a process killed in the middle of the copy leaves a
 * zero size where the record starts, which recovery reads as the end of the data: a torn record is never taken
 * for a whole one, even when its body (all the body CRC covers) made it and its properties did not. The release
 * fence keeps the compiler and CPU from moving the size store before the rest. */
static inline void rmq_copy_size_last(unsigned char *dst, const unsigned char *src, size_t n)
{
    if (n <= 4) {
        memcpy(dst, src, n);
        return;
    }
    memcpy(dst + 4, src + 4, n - 4);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    memcpy(dst, src, 4);
}

#endif
