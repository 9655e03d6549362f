// Webhooks; see webhook.h.
#include "src/events/webhook.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "nng/core/log.h"
#include "nng/core/msg.h"
#include "src/http/http_client.h"
#include "src/topic/topic_tree.h"

#define WH_RETRIES   3 // after the first attempt: 1 s, 2 s, 4 s
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

struct webhook {
	// Configuration, read-only after start.
	http_client http; // the target, its TLS configuration, its slots' rules
	char       *headers; // "Name: value\r\n"...
	int         encoding; // 0 plain, 1 base64, 2 base62
	uint32_t    pool;
	uint32_t    timeout_ms;
	uint32_t    queue_max;
	uint32_t    mask;
	char       *filters[BEV_COUNT][WH_MAX_FILT];
	int         n_filters[BEV_COUNT];
	bool        all[BEV_COUNT]; // an entry without a topic filter

	pthread_mutex_t mtx; // guards head, tail, queued
	wh_item        *head, *tail;
	uint32_t        queued; // in the queue, in flight or waiting to retry
	int             efd;
	pthread_t       thr;
	bool            thr_started;
	_Atomic bool    stop;

	// Owned by the thread.
	wh_item   *retry; // waiting for due_ms
	http_slot *slots;

	_Atomic uint64_t sent, failed, dropped, retried;
};

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
	jb_raw(&req, w->http.url.path, strlen(w->http.url.path));
	jb_raw(&req, " HTTP/1.1\r\nHost: ", 17);
	jb_raw(&req, w->http.url.hostport, strlen(w->http.url.hostport));
	jb_raw(&req, "\r\n", 2);
	jb_raw(&req, w->headers, strlen(w->headers));
	jb_fmt(&req, "Content-Length: %zu\r\n\r\n", body.len); // kept alive
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
		it->due_ms = http_client_now_ms() + (1000ULL << (it->attempts - 1));
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

// The end of a request on a slot (http_client_done).
static void slot_done(void *arg, void *item, bool answered, int status, const char *why)
{
	webhook *w  = arg;
	wh_item *it = item;
	if (!answered) {
		item_failed(w, it, why, status);
	} else if (status >= 200 && status < 300) {
		atomic_fetch_add(&w->sent, 1);
		item_done(w, it);
	} else {
		item_failed(w, it, "status", status);
	}
}

// Starts the request of it on the idle slot s.
static void slot_start(webhook *w, http_slot *s, wh_item *it)
{
	if (it->req == NULL && !build_request(w, it)) {
		atomic_fetch_add(&w->dropped, 1);
		log_warn_rl(
		    "webhook", "event=%s action=dropped reason=out_of_memory", ev_names[it->type]);
		item_done(w, it);
		return;
	}
	http_slot_start(&w->http, s, it, it->req, it->req_len);
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
		uint64_t now = http_client_now_ms();
		// Fill idle slots, those with a kept connection first.
		bool more = true;
		for (int pass = 0; more && pass < 2; pass++) {
			for (uint32_t i = 0; i < w->pool; i++) {
				http_slot *s = &w->slots[i];
				if (!http_slot_idle(s) || (pass == 0 && !http_slot_kept(s))) {
					continue;
				}
				wh_item *it = next_item(w, now);
				if (it == NULL) {
					more = false;
					break;
				}
				slot_start(w, s, it);
			}
		}
		// Deadlines, and the slots to wait on.
		int timeout   = 1000;
		int n         = 0;
		pfd[n].fd     = w->efd;
		pfd[n].events = POLLIN;
		map[n++]      = -1;
		http_client_poll_prepare(&w->http, w->slots, w->pool, now, pfd, map, &n, &timeout);
		for (wh_item *it = w->retry; it != NULL; it = it->next) {
			int d   = it->due_ms > now ? (int)(it->due_ms - now) : 0;
			timeout = d < timeout ? d : timeout;
		}
		int r = poll(pfd, (nfds_t)n, timeout);
		if (r < 0 && errno != EINTR) {
			log_error("webhook", "event=poll_failed errno=%d", errno);
			break;
		}
		http_client_poll_dispatch(&w->http, w->slots, pfd, map, n, r);
	}
	free(pfd);
	free(map);
	return NULL;
}

// ---- start / stop ----------------------------------------------------------

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

// Sets up the client TLS configuration of an https target.
static nmq_err tls_setup(webhook *w, const nmq_conf *conf, char *err, size_t errlen)
{
	http_tls_opts o = {
		.key          = "webhook.ssl",
		.verify_peer  = conf->webhook_ssl_verify_peer,
		.cafile       = conf->webhook_ssl_cacertfile != NULL ? conf->webhook_ssl_cacertfile
		                                                     : WH_CA_BUNDLE,
		.certfile     = conf->webhook_ssl_certfile,
		.keyfile      = conf->webhook_ssl_keyfile,
		.key_password = conf->webhook_ssl_key_password,
		.pers         = "nmq-webhook",
	};
	return http_client_tls_init(&w->http, &o, err, errlen);
}

static void webhook_free(webhook *w)
{
	http_client_fini(&w->http);
	for (int t = 0; t < BEV_COUNT; t++) {
		for (int i = 0; i < w->n_filters[t]; i++) {
			free(w->filters[t][i]);
		}
	}
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
	w->encoding        = conf->webhook_encoding;
	w->pool            = conf->webhook_pool_size > 0 ? conf->webhook_pool_size : 1;
	w->timeout_ms      = conf->webhook_timeout_ms > 0 ? conf->webhook_timeout_ms : 5000;
	w->queue_max       = conf->webhook_queue_size > 0 ? conf->webhook_queue_size : 10000;
	w->http.timeout_ms = w->timeout_ms; // connect included
	// One connection per slot, kept between requests; the name is looked
	// up again for a new connection after a failure or every 30 s.
	w->http.keep_alive   = true;
	w->http.reresolve_ms = 30000;
	w->http.log_mod      = "webhook";
	w->http.done         = slot_done;
	w->http.arg          = w;
	nmq_err e = http_url_parse(conf->webhook_url, "webhook.url", &w->http.url, err, errlen);
	if (e == NMQ_OK) {
		e                   = http_url_resolve(&w->http.url, "webhook.url", err, errlen);
		w->http.resolved_ms = http_client_now_ms();
	}
	if (e == NMQ_OK && w->http.url.https) {
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
		http_slot_init(&w->slots[i]);
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
		if (!http_slot_idle(&w->slots[i])) {
			item_free(http_slot_close(&w->slots[i]));
			unsent++;
		} else {
			http_slot_close(&w->slots[i]); // a kept connection
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
