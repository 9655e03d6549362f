// The effective configuration as JSON, driven by the schema table: what
// GET /api/v4/configuration shows. See conf.h.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "src/conf/conf_int.h"

// The object at the dotted prefix of path (all but the last segment) under
// root, created as needed. Returns NULL on allocation failure; *leaf points
// to the last segment.
static cJSON *parent_of(cJSON *root, const char *path, const char **leaf)
{
	cJSON      *o = root;
	const char *p = path;
	for (;;) {
		const char *dot = strchr(p, '.');
		if (dot == NULL) {
			*leaf = p;
			return o;
		}
		char seg[128];
		snprintf(seg, sizeof(seg), "%.*s", (int)(dot - p), p);
		cJSON *c = cJSON_GetObjectItemCaseSensitive(o, seg);
		if (c == NULL) {
			c = cJSON_AddObjectToObject(o, seg);
			if (c == NULL) {
				return NULL;
			}
		} else if (!cJSON_IsObject(c)) {
			return NULL;
		}
		o = c;
		p = dot + 1;
	}
}

// The `i`th word of a '|' separated list into buf ("" when out of range).
static const char *word(const char *words, int i, char *buf, size_t len)
{
	const char *p = words != NULL ? words : "";
	for (int k = 0; k < i && p != NULL; k++) {
		p = strchr(p, '|');
		if (p != NULL) {
			p++;
		}
	}
	if (p == NULL) {
		buf[0] = '\0';
		return buf;
	}
	const char *e = strchr(p, '|');
	snprintf(buf, len, "%.*s", (int)(e != NULL ? (size_t)(e - p) : strlen(p)), p);
	return buf;
}

// Adds the value of field k of base (an nmq_conf or conf_listener) to o
// under name. Returns false on allocation failure.
static bool add_value(cJSON *o, const char *name, const conf_key *k, const void *base)
{
	const char *f = (const char *)base + k->off;
	cJSON      *v = NULL;
	char        w[64];
	if (k->flags & CONF_F_SECRET) {
		const char *s = k->store == CONF_ST_STR ? *(char *const *)f : "x";
		v             = s != NULL ? cJSON_CreateString("******") : cJSON_CreateNull();
		return v != NULL && cJSON_AddItemToObject(o, name, v);
	}
	switch (k->store) {
	case CONF_ST_BOOL:
		v = cJSON_CreateBool(*(const bool *)f);
		break;
	case CONF_ST_INT:
		if (k->type == CONF_T_ENUM) {
			v = cJSON_CreateString(word(k->words, *(const int *)f, w, sizeof(w)));
		} else if (k->type == CONF_T_FLAGS) {
			v       = cJSON_CreateArray();
			int bit = *(const int *)f;
			for (int i = 0; v != NULL && i < 16; i++) {
				if (bit & (1 << i)) {
					cJSON_AddItemToArray(
					    v, cJSON_CreateString(word(k->words, i, w, sizeof(w))));
				}
			}
		} else {
			v = cJSON_CreateNumber(*(const int *)f);
		}
		break;
	case CONF_ST_U32:
		v = cJSON_CreateNumber(*(const uint32_t *)f);
		break;
	case CONF_ST_U64:
		v = cJSON_CreateNumber((double)*(const uint64_t *)f);
		break;
	case CONF_ST_DOUBLE:
		v = cJSON_CreateNumber(*(const double *)f);
		break;
	case CONF_ST_STR: {
		const char *s = *(char *const *)f;
		v             = s != NULL ? cJSON_CreateString(s) : cJSON_CreateNull();
		break;
	}
	default:
		return true;
	}
	return v != NULL && cJSON_AddItemToObject(o, name, v);
}

#define BRIDGE_PRE "bridges.mqtt.<name>."

