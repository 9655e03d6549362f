// Helpers of the protocol layer's unit tests (test_link.c, test_session.c):
// a fake application (proto_app_ops) that routes by exact topic match,
// a protocol layer with its wheel and one worker, and an MQTT client over
// a socketpair() whose packets are encoded and decoded by nng/codec. Only
// static functions: each test includes it once.
#ifndef NMQ_PROTO_TEST_UTIL_H
#define NMQ_PROTO_TEST_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
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

// Not every test uses every helper.
#pragma GCC diagnostic ignored "-Wunused-function"

// ---------------------------------------------------------------------------
// The fake application: one subscription per (session, exact topic).

#define APP_SUBS 16

typedef struct app_sub {
	nmq_session *s; // held
	char         topic[64];
	uint8_t      qos;
} app_sub;

typedef struct fake_app {
	pthread_mutex_t   mtx;
	app_sub           subs[APP_SUBS];
	int               n_subs;
	int               n_routed;
	int               n_ended;
	int               n_online;
	int               n_offline;
	char              last_topic[64];
	proto_client_info last_info; // strings not kept
	char              last_client_id[64];
	uint8_t           refuse_rc; // authenticate's answer
	nmq_session      *last_online; // held: the last session that came online
} fake_app;

static uint8_t app_authenticate(void *arg, const proto_client_info *info)
{
	fake_app *a = arg;
	pthread_mutex_lock(&a->mtx);
	a->last_info = *info;
	snprintf(a->last_client_id, sizeof(a->last_client_id), "%s", info->client_id);
	uint8_t rc = a->refuse_rc;
	pthread_mutex_unlock(&a->mtx);
	return rc;
}

static int app_route(void *arg, nmq_session *from, const proto_who *who, nmq_msg *msg)
{
	fake_app *a = arg;
	(void)from;
	(void)who;
	nmq_session *to[APP_SUBS];
	uint8_t      qos[APP_SUBS];
	int          n = 0;
	pthread_mutex_lock(&a->mtx);
	a->n_routed++;
	snprintf(a->last_topic, sizeof(a->last_topic), "%.*s", (int)msg->topic_len, msg->topic);
	for (int i = 0; i < a->n_subs; i++) {
		if (strlen(a->subs[i].topic) == msg->topic_len
		    && memcmp(a->subs[i].topic, msg->topic, msg->topic_len) == 0) {
			nmq_session_hold(a->subs[i].s);
			to[n]    = a->subs[i].s;
			qos[n++] = a->subs[i].qos < msg->qos ? a->subs[i].qos : msg->qos;
		}
	}
	pthread_mutex_unlock(&a->mtx);
	for (int i = 0; i < n; i++) {
		nmq_session_deliver(to[i], msg, qos[i], false, NULL, 0);
		nmq_session_release(to[i]);
	}
	return 0;
}

static int app_subscribe(void *arg, nmq_session *s, const proto_who *who, const char *filter,
    size_t len, const proto_sub_opts *opts, bool *existed)
{
	fake_app *a = arg;
	(void)who;
	*existed = false;
	if (len >= sizeof(a->subs[0].topic)) {
		return 0x97;
	}
	pthread_mutex_lock(&a->mtx);
	if (a->n_subs == APP_SUBS) {
		pthread_mutex_unlock(&a->mtx);
		return 0x97;
	}
	app_sub *sub = &a->subs[a->n_subs++];
	nmq_session_hold(s);
	sub->s = s;
	memcpy(sub->topic, filter, len);
	sub->topic[len] = '\0';
	sub->qos        = opts->qos;
	pthread_mutex_unlock(&a->mtx);
	return opts->qos;
}

static void app_subscribed(void *arg, nmq_session *s, const char *filter, size_t len,
    const proto_sub_opts *opts, bool existed)
{
	(void)arg;
	(void)s;
	(void)filter;
	(void)len;
	(void)opts;
	(void)existed;
}

static uint8_t app_unsubscribe(void *arg, nmq_session *s, const char *filter, size_t len)
{
	(void)arg;
	(void)s;
	(void)filter;
	(void)len;
	return 0x11;
}

