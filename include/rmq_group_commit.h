/* Group commit with a leader (RocketMQ's GroupCommitService, done as database group commits are): the first put
 * that needs the disk and finds no flush running performs the flush itself; puts that arrive meanwhile queue behind
 * it and are released together when a flush covers them, and one of those still uncovered leads the next flush.
 * A lone producer so never hands its record to another thread and back (two wake-ups and two GIL hand-offs per
 * put in the design this replaces), and N producers still share one flush. All of it runs without the GIL.
 *
 * Requests nobody waits for (WAIT=false puts, put_async, aput) are flushed by the service thread, which leads a
 * flush the same way whenever such a request is above the flushed offset and no flush is running.
 *
 * Offsets are global commitlog offsets. "requested" is the highest offset anybody asked to be flushed, "flushed"
 * the highest known on disk; at most one flush runs at a time ("flushing"). A failed flush bumps "failures": every
 * wait that started before it returns RMQ_GC_FAILED at once (the put reports FLUSH_DISK_TIMEOUT) instead of
 * sleeping out its timeout. */
#ifndef RMQ_GROUP_COMMIT_H
#define RMQ_GROUP_COMMIT_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

enum {
    RMQ_GC_LEADER = 2,    /* the caller now runs the flush: to *target, then rmq_gc_leader_done */
    RMQ_GC_FLUSHED = 1,   /* the offset is on disk */
    RMQ_GC_TIMEOUT = 0,   /* the timeout passed first */
    RMQ_GC_FAILED = -1,   /* a flush failed while waiting */
    RMQ_GC_CLOSED = -2    /* the service is gone and the offset was never flushed */
};

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t flushed_cond;  /* waits that never lead (the put_async completer) sleep here */
    /* Blocking puts sleep on gen_cond[gen & 1] when the running flush covers them (their offset is within its
     * target), on gen_cond[(gen + 1) & 1] when only the next flush will: a flush's end wakes the puts it covered
     * and one of the others, to lead the next, instead of all of them (each woken for nothing took a vCPU from the
     * thread holding the GIL and went back to sleep). */
    pthread_cond_t gen_cond[2];
    int64_t gen;                  /* flushes ended (led) so far */
    int64_t flush_target;         /* what the running flush covers: INT64_MAX while its leader gathers the group */
    pthread_cond_t has_request;   /* the service thread sleeps here */
    pthread_cond_t arrival_cond;  /* the put_async completer sleeps here while it has nothing to complete */
    pthread_cond_t linger_cond;   /* a leader lingering for the next group's members sleeps here */
    int lingering;
    int64_t linger_ns;            /* how long a leader waits at most for its group to gather */
    int64_t group_start_arrivals; /* arrivals when the last flush took its target */
    int64_t last_group;           /* requests that flush covered (arrivals between two targets) */
    int flushing;                 /* a leader is flushing */
    int waiting;                  /* blocking waits in progress: they lead flushes themselves */
    int arrival_waiters;
    int64_t requested;
    int64_t flushed;
    int64_t arrivals;             /* requests ever made */
    int64_t failures;
    int64_t flushes;
    int64_t served;               /* waits that ended flushed */
    int64_t led;                  /* flushes led by a waiting put (the rest by the service thread) */
    int stopping;                 /* the service thread is asked to leave its loop */
    int closed;                   /* no flush will ever come: waits return at once */
    int ready;
} rmq_group_commit;

static inline int rmq_gc_init(rmq_group_commit *g, int64_t flushed)
{
    pthread_condattr_t attr;
    int err;
    g->requested = g->flushed = flushed;
    g->arrivals = g->failures = g->flushes = g->served = g->led = 0;
    g->flushing = g->waiting = g->arrival_waiters = g->lingering = 0;
    g->linger_ns = 200000;
    g->group_start_arrivals = g->last_group = 0;
    g->stopping = g->closed = g->ready = 0;
    if ((err = pthread_mutex_init(&g->mu, NULL)) != 0)
        return err;
    if ((err = pthread_condattr_init(&attr)) != 0)
        return err;
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    g->gen = 0;
    g->flush_target = INT64_MAX;
    err = pthread_cond_init(&g->flushed_cond, &attr);
    if (err == 0)
        err = pthread_cond_init(&g->gen_cond[0], &attr);
    if (err == 0)
        err = pthread_cond_init(&g->gen_cond[1], &attr);
    if (err == 0)
        err = pthread_cond_init(&g->has_request, &attr);
    if (err == 0)
        err = pthread_cond_init(&g->arrival_cond, &attr);
    if (err == 0)
        err = pthread_cond_init(&g->linger_cond, &attr);
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
    pthread_cond_destroy(&g->flushed_cond);
    pthread_cond_destroy(&g->gen_cond[0]);
    pthread_cond_destroy(&g->gen_cond[1]);
    pthread_cond_destroy(&g->has_request);
    pthread_cond_destroy(&g->arrival_cond);
    pthread_cond_destroy(&g->linger_cond);
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
    if (g->arrival_waiters)
        pthread_cond_broadcast(&g->arrival_cond);
    /* Only the arrival that completes the lingering leader's group wakes it, not every arrival before it (a futex
     * call each, paid by a producer holding the GIL). */
    if (g->lingering && g->arrivals - g->group_start_arrivals == g->last_group)
        pthread_cond_signal(&g->linger_cond);
}

