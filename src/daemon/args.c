// The `nanomq` command line: one table of options, one loop over argv.
#include "src/daemon/args.h"
#include "src/conf/ascii.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "src/log/log.h"

#ifndef NMQ_VERSION
#define NMQ_VERSION "unknown"
#endif

enum cli_opt_kind {
	OPT_FLAG, // no value; sets an int field to 1
	OPT_INT, // decimal integer in [min, max]
	OPT_STR, // non-empty string
	OPT_BOOL, // true|false (also 1|0), sets an int field to 1 or 0
	OPT_URL, // listener URL, appended to urls[]
	OPT_LEVEL, // log level word
	OPT_TEST, // --test
	OPT_HELP, // -h, --help
	OPT_VERSION,
};

typedef struct cli_option {
	const char *name; // long name, without "--"
	char        letter; // short name, 0 if none
	int         kind; // enum cli_opt_kind
	size_t      field; // offset of the field in conf_cli
	int         min, max;
	const char *arg; // placeholder shown by cli_usage, NULL for flags
	const char *help; // one line for cli_usage
} cli_option;

#define F(member) offsetof(conf_cli, member)

static const cli_option cli_options[] = {
	{ "conf", 0, OPT_STR, F(conf_path), 0, 0, "<file>", "configuration file (HOCON)" },
	{ "old_conf", 0, OPT_STR, F(old_conf_path), 0, 0, "<file>",
	    "configuration file in the legacy flat format" },
	{ "url", 0, OPT_URL, 0, 0, 0, "<url>",
	    "listener URL: nmq-tcp://, tls+nmq-tcp://, nmq-ws://, nmq-wss:// (repeatable)" },
	{ "daemon", 'd', OPT_FLAG, F(daemon), 0, 0, NULL, "run in the background" },
	{ "tq_thread", 't', OPT_INT, F(num_taskq_thread), 0, INT_MAX, "<n>",
	    "worker threads (system.num_taskq_thread, 0 = automatic)" },
	{ "max_tq_thread", 'T', OPT_INT, F(max_taskq_thread), 0, INT_MAX, "<n>",
	    "upper bound on worker threads (system.max_taskq_thread)" },
	{ "parallel", 'n', OPT_INT, F(parallel), 0, INT_MAX, "<n>",
	    "work contexts (system.parallel, 0 = automatic)" },
	{ "property_size", 's', OPT_INT, F(property_size), 0, INT_MAX, "<n>",
	    "mqtt.property_size" },
	{ "msq_len", 'S', OPT_INT, F(msq_len), 1, INT_MAX, "<n>",
	    "per-client queue length (mqtt.max_mqueue_len)" },
	{ "qos_duration", 'D', OPT_INT, F(qos_duration), 0, INT_MAX, "<n>",
	    "QoS retry interval in seconds (mqtt.retry_interval)" },
	{ "http", 0, OPT_FLAG, F(http_enable), 0, 0, NULL, "enable the REST server" },
	{ "port", 'p', OPT_INT, F(http_port), 1, 65535, "<n>",
	    "REST server port (http_server.port)" },
	{ "cacert", 0, OPT_STR, F(cacert), 0, 0, "<file>", "TLS CA certificate (listeners.ssl)" },
	{ "cert", 'E', OPT_STR, F(cert), 0, 0, "<file>", "TLS certificate (listeners.ssl)" },
	{ "key", 0, OPT_STR, F(key), 0, 0, "<file>", "TLS private key (listeners.ssl)" },
	{ "keypass", 0, OPT_STR, F(keypass), 0, 0, "<pass>", "TLS private key password" },
	{ "verify", 0, OPT_FLAG, F(verify), 0, 0, NULL, "verify client certificates" },
	{ "fail", 0, OPT_FLAG, F(fail), 0, 0, NULL, "reject clients without a certificate" },
	{ "log_level", 0, OPT_LEVEL, F(log_level), 0, 0, "<level>",
	    "trace, debug, info, warn, error or fatal" },
	{ "log_file", 0, OPT_STR, F(log_file), 0, 0, "<path>",
	    "log to this file (adds file to log.to)" },
	{ "log_stdout", 0, OPT_BOOL, F(log_stdout), 0, 0, "<true|false>",
	    "add console to log.to, or remove it" },
	{ "log_syslog", 0, OPT_BOOL, F(log_syslog), 0, 0, "<true|false>",
	    "add syslog to log.to, or remove it" },
	{ "test", 0, OPT_TEST, 0, 0, 0, NULL, "with start: validate the configuration and exit" },
	{ "help", 'h', OPT_HELP, 0, 0, 0, NULL, "print this help" },
	{ "version", 'v', OPT_VERSION, 0, 0, 0, NULL, "print the version" },
};

