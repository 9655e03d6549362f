// REST API v4: changing bridges at runtime (PUT and DELETE /bridges/:name,
// /bridges/switch, /bridges/sub, /bridges/unsub). See docs/rest-api.md.
//
// Bodies are validated by the configuration reader itself: the JSON of a
// bridge (or of its subscriptions) is HOCON, so it is read as
// `bridges.mqtt.<name> = <json>` on top of the defaults, with the same
// checks, defaults and messages as the file. Nothing is written to the
// configuration file (a reload applies the file again).
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nng/codec/mqtt_codec.h"
#include "nng/core/log.h"
#include "src/bridge/bridge.h"
#include "src/http/rest_int.h"

#define MAX_RT_SUBS 256 // filters in one /bridges/sub or /bridges/unsub

// A bridge name as a path segment may be: letters, digits, '_' and '-'
// (what an unquoted HOCON key holds), not "cache".
static bool name_ok(const char *n)
{
	size_t len = strlen(n);
	if (len == 0 || len > 64 || strcmp(n, "cache") == 0) {
		return false;
	}
	for (size_t i = 0; i < len; i++) {
		if (!isalnum((unsigned char)n[i]) && n[i] != '_' && n[i] != '-') {
			return false;
		}
	}
	return true;
}

// The bridge set, or an error reply (404) when there is no such bridge
// name possible.
static nmq_bridges *bridges_of(rest_api *api, const http_req *req, http_resp *r)
{
	if (api->env.bridges == NULL || req->nparams != 1 || !name_ok(req->params[0])) {
		http_resp_error(r, 404, REST_PARAM_ERROR, "no such bridge");
		return NULL;
	}
	return api->env.bridges;
}

// Reads `bridges.mqtt.<name> = <obj>` (obj printed as JSON) into c.
// Returns 0, or -1 after an error reply naming what is wrong.
static int read_bridge(rest_api *api, const char *name, const cJSON *obj, nmq_conf *c, http_resp *r)
{
	char *js = cJSON_PrintUnformatted(obj);
	if (js == NULL) {
		r->oom = true;
		return -1;
	}
	size_t need = strlen(js) + strlen(name) + 32;
	char  *text = malloc(need);
	if (text == NULL) {
		free(js);
		r->oom = true;
		return -1;
	}
	int n = snprintf(text, need, "bridges.mqtt.%s = %s\n", name, js);
	free(js);
	char        dbuf[4200] = ".";
	const char *path       = api->env.conf_path;
	if (path != NULL && strlen(path) < sizeof(dbuf)) {
		strcpy(dbuf, path);
		char *slash = strrchr(dbuf, '/');
		if (slash != NULL) {
			*slash = '\0';
		} else {
			strcpy(dbuf, ".");
		}
	}
	conf_errors errs;
	int         rc = conf_load_text(c, text, (size_t)n, "request body", dbuf, &errs);
	free(text);
	if (rc != 0) {
		char msg[1024];
		int  m = snprintf(msg, sizeof(msg), "invalid bridge:");
		for (int i = 0; i < errs.n_errors && m > 0 && (size_t)m < sizeof(msg); i++) {
			m += snprintf(msg + m, sizeof(msg) - (size_t)m, " %s;", errs.errors[i]);
		}
		conf_errors_free(&errs);
		http_resp_error(r, 400, REST_PARAM_ERROR, msg);
		return -1;
	}
	conf_errors_free(&errs);
	return 0;
}

static void reply_err(http_resp *r, nmq_err e)
{
	if (e == NMQ_ENOENT) {
		http_resp_error(r, 404, REST_PARAM_ERROR, "no such bridge");
	} else if (e == NMQ_ENOMEM) {
		r->oom = true;
	} else {
		http_resp_error(r, 500, REST_UNKNOWN_ERROR, nmq_strerror(e));
	}
}

