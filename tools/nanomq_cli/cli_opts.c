// Command-line options of nanomq_cli; see cli_opts.h.
#include "tools/nanomq_cli/cli_opts.h"

#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

enum {
	OPT_HELP = 256,
	OPT_WILL_TOPIC,
	OPT_WILL_MSG,
	OPT_WILL_QOS,
	OPT_WILL_RETAIN,
	OPT_SESSION_EXPIRY,
	OPT_RECEIVE_MAXIMUM,
	OPT_TOPIC_ALIAS_MAXIMUM,
	OPT_MAX_PACKET_SIZE,
	OPT_REQUEST_PROBLEM,
	OPT_REQUEST_RESPONSE,
	OPT_USER_PROPERTY,
	OPT_CAFILE,
	OPT_CERT,
	OPT_KEY,
	OPT_KEYPASS,
	OPT_QUIC,
	OPT_WS,
	OPT_INSECURE,
	OPT_WS_PATH,
	OPT_RESUME,
	OPT_IFADDR,
	OPT_PREFIX,
	OPT_DURATION,
	OPT_SUB_TOPIC,
	OPT_SUB_QOS,
	OPT_PUBS,
	OPT_SUBS,
	OPT_INFLIGHT,
	OPT_JSON,
	OPT_BROKER_PID,
	OPT_EXPECT_PUBS,
	OPT_EXPECT_MSGS,
	OPT_DRAIN,
	OPT_MAX_CONNECTING,
	OPT_PROGRESS,
	OPT_SELFTEST,
	OPT_PARALLEL,
	OPT_FAULT_SKIP,
	OPT_FAULT_DUP,
	OPT_FAULT_SWAP,
	OPT_CONNECT_TIMEOUT,
};

// Options shared by every verb, client and bench alike.
static const struct option common_long[] = {
	{ "help", no_argument, NULL, OPT_HELP },
	{ "host", required_argument, NULL, 'h' },
	{ "port", required_argument, NULL, 'p' },
	{ "version", required_argument, NULL, 'V' },
	{ "user", required_argument, NULL, 'u' },
	{ "username", required_argument, NULL, 'u' },
	{ "password", required_argument, NULL, 'P' },
	{ "keepalive", required_argument, NULL, 'k' },
	{ "qos", required_argument, NULL, 'q' },
	{ "topic", required_argument, NULL, 't' },
	{ "retain", no_argument, NULL, 'r' },
	{ "limit", required_argument, NULL, 'L' },
	{ "verbose", no_argument, NULL, 'v' },
	{ "will-topic", required_argument, NULL, OPT_WILL_TOPIC },
	{ "will-msg", required_argument, NULL, OPT_WILL_MSG },
	{ "will-qos", required_argument, NULL, OPT_WILL_QOS },
	{ "will-retain", no_argument, NULL, OPT_WILL_RETAIN },
	{ "session_expiry_interval", required_argument, NULL, OPT_SESSION_EXPIRY },
	{ "receive_maximum", required_argument, NULL, OPT_RECEIVE_MAXIMUM },
	{ "topic_alias_maximum", required_argument, NULL, OPT_TOPIC_ALIAS_MAXIMUM },
	{ "maximum_packet_size", required_argument, NULL, OPT_MAX_PACKET_SIZE },
	{ "request_problem_information", required_argument, NULL, OPT_REQUEST_PROBLEM },
	{ "request_response_information", required_argument, NULL, OPT_REQUEST_RESPONSE },
	{ "user_property", required_argument, NULL, OPT_USER_PROPERTY },
	{ "cafile", required_argument, NULL, OPT_CAFILE },
	{ "insecure", no_argument, NULL, OPT_INSECURE },
	{ "resume", no_argument, NULL, OPT_RESUME },
	{ "ws", no_argument, NULL, OPT_WS },
	{ "ws-path", required_argument, NULL, OPT_WS_PATH },
	{ "quic", no_argument, NULL, OPT_QUIC },
	{ "ifaddr", required_argument, NULL, OPT_IFADDR },
	{ "duration", required_argument, NULL, OPT_DURATION },
	{ "inflight", required_argument, NULL, OPT_INFLIGHT },
	{ "connect-timeout", required_argument, NULL, OPT_CONNECT_TIMEOUT },
};
#define N_COMMON (sizeof(common_long) / sizeof(common_long[0]))

static const struct option client_long[] = {
	{ "id", required_argument, NULL, 'i' },
	{ "identifier", required_argument, NULL, 'i' },
	{ "clients", required_argument, NULL, 'C' },
	{ "parallel", required_argument, NULL, 'n' },
	{ "clean_session", required_argument, NULL, 'c' },
	{ "clean_start", required_argument, NULL, 'c' },
	{ "secure", no_argument, NULL, 's' },
	{ "cert", required_argument, NULL, 'E' },
	{ "key", required_argument, NULL, OPT_KEY },
	{ "keypass", required_argument, NULL, OPT_KEYPASS },
	{ "msg", required_argument, NULL, 'm' },
	{ "file", required_argument, NULL, 'f' },
	{ "stdin-line", no_argument, NULL, 'l' },
	{ "interval", required_argument, NULL, 'I' },
	{ NULL, 0, NULL, 0 },
};
static const char client_short[] = "h:p:V:u:P:i:k:C:n:q:c:vsE:t:m:f:lL:I:r";

