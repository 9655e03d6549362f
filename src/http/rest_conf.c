// REST API v4: runtime values (/reload), the configuration file
// (/configuration in NanoMQ's sections through rest_conf_view.c,
// /config_update) and /ctrl/stop|restart.
//
// Writing the file: the new text is validated first (the whole of it, as a
// reload would read it), then the previous file is copied to <file>.bak and
// the new one written to <file>.tmp, flushed to disk and renamed over the
// file, so a crash leaves either the old or the new file, never half of
// one. Nothing running changes: the file takes effect at the next reload or
// restart.
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nng/core/log.h"
#include "src/conf/hocon.h"
#include "src/http/rest_int.h"

#define MAX_CONF_FILE (4u << 20)

// ---------------------------------------------------------------- /reload

static void h_reload_get(void *arg, const http_req *req, http_resp *r)
{
	rest_api *api = arg;
	(void)req;
	proto_limits lim;
	proto_get_limits(api->env.proto, &lim);
	cJSON *d = cJSON_CreateObject();
	cJSON_AddNumberToObject(d, "property_size", api->property_size);
	cJSON_AddNumberToObject(d, "max_packet_size", lim.max_packet_size / 1024);
	cJSON_AddNumberToObject(d, "client_max_packet_size", lim.client_max_packet_size / 1024);
	cJSON_AddNumberToObject(d, "msq_len", lim.max_mqueue_len);
	cJSON_AddNumberToObject(d, "qos_duration", lim.retry_interval_s);
	cJSON_AddNumberToObject(d, "keepalive_backoff", lim.keepalive_multiplier);
	cJSON_AddBoolToObject(d, "allow_anonymous", broker_allow_anonymous(api->env.broker));
	cJSON_AddBoolToObject(d, "enable_mqtt_stream", false);
	cJSON_AddBoolToObject(d, "bridge_mode", false);
	rest_ok(r, d);
}

// A number member in [min, max]; absent is fine. Returns false if bad.
static bool num(const cJSON *d, const char *key, double min, double max, double *out, bool *has)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(d, key);
	*has           = false;
	if (v == NULL) {
		return true;
	}
	if (!cJSON_IsNumber(v) || v->valuedouble < min || v->valuedouble > max) {
		return false;
	}
	*out = v->valuedouble;
	*has = true;
	return true;
}

static void h_reload_post(void *arg, const http_req *req, http_resp *r)
{
	rest_api *api = arg;
	cJSON    *j   = rest_parse_body(req, r);
	if (j == NULL) {
		return;
	}
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "data");
	if (!cJSON_IsObject(d)) {
		cJSON_Delete(j);
		http_resp_error(r, 400, REST_MISSING_PARAM, "a \"data\" object is required");
		return;
	}
	proto_limits lim;
	proto_get_limits(api->env.proto, &lim);
	double ps = 0, mps = 0, cmps = 0, ml = 0, qd = 0, kb = 0;
	bool   hps, hmps, hcmps, hml, hqd, hkb;
	bool   ok = num(d, "property_size", 1, 65535, &ps, &hps)
	    && num(d, "max_packet_size", 1, 256 * 1024, &mps, &hmps)
	    && num(d, "client_max_packet_size", 1, 256 * 1024, &cmps, &hcmps)
	    && num(d, "msq_len", 1, 4294967295.0, &ml, &hml)
	    && num(d, "qos_duration", 1, 86400, &qd, &hqd)
	    && num(d, "keepalive_backoff", 0.01, 100000, &kb, &hkb);
	const cJSON *anon = cJSON_GetObjectItemCaseSensitive(d, "allow_anonymous");
	if (!ok || (anon != NULL && !cJSON_IsBool(anon))) {
		cJSON_Delete(j);
		http_resp_error(
		    r, 400, REST_PARAM_ERROR, "a value is out of range or of a wrong type");
		return;
	}
	if (hkb && kb >= 100) {
		kb /= 1000; // 1250 means 1.25
	}
	if (hkb && (kb < 0.5 || kb > 100)) {
		cJSON_Delete(j);
		http_resp_error(r, 400, REST_PARAM_ERROR, "keepalive_backoff out of range");
		return;
	}
	if (hps) {
		api->property_size = (uint32_t)ps;
	}
	if (hmps) {
		lim.max_packet_size = (uint32_t)mps * 1024;
	}
	if (hcmps) {
		lim.client_max_packet_size = (uint32_t)cmps * 1024;
	}
	if (hml) {
		lim.max_mqueue_len = (uint32_t)ml;
	}
	if (hqd) {
		lim.retry_interval_s = (uint32_t)qd;
	}
	if (hkb) {
		lim.keepalive_multiplier = kb;
	}
	if (proto_set_limits(api->env.proto, &lim) != NMQ_OK) {
		cJSON_Delete(j);
		http_resp_error(r, 500, REST_UNKNOWN_ERROR, "out of memory; nothing changed");
		return;
	}
	if (cJSON_IsBool(anon)) {
		broker_set_allow_anonymous(api->env.broker, cJSON_IsTrue(anon));
	}
	log_info("http", "event=runtime_values_changed by=rest");
	cJSON_Delete(j);
	h_reload_get(api, req, r);
}

