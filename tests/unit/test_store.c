// Unit tests of the durable store (src/store) on real SQLite files in
// temporary directories: round trips, group-commit completions, reference
// counting of shared message rows, eviction, expiry at load, lazy queue
// reads, every kind of bad file, and kill -9 of a writer at random moments.
#include <dirent.h>
#include <fcntl.h>
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>

#include <cmocka.h>

#include "tmpdir_util.h"

#include "nng/protocol/timer_wheel.h"
#include "src/store/store.h"

static char tmpdir[256];

// Messages for offline sessions as queue rows rather than segments
// (store_oseg.c): for the tests that read the queue rows of such puts by
// SQL (setup_rows).
static bool rows_only;

static int setup(void **state)
{
	rows_only = false;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/nmq-store-XXXXXX");
	assert_non_null(mkdtemp(tmpdir));
	return 0;
}

static int setup_rows(void **state)
{
	int r     = setup(state);
	rows_only = true;
	return r;
}

static int teardown(void **state)
{
	tmpdir_remove(tmpdir);
	return 0;
}

static nmq_store *open_store(uint64_t max_queued)
{
	store_opts o = {
		.dir         = tmpdir,
		.durability  = STORE_DURABLE_OS,
		.flush_max   = 100,
		.max_queued  = max_queued,
		.no_segments = rows_only,
	};
	nmq_store *s = NULL;
	char       err[256];
	assert_int_equal(store_open(&s, &o, err, sizeof(err)), NMQ_OK);
	return s;
}

static nmq_msg *mk_msg(const char *topic, const char *payload, uint8_t qos, const char *props)
{
	size_t   pl = props ? strlen(props) : 0;
	nmq_msg *m  = nmq_msg_alloc(topic, strlen(topic), pl, strlen(payload));
	assert_non_null(m);
	if (pl > 0) {
		memcpy(m->props, props, pl);
	}
	memcpy(m->payload, payload, strlen(payload));
	m->qos = qos;
	return m;
}

// A completion that records its result and counts calls.
typedef struct waiter {
	pthread_mutex_t mtx;
	pthread_cond_t  cv;
	int             calls;
	int             errors;
	int             order[64];
} waiter;

static waiter W = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, { 0 } };

static void on_done(void *arg, nmq_err err)
{
	pthread_mutex_lock(&W.mtx);
	if (W.calls < 64) {
		W.order[W.calls] = (int)(intptr_t)arg;
	}
	W.calls++;
	W.errors += err != NMQ_OK;
	pthread_cond_broadcast(&W.cv);
	pthread_mutex_unlock(&W.mtx);
}

static void waiter_reset(void)
{
	pthread_mutex_lock(&W.mtx);
	W.calls  = 0;
	W.errors = 0;
	pthread_mutex_unlock(&W.mtx);
}

static void wait_calls(int n)
{
	pthread_mutex_lock(&W.mtx);
	while (W.calls < n) {
		pthread_cond_wait(&W.cv, &W.mtx);
	}
	pthread_mutex_unlock(&W.mtx);
}

static void sync_store(nmq_store *s)
{
	waiter_reset();
	assert_int_equal(store_sync(s, on_done, NULL), NMQ_OK);
	wait_calls(1);
}

// Counts rows of a table through a second connection, as a reader that
// did not take part would see them (so only committed rows count).
static long long count_rows(const char *table)
{
	char path[512], sql[128];
	snprintf(path, sizeof(path), "%s/nanomq.db", tmpdir);
	snprintf(sql, sizeof(sql), "SELECT COUNT(*) FROM %s", table);
	sqlite3 *db = NULL;
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	sqlite3_stmt *st = NULL;
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	long long n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return n;
}

// What store_load handed back.
typedef struct loaded {
	int      sessions, subs, rels, qmsgs, retained;
	char     sess_cid[8][32];
	char     sess_user[8][32];
	uint32_t sess_expiry[8];
	uint64_t sess_max_seq[8];
	uint64_t sess_offline[8];
	int      wills;
	char     will_cid[8][32];
	char     will_payload[8][32];
	char     will_topic[8][32];
	char     sub_filter[8][32];
	uint8_t  sub_opts[8];
	uint32_t sub_id[8];
	uint16_t rel_pid[8];
	char     q_cid[32][32];
	uint64_t q_seq[32];
	char     q_payload[32][32];
	uint8_t  q_state[32];
	uint16_t q_pid[32];
	uint32_t q_subid[32];
	uint32_t q_nsub[32];
	uint32_t q_subs[32][8];
	nmq_msg *q_msg[32];
	char     ret_topic[8][32];
	char     ret_payload[8][32];
} loaded;

static void on_session(void *arg, const store_session *r)
{
	loaded *l = arg;
	int     i = l->sessions++;
	snprintf(l->sess_cid[i], 32, "%s", r->client_id);
	snprintf(l->sess_user[i], 32, "%s", r->username ? r->username : "(none)");
	l->sess_expiry[i]  = r->expiry_s;
	l->sess_max_seq[i] = r->queue_max_seq;
	l->sess_offline[i] = r->offline_wall_ms;
	snprintf(l->will_topic[i], 32, "%s", r->will_msg ? r->will_msg->topic : "");
}

static void on_sub(void *arg, const store_sub *sub)
{
	loaded *l = arg;
	int     i = l->subs++;
	snprintf(l->sub_filter[i], 32, "%s", sub->filter);
	l->sub_opts[i] = sub->options;
	l->sub_id[i]   = sub->sub_id;
}

static void on_rel(void *arg, const char *cid, uint16_t pid)
{
	loaded *l             = arg;
	l->rel_pid[l->rels++] = pid;
}

static void on_qmsg(void *arg, const store_qmsg *q)
{
	loaded *l = arg;
	int     i = l->qmsgs++;
	snprintf(l->q_cid[i], 32, "%s", q->client_id);
	l->q_seq[i] = q->seq;
	snprintf(l->q_payload[i], 32, "%.*s", (int)q->msg->payload_len, (char *)q->msg->payload);
	l->q_state[i] = q->state;
	l->q_pid[i]   = q->packet_id;
	l->q_subid[i] = q->n_sub_ids ? q->sub_ids[0] : 0;
	l->q_nsub[i]  = q->n_sub_ids;
	for (uint32_t k = 0; k < q->n_sub_ids && k < 8; k++) {
		l->q_subs[i][k] = q->sub_ids[k];
	}
	nmq_msg_hold(q->msg);
	l->q_msg[i] = q->msg;
}

static void on_retained(void *arg, nmq_msg *m)
{
	loaded *l = arg;
	int     i = l->retained++;
	snprintf(l->ret_topic[i], 32, "%s", m->topic);
	snprintf(l->ret_payload[i], 32, "%.*s", (int)m->payload_len, (char *)m->payload);
}

static const store_load_ops load_all
    = { on_session, on_sub, on_rel, on_qmsg, on_retained, false, NULL };

static void loaded_free(loaded *l)
{
	for (int i = 0; i < l->qmsgs; i++) {
		nmq_msg_release(l->q_msg[i]);
	}
}

// Everything a persistent session has survives a close and reopen; a
// message queued for two sessions is one row and one allocation.
static void test_round_trip(void **state)
{
	nmq_store *s    = open_store(0);
	nmq_msg   *will = mk_msg("will/a", "gone", 1, NULL);
	nmq_msg   *m1   = mk_msg("t/1", "one", 1, "\x01\x01");
	nmq_msg   *m2   = mk_msg("t/2", "two", 2, NULL);
	nmq_msg   *ret  = mk_msg("r/x", "kept", 1, NULL);
	ret->retain     = true;
	uint32_t ids[]  = { 7 };

	store_session a = { .client_id = "a",
		.username              = "alice",
		.expiry_s              = 3600,
		.proto_ver             = 5,
		.will_msg              = will,
		.will_delay_s          = 3 };
	store_session b = { .client_id = "b", .expiry_s = UINT32_MAX, .proto_ver = 4 };
	assert_int_equal(store_session_put(s, &a, NULL, NULL), NMQ_OK);
	assert_int_equal(store_session_put(s, &b, NULL, NULL), NMQ_OK);
	store_sub sub = { .client_id = "a", .filter = "t/#", .options = 0x06, .sub_id = 7 };
	assert_int_equal(store_sub_put(s, &sub, NULL, NULL), NMQ_OK);
	assert_int_equal(store_rel_put(s, "a", 42, NULL, NULL), NMQ_OK);
	assert_int_equal(store_queue_put(s, "a", 1, m1, 1, false, ids, 1, NULL, NULL), NMQ_OK);
	// More identifiers than a queued entry keeps inline.
	const uint32_t six[6] = { 1, 2, 3, 4, 5, 268435455 };
	assert_int_equal(store_queue_put(s, "b", 1, m1, 1, false, six, 6, NULL, NULL), NMQ_OK);
	assert_int_equal(store_queue_put(s, "a", 2, m2, 2, false, NULL, 0, NULL, NULL), NMQ_OK);
	assert_int_equal(store_queue_state(s, "a", 2, STORE_Q_SENT, 9, NULL, NULL), NMQ_OK);
	assert_int_equal(store_retain_put(s, "r/x", ret, NULL, NULL), NMQ_OK);
	sync_store(s);
	// m1 is one row for both queues; will, m2 and the retained one more.
	assert_int_equal(count_rows("msgs"), 4);
	store_close(s);
	nmq_msg_release(will);
	nmq_msg_release(m1);
	nmq_msg_release(m2);
	nmq_msg_release(ret);

	s        = open_store(0);
	loaded l = { 0 };
	assert_int_equal(store_load(s, (uint64_t)time(NULL) * 1000, &load_all, &l), NMQ_OK);
	assert_int_equal(l.sessions, 2);
	int ia = strcmp(l.sess_cid[0], "a") == 0 ? 0 : 1;
	assert_string_equal(l.sess_cid[ia], "a");
	assert_string_equal(l.sess_user[ia], "alice");
	assert_int_equal(l.sess_expiry[ia], 3600);
	assert_string_equal(l.will_topic[ia], "will/a");
	assert_string_equal(l.sess_user[1 - ia], "(none)");
	assert_int_equal(l.sess_expiry[1 - ia], UINT32_MAX);
	assert_int_equal(l.subs, 1);
	assert_string_equal(l.sub_filter[0], "t/#");
	assert_int_equal(l.sub_opts[0], 0x06);
	assert_int_equal(l.sub_id[0], 7);
	assert_int_equal(l.rels, 1);
	assert_int_equal(l.rel_pid[0], 42);
	assert_int_equal(l.qmsgs, 3);
	// Ordered by client id, then seq.
	assert_string_equal(l.q_cid[0], "a");
	assert_int_equal(l.q_seq[0], 1);
	assert_string_equal(l.q_payload[0], "one");
	assert_int_equal(l.q_subid[0], 7);
	assert_int_equal(l.q_seq[1], 2);
	assert_string_equal(l.q_payload[1], "two");
	assert_int_equal(l.q_state[1], STORE_Q_SENT);
	assert_int_equal(l.q_pid[1], 9);
	assert_string_equal(l.q_cid[2], "b");
	assert_string_equal(l.q_payload[2], "one");
	assert_int_equal(l.q_nsub[2], 6);
	assert_memory_equal(l.q_subs[2], six, sizeof(six));
	assert_int_equal(l.q_nsub[1], 0);
	// The shared row came back as one message.
	assert_ptr_equal(l.q_msg[0], l.q_msg[2]);
	assert_int_equal(l.q_msg[0]->props_len, 2);
	assert_memory_equal(l.q_msg[0]->props, "\x01\x01", 2);
	assert_int_equal(l.retained, 1);
	assert_string_equal(l.ret_topic[0], "r/x");
	assert_string_equal(l.ret_payload[0], "kept");
	// The highest seq stored for each session.
	assert_int_equal(l.sess_max_seq[ia], 2);
	assert_int_equal(l.sess_max_seq[1 - ia], 1);
	loaded_free(&l);

	// In-flight rows only: the queued ones stay on disk.
	store_load_ops inflight     = load_all;
	inflight.qmsg_inflight_only = true;
	loaded l2                   = { 0 };
	assert_int_equal(store_load(s, (uint64_t)time(NULL) * 1000, &inflight, &l2), NMQ_OK);
	assert_int_equal(l2.qmsgs, 1);
	assert_string_equal(l2.q_cid[0], "a");
	assert_int_equal(l2.q_seq[0], 2);
	assert_int_equal(l2.q_state[0], STORE_Q_SENT);
	loaded_free(&l2);
	store_close(s);
}

// Completions run in queue order, after the commit: when one runs, a
// second connection already sees the row.
typedef struct seen {
	nmq_store *s;
	long long  rows_at_done;
} seen;

static void on_done_count(void *arg, nmq_err err)
{
	seen *x         = arg;
	x->rows_at_done = count_rows("queue");
	on_done((void *)(intptr_t)1, err);
}

static void test_completion_after_commit(void **state)
{
	nmq_store *s = open_store(0);
	nmq_msg   *m = mk_msg("t", "p", 1, NULL);
	waiter_reset();
	for (int i = 0; i < 20; i++) {
		assert_int_equal(store_queue_put(s, "c", (uint64_t)i + 1, m, 1, false, NULL, 0,
		                     on_done, (void *)(intptr_t)(i + 1)),
		    NMQ_OK);
	}
	seen x = { s, -1 };
	assert_int_equal(
	    store_queue_put(s, "c", 100, m, 1, false, NULL, 0, on_done_count, &x), NMQ_OK);
	wait_calls(21);
	assert_int_equal(W.errors, 0);
	for (int i = 0; i < 20; i++) {
		assert_int_equal(W.order[i], i + 1);
	}
	assert_int_equal(x.rows_at_done, 21);
	store_stats st;
	store_stats_get(s, &st);
	assert_int_equal(st.queued_rows, 21);
	assert_true(st.commits >= 1);
	// A duplicate seq is refused alone; the batch commits.
	waiter_reset();
	assert_int_equal(store_queue_put(s, "c", 5, m, 1, false, NULL, 0, on_done, NULL), NMQ_OK);
	assert_int_equal(store_queue_put(s, "c", 101, m, 1, false, NULL, 0, on_done, NULL), NMQ_OK);
	wait_calls(2);
	assert_int_equal(W.errors, 1);
	assert_int_equal(count_rows("queue"), 22);
	nmq_msg_release(m);
	store_close(s);
}

// store_sync_since: a barrier for writes queued since a mark fails when
// any group since the mark failed, not only its own; one from a mark
// taken after the failure does not. A plain barrier answers for its own
// group only.
static void test_sync_since(void **state)
{
	(void)state;
	nmq_store *s  = open_store(0);
	nmq_msg   *m  = mk_msg("t", "p", 1, NULL);
	uint64_t   m0 = store_sync_mark(s);
	store_test_group_fail(s, 1);
	waiter_reset();
	store_batch_begin(s); // one group
	assert_int_equal(store_queue_put(s, "c", 1, m, 1, false, NULL, 0, NULL, NULL), NMQ_OK);
	assert_int_equal(store_sync(s, on_done, NULL), NMQ_OK);
	store_batch_end(s);
	wait_calls(1);
	assert_int_equal(W.errors, 1); // that group failed
	uint64_t m1 = store_sync_mark(s);
	assert_true(m1 > m0);
	waiter_reset();
	assert_int_equal(store_queue_put(s, "c", 2, m, 1, false, NULL, 0, NULL, NULL), NMQ_OK);
	assert_int_equal(store_sync_since(s, m0, on_done, (void *)1), NMQ_OK);
	wait_calls(1);
	assert_int_equal(W.errors, 1); // its own group committed, an earlier one since m0 not
	waiter_reset();
	assert_int_equal(store_queue_put(s, "c", 3, m, 1, false, NULL, 0, NULL, NULL), NMQ_OK);
	assert_int_equal(store_sync_since(s, m1, on_done, (void *)2), NMQ_OK);
	assert_int_equal(store_sync(s, on_done, (void *)3), NMQ_OK);
	wait_calls(2);
	assert_int_equal(W.errors, 0);
	assert_int_equal(W.order[0], 2);
	assert_int_equal(W.order[1], 3);
	assert_int_equal(count_rows("queue"), 2); // seq 2 and 3, not 1
	nmq_msg_release(m);
	store_close(s);
}

