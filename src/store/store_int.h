// Private to src/store: the store object, its operations and statements.
#ifndef NMQ_STORE_INT_H
#define NMQ_STORE_INT_H

#include "src/store/store_sqlite.h"
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "nng/protocol/timer_wheel.h"
#include "src/store/store.h"
#include "src/store/store_bcache.h"

// PRAGMA application_id of our files ("NMQS") and the schema version
// (PRAGMA user_version) this code reads and writes. A migration from an
// older version goes where check_db() compares them.
#define STORE_APP_ID         0x4E4D5153
#define STORE_SCHEMA_VERSION 2
// The version whose bridge rows moved to their own table (store_bcache.c).
#define STORE_SCHEMA_BCACHE 2

enum store_op_kind {
	OP_SESSION_PUT,
	OP_SESSION_DEL,
	OP_SESSION_OFFLINE,
	OP_SUB_PUT,
	OP_SUB_DEL,
	OP_QUEUE_PUT,
	// The queue rows of one message for many sessions (a store_batch's
	// consecutive puts of it): op->ents[0..u32), strings and sub ids in
	// op->arena. Counts u32 operations against max_pending.
	OP_QUEUE_PUTM,
	OP_QUEUE_STATE,
	OP_QUEUE_DEL,
	OP_QUEUE_DEL_MANY, // u32 seqs at data[0], then s1
	OP_REL_PUT,
	OP_REL_DEL,
	OP_RETAIN_PUT,
	OP_QUEUE_READ,
	OP_SYNC,
	// Every stored row of session sid (client id s1) with a seq in
	// [u64, u64b] is done with: range-deleted, and any put of such a seq
	// in this or a later group is not written (store_group.c).
	OP_QUEUE_DONE,
	OP_SUBS_READ, // store_subs_read
	OP_RELS_READ, // store_rels_read
	// u32 ranges [lo, hi] of seqs at data[0..2*u32), then s1
	// (store_queue_del_ranges).
	OP_QUEUE_DEL_RANGES,
};

// What a pooled operation holds behind it (sub ids, then strings); an
// operation that needs more is allocated for itself and freed after use.
#define STORE_OP_INLINE 96

// One queue row of an OP_QUEUE_PUTM.
typedef struct store_qent {
	uint64_t seq;
	uint32_t sid;
	uint32_t srv; // a bridge's cache row: store_queue_state_srv's server
	uint32_t cid_off; // client id in the op's arena
	uint32_t ids_off; // sub ids in the arena (4-byte aligned)
	uint16_t n_ids;
	uint16_t pid;
	uint8_t  qos;
	uint8_t  state;
	bool     retain;
	bool     skip; // cancelled out inside its group
	bool     live; // queued for a connected client (store_hold.c)
} store_qent;

// A done range waiting in the queue (see nmq_store.pdone).
struct store_pdone {
	uint32_t sid;
	uint64_t hi;
};