// Drops the subscriptions of s.
static void app_session_end(void *arg, nmq_session *s)
{
	fake_app *a = arg;
	pthread_mutex_lock(&a->mtx);
	a->n_ended++;
	for (int i = 0; i < a->n_subs;) {
		if (a->subs[i].s == s) {
			nmq_session_release(s);
			a->subs[i] = a->subs[--a->n_subs];
		} else {
			i++;
		}
	}
	pthread_mutex_unlock(&a->mtx);
}

static void app_client_status(void *arg, nmq_session *s, bool online, uint8_t reason,
    const char *peer, const char *username, uint16_t keepalive, bool clean_start)
{
	fake_app *a = arg;
	(void)s;
	(void)reason;
	(void)peer;
	(void)username;
	(void)keepalive;
	(void)clean_start;
	pthread_mutex_lock(&a->mtx);
	if (online) {
		a->n_online++;
		if (a->last_online != NULL) {
			nmq_session_release(a->last_online);
		}
		nmq_session_hold(s);
		a->last_online = s;
	} else {
		a->n_offline++;
	}
	pthread_mutex_unlock(&a->mtx);
}

static const proto_app_ops app_ops = {
	.authenticate  = app_authenticate,
	.route         = app_route,
	.subscribe     = app_subscribe,
	.subscribed    = app_subscribed,
	.unsubscribe   = app_unsubscribe,
	.session_end   = app_session_end,
	.client_status = app_client_status,
};

static int app_get(fake_app *a, const int *field)
{
	pthread_mutex_lock(&a->mtx);
	int v = *field;
	pthread_mutex_unlock(&a->mtx);
	return v;
}

// ---------------------------------------------------------------------------
// The broker side: wheel, one worker, protocol layer.

typedef struct env {
	timer_wheel *tw;
	workq       *wq;
	nmq_proto   *p;
	fake_app     app;
} env;

static void sleep_ms(uint64_t ms)
{
	struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0) { }
}

static void default_limits(proto_limits *lim)
{
	memset(lim, 0, sizeof(*lim));
	lim->max_packet_size        = 1 << 20;
	lim->client_max_packet_size = 1 << 20;
	lim->max_mqueue_len         = 100;
	lim->max_inflight_window    = 8;
	lim->max_awaiting_rel       = 10;
	lim->await_rel_timeout_s    = 300;
	lim->retry_interval_s       = 30;
	lim->keepalive_multiplier   = 1.5;
	lim->max_topic_alias        = 0;
	lim->connect_timeout_ms     = 10000;
	lim->max_keepalive          = 65535;
	lim->max_topic_length       = 65535;
}

static env *env_new(const proto_limits *lim)
{
	env *e = calloc(1, sizeof(*e));
	assert_non_null(e);
	pthread_mutex_init(&e->app.mtx, NULL);
	e->tw = timer_wheel_alloc(10);
	e->wq = workq_alloc(1);
	assert_non_null(e->tw);
	assert_non_null(e->wq);
	e->p = proto_alloc(lim, e->tw, e->wq, &app_ops, &e->app);
	assert_non_null(e->p);
	return e;
}

static void env_free(env *e)
{
	proto_shutdown_all(e->p);
	for (int i = 0; i < 500 && conn_live_count() > 0; i++) {
		sleep_ms(10);
	}
	assert_int_equal(conn_live_count(), 0);
	workq_free(e->wq);
	proto_free(e->p); // ends the sessions: the app drops its holds
	timer_wheel_free(e->tw);
	assert_int_equal(e->app.n_subs, 0);
	if (e->app.last_online != NULL) {
		nmq_session_release(e->app.last_online);
	}
	pthread_mutex_destroy(&e->app.mtx);
	free(e);
}

