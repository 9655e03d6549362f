// Webhooks; see webhook.h.
#include "src/events/webhook.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>

#include "nng/core/log.h"
#include "nng/core/msg.h"
#include "src/http/http_parse.h"
#include "src/topic/topic_tree.h"

#define WH_RETRIES   3 // after the first attempt: 1 s, 2 s, 4 s
#define WH_HEAD_MAX  8192 // largest response head read
#define WH_MAX_FILT  16 // topic filters per event
#define WH_CA_BUNDLE "/etc/ssl/certs/ca-certificates.crt" // Debian's public CAs

// The JSON names, in broker_event_type order.
static const char *const ev_names[BEV_COUNT] = {
	"client_connect",
	"client_connack",
	"client_connected",
	"client_disconnected",
	"client_subscribe",
	"client_unsubscribe",
	"session_subscribed",
	"session_unsubscribed",
	"session_terminated",
	"message_publish",
	"message_delivered",
	"message_acked",
};

// One event, from the observer to the thread. Strings point into data.
typedef struct wh_item {
	struct wh_item *next;
	uint64_t        ts_ms; // wall clock
	uint64_t        due_ms; // monotonic, for a retry
	nmq_msg        *msg; // held (message events)
	char           *req; // the whole request, built on the thread
	size_t          req_len;
	char           *client_id;
	char           *username; // NULL: none
	char           *topic; // NULL: none
	int             attempts;
	uint16_t        keepalive;
	uint8_t         type;
	uint8_t         qos;
	uint8_t         proto_ver;
	uint8_t         rc;
	bool            retain;
	char            data[];
} wh_item;

enum { SLOT_IDLE = 0, SLOT_CONNECTING, SLOT_HANDSHAKE, SLOT_SENDING, SLOT_READING };

typedef struct wh_slot {
	int                 fd;
	int                 state;
	short               want; // poll events the next step waits for
	bool                tls; // ssl is set up
	mbedtls_ssl_context ssl;
	wh_item            *it;
	size_t              off; // bytes of it->req sent
	size_t              in_len;
	uint64_t            deadline_ms;
	char                in[WH_HEAD_MAX];
} wh_slot;

struct webhook {
	// Configuration, read-only after start.
	char                    hostport[300];
	char                   *path;
	struct sockaddr_storage addr;
	socklen_t               addrlen;
	char                   *headers; // "Name: value\r\n"...
	int                     encoding; // 0 plain, 1 base64, 2 base62
	uint32_t                pool;
	uint32_t                timeout_ms;
	uint32_t                queue_max;
	uint32_t                mask;
	char                   *filters[BEV_COUNT][WH_MAX_FILT];
	int                     n_filters[BEV_COUNT];
	bool                    all[BEV_COUNT]; // an entry without a topic filter

	pthread_mutex_t mtx; // guards head, tail, queued
	wh_item        *head, *tail;
	uint32_t        queued; // in the queue, in flight or waiting to retry
	int             efd;
	pthread_t       thr;
	bool            thr_started;
	_Atomic bool    stop;

	// Owned by the thread.
	wh_item *retry; // waiting for due_ms
	wh_slot *slots;

	_Atomic uint64_t sent, failed, dropped, retried;

	// https targets: one client configuration for every request.
	bool                     https;
	bool                     tls_ready; // the contexts below are initialised
	char                     sni[256]; // the URL's host
	uint8_t                  ip[16]; // the host as an address, if it is one
	size_t                   ip_len; // 4, 16, or 0 (a name)
	mbedtls_ssl_config       tls_conf;
	mbedtls_x509_crt         tls_ca, tls_cert;
	mbedtls_pk_context       tls_key;
	mbedtls_entropy_context  tls_entropy;
	mbedtls_ctr_drbg_context tls_drbg;
};

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

// ---- base62 and base64 -------------------------------------------------

static const char b62[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
// Digits for a group of 0..8 bytes: ceil(8k / log2(62)).
static const uint8_t b62_digits[9] = { 0, 2, 3, 5, 6, 7, 9, 10, 11 };

size_t webhook_base62_len(size_t n)
{
	return n / 8 * 11 + b62_digits[n % 8];
}

void webhook_base62(const uint8_t *src, size_t n, char *dst)
{
	size_t o = 0;
	for (size_t i = 0; i < n; i += 8) {
		size_t   k = n - i < 8 ? n - i : 8;
		uint64_t v = 0;
		for (size_t j = 0; j < k; j++) {
			v = v << 8 | src[i + j];
		}
		int d = b62_digits[k];
		for (int j = d - 1; j >= 0; j--) {
			dst[o + (size_t)j] = b62[v % 62];
			v /= 62;
		}
		o += (size_t)d;
	}
	dst[o] = '\0';
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void base64(const uint8_t *s, size_t n, char *d)
{
	size_t o = 0;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)s[i] << 16;
		if (i + 1 < n) {
			v |= (uint32_t)s[i + 1] << 8;
		}
		if (i + 2 < n) {
			v |= s[i + 2];
		}
		d[o++] = b64[v >> 18 & 63];
		d[o++] = b64[v >> 12 & 63];
		d[o++] = i + 1 < n ? b64[v >> 6 & 63] : '=';
		d[o++] = i + 2 < n ? b64[v & 63] : '=';
	}
	d[o] = '\0';
}