// One queued operation, strings and sub ids behind it. Most come from the
// store's pool (see op_get in store.c): taken by the submitting thread
// from its own cache, given back in bulk by the store thread.
typedef struct store_op {
	struct store_op *next;
	struct store_op *all_prev, *all_next; // pooled: every pooled op of the store
	struct store_op *chain_next; // free: the next chain (in a chain's head)
	uint32_t         chain_n; // free: the ops of the chain it heads
	store_done_fn    done;
	void            *arg;
	union {
		void (*read_fn)(void *arg, const store_qmsg *q); // OP_QUEUE_READ
		void (*sub_fn)(void *arg, const store_sub *sub); // OP_SUBS_READ
		void (*rel_fn)(void *arg, uint16_t packet_id); // OP_RELS_READ
	};
	nmq_msg    *msg; // held
	char       *s1; // client id or topic
	char       *s2; // filter or user name
	uint32_t   *sub_ids;
	store_qent *ents; // OP_QUEUE_PUTM (heap, freed with the op)
	char       *arena;
	uint32_t    ents_cap, arena_len, arena_cap;
	uint64_t    u64; // seq, wall-clock ms, first seq of OP_QUEUE_DONE
	uint64_t    u64b; // last seq of OP_QUEUE_DONE
	uint32_t    u32; // expiry, sub id, read max, rows of OP_QUEUE_PUTM
	uint32_t    u32b; // will delay
	uint32_t    n_sub_ids;
	// The session's number (store_sid_new; 0: none, keyed by s1 alone):
	// the group pairs a session's operations by (sid, seq).
	uint32_t sid;
	uint32_t srv; // OP_QUEUE_STATE (PUT folded): store_queue_state_srv's server
	nmq_err  result;
	uint16_t pid;
	uint8_t  kind;
	uint8_t  qos; // QoS, options, protocol version
	uint8_t  state;
	bool     retain;
	bool     has_s2;
	bool     skip; // cancelled out inside its group: nothing to write
	bool     more; // not the last op of a store_batch: same group as the next
	bool     pooled; // from the pool (else allocated for itself)
	bool     live; // OP_QUEUE_PUT for a connected client (store_hold.c)
	// done is a store_sync barrier's that rides on this operation (the
	// last of its store_batch): called with NMQ_OK once the group commits,
	// whatever the operation's own result.
	bool barrier;
	// OP_SYNC of store_sync_since: fails if a group taken after take u64
	// failed.
	bool since;
	// OP_QUEUE_PUT taken into the running group's offline segment of its
	// client id (store_oseg.c): the next one of that client id.
	struct store_op *oseg_next;
	uint64_t         data[]; // aligned storage for sub ids, then strings
} store_op;

enum store_stmt {
	STMT_MSG_REF,
	STMT_MSG_INSERT,
	STMT_MSG_UNREF,
	STMT_MSG_GC,
	STMT_MSG_ADD,
	STMT_MSG_DEL,
	STMT_MSG_DEL_LAST,
	STMT_MSG_DEL_RANGE,
	STMT_MSG_UNREF_RANGE,
	STMT_SESSION_GET,
	STMT_SESSION_PUT,
	STMT_SESSION_OFFLINE,
	STMT_SESSION_DEL,
	STMT_SUBS_DEL_ALL,
	STMT_REL_DEL_ALL,
	STMT_QUEUE_UNREF_ALL,
	STMT_QUEUE_GC_ALL,
	STMT_QUEUE_DEL_ALL,
	STMT_SUB_PUT,
	STMT_SUB_DEL,
	STMT_QUEUE_PUT,
	STMT_QUEUE_STATE,
	STMT_QUEUE_DEL,
	STMT_QUEUE_DEL_RANGE,
	STMT_QUEUE_OLDEST,
	STMT_QUEUE_DEL_ID,
	STMT_REL_PUT,
	STMT_REL_DEL,
	STMT_RETAIN_GET,
	STMT_RETAIN_PUT,
	STMT_RETAIN_DEL,
	STMT_QUEUE_READ,
	STMT_BEGIN,
	STMT_COMMIT,
	STMT_ROLLBACK,
	STMT_COUNT_
};

// The running group's held entries (store_hold.c): their encoding (ents,
// cids: the client id table), n of them, the table's client ids by index
// (sids, cid_at: offset in cids, cid_len) and its hash by sid (slots:
// index + 1), the last entry's message row id.
typedef struct store_hcur {
	uint8_t  *ents, *cids;
	size_t    ents_len, ents_cap, cids_len, cids_cap;
	uint32_t  n, n_cids;
	uint32_t *sids, *cid_at, *slots;
	uint16_t *cid_len;
	size_t    slots_cap;
	int64_t   last_msg;
} store_hcur;

// A committed group's held entries (nmq_store.hold_gens, oldest first):
// its blob p (the held row's, entries from ents_off), n entries, the
// client id table by index (sids, cid_at: offset in p, cid_len), the held
// row, when it was committed, the first entry not known to be done with
// (cursor, and the message row id before it), whether the running group
// retired it.
typedef struct store_hgen {
	uint8_t           *p;
	size_t             len, ents_off, cursor;
	uint32_t           n, n_cids;
	uint32_t          *sids, *cid_at;
	uint16_t          *cid_len;
	int64_t            row, cursor_msg;
	uint64_t           born, groupno;
	bool               retired;
	struct store_hgen *next;
} store_hgen;

