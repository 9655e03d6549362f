// Unit tests of the bridges' offline cache in the durable store
// (src/store/store_bcache.c) on real SQLite files: the rows of "$bridge/"
// client ids go to the cache table (message inline), are read back in
// seq order after a point, deleted by ranges, cancelled out inside a group,
// evicted past max_queued, lost whole with a group killed before its
// commit, and moved there from the queue of a version 1 file at open;
// rows expired while closed go at open, and the bridges with rows are
// listed (decisions/0034).
#include <dirent.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>

#include <cmocka.h>

#include "tmpdir_util.h"

#include "nng/protocol/timer_wheel.h"
#include "src/store/store.h"
#include "src/store/store_bcache.h"

static char tmpdir[256];

static int setup(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/nmq-bcache-XXXXXX");
	assert_non_null(mkdtemp(tmpdir));
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	tmpdir_remove(tmpdir);
	return 0;
}

static uint64_t evicted_seqs[16];
static char     evicted_cid[64];
static int      n_evicted;

static void on_evicted(void *arg, const char *cid, uint64_t seq)
{
	(void)arg;
	if (n_evicted < 16) {
		evicted_seqs[n_evicted] = seq;
	}
	n_evicted++;
	snprintf(evicted_cid, sizeof(evicted_cid), "%s", cid);
}

static nmq_store *open_store(uint64_t max_queued)
{
	store_opts o = {
		.dir        = tmpdir,
		.durability = STORE_DURABLE_OS,
		.flush_max  = 100,
		.max_queued = max_queued,
		.evicted    = on_evicted,
	};
	nmq_store *s = NULL;
	char       err[256];
	assert_int_equal(store_open(&s, &o, err, sizeof(err)), NMQ_OK);
	return s;
}

static nmq_msg *mk_msg(const char *topic, const char *payload)
{
	nmq_msg *m = nmq_msg_alloc(topic, strlen(topic), 0, strlen(payload));
	assert_non_null(m);
	memcpy(m->payload, payload, strlen(payload));
	m->qos = 1;
	return m;
}

static struct {
	pthread_mutex_t mtx;
	pthread_cond_t  cv;
	int             calls, errors;
} W = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0 };

static void on_done(void *arg, nmq_err err)
{
	(void)arg;
	pthread_mutex_lock(&W.mtx);
	W.calls++;
	W.errors += err != NMQ_OK;
	pthread_cond_broadcast(&W.cv);
	pthread_mutex_unlock(&W.mtx);
}

static void sync_store(nmq_store *s)
{
	pthread_mutex_lock(&W.mtx);
	W.calls = W.errors = 0;
	pthread_mutex_unlock(&W.mtx);
	assert_int_equal(store_sync(s, on_done, NULL), NMQ_OK);
	pthread_mutex_lock(&W.mtx);
	while (W.calls < 1) {
		pthread_cond_wait(&W.cv, &W.mtx);
	}
	pthread_mutex_unlock(&W.mtx);
}

// A one-value query on the file through a second connection (committed
// rows only).
static long long query_int(const char *sql)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/nanomq.db", tmpdir);
	sqlite3 *db = NULL;
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	sqlite3_stmt *st = NULL;
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	long long n = -1;
	if (sqlite3_step(st) == SQLITE_ROW) {
		n = sqlite3_column_int64(st, 0);
	}
	sqlite3_finalize(st);
	sqlite3_close(db);
	return n;
}

typedef struct reader {
	int      n;
	uint64_t seqs[64];
	char     payload[64][16];
	uint8_t  state[64];
	uint16_t pid[64];
	uint32_t srv[64];
	int      done;
} reader;

static reader R;

static void on_read(void *arg, const store_qmsg *q)
{
	reader *r = arg;
	if (r->n < 64) {
		r->seqs[r->n]  = q->seq;
		r->state[r->n] = q->state;
		r->pid[r->n]   = q->packet_id;
		r->srv[r->n]   = q->server;
		snprintf(r->payload[r->n], 16, "%.*s", (int)q->msg->payload_len,
		    (const char *)q->msg->payload);
	}
	r->n++;
}

static void on_read_done(void *arg, nmq_err err)
{
	on_done(arg, err);
}

