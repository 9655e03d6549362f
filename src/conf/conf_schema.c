// The configuration schema: one table of every key nanomq.conf may hold
// (docs/compatibility.md §2), with its type, default, range, reloadability,
// alias, help text, the nmq_conf field it fills and whether it is
// supported. Parsing, validation, defaults, reload and docs/config.md are
// all driven by this table.
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "src/conf/ascii.h"
#include "src/conf/conf_int.h"

#define CF(f) .base = CONF_BASE_CONF, .off = offsetof(nmq_conf, f)
#define LF(f) .base = CONF_BASE_LISTENER, .off = offsetof(conf_listener, f)
#define BF(f) .base = CONF_BASE_BRIDGE, .off = offsetof(conf_bridge, f)
#define FF(f) .base = CONF_BASE_BRIDGE_FWD, .off = offsetof(conf_bridge_fwd, f)
#define SF(f) .base = CONF_BASE_BRIDGE_SUB, .off = offsetof(conf_bridge_sub, f)
#define BR    "bridges.mqtt.<name>."

// A command-line option that sets the key (field: the conf_cli member).
#define OPT(letter, name, field)                                                                   \
	.opt = name, .opt_letter = letter, .opt_field = offsetof(conf_cli, field)

#define MB256  268435456.0
#define U32MAX 4294967295.0

// clang-format off
#define MAXCONN_KEY(kind) \
	{ .path = "listeners." kind ".max_connections", .type = CONF_T_INT, \
	    .store = CONF_ST_U32, LF(max_connections), .def = "0", .min = 0, .max = 10000000, \
	    .help = "Most connections open on this listener at once (0 = no limit; extension). " \
	        "A CONNECT beyond it gets CONNACK 0x97 (3.1.1: 0x03) and is counted." }

#define HSTIMEOUT_KEY(kind) \
	{ .path = "listeners." kind ".handshake_timeout", .type = CONF_T_DUR_MS, \
	    .store = CONF_ST_U32, LF(handshake_timeout_ms), .def = "10s", .min = 100, \
	    .max = 600000, \
	    .help = "Longest time a TLS handshake may take (extension); a client that has not " \
	        "finished it by then is disconnected. Handshakes run on their own thread, so a " \
	        "slow one holds nothing but its socket meanwhile." }

