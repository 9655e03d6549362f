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

// Runs the overlays and the check, frees doc, and frees conf on failure.
// Returns 0 or -1.
static int finish(hocon_doc *doc, nmq_conf *conf, const conf_cli *cli, bool overlays, bool read_ok,
    conf_errors *errs)
{
	if (read_ok) {
		default_listeners(doc);
		if (overlays) {
			conf_env_apply(doc, conf, errs);
			conf_cli_apply(doc, cli, errs);
		}
		conf_check_tree(doc, conf, errs);
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

// Loads the configuration (see conf.h for the order).
int conf_load(nmq_conf *conf, const conf_cli *cli, const char *argv0, conf_errors *errs)
{
	hocon_doc  *doc;
	const char *path = NULL;
	const char *env  = getenv("NANOMQ_CONF_PATH");
	char        cand[PATH_MAX];
	bool        ok = true;

	memset(errs, 0, sizeof(*errs));
	conf_defaults(conf);
	if ((doc = hocon_doc_alloc()) == NULL) {
		conf_errors_add(errs, true, "configuration: out of memory");
		conf_free(conf);
		return -1;
	}
	if (cli != NULL && cli->conf_path != NULL && cli->old_conf_path != NULL) {
		conf_errors_add(errs, true, "--conf and --old_conf cannot be used together");
		ok = false;
	} else if (cli != NULL && cli->old_conf_path != NULL) {
		path = cli->old_conf_path;
		ok   = conf_old_read(doc, path, errs) == 0;
	} else {
		if (cli != NULL && cli->conf_path != NULL) {
			path = cli->conf_path;
		} else if (env != NULL && env[0] != '\0') {
			path = env;
		} else if (binary_conf(argv0, cand, sizeof(cand)) == 0 && access(cand, R_OK) == 0) {
			path = cand;
		} else if (access(CONF_ETC_PATH, R_OK) == 0) {
			path = CONF_ETC_PATH;
		}
		if (path != NULL) {
			ok = hocon_parse_file(doc, path, errs) == 0;
		} else {
			conf_errors_add(errs, false,
			    "no configuration file found (tried nanomq.conf beside the binary and "
			    "%s); using the built-in defaults",
			    CONF_ETC_PATH);
		}
	}
	if (path != NULL && (conf->path = strdup(path)) == NULL) {
		conf_errors_add(errs, true, "configuration: out of memory");
	}
	return finish(doc, conf, cli, true, ok, errs);
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
	return finish(doc, conf, NULL, false, ok, errs);
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
int conf_diff(const nmq_conf *a, const nmq_conf *b, conf_changes *out)
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
	return 0;

fail:
	conf_changes_free(out);
	return -1;
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
