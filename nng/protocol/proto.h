// The MQTT protocol layer: one state machine per connection (CONNECT,
// keepalive, topic aliases, will), one session per client id (QoS 1/2
// windows, packet ids, the bounded outbound queue, expiry), all timers on
// one wheel. Broker policy (authentication, routing, retained messages,
// $SYS) is delegated to the application through proto_app_ops.
//
// Threads:
// - Frames of one connection are handled on a worker thread, one batch at a
//   time (see conn.h). Application callbacks run on that thread and may
//   call nmq_session_deliver() on any session, the sender's included.
// - Locks: session table -> session -> connection, in that order. No lock
//   is held while an application callback runs, except where noted.
// - Timer callbacks (keepalive, expiry, retry, will delay) run on the wheel
//   thread and only close connections or post work.
#ifndef NMQ_PROTO_H
#define NMQ_PROTO_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "nng/codec/mqtt_codec.h"
#include "nng/core/msg.h"
#include "nng/core/nmq_err.h"
#include "nng/protocol/timer_wheel.h"
#include "nng/transport/conn.h"

typedef struct nmq_session nmq_session;
typedef struct nmq_proto   nmq_proto;

// Reloadable limits (the mqtt section). A reload publishes a new immutable
// set (proto_set_limits); readers take the current one atomically.
typedef struct proto_limits {
	uint32_t max_packet_size;
	uint32_t client_max_packet_size;
	uint32_t max_mqueue_len;
	uint32_t max_inflight_window;
	uint32_t max_awaiting_rel;
	uint32_t await_rel_timeout_s;
	uint32_t retry_interval_s;
	double   keepalive_multiplier;
	uint16_t max_topic_alias;
	uint32_t connect_timeout_ms;
	uint32_t max_keepalive; // seconds; 65535 = no cap
	uint32_t max_connections; // 0 = no limit
	uint32_t max_topic_length; // bytes, topic names and filters
	uint32_t max_topic_levels; // 0 = no limit
	// A session is resumed only by the user (user name, or none) whose
	// CONNECT created it: a CONNECT without clean start and with another
	// user name is refused (0x85 / 0x02). Set while an ACL is in force,
	// where resuming would hand one user's queued messages and
	// subscriptions to another. (A clean start discards the session, as
	// MQTT says, whoever asks.)
	bool client_id_owner_check;
	// mqtt.max_message_memory: bytes all messages may hold (0 = no cap).
	uint64_t max_message_memory;
} proto_limits;

// What the application learns of a connecting client: plain facts, valid
// during the callback. The protocol layer asks the transport (the
// listener that accepted the connection) so that the application never
// handles a transport object.
typedef struct proto_client_info {
	const char    *client_id;
	const uint8_t *username; // NULL if absent
	uint32_t       username_len;
	const uint8_t *password; // NULL if absent
	uint32_t       password_len;
	const char    *peer;
	const char    *listener; // the accepting listener's name; "" if none
	const char    *tls_cn; // common name of a verified TLS peer; "" if none
	const char    *tls_subject; // its subject DN ("CN=a, O=b"); "" if none
	uint8_t        proto_ver;
	uint16_t       keepalive; // as the CONNECT asked
	// false: a TLS listener with verify_peer, and the client presented no
	// certificate that verified (or none while fail_if_no_peer_cert).
	bool tls_peer_ok;
	// The accepting listener has more connections open than its
	// max_connections allows (this one included).
	bool     listener_over_limit;
	uint16_t local_port; // the accepting listener's port; 0 if unknown
	// The protocol layer's own (for proto_connect_defer); not for the app.
	void *defer_ctx;
	// Out: authenticate sets *superuser = true to mark an accepted client
	// as a superuser (proto_who.superuser of its packets).
	bool *superuser;
} proto_client_info;

// Returned by authenticate when the answer comes later (after
// proto_connect_defer): not an MQTT reason code.
#define PROTO_AUTH_PENDING 0xFF

// A CONNECT waiting for the application's answer.
typedef struct proto_pending proto_pending;

