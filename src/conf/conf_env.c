// The overlays applied on top of the file: NANOMQ_* environment variables
// (docs/compatibility.md §3), then command-line options (§5). Both are
// written into the configuration tree with their own origin ("environment
// variable NANOMQ_X", "command line option --y"), so that the one
// validation pass checks them and its messages name the variable or
// option.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/conf/ascii.h"
#include "src/conf/conf_int.h"

// The variables that do not set one key of the schema (the others are
// named by their schema row, conf_key.env).
enum env_how {
	ENV_PATH = 0, // the configuration file, read by conf_load
	ENV_PID, // the pid file
	ENV_HTTP_URL, // http_server.ip_addr and .port together
	ENV_IGNORED,
};

typedef struct env_var {
	const char *name;
	int         how;
} env_var;

static const env_var env_other[] = {
	{ "NANOMQ_CONF_PATH", ENV_PATH },
	{ "NANOMQ_PID_FILE", ENV_PID },
	{ "NANOMQ_HTTP_SERVER_URL", ENV_HTTP_URL },
	{ "NANOMQ_VIN", ENV_IGNORED },
	{ "NANOMQ_MSG_PERSISTENCE", ENV_IGNORED },
	{ "NANOMQ_EXCHANGER_URL", ENV_IGNORED },
};

#define N_ENV_OTHER (sizeof(env_other) / sizeof(env_other[0]))

// Sections that an overlay may create: created only by settings other
// than their switch, they stay disabled (a key file given on the command
// line does not open a TLS listener by itself).
static const char *switched[] = { "listeners.ssl", "listeners.ws", "listeners.wss", "http_server" };
#define N_SWITCHED (sizeof(switched) / sizeof(switched[0]))

// Records which switched sections exist before an overlay.
static void switched_before(hocon_doc *doc, bool *had)
{
	for (size_t i = 0; i < N_SWITCHED; i++) {
		had[i] = hocon_get_path(doc, switched[i]) != NULL;
	}
}

// Disables the switched sections an overlay created without their switch.
static void switched_after(hocon_doc *doc, const bool *had, int origin)
{
	char key[64];

	for (size_t i = 0; i < N_SWITCHED; i++) {
		snprintf(key, sizeof(key), "%s.enable", switched[i]);
		if (!had[i] && hocon_get_path(doc, switched[i]) != NULL
		    && hocon_get_path(doc, key) == NULL) {
			hocon_set_path(doc, key, cJSON_CreateFalse(), origin, 0, 0);
		}
	}
}

// Splits comma-separated words into a new array of strings (NULL when
// memory runs out).
static cJSON *split_list(const char *s)
{
	cJSON *arr = cJSON_CreateArray();

	while (arr != NULL && *s != '\0') {
		size_t n = ascii_cspn(s, ",");
		size_t b = 0;
		char  *w;
		while (b < n && (s[b] == ' ' || s[b] == '\t')) {
			b++;
		}
		while (n > b && (s[n - 1] == ' ' || s[n - 1] == '\t')) {
			n--;
		}
		if (n > b) {
			if ((w = strndup(s + b, n - b)) == NULL
			    || !cJSON_AddItemToArray(arr, cJSON_CreateString(w))) {
				free(w);
				cJSON_Delete(arr);
				return NULL;
			}
			free(w);
		}
		s += ascii_cspn(s, ",");
		if (*s == ',') {
			s++;
		}
	}
	return arr;
}

// Applies NANOMQ_HTTP_SERVER_URL ("[http://]host:port"). Returns 0 or -1
// after reporting an error.
static int env_http_url(hocon_doc *doc, const char *value, int origin, conf_errors *errs)
{
	const char *sep   = ascii_strstr(value, "://");
	const char *s     = sep != NULL ? sep + 3 : value;
	const char *colon = strrchr(s, ':');
	char       *host;

	if (colon == NULL || colon[1] == '\0'
	    || strspn(colon + 1, "0123456789") != strlen(colon + 1)) {
		conf_errors_add(errs, true,
		    "environment variable NANOMQ_HTTP_SERVER_URL: expected "
		    "[http://]host:port, got \"%.64s\"",
		    value);
		return -1;
	}
	if ((host = strndup(s, (size_t)(colon - s))) == NULL) {
		return -1;
	}
	if (host[0] != '\0') {
		hocon_set_path(doc, "http_server.ip_addr", cJSON_CreateString(host), origin, 0,
		    HOCON_LOC_LOOSE);
	}
	hocon_set_path(
	    doc, "http_server.port", cJSON_CreateString(colon + 1), origin, 0, HOCON_LOC_LOOSE);
	free(host);
	return 0;
}

