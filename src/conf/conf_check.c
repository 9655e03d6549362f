// Validation of a configuration tree against the schema, filling an
// nmq_conf. Every problem names file, line and key.
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/conf/ascii.h"
#include "src/conf/conf_int.h"

// Longest key path walked; deeper or longer keys are reported as unknown.
#define CONF_PATH_MAX 400

// Adds "file:line: key: reason" (or "origin: key: reason" for origins
// without lines, such as environment variables) to the errors or warnings.
void conf_key_msg(
    conf_ctx *ctx, bool is_error, const cJSON *node, const char *key, const char *fmt, ...)
{
	char        reason[320];
	const char *file;
	int         line;
	va_list     ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	if (node != NULL && hocon_loc(ctx->doc, node, &file, &line, NULL, NULL)) {
		if (line > 0) {
			conf_errors_add(
			    ctx->errs, is_error, "%s:%d: %.200s: %s", file, line, key, reason);
		} else {
			conf_errors_add(ctx->errs, is_error, "%s: %.200s: %s", file, key, reason);
		}
	} else {
		conf_errors_add(ctx->errs, is_error, "%.200s: %s", key, reason);
	}
}

// Returns the text of a scalar node, or NULL for objects, arrays and null.
const char *conf_node_text(conf_ctx *ctx, const cJSON *node, char *buf, size_t len)
{
	const char *raw;

	if (cJSON_IsString(node)) {
		return node->valuestring;
	}
	if (cJSON_IsNumber(node)) {
		if ((raw = hocon_raw(ctx->doc, node)) != NULL) {
			return raw;
		}
		if (node->valuedouble == (double)(long long)node->valuedouble) {
			snprintf(buf, len, "%lld", (long long)node->valuedouble);
		} else {
			snprintf(buf, len, "%.17g", node->valuedouble);
		}
		return buf;
	}
	if (cJSON_IsBool(node)) {
		return cJSON_IsTrue(node) ? "true" : "false";
	}
	return NULL;
}

// Returns "an object", "an array" or "null" for a non-scalar node.
static const char *node_kind(const cJSON *node)
{
	if (cJSON_IsObject(node)) {
		return "an object";
	}
	if (cJSON_IsArray(node)) {
		return "an array";
	}
	return "null";
}

// Returns a description of what k expects, for type errors.
static const char *expected(const conf_key *k)
{
	switch (k->type) {
	case CONF_T_BOOL:
		return "a boolean";
	case CONF_T_INT:
		return "an integer";
	case CONF_T_FLOAT:
		return "a number";
	case CONF_T_STR:
		return "a string";
	case CONF_T_ENUM:
		return "a word";
	case CONF_T_SIZE:
		return "a size";
	case CONF_T_DUR_S:
	case CONF_T_DUR_MS:
		return "a duration";
	case CONF_T_FLAGS:
		return "a word or a list of words";
	case CONF_T_ARRAY:
		return "an array";
	default:
		return "an object";
	}
}

// Returns true when text is an optionally signed run of digits.
static bool is_integer_text(const char *text)
{
	const char *p = text + (text[0] == '-');

	if (*p == '\0') {
		return false;
	}
	for (; *p != '\0'; p++) {
		if (*p < '0' || *p > '9') {
			return false;
		}
	}
	return true;
}

// Converts node for k and stores it in base. Returns 0 when stored, 1 when
// accepted without storing (a warning was given), -1 after an error.
int conf_apply_key(conf_ctx *ctx, const conf_key *k, const char *key, const cJSON *node, void *base,
    bool via_alias)
{
	char        buf[64];
	char        why[256];
	conf_val    v; // (zeroed: an empty list of flags parses no value into it)
	unsigned    flags = 0;
	const char *text;

	memset(&v, 0, sizeof(v));
	hocon_loc(ctx->doc, node, NULL, NULL, NULL, &flags);
	if (k->type == CONF_T_FLAGS && cJSON_IsArray(node)) {
		int64_t bits = 0;
		for (const cJSON *e = node->child; e != NULL; e = e->next) {
			if ((text = conf_node_text(ctx, e, buf, sizeof(buf))) == NULL) {
				conf_key_msg(
				    ctx, true, e, key, "expected a word, got %s", node_kind(e));
				return -1;
			}
			if (conf_value_parse(k, text, false, &v, why, sizeof(why)) != 0) {
				conf_key_msg(ctx, true, e, key, "%s", why);
				return -1;
			}
			bits |= v.i;
		}
		v.i = bits;
		conf_value_store(k, base, &v);
		return 0;
	}
	if ((text = conf_node_text(ctx, node, buf, sizeof(buf))) == NULL) {
		conf_key_msg(
		    ctx, true, node, key, "expected %s, got %s", expected(k), node_kind(node));
		return -1;
	}
	if ((k->flags & CONF_F_DUR_DEFAULT) && !is_integer_text(text)) {
		uint64_t ms;
		if (conf_parse_duration(text, 1000, &ms) == 0) {
			conf_key_msg(ctx, false, node, key,
			    "a duration (\"%.32s\") is not a count; the default %s applies", text,
			    k->def);
			return 1;
		}
	}
	if (via_alias && (k->flags & CONF_F_MILLI_ALIAS)) {
		char  *end;
		double d = ascii_strtod(text, &end);
		if (end != text && *end == '\0' && d >= 100) {
			snprintf(buf, sizeof(buf), "%.17g", d / 1000);
			text = buf;
		}
	}
	if (conf_value_parse(k, text, (flags & HOCON_LOC_LOOSE) != 0, &v, why, sizeof(why)) != 0) {
		conf_key_msg(ctx, true, node, key, "%s", why);
		return -1;
	}
	if (k->warn_below != 0 && v.d < k->warn_below) {
		conf_key_msg(ctx, false, node, key,
		    "%g is below %g: clients are cut off before their keepalive interval ends", v.d,
		    k->warn_below);
	}
	if (k->store == CONF_ST_NONE) {
		free(v.s);
		return 1;
	}
	conf_value_store(k, base, &v);
	return 0;
}

