// One MQTT client connection over a non-blocking socket; see cli_conn.h.
#include "tools/nanomq_cli/cli_conn.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define CONN_SCRATCH          (256 * 1024) // shared read buffer per loop
#define CONN_READS_PER_EVENT  4 // reads per readiness event before yielding
#define CONN_MAX_FRAME        (256u * 1024 * 1024)
#define CONN_SUB_ID_BASE      65100 // SUBSCRIBE ids; publish ids stay below
#define CONN_MAX_WINDOW       65000
#define CONN_CLOSE_TIMEOUT_NS (2000000000ull)
#define CONN_MAX_ALIASES      1024

enum { ID_FREE = 0, ID_PUBACK, ID_PUBREC, ID_PUBCOMP };

// Returns the connection that owns a watch, task or timer.
#define CONN_OF(ptr, field) ((cli_conn *)((char *)(ptr)-offsetof(cli_conn, field)))

static void conn_on_event(cli_watch *w, uint32_t events);
static void conn_flush_task(cli_task *t);
static void conn_timer(cli_timer *t);
static void conn_send_first(cli_conn *c);
static void conn_tls_step(cli_conn *c);

// Returns a codec byte range over a C string (empty for NULL).
static mqtt_bytes bytes_of(const char *s)
{
	mqtt_bytes b = { (const uint8_t *)s, s ? (uint32_t)strlen(s) : 0 };
	return b;
}

// Prepares c; it cannot fail.
void cli_conn_init(
    cli_conn *c, cli_loop *l, const cli_conn_cfg *cfg, const cli_conn_ops *ops, void *arg)
{
	memset(c, 0, sizeof(*c));
	c->watch.fd       = -1;
	c->watch.on_event = conn_on_event;
	c->flush.fn       = conn_flush_task;
	c->timer.fn       = conn_timer;
	c->loop           = l;
	c->cfg            = cfg;
	c->ops            = ops;
	c->arg            = arg;
	c->state          = CLI_CONN_IDLE;
}

// Frees the window arrays and aliases; it cannot fail.
static void conn_free_session(cli_conn *c)
{
	free(c->free_ids);
	free(c->id_state);
	free(c->qos2_rx);
	c->free_ids = NULL;
	c->id_state = NULL;
	c->qos2_rx  = NULL;
	if (c->aliases != NULL) {
		for (uint16_t i = 0; i < c->n_aliases; i++) {
			free(c->aliases[i]);
		}
		free(c->aliases);
		c->aliases = NULL;
	}
	c->window   = 0;
	c->inflight = 0;
	c->nfree    = 0;
}

// Releases the socket and buffers without callbacks; it cannot fail.
void cli_conn_fini(cli_conn *c)
{
	cli_tls_conn_free(c->tls);
	c->tls = NULL;
	free(c->ws);
	c->ws = NULL;
	if (c->watch.fd >= 0) {
		cli_loop_del(c->loop, &c->watch);
		close(c->watch.fd);
		c->watch.fd = -1;
	}
	cli_loop_timer_cancel(c->loop, &c->timer);
	conn_free_session(c);
	free(c->rbuf);
	free(c->wbuf);
	c->rbuf  = NULL;
	c->wbuf  = NULL;
	c->state = CLI_CONN_CLOSED;
}

// Closes the socket and reports why; no-op if already closed.
void cli_conn_close(cli_conn *c, const char *why)
{
	if (c->state == CLI_CONN_CLOSED || c->state == CLI_CONN_IDLE) {
		return;
	}
	if (c->tls != NULL) {
		if (c->state == CLI_CONN_CLOSING) {
			cli_tls_close_notify(c->tls);
		}
		cli_tls_conn_free(c->tls);
		c->tls = NULL;
	}
	free(c->ws);
	c->ws            = NULL;
	c->ws_hdr_len    = 0;
	c->ws_hdr_off    = 0;
	c->ws_frame_left = 0;
	if (c->watch.fd >= 0) {
		cli_loop_del(c->loop, &c->watch);
		close(c->watch.fd);
		c->watch.fd = -1;
	}
	cli_loop_timer_cancel(c->loop, &c->timer);
	c->state = CLI_CONN_CLOSED;
	c->rlen  = 0;
	c->woff  = 0;
	c->wlen  = 0;
	// The window is freed after on_close, which may look at c->inflight.
	if (c->ops->on_close != NULL) {
		c->ops->on_close(c, why);
	}
	if (c->state == CLI_CONN_CLOSED) {
		conn_free_session(c);
	}
}

// Returns the bytes queued for writing.
size_t cli_conn_pending(const cli_conn *c)
{
	return c->wlen - c->woff;
}

// Makes room for n more bytes in the write buffer. Returns 0, or -1 if
// memory is short.
static int wbuf_reserve(cli_conn *c, size_t n)
{
	if (c->woff == c->wlen) {
		c->woff = c->wlen = 0;
	}
	if (c->wcap - c->wlen >= n) {
		return 0;
	}
	if (c->woff > 0) {
		memmove(c->wbuf, c->wbuf + c->woff, c->wlen - c->woff);
		c->wlen -= c->woff;
		c->woff = 0;
		if (c->wcap - c->wlen >= n) {
			return 0;
		}
	}
	size_t cap = c->wcap ? c->wcap : 1024;
	while (cap - c->wlen < n) {
		cap *= 2;
	}
	uint8_t *p = realloc(c->wbuf, cap);
	if (p == NULL) {
		return -1;
	}
	c->wbuf = p;
	c->wcap = cap;
	return 0;
}