// Returns the origin for variable name, or -1 after reporting an error.
static int env_origin(hocon_doc *doc, const char *name, conf_errors *errs)
{
	char buf[96];
	int  origin;

	snprintf(buf, sizeof(buf), "environment variable %s", name);
	if ((origin = hocon_origin_add(doc, buf)) < 0) {
		conf_errors_add(errs, true, "%s: out of memory", name);
	}
	return origin;
}

// Writes the NANOMQ_* variables into the tree: first those of env_other
// (NANOMQ_PID_FILE goes straight into conf), then those of the schema, so
// that NANOMQ_HTTP_SERVER_PORT wins over the port of NANOMQ_HTTP_SERVER_URL.
void conf_env_apply(hocon_doc *doc, nmq_conf *conf, conf_errors *errs)
{
	bool had[N_SWITCHED];
	int  origin = -1;

	switched_before(doc, had);
	for (size_t i = 0; i < N_ENV_OTHER; i++) {
		const env_var *e     = &env_other[i];
		const char    *value = getenv(e->name);

		if (value == NULL || value[0] == '\0') {
			continue;
		}
		if (e->how == ENV_PID) {
			char *copy = strdup(value);
			if (copy == NULL) {
				conf_errors_add(errs, true, "%s: out of memory", e->name);
				continue;
			}
			free(conf->pid_file);
			conf->pid_file = copy;
		} else if (e->how == ENV_HTTP_URL) {
			if ((origin = env_origin(doc, e->name, errs)) < 0) {
				return;
			}
			env_http_url(doc, value, origin, errs);
		}
	}
	for (size_t i = 0; i < conf_schema_len; i++) {
		const conf_key *k = &conf_schema[i];
		const char     *value;
		cJSON          *v;

		if (k->env == NULL || (value = getenv(k->env)) == NULL || value[0] == '\0') {
			continue;
		}
		if ((origin = env_origin(doc, k->env, errs)) < 0) {
			return;
		}
		v = k->type == CONF_T_FLAGS ? split_list(value) : cJSON_CreateString(value);
		if (hocon_set_path(doc, k->path, v, origin, 0, HOCON_LOC_LOOSE) == NULL) {
			conf_errors_add(errs, true, "%s: out of memory", k->env);
		}
	}
	if (origin >= 0) {
		switched_after(doc, had, origin);
	}
}

// Writes the environment table as Markdown.
int conf_env_markdown(FILE *out)
{
	fprintf(out, "| variable | key |\n|---|---|\n");
	for (size_t i = 0; i < N_ENV_OTHER; i++) {
		const env_var *e = &env_other[i];
		switch (e->how) {
		case ENV_PATH:
			fprintf(out, "| `%s` | the configuration file |\n", e->name);
			break;
		case ENV_PID:
			fprintf(out,
			    "| `%s` | the pid file (default: see `system.cmd_ipc_url`) |\n",
			    e->name);
			break;
		case ENV_HTTP_URL:
			fprintf(out,
			    "| `%s` | `http_server.ip_addr` and `.port` (`[http://]host:port`) |\n",
			    e->name);
			break;
		default:
			fprintf(out, "| `%s` | accepted and ignored |\n", e->name);
			break;
		}
	}
	for (size_t i = 0; i < conf_schema_len; i++) {
		const conf_key *k = &conf_schema[i];
		if (k->env != NULL) {
			fprintf(out, "| `%s` | `%s`%s |\n", k->env, k->path,
			    k->type == CONF_T_FLAGS ? " (comma-separated)" : "");
		}
	}
	return ferror(out) ? -1 : 0;
}

// ---------------------------------------------------------------------------
// Command line.

// Sets fields of cli to "not set": NULL strings, and -1 for the integers
// of the options of the schema and for --log_stdout and --log_syslog.
void conf_cli_init(conf_cli *cli)
{
	conf_option o;
	size_t      it = 0;

	memset(cli, 0, sizeof(*cli));
	while (conf_option_next(&it, &o)) {
		if (o.kind == CONF_OPT_FLAG || o.kind == CONF_OPT_INT) {
			*(int *)(void *)((char *)cli + o.field) = -1;
		}
	}
	cli->log_stdout = -1;
	cli->log_syslog = -1;
}