// Called from authenticate (only there) before it returns
// PROTO_AUTH_PENDING: the CONNECT is parked (copied; reading from the
// client paused and any frame already read held back) until
// proto_connect_resume. Returns the token, or NULL when memory runs out
// (counted and logged; then answer at once).
proto_pending *proto_connect_defer(const proto_client_info *info);
// OR'd into proto_connect_resume's rc 0: the client is a superuser.
#define PROTO_AUTH_SUPERUSER 0x100
// Answers a parked CONNECT: rc 0 accepts (the CONNECT then completes as
// if authenticate had returned 0; with PROTO_AUTH_SUPERUSER the client is
// a superuser), anything else refuses with that MQTT 5 reason. Any
// thread, exactly once per park (the answer consumes it); the work is
// posted to a worker. The client may have gone meanwhile: then nothing
// happens. Call before proto_free.
void proto_connect_resume(proto_pending *t, int rc);

// Who is acting: the client of the connection that sent a PUBLISH or
// SUBSCRIBE. NUL-terminated strings, valid during the callback; username is
// NULL when the client gave none.
typedef struct proto_who {
	const char *client_id;
	const char *username;
	const char *peer;
	// The acl_ask answer for the topic being routed or subscribed:
	// PROTO_ACL_NONE (the application's usual checks apply),
	// PROTO_ACL_ALLOW, or a refusing reason code (>= 0x80).
	int      acl;
	bool     superuser; // marked at CONNECT (proto_client_info.superuser)
	uint8_t  proto_ver; // 3, 4 or 5; 0 when not a client connection
	uint16_t local_port; // the accepting listener's port; 0 if unknown
} proto_who;

// The common name and subject DN ("CN=a, O=b") of the verified TLS client
// certificate of who's connection, into cn and subject (NUL-terminated,
// cut to their sizes); both "" when there is none (not TLS, no
// certificate, or one that did not verify, or who is not the client of
// the acl_ask call running on this thread). Only from acl_ask, on its
// thread.
void proto_who_tls_peer(
    const proto_who *who, char *cn, size_t cn_len, char *subject, size_t subject_len);

// acl_ask answers (and proto_who.acl), besides refusing reason codes.
#define PROTO_ACL_NONE  0
#define PROTO_ACL_ALLOW 1
// acl_ask access kinds.
#define PROTO_ACCESS_SUBSCRIBE 1
#define PROTO_ACCESS_PUBLISH   2

// Called from acl_ask (only there) before it returns PROTO_AUTH_PENDING:
// the PUBLISH or SUBSCRIBE is parked (copied; reading from the client
// paused and any frame already read held back) until proto_acl_resume.
// Returns the token, or NULL when memory runs out (counted and logged;
// then answer at once).
proto_pending *proto_acl_defer(void *defer_ctx);
// Answers a parked PUBLISH or SUBSCRIBE for the topic acl_ask was asked
// about: PROTO_ACL_ALLOW or a refusing reason code (anything else counts
// as 0x80). The packet is then handled again from its copy, on a worker,
// with that answer in proto_who.acl (SUBSCRIBE: acl_ask is asked about
// the filters after it), then the frames held meanwhile, in order. Any
// thread, exactly once per park. The client may have gone meanwhile: then
// nothing happens. Call before proto_free.
void proto_acl_resume(proto_pending *t, int verdict);

// OR'd into a refusing reason code returned by route or subscribe: after
// answering with the reason, end the connection (v5 DISCONNECT with that
// reason, 3.1.1 close).
#define PROTO_RC_DISCONNECT 0x100

typedef struct proto_sub_opts {
	uint8_t  qos;
	bool     no_local;
	bool     retain_as_published;
	uint8_t  retain_handling;
	uint32_t sub_id;
} proto_sub_opts;

