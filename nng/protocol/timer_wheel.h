// One timer wheel for every timer of the broker (keepalive, CONNECT timeout,
// QoS retry, session expiry, will delay, await-rel expiry).
//
// Contract:
// - The wheel runs its own thread, not an NNG aio: NNG 1.5.2 timers
//   busy-spin and scan O(n) lists. The thread sleeps in a condition
//   variable wait with an absolute CLOCK_MONOTONIC deadline (so that a new
//   earlier timer can wake it), only until the next tick that has a timer
//   in its slot; with no timer armed it waits without a timeout: an idle
//   wheel costs no CPU. All signals are blocked in that thread.
// - Layout: a hashed wheel of 1024 slots of tick_ms each; a timer
//   further away than one lap stays in its slot and is skipped until the
//   lap of its deadline comes round, so hours-long timers cost one check
//   per lap. Schedule and cancel are O(1).
// - A tw_timer is embedded in its owner and initialised once with
//   tw_timer_init(). Scheduling an armed timer moves it (no allocation).
// - Callbacks run on the wheel thread, one at a time, with no wheel lock
//   held, so they may schedule or cancel any timer (their own included).
//   They must be short and must not block (hand long work to a worker).
// - timer_wheel_cancel() returns only when the timer is disarmed and its
//   callback is not running (unless called from that callback), so the
//   owner may be freed afterwards.
// - Resolution is the tick (e.g. 50 ms); a timer never fires early, and
//   normally fires within one tick of its deadline. Callbacks run in tick
//   order: of two timers armed before either came due, the one due in the
//   earlier tick runs first; within one tick the order is unspecified.
// - A timer is used with one wheel only. Its fields belong to the wheel
//   while it is armed and are protected by the wheel's lock: the owner
//   must not read or write them directly (use timer_wheel_armed()).
#ifndef NMQ_TIMER_WHEEL_H
#define NMQ_TIMER_WHEEL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// 32 bytes: one is embedded in every connection and every session. The
// callback gets the timer itself; its owner is found with
// TW_OWNER(t, type, member). Armed means linked (pprev != NULL).
typedef struct tw_timer {
	struct tw_timer  *next;
	struct tw_timer **pprev;
	uint64_t          deadline_ms;
	void (*cb)(struct tw_timer *t);
} tw_timer;

#define TW_OWNER(t, type, member) ((type *)(void *)((char *)(t)-offsetof(type, member)))

typedef struct timer_wheel timer_wheel;

// Milliseconds of CLOCK_MONOTONIC.
uint64_t nmq_clock_ms(void);
// pthread_cond_timedwait until deadline_ms (nmq_clock_ms), for a
// condition variable created with CLOCK_MONOTONIC; mtx held. Returns its
// result (ETIMEDOUT once the deadline passed).
int nmq_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mtx, uint64_t deadline_ms);

// Starts a wheel ticking every tick_ms (>= 1). Returns NULL on failure
// (tick_ms == 0, memory, or the thread could not be created).
timer_wheel *timer_wheel_alloc(uint32_t tick_ms);
// Stops the thread and frees the wheel; armed timers are dropped unfired
// (and marked disarmed). Waits for a running callback to return; must not
// be called from a callback.
void timer_wheel_free(timer_wheel *tw);

// Initialises t, disarmed. Call once, before the first schedule, from the
// owner's thread.
void tw_timer_init(tw_timer *t, void (*cb)(tw_timer *t));
// Arms (or re-arms) t to fire at deadline_ms (nmq_clock_ms() time base). A
// deadline already passed fires on the next pass of the wheel thread. Never
// blocks on a callback; any thread, callbacks included.
void timer_wheel_schedule(timer_wheel *tw, tw_timer *t, uint64_t deadline_ms);
// Disarms t; see the contract above for the waiting rule. If the callback
// re-arms t while cancel waits for it, t is disarmed again before cancel
// returns. Cancelling a disarmed timer only waits for its callback.
void timer_wheel_cancel(timer_wheel *tw, tw_timer *t);
// True if t is armed (it may fire at any moment afterwards).
bool timer_wheel_armed(timer_wheel *tw, tw_timer *t);
// Number of armed timers (for tests and metrics).
uint64_t timer_wheel_count(timer_wheel *tw);

#endif // NMQ_TIMER_WHEEL_H
