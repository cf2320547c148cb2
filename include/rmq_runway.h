/* The write runway: a mapped file is sparse (ftruncate'd to its full size) and only a window ahead of the write
 * position is allocated on disk (fallocate) and pre-faulted (MADV_POPULATE_WRITE).
 *
 * Why both steps: a store of RocketMQ's geometry has 1 GiB commitlog files and 420 MB index files; allocating and
 * faulting them whole costs GBs of disk and memory for a store that holds one message, and under SYNC_FLUSH the old
 * whole-file warm-up wrote 1 GiB of zeros that competed with the group commit's syncs. Allocating ahead still turns
 * a full disk into an error on the put path (ENOSPC) instead of a SIGBUS in the middle of a memcpy; pre-faulting
 * ahead keeps appends at memory speed (limits.md: 0.17 GB/s into sparse pages, 1.4 GB/s into allocated ones,
 * 4.2 GB/s into pre-faulted ones on this VM).
 *
 * rmq_event is how the writer tells the allocate thread that its runway runs short, without the GIL on either
 * side: a flag and a condition variable. */
#ifndef RMQ_RUNWAY_H
#define RMQ_RUNWAY_H

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "rmq_clock.h"
#include "rmq_mman.h"

/* Allocate [from, to) of fd on disk and pre-fault the same range of its mapping at base. from is rounded down and
 * to up to a page, to is capped at size. Returns 0 or an errno (ENOSPC: the disk is full; nothing was faulted). */
static inline int rmq_runway_extend(int fd, unsigned char *base, int64_t size, int64_t from, int64_t to, int populate)
{
    int err;
    from &= ~((int64_t)RMQ_OS_PAGE_SIZE - 1);
    to = (to + RMQ_OS_PAGE_SIZE - 1) & ~((int64_t)RMQ_OS_PAGE_SIZE - 1);
    if (to > size)
        to = size;
    if (from < 0)
        from = 0;
    if (to <= from)
        return 0;
    err = posix_fallocate(fd, (off_t)from, (off_t)(to - from));
    if (err != 0)
        return err;
    if (populate)
        return rmq_prefault_write(base + from, (size_t)(to - from));
    return 0;
}

/* The runway's bytes are written with zeros ahead of the writer: the page cache then fills through the write path
 * (~5 GB/s here), where faulting fallocated pages in through the read path ran at 0.5 GB/s. With sync (SYNC_FLUSH)
 * they are synced too: a sync that covers data in blocks only allocated (unwritten extents) must also commit the
 * extent conversion to the journal, which made every group-commit sync 2-4x slower on ext4 here (RocketMQ's
 * warm-up writes the whole file's zeros under SYNC_FLUSH for the same reason; the runway bounds it to a stretch
 * ahead). Without sync, zeros that data overwrites before writeback are never written to disk, and the runway
 * left at close is punched out (rmq_runway_discard). Returns 0 or an errno. */
static inline int rmq_runway_write_zeros(int fd, unsigned char *base, int64_t size, int64_t from, int64_t to,
                                         int sync)
{
    static const unsigned char zeros[1 << 16];
    int64_t pos;
    /* from is not rounded down: the bytes before it may be data */
    if (to > size)
        to = size;
    for (pos = from; pos < to;) {
        size_t n = (size_t)(to - pos < (int64_t)sizeof(zeros) ? to - pos : (int64_t)sizeof(zeros));
        ssize_t w = pwrite(fd, zeros, n, (off_t)pos);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        pos += w;
    }
    /* The sync covers this stretch only (msync of a range: ext4 writes back those pages, then commits the extent
     * conversion). An fdatasync would also write back, and write-protect, the stretch before it that the writer
     * is still filling through the mapping: each of its pages then took a write fault (ext4's page_mkwrite) on the
     * put path, ~20,000 faults a 256 MiB file under 16 producers, and the sync raced the group commit's. */
    return sync ? rmq_msync_range(base, from, to) : 0;
}

/* Write n bytes at pos with pwrite, the first 4 (a record's size) last, as rmq_copy_size_last does in memory: a
 * write cut short leaves a zero size, which recovery reads as the end of data. Returns 0 or an errno. */
static inline int rmq_pwrite_size_last(int fd, const unsigned char *src, size_t n, int64_t pos, int size_last)
{
    /* A write within one page lands whole or not at all under kill -9: the kernel copies a write a page (folio) at
     * a time and stops for a fatal signal only between them. Such a record takes one system call. */
    size_t head = size_last && n > 4 && (pos >> 12) != ((pos + (int64_t)n - 1) >> 12) ? 4 : 0;
    size_t done = head;
    while (done < n) {
        ssize_t w = pwrite(fd, src + done, n - done, (off_t)(pos + (int64_t)done));
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        done += (size_t)w;
    }
    while (head) {
        ssize_t w = pwrite(fd, src, head, (off_t)pos);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if ((size_t)w == head)
            break;
        /* a partial 4-byte write: write the rest */
        src += w;
        pos += w;
        head -= (size_t)w;
    }
    return 0;
}

/* Give [from, size) back to the file system (recovery's truncation): later reads see zeros, the blocks are free.
 * The partial page before from is zeroed by hand. Returns 0 or an errno; EOPNOTSUPP where the file system cannot
 * punch holes (the caller then zeroes the range itself). */
static inline int rmq_runway_discard(int fd, int64_t size, int64_t from)
{
    int64_t start = (from + RMQ_OS_PAGE_SIZE - 1) & ~((int64_t)RMQ_OS_PAGE_SIZE - 1);
    if (start >= size)
        return 0;
    if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)start, (off_t)(size - start)) != 0)
        return errno;
    return 0;
}

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int poked;
    int stopped;
    int ready;
} rmq_event;

static inline int rmq_event_init(rmq_event *e)
{
    pthread_condattr_t attr;
    int err;
    e->poked = e->stopped = e->ready = 0;
    if ((err = pthread_mutex_init(&e->mu, NULL)) != 0)
        return err;
    if ((err = pthread_condattr_init(&attr)) != 0)
        return err;
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    err = pthread_cond_init(&e->cond, &attr);
    pthread_condattr_destroy(&attr);
    if (err == 0)
        e->ready = 1;
    return err;
}

static inline void rmq_event_destroy(rmq_event *e)
{
    if (!e->ready)
        return;
    e->ready = 0;
    pthread_cond_destroy(&e->cond);
    pthread_mutex_destroy(&e->mu);
}

static inline void rmq_event_poke(rmq_event *e)
{
    pthread_mutex_lock(&e->mu);
    if (!e->poked) {
        e->poked = 1;
        pthread_cond_signal(&e->cond);
    }
    pthread_mutex_unlock(&e->mu);
}

static inline void rmq_event_stop(rmq_event *e)
{
    pthread_mutex_lock(&e->mu);
    e->stopped = 1;
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->mu);
}

/* Wait for a poke (consumed), a stop or timeout_ns. Returns 1 poked, 0 timed out, -1 stopped. */
static inline int rmq_event_wait(rmq_event *e, int64_t timeout_ns)
{
    struct timespec ts = rmq_deadline(rmq_now_ns() + (timeout_ns > 0 ? timeout_ns : 0));
    int rc;
    pthread_mutex_lock(&e->mu);
    while (!e->poked && !e->stopped)
        if (pthread_cond_timedwait(&e->cond, &e->mu, &ts) == ETIMEDOUT)
            break;
    rc = e->stopped ? -1 : e->poked ? 1 : 0;
    e->poked = 0;
    pthread_mutex_unlock(&e->mu);
    return rc;
}

#endif
