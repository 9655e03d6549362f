// The legacy flat format of NanoMQ before 0.14 (`--old_conf`): one
// `key=value` per line. Each flat key is mapped onto its HOCON key and
// written into the configuration tree with the flat file's line, so the
// usual validation checks it (compat.md 1.5).
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "src/conf/ascii.h"
#include "src/conf/conf_int.h"

enum old_how {
	OLD_KEY = 0, // same value, new key
	OLD_KB, // a bare number is kilobytes
	OLD_MILLI, // an integer in thousandths
	OLD_LIST, // comma-separated words
	OLD_PREFIX, // flat is a prefix, replaced by key
};

typedef struct old_map {
	const char *flat;
	const char *key;
	int         how;
	const char *note;
} old_map;

static const old_map old_keys[] = {
	{ "url", "listeners.tcp.bind", OLD_KEY, "`nmq-tcp://` scheme stripped" },
	{ "daemon", "system.daemon", OLD_KEY, NULL },
	{ "num_taskq_thread", "system.num_taskq_thread", OLD_KEY, NULL },
	{ "max_taskq_thread", "system.max_taskq_thread", OLD_KEY, NULL },
	{ "parallel", "system.parallel", OLD_KEY, NULL },
	{ "property_size", "mqtt.property_size", OLD_KEY, NULL },
	{ "msq_len", "mqtt.max_mqueue_len", OLD_KEY, NULL },
	{ "qos_duration", "mqtt.retry_interval", OLD_KEY, "seconds" },
	{ "allow_anonymous", "auth.allow_anonymous", OLD_KEY, NULL },
	{ "max_packet_size", "mqtt.max_packet_size", OLD_KB, "a bare number is KB" },
	{ "client_max_packet_size", "mqtt.client_max_packet_size", OLD_KB, "a bare number is KB" },
	{ "keepalive_backoff", "mqtt.keepalive_multiplier", OLD_MILLI,
	    "integer in thousandths (1250 = 1.25)" },
	{ "acl_enable", "auth.acl.enable", OLD_KEY, NULL },
	{ "acl_nomatch", "auth.no_match", OLD_KEY, NULL },
	{ "acl_deny_action", "auth.deny_action", OLD_KEY, NULL },
	{ "enable_acl_cache", "auth.cache.enable", OLD_KEY, NULL },
	{ "acl_cache_max_size", "auth.cache.max_size", OLD_KEY, NULL },
	{ "acl_cache_ttl", "auth.cache.ttl", OLD_KEY, NULL },
	{ "tls.enable", "listeners.ssl.enable", OLD_KEY, NULL },
	{ "tls.url", "listeners.ssl.bind", OLD_KEY, NULL },
	{ "tls.keyfile", "listeners.ssl.keyfile", OLD_KEY, NULL },
	{ "tls.certfile", "listeners.ssl.certfile", OLD_KEY, NULL },
	{ "tls.cacertfile", "listeners.ssl.cacertfile", OLD_KEY, NULL },
	{ "tls.key_password", "listeners.ssl.key_password", OLD_KEY, NULL },
	{ "tls.verify_peer", "listeners.ssl.verify_peer", OLD_KEY, NULL },
	{ "tls.fail_if_no_peer_cert", "listeners.ssl.fail_if_no_peer_cert", OLD_KEY, NULL },
	{ "websocket.enable", "listeners.ws.enable", OLD_KEY, NULL },
	{ "websocket.url", "listeners.ws.bind", OLD_KEY, NULL },
	{ "websocket.tls_url", "listeners.wss.bind", OLD_KEY,
	    "enabled when `tls.enable` and `websocket.enable` are true" },
	{ "http_server.enable", "http_server.enable", OLD_KEY, NULL },
	{ "http_server.port", "http_server.port", OLD_KEY, NULL },
	{ "http_server.parallel", "http_server.limit_conn", OLD_KEY, NULL },
	{ "http_server.username", "http_server.username", OLD_KEY, NULL },
	{ "http_server.password", "http_server.password", OLD_KEY, NULL },
	{ "http_server.auth_type", "http_server.auth_type", OLD_KEY, NULL },
	{ "http_server.jwt.", "http_server.jwt.", OLD_PREFIX, NULL },
	{ "log.to", "log.to", OLD_LIST, "comma-separated" },
	{ "log.", "log.", OLD_PREFIX, NULL },
	{ "sqlite.", "sqlite.", OLD_PREFIX, NULL },
	{ "auth.http.", "auth.http_auth.", OLD_PREFIX, NULL },
	{ "web.hook.", "webhook.", OLD_PREFIX, NULL },
	{ "bridge.mqtt.", "bridges.mqtt.", OLD_PREFIX, NULL },
	{ "bridge.sqlite.", "bridges.mqtt.cache.", OLD_PREFIX, NULL },
};

