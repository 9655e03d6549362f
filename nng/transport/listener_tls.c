// The NNG stream listener of tls+tcp:// and wss://; see listener_int.h.
//
// TLS runs on our engine (tls_engine.h) with the files read by tls_pem.c.
// wss:// is this same tls+tcp stream with our WebSocket layer on top
// (docs/decisions/0002-websocket.md).
//
// Ownership: the listener owns its nng_stream_listener, its accept aio and
// one reference on its current TLS configuration, plus one on the previous
// configuration after a reload. NNG's TLS listener reads its configuration
// pointer without a lock when it prepares the next accept, so the previous
// one is kept alive until the reload after next.
#include <stdio.h>
#include <string.h>

#include "nng/core/log.h"
#include "nng/transport/listener_int.h"
#include "nng/transport/transport_err.h"

// Posts the next accept, unless the listener is stopping. Called with
// l->mtx held.
static void accept_next(nmq_listener *l)
{
	if (!l->stopping) {
		l->sleeping = false;
		nng_stream_listener_accept(l->l, l->aio);
	}
}

// Accept completion (or the end of a backoff sleep): wrap the stream, tag
// it with the listener, pass it up, accept again. A cancelled accept (a
// TLS reload drops the connection NNG prepared with the old certificate)
// is simply posted again.
static void accept_cb(void *arg)
{
	nmq_listener *l  = arg;
	int           rv = nng_aio_result(l->aio);

	pthread_mutex_lock(&l->mtx);
	if (l->stopping || rv == NNG_ECLOSED) {
		pthread_mutex_unlock(&l->mtx);
		if (rv == 0) {
			// Accepted just as the listener stops: nobody will serve it.
			nng_stream_free(nng_aio_get_output(l->aio, 0));
		}
		return;
	}
	if (l->sleeping || rv == NNG_ECANCELED || rv == NNG_ETIMEDOUT) {
		accept_next(l);
		pthread_mutex_unlock(&l->mtx);
		return;
	}
	pthread_mutex_unlock(&l->mtx);

	if (rv == 0) {
		nng_stream *s = nng_aio_get_output(l->aio, 0);
		(void)nng_stream_set_bool(s, NNG_OPT_TCP_NODELAY, true);
		nmq_conn *c = conn_alloc(s, l->env);
		if (c == NULL) {
			log_warn_rl("listener",
			    "listener=%s event=accept_dropped reason=\"out of memory\"", l->name);
			nng_stream_free(s);
		} else {
			listener_adopt(l, c);
		}
	}

	pthread_mutex_lock(&l->mtx);
	if (rv != 0) {
		// NNG already swallows the per-connection accept errors
		// (ECONNABORTED, ECONNRESET); what reaches us is running out of
		// descriptors or memory, where accepting again at once would
		// spin on the task threads that every client shares.
		if (!l->stopping) {
			log_warn_rl("listener",
			    "listener=%s event=accept_paused reason=\"%s\" pause_ms=%d", l->name,
			    nng_strerror(rv), ACCEPT_BACKOFF_MS);
			l->sleeping = true;
			nng_sleep_aio(ACCEPT_BACKOFF_MS, l->aio);
		}
	} else {
		accept_next(l);
	}
	pthread_mutex_unlock(&l->mtx);
}

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

// Builds the server configuration of o. Returns as tls_pem_config_build.
static nmq_err tls_config_build(
    const listener_opts *o, nng_tls_config **cfgp, char *err, size_t errlen)
{
	tls_pem_spec s;
	listener_tls_spec(o, &s);
	return tls_pem_config_build(&s, NNG_TLS_MODE_SERVER, cfgp, err, errlen);
}

