#include "nng/transport/listener.h"

#include <stdio.h>
#include <stdlib.h>

struct nmq_listener {
	nng_stream_listener *l;
	nng_aio             *aio;
	const conn_env      *env;
	listener_accept_fn   fn;
	void                *arg;
	char                 url[256];
};

// Accept completion: wrap the stream, pass it up, accept again.
static void
accept_cb(void *arg)
{
	nmq_listener *l  = arg;
	int           rv = nng_aio_result(l->aio);
	if (rv == NNG_ECLOSED || rv == NNG_ECANCELED) {
		return;
	}
	if (rv == 0) {
		nng_stream *s = nng_aio_get_output(l->aio, 0);
		nng_stream_set_bool(s, NNG_OPT_TCP_NODELAY, true);
		nmq_conn *c = conn_alloc(s, l->env);
		if (c == NULL) {
			nng_stream_free(s);
		} else {
			l->fn(l->arg, c);
		}
	}
	// On a transient error (e.g. EMFILE) keep accepting.
	nng_stream_listener_accept(l->l, l->aio);
}

// Starts a listener; see listener.h.
int
listener_start(nmq_listener **lp, const listener_opts *opts, const conn_env *env,
    listener_accept_fn fn, void *arg, char *err, size_t errlen)
{
	const char *url = opts->url;
	nmq_listener *l = calloc(1, sizeof(*l));
	int           rv;
	if (l == NULL) {
		snprintf(err, errlen, "out of memory");
		return NNG_ENOMEM;
	}
	snprintf(l->url, sizeof(l->url), "%s", url);
	l->env = env;
	l->fn  = fn;
	l->arg = arg;
	if ((rv = nng_stream_listener_alloc(&l->l, url)) != 0) {
		snprintf(err, errlen, "%s: %s", url, nng_strerror(rv));
		free(l);
		return rv;
	}
	nng_stream_listener_set_bool(l->l, NNG_OPT_TCP_NODELAY, true);
	if ((rv = nng_stream_listener_listen(l->l)) != 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", url, nng_strerror(rv));
		nng_stream_listener_free(l->l);
		free(l);
		return rv;
	}
	if ((rv = nng_aio_alloc(&l->aio, accept_cb, l)) != 0) {
		snprintf(err, errlen, "%s: %s", url, nng_strerror(rv));
		nng_stream_listener_free(l->l);
		free(l);
		return rv;
	}
	nng_stream_listener_accept(l->l, l->aio);
	*lp = l;
	return 0;
}

int
listener_port(nmq_listener *l)
{
	int port = 0;
	nng_stream_listener_get_int(l->l, NNG_OPT_TCP_BOUND_PORT, &port);
	return port;
}

void
listener_stop(nmq_listener *l)
{
	if (l == NULL) {
		return;
	}
	nng_stream_listener_close(l->l);
	nng_aio_stop(l->aio);
	nng_aio_free(l->aio);
	nng_stream_listener_free(l->l);
	free(l);
}
