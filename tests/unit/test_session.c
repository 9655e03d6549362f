// Unit tests of the session (nng/protocol/session.c): the queue bound and
// its drop counters, the in-flight window and packet ids, inbound QoS 2
// state, expiry and the delayed will. The test sees the session's private
// struct (session_impl.h) to check what the functions did to it.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <signal.h>

#include "nng/protocol/link.h"
#include "nng/protocol/session_impl.h"
#include "proto_test_util.h"

static nmq_msg *msg_new(const char *topic, const char *payload, uint8_t qos)
{
	nmq_msg *m = nmq_msg_alloc(topic, strlen(topic), 0, strlen(payload));
	assert_non_null(m);
	memcpy(m->payload, payload, strlen(payload));
	m->qos = qos;
	return m;
}

// Delivers one message (the test's reference is dropped after).
static void deliver(nmq_session *s, const char *topic, uint8_t qos)
{
	nmq_msg *m = msg_new(topic, "x", qos);
	nmq_session_deliver(s, m, qos, false, NULL, 0);
	nmq_msg_release(m);
}

static long metric(env *e, atomic_long *f)
{
	(void)e;
	return atomic_load(f);
}

static bool keep_not_b(void *arg, const nmq_msg *msg)
{
	(void)arg;
	return !(msg->topic_len == 1 && msg->topic[0] == 'b');
}

// An offline session keeps at most max_mqueue_len QoS 1/2 messages; the
// rest are counted as drop_queue_full. QoS 0 is not kept offline. A reload
// that takes read access away drops queued messages as drop_acl; over
// max_message_memory an offline session keeps nothing (drop_memory).
static void test_queue_bound(void **state)
{
	(void)state;
	proto_limits lim;
	default_limits(&lim);
	lim.max_mqueue_len = 5;
	env           *e   = env_new(&lim);
	proto_metrics *m   = proto_metrics_get(e->p);
	nmq_session   *s   = session_alloc(e->p, "q", NULL, 0);
	assert_non_null(s);

	bool online = true;
	for (int i = 0; i < 4; i++) {
		deliver(s, "a", 1);
	}
	deliver(s, "b", 2);
	assert_int_equal(session_queue_len(s, &online), 5);
	assert_false(online);
	assert_int_equal(metric(e, &m->drop_queue_full), 0);
	deliver(s, "a", 1);
	deliver(s, "a", 2);
	assert_int_equal(session_queue_len(s, &online), 5);
	assert_int_equal(metric(e, &m->drop_queue_full), 2);
	assert_int_equal(metric(e, &m->msgs_dropped), 2);
	// Order of arrival is kept across the QoS 1 and 2 entries.
	assert_int_equal(s->q.len, 5);
	assert_int_equal(s->q0.len, 0);

	// QoS 0 for an offline session is not kept (nor counted).
	deliver(s, "a", 0);
	assert_int_equal(session_queue_len(s, &online), 5);
	assert_int_equal(metric(e, &m->msgs_dropped), 2);

	// The ACL filter drops the one message on "b".
	assert_int_equal(nmq_session_drop_queued(s, keep_not_b, NULL), 1);
	assert_int_equal(session_queue_len(s, &online), 4);
	assert_int_equal(metric(e, &m->drop_acl), 1);
	assert_int_equal(metric(e, &m->msgs_dropped), 3);
	// Room again under the bound.
	deliver(s, "a", 1);
	assert_int_equal(session_queue_len(s, &online), 5);

	// Over max_message_memory (1 byte: the queued messages pass it).
	lim.max_message_memory = 1;
	assert_int_equal(proto_set_limits(e->p, &lim), NMQ_OK);
	assert_true(nmq_mem_in_use() > 1);
	assert_int_equal(metric(e, &m->drop_memory), 0);
	deliver(s, "a", 1);
	assert_int_equal(metric(e, &m->drop_memory), 1);
	assert_int_equal(metric(e, &m->msgs_dropped), 4);
	assert_int_equal(session_queue_len(s, &online), 5);
	assert_int_equal(metric(e, &m->alloc_failures), 0);

	nmq_session_release(s); // frees the queued messages
	env_free(e);
}

