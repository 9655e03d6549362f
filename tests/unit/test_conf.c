// Unit tests of the configuration schema and loader (src/conf): defaults,
// types, ranges, messages that name file:line:key, unknown keys,
// precedence (defaults < file < environment < command line), the legacy
// flat format, listeners, auth, reload differences, and that
// docs/config.md and etc/nanomq.conf agree with the schema.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/conf/ascii.h"
#include "src/conf/conf.h"
#include "src/conf/conf_int.h"

extern char **environ;

static char tmpdir[64];

// ------------------------------------------------------------------ helpers

// Removes every NANOMQ_* variable from the environment.
static void clear_env(void)
{
	for (;;) {
		char  name[128];
		char *found = NULL;
		for (char **e = environ; *e != NULL; e++) {
			if (strncmp(*e, "NANOMQ_", 7) == 0) {
				found = *e;
				break;
			}
		}
		if (found == NULL) {
			return;
		}
		snprintf(name, sizeof(name), "%.*s", (int)strcspn(found, "="), found);
		unsetenv(name);
	}
}

static int setup(void **state)
{
	(void)state;
	clear_env();
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_conf.XXXXXX");
	return mkdtemp(tmpdir) == NULL ? -1 : 0;
}

static int teardown(void **state)
{
	char cmd[128];
	(void)state;
	clear_env();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

// Writes text to tmpdir/name and returns the full path (static buffer).
static const char *write_file(const char *name, const char *text)
{
	static char path[256];
	FILE       *f;

	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	return path;
}

// Prints the messages of errs (shown when a test fails).
static void dump(const conf_errors *errs)
{
	for (int i = 0; i < errs->n_errors; i++) {
		print_message("error: %s\n", errs->errors[i]);
	}
	for (int i = 0; i < errs->n_warnings; i++) {
		print_message("warning: %s\n", errs->warnings[i]);
	}
}

// Loads text (named t.conf) that must be valid, without warnings unless
// allowed.
static void load_ok(const char *text, nmq_conf *c, int warnings)
{
	conf_errors errs;
	int         rc = conf_load_text(c, text, strlen(text), "t.conf", tmpdir, &errs);

	if (rc != 0 || errs.n_warnings != warnings) {
		dump(&errs);
		fail_msg("load of \"%s\": rc %d, %d warnings", text, rc, errs.n_warnings);
	}
	conf_errors_free(&errs);
}

// Asserts that text fails to load with want as its first error, and only
// one error.
static void load_err(const char *text, const char *want)
{
	nmq_conf    c;
	conf_errors errs;
	int         rc = conf_load_text(&c, text, strlen(text), "t.conf", tmpdir, &errs);

	if (rc != -1 || errs.n_errors != 1 || strcmp(errs.errors[0], want) != 0) {
		dump(&errs);
		fail_msg(
		    "load of \"%s\": rc %d, %d errors, want \"%s\"", text, rc, errs.n_errors, want);
	}
	assert_null(c.cmd_ipc_url); // freed and zeroed
	conf_errors_free(&errs);
}

// Asserts that text loads with want among its warnings.
static void load_warn(const char *text, const char *want)
{
	nmq_conf    c;
	conf_errors errs;
	int         rc    = conf_load_text(&c, text, strlen(text), "t.conf", tmpdir, &errs);
	bool        found = false;

	for (int i = 0; i < errs.n_warnings; i++) {
		found = found || strcmp(errs.warnings[i], want) == 0;
	}
	if (rc != 0 || !found) {
		dump(&errs);
		fail_msg("load of \"%s\": rc %d, want warning \"%s\"", text, rc, want);
	}
	conf_free(&c);
	conf_errors_free(&errs);
}

// Returns the source tree: $NMQ_SOURCE_DIR, else derived from __FILE__.
static const char *source_dir(void)
{
	static char dir[PATH_MAX];
	const char *env = getenv("NMQ_SOURCE_DIR");
	const char *tail;

	if (env != NULL && env[0] != '\0') {
		return env;
	}
	snprintf(dir, sizeof(dir), "%s", __FILE__);
	tail = strstr(dir, "/tests/unit/test_conf.c");
	if (tail == NULL) {
		return ".";
	}
	dir[tail - dir] = '\0';
	return dir;
}

// Reads a whole file into a new buffer (NULL if it cannot be read).
static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long  n;

	if (f == NULL) {
		return NULL;
	}
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
		n = 0;
	}
	buf[n] = '\0';
	fclose(f);
	*len = (size_t)n;
	return buf;
}

// -------------------------------------------------------------- defaults

static void test_defaults(void **state)
{
	nmq_conf c;
	(void)state;
	conf_defaults(&c);
	assert_false(c.daemon);
	assert_int_equal(c.num_taskq_thread, 0);
	assert_int_equal(c.max_taskq_thread, 0);
	assert_int_equal(c.parallel, NMQ_PARALLEL_DEFAULT);
	assert_true(c.enable_ipc_internal);
	assert_string_equal(c.cmd_ipc_url, "ipc:///tmp/nanomq_cmd.ipc");
	assert_string_equal(c.hook_ipc_url, "ipc:///tmp/nanomq_hook.ipc");
	assert_string_equal(c.pid_file, "/tmp/nanomq/nanomq.pid");
	assert_int_equal(c.max_packet_size, 10 * 1024 * 1024);
	assert_int_equal(c.client_max_packet_size, 10 * 1024 * 1024);
	assert_int_equal(c.max_mqueue_len, NMQ_MSQ_LEN_DEFAULT);
	assert_int_equal(c.max_inflight_window, 2048);
	assert_int_equal(c.max_awaiting_rel, 100);
	assert_int_equal(c.await_rel_timeout_s, 300);
	assert_int_equal(c.retry_interval_s, 10);
	assert_true(c.keepalive_multiplier == 1.5);
	assert_int_equal(c.max_topic_alias, 64);
	assert_int_equal(c.property_size, 32);
	assert_false(c.batch_resend);
	assert_int_equal(c.n_listeners, 1);
	assert_int_equal(c.listeners[0].kind, CONF_LISTENER_TCP);
	assert_string_equal(c.listeners[0].name, "tcp");
	assert_string_equal(c.listeners[0].bind, "0.0.0.0:1883");
	assert_string_equal(c.listeners[0].host, "0.0.0.0");
	assert_int_equal(c.listeners[0].port, 1883);
	assert_int_equal(c.log_to, CONF_LOG_TO_CONSOLE);
	assert_int_equal(c.log_level, LOG_LEVEL_WARN);
	assert_string_equal(c.log_dir, ".");
	assert_string_equal(c.log_file, "nanomq.log");
	assert_int_equal(c.log_rotation_size, 10 * 1024 * 1024);
	assert_int_equal(c.log_rotation_count, 5);
	assert_null(c.log_uds_addr);
	assert_false(c.http_enable);
	assert_int_equal(c.http_port, 8081);
	assert_string_equal(c.http_ip_addr, "0.0.0.0");
	assert_int_equal(c.http_limit_conn, 32);
	assert_int_equal(c.http_max_body, 1024 * 1024);
	assert_int_equal(c.http_auth_type, CONF_HTTP_AUTH_BASIC);
	assert_true(c.allow_anonymous);
	assert_int_equal(c.auth_no_match, CONF_ACL_ALLOW);
	assert_int_equal(c.auth_deny_action, CONF_DENY_IGNORE);
	assert_true(c.auth_cache_enable);
	assert_int_equal(c.auth_cache_max_size, 32);
	assert_int_equal(c.auth_cache_ttl_s, 60);
	assert_false(c.auth_acl_enable);
	assert_null(c.auth_password);
	assert_null(c.auth_acl);
	conf_free(&c);
	conf_free(&c); // a zeroed conf may be freed again
	conf_free(NULL);

	// An empty file gives the same as the defaults.
	load_ok("", &c, 0);
	assert_int_equal(c.n_listeners, 1);
	assert_string_equal(c.listeners[0].bind, "0.0.0.0:1883");
	assert_int_equal(c.max_mqueue_len, NMQ_MSQ_LEN_DEFAULT);
	conf_free(&c);
}

static void test_schema_sane(void **state)
{
	(void)state;
	for (size_t i = 0; i < conf_schema_len; i++) {
		const conf_key *k = &conf_schema[i];
		char            why[256];
		conf_val        v;
		if (k->def != NULL && k->type != CONF_T_SECTION && k->type != CONF_T_OBJECT
		    && k->type != CONF_T_ARRAY) {
			if (conf_value_parse(k, k->def, false, &v, why, sizeof(why)) != 0) {
				fail_msg("%s: default \"%s\": %s", k->path, k->def, why);
			}
			free(v.s);
		}
		if (k->store == CONF_ST_U32 && k->min < k->max) {
			assert_true(k->min >= 0 && k->max <= 4294967295.0);
		}
		if (k->store == CONF_ST_INT && k->min < k->max) {
			assert_true(k->min >= INT_MIN && k->max <= INT_MAX);
		}
		if (k->type == CONF_T_ENUM || k->type == CONF_T_FLAGS) {
			assert_non_null(k->words);
		}
		assert_non_null(k->help);
		assert_ptr_equal(conf_schema_find(k->path, NULL), k);
		if (k->alias != NULL) {
			bool alias = false;
			assert_ptr_equal(conf_schema_find(k->alias, &alias), k);
			assert_true(alias);
		}
	}
}