#define N_OLD (sizeof(old_keys) / sizeof(old_keys[0]))

// Returns the mapping of a flat key, or NULL.
static const old_map *old_find(const char *flat)
{
	for (size_t i = 0; i < N_OLD; i++) {
		const old_map *m = &old_keys[i];
		if (m->how == OLD_PREFIX ? strncmp(flat, m->flat, strlen(m->flat)) == 0
		            && flat[strlen(m->flat)] != '\0'
		                         : strcmp(flat, m->flat) == 0) {
			return m;
		}
	}
	return NULL;
}

// Trims white space at both ends of s in place and returns it.
static char *trim(char *s)
{
	char *e;

	while (ascii_isspace((unsigned char)*s)) {
		s++;
	}
	e = s + strlen(s);
	while (e > s && ascii_isspace((unsigned char)e[-1])) {
		*--e = '\0';
	}
	return s;
}

// Reads a file of at most HOCON_MAX_FILE_SIZE bytes. Returns a new
// NUL-terminated buffer, or NULL with a reason.
static char *slurp(const char *path, char *why, size_t whylen)
{
	FILE       *f = fopen(path, "r");
	struct stat st;
	char       *buf;
	size_t      n;

	if (f == NULL) {
		snprintf(why, whylen, "%s", strerror(errno));
		return NULL;
	}
	if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)
	    || (unsigned long long)st.st_size > HOCON_MAX_FILE_SIZE) {
		snprintf(
		    why, whylen, "not a regular file of at most %u bytes", HOCON_MAX_FILE_SIZE);
		fclose(f);
		return NULL;
	}
	if ((buf = malloc((size_t)st.st_size + 1)) == NULL) {
		snprintf(why, whylen, "out of memory");
		fclose(f);
		return NULL;
	}
	n = fread(buf, 1, (size_t)st.st_size, f);
	fclose(f);
	buf[n] = '\0';
	if (memchr(buf, '\0', n) != NULL) {
		snprintf(why, whylen, "NUL byte in the file");
		free(buf);
		return NULL;
	}
	return buf;
}

// Maps one flat line onto the tree. Returns 0, or -1 after an error.
static int old_line(
    hocon_doc *doc, conf_errors *errs, const char *path, int origin, int line, char *text)
{
	char          *eq = strchr(text, '=');
	char          *key;
	char          *value;
	const old_map *m;
	char           hkey[400];
	char           buf[64];
	cJSON         *v = NULL;
	size_t         vl;

	if (eq == NULL) {
		conf_errors_add(errs, true, "%s:%d: expected key=value", path, line);
		return -1;
	}
	*eq   = '\0';
	key   = trim(text);
	value = trim(eq + 1);
	vl    = strlen(value);
	if (vl >= 2 && value[0] == '"' && value[vl - 1] == '"') {
		value[vl - 1] = '\0';
		value++;
	}
	if (key[0] == '\0') {
		conf_errors_add(errs, true, "%s:%d: expected key=value", path, line);
		return -1;
	}
	if ((m = old_find(key)) == NULL) {
		conf_errors_add(
		    errs, false, "%s:%d: %.200s: unknown flat key; ignored", path, line, key);
		return 0;
	}
	if (value[0] == '\0') {
		return 0; // empty: keep the default
	}
	if (m->how == OLD_PREFIX) {
		snprintf(hkey, sizeof(hkey), "%s%.300s", m->key, key + strlen(m->flat));
	} else {
		snprintf(hkey, sizeof(hkey), "%s", m->key);
	}
	switch (m->how) {
	case OLD_KB:
		if (strspn(value, "0123456789") == strlen(value) && strlen(value) < 20) {
			snprintf(buf, sizeof(buf), "%sKB", value);
			v = cJSON_CreateString(buf);
		} else {
			v = cJSON_CreateString(value);
		}
		break;
	case OLD_MILLI: {
		char *end;
		long  n = strtol(value, &end, 10);
		if (end == value || *end != '\0' || n < 0 || n > 1000000) {
			conf_errors_add(errs, true,
			    "%s:%d: %s: expected an integer in thousandths (1250 = 1.25), got "
			    "\"%.64s\"",
			    path, line, key, value);
			return -1;
		}
		v = cJSON_CreateNumber((double)n / 1000);
		break;
	}
	case OLD_LIST:
		v = cJSON_CreateArray();
		for (char *w = value; v != NULL;) {
			char *comma = strchr(w, ',');
			if (comma != NULL) {
				*comma = '\0';
			}
			if (*trim(w) != '\0') {
				cJSON_AddItemToArray(v, cJSON_CreateString(trim(w)));
			}
			if (comma == NULL) {
				break;
			}
			w = comma + 1;
		}
		break;
	default:
		v = cJSON_CreateString(value);
		break;
	}
	if (hocon_set_path(doc, hkey, v, origin, line, HOCON_LOC_LOOSE) == NULL) {
		conf_errors_add(errs, true,
		    "%s:%d: %s: cannot be stored (out of memory or bad key)", path, line, key);
		return -1;
	}
	return 0;
}

