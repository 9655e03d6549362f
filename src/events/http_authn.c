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
#include <strings.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "nng/core/droplog.h"
#include "nng/core/log.h"
#include "src/http/http_client.h"

#define HA_QUEUE_MAX   10000 // requests waiting for a slot, per kind; more are refused
#define HA_CACHE_MAX   10000 // cached answers at most (all kinds)
#define HA_CACHE_SLOTS 1024 // hash buckets
#define HA_RC_DENY     0x86 // bad user name or password
#define HA_RC_DOWN     0x88 // server unavailable (shutting down)
#define HA_RC_ACL_DENY 0x87 // not authorized
#define HA_CA_BUNDLE   "/etc/ssl/certs/ca-certificates.crt" // Debian's public CAs

// One configured callout.
typedef struct ha_req {
	http_url *url; // the target (of the kind's client)
	bool      get;
	bool      json; // content-type says JSON: a JSON body
	char     *headers; // "Name: value\r\n"... as configured
	size_t    n_params;
	char    **pnames;
	char    **pvals; // templates with %x placeholders
} ha_req;

// One request: queued, then on a slot, then answered. An auth_req that
// succeeds moves on to super_req (when configured) as the same item.
typedef struct ha_item {
	struct ha_item *next;
	int             kind; // HA_AUTH, HA_SUPER or HA_ACL: the current step
	proto_pending  *t;
	char           *req; // the whole HTTP request of the current step
	size_t          req_len;
	char           *next_req; // auth_req: the super_req to ask after it
	size_t          next_len;
	char           *key; // the cache key (kind and rendered parameters)
	char            who[96]; // client id, for the log and the drop log
} ha_item;

struct ha_client;

// A cached answer, in its hash bucket and, for acl_req, in its client's
// list (oldest first).
typedef struct ha_cache_ent {
	struct ha_cache_ent *next;
	struct ha_client    *cl; // acl_req: the client; NULL otherwise
	struct ha_cache_ent *cprev, *cnext;
	uint64_t             expires_ms;
	int                  val;
	char                 key[];
} ha_cache_ent;

// A client with cached acl_req answers (auth.cache.max_size bounds them).
typedef struct ha_client {
	struct ha_client *next;
	ha_cache_ent     *head, *tail;
	size_t            n;
	char              cid[];
} ha_client;

// One kind of callout: its target, slots, queue and counters.
typedef struct ha_kind {
	bool          on;
	ha_req        req;
	http_client   http; // the target, its timeouts and TLS
	http_slot    *slots; // pool_size of them
	ha_item      *head, *tail; // the queue (h->mtx)
	size_t        queued;
	atomic_ullong n[HA_NSTATS];
} ha_kind;

struct http_authn {
	ha_kind  k[HA_NKINDS];
	uint32_t timeout_ms;
	uint32_t connect_timeout_ms;
	uint32_t cache_ttl_ms; // auth_req and super_req answers
	// acl_req answers (auth.cache, reloadable): how long, and how many per
	// client at most.
	_Atomic uint32_t acl_ttl_ms;
	_Atomic uint32_t acl_max;
	uint32_t         pool;
	int              efd;
	pthread_t        thr;
	bool             thr_started;
	atomic_bool      stop;

	pthread_mutex_t mtx; // queues, stopping (leaf)
	bool            stopping;

	pthread_mutex_t cache_mtx; // leaf
	ha_cache_ent  **cache;
	ha_client     **clients; // by client id
	size_t          cache_len;
};

static const char *const kind_names[HA_NKINDS] = { "auth_req", "super_req", "acl_req" };

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

// What the placeholders stand for.
typedef struct ha_vars {
	const char *user; // NULL: none
	size_t      user_len;
	const char *pass; // NULL: none
	size_t      pass_len;
	const char *client_id;
	const char *peer;
	uint8_t     proto_ver;
	uint16_t    local_port;
	const char *tls_cn; // "" if none
	const char *tls_subject; // "" if none
	uint8_t     access; // acl_req: 1 subscribe, 2 publish
	const char *topic; // acl_req
	size_t      topic_len;
} ha_vars;

