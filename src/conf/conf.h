// The broker configuration: the typed result of reading nanomq.conf (HOCON),
// NANOMQ_* environment variables and the command line, in that order of
// precedence over built-in defaults.
//
// Contract:
// - conf_load() is called from the main thread before any NNG call and
//   again on reload (from the main thread, on SIGHUP). It never touches a
//   running broker: it only produces a new nmq_conf, or errors.
// - The schema (one table in conf_schema.c) drives defaults, types, ranges,
//   reloadability and the reference documentation.
// - An nmq_conf owns all its strings and cJSON trees; conf_free() releases
//   them. An nmq_conf is read-only once loaded: any thread may read it.
// - No function here logs: every problem is returned in a conf_errors.
#ifndef NMQ_CONF_H
#define NMQ_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "nng/core/log.h"
#include "nng/core/nmq_err.h"

struct cJSON; // <cjson/cJSON.h>; only pointers appear here

#define CONF_MAX_LISTENERS 16

enum conf_listener_kind {
	CONF_LISTENER_TCP = 0,
	CONF_LISTENER_SSL,
	CONF_LISTENER_WS,
	CONF_LISTENER_WSS,
};

typedef struct conf_listener {
	int   kind; // enum conf_listener_kind
	char *name; // "tcp", "tcp.default_1", "ssl", ...
	char *bind; // "host:port" (or "host:port/path" for ws/wss), scheme stripped
	char *host; // "0.0.0.0", "::", "127.0.0.1"
	int   port;
	char *path; // ws/wss only, e.g. "/mqtt"
	// ssl / wss
	char    *keyfile;
	char    *certfile;
	char    *cacertfile;
	char    *key_password;
	bool     verify_peer;
	bool     fail_if_no_peer_cert;
	char    *groups; // key exchange groups, NULL = the TLS engine's defaults
	char    *ciphers; // cipher suites, NULL = the TLS engine's defaults
	uint32_t handshake_timeout_ms; // ssl / wss: longest TLS handshake
	uint32_t max_connections; // open at once on this listener, 0 = no limit
} conf_listener;

#define CONF_LOG_TO_CONSOLE 0x1
#define CONF_LOG_TO_FILE    0x2
#define CONF_LOG_TO_SYSLOG  0x4
#define CONF_LOG_TO_UDS     0x8

// http_server.auth_type
enum conf_http_auth_type {
	CONF_HTTP_AUTH_BASIC = 0,
	CONF_HTTP_AUTH_JWT,
	CONF_HTTP_AUTH_NONE, // "no_auth"
};

// auth.no_match
// sqlite.durability (extension): what a committed group survives.
enum conf_sqlite_durability {
	CONF_SQLITE_FSYNC = 0, // fsync per group commit: a power cut
	CONF_SQLITE_OS, // the OS's buffers: a crash or kill -9, not a power cut
};

enum conf_acl_permit {
	CONF_ACL_ALLOW = 0,
	CONF_ACL_DENY,
};

// auth.deny_action
enum conf_deny_action {
	CONF_DENY_IGNORE = 0,
	CONF_DENY_DISCONNECT,
};

// bridges.mqtt.<name>.forwards[]: local topics sent to the remote broker.
typedef struct conf_bridge_fwd {
	char *local_topic; // filter matched locally
	char *remote_topic; // "" keeps the topic as published
	char *prefix; // added before the remote topic, NULL = none
	char *suffix; // added after it, NULL = none
	int   qos; // -1 keeps the message's QoS
	int   retain; // 0 or 1 override, 2 keeps the message's flag
} conf_bridge_fwd;

// bridges.mqtt.<name>.subscription[]: remote filters published locally.
typedef struct conf_bridge_sub {
	char *remote_topic; // filter subscribed on the remote broker
	int   qos;
	char *local_topic; // NULL: the topic as received
	char *prefix;
	char *suffix;
	int   retain; // 0 or 1 override, 2 keeps the flag as received
	bool  retain_as_published;
	int   retain_handling;
	bool  nolocal;
} conf_bridge_sub;

