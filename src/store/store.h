// The durable store: what must survive a restart, a kill -9 and a power
// cut, in one SQLite database (WAL mode) written by a thread of its own.
//
// What is kept: persistent sessions (client id, user, expiry, will and will
// delay), their subscriptions, the QoS 1/2 messages queued or in flight for
// them (with packet id and state), inbound QoS 2 packet ids awaiting
// PUBREL, and retained messages. A message body is written once however
// many queues hold it (messages table, reference counted by the rows that
// point at it). The queue operations of a client id under "$bridge/" (a
// bridge's offline cache) keep their rows in a table of their own, the
// message inline (store_bcache.c).
//
// Writes are operations queued by any thread (store_*_put/del: they never
// touch the disk and never block on it). The store thread takes everything
// queued, up to opts.flush_max operations, applies it in one transaction and
// commits: one fsync serves the whole group. Each operation may carry a
// completion (store_done_fn) that runs on the store thread after that
// commit, which is how "acknowledge only when durable" is built: the caller
// sends PUBACK/PUBREC from the completion (posting to its own thread; a
// completion must not block). Operations are applied in the order they
// were queued; those that cancel out within the group (a queued message
// removed, a state update followed by another or by the removal) are not
// written (store_group.c, decisions/0020): a commit holds what applying
// all of them in order gives. This relies on a (client id, seq) being
// queued once.
//
// Opening never fails on a bad file: a database that cannot be read, is
// damaged, belongs to another program or has an unknown schema version is
// moved aside (renamed with a timestamp, with its -wal and -shm files),
// the loss is logged at error, and an empty store is created in its place.
//
// Threads: store_open, store_load and store_close run on the main thread
// (before the workers start, or after they stopped); the put/del functions
// on any thread; completions and the evicted callback on the store thread.
// store_load must not run while operations are queued or being applied:
// the database connection is opened without SQLite's own mutex (one
// thread at a time uses it).
#ifndef NMQ_STORE_H
#define NMQ_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nng/core/msg.h"
#include "nng/core/nmq_err.h"

typedef struct nmq_store nmq_store;

typedef enum store_durability {
	// synchronous=FULL: the WAL is fsynced at every group commit; a commit
	// survives a power cut.
	STORE_DURABLE_FSYNC = 0,
	// synchronous=NORMAL: committed data is in the OS's buffers; it
	// survives a crash or kill -9 of the broker, not a power cut.
	STORE_DURABLE_OS,
} store_durability;

typedef struct store_opts {
	const char      *dir; // directory of the database, created if missing
	const char      *file; // file name in dir; NULL = "nanomq.db"
	store_durability durability;
	uint32_t         flush_max; // largest group commit, in operations (>= 1)
	// Most queued message rows kept (sqlite.disk_cache_size); past it the
	// oldest queued message is evicted. 0 = no bound.
	uint64_t max_queued;
	// Operations waiting for the store thread; a put beyond it fails with
	// NMQ_ELIMIT (a store_sync barrier only beyond twice it plus 4096).
	// 0 = 65536.
	uint32_t max_pending;
	// Called on the store thread for every queued message evicted by
	// max_queued (may be NULL).
	void (*evicted)(void *arg, const char *client_id, uint64_t seq);
	void *evicted_arg;
	// While a stored session is online, an idle store writes its "alive
	// at" time every alive_idle_ms (0 = 5000; see store_alive.c).
	uint32_t alive_idle_ms;
	// Pages of write-ahead log between two checkpoints (0 = 8000, about
	// 32 MB; see store_checkpoint in store.c).
	uint32_t ckpt_frames;
	// Under load, how long in ms after a group commit began the next
	// may wait for more work while the broker is busy (0 =
	// STORE_GROUP_GAP_MS, 5; UINT32_MAX = never; store_group_pace in
	// store.c).
	uint32_t group_gap_ms;
	// Messages for offline sessions written as queue rows, not as
	// segments (store_oseg.c): for tests of the queue rows themselves.
	bool no_segments;
} store_opts;

