// $SYS/broker statistics; see sys_stats.h.
#include "src/events/sys_stats.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nng/core/log.h"
#include "nng/core/msg.h"
#include "nng/protocol/timer_wheel.h"
#include "nng/transport/conn.h"
#include "src/topic/retain.h"
#include "src/topic/topic_tree.h"

#define SYS_PREFIX "$SYS/broker/"

// Load averages over 1, 5 and 15 minutes.
static const double load_periods_s[3] = { 60, 300, 900 };
static const char  *load_names[3]     = { "1min", "5min", "15min" };

struct sys_stats {
	nmq_broker     *b;
	nmq_proto      *p;
	pthread_t       thr;
	bool            thr_started;
	pthread_mutex_t mtx;
	pthread_cond_t  cv; // CLOCK_MONOTONIC
	uint32_t        interval_s; // guarded by mtx
	bool            stop; // guarded by mtx
	bool            changed; // interval changed: restart the period
	uint64_t        start_ms; // monotonic, for uptime
	// Owned by the thread: the previous sample and the averages.
	uint64_t last_ms;
	long     last_rx, last_tx;
	double   load_rx[3], load_tx[3];
};

static uint64_t mono_ms(void)
{
	return nmq_clock_ms();
}

// e^-x for x >= 0, to about 1e-9 relative, without libm: exp() was the
// broker's only use of libm, which costs some 300 kB resident at startup.
static double exp_neg(double x)
{
	if (x > 700) {
		return 0;
	}
	int k = 0;
	while (x > 0.5) {
		x /= 2;
		k++;
	}
	double term = 1, sum = 1;
	for (int i = 1; i < 14; i++) {
		term *= -x / i;
		sum += term;
	}
	while (k-- > 0) {
		sum *= sum;
	}
	return sum;
}

double sys_stats_load_update(double avg, double rate, double elapsed_s, double period_s)
{
	if (elapsed_s <= 0 || period_s <= 0) {
		return avg;
	}
	double k = exp_neg(elapsed_s / period_s);
	return rate + (avg - rate) * k;
}

