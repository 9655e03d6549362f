// REST endpoints of src/events, added to the REST API's server:
//   GET /api/v4/drops[?limit=N]  the drop log (nng/core/droplog.h): counters
//                                per reason and the last N events (default
//                                100, at most the ring's size), newest first
//   GET /api/v4/webhook          the webhook's counters (sent, failed,
//                                dropped, retried, queued; zeros when off)
//
// Threads: events_rest_routes on the main thread before http_server_start;
// the handlers on the HTTP server's thread (they read lock-free counters
// and copy the ring under its own leaf lock).
#ifndef NMQ_EVENTS_REST_H
#define NMQ_EVENTS_REST_H

#include "nng/core/nmq_err.h"
#include "src/events/http_authn.h"
#include "src/events/webhook.h"
#include "src/http/http_server.h"
#include "src/http/rest_api.h"

// Registers the routes; w may be NULL (no webhook) and must outlive hs.
nmq_err events_rest_routes(http_server *hs, webhook *w);
// Registers GET /api/v4/http_auth (the callout counters); ha may be NULL
// (no HTTP authentication) and must outlive hs.
nmq_err events_rest_http_auth_route(http_server *hs, http_authn *ha);
// The HTTP authentication counters as rest_env.counters (arg: the
// http_authn, NULL: all zero).
size_t events_rest_http_auth_counters(void *arg, rest_counter *v, size_t cap);
// The webhook counters as rest_env.counters (arg: the webhook, NULL: all
// zero): nanomq_webhook_requests{result=...} and nanomq_webhook_queued.
size_t events_rest_webhook_counters(void *arg, rest_counter *v, size_t cap);

#endif // NMQ_EVENTS_REST_H