#undef F

#define CLI_N_OPTIONS (sizeof(cli_options) / sizeof(cli_options[0]))
#define CLI_MAX_URLS  (sizeof(((conf_cli *)0)->urls) / sizeof(((conf_cli *)0)->urls[0]))

static const char *const cli_verbs[] = { "", "start", "stop", "restart", "reload" };

static const char *const cli_url_schemes[] = {
	"nmq-tcp://",
	"tls+nmq-tcp://",
	"nmq-ws://",
	"nmq-wss://",
	"tcp://",
	"tls+tcp://",
	"ws://",
	"wss://",
};

// Returns the name of verb, or "" when it is none or out of range.
const char *cli_verb_name(int verb)
{
	if (verb < CLI_VERB_NONE || verb > CLI_VERB_RELOAD) {
		return "";
	}
	return cli_verbs[verb];
}

// Finds an option by long name (name[0..len)) or, when len is 0, by the
// letter. Returns the table entry, or NULL when there is none.
static const cli_option *cli_find(const char *name, size_t len, char letter)
{
	for (size_t i = 0; i < CLI_N_OPTIONS; i++) {
		const cli_option *o = &cli_options[i];
		if (len == 0 ? (letter != 0 && o->letter == letter)
		             : (strlen(o->name) == len && strncmp(o->name, name, len) == 0)) {
			return o;
		}
	}
	return NULL;
}

// Writes "-x/--name" or "--name" for o into buf. Returns buf.
static const char *cli_opt_label(const cli_option *o, char *buf, size_t len)
{
	if (o->letter != 0) {
		snprintf(buf, len, "-%c/--%s", o->letter, o->name);
	} else {
		snprintf(buf, len, "--%s", o->name);
	}
	return buf;
}

// Parses s as a decimal integer in [min, max] with nothing around it.
// Returns 0 and stores it in *out, or -1 when s is not such a number.
static int cli_parse_int(const char *s, int min, int max, int *out)
{
	char *end;
	if (s[0] < '0' || s[0] > '9') {
		return -1; // no sign, no space
	}
	errno  = 0;
	long v = strtol(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < min || v > max) {
		return -1;
	}
	*out = (int)v;
	return 0;
}

// Parses true|false|1|0 (any case). Returns 1, 0, or -1 for anything else.
static int cli_parse_bool(const char *s)
{
	if (ascii_ieq(s, "true") || strcmp(s, "1") == 0) {
		return 1;
	}
	if (ascii_ieq(s, "false") || strcmp(s, "0") == 0) {
		return 0;
	}
	return -1;
}

// Checks that url starts with a listener scheme and names something after
// it. Returns true when it does.
static bool cli_url_ok(const char *url)
{
	for (size_t i = 0; i < sizeof(cli_url_schemes) / sizeof(cli_url_schemes[0]); i++) {
		size_t n = strlen(cli_url_schemes[i]);
		if (strncmp(url, cli_url_schemes[i], n) == 0) {
			return url[n] != '\0';
		}
	}
	return false;
}