// ---------------------------------------------------------------- /configuration

// Loads the configuration as the file, environment and command line give
// it now. Returns 0, or -1 after an error reply.
static int load_current(rest_api *api, nmq_conf *c, http_resp *r)
{
	conf_errors errs;
	if (conf_load(c, api->env.cli, api->env.argv0, &errs) != 0) {
		char msg[600];
		snprintf(msg, sizeof(msg), "the configuration does not load: %s",
		    errs.n_errors > 0 ? errs.errors[0] : "unknown error");
		conf_errors_free(&errs);
		http_resp_error(r, 500, REST_BAD_HOCON, msg);
		return -1;
	}
	conf_errors_free(&errs);
	return 0;
}

static void h_conf_get(void *arg, const http_req *req, http_resp *r)
{
	rest_api *api = arg;
	nmq_conf  c;
	if (load_current(api, &c, r) != 0) {
		return;
	}
	cJSON *native = conf_to_json(&c);
	conf_free(&c);
	cJSON *j = native != NULL ? rest_conf_nanomq_view(native) : NULL;
	if (j == NULL) {
		cJSON_Delete(native);
		http_resp_error(r, 500, REST_UNKNOWN_ERROR, "out of memory");
		return;
	}
	if (req->nparams == 1) {
		// NanoMQ's section of that name, else the broker's own (system,
		// mqtt, listeners, bridges, ...).
		cJSON *sec = cJSON_DetachItemFromObjectCaseSensitive(j, req->params[0]);
		if (sec == NULL) {
			sec = cJSON_DetachItemFromObjectCaseSensitive(native, req->params[0]);
		}
		cJSON_Delete(j);
		cJSON_Delete(native);
		if (sec == NULL) {
			http_resp_error(r, 404, REST_PARAM_ERROR, "no such section");
			return;
		}
		rest_ok(r, sec);
		return;
	}
	cJSON_Delete(native);
	rest_ok(r, j);
}

// Reads a whole file (at most MAX_CONF_FILE bytes) into a NUL-terminated
// buffer. Returns NULL if it cannot.
static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL) {
		return NULL;
	}
	char  *buf = malloc(MAX_CONF_FILE + 1);
	size_t n   = buf != NULL ? fread(buf, 1, MAX_CONF_FILE + 1, f) : 0;
	bool   bad = buf == NULL || ferror(f) || n > MAX_CONF_FILE;
	fclose(f);
	if (bad) {
		free(buf);
		return NULL;
	}
	buf[n] = '\0';
	*len   = n;
	return buf;
}

// Writes data to path through path.tmp, fsync and rename. Returns 0 or -1
// with errno set.
static int write_atomic(const char *path, const char *data, size_t len)
{
	char tmp[4200];
	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
	if (fd < 0) {
		return -1;
	}
	size_t off = 0;
	while (off < len) {
		ssize_t n = write(fd, data + off, len - off);
		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n <= 0) {
			int e = errno;
			close(fd);
			unlink(tmp);
			errno = e;
			return -1;
		}
		off += (size_t)n;
	}
	if (fsync(fd) != 0 || close(fd) != 0) {
		int e = errno;
		unlink(tmp);
		errno = e;
		return -1;
	}
	if (rename(tmp, path) != 0) {
		int e = errno;
		unlink(tmp);
		errno = e;
		return -1;
	}
	// The rename itself reaches the disk with the directory.
	char  dbuf[4200];
	char *dir = dirname(strcpy(dbuf, path));
	int   dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		(void)fsync(dfd);
		close(dfd);
	}
	return 0;
}