// MQTT 5 user properties: kv[2i] = key, kv[2i+1] = value, n pairs, in the
// order written (kv NULL when n is 0).
typedef struct conf_props {
	char **kv;
	int    n;
} conf_props;

// One bridges.mqtt.<name> object. Strings are NULL when not set.
typedef struct conf_bridge {
	char    *name;
	bool     enable;
	char    *server; // "mqtt-tcp://host:port" or "tls+mqtt-tcp://host:port"
	char   **hybrid_servers; // failover list, tried after server in order
	int      n_hybrid_servers;
	bool     hybrid_bridging;
	int      proto_ver; // 3, 4 or 5
	char    *clientid; // NULL: "<name>-<hostname>"
	uint32_t keepalive_s;
	bool     clean_start;
	char    *username;
	char    *password;
	uint32_t backoff_max_s;
	bool     transparent;
	bool     no_local_v4;
	bool     retry_qos_0;
	int      parallel;
	uint32_t max_send_queue_len;
	uint32_t remote_max_packet_size; // 0: none (a v5 remote's own still applies)
	uint32_t max_recv_queue_len;
	uint32_t resend_interval_ms;
	uint32_t resend_wait_ms;
	uint32_t cancel_timeout_ms;
	// conn_properties (v5)
	uint32_t   cp_maximum_packet_size; // 0 = not sent
	uint32_t   cp_receive_maximum; // 0 = not sent
	uint32_t   cp_topic_alias_maximum;
	int        cp_request_problem_information; // -1 = not sent
	int        cp_request_response_information; // -1 = not sent
	uint32_t   cp_session_expiry_interval;
	conf_props cp_user_props;
	// will
	char *will_topic;
	char *will_payload;
	int   will_qos;
	bool  will_retain;
	// will.properties (v5); sent when set
	int        will_payload_format; // -1 = not sent
	uint32_t   will_message_expiry; // 0 = not sent
	char      *will_content_type;
	char      *will_response_topic;
	char      *will_correlation_data;
	uint32_t   will_delay_interval; // 0 = not sent
	conf_props will_user_props;
	// ssl / tls
	bool  tls; // the server URL says tls+mqtt-tcp
	char *keyfile;
	char *certfile;
	char *cacertfile;
	char *key_password;
	bool  verify_peer;
	// tcp
	bool     tcp_nodelay;
	bool     tcp_keepalive;
	uint32_t tcp_keepidle;
	uint32_t tcp_keepintvl;
	uint32_t tcp_keepcnt;
	char    *bind_interface;
	// sub_properties
	uint32_t   sub_identifier; // 0 = none
	conf_props sub_user_props;

	conf_bridge_fwd *fwds;
	int              n_fwds;
	conf_bridge_sub *subs;
	int              n_subs;
} conf_bridge;