typedef struct proto_app_ops {
	// Returns 0 to accept, or an MQTT 5 reason code (0x86, 0x87, ...), or
	// PROTO_AUTH_PENDING after proto_connect_defer(info).
	uint8_t (*authenticate)(void *app, const proto_client_info *info);
	// Optional (NULL: none): the answer given by proto_connect_resume to a
	// CONNECT that authenticate parked, when that CONNECT is handled again
	// (on a worker): rc is 0 or the refusing reason code.
	void (*auth_answered)(void *app, const proto_client_info *info, uint8_t rc);
	// Optional (NULL: never asked). Asked on the receive path about the
	// topic of each PUBLISH (access PROTO_ACCESS_PUBLISH, before route)
	// and about each filter of a SUBSCRIBE (PROTO_ACCESS_SUBSCRIBE, in
	// order, before any of them is subscribed). Returns PROTO_ACL_NONE,
	// PROTO_ACL_ALLOW or a refusing reason code, which route / subscribe
	// then find in who->acl; or PROTO_AUTH_PENDING after
	// proto_acl_defer(defer_ctx). Must not block.
	int (*acl_ask)(void *app, const proto_who *who, uint8_t access, const char *topic,
	    size_t len, void *defer_ctx);
	// Routes a message published by `from` through the connection of
	// `who` (both NULL for wills and system messages); the message
	// reference is borrowed. Returns 0, or an MQTT 5 reason code for the
	// publisher's ack (0x87 not authorized, ...), possibly with
	// PROTO_RC_DISCONNECT.
	int (*route)(void *app, nmq_session *from, const proto_who *who, nmq_msg *msg);
	// Adds or replaces one subscription; returns the granted QoS or a
	// failure reason code (>= 0x80, possibly with PROTO_RC_DISCONNECT).
	// Sets *existed.
	int (*subscribe)(void *app, nmq_session *s, const proto_who *who, const char *filter,
	    size_t len, const proto_sub_opts *opts, bool *existed);
	// Called after SUBACK is queued, for retained messages.
	void (*subscribed)(void *app, nmq_session *s, const char *filter, size_t len,
	    const proto_sub_opts *opts, bool existed);
	// Returns 0 or 0x11 (no subscription existed).
	uint8_t (*unsubscribe)(void *app, nmq_session *s, const char *filter, size_t len);
	// The session's state is being discarded: drop its subscriptions.
	void (*session_end)(void *app, nmq_session *s);
	// A client connected (online) or its connection ended. username is
	// the CONNECT's (NULL: none).
	void (*client_status)(void *app, nmq_session *s, bool online, uint8_t reason,
	    const char *peer, const char *username, uint16_t keepalive, bool clean_start);
	// Optional (NULL: none); called only after
	// proto_want_message_events(p, true): a message went out to session s
	// (acked false), or its client acknowledged it (acked true: PUBACK, or
	// PUBREC for QoS 2). username is the user of the CONNECT that created
	// the session (NULL: none). Runs on the session's thread with the
	// session and connection locks held: it must only queue and return,
	// and take no lock of the protocol layer or the broker.
	void (*message_event)(void *app, nmq_session *s, const char *username, const nmq_msg *msg,
	    uint8_t qos, bool acked);
} proto_app_ops;

// The durable store, as the protocol layer sees it: a table of functions
// that src/store implements (store_proto.c), bound with proto_set_store()
// before any connection. Only persistent sessions (session expiry > 0)
// are written: the session record (at connect, expiry change and
// disconnect), its QoS 1/2 queue (each message, its state and packet id
// as it is sent and acknowledged, its removal) and its inbound QoS 2
// packet ids. Every function queues a write and returns at once, never
// waiting for the disk: NMQ_OK when queued, else an error that the caller
// logs (rate limited) and counts in store_failures. Any thread; the store
// takes none of the protocol layer's locks, so they may be called under
// the session lock.
typedef void (*proto_store_done_fn)(void *arg, nmq_err err);

// States of a stored outbound message (the store's values).
enum proto_store_qstate {
	PROTO_STORE_QUEUED   = 0, // not sent yet
	PROTO_STORE_SENT     = 1, // PUBLISH sent, awaiting PUBACK / PUBREC
	PROTO_STORE_RELEASED = 2, // PUBREC received, PUBREL sent
};

// A persistent session as stored. Strings are NUL-terminated.
typedef struct proto_store_session {
	const char *client_id;
	const char *username; // the creating CONNECT's; NULL: none
	uint32_t    expiry_s; // UINT32_MAX: never
	uint8_t     proto_ver;
	uint64_t    offline_wall_ms; // CLOCK_REALTIME ms it went offline; 0 online
	nmq_msg    *will; // NULL: none
	uint32_t    will_delay_s;
	// At restore: the highest seq the store holds for the session (0:
	// none); its queued messages stay on disk until the client is back.
	uint64_t queue_max_seq;
} proto_store_session;

