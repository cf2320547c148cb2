/* Atomic access to the int64 positions (wrote / committed / flushed) that the put thread advances while flush,
 * commit and reader threads read them without the put lock.
 *
 * C11's atomic_load/atomic_store need an _Atomic-qualified object, and Cython can only declare a plain int64_t
 * struct/cdef-class field. gcc and clang provide the __atomic_* builtins (the ones <stdatomic.h> is built on) for
 * plain integer objects, with the same memory-order semantics, so these wrappers use them directly on int64_t.
 *
 * Ordering: the writer fills bytes, then publishes the new position with a release store; a reader that
 * acquire-loads the position is guaranteed to see every byte below it. On x86-64 and aarch64 these are plain
 * loads/stores (ldar/stlr on arm); on 32-bit x86 gcc uses an 8-byte SSE/x87 move, so a 64-bit position never
 * tears there either. */
#ifndef RMQ_ATOMIC_H
#define RMQ_ATOMIC_H

#include <stdint.h>

#if !defined(__GNUC__) && !defined(__clang__)
#error "rmq_atomic.h needs the gcc/clang __atomic builtins"
#endif

/* Lock-free 8-byte atomics need natural alignment: int64_t fields of C structs and cdef classes have it on every
 * 64-bit ABI (the only targets wheels are built for); on i386 they are 4-byte aligned inside structs. */
#if defined(__GCC_ATOMIC_LLONG_LOCK_FREE) && __GCC_ATOMIC_LLONG_LOCK_FREE != 2
#error "8-byte atomics are not lock-free on this target"
#endif

static inline int64_t rmq_atomic_load_i64(const int64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static inline void rmq_atomic_store_i64(int64_t *p, int64_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/* Strong CAS, acq_rel on success / acquire on failure. On failure *expected receives the current value, as in
 * C11's atomic_compare_exchange_strong. Returns 1 when the swap happened. */
static inline int rmq_atomic_cas_i64(int64_t *p, int64_t *expected, int64_t desired)
{
    return __atomic_compare_exchange_n(p, expected, desired, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) ? 1 : 0;
}

/* Returns the value before the addition, like atomic_fetch_add. */
static inline int64_t rmq_atomic_fetch_add_i64(int64_t *p, int64_t delta)
{
    return __atomic_fetch_add(p, delta, __ATOMIC_ACQ_REL);
}

#endif /* RMQ_ATOMIC_H */