static const struct option bench_long[] = {
	{ "count", required_argument, NULL, 'c' },
	{ "startnumber", required_argument, NULL, 'n' },
	{ "interval", required_argument, NULL, 'i' },
	{ "interval_of_msg", required_argument, NULL, 'I' },
	{ "size", required_argument, NULL, 's' },
	{ "clean", required_argument, NULL, 'C' },
	{ "ssl", no_argument, NULL, 'S' },
	{ "certfile", required_argument, NULL, OPT_CERT },
	{ "keyfile", required_argument, NULL, OPT_KEY },
	{ "prefix", required_argument, NULL, OPT_PREFIX },
	{ "parallel", required_argument, NULL, OPT_PARALLEL },
	{ "threads", required_argument, NULL, OPT_PARALLEL },
	{ "sub-topic", required_argument, NULL, OPT_SUB_TOPIC },
	{ "sub-qos", required_argument, NULL, OPT_SUB_QOS },
	{ "pubs", required_argument, NULL, OPT_PUBS },
	{ "subs", required_argument, NULL, OPT_SUBS },
	{ "json", no_argument, NULL, OPT_JSON },
	{ "broker-pid", required_argument, NULL, OPT_BROKER_PID },
	{ "expect-pubs", required_argument, NULL, OPT_EXPECT_PUBS },
	{ "expect-msgs", required_argument, NULL, OPT_EXPECT_MSGS },
	{ "drain", required_argument, NULL, OPT_DRAIN },
	{ "max-connecting", required_argument, NULL, OPT_MAX_CONNECTING },
	{ "progress", required_argument, NULL, OPT_PROGRESS },
	{ "selftest", no_argument, NULL, OPT_SELFTEST },
	{ "fault-skip", required_argument, NULL, OPT_FAULT_SKIP },
	{ "fault-dup", required_argument, NULL, OPT_FAULT_DUP },
	{ "fault-swap", required_argument, NULL, OPT_FAULT_SWAP },
	{ NULL, 0, NULL, 0 },
};
static const char bench_short[] = "h:p:V:u:P:c:n:i:I:t:s:q:rk:C:L:Sv";

// Returns 0 and stores the number in *out, or -1 with a message in err if
// s is not an integer in [min, max].
static int parse_u64(const char *s, const char *name, uint64_t min, uint64_t max, uint64_t *out,
    char *err, size_t errlen)
{
	char              *end;
	unsigned long long v;

	errno = 0;
	v     = strtoull(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v < min || v > max) {
		snprintf(err, errlen, "%s: '%s' is not an integer in %llu..%llu", name, s,
		    (unsigned long long)min, (unsigned long long)max);
		return -1;
	}
	*out = v;
	return 0;
}

// Like parse_u64, for a uint32_t field (max must fit).
static int parse_u32(const char *s, const char *name, uint64_t min, uint64_t max, uint32_t *out,
    char *err, size_t errlen)
{
	uint64_t v;
	if (parse_u64(s, name, min, max, &v, err, errlen) != 0) {
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

// Returns 0 and stores the value of "true"/"false"/"1"/"0", or -1 with err.
static int parse_bool(const char *s, const char *name, bool *out, char *err, size_t errlen)
{
	if (strcmp(s, "true") == 0 || strcmp(s, "1") == 0 || strcmp(s, "yes") == 0) {
		*out = true;
		return 0;
	}
	if (strcmp(s, "false") == 0 || strcmp(s, "0") == 0 || strcmp(s, "no") == 0) {
		*out = false;
		return 0;
	}
	snprintf(err, errlen, "%s: '%s' is not true or false", name, s);
	return -1;
}

// Returns 0 with the whole file in o->message, or -1 with err set.
static int read_file(cli_opts *o, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL) {
		snprintf(err, errlen, "-f %s: %s", path, strerror(errno));
		return -1;
	}
	size_t cap = 4096, len = 0;
	char  *buf = malloc(cap);
	while (buf != NULL) {
		size_t n = fread(buf + len, 1, cap - len, f);
		len += n;
		if (len < cap) {
			break;
		}
		char *nb = realloc(buf, cap * 2);
		if (nb == NULL) {
			free(buf);
			buf = NULL;
			break;
		}
		buf = nb;
		cap *= 2;
	}
	bool bad = buf == NULL || ferror(f);
	fclose(f);
	if (bad) {
		free(buf);
		snprintf(err, errlen, "-f %s: cannot read", path);
		return -1;
	}
	free(o->message_buf);
	o->message_buf = buf;
	o->message     = buf;
	o->message_len = len;
	return 0;
}

// Returns the number of CPUs this process may run on (at least 1).
static uint32_t cpus_allowed(void)
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof(set), &set) != 0) {
		return 1;
	}
	int n = CPU_COUNT(&set);
	return n > 0 ? (uint32_t)n : 1;
}

