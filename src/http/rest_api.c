// REST API v4: the endpoint list, brokers, nodes, metrics and the
// Prometheus exposition. See rest_api.h and docs/rest-api.md.
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "nng/core/msg.h"
#include "nng/transport/tls_hs.h"
#include "src/http/rest_int.h"

// The endpoint list of GET /api/v4.
static const struct {
	const char *path, *name, *method, *descr;
} endpoints[] = {
	{ "/brokers/", "list_brokers", "GET", "A list of brokers in the cluster" },
	{ "/nodes/", "list_nodes", "GET", "A list of nodes in the cluster" },
	{ "/clients/", "list_clients", "GET", "A list of clients on the local node" },
	{ "/clients/:clientid", "lookup_client", "GET", "Lookup a client on the local node" },
	{ "/clients/username/:username", "lookup_client_via_username", "GET",
	    "Lookup a client by username on the local node" },
	{ "/subscriptions/", "list_subscriptions", "GET",
	    "A list of subscriptions on the local node" },
	{ "/subscriptions/:clientid", "lookup_client_subscriptions", "GET",
	    "A list of subscriptions of a client on the local node" },
	{ "/topic-tree/", "list_topic-tree", "GET", "A list of topic-tree in the cluster" },
	{ "/metrics/", "list_all_metrics", "GET", "A list of metrics of all nodes in the cluster" },
	{ "/drops", "list_drops", "GET",
	    "Recent drops and refusals, and counters per reason (extension)" },
	{ "/webhook", "webhook_stats", "GET", "Webhook counters (extension)" },
	{ "/prometheus/", "prometheus_metrics", "GET", "Metrics in the Prometheus text format" },
	{ "/bridges/", "list_bridges", "GET", "The health of every bridge" },
	{ "/bridges/:name", "lookup_bridge", "GET", "The health of one bridge" },
	{ "/bridges/:name", "update_bridge", "PUT", "Change a bridge's configuration at runtime" },
	{ "/bridges/:name", "delete_bridge", "DELETE", "Stop and remove a bridge at runtime" },
	{ "/bridges/switch/:name", "switch_bridge", "POST",
	    "Take a bridge's link down or up, keeping its buffer" },
	{ "/bridges/sub/:name", "bridge_subscribe", "PUT",
	    "Subscribe a bridge to remote topics at runtime" },
	{ "/bridges/unsub/:name", "bridge_unsubscribe", "PUT",
	    "Unsubscribe a bridge from remote topics at runtime" },
	{ "/reload/", "reload_conf", "GET", "Show the runtime-changeable configuration" },
	{ "/reload/", "reload_conf", "POST", "Change the runtime-changeable configuration" },
	{ "/configuration/", "get_broker_configuration", "GET", "Show the broker's configuration" },
	{ "/configuration/", "set_broker_configuration", "POST",
	    "Write the broker's configuration file" },
	{ "/config_update/", "update_config", "POST",
	    "Replace the configuration file with a validated HOCON text" },
	{ "/ctrl/:action", "ctrl_broker", "POST", "stop or restart the broker" },
	{ "/mqtt/publish", "mqtt_publish", "POST", "Publish a MQTT message" },
	{ "/mqtt/publish_batch", "mqtt_publish_batch", "POST", "Publish MQTT messages in batch" },
	{ "/mqtt/subscribe", "mqtt_subscribe", "POST", "Subscribe a client to topics" },
	{ "/mqtt/subscribe_batch", "mqtt_subscribe_batch", "POST",
	    "Subscribe clients to topics in batch" },
	{ "/mqtt/unsubscribe", "mqtt_unsubscribe", "POST", "Unsubscribe a client from a topic" },
	{ "/mqtt/unsubscribe_batch", "mqtt_unsubscribe_batch", "POST",
	    "Unsubscribe clients from topics in batch" },
};

void rest_ok(http_resp *r, cJSON *data)
{
	cJSON *j = cJSON_CreateObject();
	if (j == NULL) {
		cJSON_Delete(data);
		r->oom = true;
		return;
	}
	cJSON_AddNumberToObject(j, "code", REST_OK);
	if (data != NULL) {
		cJSON_AddItemToObject(j, "data", data);
	}
	http_resp_json(r, 200, j);
}

