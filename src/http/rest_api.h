// The REST API v4 (docs/rest-api.md): the handlers behind /api/v4 and the
// Prometheus metrics, registered on an http_server.
//
// Threads: rest_api_alloc and rest_api_free on the main thread; every
// handler on the HTTP server's thread. Handlers read the broker through its
// introspection calls (snapshots under the broker's own locks, no lock held
// while a reply is written) and never run on an MQTT worker.
#ifndef NMQ_REST_API_H
#define NMQ_REST_API_H

#include <stdbool.h>
#include <time.h>

#include "nng/protocol/proto.h"
#include "nng/transport/listener.h"
#include "src/bridge/bridge.h"
#include "src/broker/broker.h"
#include "src/conf/conf.h"
#include "src/http/http_server.h"
#include "src/store/store.h"

typedef struct rest_api rest_api;

// What the API needs from the daemon.
// A labelled counter that a layer above adds to /metrics and /prometheus
// (HTTP authentication, webhooks): nanomq_<name>{<labels>} in the
// Prometheus text (help on the first of a family, else NULL; labels NULL:
// none), <group>.<key> in /metrics; type "gauge", or NULL for a counter.
typedef struct rest_counter {
	const char *name;
	const char *help;
	const char *labels;
	const char *group;
	const char *key;
	const char *type;
	uint64_t    value;
} rest_counter;

typedef struct rest_env {
	nmq_broker  *broker;
	nmq_proto   *proto;
	nmq_bridges *bridges; // GET /bridges; NULL: none
	nmq_store   *store; // the durable store's figures; NULL: none
	// The running configuration's file (NULL: none; the configuration
	// endpoints that write then answer 118) and how it was loaded, so that
	// GET /configuration can show what the file, the environment and the
	// command line give now.
	const char     *conf_path;
	const conf_cli *cli;
	const char     *argv0;
	time_t          started; // time(NULL) at startup
	uint32_t        property_size; // mqtt.property_size at startup
	// The MQTT listeners, for per-listener connection counts (they
	// outlive the API).
	nmq_listener *const *listeners;
	int                  n_listeners;
	// POST /ctrl/stop and /ctrl/restart, called on the HTTP thread after
	// the reply was sent: they must only signal the main thread.
	void (*stop)(void *arg);
	void (*restart)(void *arg);
	void *ctl_arg;
	// More counters (NULL: none), read on the HTTP thread: fills v with at
	// most cap of them and returns how many. Must not block.
	size_t (*counters)(void *arg, rest_counter *v, size_t cap);
	void *counters_arg;
} rest_env;

// Registers every /api/v4 route on hs. env is copied (its pointers must
// outlive the API). Returns NULL on failure.
rest_api *rest_api_alloc(http_server *hs, const rest_env *env);
void      rest_api_free(rest_api *api);

#endif // NMQ_REST_API_H