// Inbound QoS 2: an id is recorded once; a duplicate is reported until the
// release; at max_awaiting_rel ids more are refused unless the oldest
// waited past await_rel_timeout, which are then forgotten and counted.
static void test_qos2_inbound(void **state)
{
	(void)state;
	proto_limits lim;
	default_limits(&lim);
	lim.max_awaiting_rel    = 3;
	lim.await_rel_timeout_s = 10;
	env         *e          = env_new(&lim);
	nmq_session *s          = session_alloc(e->p, "q2", NULL, 0);
	assert_non_null(s);

	session_lock(s);
	assert_false(session_qos2_pending_locked(s, 5));
	assert_int_equal(session_qos2_record_locked(s, 5, 1000), NMQ_OK);
	assert_true(session_qos2_pending_locked(s, 5));
	// The PUBLISH resent before PUBREL.
	assert_int_equal(session_qos2_record_locked(s, 5, 1200), NMQ_EEXIST);
	assert_int_equal(s->rel_len, 1);
	// PUBREL releases it once.
	assert_true(session_qos2_release_locked(s, 5));
	assert_false(session_qos2_pending_locked(s, 5));
	assert_false(session_qos2_release_locked(s, 5));
	// After the release the id is new again.
	assert_int_equal(session_qos2_record_locked(s, 5, 1000), NMQ_OK);

	// The bound: three wait, a fourth is refused while they are young.
	assert_int_equal(session_qos2_record_locked(s, 6, 1000), NMQ_OK);
	assert_int_equal(session_qos2_record_locked(s, 7, 2000), NMQ_OK);
	assert_int_equal(session_qos2_record_locked(s, 8, 5000), NMQ_ELIMIT);
	assert_false(session_qos2_pending_locked(s, 8));
	assert_int_equal(atomic_load(&proto_metrics_get(e->p)->await_rel_expired), 0);
	// At 11.5 s the two from 1 s passed the 10 s timeout; 7 has not.
	assert_int_equal(session_qos2_record_locked(s, 8, 11500), NMQ_OK);
	assert_int_equal(atomic_load(&proto_metrics_get(e->p)->await_rel_expired), 2);
	assert_false(session_qos2_pending_locked(s, 5));
	assert_false(session_qos2_pending_locked(s, 6));
	assert_true(session_qos2_pending_locked(s, 7));
	assert_true(session_qos2_pending_locked(s, 8));
	session_unlock(s);

	// await_rel_timeout 0: ids never expire, the bound holds.
	lim.await_rel_timeout_s = 0;
	assert_int_equal(proto_set_limits(e->p, &lim), NMQ_OK);
	session_lock(s);
	assert_int_equal(session_qos2_record_locked(s, 9, 1000), NMQ_OK);
	assert_int_equal(session_qos2_record_locked(s, 10, 999999999), NMQ_ELIMIT);
	session_unlock(s);
	assert_int_equal(atomic_load(&proto_metrics_get(e->p)->await_rel_expired), 2);

	nmq_session_release(s);
	env_free(e);
}

// Reads one PUBLISH of QoS 1 and returns its packet id.
static uint16_t recv_pub_pid(int fd)
{
	uint8_t     buf[256];
	mqtt_packet pk;
	assert_true(recv_pkt(fd, MQTT_PROTO_V5, buf, sizeof(buf), &pk));
	assert_int_equal(pk.type, MQTT_PUBLISH);
	assert_int_equal(pk.u.publish.qos, 1);
	return pk.u.publish.packet_id;
}