typedef struct nmq_conf {
	char *path; // file that was read, NULL if none

	// system
	bool  daemon;
	int   num_taskq_thread; // 0 = automatic
	int   max_taskq_thread;
	int   parallel; // 0 = automatic (2 x cores)
	bool  enable_ipc_internal;
	char *cmd_ipc_url;
	char *hook_ipc_url; // accepted, unused
	char *pid_file; // $NANOMQ_PID_FILE, default /tmp/nanomq/nanomq.pid

	// mqtt
	uint32_t max_packet_size; // bytes
	uint32_t client_max_packet_size; // bytes
	uint32_t max_mqueue_len;
	uint32_t max_inflight_window;
	uint32_t max_awaiting_rel;
	uint32_t await_rel_timeout_s;
	uint32_t retry_interval_s;
	double   keepalive_multiplier;
	uint32_t max_topic_alias;
	uint32_t max_keepalive; // seconds, 65535 = no cap
	uint32_t max_connections; // 0 = no limit
	uint32_t max_subscriptions; // per client, 0 = no limit
	uint32_t max_topic_length; // bytes
	uint32_t max_topic_levels; // 0 = no limit
	uint64_t max_message_memory; // bytes, 0 = no cap
	uint32_t property_size;
	bool     batch_resend;
	uint32_t drop_log_size; // events in the drop ring, 0 = none
	uint32_t sys_interval_s; // $SYS/broker statistics period, 0 = off

	// listeners (enabled ones only, in file order; at least one TCP
	// listener on 0.0.0.0:1883 when the file has no listeners section)
	conf_listener listeners[CONF_MAX_LISTENERS];
	int           n_listeners;

	// log
	int      log_to; // CONF_LOG_TO_* bits
	int      log_level; // enum nmq_log_level (nng/core/log.h)
	char    *log_dir;
	char    *log_file;
	uint64_t log_rotation_size;
	int      log_rotation_count;
	char    *log_uds_addr;

	// http_server (REST API). http_enable is true when the section is
	// present and its `enable` is not false, or with --http.
	bool     http_enable;
	int      http_port;
	char    *http_ip_addr;
	int      http_limit_conn;
	uint32_t http_max_body; // bytes
	uint32_t http_request_timeout_ms;
	char    *http_username; // NULL if not set
	char    *http_password; // NULL if not set
	int      http_auth_type; // enum conf_http_auth_type
	char    *http_jwt_public_keyfile; // NULL if not set
	// http_server.ssl (HTTPS; extension): http_ssl_enable is true when
	// the section is present and its `enable` is not false.
	bool  http_ssl_enable;
	char *http_ssl_certfile;
	char *http_ssl_keyfile;
	char *http_ssl_cacertfile;
	char *http_ssl_key_password;
	bool  http_ssl_verify_peer;
	bool  http_ssl_fail_if_no_peer_cert;

	// sqlite (persistence). sqlite_enable is true when the section is
	// present and its `enable` is not false.
	bool     sqlite_enable;
	char    *sqlite_path; // directory of the database; NULL = working dir
	uint32_t sqlite_disk_cache_size; // most queued messages stored
	uint32_t sqlite_flush_mem_threshold; // largest group commit
	uint32_t sqlite_resend_interval_ms; // accepted, no effect
	int      sqlite_durability; // enum conf_sqlite_durability
	uint32_t sqlite_max_pending; // write queue bound; 0 = sized from the caches

	// auth (the parts the core broker uses today)
	bool     allow_anonymous;
	int      auth_no_match; // enum conf_acl_permit
	int      auth_deny_action; // enum conf_deny_action
	bool     auth_cache_enable;
	int      auth_cache_max_size;
	uint32_t auth_cache_ttl_s;
	bool     auth_acl_enable; // auth.acl present and its `enable` not false
	// auth.password, validated: an object whose members are all strings,
	// {"user": "password-or-hash", ...} (numbers and booleans written
	// unquoted are turned into their source text). NULL if not set.
	struct cJSON *auth_password;
	// auth.acl, validated and normalised: {"enable": bool, "rules": [rule,
	// ...]} where each rule is an object with "permit" ("allow"|"deny"),
	// "action" ("publish"|"subscribe"|"pubsub", filled in when absent),
	// optional "username", "clientid" (strings), "ipaddrs" (array of
	// strings; a lone "ipaddr" is moved here), "and" / "or" (arrays of
	// objects holding only username/clientid/ipaddrs) and "topics" (array
	// of strings, kept literally: "${clientid}", "@a/#"). NULL if not set.
	struct cJSON *auth_acl;
	// auth.http_auth, checked and normalized: {"enable": bool,
	// "timeout_ms", "connect_timeout_ms", "pool_size", "cache_ttl_ms":
	// numbers, and per callout present ("auth_req", "super_req",
	// "acl_req") {"url", "method": "post"|"get", "headers": {name: value},
	// "params": {name: "%u..."}}}. NULL if the section is absent.
	struct cJSON *auth_http;

	// webhook (docs/webhooks.md). webhook_present: the section is in the
	// file. headers: {"name": "value", ...}; events: [{"event": "on_...",
	// "topic": "filter" (optional)}, ...], validated. NULL if not set.
	bool          webhook_present;
	bool          webhook_enable;
	char         *webhook_url;
	int           webhook_encoding; // 0 plain, 1 base64, 2 base62
	uint32_t      webhook_pool_size;
	uint32_t      webhook_timeout_ms;
	uint32_t      webhook_queue_size;
	char         *webhook_ssl_cacertfile; // NULL: the system bundle
	char         *webhook_ssl_certfile;
	char         *webhook_ssl_keyfile;
	char         *webhook_ssl_key_password;
	bool          webhook_ssl_verify_peer;
	struct cJSON *webhook_headers;
	struct cJSON *webhook_events;

	// preset.session: sessions created at startup, in file order, or NULL
	// when the section is absent. An array of
	// {"clientid": str, "topics": [{"filter": str, "qos": 0..2,
	//   "rap": bool, "rh": 0..2}]}, client ids distinct.
	struct cJSON *preset_sessions;

	// bridges.mqtt: the enabled and disabled bridges, in file order.
	conf_bridge *bridges;
	int          n_bridges;
	// bridges.mqtt.cache: the offline cache shared by the bridges.
	bool     bridge_cache_enable; // the section is present and enabled
	uint32_t bridge_cache_disk_size; // most messages kept, 0 = no bound
	char    *bridge_cache_path; // directory of the database
	uint32_t bridge_cache_flush; // flush_mem_threshold
	uint32_t bridge_cache_resend_ms;
} nmq_conf;

