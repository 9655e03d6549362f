// Unit tests of the timer wheel (nng/protocol/timer_wheel.c).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "nng/protocol/timer_wheel.h"

// Slack allowed on top of one tick for the worst callback to run: the test
// machine is shared, ctest runs tests in parallel and the build is
// sanitized. Mean lateness is held to a tighter bound. On top of both
// comes the time the wheel thread waited for a CPU meanwhile (sched_stop).
#define SLACK_MS 100

static void sleep_ms(uint64_t ms)
{
	struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0) { }
}

// Waits up to limit_ms for *counter to reach want. Returns true if it did.
static bool wait_for(_Atomic int *counter, int want, uint64_t limit_ms)
{
	uint64_t end = nmq_clock_ms() + limit_ms;
	while (atomic_load(counter) < want) {
		if (nmq_clock_ms() > end) {
			return false;
		}
		sleep_ms(1);
	}
	return true;
}

// What the machine cost the wheel thread during a measurement: the time
// it spent runnable but waiting for a CPU (the second field of its
// /proc/self/task/<tid>/schedstat, in ns). A loaded machine can leave any
// thread off the CPU for longer than a tick, and that is no fault of the
// wheel: it is added to the lateness bounds (0 on an idle machine).
static _Atomic long wheel_tid_seen;

static void tid_cb(tw_timer *t)
{
	atomic_store(&wheel_tid_seen, (long)syscall(SYS_gettid));
}

// Returns the wheel thread's run-queue wait so far in ns, or 0 when the
// kernel does not say.
static uint64_t rq_wait_ns(long tid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/task/%ld/schedstat", tid);
	FILE              *f   = fopen(path, "r");
	unsigned long long cpu = 0, wait = 0;
	if (f == NULL) {
		return 0;
	}
	if (fscanf(f, "%llu %llu", &cpu, &wait) != 2) {
		wait = 0;
	}
	fclose(f);
	return wait;
}

typedef struct sched_mark {
	long     tid;
	uint64_t wait0;
} sched_mark;

// Finds tw's thread (a timer's callback names it) and notes its wait.
static void sched_start(sched_mark *m, timer_wheel *tw)
{
	tw_timer t;
	atomic_store(&wheel_tid_seen, 0);
	tw_timer_init(&t, tid_cb);
	timer_wheel_schedule(tw, &t, 0);
	while (atomic_load(&wheel_tid_seen) == 0) {
		sleep_ms(1);
	}
	timer_wheel_cancel(tw, &t); // returns once the callback is done
	m->tid   = atomic_load(&wheel_tid_seen);
	m->wait0 = rq_wait_ns(m->tid);
}

// Returns the ms the wheel thread waited for a CPU since sched_start.
static uint64_t sched_stop(const sched_mark *m)
{
	uint64_t w  = rq_wait_ns(m->tid);
	uint64_t ms = w > m->wait0 ? (w - m->wait0 + 999999) / 1000000 : 0;
	print_message(
	    "machine: the wheel thread waited %llu ms for a CPU\n", (unsigned long long)ms);
	return ms;
}

// A timer that records when and in which order it fired.
typedef struct rec {
	tw_timer     t;
	uint64_t     deadline;
	_Atomic int  fired;
	uint64_t     at;
	int          order;
	timer_wheel *tw;
} rec;

static _Atomic int n_fired;
static _Atomic int n_errors; // checks failed on the wheel thread

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			atomic_fetch_add(&n_errors, 1);                                            \
		}                                                                                  \
	} while (0)

static void rec_cb(tw_timer *t)
{
	rec *r   = TW_OWNER(t, rec, t);
	r->at    = nmq_clock_ms();
	r->order = atomic_fetch_add(&n_fired, 1);
	atomic_fetch_add(&r->fired, 1);
}

static void rec_init(rec *r, timer_wheel *tw)
{
	memset(r, 0, sizeof(*r));
	atomic_init(&r->fired, 0);
	r->tw = tw;
	tw_timer_init(&r->t, rec_cb);
}

static void rec_arm(rec *r, uint64_t deadline)
{
	r->deadline = deadline;
	timer_wheel_schedule(r->tw, &r->t, deadline);
}

static void reset(void)
{
	atomic_store(&n_fired, 0);
	atomic_store(&n_errors, 0);
}