// The TLS keys of an ssl or wss listener. O names a family of macros
// O##_<key> giving the other spellings of each key (empty for wss).
#define TLS_KEYS(kind, inherit, O) \
	{ .path = "listeners." kind ".keyfile", O##_keyfile .type = CONF_T_STR, .store = CONF_ST_STR, \
	    LF(keyfile), .reload = true, .flags = CONF_F_TLSFILE | CONF_F_READABLE, \
	    .def_doc = inherit, \
	    .help = "PEM private key file. Required; must be readable at startup." }, \
	{ .path = "listeners." kind ".certfile", O##_certfile .type = CONF_T_STR, .store = CONF_ST_STR, \
	    LF(certfile), .reload = true, .flags = CONF_F_TLSFILE | CONF_F_READABLE, \
	    .def_doc = inherit, \
	    .help = "PEM certificate chain file. Required; must be readable at startup." }, \
	{ .path = "listeners." kind ".cacertfile", O##_cacertfile .type = CONF_T_STR, .store = CONF_ST_STR, \
	    LF(cacertfile), .reload = true, .flags = CONF_F_TLSFILE | CONF_F_READABLE, \
	    .def_doc = inherit, .help = "PEM CA certificates used to verify client certificates." }, \
	{ .path = "listeners." kind ".key_password", O##_key_password .type = CONF_T_STR, .store = CONF_ST_STR, \
	    LF(key_password), .reload = true, .flags = CONF_F_TLSFILE | CONF_F_SECRET, \
	    .def_doc = inherit, .help = "Passphrase of an encrypted private key." }, \
	{ .path = "listeners." kind ".verify_peer", O##_verify_peer .type = CONF_T_BOOL, .store = CONF_ST_BOOL, \
	    LF(verify_peer), .flags = CONF_F_TLSFILE, .def = "false", .def_doc = inherit, \
	    .help = "Ask each client for a certificate and verify it against cacertfile." }, \
	{ .path = "listeners." kind ".fail_if_no_peer_cert", O##_fail_if_no_peer_cert .type = CONF_T_BOOL, \
	    .store = CONF_ST_BOOL, LF(fail_if_no_peer_cert), .flags = CONF_F_TLSFILE, \
	    .def = "false", .def_doc = inherit, \
	    .help = "With verify_peer: refuse a client that sends no certificate." }, \
	{ .path = "listeners." kind ".groups", .type = CONF_T_STR, .store = CONF_ST_STR, \
	    LF(groups), .reload = true, .flags = CONF_F_TLSFILE, \
	    .def_doc = (inherit) != NULL ? (inherit) : "`x25519:secp256r1:secp384r1`", \
	    .help = "Key exchange groups (ECDHE curves), most preferred first, separated by `:` " \
	        "(extension): x25519, secp256r1 (P-256), secp384r1 (P-384), secp521r1 (P-521), " \
	        "brainpoolP256r1/P384r1/P512r1. The first one the client also offers is used." }, \
	{ .path = "listeners." kind ".ciphers", .type = CONF_T_STR, .store = CONF_ST_STR, \
	    LF(ciphers), .reload = true, .flags = CONF_F_TLSFILE, \
	    .def_doc = (inherit) != NULL ? (inherit) \
	                                 : "AES-GCM first on a CPU with AES instructions, else " \
	                                   "ChaCha20-Poly1305 first", \
	    .help = "TLS 1.2 cipher suites, most preferred first, IANA names separated by `:` " \
	        "(extension), e.g. `TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256:" \
	        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`. The default puts the ECDHE AES-GCM " \
	        "suites first where the CPU has AES instructions (detected at startup) and " \
	        "ChaCha20-Poly1305 first where it has not, followed by the rest of mbed TLS's " \
	        "list." }

#define SSL_keyfile \
	.env = "NANOMQ_TLS_KEY_PATH", .flat = "tls.keyfile", OPT(0, "key", key),
#define SSL_certfile \
	.env = "NANOMQ_TLS_CERT_PATH", .flat = "tls.certfile", OPT('E', "cert", cert),
#define SSL_cacertfile \
	.env = "NANOMQ_TLS_CA_CERT_PATH", .flat = "tls.cacertfile", OPT(0, "cacert", cacert),
#define SSL_key_password \
	.env = "NANOMQ_TLS_KEY_PASSWORD", .flat = "tls.key_password", \
	OPT(0, "keypass", keypass), .opt_arg = "<pass>",
#define SSL_verify_peer \
	.env = "NANOMQ_TLS_VERIFY_PEER", .flat = "tls.verify_peer", OPT(0, "verify", verify),
#define SSL_fail_if_no_peer_cert \
	.env = "NANOMQ_TLS_FAIL_IF_NO_PEER_CERT", .flat = "tls.fail_if_no_peer_cert", \
	OPT(0, "fail", fail),
#define WSS_keyfile
#define WSS_certfile
#define WSS_cacertfile
#define WSS_key_password
#define WSS_verify_peer
#define WSS_fail_if_no_peer_cert

const conf_key conf_schema[] = {
	// ------------------------------------------------------------- system
	{ .path = "system", .type = CONF_T_SECTION,
	    .help = "The process: daemon mode, threads, work contexts and the command channel. "
	        "Every change needs a restart." },
	{ .path = "system.daemon",
	    .env = "NANOMQ_DAEMON", .flat = "daemon", OPT('d', "daemon", daemon),
	    .type = CONF_T_BOOL, .store = CONF_ST_BOOL, CF(daemon),
	    .def = "false",
	    .help = "After validation, fork to the background and detach (also -d); the daemon "
	        "keeps the working directory, so relative paths in the file mean what they mean "
	        "in the foreground. Without it the broker stays in the foreground, which is the "
	        "systemd mode." },
	{ .path = "system.num_taskq_thread",
	    .env = "NANOMQ_NUM_TASKQ_THREAD", .flat = "num_taskq_thread",
	    OPT('t', "tq_thread", num_taskq_thread),
	    .type = CONF_T_INT, .store = CONF_ST_INT,
	    CF(num_taskq_thread), .def = "0", .def_doc = "0 (= one per usable CPU core)", .min = 0, .max = 256,
	    .help = "Worker event loops when `parallel` is 0 (each worker is one work context)." },
	{ .path = "system.max_taskq_thread",
	    .env = "NANOMQ_MAX_TASKQ_THREAD", .flat = "max_taskq_thread",
	    OPT('T', "max_tq_thread", max_taskq_thread),
	    .type = CONF_T_INT, .store = CONF_ST_INT,
	    CF(max_taskq_thread), .def = "0", .def_doc = "0 (= num_taskq_thread)", .min = 0, .max = 256,
	    .help = "Upper bound on the worker threads." },
	{ .path = "system.parallel",
	    .env = "NANOMQ_PARALLEL", .flat = "parallel", OPT('n', "parallel", parallel),
	    .type = CONF_T_INT, .store = CONF_ST_INT, CF(parallel),
	    .def = CONF_XSTR(NMQ_PARALLEL_DEFAULT), .def_doc = "CMake `PARALLEL` (0 = one per usable CPU core)",
	    .min = 0, .max = 65535,
	    .help = "Number of work contexts: worker event loops that serve connections and route messages (correct behaviour: one per core by default, not two)." },
	{ .path = "system.enable_ipc_internal",
	    .flat = "enable_ipc_internal",
	    .type = CONF_T_BOOL, .store = CONF_ST_BOOL,
	    CF(enable_ipc_internal), .def = "true",
	    .help = "Serve the command channel that `nanomq reload` uses." },
	{ .path = "system.cmd_ipc_url",
	    .env = "NANOMQ_CMD_IPC_URL", OPT(0, "cmd_ipc_url", cmd_ipc_url), .opt_arg = "<url>",
	    .type = CONF_T_STR, .store = CONF_ST_STR, CF(cmd_ipc_url),
	    .def = "ipc:///tmp/nanomq_cmd.ipc",
	    .def_doc = "`ipc:///tmp/nanomq_cmd.ipc` with the default file; else derived from the file",
	    .help = "Address of the command channel. Left unset, it follows the configuration "
	        "file: NanoMQ's default (and the pid file `/tmp/nanomq/nanomq.pid`) for the "
	        "file found without `--conf` or `$NANOMQ_CONF_PATH`, or no file; for any other "
	        "file F, `ipc:///tmp/nanomq_cmd-<stem>-<hash>.ipc` and "
	        "`/tmp/nanomq/nanomq-<stem>-<hash>.pid` (F's name without `.conf`, and a hash "
	        "of its real path), so that brokers with different files run side by side and "
	        "`nanomq reload|stop|restart --conf F` reaches the one started with F. "
	        "`$NANOMQ_PID_FILE` and an explicit value always win." },
	{ .path = "system.hook_ipc_url", .type = CONF_T_STR, .store = CONF_ST_STR, CF(hook_ipc_url),
	    .status = CONF_S_NOEFFECT, .def = "ipc:///tmp/nanomq_hook.ipc",
	    .help = "Internal channel for webhooks (accepted for compatibility)." },

	// --------------------------------------------------------------- mqtt
	{ .path = "mqtt", .type = CONF_T_SECTION, .reload = true,
	    .help = "MQTT protocol limits and timers. A reload applies every change." },
	{ .path = "mqtt.max_packet_size",
	    .env = "NANOMQ_MAX_PACKET_SIZE", .flat = "max_packet_size", .flat_how = CONF_FLAT_KB,
	    .flat_note = "a bare number is KB",
	    .type = CONF_T_SIZE, .store = CONF_ST_U32,
	    CF(max_packet_size), .reload = true, .def = "10MB", .min = 1, .max = MB256,
	    .help = "Largest packet accepted on any listener, checked before the body is read; "
	        "advertised as Maximum Packet Size to v5 clients." },
	{ .path = "mqtt.client_max_packet_size",
	    .env = "NANOMQ_CLIENT_MAX_PACKET_SIZE", .flat = "client_max_packet_size",
	    .flat_how = CONF_FLAT_KB, .flat_note = "a bare number is KB",
	    .type = CONF_T_SIZE, .store = CONF_ST_U32,
	    CF(client_max_packet_size), .reload = true, .def = "10MB", .def_doc = "= max_packet_size",
	    .min = 1, .max = MB256,
	    .help = "Largest packet sent to a client that announced no Maximum Packet Size; "
	        "bigger messages are not sent to it and counted as dropped." },
	{ .path = "mqtt.max_mqueue_len",
	    .env = "NANOMQ_MSQ_LEN", .flat = "msq_len", OPT('S', "msq_len", msq_len),
	    .type = CONF_T_INT, .store = CONF_ST_U32,
	    CF(max_mqueue_len), .reload = true, .def = CONF_XSTR(NMQ_MSQ_LEN_DEFAULT),
	    .def_doc = "CMake `MSQ_LEN` (2048)", .min = 1, .max = U32MAX, .alias = "mqtt.msq_len",
	    .help = "Messages waiting per client behind the inflight window; when full, new "
	        "messages for that client are dropped and counted. With a bound of 128 or more, "
	        "a publisher whose QoS 1/2 messages fill a connected client's queue past 3/4 is "
	        "paused instead (at most 1 s at a time) until the queue is under half that." },
	{ .path = "mqtt.max_inflight_window", .type = CONF_T_INT, .store = CONF_ST_U32,
	    CF(max_inflight_window), .reload = true, .def = "2048", .min = 1, .max = 65535,
	    .help = "Outbound QoS 1/2 messages in flight per client (also bounded by the "
	        "client's Receive Maximum)." },
	{ .path = "mqtt.max_awaiting_rel", .type = CONF_T_INT, .store = CONF_ST_U32,
	    CF(max_awaiting_rel), .reload = true, .flags = CONF_F_DUR_DEFAULT, .def = "100", .min = 1,
	    .max = 65535,
	    .help = "Inbound QoS 1/2 messages per client not yet completed; advertised as "
	        "Receive Maximum. A duration here is accepted with a warning and means the "
	        "default." },
	{ .path = "mqtt.await_rel_timeout", .type = CONF_T_DUR_S, .store = CONF_ST_U32,
	    CF(await_rel_timeout_s), .reload = true, .def = "300s", .min = 1, .max = U32MAX,
	    .help = "Inbound QoS 2 state left without a PUBREL this long is discarded." },
	{ .path = "mqtt.retry_interval",
	    .env = "NANOMQ_QOS_DURATION", .flat = "qos_duration", .flat_note = "seconds",
	    OPT('D', "qos_duration", qos_duration),
	    .type = CONF_T_DUR_S, .store = CONF_ST_U32,
	    CF(retry_interval_s), .reload = true, .def = "10s", .min = 1, .max = 86400,
	    .alias = "mqtt.qos_duration",
	    .help = "Resend interval of unacknowledged QoS 1/2 messages to v3.1.1 clients." },
	{ .path = "mqtt.keepalive_multiplier",
	    .flat = "keepalive_backoff", .flat_how = CONF_FLAT_MILLI,
	    .flat_note = "integer in thousandths (1250 = 1.25)",
	    .type = CONF_T_FLOAT, .store = CONF_ST_DOUBLE,
	    CF(keepalive_multiplier), .reload = true, .flags = CONF_F_MIN_EXCL | CONF_F_MILLI_ALIAS,
	    .def = "1.5", .min = 0.5, .max = 10, .warn_below = 1.0, .alias = "mqtt.keepalive_backoff",
	    .help = "A client is disconnected after keepalive x multiplier without traffic. "
	        "Values below 1.0 get a warning; through the alias, 100 or more is read in "
	        "thousandths (1250 = 1.25)." },
	{ .path = "mqtt.max_topic_alias", .type = CONF_T_INT, .store = CONF_ST_U32,
	    CF(max_topic_alias), .reload = true, .def = "64", .min = 0, .max = 65535,
	    .help = "Topic Alias Maximum advertised to v5 clients." },
	{ .path = "mqtt.max_keepalive", .type = CONF_T_INT, .store = CONF_ST_U32,
	    CF(max_keepalive), .reload = true, .def = "65535", .min = 1, .max = 65535,
	    .help = "Longest keep alive in seconds (extension). An MQTT 5 client asking for more, or "
	        "for none (0), is told this value as Server Keep Alive in CONNACK and held to it; "
	        "3.1.1 clients keep their own value." },
	{ .path = "mqtt.max_connections", .type = CONF_T_INT, .store = CONF_ST_U32,
	    CF(max_connections), .reload = true, .def = "0", .min = 0, .max = 10000000,
	    .help = "Most clients connected at once (0 = no limit; extension). A CONNECT beyond it "
	        "gets CONNACK 0x97 Quota exceeded (3.1.1: 0x03 Server unavailable) and is counted." },
	{ .path = "mqtt.max_subscriptions", .type = CONF_T_INT, .store = CONF_ST_U32,
	    CF(max_subscriptions), .reload = true, .def = "0", .min = 0, .max = 10000000,
	    .help = "Most subscriptions one client may hold (0 = no limit; extension). A filter "
	        "beyond it gets SUBACK 0x97 Quota exceeded (3.1.1: 0x80) and is counted." },
	{ .path = "mqtt.max_topic_length", .type = CONF_T_INT, .store = CONF_ST_U32,
	    CF(max_topic_length), .reload = true, .def = "65535", .min = 1, .max = 65535,
	    .help = "Longest topic name or filter in bytes (extension). A longer PUBLISH topic gets "
	        "DISCONNECT 0x90 Topic Name invalid (3.1.1: the connection is closed); a longer filter "
	        "gets SUBACK 0x8F (3.1.1: 0x80). Both are counted." },
	{ .path = "mqtt.max_topic_levels", .type = CONF_T_INT, .store = CONF_ST_U32,
	    CF(max_topic_levels), .reload = true, .def = "0", .min = 0, .max = 65535,
	    .help = "Most levels in a topic name or filter (0 = no limit; extension); treated like "
	        "`max_topic_length`." },
	{ .path = "mqtt.max_message_memory", .type = CONF_T_SIZE, .store = CONF_ST_U64,
	    CF(max_message_memory), .reload = true, .def = "0", .min = 0, .max = 1099511627776.0,
	    .help = "Cap on the memory that messages hold (0 = no cap; extension): queued, in "
	        "flight, retained and delayed wills, each message counted once however many "
	        "clients share it, plus the buffers that carry them (send buffers, queue rings). "
	        "Over the cap, queued messages are copied into send buffers 16 KB at a time, a QoS 0 message is not queued, a QoS 1/2 message "
	        "is not queued for an offline session and a retained message is not stored (each "
	        "counted and logged), and a publisher whose message finds the broker over the cap "
	        "is paused (at most 1 s at a time) until usage is under 7/8 of it." },
	{ .path = "mqtt.property_size",
	    .env = "NANOMQ_PROPERTY_SIZE", .flat = "property_size",
	    OPT('s', "property_size", property_size),
	    .type = CONF_T_INT, .store = CONF_ST_U32, CF(property_size),
	    .reload = true, .status = CONF_S_NOEFFECT, .def = "32", .min = 0, .max = MB256,
	    .help = "Accepted for compatibility; properties are bounded by max_packet_size." },
	{ .path = "mqtt.batch_resend", .type = CONF_T_BOOL, .store = CONF_ST_BOOL, CF(batch_resend),
	    .reload = true, .status = CONF_S_NOEFFECT, .def = "false",
	    .help = "Accepted for compatibility; queued messages already go out as acks arrive." },
	{ .path = "mqtt.sys_interval", .type = CONF_T_DUR_S, .store = CONF_ST_U32,
	    CF(sys_interval_s), .reload = true, .def = "10s", .min = 0, .max = 86400,
	    .help = "Period of the broker statistics published, retained, under `$SYS/broker/` "
	        "(extension, the topics Mosquitto publishes: uptime, clients, messages, load, "
	        "bytes, subscriptions, retained messages, heap); 0 = off." },
	{ .path = "mqtt.drop_log_size", .type = CONF_T_INT, .store = CONF_ST_U32, CF(drop_log_size),
	    .def = "1024", .min = 0, .max = 1000000,
	    .help = "Events kept in the ring of recent drops and refusals (extension): time, "
	        "reason, client id, topic and QoS of the last N messages dropped or requests "
	        "refused, served by the REST API as `/api/v4/drops` (0 = counters only). "
	        "About 220 bytes per event, used only as events arrive." },

	// ---------------------------------------------------------- listeners
	{ .path = "listeners", .type = CONF_T_SECTION,
	    .help = "Where clients connect. Without this section the broker listens on TCP "
	        "0.0.0.0:1883. Each kind may also hold named listeners, e.g. "
	        "`listeners.tcp.default_1 { bind = \"0.0.0.0:1884\" }`, which take the same "
	        "keys; named ssl and wss listeners inherit the TLS keys of `listeners.ssl`. A "
	        "bind is `host:port` (IPv6: `[::]:1883`); schemes such as `nmq-tcp://` or "
	        "`tcp://` are tolerated. Adding or removing a listener or changing a bind "
	        "needs a restart; a reload applies new TLS files to new connections." },
	{ .path = "listeners.tcp", .type = CONF_T_SECTION, .help = "Plain MQTT over TCP." },
	{ .path = "listeners.tcp.enable",
	    .env = "NANOMQ_TCP_ENABLE",
	    .type = CONF_T_BOOL, .flags = CONF_F_ENABLE,
	    .def = "true", .help = "`false` disables this listener." },
	{ .path = "listeners.tcp.bind",
	    .env = "NANOMQ_BROKER_URL", .flat = "url", .flat_note = "`nmq-tcp://` scheme stripped",
	    .type = CONF_T_STR, .store = CONF_ST_STR, LF(bind),
	    .flags = CONF_F_BIND, .def = "0.0.0.0:1883", .help = "Address and port." },
	MAXCONN_KEY("tcp"),
	{ .path = "listeners.ssl", .type = CONF_T_SECTION, .help = "MQTT over TLS." },
	{ .path = "listeners.ssl.enable",
	    .env = "NANOMQ_TLS_ENABLE", .flat = "tls.enable",
	    .type = CONF_T_BOOL, .flags = CONF_F_ENABLE,
	    .def = "true", .help = "`false` disables this listener." },
	{ .path = "listeners.ssl.bind",
	    .env = "NANOMQ_TLS_URL", .flat = "tls.url",
	    .type = CONF_T_STR, .store = CONF_ST_STR, LF(bind),
	    .flags = CONF_F_BIND, .def = "0.0.0.0:8883", .help = "Address and port." },
	TLS_KEYS("ssl", NULL, SSL),
	HSTIMEOUT_KEY("ssl"),
	MAXCONN_KEY("ssl"),
	{ .path = "listeners.ws", .type = CONF_T_SECTION, .help = "MQTT over WebSocket." },
	{ .path = "listeners.ws.enable",
	    .env = "NANOMQ_WEBSOCKET_ENABLE", .flat = "websocket.enable",
	    .type = CONF_T_BOOL, .flags = CONF_F_ENABLE, .def = "true",
	    .help = "`false` disables this listener." },
	{ .path = "listeners.ws.bind",
	    .env = "NANOMQ_WEBSOCKET_URL", .flat = "websocket.url",
	    .type = CONF_T_STR, .store = CONF_ST_STR, LF(bind),
	    .flags = CONF_F_BIND, .def = "0.0.0.0:8083/mqtt",
	    .help = "Address, port and the required URL path." },
	MAXCONN_KEY("ws"),
	{ .path = "listeners.wss", .type = CONF_T_SECTION, .help = "MQTT over secure WebSocket." },
	{ .path = "listeners.wss.enable",
	    .env = "NANOMQ_WEBSOCKET_TLS_ENABLE",
	    .type = CONF_T_BOOL, .flags = CONF_F_ENABLE,
	    .def = "true", .help = "`false` disables this listener." },
	{ .path = "listeners.wss.bind",
	    .env = "NANOMQ_WEBSOCKET_TLS_URL", .flat = "websocket.tls_url",
	    .flat_note = "enabled when `tls.enable` and `websocket.enable` are true",
	    .type = CONF_T_STR, .store = CONF_ST_STR, LF(bind),
	    .flags = CONF_F_BIND, .def = "0.0.0.0:8086/mqtt",
	    .help = "Address, port and the required URL path." },
	TLS_KEYS("wss", "from `listeners.ssl`", WSS),
	HSTIMEOUT_KEY("wss"),
	MAXCONN_KEY("wss"),
	{ .path = "listeners.quic", .type = CONF_T_SECTION, .status = CONF_S_UNSUPPORTED,
	    .help = "MQTT over QUIC." },

	// -------------------------------------------------------- http_server
	{ .path = "http_server", .type = CONF_T_SECTION,
	    .help = "The REST API (`/api/v4`, docs/rest-api.md) and the Prometheus metrics "
	        "(`/api/v4/prometheus`). The section being present enables it. Every change "
	        "needs a restart." },
	{ .path = "http_server.enable",
	    .env = "NANOMQ_HTTP_SERVER_ENABLE", .flat = "http_server.enable",
	    OPT(0, "http", http_enable),
	    .type = CONF_T_BOOL, .store = CONF_ST_BOOL, CF(http_enable),
	    .def_doc = "true (when the section is present)",
	    .help = "`false` keeps the section but turns the API off." },
	{ .path = "http_server.port",
	    .env = "NANOMQ_HTTP_SERVER_PORT", .flat = "http_server.port",
	    OPT('p', "port", http_port),
	    .type = CONF_T_INT, .store = CONF_ST_INT, CF(http_port),
	    .def = "8081", .min = 1, .max = 65535, .help = "TCP port." },
	{ .path = "http_server.ip_addr", .type = CONF_T_STR, .store = CONF_ST_STR, CF(http_ip_addr),
	    .def = "0.0.0.0", .help = "Bind address; quotes are optional." },
	{ .path = "http_server.limit_conn",
	    .env = "NANOMQ_HTTP_SERVER_PARALLEL", .flat = "http_server.parallel",
	    .type = CONF_T_INT, .store = CONF_ST_INT,
	    CF(http_limit_conn), .def = "32", .min = 1, .max = 65535, .alias = "http_server.parallel",
	    .help = "Requests in progress at the same time; further clients wait in the "
	        "listening socket's backlog. A kept-alive connection idle between requests "
	        "does not hold a place: the one idle the longest is closed for a waiting "
	        "client." },
	{ .path = "http_server.max_body", .type = CONF_T_SIZE, .store = CONF_ST_U32,
	    CF(http_max_body), .def = "1MB", .min = 1, .max = MB256,
	    .help = "Largest request body; a bigger one gets HTTP 400, code 108." },
	{ .path = "http_server.request_timeout", .type = CONF_T_DUR_MS, .store = CONF_ST_U32,
	    CF(http_request_timeout_ms), .def = "10s", .min = 100, .max = 3600000,
	    .help = "A request must arrive in full, and its reply leave, within this time of its "
	        "first byte; a slower client is disconnected (extension)." },
	{ .path = "http_server.username",
	    .env = "NANOMQ_HTTP_SERVER_USERNAME", .flat = "http_server.username",
	    .type = CONF_T_STR, .store = CONF_ST_STR,
	    CF(http_username), .help = "Basic-auth user name." },
	{ .path = "http_server.password",
	    .env = "NANOMQ_HTTP_SERVER_PASSWORD", .flat = "http_server.password",
	    .type = CONF_T_STR, .store = CONF_ST_STR,
	    CF(http_password), .flags = CONF_F_SECRET, .help = "Basic-auth password." },
	{ .path = "http_server.auth_type",
	    .env = "NANOMQ_HTTP_SERVER_AUTH_TYPE", .flat = "http_server.auth_type",
	    .type = CONF_T_ENUM, .store = CONF_ST_INT,
	    CF(http_auth_type), .def = "basic", .words = "basic|jwt|no_auth",
	    .help = "How requests authenticate: Basic, RS256 JWT bearer token, or not at all." },
	{ .path = "http_server.jwt.public.keyfile",
	    .env = "NANOMQ_HTTP_SERVER_JWT_PUBLIC_KEYFILE",
	    .flat = "http_server.jwt.public.keyfile",
	    .type = CONF_T_STR, .store = CONF_ST_STR,
	    CF(http_jwt_public_keyfile), .flags = CONF_F_READABLE,
	    .help = "RS256 public key (PEM). Required when auth_type = jwt." },
	{ .path = "http_server.jwt.private.keyfile",
	    .env = "NANOMQ_HTTP_SERVER_JWT_PRIVATE_KEYFILE",
	    .flat = "http_server.jwt.private.keyfile",
	    .type = CONF_T_STR, .status = CONF_S_NOEFFECT,
	    .help = "Accepted and ignored." },
	{ .path = "http_server.ssl", .type = CONF_T_SECTION,
	    .help = "HTTPS for the REST API (extension; mbed TLS, the same defaults as the MQTT "
	        "TLS listeners). The section being present turns it on: the port then speaks "
	        "TLS only, and a plain HTTP request on it gets a 400 reply in clear text. A TLS "
	        "handshake must finish within `request_timeout`." },
	{ .path = "http_server.ssl.enable", .type = CONF_T_BOOL, .store = CONF_ST_BOOL,
	    CF(http_ssl_enable), .def_doc = "true (when the section is present)",
	    .help = "`false` keeps the section but serves plain HTTP." },
	{ .path = "http_server.ssl.certfile", .type = CONF_T_STR, .store = CONF_ST_STR,
	    CF(http_ssl_certfile), .flags = CONF_F_READABLE,
	    .help = "PEM certificate chain of the server. Required." },
	{ .path = "http_server.ssl.keyfile", .type = CONF_T_STR, .store = CONF_ST_STR,
	    CF(http_ssl_keyfile), .flags = CONF_F_READABLE,
	    .help = "PEM private key of `certfile`. Required." },
	{ .path = "http_server.ssl.key_password", .type = CONF_T_STR, .store = CONF_ST_STR,
	    CF(http_ssl_key_password), .flags = CONF_F_SECRET,
	    .help = "Passphrase of an encrypted `keyfile`." },
	{ .path = "http_server.ssl.cacertfile", .type = CONF_T_STR, .store = CONF_ST_STR,
	    CF(http_ssl_cacertfile), .flags = CONF_F_READABLE,
	    .help = "PEM CA certificates that verify client certificates (with `verify_peer`)." },
	{ .path = "http_server.ssl.verify_peer", .type = CONF_T_BOOL, .store = CONF_ST_BOOL,
	    CF(http_ssl_verify_peer), .def = "false",
	    .help = "Ask each client for a certificate and refuse one that does not verify "
	        "against `cacertfile`; the request's credentials (`auth_type`) are still "
	        "checked." },
	{ .path = "http_server.ssl.fail_if_no_peer_cert", .type = CONF_T_BOOL,
	    .store = CONF_ST_BOOL, CF(http_ssl_fail_if_no_peer_cert), .def = "false",
	    .help = "With `verify_peer`: refuse a client that sends no certificate." },

	// ---------------------------------------------------------------- log
	{ .path = "log", .flat = "log.", .type = CONF_T_SECTION, .reload = true,
	    .help = "Where log lines go and how verbose they are. A reload applies every change." },
	{ .path = "log.to",
	    .env = "NANOMQ_LOG_TO",
	    .type = CONF_T_FLAGS, .store = CONF_ST_INT, CF(log_to), .reload = true,
	    .def = "console", .def_doc = "[console]", .words = "console|file|syslog|uds",
	    .help = "Targets: a list such as `[file, console]`, or a single word." },
	{ .path = "log.level",
	    .env = "NANOMQ_LOG_LEVEL", OPT(0, "log_level", log_level), .opt_arg = "<level>",
	    .type = CONF_T_ENUM, .store = CONF_ST_INT, CF(log_level),
	    .reload = true, .def = "warn", .words = "trace|debug|info|warn|error|fatal",
	    .help = "Lowest level written." },
	{ .path = "log.dir",
	    .env = "NANOMQ_LOG_DIR",
	    .type = CONF_T_STR, .store = CONF_ST_STR, CF(log_dir), .reload = true,
	    .def = ".", .def_doc = "`.` (working directory)",
	    .help = "Directory of the log file (target `file`)." },
	{ .path = "log.file",
	    .env = "NANOMQ_LOG_FILE",
	    .type = CONF_T_STR, .store = CONF_ST_STR, CF(log_file),
	    .reload = true, .def = "nanomq.log", .help = "Name of the log file." },
	{ .path = "log.rotation.size",
	    .env = "NANOMQ_LOG_ROTATION_SIZE",
	    .type = CONF_T_SIZE, .store = CONF_ST_U64,
	    CF(log_rotation_size), .reload = true, .def = "10MB", .min = 1024, .max = 1099511627776.0,
	    .help = "Rotate when the file would grow past this size." },
	{ .path = "log.rotation.count",
	    .env = "NANOMQ_LOG_ROTATION_COUNT",
	    .type = CONF_T_INT, .store = CONF_ST_INT,
	    CF(log_rotation_count), .reload = true, .def = "5", .min = 0, .max = 1000,
	    .help = "Rotated files kept (nanomq.log.1 ... .N); the oldest is deleted." },
	{ .path = "log.uds_addr",
	    .env = "NANOMQ_LOG_UDS_ADDR",
	    .type = CONF_T_STR, .store = CONF_ST_STR, CF(log_uds_addr),
	    .reload = true,
	    .help = "Unix datagram socket receiving syslog-formatted lines (target `uds`)." },

	// --------------------------------------------------------------- auth
	{ .path = "auth", .type = CONF_T_SECTION, .reload = true,
	    .help = "Client authentication and authorisation. A reload applies every change, "
	        "including the included password and ACL files, and flushes the ACL cache." },
	{ .path = "auth.allow_anonymous",
	    .env = "NANOMQ_ALLOW_ANONYMOUS", .flat = "allow_anonymous",
	    .type = CONF_T_BOOL, .store = CONF_ST_BOOL,
	    CF(allow_anonymous), .reload = true, .def = "true",
	    .help = "Accept clients without a username or with an unlisted one; a listed user "
	        "with a wrong password is always refused." },
	{ .path = "auth.no_match",
	    .flat = "acl_nomatch",
	    .type = CONF_T_ENUM, .store = CONF_ST_INT, CF(auth_no_match),
	    .reload = true, .def = "allow", .words = "allow|deny",
	    .help = "ACL result when no rule matches." },
	{ .path = "auth.deny_action", .flat = "acl_deny_action", .type = CONF_T_ENUM, .store = CONF_ST_INT,
	    CF(auth_deny_action), .reload = true, .def = "ignore", .words = "ignore|disconnect",
	    .help = "After an ACL denial: only refuse the operation, or also disconnect." },
	{ .path = "auth.cache.enable",
	    .flat = "enable_acl_cache",
	    .type = CONF_T_BOOL, .store = CONF_ST_BOOL,
	    CF(auth_cache_enable), .reload = true, .def = "true",
	    .help = "Cache ACL decisions per client." },
	{ .path = "auth.cache.max_size",
	    .flat = "acl_cache_max_size",
	    .type = CONF_T_INT, .store = CONF_ST_INT,
	    CF(auth_cache_max_size), .reload = true, .def = "32", .min = 0, .max = 1000000,
	    .help = "Cached decisions per client." },
	{ .path = "auth.cache.ttl", .flat = "acl_cache_ttl", .type = CONF_T_DUR_S, .store = CONF_ST_U32,
	    CF(auth_cache_ttl_s), .reload = true, .def = "1m", .min = 0, .max = U32MAX,
	    .help = "Lifetime of a cached decision." },
	{ .path = "auth.password", .type = CONF_T_OBJECT, .reload = true,
	    .help = "`user: password` pairs, usually `{include \"/etc/nanomq_pwd.conf\"}`. "
	        "`$7$...` (PBKDF2-SHA512) and `$6$...` (SHA-512) values are hashes." },
	{ .path = "auth.acl", .type = CONF_T_OBJECT, .reload = true,
	    .help = "ACL, usually `{include \"/etc/nanomq_acl.conf\"}`." },
	{ .path = "auth.acl.enable",
	    .flat = "acl_enable",
	    .type = CONF_T_BOOL, .reload = true, .def = "true",
	    .help = "`false` keeps the rules but does not apply them." },
	{ .path = "auth.acl.rules", .type = CONF_T_ARRAY, .reload = true,
	    .help = "Rules, first match wins: `{permit = allow|deny, username, clientid, ipaddr, "
	        "ipaddrs, and, or, action = publish|subscribe|pubsub, topics = [...]}`." },
	{ .path = "auth.http_auth", .flat = "auth.http.", .type = CONF_T_SECTION,
	    .help = "HTTP authentication (docs/http-auth.md): `auth_req`, `super_req`, `acl_req` "
	        "(each `url` (http:// or https://), `method`, `headers`, `params`), `timeout`, "
	        "`connect_timeout`, `pool_size`, `cache_ttl`, `enable`, `ssl { cacertfile, "
	        "verify_peer, certfile, keyfile, key_password }`. `acl_req` answers are cached "
	        "per `auth.cache`. Changes need a restart." },

	// ------------------------------------------------------------ bridges
	{ .path = "bridges", .type = CONF_T_SECTION,
	    .help = "Links to other brokers. Only `bridges.mqtt` is supported; see docs/bridge.md. "
	        "Adding, removing or changing a bridge is applied by a reload, and its buffer is "
	        "kept." },
	{ .path = "bridges.mqtt", .flat = "bridge.mqtt.", .type = CONF_T_SECTION, .reload = true,
	    .flat_note = "`forwards.N.*` and `subscription.N.*` (N a number) are the array elements, "
	                 "in the order of N (an empty `remote_topic` keeps the topic; "
	                 "`subscription.N.topic` is `remote_topic`); `forwards=a/#,b/#` forwards "
	                 "each as it is",
	    .help = "MQTT bridges: each named object `bridges.mqtt.<name> {...}` is one bridge (the "
	        "name `cache` is the offline cache)." },
	{ .path = BR "enable", .type = CONF_T_BOOL, .store = CONF_ST_BOOL, BF(enable), .def = "true",
	    .reload = true, .alias = BR "bridge_mode", .help = "`false` keeps the bridge stopped." },
	{ .path = BR "server", .type = CONF_T_STR, .store = CONF_ST_STR, BF(server), .reload = true,
	    .alias = BR "address",
	    .help = "Required: `mqtt-tcp://host:port` or `tls+mqtt-tcp://host:port`." },
	{ .path = BR "proto_ver", .type = CONF_T_INT, .store = CONF_ST_INT, BF(proto_ver), .def = "4",
	    .min = 3, .max = 5, .reload = true, .help = "MQTT version of the link: 3, 4 (3.1.1) or 5." },
	{ .path = BR "clientid", .type = CONF_T_STR, .store = CONF_ST_STR, BF(clientid),
	    .reload = true, .def_doc = "`<name>-<hostname>`",
	    .help = "Client id on the remote broker; stable across restarts so that the remote "
	        "session resumes." },
	{ .path = BR "keepalive", .type = CONF_T_DUR_S, .store = CONF_ST_U32, BF(keepalive_s),
	    .def = "60", .min = 1, .max = 65535, .reload = true,
	    .help = "Keepalive of the link; a link silent for this long after a PINGREQ is reset." },
	{ .path = BR "clean_start", .type = CONF_T_BOOL, .store = CONF_ST_BOOL, BF(clean_start),
	    .def = "false", .reload = true, .alias = BR "clean_session",
	    .help = "`false` keeps the remote session across reconnects." },
	{ .path = BR "username", .type = CONF_T_STR, .store = CONF_ST_STR, BF(username),
	    .reload = true, .help = "User name on the remote broker." },
	{ .path = BR "password", .type = CONF_T_STR, .store = CONF_ST_STR, BF(password),
	    .reload = true, .flags = CONF_F_SECRET, .help = "Password on the remote broker." },
	{ .path = BR "backoff_max", .type = CONF_T_DUR_S, .store = CONF_ST_U32, BF(backoff_max_s),
	    .def = "60", .min = 1, .max = 86400, .reload = true,
	    .help = "Reconnect delay: exponential from 1 s up to this, with jitter (up to a "
	            "quarter of it after a connection refused or closed before the remote "
	            "sent anything); it starts over after a link that was up 5 s or had a "
	            "forward acked or a message received (docs/bridge.md, \"Link life\")." },
	{ .path = BR "transparent", .type = CONF_T_BOOL, .store = CONF_ST_BOOL, BF(transparent),
	    .def = "false", .reload = true,
	    .help = "Mirror the filters local clients subscribe to on the remote broker "
	            "(bridge.md, \"Transparent bridges\")." },
	{ .path = BR "no_local_v4", .type = CONF_T_BOOL, .store = CONF_ST_BOOL, BF(no_local_v4),
	    .def = "true", .reload = true,
	    .help = "Never send a message that came from the remote broker back to it." },
	{ .path = BR "retry_qos_0", .type = CONF_T_BOOL, .store = CONF_ST_BOOL, BF(retry_qos_0),
	    .def = "false", .reload = true,
	    .help = "Also buffer QoS 0 forwards while the link is down (else dropped and counted)." },
	{ .path = BR "max_parallel_processes", .type = CONF_T_INT, .store = CONF_ST_INT,
	    BF(parallel), .def = "2", .min = 1, .max = 1024, .reload = true,
	    .alias = BR "parallel", .status = CONF_S_NOEFFECT,
	    .help = "Work contexts of the bridge (the link runs on the broker's workers)." },
	{ .path = BR "max_send_queue_len", .type = CONF_T_INT, .store = CONF_ST_U32,
	    BF(max_send_queue_len), .def = "1024", .min = 1, .max = 10000000, .reload = true,
	    .help = "Forwards kept in memory; beyond it QoS 1/2 go to the cache if enabled, "
	        "otherwise the oldest is dropped and counted." },
	{ .path = BR "remote_max_packet_size", .type = CONF_T_SIZE, .store = CONF_ST_U32,
	    BF(remote_max_packet_size), .def = "0", .min = 0, .max = MB256, .reload = true,
	    .help = "Largest PUBLISH sent to the remote broker (0: no bound but a v5 remote's "
	        "Maximum Packet Size); a larger forward is dropped and counted." },
	{ .path = BR "max_recv_queue_len", .type = CONF_T_INT, .store = CONF_ST_U32,
	    BF(max_recv_queue_len), .def = "1024", .min = 1, .max = 10000000, .reload = true,
	    .status = CONF_S_NOEFFECT,
	    .help = "Inbound queue (messages from the remote are routed as they arrive)." },
	{ .path = BR "resend_interval", .type = CONF_T_DUR_MS, .store = CONF_ST_U32,
	    BF(resend_interval_ms), .def = "5000", .min = 0, .max = 3600000, .reload = true,
	    .status = CONF_S_NOEFFECT,
	    .help = "Pacing of replay (the backlog is replayed at once, within Receive Maximum)." },
	{ .path = BR "resend_wait", .type = CONF_T_DUR_MS, .store = CONF_ST_U32, BF(resend_wait_ms),
	    .def = "3000", .min = 0, .max = 3600000, .reload = true, .status = CONF_S_NOEFFECT,
	    .help = "Unacked messages are resent (with DUP) after a reconnect, as MQTT requires." },
	{ .path = BR "cancel_timeout", .type = CONF_T_DUR_MS, .store = CONF_ST_U32,
	    BF(cancel_timeout_ms), .def = "10000", .min = 0, .max = 3600000, .reload = true,
	    .status = CONF_S_NOEFFECT,
	    .help = "A message is never cancelled: it is kept until the remote acks it." },
	{ .path = BR "hybrid_bridging", .type = CONF_T_BOOL, .store = CONF_ST_BOOL,
	    BF(hybrid_bridging), .def = "false", .reload = true,
	    .help = "Fail over through `hybrid_servers` (also on when that list is not empty)." },
	{ .path = BR "hybrid_servers", .type = CONF_T_ARRAY, .reload = true,
	    .help = "Failover servers tried in order after `server` (TCP or TLS URLs)." },
	{ .path = BR "conn_properties", .type = CONF_T_SECTION, .reload = true,
	    .help = "MQTT 5 CONNECT properties of the link." },
	{ .path = BR "conn_properties.maximum_packet_size", .type = CONF_T_INT, .store = CONF_ST_U32,
	    BF(cp_maximum_packet_size), .def = "0", .min = 0, .max = MB256, .reload = true,
	    .help = "0 = not sent." },
	{ .path = BR "conn_properties.receive_maximum", .type = CONF_T_INT, .store = CONF_ST_U32,
	    BF(cp_receive_maximum), .def = "0", .min = 0, .max = 65535, .reload = true,
	    .help = "0 = not sent." },
	{ .path = BR "conn_properties.topic_alias_maximum", .type = CONF_T_INT, .store = CONF_ST_U32,
	    BF(cp_topic_alias_maximum), .def = "0", .min = 0, .max = 65535, .reload = true,
	    .status = CONF_S_NOEFFECT,
	    .help = "Not sent: the bridge does not take topic aliases from the remote." },
	{ .path = BR "conn_properties.request_problem_information", .type = CONF_T_INT,
	    .store = CONF_ST_INT, BF(cp_request_problem_information), .def = "-1", .min = -1,
	    .max = 1, .reload = true, .alias = BR "conn_properties.request_problem_infomation",
	    .def_doc = "not sent", .help = "0 or 1." },
	{ .path = BR "conn_properties.request_response_information", .type = CONF_T_INT,
	    .store = CONF_ST_INT, BF(cp_request_response_information), .def = "-1", .min = -1,
	    .max = 1, .reload = true, .alias = BR "conn_properties.request_response_infomation",
	    .def_doc = "not sent", .help = "0 or 1." },
	{ .path = BR "conn_properties.session_expiry_interval", .type = CONF_T_INT,
	    .store = CONF_ST_U32, BF(cp_session_expiry_interval), .def = "0", .min = 0, .max = U32MAX,
	    .reload = true,
	    .help = "Seconds the remote keeps the session after the link drops. With "
	        "`clean_start = false` and 0, the bridge asks for the longest (UINT32_MAX)." },
	{ .path = BR "conn_properties.user_property", .type = CONF_T_OBJECT, .reload = true,
	    .help = "User properties of CONNECT: `{key = \"value\", ...}`." },
	{ .path = BR "will", .type = CONF_T_SECTION, .reload = true,
	    .help = "The link's will, published by the remote broker if the link is lost." },
	{ .path = BR "will.topic", .type = CONF_T_STR, .store = CONF_ST_STR, BF(will_topic),
	    .reload = true, .help = "Will topic (no will when absent)." },
	{ .path = BR "will.payload", .type = CONF_T_STR, .store = CONF_ST_STR, BF(will_payload),
	    .reload = true, .help = "Will payload." },
	{ .path = BR "will.qos", .type = CONF_T_INT, .store = CONF_ST_INT, BF(will_qos), .def = "0",
	    .min = 0, .max = 2, .reload = true, .help = "Will QoS." },
	{ .path = BR "will.retain", .type = CONF_T_BOOL, .store = CONF_ST_BOOL, BF(will_retain),
	    .def = "false", .reload = true, .help = "Will retain flag." },
	{ .path = BR "will.properties", .type = CONF_T_SECTION, .reload = true,
	    .help = "Will properties (v5 links)." },
	{ .path = BR "will.properties.payload_format_indicator", .type = CONF_T_INT,
	    .store = CONF_ST_INT, BF(will_payload_format), .def = "-1", .min = -1, .max = 1,
	    .reload = true, .def_doc = "not sent", .help = "0 bytes, 1 UTF-8." },
	{ .path = BR "will.properties.message_expiry_interval", .type = CONF_T_INT,
	    .store = CONF_ST_U32, BF(will_message_expiry), .def = "0", .min = 0, .max = U32MAX,
	    .reload = true, .help = "Seconds; 0 = not sent." },
	{ .path = BR "will.properties.content_type", .type = CONF_T_STR, .store = CONF_ST_STR,
	    BF(will_content_type), .reload = true, .help = "Content type (`\"\"`: not sent)." },
	{ .path = BR "will.properties.response_topic", .type = CONF_T_STR, .store = CONF_ST_STR,
	    BF(will_response_topic), .reload = true, .help = "Response topic (`\"\"`: not sent)." },
	{ .path = BR "will.properties.correlation_data", .type = CONF_T_STR, .store = CONF_ST_STR,
	    BF(will_correlation_data), .reload = true, .help = "Correlation data (`\"\"`: not sent)." },
	{ .path = BR "will.properties.will_delay_interval", .type = CONF_T_INT,
	    .store = CONF_ST_U32, BF(will_delay_interval), .def = "0", .min = 0, .max = U32MAX,
	    .reload = true, .help = "Seconds; 0 = not sent." },
	{ .path = BR "will.properties.user_property", .type = CONF_T_OBJECT, .reload = true,
	    .help = "User properties of the will: `{key = \"value\", ...}`." },
	{ .path = BR "ssl", .type = CONF_T_SECTION, .reload = true, .alias = BR "tls",
	    .help = "TLS of a `tls+mqtt-tcp://` link." },
	{ .path = BR "ssl.keyfile", .type = CONF_T_STR, .store = CONF_ST_STR, BF(keyfile),
	    .reload = true, .help = "Client private key (PEM), with certfile." },
	{ .path = BR "ssl.certfile", .type = CONF_T_STR, .store = CONF_ST_STR, BF(certfile),
	    .reload = true, .help = "Client certificate chain (PEM)." },
	{ .path = BR "ssl.cacertfile", .type = CONF_T_STR, .store = CONF_ST_STR, BF(cacertfile),
	    .reload = true, .help = "CA certificates that verify the server (PEM)." },
	{ .path = BR "ssl.key_password", .type = CONF_T_STR, .store = CONF_ST_STR, BF(key_password),
	    .reload = true, .flags = CONF_F_SECRET, .help = "Passphrase of the private key." },
	{ .path = BR "ssl.verify_peer", .type = CONF_T_BOOL, .store = CONF_ST_BOOL, BF(verify_peer),
	    .def = "true", .reload = true,
	    .help = "Verify the server's certificate and name (against cacertfile)." },
	{ .path = BR "ssl.enable", .type = CONF_T_BOOL, .reload = true, .status = CONF_S_NOEFFECT,
	    .help = "TLS follows the server URL." },
	{ .path = BR "tcp", .type = CONF_T_SECTION, .reload = true, .help = "Socket options of the link." },
	{ .path = BR "tcp.nodelay", .type = CONF_T_BOOL, .store = CONF_ST_BOOL, BF(tcp_nodelay),
	    .def = "true", .reload = true, .help = "TCP_NODELAY." },
	{ .path = BR "tcp.keepalive", .type = CONF_T_BOOL, .store = CONF_ST_BOOL, BF(tcp_keepalive),
	    .def = "false", .reload = true, .help = "SO_KEEPALIVE." },
	{ .path = BR "tcp.quickack", .type = CONF_T_BOOL, .reload = true, .status = CONF_S_NOEFFECT,
	    .help = "TCP_QUICKACK." },
	{ .path = BR "tcp.keepidle", .type = CONF_T_INT, .store = CONF_ST_U32, BF(tcp_keepidle),
	    .def = "0", .min = 0, .max = 86400, .reload = true, .help = "TCP_KEEPIDLE (0 = system)." },
	{ .path = BR "tcp.keepintvl", .type = CONF_T_INT, .store = CONF_ST_U32, BF(tcp_keepintvl),
	    .def = "0", .min = 0, .max = 86400, .reload = true, .help = "TCP_KEEPINTVL (0 = system)." },
	{ .path = BR "tcp.keepcnt", .type = CONF_T_INT, .store = CONF_ST_U32, BF(tcp_keepcnt),
	    .def = "0", .min = 0, .max = 1000, .reload = true, .help = "TCP_KEEPCNT (0 = system)." },
	{ .path = BR "tcp.sendtimeo", .type = CONF_T_INT, .reload = true, .status = CONF_S_NOEFFECT,
	    .help = "Stalls are detected by the keepalive." },
	{ .path = BR "tcp.recvtimeo", .type = CONF_T_INT, .reload = true, .status = CONF_S_NOEFFECT,
	    .help = "Stalls are detected by the keepalive." },
	{ .path = BR "tcp.bind_interface", .type = CONF_T_STR, .store = CONF_ST_STR,
	    BF(bind_interface), .reload = true, .help = "Network interface the link leaves by." },
	{ .path = BR "sub_properties", .type = CONF_T_SECTION, .reload = true,
	    .help = "MQTT 5 SUBSCRIBE properties." },
	{ .path = BR "sub_properties.identifier", .type = CONF_T_INT, .store = CONF_ST_U32,
	    BF(sub_identifier), .def = "0", .min = 0, .max = 268435455, .reload = true,
	    .help = "Subscription identifier (0 = none)." },
	{ .path = BR "sub_properties.user_property", .type = CONF_T_OBJECT, .reload = true,
	    .help = "User properties of SUBSCRIBE: `{key = \"value\", ...}`." },
	{ .path = BR "forwards", .type = CONF_T_ARRAY, .reload = true,
	    .help = "Local topics sent to the remote broker: `[{local_topic, remote_topic, ...}]`." },
	{ .path = BR "forwards.local_topic", .type = CONF_T_STR, .store = CONF_ST_STR,
	    FF(local_topic), .reload = true,
	    .help = "Required: the local filter. A forward may also be written as that filter "
	            "alone (`forwards = [\"a/#\"]`, older NanoMQ files): the remote topic is then "
	            "the local one." },
	{ .path = BR "forwards.remote_topic", .type = CONF_T_STR, .store = CONF_ST_STR,
	    FF(remote_topic), .reload = true,
	    .help = "Required: the remote topic; `\"\"` keeps the local topic." },
	{ .path = BR "forwards.prefix", .type = CONF_T_STR, .store = CONF_ST_STR, FF(prefix),
	    .reload = true, .help = "Added before the remote topic." },
	{ .path = BR "forwards.suffix", .type = CONF_T_STR, .store = CONF_ST_STR, FF(suffix),
	    .reload = true, .help = "Added after the remote topic." },
	{ .path = BR "forwards.qos", .type = CONF_T_INT, .store = CONF_ST_INT, FF(qos), .def = "-1",
	    .min = -1, .max = 2, .reload = true, .def_doc = "the message's",
	    .help = "QoS sent to the remote." },
	{ .path = BR "forwards.retain", .type = CONF_T_INT, .store = CONF_ST_INT, FF(retain),
	    .def = "2", .min = 0, .max = 2, .reload = true,
	    .help = "0 or 1 overrides the retain flag, 2 keeps it." },
	{ .path = BR "subscription", .type = CONF_T_ARRAY, .reload = true,
	    .help = "Remote filters published locally: `[{remote_topic, qos, local_topic, ...}]`." },
	{ .path = BR "subscription.remote_topic", .type = CONF_T_STR, .store = CONF_ST_STR,
	    SF(remote_topic), .reload = true, .alias = BR "subscription.topic",
	    .help = "Required: the remote filter." },
	{ .path = BR "subscription.qos", .type = CONF_T_INT, .store = CONF_ST_INT, SF(qos),
	    .def = "1", .min = 0, .max = 2, .reload = true, .help = "QoS of the subscription." },
	{ .path = BR "subscription.local_topic", .type = CONF_T_STR, .store = CONF_ST_STR,
	    SF(local_topic), .reload = true,
	    .help = "The local topic (default: the topic as received)." },
	{ .path = BR "subscription.prefix", .type = CONF_T_STR, .store = CONF_ST_STR, SF(prefix),
	    .reload = true, .help = "Added before the local topic." },
	{ .path = BR "subscription.suffix", .type = CONF_T_STR, .store = CONF_ST_STR, SF(suffix),
	    .reload = true, .help = "Added after the local topic." },
	{ .path = BR "subscription.retain", .type = CONF_T_INT, .store = CONF_ST_INT, SF(retain),
	    .def = "2", .min = 0, .max = 2, .reload = true,
	    .help = "0 or 1 overrides the retain flag, 2 keeps it." },
	{ .path = BR "subscription.retain_as_published", .type = CONF_T_BOOL, .store = CONF_ST_BOOL,
	    SF(retain_as_published), .def = "false", .reload = true, .help = "v5 option." },
	{ .path = BR "subscription.retain_handling", .type = CONF_T_INT, .store = CONF_ST_INT,
	    SF(retain_handling), .def = "0", .min = 0, .max = 2, .reload = true, .help = "v5 option." },
	{ .path = BR "subscription.nolocal", .type = CONF_T_BOOL, .store = CONF_ST_BOOL, SF(nolocal),
	    .def = "true", .reload = true, .alias = BR "subscription.no_local",
	    .help = "v5 No Local: the remote does not send back what the bridge published." },
	{ .path = BR "subscription.stream_id", .type = CONF_T_INT, .reload = true,
	    .status = CONF_S_NOEFFECT, .help = "QUIC only." },
	{ .path = "bridges.mqtt.cache", .flat = "bridge.sqlite.", .type = CONF_T_SECTION,
	    .reload = true,
	    .help = "The offline cache shared by the bridges (SQLite): QoS 1/2 forwards are kept "
	        "there until the remote acks them, across restarts. Needs a restart to add. With a "
	        "`sqlite` section too, the cache is kept in that section's database, under its "
	        "`mounted_file_path`, `disk_cache_size` (one bound for both) and `durability`: the "
	        "cache's own values are ignored, with a warning." },
	{ .path = "bridges.mqtt.cache.enable", .type = CONF_T_BOOL, .store = CONF_ST_BOOL,
	    CF(bridge_cache_enable), .def = "false", .def_doc = "`true` when the section is present",
	    .help = "Use the cache." },
	{ .path = "bridges.mqtt.cache.disk_cache_size", .type = CONF_T_INT, .store = CONF_ST_U32,
	    CF(bridge_cache_disk_size), .def = "102400", .min = 0, .max = U32MAX,
	    .help = "Most messages kept; past it the oldest is evicted and counted (0 = no bound)." },
	{ .path = "bridges.mqtt.cache.mounted_file_path", .type = CONF_T_STR, .store = CONF_ST_STR,
	    CF(bridge_cache_path), .def = "/tmp/", .help = "Directory of the database file." },
	{ .path = "bridges.mqtt.cache.flush_mem_threshold", .type = CONF_T_INT, .store = CONF_ST_U32,
	    CF(bridge_cache_flush), .def = "100", .min = 1, .max = 1000000,
	    .help = "Largest group commit, in operations, when above 65536: a group takes "
	            "everything waiting when the previous commit ends (under load, up to 5 ms after the "
	            "previous group began while the broker moves messages fast), up to 65536 operations or "
	            "this value if larger." },
	{ .path = "bridges.mqtt.cache.resend_interval", .type = CONF_T_DUR_MS, .store = CONF_ST_U32,
	    CF(bridge_cache_resend_ms), .def = "5000", .min = 0, .max = 3600000,
	    .status = CONF_S_NOEFFECT, .help = "The backlog is replayed at once after a reconnect." },

	// ------------------------------------------------------------- sqlite
	{ .path = "sqlite", .flat = "sqlite.", .type = CONF_T_SECTION,
	    .help = "Persistence of sessions, their subscriptions, queued and in-flight QoS 1/2 "
	        "messages, inbound QoS 2 state and retained messages in one SQLite database "
	        "(see docs/persistence.md). The section being present enables it. Every change "
	        "needs a restart." },
	{ .path = "sqlite.enable", .type = CONF_T_BOOL, .store = CONF_ST_BOOL, CF(sqlite_enable),
	    .def_doc = "true (when the section is present)",
	    .help = "`false` keeps the section but turns persistence off." },
	{ .path = "sqlite.mounted_file_path", .type = CONF_T_STR, .store = CONF_ST_STR,
	    CF(sqlite_path), .def_doc = "the working directory",
	    .help = "Directory of the database file `nanomq.db` (WAL mode); created if missing. "
	            "A relative path is the start directory's, also for a daemon." },
	{ .path = "sqlite.disk_cache_size", .type = CONF_T_INT, .store = CONF_ST_U32,
	    CF(sqlite_disk_cache_size), .def = "102400", .min = 0, .max = U32MAX,
	    .help = "Most queued messages stored (0 = no bound). When full, the oldest queued "
	        "QoS 1/2 message is evicted, counted and logged." },
	{ .path = "sqlite.flush_mem_threshold", .type = CONF_T_INT, .store = CONF_ST_U32,
	    CF(sqlite_flush_mem_threshold), .def = "100", .min = 1, .max = 1000000,
	    .help = "Largest group commit, in operations, when above 65536: a group takes "
	            "everything waiting when the previous commit ends (under load, up to 5 ms after the "
	            "previous group began while the broker moves messages fast), up to 65536 operations or "
	            "this value if larger. A QoS 1/2 message that is stored (for a persistent "
	            "session, or retained) is acknowledged only after its commit." },
	{ .path = "sqlite.resend_interval", .type = CONF_T_DUR_MS, .store = CONF_ST_U32,
	    CF(sqlite_resend_interval_ms), .status = CONF_S_NOEFFECT, .def = "5000", .min = 0,
	    .max = U32MAX,
	    .help = "Accepted; no effect: stored messages go out as soon as the client is back." },
	{ .path = "sqlite.durability", .type = CONF_T_ENUM, .store = CONF_ST_INT,
	    CF(sqlite_durability), .def = "fsync", .words = "fsync|os",
	    .help = "What an acknowledged message survives (extension). `fsync`: the database "
	        "is fsynced at every group commit; it survives a power cut. `os`: committed data "
	        "is left in the operating system's buffers; it survives a crash or kill -9 of "
	        "the broker, not a power cut, and costs less." },
	{ .path = "sqlite.max_pending_writes", .type = CONF_T_INT, .store = CONF_ST_U32,
	    CF(sqlite_max_pending), .def = "0", .min = 0, .max = 16777216,
	    .help = "Writes waiting for the store's thread (extension; 0 = sized from "
	        "disk_cache_size, at least 65536). Past half of it, a publisher whose message is "
	        "stored is paused until the queue is under a quarter; a write refused because "
	        "the queue is full means no success ack for its message (v5: reason 0x97; "
	        "3.1.1: the connection is closed). See docs/decisions/0021-store-back-pressure.md." },

	// ------------------------------------------------------------- preset
	{ .path = "preset", .type = CONF_T_SECTION,
	    .help = "Persistent sessions created at startup (a restart applies a change)." },
	{ .path = "preset.session", .type = CONF_T_OBJECT,
	    .help = "Named sessions `preset.session.<n> { clientid = \"...\", topic = [{ "
	        "remote_topic = \"filter\", qos = 1, retain_as_published = false, "
	        "retain_handling = 0 }] }`, or an array of them. At startup each becomes a "
	        "persistent session (never expiring) subscribed to its filters, so that "
	        "messages queue for it before its client first connects (bounded by "
	        "`mqtt.max_mqueue_len`, or on disk with the `sqlite` section). A CONNECT with "
	        "clean start 0 takes it over with its queue; clean start 1 discards it. "
	        "`clientid` (not under `$bridge/`, the bridges' own) and `remote_topic` are "
	        "required; `qos` (0 to 2), "
	        "`retain_as_published` and `retain_handling` (0 to 2) default to 0. With an ACL "
	        "in force, only a client without a user name resumes it. See "
	        "docs/persistence.md." },

	// ------------------------------------- recognised, not supported yet
	{ .path = "webhook", .flat = "web.hook.", .type = CONF_T_SECTION,
	    .help = "HTTP POST of broker events (docs/webhooks.md); the section being present "
	        "enables it. Changes need a restart." },
	{ .path = "webhook.enable", .type = CONF_T_BOOL, .store = CONF_ST_BOOL, CF(webhook_enable),
	    .def = "true", .help = "`false` keeps the section but sends nothing." },
	{ .path = "webhook.url", .type = CONF_T_STR, .store = CONF_ST_STR, CF(webhook_url),
	    .help = "Target of the POST requests, `http://` or `https://host[:port]/path` "
	        "(required when enabled). A host name is looked up at startup, and again for a "
	        "new connection after a failed one or when the last lookup is 30 s old." },
	{ .path = "webhook.headers", .type = CONF_T_OBJECT,
	    .help = "Extra request headers, e.g. `headers.content-type = \"application/json\"` "
	        "(the default)." },
	{ .path = "webhook.body", .type = CONF_T_SECTION, .help = "Request body options." },
	{ .path = "webhook.body.encoding", .type = CONF_T_ENUM, .store = CONF_ST_INT,
	    CF(webhook_encoding), .def = "plain", .words = "plain|base64|base62",
	    .help = "Encoding of the `payload` field of message events." },
	{ .path = "webhook.pool_size", .type = CONF_T_INT, .store = CONF_ST_U32,
	    CF(webhook_pool_size), .def = "32", .min = 1, .max = 1024,
	    .help = "Concurrent HTTP requests, each on a connection kept open between requests "
	        "(HTTP/1.1 keep-alive) while the target allows it." },
	{ .path = "webhook.cancel_timeout", .type = CONF_T_DUR_MS, .store = CONF_ST_U32,
	    CF(webhook_timeout_ms), .def = "5000", .min = 1, .max = 3600000,
	    .help = "Time one request (connect, send, answer) may take; a request that fails or "
	        "times out is retried after 1, 2 and 4 s, then counted as failed." },
	{ .path = "webhook.queue_size", .type = CONF_T_INT, .store = CONF_ST_U32,
	    CF(webhook_queue_size), .def = "10000", .min = 1, .max = 10000000,
	    .help = "Events waiting to be sent (extension); when full, new events are dropped "
	        "and counted." },
	{ .path = "webhook.events", .type = CONF_T_ARRAY,
	    .help = "`[{event = \"on_message_publish\", topic = \"a/#\"}, ...]`: the events sent, "
	        "each with an optional topic filter (events with a topic)." },
	{ .path = "webhook.ssl", .type = CONF_T_SECTION,
	    .help = "TLS for `https://` targets (mbed TLS)." },
	{ .path = "webhook.ssl.cacertfile", .type = CONF_T_STR, .store = CONF_ST_STR,
	    CF(webhook_ssl_cacertfile), .flags = CONF_F_READABLE,
	    .help = "PEM CA certificates that verify the target's certificate (with "
	        "`verify_peer`); default: the system bundle." },
	{ .path = "webhook.ssl.certfile", .type = CONF_T_STR, .store = CONF_ST_STR,
	    CF(webhook_ssl_certfile), .flags = CONF_F_READABLE,
	    .help = "PEM client certificate, for a target that asks for one." },
	{ .path = "webhook.ssl.keyfile", .type = CONF_T_STR, .store = CONF_ST_STR,
	    CF(webhook_ssl_keyfile), .flags = CONF_F_READABLE,
	    .help = "PEM private key of `certfile`." },
	{ .path = "webhook.ssl.key_password", .type = CONF_T_STR, .store = CONF_ST_STR,
	    CF(webhook_ssl_key_password), .flags = CONF_F_SECRET,
	    .help = "Passphrase of an encrypted `keyfile`." },
	{ .path = "webhook.ssl.verify_peer", .type = CONF_T_BOOL, .store = CONF_ST_BOOL,
	    CF(webhook_ssl_verify_peer), .def = "true",
	    .help = "Verify the target's certificate and name (`false`: encrypt only)." },

	// ---------------------------------------- recognised, never supported
	{ .path = "bridges.aws", .type = CONF_T_SECTION, .status = CONF_S_UNSUPPORTED,
	    .help = "AWS IoT Core bridges." },
	{ .path = "bridges.nng", .type = CONF_T_SECTION, .status = CONF_S_UNSUPPORTED,
	    .help = "NNG pub/sub bridges." },
	{ .path = "rules", .type = CONF_T_SECTION, .status = CONF_S_UNSUPPORTED,
	    .help = "The rule engine (sqlite, repub, mysql, postgresql, timescaledb)." },
	{ .path = "exchange_client", .type = CONF_T_SECTION, .status = CONF_S_UNSUPPORTED,
	    .help = "Message exchange ring buffers." },
	{ .path = "parquet", .type = CONF_T_SECTION, .status = CONF_S_UNSUPPORTED,
	    .help = "Parquet file storage." },
	{ .path = "plugin", .type = CONF_T_SECTION, .status = CONF_S_UNSUPPORTED,
	    .help = "Loadable plugins." },
};
// clang-format on

