// HTTP authentication (docs/http-auth.md): the auth.http_auth callouts.
//
// Threads: the broker asks http_authn_connect (its external
// authenticator) on a worker about a CONNECT whose user name is not in the
// password list, and http_authn_acl (its external ACL) about a PUBLISH
// topic or SUBSCRIBE filter that no auth.acl rule matches, for a client
// that is not a superuser. Each answers from the cache when it can;
// otherwise it renders the request (placeholders filled in, values
// percent-encoded), parks the packet (proto_connect_defer,
// proto_acl_defer), queues the request and wakes the callout thread
// ("nmq:httpauth") through an eventfd: it never touches the network and
// never waits. The callout thread runs up to pool_size HTTP/1.1 requests
// of each kind at once on non-blocking sockets (TLS for https:// targets)
// with poll(); each has connect_timeout to connect and timeout for the
// whole exchange. A 2xx answer allows, anything else (another status, no
// connection, a timeout, a malformed answer) refuses, counted per kind.
// An accepted auth_req is followed by super_req when configured (2xx: a
// superuser; anything else: an ordinary client). The answer goes back
// through proto_connect_resume / proto_acl_resume. http_authn_start and
// http_authn_shutdown run on the main thread.
#ifndef NMQ_HTTP_AUTHN_H
#define NMQ_HTTP_AUTHN_H

#include <stdint.h>

#include "nng/core/nmq_err.h"
#include "src/broker/broker.h"
#include "src/conf/conf.h"

typedef struct http_authn http_authn;

// The kinds of callout.
enum { HA_AUTH = 0, HA_SUPER = 1, HA_ACL = 2, HA_NKINDS = 3 };
// The counters of each kind.
enum {
	HA_ALLOWED    = 0, // 2xx answers
	HA_DENIED     = 1, // other statuses
	HA_TIMEOUTS   = 2, // no answer within connect_timeout / timeout
	HA_ERRORS     = 3, // no answer otherwise: refused, bad answer, queue full
	HA_CACHE_HITS = 4, // answered from the cache, without a request
	HA_NSTATS     = 5,
};

typedef struct http_authn_stats {
	bool     on[HA_NKINDS]; // the kind is configured
	uint64_t n[HA_NKINDS][HA_NSTATS];
} http_authn_stats;

// Starts the callout thread and registers the authenticator (auth_req,
// with super_req) and the ACL (acl_req) with b when auth.http_auth is
// present, enabled and has an auth_req or an acl_req; otherwise sets *out
// to NULL and returns NMQ_OK. NMQ_EINVAL when a url's host cannot be
// resolved (the host is resolved once, here), NMQ_ETLS when an https
// target's TLS files cannot be loaded, NMQ_ENOMEM when out of memory; the
// reason is written to err.
nmq_err http_authn_start(
    const nmq_conf *conf, nmq_broker *b, http_authn **out, char *err, size_t errlen);
// Stops answering: every parked CONNECT, queued or in flight, is refused
// (0x88), every parked PUBLISH or SUBSCRIBE denied (0x87). Call while the workers still run and
// before proto_free; after it the authenticator refuses new CONNECTs at once. NULL is fine.
void http_authn_shutdown(http_authn *h);
// Frees everything (after http_authn_shutdown and after the workers
// stopped). NULL is fine.
void http_authn_free(http_authn *h);
// A reload (main thread): takes auth.cache's ttl and max_size for acl_req
// answers and forgets those cached.
void http_authn_reload(http_authn *h, const nmq_conf *conf);
// A snapshot of the counters (any thread).
void http_authn_get_stats(http_authn *h, http_authn_stats *st);

#endif // NMQ_HTTP_AUTHN_H
