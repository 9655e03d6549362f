// The per-connection protocol state machine: accept, frame dispatch,
// keepalive and CONNECT deadlines, writing control packets and PUBLISH
// heads, and the end of a connection (will, session detach or end).
#include <stdlib.h>
#include <string.h>

#include "nng/codec/mqtt_publish_out.h"
#include "nng/core/log.h"
#include "nng/protocol/link.h"

#define SHUTDOWN_GRACE_MS 2000
// Payloads up to this size are copied into the connection's send buffer;
// larger ones go out by reference.
#define COPY_MAX 1024
// Outbound topic aliases we assign at most, per connection.
#define OUT_ALIAS_MAX 64

static int  link_frame(void *upper, const uint8_t *frame, size_t len);
static void link_frames_end(void *upper);
static int  link_header(void *upper, uint8_t first_byte, uint32_t size);
static void link_too_large(void *upper, uint32_t size);
static void link_closed(void *upper);
static void link_writable(void *upper);
static void link_timer_cb(tw_timer *t);
static void link_bp_cb(tw_timer *t);

static const conn_ops link_conn_ops = {
	.frame      = link_frame,
	.frames_end = link_frames_end,
	.header     = link_header,
	.too_large  = link_too_large,
	.closed     = link_closed,
	.writable   = link_writable,
};

// Takes over an accepted connection: CONNECT deadline, then reading.
void proto_accept(nmq_proto *p, nmq_conn *c)
{
	nmq_link *l = calloc(1, sizeof(*l));
	if (l == NULL || p->stopping) {
		if (l == NULL) {
			proto_count_alloc_failure(p, "link");
		}
		free(l);
		conn_close(c);
		conn_release(c);
		return;
	}
	l->p    = p;
	l->conn = c;
	l->ver  = MQTT_PROTO_V311;
	atomic_init(&l->last_rx_ms, nmq_clock_ms());
	tw_timer_init(&l->timer, link_timer_cb);
	l->deadline_ms = nmq_clock_ms() + proto_lim(p)->connect_timeout_ms;
	if (proto_links_add(p, l) != NMQ_OK) {
		// Shutting down (or out of memory, counted and logged): refuse
		// the connection.
		free(l);
		conn_close(c);
		conn_release(c);
		return;
	}
	timer_wheel_schedule(p->tw, &l->timer, l->deadline_ms);
	conn_start(c, &link_conn_ops, l);
}

// Frees what the link owns. Runs once the connection is closed and its
// timer cancelled.
static void link_free(nmq_link *l)
{
	if (l->in_alias != NULL) {
		for (uint32_t i = 0; i <= l->in_alias_max; i++) {
			free(l->in_alias[i]);
		}
		free(l->in_alias);
	}
	if (l->out_alias != NULL) {
		for (uint32_t i = 0; i < l->out_alias_len; i++) {
			free(l->out_alias[i]);
		}
		free(l->out_alias);
	}
	if (l->will != NULL) {
		nmq_msg_release(l->will);
	}
	if (!l->username_shared) {
		free(l->username);
	}
	free(l->bp);
	free(l);
}

#define BP_CHECK_MS 5 // how often a paused publisher looks again
#define BP_MAX_MS   1000 // longest pause: a stuck subscriber then drops

// Session pointers that stand for "the memory cap" and "the store's write
// queue" in link_bp.sess.
static char        bp_memory_tag, bp_store_tag;
nmq_session *const LINK_BP_MEMORY = (nmq_session *)(void *)&bp_memory_tag;
nmq_session *const LINK_BP_STORE  = (nmq_session *)(void *)&bp_store_tag;

// Drops what link_bp.sess holds (nothing for the tags).
static void bp_sess_release(nmq_session *s)
{
	if (s != NULL && s != LINK_BP_MEMORY && s != LINK_BP_STORE) {
		nmq_session_release(s);
	}
}