// A stored message of a session's queue, as read back (msg borrowed).
typedef struct proto_store_row {
	uint64_t        seq;
	nmq_msg        *msg;
	uint8_t         qos;
	bool            retain;
	uint8_t         state; // enum proto_store_qstate
	uint16_t        packet_id;
	const uint32_t *sub_ids;
	uint32_t        n_sub_ids;
} proto_store_row;

// proto_store_ops.after_batch's answers.
#define PROTO_AFTER_NONE   0
#define PROTO_AFTER_SET    1
#define PROTO_AFTER_FAILED (-1)

typedef struct proto_store_ops {
	nmq_err (*session_put)(void *st, const proto_store_session *rec);
	// Deletes the session with its subscriptions, queue and QoS 2 state
	// (sid: its number from sid_new, 0 if none).
	nmq_err (*session_del)(void *st, const char *client_id, uint32_t sid);
	// A number for a session's queue operations (never 0): sid_new once
	// per session, then its queue_put/state/del carry it with the client
	// id, so the store pairs them without string work.
	uint32_t (*sid_new)(void *st);
	nmq_err (*queue_put)(void *st, const char *client_id, uint32_t sid, uint64_t seq,
	    nmq_msg *msg, uint8_t qos, bool retain, const uint32_t *sub_ids, uint32_t n_sub_ids);
	// As queue_put, for a session whose client is connected and is sent
	// the message now (its ack likely follows soon): the store may hold
	// the row back and not write it if the ack comes first. NULL: use
	// queue_put.
	nmq_err (*queue_put_live)(void *st, const char *client_id, uint32_t sid, uint64_t seq,
	    nmq_msg *msg, uint8_t qos, bool retain, const uint32_t *sub_ids, uint32_t n_sub_ids);
	nmq_err (*queue_state)(void *st, const char *client_id, uint32_t sid, uint64_t seq,
	    uint8_t state, uint16_t packet_id);
	nmq_err (*queue_del)(void *st, const char *client_id, uint32_t sid, uint64_t seq);
	// Every stored message of sid with a seq in [lo, hi] is done with
	// (none of them is wanted any more): one write for many
	// acknowledgements. While the write this queued still waits for the
	// store's thread, a call with lo = its hi + 1 extends it; *slot_op
	// and *slot_gen (zero at first, kept by the caller) remember it. NULL:
	// not supported (queue_del each).
	nmq_err (*queue_done)(void *st, const char *client_id, uint32_t sid, uint64_t lo,
	    uint64_t hi, void **slot_op, uint64_t *slot_gen);
	nmq_err (*rel_put)(void *st, const char *client_id, uint16_t packet_id);
	nmq_err (*rel_del)(void *st, const char *client_id, uint16_t packet_id);
	// A barrier: done(arg, err) runs on the store's thread once everything
	// queued before it has committed (it must not block).
	nmq_err (*sync)(void *st, proto_store_done_fn done, void *arg);
	// A barrier for the writes queued (by any thread) since sync_mark
	// returned mark: done as sync's, but failed too if any group since
	// the mark failed, not only its own. NULL: not supported.
	uint64_t (*sync_mark)(void *st);
	nmq_err (*sync_since)(void *st, uint64_t mark, proto_store_done_fn done, void *arg);
	// Reads client_id's stored messages with seq > after_seq in seq order,
	// at most max of them (expired ones are skipped and deleted), after
	// everything queued before: row(arg, r) for each, then done(arg, err).
	// Both run on the store's thread, must not block, and may take a
	// session lock (the store holds none of its own meanwhile).
	nmq_err (*queue_read)(void *st, const char *client_id, uint64_t after_seq, uint32_t max,
	    void (*row)(void *arg, const proto_store_row *r), proto_store_done_fn done, void *arg);
	// The writes waiting for the store's thread (*pending) and how many
	// it takes before refusing more (*max). Any thread, cheap: the
	// receive path asks it after every PUBLISH that wrote to the store
	// (back-pressure, docs/decisions/0021-store-back-pressure.md).
	void (*backlog)(void *st, uint32_t *pending, uint32_t *max);
	// Opens (begin) or closes a group of this thread's writes that commit
	// together or not at all (what routing one PUBLISH writes). NULL: no
	// grouping.
	void (*batch)(void *st, bool begin);
	// Runs fn(arg) on this thread once the writes of its open group are
	// queued to the store's thread (right after the group closes) and
	// returns PROTO_AFTER_SET; returns PROTO_AFTER_NONE, doing nothing,
	// when no group is open (what the thread wrote is queued already),
	// PROTO_AFTER_FAILED, doing nothing, when out of memory: the group is
	// then failed as a whole (none of it is queued, the writes asked of
	// it from then on are refused, and whatever waits for it fails), so
	// nothing of it can be overtaken. fn must not block or take a lock
	// the caller of batch(false) may hold. NULL: no grouping.
	int (*after_batch)(void *st, void (*fn)(void *arg), void *arg);
} proto_store_ops;