// PUT /bridges/:name {"<name>": {bridge keys as in the configuration}}
static void h_put(void *arg, const http_req *req, http_resp *r)
{
	rest_api    *api = arg;
	nmq_bridges *set = bridges_of(api, req, r);
	if (set == NULL) {
		return;
	}
	const char *name = req->params[0];
	cJSON      *j    = rest_parse_body(req, r);
	if (j == NULL) {
		return;
	}
	cJSON *b = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, name) : NULL;
	if (!cJSON_IsObject(b) || cJSON_GetArraySize(j) != 1) {
		cJSON_Delete(j);
		http_resp_error(r, 400, REST_PARAM_ERROR,
		    "the body must be one object named after the bridge: {\"<name>\": {...}}");
		return;
	}
	// "******" (as GET /configuration shows a secret): keep the current one.
	bool   keep_pw = false;
	cJSON *pw      = cJSON_GetObjectItemCaseSensitive(b, "password");
	if (cJSON_IsString(pw) && strcmp(pw->valuestring, "******") == 0) {
		cJSON_DeleteItemFromObjectCaseSensitive(b, "password");
		keep_pw = true;
	}
	nmq_conf c;
	if (read_bridge(api, name, b, &c, r) != 0) {
		cJSON_Delete(j);
		return;
	}
	cJSON_Delete(j);
	const conf_bridge *cb = conf_bridge_find(&c, name);
	nmq_err            e  = cb != NULL ? bridges_put(set, cb, keep_pw) : NMQ_EINVAL;
	conf_free(&c);
	if (e != NMQ_OK) {
		reply_err(r, e);
		return;
	}
	rest_ok(r, NULL);
}

// DELETE /bridges/:name
static void h_delete(void *arg, const http_req *req, http_resp *r)
{
	rest_api    *api = arg;
	nmq_bridges *set = bridges_of(api, req, r);
	if (set == NULL) {
		return;
	}
	nmq_err e = bridges_delete(set, req->params[0]);
	if (e != NMQ_OK) {
		reply_err(r, e);
		return;
	}
	rest_ok(r, NULL);
}

// POST /bridges/switch/:name {"data":{"bridge_switch":bool}}; also
// POST /bridges/:name/switch {"enable":bool}.
static void h_switch(void *arg, const http_req *req, http_resp *r)
{
	rest_api    *api = arg;
	nmq_bridges *set = bridges_of(api, req, r);
	if (set == NULL) {
		return;
	}
	cJSON *j = rest_parse_body(req, r);
	if (j == NULL) {
		return;
	}
	cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "data");
	cJSON *v = cJSON_IsObject(d) ? cJSON_GetObjectItemCaseSensitive(d, "bridge_switch")
	                             : cJSON_GetObjectItemCaseSensitive(j, "enable");
	if (v == NULL) {
		cJSON_Delete(j);
		http_resp_error(r, 400, REST_MISSING_PARAM,
		    "\"data\":{\"bridge_switch\":true|false} (or \"enable\") is required");
		return;
	}
	if (!cJSON_IsBool(v)) {
		cJSON_Delete(j);
		http_resp_error(r, 400, REST_PARAM_ERROR, "the switch must be true or false");
		return;
	}
	bool on = cJSON_IsTrue(v);
	cJSON_Delete(j);
	nmq_err e = bridges_switch(set, req->params[0], on);
	if (e != NMQ_OK) {
		reply_err(r, e);
		return;
	}
	rest_ok(r, NULL);
}

