// One timer wheel for every timer of the broker (keepalive, CONNECT timeout,
// QoS retry, session expiry, will delay, await-rel expiry).
//
// Contract:
// - The wheel runs its own thread (clock_nanosleep on CLOCK_MONOTONIC), not
//   an NNG aio: NNG 1.5.2 timers busy-spin and scan O(n) lists.
// - A tw_timer is embedded in its owner and initialised once with
//   tw_timer_init(). Scheduling an armed timer moves it (no allocation).
// - Callbacks run on the wheel thread, one at a time, with no wheel lock
//   held, so they may schedule or cancel any timer (their own included).
//   They must be short and must not block (hand long work to a worker).
// - timer_wheel_cancel() returns only when the timer is disarmed and its
//   callback is not running (unless called from that callback), so the
//   owner may be freed afterwards.
// - Resolution is the tick (e.g. 50 ms); a timer never fires early.
#ifndef NMQ_TIMER_WHEEL_H
#define NMQ_TIMER_WHEEL_H

#include <stdbool.h>
#include <stdint.h>

typedef struct tw_timer {
	struct tw_timer *next;
	struct tw_timer *prev;
	uint64_t         deadline_ms;
	void (*cb)(void *arg);
	void *arg;
	bool  armed;
} tw_timer;

typedef struct timer_wheel timer_wheel;

// Milliseconds of CLOCK_MONOTONIC.
uint64_t nmq_clock_ms(void);

// Starts a wheel ticking every tick_ms (>= 1). Returns NULL on failure.
timer_wheel *timer_wheel_alloc(uint32_t tick_ms);
// Stops the thread and frees the wheel; armed timers are dropped unfired.
void timer_wheel_free(timer_wheel *tw);

void tw_timer_init(tw_timer *t, void (*cb)(void *arg), void *arg);
// Arms (or re-arms) t to fire at deadline_ms (nmq_clock_ms() time base).
void timer_wheel_schedule(timer_wheel *tw, tw_timer *t, uint64_t deadline_ms);
// Disarms t; see the contract above for the waiting rule.
void timer_wheel_cancel(timer_wheel *tw, tw_timer *t);
// Number of armed timers (for tests and metrics).
uint64_t timer_wheel_count(timer_wheel *tw);

#endif // NMQ_TIMER_WHEEL_H
