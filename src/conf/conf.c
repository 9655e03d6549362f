// Loading the configuration: built-in defaults, then the file (HOCON or
// the legacy flat format), then NANOMQ_* environment variables, then the
// command line, checked in one pass against the schema. Also freeing and
// comparing configurations for reload.
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/conf/conf_int.h"

#define CONF_ETC_PATH "/etc/nanomq.conf"

// Defaults of a broker started with another file than the default one
// (see conf.h): <stem> is the file's name without ".conf", <hash> eight hex
// digits of its real path.
#define CONF_PID_FILE_FMT "/tmp/nanomq/nanomq-%s-%08x.pid"
#define CONF_CMD_IPC_FMT  "ipc:///tmp/nanomq_cmd-%s-%08x.ipc"

// Fills conf with the built-in defaults of every schema entry, the default
// pid file and one TCP listener on 0.0.0.0:1883.
void conf_defaults(nmq_conf *conf)
{
	char           why[200];
	conf_listener *l;

	memset(conf, 0, sizeof(*conf));
	for (size_t i = 0; i < conf_schema_len; i++) {
		const conf_key *k = &conf_schema[i];
		conf_val        v;
		if (k->base != CONF_BASE_CONF || k->store == CONF_ST_NONE || k->def == NULL) {
			continue;
		}
		if (conf_value_parse(k, k->def, false, &v, why, sizeof(why)) == 0) {
			conf_value_store(k, conf, &v);
		}
	}
	conf->pid_file    = strdup(CONF_PID_FILE_DEFAULT);
	l                 = &conf->listeners[0];
	l->kind           = CONF_LISTENER_TCP;
	l->name           = strdup("tcp");
	l->bind           = strdup("0.0.0.0:1883");
	l->host           = strdup("0.0.0.0");
	l->port           = 1883;
	conf->n_listeners = 1;
}

// Frees everything conf owns and zeroes it.
void conf_free(nmq_conf *conf)
{
	if (conf == NULL) {
		return;
	}
	for (size_t i = 0; i < conf_schema_len; i++) {
		const conf_key *k = &conf_schema[i];
		if (k->base == CONF_BASE_CONF && k->store == CONF_ST_STR) {
			free(*(char **)((char *)conf + k->off));
		}
	}
	for (int i = 0; i < conf->n_listeners && i < CONF_MAX_LISTENERS; i++) {
		conf_listener_free(&conf->listeners[i]);
	}
	free(conf->path);
	free(conf->pid_file);
	cJSON_Delete(conf->auth_password);
	cJSON_Delete(conf->auth_acl);
	cJSON_Delete(conf->webhook_headers);
	cJSON_Delete(conf->auth_http);
	cJSON_Delete(conf->webhook_events);
	cJSON_Delete(conf->preset_sessions);
	conf_bridges_free(conf);
	memset(conf, 0, sizeof(*conf));
}

// Adds `listeners.tcp {}` when the tree has no listeners section at all.
static void default_listeners(hocon_doc *doc)
{
	int origin;

	if (hocon_get_path(doc, "listeners") != NULL) {
		return;
	}
	if ((origin = hocon_origin_add(doc, "built-in default")) >= 0) {
		hocon_set_path(doc, "listeners.tcp", cJSON_CreateObject(), origin, 0, 0);
	}
}

static void instance_defaults(nmq_conf *conf, bool ipc_given, const char *argv0, conf_errors *errs);

// Runs the overlays (when overlays) and the check, sets the defaults that
// depend on the file's path, frees doc, and frees conf on failure. Returns
// 0 or -1.
static int finish_doc(hocon_doc *doc, nmq_conf *conf, const conf_cli *cli, bool overlays,
    const char *argv0, bool read_ok, conf_errors *errs)
{
	if (read_ok) {
		default_listeners(doc);
		if (overlays) {
			conf_env_apply(doc, conf, errs);
			conf_cli_apply(doc, cli, errs);
		}
		conf_check_tree(doc, conf, errs);
		if (overlays && !conf_errors_failed(errs)) {
			instance_defaults(
			    conf, hocon_get_path(doc, "system.cmd_ipc_url") != NULL, argv0, errs);
		}
	}
	hocon_doc_free(doc);
	if (!read_ok || conf_errors_failed(errs)) {
		conf_free(conf);
		return -1;
	}
	return 0;
}