static void read_all(nmq_store *s, const char *cid, uint64_t after, uint32_t max)
{
	memset(&R, 0, sizeof(R));
	pthread_mutex_lock(&W.mtx);
	W.calls = W.errors = 0;
	pthread_mutex_unlock(&W.mtx);
	assert_int_equal(store_queue_read(s, cid, after, max, on_read, on_read_done, &R), NMQ_OK);
	pthread_mutex_lock(&W.mtx);
	while (W.calls < 1) {
		pthread_cond_wait(&W.cv, &W.mtx);
	}
	pthread_mutex_unlock(&W.mtx);
	assert_int_equal(W.errors, 0);
}

static sem_t      gate;
static atomic_int blocked_in_done;

static void on_done_block(void *arg, nmq_err err)
{
	(void)arg;
	(void)err;
	atomic_store(&blocked_in_done, 1);
	sem_wait(&gate);
	atomic_store(&blocked_in_done, 0);
}

// Everything queued while the store thread is held here is one group.
static void block_store_thread(nmq_store *s)
{
	assert_int_equal(store_sync(s, on_done_block, NULL), NMQ_OK);
	while (!atomic_load(&blocked_in_done)) {
		usleep(1000);
	}
}

// Puts go to the cache table (no message row), are read in seq order after
// a point, deleted by ranges, keep their state, and survive a reopen.
static void test_put_read_ranges(void **state)
{
	(void)state;
	nmq_store *s = open_store(0);
	nmq_msg   *m[10];
	for (int i = 0; i < 10; i++) {
		char p[8];
		snprintf(p, sizeof(p), "m%d", i + 1);
		m[i] = mk_msg("t/b", p);
		assert_int_equal(store_queue_put(s, "$bridge/a", (uint64_t)i + 1, m[i], 1, false,
		                     NULL, 0, NULL, NULL),
		    NMQ_OK);
	}
	for (uint64_t i = 1; i <= 3; i++) {
		store_queue_put(s, "$bridge/b", i, m[0], 1, false, NULL, 0, NULL, NULL);
	}
	// A session's row of the same message still goes to the queue.
	store_queue_put(s, "sess", 1, m[0], 1, false, NULL, 0, NULL, NULL);
	sync_store(s);
	assert_int_equal(query_int("SELECT COUNT(*) FROM bcache"), 13);
	assert_int_equal(query_int("SELECT COUNT(*) FROM queue"), 1);
	assert_int_equal(query_int("SELECT COUNT(*) FROM msgs"), 1);
	assert_int_equal(query_int("SELECT COUNT(*) FROM bcache_ids"), 2);
	store_stats st;
	store_stats_get(s, &st);
	assert_int_equal(st.queued_rows, 14);

	read_all(s, "$bridge/a", 3, 4);
	assert_int_equal(R.n, 4);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(R.seqs[i], 4 + i);
	}
	assert_string_equal(R.payload[0], "m4");

	// A QoS 2 state recorded; runs [1, 5] and [7, 7] deleted.
	store_queue_state(s, "$bridge/a", 6, STORE_Q_SENT, 77, NULL, NULL);
	uint64_t rng[] = { 1, 5, 7, 7 };
	assert_int_equal(store_queue_del_ranges(s, "$bridge/a", rng, 2, NULL, NULL), NMQ_OK);
	// A bridge that never stored anything: nothing to delete, no error.
	uint64_t none[] = { 1, 9 };
	assert_int_equal(store_queue_del_ranges(s, "$bridge/zz", none, 1, NULL, NULL), NMQ_OK);
	sync_store(s);
	assert_int_equal(W.errors, 0);
	read_all(s, "$bridge/a", 0, 0);
	assert_int_equal(R.n, 4);
	assert_int_equal(R.seqs[0], 6);
	assert_int_equal(R.seqs[1], 8);
	assert_int_equal(R.seqs[3], 10);
	assert_int_equal(R.state[0], STORE_Q_SENT);
	assert_int_equal(R.pid[0], 77);
	store_stats_get(s, &st);
	assert_int_equal(st.queued_rows, 8);
	store_close(s);

	s = open_store(0);
	store_stats_get(s, &st);
	assert_int_equal(st.queued_rows, 8);
	read_all(s, "$bridge/a", 6, 0);
	assert_int_equal(R.n, 3);
	assert_string_equal(R.payload[2], "m10");
	read_all(s, "$bridge/b", 0, 0);
	assert_int_equal(R.n, 3);
	// The old per-seq delete still works on the cache.
	uint64_t seqs[] = { 1, 3 };
	store_queue_del_many(s, "$bridge/b", seqs, 2, NULL, NULL);
	read_all(s, "$bridge/b", 0, 0);
	assert_int_equal(R.n, 1);
	assert_int_equal(R.seqs[0], 2);
	store_close(s);
	for (int i = 0; i < 10; i++) {
		nmq_msg_release(m[i]);
	}
}