// Pauses reading from l until s has drained; see proto_impl.h.
void link_backpressure(nmq_link *l, nmq_session *s)
{
	nmq_session *none = NULL;
	if (l->bp == NULL) {
		// First pause of this connection (the receive path is the only
		// writer of l->bp; the struct lives until the link is freed).
		link_bp *bp = calloc(1, sizeof(*bp));
		if (bp == NULL) {
			proto_count_alloc_failure(l->p, "backpressure");
			bp_sess_release(s); // no pause: the queue bound holds
			return;
		}
		bp->l = l;
		tw_timer_init(&bp->timer, link_bp_cb);
		__atomic_store_n(&l->bp, bp, __ATOMIC_RELEASE);
	}
	link_bp *bp = l->bp;
	if (!__atomic_compare_exchange_n(
	        &bp->sess, &none, s, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		bp_sess_release(s); // already paused for another one
		return;
	}
	bp->since_ms = nmq_clock_ms();
	if (s == LINK_BP_STORE) {
		long n = atomic_fetch_add(&l->p->m.store_pauses, 1) + 1;
		log_info_rl("proto",
		    "peer=%s event=publisher_paused reason=store_backlog store_pauses=%ld",
		    conn_peer(l->conn), n);
	}
	link_rx_pause(l, LINK_RXP_BP, true);
	timer_wheel_schedule(l->p->tw, &bp->timer, bp->since_ms + BP_CHECK_MS);
}

void link_rx_pause(nmq_link *l, unsigned reason, bool on)
{
	unsigned m = on ? atomic_fetch_or(&l->rx_pause, reason) | reason
	                : atomic_fetch_and(&l->rx_pause, ~reason) & ~reason;
	// Another thread may change the mask between the update and the call
	// below, and its call may land before ours: whoever sees the mask
	// differ from what it last set calls again, so the last call made
	// matches the final mask.
	for (;;) {
		bool paused = m != 0;
		conn_set_rx_paused(l->conn, paused);
		m = atomic_load(&l->rx_pause);
		if ((m != 0) == paused) {
			return;
		}
	}
}

// Back-pressure check (wheel thread): resume once the congested subscriber
// is under half the mark, offline, or the pause has lasted BP_MAX_MS.
static void link_bp_cb(tw_timer *t)
{
	link_bp     *bp  = TW_OWNER(t, link_bp, timer);
	nmq_link    *l   = bp->l;
	nmq_session *s   = __atomic_load_n(&bp->sess, __ATOMIC_ACQUIRE);
	uint64_t     now = nmq_clock_ms();
	if (s == NULL) {
		return;
	}
	bool wait;
	if (s == LINK_BP_MEMORY) {
		uint64_t cap = proto_lim(l->p)->max_message_memory;
		wait         = cap > 0 && nmq_mem_in_use() >= cap / 8 * 7;
	} else if (s == LINK_BP_STORE) {
		wait = proto_store_congested(l->p, true);
	} else {
		bool     online;
		uint32_t n = session_queue_len(s, &online);
		wait       = online && n >= session_congestion_mark(l->p) / 2;
	}
	if (wait && now - bp->since_ms < BP_MAX_MS) {
		timer_wheel_schedule(l->p->tw, &bp->timer, now + BP_CHECK_MS);
		return;
	}
	s = __atomic_exchange_n(&bp->sess, NULL, __ATOMIC_ACQ_REL);
	link_rx_pause(l, LINK_RXP_BP, false);
	bp_sess_release(s);
}

// Keepalive / CONNECT deadline / shutdown grace (wheel thread).
static void link_timer_cb(tw_timer *t)
{
	nmq_link *l   = TW_OWNER(t, nmq_link, timer);
	uint64_t  now = nmq_clock_ms();
	if (l->shutting || !l->connected) {
		if (now >= l->deadline_ms) {
			if (!l->connected && !l->shutting) {
				log_info(
				    "conn", "peer=%s reason=connect_timeout", conn_peer(l->conn));
			}
			conn_close(l->conn);
		} else {
			timer_wheel_schedule(l->p->tw, &l->timer, l->deadline_ms);
		}
		return;
	}
	if (l->keepalive == 0) {
		return;
	}
	uint64_t span = (uint64_t)(l->keepalive * 1000.0 * proto_lim(l->p)->keepalive_multiplier);
	if (atomic_load(&l->connack_wait)) {
		// The broker keeps the client waiting for its CONNACK (a clean
		// start whose delete commits first): the client's keepalive
		// counts from the CONNACK (session_connack_sent restarts it).
		timer_wheel_schedule(l->p->tw, &l->timer, now + span);
		return;
	}
	uint64_t last = atomic_load(&l->last_rx_ms);
	if (now >= last + span) {
		log_info("conn", "peer=%s reason=keepalive_timeout keepalive=%u",
		    conn_peer(l->conn), l->keepalive);
		if (l->ver == MQTT_PROTO_V5 && l->session != NULL) {
			session_lock(l->session);
			if (session_link_locked(l->session) == l) {
				link_send_disconnect(l, MQTT_RC_KEEP_ALIVE_TIMEOUT);
			}
			session_unlock(l->session);
			conn_shutdown(l->conn);
			l->shutting    = true;
			l->deadline_ms = now + SHUTDOWN_GRACE_MS;
			timer_wheel_schedule(l->p->tw, &l->timer, l->deadline_ms);
		} else {
			conn_close(l->conn);
		}
		return;
	}
	timer_wheel_schedule(l->p->tw, &l->timer, last + span);
}

// The property block of a packet the broker sends, or NULL.
static mqtt_props *packet_props(mqtt_packet *pk)
{
	switch (pk->type) {
	case MQTT_CONNACK:
		return &pk->u.connack.props;
	case MQTT_PUBACK:
	case MQTT_PUBREC:
	case MQTT_PUBREL:
	case MQTT_PUBCOMP:
		return &pk->u.ack.props;
	case MQTT_SUBACK:
	case MQTT_UNSUBACK:
		return &pk->u.suback.props;
	case MQTT_DISCONNECT:
		return &pk->u.disconnect.props;
	case MQTT_AUTH:
		return &pk->u.auth.props;
	default:
		return NULL;
	}
}

// Properties the broker leaves out of a packet, a group at a time and in
// this order, until it fits the client's Maximum Packet Size: Reason String
// and User Properties (5.0 [MQTT-3.2.2-19], [MQTT-3.2.2-20], and the same
// rule for every ack, SUBACK, UNSUBACK and DISCONNECT), then the CONNACK
// capabilities whose absence means the value sent (the "available" bytes
// when 1, Receive Maximum 65535, Maximum QoS 2), then the CONNACK extras
// the client can do without (Response Information, Topic Alias Maximum:
// without it the client sends no aliases), and last the limits whose
// absence lets the client send more than the broker takes (Receive
// Maximum, then Maximum Packet Size: a client that goes past them is
// disconnected, 0x93 or 0x95, as any client would be). Server Keep Alive
// and Assigned Client Identifier are never dropped: the client must use
// them.
static const uint64_t fit_drop[] = {
	MQTT_PBIT(MQTT_PROP_REASON_STRING) | MQTT_PBIT(MQTT_PROP_USER_PROPERTY),
	0, // the CONNACK defaults, computed from the values
	MQTT_PBIT(MQTT_PROP_RESPONSE_INFO),
	MQTT_PBIT(MQTT_PROP_TOPIC_ALIAS_MAX),
	MQTT_PBIT(MQTT_PROP_RECEIVE_MAXIMUM),
	MQTT_PBIT(MQTT_PROP_MAX_PACKET_SIZE),
};

// CONNACK properties present with the value their absence means.
static uint64_t connack_defaults(const mqtt_props *pr)
{
	uint64_t d = 0;
	if (pr->retain_available == 1) {
		d |= MQTT_PBIT(MQTT_PROP_RETAIN_AVAILABLE);
	}
	if (pr->wildcard_sub_available == 1) {
		d |= MQTT_PBIT(MQTT_PROP_WILDCARD_SUB_AVAIL);
	}
	if (pr->sub_id_available == 1) {
		d |= MQTT_PBIT(MQTT_PROP_SUB_ID_AVAIL);
	}
	if (pr->shared_sub_available == 1) {
		d |= MQTT_PBIT(MQTT_PROP_SHARED_SUB_AVAIL);
	}
	if (pr->receive_maximum == 65535) {
		d |= MQTT_PBIT(MQTT_PROP_RECEIVE_MAXIMUM);
	}
	if (pr->maximum_qos == 2) {
		d |= MQTT_PBIT(MQTT_PROP_MAXIMUM_QOS);
	}
	return d & pr->present;
}

// Drops optional properties of pk (a copy the caller owns) until it fits
// in max bytes; see fit_drop. Returns the encoded size, or 0 if it cannot
// fit.
static size_t packet_fit(uint8_t ver, mqtt_packet *pk, uint32_t max)
{
	mqtt_props *pr = packet_props(pk);
	size_t      n  = mqtt_encoded_size(ver, pk);
	for (size_t i = 0; n > max && pr != NULL && i < sizeof(fit_drop) / sizeof(fit_drop[0]);
	     i++) {
		uint64_t drop = fit_drop[i];
		if (drop == 0 && pk->type == MQTT_CONNACK) {
			drop = connack_defaults(pr);
		}
		if (pk->type != MQTT_CONNACK) {
			drop &= fit_drop[0];
		}
		if ((pr->present & drop) == 0) {
			continue;
		}
		pr->present &= ~drop;
		if (drop & MQTT_PBIT(MQTT_PROP_USER_PROPERTY)) {
			pr->user_props   = NULL;
			pr->n_user_props = 0;
		}
		n = mqtt_encoded_size(ver, pk);
	}
	return n <= max ? n : 0;
}

// Encodes a control packet into the send buffer; the caller holds the
// connection's tx lock. A packet larger than the client's Maximum Packet
// Size loses optional properties (packet_fit); one that still does not fit
// is not sent and l->tx_too_large is set: the caller closes the connection
// once the lock is released (link_close_if_too_large) (5.0
// [MQTT-3.1.2-24]). Returns false if not sent (that, closing, or out of
// memory).
bool link_put_packet_locked(nmq_link *l, const mqtt_packet *pkt)
{
	size_t      n = mqtt_encoded_size(l->ver, pkt);
	mqtt_packet fit;
	if (n == 0) {
		return false;
	}
	if (l->client_max_packet > 0 && n > l->client_max_packet) {
		fit = *pkt;
		n   = packet_fit(l->ver, &fit, l->client_max_packet);
		if (n == 0) {
			l->tx_too_large = true;
			return false;
		}
		pkt = &fit;
	}
	uint8_t *b = conn_tx_reserve(l->conn, n);
	if (b == NULL || mqtt_encode(b, n, l->ver, pkt) != n) {
		return false;
	}
	conn_tx_commit(l->conn, n);
	return true;
}

// Encodes a control packet into the send buffer and schedules the flush.
// Caller holds the session mutex when attached. Returns false if closing or
// out of memory.
bool link_send_packet(nmq_link *l, const mqtt_packet *pkt)
{
	conn_tx_lock(l->conn);
	bool ok = link_put_packet_locked(l, pkt);
	conn_tx_unlock(l->conn);
	if (ok) {
		conn_tx_flush_later(l->conn);
	} else {
		link_close_if_too_large(l, pkt->type);
	}
	return ok;
}

// After link_put_packet_locked refused a packet too large for the client
// (tx lock released): the connection is closed without sending it, as
// nothing smaller can stand for it.
void link_close_if_too_large(nmq_link *l, uint8_t type)
{
	conn_tx_lock(l->conn);
	bool too_large  = l->tx_too_large;
	l->tx_too_large = false;
	conn_tx_unlock(l->conn);
	if (too_large) {
		log_info("conn",
		    "peer=%s client_id=%s reason=packet_exceeds_client_maximum type=%u max=%u",
		    conn_peer(l->conn), l->session != NULL ? nmq_session_client_id(l->session) : "",
		    type, l->client_max_packet);
		conn_close(l->conn);
	}
}

// Sends a control packet under the session lock; see link.h.
bool link_reply(nmq_link *l, const mqtt_packet *pkt)
{
	session_lock(l->session);
	bool ok = link_send_attached(l, pkt);
	session_unlock(l->session);
	return ok;
}

// A control packet, session lock held: behind a CONNACK that waits for the
// store; see link.h.
bool link_send_attached(nmq_link *l, const mqtt_packet *pkt)
{
	if (link_may_send(l)) {
		return link_send_packet(l, pkt);
	}
	if (l->tx_ended) {
		return false; // nothing after a DISCONNECT [MQTT-3.14.4-1]
	}
	// The CONNACK waits: it is the first waiting ack of the link, and acks
	// go in order, so this one goes after it (or at once if it went
	// meanwhile).
	link_ack(l, pkt, false);
	return !conn_is_closing(l->conn);
}

// The session was taken over from l; see link.h.
nmq_conn *link_take_over_locked(nmq_link *l, bool *v5)
{
	l->taken_over = true;
	*v5           = l->ver == MQTT_PROTO_V5;
	conn_hold(l->conn);
	if (*v5) {
		link_send_disconnect(l, MQTT_RC_SESSION_TAKEN_OVER);
	}
	return l->conn;
}

// Sends a v5 DISCONNECT with a reason (nothing for 3.1.1, nor while the
// CONNACK waits).
void link_send_disconnect(nmq_link *l, uint8_t reason)
{
	if (l->ver != MQTT_PROTO_V5 || !link_may_send(l)) {
		// 3.1.1 has no server DISCONNECT; nothing goes before the
		// CONNACK [MQTT-3.2.0-1] (the connection is closed without it).
		return;
	}
	mqtt_packet pk;
	memset(&pk, 0, sizeof(pk));
	pk.type                = MQTT_DISCONNECT;
	pk.u.disconnect.reason = reason;
	// A reason string says why in words (allowed on DISCONNECT whatever
	// Request Problem Information says); it also lets clients that only
	// parse the reason code of a longer DISCONNECT (paho 1.6) see it.
	const char *why = mqtt_reason_name(reason);
	pk.u.disconnect.props.present |= MQTT_PBIT(MQTT_PROP_REASON_STRING);
	pk.u.disconnect.props.reason_string.p   = (const uint8_t *)why;
	pk.u.disconnect.props.reason_string.len = (uint32_t)strlen(why);
	link_send_packet(l, &pk);
	l->tx_ended = true; // the session's pump sends nothing more
}

// Ends the connection because of the client: a v5 client first gets a
// DISCONNECT with the reason; the will is published (abnormal end).
void link_fail(nmq_link *l, uint8_t reason)
{
	log_info("conn", "peer=%s client_id=%s reason=%s(0x%02x)", conn_peer(l->conn),
	    l->session != NULL ? nmq_session_client_id(l->session) : "", mqtt_reason_name(reason),
	    reason);
	if (l->ver == MQTT_PROTO_V5 && l->connected) {
		if (l->session != NULL) {
			session_lock(l->session);
			link_send_disconnect(l, reason);
			session_unlock(l->session);
		} else {
			link_send_disconnect(l, reason);
		}
		conn_shutdown(l->conn);
		l->shutting    = true;
		l->deadline_ms = nmq_clock_ms() + SHUTDOWN_GRACE_MS;
		timer_wheel_schedule(l->p->tw, &l->timer, l->deadline_ms);
	} else {
		conn_close(l->conn);
	}
}

// Returns the outbound alias for topic, assigning a new one when there is
// room; 0 when none. *fresh says whether the topic must be sent too.
static uint16_t out_alias(nmq_link *l, const char *topic, size_t tlen, bool *fresh)
{
	*fresh       = false;
	uint16_t max = l->client_alias_max < OUT_ALIAS_MAX ? l->client_alias_max : OUT_ALIAS_MAX;
	if (max == 0) {
		return 0;
	}
	for (uint16_t i = 0; i < l->out_alias_len; i++) {
		if (strncmp(l->out_alias[i], topic, tlen) == 0 && l->out_alias[i][tlen] == '\0') {
			return (uint16_t)(i + 1);
		}
	}
	if (l->out_alias_len >= max) {
		return 0;
	}
	if (l->out_alias == NULL) {
		l->out_alias = calloc(max, sizeof(char *));
		if (l->out_alias == NULL) {
			proto_count_alloc_failure(l->p, "topic_alias");
			return 0; // the topic goes in full
		}
	}
	char *t = strndup(topic, tlen);
	if (t == NULL) {
		proto_count_alloc_failure(l->p, "topic_alias");
		return 0;
	}
	l->out_alias[l->out_alias_len++] = t;
	*fresh                           = true;
	return l->out_alias_len;
}

// Whether a PUBLISH of entry e fits this client's Maximum Packet Size; see
// link.h.
bool link_publish_fits(const nmq_link *l, const out_entry *e)
{
	const nmq_msg    *m = e->msg;
	mqtt_publish_head h;
	memset(&h, 0, sizeof(h));
	h.proto       = l->ver;
	h.qos         = e->qos;
	h.topic       = (const uint8_t *)m->topic;
	h.topic_len   = m->topic_len;
	h.packet_id   = 1;
	h.payload_len = m->payload_len;
	if (l->ver == MQTT_PROTO_V5) {
		h.fwd_props_len = m->props_len;
		h.sub_ids       = out_entry_ids(e);
		h.n_sub_ids     = e->n_sub_ids;
		h.has_expiry    = m->expiry_at_ms != 0;
		h.expiry        = UINT32_MAX;
	}
	size_t total = mqtt_publish_total_size(&h);
	return total != 0 && total <= l->client_max_packet;
}

// Encodes one PUBLISH for entry e; see link.h. Caller holds the session
// mutex and the connection's tx lock.
nmq_err link_send_publish(nmq_link *l, const out_entry *e, uint16_t pid, bool dup)
{
	nmq_msg          *m = e->msg;
	mqtt_publish_head h;
	memset(&h, 0, sizeof(h));
	h.proto       = l->ver;
	h.qos         = e->qos;
	h.dup         = dup;
	h.retain      = e->retain;
	h.topic       = (const uint8_t *)m->topic;
	h.topic_len   = m->topic_len;
	h.packet_id   = pid;
	h.payload_len = m->payload_len;
	if (l->ver == MQTT_PROTO_V5) {
		h.fwd_props_len = m->props_len;
		h.sub_ids       = out_entry_ids(e);
		h.n_sub_ids     = e->n_sub_ids;
		if (m->expiry_at_ms != 0) {
			h.has_expiry = true;
			h.expiry     = nmq_msg_remaining(m, nmq_clock_ms());
			if (h.expiry == 0) {
				h.expiry = 1; // expired just now; checked before
			}
		}
	}
	size_t total = mqtt_publish_total_size(&h);
	if (total == 0 || total > l->client_max_packet) {
		return NMQ_ELIMIT;
	}
	if (l->ver == MQTT_PROTO_V5 && l->client_alias_max > 0) {
		bool     fresh;
		uint16_t a = out_alias(l, m->topic, m->topic_len, &fresh);
		if (a != 0) {
			h.topic_alias = a;
			if (!fresh) {
				h.topic_len = 0;
			}
		}
	}
	size_t         hs       = mqtt_publish_head_size(&h);
	const uint8_t *tail     = l->ver == MQTT_PROTO_V5 ? m->props : m->payload;
	size_t         tail_len = m->payload_len + (l->ver == MQTT_PROTO_V5 ? m->props_len : 0);
	bool           copy     = tail_len <= COPY_MAX;
	uint8_t       *b        = conn_tx_reserve(l->conn, hs + (copy ? tail_len : 0));
	if (b == NULL) {
		return NMQ_EBUSY;
	}
	if (mqtt_publish_head_encode(b, hs, &h) != hs) {
		return NMQ_ELIMIT;
	}
	if (copy) {
		memcpy(b + hs, tail, tail_len);
		conn_tx_commit(l->conn, hs + tail_len);
	} else {
		conn_tx_commit(l->conn, hs);
		if (!conn_tx_ref(l->conn, m, tail, tail_len)) {
			return NMQ_EBUSY;
		}
	}
	return NMQ_OK;
}

// One complete frame from the connection (worker thread).
static int link_frame(void *upper, const uint8_t *frame, size_t len)
{
	nmq_link *l = upper;
	atomic_store_explicit(&l->last_rx_ms, nmq_clock_ms(), memory_order_relaxed);
	link_acks_begin(l);
	if (__atomic_load_n(&l->pending, __ATOMIC_ACQUIRE) != NULL) {
		int r = link_pending_hold(l, frame, len);
		if (r != 0) {
			return r > 0 ? 0 : -1;
		}
	}
	return link_dispatch(l, frame, len);
}

// The acks that the read's frames gathered wait for the store.
static void link_frames_end(void *upper)
{
	(void)upper;
	link_acks_flush();
}

// Hands one frame to its handler; see link.h.
int link_dispatch(nmq_link *l, const uint8_t *frame, size_t len)
{
	if (atomic_load_explicit(&l->p->rx_stopped, memory_order_relaxed) && len > 0) {
		// A clean stop (proto_quiesce): no new work (a message, a
		// subscription change, a session) is taken: not handled, hence
		// not acked; the client sends it again after reconnecting. Acks
		// of the broker's own sends and a DISCONNECT still count (a
		// client leaving normally has no will published).
		uint8_t type = frame[0] >> 4;
		if (!l->connected || type == MQTT_PUBLISH || type == MQTT_SUBSCRIBE
		    || type == MQTT_UNSUBSCRIBE) {
			return 0;
		}
	}
	if (!l->connected) {
		return handle_connect(l, frame, len);
	}
	mqtt_packet pk;
	int         rc = mqtt_decode(frame, len, l->ver, &pk);
	if (rc != 0) {
		if (rc == MQTT_RC_UNSUPPORTED_VERSION) {
			rc = MQTT_RC_PROTOCOL_ERROR;
		}
		link_fail(l, (uint8_t)rc);
		return -1;
	}
	switch (pk.type) {
	case MQTT_PUBLISH:
		l->cur_frame = frame; // acl_ask may park it
		l->cur_len   = len;
		return handle_publish(l, &pk, NULL);
	case MQTT_PUBACK:
	case MQTT_PUBREC:
	case MQTT_PUBREL:
	case MQTT_PUBCOMP:
		return handle_pub_ack(l, &pk);
	case MQTT_SUBSCRIBE:
		l->cur_frame = frame;
		l->cur_len   = len;
		return handle_subscribe(l, &pk, NULL, 0);
	case MQTT_UNSUBSCRIBE:
		return handle_unsubscribe(l, &pk);
	case MQTT_PINGREQ: {
		mqtt_packet r;
		memset(&r, 0, sizeof(r));
		r.type = MQTT_PINGRESP;
		link_reply(l, &r);
		return 0;
	}
	case MQTT_DISCONNECT:
		return handle_disconnect(l, &pk);
	case MQTT_CONNECT:
		// A second CONNECT is a protocol error [MQTT-3.1.0-2].
		link_fail(l, MQTT_RC_PROTOCOL_ERROR);
		return -1;
	case MQTT_AUTH:
		// Enhanced authentication was not negotiated.
		link_fail(l, MQTT_RC_PROTOCOL_ERROR);
		return -1;
	default:
		// Server-to-client packets from a client.
		link_fail(l, MQTT_RC_PROTOCOL_ERROR);
		return -1;
	}
}

// The first packet must be CONNECT [MQTT-3.1.0-1]: anything else (an HTTP
// request, TLS on the plain port, garbage) is closed as soon as its first
// byte arrives, without waiting for the body it seems to announce.
static int link_header(void *upper, uint8_t first_byte, uint32_t size)
{
	nmq_link *l = upper;
	if (!l->connected && (first_byte >> 4) != MQTT_CONNECT
	    && __atomic_load_n(&l->pending, __ATOMIC_ACQUIRE) == NULL) {
		log_info("conn", "peer=%s reason=first_packet_not_connect byte=0x%02x",
		    conn_peer(l->conn), first_byte);
		conn_close(l->conn);
		return -1;
	}
	return 0;
}

// A frame larger than max_packet_size was announced.
static void link_too_large(void *upper, uint32_t size)
{
	nmq_link *l = upper;
	log_info("conn", "peer=%s reason=packet_too_large size=%u max=%u", conn_peer(l->conn), size,
	    proto_lim(l->p)->max_packet_size);
	link_fail(l, MQTT_RC_PACKET_TOO_LARGE);
}

// The socket has room again: send more of the session's queue.
static void link_writable(void *upper)
{
	nmq_link    *l = upper;
	nmq_session *s = l->session;
	if (s == NULL || !l->connected) {
		return;
	}
	session_writable(s, l);
}

// The connection ended (worker thread): will, session detach or end, and
// the link is freed.
// Detaches the link from its session, once: the will (now, delayed, or
// not at all), the session's end when it does not outlive the connection,
// and the offline status. Called on the receive path (DISCONNECT, so that a
// client reconnecting at once finds the session already gone) or when the
// connection has closed. The link keeps its session reference until
// link_closed().
void link_detach(nmq_link *l)
{
	nmq_proto   *p = l->p;
	nmq_session *s = l->session;
	if (l->detached || s == NULL) {
		return;
	}
	l->detached = true;
	bool     end;
	nmq_msg *none = NULL;
	// The record written offline without the will (or deleted) and the
	// will's own writes commit in one group: a crash in between neither
	// loses the will nor publishes it twice.
	proto_store_batch(p, true);
	// After a graceful DISCONNECT the will was discarded already.
	nmq_msg *will = session_detach(s, l, l->graceful ? &none : &l->will, l->will_delay_s, &end);
	if (will != NULL) {
		proto_publish_will(p, will);
	}
	if (l->connected) {
		p->ops->client_status(p->app, s, false, l->graceful ? 0 : MQTT_RC_UNSPECIFIED,
		    conn_peer(l->conn), l->username, l->keepalive, l->clean_start);
	}
	log_info("conn", "client_id=%s peer=%s event=disconnected graceful=%d",
	    nmq_session_client_id(s), conn_peer(l->conn), l->graceful);
	if (end) {
		session_end(s);
	}
	proto_store_batch(p, false);
}

// The connection ended (worker thread; no upcall of this connection runs
// any more): detach, then free the link.
static void link_closed(void *upper)
{
	nmq_link  *l = upper;
	nmq_proto *p = l->p;
	// First: waits for a replay of a parked packet that may be running
	// (it may arm the timer), and keeps any later one off the link.
	link_pending_cancel(l);
	timer_wheel_cancel(p->tw, &l->timer);
	if (l->bp != NULL) {
		timer_wheel_cancel(p->tw, &l->bp->timer);
		bp_sess_release(__atomic_exchange_n(&l->bp->sess, NULL, __ATOMIC_ACQ_REL));
	}
	proto_links_remove(p, l);
	if (l->connected) {
		atomic_fetch_sub(&p->m.connections, 1);
	}
	link_detach(l);
	if (l->session != NULL) {
		nmq_session_release(l->session);
		l->session = NULL;
	}
	nmq_conn *c = l->conn;
	link_free(l);
	conn_release(c);
}