// Adds the rows of base `base` whose path starts with pre to o, the rest
// of the path nested. Returns false on allocation failure.
static bool add_rows(cJSON *o, const char *pre, int base, const void *obj)
{
	size_t pl = strlen(pre);
	for (size_t i = 0; i < conf_schema_len; i++) {
		const conf_key *k = &conf_schema[i];
		if (k->base != base || k->store == CONF_ST_NONE || strncmp(k->path, pre, pl) != 0) {
			continue;
		}
		const char *leaf;
		cJSON      *p = parent_of(o, k->path + pl, &leaf);
		if (p == NULL || !add_value(p, leaf, k, obj)) {
			return false;
		}
	}
	return true;
}

// Fills o with the keys of one bridge (as bridges.mqtt.<name> holds
// them), with forwards and subscription. Returns false on allocation
// failure.
static bool bridge_rows(cJSON *o, const conf_bridge *b)
{
	cJSON *fw, *sb;
	if (!add_rows(o, BRIDGE_PRE, CONF_BASE_BRIDGE, b)
	    || (fw = cJSON_AddArrayToObject(o, "forwards")) == NULL
	    || (sb = cJSON_AddArrayToObject(o, "subscription")) == NULL) {
		return false;
	}
	for (int f = 0; f < b->n_fwds; f++) {
		cJSON *e = cJSON_CreateObject();
		if (e == NULL || !cJSON_AddItemToArray(fw, e)
		    || !add_rows(e, BRIDGE_PRE "forwards.", CONF_BASE_BRIDGE_FWD, &b->fwds[f])) {
			return false;
		}
	}
	for (int f = 0; f < b->n_subs; f++) {
		cJSON *e = cJSON_CreateObject();
		if (e == NULL || !cJSON_AddItemToArray(sb, e)
		    || !add_rows(
		        e, BRIDGE_PRE "subscription.", CONF_BASE_BRIDGE_SUB, &b->subs[f])) {
			return false;
		}
	}
	return true;
}

struct cJSON *conf_bridge_to_json(const conf_bridge *b)
{
	cJSON *o = cJSON_CreateObject();
	if (o != NULL && !bridge_rows(o, b)) {
		cJSON_Delete(o);
		o = NULL;
	}
	return o;
}

// bridges.mqtt.<name> for every bridge.
static bool add_bridges(cJSON *root, const nmq_conf *c)
{
	if (c->n_bridges == 0) {
		return true;
	}
	cJSON *br = cJSON_GetObjectItemCaseSensitive(root, "bridges");
	if (br == NULL) {
		br = cJSON_AddObjectToObject(root, "bridges");
	}
	cJSON *mq = br != NULL ? cJSON_GetObjectItemCaseSensitive(br, "mqtt") : NULL;
	if (br != NULL && mq == NULL) {
		mq = cJSON_AddObjectToObject(br, "mqtt");
	}
	if (mq == NULL) {
		return false;
	}
	for (int i = 0; i < c->n_bridges; i++) {
		cJSON *o = cJSON_AddObjectToObject(mq, c->bridges[i].name);
		if (o == NULL || !bridge_rows(o, &c->bridges[i])) {
			return false;
		}
	}
	return true;
}

// Sets root.<path> to a copy of v (nothing when v is NULL). Returns false
// on allocation failure.
static bool add_copy(cJSON *root, const char *path, const cJSON *v)
{
	if (v == NULL) {
		return true;
	}
	const char *leaf;
	cJSON      *o = parent_of(root, path, &leaf);
	cJSON      *d = o != NULL ? cJSON_Duplicate(v, true) : NULL;
	if (d == NULL || !cJSON_AddItemToObject(o, leaf, d)) {
		cJSON_Delete(d);
		return false;
	}
	return true;
}