cJSON *rest_parse_body(const http_req *req, http_resp *r)
{
	cJSON *j = req->body_len > 0 ? cJSON_ParseWithLength(req->body, req->body_len) : NULL;
	if (j == NULL) {
		http_resp_error(r, 400, REST_BAD_JSON, "the body is not valid JSON");
	}
	return j;
}

static bool query_long(const http_req *req, http_resp *r, const char *key, long min, long *out)
{
	char v[32];
	int  f = http_query_get(req->query, key, v, sizeof(v));
	if (f == 0) {
		return true;
	}
	char *end;
	errno  = 0;
	long n = f > 0 ? strtol(v, &end, 10) : 0;
	if (f < 0 || v[0] == '\0' || *end != '\0' || errno != 0 || n < min) {
		char msg[96];
		snprintf(msg, sizeof(msg), "bad value for %s", key);
		http_resp_error(r, 400, REST_PARAM_ERROR, msg);
		return false;
	}
	*out = n;
	return true;
}

bool rest_paging(const http_req *req, http_resp *r, long *page, long *limit)
{
	*page  = 1;
	*limit = 10000;
	if (!query_long(req, r, "_page", 1, page) || !query_long(req, r, "_limit", 1, limit)) {
		return false;
	}
	if (*limit > 10000) {
		*limit = 10000;
	}
	return true;
}

long rest_rss_bytes(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	long  size, rss = 0;
	if (f == NULL) {
		return 0;
	}
	if (fscanf(f, "%ld %ld", &size, &rss) != 2) {
		rss = 0;
	}
	fclose(f);
	return rss * sysconf(_SC_PAGESIZE);
}

