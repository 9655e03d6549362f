// Stream listeners for tcp://, tls+tcp://, ws:// and wss://; see listener.h.
// This file is what every kind shares: the URL, the struct's life, the
// hand-off of accepted connections and the per-listener checks at
// CONNECT. The listening socket of every kind is listener_tcp.c, the TLS
// part (configuration, handshakes) listener_tls.c, and the certificate
// files tls_pem.c.
//
// Accepted connections point at their listener (conn_set_tag). A stopped
// listener is therefore never freed: its sockets and TLS configurations are
// released and the small struct is parked on a list that stays reachable.
#include "nng/transport/listener.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nng/core/log.h"
#include "nng/transport/listener_int.h"

static pthread_mutex_t retired_lock = PTHREAD_MUTEX_INITIALIZER;
static nmq_listener   *retired;

// Returns the transport of a URL from its scheme, or -1 if unsupported.
static int url_kind(const char *url)
{
	if (strncmp(url, "tcp://", 6) == 0) {
		return KIND_TCP;
	}
	if (strncmp(url, "tls+tcp://", 10) == 0) {
		return KIND_TLS;
	}
	if (strncmp(url, "ws://", 5) == 0) {
		return KIND_WS;
	}
	if (strncmp(url, "wss://", 6) == 0) {
		return KIND_WSS;
	}
	return -1;
}

// Splits a listener URL; see listener_int.h.
nmq_err listener_split_url(
    const char *url, char *host, size_t hlen, char *port, size_t plen, char *path, size_t pathlen)
{
	const char *h = strchr(url, ':'); // the scheme has none
	if (h == NULL || h[1] != '/' || h[2] != '/') {
		return NMQ_EINVAL;
	}
	h += 3;
	const char *slash = strchr(h, '/');
	const char *end   = slash != NULL ? slash : h + strlen(h);
	const char *colon;
	size_t      n;
	if (*h == '[') {
		const char *rb = memchr(h, ']', (size_t)(end - h));
		if (rb == NULL || rb[1] != ':') {
			return NMQ_EINVAL;
		}
		n     = (size_t)(rb - h - 1);
		h     = h + 1;
		colon = rb + 1;
	} else {
		colon = NULL;
		for (const char *q = h; q < end; q++) {
			if (*q == ':') {
				colon = q;
			}
		}
		if (colon == NULL) {
			return NMQ_EINVAL;
		}
		n = (size_t)(colon - h);
	}
	size_t pn = (size_t)(end - colon - 1);
	if (n >= hlen || pn >= plen || pn == 0) {
		return NMQ_EINVAL;
	}
	memcpy(host, h, n);
	host[n] = '\0';
	memcpy(port, colon + 1, pn);
	port[pn] = '\0';
	for (size_t i = 0; i < pn; i++) {
		if (port[i] < '0' || port[i] > '9') {
			return NMQ_EINVAL;
		}
	}
	if (path != NULL) {
		const char *pp = slash != NULL ? slash : "/";
		if (strlen(pp) >= pathlen) {
			return NMQ_EINVAL;
		}
		snprintf(path, pathlen, "%s", pp);
	}
	return NMQ_OK;
}

// Checks TLS files without opening sockets; see listener.h.
nmq_err listener_tls_check(const listener_opts *opts, char *err, size_t errlen)
{
	tls_pem_spec s;
	int          kind = url_kind(opts->url != NULL ? opts->url : "");
	if (kind != KIND_TLS && kind != KIND_WSS) {
		return NMQ_OK;
	}
	listener_tls_spec(opts, &s);
	return tls_pem_check(&s, err, errlen);
}

// A connection of listener arg has stopped reading for good (conn_set_tag
// hook): it no longer counts against max_connections.
static void conn_gone(void *arg)
{
	nmq_listener *l = arg;
	atomic_fetch_sub(&l->n_conns, 1);
}

// Hands a new connection to the upper layer; see listener_int.h.
void listener_adopt(nmq_listener *l, nmq_conn *c)
{
	if ((l->kind == KIND_WS || l->kind == KIND_WSS) && !conn_set_websocket(c, l->ws_path)) {
		log_warn_rl("listener", "listener=%s event=accept_dropped reason=\"out of memory\"",
		    l->name);
		conn_release(c);
		return;
	}
	atomic_fetch_add(&l->n_conns, 1);
	conn_set_tag(c, l, conn_gone);
	l->fn(l->arg, c);
}

// Releases what a listener holds, but not the struct itself.
static void listener_release(nmq_listener *l)
{
	listener_tcp_release(l);
	listener_tls_release(l);
}

