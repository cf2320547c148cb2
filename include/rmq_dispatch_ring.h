/* The dispatch ring: what the put path hands the dispatcher so that it need not read the commitlog again.
 *
 * For every record it appends, the writer pushes the record without its body (a "slim" record: the same header,
 * topic and properties, body length 0, total size adjusted), with the record's commitlog offset and real size.
 * The dispatcher parses the slim record with the same code as a commitlog record (parse_record and
 * dispatch_properties), so what it builds from the ring is what a scan of the commitlog would build, while
 * the scan's cost went into reading ~1 KiB records out of the page cache (a page fault per 16 pages, a cache
 * miss per header and per properties) rather than into parsing.
 *
 * The ring is a hint, never the truth: the dispatcher takes an entry only when its offset is exactly the
 * dispatcher's next offset and the record is readable (below the commitlog's read position); anything else
 * (a full ring dropped entries, records written by recovery or another process, entries older than the
 * dispatcher's position) is read from the commitlog by the scan as before.
 *
 * One producer (the writer, under the put lock) and one consumer (the dispatcher, under its pass lock).
 * head and tail count bytes since the start; an entry never wraps: one that does not fit before the end of the
 * buffer is preceded by a wrap mark (slim_len -1) when at least a header's room is left there, and both sides
 * treat less room than a header as a wrap too. */
#ifndef RMQ_DISPATCH_RING_H
#define RMQ_DISPATCH_RING_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rmq_atomic.h"
#include "rmq_endian.h"

typedef struct {
    int64_t phys;       /* the record's commitlog offset */
    int32_t size;       /* its real total size */
    int32_t slim_len;   /* bytes of slim record that follow; -1: wrap to the buffer's start */
} rmq_dring_entry;

#define RMQ_DRING_ALIGN 8

typedef struct {
    unsigned char *buf;
    int64_t size;       /* bytes, a multiple of RMQ_DRING_ALIGN */
    int64_t head;       /* producer: bytes pushed (published with release) */
    int64_t tail;       /* consumer: bytes taken (published with release) */
    int64_t pending;    /* producer: bytes pushed but not published yet */
    int64_t dropped;    /* producer: entries that did not fit (the dispatcher scans those records) */
} rmq_dring;

static inline int64_t rmq_dring_round(int64_t n)
{
    return (n + RMQ_DRING_ALIGN - 1) & ~(int64_t)(RMQ_DRING_ALIGN - 1);
}

/* Push one slim record built from a commitlog record: head_len bytes of header up to and without the body length
 * field, the body skipped, then tail_len bytes (topic and properties). Not visible until rmq_dring_publish.
 * Returns 1, or 0 when the ring is full (the entry is dropped). */
static inline int rmq_dring_push(rmq_dring *r, int64_t phys, int32_t size, const unsigned char *head,
                                 int32_t head_len, const unsigned char *tail, int32_t tail_len)
{
    int32_t slim_len = head_len + 4 + tail_len;
    int64_t need = rmq_dring_round((int64_t)sizeof(rmq_dring_entry) + slim_len);
    int64_t pos = r->pending;
    int64_t at = pos % r->size;
    int64_t room = r->size - at;
    int64_t free_bytes = r->size - (pos - rmq_atomic_load_i64(&r->tail));
    rmq_dring_entry *e;
    unsigned char *p;
    if (need > r->size / 4) {
        r->dropped++;
        return 0;
    }
    if (need > room) {             /* wrap first: the rest of the buffer is skipped */
        if (free_bytes < room + need) {
            r->dropped++;
            return 0;
        }
        if (room >= (int64_t)sizeof(rmq_dring_entry)) {
            e = (rmq_dring_entry *)(r->buf + at);
            e->slim_len = -1;
        }
        pos += room;
        at = 0;
    } else if (free_bytes < need) {
        r->dropped++;
        return 0;
    }
    e = (rmq_dring_entry *)(r->buf + at);
    e->phys = phys;
    e->size = size;
    e->slim_len = slim_len;
    p = r->buf + at + sizeof(rmq_dring_entry);
    memcpy(p, head, (size_t)head_len);
    rmq_store_be32(p + head_len, 0);                     /* body length 0 */
    memcpy(p + head_len + 4, tail, (size_t)tail_len);
    rmq_store_be32(p, (uint32_t)slim_len);               /* the slim record's own total size */
    r->pending = pos + need;
    return 1;
}

/* Make every pushed entry visible to the consumer. */
static inline void rmq_dring_publish(rmq_dring *r)
{
    rmq_atomic_store_i64(&r->head, r->pending);
}

/* Consumer: the entry at byte count *pos (< head), after following a wrap there; NULL when none is published.
 * *pos is moved past the wrap. */
static inline const rmq_dring_entry *rmq_dring_peek(const rmq_dring *r, int64_t *pos, int64_t head)
{
    int64_t at, room;
    const rmq_dring_entry *e;
    if (*pos >= head)
        return NULL;
    at = *pos % r->size;
    room = r->size - at;
    if (room < (int64_t)sizeof(rmq_dring_entry)) {
        *pos += room;
        return rmq_dring_peek(r, pos, head);
    }
    e = (const rmq_dring_entry *)(r->buf + at);
    if (e->slim_len < 0) {
        *pos += room;
        return rmq_dring_peek(r, pos, head);
    }
    return e;
}

static inline int64_t rmq_dring_entry_bytes(const rmq_dring_entry *e)
{
    return rmq_dring_round((int64_t)sizeof(rmq_dring_entry) + e->slim_len);
}

#endif /* RMQ_DISPATCH_RING_H */