// Samples CPU use since the previous sample (percent of one core) and the
// highs of the gauges that have no high of their own.
static void sample(rest_api *api)
{
	struct rusage   ru;
	struct timespec ts;
	getrusage(RUSAGE_SELF, &ru);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6
	    + (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
	double wall = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
	if (api->last_wall_s > 0 && wall - api->last_wall_s > 0.05) {
		api->cpu_pct = 100.0 * (cpu - api->last_cpu_s) / (wall - api->last_wall_s);
	} else if (api->last_wall_s == 0) {
		double up    = (double)(time(NULL) - api->env.started);
		api->cpu_pct = up > 0 ? 100.0 * cpu / up : 0;
	}
	if (api->last_wall_s == 0 || wall - api->last_wall_s > 0.05) {
		api->last_cpu_s  = cpu;
		api->last_wall_s = wall;
	}
	if (api->cpu_pct > api->cpu_pct_max) {
		api->cpu_pct_max = api->cpu_pct;
	}
	long rss = rest_rss_bytes();
	if (rss > api->rss_max) {
		api->rss_max = rss;
	}
	topic_tree *t      = broker_topic_tree(api->env.broker);
	long        topics = (long)topic_tree_filter_count(t);
	long        subs   = (long)topic_tree_sub_count(t);
	if (topics > api->topics_max) {
		api->topics_max = topics;
	}
	if (subs > api->subs_max) {
		api->subs_max = subs;
	}
}

static void uptime_text(time_t started, char *buf, size_t len)
{
	long up = (long)(time(NULL) - started);
	if (up < 0) {
		up = 0;
	}
	snprintf(
	    buf, len, "%ld Hours, %ld minutes, %ld seconds", up / 3600, (up / 60) % 60, up % 60);
}

static void h_list(void *arg, const http_req *req, http_resp *r)
{
	(void)arg;
	(void)req;
	cJSON *a = cJSON_CreateArray();
	for (size_t i = 0; a != NULL && i < sizeof(endpoints) / sizeof(endpoints[0]); i++) {
		cJSON *e = cJSON_CreateObject();
		cJSON_AddStringToObject(e, "path", endpoints[i].path);
		cJSON_AddStringToObject(e, "name", endpoints[i].name);
		cJSON_AddStringToObject(e, "method", endpoints[i].method);
		cJSON_AddStringToObject(e, "descr", endpoints[i].descr);
		cJSON_AddItemToArray(a, e);
	}
	rest_ok(r, a);
}

static void h_brokers(void *arg, const http_req *req, http_resp *r)
{
	rest_api *api = arg;
	(void)req;
	char      dt[32], up[96];
	time_t    now = time(NULL);
	struct tm tm;
	localtime_r(&now, &tm);
	strftime(dt, sizeof(dt), "%Y-%m-%d %H:%M:%S", &tm);
	uptime_text(api->env.started, up, sizeof(up));
	cJSON *a = cJSON_CreateArray();
	cJSON *e = cJSON_CreateObject();
	cJSON_AddStringToObject(e, "datetime", dt);
	cJSON_AddStringToObject(e, "node_status", "Running");
	cJSON_AddStringToObject(e, "sysdescr", "NanoMQ Broker");
	cJSON_AddStringToObject(e, "uptime", up);
	cJSON_AddStringToObject(e, "version", NMQ_VERSION);
	cJSON_AddItemToArray(a, e);
	rest_ok(r, a);
}

static void h_nodes(void *arg, const http_req *req, http_resp *r)
{
	rest_api *api = arg;
	(void)req;
	char up[96];
	uptime_text(api->env.started, up, sizeof(up));
	proto_metrics *m = proto_metrics_get(api->env.proto);
	cJSON         *a = cJSON_CreateArray();
	cJSON         *e = cJSON_CreateObject();
	cJSON_AddNumberToObject(e, "connections", (double)atomic_load(&m->connections));
	cJSON_AddStringToObject(e, "node_status", "Running");
	cJSON_AddStringToObject(e, "uptime", up);
	cJSON_AddStringToObject(e, "version", NMQ_VERSION);
	cJSON_AddItemToArray(a, e);
	rest_ok(r, a);
}

// One metric: its name (after "nanomq_"), type, help, and value.
typedef struct metric {
	const char *name;
	const char *type;
	const char *help;
	double      value;
	const char *label; // `reason="..."` or NULL
	const char *group; // rest_env.counters: the /metrics object and key
	const char *key;
} metric;

// Fills v with every metric (returns the count). Reads atomics only: no
// lock of the message path.
static size_t collect(rest_api *api, metric *v, size_t cap)
{
	proto_metrics *m = proto_metrics_get(api->env.proto);
	topic_tree    *t = broker_topic_tree(api->env.broker);
	sample(api);
	size_t n = 0;
#define M(nm, ty, hp, val)                                                                         \
	do {                                                                                       \
		if (n < cap) {                                                                     \
			v[n++] = (metric) { nm, ty, hp, (double)(val), NULL, NULL, NULL };         \
		}                                                                                  \
	} while (0)
#define ML(nm, lbl, hp, val)                                                                       \
	do {                                                                                       \
		if (n < cap) {                                                                     \
			v[n++] = (metric) { nm, "counter", hp, (double)(val), lbl, NULL, NULL };   \
		}                                                                                  \
	} while (0)
	M("connections_count", "gauge", "Connected clients now.", atomic_load(&m->connections));
	M("connections_max", "gauge", "Most clients connected at once since start.",
	    atomic_load(&m->connections_max));
	M("sessions_count", "gauge", "Sessions now, online and offline persistent ones.",
	    atomic_load(&m->sessions));
	M("sessions_max", "gauge", "Most sessions at once since start.",
	    atomic_load(&m->sessions_max));
	M("topics_count", "gauge", "Distinct subscribed topic filters now.",
	    topic_tree_filter_count(t));
	M("topics_max", "gauge", "Most distinct subscribed filters seen by a metrics read.",
	    api->topics_max);
	M("subscribers_count", "gauge", "Subscriptions now.", topic_tree_sub_count(t));
	M("subscribers_max", "gauge", "Most subscriptions seen by a metrics read.", api->subs_max);
	M("messages_received", "counter",
	    "PUBLISH packets received from clients, bridges and the REST API.",
	    atomic_load(&m->msgs_received));
	M("messages_sent", "counter", "PUBLISH packets sent to clients.",
	    atomic_load(&m->msgs_sent));
	M("messages_dropped", "counter",
	    "Messages discarded for any reason (a message with no subscriber is not a drop).",
	    atomic_load(&m->msgs_dropped));
	M("memory_usage", "gauge", "Resident memory of the process in bytes.", rest_rss_bytes());
	M("memory_usage_max", "gauge", "Highest resident memory seen by a metrics read, in bytes.",
	    api->rss_max);
	M("cpu_usage", "gauge", "Process CPU use in percent of one core since the last read.",
	    api->cpu_pct);
	M("cpu_usage_max", "gauge", "Highest CPU use seen by a metrics read, in percent.",
	    api->cpu_pct_max);
	proto_queue_depth qd;
	proto_queue_depth_get(&qd);
	M("queued_messages_qos0", "gauge",
	    "QoS 0 messages waiting in the sessions' queues to be sent now.", qd.queued_qos0);
	M("queued_messages_qos12", "gauge",
	    "QoS 1/2 messages waiting in the sessions' queues (in memory) to be sent now.",
	    qd.queued_qos12);
	M("inflight_messages", "gauge",
	    "QoS 1/2 messages sent to clients and awaiting their acknowledgement now.",
	    qd.inflight);
	ML("messages_dropped_by_reason", "reason=\"queue_full\"", "Messages discarded, by reason.",
	    atomic_load(&m->drop_queue_full));
	ML("messages_dropped_by_reason", "reason=\"expired\"", NULL, atomic_load(&m->drop_expired));
	ML("messages_dropped_by_reason", "reason=\"too_large\"", NULL,
	    atomic_load(&m->drop_too_large));
	ML("messages_dropped_by_reason", "reason=\"acl\"", NULL, atomic_load(&m->drop_acl));
	ML("messages_dropped_by_reason", "reason=\"memory\"", NULL, atomic_load(&m->drop_memory));
	M("connections_refused", "counter",
	    "Connections refused by mqtt.max_connections or an owner check.",
	    atomic_load(&m->refused_connections));
	M("topics_refused", "counter", "Topic names or filters over the length or level limits.",
	    atomic_load(&m->refused_topics));
	M("subscriptions_refused", "counter", "Subscriptions over mqtt.max_subscriptions.",
	    atomic_load(&m->refused_subscriptions));
	M("acl_deliveries_denied", "counter",
	    "Deliveries skipped because the ACL denies the subscriber read access.",
	    broker_acl_deliveries_denied(api->env.broker));
	M("message_memory_bytes", "gauge",
	    "Bytes held by messages and their buffers (the mqtt.max_message_memory account).",
	    nmq_mem_in_use());
	M("message_payload_bytes", "gauge", "Bytes allocated for messages alone.",
	    nmq_msg_bytes_in_use());
	M("tls_handshakes_failed", "counter",
	    "TLS handshakes on ssl and wss listeners that failed or timed out.", tls_hs_failed());
	M("tls_handshakes_timed_out", "counter",
	    "TLS handshakes not over within the listener's handshake_timeout.", tls_hs_timed_out());
	M("tls_handshakes_refused", "counter",
	    "TLS connections closed at once: too many handshakes running, or out of memory.",
	    tls_hs_refused());
	M("acks_after_store", "counter",
	    "QoS 1/2 acknowledgements that waited for the durable store's commit.",
	    atomic_load(&m->acks_after_store));
	M("store_write_failures", "counter",
	    "Writes the durable store refused (queue full or closing); the message stayed in "
	    "memory.",
	    atomic_load(&m->store_failures));
	M("store_refused_acks", "counter",
	    "QoS 1/2 PUBLISHes not acknowledged as received because the store refused a write.",
	    atomic_load(&m->store_refused_acks));
	M("store_publisher_pauses", "counter",
	    "Publishers paused because the store's write queue passed its high-water mark.",
	    atomic_load(&m->store_pauses));
	http_server_stats hst;
	http_server_stats_get(api->hs, &hst);
	M("http_slow_requests_closed", "counter",
	    "REST API connections closed at http_server.limit_conn for a waiting client while "
	    "their request head or TLS handshake was still arriving after 1 s.",
	    hst.closed_slow);
	M("http_idle_connections_closed", "counter",
	    "Kept-alive REST API connections idle over 1 s closed at http_server.limit_conn for a "
	    "waiting client.",
	    hst.closed_idle);
#ifdef NMQ_HAVE_STORE // (a build without it has no store)
	if (api->env.store != NULL) {
		store_stats st;
		store_stats_get(api->env.store, &st);
		M("store_commits", "counter", "Transactions the durable store committed.",
		    st.commits);
		M("store_operations", "counter", "Operations the durable store applied.", st.ops);
		M("store_operations_coalesced", "counter",
		    "Operations not written because they cancelled out within one group commit.",
		    st.coalesced);
		M("store_operations_failed", "counter",
		    "Operations whose transaction failed (each logged).", st.failed);
		M("store_evicted", "counter",
		    "Queued messages evicted from the store at disk_cache_size.", st.evicted);
		M("store_expired", "counter",
		    "Sessions and messages dropped from the store at startup as expired.",
		    st.expired);
		M("store_queued_rows", "gauge", "Queued message rows in the store now.",
		    st.queued_rows);
		M("store_pending_writes", "gauge", "Operations waiting for the store's thread now.",
		    st.pending);
	}
#endif
#undef M
#undef ML
	if (api->env.counters != NULL && n < cap) {
		rest_counter more[32];
		memset(more, 0, sizeof(more));
		size_t k
		    = api->env.counters(api->env.counters_arg, more, cap - n < 32 ? cap - n : 32);
		for (size_t i = 0; i < k; i++) {
			v[n++] = (metric) { more[i].name,
				more[i].type != NULL ? more[i].type : "counter", more[i].help,
				(double)more[i].value, more[i].labels, more[i].group, more[i].key };
		}
	}
	return n;
}

// Copies a Prometheus label value into out (cap bytes), escaping '\\', '"'
// and newlines; a value too long is cut.
static void prom_label(const char *p, char *out, size_t cap)
{
	size_t k = 0;
	for (; *p != '\0' && k + 3 < cap; p++) {
		if (*p == '\\' || *p == '"' || *p == '\n') {
			out[k++] = '\\';
			out[k++] = *p == '\n' ? 'n' : *p;
		} else {
			out[k++] = *p;
		}
	}
	out[k] = '\0';
}

static cJSON *bridges_health(rest_api *api, const char *name, int *status);

// The per-bridge families of /prometheus, from the bridges' health
// (docs/metrics.md): one line per bridge in each.
static void prom_bridges(rest_api *api, http_resp *r)
{
	static const struct {
		const char *name, *type, *key, *help;
	} fam[] = {
		{ "bridge_up", "gauge", NULL,
		    "1 when the bridge's link to its remote broker is up." },
		{ "bridge_backlog", "gauge", "backlog",
		    "Forwards not yet acknowledged by the remote broker (memory and offline "
		    "cache)." },
		{ "bridge_inflight", "gauge", "inflight",
		    "QoS 1/2 forwards sent and not yet acknowledged by the remote broker." },
		{ "bridge_forwarded", "counter", "forwarded",
		    "Forwards acknowledged by the remote broker (QoS 0: sent)." },
		{ "bridge_received", "counter", "received",
		    "Messages from the remote broker published locally." },
		{ "bridge_dropped", "counter", "dropped",
		    "Forwards given up (QoS 0 while the link is down, queue full, too large, "
		    "refused)." },
		{ "bridge_dropped_link_closed", "counter", "dropped_link_closed",
		    "Forwards dropped because the remote closed the link each time they were "
		    "sent alone." },
		{ "bridge_reconnects", "counter", "reconnects",
		    "Times the link went down after being up." },
	};
	int    status;
	cJSON *all = bridges_health(api, NULL, &status);
	if (all == NULL || cJSON_GetArraySize(all) == 0) {
		cJSON_Delete(all);
		return;
	}
	for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
		http_resp_printf(r, "# HELP nanomq_%s %s\n# TYPE nanomq_%s %s\n", fam[f].name,
		    fam[f].help, fam[f].name, fam[f].type);
		const cJSON *b;
		cJSON_ArrayForEach(b, all)
		{
			const cJSON *nm = cJSON_GetObjectItem(b, "name");
			if (!cJSON_IsString(nm)) {
				continue;
			}
			char label[160];
			prom_label(nm->valuestring, label, sizeof(label));
			double v;
			if (fam[f].key == NULL) {
				const cJSON *st = cJSON_GetObjectItem(b, "state");
				v = cJSON_IsString(st) && strcmp(st->valuestring, "up") == 0;
			} else {
				const cJSON *x = cJSON_GetObjectItem(b, fam[f].key);
				v              = cJSON_IsNumber(x) ? x->valuedouble : 0;
			}
			http_resp_printf(
			    r, "nanomq_%s{bridge=\"%s\"} %.17g\n", fam[f].name, label, v);
		}
	}
	cJSON_Delete(all);
}