// Rows of messages go away with their last reference: acks, a session's
// end and a cleared retained message leave no orphan.
static void test_reference_counting(void **state)
{
	nmq_store    *s    = open_store(0);
	nmq_msg      *m    = mk_msg("t", "p", 1, NULL);
	nmq_msg      *will = mk_msg("w", "x", 0, NULL);
	store_session a    = { .client_id = "a", .expiry_s = 60, .will_msg = will };
	store_session b    = { .client_id = "b", .expiry_s = 60 };
	store_session_put(s, &a, NULL, NULL);
	store_session_put(s, &b, NULL, NULL);
	store_queue_put(s, "a", 1, m, 1, false, NULL, 0, NULL, NULL);
	store_queue_put(s, "b", 1, m, 1, false, NULL, 0, NULL, NULL);
	store_queue_put(s, "b", 2, m, 1, false, NULL, 0, NULL, NULL);
	store_retain_put(s, "t", m, NULL, NULL);
	sync_store(s);
	assert_int_equal(count_rows("msgs"), 2);
	store_queue_del(s, "b", 1, NULL, NULL);
	store_session_del(s, "a", NULL, NULL);
	sync_store(s);
	assert_int_equal(count_rows("msgs"), 1); // still queued for b, retained
	assert_int_equal(count_rows("sessions"), 1);
	store_queue_del(s, "b", 2, NULL, NULL);
	sync_store(s);
	assert_int_equal(count_rows("msgs"), 1); // retained
	// Many rows deleted in one operation (seq 99 is not stored: skipped),
	// their message rows with them; the other client's rows stay.
	nmq_msg *m2 = mk_msg("u", "q", 1, NULL);
	for (uint64_t q = 10; q < 20; q++) {
		store_queue_put(s, "b", q, m2, 1, false, NULL, 0, NULL, NULL);
	}
	store_queue_put(s, "c", 10, m2, 1, false, NULL, 0, NULL, NULL);
	sync_store(s);
	assert_int_equal(count_rows("queue"), 11);
	uint64_t del[] = { 10, 11, 12, 99, 13, 14, 15, 16, 17, 18, 19 };
	waiter_reset();
	assert_int_equal(
	    store_queue_del_many(s, "b", del, sizeof(del) / sizeof(del[0]), on_done, NULL), NMQ_OK);
	wait_calls(1);
	assert_int_equal(W.errors, 0);
	assert_int_equal(count_rows("queue"), 1);
	assert_int_equal(count_rows("msgs"), 2); // retained "t", and "u" still queued for c
	store_queue_del_many(s, "c", del, 1, NULL, NULL);
	sync_store(s);
	assert_int_equal(count_rows("queue"), 0);
	assert_int_equal(count_rows("msgs"), 1);
	nmq_msg_release(m2);
	store_retain_put(s, "t", NULL, NULL, NULL);
	sync_store(s);
	assert_int_equal(count_rows("msgs"), 0);
	assert_int_equal(count_rows("retained"), 0);
	// A message whose row was deleted is stored again when queued again.
	store_queue_put(s, "b", 3, m, 1, false, NULL, 0, NULL, NULL);
	sync_store(s);
	assert_int_equal(count_rows("msgs"), 1);
	store_close(s);
	s        = open_store(0);
	loaded l = { 0 };
	assert_int_equal(store_load(s, (uint64_t)time(NULL) * 1000, &load_all, &l), NMQ_OK);
	assert_int_equal(l.qmsgs, 1);
	assert_string_equal(l.q_payload[0], "p");
	loaded_free(&l);
	store_close(s);
	nmq_msg_release(m);
	nmq_msg_release(will);
}

static uint64_t evicted_seqs[16];
static int      n_evicted;

static void on_evicted(void *arg, const char *cid, uint64_t seq)
{
	evicted_seqs[n_evicted++] = seq;
}

// Past max_queued, the oldest queued messages are evicted and reported.
static void test_eviction(void **state)
{
	store_opts o = { .dir = tmpdir, .flush_max = 1, .max_queued = 5, .evicted = on_evicted };
	nmq_store *s = NULL;
	char       err[256];
	assert_int_equal(store_open(&s, &o, err, sizeof(err)), NMQ_OK);
	nmq_msg *m = mk_msg("t", "p", 1, NULL);
	n_evicted  = 0;
	for (uint64_t i = 1; i <= 8; i++) {
		assert_int_equal(
		    store_queue_put(s, "c", i, m, 1, false, NULL, 0, NULL, NULL), NMQ_OK);
	}
	sync_store(s);
	assert_int_equal(n_evicted, 3);
	assert_int_equal(evicted_seqs[0], 1);
	assert_int_equal(evicted_seqs[1], 2);
	assert_int_equal(evicted_seqs[2], 3);
	store_stats st;
	store_stats_get(s, &st);
	assert_int_equal(st.evicted, 3);
	assert_int_equal(st.queued_rows, 5);
	assert_int_equal(count_rows("queue"), 5);
	nmq_msg_release(m);
	store_close(s);
}

// What expired while the broker was down is gone at load, by wall clock.
static void test_expiry_at_load(void **state)
{
	nmq_store *s       = open_store(0);
	uint64_t   now     = (uint64_t)time(NULL) * 1000;
	nmq_msg   *m       = mk_msg("t", "short", 1, NULL);
	nmq_msg   *keep    = mk_msg("t", "long", 1, NULL);
	m->expiry_at_ms    = nmq_clock_ms() + 2000; // 2 s from now
	m->expiry_interval = 2;
	store_session gone = { .client_id = "gone", .expiry_s = 10, .offline_wall_ms = now - 1000 };
	store_session stay = { .client_id = "stay", .expiry_s = 100000, .offline_wall_ms = now };
	store_session_put(s, &gone, NULL, NULL);
	store_session_put(s, &stay, NULL, NULL);
	store_queue_put(s, "gone", 1, keep, 1, false, NULL, 0, NULL, NULL);
	store_queue_put(s, "stay", 1, m, 1, false, NULL, 0, NULL, NULL);
	store_queue_put(s, "stay", 2, keep, 1, false, NULL, 0, NULL, NULL);
	store_retain_put(s, "t", m, NULL, NULL);
	sync_store(s);
	store_close(s);

	// Load "20 s later": "gone" (expiry 10 s, offline since 1 s before)
	// expired, and so did the 2 s message and the retained copy of it.
	s        = open_store(0);
	loaded l = { 0 };
	assert_int_equal(store_load(s, now + 20000, &load_all, &l), NMQ_OK);
	assert_int_equal(l.sessions, 1);
	assert_string_equal(l.sess_cid[0], "stay");
	assert_int_equal(l.qmsgs, 1);
	assert_string_equal(l.q_payload[0], "long");
	assert_int_equal(l.retained, 0);
	store_stats st;
	store_stats_get(s, &st);
	assert_int_equal(st.expired, 3); // a session, a queued and a retained message
	loaded_free(&l);
	store_close(s);
	assert_int_equal(count_rows("msgs"), 1);
	nmq_msg_release(m);
	nmq_msg_release(keep);
}

typedef struct reader {
	uint64_t seqs[16];
	int      n;
} reader;

static void on_read(void *arg, const store_qmsg *q)
{
	reader *r       = arg;
	r->seqs[r->n++] = q->seq;
}

static reader R;

static void on_read_done(void *arg, nmq_err err)
{
	on_done(arg, err);
}

// A session's queue is read on demand, in seq order, from a given point.
static void test_lazy_read(void **state)
{
	nmq_store *s = open_store(0);
	nmq_msg   *m = mk_msg("t", "p", 1, NULL);
	for (uint64_t i = 1; i <= 6; i++) {
		store_queue_put(s, i % 2 ? "odd" : "even", i, m, 1, false, NULL, 0, NULL, NULL);
	}
	memset(&R, 0, sizeof(R));
	waiter_reset();
	assert_int_equal(store_queue_read(s, "odd", 1, 0, on_read, on_read_done, &R), NMQ_OK);
	wait_calls(1);
	assert_int_equal(R.n, 2);
	assert_int_equal(R.seqs[0], 3);
	assert_int_equal(R.seqs[1], 5);
	memset(&R, 0, sizeof(R));
	waiter_reset();
	assert_int_equal(store_queue_read(s, "even", 0, 2, on_read, on_read_done, &R), NMQ_OK);
	wait_calls(1);
	assert_int_equal(R.n, 2);
	assert_int_equal(R.seqs[0], 2);
	assert_int_equal(R.seqs[1], 4);
	nmq_msg_release(m);
	store_close(s);
}

typedef struct subs_reader {
	char    filters[4][16];
	uint8_t options[4];
	int     n;
} subs_reader;

static subs_reader SR;

static void on_sub_read(void *arg, const store_sub *sub)
{
	subs_reader *r = arg;
	assert_string_equal(sub->client_id, "$bridge/x");
	if (r->n < 4) {
		snprintf(r->filters[r->n], sizeof(r->filters[0]), "%s", sub->filter);
		r->options[r->n] = sub->options;
	}
	r->n++;
}

// store_subs_read: one client id's subscription rows (a client id with no
// session, as a bridge keeps its mirrored filters), after what was queued
// before it.
static void test_subs_read(void **state)
{
	nmq_store *s  = open_store(0);
	store_sub  a  = { "$bridge/x", "a/#", 1, 0 };
	store_sub  b  = { "$bridge/x", "b", 0, 0 };
	store_sub  b2 = { "$bridge/x", "b", 2, 0 };
	store_sub  o  = { "other", "z", 1, 0 };
	store_sub_put(s, &a, NULL, NULL);
	store_sub_put(s, &b, NULL, NULL);
	store_sub_put(s, &o, NULL, NULL);
	store_sub_put(s, &b2, NULL, NULL); // replaces b's options
	memset(&SR, 0, sizeof(SR));
	waiter_reset();
	assert_int_equal(store_subs_read(s, "$bridge/x", on_sub_read, on_read_done, &SR), NMQ_OK);
	wait_calls(1);
	assert_int_equal(SR.n, 2);
	int ia = strcmp(SR.filters[0], "a/#") == 0 ? 0 : 1;
	assert_string_equal(SR.filters[ia], "a/#");
	assert_int_equal(SR.options[ia], 1);
	assert_string_equal(SR.filters[1 - ia], "b");
	assert_int_equal(SR.options[1 - ia], 2);
	store_sub_del(s, "$bridge/x", "a/#", NULL, NULL);
	memset(&SR, 0, sizeof(SR));
	waiter_reset();
	assert_int_equal(store_subs_read(s, "$bridge/x", on_sub_read, on_read_done, &SR), NMQ_OK);
	wait_calls(1);
	assert_int_equal(SR.n, 1);
	assert_string_equal(SR.filters[0], "b");
	store_close(s);
	// And after a restart.
	s = open_store(0);
	memset(&SR, 0, sizeof(SR));
	waiter_reset();
	assert_int_equal(store_subs_read(s, "$bridge/x", on_sub_read, on_read_done, &SR), NMQ_OK);
	wait_calls(1);
	assert_int_equal(SR.n, 1);
	store_close(s);
}

static uint16_t rels_got[8];
static int      n_rels_got;

static void on_rel_read(void *arg, uint16_t pid)
{
	(void)arg;
	if (n_rels_got < 8) {
		rels_got[n_rels_got] = pid;
	}
	n_rels_got++;
}

// store_rels_read: one client id's inbound QoS 2 ids (a bridge's), after
// what was queued before it, and after a restart.
static void test_rels_read(void **state)
{
	(void)state;
	nmq_store *s = open_store(0);
	store_rel_put(s, "$bridge/x", 7, NULL, NULL);
	store_rel_put(s, "$bridge/x", 9, NULL, NULL);
	store_rel_put(s, "other", 8, NULL, NULL);
	store_rel_del(s, "$bridge/x", 7, NULL, NULL);
	n_rels_got = 0;
	waiter_reset();
	assert_int_equal(store_rels_read(s, "$bridge/x", on_rel_read, on_read_done, NULL), NMQ_OK);
	wait_calls(1);
	assert_int_equal(n_rels_got, 1);
	assert_int_equal(rels_got[0], 9);
	store_close(s);
	s          = open_store(0);
	n_rels_got = 0;
	waiter_reset();
	assert_int_equal(store_rels_read(s, "$bridge/x", on_rel_read, on_read_done, NULL), NMQ_OK);
	wait_calls(1);
	assert_int_equal(n_rels_got, 1);
	assert_int_equal(rels_got[0], 9);
	store_close(s);
}

// Writes a valid store holding one session, then damages it with fn.
static void make_store_with_session(void)
{
	nmq_store    *s = open_store(0);
	store_session a = { .client_id = "lost", .expiry_s = 60 };
	store_session_put(s, &a, NULL, NULL);
	sync_store(s);
	store_close(s);
}

static int count_damaged(void)
{
	int            n = 0;
	DIR           *d = opendir(tmpdir);
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (strstr(e->d_name, "nanomq.db.damaged-") != NULL
		    && strstr(e->d_name, "-wal") == NULL && strstr(e->d_name, "-shm") == NULL) {
			n++;
		}
	}
	closedir(d);
	return n;
}

static void expect_recovered(int damaged_before)
{
	nmq_store  *s = open_store(0);
	store_stats st;
	store_stats_get(s, &st);
	assert_true(st.recovered);
	assert_int_equal(count_damaged(), damaged_before + 1);
	loaded l = { 0 };
	assert_int_equal(store_load(s, (uint64_t)time(NULL) * 1000, &load_all, &l), NMQ_OK);
	assert_int_equal(l.sessions, 0);
	// The new store works.
	store_session a = { .client_id = "new", .expiry_s = 60 };
	assert_int_equal(store_session_put(s, &a, NULL, NULL), NMQ_OK);
	sync_store(s);
	store_close(s);
	assert_int_equal(count_rows("sessions"), 1);
}

static void write_file(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	close(fd);
}

static void db_path(char *p, size_t n)
{
	snprintf(p, n, "%s/nanomq.db", tmpdir);
}

static void test_bad_truncated(void **state)
{
	make_store_with_session();
	char p[512];
	db_path(p, sizeof(p));
	struct stat st;
	assert_int_equal(stat(p, &st), 0);
	assert_true(st.st_size > 4096);
	assert_int_equal(truncate(p, st.st_size / 2 + 100), 0);
	expect_recovered(0);
}

static void test_bad_zeroed(void **state)
{
	make_store_with_session();
	char p[512];
	db_path(p, sizeof(p));
	static char zeros[16384];
	write_file(p, zeros, sizeof(zeros));
	expect_recovered(0);
}

static void test_bad_garbage(void **state)
{
	char p[512];
	db_path(p, sizeof(p));
	char junk[8192];
	for (size_t i = 0; i < sizeof(junk); i++) {
		junk[i] = (char)(i * 7919 % 251);
	}
	write_file(p, junk, sizeof(junk));
	expect_recovered(0);
}