// Every other spelling of a key (variable, flat name, option) is unique
// and reaches that key: each is given a value and conf_load must store it.
static void test_spellings(void **state)
{
	conf_option o;
	size_t      it = 0, n_opts = 0;
	const char *names[128];
	char        letters[128];
	(void)state;
	for (size_t i = 0; i < conf_schema_len; i++) {
		const conf_key *a = &conf_schema[i];
		for (size_t j = i + 1; j < conf_schema_len; j++) {
			const conf_key *b = &conf_schema[j];
			if (a->env != NULL && b->env != NULL && strcmp(a->env, b->env) == 0) {
				fail_msg("%s and %s share %s", a->path, b->path, a->env);
			}
			if (a->flat != NULL && b->flat != NULL && strcmp(a->flat, b->flat) == 0) {
				fail_msg("%s and %s share flat %s", a->path, b->path, a->flat);
			}
		}
		if (a->env != NULL) {
			assert_int_equal(strncmp(a->env, "NANOMQ_", 7), 0);
			assert_true(a->type != CONF_T_SECTION);
		}
		if (a->flat != NULL && a->flat[strlen(a->flat) - 1] == '.') {
			assert_int_equal(a->type, CONF_T_SECTION); // prefixes name sections
		}
	}
	while (conf_option_next(&it, &o)) {
		const conf_key *k = conf_schema_find(o.key, NULL);
		assert_non_null(k);
		assert_ptr_equal(k->opt, o.name);
		assert_true(o.field >= offsetof(conf_cli, daemon) && o.field < sizeof(conf_cli));
		for (size_t j = 0; j < n_opts; j++) {
			if (strcmp(names[j], o.name) == 0
			    || (o.letter != 0 && letters[j] == o.letter)) {
				fail_msg("option --%s is given twice", o.name);
			}
		}
		names[n_opts]     = o.name;
		letters[n_opts++] = o.letter;
		assert_true(o.kind != CONF_OPT_INT || o.min <= o.max);
	}
	assert_true(n_opts >= 17);
}

// The keys NanoMQ's flat files carry without a meaning of their own, and
// the command channel's variable and option.
static void test_new_spellings(void **state)
{
	nmq_conf    c;
	conf_errors errs;
	conf_cli    cli;
	char        p[256];
	(void)state;
	snprintf(p, sizeof(p), "%s",
	    write_file("flat.conf", "enable_ipc_internal=false\nauth_enable=false\n"));
	conf_cli_init(&cli);
	cli.old_conf_path = p;
	assert_int_equal(conf_load(&c, &cli, NULL, &errs), 0);
	dump(&errs);
	assert_int_equal(errs.n_warnings, 0);
	assert_false(c.enable_ipc_internal);
	conf_free(&c);
	conf_errors_free(&errs);

	snprintf(
	    p, sizeof(p), "%s", write_file("ipc.conf", "system.cmd_ipc_url = \"ipc:///tmp/f\"\n"));
	conf_cli_init(&cli);
	cli.conf_path = p;
	setenv("NANOMQ_CMD_IPC_URL", "ipc:///tmp/e", 1);
	assert_int_equal(conf_load(&c, &cli, NULL, &errs), 0);
	assert_string_equal(c.cmd_ipc_url, "ipc:///tmp/e");
	conf_free(&c);
	conf_errors_free(&errs);
	cli.cmd_ipc_url = "ipc:///tmp/o";
	assert_int_equal(conf_load(&c, &cli, NULL, &errs), 0);
	assert_string_equal(c.cmd_ipc_url, "ipc:///tmp/o");
	conf_free(&c);
	conf_errors_free(&errs);
	unsetenv("NANOMQ_CMD_IPC_URL");
}

// Side-by-side brokers: a file other than the default one gets its own pid
// file and command channel; the default file keeps NanoMQ's; explicit
// settings win; `stop` finds the same pid file without reading the file.
static void test_instance_paths(void **state)
{
	nmq_conf    a, b, c;
	conf_errors errs;
	conf_cli    cli;
	char        pa[256], pb[256], argv0[256], buf[PATH_MAX];
	(void)state;
	clear_env();
	snprintf(pa, sizeof(pa), "%s", write_file("site a.conf", "system.parallel = 1\n"));
	snprintf(pb, sizeof(pb), "%s", write_file("b.conf", "system.parallel = 1\n"));
	snprintf(argv0, sizeof(argv0), "%s/bin/nanomq", tmpdir);
	conf_cli_init(&cli);
	cli.conf_path = pa;
	assert_int_equal(conf_load(&a, &cli, argv0, &errs), 0);
	conf_errors_free(&errs);
	assert_int_equal(strncmp(a.pid_file, "/tmp/nanomq/nanomq-site_a-", 26), 0);
	assert_int_equal(strlen(a.pid_file), 26 + 8 + 4);
	assert_string_equal(a.pid_file + 34, ".pid");
	assert_int_equal(strncmp(a.cmd_ipc_url, "ipc:///tmp/nanomq_cmd-site_a-", 29), 0);
	assert_memory_equal(a.cmd_ipc_url + 29, a.pid_file + 26, 8); // the same hash
	assert_int_equal(conf_pid_file(&cli, argv0, buf, sizeof(buf)), NMQ_OK);
	assert_string_equal(buf, a.pid_file);
	cli.conf_path = pb;
	assert_int_equal(conf_load(&b, &cli, argv0, &errs), 0);
	conf_errors_free(&errs);
	assert_int_equal(strncmp(b.pid_file, "/tmp/nanomq/nanomq-b-", 21), 0);
	assert_string_not_equal(a.cmd_ipc_url, b.cmd_ipc_url);
	conf_free(&b);

	// Explicit settings win.
	setenv("NANOMQ_PID_FILE", "/run/x.pid", 1);
	cli.cmd_ipc_url = "ipc:///tmp/given.ipc";
	assert_int_equal(conf_load(&b, &cli, argv0, &errs), 0);
	conf_errors_free(&errs);
	assert_string_equal(b.pid_file, "/run/x.pid");
	assert_string_equal(b.cmd_ipc_url, "ipc:///tmp/given.ipc");
	assert_int_equal(conf_pid_file(&cli, argv0, buf, sizeof(buf)), NMQ_OK);
	assert_string_equal(buf, "/run/x.pid");
	conf_free(&b);
	unsetenv("NANOMQ_PID_FILE");
	cli.cmd_ipc_url = NULL;

	// The default file (beside the binary), named or found: NanoMQ's.
	snprintf(buf, sizeof(buf), "%s/bin", tmpdir);
	assert_int_equal(mkdir(buf, 0755), 0);
	write_file("bin/nanomq.conf", "system.parallel = 2\n");
	snprintf(pb, sizeof(pb), "%s/bin/../bin/nanomq.conf", tmpdir);
	cli.conf_path = pb;
	assert_int_equal(conf_load(&c, &cli, argv0, &errs), 0);
	conf_errors_free(&errs);
	assert_string_equal(c.pid_file, "/tmp/nanomq/nanomq.pid");
	assert_string_equal(c.cmd_ipc_url, "ipc:///tmp/nanomq_cmd.ipc");
	conf_free(&c);
	assert_int_equal(conf_load(&c, NULL, argv0, &errs), 0);
	conf_errors_free(&errs);
	assert_int_equal(c.parallel, 2);
	assert_string_equal(c.pid_file, "/tmp/nanomq/nanomq.pid");
	assert_int_equal(conf_pid_file(NULL, argv0, buf, sizeof(buf)), NMQ_OK);
	assert_string_equal(buf, "/tmp/nanomq/nanomq.pid");
	conf_free(&c);

	// The same file by another name is the same instance.
	snprintf(pb, sizeof(pb), "%s/./site a.conf", tmpdir);
	cli.conf_path = pb;
	assert_int_equal(conf_pid_file(&cli, argv0, buf, sizeof(buf)), NMQ_OK);
	assert_string_equal(buf, a.pid_file);
	conf_free(&a);
}

// ----------------------------------------------------------------- types

