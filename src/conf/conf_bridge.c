// The `bridges.mqtt` section: one conf_bridge per named object, its
// forwards and subscriptions, and the shared offline cache
// (`bridges.mqtt.cache`). Every key is a row of the schema under
// "bridges.mqtt.<name>." (conf_schema.c); this file walks the objects,
// applies the rows and checks what spans keys (server URL, topics).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nng/codec/mqtt_codec.h"
#include "src/conf/ascii.h"
#include "src/conf/conf_int.h"

#define BR_PREFIX     "bridges.mqtt.<name>."
#define CONF_PATH_MAX 400

// Fills base with the defaults of every schema row of the given base.
static void apply_defaults(int which, void *base)
{
	char why[200];
	for (size_t i = 0; i < conf_schema_len; i++) {
		const conf_key *k = &conf_schema[i];
		conf_val        v;
		if (k->base != which || k->store == CONF_ST_NONE || k->def == NULL) {
			continue;
		}
		if (conf_value_parse(k, k->def, false, &v, why, sizeof(why)) == 0) {
			conf_value_store(k, base, &v);
		}
	}
}

// Frees the strings of the rows of the given base in base.
static void free_strings(int which, void *base)
{
	for (size_t i = 0; i < conf_schema_len; i++) {
		const conf_key *k = &conf_schema[i];
		if (k->base == which && k->store == CONF_ST_STR) {
			char **p = (char **)((char *)base + k->off);
			free(*p);
			*p = NULL;
		}
	}
}

static void props_free(conf_props *p)
{
	for (int i = 0; i < 2 * p->n; i++) {
		free(p->kv[i]);
	}
	free(p->kv);
	p->kv = NULL;
	p->n  = 0;
}

// Copies src into dst (dst's old content is not freed). Returns 0 or -1.
static int props_dup(conf_props *dst, const conf_props *src)
{
	dst->kv = NULL;
	dst->n  = 0;
	if (src->n == 0) {
		return 0;
	}
	if ((dst->kv = calloc((size_t)src->n * 2, sizeof(char *))) == NULL) {
		return -1;
	}
	dst->n = src->n;
	for (int i = 0; i < 2 * src->n; i++) {
		if ((dst->kv[i] = strdup(src->kv[i])) == NULL) {
			return -1;
		}
	}
	return 0;
}

static bool props_equal(const conf_props *a, const conf_props *b)
{
	if (a->n != b->n) {
		return false;
	}
	for (int i = 0; i < 2 * a->n; i++) {
		if (strcmp(a->kv[i], b->kv[i]) != 0) {
			return false;
		}
	}
	return true;
}

// The user properties of a bridge (which one the key's path says), or NULL.
static conf_props *props_of(conf_bridge *b, const char *path)
{
	const char *leaf = path + strlen(BR_PREFIX);
	if (strcmp(leaf, "conn_properties.user_property") == 0) {
		return &b->cp_user_props;
	}
	if (strcmp(leaf, "will.properties.user_property") == 0) {
		return &b->will_user_props;
	}
	if (strcmp(leaf, "sub_properties.user_property") == 0) {
		return &b->sub_user_props;
	}
	return NULL;
}

// Frees every bridge of conf.
void conf_bridges_free(nmq_conf *conf)
{
	for (int i = 0; i < conf->n_bridges; i++) {
		conf_bridge *b = &conf->bridges[i];
		for (int j = 0; j < b->n_fwds; j++) {
			free_strings(CONF_BASE_BRIDGE_FWD, &b->fwds[j]);
		}
		for (int j = 0; j < b->n_subs; j++) {
			free_strings(CONF_BASE_BRIDGE_SUB, &b->subs[j]);
		}
		for (int j = 0; j < b->n_hybrid_servers; j++) {
			free(b->hybrid_servers[j]);
		}
		free(b->hybrid_servers);
		free(b->fwds);
		free(b->subs);
		props_free(&b->cp_user_props);
		props_free(&b->will_user_props);
		props_free(&b->sub_user_props);
		free_strings(CONF_BASE_BRIDGE, b);
		free(b->name);
	}
	free(conf->bridges);
	conf->bridges   = NULL;
	conf->n_bridges = 0;
}

static bool str_eq(const char *a, const char *b)
{
	if (a == NULL || b == NULL) {
		return a == b;
	}
	return strcmp(a, b) == 0;
}

