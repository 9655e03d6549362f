// Fills a durable store with persistent sessions and queued messages, for
// the large-store startup measurement (scripts/store-startup.py) and its
// integration test (test_75_store_large.py).
//
// It writes through the broker's own store code (src/store/store.h, the
// operations the broker queues), so the rows are whatever the current
// schema makes of them:
//
//   store_gen DIR SESSIONS MSGS_PER_SESSION [PAYLOAD_BYTES [FANOUT]]
//
// Session i is "gen-<i>" (offline, expiry one year, MQTT 5), subscribed to
// "gen/<i / FANOUT>/#" at QoS 1. Message j of group g (topic "gen/<g>/<j>",
// payload "g<g>-m<j>" padded to PAYLOAD_BYTES) is queued at seq j + 1 for
// each of the FANOUT sessions of group g, as routing would queue one
// message for its FANOUT subscribers (its body is stored once). Defaults:
// 64 bytes, fanout 10. Prints what it wrote and how long it took.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "src/store/store.h"

typedef struct waiter {
	pthread_mutex_t mtx;
	pthread_cond_t  cv;
	bool            done;
	nmq_err         err;
} waiter;

static void wake(void *arg, nmq_err err)
{
	waiter *w = arg;
	pthread_mutex_lock(&w->mtx);
	w->done = true;
	w->err  = err;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mtx);
}

// Waits until everything queued so far has committed.
static int drain(nmq_store *st)
{
	waiter w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, NMQ_OK };
	if (store_sync(st, wake, &w) != NMQ_OK) {
		return -1;
	}
	pthread_mutex_lock(&w.mtx);
	while (!w.done) {
		pthread_cond_wait(&w.cv, &w.mtx);
	}
	pthread_mutex_unlock(&w.mtx);
	return w.err == NMQ_OK ? 0 : -1;
}

// Queues op-returning call e, draining when the store's queue is full.
#define PUT(st, e)                                                                                 \
	do {                                                                                       \
		nmq_err rc_;                                                                       \
		while ((rc_ = (e)) == NMQ_ELIMIT) {                                                \
			if (drain(st) != 0) {                                                      \
				fprintf(stderr, "store_gen: commit failed\n");                     \
				return 1;                                                          \
			}                                                                          \
		}                                                                                  \
		if (rc_ != NMQ_OK) {                                                               \
			fprintf(stderr, "store_gen: %s: %s\n", #e, nmq_strerror(rc_));             \
			return 1;                                                                  \
		}                                                                                  \
	} while (0)

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr,
		    "usage: store_gen DIR SESSIONS MSGS_PER_SESSION [PAYLOAD_BYTES [FANOUT]]\n");
		return 2;
	}
	long sessions = strtol(argv[2], NULL, 10);
	long per      = strtol(argv[3], NULL, 10);
	long bytes    = argc > 4 ? strtol(argv[4], NULL, 10) : 64;
	long fanout   = argc > 5 ? strtol(argv[5], NULL, 10) : 10;
	if (sessions < 1 || per < 0 || bytes < 16 || bytes > 1000000 || fanout < 1) {
		fprintf(stderr, "store_gen: bad arguments\n");
		return 2;
	}
	store_opts o;
	memset(&o, 0, sizeof(o));
	o.dir         = argv[1];
	o.durability  = STORE_DURABLE_OS; // the file is closed (checkpointed) at the end
	o.flush_max   = 20000;
	o.max_queued  = 0;
	o.max_pending = 200000;
	nmq_store *st = NULL;
	char       err[256];
	if (store_open(&st, &o, err, sizeof(err)) != NMQ_OK) {
		fprintf(stderr, "store_gen: %s\n", err);
		return 1;
	}
	double          t0 = now_s();
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t wall = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
	char     cid[32], filter[48], topic[48];
	for (long i = 0; i < sessions; i++) {
		snprintf(cid, sizeof(cid), "gen-%ld", i);
		snprintf(filter, sizeof(filter), "gen/%ld/#", i / fanout);
		store_session rec = {
			.client_id       = cid,
			.expiry_s        = 365u * 24 * 3600,
			.proto_ver       = 5,
			.offline_wall_ms = wall,
		};
		store_sub sub = { .client_id = cid, .filter = filter, .options = 1 };
		PUT(st, store_session_put(st, &rec, NULL, NULL));
		PUT(st, store_sub_put(st, &sub, NULL, NULL));
	}
	long groups = (sessions + fanout - 1) / fanout;
	long rows   = 0;
	for (long j = 0; j < per; j++) {
		for (long g = 0; g < groups; g++) {
			int      tl = snprintf(topic, sizeof(topic), "gen/%ld/%ld", g, j);
			nmq_msg *m  = nmq_msg_alloc(topic, (size_t)tl, 0, (size_t)bytes);
			if (m == NULL) {
				fprintf(stderr, "store_gen: out of memory\n");
				return 1;
			}
			memset(m->payload, '.', (size_t)bytes);
			int pl = snprintf((char *)m->payload, (size_t)bytes, "g%ld-m%ld", g, j);
			m->payload[pl] = '.';
			m->qos         = 1;
			for (long i = g * fanout; i < (g + 1) * fanout && i < sessions; i++) {
				snprintf(cid, sizeof(cid), "gen-%ld", i);
				PUT(st,
				    store_queue_put(st, cid, (uint64_t)j + 1, m, 1, false, NULL, 0,
				        NULL, NULL));
				rows++;
			}
			nmq_msg_release(m);
		}
	}
	if (drain(st) != 0) {
		fprintf(stderr, "store_gen: commit failed\n");
		return 1;
	}
	store_stats ss;
	store_stats_get(st, &ss);
	double t1 = now_s();
	store_close(st);
	printf("store_gen: sessions=%ld queued=%ld groups=%ld payload=%ld commits=%llu "
	       "seconds=%.1f close_seconds=%.1f\n",
	    sessions, rows, groups, bytes, (unsigned long long)ss.commits, t1 - t0, now_s() - t1);
	return ss.failed == 0 ? 0 : 1;
}
