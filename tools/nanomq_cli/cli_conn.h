// An MQTT 3.1/3.1.1/5.0 client connection over a non-blocking TCP socket,
// driven by a cli_loop: connect, CONNECT/CONNACK, SUBSCRIBE, PUBLISH at
// QoS 0/1/2 with a bounded in-flight window, the acks in both directions,
// keepalive, DISCONNECT. Every MQTT byte goes through nng/codec.
//
// Threading: a connection belongs to the thread of its loop; every function
// here and every callback runs there. The caller owns the cli_conn memory
// and the cfg it points to; both must outlive the loop's last round.
//
// Output is batched: publish/subscribe append to a write buffer and one
// send() per round flushes it.
#ifndef NMQ_CLIENT_CLI_CONN_H
#define NMQ_CLIENT_CLI_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "nng/codec/mqtt_codec.h"
#include "tools/nanomq_cli/cli_loop.h"
#include "tools/nanomq_cli/cli_tls.h"
#include "tools/nanomq_cli/cli_ws.h"

// Connection settings; shared read-only by many connections.
typedef struct cli_conn_cfg {
	struct sockaddr_storage addr; // broker
	socklen_t               addrlen;
	struct sockaddr_storage bind_addr; // --ifaddr; bind_len 0 = none
	socklen_t               bind_len;
	uint8_t                 version; // 3, 4 or 5
	uint16_t                keepalive;
	bool                    clean_start;
	const char             *username;
	const char             *password;
	const char             *will_topic;
	const char             *will_msg;
	uint8_t                 will_qos;
	bool                    will_retain;
	// v5 CONNECT properties; each is sent only if its has_/non-zero flag
	// says so.
	bool                  has_session_expiry;
	uint32_t              session_expiry;
	uint16_t              receive_maximum;
	uint16_t              topic_alias_maximum;
	uint32_t              max_packet_size;
	bool                  has_request_problem;
	uint8_t               request_problem;
	bool                  has_request_response;
	uint8_t               request_response;
	const mqtt_user_prop *user_props;
	uint32_t              n_user_props;
	// TLS: NULL = plain TCP. Shared by the connections; owned by whoever
	// filled the config (cli_opts_conn_cfg_fini frees it).
	cli_tls *tls;
	// WebSocket (over TCP or TLS): the request path, NULL = none; host and
	// port for the Host header.
	const char *ws_path;
	const char *ws_host;
	uint16_t    ws_port;
	// Local limits.
	uint16_t inflight; // QoS 1/2 publish window (server may lower it)
	uint32_t connect_timeout_ms; // TCP connect + CONNACK
	size_t   wbuf_high; // publish is refused above this many bytes queued
} cli_conn_cfg;

typedef struct cli_conn cli_conn;

// Callbacks; any may be NULL. They run on the loop thread and may call any
// cli_conn function on this connection, including close.
typedef struct cli_conn_ops {
	// CONNACK received. A refused connection is closed right after.
	void (*on_connack)(cli_conn *c, const mqtt_connack *ack);
	void (*on_suback)(cli_conn *c, const mqtt_suback *ack);
	// A PUBLISH was received (topic aliases already resolved). The pointers
	// are valid only during the call. c->rx_ns is when it was read.
	void (*on_message)(cli_conn *c, const mqtt_publish *p);
	// A QoS 1/2 publish completed (PUBACK, PUBCOMP, or a PUBREC refusal);
	// reason >= 0x80 means the broker refused it.
	void (*on_acked)(cli_conn *c, uint16_t packet_id, uint8_t reason);
	// Room for more publishes: the window or the write buffer drained.
	void (*on_writable)(cli_conn *c);
	// The socket is closed; `why` is "disconnected" after a clean
	// cli_conn_disconnect(). The connection may be started again.
	void (*on_close)(cli_conn *c, const char *why);
} cli_conn_ops;

enum cli_conn_state {
	CLI_CONN_IDLE = 0,
	CLI_CONN_CONNECTING, // TCP handshake
	CLI_CONN_TLS, // TLS handshake
	CLI_CONN_WS, // WebSocket upgrade request sent
	CLI_CONN_CONNACK, // CONNECT sent
	CLI_CONN_READY,
	CLI_CONN_CLOSING, // DISCONNECT queued, flushing
	CLI_CONN_CLOSED,
};