static void test_bad_foreign_and_version(void **state)
{
	char p[512];
	db_path(p, sizeof(p));
	sqlite3 *db = NULL;
	assert_int_equal(sqlite3_open(p, &db), SQLITE_OK);
	assert_int_equal(
	    sqlite3_exec(db, "CREATE TABLE photos(id INTEGER, data BLOB)", NULL, NULL, NULL),
	    SQLITE_OK);
	sqlite3_close(db);
	expect_recovered(0);

	// A store of a newer schema version.
	assert_int_equal(sqlite3_open(p, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	expect_recovered(1);

	// A damaged page in the middle of a valid store.
	unlink(p);
	make_store_with_session();
	int fd = open(p, O_WRONLY);
	assert_true(fd >= 0);
	char junk[4096];
	memset(junk, 0xA5, sizeof(junk));
	assert_int_equal(pwrite(fd, junk, sizeof(junk), 4096), (ssize_t)sizeof(junk));
	close(fd);
	expect_recovered(2);
}

// A completion that blocks the store thread until released, so that the
// queue fills up.
static sem_t gate;

static atomic_int blocked_in_done;

static void on_done_block(void *arg, nmq_err err)
{
	atomic_store(&blocked_in_done, 1);
	sem_wait(&gate);
	atomic_store(&blocked_in_done, 0);
}

static void test_pending_bound(void **state)
{
	store_opts o = { .dir = tmpdir, .flush_max = 1, .max_pending = 4 };
	nmq_store *s = NULL;
	char       err[256];
	assert_int_equal(store_open(&s, &o, err, sizeof(err)), NMQ_OK);
	sem_init(&gate, 0, 0);
	assert_int_equal(store_sync(s, on_done_block, NULL), NMQ_OK);
	// Wait until the thread took it (and is blocked in it).
	store_stats st;
	do {
		usleep(1000);
		store_stats_get(s, &st);
	} while (st.pending != 0);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(store_rel_put(s, "c", (uint16_t)(i + 1), NULL, NULL), NMQ_OK);
	}
	assert_int_equal(store_rel_put(s, "c", 99, NULL, NULL), NMQ_ELIMIT);
	sem_post(&gate);
	store_close(s);
	sem_destroy(&gate);
	assert_int_equal(count_rows("rel"), 4);
}

// Gives every client id with queue rows a session row, as the broker's
// sessions have (store_load drops the rows of a client id without one).
// Runs sql on the file through a second connection (as a hand would).
static void db_exec(const char *sql)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/nanomq.db", tmpdir);
	sqlite3 *db = NULL;
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
}

static void sessions_of_queue(void)
{
	char sql[512];
	snprintf(sql, sizeof(sql),
	    "INSERT OR IGNORE INTO sessions(cid, username, expiry_s, proto, offline_wall_ms,"
	    " will_msg, will_delay_s) SELECT DISTINCT cid, NULL, 100000, 5, %lld, NULL, 0 FROM "
	    "queue",
	    (long long)time(NULL) * 1000);
	db_exec(sql);
}

// Runs a one-value query on the file through a second connection.
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

// Blocks the store thread in a completion (on_done_block) until gate is
// posted, so that everything queued meanwhile is one group.
static void block_store_thread(nmq_store *s)
{
	assert_int_equal(store_sync(s, on_done_block, NULL), NMQ_OK);
	// In the completion: its group's commit is counted.
	while (!atomic_load(&blocked_in_done)) {
		usleep(1000);
	}
}

// A store_batch is one group even past flush_max, and its operations are
// admitted (or refused) one by one when submitted.
static void test_batch_one_group(void **state)
{
	store_opts o = { .dir = tmpdir, .flush_max = 2, .max_pending = 8 };
	nmq_store *s = NULL;
	char       err[256];
	assert_int_equal(store_open(&s, &o, err, sizeof(err)), NMQ_OK);
	sem_init(&gate, 0, 0);
	block_store_thread(s);
	store_stats before;
	store_stats_get(s, &before);
	store_batch_begin(s);
	store_batch_begin(s); // nested: the outer end queues
	for (int i = 0; i < 6; i++) {
		assert_int_equal(store_rel_put(s, "b", (uint16_t)(i + 1), NULL, NULL), NMQ_OK);
	}
	store_batch_end(s);
	store_stats mid;
	store_stats_get(s, &mid);
	assert_int_equal(mid.pending, 0); // held by this thread until the end
	// Counted against max_pending while held: 6 + 2 fill it.
	assert_int_equal(store_rel_put(s, "b", 7, NULL, NULL), NMQ_OK);
	assert_int_equal(store_rel_put(s, "b", 8, NULL, NULL), NMQ_OK);
	assert_int_equal(store_rel_put(s, "b", 9, NULL, NULL), NMQ_ELIMIT);
	store_batch_end(s);
	store_stats_get(s, &mid);
	assert_int_equal(mid.pending, 8);
	sem_post(&gate);
	waiter_reset();
	assert_int_equal(store_sync(s, on_done, NULL), NMQ_OK);
	wait_calls(1);
	store_stats after;
	store_stats_get(s, &after);
	// The 8 writes as one group (a store_batch is never cut at
	// flush_max = 2), then the last barrier's (the blocking barrier's
	// commit is counted in `before`).
	assert_int_equal(after.commits - before.commits, 1 + 1);
	store_close(s);
	sem_destroy(&gate);
	assert_int_equal(count_rows("rel"), 8);
}

// The broker's activity as the store sees it (store_set_activity): while
// act_busy is set, messages keep moving.
static atomic_bool act_busy;
static uint64_t    act_count; // store thread only

static uint64_t act_fn(void *arg)
{
	(void)arg;
	if (atomic_load(&act_busy)) {
		act_count += 1000;
	}
	return act_count;
}

// Queues 100 puts from seq as one group and waits for their completions.
static void put_group_100(nmq_store *s, nmq_msg *m, uint64_t seq)
{
	waiter_reset();
	store_batch_begin(s);
	for (int i = 0; i < 100; i++) {
		assert_int_equal(
		    store_queue_put(s, "c", seq + (uint64_t)i, m, 1, false, NULL, 0, on_done, NULL),
		    NMQ_OK);
	}
	store_batch_end(s);
	wait_calls(100);
}

// Group pacing (decisions/0056): after a group of 100 operations, while
// the broker is busy, the next group (a single put) waits until
// opts.group_gap_ms after the first began, so it completes no sooner than
// the gap after the first was queued. With the broker idle it does not
// wait out the gap; after a group of one operation it does not wait at
// all; a close ends the wait.
static void test_group_pacing(void **state)
{
	(void)state;
	const uint64_t gap = 400;
	store_opts     o   = { .dir = tmpdir,
		      .durability   = STORE_DURABLE_OS,
		      .flush_max    = 100,
		      .group_gap_ms = (uint32_t)gap };
	nmq_store     *s   = NULL;
	char           err[256];
	assert_int_equal(store_open(&s, &o, err, sizeof(err)), NMQ_OK);
	store_set_activity(s, act_fn, NULL);
	nmq_msg *m = mk_msg("t", "p", 1, NULL);
	// Busy: the next group waits for the gap.
	atomic_store(&act_busy, true);
	uint64_t t0 = nmq_clock_ms();
	put_group_100(s, m, 1);
	assert_int_equal(store_queue_put(s, "c", 101, m, 1, false, NULL, 0, on_done, NULL), NMQ_OK);
	wait_calls(101);
	uint64_t t1 = nmq_clock_ms();
	assert_true(t1 - t0 >= gap);
	// Idle: the wait ends after a step in which no message moved.
	atomic_store(&act_busy, false);
	put_group_100(s, m, 201);
	t0 = nmq_clock_ms();
	assert_int_equal(store_queue_put(s, "c", 301, m, 1, false, NULL, 0, on_done, NULL), NMQ_OK);
	wait_calls(101);
	t1 = nmq_clock_ms();
	assert_true(t1 - t0 < gap / 2);
	// Light load: the last group held one operation; two more single
	// puts, one after the other's commit, wait for no gap even while the
	// broker is busy.
	atomic_store(&act_busy, true);
	waiter_reset();
	t0 = nmq_clock_ms();
	assert_int_equal(store_queue_put(s, "c", 302, m, 1, false, NULL, 0, on_done, NULL), NMQ_OK);
	wait_calls(1);
	assert_int_equal(store_queue_put(s, "c", 303, m, 1, false, NULL, 0, on_done, NULL), NMQ_OK);
	wait_calls(2);
	t1 = nmq_clock_ms();
	assert_true(t1 - t0 < gap / 2);
	// A close while the thread waits for the gap ends the wait: the last
	// put is written at once.
	put_group_100(s, m, 401);
	t0 = nmq_clock_ms();
	assert_int_equal(store_queue_put(s, "c", 501, m, 1, false, NULL, 0, on_done, NULL), NMQ_OK);
	usleep(50 * 1000); // the thread is waiting for the gap by now
	store_close(s);
	t1 = nmq_clock_ms();
	atomic_store(&act_busy, false);
	assert_int_equal(W.calls, 101);
	assert_int_equal(W.errors, 0);
	assert_true(t1 - t0 < gap / 2);
	assert_int_equal(count_rows("queue"), 101 + 101 + 2 + 101);
	nmq_msg_release(m);
}

// store_batch_after: NONE (nothing registered) with no batch open; in a
// batch, each function runs once at the outermost end, after the batch's
// operations are queued (past the inline slots too).
static nmq_store *after_store;
static int        after_calls;
static uint64_t   after_pending_min = UINT64_MAX;

static void after_fn(void *arg)
{
	(void)arg;
	store_stats st;
	store_stats_get(after_store, &st);
	if (st.pending < after_pending_min) {
		after_pending_min = st.pending;
	}
	after_calls++;
}

static void test_batch_after(void **state)
{
	(void)state;
	nmq_store *s = open_store(0);
	after_store  = s;
	sem_init(&gate, 0, 0);
	block_store_thread(s);
	assert_int_equal(store_batch_after(s, after_fn, NULL), STORE_AFTER_NONE);
	store_batch_begin(s);
	store_batch_begin(s);
	assert_int_equal(store_rel_put(s, "a", 1, NULL, NULL), NMQ_OK);
	for (int i = 0; i < 40; i++) {
		assert_int_equal(store_batch_after(s, after_fn, NULL), STORE_AFTER_SET);
	}
	store_batch_end(s);
	assert_int_equal(after_calls, 0);
	store_batch_end(s);
	assert_int_equal(after_calls, 40);
	assert_int_equal(after_pending_min, 1); // the rel_put was queued
	// Registered once: a later batch runs none of them.
	store_batch_begin(s);
	store_batch_end(s);
	assert_int_equal(after_calls, 40);
	sem_post(&gate);
	store_close(s);
	sem_destroy(&gate);
}

// store_batch_after out of memory (when its list grows past the inline
// slots) is not "no batch open": it says FAILED, and the whole batch is
// failed: nothing of it is queued (no read or barrier submitted by
// another thread can overtake what the caller could not register), what
// waits for it fails, later submits to it are refused, and the functions
// registered before still run. The next batch is unaffected.
static void test_batch_after_oom(void **state)
{
	(void)state;
	nmq_store *s = open_store(0);
	after_store  = s;
	after_calls  = 0;
	sem_init(&gate, 0, 0);
	block_store_thread(s);
	waiter_reset();
	store_batch_begin(s);
	assert_int_equal(store_rel_put(s, "a", 1, on_done, NULL), NMQ_OK);
	for (int i = 0; i < 32; i++) {
		assert_int_equal(store_batch_after(s, after_fn, NULL), STORE_AFTER_SET);
	}
	store_test_after_oom(s, 1);
	assert_int_equal(store_batch_after(s, after_fn, NULL), STORE_AFTER_FAILED);
	// Failed for good, though memory is back.
	assert_int_equal(store_batch_after(s, after_fn, NULL), STORE_AFTER_FAILED);
	assert_int_equal(store_rel_put(s, "a", 2, NULL, NULL), NMQ_ENOMEM);
	assert_int_equal(store_sync(s, on_done, NULL), NMQ_ENOMEM);
	store_stats before;
	store_stats_get(s, &before);
	store_batch_end(s);
	assert_int_equal(after_calls, 32);
	wait_calls(1);
	assert_int_equal(W.errors, 1); // the rel_put's done: failed
	store_stats mid;
	store_stats_get(s, &mid);
	assert_int_equal(mid.pending, before.pending); // nothing queued
	assert_int_equal(mid.failed - before.failed, 1);
	// A new batch works as usual.
	store_batch_begin(s);
	assert_int_equal(store_rel_put(s, "a", 3, NULL, NULL), NMQ_OK);
	assert_int_equal(store_batch_after(s, after_fn, NULL), STORE_AFTER_SET);
	store_batch_end(s);
	assert_int_equal(after_calls, 33);
	sem_post(&gate);
	sync_store(s);
	assert_int_equal(count_rows("rel"), 1);
	assert_int_equal(query_int("SELECT packet_id FROM rel"), 3);
	store_close(s);
	sem_destroy(&gate);
}

// Operations that cancel out inside one group are not written; what is
// left is what applying them in order gives.
static void test_group_coalescing(void **state)
{
	nmq_store    *s  = open_store(0);
	nmq_msg      *m1 = mk_msg("t", "one", 1, NULL);
	nmq_msg      *m2 = mk_msg("t", "two", 2, NULL);
	nmq_msg      *m3 = mk_msg("t", "three", 2, NULL);
	store_session a  = { .client_id = "a", .expiry_s = 60 };
	store_session b  = { .client_id = "b", .expiry_s = 60 };
	store_session_put(s, &a, NULL, NULL);
	store_session_put(s, &b, NULL, NULL);
	sync_store(s);
	sem_init(&gate, 0, 0);
	block_store_thread(s);
	store_stats st0;
	store_stats_get(s, &st0);
	// a/1: queued, sent, acked: nothing of it (nor of m1) is written.
	store_queue_put(s, "a", 1, m1, 1, false, NULL, 0, NULL, NULL);
	store_queue_put(s, "a", 2, m2, 2, false, NULL, 0, NULL, NULL);
	store_queue_put(s, "b", 1, m2, 2, false, NULL, 0, NULL, NULL);
	store_queue_state(s, "a", 1, STORE_Q_SENT, 7, NULL, NULL);
	store_queue_del(s, "a", 1, NULL, NULL);
	// a/2: queued and sent: one row, in state SENT.
	store_queue_state(s, "a", 2, STORE_Q_SENT, 8, NULL, NULL);
	// a/3: queued, sent, PUBREC received: one row, RELEASED.
	store_queue_put(s, "a", 3, m3, 2, false, NULL, 0, NULL, NULL);
	store_queue_state(s, "a", 3, STORE_Q_SENT, 9, NULL, NULL);
	store_queue_state(s, "a", 3, STORE_Q_RELEASED, 9, NULL, NULL);
	// b/1 dropped again: m2 keeps one reference (a/2).
	store_queue_del(s, "b", 1, NULL, NULL);
	waiter_reset();
	assert_int_equal(store_sync(s, on_done, NULL), NMQ_OK);
	sem_post(&gate);
	wait_calls(1);
	assert_int_equal(W.errors, 0);
	store_stats st1;
	store_stats_get(s, &st1);
	assert_int_equal(st1.commits, st0.commits + 1); // one group
	assert_int_equal(st1.queued_rows, 2);
	assert_int_equal(count_rows("queue"), 2);
	assert_int_equal(query_int("SELECT COUNT(*) FROM queue WHERE cid = 'a' AND seq = 1"), 0);
	assert_int_equal(
	    query_int("SELECT state * 1000 + packet_id FROM queue WHERE cid = 'a' AND seq = 2"),
	    1008);
	assert_int_equal(
	    query_int("SELECT state * 1000 + packet_id FROM queue WHERE cid = 'a' AND seq = 3"),
	    2009);
	assert_int_equal(count_rows("msgs"), 2); // m2 and m3; m1 never
	assert_int_equal(query_int("SELECT SUM(refs) FROM msgs"), 2);
	// Rows never inserted took no row id: a/2 and a/3 are the first queue
	// rows, m2 and m3 the first message rows of the file.
	assert_int_equal(query_int("SELECT MAX(id) FROM queue"), 2);
	assert_int_equal(query_int("SELECT MAX(id) FROM msgs"), 2);
	// a/1's put, state and delete, b/1's put and delete, a/2's state and
	// a/3's two states.
	assert_int_equal(st1.coalesced - st0.coalesced, 8);

	// Across groups nothing is paired: the row of a group that committed
	// is deleted by the next one, with its message.
	store_queue_put(s, "b", 2, m1, 1, false, NULL, 0, NULL, NULL);
	sync_store(s);
	assert_int_equal(count_rows("msgs"), 3);
	store_queue_state(s, "b", 2, STORE_Q_SENT, 1, NULL, NULL);
	sync_store(s);
	store_queue_del(s, "b", 2, NULL, NULL);
	store_queue_del(s, "a", 2, NULL, NULL);
	sync_store(s);
	assert_int_equal(count_rows("queue"), 1);
	assert_int_equal(count_rows("msgs"), 1); // m3, for a/3

	// A session deleted within the group ends the pairing: a put before
	// it is deleted with the session, one after it is kept.
	block_store_thread(s);
	store_queue_put(s, "a", 4, m1, 1, false, NULL, 0, NULL, NULL);
	store_session_del(s, "a", NULL, NULL);
	store_queue_put(s, "a", 5, m1, 1, false, NULL, 0, NULL, NULL);
	store_queue_del(s, "a", 4, NULL, NULL);
	waiter_reset();
	assert_int_equal(store_sync(s, on_done, NULL), NMQ_OK);
	sem_post(&gate);
	wait_calls(1);
	assert_int_equal(count_rows("queue"), 1);
	assert_int_equal(query_int("SELECT seq FROM queue WHERE cid = 'a'"), 5);
	assert_int_equal(count_rows("msgs"), 1);
	assert_int_equal(query_int("SELECT refs FROM msgs"), 1);

	// A batched delete pairs seq by seq: c/1's put and state never reach
	// the file, a/5 (committed before) is deleted, c/2 stays.
	block_store_thread(s);
	store_stats st2;
	store_stats_get(s, &st2);
	store_queue_put(s, "c", 1, m2, 1, false, NULL, 0, NULL, NULL);
	store_queue_state(s, "c", 1, STORE_Q_SENT, 3, NULL, NULL);
	store_queue_put(s, "c", 2, m2, 1, false, NULL, 0, NULL, NULL);
	uint64_t dels[] = { 1, 5 };
	store_queue_del_many(s, "c", dels, 1, NULL, NULL);
	store_queue_del_many(s, "a", dels + 1, 1, NULL, NULL);
	waiter_reset();
	assert_int_equal(store_sync(s, on_done, NULL), NMQ_OK);
	sem_post(&gate);
	wait_calls(1);
	assert_int_equal(W.errors, 0);
	store_stats st3;
	store_stats_get(s, &st3);
	assert_int_equal(st3.coalesced - st2.coalesced, 2); // c/1's put and state
	assert_int_equal(count_rows("queue"), 1);
	assert_int_equal(query_int("SELECT seq FROM queue WHERE cid = 'c'"), 2);
	assert_int_equal(count_rows("msgs"), 1); // m2 for c/2; m1 gone with a/5
	store_close(s);
	sem_destroy(&gate);
	nmq_msg_release(m1);
	nmq_msg_release(m2);
	nmq_msg_release(m3);
}