// Runs on the store thread once the transaction holding the operation has
// committed (NMQ_OK) or failed (NMQ_EIO: the operation is not stored; the
// error was logged). Must not block.
typedef void (*store_done_fn)(void *arg, nmq_err err);

// A persistent session. Strings are NUL-terminated; will_msg may be NULL.
typedef struct store_session {
	const char *client_id;
	const char *username; // NULL: none
	uint32_t    expiry_s; // session expiry interval; UINT32_MAX = never
	uint8_t     proto_ver;
	// Wall-clock ms (CLOCK_REALTIME) when the client went offline, 0 while
	// online. A session whose expiry passed while the broker was down is
	// dropped at load.
	uint64_t offline_wall_ms;
	nmq_msg *will_msg; // the will (topic, properties, payload, QoS, retain)
	uint32_t will_delay_s;
	// store_load only: the highest seq queued for the session (0: none),
	// so that new messages get higher ones.
	uint64_t queue_max_seq;
} store_session;

// Subscription options as stored (the SUBSCRIBE options byte of MQTT 5:
// QoS in bits 0-1, no local 2, retain as published 3, retain handling 4-5).
typedef struct store_sub {
	const char *client_id;
	const char *filter; // as subscribed, "$share/g/f" included
	uint8_t     options;
	uint32_t    sub_id; // 0 = none
} store_sub;

// Outbound message states, as the session keeps them.
enum store_qstate {
	STORE_Q_QUEUED   = 0, // not sent yet
	STORE_Q_SENT     = 1, // PUBLISH sent, awaiting PUBACK / PUBREC
	STORE_Q_RELEASED = 2, // PUBREC received, PUBREL sent, awaiting PUBCOMP
};

// One queued or in-flight outbound message of a session, in load order.
typedef struct store_qmsg {
	const char     *client_id;
	uint64_t        seq; // the session's arrival order
	nmq_msg        *msg; // borrowed during the callback (hold to keep)
	uint8_t         qos;
	bool            retain;
	uint8_t         state; // enum store_qstate
	uint16_t        packet_id; // 0 while queued
	uint32_t        server; // a bridge's row: store_queue_state_srv's (0: none)
	uint32_t        n_sub_ids;
	const uint32_t *sub_ids;
} store_qmsg;

// Opens (creating if needed) the database in opts->dir and starts the
// store thread. Returns NMQ_OK; NMQ_EIO with a message in err if the
// directory or a new database cannot be created (a damaged database is
// moved aside instead, see above); NMQ_ENOMEM.
nmq_err store_open(nmq_store **sp, const store_opts *opts, char *err, size_t errlen);

// Gives the store a count of the messages the broker received and sent
// (any monotonic count of its work; read on the store thread). Under load
// the store thread waits up to opts.group_gap_ms after a group began before
// it takes the next, while this count grows by 256 or more every 0.5 ms
// (store_group_pace in store.c). Without it the store does not wait. A
// NULL fn withdraws it: once this returns, the old fn is not called again.
void store_set_activity(nmq_store *s, uint64_t (*fn)(void *arg), void *arg);
// Commits everything queued (completions run), stops the thread, closes
// the database (checkpointing the WAL) and frees s.
void store_close(nmq_store *s);

// Operations. Each returns NMQ_OK when queued (done, if not NULL, will be
// called exactly once), NMQ_ELIMIT when max_pending operations are
// waiting, NMQ_ENOMEM, or NMQ_ECLOSED after store_close began (done is not
// called when an error is returned). Strings and arrays are copied; a
// message is held until it is written.
nmq_err store_session_put(nmq_store *s, const store_session *rec, store_done_fn done, void *arg);
// Deletes a session with its subscriptions, queue and QoS 2 state.
nmq_err store_session_del(nmq_store *s, const char *client_id, store_done_fn done, void *arg);
// Records that the session went offline (wall_ms) or came back (0).
nmq_err store_session_offline(
    nmq_store *s, const char *client_id, uint64_t wall_ms, store_done_fn done, void *arg);
nmq_err store_sub_put(nmq_store *s, const store_sub *sub, store_done_fn done, void *arg);
nmq_err store_sub_del(
    nmq_store *s, const char *client_id, const char *filter, store_done_fn done, void *arg);
