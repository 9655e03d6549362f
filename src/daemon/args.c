// The `nanomq` command line: one table of options, one loop over argv.
#include "src/daemon/args.h"
#include "src/conf/ascii.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifndef NMQ_VERSION
#define NMQ_VERSION "unknown"
#endif

// The options that do not set one configuration key. Those that do are
// spelled by the schema row of their key (conf_option_next), so that a key,
// its NANOMQ_* variable, its flat name and its option are written once.
enum cli_opt_kind {
	OPT_FLAG = CONF_OPT_FLAG, // no value; sets an int field to 1
	OPT_INT  = CONF_OPT_INT, // decimal integer in [min, max]
	OPT_STR  = CONF_OPT_STR, // non-empty string
	OPT_WORD = CONF_OPT_WORD, // one of the words of the key
	OPT_BOOL = 16, // true|false (also 1|0), sets an int field to 1 or 0
	OPT_URL, // listener URL, appended to urls[]
	OPT_TEST, // --test
	OPT_HELP, // -h, --help
	OPT_VERSION,
};

typedef struct cli_option {
	const char *name; // long name, without "--"
	char        letter; // short name, 0 if none
	int         kind; // enum cli_opt_kind
	size_t      field; // offset of the field in conf_cli
	const char *arg; // placeholder shown by cli_usage, NULL for flags
	const char *help; // one line for cli_usage
} cli_option;

#define F(member) offsetof(conf_cli, member)

// Shown before the options of the schema.
static const cli_option cli_head[] = {
	{ "conf", 0, OPT_STR, F(conf_path), "<file>", "configuration file (HOCON)" },
	{ "old_conf", 0, OPT_STR, F(old_conf_path), "<file>",
	    "configuration file in the legacy flat format" },
	{ "url", 0, OPT_URL, 0, "<url>",
	    "listener URL: nmq-tcp://, tls+nmq-tcp://, nmq-ws://, nmq-wss:// (repeatable)" },
};

// Shown after the options of the schema.
static const cli_option cli_tail[] = {
	{ "log_file", 0, OPT_STR, F(log_file), "<path>",
	    "log to this file (log.dir, log.file; adds file to log.to)" },
	{ "log_stdout", 0, OPT_BOOL, F(log_stdout), "<true|false>",
	    "add console to log.to, or remove it" },
	{ "log_syslog", 0, OPT_BOOL, F(log_syslog), "<true|false>",
	    "add syslog to log.to, or remove it" },
	{ "test", 0, OPT_TEST, 0, NULL, "with start: validate the configuration and exit" },
	{ "help", 'h', OPT_HELP, 0, NULL, "print this help" },
	{ "version", 'v', OPT_VERSION, 0, NULL, "print the version" },
};

#undef F

// One option as the parser sees it: from one of the tables above, or from
// the schema (then `key` names the configuration key).
typedef struct cli_opt {
	cli_option  o;
	const char *key; // schema options: the key set
	const char *words; // OPT_WORD: allowed words, '|' separated
	int         min, max; // OPT_INT
} cli_opt;

// Fills *out from a table entry. Returns out.
static cli_opt *from_table(const cli_option *o, cli_opt *out)
{
	memset(out, 0, sizeof(*out));
	out->o = *o;
	return out;
}

// Fills *out from an option of the schema. Returns out.
static cli_opt *from_schema(const conf_option *c, cli_opt *out)
{
	memset(out, 0, sizeof(*out));
	out->o.name   = c->name;
	out->o.letter = c->letter;
	out->o.kind   = c->kind;
	out->o.field  = c->field;
	out->o.arg    = c->kind == CONF_OPT_FLAG ? NULL : c->arg;
	out->key      = c->key;
	out->words    = c->words;
	out->min      = c->min;
	out->max      = c->max;
	return out;
}

// Walks every option in the order of --help: *it starts at 0. Fills *out
// and returns true, or returns false after the last.
static bool cli_each(size_t *it, size_t *sub, cli_opt *out)
{
	conf_option c;
	size_t      nh = sizeof(cli_head) / sizeof(cli_head[0]);
	size_t      nt = sizeof(cli_tail) / sizeof(cli_tail[0]);

	if (*it < nh) {
		from_table(&cli_head[(*it)++], out);
		return true;
	}
	if (*it == nh) {
		if (conf_option_next(sub, &c)) {
			from_schema(&c, out);
			return true;
		}
		(*it)++;
	}
	if (*it - nh - 1 < nt) {
		from_table(&cli_tail[*it - nh - 1], out);
		(*it)++;
		return true;
	}
	return false;
}