// The value of placeholder c (bytes and length).
static const char *holder(const ha_vars *v, char c, char *tmp, size_t tmplen, size_t *n)
{
	const char *s = "";
	switch (c) {
	case 'u':
		if (v->user != NULL) {
			*n = v->user_len;
			return v->user;
		}
		break;
	case 'P':
		if (v->pass != NULL) {
			*n = v->pass_len;
			return v->pass;
		}
		break;
	case 'c':
		s = v->client_id != NULL ? v->client_id : "";
		break;
	case 'a': {
		// The peer without its port ("1.2.3.4:5", "[::1]:5").
		const char *p     = v->peer != NULL ? v->peer : "";
		const char *colon = strrchr(p, ':');
		size_t      len   = colon != NULL ? (size_t)(colon - p) : strlen(p);
		if (len >= 2 && p[0] == '[' && p[len - 1] == ']') {
			p++;
			len -= 2;
		}
		snprintf(tmp, tmplen, "%.*s", (int)len, p);
		s = tmp;
		break;
	}
	case 'r':
		snprintf(tmp, tmplen, "%u", v->proto_ver);
		s = tmp;
		break;
	case 'p':
		snprintf(tmp, tmplen, "%u", v->local_port);
		s = tmp;
		break;
	case 'C':
		s = v->tls_cn != NULL ? v->tls_cn : "";
		break;
	case 'd':
		// The certificate subject, as "CN=a, O=b" (or, should the transport
		// not have it, its common name alone).
		if (v->tls_subject != NULL && v->tls_subject[0] != '\0') {
			s = v->tls_subject;
		} else if (v->tls_cn != NULL && v->tls_cn[0] != '\0') {
			snprintf(tmp, tmplen, "CN=%s", v->tls_cn);
			s = tmp;
		}
		break;
	case 'A':
		snprintf(tmp, tmplen, "%u", v->access);
		s = v->access != 0 ? tmp : "";
		break;
	case 't':
		if (v->topic != NULL) {
			*n = v->topic_len;
			return v->topic;
		}
		break;
	case 'm': // no mountpoints: always empty
	default:
		break;
	}
	*n = strlen(s);
	return s;
}

