// HTTP authentication callouts (see http_authn.h).
#include "src/events/http_authn.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "nng/core/log.h"
#include "src/http/http_client.h"

#define HA_QUEUE_MAX   10000 // requests waiting for a slot; more are refused
#define HA_CACHE_MAX   10000 // cached answers at most
#define HA_CACHE_SLOTS 1024 // hash buckets
#define HA_RC_DENY     0x86 // bad user name or password
#define HA_RC_DOWN     0x88 // server unavailable (shutting down)

// One configured callout.
typedef struct ha_req {
	http_url *url; // the target (of the authenticator's client)
	bool      get;
	bool      json; // content-type says JSON: a JSON body
	char     *headers; // "Name: value\r\n"... as configured
	size_t    n_params;
	char    **pnames;
	char    **pvals; // templates with %x placeholders
} ha_req;

// One request: queued, then on a slot, then answered.
typedef struct ha_item {
	struct ha_item *next;
	proto_pending  *t;
	char           *req; // the whole HTTP request
	size_t          req_len;
	char           *key; // the cache key (the rendered parameters)
} ha_item;

typedef struct ha_cache_ent {
	struct ha_cache_ent *next;
	uint64_t             expires_ms;
	uint8_t              rc;
	char                 key[];
} ha_cache_ent;

struct http_authn {
	ha_req      auth;
	http_client http; // the target and its timeouts
	uint32_t    timeout_ms;
	uint32_t    connect_timeout_ms;
	uint32_t    cache_ttl_ms;
	uint32_t    pool;
	http_slot  *slots;
	int         efd;
	pthread_t   thr;
	bool        thr_started;
	atomic_bool stop;

	pthread_mutex_t mtx; // queue, stopping (leaf)
	ha_item        *head, *tail;
	size_t          queued;
	bool            stopping;

	pthread_mutex_t cache_mtx; // leaf
	ha_cache_ent  **cache;
	size_t          cache_len;

	atomic_ullong allowed, denied, failed, cache_hits;
};

// ---- a growable string -------------------------------------------------------

typedef struct sbuf {
	char  *p;
	size_t len, cap;
	bool   oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n)
{
	if (b->oom) {
		return;
	}
	if (b->len + n + 1 > b->cap) {
		size_t cap = (b->len + n + 1) * 2;
		char  *p   = realloc(b->p, cap);
		if (p == NULL) {
			b->oom = true;
			return;
		}
		b->p   = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void sb_str(sbuf *b, const char *s)
{
	sb_add(b, s, strlen(s));
}

// Appends s percent-encoded (RFC 3986 unreserved characters kept).
static void sb_urlenc(sbuf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
		    || c == '-' || c == '.' || c == '_' || c == '~') {
			sb_add(b, (const char *)&c, 1);
		} else {
			char e[3] = { '%', hex[c >> 4], hex[c & 15] };
			sb_add(b, e, 3);
		}
	}
}

// Appends s as the inside of a JSON string.
static void sb_jsonenc(sbuf *b, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\') {
			char e[2] = { '\\', (char)c };
			sb_add(b, e, 2);
		} else if (c < 0x20) {
			char e[8];
			snprintf(e, sizeof(e), "\\u%04x", c);
			sb_str(b, e);
		} else {
			sb_add(b, (const char *)&c, 1);
		}
	}
}

// ---- requests ----------------------------------------------------------------

// The value of placeholder c for this client (bytes and length).
static const char *holder(
    const proto_client_info *info, char c, char *tmp, size_t tmplen, size_t *n)
{
	const char *v = "";
	*n            = 0;
	switch (c) {
	case 'u':
		if (info->username != NULL) {
			*n = info->username_len;
			return (const char *)info->username;
		}
		break;
	case 'P':
		if (info->password != NULL) {
			*n = info->password_len;
			return (const char *)info->password;
		}
		break;
	case 'c':
		v = info->client_id;
		break;
	case 'a': {
		// The peer without its port ("1.2.3.4:5", "[::1]:5").
		const char *p     = info->peer != NULL ? info->peer : "";
		const char *colon = strrchr(p, ':');
		size_t      len   = colon != NULL ? (size_t)(colon - p) : strlen(p);
		if (len >= 2 && p[0] == '[' && p[len - 1] == ']') {
			p++;
			len -= 2;
		}
		snprintf(tmp, tmplen, "%.*s", (int)len, p);
		v = tmp;
		break;
	}
	case 'r':
		snprintf(tmp, tmplen, "%u", info->proto_ver);
		v = tmp;
		break;
	case 'p':
		snprintf(tmp, tmplen, "%u", info->local_port);
		v = tmp;
		break;
	case 'C':
		v = info->tls_cn != NULL ? info->tls_cn : "";
		break;
	case 'd':
		// The certificate subject: only its common name is known here.
		v = info->tls_cn != NULL && info->tls_cn[0] != '\0' ? tmp : "";
		if (v == tmp) {
			snprintf(tmp, tmplen, "CN=%s", info->tls_cn);
		}
		break;
	default:
		break;
	}
	*n = strlen(v);
	return v;
}