// Encodes pkt at the end of the write buffer and schedules a flush. Returns
// CLI_CONN_OK, CLI_CONN_EINVAL if the codec refuses it, or CLI_CONN_ENOMEM.
static int conn_queue(cli_conn *c, const mqtt_packet *pkt)
{
	uint8_t proto = pkt->type == MQTT_CONNECT ? c->cfg->version : c->proto;
	size_t  need  = mqtt_encoded_size(proto, pkt);
	if (need == 0) {
		return CLI_CONN_EINVAL;
	}
	if (wbuf_reserve(c, need) != 0) {
		return CLI_CONN_ENOMEM;
	}
	size_t n = mqtt_encode(c->wbuf + c->wlen, c->wcap - c->wlen, proto, pkt);
	if (n == 0) {
		return CLI_CONN_EINVAL;
	}
	c->wlen += n;
	c->last_tx = c->loop->now;
	cli_loop_post(c->loop, &c->flush);
	return CLI_CONN_OK;
}

// Sends an ack-type packet (PUBACK/PUBREC/PUBREL/PUBCOMP); closes the
// connection if it cannot be queued.
static void conn_send_ack(cli_conn *c, uint8_t type, uint16_t id)
{
	mqtt_packet pkt;
	memset(&pkt, 0, sizeof(pkt));
	pkt.type            = type;
	pkt.flags           = type == MQTT_PUBREL ? 2 : 0;
	pkt.u.ack.packet_id = id;
	if (conn_queue(c, &pkt) != CLI_CONN_OK) {
		cli_conn_close(c, "cannot queue an ack");
	}
}

// Queues CONNECT. Returns an enum cli_conn_err.
static int conn_send_connect(cli_conn *c)
{
	const cli_conn_cfg *cfg = c->cfg;
	mqtt_packet         pkt;
	mqtt_connect       *cn = &pkt.u.connect;

	memset(&pkt, 0, sizeof(pkt));
	pkt.type        = MQTT_CONNECT;
	cn->proto_level = cfg->version;
	cn->clean_start = cfg->clean_start;
	cn->keep_alive  = cfg->keepalive;
	cn->client_id   = bytes_of(c->client_id);
	if (cfg->will_topic != NULL) {
		cn->will_flag    = true;
		cn->will_qos     = cfg->will_qos;
		cn->will_retain  = cfg->will_retain;
		cn->will_topic   = bytes_of(cfg->will_topic);
		cn->will_payload = bytes_of(cfg->will_msg ? cfg->will_msg : "");
	}
	if (cfg->username != NULL) {
		cn->has_username = true;
		cn->username     = bytes_of(cfg->username);
	}
	if (cfg->password != NULL) {
		cn->has_password = true;
		cn->password     = bytes_of(cfg->password);
	}
	if (cfg->version == MQTT_PROTO_V5) {
		mqtt_props *p = &cn->props;
		if (cfg->has_session_expiry) {
			p->present |= MQTT_PBIT(MQTT_PROP_SESSION_EXPIRY);
			p->session_expiry = cfg->session_expiry;
		}
		if (cfg->receive_maximum != 0) {
			p->present |= MQTT_PBIT(MQTT_PROP_RECEIVE_MAXIMUM);
			p->receive_maximum = cfg->receive_maximum;
		}
		if (cfg->topic_alias_maximum != 0) {
			p->present |= MQTT_PBIT(MQTT_PROP_TOPIC_ALIAS_MAX);
			p->topic_alias_maximum = cfg->topic_alias_maximum;
		}
		if (cfg->max_packet_size != 0) {
			p->present |= MQTT_PBIT(MQTT_PROP_MAX_PACKET_SIZE);
			p->maximum_packet_size = cfg->max_packet_size;
		}
		if (cfg->has_request_problem) {
			p->present |= MQTT_PBIT(MQTT_PROP_REQUEST_PROBLEM);
			p->request_problem_info = cfg->request_problem;
		}
		if (cfg->has_request_response) {
			p->present |= MQTT_PBIT(MQTT_PROP_REQUEST_RESPONSE);
			p->request_response_info = cfg->request_response;
		}
		p->user_props   = cfg->user_props;
		p->n_user_props = cfg->n_user_props;
	}
	return conn_queue(c, &pkt);
}