// Queues msg for client_id at seq (unique per session).
nmq_err store_queue_put(nmq_store *s, const char *client_id, uint64_t seq, nmq_msg *msg,
    uint8_t qos, bool retain, const uint32_t *sub_ids, uint32_t n_sub_ids, store_done_fn done,
    void *arg);
// A number for a session (never 0, unique in this store while it is
// open; not stored): the *_sid variants below take it with the client id,
// so that the store thread pairs a session's operations of one group by
// (sid, seq) without comparing strings. A session must use one sid (or
// none, 0) for all the operations of one seq. Any thread.
uint32_t store_sid_new(nmq_store *s);
nmq_err  store_queue_put_sid(nmq_store *s, const char *client_id, uint32_t sid, uint64_t seq,
     nmq_msg *msg, uint8_t qos, bool retain, const uint32_t *sub_ids, uint32_t n_sub_ids,
     store_done_fn done, void *arg);
// As store_queue_put_sid (no callback), for a session whose client is
// connected and gets the message now: a QoS 1 row may be held back for
// one group commit, and not written at all if acknowledged by then (the
// message is as durable when the put's group commits; see
// docs/decisions/0045-store-held-rows.md).
nmq_err store_queue_put_live(nmq_store *s, const char *client_id, uint32_t sid, uint64_t seq,
    nmq_msg *msg, uint8_t qos, bool retain, const uint32_t *sub_ids, uint32_t n_sub_ids);
nmq_err store_queue_state_sid(nmq_store *s, const char *client_id, uint32_t sid, uint64_t seq,
    uint8_t state, uint16_t packet_id, store_done_fn done, void *arg);
nmq_err store_queue_del_sid(
    nmq_store *s, const char *client_id, uint32_t sid, uint64_t seq, store_done_fn done, void *arg);
// Every stored message of session sid (client_id) with a seq in [lo, hi]
// is done with (acknowledged, or otherwise gone from the session): the
// rows are deleted and a put of such a seq not yet written is dropped.
// The caller guarantees that no seq of the range is still wanted. While
// the operation this queued is still waiting for the store thread, a
// call for the same sid with lo = its hi + 1 extends it instead of
// queuing another: *slot_op and *slot_gen (zeroed at first) remember it.
nmq_err store_queue_done_sid(nmq_store *s, const char *client_id, uint32_t sid, uint64_t lo,
    uint64_t hi, void **slot_op, uint64_t *slot_gen);
// store_session_del, also forgetting what store_queue_done_sid recorded
// for sid (0: none).
nmq_err store_session_del_sid(
    nmq_store *s, const char *client_id, uint32_t sid, store_done_fn done, void *arg);
// Records the state and packet id of a queued message.
nmq_err store_queue_state(nmq_store *s, const char *client_id, uint64_t seq, uint8_t state,
    uint16_t packet_id, store_done_fn done, void *arg);
// As store_queue_state, for a bridge's cached forward (client id under
// "$bridge/"): also records server, the bridge's tag of the server that
// made that state (0: none; the low 32 bits are kept), read back in
// store_qmsg.server. Other client ids ignore it.
nmq_err store_queue_state_srv(nmq_store *s, const char *client_id, uint64_t seq, uint8_t state,
    uint16_t packet_id, uint32_t server, store_done_fn done, void *arg);
// Removes a queued message (acknowledged, expired or dropped).
nmq_err store_queue_del(
    nmq_store *s, const char *client_id, uint64_t seq, store_done_fn done, void *arg);
// Removes n queued messages of client_id in one operation (seqs copied;
// a seq not stored is skipped): a caller deleting many, e.g. a bridge's
// acked forwards, wakes the store thread once for all of them.
nmq_err store_queue_del_many(nmq_store *s, const char *client_id, const uint64_t *seqs, uint32_t n,
    store_done_fn done, void *arg);