// A committed group's done records (store_hold.c): its held row and the
// number of the group.
typedef struct store_hdgen {
	int64_t             row;
	uint64_t            groupno;
	bool                retired;
	struct store_hdgen *next;
} store_hdgen;

// One entry of a held row, as store_hold_parse gives it (cid not
// terminated).
typedef struct store_hent {
	int64_t         msg_id;
	uint64_t        seq;
	uint8_t         qos;
	bool            retain;
	uint16_t        n_ids;
	uint16_t        cid_len;
	const char     *cid;
	const uint32_t *ids;
} store_hent;

// A queued message evicted in the running batch, reported after commit.
typedef struct store_evict {
	int64_t  row;
	int64_t  msg_id;
	uint64_t seq;
	char     cid[64];
	char    *cid_full; // when the client id does not fit in cid
} store_evict;

struct nmq_store {
	store_opts    opts;
	char          path[4096];
	sqlite3      *db; // the store thread's (the main thread's before it starts)
	sqlite3_stmt *stmts[STMT_COUNT_];
	pthread_t     thread;
	bool          recovered;
	// When the store thread last rebuilt the indexes after a commit found
	// the file damaged (store_repair_indexes; 0: never).
	uint64_t reindexed_mono_ms;

	pthread_mutex_t mtx; // guards the queue and the pool below
	pthread_cond_t  cv;
	store_op       *head, *tail;
	// Written under mtx; read without it by a thread admitting the
	// operations of its store_batch.
	_Atomic uint32_t pending;
	atomic_bool      stopping;
	bool             exited; // the store thread has ended (under mtx)
	// The pool of operations (under mtx): free ones, and every pooled one
	// (free, cached by a thread or in use), freed at close.
	store_op *free_ops; // chains of up to 256 (chain_next, chain_n in their heads)
	uint32_t  free_n;
	store_op *all_ops;
	uint64_t  uid; // distinguishes this store from an earlier one at the same address
	// Counts the store thread's takes from the queue (changed under mtx,
	// read by any thread: store_sync_mark): an OP_QUEUE_DONE queued at
	// take_gen is still in the queue (and may be extended) while take_gen
	// has not moved.
	_Atomic uint64_t take_gen;
	uint64_t         fail_take; // take of the last group that failed (store thread)
	// OP_QUEUE_DONE and numbered OP_SESSION_DEL operations queued since
	// the store thread last took the whole queue (under mtx).
	uint32_t         mark_ops;
	_Atomic uint32_t next_sid;
	// The done ranges queued outside a store_batch since the store thread
	// last took the whole queue, as (session number, highest seq) (under
	// mtx; an OP_QUEUE_DONE's u32 is its entry, updated while it grows in
	// place), and a count of their changes: the store thread, applying a
	// group, does not write the puts of seqs acked meanwhile
	// (store_group_peek).
	struct store_pdone *pdone;
	uint32_t            pdone_len, pdone_cap;
	_Atomic uint32_t    pdone_gen;
	uint32_t            pdone_seen; // store thread: pdone_gen at its last look

	// Store thread only.
	uint64_t queued_rows;
	// Frames in the write-ahead log after the last commit (store_wal_hook).
	int          wal_frames;
	nmq_msg    **batch_msgs; // messages given a row in the running batch
	size_t       batch_msgs_len, batch_msgs_cap;
	store_evict *evicts;
	size_t       evict_len, evict_cap;
	// The running group (store_group.c): its (client id, seq) keys and
	// the message rows whose reference counts it changed.
	bool               in_group;
	struct store_ckey *ckeys;
	uint32_t          *ckeys_used; // slots taken, to clear
	size_t             ckeys_cap, ckeys_len;
	uint32_t           ckeys_gen;
	// Per session number, the highest seq an OP_QUEUE_DONE covered (kept
	// across groups; an entry goes with the session's OP_SESSION_DEL).
	struct store_done *dones;
	size_t             dones_cap, dones_len;
	struct store_rref *rrefs;
	uint32_t          *rrefs_used;
	size_t             rrefs_cap, rrefs_len;

