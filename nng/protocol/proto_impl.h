// Private structures of the protocol layer, shared by proto.c, session.c,
// link.c and the handle_*.c files. Not for use outside nng/protocol/.
#ifndef NMQ_PROTO_IMPL_H
#define NMQ_PROTO_IMPL_H

#include <pthread.h>

#include "nng/core/nmq_mutex.h"
#include "nng/protocol/proto.h"

#define SUBIDS_INLINE 4

// A message waiting in a session's queue or in flight.
typedef struct out_entry {
	nmq_msg *msg;
	uint64_t seq; // arrival order across the two queues
	uint8_t  qos;
	bool     retain;
	uint8_t  n_sub_ids;
	uint32_t sub_ids[SUBIDS_INLINE];
} out_entry;

// A ring of queued entries.
typedef struct out_ring {
	out_entry *v;
	uint32_t   head;
	uint32_t   len;
	uint32_t   cap;
} out_ring;

enum infl_state {
	INFL_WAIT_PUBACK = 1,
	INFL_WAIT_PUBREC,
	INFL_WAIT_PUBCOMP, // PUBREL sent; msg already released
};

typedef struct infl_entry {
	out_entry e;
	uint16_t  pid;
	uint8_t   state;
	uint64_t  sent_ms;
} infl_entry;

typedef struct rel_entry {
	uint16_t pid;
	uint64_t at_ms;
} rel_entry;

typedef struct nmq_link nmq_link;

// A session, keyed by client id. Everything below `mtx` (and expiry_s) is
// guarded by it. Ordered by size to keep it small (one per client).
struct nmq_session {
	atomic_int refs;
	uint32_t   expiry_s; // (mtx) session expiry interval; UINT32_MAX never
	nmq_proto *p;
	uint64_t   id;
	void      *app_data;

	nmq_mutex mtx;
	nmq_link *link; // current connection, NULL while offline
	uint64_t  offline_since_ms;

	// Outbound queues, together bounded by limits.max_mqueue_len: QoS 1/2
	// messages wait for the in-flight window, QoS 0 ones only for the
	// socket, so QoS 0 keeps flowing while the window is full [MQTT-4.9.0-3].
	// With both flowing they leave in arrival order (seq).
	out_ring q; // QoS 1/2
	out_ring q0; // QoS 0
	uint64_t q_seq;

	// In-flight outbound QoS 1/2, in send order (array from infl_start).
	infl_entry *infl;
	uint32_t    infl_start;
	uint32_t    infl_len; // entries from infl_start
	uint32_t    infl_cap;
	uint32_t    infl_max;

	// Inbound QoS 2 packet ids awaiting PUBREL.
	rel_entry *rel;
	uint32_t   rel_len;
	uint32_t   rel_cap;

	// A delayed will waiting for its time (or the session end).
	nmq_msg *will;
	uint64_t will_at_ms;

	tw_timer timer; // expiry, will delay and QoS retry
	uint64_t timer_at;

	uint16_t next_pid;
	uint8_t  ver;
	bool     ended; // removed from the table
	bool     has_owner; // the creating CONNECT had a user name
	// The client id, NUL-terminated, then (has_owner) the user name of the
	// CONNECT that created the session, both allocated with the struct.
	char client_id[];
};

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
// guarded by the session mutex once attached. Ordered by size to keep it
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
	uint32_t      will_delay_s; // rx
	uint32_t      client_max_packet; // s (read-mostly after CONNECT)
	uint32_t      links_idx; // position in p->links (links_mtx)
	uint16_t      keepalive; // rx
	uint16_t      in_alias_max; // rx
	uint16_t      client_receive_max; // s
	uint16_t      client_alias_max; // s
	uint16_t      out_alias_len; // s
	uint8_t       ver; // rx
	bool          shutting; // timer: close hard at deadline
	bool          connected; // rx
	bool          graceful; // rx: DISCONNECT 0x00 received
	bool          session_zero_expiry; // rx: CONNECT had expiry 0 (v5)
	bool          clean_start; // rx
	bool          request_problem_info; // s
	bool          taken_over; // s
	bool          detached; // rx path: link_detach() done
	bool          username_shared; // username points into the session
	bool          tx_too_large; // tx lock: a packet did not fit client_max_packet
};

// A set of limits, immutable once published; a reload publishes a new one
// and keeps the old ones until proto_free (reloads are rare and the struct
// is small), so a reader never sees a half-written set.
typedef struct lim_node {
	proto_limits     lim;
	struct lim_node *prev;
} lim_node;

struct nmq_proto {
	lim_node            *lim; // current set (atomic pointer)
	timer_wheel         *tw;
	workq               *wq;
	const proto_app_ops *ops;
	void                *app;
	conn_env             env;
	proto_metrics        m;
	atomic_ullong        next_session_id;

	pthread_mutex_t tbl_mtx;
	nmq_session   **tbl; // open hash by client id
	size_t          tbl_cap;
	size_t          tbl_len;