// In one group: a put whose range delete follows writes nothing, a put
// in a store_batch with sessions' rows of the same message goes to the
// cache, and a state update of a deleted row is dropped.
static void test_cancel_out(void **state)
{
	(void)state;
	nmq_store *s = open_store(0);
	nmq_msg   *m = mk_msg("t", "x");
	store_queue_put(s, "$bridge/a", 1, m, 1, false, NULL, 0, NULL, NULL);
	sync_store(s);
	store_stats before;
	store_stats_get(s, &before);
	sem_init(&gate, 0, 0);
	block_store_thread(s);
	store_queue_state(s, "$bridge/a", 1, STORE_Q_SENT, 5, NULL, NULL);
	for (uint64_t i = 2; i <= 5; i++) {
		store_queue_put(s, "$bridge/a", i, m, 1, false, NULL, 0, NULL, NULL);
	}
	uint64_t rng[] = { 1, 4 };
	store_queue_del_ranges(s, "$bridge/a", rng, 1, NULL, NULL);
	store_batch_begin(s);
	store_queue_put(s, "s1", 1, m, 1, false, NULL, 0, NULL, NULL);
	store_queue_put(s, "$bridge/a", 6, m, 1, false, NULL, 0, NULL, NULL);
	store_queue_put(s, "s2", 1, m, 1, false, NULL, 0, NULL, NULL);
	store_batch_end(s);
	sem_post(&gate);
	sync_store(s);
	assert_int_equal(W.errors, 0);
	store_stats after;
	store_stats_get(s, &after);
	// The state update and the puts of 2, 3 and 4 were not written.
	assert_int_equal(after.coalesced - before.coalesced, 4);
	assert_int_equal(query_int("SELECT group_concat(seq) = '5,6' FROM"
	                           " (SELECT seq FROM bcache ORDER BY seq)"),
	    1);
	assert_int_equal(query_int("SELECT COUNT(*) FROM queue"), 2);
	assert_int_equal(query_int("SELECT refs FROM msgs"), 2);
	assert_int_equal(after.queued_rows, 4);
	store_close(s);
	sem_destroy(&gate);
	nmq_msg_release(m);
}

// Past max_queued, the bridge's oldest rows are evicted and reported with
// its client id.
static void test_eviction(void **state)
{
	(void)state;
	nmq_store *s = open_store(5);
	nmq_msg   *m = mk_msg("t", "x");
	n_evicted    = 0;
	for (uint64_t i = 1; i <= 8; i++) {
		store_queue_put(s, "$bridge/e", i, m, 1, false, NULL, 0, NULL, NULL);
	}
	sync_store(s);
	assert_int_equal(n_evicted, 3);
	assert_int_equal(evicted_seqs[0], 1);
	assert_int_equal(evicted_seqs[2], 3);
	assert_string_equal(evicted_cid, "$bridge/e");
	store_stats st;
	store_stats_get(s, &st);
	assert_int_equal(st.evicted, 3);
	assert_int_equal(st.queued_rows, 5);
	assert_int_equal(query_int("SELECT MIN(seq) FROM bcache"), 4);
	store_close(s);
	nmq_msg_release(m);
}

// A row the bridge is done with (acked, its delete still batched) is
// taken by an eviction before the rows it would send, without being
// counted or reported as evicted.
static uint64_t gone_upto;

static bool row_gone(void *arg, const char *cid, uint64_t seq)
{
	(void)arg;
	return strcmp(cid, "$bridge/e") == 0 && seq <= gone_upto;
}