	// The bridges' cache (store_bcache.c, store thread): its statements,
	// the bridges' numbers it looked up, and its rows (in queued_rows too).
	sqlite3_stmt     *bstmts[12];
	struct store_bid *bids;
	size_t            bids_len, bids_cap;
	uint64_t          bcache_rows;
	// store_bcache_set_gone: which rows eviction finds already done with.
	_Atomic(store_bcache_gone_fn) bgone;
	void *_Atomic                 bgone_arg;
	// Rows whose message expired while the broker runs
	// (store_bcache_expire): the earliest expiry of a row not in flight
	// (wall ms, 0: none), the last sweep (monotonic ms), the rows dropped
	// in the running group (by a sweep or a read), reported after its
	// commit to the function of store_bcache_set_expired.
	uint64_t                         bexp_next, bexp_mono;
	store_evict                     *bexps;
	size_t                           bexp_len, bexp_cap;
	_Atomic(store_bcache_expired_fn) bexpired;
	void *_Atomic                    bexpired_arg;

	// Rows held back for one group (store_hold.c, store thread): the
	// running group's entries and the previous group's, with counts of
	// the held entries later written as rows or dropped as done with.
	sqlite3_stmt *hstmts[2];
	store_hcur    hold_cur; // the running group's
	store_hgen   *hold_gens; // committed, oldest first
	store_hgen   *hold_pending; // the running group's, once its row is written
	uint64_t      hold_total; // entries in hold_gens not retired
	// The running group's done records (client id, highest seq done
	// with) while entries are held, and the committed ones.
	uint8_t     *hold_dp;
	size_t       hold_dlen, hold_dcap;
	store_hdgen *hold_dgens, *hold_dpending;
	uint64_t     hold_groupno; // committed groups
	bool         hold_final; // stopping: the next group writes them all
	// Offline segments (store_oseg.c, store thread).
	struct store_oseg *oseg;
	bool               oseg_final; // stopping: the next group writes them all
	uint64_t           held_written, held_dropped;

	_Atomic uint64_t commits, ops, failed, coalesced, evicted, expired, queued_rows_pub;
	_Atomic unsigned test_group_oom; // store_test_group_oom
	_Atomic unsigned test_group_fail; // store_test_group_fail
	_Atomic unsigned test_after_oom; // store_test_after_oom

	// The alive row (store_alive.c), store thread only: its statements,
	// when it was last written (nmq_clock_ms, 0: not yet), whether a
	// stored session is online, and whether that must be asked again
	// (a session row changed).
	sqlite3_stmt *alive_put, *alive_online_q;
	uint64_t      alive_mono;
	uint32_t      alive_idle_ms; // idle write interval; 0: none needed
	bool          alive_recheck;

	// When the idle store thread gives back what a burst left (store_trim:
	// monotonic ms, 0: nothing to give back).
	uint64_t trim_due;
	// Pacing (store_group_pace): when the last group started (monotonic
	// us), its operations (weight), and the broker's activity count
	// (store_set_activity).
	uint64_t group_start_us;
	uint32_t group_last_n;
	uint64_t (*activity)(void *arg);
	void *activity_arg;
};

