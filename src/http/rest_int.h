// Internals shared by the REST handler files (rest_*.c).
#ifndef NMQ_REST_INT_H
#define NMQ_REST_INT_H

#include <cjson/cJSON.h>

#include "src/http/rest_api.h"

struct rest_api {
	rest_env     env;
	http_server *hs;
	// CPU and memory figures, sampled when metrics are read.
	double   cpu_pct;
	double   cpu_pct_max;
	long     rss_max;
	long     topics_max;
	long     subs_max;
	double   last_cpu_s;
	double   last_wall_s;
	uint32_t property_size; // GET/POST /reload (shown, not enforced)
};

// Registration of each file's routes.
nmq_err rest_routes_clients(http_server *hs, rest_api *api);
nmq_err rest_routes_mqtt(http_server *hs, rest_api *api);
nmq_err rest_routes_conf(http_server *hs, rest_api *api);
nmq_err rest_routes_bridges(http_server *hs, rest_api *api);

// {"code":0,"data":data} with status 200.
void rest_ok(http_resp *r, cJSON *data);
// A JSON body, or an error reply (400/109) if it is not JSON; NULL then.
cJSON *rest_parse_body(const http_req *req, http_resp *r);
// Reads _page and _limit (defaults 1 and 10000). Returns false after an
// error reply for a bad value.
bool rest_paging(const http_req *req, http_resp *r, long *page, long *limit);
// The configuration in NanoMQ's sections (basic, tls, http_server,
// websocket, webhook, auth, auth_http, sqlite, bridge, aws_bridge, plus
// log) from the broker's own tree as conf_to_json gives it (secrets
// already masked). Returns a new object, or NULL on allocation failure.
cJSON *rest_conf_nanomq_view(const cJSON *native);
// The reverse, for POST /configuration: data may hold NanoMQ's sections
// and the broker's own (system, mqtt, listeners, log, bridges, ...), which
// are merged as given. Returns a new tree of the broker's sections, or
// NULL with a message in err (an unknown key of a NanoMQ section, a bridge
// node without a name, AWS bridges, or out of memory).
cJSON *rest_conf_nanomq_translate(const cJSON *data, char *err, size_t errlen);

// Resident memory in bytes (from /proc/self/statm), 0 if unknown.
long rest_rss_bytes(void);

#endif // NMQ_REST_INT_H