static void test_types(void **state)
{
	nmq_conf c;
	(void)state;
	load_ok(
	    "system { daemon = yes, num_taskq_thread = 4, max_taskq_thread = 8, parallel = 16 }\n"
	    "system.enable_ipc_internal = off\n"
	    "system.cmd_ipc_url = \"ipc:///tmp/x.ipc\"\n"
	    "mqtt {\n"
	    "  max_packet_size = 512kb\n"
	    "  client_max_packet_size = 1024\n"
	    "  max_mqueue_len = 10\n"
	    "  max_inflight_window = 20\n"
	    "  max_awaiting_rel = 30\n"
	    "  await_rel_timeout = 2m\n"
	    "  retry_interval = 1h\n"
	    "  keepalive_multiplier = 2.5\n"
	    "  max_topic_alias = 0\n"
	    "  property_size = 64\n"
	    "  batch_resend = on\n"
	    "}\n"
	    "log { to = file, level = \"ERROR\", dir = /var/log, file = n.log }\n"
	    "log.rotation { size = 1 GB, count = 0 }\n"
	    "log.uds_addr = /tmp/l.sock\n"
	    "auth { allow_anonymous = false, no_match = deny, deny_action = disconnect }\n"
	    "auth.cache { enable = no, max_size = 100, ttl = 90 }\n",
	    &c, 0);
	assert_true(c.daemon);
	assert_int_equal(c.num_taskq_thread, 4);
	assert_int_equal(c.max_taskq_thread, 8);
	assert_int_equal(c.parallel, 16);
	assert_false(c.enable_ipc_internal);
	assert_string_equal(c.cmd_ipc_url, "ipc:///tmp/x.ipc");
	assert_int_equal(c.max_packet_size, 512 * 1024);
	assert_int_equal(c.client_max_packet_size, 1024);
	assert_int_equal(c.max_mqueue_len, 10);
	assert_int_equal(c.max_inflight_window, 20);
	assert_int_equal(c.max_awaiting_rel, 30);
	assert_int_equal(c.await_rel_timeout_s, 120);
	assert_int_equal(c.retry_interval_s, 3600);
	assert_true(c.keepalive_multiplier == 2.5);
	assert_int_equal(c.max_topic_alias, 0);
	assert_int_equal(c.property_size, 64);
	assert_true(c.batch_resend);
	assert_int_equal(c.log_to, CONF_LOG_TO_FILE);
	assert_int_equal(c.log_level, LOG_LEVEL_ERROR);
	assert_string_equal(c.log_dir, "/var/log");
	assert_string_equal(c.log_file, "n.log");
	assert_int_equal(c.log_rotation_size, 1024ULL * 1024 * 1024);
	assert_int_equal(c.log_rotation_count, 0);
	assert_string_equal(c.log_uds_addr, "/tmp/l.sock");
	assert_false(c.allow_anonymous);
	assert_int_equal(c.auth_no_match, CONF_ACL_DENY);
	assert_int_equal(c.auth_deny_action, CONF_DENY_DISCONNECT);
	assert_false(c.auth_cache_enable);
	assert_int_equal(c.auth_cache_max_size, 100);
	assert_int_equal(c.auth_cache_ttl_s, 90);
	conf_free(&c);

	// client_max_packet_size follows max_packet_size unless given.
	load_ok("mqtt.max_packet_size = 2MB\n", &c, 0);
	assert_int_equal(c.client_max_packet_size, 2 * 1024 * 1024);
	conf_free(&c);

	// Sizes and durations in their other forms.
	load_ok("mqtt { max_packet_size = \"1.5KB\", retry_interval = 5000ms,"
	        " await_rel_timeout = 7 }\n"
	        "log { to = [syslog, uds, console], uds_addr = x }\n",
	    &c, 0);
	assert_int_equal(c.max_packet_size, 1536);
	assert_int_equal(c.retry_interval_s, 5);
	assert_int_equal(c.await_rel_timeout_s, 7);
	assert_int_equal(c.log_to, CONF_LOG_TO_SYSLOG | CONF_LOG_TO_UDS | CONF_LOG_TO_CONSOLE);
	conf_free(&c);

	// Numbers written as strings and strings written as numbers.
	load_ok(
	    "system.parallel = \"3\"\nhttp_server { password = 123456, username = 0042 }\n", &c, 0);
	assert_int_equal(c.parallel, 3);
	assert_string_equal(c.http_password, "123456");
	assert_string_equal(c.http_username, "0042");
	conf_free(&c);

	// null keeps the default.
	load_ok("mqtt.max_inflight_window = null\n", &c, 0);
	assert_int_equal(c.max_inflight_window, 2048);
	conf_free(&c);
}

static void test_errors(void **state)
{
	static const struct {
		const char *text;
		const char *want;
	} cases[] = {
		{ "mqtt.max_inflight_window = abc\n",
		    "t.conf:1: mqtt.max_inflight_window: expected an integer, got \"abc\"" },
		{ "\n\nmqtt {\n  max_inflight_window = 0\n}\n",
		    "t.conf:4: mqtt.max_inflight_window: 0 is out of range (allowed: 1 .. 65535)" },
		{ "mqtt.max_packet_size = 300MB\n",
		    "t.conf:1: mqtt.max_packet_size: 300MB is out of range (allowed: 1B .. "
		    "256MB)" },
		{ "mqtt.max_packet_size = -1\n",
		    "t.conf:1: mqtt.max_packet_size: a size must not be negative, got \"-1\"" },
		{ "mqtt.max_packet_size = 10XB\n",
		    "t.conf:1: mqtt.max_packet_size: expected a size such as 512KB or 10MB, got "
		    "\"10XB\"" },
		{ "mqtt.retry_interval = 1500ms\n",
		    "t.conf:1: mqtt.retry_interval: \"1500ms\" is not a whole number of seconds" },
		{ "mqtt.retry_interval = 10d\n",
		    "t.conf:1: mqtt.retry_interval: expected a duration such as 30s or 500ms, got "
		    "\"10d\"" },
		{ "mqtt.retry_interval = 25h\n",
		    "t.conf:1: mqtt.retry_interval: 25h is out of range (allowed: 1s .. 86400s)" },
		{ "mqtt.keepalive_multiplier = 0.5\n",
		    "t.conf:1: mqtt.keepalive_multiplier: 0.5 is out of range (allowed: > 0.5 .. "
		    "10)" },
		{ "mqtt.keepalive_multiplier = fast\n",
		    "t.conf:1: mqtt.keepalive_multiplier: expected a number, got \"fast\"" },
		{ "system.daemon = 1\n",
		    "t.conf:1: system.daemon: expected a boolean (true or false), got \"1\"" },
		{ "system.daemon = maybe\n",
		    "t.conf:1: system.daemon: expected a boolean (true or false), got \"maybe\"" },
		{ "system.parallel = 1.5\n",
		    "t.conf:1: system.parallel: expected an integer, got \"1.5\"" },
		{ "system.parallel = -1\n",
		    "t.conf:1: system.parallel: -1 is out of range (allowed: 0 .. 65535)" },
		{ "system.parallel = 99999999999999999999\n",
		    "t.conf:1: system.parallel: 99999999999999999999 is out of range" },
		{ "system.parallel { a = 1 }\n",
		    "t.conf:1: system.parallel: expected an integer, got an object" },
		{ "system.cmd_ipc_url = [a]\n",
		    "t.conf:1: system.cmd_ipc_url: expected a string, got an array" },
		{ "log.level = loud\n",
		    "t.conf:1: log.level: unknown value \"loud\" (expected one of: trace, debug, "
		    "info, "
		    "warn, error, fatal)" },
		{ "log.to = [file, tape]\n",
		    "t.conf:1: log.to: unknown value \"tape\" (expected any of: console, file, "
		    "syslog, "
		    "uds)" },
		{ "log.to = [file, [console]]\n",
		    "t.conf:1: log.to: expected a word, got an array" },
		{ "log.to = uds\n", "t.conf:1: log.uds_addr: required when log.to includes uds" },
		{ "mqtt = 5\n", "t.conf:1: mqtt: expected an object, got a value" },
		{ "log.rotation = 5\n", "t.conf:1: log.rotation: expected an object, got a value" },
		{ "system { num_taskq_thread = 8\n max_taskq_thread = 4 }\n",
		    "t.conf:2: system.max_taskq_thread: 4 is less than system.num_taskq_thread "
		    "(8)" },
		{ "http_server { auth_type = jwt }\n",
		    "t.conf:1: http_server.jwt.public.keyfile: required when auth_type = jwt" },
		{ "http_server { auth_type = oauth, username = a, password = b }\n",
		    "t.conf:1: http_server.auth_type: unknown value \"oauth\" (expected one of: "
		    "basic, "
		    "jwt, no_auth)" },
		{ "http_server { jwt.public.keyfile = /nonexistent/k.pem, auth_type = jwt }\n",
		    "t.conf:1: http_server.jwt.public.keyfile: cannot read \"/nonexistent/k.pem\": "
		    "No "
		    "such file or directory" },
		{ "a = {\n", "t.conf:1:5: '{' is not closed before the end of the file" },
		{ "auth.acl.enable = sometimes\n",
		    "t.conf:1: auth.acl.enable: expected a boolean (true or false), got "
		    "\"sometimes\"" },
	};
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		load_err(cases[i].text, cases[i].want);
	}
}

static void test_many_errors_one_run(void **state)
{
	nmq_conf    c;
	conf_errors errs;
	const char *text = "mqtt.max_inflight_window = a\n"
	                   "mqtt.max_awaiting_rel = b\n"
	                   "log.level = c\n"
	                   "unknown.key = 1\n"
	                   "system.parallel = d\n";
	(void)state;
	assert_int_equal(conf_load_text(&c, text, strlen(text), "t.conf", NULL, &errs), -1);
	assert_int_equal(errs.n_errors, 4);
	assert_int_equal(errs.n_warnings, 1);
	assert_non_null(strstr(errs.errors[0], "t.conf:1: mqtt.max_inflight_window:"));
	assert_non_null(strstr(errs.errors[1], "t.conf:2: mqtt.max_awaiting_rel:"));
	assert_non_null(strstr(errs.errors[2], "t.conf:3: log.level:"));
	assert_non_null(strstr(errs.errors[3], "t.conf:5: system.parallel:"));
	assert_string_equal(errs.warnings[0], "t.conf:4: unknown: unknown key; ignored");
	conf_errors_free(&errs);
}

