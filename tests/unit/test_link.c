// Unit tests of the per-connection state machine (nng/protocol/link.c and
// the handle_*.c files) over a socketpair(): the test is the client, with
// packets encoded and decoded by the project's codec, and a fake
// application (proto_app_ops) that routes by exact topic match.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "nng/codec/mqtt_codec.h"
#include "nng/protocol/proto.h"
#include "nng/protocol/timer_wheel.h"
#include "nng/transport/conn.h"
#include "nng/transport/workq.h"

#include "proto_test_util.h"

// ---------------------------------------------------------------------------
// Tests

// CONNECT/CONNACK in both versions, what authenticate is told, and the
// connection's end.
static void test_connect(void **state)
{
	(void)state;
	proto_limits lim;
	default_limits(&lim);
	env *e = env_new(&lim);

	int         fd = client_open(e);
	mqtt_packet pk;
	uint8_t     buf[512];
	send_connect(fd, MQTT_PROTO_V5, "c-one", 30, true, 0, NULL);
	assert_true(recv_pkt(fd, MQTT_PROTO_V5, buf, sizeof(buf), &pk));
	assert_int_equal(pk.type, MQTT_CONNACK);
	assert_int_equal(pk.u.connack.reason, 0);
	assert_false(pk.u.connack.session_present);
	// Our Receive Maximum is max_awaiting_rel.
	assert_true(pk.u.connack.props.present & MQTT_PBIT(MQTT_PROP_RECEIVE_MAXIMUM));
	assert_int_equal(pk.u.connack.props.receive_maximum, 10);
	pthread_mutex_lock(&e->app.mtx);
	assert_string_equal(e->app.last_client_id, "c-one");
	// Not from a listener: no TLS verdict against it, no limit.
	assert_true(e->app.last_info.tls_peer_ok);
	assert_false(e->app.last_info.listener_over_limit);
	assert_int_equal(e->app.last_info.proto_ver, MQTT_PROTO_V5);
	pthread_mutex_unlock(&e->app.mtx);
	assert_int_equal(atomic_load(&proto_metrics_get(e->p)->connections), 1);
	assert_int_equal(app_get(&e->app, &e->app.n_online), 1);

	// A 3.1.1 client alongside.
	int fd3 = client_connect(e, MQTT_PROTO_V311, "c-two", 30, 0, NULL, NULL);
	assert_int_equal(atomic_load(&proto_metrics_get(e->p)->connections), 2);

	// PINGREQ -> PINGRESP.
	memset(&pk, 0, sizeof(pk));
	pk.type = MQTT_PINGREQ;
	send_pkt(fd3, MQTT_PROTO_V311, &pk);
	assert_true(recv_pkt(fd3, MQTT_PROTO_V311, buf, sizeof(buf), &pk));
	assert_int_equal(pk.type, MQTT_PINGRESP);

	// A second CONNECT is a protocol error: DISCONNECT 0x82, then close.
	send_connect(fd, MQTT_PROTO_V5, "c-one", 30, true, 0, NULL);
	assert_true(recv_pkt(fd, MQTT_PROTO_V5, buf, sizeof(buf), &pk));
	assert_int_equal(pk.type, MQTT_DISCONNECT);
	assert_int_equal(pk.u.disconnect.reason, MQTT_RC_PROTOCOL_ERROR);
	uint8_t last;
	assert_true(wait_eof(fd, MQTT_PROTO_V5, &last));
	close(fd);
	close(fd3);
	env_free(e);
}