// Returns the origin index for a command-line option, or -1.
static int cli_origin(hocon_doc *doc, const char *opt)
{
	char name[96];

	snprintf(name, sizeof(name), "command line option %s", opt);
	return hocon_origin_add(doc, name);
}

// Sets key to value (taking ownership) with the origin of option opt.
static void cli_set(
    hocon_doc *doc, conf_errors *errs, const char *opt, const char *key, cJSON *value)
{
	int origin = cli_origin(doc, opt);

	if (origin < 0 || hocon_set_path(doc, key, value, origin, 0, 0) == NULL) {
		if (origin < 0) {
			cJSON_Delete(value);
		}
		conf_errors_add(errs, true, "command line option %s: out of memory", opt);
	}
}

// Returns the listener kind of a --url by its scheme, or -1.
static int url_kind(const char *url)
{
	static const struct {
		const char *scheme;
		int         kind;
	} map[] = {
		{ "nmq-tcp://", CONF_LISTENER_TCP },
		{ "tcp://", CONF_LISTENER_TCP },
		{ "tls+nmq-tcp://", CONF_LISTENER_SSL },
		{ "tls+tcp://", CONF_LISTENER_SSL },
		{ "nmq-ws://", CONF_LISTENER_WS },
		{ "ws://", CONF_LISTENER_WS },
		{ "nmq-wss://", CONF_LISTENER_WSS },
		{ "wss://", CONF_LISTENER_WSS },
	};

	if (ascii_strstr(url, "://") == NULL) {
		return CONF_LISTENER_TCP;
	}
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
		if (strncmp(url, map[i].scheme, strlen(map[i].scheme)) == 0) {
			return map[i].kind;
		}
	}
	return -1;
}

// Applies the --url options: each kind given replaces the file's listeners
// of that kind.
static void cli_urls(hocon_doc *doc, const conf_cli *cli, conf_errors *errs)
{
	int  counts[4] = { 0, 0, 0, 0 };
	char key[96];
	int  n = cli->n_urls < 8 ? cli->n_urls : 8;

	for (int i = 0; i < n; i++) {
		if (cli->urls[i] == NULL) {
			continue;
		}
		if (url_kind(cli->urls[i]) < 0) {
			conf_errors_add(errs, true,
			    "command line option --url: unknown scheme in \"%.64s\"", cli->urls[i]);
		}
	}
	for (int i = 0; i < n; i++) {
		const char *kname;
		int         kind;
		if (cli->urls[i] == NULL || (kind = url_kind(cli->urls[i])) < 0) {
			continue;
		}
		kname = conf_listener_kind_name(kind);
		if (counts[kind] == 0) {
			// Drop the named listeners of this kind from the file.
			cJSON *k;
			snprintf(key, sizeof(key), "listeners.%s", kname);
			if ((k = hocon_get_path(doc, key)) != NULL && cJSON_IsObject(k)) {
				cJSON *c = k->child;
				while (c != NULL) {
					cJSON *next = c->next;
					if (cJSON_IsObject(c)) {
						hocon_remove_child(doc, k, c);
					}
					c = next;
				}
			}
			snprintf(key, sizeof(key), "listeners.%s.bind", kname);
			cli_set(doc, errs, "--url", key, cJSON_CreateString(cli->urls[i]));
			snprintf(key, sizeof(key), "listeners.%s.enable", kname);
			cli_set(doc, errs, "--url", key, cJSON_CreateTrue());
		} else {
			snprintf(
			    key, sizeof(key), "listeners.%s.url_%d.bind", kname, counts[kind] + 1);
			cli_set(doc, errs, "--url", key, cJSON_CreateString(cli->urls[i]));
		}
		counts[kind]++;
	}
}