static void h_prometheus(void *arg, const http_req *req, http_resp *r)
{
	rest_api *api = arg;
	(void)req;
	metric v[128];
	size_t n        = collect(api, v, sizeof(v) / sizeof(v[0]));
	r->status       = 200;
	r->content_type = "text/plain; version=0.0.4; charset=utf-8";
	for (size_t i = 0; i < n; i++) {
		if (v[i].help != NULL) {
			http_resp_printf(r, "# HELP nanomq_%s %s\n# TYPE nanomq_%s %s\n", v[i].name,
			    v[i].help, v[i].name, v[i].type);
		}
		if (v[i].label != NULL) {
			http_resp_printf(
			    r, "nanomq_%s{%s} %.17g\n", v[i].name, v[i].label, v[i].value);
		} else {
			http_resp_printf(r, "nanomq_%s %.17g\n", v[i].name, v[i].value);
		}
	}
	if (api->env.n_listeners > 0) {
		http_resp_printf(r,
		    "# HELP nanomq_listener_connections Connections open on each "
		    "MQTT listener now.\n# TYPE nanomq_listener_connections gauge\n");
	}
	for (int i = 0; i < api->env.n_listeners; i++) {
		nmq_listener *l = api->env.listeners[i];
		char          name[160];
		prom_label(listener_name(l), name, sizeof(name));
		http_resp_printf(r, "nanomq_listener_connections{listener=\"%s\"} %u\n", name,
		    listener_conn_count(l));
	}
	prom_bridges(api, r);
}