// ---- JSON bodies -------------------------------------------------------

typedef struct jbuf {
	char  *p;
	size_t len, cap;
	bool   failed;
} jbuf;

static bool jb_room(jbuf *b, size_t more)
{
	if (b->failed) {
		return false;
	}
	if (b->len + more + 1 <= b->cap) {
		return true;
	}
	size_t ncap = b->cap ? b->cap : 512;
	while (ncap < b->len + more + 1) {
		ncap *= 2;
	}
	char *np = realloc(b->p, ncap);
	if (np == NULL) {
		b->failed = true;
		return false;
	}
	b->p   = np;
	b->cap = ncap;
	return true;
}

static void jb_raw(jbuf *b, const char *s, size_t n)
{
	if (jb_room(b, n)) {
		memcpy(b->p + b->len, s, n);
		b->len += n;
		b->p[b->len] = '\0';
	}
}

static void jb_fmt(jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void jb_fmt(jbuf *b, const char *fmt, ...)
{
	char    tmp[128];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n > 0) {
		jb_raw(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
	}
}

// Appends s[0..n) as a JSON string. Control characters are escaped; bytes
// that are not UTF-8 are replaced by U+FFFD, so the body stays valid JSON
// whatever a plain payload holds.
static void jb_str(jbuf *b, const char *s, size_t n)
{
	if (!jb_room(b, n * 6 + 2)) {
		return;
	}
	char                *o = b->p + b->len;
	const unsigned char *u = (const unsigned char *)s;
	*o++                   = '"';
	for (size_t i = 0; i < n;) {
		unsigned char c = u[i];
		if (c == '"' || c == '\\') {
			*o++ = '\\';
			*o++ = (char)c;
			i++;
		} else if (c < 0x20) {
			o += sprintf(o, "\\u%04x", c);
			i++;
		} else if (c < 0x80) {
			*o++ = (char)c;
			i++;
		} else {
			size_t len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
			bool   ok  = len > 0 && i + len <= n && c < 0xF5;
			for (size_t j = 1; ok && j < len; j++) {
				ok = (u[i + j] & 0xC0) == 0x80;
			}
			if (ok && len == 3) {
				// No overlong forms, no surrogates.
				ok = !(c == 0xE0 && u[i + 1] < 0xA0)
				    && !(c == 0xED && u[i + 1] >= 0xA0);
			}
			if (ok && len == 4) {
				ok = !(c == 0xF0 && u[i + 1] < 0x90)
				    && !(c == 0xF4 && u[i + 1] >= 0x90);
			}
			if (ok) {
				memcpy(o, u + i, len);
				o += len;
				i += len;
			} else {
				memcpy(o, "\xEF\xBF\xBD", 3); // U+FFFD
				o += 3;
				i++;
			}
		}
	}
	*o++         = '"';
	b->len       = (size_t)(o - b->p);
	b->p[b->len] = '\0';
}

static void jb_cstr(jbuf *b, const char *s)
{
	jb_str(b, s, strlen(s));
}

// The body of one event (docs/webhooks.md). Returns false when out of
// memory.
static bool build_body(webhook *w, const wh_item *it, jbuf *b)
{
	const char *user = it->username != NULL ? it->username : "undefined";
	jb_fmt(b, "{\"action\":\"%s\",", ev_names[it->type]);
	if (it->type == BEV_MESSAGE_PUBLISH) {
		jb_raw(b, "\"from_client_id\":", 17);
		jb_cstr(b, it->client_id);
		jb_raw(b, ",\"from_username\":", 17);
		jb_cstr(b, user);
	} else {
		jb_raw(b, "\"clientid\":", 11);
		jb_cstr(b, it->client_id);
		jb_raw(b, ",\"username\":", 12);
		jb_cstr(b, user);
	}
	switch (it->type) {
	case BEV_CLIENT_CONNECT:
		jb_fmt(b, ",\"keepalive\":%u,\"proto_ver\":%u", it->keepalive, it->proto_ver);
		break;
	case BEV_CLIENT_CONNACK:
		jb_fmt(b, ",\"keepalive\":%u,\"proto_ver\":%u,\"conn_ack\":\"%s\"", it->keepalive,
		    it->proto_ver, it->rc == 0 ? "success" : "fail");
		break;
	case BEV_CLIENT_CONNECTED:
		jb_fmt(b, ",\"keepalive\":%u,\"proto_ver\":%u", it->keepalive, it->proto_ver);
		break;
	case BEV_CLIENT_DISCONNECTED:
		// 0x00 Normal disconnection and 0x04 Disconnect with Will
		// Message are what a client asks for.
		jb_fmt(b, ",\"reason\":\"%s\"", it->rc == 0 || it->rc == 4 ? "normal" : "abnormal");
		break;
	default:
		break;
	}
	if (it->topic != NULL) {
		jb_raw(b, ",\"topic\":", 9);
		jb_cstr(b, it->topic);
		jb_fmt(b, ",\"qos\":%u", it->qos);
	}
	if (it->type == BEV_MESSAGE_PUBLISH && it->msg != NULL) {
		const nmq_msg *m = it->msg;
		jb_fmt(b, ",\"retain\":%s,\"payload\":", it->retain ? "true" : "false");
		if (w->encoding == 0) {
			jb_str(b, (const char *)m->payload, m->payload_len);
		} else {
			size_t n = w->encoding == 1 ? (m->payload_len + 2) / 3 * 4
			                            : webhook_base62_len(m->payload_len);
			if (jb_room(b, n + 2)) {
				b->p[b->len++] = '"';
				if (w->encoding == 1) {
					base64(m->payload, m->payload_len, b->p + b->len);
				} else {
					webhook_base62(m->payload, m->payload_len, b->p + b->len);
				}
				b->len += n;
				jb_raw(b, "\"", 1);
			}
		}
	}
	jb_fmt(b, ",\"ts\":%llu}", (unsigned long long)it->ts_ms);
	return !b->failed;
}

// Builds it->req (head and body). Returns false when out of memory.
static bool build_request(webhook *w, wh_item *it)
{
	jbuf body = { 0 };
	if (!build_body(w, it, &body)) {
		free(body.p);
		return false;
	}
	jbuf req = { 0 };
	jb_raw(&req, "POST ", 5);
	jb_raw(&req, w->path, strlen(w->path));
	jb_raw(&req, " HTTP/1.1\r\nHost: ", 17);
	jb_raw(&req, w->hostport, strlen(w->hostport));
	jb_raw(&req, "\r\n", 2);
	jb_raw(&req, w->headers, strlen(w->headers));
	jb_fmt(&req, "Content-Length: %zu\r\nConnection: close\r\n\r\n", body.len);
	jb_raw(&req, body.p, body.len);
	free(body.p);
	if (req.failed) {
		free(req.p);
		return false;
	}
	it->req     = req.p;
	it->req_len = req.len;
	return true;
}

// ---- the observer (worker threads) ---------------------------------------

static void item_free(wh_item *it)
{
	if (it->msg != NULL) {
		nmq_msg_release(it->msg);
	}
	free(it->req);
	free(it);
}

static bool topic_wanted(const webhook *w, broker_event_type t, const char *topic, size_t len)
{
	if (w->all[t] || w->n_filters[t] == 0) {
		return true;
	}
	if (topic == NULL) {
		return false;
	}
	for (int i = 0; i < w->n_filters[t]; i++) {
		if (topic_filter_match(w->filters[t][i], strlen(w->filters[t][i]), topic, len)) {
			return true;
		}
	}
	return false;
}

static void webhook_observe(void *arg, const broker_event *ev)
{
	webhook *w = arg;
	if (ev->type >= BEV_COUNT || !topic_wanted(w, ev->type, ev->topic, ev->topic_len)) {
		return;
	}
	size_t cl = strlen(ev->client_id) + 1;
	size_t ul = ev->username != NULL ? strlen(ev->username) + 1 : 0;
	size_t tl = ev->topic != NULL ? ev->topic_len + 1 : 0;
	pthread_mutex_lock(&w->mtx);
	bool full = w->queued >= w->queue_max;
	if (!full) {
		w->queued++;
	}
	pthread_mutex_unlock(&w->mtx);
	if (full) {
		atomic_fetch_add(&w->dropped, 1);
		log_warn_rl("webhook", "event=%s client_id=%s action=dropped reason=queue_full",
		    ev_names[ev->type], ev->client_id);
		return;
	}
	wh_item *it = malloc(sizeof(*it) + cl + ul + tl);
	if (it == NULL) {
		pthread_mutex_lock(&w->mtx);
		w->queued--;
		pthread_mutex_unlock(&w->mtx);
		atomic_fetch_add(&w->dropped, 1);
		log_warn_rl(
		    "webhook", "event=%s action=dropped reason=out_of_memory", ev_names[ev->type]);
		return;
	}
	memset(it, 0, sizeof(*it));
	char *p       = it->data;
	it->client_id = memcpy(p, ev->client_id, cl);
	p += cl;
	if (ul > 0) {
		it->username = memcpy(p, ev->username, ul);
		p += ul;
	}
	if (tl > 0) {
		memcpy(p, ev->topic, tl - 1);
		p[tl - 1] = '\0';
		it->topic = p;
	}
	it->ts_ms     = wall_ms();
	it->type      = (uint8_t)ev->type;
	it->qos       = ev->qos;
	it->proto_ver = ev->proto_ver;
	it->rc        = ev->rc;
	it->keepalive = ev->keepalive;
	if (ev->msg != NULL && ev->type == BEV_MESSAGE_PUBLISH) {
		nmq_msg_hold(ev->msg);
		it->msg    = ev->msg;
		it->retain = ev->msg->retain;
	}
	pthread_mutex_lock(&w->mtx);
	// The thread takes from the queue whenever a request slot is free, so
	// it needs waking only when the queue was empty.
	bool wake = w->head == NULL;
	if (w->tail != NULL) {
		w->tail->next = it;
	} else {
		w->head = it;
	}
	w->tail = it;
	pthread_mutex_unlock(&w->mtx);
	if (wake) {
		uint64_t one = 1;
		ssize_t  r   = write(w->efd, &one, sizeof(one));
		(void)r; // a full counter still wakes the thread
	}
}

// ---- the thread ------------------------------------------------------------

static void item_done(webhook *w, wh_item *it)
{
	item_free(it);
	pthread_mutex_lock(&w->mtx);
	w->queued--;
	pthread_mutex_unlock(&w->mtx);
}

// A failed attempt: schedule a retry, or give up.
static void item_failed(webhook *w, wh_item *it, const char *why, int status)
{
	it->attempts++;
	if (it->attempts <= WH_RETRIES) {
		atomic_fetch_add(&w->retried, 1);
		it->due_ms = mono_ms() + (1000ULL << (it->attempts - 1));
		it->next   = w->retry;
		w->retry   = it;
		log_info_rl("webhook",
		    "event=%s client_id=%s attempt=%d reason=%s status=%d action=retry",
		    ev_names[it->type], it->client_id, it->attempts, why, status);
		return;
	}
	atomic_fetch_add(&w->failed, 1);
	log_warn_rl("webhook", "event=%s client_id=%s reason=%s status=%d action=given_up",
	    ev_names[it->type], it->client_id, why, status);
	item_done(w, it);
}

static void slot_close(wh_slot *s)
{
	if (s->tls) {
		mbedtls_ssl_free(&s->ssl);
		s->tls = false;
	}
	if (s->fd >= 0) {
		close(s->fd);
	}
	s->fd     = -1;
	s->state  = SLOT_IDLE;
	s->it     = NULL;
	s->off    = 0;
	s->in_len = 0;
}

static void slot_fail(webhook *w, wh_slot *s, const char *why, int status)
{
	wh_item *it = s->it;
	slot_close(s);
	item_failed(w, it, why, status);
}

// Starts the request of it on the idle slot s.
static void slot_start(webhook *w, wh_slot *s, wh_item *it)
{
	if (it->req == NULL && !build_request(w, it)) {
		atomic_fetch_add(&w->dropped, 1);
		log_warn_rl(
		    "webhook", "event=%s action=dropped reason=out_of_memory", ev_names[it->type]);
		item_done(w, it);
		return;
	}
	s->it          = it;
	s->deadline_ms = mono_ms() + w->timeout_ms;
	s->fd          = socket(w->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s->fd < 0) {
		slot_fail(w, s, "socket", 0);
		return;
	}
	int one = 1;
	(void)setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(s->fd, (struct sockaddr *)&w->addr, w->addrlen) == 0 || errno == EINPROGRESS) {
		s->state = SLOT_CONNECTING; // writable once connected
		s->want  = POLLOUT;
	} else {
		slot_fail(w, s, "connect", 0);
	}
}