// A batched delete takes runs of consecutive seqs, and the message rows of
// consecutive ids, in one statement each: only the seqs asked for go, a
// message still referenced elsewhere keeps its row with one reference
// less, one referenced twice in the run goes with both.
static void test_del_ranges(void **state)
{
	nmq_store  *s      = open_store(0);
	const char *body[] = { "a", "b", "c", "d", "e", "f" };
	nmq_msg    *m[6];
	for (int i = 0; i < 6; i++) {
		m[i] = mk_msg("t", body[i], 1, NULL);
	}
	// b/1..5 hold a..e, b/6 holds a again, b/7 holds f; c/1 shares c.
	for (uint64_t q = 1; q <= 5; q++) {
		store_queue_put(s, "b", q, m[q - 1], 1, false, NULL, 0, NULL, NULL);
	}
	store_queue_put(s, "b", 6, m[0], 1, false, NULL, 0, NULL, NULL);
	store_queue_put(s, "b", 7, m[5], 1, false, NULL, 0, NULL, NULL);
	store_queue_put(s, "c", 1, m[2], 1, false, NULL, 0, NULL, NULL);
	sync_store(s);
	assert_int_equal(count_rows("msgs"), 6);
	assert_int_equal(query_int("SELECT refs FROM msgs WHERE id = 3"), 2); // c
	// 4 is not asked for (it stays although 3 and 5 go); nor is 7.
	uint64_t del[] = { 1, 2, 3, 5, 6 };
	waiter_reset();
	assert_int_equal(store_queue_del_many(s, "b", del, 5, on_done, NULL), NMQ_OK);
	wait_calls(1);
	assert_int_equal(W.errors, 0);
	assert_int_equal(count_rows("queue"), 3);
	assert_int_equal(query_int("SELECT group_concat(seq, '') FROM (SELECT seq FROM queue"
	                           " WHERE cid = 'b' ORDER BY seq)"),
	    47);
	// a (twice in the run), b and e are gone; c (still c/1's), d, f stay.
	assert_int_equal(count_rows("msgs"), 3);
	assert_int_equal(query_int("SELECT SUM(id) FROM msgs"), 3 + 4 + 6);
	assert_int_equal(query_int("SELECT SUM(refs) FROM msgs"), 3);
	store_stats st;
	store_stats_get(s, &st);
	assert_int_equal(st.queued_rows, 3);

	// In one group with puts: b/9's put and delete cancel out (its seq
	// ends the run), b/8 and b/10 (committed before) go, b/4 stays.
	store_queue_put(s, "b", 8, m[3], 1, false, NULL, 0, NULL, NULL);
	store_queue_put(s, "b", 10, m[4], 1, false, NULL, 0, NULL, NULL);
	sync_store(s);
	sem_init(&gate, 0, 0);
	block_store_thread(s);
	store_queue_put(s, "b", 9, m[1], 1, false, NULL, 0, NULL, NULL);
	uint64_t del2[] = { 7, 8, 9, 10, 11 };
	store_queue_del_many(s, "b", del2, 5, NULL, NULL);
	waiter_reset();
	assert_int_equal(store_sync(s, on_done, NULL), NMQ_OK);
	sem_post(&gate);
	wait_calls(1);
	assert_int_equal(W.errors, 0);
	assert_int_equal(query_int("SELECT group_concat(cid || seq) = 'b4,c1' FROM (SELECT cid,"
	                           " seq FROM queue ORDER BY cid, seq)"),
	    1);
	assert_int_equal(query_int("SELECT SUM(refs) FROM msgs"), 2);
	assert_int_equal(count_rows("msgs"), 2); // c and d
	store_close(s);
	sem_destroy(&gate);
	sessions_of_queue(); // (the load drops rows of no session)
	s        = open_store(0);
	loaded l = { 0 };
	assert_int_equal(store_load(s, (uint64_t)time(NULL) * 1000, &load_all, &l), NMQ_OK);
	assert_int_equal(l.qmsgs, 2);
	assert_string_equal(l.q_payload[0], "d");
	assert_string_equal(l.q_payload[1], "c");
	loaded_free(&l);
	store_close(s);
	for (int i = 0; i < 6; i++) {
		nmq_msg_release(m[i]);
	}
}

// A crash while a group with cancelled-out operations waits: the groups
// before it are whole, nothing of it is in the file.
static void on_done_forever(void *arg, nmq_err err)
{
	for (;;) {
		pause();
	}
}

// Parks the store thread for good in a completion (after its group
// committed): nothing queued later is ever applied.
static void stall_store_thread(nmq_store *s)
{
	store_sync(s, on_done_forever, NULL);
	store_stats st;
	do {
		usleep(1000);
		store_stats_get(s, &st);
	} while (st.pending != 0);
}

// Runs work(s) in a child process on a store of its own (fsync), then
// kills it with SIGKILL once work has returned: what work queued after
// its last completed sync never commits, or only in part of the cases
// (the store thread may be anywhere).
static void kill9_after(void (*work)(nmq_store *s))
{
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
		work(s);
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
}

static void test_crash_before_group_commit_work(nmq_store *s)
{
	nmq_msg      *m = mk_msg("t", "kept", 1, NULL);
	store_session a = { .client_id = "a", .expiry_s = 60 };
	store_session_put(s, &a, NULL, NULL);
	store_queue_put(s, "a", 1, m, 1, false, NULL, 0, NULL, NULL);
	// Acked by the publisher once this group committed.
	sync_store(s);
	stall_store_thread(s);
	// Sent and acked by the subscriber, a new message queued and
	// sent: this group never commits.
	store_queue_state(s, "a", 1, STORE_Q_SENT, 1, NULL, NULL);
	store_queue_del(s, "a", 1, NULL, NULL);
	store_queue_put(s, "a", 2, m, 1, false, NULL, 0, NULL, NULL);
	store_queue_state(s, "a", 2, STORE_Q_SENT, 2, NULL, NULL);
}

static void test_crash_before_group_commit(void **state)
{
	kill9_after(test_crash_before_group_commit_work);
	nmq_store *s = open_store(0);
	loaded     l = { 0 };
	assert_int_equal(store_load(s, (uint64_t)time(NULL) * 1000, &load_all, &l), NMQ_OK);
	assert_int_equal(l.qmsgs, 1);
	assert_int_equal(l.q_seq[0], 1);
	assert_int_equal(l.q_state[0], STORE_Q_QUEUED);
	assert_string_equal(l.q_payload[0], "kept");
	loaded_free(&l);
	store_close(s);
	assert_int_equal(count_rows("msgs"), 1);
}

// kill -9 of a process that writes at random moments: every message whose
// completion ran (where the broker would send its PUBACK) is in the file
// afterwards, and the file opens without recovery.
static int ack_fd = -1;

static void on_done_ack(void *arg, nmq_err err)
{
	uint64_t seq = (uint64_t)(uintptr_t)arg;
	if (err == NMQ_OK && write(ack_fd, &seq, sizeof(seq)) != (ssize_t)sizeof(seq)) {
		_exit(3);
	}
}

static void child_writer(const char *cid)
{
	store_opts o = { .dir = tmpdir, .durability = STORE_DURABLE_OS, .flush_max = 50 };
	nmq_store *s = NULL;
	char       err[256];
	if (store_open(&s, &o, err, sizeof(err)) != NMQ_OK) {
		_exit(2);
	}
	nmq_msg *m = mk_msg("t", "payload", 1, NULL);
	for (uint64_t i = 1;; i++) {
		while (store_queue_put(
		           s, cid, i, m, 1, false, NULL, 0, on_done_ack, (void *)(uintptr_t)i)
		    == NMQ_ELIMIT) {
			usleep(100);
		}
	}
}

static void test_kill9_acked_survive(void **state)
{
	srand((unsigned)time(NULL));
	for (int round = 0; round < 8; round++) {
		char cid[32];
		snprintf(cid, sizeof(cid), "round%d", round);
		int fds[2];
		assert_int_equal(pipe(fds), 0);
		pid_t pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			close(fds[0]);
			ack_fd = fds[1];
			child_writer(cid);
		}
		close(fds[1]);
		// Kill at a random moment after the first ack (the child may be
		// slow to start on a loaded machine).
		uint64_t seq, last = 0;
		assert_int_equal(read(fds[0], &seq, sizeof(seq)), (ssize_t)sizeof(seq));
		assert_int_equal(seq, 1);
		last = 1;
		usleep((useconds_t)(10000 + rand() % 120000));
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		// Every ack written before the kill counts: the broker would
		// have sent it.
		while (read(fds[0], &seq, sizeof(seq)) == (ssize_t)sizeof(seq)) {
			assert_int_equal(seq, last + 1); // acks come in queue order
			last = seq;
		}
		close(fds[0]);
		assert_true(last > 0);

		nmq_store  *s = open_store(0);
		store_stats st;
		store_stats_get(s, &st);
		assert_false(st.recovered);
		memset(&R, 0, sizeof(R));
		store_close(s);
		// Every acked seq of this round is stored, in order, no gap.
		char path[512], sql[160];
		snprintf(path, sizeof(path), "%s/nanomq.db", tmpdir);
		snprintf(
		    sql, sizeof(sql), "SELECT seq FROM queue WHERE cid = '%s' ORDER BY seq", cid);
		sqlite3 *db = NULL;
		assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
		sqlite3_stmt *q = NULL;
		assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
		uint64_t expect = 1;
		while (sqlite3_step(q) == SQLITE_ROW) {
			assert_int_equal((uint64_t)sqlite3_column_int64(q, 0), expect);
			expect++;
		}
		sqlite3_finalize(q);
		sqlite3_close(db);
		assert_true(expect - 1 >= last);
	}
}

// Operations keyed by a session's number pair by (sid, seq) like those
// keyed by client id; a sid-keyed and a string-keyed operation of the
// same client never pair (each is applied). Operations come from a pool
// refilled from what the store thread gives back, across threads and
// stores.
static void *put_many_thread(void *arg)
{
	nmq_store *s   = arg;
	nmq_msg   *m   = mk_msg("t", "x", 1, NULL);
	uint32_t   sid = store_sid_new(s);
	for (uint64_t q = 1; q <= 2000; q++) {
		assert_int_equal(
		    store_queue_put_sid(s, "p", sid, q, m, 1, false, NULL, 0, NULL, NULL), NMQ_OK);
		assert_int_equal(store_queue_del_sid(s, "p", sid, q, NULL, NULL), NMQ_OK);
	}
	nmq_msg_release(m);
	return NULL;
}

static void test_sid_coalescing(void **state)
{
	nmq_store *s  = open_store(0);
	nmq_msg   *m1 = mk_msg("t", "one", 1, NULL);
	uint32_t   a = store_sid_new(s), b = store_sid_new(s);
	assert_true(a != 0 && b != 0 && a != b);
	sem_init(&gate, 0, 0);
	block_store_thread(s);
	store_stats st0;
	store_stats_get(s, &st0);
	// a/1: put, sent, acked by sid: nothing written.
	store_queue_put_sid(s, "x", a, 1, m1, 1, false, NULL, 0, NULL, NULL);
	store_queue_state_sid(s, "x", a, 1, STORE_Q_SENT, 5, NULL, NULL);
	store_queue_del_sid(s, "x", a, 1, NULL, NULL);
	// a/2 put by sid, state folded in, its delete not in this group.
	store_queue_put_sid(s, "x", a, 2, m1, 1, false, NULL, 0, NULL, NULL);
	store_queue_state_sid(s, "x", a, 2, STORE_Q_SENT, 6, NULL, NULL);
	// Another session's number with the same seq: not paired with a/2.
	store_queue_del_sid(s, "y", b, 2, NULL, NULL);
	// y/3 put by sid, deleted by client id: both applied, nothing left.
	store_queue_put_sid(s, "y", b, 3, m1, 1, false, NULL, 0, NULL, NULL);
	store_queue_del(s, "y", 3, NULL, NULL);
	waiter_reset();
	assert_int_equal(store_sync(s, on_done, NULL), NMQ_OK);
	sem_post(&gate);
	wait_calls(1);
	assert_int_equal(W.errors, 0);
	store_stats st1;
	store_stats_get(s, &st1);
	assert_int_equal(st1.coalesced - st0.coalesced, 4); // a/1 x3, a/2's state
	assert_int_equal(count_rows("queue"), 1);
	assert_int_equal(
	    query_int("SELECT state * 1000 + packet_id FROM queue WHERE cid = 'x' AND seq = 2"),
	    1006);
	// Many operations from two threads go through the pool.
	pthread_t th[2];
	for (int i = 0; i < 2; i++) {
		assert_int_equal(pthread_create(&th[i], NULL, put_many_thread, s), 0);
	}
	for (int i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
	}
	sync_store(s);
	assert_int_equal(count_rows("queue"), 1);
	store_close(s);
	// A new store (maybe at the same address) does not reuse this
	// thread's cache of the closed one.
	s = open_store(0);
	store_queue_put_sid(s, "z", store_sid_new(s), 1, m1, 1, false, NULL, 0, NULL, NULL);
	sync_store(s);
	assert_int_equal(count_rows("queue"), 2);
	store_close(s);
	sem_destroy(&gate);
	nmq_msg_release(m1);
}