// Returns 0 with the TCP connect under way (or done), or -1 with err set.
int cli_conn_start(cli_conn *c, const char *client_id, char *err, size_t errlen)
{
	const cli_conn_cfg *cfg = c->cfg;
	int                 one = 1;
	int fd = socket(cfg->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0) {
		snprintf(err, errlen, "socket: %s", strerror(errno));
		return -1;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (cfg->bind_len > 0
	    && bind(fd, (const struct sockaddr *)&cfg->bind_addr, cfg->bind_len) != 0) {
		snprintf(err, errlen, "bind: %s", strerror(errno));
		close(fd);
		return -1;
	}
	if (connect(fd, (const struct sockaddr *)&cfg->addr, cfg->addrlen) != 0
	    && errno != EINPROGRESS) {
		snprintf(err, errlen, "connect: %s", strerror(errno));
		close(fd);
		return -1;
	}
	conn_free_session(c);
	c->watch.fd  = fd;
	c->client_id = client_id;
	c->state     = CLI_CONN_CONNECTING;
	c->proto     = cfg->version == MQTT_PROTO_V5 ? MQTT_PROTO_V5 : MQTT_PROTO_V311;
	c->rlen = c->woff = c->wlen = 0;
	c->ping_out                 = false;
	c->want_out                 = true;
	c->server_max_packet        = 0;
	c->keepalive                = cfg->keepalive;
	if (cli_loop_add(c->loop, &c->watch, EPOLLIN | EPOLLOUT) != 0) {
		snprintf(err, errlen, "epoll_ctl: %s", strerror(errno));
		close(fd);
		c->watch.fd = -1;
		c->state    = CLI_CONN_IDLE;
		return -1;
	}
	uint64_t tmo
	    = (uint64_t)(cfg->connect_timeout_ms ? cfg->connect_timeout_ms : 30000) * 1000000ull;
	cli_loop_timer_arm(c->loop, &c->timer, c->loop->now + tmo);
	return 0;
}

// Registers or drops interest in writability; closes c if epoll fails.
static void conn_want_out(cli_conn *c, bool on)
{
	if (c->want_out == on || c->watch.fd < 0) {
		return;
	}
	c->want_out = on;
	if (cli_loop_mod(c->loop, &c->watch, EPOLLIN | (on ? EPOLLOUT : 0)) != 0) {
		cli_conn_close(c, "epoll_ctl failed");
	}
}

// Writes what is queued. Returns true if the connection is still open.
static bool conn_flush(cli_conn *c)
{
	bool framed = c->ws != NULL && c->ws->open;
	while (c->woff < c->wlen || c->ws_hdr_off < c->ws_hdr_len) {
		const uint8_t *p;
		size_t         len;
		if (c->ws_hdr_off < c->ws_hdr_len) {
			p   = c->ws_hdr + c->ws_hdr_off;
			len = (size_t)(c->ws_hdr_len - c->ws_hdr_off);
		} else if (framed && c->ws_frame_left == 0) {
			// The queued bytes become one masked binary frame.
			c->ws_frame_left = c->wlen - c->woff;
			c->ws_hdr_len    = (uint8_t)cli_ws_frame(
			       c->ws_hdr, 2, c->wbuf + c->woff, c->ws_frame_left);
			c->ws_hdr_off = 0;
			continue;
		} else {
			p   = c->wbuf + c->woff;
			len = framed ? c->ws_frame_left : c->wlen - c->woff;
		}
		char    why[200] = "";
		ssize_t n        = c->tls != NULL ? cli_tls_send(c->tls, p, len, why, sizeof(why))
		                                  : send(c->watch.fd, p, len, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR) {
				continue;
			}
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				conn_want_out(c, true);
				return c->state != CLI_CONN_CLOSED;
			}
			cli_conn_close(c, why[0] ? why : strerror(errno));
			return false;
		}
		if (c->ws_hdr_off < c->ws_hdr_len) {
			c->ws_hdr_off += (uint8_t)n;
			if (c->ws_hdr_off == c->ws_hdr_len) {
				c->ws_hdr_off = c->ws_hdr_len = 0; // its payload follows
			}
			continue;
		}
		c->woff += (size_t)n;
		if (framed) {
			c->ws_frame_left -= (size_t)n;
		}
	}
	c->woff = c->wlen = 0;
	conn_want_out(c, false);
	if (c->state == CLI_CONN_CLOSING) {
		cli_conn_close(c, "disconnected");
		return false;
	}
	return c->state != CLI_CONN_CLOSED;
}

// Flushes after a round and tells the owner there is room; cannot fail.
static void conn_flush_task(cli_task *t)
{
	cli_conn *c = CONN_OF(t, flush);
	if (c->state == CLI_CONN_CLOSED || c->state == CLI_CONN_IDLE
	    || c->state == CLI_CONN_CONNECTING || c->state == CLI_CONN_TLS) {
		return;
	}
	if (conn_flush(c) && c->state == CLI_CONN_READY && c->wlen == 0
	    && c->ops->on_writable != NULL) {
		c->ops->on_writable(c);
	}
}

// Arms the keepalive check at the next moment a PINGREQ may be due.
static void conn_arm_keepalive(cli_conn *c)
{
	if (c->keepalive == 0) {
		return;
	}
	cli_loop_timer_arm(c->loop, &c->timer, c->last_tx + (uint64_t)c->keepalive * 1000000000ull);
}

