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
// - An nmq_conf owns all its strings; conf_free() releases them.
#ifndef NMQ_CONF_H
#define NMQ_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CONF_MAX_LISTENERS 16

enum conf_listener_kind {
	CONF_LISTENER_TCP = 0,
	CONF_LISTENER_SSL,
	CONF_LISTENER_WS,
	CONF_LISTENER_WSS,
};

typedef struct conf_listener {
	int   kind;     // enum conf_listener_kind
	char *name;     // "tcp", "tcp.default_1", "ssl", ...
	char *bind;     // "host:port" (or "host:port/path" for ws/wss), scheme stripped
	char *host;     // "0.0.0.0", "::", "127.0.0.1"
	int   port;
	char *path;     // ws/wss only, e.g. "/mqtt"
	// ssl / wss
	char *keyfile;
	char *certfile;
	char *cacertfile;
	char *key_password;
	bool  verify_peer;
	bool  fail_if_no_peer_cert;
} conf_listener;

enum conf_log_level {
	LOG_LEVEL_TRACE = 0,
	LOG_LEVEL_DEBUG,
	LOG_LEVEL_INFO,
	LOG_LEVEL_WARN,
	LOG_LEVEL_ERROR,
	LOG_LEVEL_FATAL,
};

#define CONF_LOG_TO_CONSOLE 0x1
#define CONF_LOG_TO_FILE 0x2
#define CONF_LOG_TO_SYSLOG 0x4
#define CONF_LOG_TO_UDS 0x8

typedef struct nmq_conf {
	char *path; // file that was read, NULL if none

	// system
	bool  daemon;
	int   num_taskq_thread; // 0 = automatic
	int   max_taskq_thread;
	int   parallel;         // 0 = automatic (2 x cores)
	bool  enable_ipc_internal;
	char *cmd_ipc_url;

	// mqtt
	uint32_t max_packet_size;        // bytes
	uint32_t client_max_packet_size; // bytes
	uint32_t max_mqueue_len;
	uint32_t max_inflight_window;
	uint32_t max_awaiting_rel;
	uint32_t await_rel_timeout_s;
	uint32_t retry_interval_s;
	double   keepalive_multiplier;
	uint32_t max_topic_alias;
	uint32_t property_size;
	bool     batch_resend;

	// listeners (enabled ones only, in file order; at least one TCP
	// listener on 0.0.0.0:1883 when the file has no listeners section)
	conf_listener listeners[CONF_MAX_LISTENERS];
	int           n_listeners;

	// log
	int      log_to;    // CONF_LOG_TO_* bits
	int      log_level; // enum conf_log_level
	char    *log_dir;
	char    *log_file;
	uint64_t log_rotation_size;
	int      log_rotation_count;
	char    *log_uds_addr;

	// auth (the parts the core broker uses today)
	bool allow_anonymous;
} nmq_conf;

// Collected problems. Each message is one line "file:line: key: reason" (or
// "file:line:col: reason" for syntax errors), at most CONF_MAX_ERRORS.
#define CONF_MAX_ERRORS 20
typedef struct conf_errors {
	int   n_errors;
	int   n_warnings;
	char *errors[CONF_MAX_ERRORS];
	char *warnings[CONF_MAX_ERRORS];
} conf_errors;

// Command-line overrides, applied last. A field left at its zero value
// (NULL, -1 for ints as set by conf_cli_init) is not set.
typedef struct conf_cli {
	const char *conf_path;     // --conf
	const char *old_conf_path; // --old_conf
	const char *urls[8];       // --url, repeatable
	int         n_urls;
	int         daemon;        // -d: 1, else -1
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
	int         log_stdout;  // -1 unset, 0/1
	int         log_syslog;  // -1 unset, 0/1
} conf_cli;

void conf_cli_init(conf_cli *cli);

// Fills *conf with defaults, then the file (cli->conf_path, else
// $NANOMQ_CONF_PATH, else <dir of the binary>/nanomq.conf, else
// /etc/nanomq.conf), then NANOMQ_* environment variables, then cli.
// Returns 0 if no errors were found (warnings allowed), -1 otherwise; in
// both cases *errs lists what was found. On -1, *conf is freed already.
int  conf_load(nmq_conf *conf, const conf_cli *cli, const char *argv0, conf_errors *errs);
void conf_free(nmq_conf *conf);
void conf_errors_free(conf_errors *errs);

// Fills *conf with the built-in defaults only (used by tests).
void conf_defaults(nmq_conf *conf);

#endif // NMQ_CONF_H
