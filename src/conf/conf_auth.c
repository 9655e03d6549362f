// The structured parts of the `auth` section: the password list and the
// ACL. Both are checked here and kept, normalised, as cJSON trees in
// nmq_conf for the auth and ACL modules (see conf.h for their shape).
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/conf/ascii.h"
#include "src/conf/conf_int.h"

// Checks auth.password and stores it as {"user": "password"} in the conf.
void conf_check_password(conf_ctx *ctx, const cJSON *node)
{
	cJSON *out;
	char   key[320];
	char   buf[64];

	if (!cJSON_IsObject(node)) {
		conf_key_msg(ctx, true, node, "auth.password",
		    "expected an object of user: password pairs, got %s",
		    cJSON_IsArray(node) ? "an array" : "a value");
		return;
	}
	if ((out = cJSON_CreateObject()) == NULL) {
		conf_key_msg(ctx, true, node, "auth.password", "out of memory");
		return;
	}
	for (const cJSON *c = node->child; c != NULL; c = c->next) {
		const char *text = conf_node_text(ctx, c, buf, sizeof(buf));
		snprintf(key, sizeof(key), "auth.password.%.200s", c->string);
		if (text == NULL) {
			conf_key_msg(ctx, true, c, key, "expected a password string, got %s",
			    cJSON_IsObject(c)      ? "an object"
			        : cJSON_IsArray(c) ? "an array"
			                           : "null");
			continue;
		}
		if (c->string[0] == '\0') {
			conf_key_msg(ctx, true, c, key, "empty user name");
			continue;
		}
		if (cJSON_AddStringToObject(out, c->string, text) == NULL) {
			conf_key_msg(ctx, true, c, key, "out of memory");
			break;
		}
	}
	cJSON_Delete(ctx->conf->auth_password);
	ctx->conf->auth_password = out;
}

// Returns true when filter is a valid topic filter ("@" prefix: literal).
static bool filter_ok(const char *f)
{
	if (f[0] == '@') {
		return f[1] != '\0';
	}
	if (f[0] == '\0') {
		return false;
	}
	for (const char *p = f; *p != '\0'; p++) {
		bool level_start = p == f || p[-1] == '/';
		bool level_end   = p[1] == '\0' || p[1] == '/';
		if (*p == '+' && !(level_start && level_end)) {
			return false;
		}
		if (*p == '#' && !(level_start && p[1] == '\0')) {
			return false;
		}
	}
	return true;
}

// Returns true when s is an IPv4 or IPv6 address, optionally with a CIDR
// prefix length.
static bool ipaddr_ok(const char *s)
{
	char          buf[64];
	const char   *slash = strchr(s, '/');
	size_t        n     = slash != NULL ? (size_t)(slash - s) : strlen(s);
	unsigned char addr[16];
	int           max;

	if (n == 0 || n >= sizeof(buf)) {
		return false;
	}
	memcpy(buf, s, n);
	buf[n] = '\0';
	if (inet_pton(AF_INET, buf, addr) == 1) {
		max = 32;
	} else if (inet_pton(AF_INET6, buf, addr) == 1) {
		max = 128;
	} else {
		return false;
	}
	if (slash != NULL) {
		char *end;
		long  len = strtol(slash + 1, &end, 10);
		if (end == slash + 1 || *end != '\0' || len < 0 || len > max) {
			return false;
		}
	}
	return true;
}

// Appends the scalar text of node to the array arr. Returns 0 or -1.
static int append_text(
    conf_ctx *ctx, cJSON *arr, const cJSON *node, const char *key, const char *what)
{
	char        buf[64];
	const char *text = conf_node_text(ctx, node, buf, sizeof(buf));

	if (text == NULL) {
		conf_key_msg(ctx, true, node, key, "expected %s, got %s", what,
		    cJSON_IsObject(node)      ? "an object"
		        : cJSON_IsArray(node) ? "an array"
		                              : "null");
		return -1;
	}
	if (!cJSON_AddItemToArray(arr, cJSON_CreateString(text))) {
		conf_key_msg(ctx, true, node, key, "out of memory");
		return -1;
	}
	return 0;
}

// Adds the ipaddr/ipaddrs field f to the "ipaddrs" array of dst. Returns 0
// or -1.
static int add_ipaddrs(conf_ctx *ctx, cJSON *dst, const cJSON *f, const char *key)
{
	cJSON *arr = cJSON_GetObjectItemCaseSensitive(dst, "ipaddrs");

	if (arr == NULL && (arr = cJSON_AddArrayToObject(dst, "ipaddrs")) == NULL) {
		conf_key_msg(ctx, true, f, key, "out of memory");
		return -1;
	}
	if (cJSON_IsArray(f)) {
		for (const cJSON *e = f->child; e != NULL; e = e->next) {
			if (append_text(ctx, arr, e, key, "an address") != 0) {
				return -1;
			}
		}
	} else if (append_text(ctx, arr, f, key, "an address") != 0) {
		return -1;
	}
	for (const cJSON *e = arr->child; e != NULL; e = e->next) {
		if (!ipaddr_ok(e->valuestring)) {
			conf_key_msg(ctx, true, f, key,
			    "\"%.64s\" is not an IP address or CIDR range", e->valuestring);
			return -1;
		}
	}
	return 0;
}