// Sets the defaults of a verb; it cannot fail.
static void set_defaults(cli_opts *o, bool bench, int verb)
{
	memset(o, 0, sizeof(*o));
	o->verb               = verb;
	o->bench              = bench;
	o->host               = "localhost";
	o->port               = 1883;
	o->version            = 4;
	o->keepalive          = bench ? 300 : 60;
	o->clean_start        = true;
	o->request_problem    = -1;
	o->request_response   = -1;
	o->clients            = bench ? 200 : 1;
	o->threads            = 1;
	o->qos                = -1;
	o->sub_qos            = -1;
	o->limit              = (!bench && verb == CLI_PUB) ? 1 : 0;
	o->interval_ms        = bench ? 1000 : 10;
	o->conn_interval_ms   = 10;
	o->size               = 256;
	o->inflight           = 32;
	o->broker_pid         = 0;
	o->drain_ms           = 5000;
	o->max_connecting     = 100;
	o->progress_ms        = 1000;
	o->connect_timeout_ms = 30000;
	if (bench) {
		uint32_t n = cpus_allowed();
		o->threads = n > 8 ? 8 : n;
	}
}

// Returns 0 if the option is one shared by every verb and was applied, 1
// if it is not one of them, or -1 with err set.
static int parse_common(cli_opts *o, int c, const char *arg, char *err, size_t errlen)
{
	uint64_t v;

	switch (c) {
	case 'h':
		o->host = arg;
		return 0;
	case 'p':
		if (parse_u64(arg, "-p", 1, 65535, &v, err, errlen) != 0) {
			return -1;
		}
		o->port       = (uint16_t)v;
		o->port_given = true;
		return 0;
	case 'V':
		if (strcmp(arg, "mqttv311") == 0) {
			arg = "4";
		} else if (strcmp(arg, "mqttv5") == 0) {
			arg = "5";
		}
		if (parse_u64(arg, "-V", 3, 5, &v, err, errlen) != 0) {
			return -1;
		}
		o->version = (uint8_t)v;
		return 0;
	case 'u':
		o->username = arg;
		return 0;
	case 'P':
		o->password = arg;
		return 0;
	case 'k':
		if (parse_u64(arg, "-k", 0, 65535, &v, err, errlen) != 0) {
			return -1;
		}
		o->keepalive = (uint16_t)v;
		return 0;
	case 'q':
		if (parse_u64(arg, "-q", 0, 2, &v, err, errlen) != 0) {
			return -1;
		}
		o->qos = (int)v;
		return 0;
	case 't':
		if (o->ntopics == CLI_MAX_TOPICS) {
			snprintf(err, errlen, "-t: at most %d topics", CLI_MAX_TOPICS);
			return -1;
		}
		o->topics[o->ntopics++] = arg;
		return 0;
	case 'r':
		o->retain = true;
		return 0;
	case 'L':
		return parse_u64(arg, "-L", 0, UINT64_MAX, &o->limit, err, errlen);
	case 'v':
		o->verbose = true;
		return 0;
	case OPT_WILL_TOPIC:
		o->will_topic = arg;
		return 0;
	case OPT_WILL_MSG:
		o->will_msg = arg;
		return 0;
	case OPT_WILL_QOS:
		if (parse_u64(arg, "--will-qos", 0, 2, &v, err, errlen) != 0) {
			return -1;
		}
		o->will_qos = (uint8_t)v;
		return 0;
	case OPT_WILL_RETAIN:
		o->will_retain = true;
		return 0;
	case OPT_SESSION_EXPIRY:
		if (parse_u64(arg, "--session_expiry_interval", 0, UINT32_MAX, &v, err, errlen)
		    != 0) {
			return -1;
		}
		o->has_session_expiry = true;
		o->session_expiry     = (uint32_t)v;
		return 0;
	case OPT_RECEIVE_MAXIMUM:
		if (parse_u64(arg, "--receive_maximum", 1, 65535, &v, err, errlen) != 0) {
			return -1;
		}
		o->receive_maximum = (uint16_t)v;
		return 0;
	case OPT_TOPIC_ALIAS_MAXIMUM:
		if (parse_u64(arg, "--topic_alias_maximum", 0, 65535, &v, err, errlen) != 0) {
			return -1;
		}
		o->topic_alias_maximum = (uint16_t)v;
		return 0;
	case OPT_MAX_PACKET_SIZE:
		return parse_u32(
		    arg, "--maximum_packet_size", 1, UINT32_MAX, &o->max_packet_size, err, errlen);
	case OPT_REQUEST_PROBLEM:
		if (parse_u64(arg, "--request_problem_information", 0, 1, &v, err, errlen) != 0) {
			return -1;
		}
		o->request_problem = (int)v;
		return 0;
	case OPT_REQUEST_RESPONSE:
		if (parse_u64(arg, "--request_response_information", 0, 1, &v, err, errlen) != 0) {
			return -1;
		}
		o->request_response = (int)v;
		return 0;
	case OPT_USER_PROPERTY: {
		const char *eq = strchr(arg, '=');
		if (eq == NULL || eq == arg) {
			snprintf(err, errlen, "--user_property: '%s' is not key=value", arg);
			return -1;
		}
		if (o->n_user_props == CLI_MAX_USER_PROPS) {
			snprintf(err, errlen, "--user_property: at most %d", CLI_MAX_USER_PROPS);
			return -1;
		}
		mqtt_user_prop *up = &o->user_props[o->n_user_props++];
		up->key.p          = (const uint8_t *)arg;
		up->key.len        = (uint32_t)(eq - arg);
		up->value.p        = (const uint8_t *)eq + 1;
		up->value.len      = (uint32_t)strlen(eq + 1);
		return 0;
	}
	case OPT_CAFILE:
		o->cafile = arg;
		return 0;
	case OPT_KEY:
		o->keyfile = arg;
		return 0;
	case OPT_INSECURE:
		o->insecure = true;
		return 0;
	case OPT_RESUME:
		o->resume = true;
		return 0;
	case OPT_WS:
		o->ws = true;
		return 0;
	case OPT_WS_PATH:
		if (arg[0] != '/' || strlen(arg) > 512 || strpbrk(arg, " \r\n") != NULL) {
			snprintf(err, errlen, "--ws-path: '%s' is not a path starting with /", arg);
			return -1;
		}
		o->ws      = true;
		o->ws_path = arg;
		return 0;
	case OPT_QUIC:
		snprintf(err, errlen, "--quic: QUIC is not supported");
		return -1;
	case OPT_IFADDR:
		o->ifaddr = arg;
		return 0;
	case OPT_DURATION: {
		char  *end;
		double d = strtod(arg, &end);
		if (end == arg || *end != '\0' || !(d >= 0) || d > 1e7) {
			snprintf(err, errlen, "--duration: '%s' is not a number of seconds", arg);
			return -1;
		}
		o->duration_s = d;
		return 0;
	}
	case OPT_INFLIGHT:
		if (parse_u64(arg, "--inflight", 1, 65000, &v, err, errlen) != 0) {
			return -1;
		}
		o->inflight = (uint16_t)v;
		return 0;
	case OPT_CONNECT_TIMEOUT:
		return parse_u32(
		    arg, "--connect-timeout", 1, 3600000, &o->connect_timeout_ms, err, errlen);
	default:
		return 1;
	}
}

