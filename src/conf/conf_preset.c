// The preset.session section: persistent sessions the broker creates at
// startup, checked here and kept as a cJSON array in nmq_conf (see conf.h
// for its shape). Both spellings are accepted: named objects
// (`preset.session.<n> {...}`) and an array (`preset.session = [...]`).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nng/codec/mqtt_codec.h"
#include "src/conf/conf_int.h"

// Reads an integer member name of obj (default def) within lo..hi into
// *out. Returns false after reporting an error.
static bool member_int(conf_ctx *ctx, const cJSON *obj, const char *name, const char *key, long def,
    long lo, long hi, long *out)
{
	char         buf[64];
	char         k[544];
	const cJSON *n = cJSON_GetObjectItemCaseSensitive(obj, name);
	*out           = def;
	if (n == NULL) {
		return true;
	}
	snprintf(k, sizeof(k), "%s.%s", key, name);
	const char *t = conf_node_text(ctx, n, buf, sizeof(buf));
	if (t != NULL && cJSON_IsBool(n) && hi >= 1) {
		*out = cJSON_IsTrue(n) ? 1 : 0;
		return true;
	}
	char *end = NULL;
	long  v   = t != NULL ? strtol(t, &end, 10) : 0;
	if (t == NULL || *t == '\0' || end == NULL || *end != '\0' || v < lo || v > hi) {
		conf_key_msg(ctx, true, n, k, "expected an integer from %ld to %ld", lo, hi);
		return false;
	}
	*out = v;
	return true;
}

// Reads a boolean member name of obj (default false) into *out (true,
// false, 1 or 0). Returns false after reporting an error.
static bool member_bool(
    conf_ctx *ctx, const cJSON *obj, const char *name, const char *key, bool *out)
{
	char         buf[64];
	char         k[544];
	const cJSON *n = cJSON_GetObjectItemCaseSensitive(obj, name);
	*out           = false;
	if (n == NULL) {
		return true;
	}
	const char *t = conf_node_text(ctx, n, buf, sizeof(buf));
	if (cJSON_IsBool(n)) {
		*out = cJSON_IsTrue(n);
		return true;
	}
	if (t != NULL
	    && (strcmp(t, "1") == 0 || strcmp(t, "0") == 0 || strcmp(t, "true") == 0
	        || strcmp(t, "false") == 0)) {
		*out = t[0] == '1' || t[0] == 't';
		return true;
	}
	snprintf(k, sizeof(k), "%s.%s", key, name);
	conf_key_msg(ctx, true, n, k, "expected true, false, 1 or 0");
	return false;
}

// Checks one subscription {remote_topic, qos, retain_as_published,
// retain_handling} and appends its normal form to topics.
static void check_topic(conf_ctx *ctx, const cJSON *t, const char *key, cJSON *topics)
{
	char k[544];
	if (!cJSON_IsObject(t)) {
		conf_key_msg(ctx, true, t, key,
		    "expected {remote_topic = \"filter\", qos = 0|1|2, retain_as_published, "
		    "retain_handling}");
		return;
	}
	for (const cJSON *f = t->child; f != NULL; f = f->next) {
		if (strcmp(f->string, "remote_topic") != 0 && strcmp(f->string, "qos") != 0
		    && strcmp(f->string, "retain_as_published") != 0
		    && strcmp(f->string, "retain_handling") != 0) {
			snprintf(k, sizeof(k), "%s.%.64s", key, f->string);
			conf_key_msg(ctx, false, f, k, "unknown key; ignored");
		}
	}
	const cJSON *rt = cJSON_GetObjectItemCaseSensitive(t, "remote_topic");
	snprintf(k, sizeof(k), "%s.remote_topic", key);
	if (rt == NULL) {
		conf_key_msg(ctx, true, t, k, "required: the topic filter to subscribe to");
		return;
	}
	if (!cJSON_IsString(rt)
	    || !mqtt_topic_filter_valid(
	        (const uint8_t *)rt->valuestring, strlen(rt->valuestring))) {
		conf_key_msg(ctx, true, rt, k, "not a valid topic filter");
		return;
	}
	long qos, rh;
	bool rap;
	if (!member_int(ctx, t, "qos", key, 0, 0, 2, &qos)
	    || !member_bool(ctx, t, "retain_as_published", key, &rap)
	    || !member_int(ctx, t, "retain_handling", key, 0, 0, 2, &rh)) {
		return;
	}
	cJSON *o = cJSON_CreateObject();
	if (o == NULL || cJSON_AddStringToObject(o, "filter", rt->valuestring) == NULL
	    || cJSON_AddNumberToObject(o, "qos", (double)qos) == NULL
	    || cJSON_AddBoolToObject(o, "rap", rap) == NULL
	    || cJSON_AddNumberToObject(o, "rh", (double)rh) == NULL) {
		cJSON_Delete(o);
		conf_key_msg(ctx, true, t, key, "out of memory");
		return;
	}
	cJSON_AddItemToArray(topics, o);
}