static void test_eviction_skips_rows_done_with(void **state)
{
	(void)state;
	nmq_store *s = open_store(5);
	nmq_msg   *m = mk_msg("t", "x");
	n_evicted    = 0;
	gone_upto    = 2;
	store_bcache_set_gone(s, row_gone, NULL);
	for (uint64_t i = 1; i <= 5; i++) {
		store_queue_put(s, "$bridge/e", i, m, 1, false, NULL, 0, NULL, NULL);
	}
	sync_store(s);
	for (uint64_t i = 6; i <= 7; i++) { // two over: rows 1 and 2 go, uncounted
		store_queue_put(s, "$bridge/e", i, m, 1, false, NULL, 0, NULL, NULL);
	}
	sync_store(s);
	assert_int_equal(n_evicted, 0);
	store_stats st;
	store_stats_get(s, &st);
	assert_int_equal(st.evicted, 0);
	assert_int_equal(st.queued_rows, 5);
	assert_int_equal(query_int("SELECT MIN(seq) FROM bcache"), 3);
	// Their deletes, when they come, find nothing; a row still wanted is
	// evicted and counted as before.
	uint64_t r[2] = { 1, 2 };
	store_queue_del_ranges(s, "$bridge/e", r, 1, NULL, NULL);
	store_queue_put(s, "$bridge/e", 8, m, 1, false, NULL, 0, NULL, NULL);
	sync_store(s);
	assert_int_equal(n_evicted, 1);
	assert_int_equal(evicted_seqs[0], 3);
	store_stats_get(s, &st);
	assert_int_equal(st.evicted, 1);
	assert_int_equal(st.queued_rows, 5);
	store_close(s);
	nmq_msg_release(m);
}

// Rows whose expiry passes while the store runs are deleted by its sweep,
// the idle store too, counted and reported; rows in flight and rows
// without expiry stay.
static uint64_t        exp_seqs[16];
static int             n_exp;
static pthread_mutex_t exp_mtx = PTHREAD_MUTEX_INITIALIZER;

static void on_expired(void *arg, const char *cid, uint64_t seq)
{
	(void)arg;
	assert_string_equal(cid, "$bridge/x");
	pthread_mutex_lock(&exp_mtx);
	if (n_exp < 16) {
		exp_seqs[n_exp] = seq;
	}
	n_exp++;
	pthread_mutex_unlock(&exp_mtx);
}

// Waits (at most 3 s) until n rows were reported expired.
static void wait_expired(int n)
{
	for (int i = 0; i < 300; i++) {
		pthread_mutex_lock(&exp_mtx);
		int got = n_exp;
		pthread_mutex_unlock(&exp_mtx);
		if (got >= n) {
			return;
		}
		usleep(10000);
	}
}

static void test_expired_while_running(void **state)
{
	(void)state;
	nmq_store *s = open_store(0);
	store_bcache_set_expired(s, on_expired, NULL);
	n_exp                 = 0;
	nmq_msg *keep         = mk_msg("t", "keep");
	nmq_msg *soon         = mk_msg("t", "soon");
	soon->expiry_interval = 1;
	soon->expiry_at_ms    = nmq_clock_ms() + 200;
	store_queue_put(s, "$bridge/x", 1, soon, 1, false, NULL, 0, NULL, NULL);
	store_queue_put(s, "$bridge/x", 2, keep, 1, false, NULL, 0, NULL, NULL);
	store_queue_put(s, "$bridge/x", 3, soon, 2, false, NULL, 0, NULL, NULL);
	store_queue_put(s, "$bridge/x", 4, soon, 1, false, NULL, 0, NULL, NULL);
	store_queue_state(s, "$bridge/x", 3, STORE_Q_SENT, 7, NULL, NULL); // in flight
	sync_store(s);
	// Nothing else happens: the idle store wakes for it.
	wait_expired(2);
	usleep(50000);
	pthread_mutex_lock(&exp_mtx);
	assert_int_equal(n_exp, 2);
	assert_int_equal(exp_seqs[0] + exp_seqs[1], 5); // 1 and 4
	pthread_mutex_unlock(&exp_mtx);
	store_stats st;
	store_stats_get(s, &st);
	assert_int_equal(st.expired, 2);
	assert_int_equal(st.queued_rows, 2);
	assert_int_equal(query_int("SELECT COUNT(*) FROM bcache"), 2);
	assert_int_equal(query_int("SELECT SUM(seq) FROM bcache"), 5); // 2 and 3
	store_close(s);
	nmq_msg_release(keep);
	nmq_msg_release(soon);
}