// mbed TLS I/O on the slot's non-blocking socket.
static int bio_send(void *arg, const unsigned char *buf, size_t len)
{
	wh_slot *s = arg;
	ssize_t  n = send(s->fd, buf, len, MSG_NOSIGNAL);
	if (n >= 0) {
		return (int)n;
	}
	return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR
	    ? MBEDTLS_ERR_SSL_WANT_WRITE
	    : MBEDTLS_ERR_NET_SEND_FAILED;
}

static int bio_recv(void *arg, unsigned char *buf, size_t len)
{
	wh_slot *s = arg;
	ssize_t  n = recv(s->fd, buf, len, 0);
	if (n >= 0) {
		return (int)n;
	}
	return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR
	    ? MBEDTLS_ERR_SSL_WANT_READ
	    : MBEDTLS_ERR_NET_RECV_FAILED;
}

// The poll events an mbed TLS "want" code waits for; 0 for a failure.
static short tls_want(int rv)
{
	return rv == MBEDTLS_ERR_SSL_WANT_READ ? POLLIN
	    : rv == MBEDTLS_ERR_SSL_WANT_WRITE ? POLLOUT
	                                       : 0;
}

static void tls_fail(webhook *w, wh_slot *s, const char *what, int rv)
{
	char why[160];
	mbedtls_strerror(rv, why, sizeof(why));
	log_info_rl("webhook", "event=tls_failed step=%s reason=\"%s\"", what, why);
	slot_fail(w, s, what, 0);
}

