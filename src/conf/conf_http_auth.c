// auth.http_auth (docs/http-auth.md): checks the section and keeps a
// normalized copy in nmq_conf.auth_http for src/events/http_authn.c.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/conf/ascii.h"
#include "src/conf/conf_int.h"

// The callouts and the placeholders each may use.
static const char *const req_names[]   = { "auth_req", "super_req", "acl_req" };
static const char *const req_holders[] = { "ucaPrpCd", "ucaPrpCd", "ucaPrpCdAtm" };

// Checks one callout (auth_req, super_req, acl_req) into out.
static void check_req(
    conf_ctx *ctx, const cJSON *node, const char *name, const char *holders, cJSON *out)
{
	char key[320];
	char buf[64];
	if (!cJSON_IsObject(node)) {
		snprintf(key, sizeof(key), "auth.http_auth.%s", name);
		conf_key_msg(ctx, true, node, key, "expected an object");
		return;
	}
	cJSON *r = cJSON_AddObjectToObject(out, name);
	if (r == NULL) {
		return;
	}
	cJSON_AddStringToObject(r, "method", "post");
	cJSON *headers = cJSON_AddObjectToObject(r, "headers");
	cJSON *params  = cJSON_AddObjectToObject(r, "params");
	bool   has_url = false;
	for (const cJSON *c = node->child; c != NULL; c = c->next) {
		snprintf(key, sizeof(key), "auth.http_auth.%s.%.200s", name, c->string);
		if (strcmp(c->string, "url") == 0) {
			const char *u = conf_node_text(ctx, c, buf, sizeof(buf));
			has_url       = true; // a bad one is reported once
			if (u == NULL
			    || (strncmp(u, "http://", 7) != 0 && strncmp(u, "https://", 8) != 0)
			    || strpbrk(u, " \r\n") != NULL) {
				conf_key_msg(ctx, true, c, key,
				    "expected an `http://host[:port]/path` or `https://...` URL");
				continue;
			}
			cJSON_AddStringToObject(r, "url", u);
		} else if (strcmp(c->string, "method") == 0) {
			const char *m = conf_node_text(ctx, c, buf, sizeof(buf));
			if (m == NULL || (!ascii_ieq(m, "post") && !ascii_ieq(m, "get"))) {
				conf_key_msg(ctx, true, c, key, "expected `post` or `get`");
				continue;
			}
			cJSON_ReplaceItemInObject(
			    r, "method", cJSON_CreateString(ascii_ieq(m, "get") ? "get" : "post"));
		} else if (strcmp(c->string, "headers") == 0 || strcmp(c->string, "params") == 0) {
			bool is_hdr = c->string[0] == 'h';
			if (!cJSON_IsObject(c)) {
				conf_key_msg(
				    ctx, true, c, key, "expected an object of name = value pairs");
				continue;
			}
			for (const cJSON *h = c->child; h != NULL; h = h->next) {
				char        hk[400];
				const char *v = conf_node_text(ctx, h, buf, sizeof(buf));
				snprintf(hk, sizeof(hk), "%s.%.64s", key, h->string);
				if (v == NULL || strpbrk(v, "\r\n") != NULL
				    || strpbrk(h->string, " \t\r\n:=&?") != NULL
				    || h->string[0] == '\0') {
					conf_key_msg(ctx, true, h, hk,
					    "expected a name and a one-line string value");
					continue;
				}
				if (!is_hdr) {
					for (const char *q = strchr(v, '%'); q != NULL;
					     q             = strchr(q + 2, '%')) {
						if (q[1] == '\0' || strchr(holders, q[1]) == NULL) {
							conf_key_msg(ctx, true, h, hk,
							    "unknown placeholder `%%%c` (allowed: "
							    "%s)",
							    q[1] != '\0' ? q[1] : ' ', holders);
							break;
						}
					}
				} else if (ascii_ieq(h->string, "content-length")
				    || ascii_ieq(h->string, "host")
				    || ascii_ieq(h->string, "connection")
				    || ascii_ieq(h->string, "transfer-encoding")) {
					conf_key_msg(ctx, true, h, hk,
					    "set by the broker; cannot be configured");
					continue;
				}
				cJSON_AddStringToObject(is_hdr ? headers : params, h->string, v);
			}
		} else {
			conf_key_msg(ctx, false, c, key, "unknown key; ignored");
		}
	}
	if (!has_url) {
		snprintf(key, sizeof(key), "auth.http_auth.%s.url", name);
		conf_key_msg(ctx, true, node, key, "required");
	}
}

// Reads a duration key of the section into out (milliseconds).
static void check_dur(
    conf_ctx *ctx, const cJSON *c, const char *key, const char *name, uint64_t min, cJSON *out)
{
	char        buf[64];
	uint64_t    ms;
	const char *t = conf_node_text(ctx, c, buf, sizeof(buf));
	if (t == NULL || conf_parse_duration(t, 1000, &ms) != 0 || ms < min || ms > 86400000) {
		conf_key_msg(ctx, true, c, key, "expected a duration such as `5s` (%s)",
		    min > 0 ? "more than 0, at most 1 day" : "at most 1 day");
		return;
	}
	cJSON_ReplaceItemInObject(out, name, cJSON_CreateNumber((double)ms));
}