uint64_t               store_wall_ms(void);
static inline uint64_t store_mono_ms(void)
{
	return nmq_clock_ms();
}
sqlite3_stmt *store_stmt(nmq_store *s, enum store_stmt i);
// Resets st and clears its bindings; returns it.
sqlite3_stmt *store_stmt_fresh(sqlite3_stmt *st);
// Runs a statement that returns no row, then resets it. Returns the SQLite
// result code (SQLITE_DONE on success).
int  store_step_done(sqlite3_stmt *st);
int  store_session_purge(nmq_store *s, const char *cid);
int  store_session_purge_state(nmq_store *s, const char *cid);
void store_db_close(nmq_store *s);
// store_group.c (store thread): sizes the tables for a group of n_ops
// operations (0, or -1 when out of memory: nothing is coalesced); marks
// the operations of batch that cancel out (op->skip, op->state/pid of a
// put folded with its state update); records reference count changes of
// message rows (see store_group.c for the return values); writes them
// (rows left without reference are deleted). flush_refs returns 0 or -1.
int store_group_begin(nmq_store *s, size_t n_ops);
// marks: the batch may hold an OP_QUEUE_DONE or an OP_SESSION_DEL with a
// session number (false: it holds none, one walk of the batch is saved).
void store_group_coalesce(nmq_store *s, store_op *batch, bool marks);
// When store_group_begin failed (out of memory): nothing is paired, but
// the done ranges are still recorded and the puts they cover not written.
void store_group_dones_only(nmq_store *s, store_op *batch, bool marks);
// Records the done ranges queued since the group was taken (s->pdone)
// as the group's own are. Takes s->mtx; only a load when none changed.
void store_group_peek(nmq_store *s);
// Whether seq of session sid is done with (covered by a done range).
bool store_group_is_done(const nmq_store *s, uint32_t sid, uint64_t seq);
// A queue row of session sid at seq was written (or, !written, held back:
// store_hold.c) by this run's store thread. Rows of sid at seqs from the
// lowest so noted are only ever written by this run (a session's seqs
// grow; the file's rows are older), so a done range of sid starting
// above the highest row written finds nothing (store_group_range_empty),
// and its DELETE is not run.
void store_group_note_row(nmq_store *s, uint32_t sid, uint64_t seq, bool written);
bool store_group_range_empty(const nmq_store *s, uint32_t sid, uint64_t lo);
int  store_group_ref(nmq_store *s, int64_t id, int64_t delta);
int  store_group_flush_refs(nmq_store *s);
void store_group_forget(nmq_store *s); // after a rollback
// Idle store thread, outside a group: frees the group's tables if they
// have more than keep slots (the next group sizes them again).
void store_group_shrink(nmq_store *s, size_t keep);

// store_alive.c (see there). A group commit rewrites the alive row when
// it is STORE_ALIVE_STEP_MS old; an idle store thread, while a stored
// session with a finite expiry is online, every tenth of the shortest
// such expiry, within STORE_ALIVE_IDLE_MS and STORE_ALIVE_IDLE_MAX_MS.
#define STORE_ALIVE_STEP_MS     1000
#define STORE_ALIVE_IDLE_MS     5000
#define STORE_ALIVE_IDLE_MAX_MS 300000
// Inside a group's transaction: the alive row if it is due. 0 or -1.
int store_alive_in_group(nmq_store *s, uint64_t wall);
// After a group (no lock held): whether a session is online, if asked.
void store_alive_after_group(nmq_store *s);
// A session row was written or deleted by op_apply: the shortest finite
// expiry among the sessions online may have changed.
static inline void store_alive_session_op(nmq_store *s)
{
	s->alive_recheck = true;
}
// The store thread's wait for work, s->mtx held and the queue empty.
// Returns true when an idle alive write is due now (caller: unlock,
// store_alive_idle, lock).
// Also wakes at also_due (monotonic ms, 0: none).
bool store_alive_wait(nmq_store *s, uint64_t also_due);
void store_alive_idle(nmq_store *s);
// store_load (main thread, in its transaction): the sessions stored
// online get the alive time as the time they went offline. Returns how
// many (-1 on error); *alive_wall = that time (0: the file has none).
long store_alive_load(nmq_store *s, uint64_t *alive_wall);

// store_load.c: runs OP_QUEUE_READ inside the batch's transaction.
int store_queue_read_apply(nmq_store *s, store_op *op, uint64_t wall, uint64_t mono);
// store_load.c: runs OP_SUBS_READ inside the batch's transaction.
int store_subs_read_apply(nmq_store *s, store_op *op);
// store_load.c: runs OP_RELS_READ inside the batch's transaction.
int store_rels_read_apply(nmq_store *s, store_op *op);

// store_load.c: a message from the columns topic, qos, retain,
// expiry_interval, expiry_wall_ms, props, payload starting at col.
nmq_msg *store_msg_from_row(sqlite3_stmt *st, int col, int64_t id, uint64_t wall, uint64_t mono);