// Renders the parameters of r: form-encoded (or a JSON object).
static void render_params(const ha_req *r, const ha_vars *v, bool json, sbuf *b)
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
			const char *val = s;
			size_t      n   = 1;
			if (s[0] == '%' && s[1] != '\0') {
				val = holder(v, s[1], tmp, sizeof(tmp), &n);
				s++;
			}
			if (json) {
				sb_jsonenc(b, val, n);
			} else {
				sb_urlenc(b, val, n);
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

// Builds the whole request of r for v into *req (and its length); appends
// the rendered parameters to key. Returns false when out of memory.
static bool build_request(const ha_req *r, const ha_vars *v, char **req, size_t *req_len, sbuf *key)
{
	sbuf params = { 0 };
	sbuf out    = { 0 };
	render_params(r, v, r->json && !r->get, &params);
	sb_str(&params, ""); // a buffer even with no parameter
	char clen[64];
	sb_str(&out, r->get ? "GET " : "POST ");
	sb_str(&out, r->url->path);
	if (r->get && params.len > 0) {
		sb_str(&out, strchr(r->url->path, '?') != NULL ? "&" : "?");
		sb_add(&out, params.p != NULL ? params.p : "", params.len);
	}
	sb_str(&out, " HTTP/1.1\r\nHost: ");
	sb_str(&out, r->url->hostport);
	sb_str(&out, "\r\nConnection: close\r\n");
	sb_str(&out, r->headers);
	if (!r->get) {
		snprintf(clen, sizeof(clen), "Content-Length: %zu\r\n\r\n", params.len);
		sb_str(&out, clen);
		sb_add(&out, params.p != NULL ? params.p : "", params.len);
	} else {
		sb_str(&out, "\r\n");
	}
	sb_add(key, params.p != NULL ? params.p : "", params.len);
	bool ok = !params.oom && !out.oom;
	free(params.p);
	if (!ok) {
		free(out.p);
		return false;
	}
	*req     = out.p;
	*req_len = out.len;
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

// Returns true with the cached answer in *val.
static bool cache_get(http_authn *h, const char *key, int *val)
{
	uint64_t now   = http_client_now_ms();
	bool     found = false;
	pthread_mutex_lock(&h->cache_mtx);
	for (ha_cache_ent *e = h->cache[key_hash(key)]; e != NULL; e = e->next) {
		if (strcmp(e->key, key) == 0 && e->expires_ms > now) {
			*val  = e->val;
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&h->cache_mtx);
	return found;
}

// Frees cl once it holds no entry. cache_mtx held.
static void client_drop_if_empty(http_authn *h, ha_client *cl)
{
	if (cl->n > 0) {
		return;
	}
	for (ha_client **cp = &h->clients[key_hash(cl->cid)]; *cp != NULL; cp = &(*cp)->next) {
		if (*cp == cl) {
			*cp = cl->next;
			break;
		}
	}
	free(cl);
}

// Removes e, which *pp points at (its bucket's chain), from the cache and
// its client's list (the client goes with its last entry). cache_mtx held.
static void cache_unlink(http_authn *h, ha_cache_ent **pp, ha_cache_ent *e)
{
	*pp           = e->next;
	ha_client *cl = e->cl;
	if (cl != NULL) {
		if (e->cprev != NULL) {
			e->cprev->cnext = e->cnext;
		} else {
			cl->head = e->cnext;
		}
		if (e->cnext != NULL) {
			e->cnext->cprev = e->cprev;
		} else {
			cl->tail = e->cprev;
		}
		cl->n--;
		client_drop_if_empty(h, cl);
	}
	free(e);
	h->cache_len--;
}

// Removes e wherever it is in its bucket. cache_mtx held.
static void cache_remove(http_authn *h, ha_cache_ent *e)
{
	for (ha_cache_ent **pp = &h->cache[key_hash(e->key)]; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == e) {
			cache_unlink(h, pp, e);
			return;
		}
	}
}

// Returns client cid's record, made when missing (NULL: out of memory).
// cache_mtx held.
static ha_client *client_get(http_authn *h, const char *cid)
{
	size_t b = key_hash(cid);
	for (ha_client *cl = h->clients[b]; cl != NULL; cl = cl->next) {
		if (strcmp(cl->cid, cid) == 0) {
			return cl;
		}
	}
	size_t     n  = strlen(cid);
	ha_client *cl = calloc(1, sizeof(*cl) + n + 1);
	if (cl != NULL) {
		memcpy(cl->cid, cid, n + 1);
		cl->next      = h->clients[b];
		h->clients[b] = cl;
	}
	return cl;
}

// Remembers an answer for ttl_ms (0: not at all); expired entries of the
// bucket go. cid (acl_req): the client, whose oldest answer makes room
// when it has max_per_client already.
static void cache_put(
    http_authn *h, const char *key, int val, uint32_t ttl_ms, const char *cid, uint32_t max)
{
	if (ttl_ms == 0 || key == NULL || (cid != NULL && max == 0)) {
		return;
	}
	uint64_t now = http_client_now_ms();
	size_t   kl  = strlen(key);
	pthread_mutex_lock(&h->cache_mtx);
	ha_cache_ent **pp = &h->cache[key_hash(key)];
	while (*pp != NULL) {
		ha_cache_ent *e = *pp;
		if (e->expires_ms <= now || strcmp(e->key, key) == 0) {
			cache_unlink(h, pp, e);
			continue;
		}
		pp = &e->next;
	}
	ha_client *cl = cid != NULL ? client_get(h, cid) : NULL;
	while (cl != NULL && cl->n >= max) {
		bool last = cl->n == 1;
		cache_remove(h, cl->head); // its oldest (cl goes with its last)
		if (last) {
			cl = client_get(h, cid);
		}
	}
	ha_cache_ent *e = NULL;
	if (h->cache_len < HA_CACHE_MAX && (cid == NULL || cl != NULL)) {
		e = calloc(1, sizeof(*e) + kl + 1);
	}
	if (e != NULL) {
		memcpy(e->key, key, kl + 1);
		e->val                  = val;
		e->expires_ms           = now + ttl_ms;
		e->next                 = h->cache[key_hash(key)];
		h->cache[key_hash(key)] = e;
		h->cache_len++;
		if (cl != NULL) {
			e->cl    = cl;
			e->cprev = cl->tail;
			if (cl->tail != NULL) {
				cl->tail->cnext = e;
			} else {
				cl->head = e;
			}
			cl->tail = e;
			cl->n++;
		}
	} else if (cl != NULL) {
		client_drop_if_empty(h, cl); // made for nothing
	}
	pthread_mutex_unlock(&h->cache_mtx);
}

// Empties the cache of acl_req answers (a reload). cache_mtx held.
static void cache_flush_acl(http_authn *h)
{
	for (size_t i = 0; i < HA_CACHE_SLOTS; i++) {
		ha_cache_ent **pp = &h->cache[i];
		while (*pp != NULL) {
			if ((*pp)->cl != NULL) {
				cache_unlink(h, pp, *pp);
			} else {
				pp = &(*pp)->next;
			}
		}
	}
}

// ---- asking (workers) ------------------------------------------------------------

static void item_free(ha_item *it)
{
	free(it->req);
	free(it->next_req);
	free(it->key);
	free(it);
}

static void count(http_authn *h, int kind, int stat)
{
	atomic_fetch_add_explicit(&h->k[kind].n[stat], 1, memory_order_relaxed);
}

// Queues it on its kind and wakes the thread. Returns false when stopping
// or the queue is full (it is not queued). Any thread.
static bool item_queue(http_authn *h, ha_item *it)
{
	ha_kind *k = &h->k[it->kind];
	pthread_mutex_lock(&h->mtx);
	if (h->stopping || k->queued >= HA_QUEUE_MAX) {
		pthread_mutex_unlock(&h->mtx);
		return false;
	}
	bool was_empty = k->head == NULL;
	if (k->tail != NULL) {
		k->tail->next = it;
	} else {
		k->head = it;
	}
	k->tail = it;
	k->queued++;
	pthread_mutex_unlock(&h->mtx);
	if (was_empty) {
		uint64_t one = 1;
		ssize_t  w   = write(h->efd, &one, sizeof(one));
		(void)w;
	}
	return true;
}

// Answers the parked packet of it with the failure of its step (no
// answer: refused), and frees it.
static void item_refuse(ha_item *it, bool down)
{
	if (it->kind == HA_ACL) {
		proto_acl_resume(it->t, HA_RC_ACL_DENY);
	} else if (it->kind == HA_SUPER) {
		proto_connect_resume(it->t, down ? HA_RC_DOWN : 0); // authenticated already
	} else {
		proto_connect_resume(it->t, down ? HA_RC_DOWN : HA_RC_DENY);
	}
	item_free(it);
}

// The broker's external authenticator; see http_authn.h.
static uint8_t http_authn_connect(void *arg, const proto_client_info *info)
{
	http_authn *h  = arg;
	ha_item    *it = calloc(1, sizeof(*it));
	ha_vars     v  = {
		     .user        = (const char *)info->username,
		     .user_len    = info->username_len,
		     .pass        = (const char *)info->password,
		     .pass_len    = info->password != NULL ? info->password_len : 0,
		     .client_id   = info->client_id,
		     .peer        = info->peer,
		     .proto_ver   = info->proto_ver,
		     .local_port  = info->local_port,
		     .tls_cn      = info->tls_cn,
		     .tls_subject = info->tls_subject,
	};
	sbuf key = { 0 };
	sb_str(&key, "a|");
	bool ok = it != NULL && build_request(&h->k[HA_AUTH].req, &v, &it->req, &it->req_len, &key);
	if (ok && h->k[HA_SUPER].on) {
		sb_str(&key, "|s|");
		ok = build_request(&h->k[HA_SUPER].req, &v, &it->next_req, &it->next_len, &key);
	}
	if (!ok || key.oom) {
		free(key.p);
		if (it != NULL) {
			item_free(it);
		}
		count(h, HA_AUTH, HA_ERRORS);
		log_warn_rl(
		    "httpauth", "client_id=%s event=refused reason=out_of_memory", info->client_id);
		return HA_RC_DENY;
	}
	it->key  = key.p;
	it->kind = HA_AUTH;
	snprintf(it->who, sizeof(it->who), "%s", info->client_id);
	int val;
	if (h->cache_ttl_ms > 0 && cache_get(h, it->key, &val)) {
		count(h, HA_AUTH, HA_CACHE_HITS);
		item_free(it);
		if ((val & PROTO_AUTH_SUPERUSER) && info->superuser != NULL) {
			*info->superuser = true;
		}
		return (uint8_t)(val & 0xFF);
	}
	if ((it->t = proto_connect_defer(info)) == NULL) {
		count(h, HA_AUTH, HA_ERRORS);
		item_free(it);
		return HA_RC_DENY;
	}
	if (!item_queue(h, it)) {
		pthread_mutex_lock(&h->mtx);
		bool down = h->stopping;
		pthread_mutex_unlock(&h->mtx);
		count(h, HA_AUTH, HA_ERRORS);
		log_warn_rl("httpauth", "client_id=%s event=refused reason=%s", info->client_id,
		    down ? "shutting_down" : "queue_full");
		item_refuse(it, down);
	}
	return PROTO_AUTH_PENDING;
}

// The broker's external ACL; see http_authn.h.
static int http_authn_acl(
    void *arg, const proto_who *who, uint8_t access, const char *topic, size_t len, void *defer_ctx)
{
	http_authn *h = arg;
	char        cn[128];
	char        subject[256];
	proto_who_tls_peer(who, cn, sizeof(cn), subject, sizeof(subject));
	ha_item *it = calloc(1, sizeof(*it));
	ha_vars  v  = {
		  .user        = who->username,
		  .user_len    = who->username != NULL ? strlen(who->username) : 0,
		  .client_id   = who->client_id,
		  .peer        = who->peer,
		  .proto_ver   = who->proto_ver,
		  .local_port  = who->local_port,
		  .tls_cn      = cn,
		  .tls_subject = subject,
		  .access      = access,
		  .topic       = topic,
		  .topic_len   = len,
	};
	sbuf key = { 0 };
	sb_str(&key, "l|");
	bool ok = it != NULL && build_request(&h->k[HA_ACL].req, &v, &it->req, &it->req_len, &key);
	if (!ok || key.oom) {
		free(key.p);
		if (it != NULL) {
			item_free(it);
		}
		count(h, HA_ACL, HA_ERRORS);
		log_warn_rl("httpauth", "client_id=%s event=acl_denied reason=out_of_memory",
		    who->client_id);
		return HA_RC_ACL_DENY;
	}
	it->key  = key.p;
	it->kind = HA_ACL;
	snprintf(it->who, sizeof(it->who), "%s", who->client_id);
	int val;
	if (atomic_load(&h->acl_ttl_ms) > 0 && cache_get(h, it->key, &val)) {
		count(h, HA_ACL, HA_CACHE_HITS);
		item_free(it);
		return val;
	}
	if ((it->t = proto_acl_defer(defer_ctx)) == NULL) {
		count(h, HA_ACL, HA_ERRORS);
		item_free(it);
		return HA_RC_ACL_DENY;
	}
	if (!item_queue(h, it)) {
		count(h, HA_ACL, HA_ERRORS);
		log_warn_rl("httpauth",
		    "client_id=%s event=acl_denied reason=queue_full_or_stopping", who->client_id);
		item_refuse(it, true);
	}
	return PROTO_AUTH_PENDING;
}

// ---- the callout thread ----------------------------------------------------------

// The end of a step of it. status: the HTTP status, 0 when there was none
// (why says what failed).
static void item_answer(http_authn *h, ha_item *it, int status, const char *why)
{
	int  kind  = it->kind;
	bool yes   = status >= 200 && status < 300;
	bool timed = strcmp(why, "timeout") == 0 || strcmp(why, "connect_timeout") == 0;
	if (status == 0) {
		count(h, kind, timed ? HA_TIMEOUTS : HA_ERRORS);
		log_warn_rl("httpauth",
		    "req=%s client_id=%s event=callout_failed reason=%s target=%s",
		    kind_names[kind], it->who, why, h->k[kind].http.url.hostport);
	} else {
		count(h, kind, yes ? HA_ALLOWED : HA_DENIED);
		if (!yes) {
			log_info_rl("httpauth", "req=%s client_id=%s event=denied status=%d",
			    kind_names[kind], it->who, status);
		}
	}
	if (kind == HA_AUTH && yes && it->next_req != NULL) {
		// Authenticated: now whether a superuser.
		free(it->req);
		it->req      = it->next_req;
		it->req_len  = it->next_len;
		it->next_req = NULL;
		it->kind     = HA_SUPER;
		if (!item_queue(h, it)) {
			count(h, HA_SUPER, HA_ERRORS);
			item_refuse(it, false); // accepted, not a superuser
		}
		return;
	}
	switch (kind) {
	case HA_AUTH: {
		int rc = yes ? 0 : HA_RC_DENY;
		if (status != 0) {
			cache_put(h, it->key, rc, h->cache_ttl_ms, NULL, 0);
		}
		if (rc != 0) {
			droplog_record(DENY_AUTH, it->who, NULL, 0, DROPLOG_NO_QOS, 1);
		}
		proto_connect_resume(it->t, rc);
		break;
	}
	case HA_SUPER: {
		int rc = yes ? PROTO_AUTH_SUPERUSER : 0;
		if (status != 0) {
			cache_put(h, it->key, rc, h->cache_ttl_ms, NULL, 0);
		}
		if (yes) {
			log_info("httpauth", "client_id=%s event=superuser", it->who);
		}
		proto_connect_resume(it->t, rc);
		break;
	}
	default: {
		int verdict = yes ? PROTO_ACL_ALLOW : HA_RC_ACL_DENY;
		if (status != 0) {
			cache_put(h, it->key, verdict, atomic_load(&h->acl_ttl_ms), it->who,
			    atomic_load(&h->acl_max));
		}
		proto_acl_resume(it->t, verdict);
		break;
	}
	}
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

static ha_item *next_item(http_authn *h, ha_kind *k)
{
	pthread_mutex_lock(&h->mtx);
	ha_item *it = k->head;
	if (it != NULL) {
		k->head = it->next;
		if (k->head == NULL) {
			k->tail = NULL;
		}
		it->next = NULL;
		k->queued--;
	}
	pthread_mutex_unlock(&h->mtx);
	return it;
}

static void *http_authn_main(void *arg)
{
	http_authn *h = arg;
	(void)pthread_setname_np(pthread_self(), "nmq:httpauth");
	size_t         cap = (size_t)h->pool * HA_NKINDS + 1;
	struct pollfd *pfd = calloc(cap, sizeof(*pfd));
	int           *map = calloc(cap, sizeof(*map));
	if (pfd == NULL || map == NULL) {
		log_error("httpauth", "event=thread_failed reason=out_of_memory");
		free(pfd);
		free(map);
		return NULL;
	}
	while (!atomic_load(&h->stop)) {
		for (int kk = 0; kk < HA_NKINDS; kk++) {
			ha_kind *k = &h->k[kk];
			for (uint32_t i = 0; k->on && i < h->pool; i++) {
				if (!http_slot_idle(&k->slots[i])) {
					continue;
				}
				ha_item *it = next_item(h, k);
				if (it == NULL) {
					break;
				}
				http_slot_start(&k->http, &k->slots[i], it, it->req, it->req_len);
			}
		}
		uint64_t now     = http_client_now_ms();
		int      timeout = 1000;
		int      n       = 0;
		pfd[n].fd        = h->efd;
		pfd[n].events    = POLLIN;
		map[n++]         = -1;
		for (int kk = 0; kk < HA_NKINDS; kk++) {
			ha_kind *k = &h->k[kk];
			if (!k->on) {
				continue;
			}
			int first = n;
			http_client_poll_prepare(
			    &k->http, k->slots, h->pool, now, pfd, map, &n, &timeout);
			for (int i = first; i < n; i++) {
				map[i] += kk * (int)h->pool; // which kind, which slot
			}
		}
		int r = poll(pfd, (nfds_t)n, timeout);
		if (r < 0 && errno != EINTR) {
			log_error("httpauth", "event=poll_failed errno=%d", errno);
			break;
		}
		for (int i = 0; r > 0 && i < n; i++) {
			if (pfd[i].revents == 0) {
				continue;
			}
			if (map[i] < 0) {
				uint64_t v;
				ssize_t  rr = read(pfd[i].fd, &v, sizeof(v));
				(void)rr;
				continue;
			}
			ha_kind   *k = &h->k[map[i] / (int)h->pool];
			http_slot *s = &k->slots[map[i] % (int)h->pool];
			if (!http_slot_idle(s)) {
				http_slot_io(&k->http, s);
			}
		}
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
static nmq_err req_init(ha_req *r, const cJSON *o, const char *key, char *err, size_t errlen)
{
	const char *url = cJSON_GetObjectItem(o, "url")->valuestring;
	nmq_err     e   = http_url_parse(url, key, r->url, err, errlen);
	if (e == NMQ_OK) {
		e = http_url_resolve(r->url, key, err, errlen);
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

// The TLS client configuration of an https:// callout (auth.http_auth.ssl).
static nmq_err kind_tls(ha_kind *k, const cJSON *ssl, char *err, size_t errlen)
{
	const cJSON  *ca = ssl != NULL ? cJSON_GetObjectItem(ssl, "cacertfile") : NULL;
	const cJSON  *cf = ssl != NULL ? cJSON_GetObjectItem(ssl, "certfile") : NULL;
	const cJSON  *kf = ssl != NULL ? cJSON_GetObjectItem(ssl, "keyfile") : NULL;
	const cJSON  *kp = ssl != NULL ? cJSON_GetObjectItem(ssl, "key_password") : NULL;
	http_tls_opts o  = {
		 .key         = "auth.http_auth.ssl",
		 .verify_peer = ssl == NULL || cJSON_IsTrue(cJSON_GetObjectItem(ssl, "verify_peer")),
		 .cafile      = ca != NULL ? ca->valuestring : HA_CA_BUNDLE,
		 .certfile    = cf != NULL ? cf->valuestring : NULL,
		 .keyfile     = kf != NULL ? kf->valuestring : NULL,
		 .key_password = kp != NULL ? kp->valuestring : NULL,
		 .pers         = "nmq-httpauth",
	};
	return http_client_tls_init(&k->http, &o, err, errlen);
}

void http_authn_free(http_authn *h)
{
	if (h == NULL) {
		return;
	}
	http_authn_shutdown(h);
	for (int kk = 0; kk < HA_NKINDS; kk++) {
		req_fini(&h->k[kk].req);
		http_client_fini(&h->k[kk].http);
		free(h->k[kk].slots);
	}
	if (h->cache != NULL && h->clients != NULL) {
		for (size_t i = 0; i < HA_CACHE_SLOTS; i++) {
			while (h->cache[i] != NULL) {
				cache_unlink(h, &h->cache[i], h->cache[i]);
			}
		}
	}
	free(h->cache);
	free(h->clients);
	if (h->efd >= 0) {
		close(h->efd);
	}
	pthread_mutex_destroy(&h->mtx);
	pthread_mutex_destroy(&h->cache_mtx);
	free(h);
}

// acl_req's cache settings from auth.cache.
static void acl_cache_conf(http_authn *h, const nmq_conf *conf)
{
	bool on = conf->auth_cache_enable && conf->auth_cache_max_size > 0;
	atomic_store(&h->acl_ttl_ms, on ? conf->auth_cache_ttl_s * 1000 : 0);
	atomic_store(&h->acl_max, on ? (uint32_t)conf->auth_cache_max_size : 0);
}

void http_authn_reload(http_authn *h, const nmq_conf *conf)
{
	if (h == NULL) {
		return;
	}
	acl_cache_conf(h, conf);
	pthread_mutex_lock(&h->cache_mtx);
	cache_flush_acl(h);
	pthread_mutex_unlock(&h->cache_mtx);
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
	for (int kk = 0; kk < HA_NKINDS; kk++) {
		ha_kind *k = &h->k[kk];
		for (uint32_t i = 0; k->slots != NULL && i < h->pool; i++) {
			if (!http_slot_idle(&k->slots[i])) {
				item_refuse(http_slot_close(&k->slots[i]), true);
			}
		}
		ha_item *it;
		while ((it = next_item(h, k)) != NULL) {
			item_refuse(it, true);
		}
	}
}

nmq_err http_authn_start(
    const nmq_conf *conf, nmq_broker *b, http_authn **out, char *err, size_t errlen)
{
	*out            = NULL;
	const cJSON *ha = conf->auth_http;
	if (ha == NULL || !cJSON_IsTrue(cJSON_GetObjectItem(ha, "enable"))) {
		return NMQ_OK;
	}
	const cJSON *reqs[HA_NKINDS];
	for (int kk = 0; kk < HA_NKINDS; kk++) {
		reqs[kk] = cJSON_GetObjectItem(ha, kind_names[kk]);
	}
	if (reqs[HA_AUTH] == NULL && reqs[HA_SUPER] != NULL) {
		log_warn("httpauth", "event=super_req_ignored reason=no_auth_req");
		reqs[HA_SUPER] = NULL; // asked only after an auth_req
	}
	if (reqs[HA_AUTH] == NULL && reqs[HA_ACL] == NULL) {
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
	h->cache_ttl_ms = (uint32_t)cJSON_GetObjectItem(ha, "cache_ttl_ms")->valuedouble;
	acl_cache_conf(h, conf);
	h->pool          = (uint32_t)cJSON_GetObjectItem(ha, "pool_size")->valuedouble;
	const cJSON *ssl = cJSON_GetObjectItem(ha, "ssl");
	nmq_err      e   = NMQ_OK;
	for (int kk = 0; kk < HA_NKINDS && e == NMQ_OK; kk++) {
		ha_kind *k = &h->k[kk];
		if (reqs[kk] == NULL) {
			continue;
		}
		char key[64];
		snprintf(key, sizeof(key), "auth.http_auth.%s.url", kind_names[kk]);
		k->on                      = true;
		k->http.timeout_ms         = h->timeout_ms;
		k->http.connect_timeout_ms = h->connect_timeout_ms;
		k->http.log_mod            = "httpauth";
		k->http.done               = slot_done;
		k->http.arg                = h;
		k->req.url                 = &k->http.url;
		e                          = req_init(&k->req, reqs[kk], key, err, errlen);
		if (e == NMQ_OK && k->http.url.https) {
			e = kind_tls(k, ssl, err, errlen);
		}
		if (e == NMQ_OK) {
			k->slots = calloc(h->pool, sizeof(*k->slots));
			if (k->slots == NULL) {
				snprintf(err, errlen, "out of memory");
				e = NMQ_ENOMEM;
			}
			for (uint32_t i = 0; k->slots != NULL && i < h->pool; i++) {
				http_slot_init(&k->slots[i]);
			}
		}
	}
	if (e != NMQ_OK) {
		http_authn_free(h);
		return e;
	}
	h->cache   = calloc(HA_CACHE_SLOTS, sizeof(*h->cache));
	h->clients = calloc(HA_CACHE_SLOTS, sizeof(*h->clients));
	h->efd     = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (h->cache == NULL || h->clients == NULL || h->efd < 0) {
		snprintf(err, errlen, "out of memory");
		http_authn_free(h);
		return NMQ_ENOMEM;
	}
	if (pthread_create(&h->thr, NULL, http_authn_main, h) != 0) {
		snprintf(err, errlen, "cannot start the HTTP authentication thread");
		http_authn_free(h);
		return NMQ_ENOMEM;
	}
	h->thr_started = true;
	if (h->k[HA_AUTH].on) {
		broker_set_authenticator(b, http_authn_connect, h);
	}
	if (h->k[HA_ACL].on) {
		broker_set_acl_checker(b, http_authn_acl, h);
	}
	for (int kk = 0; kk < HA_NKINDS; kk++) {
		if (h->k[kk].on) {
			log_info("httpauth", "event=started req=%s target=%s%s%s pool_size=%u",
			    kind_names[kk], h->k[kk].http.url.https ? "https://" : "http://",
			    h->k[kk].http.url.hostport, h->k[kk].http.url.path, h->pool);
		}
	}
	*out = h;
	return NMQ_OK;
}

void http_authn_get_stats(http_authn *h, http_authn_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (h == NULL) {
		return;
	}
	for (int kk = 0; kk < HA_NKINDS; kk++) {
		st->on[kk] = h->k[kk].on;
		for (int i = 0; i < HA_NSTATS; i++) {
			st->n[kk][i] = atomic_load(&h->k[kk].n[i]);
		}
	}
}