// Counters for metrics; every field is updated atomically.
typedef struct proto_metrics {
	atomic_long connections;
	atomic_long connections_max;
	atomic_long sessions;
	atomic_long sessions_max;
	atomic_long msgs_received;
	atomic_long msgs_sent;
	atomic_long msgs_dropped;
	atomic_long drop_queue_full;
	atomic_long drop_expired;
	atomic_long drop_too_large;
	atomic_long drop_acl;
	atomic_long drop_memory; // mqtt.max_message_memory reached
	atomic_long refused_connections; // mqtt.max_connections reached, or
	                                 // another user's session to resume
	atomic_long refused_topics; // max_topic_length / max_topic_levels
	atomic_long refused_subscriptions; // mqtt.max_subscriptions reached
	atomic_long await_rel_expired;
	// Allocations that failed in the protocol layer (each is logged, rate
	// limited, with what it was for; what it cost is said there too).
	atomic_long alloc_failures;
	// Writes the durable store refused (full or closing; each logged,
	// rate limited). The message stays in memory.
	atomic_long store_failures;
	// QoS 1/2 acks that waited for the store's commit.
	atomic_long acks_after_store;
	// QoS 1/2 PUBLISHes not acknowledged as received because the store
	// refused a write they needed (v5: ack 0x97; 3.1.1: connection
	// closed without the ack).
	atomic_long store_refused_acks;
	// Publishers paused because the store's write queue passed its
	// high-water mark.
	atomic_long store_pauses;
} proto_metrics;

// True if a topic name or filter is within the length and level limits.
bool proto_topic_within_limits(const nmq_proto *p, const uint8_t *t, size_t len);

// Creates the protocol layer. Returns NULL on failure.
nmq_proto *proto_alloc(
    const proto_limits *limits, timer_wheel *tw, workq *wq, const proto_app_ops *ops, void *app);
// Ends every connection (wills are sent as for an abnormal close when
// `send_wills`), then frees everything. Call after listeners stopped.
void proto_free(nmq_proto *p);
// The first step of a clean stop, before proto_shutdown_*: stops taking
// new work from the clients (PUBLISH, SUBSCRIBE, UNSUBSCRIBE and CONNECT
// frames read from then on are dropped: neither handled nor acknowledged,
// so the clients send them again after reconnecting; acks and DISCONNECT
// are still handled), waits for every worker to finish the frame it handles,
// then waits at most max_wait_ms for the acks that wait for the store's
// commit (decisions/0016) to be sent, so that what the store commits is
// acknowledged before the DISCONNECT 0x8B that follows (a publisher does
// not send again what the store already holds). Returns how many acks
// still wait (0: all sent). Main thread, with the workers and the store
// running.
size_t proto_quiesce(nmq_proto *p, unsigned max_wait_ms);
// Closes every connection, sending v5 clients DISCONNECT 0x8B; new
// connections are refused from then on.
void proto_shutdown_all(nmq_proto *p);
// The first step of a drain: closes only the connections that have a will,
// so that their wills (published as for any server-side close) still reach
// the subscribers, which are closed afterwards. proto_links_with_will()
// says when they are gone.
void   proto_shutdown_wills(nmq_proto *p);
size_t proto_links_with_will(nmq_proto *p);
// Turns the message_event callback on or off (webhooks that want
// on_message_delivered / on_message_acked). Any thread.
void proto_want_message_events(nmq_proto *p, bool on);
// Replaces the reloadable limits. Returns NMQ_OK, or NMQ_ENOMEM (logged
// and counted; the running limits stay).
nmq_err proto_set_limits(nmq_proto *p, const proto_limits *limits);
// Copies the limits in force (any thread).
void           proto_get_limits(nmq_proto *p, proto_limits *out);
proto_metrics *proto_metrics_get(nmq_proto *p);

