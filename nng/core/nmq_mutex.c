// The contended paths of the futex mutex; see nmq_mutex.h.
#include "nng/core/nmq_mutex.h"

#ifndef NMQ_MUTEX_PTHREAD
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SPINS 64

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

void nmq_mutex_lock_slow(nmq_mutex *m)
{
	// A holder usually lets go within a few hundred cycles.
	for (int i = 0; i < SPINS; i++) {
		cpu_relax();
		if (atomic_load_explicit(&m->v, memory_order_relaxed) == 0
		    && nmq_mutex_trylock(m)) {
			return;
		}
	}
	// Mark it contended; whoever unlocks then wakes a sleeper. Each
	// wake-up takes it as contended again, since other sleepers may
	// remain.
	uint32_t c = atomic_exchange_explicit(&m->v, 2, memory_order_acquire);
	while (c != 0) {
		syscall(SYS_futex, &m->v, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
		c = atomic_exchange_explicit(&m->v, 2, memory_order_acquire);
	}
}

void nmq_mutex_wake(nmq_mutex *m)
{
	syscall(SYS_futex, &m->v, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}
#endif
