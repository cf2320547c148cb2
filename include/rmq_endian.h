/* Big-endian integers as Java's ByteBuffer reads and writes them: every field of the on-disk formats.
 *
 * Fields sit at arbitrary offsets inside records (a record starts wherever the previous one ended), so a cast
 * to uint32_t* would be an unaligned access and a strict-aliasing violation. memcpy of a constant size compiles
 * to a single load/store on every target we build for, and the byte swap to one bswap/rev instruction. */
#ifndef RMQ_ENDIAN_H
#define RMQ_ENDIAN_H

#include <stdint.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || !defined(__ORDER_LITTLE_ENDIAN__) || !defined(__ORDER_BIG_ENDIAN__)
#error "rmq_endian.h needs gcc/clang's __BYTE_ORDER__ macros"
#endif

/* Wheels are built for little-endian targets only, but a big-endian build must still be correct: there the
 * stored order already is the host order and the swap disappears. */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define RMQ_BE16(v) __builtin_bswap16(v)
#define RMQ_BE32(v) __builtin_bswap32(v)
#define RMQ_BE64(v) __builtin_bswap64(v)
#else
#define RMQ_BE16(v) (v)
#define RMQ_BE32(v) (v)
#define RMQ_BE64(v) (v)
#endif

static inline uint16_t rmq_load_be16(const unsigned char *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return RMQ_BE16(v);
}

static inline uint32_t rmq_load_be32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return RMQ_BE32(v);
}

static inline uint64_t rmq_load_be64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return RMQ_BE64(v);
}

/* Signed variants: the conversion of an out-of-range unsigned value to a signed type is implementation-defined
 * in C11, and gcc/clang define it as two's-complement wrap, which is what Java's getInt/getLong return. */
static inline int16_t rmq_load_be16s(const unsigned char *p) { return (int16_t)rmq_load_be16(p); }
static inline int32_t rmq_load_be32s(const unsigned char *p) { return (int32_t)rmq_load_be32(p); }
static inline int64_t rmq_load_be64s(const unsigned char *p) { return (int64_t)rmq_load_be64(p); }

static inline void rmq_store_be16(unsigned char *p, uint16_t v)
{
    v = RMQ_BE16(v);
    memcpy(p, &v, sizeof v);
}

static inline void rmq_store_be32(unsigned char *p, uint32_t v)
{
    v = RMQ_BE32(v);
    memcpy(p, &v, sizeof v);
}

static inline void rmq_store_be64(unsigned char *p, uint64_t v)
{
    v = RMQ_BE64(v);
    memcpy(p, &v, sizeof v);
}

/* Storing a signed value needs no separate function: the int -> uint conversion is defined (modulo 2^N), so
 * rmq_store_be32(p, (uint32_t)x) writes exactly Java's putInt(x). */

#endif