// The sessions' outbound queues now, summed over every session of the
// process: QoS 0 and QoS 1/2 messages waiting in memory to be sent, and
// in-flight QoS 1/2 entries (PUBLISH or PUBREL written or about to be,
// awaiting PUBACK / PUBREC / PUBCOMP). Messages of a persistent session
// that are in the durable store only are not counted (store_stats has
// queued_rows). Any thread; reads per-thread counters with relaxed loads
// (no lock), so a read racing a change may be off by that change.
typedef struct proto_queue_depth {
	int64_t queued_qos0;
	int64_t queued_qos12;
	int64_t inflight;
} proto_queue_depth;
void            proto_queue_depth_get(proto_queue_depth *out);
const conn_env *proto_conn_env(nmq_proto *p);

// Binds the durable store (main thread, before the first connection; st
// must outlive the protocol layer's last write: close it after
// proto_free). From then on a QoS 1/2 PUBLISH whose routing wrote to the
// store (a persistent session's queue, or a retained message, see
// proto_store_noted) is acknowledged only once that write committed; the
// worker does not wait (the ack is posted back to the connection when the
// store's completion runs), and later acks of that connection go behind it.
void proto_set_store(nmq_proto *p, const proto_store_ops *ops, void *st);
// Binds a store for acks alone (same thread and lifetime rules): sessions
// are not written to it, but a QoS 1/2 PUBLISH whose routing wrote to it
// (proto_store_noted, e.g. a bridge's disk cache) is acknowledged only
// after its commit, as above. proto_set_store implies it.
void proto_set_ack_store(nmq_proto *p, const proto_store_ops *ops, void *st);
// Called by the application on the routing thread when it wrote to the
// store for the message being routed (e.g. a retained message), so that
// the publisher's ack waits for the commit.
void proto_store_noted(void);
// Called by the application on the routing thread when the store refused
// a write the message being routed needed (its queue is full): the
// publisher then gets no success ack for it (a v5 ack with reason 0x97,
// or, for 3.1.1, the connection is closed without the ack), since an ack
// promises the message is stored.
void proto_store_refused(void);
// Thread-local: whether the store refused a write of routing on this
// thread since the last call (and forgets it). For code that routes a
// message itself and acks it (the protocol's PUBLISH, a bridge's inbound
// messages).
bool proto_store_take_refused(void);

// Restoring the store's sessions at startup (main thread, after
// proto_set_store and before any listener opens). Creates the offline
// session rec describes (offline since rec->offline_wall_ms by now_wall_ms;
// its expiry timer and delayed will run from there). Returns the session
// (the table's reference; not held for the caller) or NULL (out of memory
// or a duplicate client id, logged).
nmq_session *proto_session_restore(
    nmq_proto *p, const proto_store_session *rec, uint64_t now_wall_ms);
// The will of the restored session s was published (or is being, in the
// caller's open store group): its stored record, if s is still offline and
// stored, is rewritten as s now is, without that will, so that a crash
// after the group commits does not publish it again. Any thread.
void proto_session_will_published(nmq_session *s);
// Puts a stored message back into s's queue (state QUEUED) or its in-flight
// window (SENT / RELEASED, with its packet id), in seq order. Holds its own
// reference to msg. Returns NMQ_OK or NMQ_ENOMEM.
nmq_err proto_session_restore_msg(nmq_session *s, uint64_t seq, nmq_msg *msg, uint8_t qos,
    bool retain, uint8_t state, uint16_t packet_id, const uint32_t *sub_ids, uint32_t n_sub_ids);
// Puts back an inbound QoS 2 packet id awaiting PUBREL.
nmq_err proto_session_restore_rel(nmq_session *s, uint16_t packet_id);
// Creates the preset session of client_id (preset.session; main thread,
// after the store's sessions were restored and before any listener
// opens): offline, without an owning user, never expiring until a client
// takes it over (clean start 0; clean start 1 discards it as any other),
// protocol version 5 for its subscription options; written to the store
// when one is bound. If a session of client_id exists (restored from the
// store) it is returned as is and *existed is set. Returns the session
// (the table's reference; not held for the caller), or NULL when memory
// runs out (counted and logged).
nmq_session *proto_session_preset(nmq_proto *p, const char *client_id, bool *existed);
// Ends the preset sessions restored from the store that no client has
// taken over and whose client id configured(arg, id) no longer names (the
// preset was removed from the configuration): otherwise they would queue
// for nobody, never expiring, until disk_cache_size evicts other
// sessions' messages for theirs. Main thread, at startup, after the
// presets. Returns how many were ended.
size_t proto_sessions_end_presets(
    nmq_proto *p, bool (*configured)(void *arg, const char *client_id), void *arg);

