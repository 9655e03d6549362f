// REST API v4: the configuration in NanoMQ's sections (`basic`, `tls`,
// `http_server`, `websocket`, `webhook`, `auth`, `auth_http`, `sqlite`,
// `bridge`, `aws_bridge`), as GET /configuration shows it and POST
// /configuration reads it, translated from and to the broker's own HOCON
// tree (conf_to_json). See rest_int.h.
//
// Pure functions over cJSON trees; they run on the REST API's thread.
#include <stdio.h>
#include <string.h>

#include "src/http/rest_int.h"

// One key of a NanoMQ section and the HOCON path it stands for. A URL
// (scheme != NULL) is shown with NanoMQ's scheme and written without it.
typedef struct view_key {
	const char *section;
	const char *key;
	const char *path;
	const char *scheme;
} view_key;

static const view_key view_keys[] = {
	{ "basic", "url", "listeners.tcp.bind", "nmq-tcp://" },
	{ "basic", "daemon", "system.daemon", NULL },
	{ "basic", "num_taskq_thread", "system.num_taskq_thread", NULL },
	{ "basic", "max_taskq_thread", "system.max_taskq_thread", NULL },
	{ "basic", "parallel", "system.parallel", NULL },
	{ "basic", "property_size", "mqtt.property_size", NULL },
	{ "basic", "max_packet_size", "mqtt.max_packet_size", NULL },
	{ "basic", "client_max_packet_size", "mqtt.client_max_packet_size", NULL },
	{ "basic", "msq_len", "mqtt.max_mqueue_len", NULL },
	{ "basic", "qos_duration", "mqtt.retry_interval", NULL },
	{ "basic", "keepalive_backoff", "mqtt.keepalive_multiplier", NULL },
	{ "basic", "allow_anonymous", "auth.allow_anonymous", NULL },
	{ "tls", "url", "listeners.ssl.bind", "tls+nmq-tcp://" },
	{ "tls", "keyfile", "listeners.ssl.keyfile", NULL },
	{ "tls", "certfile", "listeners.ssl.certfile", NULL },
	{ "tls", "cacertfile", "listeners.ssl.cacertfile", NULL },
	{ "tls", "key_password", "listeners.ssl.key_password", NULL },
	{ "tls", "verify_peer", "listeners.ssl.verify_peer", NULL },
	{ "tls", "fail_if_no_peer_cert", "listeners.ssl.fail_if_no_peer_cert", NULL },
	{ "websocket", "url", "listeners.ws.bind", "nmq-ws://" },
	{ "websocket", "tls_url", "listeners.wss.bind", "nmq-wss://" },
};

// Older NanoMQ names that POST also reads.
static const view_key view_aliases[] = {
	{ "tls", "key", "listeners.ssl.keyfile", NULL },
	{ "tls", "cert", "listeners.ssl.certfile", NULL },
	{ "tls", "cacert", "listeners.ssl.cacertfile", NULL },
	{ "tls", "keypass", "listeners.ssl.key_password", NULL },
};

#define NKEYS    (sizeof(view_keys) / sizeof(view_keys[0]))
#define NALIASES (sizeof(view_aliases) / sizeof(view_aliases[0]))

// The item at a dotted path of root, or NULL.
static const cJSON *get_path(const cJSON *root, const char *path)
{
	char        seg[256];
	const char *p = path;
	while (root != NULL) {
		const char *dot = strchr(p, '.');
		size_t      n   = dot != NULL ? (size_t)(dot - p) : strlen(p);
		snprintf(seg, sizeof(seg), "%.*s", (int)n, p);
		root = cJSON_GetObjectItemCaseSensitive(root, seg);
		if (dot == NULL) {
			return root;
		}
		p = dot + 1;
	}
	return NULL;
}

// Sets a dotted path of root to item (owned by root afterwards, freed on
// failure), creating objects on the way. Returns false on allocation
// failure or when a segment on the way is not an object.
static bool set_path(cJSON *root, const char *path, cJSON *item)
{
	char        seg[256];
	const char *p = path;
	if (item == NULL) {
		return false;
	}
	for (;;) {
		const char *dot = strchr(p, '.');
		size_t      n   = dot != NULL ? (size_t)(dot - p) : strlen(p);
		snprintf(seg, sizeof(seg), "%.*s", (int)n, p);
		if (dot == NULL) {
			cJSON_DeleteItemFromObjectCaseSensitive(root, seg);
			if (!cJSON_AddItemToObject(root, seg, item)) {
				cJSON_Delete(item);
				return false;
			}
			return true;
		}
		cJSON *c = cJSON_GetObjectItemCaseSensitive(root, seg);
		if (c == NULL) {
			c = cJSON_AddObjectToObject(root, seg);
		}
		if (!cJSON_IsObject(c)) {
			cJSON_Delete(item);
			return false;
		}
		root = c;
		p    = dot + 1;
	}
}