// bridges.mqtt: a bridge's keys, forwards and subscriptions, defaults,
// NanoMQ's 0/1 flags, the cache, and the errors that name the key.
static void test_bridges(void **state)
{
	nmq_conf c;
	(void)state;
	load_ok(
	    "bridges.mqtt.up {\n"
	    "  server = \"tls+mqtt-tcp://cloud:8883\"\n"
	    "  proto_ver = 5\n"
	    "  keepalive = 30s\n"
	    "  hybrid_servers = [\"mqtt-tcp://b1:1883\", \"mqtt-tcp://[::1]:1884\"]\n"
	    "  conn_properties { request_problem_infomation = 1, session_expiry_interval = 60 }\n"
	    "  forwards = [{ local_topic = \"a/#\", remote_topic = \"\", prefix = \"p/\", qos = 1 "
	    "}]\n"
	    "  subscription = [{ remote_topic = \"c/#\", qos = 2, retain_as_published = 1 }]\n"
	    "}\n"
	    "bridges.mqtt.cache { disk_cache_size = 10, mounted_file_path = \"/tmp/x\" }\n",
	    &c, 0);
	assert_int_equal(c.n_bridges, 1);
	const conf_bridge *b = &c.bridges[0];
	assert_string_equal(b->name, "up");
	assert_true(b->enable);
	assert_true(b->tls);
	assert_int_equal(b->proto_ver, 5);
	assert_int_equal(b->keepalive_s, 30);
	assert_false(b->clean_start); // the documented default
	assert_true(b->verify_peer);
	assert_null(b->clientid); // <name>-<hostname> at run time
	assert_int_equal(b->max_send_queue_len, 1024);
	assert_int_equal(b->n_hybrid_servers, 2);
	assert_string_equal(b->hybrid_servers[1], "mqtt-tcp://[::1]:1884");
	assert_int_equal(b->cp_request_problem_information, 1);
	assert_int_equal(b->cp_request_response_information, -1);
	assert_int_equal(b->cp_session_expiry_interval, 60);
	assert_int_equal(b->n_fwds, 1);
	assert_string_equal(b->fwds[0].local_topic, "a/#");
	assert_string_equal(b->fwds[0].remote_topic, "");
	assert_string_equal(b->fwds[0].prefix, "p/");
	assert_int_equal(b->fwds[0].qos, 1);
	assert_int_equal(b->fwds[0].retain, 2);
	assert_int_equal(b->n_subs, 1);
	assert_int_equal(b->subs[0].qos, 2);
	assert_true(b->subs[0].retain_as_published);
	assert_true(b->subs[0].nolocal);
	assert_true(c.bridge_cache_enable);
	assert_int_equal(c.bridge_cache_disk_size, 10);
	assert_string_equal(c.bridge_cache_path, "/tmp/x");
	conf_bridge *d = conf_bridge_dup(b);
	assert_non_null(d);
	assert_true(conf_bridge_equal(b, d));
	d->fwds[0].qos = 2;
	assert_false(conf_bridge_equal(b, d));
	conf_bridge_free(d);
	conf_free(&c);

	load_err(
	    "bridges.mqtt.b { forwards = [] }\n", "t.conf:1: bridges.mqtt.b: server is required");
	load_err("bridges.mqtt.b { server = \"mqtt-quic://h:1\" }\n",
	    "t.conf:1: bridges.mqtt.b.server: \"mqtt-quic://h:1\": QUIC is not supported");
	load_err("bridges.mqtt.b { server = \"mqtt-tcp://h\" }\n",
	    "t.conf:1: bridges.mqtt.b.server: \"mqtt-tcp://h\": no port");
	load_err("bridges.mqtt.b {\n server = \"mqtt-tcp://h:1\"\n proto_ver = 6\n}\n",
	    "t.conf:3: bridges.mqtt.b.proto_ver: 6 is out of range (allowed: 3 .. 5)");
	load_err("bridges.mqtt.b {\n server = \"mqtt-tcp://h:1\"\n"
	         " forwards = [{ local_topic = \"a/#\", remote_topic = \"x/+\" }]\n}\n",
	    "t.conf:3: bridges.mqtt.b.forwards[0]: remote_topic \"x/+\" is not a valid topic name");
	load_err("bridges.mqtt.b {\n server = \"mqtt-tcp://h:1\"\n"
	         " subscription = [{ qos = 1 }]\n}\n",
	    "t.conf:3: bridges.mqtt.b.subscription[0]: remote_topic is required (a valid filter)");
}

static void test_warnings(void **state)
{
	nmq_conf c;
	(void)state;
	load_warn("mqtt {\n  max_inflight_window = 5\n  max_inflight = 5\n}\n",
	    "t.conf:3: mqtt.max_inflight: unknown key; ignored");
	load_warn("foo { bar = 1 }\n", "t.conf:1: foo: unknown key; ignored");
	load_warn("bridges.foo = 1\n", "t.conf:1: bridges.foo: unknown key; ignored");
	load_warn(
	    "listeners.tcp.backlog = 1\n", "t.conf:1: listeners.tcp.backlog: unknown key; ignored");
	load_warn("webhook {\n  url = \"http://x\"\n  events = [\n{event = \"on_message_publish\", "
	          "tpic = \"a\"}]\n}\n",
	    "t.conf:4: webhook.events[0]: unknown key \"tpic\"; ignored");
	load_warn("bridges.mqtt.emqx { server = \"mqtt-tcp://h:1883\", quic_keepalive = 3s }\n",
	    "t.conf:1: bridges.mqtt.emqx.quic_keepalive: QUIC is not supported; ignored");
	load_warn("preset.session.1 { clientid = \"c\", topc = [] }\n",
	    "t.conf:1: preset.session.1.topc: unknown key; ignored");
	load_err("preset.session.1 { topic = [] }\n",
	    "t.conf:1: preset.session.1.clientid: required: the client id of the session");
	load_err("preset.session = [{ clientid = \"c\", topic = [{ remote_topic = \"a/+b\" }] }]\n",
	    "t.conf:1: preset.session[0].topic[0].remote_topic: not a valid topic filter");
	load_err("preset.session = [{ clientid = \"c\", topic = [{ remote_topic = \"a\", qos = 3 "
	         "}] }]\n",
	    "t.conf:1: preset.session[0].topic[0].qos: expected an integer from 0 to 2");
	load_warn("auth.http_auth { acl_req.url = \"http://x\", ssl { verify = true } }\n",
	    "t.conf:1: auth.http_auth.ssl.verify: unknown key; ignored");
	load_err("auth.http_auth.auth_req { url = \"http://h/a\", params = { u = \"%z\" } }\n",
	    "t.conf:1: auth.http_auth.auth_req.params.u: unknown placeholder `%z` (allowed: "
	    "ucaPrpCd)");
	load_err("auth.http_auth.auth_req { url = \"ftp://h/a\" }\n",
	    "t.conf:1: auth.http_auth.auth_req.url: expected an `http://host[:port]/path` or "
	    "`https://...` URL");
	load_err("auth.http_auth { acl_req { url = \"https://h/a\" }, ssl { certfile = c } }\n",
	    "t.conf:1: auth.http_auth.ssl: `certfile` and `keyfile` go together (a client "
	    "certificate)");
	load_err("auth.http_auth { auth_req { url = \"http://h/\" }, timeout = 0s }\n",
	    "t.conf:1: auth.http_auth.timeout: expected a duration such as `5s` (more than 0, at "
	    "most 1 day)");
	load_warn("rules.sqlite { path = x }\n",
	    "t.conf:1: rules: section `rules` is not supported by this broker; ignored");
	load_warn("bridges.aws.a { }\n",
	    "t.conf:1: bridges.aws: section `bridges.aws` is not supported by this broker; "
	    "ignored");
	load_warn("listeners.quic { bind = \"0.0.0.0:14567\" }\n",
	    "t.conf:1: listeners.quic: section `listeners.quic` is not supported by this broker; "
	    "ignored");
	load_warn("mqtt.max_awaiting_rel = 10s\n",
	    "t.conf:1: mqtt.max_awaiting_rel: a duration (\"10s\") is not a count; the default 100 "
	    "applies");
	load_warn("mqtt.keepalive_multiplier = 0.75\n",
	    "t.conf:1: mqtt.keepalive_multiplier: 0.75 is below 1: clients are cut off before "
	    "their "
	    "keepalive interval ends");
	load_warn("listeners.tcp.enable = false\n",
	    "t.conf:1: listeners: no listener is enabled; clients cannot connect");
	load_warn("http_server { port = 8081 }\n",
	    "t.conf:1: http_server: auth_type = basic without username and password: every "
	    "request will get 401");

	// The duration warning keeps the default.
	load_ok("mqtt.max_awaiting_rel = 1m\nmqtt.max_inflight_window = 7\n", &c, 1);
	assert_int_equal(c.max_awaiting_rel, 100);
	assert_int_equal(c.max_inflight_window, 7);
	conf_free(&c);
}

static void test_aliases(void **state)
{
	nmq_conf c;
	(void)state;
	load_ok("mqtt { msq_len = 77, qos_duration = 3, keepalive_backoff = 1250 }\n"
	        "http_server { parallel = 5, auth_type = no_auth }\n",
	    &c, 0);
	assert_int_equal(c.max_mqueue_len, 77);
	assert_int_equal(c.retry_interval_s, 3);
	assert_true(c.keepalive_multiplier == 1.25);
	assert_int_equal(c.http_limit_conn, 5);
	assert_true(c.http_enable);
	assert_int_equal(c.http_auth_type, CONF_HTTP_AUTH_NONE);
	conf_free(&c);

	load_ok("mqtt.keepalive_backoff = 2.5\n", &c, 0);
	assert_true(c.keepalive_multiplier == 2.5);
	conf_free(&c);

	// The later of a key and its alias wins.
	load_ok("mqtt.max_mqueue_len = 1\nmqtt.msq_len = 2\n", &c, 0);
	assert_int_equal(c.max_mqueue_len, 2);
	conf_free(&c);
	load_err("mqtt.msq_len = x\n", "t.conf:1: mqtt.msq_len: expected an integer, got \"x\"");
}