// The application's refusal reaches the client in its version.
static void test_connect_refused(void **state)
{
	(void)state;
	proto_limits lim;
	default_limits(&lim);
	env *e           = env_new(&lim);
	e->app.refuse_rc = MQTT_RC_NOT_AUTHORIZED;

	int         fd = client_open(e);
	mqtt_packet pk;
	uint8_t     buf[512];
	send_connect(fd, MQTT_PROTO_V5, "nope", 30, true, 0, NULL);
	assert_true(recv_pkt(fd, MQTT_PROTO_V5, buf, sizeof(buf), &pk));
	assert_int_equal(pk.type, MQTT_CONNACK);
	assert_int_equal(pk.u.connack.reason, MQTT_RC_NOT_AUTHORIZED);
	uint8_t last;
	assert_true(wait_eof(fd, MQTT_PROTO_V5, &last));
	close(fd);

	fd = client_open(e);
	send_connect(fd, MQTT_PROTO_V311, "nope", 30, true, 0, NULL);
	assert_true(recv_pkt(fd, MQTT_PROTO_V311, buf, sizeof(buf), &pk));
	assert_int_equal(pk.type, MQTT_CONNACK);
	assert_int_equal(pk.u.connack.reason, MQTT_V3_NOT_AUTHORIZED);
	assert_true(wait_eof(fd, MQTT_PROTO_V311, &last));
	close(fd);
	assert_int_equal(app_get(&e->app, &e->app.n_online), 0);
	env_free(e);
}

// SUBSCRIBE, then PUBLISH in and out at QoS 0, 1 and 2 between a publisher
// and a subscriber, with every ack of both flows.
static void test_publish_qos(void **state)
{
	(void)state;
	proto_limits lim;
	default_limits(&lim);
	env *e = env_new(&lim);
	for (int v = 0; v < 2; v++) {
		uint8_t ver = v == 0 ? MQTT_PROTO_V5 : MQTT_PROTO_V311;
		int     sub = client_connect(e, ver, "sub", 30, 0, NULL, NULL);
		int     pub = client_connect(e, ver, "pub", 30, 0, NULL, NULL);
		client_subscribe(sub, ver, "t/x", 2);

		// QoS 0.
		send_publish(pub, ver, "t/x", "zero", 0, 0);
		expect_publish(sub, ver, "t/x", "zero", 0);

		// QoS 1: PUBACK to the publisher, PUBLISH 1 to the subscriber
		// whose PUBACK frees the window.
		send_publish(pub, ver, "t/x", "one", 1, 7);
		expect_ack(pub, ver, MQTT_PUBACK, 7);
		uint16_t pid1 = expect_publish(sub, ver, "t/x", "one", 1);
		send_ack(sub, ver, MQTT_PUBACK, pid1);

		// QoS 2 in: PUBREC; a resent PUBLISH before PUBREL is
		// acknowledged again but not routed again; PUBREL -> PUBCOMP.
		int routed = app_get(&e->app, &e->app.n_routed);
		send_publish(pub, ver, "t/x", "two", 2, 9);
		expect_ack(pub, ver, MQTT_PUBREC, 9);
		send_publish(pub, ver, "t/x", "two", 2, 9);
		expect_ack(pub, ver, MQTT_PUBREC, 9);
		send_ack(pub, ver, MQTT_PUBREL, 9);
		expect_ack(pub, ver, MQTT_PUBCOMP, 9);
		assert_int_equal(app_get(&e->app, &e->app.n_routed), routed + 1);
		// After the PUBREL the id is free: the same id is a new message.
		send_publish(pub, ver, "t/x", "again", 2, 9);
		expect_ack(pub, ver, MQTT_PUBREC, 9);
		assert_int_equal(app_get(&e->app, &e->app.n_routed), routed + 2);
		send_ack(pub, ver, MQTT_PUBREL, 9);
		expect_ack(pub, ver, MQTT_PUBCOMP, 9);

		// QoS 2 out: PUBLISH, PUBREC -> PUBREL, PUBCOMP. The second
		// message waits for nothing: the window is 8.
		uint16_t pid2 = expect_publish(sub, ver, "t/x", "two", 2);
		uint16_t pid3 = expect_publish(sub, ver, "t/x", "again", 2);
		assert_int_not_equal(pid2, pid3);
		send_ack(sub, ver, MQTT_PUBREC, pid2);
		expect_ack(sub, ver, MQTT_PUBREL, pid2);
		send_ack(sub, ver, MQTT_PUBCOMP, pid2);
		send_ack(sub, ver, MQTT_PUBREC, pid3);
		expect_ack(sub, ver, MQTT_PUBREL, pid3);
		send_ack(sub, ver, MQTT_PUBCOMP, pid3);

		// A PUBREL for an id never received: PUBCOMP (v5: 0x92).
		send_ack(pub, ver, MQTT_PUBREL, 99);
		uint8_t     buf[64];
		mqtt_packet pk;
		assert_true(recv_pkt(pub, ver, buf, sizeof(buf), &pk));
		assert_int_equal(pk.type, MQTT_PUBCOMP);
		assert_int_equal(pk.u.ack.packet_id, 99);
		assert_int_equal(
		    pk.u.ack.reason, ver == MQTT_PROTO_V5 ? MQTT_RC_PACKET_ID_NOT_FOUND : 0);

		// Graceful DISCONNECT: the connection ends and clean sessions
		// with it.
		memset(&pk, 0, sizeof(pk));
		pk.type = MQTT_DISCONNECT;
		send_pkt(pub, ver, &pk);
		send_pkt(sub, ver, &pk);
		uint8_t last;
		assert_true(wait_eof(pub, ver, &last));
		assert_true(wait_eof(sub, ver, &last));
		close(pub);
		close(sub);
		for (int i = 0; i < 200 && app_get(&e->app, &e->app.n_ended) < 2 * (v + 1); i++) {
			sleep_ms(10);
		}
		assert_int_equal(app_get(&e->app, &e->app.n_ended), 2 * (v + 1));
	}
	assert_int_equal(atomic_load(&proto_metrics_get(e->p)->msgs_dropped), 0);
	env_free(e);
}