// store_bcache.c: the bridges' offline cache, the rows of client ids under
// "$bridge/" (store thread). Each returns 0 or -1 (put: 1 for a seq
// stored twice); evict returns the rows evicted or -1.
static inline bool store_is_bcache(const char *cid)
{
	return cid != NULL && strncmp(cid, "$bridge/", 8) == 0;
}
extern const char store_bcache_schema_sql[];
int               store_bcache_prepare(nmq_store *s);
void              store_bcache_finalize(nmq_store *s);
void              store_bcache_forget(nmq_store *s); // after a rollback
int store_bcache_put(nmq_store *s, const char *cid, uint64_t seq, const nmq_msg *m, uint8_t qos,
    bool retain, uint8_t state, uint16_t pid, uint32_t srv, uint64_t wall, uint64_t mono);
int store_bcache_state(
    nmq_store *s, const char *cid, uint64_t seq, uint8_t state, uint16_t pid, uint32_t srv);
int     store_bcache_del_range(nmq_store *s, const char *cid, uint64_t lo, uint64_t hi);
int     store_bcache_purge(nmq_store *s, const char *cid);
int     store_bcache_read(nmq_store *s, store_op *op, uint64_t wall, uint64_t mono);
int64_t store_bcache_evict(nmq_store *s, uint64_t n);
// Expiry while the broker runs: a sweep of at most STORE_BCACHE_EXPIRE_MAX
// rows whose message expired, at most every STORE_BCACHE_EXPIRE_TICK_MS.
// due: whether one is due now; if not, *wake is when (monotonic ms, 0:
// none). expire: the sweep inside the open transaction (0 or -1), if due.
// idle: a sweep in a transaction of its own (an idle store thread).
// report: after the group (ok: committed), counts, logs and reports the
// rows the group dropped as expired (sweep and reads).
#define STORE_BCACHE_EXPIRE_TICK_MS 1000
#define STORE_BCACHE_EXPIRE_MAX     4096
bool store_bcache_expire_due(nmq_store *s, uint64_t *wake);
int  store_bcache_expire(nmq_store *s, uint64_t wall);
void store_bcache_expire_idle(nmq_store *s);
void store_bcache_expired_report(nmq_store *s, bool ok);
// Moves the bridges' rows of a version STORE_SCHEMA_BCACHE - 1 file to
// the cache table and sets the version to to_version, in one transaction.
int store_bcache_migrate(sqlite3 *db, int to_version);
// store_group.c: pairs the seqs of an OP_QUEUE_DEL_RANGES with the
// group's earlier puts and state updates (those are then not written).
void store_group_pair_ranges(nmq_store *s, store_op *op);