// Renders the parameters of r for info: form-encoded (or a JSON object).
static void render_params(const ha_req *r, const proto_client_info *info, bool json, sbuf *b)
{
	char tmp[300];
	if (json) {
		sb_str(b, "{");
	}
	for (size_t i = 0; i < r->n_params; i++) {
		if (json) {
			sb_str(b, i > 0 ? ",\"" : "\"");
			sb_jsonenc(b, r->pnames[i], strlen(r->pnames[i]));
			sb_str(b, "\":\"");
		} else {
			if (i > 0) {
				sb_str(b, "&");
			}
			sb_urlenc(b, r->pnames[i], strlen(r->pnames[i]));
			sb_str(b, "=");
		}
		for (const char *s = r->pvals[i]; *s != '\0'; s++) {
			const char *v = s;
			size_t      n = 1;
			if (s[0] == '%' && s[1] != '\0') {
				v = holder(info, s[1], tmp, sizeof(tmp), &n);
				s++;
			}
			if (json) {
				sb_jsonenc(b, v, n);
			} else {
				sb_urlenc(b, v, n);
			}
		}
		if (json) {
			sb_str(b, "\"");
		}
	}
	if (json) {
		sb_str(b, "}");
	}
}

// Builds the whole request for info into it. Returns false when out of
// memory.
static bool build_request(const ha_req *r, const proto_client_info *info, ha_item *it)
{
	sbuf params = { 0 };
	sbuf req    = { 0 };
	render_params(r, info, r->json && !r->get, &params);
	sb_str(&params, ""); // a buffer even with no parameter
	char clen[64];
	sb_str(&req, r->get ? "GET " : "POST ");
	sb_str(&req, r->url->path);
	if (r->get && params.len > 0) {
		sb_str(&req, strchr(r->url->path, '?') != NULL ? "&" : "?");
		sb_add(&req, params.p != NULL ? params.p : "", params.len);
	}
	sb_str(&req, " HTTP/1.1\r\nHost: ");
	sb_str(&req, r->url->hostport);
	sb_str(&req, "\r\nConnection: close\r\n");
	sb_str(&req, r->headers);
	if (!r->get) {
		snprintf(clen, sizeof(clen), "Content-Length: %zu\r\n\r\n", params.len);
		sb_str(&req, clen);
		sb_add(&req, params.p != NULL ? params.p : "", params.len);
	} else {
		sb_str(&req, "\r\n");
	}
	if (params.oom || req.oom) {
		free(params.p);
		free(req.p);
		return false;
	}
	it->key     = params.p;
	it->req     = req.p;
	it->req_len = req.len;
	return true;
}

// ---- cache ---------------------------------------------------------------------

static size_t key_hash(const char *k)
{
	uint64_t h = 1469598103934665603ULL;
	for (; *k != '\0'; k++) {
		h = (h ^ (unsigned char)*k) * 1099511628211ULL;
	}
	return (size_t)(h % HA_CACHE_SLOTS);
}

