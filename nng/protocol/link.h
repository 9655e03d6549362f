// The per-connection protocol state (link.c) and the packet handlers
// (handle_*.c) that the link dispatches to. Private to nng/protocol.
#ifndef NMQ_LINK_H
#define NMQ_LINK_H

#include "nng/protocol/proto_impl.h"
#include "nng/protocol/session.h"

// Back-pressure state of a link, allocated at its first pause (most
// connections never pause): reading is paused while `sess` (held; set by
// the receive path, cleared by the timer, both atomically) has a nearly
// full queue.
typedef struct link_bp {
	tw_timer     timer;
	nmq_link    *l;
	nmq_session *sess;
	uint64_t     since_ms;
} link_bp;

// Per-connection protocol state. Fields marked rx are touched only on the
// connection's receive path (one worker at a time); fields marked s are
// guarded by the session lock once attached. Ordered by size to keep it
// small (one per connection).
struct nmq_link {
	nmq_proto    *p;
	nmq_conn     *conn; // held until the connection closes
	tw_timer      timer;
	atomic_ullong last_rx_ms;
	uint64_t      deadline_ms; // keepalive or CONNECT deadline; timer only
	nmq_session  *session; // rx; held while attached
	char        **in_alias; // rx: inbound topic aliases, 1..max_topic_alias
	nmq_msg      *will; // rx
	char         *username; // rx
	char        **out_alias; // s: outbound aliases, topics[i] has alias i + 1
	link_bp      *bp; // rx writes it once; NULL until the first pause
	// QoS 1/2 acks of this connection waiting for the store's commit
	// (incremented on rx, decremented by the job that sends them): while
	// any waits, later acks go behind it (link_ack).
	atomic_uint acks_waiting;
	// Why reading is paused (LINK_RXP_* bits, link_rx_pause): back-pressure
	// and a parked packet pause and resume independently, so that the end
	// of one never resumes reading that the other still needs paused.
	atomic_uint rx_pause;
	// The parking token (link_park.c): made at the first CONNECT or
	// packet parked for the application's answer, then kept (atomic
	// pointer; the link holds one reference until it closes). NULL: none.
	proto_pending *pending;
	const uint8_t *cur_frame; // rx: the frame being handled (link_dispatch)
	size_t         cur_len; // rx
	uint32_t       will_delay_s; // rx
	uint32_t       client_max_packet; // s (read-mostly after CONNECT)
	uint32_t       links_idx; // position in p->links (links_mtx)
	uint16_t       keepalive; // rx
	uint16_t       local_port; // rx: the accepting listener's port (0: unknown)
	uint16_t       in_alias_max; // rx
	uint16_t       client_receive_max; // s
	uint16_t       client_alias_max; // s
	uint16_t       out_alias_len; // s
	uint8_t        ver; // rx
	bool           shutting; // timer: close hard at deadline
	bool           connected; // rx
	bool           graceful; // rx: DISCONNECT 0x00 received
	bool           session_zero_expiry; // rx: CONNECT had expiry 0 (v5)
	bool           clean_start; // rx
	bool           request_problem_info; // s
	bool           taken_over; // s
	bool           detached; // rx path: link_detach() done
	bool           username_shared; // username points into the session
	bool           tx_too_large; // tx lock: a packet did not fit client_max_packet
	bool           superuser; // rx: the application marked the client at CONNECT
	bool           bridge; // rx: a 3.1/3.1.1 CONNECT with the bridge marker
	// s: the connection ends with nothing more sent on it: a DISCONNECT
	// was queued (nothing follows it [MQTT-3.14.4-1]: no PUBLISH from the
	// session's pump, no ack), or a failed commit's ack ended it (no later
	// waiting ack is sent, store_ack_job).
	bool tx_ended;
	// The CONNACK waits for the store (link_ack): until it has gone, nothing
	// else is sent on the link [MQTT-3.2.0-1]: deliveries stay queued in the
	// session (its pump waits), control packets go behind the CONNACK
	// (link_send_attached) and a DISCONNECT is not sent. Set at CONNECT under
	// the session lock, cleared under it by session_connack_sent().
	_Atomic bool connack_wait;
};

