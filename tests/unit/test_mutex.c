// Unit tests of the 4-byte futex mutex (nng/core/nmq_mutex.h): mutual
// exclusion under contention, trylock, and the wake-up of sleepers.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "nng/core/nmq_mutex.h"

#define THREADS 4
#define ROUNDS  200000

typedef struct shared {
	nmq_mutex   m;
	uint64_t    counter; // plain: only ever touched under m
	int         inside; // plain: threads inside the critical section
	atomic_int  overlaps;
	atomic_bool go;
} shared;

static void *hammer(void *arg)
{
	shared *sh = arg;
	while (!atomic_load(&sh->go)) { }
	for (int i = 0; i < ROUNDS; i++) {
		nmq_mutex_lock(&sh->m);
		if (sh->inside++ != 0) {
			atomic_fetch_add(&sh->overlaps, 1);
		}
		// A read-modify-write that a lost update would show.
		uint64_t v = sh->counter;
		if ((i & 1023) == 0) {
			sched_yield(); // hold it across a reschedule now and then
		}
		sh->counter = v + 1;
		sh->inside--;
		nmq_mutex_unlock(&sh->m);
	}
	return NULL;
}

// Four threads on a two-core machine: the lock is contended, holders are
// preempted inside it, and sleepers must be woken; no update is lost and no
// two threads are ever inside together.
static void test_contended_counter(void **state)
{
	(void)state;
	static shared sh;
	nmq_mutex_init(&sh.m);
	pthread_t t[THREADS];
	for (int i = 0; i < THREADS; i++) {
		assert_int_equal(pthread_create(&t[i], NULL, hammer, &sh), 0);
	}
	atomic_store(&sh.go, true);
	for (int i = 0; i < THREADS; i++) {
		pthread_join(t[i], NULL);
	}
	assert_int_equal(atomic_load(&sh.overlaps), 0);
	assert_int_equal(sh.counter, (uint64_t)THREADS * ROUNDS);
	// Released for good: it can be taken again at once.
	assert_true(nmq_mutex_trylock(&sh.m));
	nmq_mutex_unlock(&sh.m);
	nmq_mutex_destroy(&sh.m);
}

static void test_trylock(void **state)
{
	(void)state;
	nmq_mutex m;
	nmq_mutex_init(&m);
	assert_true(nmq_mutex_trylock(&m));
	assert_false(nmq_mutex_trylock(&m));
	nmq_mutex_unlock(&m);
	assert_true(nmq_mutex_trylock(&m));
	nmq_mutex_unlock(&m);
	nmq_mutex_destroy(&m);
}

typedef struct sleeper {
	nmq_mutex *m;
	atomic_int state; // 1 waiting for the lock, 2 got it
} sleeper;

static void *take_it(void *arg)
{
	sleeper *s = arg;
	atomic_store(&s->state, 1);
	nmq_mutex_lock(s->m);
	atomic_store(&s->state, 2);
	nmq_mutex_unlock(s->m);
	return NULL;
}

// A thread blocked on a lock held for long (it goes to sleep in the
// kernel after spinning) gets it when the holder lets go.
static void test_sleeper_is_woken(void **state)
{
	(void)state;
	nmq_mutex m;
	nmq_mutex_init(&m);
	nmq_mutex_lock(&m);
	sleeper   s = { &m, 0 };
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, take_it, &s), 0);
	while (atomic_load(&s.state) == 0) { }
	struct timespec ts = { 0, 50 * 1000000L };
	nanosleep(&ts, NULL);
	assert_int_equal(atomic_load(&s.state), 1); // still waiting
	nmq_mutex_unlock(&m);
	pthread_join(t, NULL);
	assert_int_equal(atomic_load(&s.state), 2);
	nmq_mutex_destroy(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_trylock),
		cmocka_unit_test(test_sleeper_is_woken),
		cmocka_unit_test(test_contended_counter),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
