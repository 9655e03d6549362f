// The timer wheel: one thread, a hashed wheel of TW_SLOTS slots, ticks of
// tick_ms counted from the moment the wheel was created.
//
// Tick k ends at base_ms + k * tick_ms. A timer with deadline d is due at
// the first tick whose end is not before d, and lives in that tick's slot
// (tick modulo TW_SLOTS) until the wheel thread has passed that tick and
// the clock has reached d; then it moves to the `expired` list and its
// callback runs. Timers more than one lap away share slots with nearer
// ones and are skipped (deadline not reached) until their own lap.
//
// Threading: every field is protected by `mtx`, except `thread`, `base_ms`
// and `tick_ms`, which are immutable after alloc. The tw_timer fields of
// an armed timer belong to the wheel and are protected by `mtx` too.
// `running` names the timer whose callback runs (on the wheel thread,
// without `mtx`).
#include "nng/protocol/timer_wheel.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TW_SLOTS 1024u // power of two
#define TW_WORDS (TW_SLOTS / 64)
#define TW_IDLE  UINT64_MAX // wake_tick while waiting without a timeout
#define TW_AWAKE 0 // wake_tick while the thread runs

struct timer_wheel {
	pthread_mutex_t mtx;
	pthread_cond_t  wake; // the wheel thread sleeps here
	pthread_cond_t  done; // cancellers wait here for a callback to end
	pthread_t       thread;
	uint64_t        base_ms;
	uint32_t        tick_ms;
	bool            stop;
	uint32_t        waiters; // cancellers waiting on `done`
	uint64_t        cur_tick; // last tick processed
	uint64_t        wake_tick; // tick the thread sleeps until, or TW_IDLE/TW_AWAKE
	uint64_t        count; // armed timers
	tw_timer       *running;
	tw_timer       *expired; // the due list, in the order the timers came due
	tw_timer      **expired_tail; // &expired, or &next of its last timer
	uint64_t        occupied[TW_WORDS]; // bit per non-empty slot
	// Heads of the slots' lists, NULL when empty: 8 bytes a slot, and an
	// idle wheel leaves them as calloc() gave them.
	tw_timer *slots[TW_SLOTS];
};

int nmq_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mtx, uint64_t deadline_ms)
{
	struct timespec ts = {
		.tv_sec  = (time_t)(deadline_ms / 1000u),
		.tv_nsec = (long)(deadline_ms % 1000u) * 1000000L,
	};
	return pthread_cond_timedwait(cv, mtx, &ts);
}

uint64_t nmq_clock_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

// The lists are singly linked with a back pointer: t->pprev is the pointer
// that points at t (a slot head, `expired` or the previous timer's next),
// NULL while t is disarmed.

// Puts t first in the list at *head.
static void link_first(tw_timer **head, tw_timer *t)
{
	t->next = *head;
	if (t->next != NULL) {
		t->next->pprev = &t->next;
	}
	*head    = t;
	t->pprev = head;
}

// Puts t last in the due list.
static void link_expired(timer_wheel *tw, tw_timer *t)
{
	t->next           = NULL;
	t->pprev          = tw->expired_tail;
	*tw->expired_tail = t;
	tw->expired_tail  = &t->next;
}

// Takes t out of whichever list holds it.
static void unlink_timer(timer_wheel *tw, tw_timer *t)
{
	if (tw->expired_tail == &t->next) {
		tw->expired_tail = t->pprev; // t was last on the due list
	}
	*t->pprev = t->next;
	if (t->next != NULL) {
		t->next->pprev = t->pprev;
	}
	t->next  = NULL;
	t->pprev = NULL;
}

// Returns the slot whose head pp is, or -1 if pp is not a slot head.
static int64_t slot_of(const timer_wheel *tw, tw_timer *const *pp)
{
	uintptr_t a = (uintptr_t)pp;
	uintptr_t b = (uintptr_t)&tw->slots[0];
	if (a < b || a >= b + sizeof(tw->slots)) {
		return -1;
	}
	return (int64_t)((a - b) / sizeof(tw->slots[0]));
}

// Returns the first tick whose end is not before the deadline (0 for a
// deadline at or before the wheel's creation). Cannot overflow.
static uint64_t due_tick(const timer_wheel *tw, uint64_t deadline)
{
	if (deadline <= tw->base_ms) {
		return 0;
	}
	uint64_t d = deadline - tw->base_ms;
	return d / tw->tick_ms + (d % tw->tick_ms != 0);
}