// Writes what is left of the request. Returns true when all is sent;
// false when the slot ended or waits (s->want set).
static bool slot_send(webhook *w, wh_slot *s)
{
	while (s->off < s->it->req_len) {
		const char *p = s->it->req + s->off;
		size_t      n = s->it->req_len - s->off;
		if (s->tls) {
			int rv = mbedtls_ssl_write(&s->ssl, (const unsigned char *)p, n);
			if (rv > 0) {
				s->off += (size_t)rv;
				continue;
			}
			if ((s->want = tls_want(rv)) == 0) {
				tls_fail(w, s, "tls_write", rv);
			}
			return false;
		}
		ssize_t r = send(s->fd, p, n, MSG_NOSIGNAL);
		if (r < 0 && errno == EINTR) {
			continue;
		}
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			s->want = POLLOUT;
			return false;
		}
		if (r <= 0) {
			slot_fail(w, s, "send", 0);
			return false;
		}
		s->off += (size_t)r;
	}
	return true;
}

// Reads into s->in: > 0 bytes, 0 at the end of the stream, -1 on a
// failure, -2 when it must wait (s->want set).
static ssize_t slot_read(wh_slot *s)
{
	for (;;) {
		if (s->tls) {
			int rv = mbedtls_ssl_read(
			    &s->ssl, (unsigned char *)s->in + s->in_len, sizeof(s->in) - s->in_len);
			if (rv >= 0 || rv == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY) {
				return rv >= 0 ? rv : 0;
			}
			return (s->want = tls_want(rv)) != 0 ? -2 : -1;
		}
		ssize_t n = recv(s->fd, s->in + s->in_len, sizeof(s->in) - s->in_len, 0);
		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			s->want = POLLIN;
			return -2;
		}
		return n;
	}
}