// Handles connect timeouts, keepalive and the close timeout; cannot fail.
static void conn_timer(cli_timer *t)
{
	cli_conn *c   = CONN_OF(t, timer);
	uint64_t  now = c->loop->now;
	uint64_t  ka  = (uint64_t)c->keepalive * 1000000000ull;

	switch (c->state) {
	case CLI_CONN_CONNECTING:
	case CLI_CONN_TLS:
	case CLI_CONN_WS:
	case CLI_CONN_CONNACK:
		cli_conn_close(c, "connect timeout");
		return;
	case CLI_CONN_CLOSING:
		cli_conn_close(c, "disconnected (timeout writing DISCONNECT)");
		return;
	case CLI_CONN_READY:
		break;
	default:
		return;
	}
	if (ka == 0) {
		return;
	}
	if (now - c->last_tx >= ka) {
		if (c->ping_out) {
			cli_conn_close(c, "keepalive timeout: no PINGRESP");
			return;
		}
		mqtt_packet pkt;
		memset(&pkt, 0, sizeof(pkt));
		pkt.type = MQTT_PINGREQ;
		if (conn_queue(c, &pkt) != CLI_CONN_OK) {
			cli_conn_close(c, "cannot queue PINGREQ");
			return;
		}
		c->ping_out = true;
	}
	conn_arm_keepalive(c);
}