// Opens a connection to the protocol layer; returns the client's end.
static int client_open(env *e)
{
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK), 0);
	nmq_conn *c = conn_alloc_fd(sv[0], proto_conn_env(e->p));
	assert_non_null(c);
	proto_accept(e->p, c);
	struct timeval tv = { 5, 0 };
	setsockopt(sv[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return sv[1];
}

static void send_pkt(int fd, uint8_t ver, const mqtt_packet *pk)
{
	uint8_t buf[4096];
	size_t  n = mqtt_encode(buf, sizeof(buf), ver, pk);
	assert_true(n > 0);
	assert_int_equal(write(fd, buf, n), (ssize_t)n);
}

// Reads exactly n bytes; false on timeout or EOF.
static bool read_full(int fd, uint8_t *b, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, b + got, n - got);
		if (r <= 0) {
			if (r < 0 && errno == EINTR) {
				continue;
			}
			return false;
		}
		got += (size_t)r;
	}
	return true;
}

// Receives one packet into buf (which pk then points into). False on
// timeout or EOF.
static bool recv_pkt(int fd, uint8_t ver, uint8_t *buf, size_t cap, mqtt_packet *pk)
{
	size_t   n = 0;
	uint32_t rem;
	uint8_t  hl;
	for (;;) {
		if (n == 5 || !read_full(fd, buf + n, 1)) {
			return false;
		}
		n++;
		if (n >= 2 && mqtt_frame_header(buf, n, &rem, &hl) == MQTT_FRAME_OK) {
			break;
		}
	}
	if (hl + (size_t)rem > cap || !read_full(fd, buf + n, rem)) {
		return false;
	}
	return mqtt_decode(buf, hl + (size_t)rem, ver, pk) == 0;
}

// True if the server closes the connection within the receive timeout
// (packets before the close are skipped; *last_type is the last one).
static bool wait_eof(int fd, uint8_t ver, uint8_t *last_type)
{
	uint8_t     buf[4096];
	mqtt_packet pk;
	*last_type = 0;
	while (recv_pkt(fd, ver, buf, sizeof(buf), &pk)) {
		*last_type = pk.type;
	}
	uint8_t b;
	return read(fd, &b, 1) == 0;
}

// Sends CONNECT; receive_max 0: no Receive Maximum property.
static void send_connect_rm(int fd, uint8_t ver, const char *id, uint16_t keepalive, bool clean,
    uint32_t expiry, const char *will_topic, uint16_t receive_max)
{
	mqtt_packet pk;
	memset(&pk, 0, sizeof(pk));
	pk.type          = MQTT_CONNECT;
	mqtt_connect *c  = &pk.u.connect;
	c->proto_level   = ver;
	c->clean_start   = clean;
	c->keep_alive    = keepalive;
	c->client_id.p   = (const uint8_t *)id;
	c->client_id.len = (uint32_t)strlen(id);
	if (ver == MQTT_PROTO_V5 && expiry > 0) {
		c->props.present        = MQTT_PBIT(MQTT_PROP_SESSION_EXPIRY);
		c->props.session_expiry = expiry;
	}
	if (ver == MQTT_PROTO_V5 && receive_max > 0) {
		c->props.present |= MQTT_PBIT(MQTT_PROP_RECEIVE_MAXIMUM);
		c->props.receive_maximum = receive_max;
	}
	if (will_topic != NULL) {
		c->will_flag        = true;
		c->will_topic.p     = (const uint8_t *)will_topic;
		c->will_topic.len   = (uint32_t)strlen(will_topic);
		c->will_payload.p   = (const uint8_t *)"gone";
		c->will_payload.len = 4;
	}
	send_pkt(fd, ver, &pk);
}

static void send_connect(int fd, uint8_t ver, const char *id, uint16_t keepalive, bool clean,
    uint32_t expiry, const char *will_topic)
{
	send_connect_rm(fd, ver, id, keepalive, clean, expiry, will_topic, 0);
}

// Connects and checks the CONNACK; returns the client's socket.
static int client_connect(env *e, uint8_t ver, const char *id, uint16_t keepalive, uint32_t expiry,
    const char *will_topic, bool *session_present)
{
	int fd = client_open(e);
	send_connect(fd, ver, id, keepalive, expiry == 0, expiry, will_topic);
	uint8_t     buf[512];
	mqtt_packet pk;
	assert_true(recv_pkt(fd, ver, buf, sizeof(buf), &pk));
	assert_int_equal(pk.type, MQTT_CONNACK);
	assert_int_equal(pk.u.connack.reason, 0);
	if (session_present != NULL) {
		*session_present = pk.u.connack.session_present;
	}
	return fd;
}