// Joins prefix and name into out ("name" when prefix is empty). Returns 0,
// or -1 when the result would be too long.
static int join_path(char *out, size_t len, const char *prefix, const char *name)
{
	int n = prefix[0] == '\0' ? snprintf(out, len, "%s", name)
	                          : snprintf(out, len, "%s.%s", prefix, name);

	return n < 0 || (size_t)n >= len ? -1 : 0;
}

// Checks the members of obj, a section at path prefix.
static void walk_section(conf_ctx *ctx, const cJSON *obj, const char *prefix)
{
	char path[CONF_PATH_MAX];

	for (const cJSON *c = obj->child; c != NULL; c = c->next) {
		const conf_key *k;
		bool            alias = false;

		if (join_path(path, sizeof(path), prefix, c->string) != 0) {
			conf_key_msg(
			    ctx, false, c, prefix, "unknown key \"%.64s...\"; ignored", c->string);
			continue;
		}
		if (cJSON_IsNull(c)) {
			continue;
		}
		if (strcmp(path, "listeners") == 0) {
			conf_check_listeners(ctx, c);
			continue;
		}
		if (strcmp(path, "auth.password") == 0) {
			conf_check_password(ctx, c);
			continue;
		}
		if (strcmp(path, "auth.acl") == 0) {
			conf_check_acl(ctx, c);
			continue;
		}
		if (strcmp(path, "auth.http_auth") == 0) {
			conf_check_http_auth(ctx, c);
			continue;
		}
		if (strcmp(path, "webhook.headers") == 0) {
			conf_check_webhook_headers(ctx, c);
			continue;
		}
		if (strcmp(path, "webhook.events") == 0) {
			conf_check_webhook_events(ctx, c);
			continue;
		}
		if (strcmp(path, "preset.session") == 0) {
			conf_check_preset_sessions(ctx, c);
			continue;
		}
		if (strcmp(path, "bridges.mqtt") == 0) {
			conf_check_bridges(ctx, c);
			continue;
		}
		if ((k = conf_schema_find(path, &alias)) != NULL) {
			if (k->status == CONF_S_NOT_YET) {
				conf_key_msg(ctx, false, c, path, "not supported yet; ignored");
				continue;
			}
			if (k->status == CONF_S_UNSUPPORTED) {
				conf_key_msg(ctx, false, c, path,
				    "section `%s` is not supported by this broker; ignored", path);
				continue;
			}
			if (k->type == CONF_T_SECTION) {
				if (!cJSON_IsObject(c)) {
					conf_key_msg(ctx, true, c, path,
					    "expected an object, got %s",
					    cJSON_IsArray(c) ? "an array" : "a value");
					continue;
				}
				if (strcmp(path, "http_server") == 0) {
					ctx->conf->http_enable = true;
				}
				if (strcmp(path, "http_server.ssl") == 0) {
					ctx->conf->http_ssl_enable = true;
				}
				if (strcmp(path, "webhook") == 0) {
					ctx->conf->webhook_present = true;
				}
				if (strcmp(path, "sqlite") == 0) {
					ctx->conf->sqlite_enable = true;
				}
				walk_section(ctx, c, path);
				continue;
			}
			if (conf_apply_key(ctx, k, path, c, ctx->conf, alias) == 0) {
				ctx->set[k - conf_schema] = true;
			}
			continue;
		}
		if (conf_schema_is_prefix(path)) {
			if (!cJSON_IsObject(c)) {
				conf_key_msg(ctx, true, c, path, "expected an object, got %s",
				    cJSON_IsArray(c) ? "an array" : "a value");
				continue;
			}
			walk_section(ctx, c, path);
			continue;
		}
		conf_key_msg(ctx, false, c, path, "unknown key; ignored");
	}
}