// Finishes the TCP connect and sends CONNECT; closes c on failure.
static void conn_connected(cli_conn *c)
{
	int       soerr = 0;
	socklen_t len   = sizeof(soerr);
	if (getsockopt(c->watch.fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0) {
		soerr = errno;
	}
	if (soerr != 0) {
		char why[128];
		snprintf(why, sizeof(why), "connect: %s", strerror(soerr));
		cli_conn_close(c, why);
		return;
	}
	if (c->cfg->tls != NULL) {
		if (cli_tls_conn_new(&c->tls, c->cfg->tls, c->watch.fd) != 0) {
			cli_conn_close(c, "out of memory");
			return;
		}
		c->state = CLI_CONN_TLS;
		conn_tls_step(c);
		return;
	}
	conn_send_first(c);
}

// Sends the WebSocket upgrade request (if configured) or CONNECT once the
// transport is up; closes c on failure.
static void conn_send_first(cli_conn *c)
{
	const cli_conn_cfg *cfg = c->cfg;
	if (cfg->ws_path != NULL && c->ws == NULL) {
		char   req[CLI_WS_REQ_MAX];
		size_t n;
		if ((c->ws = calloc(1, sizeof(*c->ws))) == NULL
		    || wbuf_reserve(c, CLI_WS_REQ_MAX) != 0) {
			cli_conn_close(c, "out of memory");
			return;
		}
		n = cli_ws_request(
		    c->ws, cfg->ws_host, cfg->ws_port, cfg->ws_path, req, sizeof(req));
		if (n == 0) {
			cli_conn_close(c, "WebSocket: request too long (check --ws-path)");
			return;
		}
		memcpy(c->wbuf + c->wlen, req, n);
		c->wlen += n;
		c->state = CLI_CONN_WS;
		cli_loop_post(c->loop, &c->flush);
		return;
	}
	c->state = CLI_CONN_CONNACK;
	if (conn_send_connect(c) != CLI_CONN_OK) {
		cli_conn_close(c, "cannot encode CONNECT (check the options)");
		return;
	}
	conn_want_out(c, false);
}

// Advances the TLS handshake; sends CONNECT when it is over, closes c if
// it fails.
static void conn_tls_step(cli_conn *c)
{
	char why[256];
	switch (cli_tls_handshake(c->tls, why, sizeof(why))) {
	case CLI_TLS_DONE:
		conn_send_first(c); // queues CONNECT; the flush task writes it
		return;
	case CLI_TLS_WANT_READ:
		conn_want_out(c, false);
		return;
	case CLI_TLS_WANT_WRITE:
		conn_want_out(c, true);
		return;
	default:
		cli_conn_close(c, why);
		return;
	}
}

// Sets up the publish window after CONNACK. Returns 0, or -1 if memory is
// short.
static int conn_open_window(cli_conn *c, const mqtt_connack *ack)
{
	uint32_t w = c->cfg->inflight ? c->cfg->inflight : 1;
	if (w > CONN_MAX_WINDOW) {
		w = CONN_MAX_WINDOW;
	}
	if ((ack->props.present & MQTT_PBIT(MQTT_PROP_RECEIVE_MAXIMUM))
	    && ack->props.receive_maximum < w) {
		w = ack->props.receive_maximum;
	}
	c->free_ids = malloc(w * sizeof(*c->free_ids));
	c->id_state = calloc(w + 1, 1);
	if (c->free_ids == NULL || c->id_state == NULL) {
		return -1;
	}
	c->window = (uint16_t)w;
	c->nfree  = (uint16_t)w;
	for (uint32_t i = 0; i < w; i++) {
		c->free_ids[i] = (uint16_t)(w - i); // pop order 1, 2, 3...
	}
	c->inflight    = 0;
	c->next_sub_id = 0;
	return 0;
}

// Handles CONNACK; closes c if it refuses the connection.
static void conn_on_connack(cli_conn *c, const mqtt_connack *ack)
{
	if (c->state != CLI_CONN_CONNACK) {
		cli_conn_close(c, "unexpected CONNACK");
		return;
	}
	if (ack->reason != 0) {
		char why[128];
		if (c->ops->on_connack != NULL) {
			c->ops->on_connack(c, ack);
		}
		snprintf(why, sizeof(why), "connection refused: %s (0x%02x)",
		    c->proto == MQTT_PROTO_V5 ? mqtt_reason_name(ack->reason) : "v3 return code",
		    ack->reason);
		cli_conn_close(c, why);
		return;
	}
	if (conn_open_window(c, ack) != 0) {
		cli_conn_close(c, "out of memory");
		return;
	}
	if (ack->props.present & MQTT_PBIT(MQTT_PROP_SERVER_KEEP_ALIVE)) {
		c->keepalive = ack->props.server_keep_alive;
	}
	if (ack->props.present & MQTT_PBIT(MQTT_PROP_MAX_PACKET_SIZE)) {
		c->server_max_packet = ack->props.maximum_packet_size;
	}
	c->state = CLI_CONN_READY;
	cli_loop_timer_cancel(c->loop, &c->timer);
	conn_arm_keepalive(c);
	if (c->ops->on_connack != NULL) {
		c->ops->on_connack(c, ack);
	}
	if (c->state == CLI_CONN_READY && c->wlen == 0 && c->ops->on_writable != NULL) {
		c->ops->on_writable(c);
	}
}

// Resolves a v5 topic alias in p (learning or looking it up). Returns false
// if the alias is invalid, after closing c.
static bool conn_alias(cli_conn *c, mqtt_publish *p)
{
	if (!(p->props.present & MQTT_PBIT(MQTT_PROP_TOPIC_ALIAS))) {
		return true;
	}
	uint16_t a = p->props.topic_alias;
	if (a == 0 || a > c->cfg->topic_alias_maximum || a > CONN_MAX_ALIASES) {
		cli_conn_close(c, "topic alias out of range");
		return false;
	}
	if (c->aliases == NULL) {
		c->n_aliases = c->cfg->topic_alias_maximum > CONN_MAX_ALIASES
		    ? CONN_MAX_ALIASES
		    : c->cfg->topic_alias_maximum;
		c->aliases   = calloc(c->n_aliases, sizeof(*c->aliases));
		if (c->aliases == NULL) {
			cli_conn_close(c, "out of memory");
			return false;
		}
	}
	if (p->topic.len > 0) {
		char *s = malloc(p->topic.len + 1);
		if (s == NULL) {
			cli_conn_close(c, "out of memory");
			return false;
		}
		memcpy(s, p->topic.p, p->topic.len);
		s[p->topic.len] = '\0';
		free(c->aliases[a - 1]);
		c->aliases[a - 1] = s;
		return true;
	}
	if (c->aliases[a - 1] == NULL) {
		cli_conn_close(c, "unknown topic alias");
		return false;
	}
	p->topic = bytes_of(c->aliases[a - 1]);
	return true;
}

// Handles an inbound PUBLISH: delivers it (once for QoS 2) and acks it.
static void conn_on_publish(cli_conn *c, mqtt_publish *p)
{
	if (c->proto == MQTT_PROTO_V5 && !conn_alias(c, p)) {
		return;
	}
	uint16_t id = p->packet_id;
	if (p->qos == 2) {
		if (c->qos2_rx == NULL && (c->qos2_rx = calloc(65536 / 8, 1)) == NULL) {
			cli_conn_close(c, "out of memory");
			return;
		}
		uint8_t bit = (uint8_t)(1u << (id % 8));
		if (!(c->qos2_rx[id / 8] & bit)) {
			c->qos2_rx[id / 8] |= bit;
			if (c->ops->on_message != NULL) {
				c->ops->on_message(c, p);
			}
		}
		if (c->state != CLI_CONN_CLOSED) {
			conn_send_ack(c, MQTT_PUBREC, id);
		}
		return;
	}
	if (c->ops->on_message != NULL) {
		c->ops->on_message(c, p);
	}
	if (p->qos == 1 && c->state != CLI_CONN_CLOSED) {
		conn_send_ack(c, MQTT_PUBACK, id);
	}
}

// Releases a publish id and tells the owner; cannot fail.
static void conn_release_id(cli_conn *c, uint16_t id, uint8_t reason)
{
	c->id_state[id]         = ID_FREE;
	c->free_ids[c->nfree++] = id;
	c->inflight--;
	if (c->ops->on_acked != NULL) {
		c->ops->on_acked(c, id, reason);
	}
	if (c->state == CLI_CONN_READY && c->ops->on_writable != NULL
	    && c->wlen - c->woff < c->cfg->wbuf_high) {
		c->ops->on_writable(c);
	}
}

// Handles PUBACK/PUBREC/PUBREL/PUBCOMP; closes c on a protocol error.
static void conn_on_ack(cli_conn *c, uint8_t type, const mqtt_ack *a)
{
	uint16_t id = a->packet_id;

	if (type == MQTT_PUBREL) {
		if (c->qos2_rx != NULL) {
			c->qos2_rx[id / 8] &= (uint8_t) ~(1u << (id % 8));
		}
		conn_send_ack(c, MQTT_PUBCOMP, id);
		return;
	}
	uint8_t want = type == MQTT_PUBACK ? ID_PUBACK
	    : type == MQTT_PUBREC          ? ID_PUBREC
	                                   : ID_PUBCOMP;
	if (id == 0 || id > c->window || c->id_state[id] != want) {
		char why[96];
		snprintf(
		    why, sizeof(why), "unexpected %s for packet id %u", mqtt_packet_name(type), id);
		cli_conn_close(c, why);
		return;
	}
	if (type == MQTT_PUBREC && a->reason < 0x80) {
		c->id_state[id] = ID_PUBCOMP;
		conn_send_ack(c, MQTT_PUBREL, id);
		return;
	}
	conn_release_id(c, id, a->reason);
}

// Dispatches one decoded packet; may close c.
static void conn_dispatch(cli_conn *c, mqtt_packet *pkt)
{
	char why[128];

	if (c->state == CLI_CONN_CONNACK && pkt->type != MQTT_CONNACK) {
		snprintf(why, sizeof(why), "%s before CONNACK", mqtt_packet_name(pkt->type));
		cli_conn_close(c, why);
		return;
	}
	switch (pkt->type) {
	case MQTT_CONNACK:
		conn_on_connack(c, &pkt->u.connack);
		break;
	case MQTT_PUBLISH:
		conn_on_publish(c, &pkt->u.publish);
		break;
	case MQTT_PUBACK:
	case MQTT_PUBREC:
	case MQTT_PUBREL:
	case MQTT_PUBCOMP:
		conn_on_ack(c, pkt->type, &pkt->u.ack);
		break;
	case MQTT_SUBACK:
		if (c->ops->on_suback != NULL) {
			c->ops->on_suback(c, &pkt->u.suback);
		}
		break;
	case MQTT_UNSUBACK:
		break;
	case MQTT_PINGRESP:
		c->ping_out = false;
		break;
	case MQTT_DISCONNECT:
		snprintf(why, sizeof(why), "server sent DISCONNECT: %s (0x%02x)",
		    mqtt_reason_name(pkt->u.disconnect.reason), pkt->u.disconnect.reason);
		cli_conn_close(c, why);
		break;
	default:
		snprintf(
		    why, sizeof(why), "unexpected %s from server", mqtt_packet_name(pkt->type));
		cli_conn_close(c, why);
		break;
	}
}

// Decodes and dispatches the complete frames in buf[0..len). Returns the
// bytes consumed, or -1 if c was closed.
static ssize_t conn_parse(cli_conn *c, const uint8_t *buf, size_t len)
{
	size_t      off = 0;
	mqtt_packet pkt;

	while (len - off >= 2) {
		uint32_t rem;
		uint8_t  hl;
		int      rv = mqtt_frame_header(buf + off, len - off, &rem, &hl);
		if (rv == MQTT_FRAME_NEED_MORE) {
			break;
		}
		if (rv != MQTT_FRAME_OK || rem > CONN_MAX_FRAME) {
			cli_conn_close(c, "malformed frame from server");
			return -1;
		}
		size_t total = (size_t)hl + rem;
		if (len - off < total) {
			break;
		}
		int rc = mqtt_decode(buf + off, total, c->proto, &pkt);
		if (rc != 0) {
			char why[128];
			snprintf(why, sizeof(why), "bad %s from server: %s",
			    mqtt_packet_name((uint8_t)(buf[off] >> 4)),
			    mqtt_reason_name((uint8_t)rc));
			cli_conn_close(c, why);
			return -1;
		}
		off += total;
		conn_dispatch(c, &pkt);
		if (c->state == CLI_CONN_CLOSED) {
			return -1;
		}
	}
	return (ssize_t)off;
}

// Keeps buf[0..len) as the connection's unparsed tail. Returns 0, or -1 if
// memory is short.
static int conn_keep_tail(cli_conn *c, const uint8_t *buf, size_t len)
{
	if (len > c->rcap) {
		size_t   cap = len < 4096 ? 4096 : len * 2;
		uint8_t *p   = malloc(cap);
		if (p == NULL) {
			return -1;
		}
		memcpy(p, buf, len);
		free(c->rbuf);
		c->rbuf = p;
		c->rcap = cap;
	} else {
		memmove(c->rbuf, buf, len);
	}
	c->rlen = len;
	return 0;
}

// Turns the WebSocket bytes at p (*n of them) into MQTT bytes in place:
// the upgrade answer first, then frames. Returns 0 with *n set, or -1 if c
// was closed.
static int conn_ws_input(cli_conn *c, uint8_t *p, size_t *n)
{
	char why[200];
	if (!c->ws->open) {
		size_t used;
		int    r = cli_ws_response(c->ws, p, *n, &used, why, sizeof(why));
		if (r < 0) {
			cli_conn_close(c, why);
			return -1;
		}
		memmove(p, p + used, *n - used);
		*n -= used;
		if (r == 0) {
			return 0;
		}
		c->state = CLI_CONN_CONNACK;
		if (conn_send_connect(c) != CLI_CONN_OK) {
			cli_conn_close(c, "cannot encode CONNECT (check the options)");
			return -1;
		}
	}
	long m = cli_ws_unframe(c->ws, p, *n, why, sizeof(why));
	if (m < 0) {
		cli_conn_close(c, why);
		return -1;
	}
	if (c->ws->closed) {
		cli_conn_close(c,
		    c->state == CLI_CONN_CLOSING ? "disconnected" : "connection closed by server");
		return -1;
	}
	if (c->ws->want_pong && c->ws_hdr_len == 0 && c->ws_frame_left == 0) {
		// The pong goes out before the next data frame (a control frame may
		// not interrupt one of ours that is half sent; then it waits for the
		// next ping).
		size_t pl = c->ws->pong_len;
		memcpy(c->ws_hdr + CLI_WS_HDR_MAX, c->ws->pong, pl);
		size_t hl = cli_ws_frame(c->ws_hdr, 10, c->ws_hdr + CLI_WS_HDR_MAX, pl);
		memmove(c->ws_hdr + hl, c->ws_hdr + CLI_WS_HDR_MAX, pl);
		c->ws_hdr_len    = (uint8_t)(hl + pl);
		c->ws_hdr_off    = 0;
		c->ws->want_pong = false;
		cli_loop_post(c->loop, &c->flush);
	}
	*n = (size_t)m;
	return 0;
}

// Reads what the socket has and handles every complete frame; may close c.
static void conn_read(cli_conn *c)
{
	cli_loop *l = c->loop;
	if (l->scratch == NULL) {
		l->scratch = malloc(CONN_SCRATCH);
		if (l->scratch == NULL) {
			cli_conn_close(c, "out of memory");
			return;
		}
		l->scratch_cap = CONN_SCRATCH;
	}
	for (int i = 0; i < CONN_READS_PER_EVENT; i++) {
		// A partial frame is completed in place, otherwise read into the
		// shared buffer and keep only the tail.
		uint8_t *buf;
		size_t   have, cap;
		if (c->rlen > 0) {
			if (c->rcap - c->rlen < 4096) {
				size_t   ncap = c->rcap * 2;
				uint8_t *p    = realloc(c->rbuf, ncap);
				if (p == NULL) {
					cli_conn_close(c, "out of memory");
					return;
				}
				c->rbuf = p;
				c->rcap = ncap;
			}
			buf  = c->rbuf;
			have = c->rlen;
			cap  = c->rcap;
		} else {
			buf  = l->scratch;
			have = 0;
			cap  = l->scratch_cap;
		}
		char    why[200] = "";
		ssize_t n        = c->tls != NULL
		           ? cli_tls_recv(c->tls, buf + have, cap - have, why, sizeof(why))
		           : recv(c->watch.fd, buf + have, cap - have, 0);
		if (n == 0) {
			cli_conn_close(c,
			    c->state == CLI_CONN_CLOSING ? "disconnected"
			                                 : "connection closed by server");
			return;
		}
		if (n < 0) {
			if (errno == EINTR) {
				continue;
			}
			if (errno != EAGAIN && errno != EWOULDBLOCK) {
				cli_conn_close(c, why[0] ? why : strerror(errno));
			}
			return;
		}
		c->rx_ns   = cli_now_ns();
		size_t got = (size_t)n; // of the socket's (or TLS's) bytes
		if (c->ws != NULL && conn_ws_input(c, buf + have, &got) != 0) {
			return;
		}
		size_t  len  = have + got;
		ssize_t used = conn_parse(c, buf, len);
		if (used < 0) {
			return;
		}
		if (buf == c->rbuf) {
			memmove(c->rbuf, c->rbuf + used, len - (size_t)used);
			c->rlen = len - (size_t)used;
		} else if ((size_t)used < len
		    && conn_keep_tail(c, buf + used, len - (size_t)used) != 0) {
			cli_conn_close(c, "out of memory");
			return;
		}
		if ((size_t)n < cap - have && (c->tls == NULL || cli_tls_pending(c->tls) == 0)) {
			// The socket is drained (TLS: a short read may just be the
			// end of a record; the next read says WANT_READ).
			if (c->tls == NULL) {
				return;
			}
		}
		if (c->tls != NULL && i == CONN_READS_PER_EVENT - 1
		    && cli_tls_pending(c->tls) > 0) {
			i--; // decrypted bytes announce themselves to nobody: keep going
		}
	}
}

// Handles readiness of the socket; cannot fail.
static void conn_on_event(cli_watch *w, uint32_t events)
{
	cli_conn *c = CONN_OF(w, watch);

	if (c->state == CLI_CONN_CONNECTING) {
		conn_connected(c);
		if (c->state == CLI_CONN_CLOSED || c->state == CLI_CONN_TLS) {
			return;
		}
		if (!(events & EPOLLIN)) {
			return;
		}
	}
	if (c->state == CLI_CONN_TLS) {
		conn_tls_step(c);
		return;
	}
	if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
		conn_read(c);
	}
	if (c->state != CLI_CONN_CLOSED && (events & EPOLLOUT)) {
		// A writer that hit EAGAIN resumes once the buffer is out.
		if (conn_flush(c) && c->state == CLI_CONN_READY && c->wlen == 0
		    && c->ops->on_writable != NULL) {
			c->ops->on_writable(c);
		}
	}
}