// Starts NNG's tls+tcp listener; see listener_int.h.
nmq_err listener_tls_listen(
    nmq_listener *l, const listener_opts *o, const char *url, char *err, size_t errlen)
{
	nmq_err e;
	int     rv;
	if ((rv = nng_stream_listener_alloc(&l->l, url)) != 0) {
		snprintf(err, errlen, "%s: %s: %s", l->name, url, nng_strerror(rv));
		return transport_err_from_nng(rv);
	}
	(void)nng_stream_listener_set_bool(l->l, NNG_OPT_TCP_NODELAY, true);
	if ((e = tls_config_build(o, &l->tls, err, errlen)) != NMQ_OK) {
		return e;
	}
	if ((rv = nng_stream_listener_set_ptr(l->l, NNG_OPT_TLS_CONFIG, l->tls)) != 0) {
		snprintf(err, errlen, "%s: %s: cannot apply the TLS configuration: %s", l->name,
		    l->url, nng_strerror(rv));
		return NMQ_ETLS;
	}
	atomic_store(&l->verify_peer, o->verify_peer);
	atomic_store(&l->fail_if_no_peer_cert, o->verify_peer && o->fail_if_no_peer_cert);
	if ((rv = nng_aio_alloc(&l->aio, accept_cb, l)) != 0) {
		snprintf(err, errlen, "%s: %s: %s", l->name, url, nng_strerror(rv));
		return transport_err_from_nng(rv);
	}
	if ((rv = nng_stream_listener_listen(l->l)) != 0) {
		snprintf(
		    err, errlen, "%s: cannot listen on %s: %s", l->name, url, nng_strerror(rv));
		return transport_err_from_nng(rv);
	}
	pthread_mutex_lock(&l->mtx);
	accept_next(l);
	pthread_mutex_unlock(&l->mtx);
	return NMQ_OK;
}

// Closes NNG's listener and waits for the accept callback; see
// listener_int.h.
void listener_tls_stop(nmq_listener *l)
{
	if (l->l != NULL) {
		nng_stream_listener_close(l->l);
	}
	if (l->aio != NULL) {
		nng_aio_stop(l->aio);
	}
}

// Frees what NNG gave the listener; see listener_int.h.
void listener_tls_release(nmq_listener *l)
{
	if (l->aio != NULL) {
		nng_aio_free(l->aio);
		l->aio = NULL;
	}
	if (l->l != NULL) {
		nng_stream_listener_free(l->l);
		l->l = NULL;
	}
	if (l->tls != NULL) {
		nng_tls_config_free(l->tls);
		l->tls = NULL;
	}
	if (l->tls_prev != NULL) {
		nng_tls_config_free(l->tls_prev);
		l->tls_prev = NULL;
	}
}

// Returns the bound port; see listener_int.h.
int listener_tls_port(nmq_listener *l)
{
	int port = 0;
	if (l->l == NULL || nng_stream_listener_get_int(l->l, NNG_OPT_TCP_BOUND_PORT, &port) != 0) {
		return 0;
	}
	return port;
}

// Swaps in a new TLS configuration for new connections; see
// listener_int.h.
nmq_err listener_tls_reload(nmq_listener *l, const listener_opts *opts, char *err, size_t errlen)
{
	nng_tls_config *cfg;
	nmq_err         e;
	int             rv;

	listener_opts o = *opts;
	o.name          = l->name;
	if ((e = tls_config_build(&o, &cfg, err, errlen)) != NMQ_OK) {
		return e;
	}
	pthread_mutex_lock(&l->mtx);
	if (l->stopping) {
		pthread_mutex_unlock(&l->mtx);
		nng_tls_config_free(cfg);
		snprintf(err, errlen, "%s: listener is stopped", l->name);
		return NMQ_ECLOSED;
	}
	// NNG 1.5.2 swaps the pointer under its own lock and keeps a
	// reference; streams already accepted hold theirs.
	if ((rv = nng_stream_listener_set_ptr(l->l, NNG_OPT_TLS_CONFIG, cfg)) != 0) {
		pthread_mutex_unlock(&l->mtx);
		nng_tls_config_free(cfg);
		snprintf(err, errlen,
		    "%s: NNG refused the new TLS configuration (%s); needs restart", l->name,
		    nng_strerror(rv));
		return NMQ_ETLS;
	}
	if (l->tls_prev != NULL) {
		nng_tls_config_free(l->tls_prev);
	}
	l->tls_prev = l->tls;
	l->tls      = cfg;
	atomic_store(&l->verify_peer, opts->verify_peer);
	atomic_store(&l->fail_if_no_peer_cert, opts->verify_peer && opts->fail_if_no_peer_cert);
	bool cancel = !l->sleeping;
	pthread_mutex_unlock(&l->mtx);
	// NNG's tls+tcp listener (under ssl and wss alike) binds the
	// configuration when the accept is posted: re-post it so the very
	// next client gets the new files.
	if (cancel) {
		nng_aio_cancel(l->aio);
	}
	return NMQ_OK;
}