// True if nothing arrives within ms.
static bool quiet_for(int fd, int ms)
{
	struct timeval tv = { 0, ms * 1000 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	uint8_t     buf[256];
	mqtt_packet pk;
	bool        got = recv_pkt(fd, MQTT_PROTO_V5, buf, sizeof(buf), &pk);
	tv.tv_sec       = 5;
	tv.tv_usec      = 0;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return !got;
}

// Connects a v5 client with a Receive Maximum; returns its socket and the
// session (held by the fake application).
static int connect_rm(env *e, const char *id, uint16_t receive_max, nmq_session **s)
{
	int fd = client_open(e);
	send_connect_rm(fd, MQTT_PROTO_V5, id, 30, true, 0, NULL, receive_max);
	uint8_t     buf[256];
	mqtt_packet pk;
	assert_true(recv_pkt(fd, MQTT_PROTO_V5, buf, sizeof(buf), &pk));
	assert_int_equal(pk.type, MQTT_CONNACK);
	assert_int_equal(pk.u.connack.reason, 0);
	pthread_mutex_lock(&e->app.mtx);
	*s = e->app.last_online;
	assert_non_null(*s);
	assert_string_equal(nmq_session_client_id(*s), id);
	pthread_mutex_unlock(&e->app.mtx);
	return fd;
}

// The in-flight window is min(Receive Maximum, max_inflight_window);
// packet ids are allocated in turn, skip 0 and the ids in flight, and are
// reused once acknowledged.
static void test_inflight_window_pids(void **state)
{
	(void)state;
	proto_limits lim;
	default_limits(&lim);
	lim.max_inflight_window = 8;
	env         *e          = env_new(&lim);
	nmq_session *s;
	int          fd = connect_rm(e, "w", 3, &s);
	session_lock(s);
	assert_int_equal(s->infl_max, 3);
	session_unlock(s);

	for (int i = 0; i < 10; i++) {
		deliver(s, "t", 1);
	}
	assert_int_equal(recv_pub_pid(fd), 1);
	assert_int_equal(recv_pub_pid(fd), 2);
	assert_int_equal(recv_pub_pid(fd), 3);
	assert_true(quiet_for(fd, 200)); // the window is full
	bool online;
	assert_int_equal(session_queue_len(s, &online), 7);
	assert_true(online);

	// One ack, one more message.
	send_ack(fd, MQTT_PROTO_V5, MQTT_PUBACK, 2);
	assert_int_equal(recv_pub_pid(fd), 4);
	assert_true(quiet_for(fd, 100));
	// In flight: 1, 3, 4. From 65535 the ids wrap past 0 to the ids
	// already acknowledged.
	session_lock(s);
	s->next_pid = 65535;
	session_unlock(s);
	send_ack(fd, MQTT_PROTO_V5, MQTT_PUBACK, 1);
	assert_int_equal(recv_pub_pid(fd), 65535);
	send_ack(fd, MQTT_PROTO_V5, MQTT_PUBACK, 4);
	assert_int_equal(recv_pub_pid(fd), 1); // reused after its ack
	// In flight: 3, 65535, 1. The next id, 2, is free; 3 is in flight and
	// is skipped.
	send_ack(fd, MQTT_PROTO_V5, MQTT_PUBACK, 65535);
	assert_int_equal(recv_pub_pid(fd), 2);
	send_ack(fd, MQTT_PROTO_V5, MQTT_PUBACK, 1);
	assert_int_equal(recv_pub_pid(fd), 4);
	// An ack for an id not in flight changes nothing.
	send_ack(fd, MQTT_PROTO_V5, MQTT_PUBACK, 999);
	assert_true(quiet_for(fd, 100));
	// Ten delivered, eight sent.
	assert_int_equal(session_queue_len(s, &online), 2);
	session_lock(s);
	assert_int_equal(s->infl_len, 3);
	session_unlock(s);
	close(fd);

	// The configured window is smaller than the client's maximum.
	lim.max_inflight_window = 2;
	assert_int_equal(proto_set_limits(e->p, &lim), NMQ_OK);
	fd = connect_rm(e, "w2", 5, &s);
	session_lock(s);
	assert_int_equal(s->infl_max, 2);
	session_unlock(s);
	for (int i = 0; i < 4; i++) {
		deliver(s, "t", 1);
	}
	assert_int_equal(recv_pub_pid(fd), 1);
	assert_int_equal(recv_pub_pid(fd), 2);
	assert_true(quiet_for(fd, 200));
	close(fd);
	assert_int_equal(atomic_load(&proto_metrics_get(e->p)->msgs_dropped), 0);
	env_free(e);
}

// Subscription identifiers: a message matching six subscriptions of one
// session keeps all six identifiers in its queued entry (beyond the four
// kept inline), through the ACL filter, a restore from the store and the
// in-flight window, and the PUBLISH sent carries all six [MQTT5-3.3.4-3]
// [MQTT5-3.3.4-4].
// Freed on every path (ASan checks the leaks).
static void test_sub_ids(void **state)
{
	(void)state;
	proto_limits lim;
	default_limits(&lim);
	env           *e      = env_new(&lim);
	proto_metrics *m      = proto_metrics_get(e->p);
	const uint32_t ids[6] = { 1, 2, 3, 4, 5, 6 };

	// Offline: queued, with six and with three identifiers.
	nmq_session *s = session_alloc(e->p, "ids", NULL, 0);
	assert_non_null(s);
	nmq_msg *a = msg_new("a", "x", 1);
	nmq_session_deliver(s, a, 1, false, ids, 6);
	nmq_msg_release(a);
	nmq_msg *b = msg_new("b", "x", 1);
	nmq_session_deliver(s, b, 1, false, ids + 3, 3);
	nmq_msg_release(b);
	assert_int_equal(s->q.len, 2);
	const out_entry *q0 = &s->q.v[s->q.head];
	assert_int_equal(q0->n_sub_ids, 6);
	assert_memory_equal(out_entry_ids(q0), ids, sizeof(ids));
	const out_entry *q1 = &s->q.v[(s->q.head + 1) % s->q.cap];
	assert_int_equal(q1->n_sub_ids, 3);
	assert_memory_equal(out_entry_ids(q1), ids + 3, 3 * sizeof(uint32_t));
	// A restored row with six identifiers, queued and in flight.
	nmq_msg *c = msg_new("c", "x", 1);
	assert_int_equal(
	    proto_session_restore_msg(s, 100, c, 1, false, PROTO_STORE_QUEUED, 0, ids, 6), NMQ_OK);
	assert_int_equal(
	    proto_session_restore_msg(s, 101, c, 1, false, PROTO_STORE_SENT, 9, ids, 6), NMQ_OK);
	nmq_msg_release(c);
	assert_int_equal(s->q.len, 3);
	const out_entry *q2 = &s->q.v[(s->q.head + 2) % s->q.cap];
	assert_int_equal(q2->n_sub_ids, 6);
	assert_memory_equal(out_entry_ids(q2), ids, sizeof(ids));
	assert_int_equal(s->infl_len, 1);
	assert_int_equal(s->infl[s->infl_start].e.n_sub_ids, 6);
	assert_memory_equal(out_entry_ids(&s->infl[s->infl_start].e), ids, sizeof(ids));
	// The ACL filter drops the entry on "b" (inline ids); the others stay.
	assert_int_equal(nmq_session_drop_queued(s, keep_not_b, NULL), 1);
	assert_int_equal(s->q.len, 2);
	assert_int_equal(s->q.v[s->q.head].n_sub_ids, 6);
	nmq_session_release(s); // frees the queued and in-flight entries

	// Online: the PUBLISH carries the six identifiers, in order.
	nmq_session *o;
	int          fd = connect_rm(e, "ids2", 10, &o);
	nmq_msg     *d  = msg_new("d", "x", 1);
	nmq_session_deliver(o, d, 1, false, ids, 6);
	nmq_session_deliver(o, d, 0, false, ids, 5);
	nmq_msg_release(d);
	for (int k = 0; k < 2; k++) {
		uint8_t     buf[256];
		mqtt_packet pk;
		assert_true(recv_pkt(fd, MQTT_PROTO_V5, buf, sizeof(buf), &pk));
		assert_int_equal(pk.type, MQTT_PUBLISH);
		assert_int_equal(pk.u.publish.qos, k == 0 ? 1 : 0);
		mqtt_prop_iter it;
		mqtt_prop_iter_init(&it, &pk.u.publish.props);
		uint32_t got[8];
		uint32_t n = 0;
		while (n < 8 && mqtt_prop_iter_next_sub_id(&it, &got[n])) {
			n++;
		}
		assert_int_equal(n, k == 0 ? 6 : 5);
		assert_memory_equal(got, ids, n * sizeof(uint32_t));
		if (k == 0) {
			session_lock(o);
			assert_int_equal(o->infl_len, 1);
			assert_int_equal(o->infl[o->infl_start].e.n_sub_ids, 6);
			session_unlock(o);
			send_ack(fd, MQTT_PROTO_V5, MQTT_PUBACK, pk.u.publish.packet_id);
		}
	}
	assert_true(quiet_for(fd, 100));
	session_lock(o);
	assert_int_equal(o->infl_len, 0); // acked: entry and ids freed
	session_unlock(o);
	close(fd);
	assert_int_equal(atomic_load(&m->alloc_failures), 0);
	assert_int_equal(atomic_load(&m->msgs_dropped), 1); // the ACL drop
	env_free(e);
}

static int wait_count(env *e, const int *field, int want, int limit_ms)
{
	int v = 0;
	for (int i = 0; i < limit_ms / 10; i++) {
		v = app_get(&e->app, field);
		if (v >= want) {
			break;
		}
		sleep_ms(10);
	}
	return v;
}

// A session opened, attached to a stand-in link and detached: with an
// expiry interval it stays in the table until the interval passes, its
// delayed will is published when the delay passes, and with expiry 0 it is
// to end at once. Resuming it in time reports it present.
static void test_open_detach_expiry(void **state)
{
	(void)state;
	proto_limits lim;
	default_limits(&lim);
	env           *e = env_new(&lim);
	proto_metrics *m = proto_metrics_get(e->p);
	nmq_link       fake;
	memset(&fake, 0, sizeof(fake)); // not connected: nothing is sent
	fake.p = e->p;

	session_open_res r;
	assert_int_equal(session_open(e->p, "x", NULL, 0, false, &r), NMQ_OK);
	assert_false(r.present);
	assert_null(r.ended);
	assert_null(r.old_conn);
	session_attach_locked(r.s, &fake, MQTT_PROTO_V5, 1, 10);
	assert_ptr_equal(session_link_locked(r.s), &fake);
	session_unlock(r.s);
	assert_int_equal(atomic_load(&m->sessions), 1);
	assert_true(nmq_session_online(r.s));

	// Abnormal end with a will delayed by 1 s; the session expires 2 s
	// after (DISCONNECT's interval replaces the CONNECT's).
	session_set_expiry(r.s, &fake, 2);
	nmq_msg *will = msg_new("will", "w", 0);
	bool     end  = true;
	assert_null(session_detach(r.s, &fake, &will, 1, &end));
	assert_false(end);
	assert_null(will); // the session keeps it
	assert_false(nmq_session_online(r.s));
	assert_int_equal(app_get(&e->app, &e->app.n_routed), 0);
	// The will after about 1 s, the end after about 2 s.
	uint64_t t0 = nmq_clock_ms();
	assert_int_equal(wait_count(e, &e->app.n_routed, 1, 3000), 1);
	uint64_t seen = nmq_clock_ms() - t0;
	assert_true(seen >= 900);
	pthread_mutex_lock(&e->app.mtx);
	assert_string_equal(e->app.last_topic, "will");
	pthread_mutex_unlock(&e->app.mtx);
	// Not ended yet, unless this thread saw the will late (a loaded
	// machine): the end is due 2 s after the detach.
	if (seen < 1500) {
		assert_int_equal(app_get(&e->app, &e->app.n_ended), 0);
	}
	assert_int_equal(wait_count(e, &e->app.n_ended, 1, 4000), 1);
	assert_true(nmq_clock_ms() - t0 >= 1900);
	assert_int_equal(atomic_load(&m->sessions), 0);
	nmq_session_release(r.s); // the link's reference

	// Resumed within its expiry: present, and the pending will is dropped.
	assert_int_equal(session_open(e->p, "y", NULL, 0, false, &r), NMQ_OK);
	session_attach_locked(r.s, &fake, MQTT_PROTO_V5, 60, 10);
	session_unlock(r.s);
	will = msg_new("will", "w", 0);
	assert_null(session_detach(r.s, &fake, &will, 30, &end));
	assert_false(end);
	nmq_session_release(r.s);
	assert_int_equal(session_open(e->p, "y", NULL, 0, false, &r), NMQ_OK);
	assert_true(r.present);
	assert_null(r.s->will);
	// A session with expiry 0 is to end when its link detaches, and a
	// will without delay is handed back to publish now.
	session_attach_locked(r.s, &fake, MQTT_PROTO_V5, 0, 10);
	session_unlock(r.s);
	will         = msg_new("will", "now", 0);
	nmq_msg *pub = session_detach(r.s, &fake, &will, 0, &end);
	assert_true(end);
	assert_non_null(pub);
	assert_null(will);
	nmq_msg_release(pub);
	int ended = app_get(&e->app, &e->app.n_ended);
	session_end(r.s);
	assert_int_equal(app_get(&e->app, &e->app.n_ended), ended + 1);
	nmq_session_release(r.s);
	assert_int_equal(atomic_load(&m->sessions), 0);

	// A session that lasts only as long as its connection (expiry 0) is
	// not resumed by a takeover [MQTT-3.1.2-6]: handed back as ended.
	assert_int_equal(session_open(e->p, "v", NULL, 0, false, &r), NMQ_OK);
	session_attach_locked(r.s, &fake, MQTT_PROTO_V5, 0, 10);
	session_unlock(r.s);
	nmq_session *conn_long = r.s;
	nmq_msg     *none      = NULL;
	assert_null(session_detach(conn_long, &fake, &none, 0, &end));
	assert_true(end); // (the link would end it; a CONNECT comes first)
	assert_int_equal(session_open(e->p, "v", NULL, 0, false, &r), NMQ_OK);
	assert_false(r.present);
	assert_ptr_equal(r.ended, conn_long);
	session_unlock(r.s);
	session_discard(r.ended);
	nmq_session_release(conn_long);
	nmq_session_release(r.s);

	// Clean start discards the old session: handed back as ended.
	assert_int_equal(session_open(e->p, "z", NULL, 0, false, &r), NMQ_OK);
	session_attach_locked(r.s, &fake, MQTT_PROTO_V5, 60, 10);
	session_unlock(r.s);
	nmq_session *first = r.s;
	assert_null(session_detach(first, &fake, &none, 0, &end));
	assert_false(end);
	assert_int_equal(session_open(e->p, "z", NULL, 0, true, &r), NMQ_OK);
	assert_false(r.present);
	assert_ptr_equal(r.ended, first);
	assert_ptr_not_equal(r.s, first);
	session_unlock(r.s);
	ended = app_get(&e->app, &e->app.n_ended);
	session_discard(r.ended);
	assert_int_equal(app_get(&e->app, &e->app.n_ended), ended + 1);
	nmq_session_release(first); // the first open's link reference
	nmq_session_release(r.s);
	// In the table: the new sessions of "v" and "z".
	assert_int_equal(atomic_load(&m->sessions), 2);
	env_free(e);
}

// With client_id_owner_check, another user's session is not resumed.
static void test_open_owner(void **state)
{
	(void)state;
	proto_limits lim;
	default_limits(&lim);
	lim.client_id_owner_check = true;
	env             *e        = env_new(&lim);
	session_open_res r;
	assert_int_equal(session_open(e->p, "o", (const uint8_t *)"alice", 5, false, &r), NMQ_OK);
	assert_string_equal(session_owner(r.s), "alice");
	// A session that outlives its connection (expiry 60 s), now offline.
	nmq_link fake;
	memset(&fake, 0, sizeof(fake));
	fake.p = e->p;
	session_attach_locked(r.s, &fake, MQTT_PROTO_V5, 60, 10);
	session_unlock(r.s);
	nmq_session *s    = r.s;
	nmq_msg     *none = NULL;
	bool         end;
	assert_null(session_detach(s, &fake, &none, 0, &end));
	assert_false(end);
	assert_int_equal(session_open(e->p, "o", (const uint8_t *)"bob", 3, false, &r), NMQ_EACCES);
	assert_int_equal(session_open(e->p, "o", NULL, 0, false, &r), NMQ_EACCES);
	assert_int_equal(session_open(e->p, "o", (const uint8_t *)"alice", 5, false, &r), NMQ_OK);
	assert_true(r.present);
	assert_ptr_equal(r.s, s);
	session_unlock(r.s);
	nmq_session_release(s);
	nmq_session_release(s);
	env_free(e);
}

// Sessions that come and go leave tombstones in the open-addressing table;
// the table is rebuilt before they fill it, so that a lookup of an absent
// client id still meets an empty slot (without that, some 10,000 distinct
// short sessions made the next lookup probe forever).
static void test_table_churn(void **state)
{
	(void)state;
	proto_limits lim;
	default_limits(&lim);
	env *e = env_new(&lim);
	char id[32];
	for (int i = 0; i < 20000; i++) {
		snprintf(id, sizeof(id), "churn-%d", i);
		session_open_res r;
		assert_int_equal(session_open(e->p, id, NULL, 0, false, &r), NMQ_OK);
		session_unlock(r.s);
		session_end(r.s);
		nmq_session_release(r.s);
	}
	pthread_mutex_lock(&e->p->tbl_mtx);
	assert_int_equal(e->p->tbl_len, 0);
	assert_true((e->p->tbl_len + e->p->tbl_tomb) * 2 <= e->p->tbl_cap);
	assert_null(proto_table_find(e->p, "absent"));
	pthread_mutex_unlock(&e->p->tbl_mtx);
	assert_int_equal(app_get(&e->app, &e->app.n_ended), 20000);
	assert_int_equal(atomic_load(&proto_metrics_get(e->p)->sessions), 0);
	assert_int_equal(atomic_load(&proto_metrics_get(e->p)->sessions_max), 1);
	env_free(e);
}

// ---------------------------------------------------------------------------
// A fake durable store (proto_store_ops): a thread's writes between
// batch(true) and batch(false) reach the table only at the end (then its
// after_batch functions run), and reads are answered only by fs_run() on
// a thread of its own (the store's), so a test decides what a read sees.

#define FS_ROWS 16

typedef struct fs_row {
	uint64_t seq;
	nmq_msg *msg; // held
	uint8_t  qos;
} fs_row;

typedef struct fs_read {
	uint64_t after;
	void (*row)(void *arg, const proto_store_row *r);
	proto_store_done_fn done;
	void               *arg;
} fs_read;

typedef struct fstore {
	pthread_mutex_t mtx;
	fs_row          rows[FS_ROWS];
	int             n_rows;
	fs_read         reads[8]; // reads, and barriers (row == NULL)
	int             n_reads;
	uint32_t        next_sid;
	bool            queue_syncs; // barriers answered by fs_run, in order
	bool            after_oom; // after_batch fails (out of memory)
} fstore;

static __thread struct {
	int    depth;
	fs_row pend[FS_ROWS];
	int    n_pend;
	struct {
		void (*fn)(void *arg);
		void *arg;
	} after[FS_ROWS];
	int     n_after;
	fs_read syncs[FS_ROWS]; // barriers of the open group
	int     n_syncs;
	bool    failed; // after_batch failed: the group is dropped
} fs_tl;

static void fs_add_locked(fstore *f, const fs_row *r)
{
	assert_true(f->n_rows < FS_ROWS);
	f->rows[f->n_rows++] = *r;
}

static void fs_del_locked(fstore *f, uint64_t lo, uint64_t hi)
{
	int k = 0;
	for (int i = 0; i < f->n_rows; i++) {
		if (f->rows[i].seq >= lo && f->rows[i].seq <= hi) {
			nmq_msg_release(f->rows[i].msg);
		} else {
			f->rows[k++] = f->rows[i];
		}
	}
	f->n_rows = k;
}

static nmq_err fs_session_put(void *st, const proto_store_session *rec)
{
	(void)st;
	(void)rec;
	return NMQ_OK;
}

static nmq_err fs_session_del(void *st, const char *client_id, uint32_t sid)
{
	fstore *f = st;
	(void)client_id;
	(void)sid;
	pthread_mutex_lock(&f->mtx);
	fs_del_locked(f, 0, UINT64_MAX);
	pthread_mutex_unlock(&f->mtx);
	return NMQ_OK;
}

static uint32_t fs_sid_new(void *st)
{
	fstore *f = st;
	pthread_mutex_lock(&f->mtx);
	uint32_t sid = ++f->next_sid;
	pthread_mutex_unlock(&f->mtx);
	return sid;
}

static nmq_err fs_queue_put(void *st, const char *client_id, uint32_t sid, uint64_t seq,
    nmq_msg *msg, uint8_t qos, bool retain, const uint32_t *sub_ids, uint32_t n_sub_ids)
{
	fstore *f = st;
	(void)client_id;
	(void)sid;
	(void)retain;
	(void)sub_ids;
	(void)n_sub_ids;
	nmq_msg_hold(msg);
	fs_row r = { seq, msg, qos };
	if (fs_tl.depth > 0) {
		assert_true(fs_tl.n_pend < FS_ROWS);
		fs_tl.pend[fs_tl.n_pend++] = r;
		return NMQ_OK;
	}
	pthread_mutex_lock(&f->mtx);
	fs_add_locked(f, &r);
	pthread_mutex_unlock(&f->mtx);
	return NMQ_OK;
}

static nmq_err fs_queue_state(
    void *st, const char *client_id, uint32_t sid, uint64_t seq, uint8_t state, uint16_t pid)
{
	(void)st;
	(void)client_id;
	(void)sid;
	(void)seq;
	(void)state;
	(void)pid;
	return NMQ_OK;
}

static nmq_err fs_queue_del(void *st, const char *client_id, uint32_t sid, uint64_t seq)
{
	fstore *f = st;
	(void)client_id;
	(void)sid;
	pthread_mutex_lock(&f->mtx);
	fs_del_locked(f, seq, seq);
	pthread_mutex_unlock(&f->mtx);
	return NMQ_OK;
}

static nmq_err fs_queue_done(void *st, const char *client_id, uint32_t sid, uint64_t lo,
    uint64_t hi, void **slot_op, uint64_t *slot_gen)
{
	fstore *f = st;
	(void)client_id;
	(void)sid;
	*slot_op  = NULL;
	*slot_gen = 0;
	pthread_mutex_lock(&f->mtx);
	fs_del_locked(f, lo, hi);
	pthread_mutex_unlock(&f->mtx);
	return NMQ_OK;
}

static nmq_err fs_rel(void *st, const char *client_id, uint16_t packet_id)
{
	(void)st;
	(void)client_id;
	(void)packet_id;
	return NMQ_OK;
}

// A barrier: at once, or (queue_syncs) queued behind what is queued so
// far, with a group's writes at its end when made inside one.
static nmq_err fs_sync(void *st, proto_store_done_fn done, void *arg)
{
	fstore *f = st;
	if (!f->queue_syncs) {
		done(arg, NMQ_OK);
		return NMQ_OK;
	}
	fs_read b = { 0, NULL, done, arg };
	if (fs_tl.depth > 0) {
		assert_true(fs_tl.n_syncs < FS_ROWS);
		fs_tl.syncs[fs_tl.n_syncs++] = b;
		return NMQ_OK;
	}
	pthread_mutex_lock(&f->mtx);
	assert_true(f->n_reads < 8);
	f->reads[f->n_reads++] = b;
	pthread_mutex_unlock(&f->mtx);
	return NMQ_OK;
}

static nmq_err fs_queue_read(void *st, const char *client_id, uint64_t after_seq, uint32_t max,
    void (*row)(void *arg, const proto_store_row *r), proto_store_done_fn done, void *arg)
{
	fstore *f = st;
	(void)client_id;
	(void)max;
	pthread_mutex_lock(&f->mtx);
	assert_true(f->n_reads < 8);
	f->reads[f->n_reads++] = (fs_read) { after_seq, row, done, arg };
	pthread_mutex_unlock(&f->mtx);
	return NMQ_OK;
}

static void fs_backlog(void *st, uint32_t *pending, uint32_t *max)
{
	(void)st;
	*pending = 0;
	*max     = 1000;
}

static void fs_batch(void *st, bool begin)
{
	fstore *f = st;
	if (begin) {
		fs_tl.depth++;
		return;
	}
	if (--fs_tl.depth > 0) {
		return;
	}
	pthread_mutex_lock(&f->mtx);
	for (int i = 0; i < fs_tl.n_pend; i++) {
		if (fs_tl.failed) {
			nmq_msg_release(fs_tl.pend[i].msg);
		} else {
			fs_add_locked(f, &fs_tl.pend[i]);
		}
	}
	fs_tl.failed = false;
	fs_tl.n_pend = 0;
	for (int i = 0; i < fs_tl.n_syncs; i++) {
		assert_true(f->n_reads < 8);
		f->reads[f->n_reads++] = fs_tl.syncs[i];
	}
	fs_tl.n_syncs = 0;
	pthread_mutex_unlock(&f->mtx);
	int n         = fs_tl.n_after;
	fs_tl.n_after = 0;
	for (int i = 0; i < n; i++) {
		fs_tl.after[i].fn(fs_tl.after[i].arg);
	}
}

static int fs_after_batch(void *st, void (*fn)(void *arg), void *arg)
{
	fstore *f = st;
	if (fs_tl.depth == 0) {
		return PROTO_AFTER_NONE;
	}
	if (f->after_oom) {
		fs_tl.failed = true;
		return PROTO_AFTER_FAILED;
	}
	assert_true(fs_tl.n_after < FS_ROWS);
	fs_tl.after[fs_tl.n_after].fn  = fn;
	fs_tl.after[fs_tl.n_after].arg = arg;
	fs_tl.n_after++;
	return PROTO_AFTER_SET;
}

static const proto_store_ops fs_ops = {
	.session_put = fs_session_put,
	.session_del = fs_session_del,
	.sid_new     = fs_sid_new,
	.queue_put   = fs_queue_put,
	.queue_state = fs_queue_state,
	.queue_del   = fs_queue_del,
	.queue_done  = fs_queue_done,
	.rel_put     = fs_rel,
	.rel_del     = fs_rel,
	.sync        = fs_sync,
	.queue_read  = fs_queue_read,
	.backlog     = fs_backlog,
	.batch       = fs_batch,
	.after_batch = fs_after_batch,
};

// The store's thread: answers the reads queued so far, and those their
// completions queue, in order.
static void *fs_thread(void *arg)
{
	fstore *f = arg;
	for (;;) {
		pthread_mutex_lock(&f->mtx);
		if (f->n_reads == 0) {
			pthread_mutex_unlock(&f->mtx);
			return NULL;
		}
		fs_read rd = f->reads[0];
		memmove(f->reads, f->reads + 1, (size_t)(f->n_reads - 1) * sizeof(*f->reads));
		f->n_reads--;
		if (rd.row == NULL) {
			// A barrier: what was queued before it is in rows.
			pthread_mutex_unlock(&f->mtx);
			rd.done(rd.arg, NMQ_OK);
			continue;
		}
		fs_row rows[FS_ROWS];
		int    n = 0;
		for (int i = 0; i < f->n_rows; i++) {
			if (f->rows[i].seq > rd.after) {
				rows[n] = f->rows[i];
				nmq_msg_hold(rows[n].msg);
				n++;
			}
		}
		pthread_mutex_unlock(&f->mtx);
		for (int i = 0; i < n; i++) {
			proto_store_row r;
			memset(&r, 0, sizeof(r));
			r.seq   = rows[i].seq;
			r.msg   = rows[i].msg;
			r.qos   = rows[i].qos;
			r.state = PROTO_STORE_QUEUED;
			rd.row(rd.arg, &r);
			nmq_msg_release(rows[i].msg);
		}
		rd.done(rd.arg, NMQ_OK);
	}
}

static void fs_run(fstore *f)
{
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, fs_thread, f), 0);
	pthread_join(t, NULL);
}