// Compares the rows of one base in a and b.
static bool rows_equal(int which, const void *a, const void *b)
{
	for (size_t i = 0; i < conf_schema_len; i++) {
		const conf_key *k = &conf_schema[i];
		if (k->base != which || k->store == CONF_ST_NONE) {
			continue;
		}
		const char *pa = (const char *)a + k->off;
		const char *pb = (const char *)b + k->off;
		bool        eq = true;
		switch (k->store) {
		case CONF_ST_BOOL:
			eq = *(const bool *)pa == *(const bool *)pb;
			break;
		case CONF_ST_INT:
			eq = *(const int *)pa == *(const int *)pb;
			break;
		case CONF_ST_U32:
			eq = *(const uint32_t *)pa == *(const uint32_t *)pb;
			break;
		case CONF_ST_U64:
			eq = *(const uint64_t *)pa == *(const uint64_t *)pb;
			break;
		case CONF_ST_DOUBLE:
			eq = *(const double *)pa == *(const double *)pb;
			break;
		case CONF_ST_STR:
			eq = str_eq(*(char *const *)pa, *(char *const *)pb);
			break;
		default:
			break;
		}
		if (!eq) {
			return false;
		}
	}
	return true;
}

bool conf_bridge_equal(const conf_bridge *a, const conf_bridge *b)
{
	if (!str_eq(a->name, b->name) || a->tls != b->tls || a->n_fwds != b->n_fwds
	    || a->n_subs != b->n_subs || a->n_hybrid_servers != b->n_hybrid_servers
	    || !rows_equal(CONF_BASE_BRIDGE, a, b)
	    || !props_equal(&a->cp_user_props, &b->cp_user_props)
	    || !props_equal(&a->will_user_props, &b->will_user_props)
	    || !props_equal(&a->sub_user_props, &b->sub_user_props)) {
		return false;
	}
	for (int i = 0; i < a->n_hybrid_servers; i++) {
		if (!str_eq(a->hybrid_servers[i], b->hybrid_servers[i])) {
			return false;
		}
	}
	for (int i = 0; i < a->n_fwds; i++) {
		if (!rows_equal(CONF_BASE_BRIDGE_FWD, &a->fwds[i], &b->fwds[i])) {
			return false;
		}
	}
	for (int i = 0; i < a->n_subs; i++) {
		if (!rows_equal(CONF_BASE_BRIDGE_SUB, &a->subs[i], &b->subs[i])) {
			return false;
		}
	}
	return true;
}

const conf_bridge *conf_bridge_find(const nmq_conf *c, const char *name)
{
	for (int i = 0; i < c->n_bridges; i++) {
		if (strcmp(c->bridges[i].name, name) == 0) {
			return &c->bridges[i];
		}
	}
	return NULL;
}

// Splits "mqtt-tcp://host:port" (or tls+mqtt-tcp://) into its parts.
// Returns 0, or -1 with the reason in why.
int conf_bridge_url(
    const char *url, bool *tls, char *host, size_t hostlen, int *port, char *why, size_t whylen)
{
	const char *rest;
	if (strncmp(url, "mqtt-tcp://", 11) == 0) {
		*tls = false;
		rest = url + 11;
	} else if (strncmp(url, "tls+mqtt-tcp://", 15) == 0) {
		*tls = true;
		rest = url + 15;
	} else if (strncmp(url, "mqtt-quic://", 12) == 0) {
		snprintf(why, whylen, "\"%.100s\": QUIC is not supported", url);
		return -1;
	} else {
		snprintf(why, whylen,
		    "\"%.100s\": expected mqtt-tcp://host:port or tls+mqtt-tcp://host:port", url);
		return -1;
	}
	const char *colon = strrchr(rest, ':');
	const char *hs    = rest;
	size_t      hl;
	if (rest[0] == '[') {
		const char *close = strchr(rest, ']');
		if (close == NULL || close[1] != ':') {
			snprintf(why, whylen, "\"%.100s\": bad IPv6 address", url);
			return -1;
		}
		hs    = rest + 1;
		hl    = (size_t)(close - hs);
		colon = close + 1;
	} else {
		if (colon == NULL) {
			snprintf(why, whylen, "\"%.100s\": no port", url);
			return -1;
		}
		hl = (size_t)(colon - rest);
	}
	if (hl == 0 || hl >= hostlen) {
		snprintf(why, whylen, "\"%.100s\": bad host", url);
		return -1;
	}
	char *end;
	long  p = strtol(colon + 1, &end, 10);
	if (end == colon + 1 || *end != '\0' || p < 1 || p > 65535) {
		snprintf(why, whylen, "\"%.100s\": bad port", url);
		return -1;
	}
	memcpy(host, hs, hl);
	host[hl] = '\0';
	*port    = (int)p;
	return 0;
}