// The user properties of {"user_properties":[{key,value}...]} (or the
// configuration's spelling "user_property":{k:v}) in sp, as key/value
// string pairs borrowed from sp. Returns the count, or -1 after an error
// reply.
static int user_props(const cJSON *sp, const char **kv, int max, http_resp *r)
{
	int n = 0;
	if (!cJSON_IsObject(sp)) {
		return 0;
	}
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(sp, "user_properties");
	const cJSON *o = cJSON_GetObjectItemCaseSensitive(sp, "user_property");
	const cJSON *it;
	if (cJSON_IsArray(a)) {
		cJSON_ArrayForEach(it, a)
		{
			const cJSON *k = cJSON_GetObjectItemCaseSensitive(it, "key");
			const cJSON *v = cJSON_GetObjectItemCaseSensitive(it, "value");
			if (!cJSON_IsString(k) || !cJSON_IsString(v) || n >= max) {
				http_resp_error(r, 400, REST_PARAM_ERROR,
				    "user_properties: a list of "
				    "{\"key\":\"...\",\"value\":\"...\"}");
				return -1;
			}
			kv[2 * n]     = k->valuestring;
			kv[2 * n + 1] = v->valuestring;
			n++;
		}
	} else if (cJSON_IsObject(o)) {
		cJSON_ArrayForEach(it, o)
		{
			if (!cJSON_IsString(it) || n >= max) {
				http_resp_error(r, 400, REST_PARAM_ERROR,
				    "user_property: an object of string values");
				return -1;
			}
			kv[2 * n]     = it->string;
			kv[2 * n + 1] = it->valuestring;
			n++;
		}
	} else if (a != NULL || o != NULL) {
		http_resp_error(r, 400, REST_PARAM_ERROR, "bad user properties");
		return -1;
	}
	return n;
}

// The list of a sub/unsub body: {"data":{key:[...], props_key:{...}}}, or
// the list itself, or {key:[...]}. Sets *props to the properties object
// (or NULL).
static const cJSON *body_list(
    const cJSON *j, const char *key, const char *props_key, const cJSON **props)
{
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "data");
	const cJSON *o = cJSON_IsObject(d) ? d : j;
	*props         = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, props_key) : NULL;
	if (cJSON_IsArray(j)) {
		return j;
	}
	const cJSON *l = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
	if (l == NULL && cJSON_IsObject(o)) {
		l = cJSON_GetObjectItemCaseSensitive(o, "topics");
	}
	return cJSON_IsArray(l) ? l : NULL;
}

// PUT or POST /bridges/sub/:name
static void h_sub(void *arg, const http_req *req, http_resp *r)
{
	rest_api    *api = arg;
	nmq_bridges *set = bridges_of(api, req, r);
	if (set == NULL) {
		return;
	}
	const char *name = req->params[0];
	cJSON      *j    = rest_parse_body(req, r);
	if (j == NULL) {
		return;
	}
	const cJSON *props;
	const cJSON *l = body_list(j, "subscription", "sub_properties", &props);
	int          n = l != NULL ? cJSON_GetArraySize(l) : 0;
	if (n == 0 || n > MAX_RT_SUBS) {
		cJSON_Delete(j);
		http_resp_error(r, 400, REST_MISSING_PARAM,
		    "\"data\":{\"subscription\":[{\"remote_topic\":...,\"qos\":...}]} "
		    "(1 to 256 of them) is required");
		return;
	}
	// {"topic": ...} is {"remote_topic": ...}; the configuration reader
	// checks the rest.
	cJSON *subs = cJSON_CreateArray();
	cJSON *it;
	cJSON_ArrayForEach(it, l)
	{
		cJSON *c = cJSON_Duplicate(it, true);
		if (cJSON_IsObject(c) && !cJSON_HasObjectItem(c, "remote_topic")) {
			cJSON *t = cJSON_DetachItemFromObjectCaseSensitive(c, "topic");
			if (t != NULL) {
				cJSON_AddItemToObject(c, "remote_topic", t);
			}
		}
		if (c == NULL || subs == NULL || !cJSON_AddItemToArray(subs, c)) {
			cJSON_Delete(c);
			cJSON_Delete(subs);
			cJSON_Delete(j);
			r->oom = true;
			return;
		}
	}
	cJSON *b = cJSON_CreateObject();
	if (b == NULL || subs == NULL
	    || !cJSON_AddStringToObject(b, "server", "mqtt-tcp://127.0.0.1:1883")
	    || !cJSON_AddItemToObject(b, "subscription", subs)) {
		cJSON_Delete(subs);
		cJSON_Delete(b);
		cJSON_Delete(j);
		r->oom = true;
		return;
	}
	const char *kv[2 * 32];
	int         np = user_props(props, kv, 32, r);
	nmq_conf    c;
	if (np < 0 || read_bridge(api, name, b, &c, r) != 0) {
		cJSON_Delete(b);
		cJSON_Delete(j);
		return;
	}
	cJSON_Delete(b);
	const conf_bridge *cb = conf_bridge_find(&c, name);
	nmq_err            e
	    = cb != NULL ? bridges_subscribe(set, name, cb->subs, cb->n_subs, kv, np) : NMQ_EINVAL;
	conf_free(&c);
	cJSON_Delete(j);
	if (e != NMQ_OK) {
		reply_err(r, e);
		return;
	}
	rest_ok(r, NULL);
}

