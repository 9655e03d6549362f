// The session module (session.c), as the rest of nng/protocol sees it: a
// session per client id owns its outbound queue (bounded by
// max_mqueue_len), its in-flight window (min(Receive Maximum,
// max_inflight_window)) and packet ids, its inbound QoS 2 state, its expiry
// and its delayed will. The struct is private (session_impl.h); the link
// and the packet handlers change a session only through these functions,
// so that one module decides, and will persist, every change.
//
// Locking: functions named *_locked need the session lock (session_lock);
// the others take it themselves. Lock order: session table -> session ->
// connection (see proto.h).
#ifndef NMQ_SESSION_H
#define NMQ_SESSION_H

#include "nng/core/nmq_err.h"
#include "nng/protocol/proto_impl.h"

// Subscription identifiers an entry keeps inline (no allocation), and at
// most (the router merges up to 32 per delivery).
#define SUBIDS_INLINE 4
#define SUBIDS_MAX    32

// A message waiting in a session's queue or in flight, as handed to
// link_send_publish(). Up to SUBIDS_INLINE subscription identifiers live
// in ids.in; more in ids.heap, a malloc'd array the entry owns (moved with
// the struct, freed by whoever frees the entry: session.c). Read them with
// out_entry_ids().
typedef struct out_entry {
	nmq_msg *msg;
	uint64_t seq; // arrival order across the two queues
	uint8_t  qos;
	bool     retain;
	uint8_t  n_sub_ids;
	union {
		uint32_t  in[SUBIDS_INLINE];
		uint32_t *heap; // n_sub_ids > SUBIDS_INLINE
	} ids;
} out_entry;

// The n_sub_ids subscription identifiers of e.
static inline const uint32_t *out_entry_ids(const out_entry *e)
{
	return e->n_sub_ids > SUBIDS_INLINE ? e->ids.heap : e->ids.in;
}

// ---------------------------------------------------------------------------
// Life cycle

// Returns a new session of ref 1, not in the table, or NULL (out of
// memory). owner: the user name of the creating CONNECT (owner_len bytes,
// no NUL inside), or NULL.
nmq_session *session_alloc(
    nmq_proto *p, const char *client_id, const uint8_t *owner, size_t owner_len);
// True when the user name u (NULL: none) is the one that created s.
bool session_owned_by(const nmq_session *s, const uint8_t *u, size_t len);
// The user name that created s, or NULL.
const char *session_owner(const nmq_session *s);

// What session_open() found.
typedef struct session_open_res {
	nmq_session *s; // locked, and held for the caller's link
	bool         present; // an existing session is resumed
	// The connection the session was taken from (held; NULL if none):
	// already told (v5 DISCONNECT 0x8E), to be closed by the caller once
	// the session lock is released.
	nmq_conn *old_conn;
	bool      old_v5;
	// A session discarded by clean start (held; NULL if none), out of the
	// table: the caller finishes it with session_discard() once the
	// session lock is released.
	nmq_session *ended;
	// ended had a stored record: its delete is queued in the store.
	bool ended_stored;
} session_open_res;

// The session part of a CONNECT: finds the session of client_id, takes it
// over from its current connection, discards it on clean start
// [MQTT-3.1.2-4] or when it lasts only as long as its connection (expiry
// 0, [MQTT-3.1.2-6]), or resumes it (a pending delayed will is then dropped),
// and creates one if needed. With limits.client_id_owner_check, a session
// created by another user is not resumed. Returns NMQ_OK with r filled
// (r->s locked: the caller sends CONNACK, calls session_attach_locked()
// and unlocks), NMQ_EACCES (another user's session; nothing changed) or
// NMQ_ENOMEM (logged).
nmq_err session_open(nmq_proto *p, const char *client_id, const uint8_t *owner, size_t owner_len,
    bool clean_start, session_open_res *r);
// Attaches link l to s, opened by a CONNECT of protocol ver with the given
// session expiry and the client's Receive Maximum: the in-flight window
// becomes min(receive_max, max_inflight_window) (at least 1), in-flight
// messages are resent (DUP) and the queue is pumped.
void session_attach_locked(
    nmq_session *s, nmq_link *l, uint8_t ver, uint32_t expiry_s, uint16_t receive_max);
// The CONNACK of conn, which waited for the store (nmq_link.connack_wait),
// went: if conn is still s's open connection, what waited for it is sent
// (in-flight messages, the queue). No locks held.
void session_connack_sent(nmq_session *s, const nmq_conn *conn);
// Finishes a session that session_open() discarded: publishes its pending
// will, drops its state, tells the application, releases it. No locks held.
void session_discard(nmq_session *s);
// Sets the session expiry interval (v5 DISCONNECT) if l is still the
// session's connection.
void session_set_expiry(nmq_session *s, const nmq_link *l, uint32_t expiry_s);
// Detaches l from s (if l is still its connection: s goes offline, and
// *end says it must end now, its expiry interval being 0). *will is the
// link's will after an abnormal end (NULL: none, or a graceful end): with
// no delay or a session that ends it is returned, to publish now; with a
// delay the session keeps it (and publishes it when the delay or the
// session ends); when a takeover ended the session it is returned too;
// after a takeover that resumed the session within the delay it stays in
// *will (no will). Returns the will to publish now, or NULL. No locks held.
nmq_msg *session_detach(
    nmq_session *s, nmq_link *l, nmq_msg **will, uint32_t will_delay_s, bool *end);