static void test_http_server(void **state)
{
	nmq_conf c;
	(void)state;
	load_ok("http_server {\n port = 9000\n ip_addr = 127.0.0.1\n username = admin\n"
	        " password = public\n max_body = 2MB\n}\n",
	    &c, 0);
	assert_true(c.http_enable);
	assert_int_equal(c.http_port, 9000);
	assert_string_equal(c.http_ip_addr, "127.0.0.1");
	assert_string_equal(c.http_username, "admin");
	assert_string_equal(c.http_password, "public");
	assert_int_equal(c.http_max_body, 2 * 1024 * 1024);
	conf_free(&c);

	load_ok("http_server { enable = false }\n", &c, 0);
	assert_false(c.http_enable);
	conf_free(&c);

	// The JWT key file is checked only when JWT is in use (NanoMQ's own
	// file names a missing one next to auth_type = basic).
	load_ok("http_server {\n auth_type = basic\n username = a\n password = b\n"
	        " jwt { public.keyfile = \"/nonexistent/jwtRS256.key.pub\" }\n}\n",
	    &c, 0);
	assert_string_equal(c.http_jwt_public_keyfile, "/nonexistent/jwtRS256.key.pub");
	conf_free(&c);
	load_ok("http_server { enable = false, auth_type = jwt, jwt.public.keyfile = "
	        "/nonexistent/k }\n",
	    &c, 0);
	conf_free(&c);

	load_warn("http_server.jwt.private.keyfile = x\nhttp_server.auth_type = no_auth\n"
	          "zzz = 1\n",
	    "t.conf:3: zzz: unknown key; ignored");
}

// -------------------------------------------------------------- listeners

static void test_listeners(void **state)
{
	nmq_conf c;
	(void)state;
	load_ok("listeners.tcp.enable = false\nlisteners.ws.bind = \"0.0.0.0:8083/mqtt\"\n", &c, 0);
	assert_int_equal(c.n_listeners, 1);
	assert_int_equal(c.listeners[0].kind, CONF_LISTENER_WS);
	assert_string_equal(c.listeners[0].name, "ws");
	assert_string_equal(c.listeners[0].path, "/mqtt");
	assert_int_equal(c.listeners[0].port, 8083);
	conf_free(&c);

	// File order, named listeners, schemes, IPv6.
	load_ok("listeners.ws { bind = \"nmq-ws://127.0.0.1:9083/mqtt/x\" }\n"
	        "listeners.tcp {\n"
	        "  bind = nmq-tcp://0.0.0.0:1883\n"
	        "  default_1 { bind = \"[::]:1884\" }\n"
	        "}\n"
	        "listeners.tcp.second.bind = \"tcp://:1885\"\n"
	        "listeners.tcp.off { bind = \"0.0.0.0:1886\", enable = false }\n",
	    &c, 0);
	assert_int_equal(c.n_listeners, 4);
	assert_string_equal(c.listeners[0].name, "ws");
	assert_string_equal(c.listeners[0].bind, "127.0.0.1:9083/mqtt/x");
	assert_string_equal(c.listeners[0].path, "/mqtt/x");
	assert_string_equal(c.listeners[1].name, "tcp");
	assert_string_equal(c.listeners[1].bind, "0.0.0.0:1883");
	assert_string_equal(c.listeners[2].name, "tcp.default_1");
	assert_string_equal(c.listeners[2].bind, "[::]:1884");
	assert_string_equal(c.listeners[2].host, "::");
	assert_int_equal(c.listeners[2].port, 1884);
	assert_string_equal(c.listeners[3].name, "tcp.second");
	assert_string_equal(c.listeners[3].host, "0.0.0.0");
	assert_int_equal(c.listeners[3].port, 1885);
	conf_free(&c);

	// Only named listeners: no unnamed one.
	load_ok("listeners.tcp.a.bind = \"0.0.0.0:2000\"\n", &c, 0);
	assert_int_equal(c.n_listeners, 1);
	assert_string_equal(c.listeners[0].name, "tcp.a");
	conf_free(&c);

	// An empty kind section opens its default.
	load_ok("listeners { tcp {}, ws {} }\n", &c, 0);
	assert_int_equal(c.n_listeners, 2);
	assert_string_equal(c.listeners[1].bind, "0.0.0.0:8083/mqtt");
	conf_free(&c);

	load_err("listeners.tcp.bind = \"0.0.0.0\"\n",
	    "t.conf:1: listeners.tcp.bind: expected host:port, got \"0.0.0.0\"");
	load_err("listeners.tcp.bind = \"0.0.0.0:99999\"\n",
	    "t.conf:1: listeners.tcp.bind: expected a port number 0..65535 in \"0.0.0.0:99999\"");
	load_err("listeners.tcp.bind = \":::1883\"\n",
	    "t.conf:1: listeners.tcp.bind: IPv6 addresses are written in brackets, e.g. [::]:1883 "
	    "in \":::1883\"");
	load_err("listeners.tcp.bind = \"ws://0.0.0.0:1883\"\n",
	    "t.conf:1: listeners.tcp.bind: scheme \"ws://\" does not fit a tcp listener");
	load_err("listeners.tcp.bind = \"0.0.0.0:1883/mqtt\"\n",
	    "t.conf:1: listeners.tcp.bind: unexpected \"/mqtt\" after the port (a tcp bind has no "
	    "path)");
	load_err("listeners.ws.bind = \"0.0.0.0:8083\"\n",
	    "t.conf:1: listeners.ws.bind: a WebSocket bind needs a path, e.g. 0.0.0.0:8083/mqtt");
	load_err("listeners.tcp.bind = \"ho st:1\"\n",
	    "t.conf:1: listeners.tcp.bind: invalid host \"ho st\"");
	load_err("listeners.tcp.enable = 2\n",
	    "t.conf:1: listeners.tcp.enable: expected a boolean (true or false), got \"2\"");
	load_err("listeners = [1]\n", "t.conf:1: listeners: expected an object, got an array");
	load_err("listeners.tcp = 1\n", "t.conf:1: listeners.tcp: expected an object, got a value");
	load_err("listeners.tcp.bind { x = 1 }\n",
	    "t.conf:1: listeners.tcp.bind: expected a value, got an object");
	load_err("listeners.tcp { bind = \"0.0.0.0:1883\"\n a { bind = \"0.0.0.0:1883\" } }\n",
	    "t.conf:2: listeners.tcp.a.bind: address 0.0.0.0:1883 is already used by "
	    "listeners.tcp");
	load_warn("listeners.foo { bind = \"0.0.0.0:1\" }\n",
	    "t.conf:1: listeners.foo: unknown key; ignored");
	load_warn(
	    "listeners.tcp.keyfile = x\n", "t.conf:1: listeners.tcp.keyfile: unknown key; ignored");

	// At most 16.
	{
		char        text[2048];
		size_t      n = 0;
		conf_errors errs;
		for (int i = 0; i < 17; i++) {
			n += (size_t)snprintf(text + n, sizeof(text) - n,
			    "listeners.tcp.l%d.bind = \"0.0.0.0:%d\"\n", i, 2000 + i);
		}
		assert_int_equal(conf_load_text(&c, text, n, "t.conf", NULL, &errs), -1);
		assert_int_equal(errs.n_errors, 1);
		assert_string_equal(errs.errors[0], "t.conf:17: listeners: more than 16 listeners");
		conf_errors_free(&errs);
	}
}

static void test_tls_listeners(void **state)
{
	nmq_conf c;
	char     key[300];
	char     cert[300];
	char     ca[300];
	char     text[2048];
	char     want[1024];
	(void)state;
	snprintf(key, sizeof(key), "%s", write_file("key.pem", "k"));
	snprintf(cert, sizeof(cert), "%s", write_file("cert.pem", "c"));
	snprintf(ca, sizeof(ca), "%s", write_file("ca.pem", "a"));

	snprintf(text, sizeof(text),
	    "listeners.ssl {\n"
	    "  bind = \"tls+nmq-tcp://0.0.0.0:8883\"\n"
	    "  keyfile = \"%s\"\n"
	    "  certfile = \"%s\"\n"
	    "  cacertfile = \"%s\"\n"
	    "  key_password = pw\n"
	    "  verify_peer = true\n"
	    "  other { bind = \"0.0.0.0:8884\", verify_peer = false }\n"
	    "}\n"
	    "listeners.wss { bind = \"0.0.0.0:8086/mqtt\" }\n"
	    "listeners.wss.own { bind = \"0.0.0.0:8087/mqtt\", certfile = \"%s\" }\n",
	    key, cert, ca, ca);
	load_ok(text, &c, 0);
	assert_int_equal(c.n_listeners, 4); // a listeners section: no default TCP
	assert_string_equal(c.listeners[0].name, "ssl");
	assert_int_equal(c.listeners[0].kind, CONF_LISTENER_SSL);
	assert_string_equal(c.listeners[0].bind, "0.0.0.0:8883");
	assert_string_equal(c.listeners[0].keyfile, key);
	assert_string_equal(c.listeners[0].key_password, "pw");
	assert_true(c.listeners[0].verify_peer);
	assert_string_equal(c.listeners[1].name, "ssl.other");
	assert_string_equal(c.listeners[1].certfile, cert); // inherited
	assert_false(c.listeners[1].verify_peer); // own
	assert_string_equal(c.listeners[2].name, "wss");
	assert_string_equal(c.listeners[2].keyfile, key); // from listeners.ssl
	assert_true(c.listeners[2].verify_peer);
	assert_string_equal(c.listeners[3].name, "wss.own");
	assert_string_equal(c.listeners[3].certfile, ca); // its own
	assert_string_equal(c.listeners[3].keyfile, key);
	conf_free(&c);

	snprintf(text, sizeof(text),
	    "listeners.tcp.enable = false\nlisteners.ssl { bind = \"0.0.0.0:8883\", keyfile = %s "
	    "}\n",
	    key);
	load_err(text, "t.conf:2: listeners.ssl.certfile: required for a TLS listener");
	snprintf(text, sizeof(text),
	    "listeners.ssl {\n keyfile = \"%s\"\n certfile = \"%s/missing.pem\"\n}\n", key, tmpdir);
	snprintf(want, sizeof(want),
	    "t.conf:3: listeners.ssl.certfile: cannot read \"%s/missing.pem\": No such file or "
	    "directory",
	    tmpdir);
	load_err(text, want);
	// A disabled TLS listener does not need its files.
	load_ok(
	    "listeners.tcp {}\nlisteners.ssl { enable = false, keyfile = /nonexistent }\n", &c, 0);
	assert_int_equal(c.n_listeners, 1);
	conf_free(&c);
}