// Removes the queued messages of client_id whose seq is in one of n ranges
// [lohi[2i], lohi[2i+1]] (copied), in one operation: an acked run of a
// bridge's forwards is one range (one DELETE). A seq not stored is
// skipped; the caller wants none of the range's seqs any more.
nmq_err store_queue_del_ranges(nmq_store *s, const char *client_id, const uint64_t *lohi,
    uint32_t n, store_done_fn done, void *arg);
// Inbound QoS 2 packet ids awaiting PUBREL.
nmq_err store_rel_put(
    nmq_store *s, const char *client_id, uint16_t packet_id, store_done_fn done, void *arg);
nmq_err store_rel_del(
    nmq_store *s, const char *client_id, uint16_t packet_id, store_done_fn done, void *arg);
// Sets (msg != NULL) or clears (msg == NULL) the retained message of topic.
nmq_err store_retain_put(
    nmq_store *s, const char *topic, nmq_msg *msg, store_done_fn done, void *arg);
// A barrier: done runs after everything queued before it has committed.
nmq_err store_sync(nmq_store *s, store_done_fn done, void *arg);
// A barrier for writes queued since store_sync_mark returned mark (on
// any thread, in any store_batch): done runs after everything queued
// before it has committed, with NMQ_EIO if any group that took one of
// them (or another group since the mark) failed. Cheaper than a barrier
// per write for acks that a spurious failure only makes the client send
// again (QoS 1).
uint64_t store_sync_mark(nmq_store *s);
nmq_err  store_sync_since(nmq_store *s, uint64_t mark, store_done_fn done, void *arg);

// The operations this thread submits to s between store_batch_begin and
// store_batch_end are queued together at the end and committed in one
// group (a group never ends between them): what routing one PUBLISH
// writes (its inbound QoS 2 id, its queue rows, its retained message)
// is on disk all together or not at all. Each operation is still
// admitted or refused (NMQ_ELIMIT) when it is submitted. Nests; the
// calling thread must not wait for the store in between. Any thread.
void store_batch_begin(nmq_store *s);
void store_batch_end(nmq_store *s);

// What store_batch_after did.
typedef enum store_after {
	// No batch of s is open on this thread: what it submitted is queued
	// already (nothing registered).
	STORE_AFTER_NONE = 0,
	// Registered: fn runs once the batch's operations are queued.
	STORE_AFTER_SET = 1,
	// Out of memory: fn is not registered, and the open batch is failed
	// instead (nothing registered can tell when it is queued, so none of
	// it is): operations submitted to it from now on are refused
	// (NMQ_ENOMEM), and at its outermost store_batch_end those it holds
	// are not queued, each done called with NMQ_ENOMEM (as when s closed
	// meanwhile); what was registered before still runs. Nothing of the
	// batch can then be overtaken, and no ack waiting for it succeeds.
	STORE_AFTER_FAILED = -1,
} store_after;

// Runs fn(arg) on this thread once the operations of its open batch of s
// are queued (at the outermost store_batch_end, after s's lock is
// released; also when they are failed because s closed or the batch
// failed). Lets a caller know when an operation it submitted inside a
// batch can no longer be overtaken by one that another thread submits.
// fn must not block.
store_after store_batch_after(nmq_store *s, void (*fn)(void *arg), void *arg);

// Reads a session's queue lazily (for a client coming back), on the store
// thread after everything queued before it: fn is called for each stored
// message of client_id with seq > after_seq, in seq order, at most max
// (0 = all) of them, then done (NMQ_OK, or NMQ_EIO if the read failed).
// Messages whose expiry passed are skipped and deleted. fn and done run
// on the store thread and must not block.
nmq_err store_queue_read(nmq_store *s, const char *client_id, uint64_t after_seq, uint32_t max,
    void (*fn)(void *arg, const store_qmsg *q), store_done_fn done, void *arg);

// Reads the subscription rows of client_id (a bridge's record of the
// filters it mirrors on its remote: rows of a client id with no session),
// on the store thread after everything queued before it: fn for each row,
// then done (NMQ_OK, or NMQ_EIO if the read failed). fn and done run on
// the store thread and must not block.
nmq_err store_subs_read(nmq_store *s, const char              *client_id,
    void (*fn)(void *arg, const store_sub *sub), store_done_fn done, void *arg);