const size_t conf_schema_len = sizeof(conf_schema) / sizeof(conf_schema[0]);

// Returns the entry whose path or alias equals path, or NULL.
const conf_key *conf_schema_find(const char *path, bool *via_alias)
{
	for (size_t i = 0; i < conf_schema_len; i++) {
		if (strcmp(conf_schema[i].path, path) == 0) {
			if (via_alias != NULL) {
				*via_alias = false;
			}
			return &conf_schema[i];
		}
		if (conf_schema[i].alias != NULL && strcmp(conf_schema[i].alias, path) == 0) {
			if (via_alias != NULL) {
				*via_alias = true;
			}
			return &conf_schema[i];
		}
	}
	return NULL;
}

// Returns true when a schema path (or alias) extends path by ".more".
bool conf_schema_is_prefix(const char *path)
{
	size_t n = strlen(path);

	for (size_t i = 0; i < conf_schema_len; i++) {
		const char *p = conf_schema[i].path;
		const char *a = conf_schema[i].alias;
		if ((strncmp(p, path, n) == 0 && p[n] == '.')
		    || (a != NULL && strncmp(a, path, n) == 0 && a[n] == '.')) {
			return true;
		}
	}
	return false;
}

// Fills *o from the schema row k, which has an option.
static void option_of(const conf_key *k, conf_option *o)
{
	memset(o, 0, sizeof(*o));
	o->name   = k->opt;
	o->letter = k->opt_letter;
	o->key    = k->path;
	o->field  = k->opt_field;
	o->arg    = k->opt_arg;
	switch (k->type) {
	case CONF_T_BOOL:
		o->kind = CONF_OPT_FLAG;
		return;
	case CONF_T_ENUM:
		o->kind  = CONF_OPT_WORD;
		o->words = k->words;
		if (o->arg == NULL) {
			o->arg = "<word>";
		}
		return;
	case CONF_T_STR:
		o->kind = CONF_OPT_STR;
		if (o->arg == NULL) {
			o->arg = (k->flags & CONF_F_READABLE) ? "<file>" : "<value>";
		}
		return;
	default: // integers, and durations or sizes given as bare numbers
		o->kind = CONF_OPT_INT;
		o->min  = 0;
		o->max  = INT_MAX;
		if (k->min < k->max) {
			o->min = k->min > 0 ? (int)k->min : 0;
			o->min += o->min < k->min; // rounded up
			o->max = k->max < INT_MAX ? (int)k->max : INT_MAX;
		}
		if (o->arg == NULL) {
			o->arg = "<n>";
		}
		return;
	}
}