static void test_alloc(void **state)
{
	assert_null(timer_wheel_alloc(0));
	timer_wheel *tw = timer_wheel_alloc(1);
	assert_non_null(tw);
	assert_int_equal(timer_wheel_count(tw), 0);
	timer_wheel_free(tw);
	timer_wheel_free(NULL);
	uint64_t a = nmq_clock_ms();
	sleep_ms(5);
	assert_true(nmq_clock_ms() >= a + 5);
}

// Deadlines in reverse order of arming fire in deadline order, never early.
static void test_order(void **state)
{
	timer_wheel *tw = timer_wheel_alloc(5);
	rec          r[20];
	sched_mark   pr;
	sched_start(&pr, tw);
	uint64_t now = nmq_clock_ms();
	reset();
	for (int i = 0; i < 20; i++) {
		rec_init(&r[i], tw);
		rec_arm(&r[i], now + 20 + (uint64_t)(19 - i) * 12);
	}
	assert_int_equal(timer_wheel_count(tw), 20);
	assert_true(wait_for(&n_fired, 20, 10000));
	uint64_t machine = sched_stop(&pr);
	for (int i = 0; i < 20; i++) {
		assert_int_equal(atomic_load(&r[i].fired), 1);
		assert_int_equal(r[i].order, 19 - i);
		assert_true(r[i].at >= r[i].deadline);
		assert_true(r[i].at <= r[i].deadline + 5 + SLACK_MS + machine);
		assert_false(timer_wheel_armed(tw, &r[i].t));
	}
	assert_int_equal(timer_wheel_count(tw), 0);
	timer_wheel_free(tw);
}

// Random deadlines, including past ones and ones inside the current tick.
static void test_never_early(void **state)
{
	timer_wheel *tw = timer_wheel_alloc(10);
	enum { N = 300 };
	rec       *r = calloc(N, sizeof(*r));
	sched_mark pr;
	sched_start(&pr, tw);
	uint64_t now = nmq_clock_ms();
	uint64_t x   = 12345;
	reset();
	for (int i = 0; i < N; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		rec_init(&r[i], tw);
		uint64_t d = now + x % 200;
		if (i % 50 == 0) {
			d = now - 5; // already passed
		}
		if (i == 1) {
			d = 0; // before the wheel existed
		}
		rec_arm(&r[i], d);
	}
	assert_true(wait_for(&n_fired, N, 10000));
	uint64_t machine = sched_stop(&pr);
	uint64_t worst   = 0;
	for (int i = 0; i < N; i++) {
		assert_int_equal(atomic_load(&r[i].fired), 1);
		assert_true(r[i].at >= r[i].deadline);
		uint64_t base = r[i].deadline > now ? r[i].deadline : now;
		uint64_t late = r[i].at - base;
		worst         = late > worst ? late : worst;
	}
	print_message("never_early: worst lateness %llu ms (tick 10)\n", (unsigned long long)worst);
	assert_true(worst <= 10 + SLACK_MS + machine);
	timer_wheel_free(tw);
	free(r);
}

// Cancel before firing; reschedule earlier, later and after firing.
static void test_cancel_reschedule(void **state)
{
	timer_wheel *tw = timer_wheel_alloc(5);
	rec          a, b, c, d;
	sched_mark   pr;
	sched_start(&pr, tw);
	uint64_t now = nmq_clock_ms();
	reset();
	rec_init(&a, tw);
	rec_init(&b, tw);
	rec_init(&c, tw);
	rec_init(&d, tw);

	rec_arm(&a, now + 30);
	assert_true(timer_wheel_armed(tw, &a.t));
	timer_wheel_cancel(tw, &a.t);
	assert_false(timer_wheel_armed(tw, &a.t));
	timer_wheel_cancel(tw, &a.t); // cancelling twice is harmless
	assert_int_equal(timer_wheel_count(tw), 0);

	rec_arm(&b, now + 400); // moved earlier
	rec_arm(&b, now + 40);
	rec_arm(&c, now + 20); // moved later
	rec_arm(&c, now + 120);
	rec_arm(&d, now + 60); // moved to the same deadline twice
	rec_arm(&d, now + 60);
	assert_int_equal(timer_wheel_count(tw), 3);

	// c comes due last (b and d before it): once it fired, a cancelled
	// timer that had fired (at +30) would have done so already.
	assert_true(wait_for(&c.fired, 1, 10000));
	uint64_t machine = sched_stop(&pr);
	assert_int_equal(atomic_load(&a.fired), 0);
	assert_int_equal(atomic_load(&b.fired), 1);
	assert_int_equal(atomic_load(&c.fired), 1);
	assert_int_equal(atomic_load(&d.fired), 1);
	assert_true(b.at >= now + 40 && b.at <= now + 45 + SLACK_MS + machine);
	assert_true(c.at >= now + 120);
	assert_true(b.order < d.order && d.order < c.order);

	// A fired timer can be armed again.
	now = nmq_clock_ms();
	rec_arm(&b, now + 10);
	assert_true(wait_for(&b.fired, 2, 10000));
	assert_true(b.at >= now + 10);
	assert_int_equal(timer_wheel_count(tw), 0);
	assert_int_equal(atomic_load(&n_fired), 4);
	timer_wheel_free(tw);
}