// Whether anything may go on l now (caller holds the session lock): not
// while its CONNACK waits for the store (connack_wait: PUBLISHes stay
// queued, control packets go behind the CONNACK through link_ack), nor
// once it ended (tx_ended: nothing follows a DISCONNECT). The one test of
// the session's pump and resend, link_send_attached and
// link_send_disconnect.
static inline bool link_may_send(nmq_link *l)
{
	return !l->tx_ended && !atomic_load(&l->connack_wait);
}

// Writing control packets (caller holds the session lock if attached, or
// is on the receive path before attachment). Return false if closing or
// out of memory.
bool link_send_packet(nmq_link *l, const mqtt_packet *pkt);
bool link_put_packet_locked(nmq_link *l, const mqtt_packet *pkt); // tx lock held
// Closes l if link_put_packet_locked refused a packet (of this type) as too
// large for the client; call without the tx lock.
void link_close_if_too_large(nmq_link *l, uint8_t type);
// Sends an ack of an inbound PUBLISH flow (PUBACK, PUBREC, PUBCOMP) from
// the receive path, caller holding the session lock: at once, or, when
// `stored` (routing wrote to the durable store) or an earlier ack still
// waits for the store, once everything queued in the store so far has
// committed (posted back to a worker; acks stay in order).
void link_ack(nmq_link *l, const mqtt_packet *pkt, bool stored);
// link_ack for any ack (also SUBACK and UNSUBACK, whose codes are copied).
// Returns true when the ack waits for the store: after(session, after_arg,
// durable) is then called once, on a worker without the session lock,
// after the ack was sent or given up (the connection gone or closed);
// durable is false when the commit failed, or an earlier ack's failed
// commit ended the connection (the ack was not sent and the connection is
// ending). Returns false when the ack went at once or could
// not wait (the connection is then closed): after is not called; the
// caller goes on with what it does.
typedef void (*link_after_fn)(nmq_session *s, void *arg, bool durable);
bool link_ack_then(
    nmq_link *l, const mqtt_packet *pkt, bool stored, link_after_fn after, void *after_arg);
// The frames of one read of l's socket are handled on this thread from
// now on: the plain PUBACKs that wait for the store are gathered
// (link_ack_then) until link_acks_flush, called when the read is handled,
// gives them to the store together.
void link_acks_begin(nmq_link *l);
void link_acks_flush(void);

// Sends a control packet from the receive path of an attached link, under
// the session lock (so that it is ordered with the session's PUBLISH
// stream).
bool link_reply(nmq_link *l, const mqtt_packet *pkt);
// link_reply with the session lock held: at once, or, while the CONNACK
// waits for the store (connack_wait), behind it (link_ack). Returns false
// if closing or out of memory.
bool link_send_attached(nmq_link *l, const mqtt_packet *pkt);
void link_send_disconnect(nmq_link *l, uint8_t reason);
// Encodes one PUBLISH for an out_entry. Caller holds the session lock and
// the connection's tx lock. Returns NMQ_OK (queued), NMQ_EBUSY (no room,
// or closing: try later) or NMQ_ELIMIT (too large for this client).
nmq_err link_send_publish(nmq_link *l, const out_entry *e, uint16_t pid, bool dup);
// Whether link_send_publish would take e as not too large for this client
// (the size without a topic alias). Caller holds the session lock.
bool link_publish_fits(const nmq_link *l, const out_entry *e);
// Protocol error: v5 DISCONNECT with reason then close; v3 close.
void link_fail(nmq_link *l, uint8_t reason);
void link_detach(nmq_link *l);
// l's session was taken over by another connection (caller holds the
// session lock): marks l, tells a v5 client (DISCONNECT 0x8E) and returns
// its connection, held, for the caller to close after the locks; *v5 says
// whether to shut down (v5) or close (3.1.1).
nmq_conn *link_take_over_locked(nmq_link *l, bool *v5);
// Pauses reading from l until s drains (consumes the reference to s), or,
// with s = LINK_BP_MEMORY, until all messages together hold less than 7/8
// of mqtt.max_message_memory, or, with s = LINK_BP_STORE, until the
// durable store's write queue is under a quarter of its bound; at most 1 s
// at a time in every case.
void                      link_backpressure(nmq_link *l, nmq_session *s);
extern nmq_session *const LINK_BP_MEMORY;
extern nmq_session *const LINK_BP_STORE;