// Returns the next schema row with a command-line option.
bool conf_option_next(size_t *it, conf_option *o)
{
	for (; *it < conf_schema_len; (*it)++) {
		if (conf_schema[*it].opt != NULL) {
			option_of(&conf_schema[(*it)++], o);
			return true;
		}
	}
	return false;
}

// ---------------------------------------------------------------------------
// Reference documentation.

// Returns the name of a type as the docs write it.
static const char *type_name(const conf_key *k)
{
	switch (k->type) {
	case CONF_T_SECTION:
		return "section";
	case CONF_T_BOOL:
		return "bool";
	case CONF_T_INT:
		return "int";
	case CONF_T_FLOAT:
		return "float";
	case CONF_T_STR:
		return "str";
	case CONF_T_ENUM:
		return "enum";
	case CONF_T_SIZE:
		return "size";
	case CONF_T_DUR_S:
		return "dur(s)";
	case CONF_T_DUR_MS:
		return "dur(ms)";
	case CONF_T_FLAGS:
		return "array";
	case CONF_T_OBJECT:
		return "object";
	case CONF_T_ARRAY:
		return "array";
	}
	return "?";
}

// Writes the allowed range or values of k into buf ("" when none).
static void range_text(const conf_key *k, char *buf, size_t len)
{
	buf[0] = '\0';
	if (k->type == CONF_T_ENUM || k->type == CONF_T_FLAGS) {
		size_t n = 0;
		for (const char *w = k->words; *w != '\0' && n + 8 < len;) {
			size_t wl = ascii_cspn(w, "|");
			n += (size_t)snprintf(
			    buf + n, len - n, "%s`%.*s`", n > 0 ? ", " : "", (int)wl, w);
			w += wl + (w[wl] == '|');
		}
		return;
	}
	conf_range_text(k, buf, len);
}