// A read of max rows counts the rows it gives, not the expired ones it
// passes (deleted and reported): a bridge takes a short read for the end
// of its cache, and forgot the rows behind an expired one. Between two of
// the store's sweeps (a second apart), so that the read meets the expired
// row itself.
static void test_read_passes_expired(void **state)
{
	(void)state;
	nmq_store *s = open_store(0);
	store_bcache_set_expired(s, on_expired, NULL);
	n_exp              = 0;
	nmq_msg *a         = mk_msg("t", "a");
	nmq_msg *b         = mk_msg("t", "b");
	nmq_msg *c         = mk_msg("t", "c");
	nmq_msg *d         = mk_msg("t", "d");
	a->expiry_interval = 1;
	a->expiry_at_ms    = nmq_clock_ms() + 100;
	store_queue_put(s, "$bridge/x", 1, a, 1, false, NULL, 0, NULL, NULL);
	sync_store(s);
	wait_expired(1); // the sweep takes a: the next is a second away
	b->expiry_interval = 1;
	b->expiry_at_ms    = nmq_clock_ms() + 20;
	store_queue_put(s, "$bridge/x", 2, b, 1, false, NULL, 0, NULL, NULL);
	store_queue_put(s, "$bridge/x", 3, c, 1, false, NULL, 0, NULL, NULL);
	store_queue_put(s, "$bridge/x", 4, d, 1, false, NULL, 0, NULL, NULL);
	sync_store(s);
	usleep(60000); // b has expired
	read_all(s, "$bridge/x", 0, 1);
	assert_int_equal(R.n, 1);
	assert_int_equal(R.seqs[0], 3);
	assert_string_equal(R.payload[0], "c");
	read_all(s, "$bridge/x", 3, 5);
	assert_int_equal(R.n, 1);
	assert_int_equal(R.seqs[0], 4);
	pthread_mutex_lock(&exp_mtx);
	assert_int_equal(n_exp, 2); // a by the sweep, b by the sweep or the read
	pthread_mutex_unlock(&exp_mtx);
	assert_int_equal(query_int("SELECT COUNT(*) FROM bcache"), 2);
	store_close(s);
	nmq_msg_release(a);
	nmq_msg_release(b);
	nmq_msg_release(c);
	nmq_msg_release(d);
}

static struct {
	int      n;
	char     cid[8][32];
	uint64_t rows[8];
	uint32_t ids[8], filters[8];
} L;

static void on_list(void *arg, const char *cid, uint64_t rows, uint32_t ids, uint32_t filters)
{
	(void)arg;
	if (L.n < 8) {
		snprintf(L.cid[L.n], sizeof(L.cid[0]), "%s", cid);
		L.rows[L.n]    = rows;
		L.ids[L.n]     = ids;
		L.filters[L.n] = filters;
	}
	L.n++;
}

static void list_all(nmq_store *s)
{
	memset(&L, 0, sizeof(L));
	pthread_mutex_lock(&W.mtx);
	W.calls = W.errors = 0;
	pthread_mutex_unlock(&W.mtx);
	assert_int_equal(store_bcache_list(s, on_list, on_done, NULL), NMQ_OK);
	pthread_mutex_lock(&W.mtx);
	while (W.calls < 1) {
		pthread_cond_wait(&W.cv, &W.mtx);
	}
	pthread_mutex_unlock(&W.mtx);
	assert_int_equal(W.errors, 0);
}

