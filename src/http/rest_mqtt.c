// REST API v4: publish into the broker and change a client's
// subscriptions (/mqtt/publish, /mqtt/publish_batch, /mqtt/subscribe,
// /mqtt/unsubscribe and their batch forms). A publish goes through the
// broker's ACL as the given client id; subscribe and unsubscribe act on an
// existing session (112 when there is none).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mbedtls/base64.h>

#include "nng/codec/mqtt_codec.h"
#include "nng/codec/mqtt_publish_out.h"
#include "nng/protocol/timer_wheel.h"
#include "src/http/rest_int.h"

#define DEFAULT_CLIENT "NanoMQ-HTTP-Client"
#define MAX_USER_PROPS 64
#define MAX_TOPICS     64

// The outcome of one publish or subscription change: a REST code and a
// message for errors.
typedef struct outcome {
	int         status; // HTTP
	int         code; // REST
	const char *message;
} outcome;

static const outcome OK = { 200, REST_OK, NULL };

static outcome bad(int code, const char *msg)
{
	return (outcome) { 400, code, msg };
}

static bool opt_int(const cJSON *o, const char *key, long min, long max, long *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (v == NULL || cJSON_IsNull(v)) {
		return true;
	}
	if (!cJSON_IsNumber(v) || v->valuedouble != (double)(long)v->valuedouble
	    || v->valuedouble < (double)min || v->valuedouble > (double)max) {
		return false;
	}
	*out = (long)v->valuedouble;
	return true;
}

static bool opt_bool(const cJSON *o, const char *key, bool *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (v == NULL || cJSON_IsNull(v)) {
		return true;
	}
	if (!cJSON_IsBool(v)) {
		return false;
	}
	*out = cJSON_IsTrue(v);
	return true;
}

// A string member; NULL if absent, `bad` set if present but not a string.
static const char *opt_str(const cJSON *o, const char *key, bool *bad_type)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (v == NULL || cJSON_IsNull(v)) {
		return NULL;
	}
	if (!cJSON_IsString(v)) {
		*bad_type = true;
		return NULL;
	}
	return v->valuestring;
}

static mqtt_bytes bytes(const char *s)
{
	return (mqtt_bytes) { (const uint8_t *)s, (uint32_t)strlen(s) };
}

// Splits "a,b" (or a single topic) into up to MAX_TOPICS strings inside buf.
static size_t split_topics(const char *topic, const char *topics, char *buf, size_t cap, char **out)
{
	const char *src = topics != NULL ? topics : topic;
	snprintf(buf, cap, "%s", src);
	if (strlen(src) >= cap) {
		return 0;
	}
	size_t n = 0;
	char  *save;
	for (char *t = strtok_r(buf, ",", &save); t != NULL && n < MAX_TOPICS;
	     t       = strtok_r(NULL, ",", &save)) {
		while (*t == ' ') {
			t++;
		}
		out[n++] = t;
	}
	return n;
}