// Stores the value of option o into args. Returns 0, or -1 with a message
// in err when the value is not valid for o.
static int cli_apply(cli_args *args, const cli_option *o, const char *val, char *err, size_t errlen)
{
	char  label[40];
	char *field = (char *)&args->cli + o->field;

	cli_opt_label(o, label, sizeof(label));
	switch (o->kind) {
	case OPT_FLAG:
		*(int *)(void *)field = 1;
		return 0;
	case OPT_TEST:
		args->test = true;
		return 0;
	case OPT_INT: {
		int v;
		if (cli_parse_int(val, o->min, o->max, &v) != 0) {
			if (o->max == INT_MAX) {
				snprintf(err, errlen, "option %s: '%s' is not an integer >= %d",
				    label, val, o->min);
			} else {
				snprintf(err, errlen,
				    "option %s: '%s' is not an integer from %d to %d", label, val,
				    o->min, o->max);
			}
			return -1;
		}
		*(int *)(void *)field = v;
		return 0;
	}
	case OPT_BOOL: {
		int b = cli_parse_bool(val);
		if (b < 0) {
			snprintf(err, errlen, "option %s: '%s' is not true or false", label, val);
			return -1;
		}
		*(int *)(void *)field = b;
		return 0;
	}
	case OPT_LEVEL:
		if (log_level_parse(val) < 0) {
			snprintf(err, errlen,
			    "option %s: unknown level '%s' (trace, debug, info, warn, error, "
			    "fatal)",
			    label, val);
			return -1;
		}
		*(const char **)(void *)field = val;
		return 0;
	case OPT_URL:
		if (!cli_url_ok(val)) {
			snprintf(err, errlen,
			    "option %s: '%s' is not a listener URL (nmq-tcp://, tls+nmq-tcp://, "
			    "nmq-ws://, "
			    "nmq-wss://, tcp://, tls+tcp://, ws://, wss://)",
			    label, val);
			return -1;
		}
		if ((size_t)args->cli.n_urls >= CLI_MAX_URLS) {
			snprintf(err, errlen, "option %s: at most %zu URLs", label, CLI_MAX_URLS);
			return -1;
		}
		args->cli.urls[args->cli.n_urls++] = val;
		return 0;
	default: // OPT_STR
		if (val[0] == '\0') {
			snprintf(err, errlen, "option %s: empty value", label);
			return -1;
		}
		*(const char **)(void *)field = val;
		return 0;
	}
}

// Tells whether option o takes a value. Returns true when it does.
static bool cli_takes_value(const cli_option *o)
{
	return o->kind == OPT_INT || o->kind == OPT_STR || o->kind == OPT_BOOL || o->kind == OPT_URL
	    || o->kind == OPT_LEVEL;
}