static void h_metrics(void *arg, const http_req *req, http_resp *r)
{
	rest_api *api = arg;
	(void)req;
	metric v[128];
	size_t n  = collect(api, v, sizeof(v) / sizeof(v[0]));
	cJSON *j  = cJSON_CreateObject();
	cJSON *a  = cJSON_AddArrayToObject(j, "metrics");
	cJSON *o  = cJSON_CreateObject();
	cJSON *by = cJSON_CreateObject();
	for (size_t i = 0; i < n; i++) {
		if (v[i].group != NULL) {
			cJSON *g = cJSON_GetObjectItem(o, v[i].group);
			if (g == NULL) {
				g = cJSON_AddObjectToObject(o, v[i].group);
			}
			cJSON_AddNumberToObject(g, v[i].key, v[i].value);
		} else if (v[i].label != NULL) {
			// reason="x" -> "x"
			char        key[32];
			const char *q = strchr(v[i].label, '"');
			snprintf(key, sizeof(key), "%s", q != NULL ? q + 1 : v[i].label);
			char *e = strchr(key, '"');
			if (e != NULL) {
				*e = '\0';
			}
			cJSON_AddNumberToObject(by, key, v[i].value);
		} else {
			cJSON_AddNumberToObject(o, v[i].name, v[i].value);
		}
	}
	cJSON_AddItemToObject(o, "messages_dropped_by_reason", by);
	cJSON_AddItemToArray(a, o);
	char cpu[32], mem[32];
	snprintf(cpu, sizeof(cpu), "%.2f%%", api->cpu_pct);
	snprintf(mem, sizeof(mem), "%ld", rest_rss_bytes());
	cJSON_AddStringToObject(j, "cpuinfo", cpu);
	cJSON_AddStringToObject(j, "memory", mem);
	cJSON_AddNumberToObject(
	    j, "connections", (double)atomic_load(&proto_metrics_get(api->env.proto)->connections));
	http_resp_json(r, 200, j);
}