// PUT or POST /bridges/unsub/:name
static void h_unsub(void *arg, const http_req *req, http_resp *r)
{
	rest_api    *api = arg;
	nmq_bridges *set = bridges_of(api, req, r);
	if (set == NULL) {
		return;
	}
	cJSON *j = rest_parse_body(req, r);
	if (j == NULL) {
		return;
	}
	const cJSON *props;
	const cJSON *l = body_list(j, "unsubscription", "unsub_properties", &props);
	int          n = l != NULL ? cJSON_GetArraySize(l) : 0;
	if (n == 0 || n > MAX_RT_SUBS) {
		cJSON_Delete(j);
		http_resp_error(r, 400, REST_MISSING_PARAM,
		    "\"data\":{\"unsubscription\":[{\"topic\":...}]} (1 to 256 of them) is "
		    "required");
		return;
	}
	const char  *topics[MAX_RT_SUBS];
	int          k = 0;
	const cJSON *it;
	cJSON_ArrayForEach(it, l)
	{
		const cJSON *t
		    = cJSON_IsString(it) ? it : cJSON_GetObjectItemCaseSensitive(it, "topic");
		if (t == NULL && cJSON_IsObject(it)) {
			t = cJSON_GetObjectItemCaseSensitive(it, "remote_topic");
		}
		if (!cJSON_IsString(t)
		    || !mqtt_topic_filter_valid(
		        (const uint8_t *)t->valuestring, strlen(t->valuestring))) {
			cJSON_Delete(j);
			http_resp_error(
			    r, 400, REST_ILLEGAL_TOPIC, "a topic is not a valid filter");
			return;
		}
		topics[k++] = t->valuestring;
	}
	const char *kv[2 * 32];
	int         np = user_props(props, kv, 32, r);
	if (np < 0) {
		cJSON_Delete(j);
		return;
	}
	nmq_err e = bridges_unsubscribe(set, req->params[0], topics, k, kv, np);
	cJSON_Delete(j);
	if (e != NMQ_OK) {
		reply_err(r, e);
		return;
	}
	rest_ok(r, NULL);
}

nmq_err rest_routes_bridges(http_server *hs, rest_api *api)
{
	static const struct {
		const char  *method, *path;
		http_handler fn;
	} routes[] = {
		{ "PUT", "/api/v4/bridges/:name", h_put },
		{ "DELETE", "/api/v4/bridges/:name", h_delete },
		{ "POST", "/api/v4/bridges/switch/:name", h_switch },
		{ "PUT", "/api/v4/bridges/switch/:name", h_switch },
		{ "POST", "/api/v4/bridges/:name/switch", h_switch },
		{ "PUT", "/api/v4/bridges/sub/:name", h_sub },
		{ "POST", "/api/v4/bridges/sub/:name", h_sub },
		{ "PUT", "/api/v4/bridges/unsub/:name", h_unsub },
		{ "POST", "/api/v4/bridges/unsub/:name", h_unsub },
	};
	nmq_err e = NMQ_OK;
	for (size_t i = 0; e == NMQ_OK && i < sizeof(routes) / sizeof(routes[0]); i++) {
		e = http_server_route(hs, routes[i].method, routes[i].path, routes[i].fn, api);
	}
	return e;
}