// Applies one pub/sub/conn option. Returns 0, or -1 with err set.
static int parse_client(cli_opts *o, int c, const char *arg, char *err, size_t errlen)
{
	switch (c) {
	case 'i':
		o->client_id = arg;
		return 0;
	case 'C':
		return parse_u32(arg, "-C", 1, 1000000, &o->clients, err, errlen);
	case 'n':
		return parse_u32(arg, "-n", 1, 256, &o->threads, err, errlen);
	case 'c':
		return parse_bool(arg, "-c", &o->clean_start, err, errlen);
	case 's':
		o->secure = true;
		return 0;
	case 'E':
		o->certfile = arg;
		return 0;
	case OPT_KEYPASS:
		o->keypass = arg;
		return 0;
	case 'm':
		o->message     = arg;
		o->message_len = strlen(arg);
		return 0;
	case 'f':
		return read_file(o, arg, err, errlen);
	case 'l':
		o->stdin_lines = true;
		return 0;
	case 'I':
		return parse_u32(arg, "-I", 0, 86400000, &o->interval_ms, err, errlen);
	default:
		snprintf(err, errlen, "unknown option (see --help)");
		return -1;
	}
}

// Applies one bench option. Returns 0, or -1 with err set.
static int parse_bench(cli_opts *o, int c, const char *arg, char *err, size_t errlen)
{
	uint64_t v;

	switch (c) {
	case 'c':
		return parse_u32(arg, "-c", 1, 1000000, &o->clients, err, errlen);
	case 'n':
		return parse_u32(arg, "-n", 0, UINT32_MAX / 2, &o->start_number, err, errlen);
	case 'i':
		return parse_u32(arg, "-i", 0, 3600000, &o->conn_interval_ms, err, errlen);
	case 'I':
		return parse_u32(arg, "-I", 0, 86400000, &o->interval_ms, err, errlen);
	case 's':
		return parse_u32(arg, "-s", 0, 64 * 1024 * 1024, &o->size, err, errlen);
	case 'C':
		return parse_bool(arg, "-C", &o->clean_start, err, errlen);
	case 'S':
		o->secure = true;
		return 0;
	case OPT_CERT:
		o->certfile = arg;
		return 0;
	case OPT_PREFIX:
		o->prefix = arg;
		return 0;
	case OPT_PARALLEL:
		return parse_u32(arg, "--parallel", 1, 256, &o->threads, err, errlen);
	case OPT_SUB_TOPIC:
		o->sub_topic = arg;
		return 0;
	case OPT_SUB_QOS:
		if (parse_u64(arg, "--sub-qos", 0, 2, &v, err, errlen) != 0) {
			return -1;
		}
		o->sub_qos = (int)v;
		return 0;
	case OPT_PUBS:
		return parse_u32(arg, "--pubs", 0, 1000000, &o->pubs, err, errlen);
	case OPT_SUBS:
		return parse_u32(arg, "--subs", 0, 1000000, &o->subs, err, errlen);
	case OPT_JSON:
		o->json = true;
		return 0;
	case OPT_BROKER_PID:
		if (parse_u64(arg, "--broker-pid", 1, 1u << 30, &v, err, errlen) != 0) {
			return -1;
		}
		o->broker_pid = (int)v;
		return 0;
	case OPT_EXPECT_PUBS:
		return parse_u32(arg, "--expect-pubs", 1, 10000000, &o->expect_pubs, err, errlen);
	case OPT_EXPECT_MSGS:
		return parse_u64(
		    arg, "--expect-msgs", 1, UINT64_MAX / 2, &o->expect_msgs, err, errlen);
	case OPT_DRAIN:
		return parse_u32(arg, "--drain", 0, 3600000, &o->drain_ms, err, errlen);
	case OPT_MAX_CONNECTING:
		return parse_u32(
		    arg, "--max-connecting", 1, 100000, &o->max_connecting, err, errlen);
	case OPT_PROGRESS:
		return parse_u32(arg, "--progress", 0, 3600000, &o->progress_ms, err, errlen);
	case OPT_SELFTEST:
		o->selftest = true;
		return 0;
	case OPT_FAULT_SKIP:
	case OPT_FAULT_DUP:
	case OPT_FAULT_SWAP:
		if (parse_u64(arg, "--fault-*", 2, UINT32_MAX, &v, err, errlen) != 0) {
			return -1;
		}
		if (c == OPT_FAULT_SKIP) {
			o->fault_skip = (uint32_t)v;
		} else if (c == OPT_FAULT_DUP) {
			o->fault_dup = (uint32_t)v;
		} else {
			o->fault_swap = (uint32_t)v;
		}
		return 0;
	default:
		snprintf(err, errlen, "unknown option (see --help)");
		return -1;
	}
}