// Collected problems. Each message is one line "file:line: key: reason" (or
// "file:line:col: reason" for syntax errors), at most CONF_MAX_ERRORS.
// Messages past the limit are counted in n_dropped_*, so that a caller can
// print "... and N more". Keys and values quoted in messages are cut to a
// bounded length and control characters are replaced by '?'.
#define CONF_MAX_ERRORS 20
typedef struct conf_errors {
	int   n_errors;
	int   n_warnings;
	char *errors[CONF_MAX_ERRORS];
	char *warnings[CONF_MAX_ERRORS];
	int   n_dropped_errors; // errors found but not stored
	int   n_dropped_warnings; // warnings found but not stored
} conf_errors;

// Adds one formatted message (error when is_error, else warning). Never
// fails: when the list is full or memory runs out, the message is counted
// in n_dropped_* instead.
void conf_errors_add(conf_errors *errs, bool is_error, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

// Returns true when errs holds at least one error (stored or dropped).
bool conf_errors_failed(const conf_errors *errs);

// Command-line overrides, applied last. A field left at its zero value
// (NULL, -1 for ints as set by conf_cli_init) is not set. The fields that
// set one configuration key are bound to their option by the schema row of
// that key (conf_option_next); the others (files, --url, --log_file,
// --log_stdout, --log_syslog) are read by conf_load itself.
typedef struct conf_cli {
	const char *conf_path; // --conf
	const char *old_conf_path; // --old_conf
	const char *urls[8]; // --url, repeatable
	int         n_urls;
	int         daemon; // -d: 1, else -1
	int         num_taskq_thread;
	int         max_taskq_thread;
	int         parallel;
	int         property_size;
	int         msq_len;
	int         qos_duration;
	int         http_enable; // --http: 1
	int         http_port;
	const char *cacert, *cert, *key, *keypass;
	int         verify, fail;
	const char *log_level;
	const char *log_file;
	int         log_stdout; // -1 unset, 0/1
	int         log_syslog; // -1 unset, 0/1
	const char *cmd_ipc_url; // --cmd_ipc_url
} conf_cli;

// A command-line option that sets one configuration key, as its schema row
// spells it. The value goes into the conf_cli field at `field`: an int for
// CONF_OPT_FLAG (1 when given) and CONF_OPT_INT, a const char * for
// CONF_OPT_STR and CONF_OPT_WORD.
enum conf_opt_kind {
	CONF_OPT_FLAG = 0, // no value
	CONF_OPT_INT, // a decimal integer in [min, max]
	CONF_OPT_STR, // a non-empty string
	CONF_OPT_WORD, // one of `words` ('|' separated)
};

typedef struct conf_option {
	const char *name; // long name, without "--"
	char        letter; // short name, or 0
	int         kind; // enum conf_opt_kind
	const char *arg; // placeholder for --help ("<n>"), NULL for a flag
	const char *key; // the configuration key it sets
	const char *words; // CONF_OPT_WORD: the allowed words
	int         min, max; // CONF_OPT_INT: the key's range, clamped to int
	size_t      field; // offsetof the value in conf_cli
} conf_option;

// Fills *o with the next option after position *it (start with *it = 0)
// and advances *it. Returns false, leaving *o alone, after the last one.
// Any thread; the table is constant.
bool conf_option_next(size_t *it, conf_option *o);

// Sets every field of cli to "not set": NULL pointers, -1 integers, no
// URLs.
void conf_cli_init(conf_cli *cli);

// Fills *conf with defaults, then the file (cli->conf_path, else
// $NANOMQ_CONF_PATH, else <dir of the binary>/nanomq.conf, else
// /etc/nanomq.conf), then NANOMQ_* environment variables, then cli.
//
// Side-by-side instances: the "default file" is the one the lookup finds
// without --conf, --old_conf and $NANOMQ_CONF_PATH. A broker running
// with it (or with no file) keeps NanoMQ's pid file /tmp/nanomq/nanomq.pid
// and command channel ipc:///tmp/nanomq_cmd.ipc. A broker running with
// any other file F gets /tmp/nanomq/nanomq-<stem>-<hash>.pid and
// ipc:///tmp/nanomq_cmd-<stem>-<hash>.ipc instead, where <stem> is F's
// name without ".conf" and <hash> eight hex digits of F's real path, so
// that brokers with different files do not collide and `nanomq
// reload|stop|restart --conf F` reaches the one started with F.
// $NANOMQ_PID_FILE, and system.cmd_ipc_url given by the file, the
// environment or the command line, always win.
// Returns 0 if no errors were found (warnings allowed), -1 otherwise; in
// both cases *errs lists what was found. On -1, *conf is freed already.
// *errs is initialised by the call (its previous content is not freed).
// argv0 may be NULL (then the binary's directory is /proc/self/exe's).
int conf_load(nmq_conf *conf, const conf_cli *cli, const char *argv0, conf_errors *errs);
// Writes into buf the pid file of the broker that cli (--conf, --old_conf)
// and the environment designate, by the rule above, without reading the
// file (`nanomq stop` must work whatever the file now holds). Returns
// NMQ_OK, or NMQ_EINVAL when buf is too small for $NANOMQ_PID_FILE.
nmq_err conf_pid_file(const conf_cli *cli, const char *argv0, char *buf, size_t len);
// Frees everything *conf owns and zeroes it. NULL and a zeroed conf are fine.
void conf_free(nmq_conf *conf);
// Frees the messages and zeroes *errs.
void conf_errors_free(conf_errors *errs);

// Fills *conf with the built-in defaults only (used by tests).
void conf_defaults(nmq_conf *conf);

// Reads HOCON text from memory on top of the built-in defaults (no file
// lookup, no environment, no command line): what `POST /config_update` and
// the tests use. name appears in messages; relative includes are resolved
// against dir (the working directory when NULL). Returns 0 or -1 like
// conf_load(); on -1, *conf is freed already.
int conf_load_text(nmq_conf *conf, const char *text, size_t len, const char *name, const char *dir,
    conf_errors *errs);

// Bridges (conf_bridge.c). conf_bridge_equal: same settings, forwards and
// subscriptions. conf_bridge_find: the bridge of that name, or NULL.
// conf_bridge_url: splits "mqtt-tcp://host:port" or
// "tls+mqtt-tcp://host:port"; returns 0, or -1 with a reason in why.
bool conf_bridge_equal(const conf_bridge *a, const conf_bridge *b);
// A deep copy (NULL when out of memory), freed with conf_bridge_free.
conf_bridge *conf_bridge_dup(const conf_bridge *b);
void         conf_bridge_free(conf_bridge *b);
// Copies a subscription's strings into dst (0, or -1 when out of memory:
// dst then holds what was copied; clear it). Frees them and zeroes them.
int                conf_bridge_sub_copy(conf_bridge_sub *dst, const conf_bridge_sub *src);
void               conf_bridge_sub_clear(conf_bridge_sub *s);
const conf_bridge *conf_bridge_find(const nmq_conf *c, const char *name);
int                conf_bridge_url(
                   const char *url, bool *tls, char *host, size_t hostlen, int *port, char *why, size_t whylen);

// The configuration as a JSON object nested by key path (system, mqtt,
// listeners.<name>, http_server, log, auth, ...), every stored key of the
// schema with its value; secrets (passwords) are "******". Sections that
// their presence turns on (http_server, webhook, bridges) appear only when
// on, so the document can be written back as it is. Returns NULL
// on allocation failure; the caller deletes the tree.
struct cJSON *conf_to_json(const nmq_conf *c);
// One bridge's settings as bridges.mqtt.<name> shows them in conf_to_json
// (secrets as "******"); NULL when out of memory. The caller deletes it.
struct cJSON *conf_bridge_to_json(const conf_bridge *b);

// Reload support. conf_diff() compares the running configuration a with a
// newly loaded b and lists every key whose value differs, in schema order,
// with whether applying it needs a restart (docs/compatibility.md §1). A bridge
// added, removed or changed is "bridges.mqtt.<name>" (applied). Listeners are
// reported as "listeners.<name>" (added, removed or bind changed: restart)
// and "listeners.<name>.<file key>" (TLS files: applied to new connections).
// auth.password and auth.acl are reported as a whole.
typedef struct conf_change {
	char *key; // owned by the conf_changes
	bool  restart; // true: takes effect only after a restart
} conf_change;

typedef struct conf_changes {
	int          n;
	conf_change *v;
} conf_changes;

// Fills *out (which it initialises) with the differences between a and b.
// Returns NMQ_OK, or NMQ_ENOMEM when memory runs out (then *out is empty).
nmq_err conf_diff(const nmq_conf *a, const nmq_conf *b, conf_changes *out);
void    conf_changes_free(conf_changes *changes);

// Writes the configuration reference (Markdown, the content of
// docs/config.md) generated from the schema. Returns NMQ_OK, or NMQ_EIO on
// a write error.
nmq_err conf_schema_markdown(FILE *out);

// Returns "tcp", "ssl", "ws" or "wss" for an enum conf_listener_kind, or
// "?" for anything else.
const char *conf_listener_kind_name(int kind);

// Checks a TLS listener's `groups` and `ciphers` lists (either may be
// NULL); returns 0, or non-zero with a reason in why. The configuration
// code knows no TLS library, so the program installs the check (the TLS
// engine's) before conf_load; without one the lists are not checked
// until the listener starts. Not thread-safe: set once at startup.
typedef int (*conf_tls_params_check_fn)(
    const char *groups, const char *ciphers, char *why, size_t whylen);
void conf_set_tls_params_check(conf_tls_params_check_fn fn);

#endif // NMQ_CONF_H