// Returns true with the cached answer in *rc.
static bool cache_get(http_authn *h, const char *key, uint8_t *rc)
{
	if (h->cache_ttl_ms == 0) {
		return false;
	}
	uint64_t now   = http_client_now_ms();
	bool     found = false;
	pthread_mutex_lock(&h->cache_mtx);
	for (ha_cache_ent *e = h->cache[key_hash(key)]; e != NULL; e = e->next) {
		if (strcmp(e->key, key) == 0 && e->expires_ms > now) {
			*rc   = e->rc;
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&h->cache_mtx);
	return found;
}

// Remembers an answer for cache_ttl (expired entries of the bucket go).
static void cache_put(http_authn *h, const char *key, uint8_t rc)
{
	if (h->cache_ttl_ms == 0) {
		return;
	}
	uint64_t now = http_client_now_ms();
	size_t   kl  = strlen(key);
	pthread_mutex_lock(&h->cache_mtx);
	ha_cache_ent **pp = &h->cache[key_hash(key)];
	while (*pp != NULL) {
		ha_cache_ent *e = *pp;
		if (e->expires_ms <= now || strcmp(e->key, key) == 0) {
			*pp = e->next;
			free(e);
			h->cache_len--;
			continue;
		}
		pp = &e->next;
	}
	ha_cache_ent *e = h->cache_len < HA_CACHE_MAX ? malloc(sizeof(*e) + kl + 1) : NULL;
	if (e != NULL) {
		memcpy(e->key, key, kl + 1);
		e->rc                   = rc;
		e->expires_ms           = now + h->cache_ttl_ms;
		e->next                 = h->cache[key_hash(key)];
		h->cache[key_hash(key)] = e;
		h->cache_len++;
	}
	pthread_mutex_unlock(&h->cache_mtx);
}

// ---- the authenticator (workers) -----------------------------------------------

static void item_free(ha_item *it)
{
	free(it->req);
	free(it->key);
	free(it);
}

// The broker's external authenticator; see http_authn.h.
static uint8_t http_authn_connect(void *arg, const proto_client_info *info)
{
	http_authn *h  = arg;
	ha_item    *it = calloc(1, sizeof(*it));
	if (it == NULL || !build_request(&h->auth, info, it)) {
		free(it);
		atomic_fetch_add(&h->failed, 1);
		log_warn_rl(
		    "httpauth", "client_id=%s event=refused reason=out_of_memory", info->client_id);
		return HA_RC_DENY;
	}
	uint8_t rc;
	if (cache_get(h, it->key, &rc)) {
		atomic_fetch_add(&h->cache_hits, 1);
		item_free(it);
		return rc;
	}
	pthread_mutex_lock(&h->mtx);
	bool refuse = h->stopping || h->queued >= HA_QUEUE_MAX;
	bool down   = h->stopping;
	pthread_mutex_unlock(&h->mtx);
	if (!refuse && (it->t = proto_connect_defer(info)) == NULL) {
		refuse = true;
	}
	if (refuse) {
		atomic_fetch_add(&h->failed, 1);
		log_warn_rl("httpauth", "client_id=%s event=refused reason=%s", info->client_id,
		    down ? "shutting_down" : "queue_full");
		item_free(it);
		return down ? HA_RC_DOWN : HA_RC_DENY;
	}
	pthread_mutex_lock(&h->mtx);
	if (h->stopping) {
		// Stopped between the two looks: answer it here.
		pthread_mutex_unlock(&h->mtx);
		proto_connect_resume(it->t, HA_RC_DOWN);
		item_free(it);
		return PROTO_AUTH_PENDING;
	}
	bool was_empty = h->head == NULL;
	if (h->tail != NULL) {
		h->tail->next = it;
	} else {
		h->head = it;
	}
	h->tail = it;
	h->queued++;
	pthread_mutex_unlock(&h->mtx);
	if (was_empty) {
		uint64_t one = 1;
		ssize_t  w   = write(h->efd, &one, sizeof(one));
		(void)w;
	}
	return PROTO_AUTH_PENDING;
}

// ---- the callout thread ----------------------------------------------------------

// Answers the CONNECT of it and frees it. status: the HTTP status, 0 when
// there was none (why says what failed).
static void item_answer(http_authn *h, ha_item *it, int status, const char *why)
{
	uint8_t rc = status >= 200 && status < 300 ? 0 : HA_RC_DENY;
	if (status == 0) {
		atomic_fetch_add(&h->failed, 1);
		log_warn_rl("httpauth", "event=callout_failed reason=%s target=%s", why,
		    h->http.url.hostport);
	} else {
		atomic_fetch_add(rc == 0 ? &h->allowed : &h->denied, 1);
		if (rc != 0) {
			log_info("httpauth", "event=denied status=%d", status);
		}
		cache_put(h, it->key, rc);
	}
	proto_connect_resume(it->t, rc);
	item_free(it);
}

// The end of a callout on a slot (http_client_done).
static void slot_done(void *arg, void *item, bool answered, int status, const char *why)
{
	// The answer's own words for the response failures.
	if (strcmp(why, "response_head_too_long") == 0) {
		why = "answer_head_too_long";
	} else if (strcmp(why, "bad_response") == 0) {
		why = "bad_answer";
	}
	item_answer(arg, item, answered ? status : 0, why);
}

static ha_item *next_item(http_authn *h)
{
	pthread_mutex_lock(&h->mtx);
	ha_item *it = h->head;
	if (it != NULL) {
		h->head = it->next;
		if (h->head == NULL) {
			h->tail = NULL;
		}
		it->next = NULL;
		h->queued--;
	}
	pthread_mutex_unlock(&h->mtx);
	return it;
}

static void *http_authn_main(void *arg)
{
	http_authn *h = arg;
	(void)pthread_setname_np(pthread_self(), "nmq:httpauth");
	struct pollfd *pfd = calloc(h->pool + 1, sizeof(*pfd));
	int           *map = calloc(h->pool + 1, sizeof(*map));
	if (pfd == NULL || map == NULL) {
		log_error("httpauth", "event=thread_failed reason=out_of_memory");
		free(pfd);
		free(map);
		return NULL;
	}
	while (!atomic_load(&h->stop)) {
		for (uint32_t i = 0; i < h->pool; i++) {
			if (!http_slot_idle(&h->slots[i])) {
				continue;
			}
			ha_item *it = next_item(h);
			if (it == NULL) {
				break;
			}
			http_slot_start(&h->http, &h->slots[i], it, it->req, it->req_len);
		}
		uint64_t now     = http_client_now_ms();
		int      timeout = 1000;
		int      n       = 0;
		pfd[n].fd        = h->efd;
		pfd[n].events    = POLLIN;
		map[n++]         = -1;
		http_client_poll_prepare(&h->http, h->slots, h->pool, now, pfd, map, &n, &timeout);
		int r = poll(pfd, (nfds_t)n, timeout);
		if (r < 0 && errno != EINTR) {
			log_error("httpauth", "event=poll_failed errno=%d", errno);
			break;
		}
		http_client_poll_dispatch(&h->http, h->slots, pfd, map, n, r);
	}
	free(pfd);
	free(map);
	return NULL;
}

// ---- start / stop ------------------------------------------------------------------

static void req_fini(ha_req *r)
{
	free(r->headers);
	for (size_t i = 0; i < r->n_params; i++) {
		free(r->pnames[i]);
		free(r->pvals[i]);
	}
	free(r->pnames);
	free(r->pvals);
}

// Fills r from a checked callout object (see nmq_conf.auth_http).
static nmq_err req_init(ha_req *r, const cJSON *o, char *err, size_t errlen)
{
	const char *url = cJSON_GetObjectItem(o, "url")->valuestring;
	nmq_err     e   = http_url_parse(url, "auth.http_auth", r->url, err, errlen);
	if (e == NMQ_OK) {
		e = http_url_resolve(r->url, "auth.http_auth", err, errlen);
	}
	if (e != NMQ_OK) {
		return e;
	}
	r->get             = strcmp(cJSON_GetObjectItem(o, "method")->valuestring, "get") == 0;
	sbuf         hb    = { 0 };
	bool         ctype = false;
	const cJSON *c;
	cJSON_ArrayForEach(c, cJSON_GetObjectItem(o, "headers"))
	{
		sb_str(&hb, c->string);
		sb_str(&hb, ": ");
		sb_str(&hb, c->valuestring);
		sb_str(&hb, "\r\n");
		if (strcasecmp(c->string, "content-type") == 0) {
			ctype   = true;
			r->json = strstr(c->valuestring, "json") != NULL;
		}
	}
	if (!ctype && !r->get) {
		sb_str(&hb, "Content-Type: application/x-www-form-urlencoded\r\n");
	}
	sb_str(&hb, "");
	const cJSON *params = cJSON_GetObjectItem(o, "params");
	size_t       np     = (size_t)cJSON_GetArraySize(params);
	r->headers          = hb.p;
	r->pnames           = calloc(np + 1, sizeof(char *));
	r->pvals            = calloc(np + 1, sizeof(char *));
	if (hb.oom || r->pnames == NULL || r->pvals == NULL) {
		snprintf(err, errlen, "out of memory");
		return NMQ_ENOMEM;
	}
	cJSON_ArrayForEach(c, params)
	{
		r->pnames[r->n_params] = strdup(c->string);
		r->pvals[r->n_params]  = strdup(c->valuestring);
		r->n_params++;
		if (r->pnames[r->n_params - 1] == NULL || r->pvals[r->n_params - 1] == NULL) {
			snprintf(err, errlen, "out of memory");
			return NMQ_ENOMEM;
		}
	}
	return NMQ_OK;
}

void http_authn_free(http_authn *h)
{
	if (h == NULL) {
		return;
	}
	http_authn_shutdown(h);
	req_fini(&h->auth);
	http_client_fini(&h->http);
	if (h->cache != NULL) {
		for (size_t i = 0; i < HA_CACHE_SLOTS; i++) {
			while (h->cache[i] != NULL) {
				ha_cache_ent *e = h->cache[i];
				h->cache[i]     = e->next;
				free(e);
			}
		}
	}
	free(h->cache);
	free(h->slots);
	if (h->efd >= 0) {
		close(h->efd);
	}
	pthread_mutex_destroy(&h->mtx);
	pthread_mutex_destroy(&h->cache_mtx);
	free(h);
}

void http_authn_shutdown(http_authn *h)
{
	if (h == NULL) {
		return;
	}
	pthread_mutex_lock(&h->mtx);
	h->stopping = true;
	pthread_mutex_unlock(&h->mtx);
	if (h->thr_started) {
		atomic_store(&h->stop, true);
		uint64_t one = 1;
		ssize_t  w   = write(h->efd, &one, sizeof(one));
		(void)w;
		pthread_join(h->thr, NULL);
		h->thr_started = false;
	}
	// The thread is gone: refuse what it held or had not started.
	for (uint32_t i = 0; h->slots != NULL && i < h->pool; i++) {
		if (!http_slot_idle(&h->slots[i])) {
			ha_item *it = http_slot_close(&h->slots[i]);
			proto_connect_resume(it->t, HA_RC_DOWN);
			item_free(it);
		}
	}
	ha_item *it;
	while ((it = next_item(h)) != NULL) {
		proto_connect_resume(it->t, HA_RC_DOWN);
		item_free(it);
	}
}

nmq_err http_authn_start(
    const nmq_conf *conf, nmq_broker *b, http_authn **out, char *err, size_t errlen)
{
	*out                = NULL;
	const cJSON *ha     = conf->auth_http;
	const cJSON *auth_r = ha != NULL ? cJSON_GetObjectItem(ha, "auth_req") : NULL;
	if (ha == NULL || !cJSON_IsTrue(cJSON_GetObjectItem(ha, "enable")) || auth_r == NULL) {
		return NMQ_OK;
	}
	http_authn *h = calloc(1, sizeof(*h));
	if (h == NULL) {
		snprintf(err, errlen, "out of memory");
		return NMQ_ENOMEM;
	}
	h->efd = -1;
	pthread_mutex_init(&h->mtx, NULL);
	pthread_mutex_init(&h->cache_mtx, NULL);
	h->timeout_ms = (uint32_t)cJSON_GetObjectItem(ha, "timeout_ms")->valuedouble;
	h->connect_timeout_ms
	    = (uint32_t)cJSON_GetObjectItem(ha, "connect_timeout_ms")->valuedouble;
	h->cache_ttl_ms            = (uint32_t)cJSON_GetObjectItem(ha, "cache_ttl_ms")->valuedouble;
	h->pool                    = (uint32_t)cJSON_GetObjectItem(ha, "pool_size")->valuedouble;
	h->http.timeout_ms         = h->timeout_ms;
	h->http.connect_timeout_ms = h->connect_timeout_ms;
	h->http.log_mod            = "httpauth";
	h->http.done               = slot_done;
	h->http.arg                = h;
	h->auth.url                = &h->http.url;
	nmq_err e                  = req_init(&h->auth, auth_r, err, errlen);
	if (e != NMQ_OK) {
		http_authn_free(h);
		return e;
	}
	h->slots = calloc(h->pool, sizeof(*h->slots));
	h->cache = calloc(HA_CACHE_SLOTS, sizeof(*h->cache));
	h->efd   = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (h->slots == NULL || h->cache == NULL || h->efd < 0) {
		snprintf(err, errlen, "out of memory");
		http_authn_free(h);
		return NMQ_ENOMEM;
	}
	for (uint32_t i = 0; i < h->pool; i++) {
		http_slot_init(&h->slots[i]);
	}
	if (pthread_create(&h->thr, NULL, http_authn_main, h) != 0) {
		snprintf(err, errlen, "cannot start the HTTP authentication thread");
		http_authn_free(h);
		return NMQ_ENOMEM;
	}
	h->thr_started = true;
	broker_set_authenticator(b, http_authn_connect, h);
	log_info("httpauth", "event=started target=%s%s pool_size=%u cache_ttl_ms=%u",
	    h->http.url.hostport, h->http.url.path, h->pool, h->cache_ttl_ms);
	*out = h;
	return NMQ_OK;
}

void http_authn_get_stats(http_authn *h, http_authn_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (h == NULL) {
		return;
	}
	st->allowed    = atomic_load(&h->allowed);
	st->denied     = atomic_load(&h->denied);
	st->failed     = atomic_load(&h->failed);
	st->cache_hits = atomic_load(&h->cache_hits);
}