// Returns the node of the given schema path in the tree, for messages.
static const cJSON *node_at(conf_ctx *ctx, const char *path)
{
	return hocon_get_path(ctx->doc, path);
}

// Reports when a file named by a key cannot be read.
static void check_readable(conf_ctx *ctx, const char *path, const char *file)
{
	if (file != NULL && access(file, R_OK) != 0) {
		int e = errno;
		conf_key_msg(ctx, true, node_at(ctx, path), path, "cannot read \"%.200s\": %s",
		    file, strerror(e));
	}
}

// Cross-key checks after the walk.
static void check_after(conf_ctx *ctx)
{
	nmq_conf       *c    = ctx->conf;
	const conf_key *cmax = conf_schema_find("mqtt.client_max_packet_size", NULL);

	if (!ctx->set[cmax - conf_schema]) {
		c->client_max_packet_size = c->max_packet_size;
	}
	if (c->num_taskq_thread > 0 && c->max_taskq_thread > 0
	    && c->max_taskq_thread < c->num_taskq_thread) {
		conf_key_msg(ctx, true, node_at(ctx, "system.max_taskq_thread"),
		    "system.max_taskq_thread", "%d is less than system.num_taskq_thread (%d)",
		    c->max_taskq_thread, c->num_taskq_thread);
	}
	if (c->http_enable) {
		// A file is checked only when the setting that uses it is on:
		// NanoMQ's own file names a JWT key that does not exist next to
		// auth_type = basic.
		if (c->http_auth_type == CONF_HTTP_AUTH_JWT) {
			check_readable(
			    ctx, "http_server.jwt.public.keyfile", c->http_jwt_public_keyfile);
		}
		if (c->http_auth_type == CONF_HTTP_AUTH_JWT && c->http_jwt_public_keyfile == NULL) {
			conf_key_msg(ctx, true, node_at(ctx, "http_server.auth_type"),
			    "http_server.jwt.public.keyfile", "required when auth_type = jwt");
		}
		if (c->http_ssl_enable) {
			if (c->http_ssl_certfile == NULL || c->http_ssl_keyfile == NULL) {
				conf_key_msg(ctx, true, node_at(ctx, "http_server.ssl"),
				    "http_server.ssl",
				    "certfile and keyfile are required for HTTPS");
			}
			if (c->http_ssl_verify_peer && c->http_ssl_cacertfile == NULL) {
				conf_key_msg(ctx, true, node_at(ctx, "http_server.ssl.verify_peer"),
				    "http_server.ssl.cacertfile", "required with verify_peer");
			}
			check_readable(ctx, "http_server.ssl.certfile", c->http_ssl_certfile);
			check_readable(ctx, "http_server.ssl.keyfile", c->http_ssl_keyfile);
			check_readable(ctx, "http_server.ssl.cacertfile", c->http_ssl_cacertfile);
		}
		if (c->http_auth_type == CONF_HTTP_AUTH_BASIC
		    && (c->http_username == NULL || c->http_password == NULL)) {
			conf_key_msg(ctx, false, node_at(ctx, "http_server"), "http_server",
			    "auth_type = basic without username and password: every request will "
			    "get 401");
		}
	}
	conf_check_webhook_after(ctx, node_at(ctx, "webhook"));
	if ((c->log_to & CONF_LOG_TO_UDS) && c->log_uds_addr == NULL) {
		conf_key_msg(ctx, true, node_at(ctx, "log.to"), "log.uds_addr",
		    "required when log.to includes uds");
	}
	if (c->n_listeners == 0 && !conf_errors_failed(ctx->errs)) {
		conf_key_msg(ctx, false, node_at(ctx, "listeners"), "listeners",
		    "no listener is enabled; clients cannot connect");
	}
}

// Validates the tree of doc into conf.
int conf_check_tree(hocon_doc *doc, nmq_conf *conf, conf_errors *errs)
{
	conf_ctx ctx;

	ctx.doc  = doc;
	ctx.errs = errs;
	ctx.conf = conf;
	ctx.set  = calloc(conf_schema_len, sizeof(bool));
	if (ctx.set == NULL) {
		conf_errors_add(errs, true, "configuration: out of memory");
		return -1;
	}
	for (int i = 0; i < conf->n_listeners; i++) {
		conf_listener_free(&conf->listeners[i]);
	}
	conf->n_listeners = 0;
	walk_section(&ctx, hocon_doc_root(doc), "");
	check_after(&ctx);
	free(ctx.set);
	return conf_errors_failed(errs) ? -1 : 0;
}