// Inside a store_batch, the puts of one message to many sessions are one
// operation (one hold of the message), each row still admitted on its
// own against max_pending and paired on its own within the group.
static void test_multi_put(void **state)
{
	store_opts o = { .dir = tmpdir, .flush_max = 65536, .max_pending = 16 };
	nmq_store *s = NULL;
	char       err[256];
	assert_int_equal(store_open(&s, &o, err, sizeof(err)), NMQ_OK);
	nmq_msg *m1 = mk_msg("t", "one", 1, NULL);
	nmq_msg *m2 = mk_msg("t", "two", 1, NULL);
	uint32_t a = store_sid_new(s), b = store_sid_new(s);
	sem_init(&gate, 0, 0);
	block_store_thread(s);
	store_stats st0;
	store_stats_get(s, &st0);
	uint32_t ids[] = { 7, 9 };
	store_batch_begin(s);
	assert_int_equal(
	    store_queue_put_sid(s, "a", a, 1, m1, 1, false, NULL, 0, NULL, NULL), NMQ_OK);
	assert_int_equal(
	    store_queue_put_sid(s, "b", b, 1, m1, 2, true, ids, 2, NULL, NULL), NMQ_OK);
	// A client id keyed row (the bridge's API) joins the same operation.
	assert_int_equal(store_queue_put(s, "c", 1, m1, 1, false, NULL, 0, NULL, NULL), NMQ_OK);
	for (uint64_t q = 1; q <= 9; q++) {
		assert_int_equal(store_queue_put_sid(s, "d", store_sid_new(s), q, m2, 1, false,
		                     NULL, 0, NULL, NULL),
		    NMQ_OK);
	}
	// One hold of each message by the batch's operations.
	assert_int_equal(atomic_load(&m1->ref), 2);
	assert_int_equal(atomic_load(&m2->ref), 2);
	store_batch_end(s);
	store_stats mid;
	store_stats_get(s, &mid);
	assert_int_equal(mid.pending, 12); // counted row by row
	// a/1 sent (folded into its row), b/1 acked within the group.
	store_queue_state_sid(s, "a", a, 1, STORE_Q_SENT, 4, NULL, NULL);
	store_queue_del_sid(s, "b", b, 1, NULL, NULL);
	waiter_reset();
	assert_int_equal(store_sync(s, on_done, NULL), NMQ_OK);
	sem_post(&gate);
	wait_calls(1);
	assert_int_equal(W.errors, 0);
	store_stats st1;
	store_stats_get(s, &st1);
	assert_int_equal(st1.commits, st0.commits + 1);
	assert_int_equal(st1.coalesced - st0.coalesced, 3); // b/1 put and del, a/1's state
	assert_int_equal(
	    query_int("SELECT state * 1000 + packet_id FROM queue WHERE cid = 'a' AND seq = 1"),
	    1004);
	assert_int_equal(query_int("SELECT COUNT(*) FROM queue WHERE cid = 'b'"), 0);
	assert_int_equal(query_int("SELECT COUNT(*) FROM queue WHERE cid = 'c'"), 1);
	assert_int_equal(query_int("SELECT COUNT(*) FROM queue WHERE cid = 'd'"), 9);
	assert_int_equal(count_rows("msgs"), 2);
	assert_int_equal(query_int("SELECT SUM(refs) FROM msgs"), 2 + 9);
	// Rows past max_pending are refused one by one.
	block_store_thread(s);
	store_batch_begin(s);
	int ok = 0, refused = 0;
	for (uint64_t q = 1; q <= 20; q++) {
		nmq_err e = store_queue_put_sid(
		    s, "e", store_sid_new(s), q, m2, 1, false, NULL, 0, NULL, NULL);
		ok += e == NMQ_OK;
		refused += e == NMQ_ELIMIT;
	}
	store_batch_end(s);
	assert_int_equal(ok, 16);
	assert_int_equal(refused, 4);
	sem_post(&gate);
	sync_store(s);
	assert_int_equal(query_int("SELECT COUNT(*) FROM queue WHERE cid = 'e'"), 16);
	store_close(s);
	sem_destroy(&gate);
	// Read back: the sub ids of a row kept, in order.
	sessions_of_queue(); // (the load drops rows of no session)
	s        = open_store(0);
	loaded l = { 0 };
	assert_int_equal(store_load(s, (uint64_t)time(NULL) * 1000, &load_all, &l), NMQ_OK);
	assert_int_equal(l.qmsgs, 11 + 16);
	loaded_free(&l);
	store_close(s);
	assert_int_equal(atomic_load(&m1->ref), 1);
	nmq_msg_release(m1);
	nmq_msg_release(m2);
}

// A session's acks as a done range (store_queue_done_sid): committed rows
// of the range are deleted, puts of it in the same group (before or after
// the range's operation) or in a later group are never written, a range
// still queued grows in place, a row acked out of order goes alone, and a
// session's deletion forgets the range.
static int read_rows;

static void on_read_row(void *arg, const store_qmsg *q)
{
	read_rows++;
}

static void test_done_ranges(void **state)
{
	nmq_store *s        = open_store(0);
	nmq_msg   *m        = mk_msg("t", "m", 1, NULL);
	uint32_t   a        = store_sid_new(s);
	void      *slot_op  = NULL;
	uint64_t   slot_gen = 0;
	for (uint64_t q = 1; q <= 3; q++) {
		store_queue_put_sid(s, "a", a, q, m, 1, false, NULL, 0, NULL, NULL);
	}
	// a/3 is a QoS 2 message whose PUBREC is recorded.
	store_queue_state_sid(s, "a", a, 3, STORE_Q_RELEASED, 33, NULL, NULL);
	sync_store(s);
	assert_int_equal(count_rows("queue"), 3);

	sem_init(&gate, 0, 0);
	block_store_thread(s);
	store_stats st0;
	store_stats_get(s, &st0);
	// a/1 and a/2 acked in order: one operation.
	assert_int_equal(store_queue_done_sid(s, "a", a, 1, 1, &slot_op, &slot_gen), NMQ_OK);
	assert_int_equal(store_queue_done_sid(s, "a", a, 2, 2, &slot_op, &slot_gen), NMQ_OK);
	store_stats mid;
	store_stats_get(s, &mid);
	assert_int_equal(mid.pending, 1);
	// a/4 and a/5 queued behind it, a/4 acked: the range grows in place
	// past a/4's put, which is then never written.
	store_queue_put_sid(s, "a", a, 4, m, 1, false, NULL, 0, NULL, NULL);
	store_queue_put_sid(s, "a", a, 5, m, 1, false, NULL, 0, NULL, NULL);
	store_queue_put_sid(s, "a", a, 6, m, 1, false, NULL, 0, NULL, NULL);
	// a/6 acked out of order (a/3 and a/5 still wanted): deleted alone.
	store_queue_del_sid(s, "a", a, 6, NULL, NULL);
	// a/3 completed (PUBCOMP): with a/4, the range is 1..4.
	assert_int_equal(store_queue_done_sid(s, "a", a, 3, 4, &slot_op, &slot_gen), NMQ_OK);
	store_stats_get(s, &mid);
	assert_int_equal(mid.pending, 5); // range, three puts, one delete
	// A read queued after it (a client coming back) sees a/5 only: a/3,
	// completed, is never read back.
	read_rows = 0;
	waiter_reset();
	assert_int_equal(store_queue_read(s, "a", 0, 0, on_read_row, on_done, NULL), NMQ_OK);
	sem_post(&gate);
	wait_calls(1);
	assert_int_equal(W.errors, 0);
	assert_int_equal(read_rows, 1);
	assert_int_equal(query_int("SELECT group_concat(seq) FROM queue WHERE cid = 'a'"), 5);
	store_stats st1;
	store_stats_get(s, &st1);
	// a/4's put, a/6's put and delete.
	assert_int_equal(st1.coalesced - st0.coalesced, 3);
	assert_int_equal(count_rows("msgs"), 1);
	assert_int_equal(query_int("SELECT refs FROM msgs"), 1);

	// The range op was taken: a later call queues a new one. A put of a
	// seq already done with (its put was held back, queued late) is
	// never written, in a later group too.
	assert_int_equal(store_queue_done_sid(s, "a", a, 5, 8, &slot_op, &slot_gen), NMQ_OK);
	sync_store(s);
	store_queue_put_sid(s, "a", a, 7, m, 1, false, NULL, 0, NULL, NULL);
	store_queue_put_sid(s, "a", a, 9, m, 1, false, NULL, 0, NULL, NULL);
	sync_store(s);
	assert_int_equal(query_int("SELECT group_concat(seq) FROM queue WHERE cid = 'a'"), 9);
	// Deleting the session forgets its range.
	store_session_del_sid(s, "a", a, NULL, NULL);
	store_queue_put_sid(s, "a", a, 2, m, 1, false, NULL, 0, NULL, NULL);
	sync_store(s);
	assert_int_equal(query_int("SELECT group_concat(seq) FROM queue WHERE cid = 'a'"), 2);
	store_close(s);
	sem_destroy(&gate);
	nmq_msg_release(m);
}

// Holds the store thread inside a group (in a subscription read's
// callback) until peek_go is posted.
static sem_t      peek_go;
static atomic_int peek_in;

static void on_sub_hold(void *arg, const store_sub *sub)
{
	(void)arg;
	(void)sub;
	atomic_store(&peek_in, 1);
	sem_wait(&peek_go);
}

// A done range queued while the store thread applies a group (after it
// took the group) covers puts of that group that are not applied yet:
// those are not written (the subscriber acked them meanwhile); the
// session's other puts, and other sessions', are.
static void test_done_ranges_peek(void **state)
{
	nmq_store *s  = open_store(0);
	nmq_msg   *m  = mk_msg("t", "m", 1, NULL);
	nmq_msg   *m2 = mk_msg("t", "n", 1, NULL);
	uint32_t   a = store_sid_new(s), b = store_sid_new(s), c = store_sid_new(s);
	void      *slot_a = NULL, *slot_c = NULL;
	uint64_t   gen_a = 0, gen_c = 0;
	store_sub  sub = { .client_id = "r", .filter = "x", .options = 1 };
	assert_int_equal(store_sub_put(s, &sub, NULL, NULL), NMQ_OK);
	sync_store(s);
	sem_init(&gate, 0, 0);
	sem_init(&peek_go, 0, 0);
	atomic_store(&peek_in, 0);
	block_store_thread(s);
	// The next group: a read that holds the thread, then a routed
	// message for a and b (one operation), a message for c alone, and a
	// barrier whose completion holds the thread after the commit.
	assert_int_equal(store_subs_read(s, "r", on_sub_hold, NULL, NULL), NMQ_OK);
	store_batch_begin(s);
	store_queue_put_sid(s, "a", a, 5, m, 1, false, NULL, 0, NULL, NULL);
	store_queue_put_sid(s, "b", b, 5, m, 1, false, NULL, 0, NULL, NULL);
	store_batch_end(s);
	store_queue_put_sid(s, "c", c, 7, m2, 1, false, NULL, 0, NULL, NULL);
	store_queue_put_sid(s, "c", c, 8, m2, 1, false, NULL, 0, NULL, NULL);
	assert_int_equal(store_sync(s, on_done_block, NULL), NMQ_OK);
	store_stats st0;
	store_stats_get(s, &st0);
	sem_post(&gate); // the group is taken, the read holds it
	while (!atomic_load(&peek_in)) {
		usleep(1000);
	}
	// a acks 1..5, c 1..7 (c/8 still wanted), while the group is applied.
	assert_int_equal(store_queue_done_sid(s, "a", a, 1, 5, &slot_a, &gen_a), NMQ_OK);
	assert_int_equal(store_queue_done_sid(s, "c", c, 1, 6, &slot_c, &gen_c), NMQ_OK);
	assert_int_equal(store_queue_done_sid(s, "c", c, 7, 7, &slot_c, &gen_c), NMQ_OK);
	sem_post(&peek_go);
	// Committed, the ranges not yet applied: a/5 and c/7 were not written.
	while (!atomic_load(&blocked_in_done)) {
		usleep(1000);
	}
	assert_int_equal(query_int("SELECT COUNT(*) FROM queue WHERE cid = 'a'"), 0);
	assert_int_equal(query_int("SELECT COUNT(*) FROM queue WHERE cid = 'b' AND seq = 5"), 1);
	assert_int_equal(query_int("SELECT group_concat(seq) FROM queue WHERE cid = 'c'"), 8);
	store_stats st1;
	store_stats_get(s, &st1);
	assert_int_equal(st1.coalesced - st0.coalesced, 2);
	sem_post(&gate);
	sync_store(s);
	assert_int_equal(count_rows("queue"), 2);
	assert_int_equal(query_int("SELECT refs FROM msgs WHERE id ="
	                           " (SELECT msg_id FROM queue WHERE cid = 'b')"),
	    1);
	store_close(s);
	sem_destroy(&gate);
	sem_destroy(&peek_go);
	nmq_msg_release(m);
	nmq_msg_release(m2);
}

// A group whose coalescing tables cannot be sized (out of memory) pairs
// nothing, but still records its done ranges: a put of a seq done with,
// in that group or a later one, is not written (it would stay, and come
// again after a restart).
static void test_done_ranges_group_oom(void **state)
{
	nmq_store *s        = open_store(0);
	nmq_msg   *m        = mk_msg("t", "m", 1, NULL);
	uint32_t   a        = store_sid_new(s);
	void      *slot_op  = NULL;
	uint64_t   slot_gen = 0;
	store_queue_put_sid(s, "a", a, 1, m, 1, false, NULL, 0, NULL, NULL);
	sync_store(s);
	sem_init(&gate, 0, 0);
	block_store_thread(s);
	store_test_group_oom(s, 1); // the next group
	assert_int_equal(store_queue_done_sid(s, "a", a, 1, 5, &slot_op, &slot_gen), NMQ_OK);
	store_queue_put_sid(s, "a", a, 2, m, 1, false, NULL, 0, NULL, NULL);
	store_queue_put_sid(s, "a", a, 3, m, 1, false, NULL, 0, NULL, NULL);
	waiter_reset();
	assert_int_equal(store_sync(s, on_done, NULL), NMQ_OK);
	sem_post(&gate);
	wait_calls(1);
	assert_int_equal(W.errors, 0);
	assert_int_equal(count_rows("queue"), 0);
	// A later group, coalesced as usual, still knows the range.
	store_queue_put_sid(s, "a", a, 5, m, 1, false, NULL, 0, NULL, NULL);
	store_queue_put_sid(s, "a", a, 6, m, 1, false, NULL, 0, NULL, NULL);
	sync_store(s);
	assert_int_equal(query_int("SELECT group_concat(seq) FROM queue"), 6);
	assert_int_equal(query_int("SELECT refs FROM msgs"), 1);
	store_close(s);
	sem_destroy(&gate);
	nmq_msg_release(m);
}

// A crash before the group holding a done range commits: the rows it
// covers are all still there, with their states.
static void test_done_crash_before_commit_work(nmq_store *s)
{
	nmq_msg *m        = mk_msg("t", "kept", 1, NULL);
	uint32_t a        = store_sid_new(s);
	void    *slot_op  = NULL;
	uint64_t slot_gen = 0;
	store_queue_put_sid(s, "a", a, 1, m, 1, false, NULL, 0, NULL, NULL);
	store_queue_put_sid(s, "a", a, 2, m, 2, false, NULL, 0, NULL, NULL);
	store_queue_state_sid(s, "a", a, 2, STORE_Q_RELEASED, 5, NULL, NULL);
	sync_store(s);
	stall_store_thread(s);
	// Both acked, a third queued and acked: never committed.
	store_queue_done_sid(s, "a", a, 1, 2, &slot_op, &slot_gen);
	store_queue_put_sid(s, "a", a, 3, m, 1, false, NULL, 0, NULL, NULL);
	store_queue_done_sid(s, "a", a, 3, 3, &slot_op, &slot_gen);
}