// Returns the verb named by s, or 0 if it names none.
static int verb_of(const char *s, bool bench)
{
	if (strcmp(s, "pub") == 0) {
		return CLI_PUB;
	}
	if (strcmp(s, "sub") == 0) {
		return CLI_SUB;
	}
	if (strcmp(s, "conn") == 0) {
		return CLI_CONN;
	}
	if (bench && strcmp(s, "pubsub") == 0) {
		return CLI_PUBSUB;
	}
	return 0;
}

// Checks the combination of options after parsing. Returns 0, or -1 with
// err set.
static int finish(cli_opts *o, char *err, size_t errlen)
{
	if (o->qos < 0) {
		o->qos = (!o->bench && o->verb == CLI_SUB) ? 2 : 0;
	}
	if (o->sub_qos < 0) {
		o->sub_qos = o->qos;
	}
	if (o->version != 5
	    && (o->has_session_expiry || o->receive_maximum || o->topic_alias_maximum
	        || o->max_packet_size || o->request_problem >= 0 || o->request_response >= 0
	        || o->n_user_props)) {
		snprintf(err, errlen, "MQTT 5 properties need -V 5");
		return -1;
	}
	if ((o->will_msg || o->will_qos || o->will_retain) && o->will_topic == NULL) {
		snprintf(err, errlen, "--will-msg/--will-qos/--will-retain need --will-topic");
		return -1;
	}
	// TLS files imply TLS, as with mosquitto_pub.
	if (o->cafile != NULL || o->certfile != NULL || o->keyfile != NULL || o->insecure) {
		o->secure = true;
	}
	if ((o->certfile == NULL) != (o->keyfile == NULL)) {
		snprintf(err, errlen, "a client certificate needs both %s and %s",
		    o->bench ? "--certfile" : "-E/--cert", o->bench ? "--keyfile" : "--key");
		return -1;
	}
	if (o->resume && !o->secure) {
		snprintf(err, errlen, "--resume needs TLS (%s)", o->bench ? "-S" : "-s");
		return -1;
	}
	if (!o->port_given) {
		o->port = o->ws ? (o->secure ? 8086 : 8083) : (o->secure ? 8883 : 1883);
	}
	if (o->selftest) {
		return 0;
	}
	if (!o->bench) {
		if (o->verb != CLI_CONN && o->ntopics == 0) {
			snprintf(err, errlen, "-t topic is required");
			return -1;
		}
		if (o->verb == CLI_PUB) {
			int sources = (o->message != NULL) + o->stdin_lines;
			if (sources != 1) {
				snprintf(err, errlen, "give exactly one of -m msg, -f file or -l");
				return -1;
			}
			if (o->ntopics != 1) {
				snprintf(err, errlen, "pub takes one -t topic");
				return -1;
			}
		}
		return 0;
	}
	if (o->verb != CLI_CONN && o->ntopics != 1) {
		snprintf(err, errlen, "-t topic is required (once)");
		return -1;
	}
	if (o->verb == CLI_PUBSUB && o->pubs + o->subs == 0) {
		o->pubs = 1;
		o->subs = 1;
	}
	if (o->verb != CLI_CONN && o->verb != CLI_SUB && o->size < 24) {
		snprintf(
		    err, errlen, "-s: bench messages carry a 24-byte header; use -s 24 or more");
		return -1;
	}
	if (o->json) {
		o->progress_ms = 0;
	}
	return 0;
}