// Applies the members of an object node to base, with rows found under
// schema prefix spre (e.g. "bridges.mqtt.<name>.ssl") and messages naming
// dpre (e.g. "bridges.mqtt.b1.ssl").
static void walk_obj(conf_ctx *ctx, const cJSON *obj, const char *spre, const char *dpre,
    void *base, int which, bool *quic_warned);

// Reads an array of objects (forwards or subscription) of bridge b.
static void walk_list(
    conf_ctx *ctx, const cJSON *arr, const char *spre, const char *dpre, conf_bridge *b, bool fwd)
{
	if (!cJSON_IsArray(arr)) {
		conf_key_msg(ctx, true, arr, dpre, "expected an array of objects");
		return;
	}
	int n = cJSON_GetArraySize(arr);
	if (n == 0) {
		return;
	}
	size_t sz   = fwd ? sizeof(conf_bridge_fwd) : sizeof(conf_bridge_sub);
	void  *list = calloc((size_t)n, sz);
	if (list == NULL) {
		conf_key_msg(ctx, true, arr, dpre, "out of memory");
		return;
	}
	if (fwd) {
		b->fwds = list;
	} else {
		b->subs = list;
	}
	int i = 0;
	for (const cJSON *e = arr->child; e != NULL; e = e->next, i++) {
		char dkey[CONF_PATH_MAX];
		snprintf(dkey, sizeof(dkey), "%s[%d]", dpre, i);
		void *item = (char *)list + (size_t)i * sz;
		apply_defaults(fwd ? CONF_BASE_BRIDGE_FWD : CONF_BASE_BRIDGE_SUB, item);
		if (fwd) {
			b->n_fwds = i + 1;
		} else {
			b->n_subs = i + 1;
		}
		if (fwd && cJSON_IsString(e)) {
			// Older NanoMQ files: `forwards = ["a/#", ...]`, a filter
			// forwarded under the topics as published.
			conf_bridge_fwd *f = item;
			f->local_topic     = strdup(e->valuestring);
			f->remote_topic    = strdup("");
			if (f->local_topic == NULL || f->remote_topic == NULL) {
				conf_key_msg(ctx, true, e, dkey, "out of memory");
				continue;
			}
		} else if (!cJSON_IsObject(e)) {
			conf_key_msg(ctx, true, e, dkey,
			    fwd ? "expected an object (or a filter string)" : "expected an object");
			continue;
		} else {
			walk_obj(ctx, e, spre, dkey, item,
			    fwd ? CONF_BASE_BRIDGE_FWD : CONF_BASE_BRIDGE_SUB, NULL);
		}
		if (fwd) {
			conf_bridge_fwd *f = item;
			if (f->local_topic == NULL) {
				conf_key_msg(ctx, true, e, dkey, "local_topic is required");
			} else if (!mqtt_topic_filter_valid(
			               (const uint8_t *)f->local_topic, strlen(f->local_topic))) {
				conf_key_msg(ctx, true, e, dkey,
				    "local_topic \"%.100s\" is not a valid filter", f->local_topic);
			}
			if (f->remote_topic == NULL) {
				conf_key_msg(ctx, true, e, dkey,
				    "remote_topic is required (\"\" keeps the local topic)");
			} else if (f->remote_topic[0] != '\0'
			    && !mqtt_topic_name_valid(
			        (const uint8_t *)f->remote_topic, strlen(f->remote_topic))) {
				conf_key_msg(ctx, true, e, dkey,
				    "remote_topic \"%.100s\" is not a valid topic name",
				    f->remote_topic);
			}
			if ((f->prefix != NULL && strpbrk(f->prefix, "+#") != NULL)
			    || (f->suffix != NULL && strpbrk(f->suffix, "+#") != NULL)) {
				conf_key_msg(
				    ctx, true, e, dkey, "prefix and suffix may not hold + or #");
			}
		} else {
			conf_bridge_sub *s = item;
			if (s->remote_topic == NULL
			    || !mqtt_topic_filter_valid(
			        (const uint8_t *)s->remote_topic, strlen(s->remote_topic))) {
				conf_key_msg(ctx, true, e, dkey,
				    "remote_topic is required (a valid filter)");
			}
			if (s->local_topic != NULL && s->local_topic[0] != '\0'
			    && !mqtt_topic_name_valid(
			        (const uint8_t *)s->local_topic, strlen(s->local_topic))) {
				conf_key_msg(ctx, true, e, dkey,
				    "local_topic \"%.100s\" is not a valid topic name",
				    s->local_topic);
			}
			if ((s->prefix != NULL && strpbrk(s->prefix, "+#") != NULL)
			    || (s->suffix != NULL && strpbrk(s->suffix, "+#") != NULL)) {
				conf_key_msg(
				    ctx, true, e, dkey, "prefix and suffix may not hold + or #");
			}
		}
	}
}

