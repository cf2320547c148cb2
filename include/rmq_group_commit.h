/* Group commit's meeting point (RocketMQ's GroupCommitService request lists), in C so that neither side needs the
 * GIL to wait or to wake the other: producers block until the flushed offset covers their record, the flush thread
 * blocks until some producer asks for more than is flushed. One mutex, condition variables on the monotonic clock.
 *
 * Waiters sleep on one of two condition variables by generation, as RocketMQ swaps requestsWrite/requestsRead:
 * when the flush thread takes its target it closes the generation collecting requests, and its publish wakes only
 * that generation, every member of which asked for at most the target. Puts that arrived during the flush keep
 * sleeping: a wake-up costs 50-70 us on a small VM (bench: thread wake-up), too much to spend on nothing.
 *
 * Offsets are global commitlog offsets. "requested" is the highest offset anybody waits for, "flushed" the highest
 * offset known on disk. A failed flush bumps "failures": every wait that started before it returns RMQ_GC_FAILED
 * at once (the put reports FLUSH_DISK_TIMEOUT) instead of sleeping out its timeout. */
#ifndef RMQ_GROUP_COMMIT_H
#define RMQ_GROUP_COMMIT_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

enum {
    RMQ_GC_FLUSHED = 1,   /* the offset is on disk */
    RMQ_GC_TIMEOUT = 0,   /* the timeout passed first */
    RMQ_GC_FAILED = -1,   /* a flush failed while waiting */
    RMQ_GC_CLOSED = -2    /* the service is gone and the offset was never flushed */
};

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t has_request;   /* the flush thread sleeps here */
    pthread_cond_t flushed_cond[2];  /* producers sleep here, by generation parity */
    pthread_cond_t arrival_cond;  /* the put_async completer sleeps here while it has nothing to complete */
    int64_t gen;                  /* the generation collecting requests */
    int64_t published_gen;        /* the last generation whose flush was published (gen - 1 or gen - 2) */
    int64_t inflight_target;      /* what the flush of generation gen - 1 covers, while it runs */
    int arrival_waiters;
    int64_t requested;
    int64_t flushed;
    int64_t arrivals;             /* requests ever made: the flush thread sizes its batch by them */
    int64_t failures;
    int64_t flushes;
    int64_t served;               /* waits that ended flushed */
    int stopping;                 /* the flush thread is asked to leave its loop */
    int closed;                   /* no flush will ever come: waits return at once */
    int ready;
} rmq_group_commit;

static inline int rmq_gc_init(rmq_group_commit *g, int64_t flushed)
{
    pthread_condattr_t attr;
    int err;
    g->requested = g->flushed = flushed;
    g->arrivals = g->failures = g->flushes = g->served = 0;
    g->stopping = g->closed = g->ready = 0;
    g->gen = 0;
    g->published_gen = -1;
    g->inflight_target = flushed;
    g->arrival_waiters = 0;
    if ((err = pthread_mutex_init(&g->mu, NULL)) != 0)
        return err;
    if ((err = pthread_condattr_init(&attr)) != 0)
        return err;
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    err = pthread_cond_init(&g->has_request, &attr);
    if (err == 0)
        err = pthread_cond_init(&g->flushed_cond[0], &attr);
    if (err == 0)
        err = pthread_cond_init(&g->flushed_cond[1], &attr);
    if (err == 0)
        err = pthread_cond_init(&g->arrival_cond, &attr);
    pthread_condattr_destroy(&attr);
    if (err == 0)
        g->ready = 1;
    return err;
}

static inline void rmq_gc_destroy(rmq_group_commit *g)
{
    if (!g->ready)
        return;
    g->ready = 0;
    pthread_cond_destroy(&g->has_request);
    pthread_cond_destroy(&g->flushed_cond[0]);
    pthread_cond_destroy(&g->flushed_cond[1]);
    pthread_cond_destroy(&g->arrival_cond);
    pthread_mutex_destroy(&g->mu);
}