// Starts a listener; see listener.h.
nmq_err listener_start(nmq_listener **lp, const listener_opts *opts, const conn_env *env,
    listener_accept_fn fn, void *arg, char *err, size_t errlen)
{
	const char   *url  = opts->url != NULL ? opts->url : "";
	const char   *name = opts->name != NULL ? opts->name : url;
	int           kind = url_kind(url);
	nmq_listener *l;
	nmq_err       e;

	if (kind < 0) {
		snprintf(err, errlen, "%s: %s: unsupported scheme", name, url);
		return NMQ_EINVAL;
	}
	if ((l = calloc(1, sizeof(*l))) == NULL) {
		snprintf(err, errlen, "%s: out of memory", name);
		return NMQ_ENOMEM;
	}
	pthread_mutex_init(&l->mtx, NULL);
	snprintf(l->name, sizeof(l->name), "%s", name);
	snprintf(l->url, sizeof(l->url), "%s", url);
	l->kind = (enum listener_kind)kind;
	l->env  = env;
	l->fn   = fn;
	l->arg  = arg;
	atomic_init(&l->max_conns, opts->max_connections);
	atomic_init(&l->n_conns, 0);
	atomic_init(&l->verify_peer, false);
	atomic_init(&l->fail_if_no_peer_cert, false);

	l->lfd = -1;
	l->tfd = -1;
	char host[256];
	char port[16];
	if (kind == KIND_WS || kind == KIND_WSS) {
		if (listener_split_url(
		        url, host, sizeof(host), port, sizeof(port), l->ws_path, sizeof(l->ws_path))
		    != NMQ_OK) {
			snprintf(err, errlen, "%s: %s: expected %s://host:port/path", name, url,
			    kind == KIND_WS ? "ws" : "wss");
			e = NMQ_EINVAL;
			goto fail;
		}
	}
	e = NMQ_OK;
	if (!LISTENER_KIND_PLAIN(kind)) {
		// TLS (and for wss WebSocket over it) on our own socket.
		e = listener_tls_setup(l, opts, err, errlen);
	}
	if (e == NMQ_OK) {
		e = listener_tcp_listen(l, err, errlen);
	}
	if (e != NMQ_OK) {
		goto fail;
	}
	*lp = l;
	return NMQ_OK;
fail:
	listener_release(l);
	pthread_mutex_destroy(&l->mtx);
	free(l);
	return e;
}

// Returns the bound port; see listener.h.
int listener_port(nmq_listener *l)
{
	return l->port;
}

// Returns the name; see listener.h.
const char *listener_name(nmq_listener *l)
{
	return l->name;
}

uint32_t listener_conn_count(nmq_listener *l)
{
	return atomic_load_explicit(&l->n_conns, memory_order_relaxed);
}

// Stops a listener and parks its struct; see listener.h.
void listener_stop(nmq_listener *l)
{
	if (l == NULL) {
		return;
	}
	pthread_mutex_lock(&l->mtx);
	l->stopping = true;
	pthread_mutex_unlock(&l->mtx);
	listener_tcp_stop(l);
	if (!LISTENER_KIND_PLAIN(l->kind)) {
		listener_tls_stop(l);
	}
	pthread_mutex_lock(&l->mtx);
	listener_release(l);
	pthread_mutex_unlock(&l->mtx);

	pthread_mutex_lock(&retired_lock);
	l->retired_next = retired;
	retired         = l;
	pthread_mutex_unlock(&retired_lock);
}

// Re-reads a TLS listener's files; see listener.h.
nmq_err listener_reload_tls(nmq_listener *l, const listener_opts *opts, char *err, size_t errlen)
{
	if (l->kind != KIND_TLS && l->kind != KIND_WSS) {
		snprintf(err, errlen, "%s: not a TLS listener", l->name);
		return NMQ_EINVAL;
	}
	return listener_tls_reload(l, opts, err, errlen);
}

// Decides whether a TLS peer may CONNECT; see listener.h.
bool listener_conn_authorized(nmq_conn *c, char *cn, size_t cnlen)
{
	nmq_listener *l = conn_tag(c);
	tls_peer      p;

	if (cn != NULL && cnlen > 0) {
		cn[0] = '\0';
	}
	if (l == NULL || (l->kind != KIND_TLS && l->kind != KIND_WSS)) {
		return true;
	}
	bool verify = atomic_load(&l->verify_peer);
	bool demand = atomic_load(&l->fail_if_no_peer_cert);
	if (!conn_tls_peer(c, &p) || !p.handshake_done) {
		return !verify;
	}
	if (verify && p.cert_present && !p.verified) {
		return false;
	}
	if (demand && !p.cert_present) {
		return false;
	}
	if (p.verified && cn != NULL && strlen(p.cn) < cnlen) {
		memcpy(cn, p.cn, strlen(p.cn) + 1);
	}
	return true;
}

// Reads the TLS peer record of a connection; see listener.h.
bool listener_conn_peer(nmq_conn *c, tls_peer *p)
{
	return conn_tls_peer(c, p);
}

const tls_peer *listener_conn_peer_ref(nmq_conn *c)
{
	return conn_tls_peer_ref(c);
}

// Says whether c's listener is over its connection limit; see listener.h.
bool listener_conn_over_limit(nmq_conn *c)
{
	nmq_listener *l = conn_tag(c);
	if (l == NULL) {
		return false;
	}
	unsigned max = atomic_load(&l->max_conns);
	return max > 0 && atomic_load(&l->n_conns) > max;
}