// Callbacks that cancel themselves, cancel another timer of the same tick,
// and re-arm themselves.
typedef struct selfish {
	tw_timer     t;
	timer_wheel *tw;
	tw_timer    *victim;
	int          rearm; // re-arms left
	_Atomic int  fired;
} selfish;

static void selfish_cb(tw_timer *t)
{
	selfish *s = TW_OWNER(t, selfish, t);
	atomic_fetch_add(&s->fired, 1);
	if (s->victim != NULL) {
		timer_wheel_cancel(s->tw, s->victim); // must not wait on itself
	}
	if (s->rearm > 0) {
		s->rearm--;
		timer_wheel_schedule(s->tw, &s->t, nmq_clock_ms() + 3);
		timer_wheel_cancel(s->tw, &s->t); // own cancel: returns at once
		timer_wheel_schedule(s->tw, &s->t, nmq_clock_ms() + 3);
	}
}

static void test_cancel_from_callback(void **state)
{
	timer_wheel *tw = timer_wheel_alloc(2);
	selfish      a, b, c;
	uint64_t     now = nmq_clock_ms();
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	memset(&c, 0, sizeof(c));
	a.tw = b.tw = c.tw = tw;
	tw_timer_init(&a.t, selfish_cb);
	tw_timer_init(&b.t, selfish_cb);
	tw_timer_init(&c.t, selfish_cb);
	// a and b share a deadline; whichever runs first cancels the other.
	a.victim = &b.t;
	b.victim = &a.t;
	timer_wheel_schedule(tw, &a.t, now + 20);
	timer_wheel_schedule(tw, &b.t, now + 20);
	// c re-arms itself ten times, cancelling itself on the way.
	c.rearm  = 10;
	c.victim = &c.t;
	timer_wheel_schedule(tw, &c.t, now + 5);
	assert_true(wait_for(&c.fired, 11, 2000));
	sleep_ms(40);
	assert_int_equal(atomic_load(&a.fired) + atomic_load(&b.fired), 1);
	assert_int_equal(atomic_load(&c.fired), 11);
	assert_int_equal(timer_wheel_count(tw), 0);
	timer_wheel_free(tw);
}

// cancel() from another thread waits for a running callback.
typedef struct slow {
	tw_timer     t;
	timer_wheel *tw;
	_Atomic int  started;
	_Atomic int  finished;
	bool         rearm;
} slow;

static void slow_cb(tw_timer *t)
{
	slow *s = TW_OWNER(t, slow, t);
	atomic_store(&s->started, 1);
	sleep_ms(300);
	if (s->rearm) {
		// Re-armed while cancel() waits: cancel must disarm it again.
		timer_wheel_schedule(s->tw, &s->t, nmq_clock_ms() + 1);
	}
	atomic_store(&s->finished, 1);
}

static void test_cancel_waits(void **state)
{
	timer_wheel *tw     = timer_wheel_alloc(2);
	int          waited = 0; // rounds whose cancel found the callback running
	for (int round = 0; round < 2; round++) {
		slow *s  = calloc(1, sizeof(*s));
		s->tw    = tw;
		s->rearm = round == 1;
		tw_timer_init(&s->t, slow_cb);
		timer_wheel_schedule(tw, &s->t, nmq_clock_ms() + 5);
		assert_true(wait_for(&s->started, 1, 10000));
		// The callback runs 300 ms: unless this thread was held off the
		// CPU that long, cancel finds it running, and must wait for it.
		waited += atomic_load(&s->finished) == 0;
		timer_wheel_cancel(tw, &s->t);
		assert_int_equal(atomic_load(&s->finished), 1);
		assert_false(timer_wheel_armed(tw, &s->t));
		assert_int_equal(timer_wheel_count(tw), 0);
		free(s); // safe: the wheel no longer refers to it
	}
	assert_true(waited > 0);
	sleep_ms(20);
	timer_wheel_free(tw);
}