// Reads the inbound QoS 2 packet ids of client_id (store_rel_put; a
// bridge's, whose client id has no session), on the store thread after
// everything queued before it: fn for each, then done (NMQ_OK, or NMQ_EIO
// if the read failed). fn and done run on the store thread and must not
// block.
nmq_err store_rels_read(nmq_store *s, const char            *client_id,
    void (*fn)(void *arg, uint16_t packet_id), store_done_fn done, void *arg);

// What store_load hands back; any callback may be NULL. Pointers are valid
// during the callback only (hold a message to keep it). Sessions come
// first, then subscriptions, QoS 2 state, queued messages (by session, in
// seq order) and retained messages.
typedef struct store_load_ops {
	void (*session)(void *arg, const store_session *rec);
	void (*sub)(void *arg, const store_sub *sub);
	void (*rel)(void *arg, const char *client_id, uint16_t packet_id);
	void (*qmsg)(void *arg, const store_qmsg *q);
	void (*retained)(void *arg, nmq_msg *msg);
	// With qmsg: only the messages in flight (state SENT or RELEASED);
	// the queued ones stay on disk for store_queue_read.
	bool qmsg_inflight_only;
	// Last: the will of each session dropped as expired (it ended while
	// the broker was down, and its will had not gone out), unless the
	// will's own Message Expiry passed too. The caller publishes it and
	// deletes the session's record (store_session_del) in the same
	// store_batch: until then the record stays in the file (with its
	// will and nothing else; not handed to session), so that a crash
	// before that group commits publishes the will at the next load and
	// one after it does not. Without this callback an expired session's
	// record is deleted at once, will included.
	void (*expired_will)(void *arg, const char *client_id, nmq_msg *will);
} store_load_ops;

// Reads the store back, on the calling thread (startup, before traffic);
// queued messages only if ops->qmsg is set (otherwise they stay on disk
// until store_queue_read asks for them).
// now_wall_ms is the wall clock used to drop what expired while the broker
// was down: sessions whose expiry passed (with their state) and messages
// whose Message Expiry passed; both are deleted from the file and counted
// in the stats. Message expiry deadlines are converted to nmq_clock_ms().
// A session stored online (offline_wall_ms 0: its client was connected
// when the broker stopped without ending it, e.g. a kill -9) is first
// made offline since the last time the store recorded it was alive (see
// store_alive.c; a file without that record keeps it at 0, offline since
// the load); this is written to the file.
// Returns NMQ_OK, NMQ_ENOMEM, or NMQ_EIO (logged).
nmq_err store_load(nmq_store *s, uint64_t now_wall_ms, const store_load_ops *ops, void *arg);

typedef struct store_stats {
	uint64_t commits; // transactions committed
	uint64_t ops; // operations applied
	uint64_t failed; // operations whose transaction failed
	// operations not written: cancelled out inside their group (a
	// message queued and removed, a state update followed by another or
	// by the removal)
	uint64_t coalesced;
	uint64_t evicted; // queued messages evicted by max_queued
	uint64_t expired; // sessions and messages dropped at load as expired
	uint64_t queued_rows; // queued message rows now
	uint64_t pending; // operations waiting for the store thread
	bool     recovered; // a bad file was moved aside at open
} store_stats;

void store_stats_get(nmq_store *s, store_stats *out);
// The operations waiting for the store thread and opts.max_pending (past
// which puts fail with NMQ_ELIMIT). Any thread.
void store_backlog(nmq_store *s, uint32_t *pending, uint32_t *max);

// The path of the database file.
const char *store_path(const nmq_store *s);

// Tests only: the next n groups fail to size their coalescing tables, as
// when out of memory.
void store_test_group_oom(nmq_store *s, unsigned n);
// Tests: the next n growths of a thread's store_batch_after list fail as
// out of memory.
void store_test_after_oom(nmq_store *s, unsigned n);
// Tests: the next n groups fail at their commit (rolled back), as on a
// full disk.
void store_test_group_fail(nmq_store *s, unsigned n);

#endif // NMQ_STORE_H