/* Caller holds mu and has just become the leader (flushing = 1). When the last flush served a group, wait up to
 * linger_ns for as many requests as it served: the producers it released are on their way back with their next
 * record, and one flush for all of them beats one each (the group commit's batching; a lone producer's group is
 * 1, so it never waits). Returns the target: everything requested. */
static inline int64_t rmq_gc_take_target_locked(rmq_group_commit *g)
{
    g->flush_target = INT64_MAX;              /* whoever arrives while the group gathers is in it */
    if (g->last_group > 1 && g->linger_ns > 0) {
        struct timespec deadline = rmq_gc_abs(rmq_gc_now_ns() + g->linger_ns);
        g->lingering = 1;
        while (g->arrivals - g->group_start_arrivals < g->last_group && !g->stopping && !g->closed)
            if (pthread_cond_timedwait(&g->linger_cond, &g->mu, &deadline) == ETIMEDOUT)
                break;
        g->lingering = 0;
    }
    g->last_group = g->arrivals - g->group_start_arrivals;
    g->group_start_arrivals = g->arrivals;
    g->flush_target = g->requested;
    return g->requested;
}

/* Ask for a flush covering offset without waiting (WAIT=false, put_async): the service thread leads it unless a
 * flush is running or a waiting put will lead the next one anyway. */