// Rows whose expiry passed while the store was closed are deleted at open
// (counted in expired, not in queued_rows); the listing gives each bridge
// with rows and its count; a bridge's rows go with its session delete.
static void test_expired_at_open_and_list(void **state)
{
	(void)state;
	nmq_store *s         = open_store(0);
	nmq_msg   *keep      = mk_msg("t", "keep");
	nmq_msg   *exp       = mk_msg("t", "gone");
	exp->expiry_interval = 1;
	// Expires once the store is closed (a running store sweeps it).
	exp->expiry_at_ms      = nmq_clock_ms() + 500;
	nmq_msg *later         = mk_msg("t", "later");
	later->expiry_interval = 3600;
	later->expiry_at_ms    = nmq_clock_ms() + 3600 * 1000;
	store_queue_put(s, "$bridge/a", 1, exp, 1, false, NULL, 0, NULL, NULL);
	store_queue_put(s, "$bridge/a", 2, keep, 1, false, NULL, 0, NULL, NULL);
	store_queue_put(s, "$bridge/a", 3, exp, 1, false, NULL, 0, NULL, NULL);
	store_queue_put(s, "$bridge/a", 4, later, 1, false, NULL, 0, NULL, NULL);
	store_queue_put(s, "$bridge/b", 1, exp, 1, false, NULL, 0, NULL, NULL);
	store_queue_put(s, "$bridge/b", 2, keep, 1, false, NULL, 0, NULL, NULL);
	sync_store(s);
	store_close(s);
	usleep(600000); // the expiry time is in the past by now
	s = open_store(0);
	store_stats st;
	store_stats_get(s, &st);
	assert_int_equal(st.expired, 3);
	assert_int_equal(st.queued_rows, 3);
	assert_int_equal(query_int("SELECT COUNT(*) FROM bcache"), 3);
	list_all(s);
	assert_int_equal(L.n, 2);
	assert_string_equal(L.cid[0], "$bridge/a");
	assert_int_equal(L.rows[0], 2);
	assert_string_equal(L.cid[1], "$bridge/b");
	assert_int_equal(L.rows[1], 1);
	read_all(s, "$bridge/a", 0, 0);
	assert_int_equal(R.n, 2);
	assert_string_equal(R.payload[0], "keep");
	assert_string_equal(R.payload[1], "later");
	assert_int_equal(store_session_del(s, "$bridge/b", NULL, NULL), NMQ_OK);
	list_all(s);
	assert_int_equal(L.n, 1);
	assert_string_equal(L.cid[0], "$bridge/a");
	store_stats_get(s, &st);
	assert_int_equal(st.queued_rows, 2);
	// A bridge with inbound QoS 2 ids or mirrored filters only is listed
	// too (and a's ids counted with its rows); its session delete drops
	// them; a session's rows are not a bridge's.
	store_sub sub = { .client_id = "$bridge/c", .filter = "x/#", .options = 1 };
	assert_int_equal(store_sub_put(s, &sub, NULL, NULL), NMQ_OK);
	sub.filter = "y/#";
	assert_int_equal(store_sub_put(s, &sub, NULL, NULL), NMQ_OK);
	assert_int_equal(store_rel_put(s, "$bridge/c", 7, NULL, NULL), NMQ_OK);
	assert_int_equal(store_rel_put(s, "$bridge/d", 9, NULL, NULL), NMQ_OK);
	assert_int_equal(store_rel_put(s, "$bridge/a", 9, NULL, NULL), NMQ_OK);
	sub.client_id = "sess";
	assert_int_equal(store_sub_put(s, &sub, NULL, NULL), NMQ_OK);
	assert_int_equal(store_rel_put(s, "sess", 3, NULL, NULL), NMQ_OK);
	list_all(s);
	assert_int_equal(L.n, 3);
	assert_string_equal(L.cid[0], "$bridge/a");
	assert_int_equal(L.rows[0], 2);
	assert_int_equal(L.ids[0], 1);
	assert_int_equal(L.filters[0], 0);
	assert_string_equal(L.cid[1], "$bridge/c");
	assert_int_equal(L.rows[1], 0);
	assert_int_equal(L.ids[1], 1);
	assert_int_equal(L.filters[1], 2);
	assert_string_equal(L.cid[2], "$bridge/d");
	assert_int_equal(L.rows[2], 0);
	assert_int_equal(L.ids[2], 1);
	assert_int_equal(store_session_del(s, "$bridge/c", NULL, NULL), NMQ_OK);
	assert_int_equal(store_session_del(s, "$bridge/d", NULL, NULL), NMQ_OK);
	list_all(s);
	assert_int_equal(L.n, 1);
	assert_string_equal(L.cid[0], "$bridge/a");
	sync_store(s);
	assert_int_equal(query_int("SELECT COUNT(*) FROM subs WHERE cid LIKE '$bridge/%'"), 0);
	assert_int_equal(
	    query_int("SELECT COUNT(*) FROM rel WHERE cid != 'sess' AND cid != '$bridge/a'"), 0);
	store_close(s);
	nmq_msg_release(keep);
	nmq_msg_release(exp);
	nmq_msg_release(later);
}

// kill -9 while a group of deletes and a put waits for its commit: the
// committed rows are all there, nothing of the group is.
static void on_done_forever(void *arg, nmq_err err)
{
	(void)arg;
	(void)err;
	for (;;) {
		pause();
	}
}