// Returns true if a publish at qos would be accepted now.
bool cli_conn_can_publish(const cli_conn *c, uint8_t qos)
{
	if (c->state != CLI_CONN_READY || c->wlen - c->woff >= c->cfg->wbuf_high) {
		return false;
	}
	return qos == 0 || c->nfree > 0;
}

// Queues a PUBLISH; returns an enum cli_conn_err.
int cli_conn_publish(cli_conn *c, const char *topic, size_t topic_len, const uint8_t *payload,
    size_t len, uint8_t qos, bool retain, const mqtt_props *props, uint8_t **payload_at,
    uint16_t *packet_id)
{
	mqtt_packet pkt;
	uint16_t    id = 0;

	if (c->state != CLI_CONN_READY) {
		return CLI_CONN_ECLOSED;
	}
	if (!cli_conn_can_publish(c, qos)) {
		return CLI_CONN_EBUSY;
	}
	memset(&pkt, 0, sizeof(pkt));
	pkt.type  = MQTT_PUBLISH;
	pkt.flags = (uint8_t)((qos << 1) | (retain ? 1 : 0));
	if (qos > 0) {
		id = c->free_ids[c->nfree - 1];
	}
	pkt.u.publish.qos         = qos;
	pkt.u.publish.retain      = retain;
	pkt.u.publish.topic.p     = (const uint8_t *)topic;
	pkt.u.publish.topic.len   = (uint32_t)topic_len;
	pkt.u.publish.packet_id   = id;
	pkt.u.publish.payload.p   = payload;
	pkt.u.publish.payload.len = (uint32_t)len;
	if (props != NULL && c->proto == MQTT_PROTO_V5) {
		pkt.u.publish.props = *props;
	}
	if (c->server_max_packet != 0 && mqtt_encoded_size(c->proto, &pkt) > c->server_max_packet) {
		return CLI_CONN_EINVAL;
	}
	int rv = conn_queue(c, &pkt);
	if (rv != CLI_CONN_OK) {
		return rv;
	}
	if (qos > 0) {
		c->nfree--;
		c->inflight++;
		c->id_state[id] = qos == 1 ? ID_PUBACK : ID_PUBREC;
	}
	if (payload_at != NULL) {
		*payload_at = c->wbuf + c->wlen - len;
	}
	if (packet_id != NULL) {
		*packet_id = id;
	}
	return CLI_CONN_OK;
}