// Returns true for entries that start a new top-level section in the docs.
static bool is_top_section(const conf_key *k)
{
	return k->type == CONF_T_SECTION && strchr(k->path, '.') == NULL
	    && k->status == CONF_S_SUPPORTED;
}

// Returns the top-level section name length of path.
static size_t top_len(const char *path)
{
	return ascii_cspn(path, ".");
}

// Writes one table row for k.
static void key_row(FILE *out, const conf_key *k)
{
	char        range[128];
	const char *reload;

	range_text(k, range, sizeof(range));
	if (k->status == CONF_S_NOT_YET || k->status == CONF_S_UNSUPPORTED) {
		reload = "-";
	} else {
		reload = k->reload ? "yes" : "restart";
	}
	fprintf(out, "| `%s` | %s | ", k->path, type_name(k));
	if (k->def_doc != NULL) {
		fprintf(out, "%s", k->def_doc);
	} else if (k->def != NULL) {
		fprintf(out, "`%s`", k->def);
	} else {
		fprintf(out, "none");
	}
	fprintf(out, " | %s | %s | %s", range, reload, k->help);
	if (k->alias != NULL) {
		fprintf(out, " Alias: `%s`.", k->alias);
	}
	switch (k->status) {
	case CONF_S_NOEFFECT:
		fprintf(out, " *(No effect.)*");
		break;
	case CONF_S_NOT_YET:
		fprintf(out, " *(Not supported yet: ignored with a warning.)*");
		break;
	case CONF_S_UNSUPPORTED:
		fprintf(out, " *(Not supported by this broker: ignored with a warning.)*");
		break;
	default:
		break;
	}
	fprintf(out, " |\n");
}