static void test_crash_before_commit(void **state)
{
	(void)state;
	int fds[2];
	assert_int_equal(pipe(fds), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		store_opts o
		    = { .dir = tmpdir, .durability = STORE_DURABLE_FSYNC, .flush_max = 100 };
		nmq_store *s = NULL;
		char       err[256];
		if (store_open(&s, &o, err, sizeof(err)) != NMQ_OK) {
			_exit(2);
		}
		nmq_msg *m = mk_msg("t", "kept");
		for (uint64_t i = 1; i <= 3; i++) {
			store_queue_put(s, "$bridge/k", i, m, 1, false, NULL, 0, NULL, NULL);
		}
		sync_store(s);
		store_sync(s, on_done_forever, NULL);
		store_stats st;
		do {
			usleep(1000);
			store_stats_get(s, &st);
		} while (st.pending != 0);
		uint64_t rng[] = { 1, 3 };
		store_queue_del_ranges(s, "$bridge/k", rng, 1, NULL, NULL);
		store_queue_put(s, "$bridge/k", 4, m, 1, false, NULL, 0, NULL, NULL);
		char c = 'x';
		if (write(fds[1], &c, 1) != 1) {
			_exit(3);
		}
		for (;;) {
			pause();
		}
	}
	close(fds[1]);
	char c;
	assert_int_equal(read(fds[0], &c, 1), 1);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	close(fds[0]);
	nmq_store *s = open_store(0);
	read_all(s, "$bridge/k", 0, 0);
	assert_int_equal(R.n, 3);
	assert_int_equal(R.seqs[0], 1);
	assert_int_equal(R.seqs[2], 3);
	assert_string_equal(R.payload[1], "kept");
	store_close(s);
}

static void exec_sql(const char *sql)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/nanomq.db", tmpdir);
	sqlite3 *db = NULL;
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	char *e = NULL;
	if (sqlite3_exec(db, sql, NULL, NULL, &e) != SQLITE_OK) {
		fail_msg("%s: %s", sql, e);
	}
	sqlite3_close(db);
}