// 10k timers over 300 ms all fire within the tick tolerance.
static void test_many(void **state)
{
	enum { N = 10000, START = 300 };
	timer_wheel *tw = timer_wheel_alloc(10);
	rec         *r  = calloc(N, sizeof(*r));
	sched_mark   pr;
	sched_start(&pr, tw);
	uint64_t now = nmq_clock_ms();
	uint64_t x   = 987654321;
	reset();
	for (int i = 0; i < N; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		rec_init(&r[i], tw);
		rec_arm(&r[i], now + START + x % 300);
	}
	// Cancel every tenth. Arming and cancelling take well under START ms,
	// unless the machine holds this thread off the CPU: a timer may then
	// come due, and fire, before its cancel (which returns only once a
	// running callback ended, so `fired` is final after it).
	int cancelled = 0;
	for (int i = 0; i < N; i += 10) {
		timer_wheel_cancel(tw, &r[i].t);
		cancelled += atomic_load(&r[i].fired) == 0;
	}
	uint64_t count = timer_wheel_count(tw);
	uint64_t done  = nmq_clock_ms();
	if (done < now + START) {
		assert_int_equal(count, N - N / 10); // nothing could be due yet
	}
	assert_true(wait_for(&n_fired, N - cancelled, 20000));
	uint64_t machine = sched_stop(&pr);
	uint64_t worst   = 0;
	uint64_t sum     = 0;
	for (int i = 0; i < N; i++) {
		if (i % 10 == 0 && r[i].deadline > done) {
			assert_int_equal(atomic_load(&r[i].fired), 0);
		}
		if (i % 10 == 0) {
			continue;
		}
		assert_int_equal(atomic_load(&r[i].fired), 1);
		assert_true(r[i].at >= r[i].deadline);
		// Late from its deadline, or from when this thread let go of the
		// wheel if that was later.
		uint64_t base = r[i].deadline > done ? r[i].deadline : done;
		uint64_t late = r[i].at > base ? r[i].at - base : 0;
		worst         = late > worst ? late : worst;
		sum += late;
	}
	print_message("many: 9000 timers, mean lateness %.1f ms, worst %llu ms (tick 10)\n",
	    (double)sum / (N - N / 10), (unsigned long long)worst);
	assert_true(worst <= 10 + SLACK_MS + machine);
	assert_true((double)sum / (N - N / 10) <= 10 / 2 + 10 + (double)machine);
	assert_int_equal(atomic_load(&n_fired), N - cancelled);
	assert_int_equal(timer_wheel_count(tw), 0);
	timer_wheel_free(tw);
	free(r);
}

// Timers beyond one lap (1024 ticks) wait for their own lap, and timers
// hours away stay armed; free() drops and disarms them.
static void test_far(void **state)
{
	timer_wheel *tw = timer_wheel_alloc(1); // one lap = 1024 ms
	rec          near, lap, hours;
	sched_mark   pr;
	sched_start(&pr, tw);
	uint64_t now = nmq_clock_ms();
	reset();
	rec_init(&near, tw);
	rec_init(&lap, tw);
	rec_init(&hours, tw);
	rec_arm(&near, now + 60);
	rec_arm(&lap, now + 60 + 1024); // same slot as `near`, next lap
	rec_arm(&hours, now + 3 * 3600 * 1000);
	assert_true(wait_for(&near.fired, 1, 10000));
	// `lap` shares near's slot: it must not fire with it, but a lap later.
	sleep_ms(200);
	assert_true(atomic_load(&lap.fired) == 0 || lap.at >= lap.deadline);
	assert_true(wait_for(&lap.fired, 1, 10000));
	uint64_t machine = sched_stop(&pr);
	assert_true(lap.at >= lap.deadline);
	assert_true(lap.at <= lap.deadline + 1 + SLACK_MS + machine);
	assert_int_equal(atomic_load(&hours.fired), 0);
	assert_true(timer_wheel_armed(tw, &hours.t));
	assert_int_equal(timer_wheel_count(tw), 1);
	timer_wheel_free(tw);
	assert_null(hours.t.pprev); // disarmed
	assert_int_equal(atomic_load(&hours.fired), 0);
}