// Returns 0 on success, 1 if help was printed, or -1 with err set.
int cli_opts_parse(cli_opts *o, bool bench, int argc, char **argv, char *err, size_t errlen)
{
	int verb = argc > 0 ? verb_of(argv[0], bench) : 0;

	if (argc > 0 && bench && strcmp(argv[0], "--selftest") == 0) {
		verb = CLI_PUBSUB;
	}
	if (verb == 0) {
		if (argc > 0 && strcmp(argv[0], "--help") != 0 && strcmp(argv[0], "help") != 0) {
			snprintf(err, errlen, "unknown command '%s'", argv[0]);
			return -1;
		}
		cli_opts_usage(stdout, bench, 0);
		return 1;
	}
	// getopt_long wants one table: the common options, then the verb's.
	static struct option table[N_COMMON + sizeof(bench_long) / sizeof(bench_long[0])
	    + sizeof(client_long) / sizeof(client_long[0])];
	const struct option *extra  = bench ? bench_long : client_long;
	size_t               nextra = 0;
	while (extra[nextra].name != NULL) {
		nextra++;
	}
	memcpy(table, common_long, sizeof(common_long));
	memcpy(table + N_COMMON, extra, (nextra + 1) * sizeof(*extra));

	set_defaults(o, bench, verb);
	o->selftest = bench && strcmp(argv[0], "--selftest") == 0;
	optind      = 1;
	opterr      = 0;
	for (;;) {
		int longind = 0;
		int c
		    = getopt_long(argc, argv, bench ? bench_short : client_short, table, &longind);
		if (c == -1) {
			break;
		}
		if (c == OPT_HELP) {
			cli_opts_usage(stdout, bench, verb);
			return 1;
		}
		if (c == '?' || c == ':') {
			if (optopt != 0) {
				snprintf(err, errlen, "option -%c: unknown or missing its value",
				    optopt);
			} else {
				snprintf(err, errlen, "option '%s': unknown or missing its value",
				    argv[optind - 1]);
			}
			return -1;
		}
		int rv = parse_common(o, c, optarg, err, errlen);
		if (rv < 0) {
			return -1;
		}
		if (rv > 0) {
			rv = bench ? parse_bench(o, c, optarg, err, errlen)
			           : parse_client(o, c, optarg, err, errlen);
			if (rv != 0) {
				return -1;
			}
		}
	}
	if (optind < argc) {
		snprintf(err, errlen, "unexpected argument '%s'", argv[optind]);
		return -1;
	}
	return finish(o, err, errlen);
}

// Frees the copy of a -f file; it cannot fail.
void cli_opts_fini(cli_opts *o)
{
	free(o->message_buf);
	o->message_buf = NULL;
}

// Returns 0 and fills cfg, or -1 with err set (unknown host, bad ifaddr).
int cli_opts_conn_cfg(const cli_opts *o, cli_conn_cfg *cfg, char *err, size_t errlen)
{
	struct addrinfo hints, *res;
	char            port[8];
	int             rv;

	memset(cfg, 0, sizeof(*cfg));
	memset(&hints, 0, sizeof(hints));
	hints.ai_family   = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	snprintf(port, sizeof(port), "%u", o->port);
	if ((rv = getaddrinfo(o->host, port, &hints, &res)) != 0) {
		snprintf(err, errlen, "%s: %s", o->host, gai_strerror(rv));
		return -1;
	}
	memcpy(&cfg->addr, res->ai_addr, res->ai_addrlen);
	cfg->addrlen = res->ai_addrlen;
	freeaddrinfo(res);
	if (o->ifaddr != NULL) {
		hints.ai_family = cfg->addr.ss_family;
		hints.ai_flags  = AI_NUMERICHOST;
		if ((rv = getaddrinfo(o->ifaddr, "0", &hints, &res)) != 0) {
			snprintf(err, errlen, "--ifaddr %s: %s", o->ifaddr, gai_strerror(rv));
			return -1;
		}
		memcpy(&cfg->bind_addr, res->ai_addr, res->ai_addrlen);
		cfg->bind_len = res->ai_addrlen;
		freeaddrinfo(res);
	}
	cfg->version              = o->version;
	cfg->keepalive            = o->keepalive;
	cfg->clean_start          = o->clean_start;
	cfg->username             = o->username;
	cfg->password             = o->password;
	cfg->will_topic           = o->will_topic;
	cfg->will_msg             = o->will_msg;
	cfg->will_qos             = o->will_qos;
	cfg->will_retain          = o->will_retain;
	cfg->has_session_expiry   = o->has_session_expiry;
	cfg->session_expiry       = o->session_expiry;
	cfg->receive_maximum      = o->receive_maximum;
	cfg->topic_alias_maximum  = o->topic_alias_maximum;
	cfg->max_packet_size      = o->max_packet_size;
	cfg->has_request_problem  = o->request_problem >= 0;
	cfg->request_problem      = (uint8_t)(o->request_problem > 0);
	cfg->has_request_response = o->request_response >= 0;
	cfg->request_response     = (uint8_t)(o->request_response > 0);
	cfg->user_props           = o->n_user_props ? o->user_props : NULL;
	cfg->n_user_props         = o->n_user_props;
	cfg->inflight             = o->inflight;
	cfg->connect_timeout_ms   = o->connect_timeout_ms;
	cfg->wbuf_high            = 256 * 1024;
	if (o->ws) {
		cfg->ws_path = o->ws_path != NULL ? o->ws_path : "/mqtt";
		cfg->ws_host = o->host;
		cfg->ws_port = o->port;
	}
	if (o->secure) {
		cli_tls_opts to = {
			.cafile      = o->cafile,
			.certfile    = o->certfile,
			.keyfile     = o->keyfile,
			.keypass     = o->keypass,
			.server_name = o->host,
			.insecure    = o->insecure,
			.resume      = o->resume,
		};
		if (cli_tls_new(&cfg->tls, &to, err, errlen) != 0) {
			return -1;
		}
	}
	return 0;
}