// -------------------------------------------------------------------- auth

static void test_auth(void **state)
{
	nmq_conf c;
	cJSON   *rules;
	cJSON   *r;
	char     text[512];
	(void)state;
	write_file("pwd.conf",
	    "admin: public\nnum: 123456\n\"a.b@c\": \"x y\"\nhash:$7$101$c2FsdA==$aGFzaA==\n");
	write_file("acl.conf",
	    "rules = [\n"
	    "  ## comment\n"
	    "  {\"permit\": \"allow\", \"username\": \"dashboard\", \"action\": \"subscribe\", "
	    "\"topics\": [\"$SYS/#\"]}\n"
	    "  {permit: allow, ipaddr: \"127.0.0.1\", topics: [\"${clientid}/+\", \"@a/#\"]}\n"
	    "  {permit: deny, or: [{username: x}, {ipaddrs: [\"10.0.0.0/8\", \"::1\"]}], topics: "
	    "\"#\"}\n"
	    "  {permit: allow}\n"
	    "]\n");
	snprintf(text, sizeof(text),
	    "auth {\n password = {include \"pwd.conf\"}\n acl = {include \"acl.conf\"}\n}\n");
	load_ok(text, &c, 0);
	assert_non_null(c.auth_password);
	assert_string_equal(cJSON_GetObjectItem(c.auth_password, "admin")->valuestring, "public");
	assert_string_equal(cJSON_GetObjectItem(c.auth_password, "num")->valuestring, "123456");
	assert_string_equal(cJSON_GetObjectItem(c.auth_password, "a.b@c")->valuestring, "x y");
	assert_string_equal(
	    cJSON_GetObjectItem(c.auth_password, "hash")->valuestring, "$7$101$c2FsdA==$aGFzaA==");
	assert_true(c.auth_acl_enable);
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(c.auth_acl, "enable")));
	rules = cJSON_GetObjectItem(c.auth_acl, "rules");
	assert_int_equal(cJSON_GetArraySize(rules), 4);
	r = cJSON_GetArrayItem(rules, 0);
	assert_string_equal(cJSON_GetObjectItem(r, "action")->valuestring, "subscribe");
	r = cJSON_GetArrayItem(rules, 1);
	assert_string_equal(cJSON_GetObjectItem(r, "action")->valuestring, "pubsub");
	assert_string_equal(
	    cJSON_GetArrayItem(cJSON_GetObjectItem(r, "ipaddrs"), 0)->valuestring, "127.0.0.1");
	assert_string_equal(
	    cJSON_GetArrayItem(cJSON_GetObjectItem(r, "topics"), 0)->valuestring, "${clientid}/+");
	r = cJSON_GetArrayItem(rules, 2);
	assert_string_equal(cJSON_GetObjectItem(r, "permit")->valuestring, "deny");
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(r, "or")), 2);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(r, "topics")), 1);
	conf_free(&c);

	load_ok("auth.acl { enable = false, rules = [] }\n", &c, 0);
	assert_false(c.auth_acl_enable);
	conf_free(&c);

	load_err("auth.password { admin { x = 1 } }\n",
	    "t.conf:1: auth.password.admin: expected a password string, got an object");
	load_err("auth.acl.rules = [{permit: allow}, {permit: maybe}]\n",
	    "t.conf:1: auth.acl.rules[1].permit: expected one of allow|deny, got \"maybe\"");
	load_err("auth.acl.rules = [\n{action: publish}\n]\n",
	    "t.conf:2: auth.acl.rules[0]: permit (allow or deny) is required");
	load_err("auth.acl.rules = [{permit: allow, topics: [\"a/#/b\"]}]\n",
	    "t.conf:1: auth.acl.rules[0].topics: \"a/#/b\" is not a valid topic filter");
	load_err("auth.acl.rules = [{permit: allow, ipaddr: \"300.1.1.1\"}]\n",
	    "t.conf:1: auth.acl.rules[0].ipaddr: \"300.1.1.1\" is not an IP address or CIDR range");
	load_err("auth.acl.rules = [{permit: allow, and: [{topics: [a]}]}]\n",
	    "t.conf:1: auth.acl.rules[0].and[0].topics: only username, clientid, ipaddr and "
	    "ipaddrs "
	    "may appear here");
	load_err("auth.acl.rules = {permit: allow}\n",
	    "t.conf:1: auth.acl.rules: expected an array of rules");
	load_err("auth.acl.rules = [{permit: allow, action: read}]\n",
	    "t.conf:1: auth.acl.rules[0].action: expected one of publish|subscribe|pubsub, got "
	    "\"read\"");
	load_warn("auth.acl.rules = [{permit: allow, color: red}]\n",
	    "t.conf:1: auth.acl.rules[0].color: unknown key; ignored");
	snprintf(text, sizeof(text),
	    "t.conf:1:20: cannot read include \"%s/nope.conf\": No such file or directory", tmpdir);
	load_err("auth { password = {include \"nope.conf\"} }\n", text);
}

// --------------------------------------------------------- env and cli

static void test_precedence(void **state)
{
	nmq_conf    c;
	conf_errors errs;
	conf_cli    cli;
	const char *path = write_file("p.conf", "system.parallel = 2\nmqtt.max_mqueue_len = 50\n");
	char        p[256];
	(void)state;
	snprintf(p, sizeof(p), "%s", path);
	conf_cli_init(&cli);
	cli.conf_path = p;

	// The file over the defaults.
	assert_int_equal(conf_load(&c, &cli, NULL, &errs), 0);
	assert_int_equal(c.parallel, 2);
	assert_int_equal(c.max_mqueue_len, 50);
	assert_string_equal(c.path, p);
	conf_free(&c);
	conf_errors_free(&errs);

	// The environment over the file.
	setenv("NANOMQ_PARALLEL", "3", 1);
	setenv("NANOMQ_MSQ_LEN", "60", 1);
	setenv("NANOMQ_DAEMON", "1", 1);
	setenv("NANOMQ_ALLOW_ANONYMOUS", "false", 1);
	setenv("NANOMQ_LOG_TO", "file, console", 1);
	setenv("NANOMQ_MAX_PACKET_SIZE", "2MB", 1);
	setenv("NANOMQ_QOS_DURATION", "7", 1);
	setenv("NANOMQ_PID_FILE", "/run/n.pid", 1);
	setenv("NANOMQ_BROKER_URL", "nmq-tcp://127.0.0.1:2883", 1);
	setenv("NANOMQ_HTTP_SERVER_URL", "http://127.0.0.1:9081", 1);
	setenv("NANOMQ_HTTP_SERVER_ENABLE", "true", 1);
	setenv("NANOMQ_HTTP_SERVER_USERNAME", "u", 1);
	setenv("NANOMQ_HTTP_SERVER_PASSWORD", "p", 1);
	setenv("NANOMQ_VIN", "ignored", 1);
	setenv("NANOMQ_NUM_TASKQ_THREAD", "", 1); // empty = unset
	assert_int_equal(conf_load(&c, &cli, NULL, &errs), 0);
	dump(&errs);
	assert_int_equal(c.parallel, 3);
	assert_int_equal(c.max_mqueue_len, 60);
	assert_true(c.daemon);
	assert_false(c.allow_anonymous);
	assert_int_equal(c.log_to, CONF_LOG_TO_FILE | CONF_LOG_TO_CONSOLE);
	assert_int_equal(c.max_packet_size, 2 * 1024 * 1024);
	assert_int_equal(c.retry_interval_s, 7);
	assert_string_equal(c.pid_file, "/run/n.pid");
	assert_int_equal(c.n_listeners, 1);
	assert_string_equal(c.listeners[0].bind, "127.0.0.1:2883");
	assert_true(c.http_enable);
	assert_string_equal(c.http_ip_addr, "127.0.0.1");
	assert_int_equal(c.http_port, 9081);
	assert_int_equal(errs.n_warnings, 0);
	conf_free(&c);
	conf_errors_free(&errs);

	// The command line over the environment.
	cli.parallel     = 4;
	cli.msq_len      = 70;
	cli.log_level    = "debug";
	cli.log_file     = "/var/log/x/b.log";
	cli.log_stdout   = 0;
	cli.log_syslog   = 1;
	cli.urls[0]      = "tcp://0.0.0.0:3883";
	cli.urls[1]      = "nmq-tcp://0.0.0.0:3884";
	cli.urls[2]      = "nmq-ws://0.0.0.0:3885/mqtt";
	cli.n_urls       = 3;
	cli.qos_duration = 9;
	assert_int_equal(conf_load(&c, &cli, NULL, &errs), 0);
	dump(&errs);
	assert_int_equal(c.parallel, 4);
	assert_int_equal(c.max_mqueue_len, 70);
	assert_int_equal(c.retry_interval_s, 9);
	assert_int_equal(c.log_level, LOG_LEVEL_DEBUG);
	assert_string_equal(c.log_dir, "/var/log/x");
	assert_string_equal(c.log_file, "b.log");
	assert_int_equal(c.log_to, CONF_LOG_TO_FILE | CONF_LOG_TO_SYSLOG);
	assert_int_equal(c.n_listeners, 3);
	assert_string_equal(c.listeners[0].bind, "0.0.0.0:3883");
	assert_string_equal(c.listeners[1].name, "tcp.url_2");
	assert_string_equal(c.listeners[1].bind, "0.0.0.0:3884");
	assert_int_equal(c.listeners[2].kind, CONF_LISTENER_WS);
	conf_free(&c);
	conf_errors_free(&errs);

	// A bad environment value names the variable.
	conf_cli_init(&cli);
	cli.conf_path = p;
	clear_env();
	setenv("NANOMQ_PARALLEL", "many", 1);
	setenv("NANOMQ_TLS_VERIFY_PEER", "2", 1);
	assert_int_equal(conf_load(&c, &cli, NULL, &errs), -1);
	assert_int_equal(errs.n_errors, 2);
	assert_string_equal(errs.errors[0],
	    "environment variable NANOMQ_PARALLEL: system.parallel: expected an integer, got "
	    "\"many\"");
	assert_string_equal(errs.errors[1],
	    "environment variable NANOMQ_TLS_VERIFY_PEER: listeners.ssl.verify_peer: expected a "
	    "boolean (true or false), got \"2\"");
	conf_errors_free(&errs);
	clear_env();

	// A bad command-line value names the option.
	cli.parallel = -5;
	assert_int_equal(conf_load(&c, &cli, NULL, &errs), -1);
	assert_string_equal(errs.errors[0],
	    "command line option --parallel: system.parallel: -5 is out of range (allowed: 0 .. "
	    "65535)");
	conf_errors_free(&errs);

	// Key files given alone do not open a TLS listener.
	conf_cli_init(&cli);
	cli.conf_path = p;
	cli.cert      = "/nonexistent/c.pem";
	cli.http_port = 9999;
	assert_int_equal(conf_load(&c, &cli, NULL, &errs), 0);
	assert_int_equal(c.n_listeners, 1);
	assert_false(c.http_enable);
	assert_int_equal(c.http_port, 9999);
	conf_free(&c);
	conf_errors_free(&errs);
}