// Walks argv once: the first bare word is the verb, everything else an
// option of the table. Returns 0, or -1 with a one-line message in err.
int cli_args_parse(cli_args *args, int argc, char *const argv[], char *err, size_t errlen)
{
	memset(args, 0, sizeof(*args));
	conf_cli_init(&args->cli);
	if (errlen > 0) {
		err[0] = '\0';
	}

	for (int i = 1; i < argc; i++) {
		const char       *a   = argv[i];
		const char       *val = NULL; // attached value ("--x=v", "-xv")
		const cli_option *o;
		char              label[40];

		if (a[0] != '-') {
			if (args->verb != CLI_VERB_NONE) {
				snprintf(err, errlen, "unexpected argument '%s' after '%s'", a,
				    cli_verb_name(args->verb));
				return -1;
			}
			for (int v = CLI_VERB_START; v <= CLI_VERB_RELOAD; v++) {
				if (strcmp(a, cli_verbs[v]) == 0) {
					args->verb = v;
				}
			}
			if (args->verb == CLI_VERB_NONE) {
				snprintf(err, errlen,
				    "unknown command '%s' (expected start, stop, restart or "
				    "reload)",
				    a);
				return -1;
			}
			continue;
		}
		if (a[1] == '-' && a[2] != '\0') {
			const char *eq = strchr(a + 2, '=');
			size_t      n  = eq != NULL ? (size_t)(eq - (a + 2)) : strlen(a + 2);
			o              = n > 0 ? cli_find(a + 2, n, 0) : NULL;
			val            = eq != NULL ? eq + 1 : NULL;
		} else if (a[1] != '-' && a[1] != '\0') {
			o   = cli_find(NULL, 0, a[1]);
			val = a[2] != '\0' ? a + 2 : NULL;
		} else {
			o = NULL;
		}
		if (o == NULL) {
			snprintf(err, errlen, "unknown option '%s' (see nanomq --help)", a);
			return -1;
		}
		cli_opt_label(o, label, sizeof(label));
		if (o->kind == OPT_HELP) {
			args->help = true;
			return 0;
		}
		if (o->kind == OPT_VERSION) {
			args->version = true;
			return 0;
		}
		if (!cli_takes_value(o)) {
			if (val != NULL) {
				snprintf(err, errlen, "option %s takes no value", label);
				return -1;
			}
		} else if (val == NULL) {
			if (i + 1 >= argc || argv[i + 1][0] == '-') {
				snprintf(err, errlen, "option %s needs a value %s", label, o->arg);
				return -1;
			}
			val = argv[++i];
		}
		if (cli_apply(args, o, val, err, errlen) != 0) {
			return -1;
		}
	}

	if (args->verb == CLI_VERB_NONE) {
		snprintf(
		    err, errlen, "missing command: nanomq start|stop|restart|reload [options]");
		return -1;
	}
	if (args->test && args->verb != CLI_VERB_START) {
		snprintf(err, errlen, "option --test is only valid with start");
		return -1;
	}
	return 0;
}

// Writes the help text, built from the option table, to f. Returns nothing.
void cli_usage(FILE *f)
{
	fprintf(f,
	    "Usage: nanomq start|stop|restart|reload [options]\n"
	    "       nanomq -h|--help\n"
	    "       nanomq -v|--version\n"
	    "\n"
	    "Commands:\n"
	    "  start    validate the configuration, then run the broker (in the\n"
	    "           foreground unless -d is given)\n"
	    "  stop     send SIGTERM to the running broker and wait up to 30 s\n"
	    "  restart  stop (SIGKILL after 30 s), then start with these options\n"
	    "  reload   validate the configuration, then make the running broker\n"
	    "           reload it\n"
	    "\n"
	    "Options (they override the configuration file and NANOMQ_* variables):\n");
	for (size_t i = 0; i < CLI_N_OPTIONS; i++) {
		const cli_option *o = &cli_options[i];
		char              lhs[64];
		int               n;
		if (o->letter != 0) {
			n = snprintf(lhs, sizeof(lhs), "-%c, --%s", o->letter, o->name);
		} else {
			n = snprintf(lhs, sizeof(lhs), "    --%s", o->name);
		}
		if (o->arg != NULL && n > 0 && (size_t)n < sizeof(lhs)) {
			snprintf(lhs + n, sizeof(lhs) - (size_t)n, " %s", o->arg);
		}
		fprintf(f, "  %-30s %s\n", lhs, o->help);
	}
	fprintf(f,
	    "\n"
	    "A value that starts with '-' must be written --option=value.\n"
	    "\n"
	    "Environment:\n"
	    "  NANOMQ_CONF_PATH  configuration file when --conf is not given\n"
	    "  NANOMQ_PID_FILE   pid file (default /tmp/nanomq/nanomq.pid)\n"
	    "  NANOMQ_*          configuration overrides (see the documentation)\n"
	    "  NOTIFY_SOCKET     set by systemd (Type=notify)\n");
}

// Writes the version line to f. Returns nothing.
void cli_version(FILE *f)
{
	fprintf(f, "nanomq %s\n", NMQ_VERSION);
}