// A will is published on an abnormal end, not after DISCONNECT.
static void test_disconnect_will(void **state)
{
	(void)state;
	proto_limits lim;
	default_limits(&lim);
	env *e   = env_new(&lim);
	int  sub = client_connect(e, MQTT_PROTO_V5, "watcher", 30, 0, NULL, NULL);
	client_subscribe(sub, MQTT_PROTO_V5, "will/t", 1);

	int         fd = client_connect(e, MQTT_PROTO_V5, "w1", 30, 0, "will/t", NULL);
	mqtt_packet pk;
	memset(&pk, 0, sizeof(pk));
	pk.type = MQTT_DISCONNECT;
	send_pkt(fd, MQTT_PROTO_V5, &pk);
	uint8_t last;
	assert_true(wait_eof(fd, MQTT_PROTO_V5, &last));
	close(fd);

	// The same client vanishing without DISCONNECT: its will arrives.
	fd = client_connect(e, MQTT_PROTO_V5, "w1", 30, 0, "will/t", NULL);
	close(fd);
	expect_publish(sub, MQTT_PROTO_V5, "will/t", "gone", 0);
	// Exactly one will was routed (the graceful one was discarded).
	int routed = app_get(&e->app, &e->app.n_routed);
	assert_int_equal(routed, 1);
	close(sub);
	env_free(e);
}

// A connection that sends no CONNECT is closed at connect_timeout_ms; a
// v5 client silent past keepalive x 1.5 gets DISCONNECT 0x8D.
static void test_timeouts(void **state)
{
	(void)state;
	proto_limits lim;
	default_limits(&lim);
	lim.connect_timeout_ms = 200;
	env     *e             = env_new(&lim);
	uint64_t t0            = nmq_clock_ms();
	int      fd            = client_open(e);
	uint8_t  last;
	assert_true(wait_eof(fd, MQTT_PROTO_V311, &last));
	uint64_t took = nmq_clock_ms() - t0;
	assert_true(took >= 190);
	assert_true(took < 4000);
	close(fd);

	fd = client_connect(e, MQTT_PROTO_V5, "sleepy", 1, 0, NULL, NULL);
	t0 = nmq_clock_ms();
	uint8_t     buf[256];
	mqtt_packet pk;
	assert_true(recv_pkt(fd, MQTT_PROTO_V5, buf, sizeof(buf), &pk));
	took = nmq_clock_ms() - t0;
	assert_int_equal(pk.type, MQTT_DISCONNECT);
	assert_int_equal(pk.u.disconnect.reason, MQTT_RC_KEEP_ALIVE_TIMEOUT);
	assert_true(took >= 1400);
	assert_true(wait_eof(fd, MQTT_PROTO_V5, &last));
	close(fd);
	env_free(e);
}