// Advances s after poll reported revents.
static void slot_io(webhook *w, wh_slot *s, short revents)
{
	if (s->state == SLOT_CONNECTING) {
		int       e  = 0;
		socklen_t el = sizeof(e);
		if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &e, &el) != 0 || e != 0) {
			slot_fail(w, s, "connect", 0);
			return;
		}
		if (!w->https) {
			s->state = SLOT_SENDING;
		} else {
			mbedtls_ssl_init(&s->ssl);
			s->tls = true;
			int rv = mbedtls_ssl_setup(&s->ssl, &w->tls_conf);
			if (rv == 0 && w->ip_len == 0) {
				rv = mbedtls_ssl_set_hostname(
				    &s->ssl, w->sni); // SNI and name check
			}
			if (rv != 0) {
				tls_fail(w, s, "tls_setup", rv);
				return;
			}
			mbedtls_ssl_set_bio(&s->ssl, s, bio_send, bio_recv, NULL);
			s->state = SLOT_HANDSHAKE;
		}
	}
	if (s->state == SLOT_HANDSHAKE) {
		int rv = mbedtls_ssl_handshake(&s->ssl);
		if (rv != 0) {
			if ((s->want = tls_want(rv)) == 0) {
				tls_fail(w, s, "tls_handshake", rv);
			}
			return;
		}
		s->state = SLOT_SENDING;
	}
	if (s->state == SLOT_SENDING) {
		if (!slot_send(w, s)) {
			return;
		}
		s->state = SLOT_READING;
		s->want  = POLLIN;
		if (!s->tls) {
			return; // wait for the answer
		}
		// mbed TLS may hold records already read: try at once.
	}
	if (s->state != SLOT_READING) {
		return;
	}
	(void)revents;
	for (;;) {
		if (s->in_len == sizeof(s->in)) {
			slot_fail(w, s, "response_head_too_long", 0);
			return;
		}
		ssize_t n = slot_read(s);
		if (n == -2) {
			return;
		}
		if (n > 0) {
			s->in_len += (size_t)n;
		}
		http_msg      m;
		int           status = 0;
		http_parse_rc rc = http_parse_response(s->in, s->in_len, WH_HEAD_MAX, &m, &status);
		if (rc == HTTP_PARSE_OK) {
			if (m.status >= 200 && m.status < 300) {
				atomic_fetch_add(&w->sent, 1);
				wh_item *it = s->it;
				slot_close(s);
				item_done(w, it);
			} else {
				slot_fail(w, s, "status", m.status);
			}
			return;
		}
		if (rc == HTTP_PARSE_ERROR) {
			slot_fail(w, s, "bad_response", status);
			return;
		}
		if (n <= 0) {
			slot_fail(w, s, n == 0 ? "closed" : "recv", 0);
			return;
		}
	}
}

// Takes the next item to send: a due retry first, then the queue.
static wh_item *next_item(webhook *w, uint64_t now)
{
	for (wh_item **pp = &w->retry; *pp != NULL; pp = &(*pp)->next) {
		if ((*pp)->due_ms <= now) {
			wh_item *it = *pp;
			*pp         = it->next;
			it->next    = NULL;
			return it;
		}
	}
	pthread_mutex_lock(&w->mtx);
	wh_item *it = w->head;
	if (it != NULL) {
		w->head = it->next;
		if (w->head == NULL) {
			w->tail = NULL;
		}
		it->next = NULL;
	}
	pthread_mutex_unlock(&w->mtx);
	return it;
}

