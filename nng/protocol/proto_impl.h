// The protocol-layer instance (proto.c), shared inside nng/protocol: the
// limits, the session table, the live links and the counters. Not for use
// outside nng/protocol/. The session's own state is private to session.c
// (session.h says what others may do with a session); the connection's
// protocol state is in link.h.
#ifndef NMQ_PROTO_IMPL_H
#define NMQ_PROTO_IMPL_H

#include <pthread.h>

#include "nng/core/nmq_err.h"
#include "nng/core/nmq_mutex.h"
#include "nng/protocol/proto.h"

typedef struct nmq_link nmq_link;

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
	// The durable store (NULL: none); set once before any connection.
	const proto_store_ops *store;
	void                  *store_arg;
	// The store whose commits acks wait for: the same as store, or a
	// store bound for acks alone (proto_set_ack_store). Set once.
	const proto_store_ops *ack_store;
	void                  *ack_store_arg;
	conn_env               env;
	proto_metrics          m;
	atomic_ullong          next_session_id;
	_Atomic bool           want_msg_events; // call ops->message_event

	pthread_mutex_t tbl_mtx;
	nmq_session   **tbl; // open hash by client id
	size_t          tbl_cap;
	size_t          tbl_len; // live sessions
	size_t          tbl_tomb; // tombstones (removed sessions' slots)

	// Live links, for shutdown.
	pthread_mutex_t links_mtx;
	nmq_link      **links;
	size_t          links_len;
	size_t          links_cap;
	bool            stopping;
	// proto_quiesce: what clients send is no longer handled.
	_Atomic bool rx_stopped;
};

// The current limits (any thread).
static inline const proto_limits *proto_lim(const nmq_proto *p)
{
	return &__atomic_load_n(&p->lim, __ATOMIC_ACQUIRE)->lim;
}

// The session table (proto.c). Caller holds tbl_mtx.
// Finds a session by client id; NULL if none (no reference taken).
nmq_session *proto_table_find(nmq_proto *p, const char *client_id);
// Inserts s; the table keeps the caller's reference. Returns NMQ_OK, or
// NMQ_ENOMEM when the table is full and cannot grow (logged and counted;
// s is not inserted).
nmq_err proto_table_insert(nmq_proto *p, nmq_session *s);
void    proto_table_remove(nmq_proto *p, nmq_session *s);

void proto_count_drop(nmq_proto *p, atomic_long *why);
// Counts n drops at once (total and why).
void proto_count_drops(nmq_proto *p, atomic_long *why, size_t n);
// Counts a failed allocation (metrics alloc_failures) and logs it, rate
// limited, naming what it was for (what, e.g. "session_work").
void proto_count_alloc_failure(nmq_proto *p, const char *what);

// Logs (rate limited) and counts a write the store refused.
void proto_store_failed(nmq_proto *p, const char *what, const char *client_id, nmq_err e);
// Thread-local: whether routing on this thread wrote to the store since
// the last call (and forgets it).
bool proto_store_take_noted(void);
// True when the store's write queue is at or over its high-water mark
// (half its bound), or, with `resume`, still over its low-water mark (a
// quarter): a publisher whose message wrote to the store pauses at the
// first and resumes under the second.
bool proto_store_congested(nmq_proto *p, bool resume);

// Live links. proto_links_add returns NMQ_OK, NMQ_ECLOSED (stopping) or
// NMQ_ENOMEM.
nmq_err proto_links_add(nmq_proto *p, nmq_link *l);
void    proto_links_remove(nmq_proto *p, nmq_link *l);

#endif // NMQ_PROTO_IMPL_H
