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
#include <sched.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdint.h>
#include <time.h>

#include "rmq_clock.h"

enum {
    RMQ_GC_LEADER = 2,    /* the caller now runs the flush: to *target, then rmq_gc_leader_done */
    RMQ_GC_FLUSHED = 1,   /* the offset is on disk */
    RMQ_GC_TIMEOUT = 0,   /* the timeout passed first */
    RMQ_GC_FAILED = -1,   /* a flush failed while waiting */
    RMQ_GC_CLOSED = -2    /* the service is gone and the offset was never flushed */
};

/* A blocking put asleep until a flush covers it (on the waiting put's stack, linked while it sleeps). It sleeps on
 * a futex word of its own, not a condition variable, so that whoever wakes it does so after releasing mu: a
 * cond_signal under mu made the woken put preempt its waker on the same vCPU and block at once on the mu the waker
 * still held (a third of all context switches under 16 producers were that: lock waits and the preemptions after
 * a signal). A futex wake may reach the word after its put has left (timed out meanwhile): harmless, as the sleep
 * loop takes a wake-up without the word set for a spurious one. */
typedef struct rmq_gc_waiter {
    struct rmq_gc_waiter *prev, *next;
    int64_t offset;
    int queued;
    int on_deck;                  /* woken ahead of its turn: spins until the put before it passes the baton */
    uint32_t woken;               /* the futex word: 1 (set under mu) when unlinked to be woken, 2 its turn on deck */
} rmq_gc_waiter;

/* Wake-ups decided under mu, made after it is released. */
typedef struct {
    uint32_t *words[3];
    int n;
} rmq_gc_wakes;