static void send_subscribe(int fd, uint8_t ver, uint16_t pid, const char *filter, uint8_t qos)
{
	uint8_t       list[128];
	mqtt_sub_opts o = { .qos = qos };
	mqtt_bytes    f = { (const uint8_t *)filter, (uint32_t)strlen(filter) };
	size_t        n = mqtt_sub_list_put(list, sizeof(list), ver, f, &o);
	assert_true(n > 0);
	mqtt_packet pk;
	memset(&pk, 0, sizeof(pk));
	pk.type                  = MQTT_SUBSCRIBE;
	pk.flags                 = 0x2;
	pk.u.subscribe.packet_id = pid;
	pk.u.subscribe.count     = 1;
	pk.u.subscribe.list.p    = list;
	pk.u.subscribe.list.len  = (uint32_t)n;
	send_pkt(fd, ver, &pk);
}

static void send_publish(
    int fd, uint8_t ver, const char *topic, const char *payload, uint8_t qos, uint16_t pid)
{
	mqtt_packet pk;
	memset(&pk, 0, sizeof(pk));
	pk.type                  = MQTT_PUBLISH;
	pk.flags                 = (uint8_t)(qos << 1);
	pk.u.publish.qos         = qos;
	pk.u.publish.packet_id   = pid;
	pk.u.publish.topic.p     = (const uint8_t *)topic;
	pk.u.publish.topic.len   = (uint32_t)strlen(topic);
	pk.u.publish.payload.p   = (const uint8_t *)payload;
	pk.u.publish.payload.len = (uint32_t)strlen(payload);
	send_pkt(fd, ver, &pk);
}

static void send_ack(int fd, uint8_t ver, uint8_t type, uint16_t pid)
{
	mqtt_packet pk;
	memset(&pk, 0, sizeof(pk));
	pk.type            = type;
	pk.flags           = type == MQTT_PUBREL ? 0x2 : 0;
	pk.u.ack.packet_id = pid;
	send_pkt(fd, ver, &pk);
}

// Subscribes and checks the SUBACK grants qos.
static void client_subscribe(int fd, uint8_t ver, const char *filter, uint8_t qos)
{
	send_subscribe(fd, ver, 1, filter, qos);
	uint8_t     buf[512];
	mqtt_packet pk;
	assert_true(recv_pkt(fd, ver, buf, sizeof(buf), &pk));
	assert_int_equal(pk.type, MQTT_SUBACK);
	assert_int_equal(pk.u.suback.packet_id, 1);
	assert_int_equal(pk.u.suback.count, 1);
	assert_int_equal(pk.u.suback.codes[0], qos);
}

// Receives the PUBLISH routed to a subscriber and checks it.
static uint16_t expect_publish(
    int fd, uint8_t ver, const char *topic, const char *payload, uint8_t qos)
{
	uint8_t     buf[512];
	mqtt_packet pk;
	assert_true(recv_pkt(fd, ver, buf, sizeof(buf), &pk));
	assert_int_equal(pk.type, MQTT_PUBLISH);
	assert_int_equal(pk.u.publish.qos, qos);
	assert_int_equal(pk.u.publish.topic.len, strlen(topic));
	assert_memory_equal(pk.u.publish.topic.p, topic, strlen(topic));
	assert_int_equal(pk.u.publish.payload.len, strlen(payload));
	assert_memory_equal(pk.u.publish.payload.p, payload, strlen(payload));
	if (qos > 0) {
		assert_int_not_equal(pk.u.publish.packet_id, 0);
	}
	return pk.u.publish.packet_id;
}

static void expect_ack(int fd, uint8_t ver, uint8_t type, uint16_t pid)
{
	uint8_t     buf[512];
	mqtt_packet pk;
	assert_true(recv_pkt(fd, ver, buf, sizeof(buf), &pk));
	assert_int_equal(pk.type, type);
	assert_int_equal(pk.u.ack.packet_id, pid);
	assert_int_equal(pk.u.ack.reason, 0);
}

#endif // NMQ_PROTO_TEST_UTIL_H