static void test_done_crash_before_commit(void **state)
{
	kill9_after(test_done_crash_before_commit_work);
	sessions_of_queue(); // (the load drops rows of no session)
	nmq_store *s = open_store(0);
	loaded     l = { 0 };
	assert_int_equal(store_load(s, (uint64_t)time(NULL) * 1000, &load_all, &l), NMQ_OK);
	assert_int_equal(l.qmsgs, 2);
	assert_int_equal(l.q_seq[0], 1);
	assert_int_equal(l.q_state[0], STORE_Q_QUEUED);
	assert_int_equal(l.q_seq[1], 2);
	assert_int_equal(l.q_state[1], STORE_Q_RELEASED);
	assert_int_equal(l.q_pid[1], 5);
	loaded_free(&l);
	store_close(s);
}

static void on_expired_will(void *arg, const char *cid, nmq_msg *will)
{
	loaded *l = arg;
	int     i = l->wills++;
	snprintf(l->will_cid[i], 32, "%s", cid);
	snprintf(l->will_payload[i], 32, "%.*s", (int)will->payload_len, (char *)will->payload);
}

static uint64_t wall_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int loaded_find(const loaded *l, const char *cid)
{
	for (int i = 0; i < l->sessions; i++) {
		if (strcmp(l->sess_cid[i], cid) == 0) {
			return i;
		}
	}
	return -1;
}

// A session stored online (its client connected when the broker died) is
// offline since the store's last "alive at" time at the next load: it
// expires by that time, its will handed back to be published; the time
// is written, so a second load counts from it too. A file without the
// alive row keeps such a session offline since the load.
static void test_online_at_crash_load(void **state)
{
	(void)state;
	uint64_t      t0     = wall_now_ms();
	nmq_store    *s      = open_store(0);
	nmq_msg      *w1     = mk_msg("will/short", "gone-short", 1, NULL);
	nmq_msg      *w2     = mk_msg("will/long", "gone-long", 1, NULL);
	store_session short_ = { .client_id = "on-short", .expiry_s = 2, .will_msg = w1 };
	store_session long_
	    = { .client_id = "on-long", .expiry_s = 3600, .will_msg = w2, .will_delay_s = 30 };
	store_session off = { .client_id = "off", .expiry_s = 3600, .offline_wall_ms = t0 - 1000 };
	store_session_put(s, &short_, NULL, NULL);
	store_session_put(s, &long_, NULL, NULL);
	store_session_put(s, &off, NULL, NULL);
	store_sub sub = { .client_id = "on-short", .filter = "a/#", .options = 1 };
	store_sub_put(s, &sub, NULL, NULL);
	store_queue_put(s, "on-short", 1, w2, 1, false, NULL, 0, NULL, NULL);
	sync_store(s);
	uint64_t t1 = wall_now_ms();
	// The group that wrote them wrote the alive row too.
	long long alive = query_int("SELECT wall_ms FROM alive WHERE id = 1");
	assert_true(alive >= (long long)t0 && alive <= (long long)t1);
	store_close(s); // as a kill -9 leaves it: the sessions stay online

	// Loaded 3 s later: "on-short" (2 s) expired since the alive time.
	s                  = open_store(0);
	loaded         l   = { 0 };
	store_load_ops ops = load_all;
	ops.expired_will   = on_expired_will;
	assert_int_equal(store_load(s, t1 + 3000, &ops, &l), NMQ_OK);
	assert_int_equal(l.sessions, 2);
	int il = loaded_find(&l, "on-long"), io = loaded_find(&l, "off");
	assert_true(il >= 0 && io >= 0);
	assert_int_equal(l.sess_offline[il], (uint64_t)alive);
	assert_int_equal(l.sess_offline[io], t0 - 1000);
	assert_int_equal(l.wills, 1);
	assert_string_equal(l.will_cid[0], "on-short");
	assert_string_equal(l.will_payload[0], "gone-short");
	assert_int_equal(l.subs, 0);
	assert_int_equal(l.qmsgs, 0);
	loaded_free(&l);
	store_close(s);
	assert_int_equal(count_rows("queue"), 0);
	assert_int_equal(query_int("SELECT COUNT(*) FROM sessions WHERE offline_wall_ms = 0"), 0);

	// The expired session's record stays (its will, nothing else) until
	// the caller deletes it with the will's writes.
	assert_int_equal(query_int("SELECT COUNT(*) FROM sessions WHERE cid = 'on-short'"
	                           " AND will_msg IS NOT NULL"),
	    1);
	assert_int_equal(query_int("SELECT COUNT(*) FROM subs"), 0);

	// A second load (another restart) keeps that time. The will was not
	// deleted (a crash before the group that publishes it committed): it
	// is handed back again, once it is deleted it is gone.
	s = open_store(0);
	memset(&l, 0, sizeof(l));
	assert_int_equal(store_load(s, t1 + 4000, &ops, &l), NMQ_OK);
	il = loaded_find(&l, "on-long");
	assert_true(il >= 0);
	assert_int_equal(l.sess_offline[il], (uint64_t)alive);
	assert_int_equal(loaded_find(&l, "on-short"), -1);
	assert_int_equal(l.wills, 1);
	assert_string_equal(l.will_cid[0], "on-short");
	loaded_free(&l);
	store_batch_begin(s);
	assert_int_equal(store_session_del(s, "on-short", NULL, NULL), NMQ_OK);
	store_batch_end(s);
	sync_store(s);
	assert_int_equal(query_int("SELECT COUNT(*) FROM sessions WHERE cid = 'on-short'"), 0);

	// A file without the alive row (written by an older build): offline
	// since the load, as before.
	store_session x = { .client_id = "on-x", .expiry_s = 2 };
	store_session_put(s, &x, NULL, NULL);
	sync_store(s);
	store_close(s);
	char path[512];
	snprintf(path, sizeof(path), "%s/nanomq.db", tmpdir);
	sqlite3 *db = NULL;
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, "DROP TABLE alive", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	s = open_store(0);
	memset(&l, 0, sizeof(l));
	assert_int_equal(store_load(s, t1 + 60000, &ops, &l), NMQ_OK);
	int ix = loaded_find(&l, "on-x");
	assert_true(ix >= 0);
	assert_int_equal(l.sess_offline[ix], 0);
	loaded_free(&l);
	store_close(s);
	nmq_msg_release(w1);
	nmq_msg_release(w2);
}

// The idle store writes the alive row only while a stored session with a
// finite expiry is online.
static void test_alive_idle_writes(void **state)
{
	(void)state;
	store_opts o = {
		.dir           = tmpdir,
		.durability    = STORE_DURABLE_OS,
		.flush_max     = 100,
		.alive_idle_ms = 100,
	};
	nmq_store *s = NULL;
	char       err[256];
	assert_int_equal(store_open(&s, &o, err, sizeof(err)), NMQ_OK);
	// A session that never expires needs no death time: online, it does
	// not make the idle store write.
	store_session forever = { .client_id = "forever", .expiry_s = UINT32_MAX };
	store_session_put(s, &forever, NULL, NULL);
	sync_store(s);
	long long a0 = query_int("SELECT wall_ms FROM alive WHERE id = 1");
	usleep(450 * 1000);
	assert_int_equal(query_int("SELECT wall_ms FROM alive WHERE id = 1"), a0);
	store_session on = { .client_id = "on", .expiry_s = 60 };
	store_session_put(s, &on, NULL, NULL);
	sync_store(s);
	long long a1 = query_int("SELECT wall_ms FROM alive WHERE id = 1");
	assert_true(a1 > 0);
	usleep(450 * 1000);
	long long a2 = query_int("SELECT wall_ms FROM alive WHERE id = 1");
	assert_true(a2 >= a1 + 200);
	// Offline: no more writes while nothing else happens.
	assert_int_equal(store_session_offline(s, "on", wall_now_ms(), NULL, NULL), NMQ_OK);
	sync_store(s);
	long long a3 = query_int("SELECT wall_ms FROM alive WHERE id = 1");
	usleep(450 * 1000);
	assert_int_equal(query_int("SELECT wall_ms FROM alive WHERE id = 1"), a3);
	// Online again (a put of the offline record's row): writes resume.
	assert_int_equal(store_session_offline(s, "on", 0, NULL, NULL), NMQ_OK);
	sync_store(s);
	usleep(450 * 1000);
	assert_true(query_int("SELECT wall_ms FROM alive WHERE id = 1") >= a3 + 200);
	store_close(s);
}

// Rows held back (store_hold.c, decisions/0045) are those of a message
// queued for STORE_HOLD_MIN_ROWS (4) sessions or more: the tests queue
// each message for the session they look at and three fillers.
static const char *const fill_cid[3] = { "f0", "f1", "f2" };
static uint32_t          fill_sid[3];
static uint64_t          fill_seq;

static void fillers_init(nmq_store *s)
{
	for (int i = 0; i < 3; i++) {
		fill_sid[i] = store_sid_new(s);
	}
	fill_seq = 0;
}

// Queues m for cid (connected) and the fillers, one multi-row put.
static void put_fanout(nmq_store *s, nmq_msg *m, const char *cid, uint32_t sid, uint64_t seq,
    uint8_t qos, bool retain, const uint32_t *ids, uint32_t n_ids)
{
	store_batch_begin(s);
	assert_int_equal(
	    store_queue_put_live(s, cid, sid, seq, m, qos, retain, ids, n_ids), NMQ_OK);
	fill_seq++;
	for (int i = 0; i < 3; i++) {
		assert_int_equal(store_queue_put_live(
		                     s, fill_cid[i], fill_sid[i], fill_seq, m, 1, false, NULL, 0),
		    NMQ_OK);
	}
	store_batch_end(s);
}

// The fillers ack everything queued for them.
static void fillers_ack(nmq_store *s)
{
	for (int i = 0; i < 3; i++) {
		void    *op  = NULL;
		uint64_t gen = 0;
		store_queue_done_sid(s, fill_cid[i], fill_sid[i], 1, fill_seq, &op, &gen);
	}
}

static long long rows_of(const char *cid)
{
	char sql[128];
	snprintf(sql, sizeof(sql), "SELECT COUNT(*) FROM queue WHERE cid = '%s'", cid);
	return query_int(sql);
}

// A QoS 1 row for a connected client is kept in a held row by its group;
// acked before it is old enough, it is never written as a queue row.
static void test_held_rows_acked(void **state)
{
	(void)state;
	nmq_store *s        = open_store(0);
	nmq_msg   *m        = mk_msg("t", "h", 1, NULL);
	uint32_t   a        = store_sid_new(s);
	void      *slot_op  = NULL;
	uint64_t   slot_gen = 0;
	fillers_init(s);
	for (uint64_t q = 1; q <= 3; q++) {
		put_fanout(s, m, "a", a, q, 1, false, NULL, 0);
	}
	sync_store(s);
	assert_int_equal(count_rows("queue"), 0);
	assert_true(count_rows("held") >= 1);
	assert_int_equal(query_int("SELECT refs FROM msgs"), 12);
	// Acked: the next group drops the held rows and the message.
	assert_int_equal(store_queue_done_sid(s, "a", a, 1, 3, &slot_op, &slot_gen), NMQ_OK);
	fillers_ack(s);
	sync_store(s);
	sync_store(s);
	assert_int_equal(count_rows("held"), 0);
	assert_int_equal(count_rows("queue"), 0);
	assert_int_equal(count_rows("msgs"), 0);
	// Not connected (store_queue_put_sid), QoS 2, without a session
	// number, or a message for fewer than 4 sessions: written as rows at
	// once.
	store_queue_put_sid(s, "a", a, 4, m, 1, false, NULL, 0, NULL, NULL);
	put_fanout(s, m, "a", a, 5, 2, false, NULL, 0);
	put_fanout(s, m, "b", 0, 1, 1, false, NULL, 0);
	store_batch_begin(s);
	store_queue_put_live(s, "a", a, 6, m, 1, false, NULL, 0);
	store_queue_put_live(s, "c", store_sid_new(s), 1, m, 1, false, NULL, 0);
	store_queue_put_live(s, "d", store_sid_new(s), 1, m, 1, false, NULL, 0);
	store_batch_end(s);
	sync_store(s);
	assert_int_equal(rows_of("a"), 3);
	assert_int_equal(rows_of("b") + rows_of("c") + rows_of("d"), 3);
	assert_int_equal(rows_of("f0"), 0); // (held)
	store_close(s);
	nmq_msg_release(m);
}

// Not acked within STORE_HOLD_AGE_MS: written as queue rows (by a group
// of its own when nothing else comes), with their subscription ids, in
// the same transaction that deletes the held row; the acked ones of the
// same generation are not.
static void test_held_rows_aged(void **state)
{
	(void)state;
	nmq_store *s        = open_store(0);
	nmq_msg   *m        = mk_msg("t", "h", 1, NULL);
	uint32_t   a        = store_sid_new(s);
	uint32_t   b        = store_sid_new(s);
	uint32_t   ids[2]   = { 7, 300000 };
	void      *slot_op  = NULL;
	uint64_t   slot_gen = 0;
	fillers_init(s);
	for (uint64_t q = 1; q <= 3; q++) {
		put_fanout(s, m, "a", a, q, 1, false, NULL, 0);
	}
	put_fanout(s, m, "b", b, 1, 1, true, ids, 2);
	sync_store(s);
	store_queue_done_sid(s, "a", a, 1, 2, &slot_op, &slot_gen);
	fillers_ack(s);
	sync_store(s);
	// The generation(s), and the done records of the group that acked.
	assert_true(count_rows("held") >= 2);
	for (int i = 0; i < 300 && count_rows("held") != 0; i++) {
		usleep(10 * 1000);
	}
	assert_int_equal(count_rows("held"), 0);
	assert_int_equal(count_rows("queue"), 2);
	assert_int_equal(query_int("SELECT seq FROM queue WHERE cid = 'a'"), 3);
	assert_int_equal(query_int("SELECT retain FROM queue WHERE cid = 'b'"), 1);
	assert_int_equal(query_int("SELECT length(sub_ids) FROM queue WHERE cid = 'b'"), 8);
	assert_int_equal(query_int("SELECT refs FROM msgs"), 2);
	store_close(s);
	nmq_msg_release(m);
	// Read back as stored.
	sessions_of_queue(); // (the load drops rows of no session)
	s        = open_store(0);
	loaded l = { 0 };
	assert_int_equal(store_load(s, (uint64_t)time(NULL) * 1000, &load_all, &l), NMQ_OK);
	assert_int_equal(l.qmsgs, 2);
	for (int i = 0; i < l.qmsgs; i++) {
		if (strcmp(l.q_cid[i], "b") == 0) {
			assert_int_equal(l.q_nsub[i], 2);
			assert_int_equal(l.q_subs[i][0], 7);
			assert_int_equal(l.q_subs[i][1], 300000);
		} else {
			assert_int_equal(l.q_seq[i], 3);
		}
	}
	loaded_free(&l);
	store_close(s);
}

// An operation that reads or deletes rows by SQL sees the rows held so
// far, its own group's too; a deleted session leaves nothing held behind.
static void test_held_rows_before_sql(void **state)
{
	(void)state;
	nmq_store *s = open_store(0);
	nmq_msg   *m = mk_msg("t", "h", 1, NULL);
	uint32_t   a = store_sid_new(s);
	uint32_t   c = store_sid_new(s);
	fillers_init(s);
	put_fanout(s, m, "a", a, 1, 1, false, NULL, 0);
	put_fanout(s, m, "c", c, 1, 1, false, NULL, 0);
	sync_store(s);
	assert_int_equal(count_rows("queue"), 0);
	sem_init(&gate, 0, 0);
	block_store_thread(s);
	// One group: a put held, then a read of the session.
	put_fanout(s, m, "a", a, 2, 1, false, NULL, 0);
	read_rows = 0;
	waiter_reset();
	assert_int_equal(store_queue_read(s, "a", 0, 0, on_read_row, on_done, NULL), NMQ_OK);
	sem_post(&gate);
	wait_calls(1);
	assert_int_equal(W.errors, 0);
	assert_int_equal(read_rows, 2);
	assert_int_equal(count_rows("held"), 0);
	// Deleting the session: no row comes back at the next start.
	put_fanout(s, m, "c", c, 2, 1, false, NULL, 0);
	store_session_del_sid(s, "c", c, NULL, NULL);
	sync_store(s);
	store_close(s);
	sem_destroy(&gate);
	assert_int_equal(count_rows("held"), 0);
	assert_int_equal(rows_of("c"), 0);
	assert_int_equal(
	    query_int("SELECT COUNT(*) FROM queue WHERE cid = 'a' AND seq IN (1, 2)"), 2);
	assert_int_equal(rows_of("f0"), 4);
	nmq_msg_release(m);
}