// Checks ssl { } (for https:// targets) into out.ssl: {"verify_peer":
// bool, "cacertfile", "certfile", "keyfile", "key_password": strings}.
static void check_ssl(conf_ctx *ctx, const cJSON *node, cJSON *out)
{
	char key[320];
	char buf[64];
	if (!cJSON_IsObject(node)) {
		conf_key_msg(ctx, true, node, "auth.http_auth.ssl", "expected an object");
		return;
	}
	cJSON *o = cJSON_CreateObject();
	if (o == NULL) {
		return;
	}
	cJSON_DeleteItemFromObject(out, "ssl"); // a second ssl { } replaces the first
	cJSON_AddItemToObject(out, "ssl", o);
	cJSON_AddBoolToObject(o, "verify_peer", true);
	for (const cJSON *c = node->child; c != NULL; c = c->next) {
		snprintf(key, sizeof(key), "auth.http_auth.ssl.%.200s", c->string);
		if (strcmp(c->string, "verify_peer") == 0) {
			if (!cJSON_IsBool(c)) {
				conf_key_msg(ctx, true, c, key, "expected true or false");
				continue;
			}
			cJSON_ReplaceItemInObject(
			    o, "verify_peer", cJSON_CreateBool(cJSON_IsTrue(c)));
		} else if (strcmp(c->string, "cacertfile") == 0
		    || strcmp(c->string, "certfile") == 0 || strcmp(c->string, "keyfile") == 0
		    || strcmp(c->string, "key_password") == 0) {
			const char *v = conf_node_text(ctx, c, buf, sizeof(buf));
			if (v == NULL || v[0] == '\0') {
				conf_key_msg(ctx, true, c, key, "expected a non-empty string");
				continue;
			}
			cJSON_AddStringToObject(o, c->string, v);
		} else if (strcmp(c->string, "enable") == 0) {
			// NanoMQ's spelling; an https:// URL is what turns TLS on.
		} else {
			conf_key_msg(ctx, false, c, key, "unknown key; ignored");
		}
	}
	const cJSON *cert = cJSON_GetObjectItem(o, "certfile");
	const cJSON *kf   = cJSON_GetObjectItem(o, "keyfile");
	if ((cert == NULL) != (kf == NULL)) {
		conf_key_msg(ctx, true, node, "auth.http_auth.ssl",
		    "`certfile` and `keyfile` go together (a client certificate)");
	}
}

void conf_check_http_auth(conf_ctx *ctx, const cJSON *node)
{
	char key[320];
	char buf[64];
	if (!cJSON_IsObject(node)) {
		conf_key_msg(ctx, true, node, "auth.http_auth", "expected an object");
		return;
	}
	cJSON *out = cJSON_CreateObject();
	if (out == NULL) {
		conf_key_msg(ctx, true, node, "auth.http_auth", "out of memory");
		return;
	}
	cJSON_AddBoolToObject(out, "enable", true);
	cJSON_AddNumberToObject(out, "timeout_ms", 5000);
	cJSON_AddNumberToObject(out, "connect_timeout_ms", 5000);
	cJSON_AddNumberToObject(out, "pool_size", 32);
	cJSON_AddNumberToObject(out, "cache_ttl_ms", 0);
	for (const cJSON *c = node->child; c != NULL; c = c->next) {
		snprintf(key, sizeof(key), "auth.http_auth.%.200s", c->string);
		size_t i;
		for (i = 0; i < 3 && strcmp(c->string, req_names[i]) != 0; i++) { }
		if (i < 3) {
			check_req(ctx, c, req_names[i], req_holders[i], out);
		} else if (strcmp(c->string, "enable") == 0) {
			if (!cJSON_IsBool(c)) {
				conf_key_msg(ctx, true, c, key, "expected true or false");
				continue;
			}
			cJSON_ReplaceItemInObject(out, "enable", cJSON_CreateBool(cJSON_IsTrue(c)));
		} else if (strcmp(c->string, "timeout") == 0) {
			check_dur(ctx, c, key, "timeout_ms", 1, out);
		} else if (strcmp(c->string, "connect_timeout") == 0) {
			check_dur(ctx, c, key, "connect_timeout_ms", 1, out);
		} else if (strcmp(c->string, "cache_ttl") == 0) {
			check_dur(ctx, c, key, "cache_ttl_ms", 0, out);
		} else if (strcmp(c->string, "pool_size") == 0) {
			const char *t = conf_node_text(ctx, c, buf, sizeof(buf));
			char       *end;
			long        v = t != NULL ? strtol(t, &end, 10) : 0;
			if (t == NULL || *end != '\0' || v < 1 || v > 1024) {
				conf_key_msg(ctx, true, c, key, "expected an integer 1 .. 1024");
				continue;
			}
			cJSON_ReplaceItemInObject(out, "pool_size", cJSON_CreateNumber((double)v));
		} else if (strcmp(c->string, "ssl") == 0) {
			check_ssl(ctx, c, out);
		} else {
			conf_key_msg(ctx, false, c, key, "unknown key; ignored");
		}
	}
	cJSON_Delete(ctx->conf->auth_http);
	ctx->conf->auth_http = out;
}