static int fs_reads(fstore *f)
{
	pthread_mutex_lock(&f->mtx);
	int n = f->n_reads;
	pthread_mutex_unlock(&f->mtx);
	return n;
}

// A persistent session reading its backlog back from the store gets a
// message written inside a store group (a publisher's batch) that is not
// yet queued when the read in flight completes and finds nothing more:
// the next read must not be issued (from the store's thread) before that
// group is queued, or it overtakes the write, finds nothing, ends disk
// mode, and the message stays on disk, never sent (its row deleted by the
// next in-order ack). Once the group is queued, the read goes and the
// message is sent.
static void test_disk_read_waits_for_group(void **state)
{
	(void)state;
	proto_limits lim;
	default_limits(&lim);
	env   *e = env_new(&lim);
	fstore f;
	memset(&f, 0, sizeof(f));
	pthread_mutex_init(&f.mtx, NULL);
	proto_set_store(e->p, &fs_ops, &f);

	int fd = client_connect(e, MQTT_PROTO_V5, "disk", 60, 300, NULL, NULL);
	client_subscribe(fd, MQTT_PROTO_V5, "t", 1);
	nmq_session *s = proto_session_find(e->p, "disk");
	assert_non_null(s);
	close(fd);
	for (int i = 0; i < 500 && nmq_session_online(s); i++) {
		sleep_ms(10);
	}
	assert_false(nmq_session_online(s));

	// Offline: to the store only.
	nmq_msg *m1 = msg_new("t", "one", 1);
	nmq_session_deliver(s, m1, 1, false, NULL, 0);
	nmq_msg_release(m1);
	assert_true(s->disk_mode);

	// Back: the first read is issued.
	bool sp = false;
	fd      = client_connect(e, MQTT_PROTO_V5, "disk", 60, 300, NULL, &sp);
	assert_true(sp);
	for (int i = 0; i < 500 && fs_reads(&f) == 0; i++) {
		sleep_ms(10);
	}
	assert_int_equal(fs_reads(&f), 1);

	// A publisher's group holds the next message when that read completes.
	fs_batch(&f, true);
	nmq_msg *m2 = msg_new("t", "two", 1);
	nmq_session_deliver(s, m2, 1, false, NULL, 0);
	nmq_msg_release(m2);
	fs_run(&f);
	uint16_t pid = expect_publish(fd, MQTT_PROTO_V5, "t", "one", 1);
	assert_true(s->disk_mode);
	fs_batch(&f, false);

	// The group queued: the read waited for it goes now.
	for (int i = 0; i < 200; i++) {
		fs_run(&f);
		sleep_ms(5);
	}
	send_ack(fd, MQTT_PROTO_V5, MQTT_PUBACK, pid);
	expect_publish(fd, MQTT_PROTO_V5, "t", "two", 1);
	for (int i = 0; i < 20; i++) {
		fs_run(&f); // the read after it finds nothing: back to memory
		sleep_ms(5);
	}
	assert_false(s->disk_mode);

	nmq_session_release(s);
	close(fd);
	env_free(e);
	pthread_mutex_lock(&f.mtx);
	fs_del_locked(&f, 0, UINT64_MAX);
	pthread_mutex_unlock(&f.mtx);
	pthread_mutex_destroy(&f.mtx);
}