// Validates text as the configuration file would be read, then writes it
// (previous file kept as .bak). Replies with the outcome.
static void validate_and_write(rest_api *api, const char *text, size_t len, http_resp *r)
{
	const char *path = api->env.conf_path;
	if (path == NULL || strlen(path) > 4000) {
		http_resp_error(r, 500, REST_WRITE_FAILED,
		    "the broker runs without a configuration file: nothing to write");
		return;
	}
	char        dbuf[4200];
	const char *dir = dirname(strcpy(dbuf, path));
	nmq_conf    c;
	conf_errors errs;
	if (conf_load_text(&c, text, len, path, dir, &errs) != 0) {
		char msg[2048];
		int  n = snprintf(msg, sizeof(msg), "not valid HOCON or configuration:");
		for (int i = 0; i < errs.n_errors && n > 0 && (size_t)n < sizeof(msg); i++) {
			n += snprintf(msg + n, sizeof(msg) - (size_t)n, " %s;", errs.errors[i]);
		}
		conf_errors_free(&errs);
		http_resp_error(r, 400, REST_BAD_HOCON, msg);
		return;
	}
	conf_free(&c);
	conf_errors_free(&errs);
	size_t olen;
	char  *old = read_file(path, &olen);
	char   bak[4200];
	snprintf(bak, sizeof(bak), "%s.bak", path);
	if ((old != NULL && write_atomic(bak, old, olen) != 0)
	    || write_atomic(path, text, len) != 0) {
		char msg[512];
		snprintf(msg, sizeof(msg), "cannot write %s: %s", path, strerror(errno));
		log_error(
		    "http", "event=conf_write_failed file=%s reason=\"%s\"", path, strerror(errno));
		free(old);
		http_resp_error(r, 500, REST_WRITE_FAILED, msg);
		return;
	}
	free(old);
	log_info("http", "event=conf_written file=%s bytes=%zu", path, len);
	rest_ok(r, NULL);
}

// Drops every "******" string (a secret left unchanged) and every null (a
// key not set, as GET shows it) from j.
static void drop_masked(cJSON *j)
{
	cJSON *c = j != NULL ? j->child : NULL;
	while (c != NULL) {
		cJSON *next = c->next;
		if (cJSON_IsNull(c)
		    || (cJSON_IsString(c) && strcmp(c->valuestring, "******") == 0)) {
			cJSON_Delete(cJSON_DetachItemViaPointer(j, c));
		} else if (cJSON_IsObject(c)) {
			drop_masked(c);
		}
		c = next;
	}
}

// Says whether the configuration file at path (with its includes) has a
// `listeners` section. A file that cannot be read or parsed counts as
// having one (nothing is added on a guess).
static bool file_has_listeners(const char *path)
{
	hocon_doc  *doc = hocon_doc_alloc();
	conf_errors errs;
	memset(&errs, 0, sizeof(errs));
	bool has = doc == NULL || hocon_parse_file(doc, path, &errs) != 0
	    || hocon_get_path(doc, "listeners") != NULL;
	conf_errors_free(&errs);
	hocon_doc_free(doc);
	return has;
}

// A file without a `listeners` section gets the default TCP listener
// (`listeners.tcp {}`, conf.c); appending a `listeners` section for TLS or
// WebSocket alone would take it away on the next start. The sections of d
// (translated, about to be appended) then carry it explicitly. Returns
// false when memory runs out.
static bool keep_default_listener(const rest_api *api, cJSON *d)
{
	cJSON *ls = cJSON_GetObjectItemCaseSensitive(d, "listeners");
	if (!cJSON_IsObject(ls) || cJSON_GetObjectItemCaseSensitive(ls, "tcp") != NULL
	    || api->env.conf_path == NULL || file_has_listeners(api->env.conf_path)) {
		return true;
	}
	log_info("http",
	    "event=conf_default_listener_kept file=%s reason=\"a listeners section is written: "
	    "listeners.tcp {} is written with it\"",
	    api->env.conf_path);
	return cJSON_AddObjectToObject(ls, "tcp") != NULL;
}

