/* The one clock of the C helpers: CLOCK_MONOTONIC in nanoseconds (paces, flush times, spin limits) and the absolute
 * deadline pthread_cond_timedwait takes on condition variables set to that clock (pthread_condattr_setclock), so
 * that a timed wait does not jump with the wall clock. */
#ifndef RMQ_CLOCK_H
#define RMQ_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t rmq_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline struct timespec rmq_deadline(int64_t deadline_ns)
{
    struct timespec ts;
    ts.tv_sec = (time_t)(deadline_ns / 1000000000LL);
    ts.tv_nsec = (long)(deadline_ns % 1000000000LL);
    return ts;
}

#endif /* RMQ_CLOCK_H */