// A copy of the native object at path, or {"enable":false} when there is
// none (a section whose presence turns it on is off).
static cJSON *section_or_off(const cJSON *native, const char *path)
{
	const cJSON *s = get_path(native, path);
	if (cJSON_IsObject(s)) {
		return cJSON_Duplicate(s, true);
	}
	cJSON *o = cJSON_CreateObject();
	if (o != NULL) {
		cJSON_AddBoolToObject(o, "enable", false);
	}
	return o;
}

cJSON *rest_conf_nanomq_view(const cJSON *native)
{
	cJSON *v  = cJSON_CreateObject();
	bool   ok = v != NULL;
	// basic, tls, websocket: from the key table. A listener is enabled
	// when it is in the configuration.
	static const char *const tables[] = { "basic", "tls", "websocket" };
	for (size_t t = 0; ok && t < 3; t++) {
		cJSON *s = cJSON_AddObjectToObject(v, tables[t]);
		ok       = s != NULL;
		if (ok && t > 0) {
			const char *l = t == 1 ? "listeners.ssl" : "listeners.ws";
			ok = cJSON_AddBoolToObject(s, "enable", get_path(native, l) != NULL)
			    != NULL;
		}
		for (size_t i = 0; ok && i < NKEYS; i++) {
			const view_key *k = &view_keys[i];
			if (strcmp(k->section, tables[t]) != 0) {
				continue;
			}
			const cJSON *src = get_path(native, k->path);
			cJSON       *dup;
			if (src == NULL) {
				dup = cJSON_CreateNull();
			} else if (k->scheme != NULL && cJSON_IsString(src)
			    && strstr(src->valuestring, "://") == NULL) {
				char buf[512];
				snprintf(buf, sizeof(buf), "%s%s", k->scheme, src->valuestring);
				dup = cJSON_CreateString(buf);
			} else {
				dup = cJSON_Duplicate(src, true);
			}
			ok = dup != NULL && cJSON_AddItemToObject(s, k->key, dup);
		}
	}
	// Sections that have the same shape in both.
	if (ok) {
		ok = cJSON_AddItemToObject(v, "http_server", section_or_off(native, "http_server"))
		    && cJSON_AddItemToObject(v, "webhook", section_or_off(native, "webhook"));
	}
	// auth without http_auth, which NanoMQ shows as auth_http.
	cJSON *auth = ok ? section_or_off(native, "auth") : NULL;
	cJSON *ah
	    = auth != NULL ? cJSON_DetachItemFromObjectCaseSensitive(auth, "http_auth") : NULL;
	if (ok) {
		ok   = cJSON_AddItemToObject(v, "auth", auth);
		auth = NULL;
	}
	if (ok && !cJSON_IsObject(ah)) {
		cJSON_Delete(ah);
		ah = cJSON_CreateObject();
		ok = ah != NULL && cJSON_AddBoolToObject(ah, "enable", false) != NULL;
	}
	if (ok) {
		ok = cJSON_AddItemToObject(v, "auth_http", ah);
		ah = NULL;
	}
	cJSON_Delete(auth);
	cJSON_Delete(ah);
	if (ok) {
		ok = cJSON_AddItemToObject(v, "sqlite", section_or_off(native, "sqlite"));
	}
	// bridge: {"nodes":[{"name":..., <bridges.mqtt.name>}...],
	// "sqlite": bridges.mqtt.cache}.
	cJSON *br       = ok ? cJSON_AddObjectToObject(v, "bridge") : NULL;
	cJSON *nodes    = br != NULL ? cJSON_AddArrayToObject(br, "nodes") : NULL;
	ok              = nodes != NULL;
	const cJSON *mq = get_path(native, "bridges.mqtt");
	const cJSON *b;
	cJSON_ArrayForEach(b, mq)
	{
		if (!ok || strcmp(b->string, "cache") == 0 || !cJSON_IsObject(b)) {
			continue;
		}
		cJSON *n = cJSON_Duplicate(b, true);
		ok       = n != NULL && cJSON_AddStringToObject(n, "name", b->string) != NULL
		    && cJSON_AddItemToArray(nodes, n);
	}
	if (ok) {
		ok = cJSON_AddItemToObject(
		    br, "sqlite", section_or_off(native, "bridges.mqtt.cache"));
	}
	cJSON *aws = ok ? cJSON_AddObjectToObject(v, "aws_bridge") : NULL;
	ok         = aws != NULL && cJSON_AddArrayToObject(aws, "nodes") != NULL;
	// log (extension: no NanoMQ section covers it).
	const cJSON *log = get_path(native, "log");
	if (ok && log != NULL) {
		ok = cJSON_AddItemToObject(v, "log", cJSON_Duplicate(log, true));
	}
	if (!ok) {
		cJSON_Delete(v);
		return NULL;
	}
	return v;
}