// The health of the bridge named name, or of every bridge (an array) when
// name is NULL (bridges_health_json, docs/bridge.md). Returns it (the
// caller deletes it), or NULL with *status 404 (no such bridge), 500 (the
// document kept changing or did not parse) or 0 (out of memory).
static cJSON *bridges_health(rest_api *api, const char *name, int *status)
{
	*status = 404;
	if (api->env.bridges == NULL) {
		return name != NULL ? NULL : cJSON_CreateArray();
	}
	size_t need = bridges_health_json(api->env.bridges, name, NULL, 0);
	if (need == 0) {
		return NULL;
	}
	// The health may grow between the two calls: retry with room.
	for (int tries = 0; tries < 4; tries++) {
		char *buf = malloc(need + 1);
		if (buf == NULL) {
			*status = 0;
			return NULL;
		}
		size_t got = bridges_health_json(api->env.bridges, name, buf, need + 1);
		if (got == 0) {
			free(buf);
			return NULL;
		}
		if (got <= need) {
			cJSON *j = cJSON_ParseWithLength(buf, got);
			free(buf);
			*status = 500;
			return j;
		}
		free(buf);
		need = got;
	}
	*status = 500;
	return NULL;
}

// Moves item key of from (if there) into to under name.
static void move_item(cJSON *from, const char *key, cJSON *to, const char *name)
{
	cJSON *it = cJSON_DetachItemFromObjectCaseSensitive(from, key);
	if (it != NULL && !cJSON_AddItemToObject(to, name, it)) {
		cJSON_Delete(it);
	}
}