// Reads hybrid_servers: an array of URLs.
static void read_hybrid(conf_ctx *ctx, const cJSON *arr, const char *dkey, conf_bridge *b)
{
	if (!cJSON_IsArray(arr)) {
		conf_key_msg(ctx, true, arr, dkey, "expected an array of URLs");
		return;
	}
	int n = cJSON_GetArraySize(arr);
	if (n == 0) {
		return;
	}
	b->hybrid_servers = calloc((size_t)n, sizeof(char *));
	if (b->hybrid_servers == NULL) {
		conf_key_msg(ctx, true, arr, dkey, "out of memory");
		return;
	}
	for (const cJSON *e = arr->child; e != NULL; e = e->next) {
		char        buf[64], host[256], why[200];
		const char *t = conf_node_text(ctx, e, buf, sizeof(buf));
		bool        tls;
		int         port;
		if (t == NULL || !cJSON_IsString(e)) {
			conf_key_msg(ctx, true, e, dkey, "expected a URL string");
			continue;
		}
		if (conf_bridge_url(t, &tls, host, sizeof(host), &port, why, sizeof(why)) != 0) {
			conf_key_msg(ctx, true, e, dkey, "%s", why);
			continue;
		}
		char *dup = strdup(t);
		if (dup == NULL) {
			conf_key_msg(ctx, true, e, dkey, "out of memory");
			continue;
		}
		b->hybrid_servers[b->n_hybrid_servers++] = dup;
	}
}

// Reads `{key = "value", ...}` (MQTT 5 user properties, UTF-8 strings;
// numbers and booleans are taken as written) into p, replacing it.
static void read_user_props(conf_ctx *ctx, const cJSON *obj, const char *dkey, conf_props *p)
{
	props_free(p);
	int n = cJSON_GetArraySize(obj);
	if (n == 0) {
		return;
	}
	if (n > 64) {
		conf_key_msg(ctx, true, obj, dkey, "at most 64 user properties");
		return;
	}
	if ((p->kv = calloc((size_t)n * 2, sizeof(char *))) == NULL) {
		conf_key_msg(ctx, true, obj, dkey, "out of memory");
		return;
	}
	for (const cJSON *c = obj->child; c != NULL; c = c->next) {
		char        num[64];
		const char *v = NULL;
		if (cJSON_IsString(c)) {
			v = c->valuestring;
		} else if (cJSON_IsNumber(c)) {
			snprintf(num, sizeof(num), "%.17g", c->valuedouble);
			v = num;
		} else if (cJSON_IsBool(c)) {
			v = cJSON_IsTrue(c) ? "true" : "false";
		}
		char key[CONF_PATH_MAX + 72];
		snprintf(key, sizeof(key), "%s.%.64s", dkey, c->string);
		if (v == NULL) {
			conf_key_msg(ctx, true, c, key, "a user property's value is a string");
			continue;
		}
		if (strlen(c->string) > 65535 || strlen(v) > 65535
		    || !mqtt_utf8_valid((const uint8_t *)c->string, strlen(c->string))
		    || !mqtt_utf8_valid((const uint8_t *)v, strlen(v))) {
			conf_key_msg(ctx, true, c, key, "not a valid MQTT string");
			continue;
		}
		char *ks = strdup(c->string), *vs = strdup(v);
		if (ks == NULL || vs == NULL) {
			free(ks);
			free(vs);
			conf_key_msg(ctx, true, c, key, "out of memory");
			continue;
		}
		p->kv[2 * p->n]     = ks;
		p->kv[2 * p->n + 1] = vs;
		p->n++;
	}
}