// Disarms an armed timer, keeping the occupancy bitmap exact.
static void disarm(timer_wheel *tw, tw_timer *t)
{
	tw_timer **pp = t->pprev;
	unlink_timer(tw, t);
	tw->count--;
	// A slot head left NULL: the timer was alone in its slot.
	if (*pp == NULL) {
		int64_t s = slot_of(tw, pp);
		if (s >= 0) {
			tw->occupied[s / 64] &= ~(1ull << (s % 64));
		}
	}
}

// Moves the due timers of slot s (deadline <= now) to the expired list.
static void process_slot(timer_wheel *tw, uint32_t s, uint64_t now)
{
	if ((tw->occupied[s / 64] & (1ull << (s % 64))) == 0) {
		return;
	}
	tw_timer *t = tw->slots[s];
	while (t != NULL) {
		tw_timer *nx = t->next;
		if (t->deadline_ms <= now) {
			unlink_timer(tw, t);
			link_expired(tw, t);
		}
		t = nx;
	}
	if (tw->slots[s] == NULL) {
		tw->occupied[s / 64] &= ~(1ull << (s % 64));
	}
}

// Processes every tick that has ended since the last pass (at most one lap:
// a full lap visits every slot, and each is compared with `now`).
static void advance(timer_wheel *tw, uint64_t now)
{
	if (now < tw->base_ms) {
		return;
	}
	uint64_t now_tick = (now - tw->base_ms) / tw->tick_ms;
	if (now_tick <= tw->cur_tick) {
		return;
	}
	uint64_t n = now_tick - tw->cur_tick;
	if (n > TW_SLOTS) {
		n = TW_SLOTS;
	}
	for (uint64_t k = now_tick - n + 1; k <= now_tick; k++) {
		process_slot(tw, (uint32_t)(k % TW_SLOTS), now);
	}
	tw->cur_tick = now_tick;
}

// Returns the next tick after cur_tick whose slot holds a timer, or TW_IDLE.
static uint64_t next_tick(const timer_wheel *tw)
{
	if (tw->count == 0) {
		return TW_IDLE;
	}
	uint32_t start = (uint32_t)((tw->cur_tick + 1) % TW_SLOTS);
	// Scan the bitmap from `start`, wrapping once (TW_WORDS + 1 words).
	for (uint32_t i = 0; i <= TW_WORDS; i++) {
		uint32_t w    = (start / 64 + i) % TW_WORDS;
		uint64_t bits = tw->occupied[w];
		if (i == 0) {
			bits &= ~0ull << (start % 64);
		} else if (i == TW_WORDS) {
			bits &= (start % 64) != 0 ? ~(~0ull << (start % 64)) : 0;
		}
		if (bits != 0) {
			uint32_t s    = w * 64 + (uint32_t)__builtin_ctzll(bits);
			uint32_t dist = (s + TW_SLOTS - start) % TW_SLOTS;
			return tw->cur_tick + 1 + dist;
		}
	}
	// Every armed timer is on the expired list.
	return tw->cur_tick + 1;
}

// Runs the first expired callback with the lock dropped.
static void fire_one(timer_wheel *tw)
{
	tw_timer *t = tw->expired;
	disarm(tw, t);
	void (*cb)(tw_timer *) = t->cb;
	tw->running            = t;
	pthread_mutex_unlock(&tw->mtx);
	cb(t);
	pthread_mutex_lock(&tw->mtx);
	tw->running = NULL;
	if (tw->waiters > 0) {
		pthread_cond_broadcast(&tw->done);
	}
}

static void *tw_main(void *arg)
{
	timer_wheel *tw = arg;

	// Named from inside: glibc names another thread through
	// /proc/self/task/<tid>/comm, built with sprintf().
	(void)pthread_setname_np(pthread_self(), "nmq:timer");
	pthread_mutex_lock(&tw->mtx);
	while (!tw->stop) {
		advance(tw, nmq_clock_ms());
		if (tw->expired != NULL) {
			fire_one(tw);
			continue;
		}
		uint64_t wake = next_tick(tw);
		tw->wake_tick = wake;
		if (wake == TW_IDLE) {
			pthread_cond_wait(&tw->wake, &tw->mtx);
		} else {
			(void)nmq_cond_wait_until(
			    &tw->wake, &tw->mtx, tw->base_ms + wake * tw->tick_ms);
		}
		tw->wake_tick = TW_AWAKE;
	}
	pthread_mutex_unlock(&tw->mtx);
	return NULL;
}