// Writes docs/config.md from the schema.
nmq_err conf_schema_markdown(FILE *out)
{
	fprintf(out,
	    "# Configuration reference\n"
	    "\n"
	    "<!-- Generated from src/conf/conf_schema.c by conf_schema_markdown(); "
	    "test_conf checks that this file is up to date. Do not edit by hand: run "
	    "`NMQ_REGEN_DOCS=1 test_conf`. -->\n"
	    "\n"
	    "`nanomq.conf` is HOCON, in the subset NanoMQ files use: `a.b.c = v` is the same "
	    "as `a { b { c = v } }`; the separator is `=` or `:` and may be left out before "
	    "`{`; a key given twice keeps the later value, and two objects under one key are "
	    "merged. Strings may be quoted (JSON escapes) or not: an unquoted string runs to "
	    "the end of the line, `,`, `}` or `]`, so `bind = 0.0.0.0:1883` works. Comments "
	    "start with `#` or `//` at the start of a line or after white space. "
	    "`{include \"file\"}` can stand for any object; a relative path is resolved "
	    "against the directory of the including file. There is no `${...}` "
	    "substitution.\n"
	    "\n"
	    "Types: `bool` is `true`/`false` (also `yes`/`no`/`on`/`off`); `size` takes `B`, "
	    "`KB`, `MB`, `GB` (1024-based, any case) and a bare number is bytes; `dur(s)` and "
	    "`dur(ms)` take `ms`, `s`, `m`, `h` and a bare number is in the unit shown. "
	    "A wrong type, a value out of range or an unknown word is an error reported as "
	    "`file:line: key: reason`, and the broker refuses to start. An unknown key is a "
	    "warning and is ignored. \"reload\" says whether `nanomq reload` (or SIGHUP) "
	    "applies a change, or whether it needs a restart.\n"
	    "\n"
	    "Precedence, lowest first: built-in defaults, the file, `NANOMQ_*` environment "
	    "variables, command-line options. The file is `--conf PATH`, else "
	    "`$NANOMQ_CONF_PATH`, else `nanomq.conf` beside the binary, else "
	    "`/etc/nanomq.conf`.\n");

	for (size_t i = 0; i < conf_schema_len; i++) {
		const conf_key *sec = &conf_schema[i];
		size_t          tl;
		if (!is_top_section(sec)) {
			continue;
		}
		tl = strlen(sec->path);
		fprintf(out, "\n## `%s`\n\n%s\n\n", sec->path, sec->help);
		fprintf(out, "| key | type | default | range / values | reload | description |\n");
		fprintf(out, "|---|---|---|---|---|---|\n");
		for (size_t j = 0; j < conf_schema_len; j++) {
			const conf_key *k = &conf_schema[j];
			if (k == sec || top_len(k->path) != tl
			    || strncmp(k->path, sec->path, tl) != 0) {
				continue;
			}
			key_row(out, k);
		}
	}

	fprintf(out,
	    "\n## Sections recognised but not supported\n\n"
	    "These sections are recognised so that an existing NanoMQ file still "
	    "loads: each one gets a single warning and is ignored.\n\n");
	for (size_t i = 0; i < conf_schema_len; i++) {
		const conf_key *k = &conf_schema[i];
		if (k->type != CONF_T_SECTION || k->status == CONF_S_SUPPORTED
		    || strcmp(k->path, "auth.http_auth") == 0
		    || strcmp(k->path, "listeners.quic") == 0) {
			continue;
		}
		fprintf(out, "- `%s`: %s %s\n", k->path, k->help,
		    k->status == CONF_S_NOT_YET ? "Not supported yet."
		                                : "Not supported by this broker.");
	}

	fprintf(out,
	    "\n## Environment variables\n\n"
	    "They override the file. Booleans take `true`/`false`/`1`/`0`; sizes "
	    "and durations use the file syntax. An invalid value is an error that "
	    "names the variable. An empty variable counts as unset.\n\n");
	if (conf_env_markdown(out) != 0) {
		return NMQ_EIO;
	}
	fprintf(out,
	    "\n## Command-line options\n\n"
	    "`nanomq start|restart|reload` take these options; each sets one key and "
	    "overrides the file and the environment. `nanomq --help` lists the others "
	    "(`--conf`, `--old_conf`, `--url`, `--log_file`, `--log_stdout`, `--log_syslog`, "
	    "`--test`).\n\n"
	    "| option | key |\n|---|---|\n");
	{
		conf_option o;
		size_t      it = 0;
		while (conf_option_next(&it, &o)) {
			char shortname[8] = "";
			if (o.letter != 0) {
				snprintf(shortname, sizeof(shortname), "-%c, ", o.letter);
			}
			fprintf(out, "| `%s--%s%s%s` | `%s`%s |\n", shortname, o.name,
			    o.kind == CONF_OPT_FLAG ? "" : " ",
			    o.kind == CONF_OPT_FLAG ? "" : o.arg, o.key,
			    o.kind == CONF_OPT_FLAG ? " = true" : "");
		}
	}
	fprintf(out,
	    "\n## Legacy flat format (`--old_conf`)\n\n"
	    "One `key=value` per line (`#` starts a comment line). Each flat key "
	    "maps onto a HOCON key and is then checked like it; a flat key not in "
	    "this table gets a warning.\n\n");
	if (conf_old_markdown(out) != 0) {
		return NMQ_EIO;
	}
	return ferror(out) ? NMQ_EIO : NMQ_OK;
}