static void test_file_lookup(void **state)
{
	nmq_conf    c;
	conf_errors errs;
	conf_cli    cli;
	char        want[1024];
	char        p[256];
	(void)state;
	conf_cli_init(&cli);
	snprintf(p, sizeof(p), "%s/none.conf", tmpdir);
	cli.conf_path = p;
	assert_int_equal(conf_load(&c, &cli, NULL, &errs), -1);
	snprintf(want, sizeof(want), "%s: cannot read: No such file or directory", p);
	assert_string_equal(errs.errors[0], want);
	conf_errors_free(&errs);

	// $NANOMQ_CONF_PATH, when --conf is not given.
	snprintf(p, sizeof(p), "%s", write_file("env.conf", "system.parallel = 9\n"));
	setenv("NANOMQ_CONF_PATH", p, 1);
	assert_int_equal(conf_load(&c, NULL, NULL, &errs), 0);
	assert_int_equal(c.parallel, 9);
	assert_string_equal(c.path, p);
	conf_free(&c);
	conf_errors_free(&errs);

	setenv("NANOMQ_CONF_PATH", "/nonexistent/nanomq.conf", 1);
	assert_int_equal(conf_load(&c, NULL, NULL, &errs), -1);
	conf_errors_free(&errs);
	unsetenv("NANOMQ_CONF_PATH");

	// Beside the binary.
	write_file("nanomq.conf", "system.parallel = 11\n");
	snprintf(p, sizeof(p), "%s/nanomq", tmpdir);
	assert_int_equal(conf_load(&c, NULL, p, &errs), 0);
	assert_int_equal(c.parallel, 11);
	conf_free(&c);
	conf_errors_free(&errs);

	// A syntax error stops before validation.
	snprintf(p, sizeof(p), "%s", write_file("bad.conf", "a = [\nsystem.parallel = x\n"));
	cli.conf_path = p;
	assert_int_equal(conf_load(&c, &cli, NULL, &errs), -1);
	assert_int_equal(errs.n_errors, 1);
	conf_errors_free(&errs);

	cli.old_conf_path = p;
	assert_int_equal(conf_load(&c, &cli, NULL, &errs), -1);
	assert_string_equal(errs.errors[0], "--conf and --old_conf cannot be used together");
	conf_errors_free(&errs);
}

// The comma-separated values of the flat format: items are trimmed, empty
// ones (",,", a trailing comma, blanks) are left out, in a flags key and in
// NanoMQ 0.13's forwards=a/#,b/#.
static void test_old_conf_lists(void **state)
{
	nmq_conf    c;
	conf_errors errs;
	conf_cli    cli;
	char        p[256];
	(void)state;
	snprintf(p, sizeof(p), "%s",
	    write_file("lists.conf",
	        "log.to= , console,,  file ,\n"
	        "bridge.mqtt.emqx.address=mqtt-tcp://h:1883\n"
	        "bridge.mqtt.emqx.forwards= up/a ,, up/b/#,\t,\n"));
	conf_cli_init(&cli);
	cli.old_conf_path = p;
	assert_int_equal(conf_load(&c, &cli, NULL, &errs), 0);
	dump(&errs);
	assert_int_equal(errs.n_errors, 0);
	assert_int_equal(c.log_to, CONF_LOG_TO_CONSOLE | CONF_LOG_TO_FILE);
	assert_int_equal(c.n_bridges, 1);
	assert_int_equal(c.bridges[0].n_fwds, 2);
	assert_string_equal(c.bridges[0].fwds[0].local_topic, "up/a");
	assert_string_equal(c.bridges[0].fwds[0].remote_topic, "");
	assert_string_equal(c.bridges[0].fwds[1].local_topic, "up/b/#");
	conf_free(&c);
	conf_errors_free(&errs);
}

static void test_old_conf(void **state)
{
	nmq_conf    c;
	conf_errors errs;
	conf_cli    cli;
	char        p[256];
	char        want[1024];
	(void)state;
	snprintf(p, sizeof(p), "%s",
	    write_file("old.conf",
	        "# NanoMQ 0.13 style\n"
	        "url=nmq-tcp://0.0.0.0:1999\n"
	        "daemon=false\n"
	        "num_taskq_thread=2\n"
	        "parallel=8\n"
	        "msq_len=64\n"
	        "qos_duration=5\n"
	        "allow_anonymous=false\n"
	        "max_packet_size=64\n"
	        "client_max_packet_size=2MB\n"
	        "keepalive_backoff=1250\n"
	        "acl_nomatch=deny\n"
	        "websocket.enable=true\n"
	        "websocket.url=nmq-ws://0.0.0.0:8083/mqtt\n"
	        "websocket.tls_url=nmq-wss://0.0.0.0:8084/mqtt\n"
	        "tls.enable=false\n"
	        "tls.keyfile=/etc/certs/key.pem\n"
	        "http_server.port=8082\n"
	        "http_server.parallel=4\n"
	        "log.level=info\n"
	        "log.to=console,file\n"
	        "bridge.mqtt.emqx.address=mqtt-tcp://h:1883\n"
	        "mystery=1\n"));
	conf_cli_init(&cli);
	cli.old_conf_path = p;
	assert_int_equal(conf_load(&c, &cli, NULL, &errs), 0);
	assert_int_equal(c.n_listeners, 2);
	assert_string_equal(c.listeners[0].bind, "0.0.0.0:1999");
	assert_string_equal(c.listeners[1].name, "ws");
	assert_int_equal(c.num_taskq_thread, 2);
	assert_int_equal(c.parallel, 8);
	assert_int_equal(c.max_mqueue_len, 64);
	assert_int_equal(c.retry_interval_s, 5);
	assert_false(c.allow_anonymous);
	assert_int_equal(c.max_packet_size, 64 * 1024);
	assert_int_equal(c.client_max_packet_size, 2 * 1024 * 1024);
	assert_true(c.keepalive_multiplier == 1.25);
	assert_int_equal(c.auth_no_match, CONF_ACL_DENY);
	assert_false(c.http_enable);
	assert_int_equal(c.http_port, 8082);
	assert_int_equal(c.http_limit_conn, 4);
	assert_int_equal(c.log_level, LOG_LEVEL_INFO);
	assert_int_equal(c.log_to, CONF_LOG_TO_CONSOLE | CONF_LOG_TO_FILE);
	assert_int_equal(errs.n_errors, 0);
	assert_int_equal(errs.n_warnings, 1);
	snprintf(want, sizeof(want), "%s:23: mystery: unknown flat key; ignored", p);
	assert_string_equal(errs.warnings[0], want);
	// The flat bridge key names a bridge (address is server's alias).
	assert_int_equal(c.n_bridges, 1);
	assert_string_equal(c.bridges[0].name, "emqx");
	assert_string_equal(c.bridges[0].server, "mqtt-tcp://h:1883");
	conf_free(&c);
	conf_errors_free(&errs);

	snprintf(p, sizeof(p), "%s",
	    write_file("old2.conf", "parallel=x\nno equals sign\nkeepalive_backoff=fast\n"));
	cli.old_conf_path = p;
	assert_int_equal(conf_load(&c, &cli, NULL, &errs), -1);
	snprintf(want, sizeof(want), "%s:2: expected key=value", p);
	assert_string_equal(errs.errors[0], want);
	snprintf(want, sizeof(want),
	    "%s:3: keepalive_backoff: expected an integer in thousandths (1250 = 1.25), got "
	    "\"fast\"",
	    p);
	assert_string_equal(errs.errors[1], want);
	conf_errors_free(&errs);

	snprintf(p, sizeof(p), "%s", write_file("old3.conf", "parallel=x\n"));
	cli.old_conf_path = p;
	assert_int_equal(conf_load(&c, &cli, NULL, &errs), -1);
	snprintf(want, sizeof(want), "%s:1: system.parallel: expected an integer, got \"x\"", p);
	assert_string_equal(errs.errors[0], want);
	conf_errors_free(&errs);
}