static void walk_obj(conf_ctx *ctx, const cJSON *obj, const char *spre, const char *dpre,
    void *base, int which, bool *quic_warned)
{
	for (const cJSON *c = obj->child; c != NULL; c = c->next) {
		char skey[CONF_PATH_MAX], dkey[CONF_PATH_MAX];
		if (snprintf(skey, sizeof(skey), "%s.%s", spre, c->string) >= (int)sizeof(skey)
		    || snprintf(dkey, sizeof(dkey), "%s.%s", dpre, c->string)
		        >= (int)sizeof(dkey)) {
			conf_key_msg(
			    ctx, false, c, dpre, "unknown key \"%.64s...\"; ignored", c->string);
			continue;
		}
		if (cJSON_IsNull(c)) {
			continue;
		}
		if (quic_warned != NULL
		    && (strncmp(c->string, "quic_", 5) == 0
		        || strcmp(c->string, "multi_stream") == 0)) {
			if (!*quic_warned) {
				conf_key_msg(ctx, false, c, dkey, "QUIC is not supported; ignored");
				*quic_warned = true;
			}
			continue;
		}
		bool            alias = false;
		const conf_key *k     = conf_schema_find(skey, &alias);
		if (k == NULL) {
			conf_key_msg(ctx, false, c, dkey, "unknown key; ignored");
			continue;
		}
		if (k->type == CONF_T_SECTION) {
			if (!cJSON_IsObject(c)) {
				conf_key_msg(ctx, true, c, dkey, "expected an object");
				continue;
			}
			walk_obj(ctx, c, k->path, dkey, base, which, quic_warned);
			continue;
		}
		if (k->type == CONF_T_OBJECT) {
			if (!cJSON_IsObject(c)) {
				conf_key_msg(ctx, true, c, dkey, "expected an object");
			} else if (which == CONF_BASE_BRIDGE && props_of(base, k->path) != NULL) {
				read_user_props(ctx, c, dkey, props_of(base, k->path));
			}
			continue;
		}
		if (k->type == CONF_T_ARRAY) {
			if (which != CONF_BASE_BRIDGE) {
				continue;
			}
			const char *leaf = k->path + strlen(BR_PREFIX);
			if (strcmp(leaf, "forwards") == 0) {
				walk_list(ctx, c, k->path, dkey, base, true);
			} else if (strcmp(leaf, "subscription") == 0) {
				walk_list(ctx, c, k->path, dkey, base, false);
			} else if (strcmp(leaf, "hybrid_servers") == 0) {
				read_hybrid(ctx, c, dkey, base);
			}
			continue;
		}
		if (k->base != which && k->store != CONF_ST_NONE) {
			conf_key_msg(ctx, false, c, dkey, "unknown key; ignored");
			continue;
		}
		if (k->type == CONF_T_BOOL && k->store == CONF_ST_BOOL && cJSON_IsNumber(c)
		    && (c->valuedouble == 0 || c->valuedouble == 1)) {
			// NanoMQ's bridge examples write flags as 0 / 1.
			*(bool *)((char *)base + k->off) = c->valuedouble == 1;
			continue;
		}
		(void)conf_apply_key(ctx, k, dkey, c, base, alias);
	}
}

// Reads bridges.mqtt.cache into conf.
static void read_cache(conf_ctx *ctx, const cJSON *obj)
{
	if (!cJSON_IsObject(obj)) {
		conf_key_msg(ctx, true, obj, "bridges.mqtt.cache", "expected an object");
		return;
	}
	ctx->conf->bridge_cache_enable = true;
	for (const cJSON *c = obj->child; c != NULL; c = c->next) {
		char key[CONF_PATH_MAX];
		if (snprintf(key, sizeof(key), "bridges.mqtt.cache.%s", c->string)
		        >= (int)sizeof(key)
		    || cJSON_IsNull(c)) {
			continue;
		}
		bool            alias = false;
		const conf_key *k     = conf_schema_find(key, &alias);
		if (k == NULL || k->base != CONF_BASE_CONF) {
			conf_key_msg(ctx, false, c, key, "unknown key; ignored");
			continue;
		}
		(void)conf_apply_key(ctx, k, key, c, ctx->conf, alias);
	}
}