// Builds the forwardable properties of a publish from its "properties".
static outcome build_props(const cJSON *p, mqtt_props *props, mqtt_user_prop *up, uint32_t *expiry)
{
	memset(props, 0, sizeof(*props));
	*expiry = 0;
	if (p == NULL || cJSON_IsNull(p)) {
		return OK;
	}
	if (!cJSON_IsObject(p)) {
		return bad(REST_PARAM_ERROR, "properties must be an object");
	}
	long pfi = -1, mei = -1;
	bool bt = false;
	if (!opt_int(p, "payload_format_indicator", 0, 1, &pfi)
	    || !opt_int(p, "message_expiry_interval", 0, UINT32_MAX, &mei)) {
		return bad(
		    REST_PARAM_ERROR, "bad payload_format_indicator or message_expiry_interval");
	}
	if (pfi >= 0) {
		props->present |= MQTT_PBIT(MQTT_PROP_PAYLOAD_FORMAT);
		props->payload_format = (uint8_t)pfi;
	}
	if (mei > 0) {
		*expiry = (uint32_t)mei;
	}
	const char *rt = opt_str(p, "response_topic", &bt);
	const char *cd = opt_str(p, "correlation_data", &bt);
	const char *ct = opt_str(p, "content_type", &bt);
	if (bt) {
		return bad(REST_PARAM_ERROR,
		    "response_topic, correlation_data and content_type are "
		    "strings");
	}
	if (rt != NULL) {
		if (!mqtt_topic_name_valid((const uint8_t *)rt, strlen(rt))) {
			return bad(REST_ILLEGAL_TOPIC, "invalid response_topic");
		}
		props->present |= MQTT_PBIT(MQTT_PROP_RESPONSE_TOPIC);
		props->response_topic = bytes(rt);
	}
	if (cd != NULL) {
		props->present |= MQTT_PBIT(MQTT_PROP_CORRELATION_DATA);
		props->correlation_data = bytes(cd);
	}
	if (ct != NULL) {
		props->present |= MQTT_PBIT(MQTT_PROP_CONTENT_TYPE);
		props->content_type = bytes(ct);
	}
	const cJSON *u = cJSON_GetObjectItemCaseSensitive(p, "user_properties");
	if (u != NULL && !cJSON_IsNull(u)) {
		if (!cJSON_IsObject(u)) {
			return bad(REST_PARAM_ERROR, "user_properties must be an object");
		}
		uint32_t     n = 0;
		const cJSON *kv;
		cJSON_ArrayForEach(kv, u)
		{
			if (!cJSON_IsString(kv) || n == MAX_USER_PROPS) {
				return bad(
				    REST_PARAM_ERROR, "user_properties: at most 64 string values");
			}
			up[n].key   = bytes(kv->string);
			up[n].value = bytes(kv->valuestring);
			n++;
		}
		if (n > 0) {
			props->present |= MQTT_PBIT(MQTT_PROP_USER_PROPERTY);
			props->user_props   = up;
			props->n_user_props = n;
		}
	}
	return OK;
}

// Publishes one request object. Writes the first topic to *first (for the
// batch reply).
static outcome publish_one(rest_api *api, const cJSON *o, const char **first)
{
	*first = "";
	if (!cJSON_IsObject(o)) {
		return bad(REST_PARAM_ERROR, "each publish must be an object");
	}
	bool        bt       = false;
	const char *topic    = opt_str(o, "topic", &bt);
	const char *topics   = opt_str(o, "topics", &bt);
	const char *payload  = opt_str(o, "payload", &bt);
	const char *encoding = opt_str(o, "encoding", &bt);
	const char *cid      = opt_str(o, "clientid", &bt);
	long        qos      = 0;
	bool        retain   = false;
	if (bt || !opt_int(o, "qos", 0, 2, &qos) || !opt_bool(o, "retain", &retain)) {
		return bad(REST_PARAM_ERROR, "bad type or value of a member");
	}
	if (topic == NULL && topics == NULL) {
		return bad(REST_MISSING_PARAM, "topic or topics is required");
	}
	*first = topic != NULL ? topic : topics;
	if (cid == NULL || cid[0] == '\0') {
		cid = DEFAULT_CLIENT;
	}
	// The payload, decoded if base64.
	unsigned char *pl  = NULL;
	size_t         pln = 0;
	const char    *src = payload != NULL ? payload : "";
	if (encoding != NULL && strcmp(encoding, "base64") == 0) {
		size_t cap = strlen(src) / 4 * 3 + 3;
		pl         = malloc(cap);
		if (pl == NULL
		    || mbedtls_base64_decode(pl, cap, &pln, (const unsigned char *)src, strlen(src))
		        != 0) {
			free(pl);
			return bad(REST_PARAM_ERROR, "payload is not valid base64");
		}
	} else if (encoding != NULL && strcmp(encoding, "plain") != 0) {
		return bad(REST_PARAM_ERROR, "encoding must be plain or base64");
	}
	mqtt_props     props;
	mqtt_user_prop up[MAX_USER_PROPS];
	uint32_t       expiry;
	outcome        res
	    = build_props(cJSON_GetObjectItemCaseSensitive(o, "properties"), &props, up, &expiry);
	char   tbuf[4096];
	char  *tv[MAX_TOPICS];
	size_t nt = res.code == REST_OK ? split_topics(topic, topics, tbuf, sizeof(tbuf), tv) : 0;
	if (res.code == REST_OK && nt == 0) {
		res = bad(REST_ILLEGAL_TOPIC, "no valid topic");
	}
	for (size_t i = 0; res.code == REST_OK && i < nt; i++) {
		if (!mqtt_topic_name_valid((const uint8_t *)tv[i], strlen(tv[i]))) {
			res = bad(REST_ILLEGAL_TOPIC, "illegal topic name");
		}
	}
	size_t plen = props.present != 0 ? mqtt_props_size(&props) : 0;
	for (size_t i = 0; res.code == REST_OK && i < nt; i++) {
		const uint8_t *data = pl != NULL ? pl : (const uint8_t *)src;
		size_t         dlen = pl != NULL ? pln : strlen(src);
		nmq_msg       *m    = nmq_msg_alloc(tv[i], strlen(tv[i]), plen, dlen);
		if (m == NULL) {
			res = (outcome) { 500, REST_UNKNOWN_ERROR, "out of memory" };
			break;
		}
		if (plen > 0) {
			uint8_t *t = malloc(plen + 4);
			if (t == NULL || mqtt_props_encode_body(t, plen + 4, &props) != plen) {
				free(t);
				nmq_msg_release(m);
				res = (outcome) { 500, REST_UNKNOWN_ERROR,
					"cannot encode properties" };
				break;
			}
			memcpy(m->props, t, plen);
			free(t);
		}
		if (dlen > 0) {
			memcpy(m->payload, data, dlen);
		}
		m->qos    = (uint8_t)qos;
		m->retain = retain;
		if (expiry > 0) {
			m->expiry_interval = expiry;
			m->expiry_at_ms    = nmq_clock_ms() + (uint64_t)expiry * 1000;
		}
		proto_who who = { cid, NULL, "http", PROTO_ACL_NONE, false, 0, 0 };
		int       rc  = broker_publish_as(api->env.broker, &who, m);
		nmq_msg_release(m);
		if (rc >= 0x80) {
			res = (outcome) { 400, REST_PARAM_ERROR,
				rc == MQTT_RC_NOT_AUTHORIZED ? "not authorized by the ACL"
				                             : "the broker refused the message" };
		}
	}
	free(pl);
	return res;
}