// Returns the words of the current log.to (default [console]) as a new
// array, or NULL when log.to is not a word or a list of words.
static cJSON *log_to_words(hocon_doc *doc)
{
	cJSON *cur = hocon_get_path(doc, "log.to");

	if (cur == NULL) {
		cJSON *arr = cJSON_CreateArray();
		if (arr != NULL && !cJSON_AddItemToArray(arr, cJSON_CreateString("console"))) {
			cJSON_Delete(arr);
			return NULL;
		}
		return arr;
	}
	if (cJSON_IsString(cur)) {
		return split_list(cur->valuestring);
	}
	if (cJSON_IsArray(cur)) {
		for (const cJSON *e = cur->child; e != NULL; e = e->next) {
			if (!cJSON_IsString(e)) {
				return NULL;
			}
		}
		return cJSON_Duplicate(cur, true);
	}
	return NULL;
}

// Adds (on) or removes word from the log.to list.
static void cli_log_to(
    hocon_doc *doc, conf_errors *errs, const char *opt, const char *word, bool on)
{
	cJSON *arr = log_to_words(doc);
	cJSON *c;
	bool   found = false;

	if (arr == NULL) {
		return; // log.to is malformed: the check reports it
	}
	c = arr->child;
	while (c != NULL) {
		cJSON *next = c->next;
		if (strcmp(c->valuestring, word) == 0) {
			found = true;
			if (!on) {
				cJSON_Delete(cJSON_DetachItemViaPointer(arr, c));
			}
		}
		c = next;
	}
	if (on && !found) {
		cJSON_AddItemToArray(arr, cJSON_CreateString(word));
	}
	cli_set(doc, errs, opt, "log.to", arr);
}

// Sets an integer option when it is not -1.
static void cli_int(hocon_doc *doc, conf_errors *errs, const char *opt, const char *key, int v)
{
	if (v != -1) {
		cli_set(doc, errs, opt, key, cJSON_CreateNumber(v));
	}
}

// Sets a string option when it is not NULL.
static void cli_str(
    hocon_doc *doc, conf_errors *errs, const char *opt, const char *key, const char *v)
{
	if (v != NULL) {
		cli_set(doc, errs, opt, key, cJSON_CreateString(v));
	}
}

// Writes the options of the schema that were given into the tree.
static void cli_options(hocon_doc *doc, const conf_cli *cli, conf_errors *errs)
{
	conf_option o;
	size_t      it = 0;
	char        opt[48];

	while (conf_option_next(&it, &o)) {
		const char *field = (const char *)cli + o.field;
		snprintf(opt, sizeof(opt), "--%s", o.name);
		switch (o.kind) {
		case CONF_OPT_FLAG: {
			int v = *(const int *)(const void *)field;
			if (v == 0 || v == 1) {
				cli_set(doc, errs, opt, o.key, cJSON_CreateBool(v));
			}
			break;
		}
		case CONF_OPT_INT:
			cli_int(doc, errs, opt, o.key, *(const int *)(const void *)field);
			break;
		default:
			cli_str(doc, errs, opt, o.key, *(const char *const *)(const void *)field);
			break;
		}
	}
}

// Writes the command-line overrides into the tree.
void conf_cli_apply(hocon_doc *doc, const conf_cli *cli, conf_errors *errs)
{
	bool had[N_SWITCHED];
	int  origin;

	if (cli == NULL) {
		return;
	}
	switched_before(doc, had);
	cli_urls(doc, cli, errs);
	cli_options(doc, cli, errs);
	if (cli->log_file != NULL) {
		const char *slash = strrchr(cli->log_file, '/');
		if (slash != NULL) {
			char *dir = strndup(cli->log_file, (size_t)(slash - cli->log_file));
			cli_str(doc, errs, "--log_file", "log.dir",
			    dir != NULL && dir[0] != '\0' ? dir : "/");
			free(dir);
			cli_str(doc, errs, "--log_file", "log.file", slash + 1);
		} else {
			cli_str(doc, errs, "--log_file", "log.file", cli->log_file);
		}
		cli_log_to(doc, errs, "--log_file", "file", true);
	}
	if (cli->log_stdout == 0 || cli->log_stdout == 1) {
		cli_log_to(doc, errs, "--log_stdout", "console", cli->log_stdout == 1);
	}
	if (cli->log_syslog == 0 || cli->log_syslog == 1) {
		cli_log_to(doc, errs, "--log_syslog", "syslog", cli->log_syslog == 1);
	}
	if ((origin = hocon_origin_add(doc, "command line")) >= 0) {
		switched_after(doc, had, origin);
	}
}