timer_wheel *timer_wheel_alloc(uint32_t tick_ms)
{
	pthread_condattr_t ca;
	sigset_t           all;
	sigset_t           old;

	if (tick_ms == 0) {
		return NULL;
	}
	timer_wheel *tw = calloc(1, sizeof(*tw));
	if (tw == NULL) {
		return NULL;
	}
	tw->tick_ms      = tick_ms;
	tw->base_ms      = nmq_clock_ms();
	tw->wake_tick    = TW_AWAKE;
	tw->expired_tail = &tw->expired;
	if (pthread_mutex_init(&tw->mtx, NULL) != 0) {
		goto fail_mtx;
	}
	if (pthread_condattr_init(&ca) != 0) {
		goto fail_attr;
	}
	if (pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0
	    || pthread_cond_init(&tw->wake, &ca) != 0) {
		pthread_condattr_destroy(&ca);
		goto fail_attr;
	}
	pthread_condattr_destroy(&ca);
	if (pthread_cond_init(&tw->done, NULL) != 0) {
		goto fail_done;
	}
	// The wheel thread must never take a process signal.
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&tw->thread, NULL, tw_main, tw);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		goto fail_thread;
	}
	return tw;

fail_thread:
	pthread_cond_destroy(&tw->done);
fail_done:
	pthread_cond_destroy(&tw->wake);
fail_attr:
	pthread_mutex_destroy(&tw->mtx);
fail_mtx:
	free(tw);
	return NULL;
}

void timer_wheel_free(timer_wheel *tw)
{
	if (tw == NULL) {
		return;
	}
	pthread_mutex_lock(&tw->mtx);
	tw->stop = true;
	pthread_cond_signal(&tw->wake);
	pthread_mutex_unlock(&tw->mtx);
	pthread_join(tw->thread, NULL);

	while (tw->expired != NULL) {
		disarm(tw, tw->expired);
	}
	for (uint32_t i = 0; i < TW_SLOTS; i++) {
		while (tw->slots[i] != NULL) {
			disarm(tw, tw->slots[i]);
		}
	}
	pthread_cond_destroy(&tw->done);
	pthread_cond_destroy(&tw->wake);
	pthread_mutex_destroy(&tw->mtx);
	free(tw);
}

void tw_timer_init(tw_timer *t, void (*cb)(tw_timer *t))
{
	t->next        = NULL;
	t->pprev       = NULL;
	t->deadline_ms = 0;
	t->cb          = cb;
}

void timer_wheel_schedule(timer_wheel *tw, tw_timer *t, uint64_t deadline_ms)
{
	pthread_mutex_lock(&tw->mtx);
	if (t->pprev != NULL) {
		disarm(tw, t);
	}
	t->deadline_ms = deadline_ms;
	tw->count++;
	uint64_t due = due_tick(tw, deadline_ms);
	if (due <= tw->cur_tick) {
		// That tick has been processed: the deadline has passed.
		link_expired(tw, t);
		if (tw->wake_tick != TW_AWAKE) {
			pthread_cond_signal(&tw->wake);
		}
	} else {
		uint32_t s = (uint32_t)(due % TW_SLOTS);
		link_first(&tw->slots[s], t);
		tw->occupied[s / 64] |= 1ull << (s % 64);
		if (tw->wake_tick != TW_AWAKE && due < tw->wake_tick) {
			pthread_cond_signal(&tw->wake);
		}
	}
	pthread_mutex_unlock(&tw->mtx);
}

void timer_wheel_cancel(timer_wheel *tw, tw_timer *t)
{
	bool on_wheel = pthread_equal(pthread_self(), tw->thread);

	pthread_mutex_lock(&tw->mtx);
	for (;;) {
		if (t->pprev != NULL) {
			disarm(tw, t);
		}
		if (tw->running != t || on_wheel) {
			break;
		}
		tw->waiters++;
		pthread_cond_wait(&tw->done, &tw->mtx);
		tw->waiters--;
	}
	pthread_mutex_unlock(&tw->mtx);
}

bool timer_wheel_armed(timer_wheel *tw, tw_timer *t)
{
	pthread_mutex_lock(&tw->mtx);
	bool armed = t->pprev != NULL;
	pthread_mutex_unlock(&tw->mtx);
	return armed;
}

uint64_t timer_wheel_count(timer_wheel *tw)
{
	pthread_mutex_lock(&tw->mtx);
	uint64_t n = tw->count;
	pthread_mutex_unlock(&tw->mtx);
	return n;
}