// The store cannot register the end of a group (out of memory): the
// write is not counted as queued (no read waits for it: the store fails
// the group instead), and the PUBLISH being routed is refused (no
// success ack), where "nothing registered" used to mean "queued already".
static void test_disk_write_after_batch_oom(void **state)
{
	(void)state;
	proto_limits lim;
	default_limits(&lim);
	env   *e = env_new(&lim);
	fstore f;
	memset(&f, 0, sizeof(f));
	pthread_mutex_init(&f.mtx, NULL);
	proto_set_store(e->p, &fs_ops, &f);

	int fd = client_connect(e, MQTT_PROTO_V5, "oom", 60, 300, NULL, NULL);
	client_subscribe(fd, MQTT_PROTO_V5, "t", 1);
	nmq_session *s = proto_session_find(e->p, "oom");
	assert_non_null(s);
	close(fd);
	for (int i = 0; i < 500 && nmq_session_online(s); i++) {
		sleep_ms(10);
	}
	assert_false(nmq_session_online(s));

	(void)proto_store_take_refused();
	f.after_oom = true;
	fs_batch(&f, true);
	nmq_msg *m = msg_new("t", "one", 1);
	nmq_session_deliver(s, m, 1, false, NULL, 0);
	nmq_msg_release(m);
	assert_int_equal(atomic_load(&s->disk_gate.unsub), 0);
	assert_true(proto_store_take_refused());
	f.after_oom = false;
	fs_batch(&f, false);
	assert_int_equal(atomic_load(&s->disk_gate.unsub), 0);

	nmq_session_release(s);
	env_free(e);
	pthread_mutex_lock(&f.mtx);
	fs_del_locked(&f, 0, UINT64_MAX);
	pthread_mutex_unlock(&f.mtx);
	pthread_mutex_destroy(&f.mtx);
}