// Handles a subject field (username, clientid, ipaddr, ipaddrs) of a rule.
// Returns 1 when handled, 0 when f is not a subject field, -1 on error.
static int subject_field(conf_ctx *ctx, cJSON *dst, const cJSON *f, const char *key)
{
	char        buf[64];
	const char *text;

	if (strcmp(f->string, "ipaddr") == 0 || strcmp(f->string, "ipaddrs") == 0) {
		return add_ipaddrs(ctx, dst, f, key) == 0 ? 1 : -1;
	}
	if (strcmp(f->string, "username") != 0 && strcmp(f->string, "clientid") != 0) {
		return 0;
	}
	if ((text = conf_node_text(ctx, f, buf, sizeof(buf))) == NULL) {
		conf_key_msg(ctx, true, f, key, "expected a string, got %s",
		    cJSON_IsObject(f)      ? "an object"
		        : cJSON_IsArray(f) ? "an array"
		                           : "null");
		return -1;
	}
	if (cJSON_AddStringToObject(dst, f->string, text) == NULL) {
		conf_key_msg(ctx, true, f, key, "out of memory");
		return -1;
	}
	return 1;
}

// Checks one word field against a '|' list and stores it. Returns 0 or -1.
static int word_field(conf_ctx *ctx, cJSON *dst, const cJSON *f, const char *key, const char *words)
{
	char        buf[64];
	const char *text = conf_node_text(ctx, f, buf, sizeof(buf));
	size_t      n    = text != NULL ? strlen(text) : 0;

	for (const char *w = words; text != NULL && *w != '\0';) {
		size_t wl = ascii_cspn(w, "|");
		if (wl == n && strncmp(w, text, n) == 0) {
			if (cJSON_AddStringToObject(dst, f->string, text) == NULL) {
				conf_key_msg(ctx, true, f, key, "out of memory");
				return -1;
			}
			return 0;
		}
		w += wl + (w[wl] == '|');
	}
	conf_key_msg(ctx, true, f, key, "expected one of %s, got \"%.64s\"", words,
	    text != NULL ? text : "(not a word)");
	return -1;
}

// Checks an and/or list of subjects into dst. Returns 0 or -1.
static int subject_list(conf_ctx *ctx, cJSON *dst, const cJSON *f, const char *key)
{
	char   skey[400];
	cJSON *arr;
	int    i = 0;

	if (!cJSON_IsArray(f)) {
		conf_key_msg(ctx, true, f, key, "expected an array of objects");
		return -1;
	}
	if ((arr = cJSON_AddArrayToObject(dst, f->string)) == NULL) {
		conf_key_msg(ctx, true, f, key, "out of memory");
		return -1;
	}
	for (const cJSON *e = f->child; e != NULL; e = e->next, i++) {
		cJSON *sub;
		if (!cJSON_IsObject(e)) {
			snprintf(skey, sizeof(skey), "%.300s[%d]", key, i);
			conf_key_msg(ctx, true, e, skey, "expected an object");
			return -1;
		}
		if ((sub = cJSON_CreateObject()) == NULL || !cJSON_AddItemToArray(arr, sub)) {
			cJSON_Delete(sub);
			conf_key_msg(ctx, true, e, key, "out of memory");
			return -1;
		}
		for (const cJSON *g = e->child; g != NULL; g = g->next) {
			int rc;
			snprintf(skey, sizeof(skey), "%.300s[%d].%.60s", key, i, g->string);
			if ((rc = subject_field(ctx, sub, g, skey)) < 0) {
				return -1;
			}
			if (rc == 0) {
				conf_key_msg(ctx, true, g, skey,
				    "only username, clientid, ipaddr and ipaddrs may appear here");
				return -1;
			}
		}
	}
	return 0;
}

// Checks the topics field into dst. Returns 0 or -1.
static int topics_field(conf_ctx *ctx, cJSON *dst, const cJSON *f, const char *key)
{
	cJSON *arr = cJSON_AddArrayToObject(dst, "topics");

	if (arr == NULL) {
		conf_key_msg(ctx, true, f, key, "out of memory");
		return -1;
	}
	if (cJSON_IsArray(f)) {
		for (const cJSON *e = f->child; e != NULL; e = e->next) {
			if (append_text(ctx, arr, e, key, "a topic filter") != 0) {
				return -1;
			}
		}
	} else if (append_text(ctx, arr, f, key, "a topic filter") != 0) {
		return -1;
	}
	for (const cJSON *e = arr->child; e != NULL; e = e->next) {
		if (!filter_ok(e->valuestring)) {
			conf_key_msg(ctx, true, f, key, "\"%.64s\" is not a valid topic filter",
			    e->valuestring);
			return -1;
		}
	}
	return 0;
}