static void *webhook_main(void *arg)
{
	webhook *w = arg;
	(void)pthread_setname_np(pthread_self(), "nmq:webhook");
	struct pollfd *pfd = calloc(w->pool + 1, sizeof(*pfd));
	int           *map = calloc(w->pool + 1, sizeof(*map));
	if (pfd == NULL || map == NULL) {
		log_error("webhook", "event=thread_failed reason=out_of_memory");
		free(pfd);
		free(map);
		return NULL;
	}
	while (!atomic_load(&w->stop)) {
		uint64_t now = mono_ms();
		// Fill idle slots.
		for (uint32_t i = 0; i < w->pool; i++) {
			if (w->slots[i].state != SLOT_IDLE) {
				continue;
			}
			wh_item *it = next_item(w, now);
			if (it == NULL) {
				break;
			}
			slot_start(w, &w->slots[i], it);
		}
		// Deadlines.
		int timeout = 1000;
		for (uint32_t i = 0; i < w->pool; i++) {
			wh_slot *s = &w->slots[i];
			if (s->state == SLOT_IDLE) {
				continue;
			}
			if (now >= s->deadline_ms) {
				slot_fail(w, s, "timeout", 0);
				continue;
			}
			if ((int)(s->deadline_ms - now) < timeout) {
				timeout = (int)(s->deadline_ms - now);
			}
		}
		for (wh_item *it = w->retry; it != NULL; it = it->next) {
			int d   = it->due_ms > now ? (int)(it->due_ms - now) : 0;
			timeout = d < timeout ? d : timeout;
		}
		int n         = 0;
		pfd[n].fd     = w->efd;
		pfd[n].events = POLLIN;
		map[n++]      = -1;
		for (uint32_t i = 0; i < w->pool; i++) {
			wh_slot *s = &w->slots[i];
			if (s->state == SLOT_IDLE) {
				continue;
			}
			pfd[n].fd     = s->fd;
			pfd[n].events = s->want != 0 ? s->want : POLLIN;
			map[n++]      = (int)i;
		}
		int r = poll(pfd, (nfds_t)n, timeout);
		if (r < 0 && errno != EINTR) {
			log_error("webhook", "event=poll_failed errno=%d", errno);
			break;
		}
		for (int i = 0; r > 0 && i < n; i++) {
			if (pfd[i].revents == 0) {
				continue;
			}
			if (map[i] < 0) {
				uint64_t v;
				ssize_t  rr = read(w->efd, &v, sizeof(v));
				(void)rr;
				continue;
			}
			wh_slot *s = &w->slots[map[i]];
			if (s->state != SLOT_IDLE) {
				slot_io(w, s, pfd[i].revents);
			}
		}
	}
	free(pfd);
	free(map);
	return NULL;
}

// ---- start / stop ----------------------------------------------------------

// Splits an http:// URL into host, port and path and resolves the host.
static nmq_err parse_url(webhook *w, const char *url, char *err, size_t errlen)
{
	w->https          = strncmp(url, "https://", 8) == 0;
	const char *p     = url + (w->https ? 8 : 7); // after the scheme
	const char *slash = strchr(p, '/');
	size_t      hl    = slash != NULL ? (size_t)(slash - p) : strlen(p);
	char        host[256];
	char        port[8];
	snprintf(port, sizeof(port), "%s", w->https ? "443" : "80");
	if (hl == 0 || hl >= sizeof(host)) {
		snprintf(err, errlen, "webhook.url: bad host in \"%.200s\"", url);
		return NMQ_EINVAL;
	}
	memcpy(host, p, hl);
	host[hl] = '\0';
	snprintf(w->hostport, sizeof(w->hostport), "%s", host);
	char *h = host;
	char *colon;
	if (h[0] == '[') {
		char *rb = strchr(h, ']');
		if (rb == NULL) {
			snprintf(err, errlen, "webhook.url: bad host in \"%.200s\"", url);
			return NMQ_EINVAL;
		}
		*rb   = '\0';
		colon = rb[1] == ':' ? rb + 1 : NULL;
		h++;
	} else {
		colon = strrchr(h, ':');
	}
	if (colon != NULL) {
		*colon = '\0';
		snprintf(port, sizeof(port), "%.7s", colon + 1);
	}
	snprintf(w->sni, sizeof(w->sni), "%s", h);
	w->path = strdup(slash != NULL ? slash : "/");
	if (w->path == NULL) {
		snprintf(err, errlen, "out of memory");
		return NMQ_ENOMEM;
	}
	struct addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family   = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	int rv            = getaddrinfo(h, port, &hints, &res);
	if (rv != 0 || res == NULL) {
		snprintf(err, errlen, "webhook.url: cannot resolve \"%.200s\" port %s: %s", h, port,
		    gai_strerror(rv));
		return NMQ_EINVAL;
	}
	memcpy(&w->addr, res->ai_addr, res->ai_addrlen);
	w->addrlen = (socklen_t)res->ai_addrlen;
	freeaddrinfo(res);
	return NMQ_OK;
}

static int event_index(const char *name)
{
	if (strncmp(name, "on_", 3) == 0) {
		name += 3;
	}
	for (int i = 0; i < BEV_COUNT; i++) {
		if (strcmp(name, ev_names[i]) == 0) {
			return i;
		}
	}
	return -1;
}

// Certificate check of a target given by IP address (mbed TLS 2.28 matches
// DNS names only): the end certificate must list the address as an
// iPAddress subject alternative name. Returns 0; flags carry the verdict.
static int verify_ip(void *arg, mbedtls_x509_crt *crt, int depth, uint32_t *flags)
{
	const webhook *w = arg;
	if (depth != 0) {
		return 0;
	}
	for (const mbedtls_x509_sequence *q = &crt->subject_alt_names; q != NULL; q = q->next) {
		if (q->buf.tag == (MBEDTLS_ASN1_CONTEXT_SPECIFIC | 7) && q->buf.len == w->ip_len
		    && memcmp(q->buf.p, w->ip, w->ip_len) == 0) {
			return 0;
		}
	}
	*flags |= MBEDTLS_X509_BADCERT_CN_MISMATCH;
	return 0;
}