// Frees the TLS configuration of cfg; see cli_opts.h.
void cli_opts_conn_cfg_fini(cli_conn_cfg *cfg)
{
	cli_tls_free(cfg->tls);
	cfg->tls = NULL;
}

// Returns 0 with tmpl expanded into out, or -1 if it does not fit.
int cli_opts_expand(const char *tmpl, uint32_t index, const char *client_id, const char *user,
    char *out, size_t outlen)
{
	size_t n = 0;
	for (const char *p = tmpl; *p != '\0'; p++) {
		char        num[16];
		const char *ins = NULL;
		if (p[0] == '%' && p[1] == 'i') {
			snprintf(num, sizeof(num), "%u", index);
			ins = num;
		} else if (p[0] == '%' && p[1] == 'c') {
			ins = client_id ? client_id : "";
		} else if (p[0] == '%' && p[1] == 'u') {
			ins = user ? user : "";
		}
		if (ins != NULL) {
			size_t l = strlen(ins);
			if (n + l >= outlen) {
				return -1;
			}
			memcpy(out + n, ins, l);
			n += l;
			p++;
			continue;
		}
		if (n + 1 >= outlen) {
			return -1;
		}
		out[n++] = *p;
	}
	out[n] = '\0';
	return 0;
}

static const char usage_overview[]
    = "Usage: nanomq_cli <command> [options]\n"
      "\n"
      "Commands:\n"
      "  pub     publish messages\n"
      "  sub     subscribe and print messages\n"
      "  conn    connect clients and hold the connections\n"
      "  drops   print the broker's recent drops and refusals (its REST API)\n"
#ifdef NMQ_BUILD_BENCH
      "  bench   load generator: bench pub|sub|conn|pubsub (see nanomq_cli bench --help)\n"
#endif
      "\n"
      "Run 'nanomq_cli <command> --help' for the options of a command.\n";

static const char usage_client[]
    = "Connection:\n"
      "  -h, --host <host>           broker host [localhost]\n"
      "  -p, --port <port>           broker port [1883]\n"
      "  -V, --version <3|4|5>       MQTT version: 3 = 3.1, 4 = 3.1.1, 5 = 5.0 [4]\n"
      "  -u, --user <user>           user name\n"
      "  -P, --password <pass>       password\n"
      "  -i, --id <clientid>         client id (with -C N: <id>-<n>) [generated]\n"
      "  -k, --keepalive <s>         keep alive in seconds [60]\n"
      "  -c, --clean_session <bool>  clean start [true]\n"
      "  -C, --clients <n>           number of clients [1]\n"
      "  -n, --parallel <n>          threads the clients are spread over [1]\n"
      "  -q, --qos <0|1|2>           QoS [pub 0, sub 2]\n"
      "  -v, --verbose               report connection events on stderr\n"
      "      --will-topic <t>, --will-msg <m>, --will-qos <q>, --will-retain\n"
      "      --session_expiry_interval <s>, --receive_maximum <n>,\n"
      "      --topic_alias_maximum <n>, --maximum_packet_size <n>,\n"
      "      --request_problem_information <0|1>,\n"
      "      --request_response_information <0|1>, --user_property <k=v>  (MQTT 5)\n"
      "      --ifaddr <addr>         local address to connect from\n"
      "      --inflight <n>          QoS 1/2 in-flight window per client [32]\n"
      "      --duration <s>          exit after this many seconds\n"
      "      --connect-timeout <ms>  TCP connect + CONNACK timeout [30000]\n"
      "  -s, --secure                TLS (mbed TLS; port 8883 unless -p)\n"
      "      --cafile <file>         CA certificates the server's certificate must\n"
      "                              chain to [the system bundle]; its name must\n"
      "                              match -h\n"
      "  -E, --cert <file>, --key <file>, --keypass <pass>\n"
      "                              client certificate and key (mutual TLS)\n"
      "      --insecure              do not verify the server's certificate\n"
      "      --resume                with -C N: offer the last session on later\n"
      "                              connections (abbreviated handshakes)\n"
      "      --ws, --ws-path <path>  MQTT over WebSocket (wss with -s) [/mqtt];\n"
      "                              port 8083 (wss 8086) unless -p\n"
      "  --quic is refused.\n";

static const char usage_pub[]
    = "Usage: nanomq_cli pub -t <topic> (-m <msg> | -f <file> | -l) [options]\n"
      "\n"
      "Each client publishes the message -L times, -I ms apart, then disconnects\n"
      "once every QoS 1/2 message is acknowledged.\n"
      "  -t, --topic <topic>         topic to publish to\n"
      "  -m, --msg <msg>             the message\n"
      "  -f, --file <file>           send the contents of a file\n"
      "  -l, --stdin-line            send each line of standard input as a message\n"
      "  -L, --limit <n>             messages per client (0 = until interrupted) [1]\n"
      "  -I, --interval <ms>         interval between messages of a client [10]\n"
      "  -r, --retain                set the retain flag\n";