// Strips a URL scheme ("nmq-tcp://host:port" -> "host:port").
static cJSON *bind_value(const cJSON *v)
{
	if (!cJSON_IsString(v)) {
		return cJSON_Duplicate(v, true);
	}
	const char *s = strstr(v->valuestring, "://");
	return cJSON_CreateString(s != NULL ? s + 3 : v->valuestring);
}

// Translates one table-driven section (basic, tls, websocket).
static bool put_table(const char *sec, const cJSON *in, cJSON *out, char *err, size_t errlen)
{
	const cJSON *c;
	cJSON_ArrayForEach(c, in)
	{
		const view_key *k = NULL;
		if (cJSON_IsNull(c)) {
			continue; // not set, as GET shows it
		}
		for (size_t i = 0; k == NULL && i < NKEYS; i++) {
			if (strcmp(view_keys[i].section, sec) == 0
			    && strcmp(view_keys[i].key, c->string) == 0) {
				k = &view_keys[i];
			}
		}
		for (size_t i = 0; k == NULL && i < NALIASES; i++) {
			if (strcmp(view_aliases[i].section, sec) == 0
			    && strcmp(view_aliases[i].key, c->string) == 0) {
				k = &view_aliases[i];
			}
		}
		if (k == NULL && strcmp(c->string, "enable") == 0 && strcmp(sec, "basic") != 0) {
			const char *p = strcmp(sec, "tls") == 0 ? "listeners.ssl.enable"
			                                        : "listeners.ws.enable";
			if (!set_path(out, p, cJSON_Duplicate(c, true))) {
				goto oom;
			}
			continue;
		}
		if (k == NULL) {
			snprintf(err, errlen, "unknown key %s.%s", sec, c->string);
			return false;
		}
		if (!set_path(out, k->path,
		        k->scheme != NULL ? bind_value(c) : cJSON_Duplicate(c, true))) {
			goto oom;
		}
	}
	return true;
oom:
	snprintf(err, errlen, "out of memory");
	return false;
}

// Translates NanoMQ's bridge section.
static bool put_bridge(const cJSON *in, cJSON *out, char *err, size_t errlen)
{
	const cJSON *c;
	cJSON_ArrayForEach(c, in)
	{
		if (strcmp(c->string, "sqlite") == 0) {
			if (!set_path(out, "bridges.mqtt.cache", cJSON_Duplicate(c, true))) {
				goto oom;
			}
			continue;
		}
		if (strcmp(c->string, "nodes") != 0 || !cJSON_IsArray(c)) {
			snprintf(
			    err, errlen, "bridge: expected \"nodes\" (an array) and \"sqlite\"");
			return false;
		}
		const cJSON *n;
		cJSON_ArrayForEach(n, c)
		{
			const cJSON *name = cJSON_GetObjectItemCaseSensitive(n, "name");
			if (!cJSON_IsString(name) || name->valuestring[0] == '\0'
			    || strcmp(name->valuestring, "cache") == 0
			    || strlen(name->valuestring) > 60 || strchr(name->valuestring, '.')) {
				snprintf(err, errlen,
				    "bridge.nodes: each node needs a \"name\" (not \"cache\", no "
				    "'.')");
				return false;
			}
			cJSON *mq = cJSON_GetObjectItemCaseSensitive(out, "bridges");
			mq = mq != NULL ? cJSON_GetObjectItemCaseSensitive(mq, "mqtt") : NULL;
			if (mq == NULL) {
				if (!set_path(out, "bridges.mqtt", cJSON_CreateObject())) {
					goto oom;
				}
				mq = cJSON_GetObjectItemCaseSensitive(
				    cJSON_GetObjectItemCaseSensitive(out, "bridges"), "mqtt");
			}
			cJSON *node = cJSON_Duplicate(n, true);
			if (node == NULL) {
				goto oom;
			}
			cJSON_DeleteItemFromObjectCaseSensitive(node, "name");
			cJSON_DeleteItemFromObjectCaseSensitive(mq, name->valuestring);
			if (!cJSON_AddItemToObject(mq, name->valuestring, node)) {
				cJSON_Delete(node);
				goto oom;
			}
		}
	}
	return true;
oom:
	snprintf(err, errlen, "out of memory");
	return false;
}