// Varints (7 bits a byte, low first) of the store's blobs (held rows,
// offline segments). store_varint_put writes at most 10 bytes;
// store_varint_get reads one of at most 10 bytes from p[*off..len), false
// if it runs past the end or is too long.
static inline size_t store_varint_put(uint8_t *p, uint64_t v)
{
	size_t n = 0;
	while (v >= 0x80) {
		p[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	p[n++] = (uint8_t)v;
	return n;
}

static inline bool store_varint_get(const uint8_t *p, size_t len, size_t *off, uint64_t *v)
{
	uint64_t r = 0;
	for (unsigned shift = 0, i = 0; i < 10; i++, shift += 7) {
		if (*off >= len) {
			return false;
		}
		uint8_t b = p[(*off)++];
		if (shift == 63 && b > 1) {
			return false;
		}
		r |= (uint64_t)(b & 0x7f) << shift;
		if (b < 0x80) {
			*v = r;
			return true;
		}
	}
	return false;
}

// store_oseg.c: messages queued for offline sessions written as one row
// per client id and group (see there). Store thread, inside the group's
// transaction unless said.
typedef struct store_oseg store_oseg;
// One entry of a segment, as store_oseg_parse gives it (topic not
// terminated; ids valid until the next entry).
typedef struct store_oent {
	uint64_t        seq;
	uint64_t        expiry_wall;
	uint32_t        expiry_interval;
	uint32_t        topic_len, props_len, payload_len;
	uint16_t        n_ids;
	uint8_t         qos, mqos; // the delivery's and the message's
	bool            retain, mretain;
	const char     *topic;
	const uint8_t  *props, *payload;
	const uint32_t *ids;
	size_t          end; // offset in the blob just past this entry
} store_oent;
extern const char store_oseg_schema_sql[];
// Parses a segment blob: fn for each entry (stops when it returns non
// zero). Returns the entries, or -1 if malformed or fn stopped (the
// entries before were given). _ids: with a caller's buffer for the ids.
long store_oseg_parse(
    const uint8_t *p, size_t len, int (*fn)(void *arg, const store_oent *e), void *arg);
long store_oseg_parse_ids(const uint8_t *p, size_t len, uint32_t **ids, size_t *ids_cap,
    int (*fn)(void *arg, const store_oent *e), void *arg);
int  store_oseg_prepare(nmq_store *s);
void store_oseg_finalize(nmq_store *s);
// At a group's start: its clocks (for the entries' expiry).
void store_oseg_group_start(nmq_store *s, uint64_t wall, uint64_t mono);
// An OP_QUEUE_PUT for an offline session: true if taken into the running
// group's segment of its client id (counted in queued_rows), false if it
// is to be written as rows.
bool store_oseg_take(nmq_store *s, store_op *op);
// Before an operation that reads or deletes cid's queue rows by SQL: its
// segments become queue rows, oldest first, those whose first seq is at
// most max_seq and at least enough for min_rows entries (the running
// group's, the newest, last). 0 or -1. _expand: all of them.
int store_oseg_expand_to(nmq_store *s, const char *cid, uint64_t max_seq, uint32_t min_rows);
int store_oseg_expand(nmq_store *s, const char *cid);
// The oldest max_rows committed segment rows, in the order they were
// written whatever their client id, become queue rows, and so do the
// running group's (stopping). 0 or -1.
int store_oseg_expand_all(nmq_store *s, uint32_t max_rows);
// Segment rows in the index (committed).
uint64_t store_oseg_rows(const nmq_store *s);
// Before the commit: the running group's segments are written. 0 or -1.
int store_oseg_end_group(nmq_store *s);
// After the commit (ok) or the rollback: the index follows.
void store_oseg_after_group(nmq_store *s, bool ok);
// Whether any segment is indexed (the stop writes them).
bool store_oseg_any(const nmq_store *s);
// Whether any segment row exists (committed, or written by this group).
bool store_oseg_has_rows(const nmq_store *s);
// The id of the oldest queued (state 0) queue row, 0 if none, -1.
int64_t store_oseg_oldest_queued(nmq_store *s);
// Evicts up to n entries from the oldest segment if it is older than
// queue row oldest_q (0: none). Returns the entries evicted (0: none
// was older), or -1.
int64_t store_oseg_evict(nmq_store *s, uint64_t n, int64_t oldest_q);
// At open, before anything reads (own transaction): segments left by a
// crash become queue rows. Returns the rows, -1 (damaged beyond the
// segments), -2 (locked) or -3 (no room), as store_hold_expand.
long store_oseg_restore(sqlite3 *db, const char *path);
// store.c, for store_oseg.c: a message row for m (or a reference to its
// row); its id, 0 on error. And an evicted entry for the report.
int64_t store_msg_ref(nmq_store *s, nmq_msg *m, uint64_t now_wall, uint64_t now_mono);
int     store_evict_note(nmq_store *s, const char *cid, uint64_t seq);

// store_hold.c: QoS 1 rows for connected clients held back one group
// (see there). Store thread, inside the group's transaction unless said.
extern const char store_hold_schema_sql[];
int               store_hold_prepare(nmq_store *s);
void              store_hold_finalize(nmq_store *s); // also frees the buffers
// Whether a row may be held back rather than written.
static inline bool store_hold_eligible(
    bool live, uint32_t sid, uint8_t qos, uint8_t state, const char *cid)
{
	return live && sid != 0 && qos == 1 && state == 0 && !store_is_bcache(cid);
}
// Adds an entry to the running group's held row (msg_id referenced for
// it). 0, or -1 when out of memory (the caller writes the row instead).
int store_hold_add(nmq_store *s, const char *cid, uint32_t sid, uint64_t seq, int64_t msg_id,
    uint8_t qos, bool retain, const uint32_t *ids, uint16_t n_ids);
// Only the rows of a message queued for this many sessions or more are
// held: the message row of one with fewer lives longer when held (until
// its generation is done with), which costs more writes than the few
// queue rows saved (store_pairs_q1, decisions/0045).
#define STORE_HOLD_MIN_ROWS 4
// A generation is held at most this long (then its rows not done with
// are written), and no more than this many entries in all.
#define STORE_HOLD_AGE_MS 500
#define STORE_HOLD_MAX    262144
// At the start of a group: the generations whose entries are all done
// with are dropped, those too old (or past STORE_HOLD_MAX) written as
// rows. 0 or -1.
int store_hold_group_start(nmq_store *s);
// Before an operation that reads or deletes rows by SQL, and when
// stopping: every entry held (the running group's too) becomes a queue
// row unless done with. 0 or -1.
int store_hold_flush_all(nmq_store *s);
// Before the commit: writes the running group's held row. 0 or -1.
int store_hold_end_group(nmq_store *s);
// After the commit (ok) or the rollback.
void store_hold_after_group(nmq_store *s, bool ok);
// The store thread's wait (s->mtx held, queue empty) while generations
// are held: returns true when the oldest is due (run an empty group).
bool store_hold_wait(nmq_store *s);
// A done range of client id cid up to hi was applied: recorded with the
// group while entries are held, so that entries it covers do not come
// back after a crash (best effort: without memory they may, at least once).
void store_hold_note_done(nmq_store *s, const char *cid, uint64_t hi);
// Parses a held row of done records: fn for each (stops when it returns
// non zero). Returns the records, or -1 if malformed or fn stopped.
long store_hold_parse_dones(const uint8_t *p, size_t                            len,
    int (*fn)(void *arg, const char *cid, uint16_t cid_len, uint64_t hi), void *arg);
// Whether committed held rows wait for a later group.
bool store_hold_pending(const nmq_store *s);
// At open, in a transaction of its own: held rows left by a crash become
// queue rows. Returns the rows written, -2 when the file is locked by
// another connection (nothing changed), -3 when the disk has no room for
// the writes (store_no_room; nothing changed), or -1 (logged).
long store_hold_expand(sqlite3 *db, const char *path);
// Parses a held row: calls fn for each entry (stops when it returns non
// zero). Returns the entries, or -1 if the blob is malformed or fn
// stopped. Checks every length (the blob comes from a file).
long store_hold_parse(
    const uint8_t *p, size_t len, int (*fn)(void *arg, const store_hent *e), void *arg);
// store.c, for store_hold.c: writes one queue row (a seq stored already
// keeps its row and gives back the reference), or drops a reference.
int store_hold_row(nmq_store *s, const char *cid, uint32_t sid, uint64_t seq, int64_t msg_id,
    uint8_t qos, bool retain, const uint32_t *ids, uint16_t n_ids);
int store_hold_unref(nmq_store *s, int64_t msg_id);

// At open, before SQLite reads it: a write-ahead log damaged in the
// middle (commits after the damaged frame that SQLite would drop without
// a word) is logged at error with a copy kept (store_walcheck.c).
void store_wal_check_frames(const char *path);

// True when a SQLite error (extended code) says the disk has no room or
// refused a write (a full disk, a file size limit, no room for the WAL's
// shared-memory file), as opposed to a damaged file: such a file is good
// and is left as it is.
static inline bool store_no_room(int xcode)
{
	return (xcode & 0xff) == SQLITE_FULL || xcode == SQLITE_IOERR_WRITE
	    || xcode == SQLITE_IOERR_FSYNC || xcode == SQLITE_IOERR_TRUNCATE
	    || xcode == SQLITE_IOERR_SHMSIZE || xcode == SQLITE_IOERR_SHMOPEN
	    || xcode == SQLITE_IOERR_SHMMAP || xcode == SQLITE_IOERR_DIR_FSYNC;
}

#endif // NMQ_STORE_INT_H