// Returns true when the flat value of key in the tree reads as true.
static bool tree_true(hocon_doc *doc, const char *key)
{
	cJSON *n = hocon_get_path(doc, key);

	return n != NULL
	    && (cJSON_IsTrue(n)
	        || (cJSON_IsString(n)
	            && (strcmp(n->valuestring, "true") == 0 || strcmp(n->valuestring, "1") == 0)));
}

// Reads the flat file at path into the tree of doc.
int conf_old_read(hocon_doc *doc, const char *path, conf_errors *errs)
{
	char  why[128];
	char *text = slurp(path, why, sizeof(why));
	int   origin;
	int   line = 0;
	int   rc   = 0;

	if (text == NULL) {
		conf_errors_add(errs, true, "%s: cannot read: %s", path, why);
		return -1;
	}
	if ((origin = hocon_origin_add(doc, path)) < 0) {
		conf_errors_add(errs, true, "%s: out of memory", path);
		free(text);
		return -1;
	}
	for (char *s = text; s != NULL;) {
		char *nl = strchr(s, '\n');
		char *t;
		if (nl != NULL) {
			*nl = '\0';
		}
		line++;
		t = trim(s);
		if (t[0] != '\0' && t[0] != '#'
		    && old_line(doc, errs, path, origin, line, t) != 0) {
			rc = -1;
		}
		s = nl != NULL ? nl + 1 : NULL;
	}
	free(text);
	if (hocon_get_path(doc, "listeners.wss.bind") != NULL) {
		bool on = tree_true(doc, "listeners.ssl.enable")
		    && tree_true(doc, "listeners.ws.enable");
		hocon_set_path(doc, "listeners.wss.enable", cJSON_CreateBool(on), origin, 0, 0);
	}
	// In the flat format TLS and the HTTP server are off unless enabled.
	if (hocon_get_path(doc, "listeners.ssl") != NULL
	    && hocon_get_path(doc, "listeners.ssl.enable") == NULL) {
		hocon_set_path(doc, "listeners.ssl.enable", cJSON_CreateFalse(), origin, 0, 0);
	}
	if (hocon_get_path(doc, "http_server") != NULL
	    && hocon_get_path(doc, "http_server.enable") == NULL) {
		hocon_set_path(doc, "http_server.enable", cJSON_CreateFalse(), origin, 0, 0);
	}
	if (hocon_get_path(doc, "listeners.tcp") == NULL) {
		hocon_set_path(doc, "listeners.tcp", cJSON_CreateObject(), origin, 0, 0);
	}
	return rc;
}

// Writes the flat key table as Markdown.
int conf_old_markdown(FILE *out)
{
	fprintf(out, "| flat key | HOCON key | note |\n|---|---|---|\n");
	for (size_t i = 0; i < N_OLD; i++) {
		const old_map *m = &old_keys[i];
		fprintf(out, "| `%s%s` | `%s%s` | %s |\n", m->flat, m->how == OLD_PREFIX ? "*" : "",
		    m->key, m->how == OLD_PREFIX ? "*" : "", m->note != NULL ? m->note : "");
	}
	return ferror(out) ? -1 : 0;
}