typedef struct {
    pthread_mutex_t mu;
    pthread_condattr_t cattr;     /* CLOCK_MONOTONIC, for the conds below */
    pthread_cond_t flushed_cond;  /* waits that never lead (the put_async completer) sleep here */
    /* Blocking puts asleep, oldest first. A flush's end does not wake all it covered: they would all wake at once
     * on two vCPUs and queue for the GIL (each taking the vCPU from the thread holding it, sleeping again on the
     * GIL, woken again: ~3.6 context switches a put with 16 producers). The leader goes back to Python itself, and
     * every put entering a wait (its GIL just released) wakes one covered sleeper: a baton, one wake-up per put, and
     * the GIL free when the woken thread wants it. A covered sleeper nobody passes the baton to (its peers stopped
     * putting) wakes on its own, RMQ_GC_STALL_NS after its flush should have ended. */
    rmq_gc_waiter *head, *tail;
    /* Even so each baton was a wake-up of a sleeping thread, mostly on the other vCPU (in a VM an IPI and a host
     * reschedule: 12 us on average from wake-up to running here), paid one after another along a group. So the
     * baton also wakes the next covered sleeper "on deck": it spins (GIL released, at most spin_ns, yielding the
     * vCPU now and then) while the put before it runs its Python, and its turn reaches it as a store to its futex
     * word. 16 blocking producers: +12-25 % puts/s, same CPU a put. No spinning with one CPU. */
    rmq_gc_waiter *on_deck;
    int64_t spin_ns;              /* how long an on-deck put spins at most (0: no put goes on deck) */
    int64_t catches;              /* turns an on-deck put caught spinning */
    int64_t flush_target;         /* what the running flush covers: INT64_MAX while its leader gathers the group */
    int64_t flush_start_ns;       /* when the running flush began gathering or took its target */
    int64_t flush_ewma_ns;        /* how long flushes take (moving average) */
    int64_t stalls;               /* covered puts that woke on their own timer: nobody passed them the baton */
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

/* A sleeper's own wake-up comes this long after the flush that should cover it is expected to end: long enough
 * that a baton passed along a group of puts (tens of us each) usually comes first, short enough that a put whose
 * peers stopped putting is not held for long. */
#define RMQ_GC_STALL_NS 500000LL

/* CPUs this thread may run on: a spinning put only helps when another one runs the put it waits for. */
static inline int rmq_gc_cpus(void)
{
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        return CPU_COUNT(&set);
#endif
    return (int)sysconf(_SC_NPROCESSORS_ONLN);
}

static inline int rmq_gc_init(rmq_group_commit *g, int64_t flushed)
{
    int err;
    g->requested = g->flushed = flushed;
    g->arrivals = g->failures = g->flushes = g->served = g->led = g->stalls = 0;
    g->flushing = g->waiting = g->arrival_waiters = g->lingering = 0;
    g->linger_ns = 200000;
    g->group_start_arrivals = g->last_group = 0;
    g->stopping = g->closed = g->ready = 0;
    g->head = g->tail = NULL;
    g->on_deck = NULL;
    g->spin_ns = rmq_gc_cpus() > 1 ? 20000 : 0;
    g->catches = 0;
    g->flush_target = INT64_MAX;
    g->flush_start_ns = g->flush_ewma_ns = 0;
    if ((err = pthread_mutex_init(&g->mu, NULL)) != 0)
        return err;
    if ((err = pthread_condattr_init(&g->cattr)) != 0)
        return err;
    pthread_condattr_setclock(&g->cattr, CLOCK_MONOTONIC);
    err = pthread_cond_init(&g->flushed_cond, &g->cattr);
    if (err == 0)
        err = pthread_cond_init(&g->has_request, &g->cattr);
    if (err == 0)
        err = pthread_cond_init(&g->arrival_cond, &g->cattr);
    if (err == 0)
        err = pthread_cond_init(&g->linger_cond, &g->cattr);
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
    pthread_cond_destroy(&g->has_request);
    pthread_cond_destroy(&g->arrival_cond);
    pthread_cond_destroy(&g->linger_cond);
    pthread_condattr_destroy(&g->cattr);
    pthread_mutex_destroy(&g->mu);
}

/* The sleeper list; caller holds mu. */
static inline void rmq_gc_unlink_locked(rmq_group_commit *g, rmq_gc_waiter *w)
{
    if (!w->queued)
        return;
    if (w->prev) w->prev->next = w->next; else g->head = w->next;
    if (w->next) w->next->prev = w->prev; else g->tail = w->prev;
    w->queued = 0;
}

static inline void rmq_gc_futex_wake(uint32_t *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Sleep until *word is set or deadline_ns (monotonic) passes; 1 when it passed with the word still clear. */
static inline int rmq_gc_futex_sleep(uint32_t *word, int64_t deadline_ns)
{
    struct timespec ts = rmq_deadline(deadline_ns);
    for (;;) {
        if (__atomic_load_n(word, __ATOMIC_ACQUIRE))
            return 0;
        if (syscall(SYS_futex, word, FUTEX_WAIT_BITSET_PRIVATE, 0, &ts, NULL, FUTEX_BITSET_MATCH_ANY) != 0
            && errno == ETIMEDOUT)
            return !__atomic_load_n(word, __ATOMIC_ACQUIRE);
    }
}

/* Unlink w and mark it woken; the futex wake is made when wakes is flushed (after mu is released), or at once
 * when wakes is NULL or full (rare paths: close, failures). */
static inline void rmq_gc_wake_locked(rmq_group_commit *g, rmq_gc_waiter *w, rmq_gc_wakes *wakes)
{
    rmq_gc_unlink_locked(g, w);
    __atomic_store_n(&w->woken, 1, __ATOMIC_RELEASE);
    if (wakes && wakes->n < 3)
        wakes->words[wakes->n++] = &w->woken;
    else
        rmq_gc_futex_wake(&w->woken);
}

/* Make the wake-ups decided under mu; the caller has released it. */
static inline void rmq_gc_flush_wakes(rmq_gc_wakes *wakes)
{
    int i;
    for (i = 0; i < wakes->n; i++)
        rmq_gc_futex_wake(wakes->words[i]);
    wakes->n = 0;
}

/* The oldest sleeper a flush covered (covered), or the oldest no flush covered yet; NULL when there is none. */
static inline rmq_gc_waiter *rmq_gc_oldest_locked(rmq_group_commit *g, int covered)
{
    rmq_gc_waiter *w;
    for (w = g->head; w; w = w->next)
        if ((w->offset <= g->flushed) == (covered != 0))
            return w;
    return NULL;
}

/* Pass the baton (the caller has just released the GIL). */
static inline void rmq_gc_release_one_locked(rmq_group_commit *g, rmq_gc_wakes *wakes)
{
    rmq_gc_waiter *w;
    /* Its turn to the put on deck, if any (it is unlinked already), else a wake-up to the oldest covered; then the
     * next covered one goes on deck. */
    if (g->on_deck) {
        __atomic_store_n(&g->on_deck->woken, 2, __ATOMIC_RELEASE);
        g->on_deck = NULL;
    } else if ((w = rmq_gc_oldest_locked(g, 1)) != NULL) {
        rmq_gc_wake_locked(g, w, wakes);
    }
    if (g->spin_ns > 0 && (w = rmq_gc_oldest_locked(g, 1)) != NULL) {
        w->on_deck = 1;
        g->on_deck = w;
        rmq_gc_wake_locked(g, w, wakes);
    }
}

/* An on-deck put, mu not held: spin until its turn comes or spin_ns passes (then it goes on all the same: it is
 * covered), then leave the deck (under mu: nobody may store to w once it returns). */
static inline void rmq_gc_spin_on_deck(rmq_group_commit *g, rmq_gc_waiter *w)
{
    int64_t until = rmq_now_ns() + g->spin_ns;
    unsigned i;
    int caught = 0;
    for (i = 1;; i++) {
        if (__atomic_load_n(&w->woken, __ATOMIC_ACQUIRE) == 2) {
            caught = 1;
            break;
        }
        if ((i & 63) == 0) {
            if (rmq_now_ns() > until)
                break;
            sched_yield();
        }
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ __volatile__("yield");
#endif
    }
    pthread_mutex_lock(&g->mu);
    if (g->on_deck == w)
        g->on_deck = NULL;
    if (caught)
        g->catches++;
    pthread_mutex_unlock(&g->mu);
}

/* Wake the oldest sleeper no flush covered, to lead the next flush; 0 when there is none. */
static inline int rmq_gc_wake_leader_locked(rmq_group_commit *g, rmq_gc_wakes *wakes)
{
    rmq_gc_waiter *w = rmq_gc_oldest_locked(g, 0);
    if (w)
        rmq_gc_wake_locked(g, w, wakes);
    return w != NULL;
}

static inline void rmq_gc_wake_all_locked(rmq_group_commit *g)
{
    while (g->head)
        rmq_gc_wake_locked(g, g->head, NULL);
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
    g->flush_start_ns = rmq_now_ns();
    if (g->last_group > 1 && g->linger_ns > 0) {
        struct timespec deadline = rmq_deadline(rmq_now_ns() + g->linger_ns);
        g->lingering = 1;
        while (g->arrivals - g->group_start_arrivals < g->last_group && !g->stopping && !g->closed)
            if (pthread_cond_timedwait(&g->linger_cond, &g->mu, &deadline) == ETIMEDOUT)
                break;
        g->lingering = 0;
    }
    g->last_group = g->arrivals - g->group_start_arrivals;
    g->group_start_arrivals = g->arrivals;
    g->flush_start_ns = rmq_now_ns();
    g->flush_target = g->requested;
    return g->requested;
}

/* Ask for a flush covering offset without waiting (WAIT=false, put_async): the service thread leads it unless a
 * flush is running or a waiting put will lead the next one anyway. */
static inline void rmq_gc_request(rmq_group_commit *g, int64_t offset)
{
    pthread_mutex_lock(&g->mu);
    rmq_gc_request_locked(g, offset);
    if (offset > g->flushed && !g->flushing && !rmq_gc_oldest_locked(g, 0))
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
 * wait. pass_baton: the caller has just released the GIL (not when it comes back after leading a flush): wake one
 * covered sleeper. Returns an RMQ_GC_* code. */
static inline int rmq_gc_wait_or_lead(rmq_group_commit *g, int64_t offset, int64_t deadline_ns, int64_t failures0,
                                      int64_t *target, int pass_baton)
{
    int rc, timed_out;
    int64_t wake_at, expect_end, now;
    rmq_gc_waiter w;
    rmq_gc_wakes wakes;
    wakes.n = 0;
    w.queued = 0;
    w.on_deck = 0;
    pthread_mutex_lock(&g->mu);
    if (g->flushed < offset && offset > g->requested)
        rmq_gc_request_locked(g, offset);
    if (pass_baton)
        rmq_gc_release_one_locked(g, &wakes);
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
        if (!g->flushing && wakes.n) {
            /* The baton first: the leader may linger for the very puts it wakes. */
            pthread_mutex_unlock(&g->mu);
            rmq_gc_flush_wakes(&wakes);
            pthread_mutex_lock(&g->mu);
            continue;
        }
        if (!g->flushing) {
            g->flushing = 1;
            g->led++;
            *target = rmq_gc_take_target_locked(g);
            rc = RMQ_GC_LEADER;
            break;
        }
        w.offset = offset;
        w.woken = 0;
        w.next = NULL;
        w.prev = g->tail;
        if (g->tail) g->tail->next = &w; else g->head = &w;
        g->tail = &w;
        w.queued = 1;
        /* Its own wake-up: after the flush covering it (the running one, or the next) should have ended. */
        expect_end = g->flush_start_ns + g->flush_ewma_ns;
        if (offset > g->flush_target)
            expect_end += g->flush_ewma_ns + g->linger_ns;
        now = rmq_now_ns();
        if (expect_end > now) {
            wake_at = expect_end + RMQ_GC_STALL_NS;
        } else {
            /* The flush is overdue (a disk stall): look again after half its age so far, not every STALL_NS. */
            wake_at = (now - g->flush_start_ns) / 2;
            wake_at = now + (wake_at > RMQ_GC_STALL_NS ? wake_at : RMQ_GC_STALL_NS);
        }
        if (wake_at > deadline_ns)
            wake_at = deadline_ns;
        pthread_mutex_unlock(&g->mu);
        rmq_gc_flush_wakes(&wakes);
        timed_out = rmq_gc_futex_sleep(&w.woken, wake_at);
        pthread_mutex_lock(&g->mu);
        if (w.queued) {                       /* nobody woke it: its own timer */
            rmq_gc_unlink_locked(g, &w);
            if (g->flushed >= offset)
                g->stalls++;
        }
        if (timed_out && wake_at == deadline_ns && g->flushed < offset) {
            rc = RMQ_GC_TIMEOUT;
            /* It may have been the one woken to lead: another sleeper leads instead. */
            if (!g->flushing)
                rmq_gc_wake_leader_locked(g, &wakes);
            break;
        }
    }
    g->waiting--;
    /* The last waiting put leaves and nobody flushes: requests nobody waits for (put_async, WAIT=false) that came
     * meanwhile counted on it to lead; the service thread takes them. */
    if (!g->waiting && !g->flushing && g->requested > g->flushed)
        pthread_cond_signal(&g->has_request);
    pthread_mutex_unlock(&g->mu);
    rmq_gc_flush_wakes(&wakes);
    if (w.on_deck)
        rmq_gc_spin_on_deck(g, &w);
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
 * and what failed is not asked for again until a new put asks). A leader that is a put goes back to Python itself
 * (it passes the baton to the puts it covered at its next wait); the service thread, which does not, wakes the
 * first of them. One put the flush did not cover is woken to lead the next flush; with none, requests nobody
 * waits for left above the flushed offset are the service thread's. */
static inline void rmq_gc_leader_done(rmq_group_commit *g, int64_t offset, int err, int leader_returns)
{
    int64_t took;
    rmq_gc_wakes wakes;
    wakes.n = 0;
    pthread_mutex_lock(&g->mu);
    g->flushing = 0;
    took = rmq_now_ns() - g->flush_start_ns;
    g->flush_ewma_ns = g->flush_ewma_ns ? g->flush_ewma_ns + (took - g->flush_ewma_ns) / 8 : took;
    if (err != 0) {
        g->failures++;
        g->requested = g->flushed;
        rmq_gc_wake_all_locked(g);
    } else {
        g->flushes++;
        if (offset > g->flushed)
            g->flushed = offset;
        if (!leader_returns)
            rmq_gc_release_one_locked(g, &wakes);
        if (g->requested > g->flushed && !rmq_gc_wake_leader_locked(g, &wakes))
            pthread_cond_signal(&g->has_request);
    }
    pthread_cond_broadcast(&g->flushed_cond);
    if (g->arrival_waiters)
        pthread_cond_broadcast(&g->arrival_cond);
    pthread_mutex_unlock(&g->mu);
    rmq_gc_flush_wakes(&wakes);
}

/* A flush made outside the leader protocol reached offset (the final flush at shutdown): wake the waits it
 * covers. */
static inline void rmq_gc_publish(rmq_group_commit *g, int64_t offset)
{
    pthread_mutex_lock(&g->mu);
    if (offset > g->flushed)
        g->flushed = offset;
    pthread_cond_broadcast(&g->flushed_cond);
    rmq_gc_wake_all_locked(g);
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
    rmq_gc_wake_all_locked(g);
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
    struct timespec deadline = rmq_deadline(rmq_now_ns() + (timeout_ns > 0 ? timeout_ns : 0));
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
    struct timespec deadline = rmq_deadline(deadline_ns);
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
    rmq_gc_wake_all_locked(g);
    pthread_cond_broadcast(&g->arrival_cond);
    pthread_cond_broadcast(&g->linger_cond);
    pthread_mutex_unlock(&g->mu);
}

#endif