// Sets up the client TLS configuration of an https target.
static nmq_err tls_setup(webhook *w, const nmq_conf *conf, char *err, size_t errlen)
{
	mbedtls_ssl_config_init(&w->tls_conf);
	mbedtls_x509_crt_init(&w->tls_ca);
	mbedtls_x509_crt_init(&w->tls_cert);
	mbedtls_pk_init(&w->tls_key);
	mbedtls_entropy_init(&w->tls_entropy);
	mbedtls_ctr_drbg_init(&w->tls_drbg);
	w->tls_ready = true;
	const char *ca
	    = conf->webhook_ssl_cacertfile != NULL ? conf->webhook_ssl_cacertfile : WH_CA_BUNDLE;
	char        why[160];
	const char *what = "random generator";
	int         rv = mbedtls_ctr_drbg_seed(&w->tls_drbg, mbedtls_entropy_func, &w->tls_entropy,
	            (const unsigned char *)"nmq-webhook", 11);
	if (rv == 0) {
		rv   = mbedtls_ssl_config_defaults(&w->tls_conf, MBEDTLS_SSL_IS_CLIENT,
		      MBEDTLS_SSL_TRANSPORT_STREAM, MBEDTLS_SSL_PRESET_DEFAULT);
		what = "configuration";
	}
	if (rv == 0 && conf->webhook_ssl_verify_peer) {
		rv   = mbedtls_x509_crt_parse_file(&w->tls_ca, ca);
		what = ca;
	}
	if (rv == 0 && conf->webhook_ssl_certfile != NULL) {
		rv   = mbedtls_x509_crt_parse_file(&w->tls_cert, conf->webhook_ssl_certfile);
		what = conf->webhook_ssl_certfile;
		if (rv == 0) {
			rv = mbedtls_pk_parse_keyfile(
			    &w->tls_key, conf->webhook_ssl_keyfile, conf->webhook_ssl_key_password);
			what = conf->webhook_ssl_keyfile;
		}
		if (rv == 0) {
			rv   = mbedtls_ssl_conf_own_cert(&w->tls_conf, &w->tls_cert, &w->tls_key);
			what = "client certificate";
		}
	}
	if (rv != 0) {
		mbedtls_strerror(rv, why, sizeof(why));
		snprintf(err, errlen, "webhook.ssl: %s: %s", what, why);
		return NMQ_ETLS;
	}
	mbedtls_ssl_conf_rng(&w->tls_conf, mbedtls_ctr_drbg_random, &w->tls_drbg);
	mbedtls_ssl_conf_authmode(&w->tls_conf,
	    conf->webhook_ssl_verify_peer ? MBEDTLS_SSL_VERIFY_REQUIRED : MBEDTLS_SSL_VERIFY_NONE);
	if (conf->webhook_ssl_verify_peer) {
		mbedtls_ssl_conf_ca_chain(&w->tls_conf, &w->tls_ca, NULL);
	}
	if (inet_pton(AF_INET, w->sni, w->ip) == 1) {
		w->ip_len = 4;
	} else if (inet_pton(AF_INET6, w->sni, w->ip) == 1) {
		w->ip_len = 16;
	}
	if (w->ip_len > 0 && conf->webhook_ssl_verify_peer) {
		mbedtls_ssl_conf_verify(&w->tls_conf, verify_ip, w);
	}
	return NMQ_OK;
}

static void webhook_free(webhook *w)
{
	if (w->tls_ready) {
		mbedtls_ssl_config_free(&w->tls_conf);
		mbedtls_x509_crt_free(&w->tls_ca);
		mbedtls_x509_crt_free(&w->tls_cert);
		mbedtls_pk_free(&w->tls_key);
		mbedtls_ctr_drbg_free(&w->tls_drbg);
		mbedtls_entropy_free(&w->tls_entropy);
	}
	for (int t = 0; t < BEV_COUNT; t++) {
		for (int i = 0; i < w->n_filters[t]; i++) {
			free(w->filters[t][i]);
		}
	}
	free(w->path);
	free(w->headers);
	free(w->slots);
	if (w->efd >= 0) {
		close(w->efd);
	}
	pthread_mutex_destroy(&w->mtx);
	free(w);
}