static void reply_outcome(http_resp *r, outcome o)
{
	if (o.code == REST_OK) {
		rest_ok(r, NULL);
	} else {
		http_resp_error(r, o.status, o.code, o.message);
	}
}

static void h_publish(void *arg, const http_req *req, http_resp *r)
{
	cJSON *j = rest_parse_body(req, r);
	if (j == NULL) {
		return;
	}
	const char *first;
	reply_outcome(r, publish_one(arg, j, &first));
	cJSON_Delete(j);
}

static void h_publish_batch(void *arg, const http_req *req, http_resp *r)
{
	cJSON *j = rest_parse_body(req, r);
	if (j == NULL) {
		return;
	}
	if (!cJSON_IsArray(j)) {
		cJSON_Delete(j);
		http_resp_error(r, 400, REST_PARAM_ERROR, "the body must be an array");
		return;
	}
	cJSON       *data = cJSON_CreateArray();
	const cJSON *o;
	cJSON_ArrayForEach(o, j)
	{
		const char *first;
		outcome     res = publish_one(arg, o, &first);
		cJSON      *e   = cJSON_CreateObject();
		cJSON_AddStringToObject(e, "topic", first);
		cJSON_AddNumberToObject(e, "code", res.code);
		if (res.message != NULL) {
			cJSON_AddStringToObject(e, "message", res.message);
		}
		cJSON_AddItemToArray(data, e);
	}
	cJSON_Delete(j);
	rest_ok(r, data);
}