// Checks one session {clientid, topic = [...]} named key and appends its
// normal form to out.
static void check_session(conf_ctx *ctx, const cJSON *s, const char *key, cJSON *out)
{
	char k[448];
	if (!cJSON_IsObject(s)) {
		conf_key_msg(ctx, true, s, key, "expected {clientid = \"...\", topic = [...]}");
		return;
	}
	for (const cJSON *f = s->child; f != NULL; f = f->next) {
		if (strcmp(f->string, "clientid") != 0 && strcmp(f->string, "topic") != 0) {
			snprintf(k, sizeof(k), "%s.%.64s", key, f->string);
			conf_key_msg(ctx, false, f, k, "unknown key; ignored");
		}
	}
	const cJSON *cid = cJSON_GetObjectItemCaseSensitive(s, "clientid");
	snprintf(k, sizeof(k), "%s.clientid", key);
	if (cid == NULL) {
		conf_key_msg(ctx, true, s, k, "required: the client id of the session");
		return;
	}
	if (!cJSON_IsString(cid) || cid->valuestring[0] == '\0'
	    || strlen(cid->valuestring) > 65535) {
		conf_key_msg(ctx, true, cid, k, "expected a non-empty string");
		return;
	}
	// The durable store keeps the bridges' caches under "$bridge/<name>"
	// and drops at start the rows of a name no bridge has: such a preset
	// session lost its subscriptions there (and no client may take it
	// over, docs/persistence.md).
	if (strncmp(cid->valuestring, "$bridge/", 8) == 0) {
		conf_key_msg(ctx, true, cid, k,
		    "client id \"%.64s\": client ids under $bridge/ are the bridges' own",
		    cid->valuestring);
		return;
	}
	for (const cJSON *o = out->child; o != NULL; o = o->next) {
		const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "clientid");
		if (strcmp(c->valuestring, cid->valuestring) == 0) {
			conf_key_msg(ctx, true, cid, k, "client id \"%.64s\" is preset twice",
			    cid->valuestring);
			return;
		}
	}
	cJSON *topics = cJSON_CreateArray();
	if (topics == NULL) {
		conf_key_msg(ctx, true, s, key, "out of memory");
		return;
	}
	const cJSON *tl = cJSON_GetObjectItemCaseSensitive(s, "topic");
	snprintf(k, sizeof(k), "%s.topic", key);
	if (tl != NULL && !cJSON_IsArray(tl)) {
		conf_key_msg(
		    ctx, true, tl, k, "expected an array of {remote_topic = ..., qos = ...}");
		cJSON_Delete(topics);
		return;
	}
	int  i = 0;
	char tk[464];
	for (const cJSON *t = tl != NULL ? tl->child : NULL; t != NULL; t = t->next, i++) {
		snprintf(tk, sizeof(tk), "%s[%d]", k, i);
		check_topic(ctx, t, tk, topics);
	}
	cJSON *o = cJSON_CreateObject();
	if (o == NULL || cJSON_AddStringToObject(o, "clientid", cid->valuestring) == NULL) {
		cJSON_Delete(o);
		cJSON_Delete(topics);
		conf_key_msg(ctx, true, s, key, "out of memory");
		return;
	}
	cJSON_AddItemToObject(o, "topics", topics);
	cJSON_AddItemToArray(out, o);
}

void conf_check_preset_sessions(conf_ctx *ctx, const cJSON *node)
{
	char key[320];
	if (!cJSON_IsObject(node) && !cJSON_IsArray(node)) {
		conf_key_msg(ctx, true, node, "preset.session",
		    "expected named sessions `preset.session.<n> {...}` or an array of them");
		return;
	}
	cJSON *out = cJSON_CreateArray();
	if (out == NULL) {
		conf_key_msg(ctx, true, node, "preset.session", "out of memory");
		return;
	}
	int i = 0;
	for (const cJSON *c = node->child; c != NULL; c = c->next, i++) {
		if (cJSON_IsArray(node)) {
			snprintf(key, sizeof(key), "preset.session[%d]", i);
		} else {
			snprintf(key, sizeof(key), "preset.session.%.200s", c->string);
		}
		check_session(ctx, c, key, out);
	}
	cJSON_Delete(ctx->conf->preset_sessions);
	ctx->conf->preset_sessions = out;
}