static inline int64_t rmq_gc_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline struct timespec rmq_gc_abs(int64_t deadline_ns)
{
    struct timespec ts;
    ts.tv_sec = (time_t)(deadline_ns / 1000000000LL);
    ts.tv_nsec = (long)(deadline_ns % 1000000000LL);
    return ts;
}

/* Caller holds mu. */
static inline void rmq_gc_request_locked(rmq_group_commit *g, int64_t offset)
{
    g->arrivals++;
    if (offset > g->requested)
        g->requested = offset;
    if (offset > g->flushed)
        pthread_cond_signal(&g->has_request);
    if (g->arrival_waiters)
        pthread_cond_broadcast(&g->arrival_cond);
}

static inline void rmq_gc_wake_all_locked(rmq_group_commit *g)
{
    pthread_cond_broadcast(&g->flushed_cond[0]);
    pthread_cond_broadcast(&g->flushed_cond[1]);
    pthread_cond_broadcast(&g->arrival_cond);
}

/* Ask for a flush covering offset without waiting (asyncPutMessage). */
static inline void rmq_gc_request(rmq_group_commit *g, int64_t offset)
{
    pthread_mutex_lock(&g->mu);
    rmq_gc_request_locked(g, offset);
    pthread_mutex_unlock(&g->mu);
}

/* The generation whose flush will cover offset: the one being flushed when its target covers offset (a wait that
 * starts after the flush thread took its target but before it published), else the one collecting requests. */
static inline int64_t rmq_gc_gen_for_locked(const rmq_group_commit *g, int64_t offset)
{
    if (g->published_gen < g->gen - 1 && offset <= g->inflight_target)
        return g->gen - 1;
    return g->gen;
}

/* Without waiting: 1 (and counted as served) when offset is already flushed, else 0. */
static inline int rmq_gc_try_flushed(rmq_group_commit *g, int64_t offset)
{
    int done;
    pthread_mutex_lock(&g->mu);
    done = g->flushed >= offset;
    if (done)
        g->served++;
    pthread_mutex_unlock(&g->mu);
    return done;
}

/* Ask for a flush covering offset and wait for it, at most timeout_ns. Returns an RMQ_GC_* code. */
static inline int rmq_gc_wait_flushed(rmq_group_commit *g, int64_t offset, int64_t timeout_ns)
{
    int rc;
    struct timespec deadline = rmq_gc_abs(rmq_gc_now_ns() + (timeout_ns > 0 ? timeout_ns : 0));
    pthread_mutex_lock(&g->mu);
    int64_t failures = g->failures;
    int64_t my_gen = rmq_gc_gen_for_locked(g, offset);
    if (g->flushed < offset && !g->closed)
        rmq_gc_request_locked(g, offset);
    for (;;) {
        if (g->flushed >= offset) {
            g->served++;
            rc = RMQ_GC_FLUSHED;
            break;
        }
        if (g->failures != failures) {
            rc = RMQ_GC_FAILED;
            break;
        }
        if (g->closed) {
            rc = RMQ_GC_CLOSED;
            break;
        }
        if (g->published_gen >= my_gen)
            my_gen = rmq_gc_gen_for_locked(g, offset);   /* that flush stopped short (next file): a later one */
        if (pthread_cond_timedwait(&g->flushed_cond[my_gen & 1], &g->mu, &deadline) == ETIMEDOUT) {
            rc = g->flushed >= offset ? RMQ_GC_FLUSHED : RMQ_GC_TIMEOUT;
            if (rc == RMQ_GC_FLUSHED)
                g->served++;
            break;
        }
    }
    pthread_mutex_unlock(&g->mu);
    return rc;
}

/* The put_async completer, when it holds no request: wait until a request arrives (arrivals passes *seen), the
 * service closes or timeout_ns passes. Returns the arrivals count. */