static inline void rmq_gc_request(rmq_group_commit *g, int64_t offset)
{
    pthread_mutex_lock(&g->mu);
    rmq_gc_request_locked(g, offset);
    if (offset > g->flushed && !g->flushing && !g->waiting)
        pthread_cond_signal(&g->has_request);
    pthread_mutex_unlock(&g->mu);
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

/* A put that needs offset on disk: ask for it, then either lead the flush (RMQ_GC_LEADER, *target set to the
 * highest requested offset: every record appended before it) or wait for one to cover offset, until deadline_ns
 * (monotonic). failures0 is g->failures when the put started (rmq_gc_failures); a failure since then ends the
 * wait. Returns an RMQ_GC_* code. */
static inline int rmq_gc_wait_or_lead(rmq_group_commit *g, int64_t offset, int64_t deadline_ns, int64_t failures0,
                                      int64_t *target)
{
    int rc;
    struct timespec deadline = rmq_gc_abs(deadline_ns);
    pthread_mutex_lock(&g->mu);
    if (g->flushed < offset && offset > g->requested)
        rmq_gc_request_locked(g, offset);
    g->waiting++;
    for (;;) {
        if (g->flushed >= offset) {
            g->served++;
            rc = RMQ_GC_FLUSHED;
            break;
        }
        if (g->failures != failures0) {
            rc = RMQ_GC_FAILED;
            break;
        }
        if (g->closed) {
            rc = RMQ_GC_CLOSED;
            break;
        }
        if (!g->flushing) {
            g->flushing = 1;
            g->led++;
            *target = rmq_gc_take_target_locked(g);
            rc = RMQ_GC_LEADER;
            break;
        }
        if (pthread_cond_timedwait(&g->gen_cond[(offset <= g->flush_target ? g->gen : g->gen + 1) & 1], &g->mu,
                                   &deadline) == ETIMEDOUT) {
            rc = g->flushed >= offset ? RMQ_GC_FLUSHED : RMQ_GC_TIMEOUT;
            if (rc == RMQ_GC_FLUSHED) {
                g->served++;
            } else if (!g->flushing) {
                /* It may have been the one woken to lead: wake the others, one of them leads instead. */
                pthread_cond_broadcast(&g->gen_cond[0]);
                pthread_cond_broadcast(&g->gen_cond[1]);
            }
            break;
        }
    }
    g->waiting--;
    /* The last waiting put leaves and nobody flushes: requests nobody waits for (put_async, WAIT=false) that came
     * meanwhile counted on it to lead; the service thread takes them. */
    if (!g->waiting && !g->flushing && g->requested > g->flushed)
        pthread_cond_signal(&g->has_request);
    pthread_mutex_unlock(&g->mu);
    return rc;
}

static inline int64_t rmq_gc_failures(rmq_group_commit *g)
{
    int64_t f;
    pthread_mutex_lock(&g->mu);
    f = g->failures;
    pthread_mutex_unlock(&g->mu);
    return f;
}

/* The leader's flush ended: reached offset on disk (err 0), or failed (err an errno: every current wait fails,
 * and what failed is not asked for again until a new put asks). Wakes the puts it covered and one of those it did
 * not, to lead the next flush (all of them when the flush went past its target: some of those may be covered);
 * when requests nobody waits for are left above the flushed offset, the service thread takes them. */
static inline void rmq_gc_leader_done(rmq_group_commit *g, int64_t offset, int err)
{
    int64_t gen;
    pthread_mutex_lock(&g->mu);
    g->flushing = 0;
    gen = g->gen++;
    if (err != 0) {
        g->failures++;
        g->requested = g->flushed;
        pthread_cond_broadcast(&g->gen_cond[0]);
        pthread_cond_broadcast(&g->gen_cond[1]);
    } else {
        g->flushes++;
        if (offset > g->flushed)
            g->flushed = offset;
        pthread_cond_broadcast(&g->gen_cond[gen & 1]);
        if (g->flushed > g->flush_target)
            pthread_cond_broadcast(&g->gen_cond[(gen + 1) & 1]);
        else
            pthread_cond_signal(&g->gen_cond[(gen + 1) & 1]);
    }
    pthread_cond_broadcast(&g->flushed_cond);
    if (g->arrival_waiters)
        pthread_cond_broadcast(&g->arrival_cond);
    if (g->requested > g->flushed && !g->waiting)
        pthread_cond_signal(&g->has_request);
    pthread_mutex_unlock(&g->mu);
}

/* A flush made outside the leader protocol reached offset (the final flush at shutdown): wake the waits it
 * covers. */
static inline void rmq_gc_publish(rmq_group_commit *g, int64_t offset)
{
    pthread_mutex_lock(&g->mu);
    if (offset > g->flushed)
        g->flushed = offset;
    pthread_cond_broadcast(&g->flushed_cond);
    pthread_cond_broadcast(&g->gen_cond[0]);
    pthread_cond_broadcast(&g->gen_cond[1]);
    if (g->arrival_waiters)
        pthread_cond_broadcast(&g->arrival_cond);
    pthread_mutex_unlock(&g->mu);
}

/* A flush failed outside the leader protocol: every current wait returns RMQ_GC_FAILED. */
static inline void rmq_gc_fail(rmq_group_commit *g)
{
    pthread_mutex_lock(&g->mu);
    g->failures++;
    g->requested = g->flushed;
    pthread_cond_broadcast(&g->flushed_cond);
    pthread_cond_broadcast(&g->gen_cond[0]);
    pthread_cond_broadcast(&g->gen_cond[1]);
    pthread_cond_broadcast(&g->arrival_cond);
    pthread_mutex_unlock(&g->mu);
}

/* The service thread: wait until a request is above the flushed offset and nobody flushes, then lead. Returns the
 * target (everything requested), or -1 when asked to stop. */
static inline int64_t rmq_gc_service_lead(rmq_group_commit *g)
{
    int64_t target;
    pthread_mutex_lock(&g->mu);
    while ((g->requested <= g->flushed || g->flushing) && !g->stopping)
        pthread_cond_wait(&g->has_request, &g->mu);
    if (g->stopping) {
        pthread_mutex_unlock(&g->mu);
        return -1;
    }
    g->flushing = 1;
    target = rmq_gc_take_target_locked(g);
    pthread_mutex_unlock(&g->mu);
    return target;
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

/* Wait, without leading, until offset is flushed, a failure, close or the deadline (the put_async completer: the
 * service thread flushes what it waits for). Returns an RMQ_GC_* code. */
static inline int rmq_gc_wait_only(rmq_group_commit *g, int64_t offset, int64_t deadline_ns, int64_t failures0)
{
    int rc;
    struct timespec deadline = rmq_gc_abs(deadline_ns);
    pthread_mutex_lock(&g->mu);
    for (;;) {
        if (g->flushed >= offset) { rc = RMQ_GC_FLUSHED; break; }
        if (g->failures != failures0) { rc = RMQ_GC_FAILED; break; }
        if (g->closed) { rc = RMQ_GC_CLOSED; break; }
        if (pthread_cond_timedwait(&g->flushed_cond, &g->mu, &deadline) == ETIMEDOUT) {
            rc = g->flushed >= offset ? RMQ_GC_FLUSHED : RMQ_GC_TIMEOUT;
            break;
        }
    }
    pthread_mutex_unlock(&g->mu);
    return rc;
}

static inline void rmq_gc_stop(rmq_group_commit *g)
{
    pthread_mutex_lock(&g->mu);
    g->stopping = 1;
    pthread_cond_broadcast(&g->has_request);
    pthread_cond_broadcast(&g->linger_cond);
    pthread_mutex_unlock(&g->mu);
}

/* No flush will come any more: waits return now (a running leader finishes its flush first). */
static inline void rmq_gc_close(rmq_group_commit *g)
{
    pthread_mutex_lock(&g->mu);
    g->stopping = g->closed = 1;
    pthread_cond_broadcast(&g->has_request);
    pthread_cond_broadcast(&g->flushed_cond);
    pthread_cond_broadcast(&g->gen_cond[0]);
    pthread_cond_broadcast(&g->gen_cond[1]);
    pthread_cond_broadcast(&g->arrival_cond);
    pthread_cond_broadcast(&g->linger_cond);
    pthread_mutex_unlock(&g->mu);
}

#endif