// One bridge in NanoMQ's node shape (name, enable, parallel, connector,
// forwards, subscription, sub_properties, queue lengths, tls), from its
// running settings, with its health (docs/bridge.md) beside them. NULL
// when out of memory.
static cJSON *bridge_node(const conf_bridge *cb, cJSON *health)
{
	cJSON *cj   = conf_bridge_to_json(cb);
	cJSON *node = cJSON_CreateObject();
	cJSON *conn = node != NULL ? cJSON_CreateObject() : NULL;
	if (cj == NULL || conn == NULL || cJSON_AddStringToObject(node, "name", cb->name) == NULL) {
		cJSON_Delete(cj);
		cJSON_Delete(node);
		cJSON_Delete(conn);
		return NULL;
	}
	move_item(cj, "enable", node, "enable");
	move_item(cj, "max_parallel_processes", node, "parallel");
	cJSON_AddItemToObject(node, "connector", conn);
	static const char *const ck[] = { "server", "proto_ver", "clientid", "clean_start",
		"username", "password", "keepalive", "conn_properties" };
	for (size_t i = 0; i < sizeof(ck) / sizeof(ck[0]); i++) {
		move_item(cj, ck[i], conn, ck[i]);
	}
	cJSON *will = cJSON_GetObjectItemCaseSensitive(cj, "will");
	move_item(will, "properties", conn, "will_properties");
	move_item(cj, "will", conn, "will");
	static const char *const nk[] = { "forwards", "subscription", "sub_properties",
		"max_send_queue_len", "max_recv_queue_len" };
	for (size_t i = 0; i < sizeof(nk) / sizeof(nk[0]); i++) {
		move_item(cj, nk[i], node, nk[i]);
	}
	move_item(cj, "ssl", node, "tls");
	cJSON_Delete(cj);
	// The health: state, backlog, counters (its name is already there).
	for (cJSON *h = health != NULL ? health->child : NULL; h != NULL;) {
		cJSON *next = h->next;
		if (strcmp(h->string, "name") != 0
		    && cJSON_GetObjectItemCaseSensitive(node, h->string) == NULL) {
			cJSON *d = cJSON_Duplicate(h, true);
			if (d != NULL && !cJSON_AddItemToObject(node, h->string, d)) {
				cJSON_Delete(d);
			}
		}
		h = next;
	}
	return node;
}