// Checks rule number i. Returns the normalised rule, or NULL after
// reporting an error.
static cJSON *check_rule(conf_ctx *ctx, const cJSON *rule, int i)
{
	char   key[64];
	char   fkey[400];
	cJSON *r;
	bool   bad = false;

	snprintf(key, sizeof(key), "auth.acl.rules[%d]", i);
	if (!cJSON_IsObject(rule)) {
		conf_key_msg(ctx, true, rule, key, "expected an object");
		return NULL;
	}
	if ((r = cJSON_CreateObject()) == NULL) {
		conf_key_msg(ctx, true, rule, key, "out of memory");
		return NULL;
	}
	for (const cJSON *f = rule->child; f != NULL && !bad; f = f->next) {
		int rc;
		snprintf(fkey, sizeof(fkey), "%s.%.200s", key, f->string);
		if (cJSON_GetObjectItemCaseSensitive(r, f->string) != NULL
		    && strcmp(f->string, "ipaddr") != 0 && strcmp(f->string, "ipaddrs") != 0) {
			conf_key_msg(ctx, true, f, fkey, "given twice");
			bad = true;
		} else if (strcmp(f->string, "permit") == 0) {
			bad = word_field(ctx, r, f, fkey, "allow|deny") != 0;
		} else if (strcmp(f->string, "action") == 0) {
			bad = word_field(ctx, r, f, fkey, "publish|subscribe|pubsub") != 0;
		} else if (strcmp(f->string, "and") == 0 || strcmp(f->string, "or") == 0) {
			bad = subject_list(ctx, r, f, fkey) != 0;
		} else if (strcmp(f->string, "topics") == 0) {
			bad = topics_field(ctx, r, f, fkey) != 0;
		} else if ((rc = subject_field(ctx, r, f, fkey)) != 0) {
			bad = rc < 0;
		} else {
			conf_key_msg(ctx, false, f, fkey, "unknown key; ignored");
		}
	}
	if (!bad && cJSON_GetObjectItemCaseSensitive(r, "permit") == NULL) {
		conf_key_msg(ctx, true, rule, key, "permit (allow or deny) is required");
		bad = true;
	}
	if (!bad && cJSON_GetObjectItemCaseSensitive(r, "action") == NULL
	    && cJSON_AddStringToObject(r, "action", "pubsub") == NULL) {
		conf_key_msg(ctx, true, rule, key, "out of memory");
		bad = true;
	}
	if (bad) {
		cJSON_Delete(r);
		return NULL;
	}
	return r;
}

// Checks auth.acl and stores it normalised in the conf.
void conf_check_acl(conf_ctx *ctx, const cJSON *node)
{
	cJSON          *out;
	cJSON          *rules;
	bool            enable = true;
	char            key[320];
	const conf_key *ek = conf_schema_find("auth.acl.enable", NULL);

	if (!cJSON_IsObject(node)) {
		conf_key_msg(ctx, true, node, "auth.acl", "expected an object, got %s",
		    cJSON_IsArray(node) ? "an array" : "a value");
		return;
	}
	if ((out = cJSON_CreateObject()) == NULL
	    || (rules = cJSON_AddArrayToObject(out, "rules")) == NULL) {
		cJSON_Delete(out);
		conf_key_msg(ctx, true, node, "auth.acl", "out of memory");
		return;
	}
	for (const cJSON *c = node->child; c != NULL; c = c->next) {
		snprintf(key, sizeof(key), "auth.acl.%.200s", c->string);
		if (strcmp(c->string, "enable") == 0) {
			char        buf[64];
			char        why[200];
			conf_val    v;
			const char *text = conf_node_text(ctx, c, buf, sizeof(buf));
			if (text == NULL
			    || conf_value_parse(ek, text, false, &v, why, sizeof(why)) != 0) {
				conf_key_msg(ctx, true, c, key, "%s",
				    text == NULL ? "expected a boolean" : why);
			} else {
				enable = v.b;
			}
		} else if (strcmp(c->string, "rules") == 0) {
			int i = 0;
			if (!cJSON_IsArray(c)) {
				conf_key_msg(ctx, true, c, key, "expected an array of rules");
				continue;
			}
			for (const cJSON *e = c->child; e != NULL; e = e->next, i++) {
				cJSON *r = check_rule(ctx, e, i);
				if (r != NULL && !cJSON_AddItemToArray(rules, r)) {
					cJSON_Delete(r);
				}
			}
		} else {
			conf_key_msg(ctx, false, c, key, "unknown key; ignored");
		}
	}
	cJSON_AddBoolToObject(out, "enable", enable);
	cJSON_Delete(ctx->conf->auth_acl);
	ctx->conf->auth_acl        = out;
	ctx->conf->auth_acl_enable = enable;
}
