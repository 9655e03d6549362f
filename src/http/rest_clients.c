// REST API v4: clients, subscriptions and the topic tree. Each listing is
// built from snapshots (proto_sessions_snapshot, broker_session_subs) taken
// under the broker's locks, which are all released before the reply is
// built; large listings are paged (_page, _limit) with a `meta` object.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/http/rest_int.h"

// Query filters of GET /clients; an empty string means "any".
typedef struct client_filter {
	char clientid[256];
	char username[256];
	char conn_state[32];
	char clean_start[8];
	char proto_name[16];
	char proto_ver[8];
} client_filter;

static bool get_filter(const http_req *req, http_resp *r, const char *key, char *out, size_t cap)
{
	out[0] = '\0';
	if (http_query_get(req->query, key, out, cap) < 0) {
		char msg[96];
		snprintf(msg, sizeof(msg), "bad value for %s", key);
		http_resp_error(r, 400, REST_PARAM_ERROR, msg);
		return false;
	}
	return true;
}

static bool client_matches(const proto_session_info *in, const client_filter *f)
{
	if (f->clientid[0] != '\0' && strcmp(f->clientid, in->client_id) != 0) {
		return false;
	}
	if (f->username[0] != '\0'
	    && (in->username == NULL || strcmp(f->username, in->username) != 0)) {
		return false;
	}
	if (f->conn_state[0] != '\0'
	    && strcmp(f->conn_state, in->online ? "connected" : "disconnected") != 0) {
		return false;
	}
	if (f->clean_start[0] != '\0'
	    && strcmp(f->clean_start, in->clean_start ? "true" : "false") != 0) {
		return false;
	}
	if (f->proto_name[0] != '\0' && strcmp(f->proto_name, "MQTT") != 0) {
		return false;
	}
	if (f->proto_ver[0] != '\0' && atoi(f->proto_ver) != in->proto_ver) {
		return false;
	}
	return true;
}

static cJSON *client_json(const proto_session_info *in)
{
	cJSON *e = cJSON_CreateObject();
	cJSON_AddStringToObject(e, "client_id", in->client_id);
	cJSON_AddStringToObject(e, "username", in->username != NULL ? in->username : "");
	cJSON_AddNumberToObject(e, "keepalive", in->keepalive);
	cJSON_AddStringToObject(e, "conn_state", in->online ? "connected" : "disconnected");
	cJSON_AddBoolToObject(e, "clean_start", in->clean_start);
	cJSON_AddStringToObject(e, "proto_name", "MQTT");
	cJSON_AddNumberToObject(e, "proto_ver", in->proto_ver);
	cJSON_AddNumberToObject(e, "recv_msg", (double)in->recv_msgs);
	return e;
}

// {"code":0,"data":[...],"meta":{"page","limit","count"}}
static void paged_reply(http_resp *r, cJSON *data, long page, long limit, long count)
{
	cJSON *j = cJSON_CreateObject();
	cJSON_AddNumberToObject(j, "code", REST_OK);
	cJSON_AddItemToObject(j, "data", data);
	cJSON *meta = cJSON_AddObjectToObject(j, "meta");
	cJSON_AddNumberToObject(meta, "page", (double)page);
	cJSON_AddNumberToObject(meta, "limit", (double)limit);
	cJSON_AddNumberToObject(meta, "count", (double)count);
	http_resp_json(r, 200, j);
}

// Lists clients matching f, paged.
static void list_clients(rest_api *api, const http_req *req, http_resp *r, client_filter *f)
{
	long page, limit;
	if (!rest_paging(req, r, &page, &limit)) {
		return;
	}
	proto_session_info *v;
	nmq_err             err;
	size_t              n = proto_sessions_snapshot(api->env.proto, &v, &err);
	if (err != NMQ_OK) {
		http_resp_error(r, 500, REST_UNKNOWN_ERROR, "out of memory");
		return;
	}
	cJSON *a     = cJSON_CreateArray();
	long   count = 0;
	long   first = (page - 1) * limit;
	for (size_t i = 0; i < n; i++) {
		if (!client_matches(&v[i], f)) {
			continue;
		}
		if (count >= first && count < first + limit) {
			cJSON_AddItemToArray(a, client_json(&v[i]));
		}
		count++;
	}
	proto_sessions_snapshot_free(v, n);
	paged_reply(r, a, page, limit, count);
}