// A version 1 file (bridges' rows in queue + msgs, a message shared with
// a session): at open, the bridges' rows move to the cache table in seq
// order with their state, the session's stay, the message rows lose the
// bridges' references.
static void test_migration_v1(void **state)
{
	(void)state;
	nmq_store *s = open_store(0);
	nmq_msg   *m = mk_msg("t", "shared");
	store_queue_put(s, "sess", 1, m, 1, false, NULL, 0, NULL, NULL);
	sync_store(s);
	store_close(s);
	nmq_msg_release(m);
	// What version 1 wrote for two bridges (ids and order as it did).
	exec_sql("DROP TABLE bcache; DROP TABLE bcache_ids;"
	         "INSERT INTO msgs(id, refs, topic, qos, retain, expiry_interval, expiry_wall_ms,"
	         " props, payload) VALUES (2, 1, 'b/x', 1, 0, 0, 0, NULL, x'6f6e65'),"
	         " (3, 1, 'b/y', 2, 1, 0, 0, NULL, x'74776f');"
	         "UPDATE msgs SET refs = 2 WHERE id = 1;"
	         "INSERT INTO queue(cid, seq, msg_id, qos, retain, state, packet_id, sub_ids)"
	         " VALUES ('$bridge/x', 7, 3, 2, 1, 1, 9, NULL),"
	         " ('$bridge/x', 5, 2, 1, 0, 0, 0, NULL),"
	         " ('$bridge/y', 1, 1, 1, 0, 0, 0, NULL);"
	         "PRAGMA user_version = 1;");
	// A migration that cannot run (another process holds the write lock
	// past the busy timeout) refuses to open and leaves the file as it is,
	// not moved aside: the version 1 store is still good.
	char path[512];
	snprintf(path, sizeof(path), "%s/nanomq.db", tmpdir);
	sqlite3 *locker = NULL;
	assert_int_equal(sqlite3_open(path, &locker), SQLITE_OK);
	assert_int_equal(sqlite3_exec(locker, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
	store_opts o = { .dir = tmpdir, .durability = STORE_DURABLE_OS, .flush_max = 100 };
	char       err[512];
	s = NULL;
	assert_int_not_equal(store_open(&s, &o, err, sizeof(err)), NMQ_OK);
	assert_null(s);
	assert_non_null(strstr(err, "could not be migrated"));
	assert_int_equal(sqlite3_exec(locker, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(locker);
	assert_int_equal(query_int("PRAGMA user_version"), 1);
	assert_int_equal(query_int("SELECT COUNT(*) FROM queue"), 4);
	DIR *d     = opendir(tmpdir);
	int  files = 0;
	for (struct dirent *de; d != NULL && (de = readdir(d)) != NULL;) {
		files += strstr(de->d_name, ".damaged-") != NULL;
	}
	if (d != NULL) {
		closedir(d);
	}
	assert_int_equal(files, 0); // nothing moved aside
	s = open_store(0);
	store_stats st;
	store_stats_get(s, &st);
	assert_false(st.recovered);
	assert_int_equal(st.queued_rows, 4);
	read_all(s, "$bridge/x", 0, 0);
	assert_int_equal(R.n, 2);
	assert_int_equal(R.seqs[0], 5);
	assert_string_equal(R.payload[0], "one");
	assert_int_equal(R.seqs[1], 7);
	assert_string_equal(R.payload[1], "two");
	assert_int_equal(R.state[1], STORE_Q_SENT);
	assert_int_equal(R.pid[1], 9);
	read_all(s, "$bridge/y", 0, 0);
	assert_int_equal(R.n, 1);
	assert_string_equal(R.payload[0], "shared");
	read_all(s, "sess", 0, 0);
	assert_int_equal(R.n, 1);
	store_close(s);
	assert_int_equal(query_int("PRAGMA user_version"), 2);
	assert_int_equal(query_int("SELECT COUNT(*) FROM queue"), 1);
	assert_int_equal(query_int("SELECT COUNT(*) FROM msgs"), 1);
	assert_int_equal(query_int("SELECT refs FROM msgs WHERE id = 1"), 1);
	assert_int_equal(query_int("SELECT COUNT(*) FROM bcache"), 3);
}

// The server of a RELEASED state (store_queue_state_srv) is kept with it
// in the row's packet_id, above the packet id: read back as it was
// written, also when folded into its put in one group; a broker that
// does not know it (32-bit read, 16 bits kept) reads the packet id right;
// a row written without it (by an older broker) reads server 0.
static void test_state_server(void **state)
{
	(void)state;
	nmq_store *s = open_store(0);
	nmq_msg   *m = mk_msg("t", "x");
	for (uint64_t i = 1; i <= 3; i++) {
		store_queue_put(s, "$bridge/a", i, m, 2, false, NULL, 0, NULL, NULL);
	}
	sync_store(s);
	store_queue_state_srv(s, "$bridge/a", 1, STORE_Q_RELEASED, 65532, 0xfedcba98u, NULL, NULL);
	store_queue_state(s, "$bridge/a", 2, STORE_Q_SENT, 9, NULL, NULL);
	sem_init(&gate, 0, 0);
	block_store_thread(s);
	store_queue_put(s, "$bridge/a", 4, m, 2, false, NULL, 0, NULL, NULL);
	store_queue_state_srv(s, "$bridge/a", 4, STORE_Q_RELEASED, 12, 7, NULL, NULL);
	sem_post(&gate);
	sync_store(s);
	store_close(s);
	// As an older broker wrote a RELEASED row.
	exec_sql("UPDATE bcache SET state = 2, packet_id = 5 WHERE seq = 3");
	long long raw = query_int("SELECT packet_id FROM bcache WHERE seq = 1");
	assert_int_equal((uint16_t)(uint32_t)raw, 65532);

	s = open_store(0);
	read_all(s, "$bridge/a", 0, 0);
	assert_int_equal(R.n, 4);
	assert_int_equal(R.state[0], STORE_Q_RELEASED);
	assert_int_equal(R.pid[0], 65532);
	assert_int_equal(R.srv[0], 0xfedcba98u);
	assert_int_equal(R.state[1], STORE_Q_SENT);
	assert_int_equal(R.pid[1], 9);
	assert_int_equal(R.srv[1], 0);
	assert_int_equal(R.state[2], STORE_Q_RELEASED);
	assert_int_equal(R.pid[2], 5);
	assert_int_equal(R.srv[2], 0);
	assert_int_equal(R.state[3], STORE_Q_RELEASED);
	assert_int_equal(R.pid[3], 12);
	assert_int_equal(R.srv[3], 7);
	store_close(s);
	nmq_msg_release(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_put_read_ranges, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cancel_out, setup, teardown),
		cmocka_unit_test_setup_teardown(test_eviction, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_eviction_skips_rows_done_with, setup, teardown),
		cmocka_unit_test_setup_teardown(test_expired_while_running, setup, teardown),
		cmocka_unit_test_setup_teardown(test_read_passes_expired, setup, teardown),
		cmocka_unit_test_setup_teardown(test_expired_at_open_and_list, setup, teardown),
		cmocka_unit_test_setup_teardown(test_crash_before_commit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_migration_v1, setup, teardown),
		cmocka_unit_test_setup_teardown(test_state_server, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