nmq_err webhook_start(const nmq_conf *conf, nmq_broker *b, webhook **out, char *err, size_t errlen)
{
	*out = NULL;
	if (!conf->webhook_present || !conf->webhook_enable || conf->webhook_url == NULL) {
		return NMQ_OK;
	}
	webhook *w = calloc(1, sizeof(*w));
	if (w == NULL) {
		snprintf(err, errlen, "out of memory");
		return NMQ_ENOMEM;
	}
	w->efd = -1;
	pthread_mutex_init(&w->mtx, NULL);
	w->encoding   = conf->webhook_encoding;
	w->pool       = conf->webhook_pool_size > 0 ? conf->webhook_pool_size : 1;
	w->timeout_ms = conf->webhook_timeout_ms > 0 ? conf->webhook_timeout_ms : 5000;
	w->queue_max  = conf->webhook_queue_size > 0 ? conf->webhook_queue_size : 10000;
	nmq_err e     = parse_url(w, conf->webhook_url, err, errlen);
	if (e == NMQ_OK && w->https) {
		e = tls_setup(w, conf, err, errlen);
	}
	if (e != NMQ_OK) {
		webhook_free(w);
		return e;
	}
	// Headers: the configured ones, and a JSON content type unless one is
	// configured.
	jbuf hb    = { 0 };
	bool ctype = false;
	if (conf->webhook_headers != NULL) {
		for (const cJSON *h = conf->webhook_headers->child; h != NULL; h = h->next) {
			ctype = ctype || strcasecmp(h->string, "content-type") == 0;
			jb_raw(&hb, h->string, strlen(h->string));
			jb_raw(&hb, ": ", 2);
			jb_raw(&hb, h->valuestring, strlen(h->valuestring));
			jb_raw(&hb, "\r\n", 2);
		}
	}
	if (!ctype) {
		jb_raw(&hb, "Content-Type: application/json\r\n", 32);
	}
	if (hb.failed) {
		free(hb.p);
		webhook_free(w);
		snprintf(err, errlen, "out of memory");
		return NMQ_ENOMEM;
	}
	w->headers = hb.p;
	// Events and their topic filters.
	if (conf->webhook_events != NULL) {
		for (const cJSON *ev = conf->webhook_events->child; ev != NULL; ev = ev->next) {
			const cJSON *n = cJSON_GetObjectItemCaseSensitive(ev, "event");
			const cJSON *t = cJSON_GetObjectItemCaseSensitive(ev, "topic");
			int          i = cJSON_IsString(n) ? event_index(n->valuestring) : -1;
			if (i < 0) {
				continue;
			}
			w->mask |= 1u << i;
			if (!cJSON_IsString(t)) {
				w->all[i] = true; // no topic: every topic
			} else if (w->n_filters[i] < WH_MAX_FILT) {
				char *f = strdup(t->valuestring);
				if (f != NULL) {
					w->filters[i][w->n_filters[i]++] = f;
				}
			}
		}
	}
	w->slots = calloc(w->pool, sizeof(*w->slots));
	w->efd   = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (w->slots == NULL || w->efd < 0) {
		webhook_free(w);
		snprintf(err, errlen, "out of memory or file descriptors (webhook)");
		return NMQ_ENOMEM;
	}
	for (uint32_t i = 0; i < w->pool; i++) {
		w->slots[i].fd = -1;
	}
	int rv = pthread_create(&w->thr, NULL, webhook_main, w);
	if (rv != 0) {
		webhook_free(w);
		snprintf(err, errlen, "cannot start the webhook thread: %s", strerror(rv));
		return NMQ_ENOMEM;
	}
	w->thr_started = true;
	broker_set_observer(b, webhook_observe, w, w->mask);
	log_info("webhook", "event=started url=%s events=0x%x pool_size=%u", conf->webhook_url,
	    w->mask, w->pool);
	*out = w;
	return NMQ_OK;
}

void webhook_get_stats(webhook *w, webhook_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (w == NULL) {
		return;
	}
	st->sent    = atomic_load(&w->sent);
	st->failed  = atomic_load(&w->failed);
	st->dropped = atomic_load(&w->dropped);
	st->retried = atomic_load(&w->retried);
	pthread_mutex_lock(&w->mtx);
	st->queued = w->queued;
	pthread_mutex_unlock(&w->mtx);
}

void webhook_stop(webhook *w)
{
	if (w == NULL) {
		return;
	}
	atomic_store(&w->stop, true);
	uint64_t one = 1;
	ssize_t  r   = write(w->efd, &one, sizeof(one));
	(void)r;
	if (w->thr_started) {
		pthread_join(w->thr, NULL);
	}
	uint64_t unsent = 0;
	for (uint32_t i = 0; i < w->pool; i++) {
		if (w->slots[i].state != SLOT_IDLE) {
			wh_item *it = w->slots[i].it;
			slot_close(&w->slots[i]);
			item_free(it);
			unsent++;
		}
	}
	for (wh_item *it = w->retry, *nx; it != NULL; it = nx) {
		nx = it->next;
		item_free(it);
		unsent++;
	}
	for (wh_item *it = w->head, *nx; it != NULL; it = nx) {
		nx = it->next;
		item_free(it);
		unsent++;
	}
	atomic_fetch_add(&w->dropped, unsent);
	log_info("webhook", "event=stopped sent=%llu failed=%llu dropped=%llu retried=%llu",
	    (unsigned long long)atomic_load(&w->sent), (unsigned long long)atomic_load(&w->failed),
	    (unsigned long long)atomic_load(&w->dropped),
	    (unsigned long long)atomic_load(&w->retried));
	webhook_free(w);
}
