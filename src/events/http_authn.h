// HTTP authentication (docs/http-auth.md): the auth.http_auth callouts.
//
// Threads: the broker asks http_authn_connect (its external
// authenticator, registered by http_authn_start) on a worker about a
// CONNECT whose user name is not in the password list. It answers from
// the cache when it can; otherwise it renders the request (placeholders
// filled in, values percent-encoded), parks the CONNECT
// (proto_connect_defer), queues the request and wakes the callout thread
// ("nmq:httpauth") through an eventfd: it never touches the network and
// never waits. The callout thread runs up to pool_size HTTP/1.1 requests
// at once on non-blocking sockets with poll(); each has connect_timeout
// to connect and timeout for the whole exchange. A 2xx answer accepts,
// anything else (another status, no connection, a timeout, a malformed
// answer) refuses with 0x86, counted; the answer goes back through
// proto_connect_resume. http_authn_start and http_authn_stop run on the
// main thread.
#ifndef NMQ_HTTP_AUTHN_H
#define NMQ_HTTP_AUTHN_H

#include <stdint.h>

#include "nng/core/nmq_err.h"
#include "src/broker/broker.h"
#include "src/conf/conf.h"

typedef struct http_authn http_authn;

typedef struct http_authn_stats {
	uint64_t allowed; // 2xx answers
	uint64_t denied; // other statuses
	uint64_t failed; // no answer: connect error, timeout, bad answer, queue full
	uint64_t cache_hits; // answered from the cache
} http_authn_stats;

// Starts the callout thread and registers the authenticator with b when
// auth.http_auth is present, enabled and has an auth_req; otherwise sets
// *out to NULL and returns NMQ_OK. NMQ_EINVAL when a url's host cannot be
// resolved (the host is resolved once, here), NMQ_ENOMEM when out of
// memory; the reason is written to err.
nmq_err http_authn_start(
    const nmq_conf *conf, nmq_broker *b, http_authn **out, char *err, size_t errlen);
// Stops answering: every parked CONNECT, queued or in flight, is refused
// (0x88). Call while the workers still run and before proto_free; after
// it the authenticator refuses new CONNECTs at once. NULL is fine.
void http_authn_shutdown(http_authn *h);
// Frees everything (after http_authn_shutdown and after the workers
// stopped). NULL is fine.
void http_authn_free(http_authn *h);
// A snapshot of the counters (any thread).
void http_authn_get_stats(http_authn *h, http_authn_stats *st);

#endif // NMQ_HTTP_AUTHN_H