	// Live links, for shutdown.
	pthread_mutex_t links_mtx;
	nmq_link      **links;
	size_t          links_len;
	size_t          links_cap;
	bool            stopping;
};

// Back-pressure (session.c): an online subscriber whose queue passes this
// many messages makes the publisher that filled it pause (when the bound is
// large enough for a pause to make sense); it resumes below half of it.
uint32_t session_congestion_mark(const nmq_proto *p);
// Returns (and forgets) the first congested session a delivery on this
// thread met since the last call, held; NULL if none.
nmq_session *session_congestion_take(void);
uint32_t     session_queue_len(nmq_session *s, bool *online);

// The current limits (any thread).
static inline const proto_limits *proto_lim(const nmq_proto *p)
{
	return &__atomic_load_n(&p->lim, __ATOMIC_ACQUIRE)->lim;
}

// proto.c: session table
nmq_session *proto_table_find(nmq_proto *p, const char *client_id);
void         proto_table_insert(nmq_proto *p, nmq_session *s);
void         proto_table_remove(nmq_proto *p, nmq_session *s);
void         proto_count_drop(nmq_proto *p, atomic_long *why);
// Counts n drops at once (total and why).
void proto_count_drops(nmq_proto *p, atomic_long *why, size_t n);
bool proto_links_add(nmq_proto *p, nmq_link *l); // false when stopping
void proto_links_remove(nmq_proto *p, nmq_link *l);

// session.c
// owner: the user name of the creating CONNECT (owner_len bytes, no NUL
// inside), or NULL.
nmq_session *session_alloc(
    nmq_proto *p, const char *client_id, const uint8_t *owner, size_t owner_len);
// True when the user name u (NULL: none) is the one that created s.
bool session_owned_by(const nmq_session *s, const uint8_t *u, size_t len);
// The user name that created s, or NULL.
const char *session_owner(const nmq_session *s);
// Discards queued and in-flight state (clean start). Caller holds mtx.
void session_clear_locked(nmq_session *s);
// Sends what the window and socket allow. Caller holds mtx; s->link set.
void session_pump_locked(nmq_session *s);
// Resends in-flight messages (DUP) and PUBRELs in order. Caller holds mtx.
void session_resend_locked(nmq_session *s, bool only_old);
// Ends the session: removes it from the table, tells the application,
// publishes a pending will. Called without locks.
void session_end(nmq_session *s);
// Re-arms the session timer for the earliest of expiry, will and retry.
// Caller holds mtx.
void session_timer_update_locked(nmq_session *s);
// Ack handling, caller holds mtx. Return false if the packet id was unknown.
bool session_puback_locked(nmq_session *s, uint16_t pid);
bool session_pubrec_locked(nmq_session *s, uint16_t pid, bool failed);
bool session_pubcomp_locked(nmq_session *s, uint16_t pid);

// link.c: writing control packets (caller holds the session mutex if
// attached, or is on the receive path before attachment).
bool link_send_packet(nmq_link *l, const mqtt_packet *pkt);
bool link_put_packet_locked(nmq_link *l, const mqtt_packet *pkt); // tx lock held
// Closes l if link_put_packet_locked refused a packet (of this type) as too
// large for the client; call without the tx lock.
void link_close_if_too_large(nmq_link *l, uint8_t type);
void link_send_disconnect(nmq_link *l, uint8_t reason);
// Encodes one PUBLISH for an out_entry. Returns 1 sent, 0 no room/closing,
// -1 the message is too large for this client.
int link_send_publish(nmq_link *l, const out_entry *e, uint16_t pid, bool dup);
// Protocol error: v5 DISCONNECT with reason then close; v3 close.
void link_fail(nmq_link *l, uint8_t reason);
void link_detach(nmq_link *l);
// Pauses reading from l until s drains (consumes the reference to s), or,
// with s = LINK_BP_MEMORY, until all messages together hold less than 7/8
// of mqtt.max_message_memory; at most 1 s at a time either way.
void                      link_backpressure(nmq_link *l, nmq_session *s);
extern nmq_session *const LINK_BP_MEMORY;

// handle_*.c, on the receive path
int handle_connect(nmq_link *l, const uint8_t *frame, size_t len);
int handle_publish(nmq_link *l, const mqtt_packet *pkt);
int handle_subscribe(nmq_link *l, const mqtt_packet *pkt);
int handle_unsubscribe(nmq_link *l, const mqtt_packet *pkt);
int handle_disconnect(nmq_link *l, const mqtt_packet *pkt);

// Builds a shared message (handle_connect.c).
nmq_msg *proto_msg_build(uint8_t ver, mqtt_bytes topic, const mqtt_props *in, mqtt_bytes payload,
    uint8_t qos, bool retain, uint64_t origin);

// Will publication (session.c)
void proto_publish_will(nmq_proto *p, nmq_msg *will);

#endif // NMQ_PROTO_IMPL_H
