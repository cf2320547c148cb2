/* Byte search shared by the codec (properties) and the segment decoder. */
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

#endif
