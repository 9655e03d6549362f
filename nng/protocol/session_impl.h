// The session's state. Private to the session module: only session.c (and
// its unit test, tests/unit/test_session.c, which inspects it) include this
// header; everything else goes through the functions of session.h, so that
// the session alone decides how its state changes (and, later, persists).
#ifndef NMQ_SESSION_IMPL_H
#define NMQ_SESSION_IMPL_H

#include "nng/protocol/session.h"

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

// Flags of an in-flight entry of a persistent session (the durable store,
// decisions/0016): a QoS 2 PUBLISH, and the PUBREL after its PUBREC, go
// out only once the store has committed the state that goes with them.
enum {
	INFL_HELD   = 1, // waiting for the store's barrier number `gen`
	INFL_UNSENT = 2, // its PUBLISH (WAIT_PUBREC) or PUBREL (WAIT_PUBCOMP)
	                 // has not been written to the client yet
};

typedef struct infl_entry {
	out_entry e;
	uint16_t  pid;
	uint8_t   state;
	uint8_t   flags; // INFL_HELD, INFL_UNSENT
	uint32_t  gen; // INFL_HELD: the barrier that makes its state durable
	uint64_t  sent_ms;
} infl_entry;

// An inbound QoS 2 packet id awaiting PUBREL, and when it arrived.
typedef struct rel_entry {
	uint16_t pid;
	uint64_t at_ms;
} rel_entry;

// A session, keyed by client id. Everything below `mtx` (and expiry_s) is
// guarded by it. Ordered by size to keep it small (one per client).
// Writes of a session made inside a thread's open store group
// (proto_store_ops.batch), which reach the store's thread only when the
// group closes: something the session would queue to the store from
// another thread meanwhile (a barrier, a read) would overtake them. unsub
// counts them, each holding a session reference until its group is
// queued (session.c: gate_note, gate_queued); what must wait sets wait
// (gate_wait), and the write that brings unsub to 0 with wait set posts
// job (kick: posted) to the session's barrier worker, which retries it.
typedef struct session_gate {
	atomic_uint unsub;
	atomic_bool wait;
	atomic_bool kick;
	workq_job   job;
} session_gate;

struct nmq_session {
	atomic_int refs;
	uint32_t   expiry_s; // (mtx) session expiry interval; UINT32_MAX never
	nmq_proto *p;
	uint64_t   id;
	void      *app_data;

	nmq_mutex mtx;
	nmq_link *link; // current connection, NULL while offline
	uint64_t  offline_since_ms;
	// (mtx) The wall-clock time the stored record says it went offline
	// (persistent sessions): a rewrite of the record keeps it.
	uint64_t offline_wall_ms;

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
	// In-flight PUBLISHes not written to the client yet (INFL_UNSENT):
	// QoS 0/1 messages queued behind them wait, so the order holds.
	uint32_t pend_pub;
	uint32_t unsent; // entries with INFL_UNSENT (PUBLISHes and PUBRELs)

	// The store's barrier for held entries (INFL_HELD): at most one in
	// flight (sync_busy, holding a reference), number sync_gen; its
	// completion posts sync_job to a worker, which sends what it made
	// durable and asks for the next one.
	workq_job sync_job;
	uint32_t  sync_gen;
	nmq_err   sync_err; // the barrier's result, for sync_job
	bool      sync_busy;
	// Writes a held entry needs committed (a QoS 2 row put, a held
	// entry's state) still in a thread's open store group: a barrier
	// issued meanwhile from another thread would be queued ahead of them,
	// so while the gate counts any, no barrier is issued and no QoS 2
	// entry is taken from q (its state write could overtake its row); its
	// job pumps and asks for the barrier (decisions/0039).
	session_gate sync_gate;

	// Inbound QoS 2 packet ids awaiting PUBREL.
	rel_entry *rel;
	uint32_t   rel_len;
	uint32_t   rel_cap;

	// A delayed will waiting for its time (or the session end).
	nmq_msg *will;
	uint64_t will_at_ms;

	tw_timer timer; // expiry, will delay and QoS retry
	uint64_t timer_at;

	atomic_ulong recv_msgs; // PUBLISH packets received from its clients
	uint16_t     keepalive; // (mtx) of the connection attached last
	bool         clean_start; // (mtx) of the connection attached last

	// Messages on disk only (the durable store): while disk_mode, QoS 1/2
	// deliveries are written to the store and not kept in q (an offline
	// persistent session costs no memory per message); while the client
	// is connected they are read back in seq order, DISK_CHUNK at a time,
	// whenever q runs short (session_disk_pump_locked).
	uint64_t disk_after; // seqs <= disk_after are in memory or done with
	uint64_t disk_last_put; // seq of the last disk-only delivery
	uint64_t disk_issue_seq; // q_seq when the read in flight was issued
	uint32_t disk_read_rows; // rows the read in flight returned so far
	bool     disk_mode;
	bool     disk_reading; // a read is in flight (holds a reference)
	// Disk-only deliveries still in a thread's open store group: a read
	// issued meanwhile would overtake them (and, finding nothing, end
	// disk mode with them left on disk, or skip past them), so no read is
	// issued while the gate counts any; its job issues the read.
	session_gate disk_gate;

	// (mtx) q.len, q0.len and infl_len as last added to the queue-depth
	// gauges (proto_queue_depth_get): every unlock adds the difference.
	uint32_t rep_q;
	uint32_t rep_q0;
	uint32_t rep_infl;

	// (mtx) Restored from the store: seqs below it may have gone out
	// before the restart, so they go (again) with DUP set.
	uint64_t dup_below;
	// (mtx) Every stored row with a seq <= ack_w is done with (deleted, or
	// its deletion queued): acks of the oldest rows extend it, one store
	// write (ack_op, extended while it waits, decisions/0026) for many.
	uint64_t ack_w;
	void    *ack_op;
	uint64_t ack_gen;
	uint32_t store_sid; // (mtx) the store's number for its queue writes (0: none yet)
	uint16_t next_pid;
	uint8_t  ver;
	bool     ended; // removed from the table
	bool     stored; // (mtx) the session has a record in the durable store
	bool     has_owner; // the creating CONNECT had a user name
	// (mtx) A preset session no client has taken over yet: stored with
	// protocol version 0, so that a restart knows it (and ends it once
	// the configuration no longer presets it).
	bool preset;
	// The client id, NUL-terminated, then (has_owner) the user name of the
	// CONNECT that created the session, both allocated with the struct.
	char client_id[];
};

#endif // NMQ_SESSION_IMPL_H