static void h_clients(void *arg, const http_req *req, http_resp *r)
{
	client_filter f;
	if (!get_filter(req, r, "clientid", f.clientid, sizeof(f.clientid))
	    || !get_filter(req, r, "username", f.username, sizeof(f.username))
	    || !get_filter(req, r, "conn_state", f.conn_state, sizeof(f.conn_state))
	    || !get_filter(req, r, "clean_start", f.clean_start, sizeof(f.clean_start))
	    || !get_filter(req, r, "proto_name", f.proto_name, sizeof(f.proto_name))
	    || !get_filter(req, r, "proto_ver", f.proto_ver, sizeof(f.proto_ver))) {
		return;
	}
	list_clients(arg, req, r, &f);
}

static void h_client(void *arg, const http_req *req, http_resp *r)
{
	client_filter f = { 0 };
	snprintf(f.clientid, sizeof(f.clientid), "%s", req->params[0]);
	if (strlen(req->params[0]) >= sizeof(f.clientid)) {
		rest_ok(r, cJSON_CreateArray());
		return;
	}
	list_clients(arg, req, r, &f);
}

static void h_client_by_user(void *arg, const http_req *req, http_resp *r)
{
	client_filter f = { 0 };
	snprintf(f.username, sizeof(f.username), "%s", req->params[0]);
	if (strlen(req->params[0]) >= sizeof(f.username)) {
		rest_ok(r, cJSON_CreateArray());
		return;
	}
	list_clients(arg, req, r, &f);
}

// The share group of "$share/<g>/<filter>" into g (empty if not shared),
// and a pointer to <filter>.
static const char *split_share(const char *filter, char *g, size_t gcap)
{
	g[0] = '\0';
	if (strncmp(filter, "$share/", 7) != 0) {
		return filter;
	}
	const char *s = filter + 7;
	const char *e = strchr(s, '/');
	if (e == NULL) {
		return filter;
	}
	snprintf(g, gcap, "%.*s", (int)(e - s), s);
	return e + 1;
}

static void list_subs(rest_api *api, const http_req *req, http_resp *r, const char *only_cid)
{
	char cid[256], topic[1024], qos[8], share[256];
	long page, limit;
	if (!get_filter(req, r, "clientid", cid, sizeof(cid))
	    || !get_filter(req, r, "topic", topic, sizeof(topic))
	    || !get_filter(req, r, "qos", qos, sizeof(qos))
	    || !get_filter(req, r, "share", share, sizeof(share))
	    || !rest_paging(req, r, &page, &limit)) {
		return;
	}
	if (only_cid != NULL) {
		snprintf(cid, sizeof(cid), "%s", only_cid);
	}
	proto_session_info *v;
	nmq_err             err;
	size_t              n     = proto_sessions_snapshot(api->env.proto, &v, &err);
	cJSON              *a     = cJSON_CreateArray();
	long                count = 0;
	long                first = (page - 1) * limit;
	for (size_t i = 0; err == NMQ_OK && i < n; i++) {
		if (cid[0] != '\0' && strcmp(cid, v[i].client_id) != 0) {
			continue;
		}
		broker_sub_info *subs;
		size_t           ns = broker_session_subs(api->env.broker, v[i].s, &subs, &err);
		for (size_t k = 0; k < ns; k++) {
			char        g[256];
			const char *plain = split_share(subs[k].filter, g, sizeof(g));
			if ((topic[0] != '\0' && strcmp(topic, subs[k].filter) != 0
			        && strcmp(topic, plain) != 0)
			    || (qos[0] != '\0' && atoi(qos) != subs[k].qos)
			    || (share[0] != '\0' && strcmp(share, g) != 0)) {
				continue;
			}
			if (count >= first && count < first + limit) {
				cJSON *e = cJSON_CreateObject();
				cJSON_AddStringToObject(e, "clientid", v[i].client_id);
				cJSON_AddStringToObject(e, "topic", subs[k].filter);
				cJSON_AddNumberToObject(e, "qos", subs[k].qos);
				cJSON_AddItemToArray(a, e);
			}
			count++;
		}
		broker_subs_free(subs, ns);
	}
	proto_sessions_snapshot_free(v, n);
	if (err != NMQ_OK) {
		cJSON_Delete(a);
		http_resp_error(r, 500, REST_UNKNOWN_ERROR, "out of memory");
		return;
	}
	paged_reply(r, a, page, limit, count);
}