// Writes "<directory of the binary>/nanomq.conf" into buf. Returns 0, or
// -1 when the directory is unknown.
static int binary_conf(const char *argv0, char *buf, size_t len)
{
	char        exe[PATH_MAX];
	const char *p = argv0;
	const char *slash;

	if (p == NULL || strchr(p, '/') == NULL) {
		ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		if (n <= 0) {
			return -1;
		}
		exe[n] = '\0';
		p      = exe;
	}
	slash = strrchr(p, '/');
	if (snprintf(buf, len, "%.*s/nanomq.conf", (int)(slash - p), p) >= (int)len) {
		return -1;
	}
	return 0;
}

// Returns the file the lookup finds without --conf, --old_conf and
// $NANOMQ_CONF_PATH (nanomq.conf beside the binary, else /etc/nanomq.conf),
// written into cand, or NULL when neither is readable.
static const char *default_file(const char *argv0, char *cand, size_t len)
{
	if (binary_conf(argv0, cand, len) == 0 && access(cand, R_OK) == 0) {
		return cand;
	}
	if (access(CONF_ETC_PATH, R_OK) == 0) {
		snprintf(cand, len, "%s", CONF_ETC_PATH);
		return cand;
	}
	return NULL;
}

// Returns the configuration file of cli and the environment (see conf.h),
// possibly written into cand, or NULL when there is none.
static const char *lookup(const conf_cli *cli, const char *argv0, char *cand, size_t len)
{
	const char *env = getenv("NANOMQ_CONF_PATH");

	if (cli != NULL && cli->old_conf_path != NULL) {
		return cli->old_conf_path;
	}
	if (cli != NULL && cli->conf_path != NULL) {
		return cli->conf_path;
	}
	if (env != NULL && env[0] != '\0') {
		return env;
	}
	return default_file(argv0, cand, len);
}

// Writes into tag "<stem>-" and returns the hash that name the instance of
// the file at path, or returns 0 with tag "" when path is NULL or the
// default file (same real path).
static uint32_t instance_tag(const char *path, const char *argv0, char *tag, size_t len)
{
	char        dcand[PATH_MAX];
	char        rp[PATH_MAX];
	char        rd[PATH_MAX];
	const char *d = default_file(argv0, dcand, sizeof(dcand));
	const char *p;
	const char *base;
	uint32_t    h = 2166136261u; // FNV-1a
	size_t      n = 0;

	tag[0] = '\0';
	if (path == NULL) {
		return 0;
	}
	p = realpath(path, rp) != NULL ? rp : path;
	if (d != NULL && strcmp(p, realpath(d, rd) != NULL ? rd : d) == 0) {
		return 0;
	}
	for (const char *c = p; *c != '\0'; c++) {
		h = (h ^ (unsigned char)*c) * 16777619u;
	}
	base = strrchr(p, '/') != NULL ? strrchr(p, '/') + 1 : p;
	for (; *base != '\0' && n + 1 < len && n < 24; base++) {
		char c = *base;
		if (strcmp(base, ".conf") == 0) {
			break;
		}
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
		    || c == '_' || c == '-' || c == '.';
		tag[n++] = ok ? c : '_';
	}
	tag[n] = '\0';
	return h == 0 ? 1 : h;
}

// Writes the default pid file of the instance of path into buf.
static void instance_pid_file(const char *path, const char *argv0, char *buf, size_t len)
{
	char     tag[32];
	uint32_t h = instance_tag(path, argv0, tag, sizeof(tag));

	if (h == 0) {
		snprintf(buf, len, "%s", CONF_PID_FILE_DEFAULT);
	} else {
		snprintf(buf, len, CONF_PID_FILE_FMT, tag, (unsigned)h);
	}
}

// Returns the pid file of the broker that cli designates.
nmq_err conf_pid_file(const conf_cli *cli, const char *argv0, char *buf, size_t len)
{
	char        cand[PATH_MAX];
	const char *env = getenv("NANOMQ_PID_FILE");

	if (env != NULL && env[0] != '\0') {
		if (snprintf(buf, len, "%s", env) >= (int)len) {
			return NMQ_EINVAL;
		}
		return NMQ_OK;
	}
	instance_pid_file(lookup(cli, argv0, cand, sizeof(cand)), argv0, buf, len);
	return NMQ_OK;
}