// A stop writes what is held as rows (a file an older build reads whole).
static void test_held_rows_close(void **state)
{
	(void)state;
	nmq_store *s = open_store(0);
	nmq_msg   *m = mk_msg("t", "h", 1, NULL);
	uint32_t   a = store_sid_new(s);
	fillers_init(s);
	for (uint64_t q = 1; q <= 4; q++) {
		put_fanout(s, m, "a", a, q, 1, false, NULL, 0);
	}
	sync_store(s);
	assert_true(count_rows("held") >= 1);
	assert_int_equal(count_rows("queue"), 0);
	store_close(s);
	assert_int_equal(count_rows("held"), 0);
	assert_int_equal(rows_of("a"), 4);
	assert_int_equal(count_rows("queue"), 16);
	assert_int_equal(query_int("SELECT refs FROM msgs"), 16);
	nmq_msg_release(m);
}

// kill -9 while rows are held: at the next open they are queue rows
// again, except those acked (their done records), every message
// reference accounted for.
static void test_held_rows_crash_work(nmq_store *s)
{
	nmq_msg *m1       = mk_msg("t", "one", 1, NULL);
	nmq_msg *m2       = mk_msg("t", "two", 1, NULL);
	uint32_t a        = store_sid_new(s);
	uint32_t b        = store_sid_new(s);
	uint32_t id       = 42;
	void    *slot_op  = NULL;
	uint64_t slot_gen = 0;
	fillers_init(s);
	for (uint64_t q = 1; q <= 5; q++) {
		put_fanout(s, q < 3 ? m1 : m2, "a", a, q, 1, false, NULL, 0);
	}
	put_fanout(s, m1, "b", b, 9, 1, false, &id, 1);
	sync_store(s);
	store_queue_done_sid(s, "a", a, 1, 2, &slot_op, &slot_gen);
	fillers_ack(s);
	sync_store(s);
}

static void test_held_rows_crash(void **state)
{
	(void)state;
	kill9_after(test_held_rows_crash_work);
	nmq_store *s = open_store(0);
	assert_int_equal(count_rows("held"), 0);
	// a/3..5 and b/9; a/1..2, acked (the done records written with the
	// group that applied the range), not.
	assert_int_equal(query_int("SELECT COUNT(*) FROM queue WHERE cid = 'a' AND seq >= 3"), 3);
	long long a12 = query_int("SELECT COUNT(*) FROM queue WHERE cid = 'a' AND seq < 3");
	assert_int_equal(a12, 0);
	assert_int_equal(query_int("SELECT COUNT(*) FROM queue WHERE cid = 'b' AND seq = 9"), 1);
	assert_int_equal(query_int("SELECT length(sub_ids) FROM queue WHERE cid = 'b'"), 4);
	assert_int_equal(rows_of("f0") + rows_of("f1") + rows_of("f2"), 0);
	// Each message row counts the queue rows that point at it.
	assert_int_equal(query_int("SELECT COUNT(*) FROM msgs m WHERE refs !="
	                           " (SELECT COUNT(*) FROM queue q WHERE q.msg_id = m.id)"),
	    0);
	sessions_of_queue(); // (the load drops rows of no session)
	loaded l = { 0 };
	assert_int_equal(store_load(s, (uint64_t)time(NULL) * 1000, &load_all, &l), NMQ_OK);
	assert_int_equal(l.qmsgs, 4 + (int)a12);
	loaded_free(&l);
	store_close(s);
}