// auth.http_auth with the file's keys: the durations the checker keeps in
// milliseconds go back to their keys as "<n>ms" (which the reader takes
// again), the key password is masked.
static bool add_http_auth(cJSON *root, const nmq_conf *c)
{
	static const char *const durs[][2] = { { "timeout_ms", "timeout" },
		{ "connect_timeout_ms", "connect_timeout" }, { "cache_ttl_ms", "cache_ttl" } };
	if (c->auth_http == NULL) {
		return true;
	}
	if (!add_copy(root, "auth.http_auth", c->auth_http)) {
		return false;
	}
	cJSON *auth = cJSON_GetObjectItemCaseSensitive(root, "auth");
	cJSON *o    = cJSON_GetObjectItemCaseSensitive(auth, "http_auth");
	for (size_t i = 0; i < sizeof(durs) / sizeof(durs[0]); i++) {
		cJSON *d  = cJSON_DetachItemFromObjectCaseSensitive(o, durs[i][0]);
		bool   ok = true;
		if (cJSON_IsNumber(d)) {
			char b[32];
			snprintf(b, sizeof(b), "%.0fms", d->valuedouble);
			ok = cJSON_AddStringToObject(o, durs[i][1], b) != NULL;
		}
		cJSON_Delete(d);
		if (!ok) {
			return false;
		}
	}
	cJSON *ssl = cJSON_GetObjectItemCaseSensitive(o, "ssl");
	if (cJSON_GetObjectItemCaseSensitive(ssl, "key_password") != NULL) {
		cJSON *m = cJSON_CreateString("******");
		if (m == NULL || !cJSON_ReplaceItemInObjectCaseSensitive(ssl, "key_password", m)) {
			cJSON_Delete(m);
			return false;
		}
	}
	return true;
}

struct cJSON *conf_to_json(const nmq_conf *c)
{
	cJSON *root = cJSON_CreateObject();
	if (root == NULL) {
		return NULL;
	}
	for (size_t i = 0; i < conf_schema_len; i++) {
		const conf_key *k = &conf_schema[i];
		if (k->base != CONF_BASE_CONF || k->store == CONF_ST_NONE) {
			continue;
		}
		const char *leaf;
		cJSON      *o = parent_of(root, k->path, &leaf);
		if (o == NULL || !add_value(o, leaf, k, c)) {
			goto fail;
		}
	}
	cJSON *ls = cJSON_GetObjectItemCaseSensitive(root, "listeners");
	if (ls == NULL) {
		ls = cJSON_AddObjectToObject(root, "listeners");
	}
	for (int li = 0; ls != NULL && li < c->n_listeners; li++) {
		const conf_listener *l    = &c->listeners[li];
		const char          *kind = conf_listener_kind_name(l->kind);
		cJSON               *o    = cJSON_AddObjectToObject(ls, l->name);
		char                 pre[32];
		snprintf(pre, sizeof(pre), "listeners.%s.", kind);
		for (size_t i = 0; o != NULL && i < conf_schema_len; i++) {
			const conf_key *k = &conf_schema[i];
			if (k->base != CONF_BASE_LISTENER || k->store == CONF_ST_NONE
			    || strncmp(k->path, pre, strlen(pre)) != 0) {
				continue;
			}
			if (!add_value(o, k->path + strlen(pre), k, l)) {
				goto fail;
			}
		}
	}
	if (!add_bridges(root, c) || !add_http_auth(root, c)
	    || (c->webhook_present
	        && (!add_copy(root, "webhook.headers", c->webhook_headers)
	            || !add_copy(root, "webhook.events", c->webhook_events)))) {
		goto fail;
	}
	// Sections whose presence turns them on are shown only when on, so
	// that the whole document can be written back unchanged.
	if (!c->http_enable) {
		cJSON_DeleteItemFromObjectCaseSensitive(root, "http_server");
	}
	if (!c->http_ssl_enable) {
		cJSON *hs = cJSON_GetObjectItemCaseSensitive(root, "http_server");
		cJSON_DeleteItemFromObjectCaseSensitive(hs, "ssl");
	}
	if (!c->webhook_present) {
		cJSON_DeleteItemFromObjectCaseSensitive(root, "webhook");
	}
	if (c->n_bridges == 0) {
		cJSON_DeleteItemFromObjectCaseSensitive(root, "bridges");
	}
	return root;
fail:
	cJSON_Delete(root);
	return NULL;
}