// Ends the session: removes it from the table, tells the application,
// publishes a pending will. Called without locks.
void session_end(nmq_session *s);
// At shutdown (proto_free): marks s ended and drops its state and pending
// will, unpublished; the caller tells the application and releases the
// table's reference.
void session_drop(nmq_session *s);

// ---------------------------------------------------------------------------
// Locking and the attached connection

void session_lock(nmq_session *s);
void session_unlock(nmq_session *s);
bool session_trylock(nmq_session *s);
// The attached link, NULL while offline. Caller holds the lock.
nmq_link *session_link_locked(const nmq_session *s);

// ---------------------------------------------------------------------------
// Outbound QoS: acks from the client. Caller holds the lock. Each returns
// false if no message with that packet id waits for that ack.

// PUBACK: completes a QoS 1 flow and sends more.
bool session_puback_locked(nmq_session *s, uint16_t pid);
// PUBREC: the message is delivered. Returns SESSION_PUBREL_NOW when the
// caller answers PUBREL at once (also for a repeated PUBREC of a flow
// awaiting PUBCOMP), SESSION_PUBREL_HELD when the session sends the PUBREL
// itself once the store has committed the PUBREC (a persistent session
// with the durable store), SESSION_PUBREC_DONE when failed (a v5 reason
// >= 0x80, which ends the flow) or SESSION_PUBREC_UNKNOWN.
enum {
	SESSION_PUBREC_UNKNOWN = 0,
	SESSION_PUBREL_NOW,
	SESSION_PUBREL_HELD,
	SESSION_PUBREC_DONE,
};
int session_pubrec_locked(nmq_session *s, uint16_t pid, bool failed);
// PUBCOMP: completes a QoS 2 flow and sends more.
bool session_pubcomp_locked(nmq_session *s, uint16_t pid);
// The socket of l has room again: sends more of the queue if l is still
// the session's connection.
void session_writable(nmq_session *s, nmq_link *l);

// ---------------------------------------------------------------------------
// Inbound QoS 2: a packet id is recorded from PUBLISH to PUBREL, so that a
// resent PUBLISH is acknowledged again but not routed again. At most
// limits.max_awaiting_rel ids wait; ids older than await_rel_timeout_s are
// forgotten (counted in await_rel_expired) when that bound is reached.
// Caller holds the lock.

// Records pid, received at now_ms. Returns NMQ_OK (new), NMQ_EEXIST (pid
// waits already: a duplicate), NMQ_ELIMIT (max_awaiting_rel ids wait) or
// NMQ_ENOMEM (counted and logged).
nmq_err session_qos2_record_locked(nmq_session *s, uint16_t pid, uint64_t now_ms);
// True if pid waits for its PUBREL.
bool session_qos2_pending_locked(const nmq_session *s, uint16_t pid);
// Forgets pid (PUBREL, or a flow the application refused). Returns true
// if it was waiting.
bool session_qos2_release_locked(nmq_session *s, uint16_t pid);
// True when s's state is written to the durable store (a persistent
// session with the store on). Caller holds the lock.
bool session_stored_locked(const nmq_session *s);

// ---------------------------------------------------------------------------
// Back-pressure: an online subscriber whose queue passes this many
// messages makes the publisher that filled it pause (when the bound is
// large enough for a pause to make sense); it resumes below half of it.
uint32_t session_congestion_mark(const nmq_proto *p);
// Returns (and forgets) the first congested session a delivery on this
// thread met since the last call, held; NULL if none.
nmq_session *session_congestion_take(void);
// Messages queued (not in flight) for s; *online whether it is attached.
uint32_t session_queue_len(nmq_session *s, bool *online);

// ---------------------------------------------------------------------------
// Introspection (proto_sessions_snapshot)

// Counts a PUBLISH received from the client of s (lock-free).
void session_count_received(nmq_session *s);
// Fills the facts of out (all but s and the strings) under the session
// lock. Returns false if s has ended.
bool session_info(nmq_session *s, proto_session_info *out);

// Publishes a will message through the application and releases it.
void proto_publish_will(nmq_proto *p, nmq_msg *will);
// Opens (begin) or closes a group of this thread's store writes that
// commit together (see session.c); nests; no-op without a store.
void proto_store_batch(nmq_proto *p, bool begin);

#endif // NMQ_SESSION_H