// Subscribes or unsubscribes one request object.
static outcome sub_one(rest_api *api, const cJSON *o, bool subscribe)
{
	if (!cJSON_IsObject(o)) {
		return bad(REST_PARAM_ERROR, "each request must be an object");
	}
	bool        bt     = false;
	const char *topic  = opt_str(o, "topic", &bt);
	const char *topics = opt_str(o, "topics", &bt);
	const char *cid    = opt_str(o, "clientid", &bt);
	long        qos    = 0;
	if (bt || !opt_int(o, "qos", 0, 2, &qos)) {
		return bad(REST_PARAM_ERROR, "bad type or value of a member");
	}
	if ((topic == NULL && topics == NULL) || cid == NULL) {
		return bad(REST_MISSING_PARAM, "clientid and topic (or topics) are required");
	}
	char   tbuf[4096];
	char  *tv[MAX_TOPICS];
	size_t nt = split_topics(topic, topics, tbuf, sizeof(tbuf), tv);
	for (size_t i = 0; i < nt; i++) {
		if (!mqtt_topic_filter_valid((const uint8_t *)tv[i], strlen(tv[i]))) {
			return bad(REST_ILLEGAL_TOPIC, "illegal topic filter");
		}
	}
	if (nt == 0) {
		return bad(REST_ILLEGAL_TOPIC, "no valid topic filter");
	}
	nmq_session *s = proto_session_find(api->env.proto, cid);
	if (s == NULL) {
		return (outcome) { 404, REST_CLIENT_OFFLINE, "no session for this clientid" };
	}
	outcome   res = OK;
	proto_who who = { cid, NULL, "http", PROTO_ACL_NONE, false, 0, 0 };
	for (size_t i = 0; i < nt; i++) {
		int rc = subscribe ? broker_subscribe(api->env.broker, s, &who, tv[i], (uint8_t)qos)
		                   : broker_unsubscribe(api->env.broker, s, tv[i]);
		if (rc >= 0x80) {
			res = (outcome) { 400, REST_PARAM_ERROR,
				rc == MQTT_RC_NOT_AUTHORIZED ? "not authorized by the ACL"
				    : subscribe              ? "the broker refused the subscription"
				                : "the broker refused the unsubscription" };
		}
	}
	nmq_session_release(s);
	return res;
}

static void sub_handler(
    rest_api *api, const http_req *req, http_resp *r, bool subscribe, bool batch)
{
	cJSON *j = rest_parse_body(req, r);
	if (j == NULL) {
		return;
	}
	if (!batch) {
		reply_outcome(r, sub_one(api, j, subscribe));
		cJSON_Delete(j);
		return;
	}
	if (!cJSON_IsArray(j)) {
		cJSON_Delete(j);
		http_resp_error(r, 400, REST_PARAM_ERROR, "the body must be an array");
		return;
	}
	cJSON       *data = cJSON_CreateArray();
	const cJSON *o;
	cJSON_ArrayForEach(o, j)
	{
		outcome      res = sub_one(api, o, subscribe);
		cJSON       *e   = cJSON_CreateObject();
		const cJSON *t   = cJSON_GetObjectItemCaseSensitive(o, "topic");
		const cJSON *c   = cJSON_GetObjectItemCaseSensitive(o, "clientid");
		cJSON_AddStringToObject(e, "clientid", cJSON_IsString(c) ? c->valuestring : "");
		cJSON_AddStringToObject(e, "topic", cJSON_IsString(t) ? t->valuestring : "");
		cJSON_AddNumberToObject(e, "code", res.code);
		if (res.message != NULL) {
			cJSON_AddStringToObject(e, "message", res.message);
		}
		cJSON_AddItemToArray(data, e);
	}
	cJSON_Delete(j);
	rest_ok(r, data);
}

static void h_sub(void *arg, const http_req *req, http_resp *r)
{
	sub_handler(arg, req, r, true, false);
}
static void h_unsub(void *arg, const http_req *req, http_resp *r)
{
	sub_handler(arg, req, r, false, false);
}
static void h_sub_batch(void *arg, const http_req *req, http_resp *r)
{
	sub_handler(arg, req, r, true, true);
}
static void h_unsub_batch(void *arg, const http_req *req, http_resp *r)
{
	sub_handler(arg, req, r, false, true);
}

nmq_err rest_routes_mqtt(http_server *hs, rest_api *api)
{
	static const struct {
		const char  *path;
		http_handler fn;
	} routes[] = {
		{ "/api/v4/mqtt/publish", h_publish },
		{ "/api/v4/mqtt/publish_batch", h_publish_batch },
		{ "/api/v4/mqtt/subscribe", h_sub },
		{ "/api/v4/mqtt/subscribe_batch", h_sub_batch },
		{ "/api/v4/mqtt/unsubscribe", h_unsub },
		{ "/api/v4/mqtt/unsubscribe_batch", h_unsub_batch },
	};
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		nmq_err e = http_server_route(hs, "POST", routes[i].path, routes[i].fn, api);
		if (e != NMQ_OK) {
			return e;
		}
	}
	return NMQ_OK;
}