// Return values of cli_conn_publish and cli_conn_subscribe.
enum cli_conn_err {
	CLI_CONN_OK      = 0,
	CLI_CONN_EBUSY   = 1, // window full or write buffer above wbuf_high
	CLI_CONN_ECLOSED = 2, // not connected
	CLI_CONN_EINVAL  = 3, // the codec refused the packet
	CLI_CONN_ENOMEM  = 4,
};

struct cli_conn {
	cli_watch           watch; // watch.fd is the socket, -1 when closed
	cli_task            flush;
	cli_timer           timer; // connect timeout, keepalive, close timeout
	cli_loop           *loop;
	const cli_conn_cfg *cfg;
	const cli_conn_ops *ops;
	void               *arg; // for the owner
	const char         *client_id;
	int                 state;
	cli_tls_conn       *tls; // during and after the TLS handshake
	cli_ws             *ws; // WebSocket state (allocated when used)
	// Header of the data frame being sent, or a whole pong frame.
	uint8_t  ws_hdr[CLI_WS_HDR_MAX + 125];
	uint8_t  ws_hdr_len;
	uint8_t  ws_hdr_off;
	size_t   ws_frame_left; // its masked payload at wbuf + woff
	uint8_t  proto; // wire version after CONNECT: 4 or 5
	uint64_t rx_ns; // when the bytes being handled were read
	// Buffers.
	uint8_t *rbuf; // unparsed tail of the input, if any
	size_t   rlen;
	size_t   rcap;
	uint8_t *wbuf;
	size_t   woff;
	size_t   wlen;
	size_t   wcap;
	bool     want_out;
	// Outbound QoS 1/2 window: packet ids 1..window.
	uint16_t  window;
	uint16_t  inflight;
	uint16_t *free_ids;
	uint16_t  nfree;
	uint8_t  *id_state;
	uint16_t  next_sub_id;
	// Inbound QoS 2 ids awaiting PUBREL (allocated on first use).
	uint8_t *qos2_rx;
	// Inbound topic aliases (v5, allocated on first use).
	char   **aliases;
	uint16_t n_aliases;
	// Keepalive.
	uint16_t keepalive;
	uint64_t last_tx;
	bool     ping_out;
	uint32_t server_max_packet;
};

// Prepares c; it cannot fail. Call before cli_conn_start.
void cli_conn_init(
    cli_conn *c, cli_loop *l, const cli_conn_cfg *cfg, const cli_conn_ops *ops, void *arg);
// Closes the socket if open (without callbacks) and frees the buffers.
void cli_conn_fini(cli_conn *c);

// Starts the TCP connect; CONNECT follows. client_id must outlive the
// connection. Returns 0, or -1 with a message in err (e.g. no more file
// descriptors); on -1 the connection stays idle and no callback runs.
int cli_conn_start(cli_conn *c, const char *client_id, char *err, size_t errlen);

// Queues a PUBLISH. On success *payload_at (if not NULL) points to the copy
// of the payload in the write buffer, which the caller may patch before the
// round ends, and *packet_id (if not NULL) gets the id (0 for QoS 0).
// Returns an enum cli_conn_err.
int cli_conn_publish(cli_conn *c, const char *topic, size_t topic_len, const uint8_t *payload,
    size_t len, uint8_t qos, bool retain, const mqtt_props *props, uint8_t **payload_at,
    uint16_t *packet_id);

// True if a publish at this QoS would not get CLI_CONN_EBUSY.
bool cli_conn_can_publish(const cli_conn *c, uint8_t qos);

// Queues one SUBSCRIBE for n filters (all with `opts`); subscription id 0
// means none. Returns an enum cli_conn_err.
int cli_conn_subscribe(
    cli_conn *c, const char *const *filters, size_t n, const mqtt_sub_opts *opts, uint32_t sub_id);

// Queues DISCONNECT and closes once it is written (or after 2 s). A
// connection that is not ready is closed at once. Either way on_close runs.
void cli_conn_disconnect(cli_conn *c);

// Closes the socket now and calls on_close(why); no-op if already closed.
void cli_conn_close(cli_conn *c, const char *why);

// Number of bytes queued and not yet written.
size_t cli_conn_pending(const cli_conn *c);

#endif // NMQ_CLIENT_CLI_CONN_H