// Held rows left by a crash while another process holds the file locked
// (past the busy timeout): the store does not open, and the file is left
// as it is (not moved aside as damaged); once the lock goes, it opens and
// restores them.
static void test_held_rows_locked_at_open(void **state)
{
	(void)state;
	kill9_after(test_held_rows_crash_work);
	assert_true(count_rows("held") >= 1);
	char path[512];
	snprintf(path, sizeof(path), "%s/nanomq.db", tmpdir);
	sqlite3 *lock = NULL;
	assert_int_equal(sqlite3_open(path, &lock), SQLITE_OK);
	assert_int_equal(sqlite3_exec(lock, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
	store_opts o = { .dir = tmpdir, .durability = STORE_DURABLE_OS, .flush_max = 100 };
	nmq_store *s = NULL;
	char       err[256];
	assert_int_not_equal(store_open(&s, &o, err, sizeof(err)), NMQ_OK);
	assert_non_null(strstr(err, "locked"));
	assert_int_equal(sqlite3_exec(lock, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(lock);
	// Nothing moved aside.
	DIR *d = opendir(tmpdir);
	assert_non_null(d);
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		assert_null(strstr(e->d_name, "damaged"));
	}
	closedir(d);
	s = open_store(0);
	store_close(s);
	assert_int_equal(count_rows("held"), 0);
	assert_int_equal(query_int("SELECT COUNT(*) FROM queue WHERE cid = 'a' AND seq >= 3"), 3);
}

// A damaged held row does not stop the store from opening: it is logged
// and dropped, the entries before the damage restored.
static void test_held_rows_damaged(void **state)
{
	(void)state;
	nmq_store *s = open_store(0);
	nmq_msg   *m = mk_msg("t", "h", 1, NULL);
	store_queue_put_sid(s, "a", 0, 1, m, 1, false, NULL, 0, NULL, NULL);
	sync_store(s);
	store_close(s);
	nmq_msg_release(m);
	long long msg = query_int("SELECT id FROM msgs");
	char      path[512];
	snprintf(path, sizeof(path), "%s/nanomq.db", tmpdir);
	sqlite3 *db = NULL;
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	// A valid entry (client "z", seq 5, the message, QoS 1), then one
	// whose client index is out of range; a blob of garbage; an empty one.
	uint8_t good[] = { 'H', 'L', 'D', '2', 1, 1, 'z', 0, 5, (uint8_t)(msg * 2), 1, 3, 7, 0, 1 };
	assert_true(msg > 0 && msg < 64);
	sqlite3_stmt *st = NULL;
	assert_int_equal(
	    sqlite3_prepare_v2(db, "INSERT INTO held(ents) VALUES (?1)", -1, &st, NULL), SQLITE_OK);
	sqlite3_bind_blob(st, 1, good, sizeof(good), SQLITE_STATIC);
	assert_int_equal(sqlite3_step(st), SQLITE_DONE);
	sqlite3_reset(st);
	sqlite3_bind_blob(st, 1, "garbage!", 8, SQLITE_STATIC);
	assert_int_equal(sqlite3_step(st), SQLITE_DONE);
	sqlite3_reset(st);
	sqlite3_bind_zeroblob(st, 1, 0);
	assert_int_equal(sqlite3_step(st), SQLITE_DONE);
	sqlite3_finalize(st);
	assert_int_equal(
	    sqlite3_exec(db, "UPDATE msgs SET refs = refs + 1", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	s = open_store(0);
	store_close(s);
	assert_int_equal(count_rows("held"), 0);
	assert_int_equal(query_int("SELECT COUNT(*) FROM queue WHERE cid = 'z' AND seq = 5"), 1);
	assert_int_equal(query_int("SELECT refs FROM msgs"), 2);
}

static long long file_size(const char *name)
{
	char        path[600];
	struct stat st;
	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	return stat(path, &st) == 0 ? (long long)st.st_size : 0;
}

// The store checkpoints by itself, every opts.ckpt_frames pages of WAL,
// after the group that passes it: the WAL is started over and stays
// about that long while the database file receives the rows; nothing is
// lost across a close and a reopen. With SQLite's automatic checkpoint
// off and none of ours, the WAL would hold the whole 400 messages
// (about 1,000 pages of 4 KB) until the close.
static void test_checkpoint_interval(void **state)
{
	store_opts o = {
		.dir         = tmpdir,
		.durability  = STORE_DURABLE_FSYNC,
		.flush_max   = 100,
		.ckpt_frames = 64,
	};
	nmq_store *s = NULL;
	char       err[256];
	assert_int_equal(store_open(&s, &o, err, sizeof(err)), NMQ_OK);
	char payload[6000];
	memset(payload, 'p', sizeof(payload) - 1);
	payload[sizeof(payload) - 1] = '\0';
	long long wal_max            = 0;
	for (int g = 0; g < 40; g++) {
		for (int i = 0; i < 10; i++) {
			nmq_msg *m = mk_msg("t/ckpt", payload, 1, NULL);
			assert_int_equal(store_queue_put(s, "a", (uint64_t)(g * 10 + i + 1), m, 1,
			                     false, NULL, 0, NULL, NULL),
			    NMQ_OK);
			nmq_msg_release(m);
		}
		sync_store(s); // one group of ten messages, about 20 pages
		long long w = file_size("nanomq.db-wal");
		wal_max     = w > wal_max ? w : wal_max;
	}
	// 64 pages and the group that passed them, not the 2.4 MB written.
	assert_true(wal_max > 0);
	assert_true(wal_max < 130 * 4120);
	assert_true(file_size("nanomq.db") > 1500000);
	assert_int_equal(query_int("SELECT COUNT(*) FROM queue WHERE cid = 'a'"), 400);
	store_close(s);
	s = open_store(0);
	store_close(s);
	assert_int_equal(query_int("SELECT COUNT(*) FROM queue WHERE cid = 'a'"), 400);
	assert_int_equal(query_int("SELECT MIN(seq) * 1000 + MAX(seq) FROM queue"), 1400);
}

// ---------------------------------------------------------------------------
// Offline segments (store_oseg.c, decisions/0053).

typedef struct seg_reader {
	int      n;
	uint64_t seqs[16];
	uint8_t  qos[16], mqos[16];
	bool     retain[16];
	char     payload[16][32], topic[16][32];
	uint32_t expiry[16], n_ids[16], ids[16][2];
	uint32_t props_len[16];
} seg_reader;

static seg_reader SG;

static void on_seg_read(void *arg, const store_qmsg *q)
{
	seg_reader *r = arg;
	int         i = r->n++;
	assert_true(i < 16);
	r->seqs[i]   = q->seq;
	r->qos[i]    = q->qos;
	r->mqos[i]   = q->msg->qos;
	r->retain[i] = q->retain;
	snprintf(r->payload[i], sizeof(r->payload[i]), "%.*s", (int)q->msg->payload_len,
	    (const char *)q->msg->payload);
	snprintf(r->topic[i], sizeof(r->topic[i]), "%s", q->msg->topic);
	r->expiry[i]    = q->msg->expiry_interval;
	r->props_len[i] = q->msg->props_len;
	r->n_ids[i]     = q->n_sub_ids;
	for (uint32_t k = 0; k < q->n_sub_ids && k < 2; k++) {
		r->ids[i][k] = q->sub_ids[k];
	}
}

static void seg_read(nmq_store *s, const char *cid, uint64_t after, uint32_t max)
{
	memset(&SG, 0, sizeof(SG));
	waiter_reset();
	assert_int_equal(store_queue_read(s, cid, after, max, on_seg_read, on_done, &SG), NMQ_OK);
	wait_calls(1);
	assert_int_equal(W.errors, 0);
}

// Puts n messages "<cid>-<seq>" for cid (sid) at seqs first.., each its own
// message (so not one multi-put), in one group.
static void seg_put(nmq_store *s, const char *cid, uint32_t sid, uint64_t first, int n)
{
	store_batch_begin(s);
	for (int i = 0; i < n; i++) {
		char p[32];
		snprintf(p, sizeof(p), "%s-%llu", cid, (unsigned long long)(first + (uint64_t)i));
		nmq_msg *m = mk_msg("seg/t", p, 1, NULL);
		assert_int_equal(store_queue_put_sid(s, cid, sid, first + (uint64_t)i, m, 1, false,
		                     NULL, 0, NULL, NULL),
		    NMQ_OK);
		nmq_msg_release(m);
	}
	store_batch_end(s);
	sync_store(s);
}

// Messages for an offline session are one segment row per group and
// client id, no message or queue row; a backlog read gives them back in
// order with every field, as queue rows from then on; a clean stop
// leaves none.
static void test_segments_round_trip(void **state)
{
	nmq_store *s = open_store(0);
	uint32_t   a = store_sid_new(s), b = store_sid_new(s);
	uint32_t   ids[2]   = { 7, 300000 };
	nmq_msg   *m1       = mk_msg("seg/one", "first", 2, "\x01\x01");
	nmq_msg   *m2       = mk_msg("seg/two", "second", 1, NULL);
	m1->retain          = true;
	m1->expiry_at_ms    = nmq_clock_ms() + 3600 * 1000;
	m1->expiry_interval = 3600;
	store_batch_begin(s);
	store_queue_put_sid(s, "a", a, 1, m1, 2, true, ids, 2, NULL, NULL);
	store_queue_put_sid(s, "b", b, 1, m2, 1, false, NULL, 0, NULL, NULL);
	store_queue_put_sid(s, "a", a, 2, m2, 1, false, ids, 1, NULL, NULL);
	store_batch_end(s);
	sync_store(s);
	seg_put(s, "a", a, 3, 3);
	// m2 went to two sessions in a row: one multi-put, written as rows
	// (b/1, a/2) with one message row; a/1 and a/3..5 are segments.
	assert_int_equal(count_rows("queue"), 2);
	assert_int_equal(count_rows("msgs"), 1);
	assert_int_equal(count_rows("oseg"), 2);
	assert_int_equal(query_int("SELECT SUM(n) FROM oseg"), 4);
	store_stats st;
	store_stats_get(s, &st);
	assert_int_equal(st.queued_rows, 6);

	// Read from seq 1 on, two at a time: in order, whole.
	seg_read(s, "a", 1, 2);
	assert_int_equal(SG.n, 2);
	assert_int_equal(SG.seqs[0], 2);
	assert_int_equal(SG.seqs[1], 3);
	assert_string_equal(SG.payload[0], "second");
	assert_string_equal(SG.payload[1], "a-3");
	assert_int_equal(SG.n_ids[0], 1);
	assert_int_equal(SG.ids[0][0], 7);
	seg_read(s, "a", 0, 0);
	assert_int_equal(SG.n, 5);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(SG.seqs[i], (uint64_t)i + 1);
	}
	assert_string_equal(SG.topic[0], "seg/one");
	assert_string_equal(SG.payload[0], "first");
	assert_int_equal(SG.qos[0], 2);
	assert_int_equal(SG.mqos[0], 2);
	assert_true(SG.retain[0]);
	assert_int_equal(SG.expiry[0], 3600);
	assert_int_equal(SG.props_len[0], 2);
	assert_int_equal(SG.n_ids[0], 2);
	assert_int_equal(SG.ids[0][0], 7);
	assert_int_equal(SG.ids[0][1], 300000);
	assert_string_equal(SG.payload[4], "a-5");
	// a's are all queue rows now.
	assert_int_equal(query_int("SELECT COUNT(*) FROM queue WHERE cid = 'a'"), 5);
	assert_int_equal(count_rows("oseg"), 0);
	store_stats_get(s, &st);
	assert_int_equal(st.queued_rows, 6);
	// Acked: deleted by seq as any queue row.
	store_queue_del_sid(s, "a", a, 1, NULL, NULL);
	sync_store(s);
	assert_int_equal(query_int("SELECT COUNT(*) FROM queue WHERE cid = 'a'"), 4);
	// b's next ones are a segment; the stop writes it as queue rows.
	seg_put(s, "b", b, 2, 2);
	assert_int_equal(count_rows("oseg"), 1);
	store_close(s);
	assert_int_equal(count_rows("oseg"), 0);
	assert_int_equal(query_int("SELECT COUNT(*) FROM queue WHERE cid = 'b'"), 3);
	s = open_store(0);
	seg_read(s, "b", 0, 0);
	assert_int_equal(SG.n, 3);
	assert_string_equal(SG.payload[0], "second");
	assert_string_equal(SG.payload[2], "b-3");
	store_close(s);
	nmq_msg_release(m1);
	nmq_msg_release(m2);
}

static void test_segments_crash_work(nmq_store *s)
{
	store_session a = { .client_id = "a", .expiry_s = 600 };
	store_session_put(s, &a, NULL, NULL);
	uint32_t sid = store_sid_new(s);
	seg_put(s, "a", sid, 1, 4);
	seg_put(s, "a", sid, 5, 3);
	// What a crash leaves: segments, no queue rows.
	if (count_rows("oseg") != 2 || count_rows("queue") != 0) {
		_exit(4);
	}
}

// Segments a kill -9 left become queue rows at the next open, before the
// load reads the sessions: every message back, in order, and the session's
// highest seq with them.
static void test_segments_crash(void **state)
{
	kill9_after(test_segments_crash_work);
	assert_int_equal(count_rows("oseg"), 2);
	nmq_store *s = open_store(0);
	assert_int_equal(count_rows("oseg"), 0);
	assert_int_equal(count_rows("queue"), 7);
	loaded l = { 0 };
	assert_int_equal(store_load(s, (uint64_t)time(NULL) * 1000, &load_all, &l), NMQ_OK);
	assert_int_equal(l.sessions, 1);
	assert_int_equal(l.sess_max_seq[0], 7);
	loaded_free(&l);
	seg_read(s, "a", 0, 0);
	assert_int_equal(SG.n, 7);
	for (int i = 0; i < 7; i++) {
		char p[32];
		snprintf(p, sizeof(p), "a-%d", i + 1);
		assert_int_equal(SG.seqs[i], (uint64_t)i + 1);
		assert_string_equal(SG.payload[i], p);
	}
	store_close(s);
}

static void test_segments_damaged_work(nmq_store *s)
{
	uint32_t sid = store_sid_new(s);
	seg_put(s, "a", sid, 1, 3);
	seg_put(s, "a", sid, 4, 3);
}

// A damaged segment (cut short by hand after a kill -9): the entries
// before the damage come back, the rest is dropped and logged; the store
// opens with everything else.
static void test_segments_damaged(void **state)
{
	kill9_after(test_segments_damaged_work);
	// The first segment loses its last entry's tail; the second's blob is
	// garbage.
	db_exec("UPDATE oseg SET ents = substr(ents, 1, length(ents) - 2) WHERE id = "
	        "(SELECT MIN(id) FROM oseg);"
	        "UPDATE oseg SET ents = x'00112233' WHERE id = (SELECT MAX(id) FROM oseg);");
	nmq_store *s = open_store(0);
	assert_int_equal(count_rows("oseg"), 0);
	seg_read(s, "a", 0, 0);
	assert_int_equal(SG.n, 2);
	assert_string_equal(SG.payload[0], "a-1");
	assert_string_equal(SG.payload[1], "a-2");
	store_close(s);
}

// Past max_queued, the oldest queued messages go first whether they are
// queue rows or segment entries: an entry is cut from the front of its
// segment, a segment evicted whole is deleted.
static void test_segments_eviction(void **state)
{
	store_opts o = { .dir = tmpdir, .flush_max = 100, .max_queued = 5, .evicted = on_evicted };
	nmq_store *s = NULL;
	char       err[256];
	assert_int_equal(store_open(&s, &o, err, sizeof(err)), NMQ_OK);
	uint32_t a = store_sid_new(s), c = store_sid_new(s);
	nmq_msg *m = mk_msg("t", "p", 1, NULL);
	n_evicted  = 0;
	// c's two rows, for a connected client: queue rows, the oldest.
	store_queue_put_live(s, "c", c, 1, m, 1, false, NULL, 0);
	store_queue_put_live(s, "c", c, 2, m, 1, false, NULL, 0);
	sync_store(s);
	seg_put(s, "a", a, 1, 3); // 5 queued
	assert_int_equal(n_evicted, 0);
	seg_put(s, "a", a, 4, 3); // 8: c/1, c/2 and a/1 go
	assert_int_equal(n_evicted, 3);
	assert_int_equal(evicted_seqs[0], 1);
	assert_int_equal(evicted_seqs[1], 2);
	assert_int_equal(evicted_seqs[2], 1);
	assert_int_equal(count_rows("queue"), 0);
	assert_int_equal(query_int("SELECT SUM(n) FROM oseg"), 5);
	seg_put(s, "a", a, 7, 2); // 7: a/2 and a/3, the rest of the first segment
	assert_int_equal(n_evicted, 5);
	assert_int_equal(evicted_seqs[3], 2);
	assert_int_equal(evicted_seqs[4], 3);
	assert_int_equal(count_rows("oseg"), 2);
	store_stats st;
	store_stats_get(s, &st);
	assert_int_equal(st.evicted, 5);
	assert_int_equal(st.queued_rows, 5);
	seg_read(s, "a", 0, 0);
	assert_int_equal(SG.n, 5);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(SG.seqs[i], (uint64_t)i + 4);
	}
	nmq_msg_release(m);
	store_close(s);
}

// A session deleted (clean start, expiry) takes its segments with it,
// the running group's too; puts after the delete in the same group
// belong to the new session.
static void test_segments_session_del(void **state)
{
	nmq_store *s = open_store(0);
	uint32_t   a = store_sid_new(s);
	seg_put(s, "a", a, 1, 3);
	store_batch_begin(s);
	nmq_msg *m1 = mk_msg("t", "old", 1, NULL);
	nmq_msg *m2 = mk_msg("t", "new", 1, NULL);
	store_queue_put_sid(s, "a", a, 4, m1, 1, false, NULL, 0, NULL, NULL);
	store_session_del(s, "a", NULL, NULL);
	uint32_t a2 = store_sid_new(s);
	store_queue_put_sid(s, "a", a2, 1, m2, 1, false, NULL, 0, NULL, NULL);
	store_batch_end(s);
	sync_store(s);
	assert_int_equal(count_rows("queue"), 0);
	assert_int_equal(query_int("SELECT SUM(n) FROM oseg"), 1);
	// Written with the new session's number, not the deleted one's (the
	// group's entry for the client id kept the first number it saw).
	assert_int_equal(query_int("SELECT sid FROM oseg"), (int)a2);
	store_stats st;
	store_stats_get(s, &st);
	assert_int_equal(st.queued_rows, 1);
	seg_read(s, "a", 0, 0);
	assert_int_equal(SG.n, 1);
	assert_string_equal(SG.payload[0], "new");
	store_session_del(s, "a", NULL, NULL);
	sync_store(s);
	assert_int_equal(count_rows("queue"), 0);
	assert_int_equal(count_rows("msgs"), 0);
	assert_int_equal(count_rows("oseg"), 0);
	nmq_msg_release(m1);
	nmq_msg_release(m2);
	store_close(s);
}

// A clean stop writes the segments as queue rows in several groups
// (STORE_OSEG_STOP_ROWS segment rows each, a checkpoint between): all of
// them, whatever their number.
static void test_segments_stop_in_groups(void **state)
{
	nmq_store *s = open_store(0);
	store_batch_begin(s);
	for (int i = 0; i < 5000; i++) {
		char cid[16], p[16];
		snprintf(cid, sizeof(cid), "c%d", i);
		snprintf(p, sizeof(p), "m%d", i);
		nmq_msg *m = mk_msg("t", p, 1, NULL);
		assert_int_equal(store_queue_put_sid(
		                     s, cid, store_sid_new(s), 1, m, 1, false, NULL, 0, NULL, NULL),
		    NMQ_OK);
		nmq_msg_release(m);
	}
	store_batch_end(s);
	sync_store(s);
	assert_int_equal(count_rows("oseg"), 5000);
	store_stats st0;
	store_stats_get(s, &st0);
	store_close(s);
	assert_int_equal(count_rows("oseg"), 0);
	assert_int_equal(count_rows("queue"), 5000);
	assert_int_equal(count_rows("msgs"), 5000);
	assert_int_equal(query_int("SELECT COUNT(*) FROM queue q JOIN msgs m ON m.id = q.msg_id"
	                           " WHERE m.payload = CAST('m' || substr(q.cid, 2) AS BLOB)"),
	    5000);
}

// A read expands only the oldest segments it needs (at least its rows),
// an update or delete by seq only those reaching its seq: a client back
// with a large backlog does not have it all rewritten at its first read,
// holding up every other group meanwhile; what is left stays segments.
static void test_segments_partial_expansion(void **state)
{
	nmq_store *s = open_store(0);
	uint32_t   a = store_sid_new(s);
	seg_put(s, "a", a, 1, 4);
	seg_put(s, "a", a, 5, 4);
	seg_put(s, "a", a, 9, 4);
	assert_int_equal(count_rows("oseg"), 3);
	seg_read(s, "a", 0, 2);
	assert_int_equal(SG.n, 2);
	assert_int_equal(SG.seqs[0], 1);
	assert_int_equal(SG.seqs[1], 2);
	assert_int_equal(count_rows("oseg"), 2);
	assert_int_equal(count_rows("queue"), 4);
	// Acks of what was read touch no segment.
	store_queue_del_sid(s, "a", a, 1, NULL, NULL);
	store_queue_state_sid(s, "a", a, 2, STORE_Q_SENT, 7, NULL, NULL);
	sync_store(s);
	assert_int_equal(count_rows("oseg"), 2);
	assert_int_equal(count_rows("queue"), 3);
	// The next reads go on in order, segment by segment.
	seg_read(s, "a", 2, 4);
	assert_int_equal(SG.n, 4);
	assert_int_equal(SG.seqs[0], 3);
	assert_int_equal(SG.seqs[3], 6);
	assert_int_equal(count_rows("oseg"), 1);
	// A delete reaching into the last segment makes it rows first.
	store_queue_del_sid(s, "a", a, 10, NULL, NULL);
	sync_store(s);
	assert_int_equal(count_rows("oseg"), 0);
	seg_read(s, "a", 6, 0);
	assert_int_equal(SG.n, 5);
	assert_int_equal(SG.seqs[0], 7);
	assert_int_equal(SG.seqs[2], 9);
	assert_int_equal(SG.seqs[3], 11);
	store_stats st;
	store_stats_get(s, &st);
	assert_int_equal(st.queued_rows, 10);
	store_close(s);
}

// Queue rows of a client id with no session row (the row deleted by hand)
// are dropped at load with their messages' references: a new session of
// that client id numbers its queue from 1 again, and its messages must
// not be refused as duplicates of the stale rows.
static void test_orphan_rows_dropped(void **state)
{
	nmq_store    *s = open_store(0);
	store_session a = { .client_id = "a", .expiry_s = 600 };
	store_session g = { .client_id = "ghost", .expiry_s = 600 };
	store_session_put(s, &a, NULL, NULL);
	store_session_put(s, &g, NULL, NULL);
	nmq_msg *m = mk_msg("t", "stale", 1, NULL);
	for (uint64_t q = 1; q <= 3; q++) {
		store_queue_put(s, "a", q, m, 1, false, NULL, 0, NULL, NULL);
		store_queue_put(s, "ghost", q, m, 1, false, NULL, 0, NULL, NULL);
	}
	sync_store(s);
	store_close(s);
	db_exec("DELETE FROM sessions WHERE cid = 'ghost'");
	s        = open_store(0);
	loaded l = { 0 };
	assert_int_equal(store_load(s, (uint64_t)time(NULL) * 1000, &load_all, &l), NMQ_OK);
	assert_int_equal(l.sessions, 1);
	assert_int_equal(l.qmsgs, 3);
	loaded_free(&l);
	assert_int_equal(query_int("SELECT COUNT(*) FROM queue WHERE cid = 'ghost'"), 0);
	assert_int_equal(query_int("SELECT SUM(refs) FROM msgs"), 3);
	store_stats st;
	store_stats_get(s, &st);
	assert_int_equal(st.queued_rows, 3);
	// A new session of that client id: its seq 1 is stored.
	nmq_msg *fresh = mk_msg("t", "fresh", 1, NULL);
	store_session_put(s, &g, NULL, NULL);
	waiter_reset();
	store_queue_put(s, "ghost", 1, fresh, 1, false, NULL, 0, on_done, NULL);
	wait_calls(1);
	assert_int_equal(W.errors, 0);
	memset(&R, 0, sizeof(R));
	seg_read(s, "ghost", 0, 0);
	assert_int_equal(SG.n, 1);
	assert_string_equal(SG.payload[0], "fresh");
	nmq_msg_release(m);
	nmq_msg_release(fresh);
	store_close(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_completion_after_commit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_group_pacing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sync_since, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reference_counting, setup, teardown),
		cmocka_unit_test_setup_teardown(test_eviction, setup, teardown),
		cmocka_unit_test_setup_teardown(test_expiry_at_load, setup, teardown),
		cmocka_unit_test_setup_teardown(test_online_at_crash_load, setup, teardown),
		cmocka_unit_test_setup_teardown(test_alive_idle_writes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lazy_read, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_truncated, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_zeroed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_garbage, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_foreign_and_version, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pending_bound, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kill9_acked_survive, setup, teardown),
		cmocka_unit_test_setup_teardown(test_group_coalescing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_del_ranges, setup, teardown),
		cmocka_unit_test_setup_teardown(test_batch_one_group, setup, teardown),
		cmocka_unit_test_setup_teardown(test_batch_after, setup, teardown),
		cmocka_unit_test_setup_teardown(test_batch_after_oom, setup, teardown),
		cmocka_unit_test_setup_teardown(test_crash_before_group_commit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sid_coalescing, setup_rows, teardown),
		cmocka_unit_test_setup_teardown(test_multi_put, setup, teardown),
		cmocka_unit_test_setup_teardown(test_done_ranges, setup_rows, teardown),
		cmocka_unit_test_setup_teardown(test_done_crash_before_commit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_done_ranges_group_oom, setup_rows, teardown),
		cmocka_unit_test_setup_teardown(test_done_ranges_peek, setup_rows, teardown),
		cmocka_unit_test_setup_teardown(test_subs_read, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rels_read, setup, teardown),
		cmocka_unit_test_setup_teardown(test_held_rows_acked, setup_rows, teardown),
		cmocka_unit_test_setup_teardown(test_held_rows_aged, setup, teardown),
		cmocka_unit_test_setup_teardown(test_held_rows_before_sql, setup, teardown),
		cmocka_unit_test_setup_teardown(test_held_rows_close, setup, teardown),
		cmocka_unit_test_setup_teardown(test_held_rows_crash, setup, teardown),
		cmocka_unit_test_setup_teardown(test_held_rows_damaged, setup, teardown),
		cmocka_unit_test_setup_teardown(test_held_rows_locked_at_open, setup, teardown),
		cmocka_unit_test_setup_teardown(test_checkpoint_interval, setup, teardown),
		cmocka_unit_test_setup_teardown(test_segments_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_segments_crash, setup, teardown),
		cmocka_unit_test_setup_teardown(test_segments_damaged, setup, teardown),
		cmocka_unit_test_setup_teardown(test_segments_eviction, setup, teardown),
		cmocka_unit_test_setup_teardown(test_segments_session_del, setup, teardown),
		cmocka_unit_test_setup_teardown(test_segments_stop_in_groups, setup, teardown),
		cmocka_unit_test_setup_teardown(test_segments_partial_expansion, setup, teardown),
		cmocka_unit_test_setup_teardown(test_orphan_rows_dropped, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