// The packet handlers, on the receive path. Each returns 0, or -1 when
// the connection is ended (the conn_ops.frame contract).
int handle_connect(nmq_link *l, const uint8_t *frame, size_t len);
// handle_connect with the application's answer to a parked CONNECT
// (answer >= 0: a reason code, maybe with PROTO_AUTH_SUPERUSER) or -1.
int link_connect_run(nmq_link *l, const uint8_t *frame, size_t len, int answer);

// Parking (link_park.c, decisions/0018 and 0022). link_park copies the
// packet being handled (frame, len; a CONNECT when connect, else a
// PUBLISH or SUBSCRIBE with the n_known answers already given for its
// first topics), pauses reading (a CONNECT; behind a PUBLISH or SUBSCRIBE
// only once 64 KiB are held) and returns the token to hand to the
// application, or NULL when memory runs out (counted and logged). Called
// on the receive path, or from a replay; the handler then returns 0 at
// once and touches the link no more. The answer (proto_connect_resume,
// proto_acl_resume) replays the packet on a worker, then the frames held
// meanwhile, in order.
proto_pending *link_park(nmq_link *l, bool connect, const uint8_t *frame, size_t len,
    const int *verdicts, uint32_t n_known);
// A frame that arrived while a packet of l is parked (link_frame): held, in
// order, and handed up after the parked one; a PINGREQ behind a PUBLISH or
// SUBSCRIBE is answered at once instead. Returns 1 (held or answered), 0 (not
// parked any more: handle it now) or -1 (too much held, or a replay ended
// the connection: closed).
int link_pending_hold(nmq_link *l, const uint8_t *frame, size_t len);
// The connection closed (link_closed): a parked packet is forgotten and
// the link's reference dropped.
void link_pending_cancel(nmq_link *l);
// Hands a frame up as link_frame does (the replay of held frames).
int link_dispatch(nmq_link *l, const uint8_t *frame, size_t len);
// Replays a parked PUBLISH or SUBSCRIBE: verdicts[0..n_known) and answer
// (for topic n_known) stand for the application's acl_ask answers.
int link_replay(nmq_link *l, const uint8_t *frame, size_t len, const int *verdicts,
    uint32_t n_known, int answer);
// Asks the application's acl_ask about topic number idx of the packet being
// handled (verdicts[0..idx) the answers for the topics before it). Returns
// the answer (PROTO_ACL_NONE, PROTO_ACL_ALLOW or a refusing code), or
// PROTO_AUTH_PENDING when the packet was parked (return 0 at once).
int link_acl_ask(nmq_link *l, const proto_who *who, uint8_t access, const char *topic, size_t len,
    const int *verdicts, uint32_t idx);
// verdicts: the acl_ask answers of each topic when replaying (NULL: ask).
int handle_publish(nmq_link *l, const mqtt_packet *pkt, const int *verdicts);
// PUBACK, PUBREC, PUBREL and PUBCOMP (handle_publish.c).
int handle_pub_ack(nmq_link *l, const mqtt_packet *pkt);
// verdicts[0..n_known): the acl_ask answers of the first filters (replay).
int handle_subscribe(nmq_link *l, const mqtt_packet *pkt, const int *verdicts, uint32_t n_known);
int handle_unsubscribe(nmq_link *l, const mqtt_packet *pkt);
int handle_disconnect(nmq_link *l, const mqtt_packet *pkt);

// proto_msg_build (handle_publish.c) is declared in proto.h: the bridge
// builds its received messages with it too.

// Reasons for pausing a link's reading (nmq_link.rx_pause).
enum {
	LINK_RXP_BP   = 1u << 0, // back-pressure (link.c)
	LINK_RXP_PARK = 1u << 1, // a parked packet (link_park.c)
};

// Sets (on) or clears one reason of rx_pause and pauses the connection's
// reading while any reason is set. Any thread: concurrent calls converge
// on the state of the final mask.
void link_rx_pause(nmq_link *l, unsigned reason, bool on);

#endif // NMQ_LINK_H