static const char usage_sub[]
    = "Usage: nanomq_cli sub -t <filter> [-t <filter>...] [options]\n"
      "\n"
      "Prints each message as '<topic>: <payload>' on standard output.\n"
      "  -t, --topic <filter>        topic filter (repeatable)\n"
      "  -L, --limit <n>             exit after n messages in all (extension) [0 = never]\n";

static const char usage_conn[]
    = "Usage: nanomq_cli conn [options]\n"
      "\n"
      "Connects the clients and holds the connections until interrupted (or\n"
      "--duration). Exits 1 if any connection is refused.\n";

static const char usage_bench[]
    = "Usage: nanomq_cli bench pub|sub|conn|pubsub [options]\n"
      "\n"
      "A load generator: non-blocking sockets on epoll, many connections per\n"
      "thread. Each message carries a 24-byte header: publisher id, sequence\n"
      "number per (publisher, topic) and a CLOCK_MONOTONIC send time, so that\n"
      "subscribers count lost, duplicated and reordered messages and measure\n"
      "latency (run publisher and subscriber on the same machine).\n"
      "\n"
      "  pub     -c publishers, each on -t (expanded per client)\n"
      "  sub     -c subscribers of -t; counts what arrives (--expect-* or a window)\n"
      "  conn    -c idle connections; reports connections per second\n"
      "  pubsub  --subs subscribers of --sub-topic and --pubs publishers on -t in\n"
      "          one process: exact sent/received/lost accounting\n"
      "\n"
      "  -h, --host <host>            broker host [localhost]\n"
      "  -p, --port <port>            broker port [1883]\n"
      "  -V, --version <3|4|5>        MQTT version [4]\n"
      "  -u, --username <u>, -P, --password <p>\n"
      "  -c, --count <n>              clients (pub, sub, conn) [200]\n"
      "  -n, --startnumber <n>        index of the first client (%i) [0]\n"
      "  -i, --interval <ms>          interval between connects, 0 = as fast as\n"
      "                               --max-connecting allows [10]\n"
      "  -I, --interval_of_msg <ms>   interval between messages of a publisher,\n"
      "                               0 = flat out [1000]\n"
      "  -t, --topic <t>              topic; %i = client index, %c = client id,\n"
      "                               %u = user name\n"
      "  -s, --size <bytes>           payload size, >= 24 [256]\n"
      "  -q, --qos <0|1|2>            QoS of publishes and subscriptions [0]\n"
      "  -r, --retain                 publish retained\n"
      "  -k, --keepalive <s>          [300]\n"
      "  -C, --clean <bool>           clean start [true]\n"
      "  -L, --limit <n>              messages per publisher, 0 = no limit [0]\n"
      "      --prefix <p>             client id prefix [nmqb]\n"
      "      --ifaddr <addr>          local address to connect from\n"
      "  -S, --ssl                    TLS (mbed TLS; port 8883 unless -p)\n"
      "      --cafile <f>, --certfile <f>, --keyfile <f>\n"
      "                               CA bundle to verify the server with [the\n"
      "                               system bundle]; client certificate and key\n"
      "      --insecure               do not verify the server's certificate\n"
      "      --resume                 resume TLS sessions: after the first full\n"
      "                               handshake of the run, connections offer its\n"
      "                               session (ticket or id)\n"
      "      --ws, --ws-path <path>   MQTT over WebSocket (wss with -S) [/mqtt];\n"
      "                               port 8083 (wss 8086) unless -p\n"
      "\n"
      "Extensions:\n"
      "      --parallel <n>           threads [CPUs this process may use, max 8]\n"
      "      --pubs <n>, --subs <n>   pubsub: publishers and subscribers [1, 1]\n"
      "      --sub-topic <filter>     pubsub: subscription filter [-t]; a\n"
      "                               $share/<group>/... filter is accounted per group\n"
      "      --sub-qos <q>            pubsub: subscription QoS [-q]\n"
      "      --inflight <n>           QoS 1/2 window per publisher [32]\n"
      "      --duration <s>           publishing time (pub, pubsub; default 10 s\n"
      "                               without -L), or how long sub/conn run\n"
      "      --drain <ms>             wait for deliveries after publishing [5000]\n"
      "      --expect-pubs <n>, --expect-msgs <m>\n"
      "                               sub: each subscriber expects n publishers x m\n"
      "                               messages; exit when they are in\n"
      "      --max-connecting <n>     handshakes in progress at once [100]\n"
      "      --broker-pid <pid>       sample the broker's CPU time and memory from\n"
      "                               /proc over the measured window\n"
      "      --json                   print one JSON object instead of text\n"
      "      --progress <ms>          progress lines on stderr, 0 = none [1000]\n"
      "      --selftest               check the accounting with crafted sequences\n"
      "  Other MQTT 5 options as for pub/sub/conn.\n";

// Prints the usage of one command, or the overview; it cannot fail.
void cli_opts_usage(FILE *out, bool bench, int verb)
{
	if (bench) {
		fputs(usage_bench, out);
		return;
	}
	switch (verb) {
	case CLI_PUB:
		fprintf(out, "%s\n%s", usage_pub, usage_client);
		break;
	case CLI_SUB:
		fprintf(out, "%s\n%s", usage_sub, usage_client);
		break;
	case CLI_CONN:
		fprintf(out, "%s\n%s", usage_conn, usage_client);
		break;
	default:
		fputs(usage_overview, out);
		break;
	}
}
