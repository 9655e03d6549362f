// Command-line options of nanomq_cli: `pub`, `sub`, `conn` and, when built
// with BUILD_BENCH, `bench pub|sub|conn|pubsub`. Flags follow NanoMQ's
// nanomq_cli (see docs and `--help`); extensions are long options only.
//
// Threading: parse once in main before any thread starts; read-only after.
#ifndef NMQ_CLIENT_CLI_OPTS_H
#define NMQ_CLIENT_CLI_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "nng/codec/mqtt_codec.h"
#include "tools/nanomq_cli/cli_conn.h"

enum cli_verb { CLI_PUB = 1, CLI_SUB, CLI_CONN, CLI_PUBSUB };

#define CLI_MAX_TOPICS     64
#define CLI_MAX_USER_PROPS 32

typedef struct cli_opts {
	int  verb; // enum cli_verb (CLI_PUBSUB only with bench)
	bool bench; // `bench <verb>`
	// Connection.
	const char    *host;
	uint16_t       port;
	uint8_t        version;
	const char    *username;
	const char    *password;
	const char    *client_id;
	uint16_t       keepalive;
	bool           clean_start;
	const char    *ifaddr;
	const char    *will_topic;
	const char    *will_msg;
	uint8_t        will_qos;
	bool           will_retain;
	bool           has_session_expiry;
	uint32_t       session_expiry;
	uint16_t       receive_maximum;
	uint16_t       topic_alias_maximum;
	uint32_t       max_packet_size;
	int            request_problem; // -1 = not sent
	int            request_response; // -1 = not sent
	mqtt_user_prop user_props[CLI_MAX_USER_PROPS];
	uint32_t       n_user_props;
	// TLS (-s/--secure; bench -S/--ssl).
	bool        secure;
	bool        port_given; // -p given (else 8883 with TLS)
	const char *cafile;
	const char *certfile; // -E/--cert, bench --certfile
	const char *keyfile; // --key, bench --keyfile
	const char *keypass;
	bool        insecure; // --insecure: do not verify the server
	bool        resume; // --resume: resume the TLS session on reconnects
	bool        ws; // --ws: MQTT over WebSocket (with TLS: wss)
	const char *ws_path; // --ws-path [/mqtt]
	// Load shape.
	uint32_t clients; // pub/sub/conn -C; bench -c
	uint32_t threads; // -n/--parallel (pub/sub/conn), --parallel (bench)
	int      qos; // resolved: pub 0, sub 2 unless given
	bool     verbose;
	// Topics and messages.
	const char *topics[CLI_MAX_TOPICS];
	size_t      ntopics;
	const char *message; // -m, or the contents of -f
	size_t      message_len;
	char       *message_buf; // owned copy of -f
	bool        stdin_lines; // -l
	uint64_t    limit; // pub -L (1), bench -L (0 = unlimited), sub -L (0)
	uint32_t    interval_ms; // pub -I (10), bench -I (1000)
	bool        retain;
	double      duration_s; // --duration, 0 = none
	uint32_t    connect_timeout_ms; // --connect-timeout
	// Bench.
	uint32_t    start_number; // -n
	uint32_t    conn_interval_ms; // -i
	uint32_t    size; // -s
	const char *sub_topic; // --sub-topic (pubsub)
	int         sub_qos; // --sub-qos (pubsub)
	uint32_t    pubs; // --pubs (pubsub)
	uint32_t    subs; // --subs (pubsub)
	uint16_t    inflight; // --inflight
	bool        json; // --json
	int         broker_pid; // --broker-pid
	const char *prefix; // --prefix
	uint32_t    expect_pubs; // --expect-pubs (bench sub)
	uint64_t    expect_msgs; // --expect-msgs (bench sub)
	uint32_t    drain_ms; // --drain
	uint32_t    max_connecting; // --max-connecting
	uint32_t    progress_ms; // --progress (0 = none)
	bool        selftest; // --selftest
	// Fault injection to prove the accounting (hidden, publishers only):
	// every Nth message is skipped, sent twice, or swapped with the next.
	uint32_t fault_skip;
	uint32_t fault_dup;
	uint32_t fault_swap;
} cli_opts;

// Parses argv (argv[0] is the verb, e.g. "pub"; for bench argv[0] is the
// bench mode). Returns 0 on success, 1 if help was printed, or -1 with a
// message in err.
int cli_opts_parse(cli_opts *o, bool bench, int argc, char **argv, char *err, size_t errlen);

// Frees what cli_opts_parse allocated; it cannot fail.
void cli_opts_fini(cli_opts *o);

// Prints the usage of `nanomq_cli [bench] <verb>` (verb 0: the overview).
void cli_opts_usage(FILE *out, bool bench, int verb);

// Resolves the broker address and fills a connection config (loading the
// TLS files with -s/-S). Returns 0, or -1 with a message in err.
int cli_opts_conn_cfg(const cli_opts *o, cli_conn_cfg *cfg, char *err, size_t errlen);

// Frees what cli_opts_conn_cfg allocated (the TLS configuration) once no
// connection uses cfg; it cannot fail.
void cli_opts_conn_cfg_fini(cli_conn_cfg *cfg);

// Expands %i (index), %c (client id) and %u (user name) in tmpl into out.
// Returns 0, or -1 if the result does not fit in outlen bytes.
int cli_opts_expand(const char *tmpl, uint32_t index, const char *client_id, const char *user,
    char *out, size_t outlen);

#endif // NMQ_CLIENT_CLI_OPTS_H