// GET /bridges and /bridges/:name: {"bridge":{"nodes":[...]}} as NanoMQ
// answers, each node with its running settings and its health.
static void h_bridges(void *arg, const http_req *req, http_resp *r)
{
	rest_api     *api  = arg;
	const char   *name = req->nparams == 1 ? req->params[0] : NULL;
	conf_bridge **cv   = NULL;
	int n = api->env.bridges != NULL ? bridges_conf_copies(api->env.bridges, name, &cv) : 0;
	if (n < 0) {
		r->oom = true;
		return;
	}
	if (n == 0 && name != NULL) {
		http_resp_error(r, 404, REST_PARAM_ERROR, "no such bridge");
		return;
	}
	int    status;
	cJSON *health = n > 0 ? bridges_health(api, NULL, &status) : NULL;
	cJSON *data   = cJSON_CreateObject();
	cJSON *br     = data != NULL ? cJSON_AddObjectToObject(data, "bridge") : NULL;
	cJSON *nodes  = br != NULL ? cJSON_AddArrayToObject(br, "nodes") : NULL;
	bool   ok     = nodes != NULL;
	for (int i = 0; i < n; i++) {
		cJSON *h = NULL;
		cJSON_ArrayForEach(h, health)
		{
			const cJSON *hn = cJSON_GetObjectItemCaseSensitive(h, "name");
			if (cJSON_IsString(hn) && strcmp(hn->valuestring, cv[i]->name) == 0) {
				break;
			}
		}
		cJSON *node = ok ? bridge_node(cv[i], h) : NULL;
		ok          = node != NULL && cJSON_AddItemToArray(nodes, node);
		conf_bridge_free(cv[i]);
	}
	free(cv);
	cJSON_Delete(health);
	if (!ok) {
		cJSON_Delete(data);
		r->oom = true;
		return;
	}
	rest_ok(r, data);
}

rest_api *rest_api_alloc(http_server *hs, const rest_env *env)
{
	rest_api *api = calloc(1, sizeof(*api));
	if (api == NULL) {
		return NULL;
	}
	api->env           = *env;
	api->hs            = hs;
	api->property_size = env->property_size;
	static const struct {
		const char  *method, *path;
		http_handler fn;
	} core[] = {
		{ "GET", "/api/v4", h_list },
		{ "GET", "/api/v4/brokers", h_brokers },
		{ "GET", "/api/v4/nodes", h_nodes },
		{ "GET", "/api/v4/metrics", h_metrics },
		{ "GET", "/api/v4/prometheus", h_prometheus },
		{ "GET", "/api/v4/bridges", h_bridges },
		{ "GET", "/api/v4/bridges/:name", h_bridges },
	};
	nmq_err e = NMQ_OK;
	for (size_t i = 0; e == NMQ_OK && i < sizeof(core) / sizeof(core[0]); i++) {
		e = http_server_route(hs, core[i].method, core[i].path, core[i].fn, api);
	}
	if (e == NMQ_OK) {
		e = rest_routes_clients(hs, api);
	}
	if (e == NMQ_OK) {
		e = rest_routes_mqtt(hs, api);
	}
	if (e == NMQ_OK) {
		e = rest_routes_conf(hs, api);
	}
	if (e == NMQ_OK) {
		e = rest_routes_bridges(hs, api);
	}
	if (e != NMQ_OK) {
		free(api);
		return NULL;
	}
	return api;
}

void rest_api_free(rest_api *api)
{
	free(api);
}