// Checks the bridges.mqtt section and fills ctx->conf->bridges.
void conf_check_bridges(conf_ctx *ctx, const cJSON *node)
{
	if (!cJSON_IsObject(node)) {
		conf_key_msg(ctx, true, node, "bridges.mqtt", "expected an object");
		return;
	}
	int n = 0;
	for (const cJSON *c = node->child; c != NULL; c = c->next) {
		n += strcmp(c->string, "cache") != 0;
	}
	if (n > 0) {
		ctx->conf->bridges = calloc((size_t)n, sizeof(conf_bridge));
		if (ctx->conf->bridges == NULL) {
			conf_key_msg(ctx, true, node, "bridges.mqtt", "out of memory");
			return;
		}
	}
	for (const cJSON *c = node->child; c != NULL; c = c->next) {
		if (strcmp(c->string, "cache") == 0) {
			read_cache(ctx, c);
			continue;
		}
		char dpre[CONF_PATH_MAX];
		snprintf(dpre, sizeof(dpre), "bridges.mqtt.%.100s", c->string);
		if (!cJSON_IsObject(c)) {
			conf_key_msg(ctx, true, c, dpre, "expected an object (one bridge)");
			continue;
		}
		conf_bridge *b = &ctx->conf->bridges[ctx->conf->n_bridges++];
		apply_defaults(CONF_BASE_BRIDGE, b);
		b->name = strdup(c->string);
		if (b->name == NULL) {
			conf_key_msg(ctx, true, c, dpre, "out of memory");
			continue;
		}
		for (const char *p = b->name; *p != '\0'; p++) {
			if (strchr("/+#", *p) != NULL || (unsigned char)*p < 0x20) {
				conf_key_msg(
				    ctx, true, c, dpre, "a bridge name may not hold /, + or #");
				break;
			}
		}
		bool quic_warned = false;
		walk_obj(ctx, c, "bridges.mqtt.<name>", dpre, b, CONF_BASE_BRIDGE, &quic_warned);
		char host[256], why[256];
		int  port;
		if (b->server == NULL) {
			conf_key_msg(ctx, true, c, dpre, "server is required");
		} else if (conf_bridge_url(
		               b->server, &b->tls, host, sizeof(host), &port, why, sizeof(why))
		    != 0) {
			char key[CONF_PATH_MAX + 8];
			snprintf(key, sizeof(key), "%s.server", dpre);
			const cJSON *sn = cJSON_GetObjectItemCaseSensitive(c, "server");
			conf_key_msg(ctx, true, sn != NULL ? sn : c, key, "%s", why);
		}
		if (b->will_topic != NULL
		    && !mqtt_topic_name_valid(
		        (const uint8_t *)b->will_topic, strlen(b->will_topic))) {
			conf_key_msg(ctx, true, c, dpre, "will.topic is not a valid topic name");
		}
		if (b->will_response_topic != NULL && b->will_response_topic[0] != '\0'
		    && !mqtt_topic_name_valid(
		        (const uint8_t *)b->will_response_topic, strlen(b->will_response_topic))) {
			conf_key_msg(ctx, true, c, dpre,
			    "will.properties.response_topic is not a valid topic name");
		}
		if ((b->keyfile == NULL) != (b->certfile == NULL)) {
			conf_key_msg(ctx, true, c, dpre, "ssl: keyfile and certfile go together");
		}
		for (int j = 0; j + 1 < ctx->conf->n_bridges; j++) {
			// Two links with one client id on one remote take the session
			// from each other, for ever (each connect closes the other).
			const conf_bridge *o = &ctx->conf->bridges[j];
			if (b->enable && o->enable && b->clientid != NULL && o->clientid != NULL
			    && b->server != NULL && o->server != NULL
			    && strcmp(b->clientid, o->clientid) == 0
			    && strcmp(b->server, o->server) == 0) {
				conf_key_msg(ctx, false, c, dpre,
				    "clientid \"%.100s\" and server are those of bridge %.100s: "
				    "the "
				    "remote closes one link for the other, over and over",
				    b->clientid, o->name != NULL ? o->name : "?");
			}
		}
		if (b->server != NULL && !b->tls
		    && (b->cacertfile != NULL || b->certfile != NULL || b->keyfile != NULL)) {
			// TLS follows the URL: files for it beside no TLS URL are a
			// mistake the link would only show as a failed connection.
			bool any = false;
			for (int i = 0; i < b->n_hybrid_servers && !any; i++) {
				bool tls = false;
				(void)conf_bridge_url(b->hybrid_servers[i], &tls, host,
				    sizeof(host), &port, why, sizeof(why));
				any = tls;
			}
			if (!any) {
				conf_key_msg(ctx, false, c, dpre,
				    "ssl files are set but no server is tls+mqtt-tcp://: the link "
				    "is "
				    "not TLS");
			}
		}
	}
}