#define CLI_MAX_URLS (sizeof(((conf_cli *)0)->urls) / sizeof(((conf_cli *)0)->urls[0]))

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
// letter. Returns true and fills *out, or false when there is none.
static bool cli_find(const char *name, size_t len, char letter, cli_opt *out)
{
	size_t it = 0, sub = 0;

	while (cli_each(&it, &sub, out)) {
		const cli_option *o = &out->o;
		if (len == 0 ? (letter != 0 && o->letter == letter)
		             : (strlen(o->name) == len && strncmp(o->name, name, len) == 0)) {
			return true;
		}
	}
	return false;
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
// Returns 0 and stores it in *out, -1 when s is not a non-negative decimal
// number, or -2 when it is one outside [min, max].
static int cli_parse_int(const char *s, int min, int max, int *out)
{
	char *end;
	if (s[0] < '0' || s[0] > '9') {
		return -1; // no sign, no space
	}
	errno  = 0;
	long v = strtol(s, &end, 10);
	if (*end != '\0') {
		return -1;
	}
	if (errno != 0 || v < min || v > max) {
		return -2;
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

// Returns true when val is one of the '|' separated words.
static bool cli_word_ok(const char *words, const char *val)
{
	size_t n = strlen(val);

	for (const char *w = words; w != NULL && *w != '\0';) {
		size_t wl = strcspn(w, "|");
		if (wl == n && strncmp(w, val, n) == 0) {
			return true;
		}
		w += wl + (w[wl] == '|');
	}
	return false;
}

// Stores the value of option c into args. Returns 0, or -1 with a message
// in err when the value is not valid for c.
static int cli_apply(cli_args *args, const cli_opt *c, const char *val, char *err, size_t errlen)
{
	const cli_option *o = &c->o;
	char              label[40];
	char             *field = (char *)&args->cli + o->field;

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
		int r = cli_parse_int(val, c->min, c->max, &v);
		if (r == -2 && c->max < INT_MAX) {
			snprintf(err, errlen, "option %s: '%s' is not an integer from %d to %d",
			    label, val, c->min, c->max);
			return -1;
		}
		if (r != 0) {
			snprintf(err, errlen, "option %s: '%s' is not an integer >= %d", label, val,
			    c->min);
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
	case OPT_WORD:
		if (!cli_word_ok(c->words, val)) {
			// "<level>" names the thing: "unknown level 'x' (a, b)"
			size_t an = o->arg != NULL ? strlen(o->arg) : 0;
			char   words[160];
			size_t n = 0;
			for (const char *w = c->words; *w != '\0' && n + 4 < sizeof(words);) {
				size_t wl = strcspn(w, "|");
				n += (size_t)snprintf(words + n, sizeof(words) - n, "%s%.*s",
				    n > 0 ? ", " : "", (int)wl, w);
				w += wl + (w[wl] == '|');
			}
			snprintf(err, errlen, "option %s: unknown %.*s '%s' (%s)", label,
			    an > 2 ? (int)an - 2 : 5, an > 2 ? o->arg + 1 : "value", val, words);
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
	    || o->kind == OPT_WORD;
}

// Walks argv once: the first bare word is the verb, everything else an
// option of the table. Returns 0, or -1 with a one-line message in err.
static int cli_args_walk(cli_args *args, int argc, char *const argv[], char *err, size_t errlen)
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
		cli_opt           found;
		bool              known;
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
			known          = n > 0 && cli_find(a + 2, n, 0, &found);
			val            = eq != NULL ? eq + 1 : NULL;
		} else if (a[1] != '-' && a[1] != '\0') {
			known = cli_find(NULL, 0, a[1], &found);
			val   = a[2] != '\0' ? a + 2 : NULL;
		} else {
			known = false;
		}
		if (!known) {
			snprintf(err, errlen, "unknown option '%s' (see nanomq --help)", a);
			return -1;
		}
		o = &found.o;
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
		if (cli_apply(args, &found, val, err, errlen) != 0) {
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
	size_t  it = 0, sub = 0;
	cli_opt c;
	while (cli_each(&it, &sub, &c)) {
		const cli_option *o = &c.o;
		char              lhs[64];
		char              help[96];
		int               n;
		if (o->letter != 0) {
			n = snprintf(lhs, sizeof(lhs), "-%c, --%s", o->letter, o->name);
		} else {
			n = snprintf(lhs, sizeof(lhs), "    --%s", o->name);
		}
		if (o->arg != NULL && n > 0 && (size_t)n < sizeof(lhs)) {
			snprintf(lhs + n, sizeof(lhs) - (size_t)n, " %s", o->arg);
		}
		if (c.key != NULL) {
			snprintf(help, sizeof(help), "%s %s",
			    o->kind == OPT_FLAG ? "turn on" : "set", c.key);
		}
		fprintf(f, "  %-30s %s\n", lhs, c.key != NULL ? help : o->help);
	}
	fprintf(f,
	    "\n"
	    "A value that starts with '-' must be written --option=value.\n"
	    "\n"
	    "Environment:\n"
	    "  NANOMQ_CONF_PATH  configuration file when --conf is not given\n"
	    "  NANOMQ_PID_FILE   pid file (default /tmp/nanomq/nanomq.pid, or one derived\n"
	    "                    from the --conf file; see docs/config.md)\n"
	    "  NANOMQ_*          configuration overrides (see the documentation)\n"
	    "  NOTIFY_SOCKET     set by systemd (Type=notify)\n");
}

// Writes the version line to f. Returns nothing.
void cli_version(FILE *f)
{
	fprintf(f, "nanomq %s\n", NMQ_VERSION);
}

// Returns NMQ_OK, or NMQ_EINVAL with the message of cli_args_walk in err.
nmq_err cli_args_parse(cli_args *args, int argc, char *const argv[], char *err, size_t errlen)
{
	return cli_args_walk(args, argc, argv, err, errlen) == 0 ? NMQ_OK : NMQ_EINVAL;
}
