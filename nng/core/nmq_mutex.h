// A 4-byte mutex for the locks embedded in every connection and every
// session, where a pthread_mutex_t (40 bytes) would be a sixth of what an
// idle client costs. The classic three-state futex mutex (0 unlocked,
// 1 locked, 2 locked with waiters; U. Drepper, "Futexes Are Tricky",
// 2011): one compare-and-swap to take it and one atomic decrement to give
// it back when nobody waits, as with glibc's default mutex; a short spin
// before sleeping, since the holders on the hot paths keep it for well
// under a microsecond.
//
// Not recursive, no owner checks, no condition variables. ThreadSanitizer
// builds use pthread_mutex_t instead, so that TSan still sees every lock.
#ifndef NMQ_MUTEX_H
#define NMQ_MUTEX_H

#include <stdbool.h>
#include <stdint.h>

#if defined(__SANITIZE_THREAD__)
#define NMQ_MUTEX_PTHREAD 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define NMQ_MUTEX_PTHREAD 1
#endif
#endif

#ifdef NMQ_MUTEX_PTHREAD
#include <pthread.h>

typedef pthread_mutex_t nmq_mutex;

static inline void nmq_mutex_init(nmq_mutex *m)
{
	pthread_mutex_init(m, NULL);
}
static inline void nmq_mutex_destroy(nmq_mutex *m)
{
	pthread_mutex_destroy(m);
}
static inline void nmq_mutex_lock(nmq_mutex *m)
{
	pthread_mutex_lock(m);
}
static inline bool nmq_mutex_trylock(nmq_mutex *m)
{
	return pthread_mutex_trylock(m) == 0;
}
static inline void nmq_mutex_unlock(nmq_mutex *m)
{
	pthread_mutex_unlock(m);
}

#else
#include <stdatomic.h>

typedef struct nmq_mutex {
	_Atomic uint32_t v; // 0 unlocked, 1 locked, 2 locked and contended
} nmq_mutex;

// The contended paths (nmq_mutex.c).
void nmq_mutex_lock_slow(nmq_mutex *m);
void nmq_mutex_wake(nmq_mutex *m);

static inline void nmq_mutex_init(nmq_mutex *m)
{
	atomic_init(&m->v, 0);
}
static inline void nmq_mutex_destroy(nmq_mutex *m)
{
	(void)m;
}
static inline bool nmq_mutex_trylock(nmq_mutex *m)
{
	uint32_t c = 0;
	return atomic_compare_exchange_strong_explicit(
	    &m->v, &c, 1, memory_order_acquire, memory_order_relaxed);
}
static inline void nmq_mutex_lock(nmq_mutex *m)
{
	if (!nmq_mutex_trylock(m)) {
		nmq_mutex_lock_slow(m);
	}
}
static inline void nmq_mutex_unlock(nmq_mutex *m)
{
	if (atomic_fetch_sub_explicit(&m->v, 1, memory_order_release) != 1) {
		// There were waiters (2): release fully and wake one.
		atomic_store_explicit(&m->v, 0, memory_order_release);
		nmq_mutex_wake(m);
	}
}
#endif

#endif // NMQ_MUTEX_H