// Copies the strings of the rows of one base (the rest was copied whole).
static int dup_strings(int which, void *base)
{
	int rc = 0;
	for (size_t i = 0; i < conf_schema_len; i++) {
		const conf_key *k = &conf_schema[i];
		if (k->base == which && k->store == CONF_ST_STR) {
			char **p = (char **)((char *)base + k->off);
			if (*p != NULL && (*p = strdup(*p)) == NULL) {
				rc = -1;
			}
		}
	}
	return rc;
}

int conf_bridge_sub_copy(conf_bridge_sub *dst, const conf_bridge_sub *src)
{
	*dst = *src;
	return dup_strings(CONF_BASE_BRIDGE_SUB, dst);
}

void conf_bridge_sub_clear(conf_bridge_sub *s)
{
	for (size_t i = 0; i < conf_schema_len; i++) {
		const conf_key *k = &conf_schema[i];
		if (k->base == CONF_BASE_BRIDGE_SUB && k->store == CONF_ST_STR) {
			char **p = (char **)((char *)s + k->off);
			free(*p);
			*p = NULL;
		}
	}
}

void conf_bridge_free(conf_bridge *b)
{
	nmq_conf c;
	memset(&c, 0, sizeof(c));
	c.bridges   = b;
	c.n_bridges = 1;
	conf_bridges_free(&c); // frees b's content and b itself
}

conf_bridge *conf_bridge_dup(const conf_bridge *src)
{
	conf_bridge *b = calloc(1, sizeof(*b));
	if (b == NULL) {
		return NULL;
	}
	*b                 = *src;
	b->cp_user_props   = (conf_props) { 0 };
	b->will_user_props = (conf_props) { 0 };
	b->sub_user_props  = (conf_props) { 0 };
	b->name            = NULL;
	b->hybrid_servers  = NULL;
	b->fwds            = NULL;
	b->subs            = NULL;
	b->n_fwds = b->n_subs = b->n_hybrid_servers = 0;
	int rc                                      = dup_strings(CONF_BASE_BRIDGE, b);
	if ((b->name = strdup(src->name)) == NULL) {
		rc = -1;
	}
	if (src->n_hybrid_servers > 0) {
		b->hybrid_servers = calloc((size_t)src->n_hybrid_servers, sizeof(char *));
		if (b->hybrid_servers == NULL) {
			rc = -1;
		}
		for (int i = 0; b->hybrid_servers != NULL && i < src->n_hybrid_servers; i++) {
			if ((b->hybrid_servers[i] = strdup(src->hybrid_servers[i])) == NULL) {
				rc = -1;
			}
			b->n_hybrid_servers = i + 1;
		}
	}
	if (src->n_fwds > 0) {
		if ((b->fwds = calloc((size_t)src->n_fwds, sizeof(*b->fwds))) == NULL) {
			rc = -1;
		}
		for (int i = 0; b->fwds != NULL && i < src->n_fwds; i++) {
			b->fwds[i] = src->fwds[i];
			b->n_fwds  = i + 1;
			rc |= dup_strings(CONF_BASE_BRIDGE_FWD, &b->fwds[i]);
		}
	}
	if (props_dup(&b->cp_user_props, &src->cp_user_props) != 0
	    || props_dup(&b->will_user_props, &src->will_user_props) != 0
	    || props_dup(&b->sub_user_props, &src->sub_user_props) != 0) {
		rc = -1;
	}
	if (src->n_subs > 0) {
		if ((b->subs = calloc((size_t)src->n_subs, sizeof(*b->subs))) == NULL) {
			rc = -1;
		}
		for (int i = 0; b->subs != NULL && i < src->n_subs; i++) {
			b->subs[i] = src->subs[i];
			b->n_subs  = i + 1;
			rc |= dup_strings(CONF_BASE_BRIDGE_SUB, &b->subs[i]);
		}
	}
	if (rc != 0) {
		conf_bridge_free(b);
		return NULL;
	}
	return b;
}