// Returns the CPU time (user + system) of the process in microseconds.
static uint64_t cpu_us(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (uint64_t)ru.ru_utime.tv_sec * 1000000u + (uint64_t)ru.ru_utime.tv_usec
	    + (uint64_t)ru.ru_stime.tv_sec * 1000000u + (uint64_t)ru.ru_stime.tv_usec;
}

// An idle wheel, and a wheel holding only a timer hours away, use no
// measurable CPU over 300 ms.
static void test_idle_cpu(void **state)
{
	timer_wheel *tw = timer_wheel_alloc(1);
	rec          far;
	sleep_ms(20);
	uint64_t c0 = cpu_us();
	sleep_ms(300);
	uint64_t idle = cpu_us() - c0;

	rec_init(&far, tw);
	rec_arm(&far, nmq_clock_ms() + 2 * 3600 * 1000);
	sleep_ms(20);
	c0 = cpu_us();
	sleep_ms(300);
	uint64_t armed = cpu_us() - c0;
	print_message("idle: %llu us CPU idle, %llu us with one far timer, over 300 ms\n",
	    (unsigned long long)idle, (unsigned long long)armed);
	assert_true(idle < 3000);
	assert_true(armed < 3000);
	timer_wheel_free(tw);
}

// Schedules and cancels from several threads while timers fire.
typedef struct mt_ctx {
	timer_wheel *tw;
	rec          r[4][64];
	_Atomic bool stop;
} mt_ctx;

typedef struct mt_arg {
	mt_ctx *c;
	int     id;
} mt_arg;

static void *mt_thread(void *p)
{
	mt_arg  *a = p;
	mt_ctx  *c = a->c;
	uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(a->id + 1);
	while (!atomic_load(&c->stop)) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		rec *r = &c->r[a->id][x % 64];
		if ((x >> 32) % 3 == 0) {
			timer_wheel_cancel(c->tw, &r->t);
		} else {
			timer_wheel_schedule(c->tw, &r->t, nmq_clock_ms() + (x >> 40) % 20);
		}
	}
	for (int i = 0; i < 64; i++) {
		timer_wheel_cancel(c->tw, &c->r[a->id][i].t);
	}
	return NULL;
}

static void test_threads(void **state)
{
	mt_ctx   *c = calloc(1, sizeof(*c));
	pthread_t th[4];
	mt_arg    args[4];
	c->tw = timer_wheel_alloc(1);
	atomic_init(&c->stop, false);
	reset();
	for (int i = 0; i < 4; i++) {
		for (int j = 0; j < 64; j++) {
			rec_init(&c->r[i][j], c->tw);
		}
		args[i].c  = c;
		args[i].id = i;
		assert_int_equal(pthread_create(&th[i], NULL, mt_thread, &args[i]), 0);
	}
	sleep_ms(300);
	atomic_store(&c->stop, true);
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
	}
	print_message("threads: %d callbacks\n", atomic_load(&n_fired));
	assert_true(atomic_load(&n_fired) > 0);
	assert_int_equal(timer_wheel_count(c->tw), 0);
	// Nothing fires after every timer was cancelled.
	int fired = atomic_load(&n_fired);
	sleep_ms(30);
	assert_int_equal(atomic_load(&n_fired), fired);
	timer_wheel_free(c->tw);
	free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_alloc),
		cmocka_unit_test(test_order),
		cmocka_unit_test(test_never_early),
		cmocka_unit_test(test_cancel_reschedule),
		cmocka_unit_test(test_cancel_from_callback),
		cmocka_unit_test(test_cancel_waits),
		cmocka_unit_test(test_many),
		cmocka_unit_test(test_far),
		cmocka_unit_test(test_idle_cpu),
		cmocka_unit_test(test_threads),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	if (atomic_load(&n_errors) != 0) {
		fprintf(stderr, "%d checks failed off the main thread\n", atomic_load(&n_errors));
		rc = 1;
	}
	return rc;
}