static void h_conf_post(void *arg, const http_req *req, http_resp *r)
{
	rest_api *api = arg;
	cJSON    *j   = rest_parse_body(req, r);
	if (j == NULL) {
		return;
	}
	cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "data");
	if (!cJSON_IsObject(d)) {
		cJSON_Delete(j);
		http_resp_error(r, 400, REST_MISSING_PARAM, "a \"data\" object is required");
		return;
	}
	char   why[300];
	cJSON *t = rest_conf_nanomq_translate(d, why, sizeof(why));
	cJSON_Delete(j);
	if (t == NULL) {
		http_resp_error(r, 400, REST_PARAM_ERROR, why);
		return;
	}
	j = t;
	d = t;
	drop_masked(d);
	if (!keep_default_listener(api, d)) {
		cJSON_Delete(j);
		r->oom = true;
		return;
	}
	// JSON is HOCON: each section is appended to the current file as
	// `name {...}`, where later keys win and objects merge, so everything
	// not given is kept.
	char  *add  = NULL;
	size_t alen = 0;
	FILE  *mf   = open_memstream(&add, &alen);
	bool   bad  = mf == NULL;
	cJSON *sec;
	cJSON_ArrayForEach(sec, d)
	{
		char *v = cJSON_Print(sec);
		if (v == NULL || mf == NULL) {
			bad = true;
			free(v);
			break;
		}
		cJSON *key = cJSON_CreateString(sec->string);
		char  *k   = key != NULL ? cJSON_PrintUnformatted(key) : NULL;
		cJSON_Delete(key);
		if (k == NULL) {
			bad = true;
			free(v);
			break;
		}
		fprintf(mf, "%s = %s\n", k, v);
		free(k);
		free(v);
	}
	if (mf != NULL) {
		fclose(mf);
	}
	cJSON_Delete(j);
	if (bad) {
		free(add);
		http_resp_error(r, 500, REST_UNKNOWN_ERROR, "out of memory");
		return;
	}
	size_t olen = 0;
	char  *old  = api->env.conf_path != NULL ? read_file(api->env.conf_path, &olen) : NULL;
	if (api->env.conf_path != NULL && old == NULL) {
		free(add);
		free(old);
		http_resp_error(r, 500, REST_WRITE_FAILED, "cannot read the configuration file");
		return;
	}
	static const char sep[] = "\n# Written by POST /api/v4/configuration\n";
	char             *text  = malloc(olen + sizeof(sep) + alen + 2);
	if (text == NULL) {
		free(add);
		free(old);
		r->oom = true;
		return;
	}
	size_t n = 0;
	if (old != NULL) {
		memcpy(text, old, olen);
		n = olen;
	}
	memcpy(text + n, sep, sizeof(sep) - 1);
	n += sizeof(sep) - 1;
	memcpy(text + n, add, alen);
	n += alen;
	text[n++] = '\n';
	text[n]   = '\0';
	free(add);
	free(old);
	validate_and_write(api, text, n, r);
	free(text);
}

static void h_config_update(void *arg, const http_req *req, http_resp *r)
{
	if (req->body_len == 0) {
		http_resp_error(r, 400, REST_MISSING_PARAM, "the body must hold the HOCON text");
		return;
	}
	validate_and_write(arg, req->body, req->body_len, r);
}

// ---------------------------------------------------------------- /ctrl

static void h_ctrl(void *arg, const http_req *req, http_resp *r)
{
	rest_api *api = arg;
	bool      stop;
	if (strcmp(req->params[0], "stop") == 0) {
		stop = true;
	} else if (strcmp(req->params[0], "restart") == 0) {
		stop = false;
	} else {
		http_resp_error(r, 400, REST_PARAM_ERROR, "action must be stop or restart");
		return;
	}
	void (*fn)(void *) = stop ? api->env.stop : api->env.restart;
	if (fn == NULL) {
		http_resp_error(r, 500, REST_UNKNOWN_ERROR, "not available");
		return;
	}
	log_info("http", "event=ctrl action=%s", req->params[0]);
	rest_ok(r, NULL);
	r->after     = fn;
	r->after_arg = api->env.ctl_arg;
}

nmq_err rest_routes_conf(http_server *hs, rest_api *api)
{
	static const struct {
		const char  *method, *path;
		http_handler fn;
	} routes[] = {
		{ "GET", "/api/v4/reload", h_reload_get },
		{ "POST", "/api/v4/reload", h_reload_post },
		{ "GET", "/api/v4/configuration", h_conf_get },
		{ "GET", "/api/v4/configuration/:section", h_conf_get },
		{ "POST", "/api/v4/configuration", h_conf_post },
		{ "POST", "/api/v4/config_update", h_config_update },
		{ "POST", "/api/v4/ctrl/:action", h_ctrl },
	};
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		nmq_err e
		    = http_server_route(hs, routes[i].method, routes[i].path, routes[i].fn, api);
		if (e != NMQ_OK) {
			return e;
		}
	}
	return NMQ_OK;
}