// Merges the object src into the object dst: objects in both are merged,
// anything else in src replaces dst's member. Returns false on allocation
// failure.
static bool merge_into(cJSON *dst, const cJSON *src)
{
	const cJSON *c;
	cJSON_ArrayForEach(c, src)
	{
		cJSON *d = cJSON_GetObjectItemCaseSensitive(dst, c->string);
		if (cJSON_IsObject(d) && cJSON_IsObject(c)) {
			if (!merge_into(d, c)) {
				return false;
			}
			continue;
		}
		cJSON *dup = cJSON_Duplicate(c, true);
		if (dup == NULL) {
			return false;
		}
		cJSON_DeleteItemFromObjectCaseSensitive(dst, c->string);
		if (!cJSON_AddItemToObject(dst, c->string, dup)) {
			cJSON_Delete(dup);
			return false;
		}
	}
	return true;
}

cJSON *rest_conf_nanomq_translate(const cJSON *data, char *err, size_t errlen)
{
	cJSON *out = cJSON_CreateObject();
	if (out == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	const cJSON *s;
	cJSON_ArrayForEach(s, data)
	{
		const char *name = s->string;
		bool        ok   = true;
		if (strcmp(name, "basic") == 0 || strcmp(name, "tls") == 0
		    || strcmp(name, "websocket") == 0) {
			if (!cJSON_IsObject(s)) {
				snprintf(err, errlen, "%s: expected an object", name);
				ok = false;
			} else {
				ok = put_table(name, s, out, err, errlen);
			}
		} else if (strcmp(name, "auth_http") == 0) {
			ok = set_path(out, "auth.http_auth", cJSON_Duplicate(s, true));
			if (!ok) {
				snprintf(err, errlen, "out of memory");
			}
		} else if (strcmp(name, "auth") == 0 && cJSON_IsArray(s)) {
			snprintf(err, errlen,
			    "auth: a list of logins is not read here; users go in the password "
			    "file (auth.password)");
			ok = false;
		} else if (strcmp(name, "bridge") == 0) {
			ok = cJSON_IsObject(s) && put_bridge(s, out, err, errlen);
			if (!cJSON_IsObject(s)) {
				snprintf(err, errlen, "bridge: expected an object");
			}
		} else if (strcmp(name, "aws_bridge") == 0) {
			const cJSON *n = cJSON_GetObjectItemCaseSensitive(s, "nodes");
			if (cJSON_GetArraySize(n) > 0) {
				snprintf(
				    err, errlen, "aws_bridge: AWS IoT bridges are not supported");
				ok = false;
			}
		} else {
			// The broker's own sections (and http_server, webhook,
			// sqlite, auth, which have NanoMQ's shape): merged as given.
			cJSON *have = cJSON_GetObjectItemCaseSensitive(out, name);
			if (cJSON_IsObject(have) && cJSON_IsObject(s)) {
				ok = merge_into(have, s);
				if (!ok) {
					snprintf(err, errlen, "out of memory");
				}
			} else {
				cJSON_DeleteItemFromObjectCaseSensitive(out, name);
				ok = cJSON_AddItemToObject(out, name, cJSON_Duplicate(s, true));
				if (!ok) {
					snprintf(err, errlen, "out of memory");
				}
			}
		}
		if (!ok) {
			cJSON_Delete(out);
			return NULL;
		}
	}
	return out;
}