static void h_subs(void *arg, const http_req *req, http_resp *r)
{
	list_subs(arg, req, r, NULL);
}

static void h_subs_client(void *arg, const http_req *req, http_resp *r)
{
	list_subs(arg, req, r, req->params[0]);
}

// Topic tree: one array per depth, paged by node. Nodes are numbered in
// the order of the walk; only those of the requested page are copied (the
// callback runs under a shard's read lock, which holds off subscribes on
// that shard, so the work done there is bounded by _limit).
typedef struct tree_ctx {
	cJSON *levels; // array of arrays
	size_t roots; // first-level nodes
	size_t seen; // nodes walked
	size_t first; // first node of the page
	size_t limit;
	bool   oom;
} tree_ctx;

static void tree_cb(void *arg, const char *level, size_t len, int depth, size_t n_children,
    void *const *subs, size_t n_subs)
{
	tree_ctx *t = arg;
	if (t->oom || depth < 1) {
		return;
	}
	if (depth == 1) {
		t->roots++;
	}
	size_t idx = t->seen++;
	if (idx < t->first || idx - t->first >= t->limit) {
		return;
	}
	while (cJSON_GetArraySize(t->levels) <= depth) {
		if (!cJSON_AddItemToArray(t->levels, cJSON_CreateArray())) {
			t->oom = true;
			return;
		}
	}
	cJSON *lv = cJSON_GetArrayItem(t->levels, depth);
	cJSON *e  = cJSON_CreateObject();
	char  *s  = strndup(level, len);
	if (e == NULL || s == NULL) {
		free(s);
		cJSON_Delete(e);
		t->oom = true;
		return;
	}
	cJSON_AddStringToObject(e, "topic", s);
	free(s);
	cJSON_AddNumberToObject(e, "cld_cnt", (double)n_children);
	if (n_subs > 0) {
		cJSON *ids = cJSON_AddArrayToObject(e, "clientid");
		for (size_t i = 0; i < n_subs; i++) {
			const char *cid = broker_subscriber_client_id(subs[i]);
			if (cid != NULL) { // a bridge's forward has none
				cJSON_AddItemToArray(ids, cJSON_CreateString(cid));
			}
		}
	}
	cJSON_AddItemToArray(lv, e);
}

static void h_topic_tree(void *arg, const http_req *req, http_resp *r)
{
	rest_api *api = arg;
	long      page, limit;
	if (!rest_paging(req, r, &page, &limit)) {
		return;
	}
	tree_ctx t = { .levels = cJSON_CreateArray(),
		.first         = (size_t)(page - 1) * (size_t)limit,
		.limit         = (size_t)limit };
	if (t.levels == NULL || !cJSON_AddItemToArray(t.levels, cJSON_CreateArray())) {
		cJSON_Delete(t.levels);
		r->oom = true;
		return;
	}
	topic_tree_walk(broker_topic_tree(api->env.broker), tree_cb, &t);
	if (t.oom) {
		cJSON_Delete(t.levels);
		http_resp_error(r, 500, REST_UNKNOWN_ERROR, "out of memory");
		return;
	}
	cJSON *root = cJSON_CreateObject();
	cJSON_AddStringToObject(root, "topic", "");
	cJSON_AddNumberToObject(root, "cld_cnt", (double)t.roots);
	cJSON_AddItemToArray(cJSON_GetArrayItem(t.levels, 0), root);
	paged_reply(r, t.levels, page, limit, (long)t.seen);
}

nmq_err rest_routes_clients(http_server *hs, rest_api *api)
{
	static const struct {
		const char  *path;
		http_handler fn;
	} routes[] = {
		{ "/api/v4/clients", h_clients },
		{ "/api/v4/clients/username/:username", h_client_by_user },
		{ "/api/v4/clients/:clientid", h_client },
		{ "/api/v4/subscriptions", h_subs },
		{ "/api/v4/subscriptions/:clientid", h_subs_client },
		{ "/api/v4/topic-tree", h_topic_tree },
	};
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		nmq_err e = http_server_route(hs, "GET", routes[i].path, routes[i].fn, api);
		if (e != NMQ_OK) {
			return e;
		}
	}
	return NMQ_OK;
}