// Queues a SUBSCRIBE; returns an enum cli_conn_err.
int cli_conn_subscribe(
    cli_conn *c, const char *const *filters, size_t n, const mqtt_sub_opts *opts, uint32_t sub_id)
{
	mqtt_packet pkt;
	size_t      cap = 16;
	size_t      len = 0;

	if (c->state != CLI_CONN_READY) {
		return CLI_CONN_ECLOSED;
	}
	for (size_t i = 0; i < n; i++) {
		cap += strlen(filters[i]) + 3;
	}
	uint8_t *list = malloc(cap);
	if (list == NULL) {
		return CLI_CONN_ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		size_t w = mqtt_sub_list_put(
		    list + len, cap - len, c->proto, bytes_of(filters[i]), opts);
		if (w == 0) {
			free(list);
			return CLI_CONN_EINVAL;
		}
		len += w;
	}
	memset(&pkt, 0, sizeof(pkt));
	pkt.type                  = MQTT_SUBSCRIBE;
	pkt.flags                 = 2;
	pkt.u.subscribe.packet_id = (uint16_t)(CONN_SUB_ID_BASE + (c->next_sub_id++ % 400));
	pkt.u.subscribe.count     = (uint32_t)n;
	pkt.u.subscribe.list.p    = list;
	pkt.u.subscribe.list.len  = (uint32_t)len;
	if (sub_id != 0 && c->proto == MQTT_PROTO_V5) {
		pkt.u.subscribe.props.present |= MQTT_PBIT(MQTT_PROP_SUBSCRIPTION_ID);
		pkt.u.subscribe.props.subscription_id = sub_id;
	}
	int rv = conn_queue(c, &pkt);
	free(list);
	return rv;
}

// Queues DISCONNECT and closes after it is written; cannot fail.
void cli_conn_disconnect(cli_conn *c)
{
	if (c->state != CLI_CONN_READY) {
		cli_conn_close(c, "disconnected");
		return;
	}
	mqtt_packet pkt;
	memset(&pkt, 0, sizeof(pkt));
	pkt.type = MQTT_DISCONNECT;
	if (conn_queue(c, &pkt) != CLI_CONN_OK) {
		cli_conn_close(c, "disconnected");
		return;
	}
	c->state = CLI_CONN_CLOSING;
	cli_loop_timer_arm(c->loop, &c->timer, c->loop->now + CONN_CLOSE_TIMEOUT_NS);
}