// A QoS 2 delivery to an online persistent session goes out only after a
// store barrier behind its row, and one barrier is in flight at a time:
// with the first in flight, a second message is delivered inside a
// publisher's store group (its row queued only when the group closes).
// The next barrier, asked for from the first one's completion (another
// thread), must not be queued before that group, or it commits without
// the row and the PUBLISH goes out before its row is on disk (a crash
// then would deliver it twice). Once the group is queued, it goes.
static void test_qos2_barrier_waits_for_group(void **state)
{
	(void)state;
	proto_limits lim;
	default_limits(&lim);
	env   *e = env_new(&lim);
	fstore f;
	memset(&f, 0, sizeof(f));
	pthread_mutex_init(&f.mtx, NULL);
	f.queue_syncs = true;
	proto_set_store(e->p, &fs_ops, &f);

	int fd = client_connect(e, MQTT_PROTO_V5, "q2", 60, 300, NULL, NULL);
	client_subscribe(fd, MQTT_PROTO_V5, "t", 2);
	nmq_session *s = proto_session_find(e->p, "q2");
	assert_non_null(s);

	// The first one's barrier is queued (not answered yet).
	nmq_msg *m1 = msg_new("t", "one", 2);
	nmq_session_deliver(s, m1, 2, false, NULL, 0);
	nmq_msg_release(m1);
	assert_int_equal(fs_reads(&f), 1);

	// A publisher's group holds the second one's row when that barrier
	// commits; the one asked for next must wait for the group.
	fs_batch(&f, true);
	nmq_msg *m2 = msg_new("t", "two", 2);
	nmq_session_deliver(s, m2, 2, false, NULL, 0);
	nmq_msg_release(m2);
	fs_run(&f);
	expect_publish(fd, MQTT_PROTO_V5, "t", "one", 2);
	for (int i = 0; i < 40; i++) {
		fs_run(&f);
		sleep_ms(5);
	}
	assert_true(quiet_for(fd, 200));
	fs_batch(&f, false);

	// The group queued: the barrier goes behind it, then the PUBLISH.
	pthread_mutex_lock(&f.mtx);
	assert_int_equal(f.n_rows, 2);
	pthread_mutex_unlock(&f.mtx);
	for (int i = 0; i < 40; i++) {
		fs_run(&f);
		sleep_ms(5);
	}
	expect_publish(fd, MQTT_PROTO_V5, "t", "two", 2);

	nmq_session_release(s);
	close(fd);
	env_free(e);
	pthread_mutex_lock(&f.mtx);
	fs_del_locked(&f, 0, UINT64_MAX);
	pthread_mutex_unlock(&f.mtx);
	pthread_mutex_destroy(&f.mtx);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_queue_bound),
		cmocka_unit_test(test_qos2_inbound),
		cmocka_unit_test(test_inflight_window_pids),
		cmocka_unit_test(test_sub_ids),
		cmocka_unit_test(test_open_detach_expiry),
		cmocka_unit_test(test_open_owner),
		cmocka_unit_test(test_table_churn),
		cmocka_unit_test(test_disk_read_waits_for_group),
		cmocka_unit_test(test_disk_write_after_batch_oom),
		cmocka_unit_test(test_qos2_barrier_waits_for_group),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