static inline int64_t rmq_gc_wait_arrival(rmq_group_commit *g, int64_t seen, int64_t timeout_ns)
{
    struct timespec deadline = rmq_gc_abs(rmq_gc_now_ns() + (timeout_ns > 0 ? timeout_ns : 0));
    int64_t arrivals;
    pthread_mutex_lock(&g->mu);
    g->arrival_waiters++;
    while (g->arrivals == seen && !g->closed)
        if (pthread_cond_timedwait(&g->arrival_cond, &g->mu, &deadline) == ETIMEDOUT)
            break;
    g->arrival_waiters--;
    arrivals = g->arrivals;
    pthread_mutex_unlock(&g->mu);
    return arrivals;
}

/* The flush thread: wait until a request is above the flushed offset (or stopping). When the previous flush served
 * more than one request, linger up to linger_ns for as many arrivals as it served: the producers it woke are on
 * their way back with their next record, and one flush for all of them beats two (RocketMQ's swapRequests batches
 * the same way, by time). Returns the highest requested offset, or -1 when asked to stop. */
static inline int64_t rmq_gc_next_target(rmq_group_commit *g, int64_t *arrivals_seen, int64_t last_batch,
                                         int64_t linger_ns)
{
    int64_t target;
    pthread_mutex_lock(&g->mu);
    while (g->requested <= g->flushed && !g->stopping)
        pthread_cond_wait(&g->has_request, &g->mu);
    if (g->stopping) {
        pthread_mutex_unlock(&g->mu);
        return -1;
    }
    if (last_batch > 1 && linger_ns > 0) {
        struct timespec deadline = rmq_gc_abs(rmq_gc_now_ns() + linger_ns);
        while (g->arrivals - *arrivals_seen < last_batch && !g->stopping)
            if (pthread_cond_timedwait(&g->has_request, &g->mu, &deadline) == ETIMEDOUT)
                break;
    }
    *arrivals_seen = g->arrivals;
    target = g->requested;
    g->inflight_target = target;
    g->gen++;                    /* the waiters so far asked for at most target: rmq_gc_publish_gen wakes them */
    pthread_mutex_unlock(&g->mu);
    return target;
}

/* Under the mutex: a flush reached offset (and closed the generation before the current one). */
static inline void rmq_gc_flushed_locked(rmq_group_commit *g, int64_t offset)
{
    g->flushes++;
    if (offset > g->flushed)
        g->flushed = offset;
    g->published_gen = g->gen - 1;
}

/* The flush that rmq_gc_next_target started reached offset: wake the generation it closed. A waiter it does not
 * cover (its record went to the next file) goes back to sleep in the current generation. */
static inline void rmq_gc_publish_gen(rmq_group_commit *g, int64_t offset)
{
    pthread_mutex_lock(&g->mu);
    rmq_gc_flushed_locked(g, offset);
    pthread_cond_broadcast(&g->flushed_cond[(g->gen - 1) & 1]);
    pthread_mutex_unlock(&g->mu);
}

/* A flush from elsewhere (the Python path) reached offset: wake everybody. */
static inline void rmq_gc_publish(rmq_group_commit *g, int64_t offset)
{
    pthread_mutex_lock(&g->mu);
    rmq_gc_flushed_locked(g, offset);
    rmq_gc_wake_all_locked(g);
    pthread_mutex_unlock(&g->mu);
}

/* A flush failed: every current waiter returns RMQ_GC_FAILED. */
static inline void rmq_gc_fail(rmq_group_commit *g)
{
    pthread_mutex_lock(&g->mu);
    g->failures++;
    g->requested = g->flushed;   /* what failed is not asked for again until a new put asks */
    rmq_gc_wake_all_locked(g);
    pthread_mutex_unlock(&g->mu);
}

static inline void rmq_gc_stop(rmq_group_commit *g)
{
    pthread_mutex_lock(&g->mu);
    g->stopping = 1;
    pthread_cond_broadcast(&g->has_request);
    pthread_mutex_unlock(&g->mu);
}

static inline void rmq_gc_close(rmq_group_commit *g)
{
    pthread_mutex_lock(&g->mu);
    g->stopping = g->closed = 1;
    pthread_cond_broadcast(&g->has_request);
    rmq_gc_wake_all_locked(g);
    pthread_mutex_unlock(&g->mu);
}

#endif