// A session with an expiry interval outlives its connection: a QoS 1
// message published meanwhile is delivered on resumption (session
// present), and the session ends when the interval passes.
static void test_session_resume_expiry(void **state)
{
	(void)state;
	proto_limits lim;
	default_limits(&lim);
	env *e  = env_new(&lim);
	int  fd = client_connect(e, MQTT_PROTO_V5, "keeper", 30, 1, NULL, NULL);
	client_subscribe(fd, MQTT_PROTO_V5, "k", 1);
	close(fd);
	for (int i = 0; i < 200 && app_get(&e->app, &e->app.n_offline) < 1; i++) {
		sleep_ms(10);
	}
	assert_int_equal(app_get(&e->app, &e->app.n_offline), 1);

	int pub = client_connect(e, MQTT_PROTO_V311, "p", 30, 0, NULL, NULL);
	send_publish(pub, MQTT_PROTO_V311, "k", "kept", 1, 1);
	expect_ack(pub, MQTT_PROTO_V311, MQTT_PUBACK, 1);

	bool present = false;
	fd           = client_connect(e, MQTT_PROTO_V5, "keeper", 30, 1, NULL, &present);
	assert_true(present);
	uint16_t pid = expect_publish(fd, MQTT_PROTO_V5, "k", "kept", 1);
	send_ack(fd, MQTT_PROTO_V5, MQTT_PUBACK, pid);
	int ended = app_get(&e->app, &e->app.n_ended);
	close(fd);
	// Expiry 1 s: ended within a few seconds, not at once.
	sleep_ms(300);
	assert_int_equal(app_get(&e->app, &e->app.n_ended), ended);
	for (int i = 0; i < 400 && app_get(&e->app, &e->app.n_ended) == ended; i++) {
		sleep_ms(10);
	}
	assert_int_equal(app_get(&e->app, &e->app.n_ended), ended + 1);
	close(pub);
	env_free(e);
}

// A second CONNECT with the same client id takes the session over: the old
// v5 connection gets DISCONNECT 0x8E and is closed; the new one finds the
// session present (it has an expiry interval) with its subscription.
static void test_takeover(void **state)
{
	(void)state;
	proto_limits lim;
	default_limits(&lim);
	env *e   = env_new(&lim);
	int  old = client_connect(e, MQTT_PROTO_V5, "dup", 30, 60, NULL, NULL);
	client_subscribe(old, MQTT_PROTO_V5, "d", 1);

	bool present = false;
	int  fd      = client_connect(e, MQTT_PROTO_V5, "dup", 30, 60, NULL, &present);
	assert_true(present);
	uint8_t     buf[256];
	mqtt_packet pk;
	assert_true(recv_pkt(old, MQTT_PROTO_V5, buf, sizeof(buf), &pk));
	assert_int_equal(pk.type, MQTT_DISCONNECT);
	assert_int_equal(pk.u.disconnect.reason, MQTT_RC_SESSION_TAKEN_OVER);
	uint8_t last;
	assert_true(wait_eof(old, MQTT_PROTO_V5, &last));
	close(old);
	assert_int_equal(atomic_load(&proto_metrics_get(e->p)->sessions), 1);

	// The subscription came along: a message reaches the new connection.
	int pub = client_connect(e, MQTT_PROTO_V311, "p", 30, 0, NULL, NULL);
	send_publish(pub, MQTT_PROTO_V311, "d", "still", 1, 3);
	expect_ack(pub, MQTT_PROTO_V311, MQTT_PUBACK, 3);
	uint16_t pid = expect_publish(fd, MQTT_PROTO_V5, "d", "still", 1);
	send_ack(fd, MQTT_PROTO_V5, MQTT_PUBACK, pid);
	close(pub);
	close(fd);
	env_free(e);
}

int main(void)
{
	// Writes to a client that closed must not kill the test (the broker
	// ignores SIGPIPE too).
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_connect),
		cmocka_unit_test(test_connect_refused),
		cmocka_unit_test(test_publish_qos),
		cmocka_unit_test(test_disconnect_will),
		cmocka_unit_test(test_timeouts),
		cmocka_unit_test(test_session_resume_expiry),
		cmocka_unit_test(test_takeover),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
