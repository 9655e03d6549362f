// The TLS part of tls+tcp:// and wss:// listeners; see listener_int.h.
//
// The listening socket is our own, in a worker's epoll set like tcp://
// (listener_tcp.c). An accepted socket goes to the handshake thread
// (tls_hs.h) with a reference on the listener's current configuration
// (tls_pem.c, tls_engine.h: groups, cipher order, tickets, cache, peer
// checks); once the handshake is over it becomes a plain-socket
// connection carrying TLS (conn_alloc_tls) on a worker's loop, handed to
// listener_adopt. wss:// is the same with our WebSocket layer on top
// (docs/decisions/0002-websocket.md, 0019-tls-on-own-event-loops.md).
//
// A reload swaps the configuration for the next handshakes; handshakes
// and connections under way keep the one they started with (each holds a
// reference), so tickets and cached sessions of the old configuration do
// not resume under the new one.
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "nng/core/log.h"
#include "nng/transport/listener_int.h"
#include "nng/transport/transport_err.h"

// The tls_pem_spec of a listener's options; see listener_int.h.
void listener_tls_spec(const listener_opts *o, tls_pem_spec *s)
{
	memset(s, 0, sizeof(*s));
	s->name                 = o->name != NULL ? o->name : "listener";
	s->certfile             = o->certfile;
	s->keyfile              = o->keyfile;
	s->cacertfile           = o->cacertfile;
	s->key_password         = o->key_password;
	s->verify_peer          = o->verify_peer;
	s->fail_if_no_peer_cert = o->fail_if_no_peer_cert;
	s->groups               = o->groups;
	s->ciphers              = o->ciphers;
}

// Builds the configuration and starts the handshake thread; see
// listener_int.h.
nmq_err listener_tls_setup(nmq_listener *l, const listener_opts *o, char *err, size_t errlen)
{
	tls_pem_spec s;
	nmq_err      e;
	listener_tls_spec(o, &s);
	if ((e = tls_pem_direct_build(&s, NNG_TLS_MODE_SERVER, &l->tls, err, errlen)) != NMQ_OK) {
		return e;
	}
	if ((e = tls_hs_start()) != NMQ_OK) {
		snprintf(err, errlen, "%s: cannot start the TLS handshake thread: %s", l->name,
		    nmq_strerror(e));
		return e;
	}
	l->hs_timeout_ms = o->handshake_timeout_ms;
	atomic_store(&l->verify_peer, o->verify_peer);
	atomic_store(&l->fail_if_no_peer_cert, o->verify_peer && o->fail_if_no_peer_cert);
	return NMQ_OK;
}

// A handshake is over (the handshake thread): wrap and hand up.
static void hs_done(void *arg, int fd, conn_tls *t)
{
	nmq_listener *l = arg;
	nmq_conn     *c = conn_alloc_tls(fd, t, l->env);
	if (c == NULL) {
		log_warn_rl("listener", "listener=%s event=accept_dropped reason=\"out of memory\"",
		    l->name);
		close(fd);
		conn_tls_free(t);
		return;
	}
	listener_adopt(l, c);
}

// Hands an accepted socket to the handshake thread; see listener_int.h.
void listener_tls_accepted(nmq_listener *l, int fd)
{
	pthread_mutex_lock(&l->mtx);
	tls_engine_direct *cfg = l->tls;
	if (cfg != NULL) {
		tls_engine_direct_hold(cfg);
	}
	pthread_mutex_unlock(&l->mtx);
	if (cfg == NULL) {
		close(fd); // stopping
		return;
	}
	tls_hs_submit(fd, cfg, l->hs_timeout_ms, hs_done, l);
}

// Drops the running handshakes; see listener_int.h.
void listener_tls_stop(nmq_listener *l)
{
	tls_hs_cancel(l);
}

// Releases the configuration; see listener_int.h.
void listener_tls_release(nmq_listener *l)
{
	tls_engine_direct_free(l->tls);
	l->tls = NULL;
}

// Swaps in a new TLS configuration for new connections; see
// listener_int.h.
nmq_err listener_tls_reload(nmq_listener *l, const listener_opts *opts, char *err, size_t errlen)
{
	tls_engine_direct *cfg;
	tls_pem_spec       s;
	nmq_err            e;

	listener_opts o = *opts;
	o.name          = l->name;
	listener_tls_spec(&o, &s);
	if ((e = tls_pem_direct_build(&s, NNG_TLS_MODE_SERVER, &cfg, err, errlen)) != NMQ_OK) {
		return e;
	}
	pthread_mutex_lock(&l->mtx);
	if (l->stopping) {
		pthread_mutex_unlock(&l->mtx);
		tls_engine_direct_free(cfg);
		snprintf(err, errlen, "%s: listener is stopped", l->name);
		return NMQ_ECLOSED;
	}
	tls_engine_direct *old = l->tls;
	l->tls                 = cfg;
	atomic_store(&l->verify_peer, opts->verify_peer);
	atomic_store(&l->fail_if_no_peer_cert, opts->verify_peer && opts->fail_if_no_peer_cert);
	pthread_mutex_unlock(&l->mtx);
	tls_engine_direct_free(old);
	return NMQ_OK;
}