// ------------------------------------------------------------------ reload

static void test_diff(void **state)
{
	nmq_conf     a;
	nmq_conf     b;
	conf_changes ch;
	(void)state;
	load_ok("auth.password { u: p }\n", &a, 0);
	load_ok("mqtt.max_packet_size = 1MB\nsystem.parallel = 3\nlog.level = debug\n"
	        "listeners.tcp.bind = \"0.0.0.0:1884\"\nlisteners.ws {}\n"
	        "auth.password { u: q }\n",
	    &b, 0);
	assert_int_equal(conf_diff(&a, &a, &ch), 0);
	assert_int_equal(ch.n, 0);
	conf_changes_free(&ch);
	assert_int_equal(conf_diff(&a, &b, &ch), 0);
	assert_int_equal(ch.n, 7);
	assert_string_equal(ch.v[0].key, "system.parallel");
	assert_true(ch.v[0].restart);
	assert_string_equal(ch.v[1].key, "mqtt.max_packet_size");
	assert_false(ch.v[1].restart);
	assert_string_equal(ch.v[2].key, "mqtt.client_max_packet_size");
	assert_false(ch.v[2].restart);
	assert_string_equal(ch.v[3].key, "log.level");
	assert_false(ch.v[3].restart);
	assert_string_equal(ch.v[4].key, "listeners.tcp");
	assert_true(ch.v[4].restart);
	assert_string_equal(ch.v[5].key, "listeners.ws");
	assert_true(ch.v[5].restart);
	assert_string_equal(ch.v[6].key, "auth.password");
	assert_false(ch.v[6].restart);
	conf_changes_free(&ch);
	assert_int_equal(ch.n, 0);
	conf_free(&a);
	conf_free(&b);
}

// ---------------------------------------------------- docs and etc file

static void test_docs_up_to_date(void **state)
{
	char   path[PATH_MAX];
	char  *want;
	size_t want_len;
	char  *have;
	size_t have_len;
	FILE  *f;
	(void)state;
	f = open_memstream(&want, &want_len);
	assert_int_equal(conf_schema_markdown(f), 0);
	fclose(f);
	snprintf(path, sizeof(path), "%s/docs/config.md", source_dir());
	if (getenv("NMQ_REGEN_DOCS") != NULL) {
		f = fopen(path, "w");
		assert_non_null(f);
		fwrite(want, 1, want_len, f);
		fclose(f);
	}
	have = slurp(path, &have_len);
	if (have == NULL) {
		fail_msg("cannot read %s (set NMQ_SOURCE_DIR)", path);
	}
	if (have_len != want_len || memcmp(have, want, want_len) != 0) {
		fail_msg("%s is out of date: run NMQ_REGEN_DOCS=1 test_conf", path);
	}
	free(have);
	free(want);
}

static void test_etc_conf(void **state)
{
	char        path[PATH_MAX];
	char        dir[PATH_MAX - 16];
	char       *text;
	size_t      len;
	nmq_conf    c;
	nmq_conf    d;
	conf_errors errs;
	(void)state;
	snprintf(dir, sizeof(dir), "%s/etc", source_dir());
	snprintf(path, sizeof(path), "%s/nanomq.conf", dir);
	text = slurp(path, &len);
	assert_non_null(text);
	if (conf_load_text(&c, text, len, path, dir, &errs) != 0 || errs.n_warnings != 0) {
		dump(&errs);
		fail_msg("%s does not load cleanly", path);
	}
	conf_errors_free(&errs);
	// It states the defaults: the result equals the built-in defaults.
	conf_defaults(&d);
	{
		conf_changes ch;
		assert_int_equal(conf_diff(&d, &c, &ch), 0);
		for (int i = 0; i < ch.n; i++) {
			print_message("differs from the default: %s\n", ch.v[i].key);
		}
		assert_int_equal(ch.n, 0);
		conf_changes_free(&ch);
	}
	// Every supported key is described.
	for (size_t i = 0; i < conf_schema_len; i++) {
		const conf_key *k    = &conf_schema[i];
		const char     *leaf = strrchr(k->path, '.');
		leaf                 = leaf != NULL ? leaf + 1 : k->path;
		if (k->status == CONF_S_SUPPORTED || k->status == CONF_S_NOEFFECT) {
			if (strstr(text, leaf) == NULL) {
				fail_msg("%s: key %s is not described", path, k->path);
			}
		}
	}
	conf_free(&c);
	conf_free(&d);
	free(text);
}

// The helpers of src/conf/ascii.h agree with the libc functions they
// replace (in the C locale) on fixed edge cases and on random strings drawn
// from the characters that matter to them.
static void check_ascii_against_libc(const char *a, const char *b)
{
	char *e1;
	char *e2;
	assert_int_equal(ascii_ieq(a, b), strcasecmp(a, b) == 0);
	for (size_t n = 0; n < 6; n++) {
		assert_int_equal(ascii_ieqn(a, b, n), strncasecmp(a, b, n) == 0);
	}
	assert_int_equal(ascii_cspn(a, ".,|:"), strcspn(a, ".,|:"));
	assert_int_equal(ascii_cspn(a, ""), strcspn(a, ""));
	if (b[0] != '\0') {
		assert_ptr_equal(ascii_strstr(a, b), strstr(a, b));
	}
	errno            = 0;
	long long ll1    = ascii_strtoll(a, &e1);
	int       errno1 = errno;
	errno            = 0;
	long long ll2    = strtoll(a, &e2, 10);
	assert_int_equal(ll1, ll2);
	assert_ptr_equal(e1, e2);
	assert_int_equal(errno1, errno);
	errno     = 0;
	double d1 = ascii_strtod(a, &e1);
	errno1    = errno;
	errno     = 0;
	double d2 = strtod(a, &e2);
	assert_true(d1 == d2 || (isnan(d1) && isnan(d2)));
	assert_int_equal(signbit(d1), signbit(d2));
	assert_ptr_equal(e1, e2);
	assert_int_equal(errno1, errno);
	for (const char *p = a; *p != '\0'; p++) {
		int c = (unsigned char)*p;
		assert_int_equal(ascii_isdigit(c), isdigit(c) != 0);
		assert_int_equal(ascii_isalpha(c), isalpha(c) != 0);
		assert_int_equal(ascii_isalnum(c), isalnum(c) != 0);
		assert_int_equal(ascii_isxdigit(c), isxdigit(c) != 0);
		assert_int_equal(ascii_isspace(c), isspace(c) != 0);
		assert_int_equal(ascii_lower(c), tolower(c));
	}
}

static void test_ascii_helpers_match_libc(void **state)
{
	(void)state;
	static const char *const fixed[] = { "", "0", "-0", "+0", "00012", "-12abc", "12.5", "1e3",
		"0x1A", "inf", "-nan", " 42", "\t-7", "+", "-", "9223372036854775807",
		"9223372036854775808", "-9223372036854775808", "-9223372036854775809",
		"99999999999999999999999", "123456789012345", "1234567890123456", "TRUE", "true",
		"Yes", "ON", "kB", "KB", "mb", "a.b.c", "x|y", "tcp://1.2.3.4:1883", "://",
		"\x80\xff", "1.", ".5", "10s", "1MB" };
	size_t                   n       = sizeof(fixed) / sizeof(fixed[0]);
	for (size_t i = 0; i < n; i++) {
		for (size_t j = 0; j < n; j++) {
			check_ascii_against_libc(fixed[i], fixed[j]);
		}
	}
	static const char alphabet[] = "0123456789+-.eExXaAbBfFzZ \t:/|,\x80\xe9";
	srand(7);
	for (int k = 0; k < 20000; k++) {
		char   a[12];
		char   b[4];
		size_t la = (size_t)(rand() % 11);
		size_t lb = 1 + (size_t)(rand() % 3);
		for (size_t i = 0; i < la; i++) {
			a[i] = alphabet[rand() % (int)(sizeof(alphabet) - 1)];
		}
		a[la] = '\0';
		for (size_t i = 0; i < lb; i++) {
			b[i] = alphabet[rand() % (int)(sizeof(alphabet) - 1)];
		}
		b[lb] = '\0';
		check_ascii_against_libc(a, b);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_schema_sane),
		cmocka_unit_test(test_spellings),
		cmocka_unit_test_setup_teardown(test_new_spellings, setup, teardown),
		cmocka_unit_test_setup_teardown(test_instance_paths, setup, teardown),
		cmocka_unit_test(test_ascii_helpers_match_libc),
		cmocka_unit_test_setup_teardown(test_types, setup, teardown),
		cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_errors_one_run, setup, teardown),
		cmocka_unit_test_setup_teardown(test_warnings, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bridges, setup, teardown),
		cmocka_unit_test_setup_teardown(test_aliases, setup, teardown),
		cmocka_unit_test_setup_teardown(test_http_server, setup, teardown),
		cmocka_unit_test_setup_teardown(test_listeners, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tls_listeners, setup, teardown),
		cmocka_unit_test_setup_teardown(test_auth, setup, teardown),
		cmocka_unit_test_setup_teardown(test_precedence, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_lookup, setup, teardown),
		cmocka_unit_test_setup_teardown(test_old_conf, setup, teardown),
		cmocka_unit_test_setup_teardown(test_old_conf_lists, setup, teardown),
		cmocka_unit_test_setup_teardown(test_diff, setup, teardown),
		cmocka_unit_test(test_docs_up_to_date),
		cmocka_unit_test_setup_teardown(test_etc_conf, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