// Takes over a freshly accepted connection (the reference is consumed).
void proto_accept(nmq_proto *p, nmq_conn *c);

// Queues msg for s at the given QoS (already min(granted, published)).
// retain is the RETAIN flag to send; sub_ids the subscription identifiers
// to attach (v5). Holds its own reference to msg. Drops are counted.
void nmq_session_deliver(nmq_session *s, nmq_msg *msg, uint8_t qos, bool retain,
    const uint32_t *sub_ids, uint32_t n_sub_ids);

// Drops the messages queued for s (not those already sent and awaiting
// their acknowledgement) that keep(arg, msg) refuses, e.g. after a reload
// that took read access away. keep runs under the session lock and must
// take no lock of the protocol layer. Counts the drops as drop_acl.
// For a persistent session the dropped messages are deleted from the
// durable store too, those of its backlog on disk included (keep then
// also runs on the store's thread): this waits for the store's thread, so
// it must not be called on a worker. Returns the number dropped.
size_t nmq_session_drop_queued(
    nmq_session *s, bool (*keep)(void *arg, const nmq_msg *msg), void *arg);

// Builds a shared message from a decoded PUBLISH (or will) of version
// ver: topic, the forwardable v5 properties of `in` (may be NULL),
// payload, QoS and retain; message expiry becomes an absolute deadline.
// origin is the publisher's session id (0: none). Returns NULL on
// allocation failure. Any thread (handle_publish.c).
nmq_msg *proto_msg_build(uint8_t ver, mqtt_bytes topic, const mqtt_props *in, mqtt_bytes payload,
    uint8_t qos, bool retain, uint64_t origin);

// What the REST API shows of a session (proto_sessions_snapshot). Strings
// are owned by the snapshot.
typedef struct proto_session_info {
	nmq_session *s; // held by the snapshot
	char        *client_id;
	char        *username; // the creating CONNECT's; NULL: none
	uint64_t     recv_msgs; // PUBLISH packets received from its clients
	uint32_t     queued; // messages waiting to be sent
	uint16_t     keepalive; // of the connection attached last
	uint8_t      proto_ver; // 3, 4 or 5
	bool         online;
	bool         clean_start; // of the connection attached last
} proto_session_info;

// Takes a snapshot of every session in the table, online and offline, for
// introspection (any thread; the REST API's). The table lock is held only
// to copy the session pointers (each held); each session is then read
// under its own lock, one at a time, with no other lock held. Returns the
// number of entries in *out (an array to free with
// proto_sessions_snapshot_free), or 0 with *out NULL when there is none or
// memory runs out (then NMQ_ENOMEM in *err if err is not NULL).
size_t proto_sessions_snapshot(nmq_proto *p, proto_session_info **out, nmq_err *err);
void   proto_sessions_snapshot_free(proto_session_info *v, size_t n);
// Returns the session of client_id held (release with
// nmq_session_release), or NULL if there is none. Any thread.
nmq_session *proto_session_find(nmq_proto *p, const char *client_id);
// Counts a message published into the broker by the application (REST
// API, bridge) as received.
void proto_count_received(nmq_proto *p);

void        nmq_session_hold(nmq_session *s);
void        nmq_session_release(nmq_session *s);
bool        nmq_session_online(nmq_session *s);
uint64_t    nmq_session_id(const nmq_session *s);
const char *nmq_session_client_id(const nmq_session *s);
uint8_t     nmq_session_proto(const nmq_session *s);
// True when s is written to the durable store (a store is bound and its
// expiry interval is not 0).
bool nmq_session_persistent(nmq_session *s);
// The user name of the CONNECT that created s, or NULL.
const char *nmq_session_username(const nmq_session *s);
// Application data slot (e.g. the session's subscription list), guarded by
// the application.
void **nmq_session_app_data(nmq_session *s);

#endif // NMQ_PROTO_H