// Replaces the NanoMQ defaults of the pid file (unless $NANOMQ_PID_FILE
// set it) and of the command channel (unless the file, the environment or
// the command line set it) by those of the instance of conf->path.
static void instance_defaults(nmq_conf *conf, bool ipc_given, const char *argv0, conf_errors *errs)
{
	char     buf[PATH_MAX];
	char     tag[32];
	uint32_t h;
	char    *copy;
	char   **fields[2] = { &conf->pid_file, &conf->cmd_ipc_url };
	bool     apply[2];

	if (conf->path == NULL || (h = instance_tag(conf->path, argv0, tag, sizeof(tag))) == 0) {
		return;
	}
	apply[0] = getenv("NANOMQ_PID_FILE") == NULL || getenv("NANOMQ_PID_FILE")[0] == '\0';
	apply[1] = !ipc_given;
	for (int i = 0; i < 2; i++) {
		if (!apply[i]) {
			continue;
		}
		snprintf(buf, sizeof(buf), i == 0 ? CONF_PID_FILE_FMT : CONF_CMD_IPC_FMT, tag,
		    (unsigned)h);
		if ((copy = strdup(buf)) == NULL) {
			conf_errors_add(errs, true, "configuration: out of memory");
			return;
		}
		free(*fields[i]);
		*fields[i] = copy;
	}
}

// Loads the configuration (see conf.h for the order).
int conf_load(nmq_conf *conf, const conf_cli *cli, const char *argv0, conf_errors *errs)
{
	hocon_doc  *doc;
	const char *path;
	char        cand[PATH_MAX];
	bool        ok = true;

	memset(errs, 0, sizeof(*errs));
	conf_defaults(conf);
	if ((doc = hocon_doc_alloc()) == NULL) {
		conf_errors_add(errs, true, "configuration: out of memory");
		conf_free(conf);
		return -1;
	}
	path = lookup(cli, argv0, cand, sizeof(cand));
	if (cli != NULL && cli->conf_path != NULL && cli->old_conf_path != NULL) {
		conf_errors_add(errs, true, "--conf and --old_conf cannot be used together");
		ok   = false;
		path = NULL;
	} else if (cli != NULL && cli->old_conf_path != NULL) {
		ok = conf_old_read(doc, path, errs) == 0;
	} else if (path != NULL) {
		ok = hocon_parse_file(doc, path, errs) == 0;
	} else {
		conf_errors_add(errs, false,
		    "no configuration file found (tried nanomq.conf beside the binary and "
		    "%s); using the built-in defaults",
		    CONF_ETC_PATH);
	}
	if (path != NULL && (conf->path = strdup(path)) == NULL) {
		conf_errors_add(errs, true, "configuration: out of memory");
	}
	return finish_doc(doc, conf, cli, true, argv0, ok, errs);
}

// Loads HOCON text over the defaults, without environment or command line.
int conf_load_text(nmq_conf *conf, const char *text, size_t len, const char *name, const char *dir,
    conf_errors *errs)
{
	hocon_doc *doc;
	bool       ok;

	memset(errs, 0, sizeof(*errs));
	conf_defaults(conf);
	if ((doc = hocon_doc_alloc()) == NULL) {
		conf_errors_add(errs, true, "configuration: out of memory");
		conf_free(conf);
		return -1;
	}
	ok = hocon_parse_text(doc, text, len, name, dir, errs) == 0;
	return finish_doc(doc, conf, NULL, false, NULL, ok, errs);
}

// ---------------------------------------------------------------------------
// Reload support.

// Appends a change. Returns 0 or -1 (memory).
static int add_change(conf_changes *out, const char *key, bool restart)
{
	conf_change *v = realloc(out->v, (size_t)(out->n + 1) * sizeof(*v));

	if (v == NULL) {
		return -1;
	}
	out->v = v;
	if ((v[out->n].key = strdup(key)) == NULL) {
		return -1;
	}
	v[out->n].restart = restart;
	out->n++;
	return 0;
}

// Returns true when two possibly NULL strings differ.
static bool str_differs(const char *a, const char *b)
{
	if (a == NULL || b == NULL) {
		return a != b;
	}
	return strcmp(a, b) != 0;
}

// Returns true when the field of k differs between a and b.
static bool field_differs(const conf_key *k, const void *a, const void *b)
{
	const char *pa = (const char *)a + k->off;
	const char *pb = (const char *)b + k->off;

	switch (k->store) {
	case CONF_ST_BOOL:
		return *(const bool *)pa != *(const bool *)pb;
	case CONF_ST_INT:
		return *(const int *)pa != *(const int *)pb;
	case CONF_ST_U32:
		return *(const uint32_t *)pa != *(const uint32_t *)pb;
	case CONF_ST_U64:
		return *(const uint64_t *)pa != *(const uint64_t *)pb;
	case CONF_ST_DOUBLE:
		return *(const double *)pa != *(const double *)pb;
	case CONF_ST_STR:
		return str_differs(*(char *const *)pa, *(char *const *)pb);
	default:
		return false;
	}
}