// Publishes one retained statistic. Returns false when out of memory.
static bool put(sys_stats *s, const char *leaf, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool put(sys_stats *s, const char *leaf, const char *fmt, ...)
{
	char    topic[96];
	char    val[96];
	va_list ap;
	va_start(ap, fmt);
	int vl = vsnprintf(val, sizeof(val), fmt, ap);
	va_end(ap);
	int tl = snprintf(topic, sizeof(topic), SYS_PREFIX "%s", leaf);
	if (vl < 0 || tl < 0 || (size_t)vl >= sizeof(val) || (size_t)tl >= sizeof(topic)) {
		return true; // cannot happen with the fixed leaves and numbers
	}
	nmq_msg *m = nmq_msg_alloc(topic, (size_t)tl, 0, (size_t)vl);
	if (m == NULL) {
		return false;
	}
	memcpy(m->payload, val, (size_t)vl);
	m->qos    = 0;
	m->retain = true;
	broker_publish(s->b, m);
	nmq_msg_release(m);
	return true;
}

// Bytes the allocator has handed out; with an allocator that does not
// tell (sanitizer builds), the resident set size.
static size_t heap_bytes(void)
{
	struct mallinfo2 mi = mallinfo2();
	size_t           n  = mi.uordblks + mi.hblkhd;
	if (n == 0) {
		FILE         *f   = fopen("/proc/self/statm", "r");
		unsigned long vsz = 0, rss = 0;
		if (f != NULL) {
			if (fscanf(f, "%lu %lu", &vsz, &rss) == 2) {
				n = (size_t)rss * (size_t)sysconf(_SC_PAGESIZE);
			}
			fclose(f);
		}
	}
	return n;
}

// Samples the counters and publishes every statistic once.
static void publish_all(sys_stats *s)
{
	proto_metrics *m       = proto_metrics_get(s->p);
	uint64_t       now     = mono_ms();
	long           rx      = atomic_load(&m->msgs_received);
	long           tx      = atomic_load(&m->msgs_sent);
	long           conns   = atomic_load(&m->connections);
	long           sess    = atomic_load(&m->sessions);
	double         elapsed = (double)(now - s->last_ms) / 1000.0;
	if (elapsed > 0) {
		double rx_rate = (double)(rx - s->last_rx) * 60.0 / elapsed;
		double tx_rate = (double)(tx - s->last_tx) * 60.0 / elapsed;
		for (int i = 0; i < 3; i++) {
			s->load_rx[i] = sys_stats_load_update(
			    s->load_rx[i], rx_rate, elapsed, load_periods_s[i]);
			s->load_tx[i] = sys_stats_load_update(
			    s->load_tx[i], tx_rate, elapsed, load_periods_s[i]);
		}
	}
	s->last_ms = now;
	s->last_rx = rx;
	s->last_tx = tx;

	bool ok = true;
	ok      = ok && put(s, "version", "nanomq version %s", NMQ_VERSION);
	ok = ok && put(s, "uptime", "%llu seconds", (unsigned long long)(now - s->start_ms) / 1000);
	ok = ok && put(s, "clients/connected", "%ld", conns);
	ok = ok && put(s, "clients/active", "%ld", conns);
	ok = ok && put(s, "clients/disconnected", "%ld", sess > conns ? sess - conns : 0);
	ok = ok && put(s, "clients/total", "%ld", sess);
	ok = ok && put(s, "clients/maximum", "%ld", atomic_load(&m->connections_max));
	ok = ok && put(s, "messages/received", "%ld", rx);
	ok = ok && put(s, "messages/sent", "%ld", tx);
	ok = ok && put(s, "publish/messages/received", "%ld", rx);
	ok = ok && put(s, "publish/messages/sent", "%ld", tx);
	ok = ok && put(s, "publish/messages/dropped", "%ld", atomic_load(&m->msgs_dropped));
	for (int i = 0; i < 3 && ok; i++) {
		char leaf[48];
		snprintf(leaf, sizeof(leaf), "load/messages/received/%s", load_names[i]);
		ok = ok && put(s, leaf, "%.2f", s->load_rx[i]);
		snprintf(leaf, sizeof(leaf), "load/messages/sent/%s", load_names[i]);
		ok = ok && put(s, leaf, "%.2f", s->load_tx[i]);
	}
	ok = ok && put(s, "bytes/received", "%llu", (unsigned long long)conn_bytes_received());
	ok = ok && put(s, "bytes/sent", "%llu", (unsigned long long)conn_bytes_sent());
	ok = ok
	    && put(s, "subscriptions/count", "%zu", topic_tree_sub_count(broker_topic_tree(s->b)));
	// Counted before this round's own retained statistics are replaced,
	// which does not change the count after the first round.
	ok = ok && put(s, "retained messages/count", "%zu", retain_count(broker_retain(s->b)));
	ok = ok && put(s, "heap/current", "%zu", heap_bytes());
	if (!ok) {
		log_warn_rl("sys", "event=statistics_not_published reason=out_of_memory");
	}
}

static void *sys_main(void *arg)
{
	sys_stats *s = arg;
	(void)pthread_setname_np(pthread_self(), "nmq:sys");
	pthread_mutex_lock(&s->mtx);
	uint64_t next = 0;
	while (!s->stop) {
		if (s->changed) {
			s->changed = false;
			next = s->interval_s > 0 ? mono_ms() + (uint64_t)s->interval_s * 1000 : 0;
		}
		if (next == 0) {
			pthread_cond_wait(&s->cv, &s->mtx);
			continue;
		}
		uint64_t now = mono_ms();
		if (now < next) {
			(void)nmq_cond_wait_until(&s->cv, &s->mtx, next);
			continue;
		}
		next += (uint64_t)s->interval_s * 1000;
		if (next <= now) {
			next = now + (uint64_t)s->interval_s * 1000; // late: no burst
		}
		pthread_mutex_unlock(&s->mtx);
		publish_all(s);
		pthread_mutex_lock(&s->mtx);
	}
	pthread_mutex_unlock(&s->mtx);
	return NULL;
}

nmq_err sys_stats_start(nmq_broker *b, nmq_proto *p, uint32_t interval_s, sys_stats **out)
{
	sys_stats *s = calloc(1, sizeof(*s));
	if (s == NULL) {
		log_error("sys", "event=not_started reason=out_of_memory");
		return NMQ_ENOMEM;
	}
	s->b          = b;
	s->p          = p;
	s->interval_s = interval_s;
	s->changed    = true;
	s->start_ms   = mono_ms();
	s->last_ms    = s->start_ms;
	pthread_mutex_init(&s->mtx, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cv, &ca);
	pthread_condattr_destroy(&ca);
	int rv = pthread_create(&s->thr, NULL, sys_main, s);
	if (rv != 0) {
		log_error("sys", "event=not_started reason=\"%s\"", strerror(rv));
		pthread_cond_destroy(&s->cv);
		pthread_mutex_destroy(&s->mtx);
		free(s);
		return NMQ_ENOMEM;
	}
	s->thr_started = true;
	*out           = s;
	return NMQ_OK;
}

void sys_stats_set_interval(sys_stats *s, uint32_t interval_s)
{
	if (s == NULL) {
		return;
	}
	pthread_mutex_lock(&s->mtx);
	if (s->interval_s != interval_s) {
		s->interval_s = interval_s;
		s->changed    = true;
		pthread_cond_signal(&s->cv);
	}
	pthread_mutex_unlock(&s->mtx);
}

void sys_stats_stop(sys_stats *s)
{
	if (s == NULL) {
		return;
	}
	pthread_mutex_lock(&s->mtx);
	s->stop = true;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mtx);
	if (s->thr_started) {
		pthread_join(s->thr, NULL);
	}
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->mtx);
	free(s);
}