// Returns the listener named name in c, or NULL.
static const conf_listener *find_listener(const nmq_conf *c, const char *name)
{
	for (int i = 0; i < c->n_listeners; i++) {
		if (c->listeners[i].name != NULL && strcmp(c->listeners[i].name, name) == 0) {
			return &c->listeners[i];
		}
	}
	return NULL;
}

// Returns true when two possibly NULL cJSON trees differ.
static bool json_differs(const cJSON *a, const cJSON *b)
{
	if (a == NULL || b == NULL) {
		return a != b;
	}
	return !cJSON_Compare(a, b, true);
}

// Lists the differences between a and b.
nmq_err conf_diff(const nmq_conf *a, const nmq_conf *b, conf_changes *out)
{
	char key[320];

	out->n = 0;
	out->v = NULL;
	for (size_t i = 0; i < conf_schema_len; i++) {
		const conf_key *k = &conf_schema[i];
		if (k->base != CONF_BASE_CONF || k->store == CONF_ST_NONE) {
			continue;
		}
		if (field_differs(k, a, b) && add_change(out, k->path, !k->reload) != 0) {
			goto fail;
		}
	}
	for (int i = 0; i < a->n_listeners; i++) {
		const conf_listener *la = &a->listeners[i];
		const conf_listener *lb = find_listener(b, la->name);
		snprintf(key, sizeof(key), "listeners.%.200s", la->name);
		if (lb == NULL || la->kind != lb->kind || str_differs(la->bind, lb->bind)) {
			if (add_change(out, key, true) != 0) {
				goto fail;
			}
			continue;
		}
		for (size_t j = 0; j < conf_schema_len; j++) {
			const conf_key *k = &conf_schema[j];
			char            fkey[400];
			if (k->base != CONF_BASE_LISTENER || !(k->flags & CONF_F_TLSFILE)
			    || strncmp(k->path, "listeners.ssl.", 14) != 0
			    || !field_differs(k, la, lb)) {
				continue;
			}
			snprintf(fkey, sizeof(fkey), "%s.%s", key, k->path + 14);
			if (add_change(out, fkey, !k->reload) != 0) {
				goto fail;
			}
		}
	}
	for (int i = 0; i < b->n_listeners; i++) {
		if (find_listener(a, b->listeners[i].name) == NULL) {
			snprintf(key, sizeof(key), "listeners.%.200s", b->listeners[i].name);
			if (add_change(out, key, true) != 0) {
				goto fail;
			}
		}
	}
	if (json_differs(a->auth_password, b->auth_password)
	    && add_change(out, "auth.password", false) != 0) {
		goto fail;
	}
	if (json_differs(a->auth_acl, b->auth_acl) && add_change(out, "auth.acl", false) != 0) {
		goto fail;
	}
	if (json_differs(a->auth_http, b->auth_http)
	    && add_change(out, "auth.http_auth", true) != 0) {
		goto fail;
	}
	if (json_differs(a->webhook_headers, b->webhook_headers)
	    && add_change(out, "webhook.headers", true) != 0) {
		goto fail;
	}
	if (json_differs(a->webhook_events, b->webhook_events)
	    && add_change(out, "webhook.events", true) != 0) {
		goto fail;
	}
	if (json_differs(a->preset_sessions, b->preset_sessions)
	    && add_change(out, "preset.session", true) != 0) {
		goto fail;
	}
	for (int i = 0; i < a->n_bridges; i++) {
		const conf_bridge *bb = conf_bridge_find(b, a->bridges[i].name);
		snprintf(key, sizeof(key), "bridges.mqtt.%.200s", a->bridges[i].name);
		if ((bb == NULL || !conf_bridge_equal(&a->bridges[i], bb))
		    && add_change(out, key, false) != 0) {
			goto fail;
		}
	}
	for (int i = 0; i < b->n_bridges; i++) {
		snprintf(key, sizeof(key), "bridges.mqtt.%.200s", b->bridges[i].name);
		if (conf_bridge_find(a, b->bridges[i].name) == NULL
		    && add_change(out, key, false) != 0) {
			goto fail;
		}
	}
	return NMQ_OK;

fail:
	conf_changes_free(out);
	return NMQ_ENOMEM;
}

// Frees the list of changes and empties it.
void conf_changes_free(conf_changes *changes)
{
	if (changes == NULL) {
		return;
	}
	for (int i = 0; i < changes->n; i++) {
		free(changes->v[i].key);
	}
	free(changes->v);
	changes->v = NULL;
	changes->n = 0;
}
