// Sessions: the outbound queue bounded by max_mqueue_len, the in-flight
// window bounded by min(Receive Maximum, max_inflight_window), packet ids,
// inbound QoS 2 state, expiry and delayed wills.
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nng/core/droplog.h"
#include "nng/core/log.h"
#include "nng/protocol/link.h"
#include "nng/protocol/session_impl.h"

// Bytes a pump leaves in a send buffer while over mqtt.max_message_memory.
#define PUMP_TIGHT (16 * 1024)
// Largest queue ring kept once it is empty (entries).
#define RING_KEEP 64
// When the session timer retries work it could not post (out of memory).
#define SESSION_RETRY_MS 1000
// Messages read back from the store at a time, and the queue length under
// which the next read starts.
#define DISK_CHUNK 256
#define DISK_LOW   (DISK_CHUNK / 2)

static void session_timer_cb(tw_timer *t);
static void session_clear_locked(nmq_session *s);
static void session_pump_locked(nmq_session *s);
static void session_resend_locked(nmq_session *s, bool only_old);
static void session_timer_update_locked(nmq_session *s);
static void session_disk_pump_locked(nmq_session *s);
static void session_sync_locked(nmq_session *s);

// ---------------------------------------------------------------------------
// The durable store (proto.h): writes of a persistent session. Callers hold
// s->mtx; each write only queues (the store never waits on the disk while
// it is called).

static uint64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

// True when s's changes are written to the store.
static inline bool persist(const nmq_session *s)
{
	return s->stored && s->p->store != NULL;
}

// Opens (begin) or closes a group of this thread's store writes that
// commit together or not at all (proto_store_ops.batch): a will and the
// write that takes it out of its session's record (or deletes the record)
// go in one group, so that after a crash the will is either still stored
// (and published at the restart) or published and gone, never both and
// never neither. Nests; no-op without a store.
void proto_store_batch(nmq_proto *p, bool begin)
{
	if (p->store != NULL && p->store->batch != NULL) {
		p->store->batch(p->store_arg, begin);
	}
}

// The store's number for s's queue writes, asked for once (caller holds
// s->mtx).
static uint32_t session_store_sid(nmq_session *s)
{
	if (s->store_sid == 0 && s->p->store->sid_new != NULL) {
		s->store_sid = s->p->store->sid_new(s->p->store_arg);
	}
	return s->store_sid;
}

// Writes s's record: online (offline_wall 0) or offline since offline_wall,
// with the will of its connection (online) or its pending delayed will.
static void store_session_locked(nmq_session *s, uint64_t offline_wall)
{
	nmq_proto          *p = s->p;
	proto_store_session r;
	memset(&r, 0, sizeof(r));
	r.client_id       = s->client_id;
	r.username        = session_owner(s);
	r.expiry_s        = s->expiry_s;
	r.proto_ver       = s->preset ? 0 : s->ver; // 0: a preset no client took over
	r.offline_wall_ms = offline_wall;
	if (s->link != NULL && s->link->will != NULL) {
		r.will         = s->link->will;
		r.will_delay_s = s->link->will_delay_s;
	} else if (s->will != NULL) {
		uint64_t now   = nmq_clock_ms();
		r.will         = s->will;
		r.will_delay_s = s->will_at_ms > now ? (uint32_t)((s->will_at_ms - now) / 1000) : 0;
	}
	nmq_err e = p->store->session_put(p->store_arg, &r);
	if (e != NMQ_OK) {
		proto_store_failed(p, "session_put", s->client_id, e);
	}
	s->stored          = true;
	s->offline_wall_ms = offline_wall;
}

// Deletes s's record (and everything stored with it), if it has one.
static void store_session_del_locked(nmq_session *s)
{
	if (!persist(s)) {
		return;
	}
	nmq_err e = s->p->store->session_del(s->p->store_arg, s->client_id, s->store_sid);
	if (e != NMQ_OK) {
		proto_store_failed(s->p, "session_del", s->client_id, e);
	}
	s->stored = false;
	// A new number if it is stored again: nothing of the old one applies.
	s->store_sid = 0;
	s->ack_op    = NULL;
}

static void store_qstate_locked(nmq_session *s, uint64_t seq, uint8_t state, uint16_t pid)
{
	nmq_err e = s->p->store->queue_state(
	    s->p->store_arg, s->client_id, session_store_sid(s), seq, state, pid);
	if (e != NMQ_OK) {
		proto_store_failed(s->p, "queue_state", s->client_id, e);
	}
}

// The gates of writes still in an open store group (session_gate in
// session_impl.h).

// After a write of s: if it was made inside this thread's store group, g
// counts it until the group is queued (queued, which calls gate_queued).
// Registered first: queued runs on this thread only when its group ends,
// after the count is taken.
static void gate_note(nmq_session *s, session_gate *g, void (*queued)(void *arg))
{
	const proto_store_ops *st = s->p->store;
	if (st->after_batch == NULL) {
		return;
	}
	int r = st->after_batch(s->p->store_arg, queued, s);
	if (r == PROTO_AFTER_SET) {
		nmq_session_hold(s);
		atomic_fetch_add(&g->unsub, 1);
	} else if (r == PROTO_AFTER_FAILED) {
		// Out of memory: the store fails the whole group instead (none
		// of it is queued, so nothing can overtake it, and the barrier
		// of the ack it carries fails). The PUBLISH being routed is not
		// acknowledged as received either.
		proto_store_failed(s->p, "after_batch", s->client_id, NMQ_ENOMEM);
		proto_store_refused();
	}
}

// True while g counts a write in a group not yet queued; the wait is
// noted, so that the last one queued posts g's job (the caller retries
// from there).
static bool gate_wait(session_gate *g)
{
	if (atomic_load(&g->unsub) == 0) {
		return false;
	}
	atomic_store(&g->wait, true);
	return atomic_load(&g->unsub) > 0;
}

static void session_sync_queued(void *arg);

// A write a held entry needs committed before it goes (a QoS 2 row, a
// held entry's state) was just made.
static void session_sync_note_locked(nmq_session *s)
{
	gate_note(s, &s->sync_gate, session_sync_queued);
}

static void store_qdel_locked(nmq_session *s, uint64_t seq)
{
	nmq_err e
	    = s->p->store->queue_del(s->p->store_arg, s->client_id, session_store_sid(s), seq);
	if (e != NMQ_OK) {
		proto_store_failed(s->p, "queue_del", s->client_id, e);
	}
}

// The lowest seq that may still have a stored row s wants: in flight, in
// the queue in memory (in seq order), or on disk only (disk mode).
static uint64_t session_live_min(const nmq_session *s)
{
	uint64_t m = s->q_seq;
	for (uint32_t i = 0; i < s->infl_len; i++) {
		uint64_t q = s->infl[s->infl_start + i].e.seq;
		if (q < m) {
			m = q;
		}
	}
	if (s->q.len > 0 && s->q.v[s->q.head].seq < m) {
		m = s->q.v[s->q.head].seq;
	}
	if (s->disk_mode && s->disk_after + 1 < m) {
		m = s->disk_after + 1;
	}
	return m;
}

// The stored row of seq is done with (acknowledged), its entry already
// removed: when it was the oldest one s still wanted, every seq below the
// next wanted one is given to the store as done (extending the write
// still queued, if any: in-order acks cost one write per group, not one
// each), else it is deleted alone.
static void store_done_locked(nmq_session *s, uint64_t seq)
{
	const proto_store_ops *st = s->p->store;
	uint64_t               w  = session_live_min(s) - 1;
	if (st->queue_done != NULL && seq <= w && w > s->ack_w && session_store_sid(s) != 0) {
		nmq_err e = st->queue_done(s->p->store_arg, s->client_id, s->store_sid,
		    s->ack_w + 1, w, &s->ack_op, &s->ack_gen);
		if (e == NMQ_OK) {
			s->ack_w = w;
		} else {
			proto_store_failed(s->p, "queue_done", s->client_id, e);
		}
		return;
	}
	store_qdel_locked(s, seq);
}

static void store_rel_locked(nmq_session *s, uint16_t pid, bool put)
{
	nmq_err e = put ? s->p->store->rel_put(s->p->store_arg, s->client_id, pid)
	                : s->p->store->rel_del(s->p->store_arg, s->client_id, pid);
	if (e != NMQ_OK) {
		proto_store_failed(s->p, put ? "rel_put" : "rel_del", s->client_id, e);
		if (put) {
			proto_store_refused(); // the PUBLISH being received is not acked
		}
	}
}

bool nmq_session_persistent(nmq_session *s)
{
	nmq_mutex_lock(&s->mtx);
	bool r = persist(s);
	session_unlock(s);
	return r;
}

const char *nmq_session_username(const nmq_session *s)
{
	return session_owner(s);
}

// The first subscriber session that a delivery on this thread found
// congested (held), for the publisher's receive path to act on.
static __thread nmq_session *tls_congested;

// Queue-depth gauges (proto_queue_depth_get). Each thread that changes a
// session's queues owns one block and is its only writer (a plain load
// and store, no locked instruction on the message path); a reader sums
// the blocks claimed so far. The blocks are signed: a message queued on
// one thread and sent from another adds +1 to one block and -1 to the
// other. Threads past QDEPTH_BLOCKS share block 0 with atomic adds.
// Each block has its own cache line so that workers do not share one.
#define QDEPTH_BLOCKS 256
typedef struct qdepth_block {
	_Alignas(64) _Atomic int64_t q0;
	_Atomic int64_t q12;
	_Atomic int64_t infl;
} qdepth_block;
static qdepth_block           qdepth_blocks[QDEPTH_BLOCKS];
static atomic_uint            qdepth_claimed = 1;
static __thread qdepth_block *tls_qdepth;

static void qdepth_add1(_Atomic int64_t *c, int64_t d, bool shared)
{
	if (shared) {
		atomic_fetch_add_explicit(c, d, memory_order_relaxed);
	} else {
		atomic_store_explicit(
		    c, atomic_load_explicit(c, memory_order_relaxed) + d, memory_order_relaxed);
	}
}

// Adds to the gauges what changed in s's queues since the last call.
// Caller holds s->mtx (or the last reference).
static void qdepth_sync_locked(nmq_session *s)
{
	if (s->q.len == s->rep_q && s->q0.len == s->rep_q0 && s->infl_len == s->rep_infl) {
		return;
	}
	qdepth_block *b = tls_qdepth;
	if (b == NULL) {
		unsigned i = atomic_fetch_add_explicit(&qdepth_claimed, 1, memory_order_relaxed);
		b          = &qdepth_blocks[i < QDEPTH_BLOCKS ? i : 0];
		tls_qdepth = b;
	}
	bool shared = b == &qdepth_blocks[0];
	qdepth_add1(&b->q12, (int64_t)s->q.len - s->rep_q, shared);
	qdepth_add1(&b->q0, (int64_t)s->q0.len - s->rep_q0, shared);
	qdepth_add1(&b->infl, (int64_t)s->infl_len - s->rep_infl, shared);
	s->rep_q    = s->q.len;
	s->rep_q0   = s->q0.len;
	s->rep_infl = s->infl_len;
}

void proto_queue_depth_get(proto_queue_depth *out)
{
	unsigned n = atomic_load_explicit(&qdepth_claimed, memory_order_relaxed);
	if (n > QDEPTH_BLOCKS) {
		n = QDEPTH_BLOCKS;
	}
	memset(out, 0, sizeof(*out));
	for (unsigned i = 0; i < n; i++) {
		out->queued_qos0
		    += atomic_load_explicit(&qdepth_blocks[i].q0, memory_order_relaxed);
		out->queued_qos12
		    += atomic_load_explicit(&qdepth_blocks[i].q12, memory_order_relaxed);
		out->inflight += atomic_load_explicit(&qdepth_blocks[i].infl, memory_order_relaxed);
	}
}

static void session_sync_job(workq_job *job);
static void session_sync_wait_job(workq_job *job);
static void session_disk_job(workq_job *job);

// Returns a new session of ref 1 (not yet in the table), or NULL; see
// session.h.
nmq_session *session_alloc(
    nmq_proto *p, const char *client_id, const uint8_t *owner, size_t owner_len)
{
	// The client id and the owner live right behind the struct: one
	// allocation.
	size_t       idlen = strlen(client_id);
	size_t       olen  = owner != NULL ? owner_len + 1 : 0;
	nmq_session *s     = calloc(1, sizeof(*s) + idlen + 1 + olen);
	if (s == NULL) {
		return NULL;
	}
	memcpy(s->client_id, client_id, idlen + 1);
	if (owner != NULL) {
		memcpy(s->client_id + idlen + 1, owner, owner_len);
		s->has_owner = true;
	}
	atomic_init(&s->refs, 1);
	s->p        = p;
	s->id       = atomic_fetch_add(&p->next_session_id, 1);
	s->next_pid = 1;
	s->q_seq    = 1; // 0 is "before the first" (disk_after)
	nmq_mutex_init(&s->mtx);
	tw_timer_init(&s->timer, session_timer_cb);
	s->sync_job.fn      = session_sync_job;
	s->sync_gate.job.fn = session_sync_wait_job;
	s->disk_gate.job.fn = session_disk_job;
	return s;
}

const char *session_owner(const nmq_session *s)
{
	return s->has_owner ? s->client_id + strlen(s->client_id) + 1 : NULL;
}

// Reports a message sent to s or acknowledged by its client, when asked
// for (proto_want_message_events). Session lock held.
static inline void session_msg_event(nmq_session *s, const nmq_msg *msg, uint8_t qos, bool acked)
{
	nmq_proto *p = s->p;
	if (atomic_load_explicit(&p->want_msg_events, memory_order_relaxed) && msg != NULL) {
		p->ops->message_event(p->app, s, session_owner(s), msg, qos, acked);
	}
}

bool session_owned_by(const nmq_session *s, const uint8_t *u, size_t len)
{
	const char *o = session_owner(s);
	if (u == NULL || o == NULL) {
		return u == NULL && o == NULL;
	}
	return strlen(o) == len && memcmp(o, u, len) == 0;
}

void nmq_session_hold(nmq_session *s)
{
	atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
}

// Drops a reference; the last one frees the session and what it holds.
void nmq_session_release(nmq_session *s)
{
	if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1) {
		return;
	}
	session_clear_locked(s);
	qdepth_sync_locked(s);
	if (s->will != NULL) {
		nmq_msg_release(s->will);
	}
	nmq_mem_buffers_add(-(int64_t)(((size_t)s->q.cap + s->q0.cap) * sizeof(out_entry)
	    + (size_t)s->infl_cap * sizeof(infl_entry)));
	free(s->q.v);
	free(s->q0.v);
	free(s->infl);
	free(s->rel);
	nmq_mutex_destroy(&s->mtx);
	free(s);
}

bool nmq_session_online(nmq_session *s)
{
	// A racy read is fine: used to pick shared-subscription members.
	return __atomic_load_n(&s->link, __ATOMIC_RELAXED) != NULL;
}

uint64_t nmq_session_id(const nmq_session *s)
{
	return s->id;
}

const char *nmq_session_client_id(const nmq_session *s)
{
	return s->client_id;
}

uint8_t nmq_session_proto(const nmq_session *s)
{
	return s->ver;
}

void **nmq_session_app_data(nmq_session *s)
{
	return &s->app_data;
}

void session_lock(nmq_session *s)
{
	nmq_mutex_lock(&s->mtx);
}

// Every change to a session's queues is made under s->mtx, and every
// release of it in this file goes through here: the queue-depth gauges
// follow the queues exactly, whatever path changed them.
void session_unlock(nmq_session *s)
{
	qdepth_sync_locked(s);
	nmq_mutex_unlock(&s->mtx);
}

bool session_trylock(nmq_session *s)
{
	return nmq_mutex_trylock(&s->mtx);
}

nmq_link *session_link_locked(const nmq_session *s)
{
	return s->link;
}

// Copies the subscription identifiers ids[0..n) into e (at most
// SUBIDS_MAX). Up to SUBIDS_INLINE stay inline; more take one small array
// that e owns. If that allocation fails (counted and logged), e keeps the
// first SUBIDS_INLINE identifiers.
static void entry_set_ids(nmq_proto *p, out_entry *e, const uint32_t *ids, uint32_t n)
{
	if (n > SUBIDS_MAX) {
		n = SUBIDS_MAX;
	}
	if (n > SUBIDS_INLINE) {
		uint32_t *h = malloc((size_t)n * sizeof(*h));
		if (h != NULL) {
			memcpy(h, ids, (size_t)n * sizeof(*h));
			e->ids.heap  = h;
			e->n_sub_ids = (uint8_t)n;
			return;
		}
		proto_count_alloc_failure(p, "subscription_ids");
		n = SUBIDS_INLINE;
	}
	for (uint32_t i = 0; i < n; i++) {
		e->ids.in[i] = ids[i];
	}
	e->n_sub_ids = (uint8_t)n;
}

// Frees the identifier array e owns (if any); e keeps none.
static void entry_ids_free(out_entry *e)
{
	if (e->n_sub_ids > SUBIDS_INLINE) {
		free(e->ids.heap);
	}
	e->n_sub_ids = 0;
}

// Releases what a queued or in-flight entry owns: its message reference
// (if any) and its identifiers.
static void entry_free(out_entry *e)
{
	if (e->msg != NULL) {
		nmq_msg_release(e->msg);
		e->msg = NULL;
	}
	entry_ids_free(e);
}

// Gives back the array of an empty ring larger than RING_KEEP: a burst is
// over (it counts against mqtt.max_message_memory, and an idle session
// keeps little).
static void ring_trim(out_ring *r)
{
	if (r->len == 0 && r->cap > RING_KEEP) {
		nmq_mem_buffers_add(-(int64_t)r->cap * (int64_t)sizeof(*r->v));
		free(r->v);
		r->v   = NULL;
		r->cap = 0;
	}
}

// Releases every entry of a ring.
static void ring_clear(out_ring *r)
{
	for (uint32_t i = 0; i < r->len; i++) {
		entry_free(&r->v[(r->head + i) % r->cap]);
	}
	r->len  = 0;
	r->head = 0;
	ring_trim(r);
}

// Releases queued and in-flight messages and inbound QoS 2 state.
static void session_clear_locked(nmq_session *s)
{
	ring_clear(&s->q);
	ring_clear(&s->q0);
	for (uint32_t i = 0; i < s->infl_len; i++) {
		entry_free(&s->infl[s->infl_start + i].e);
	}
	s->infl_len   = 0;
	s->infl_start = 0;
	s->pend_pub   = 0;
	s->unsent     = 0;
	s->rel_len    = 0;
}

// Appends an entry to a ring, growing it up to `bound`. Returns false on
// allocation failure.
static bool ring_push(out_ring *r, const out_entry *e, uint32_t bound)
{
	if (r->len == r->cap) {
		uint32_t ncap = r->cap ? r->cap * 2 : 16;
		if (ncap > bound) {
			ncap = bound;
		}
		if (ncap <= r->cap) {
			return false;
		}
		out_entry *nv = malloc((size_t)ncap * sizeof(*nv));
		if (nv == NULL) {
			return false;
		}
		nmq_mem_buffers_add((int64_t)(ncap - r->cap) * (int64_t)sizeof(*nv));
		for (uint32_t i = 0; i < r->len; i++) {
			nv[i] = r->v[(r->head + i) % r->cap];
		}
		free(r->v);
		r->v    = nv;
		r->cap  = ncap;
		r->head = 0;
	}
	r->v[(r->head + r->len) % r->cap] = *e;
	r->len++;
	return true;
}

static void ring_pop(out_ring *r)
{
	r->head = (r->head + 1) % r->cap;
	r->len--;
	if (r->len == 0) {
		r->head = 0;
		ring_trim(r);
	}
}

// Removes (and releases) the entries of r that keep refuses, keeping the
// others in order; with `unstore` (r is the QoS 1/2 queue of a persistent
// session) their rows are deleted from the store too. Returns the number
// removed.
static size_t ring_filter(nmq_session *s, out_ring *r, bool unstore,
    bool (*keep)(void *arg, const nmq_msg *msg), void *arg)
{
	uint32_t kept = 0;
	size_t   gone = 0;
	for (uint32_t i = 0; i < r->len; i++) {
		out_entry e = r->v[(r->head + i) % r->cap];
		if (keep(arg, e.msg)) {
			r->v[(r->head + kept) % r->cap] = e;
			kept++;
		} else {
			if (unstore) {
				store_qdel_locked(s, e.seq);
			}
			entry_free(&e);
			gone++;
		}
	}
	r->len = kept;
	if (kept == 0) {
		r->head = 0;
		ring_trim(r);
	}
	return gone;
}

// The disk pass of nmq_session_drop_queued: the queued rows of a
// persistent session's backlog that are on disk only (seq > disk_after),
// read on the store's thread; those keep refuses are collected, then
// deleted by the caller.
typedef struct drop_scan {
	nmq_session *s;
	bool (*keep)(void *arg, const nmq_msg *msg);
	void           *arg;
	uint64_t       *seqs;
	size_t          len, cap;
	bool            oom;
	bool            done;
	nmq_err         err;
	pthread_mutex_t mtx;
	pthread_cond_t  cv;
} drop_scan;

static void drop_scan_row(void *arg, const proto_store_row *r)
{
	drop_scan   *d = arg;
	nmq_session *s = d->s;
	if (r->state != PROTO_STORE_QUEUED) {
		return; // in flight: stays, as in memory
	}
	nmq_mutex_lock(&s->mtx);
	bool drop = r->seq > s->disk_after && !d->keep(d->arg, r->msg);
	session_unlock(s);
	if (!drop) {
		return;
	}
	if (d->len == d->cap) {
		size_t    ncap = d->cap ? d->cap * 2 : 64;
		uint64_t *nv   = realloc(d->seqs, ncap * sizeof(*nv));
		if (nv == NULL) {
			d->oom = true;
			return;
		}
		d->seqs = nv;
		d->cap  = ncap;
	}
	d->seqs[d->len++] = r->seq;
}

static void drop_scan_done(void *arg, nmq_err err)
{
	drop_scan *d = arg;
	pthread_mutex_lock(&d->mtx);
	d->err  = err;
	d->done = true;
	pthread_cond_signal(&d->cv);
	pthread_mutex_unlock(&d->mtx);
}

// Waits until d is done (d->done set by a completion on the store's
// thread).
static void drop_scan_wait(drop_scan *d)
{
	pthread_mutex_lock(&d->mtx);
	while (!d->done) {
		pthread_cond_wait(&d->cv, &d->mtx);
	}
	d->done = false;
	pthread_mutex_unlock(&d->mtx);
}

// Deletes from the store the rows of s's on-disk backlog that keep
// refuses; returns how many. Waits for the store's thread (twice: the
// scan, then a barrier after the deletions, so that any read of the
// backlog issued meanwhile has put what it read into the queue in
// memory, where the caller's ring pass finds it).
static size_t drop_disk_backlog(
    nmq_session *s, bool (*keep)(void *arg, const nmq_msg *msg), void *arg)
{
	nmq_proto *p = s->p;
	drop_scan  d;
	memset(&d, 0, sizeof(d));
	d.s    = s;
	d.keep = keep;
	d.arg  = arg;
	pthread_mutex_init(&d.mtx, NULL);
	pthread_cond_init(&d.cv, NULL);
	size_t  gone = 0;
	nmq_err e    = p->store->queue_read(
	       p->store_arg, s->client_id, 0, 0, drop_scan_row, drop_scan_done, &d);
	if (e != NMQ_OK) {
		proto_store_failed(p, "queue_read", s->client_id, e);
		goto out;
	}
	drop_scan_wait(&d);
	if (d.err != NMQ_OK || d.oom) {
		log_warn("session",
		    "client_id=%s event=acl_requeue_scan_failed error=%s detail=messages on disk "
		    "not rechecked",
		    s->client_id, d.oom ? "out of memory" : nmq_strerror(d.err));
		if (d.oom) {
			proto_count_alloc_failure(p, "acl_requeue_scan");
		}
	}
	nmq_mutex_lock(&s->mtx);
	for (size_t i = 0; i < d.len; i++) {
		// Read into memory meanwhile: the ring pass decides.
		if (!s->ended && persist(s) && d.seqs[i] > s->disk_after) {
			store_qdel_locked(s, d.seqs[i]);
			gone++;
		}
	}
	session_unlock(s);
	e = p->store->sync(p->store_arg, drop_scan_done, &d);
	if (e == NMQ_OK) {
		drop_scan_wait(&d);
	} else {
		proto_store_failed(p, "sync", s->client_id, e);
	}
out:
	free(d.seqs);
	pthread_mutex_destroy(&d.mtx);
	pthread_cond_destroy(&d.cv);
	return gone;
}

// Drops the queued messages keep refuses; see proto.h.
size_t nmq_session_drop_queued(
    nmq_session *s, bool (*keep)(void *arg, const nmq_msg *msg), void *arg)
{
	size_t gone = 0;
	nmq_mutex_lock(&s->mtx);
	bool disk = !s->ended && persist(s) && s->disk_mode;
	session_unlock(s);
	if (disk) {
		gone += drop_disk_backlog(s, keep, arg);
	}
	nmq_mutex_lock(&s->mtx);
	if (!s->ended) {
		gone += ring_filter(s, &s->q, persist(s), keep, arg)
		    + ring_filter(s, &s->q0, false, keep, arg);
	}
	session_unlock(s);
	proto_count_drops(s->p, &s->p->m.drop_acl, gone);
	droplog_record(DROP_ACL_REQUEUE, s->client_id, NULL, 0, DROPLOG_NO_QOS, (uint32_t)gone);
	return gone;
}

// Queues e (QoS 0 and QoS 1/2 apart). Returns NMQ_OK, NMQ_ELIMIT when the
// session's queue bound is reached, or NMQ_ENOMEM.
static nmq_err queue_push(nmq_session *s, out_entry *e)
{
	uint32_t bound = proto_lim(s->p)->max_mqueue_len;
	if (s->q.len + s->q0.len >= bound) {
		return NMQ_ELIMIT;
	}
	e->seq = s->q_seq;
	if (!ring_push(e->qos == 0 ? &s->q0 : &s->q, e, bound)) {
		return NMQ_ENOMEM;
	}
	s->q_seq++;
	return NMQ_OK;
}

// Returns true if pid is in flight.
static bool pid_in_use(nmq_session *s, uint16_t pid)
{
	for (uint32_t i = 0; i < s->infl_len; i++) {
		if (s->infl[s->infl_start + i].pid == pid) {
			return true;
		}
	}
	return false;
}

// The packet id of a stored QoS 1 message: its seq's (1..65535), so that
// it needs no state write and is the same after a restart
// (docs/decisions/0026).
static inline uint16_t session_seq_pid(uint64_t seq)
{
	return (uint16_t)(seq % 65535u + 1u);
}

// Returns the next free packet id (1..65535). The window is far below
// 65535, so a free id always exists.
static uint16_t next_pid(nmq_session *s)
{
	for (;;) {
		uint16_t pid = s->next_pid++;
		if (s->next_pid == 0) {
			s->next_pid = 1;
		}
		if (pid != 0 && (s->infl_len == 0 || !pid_in_use(s, pid))) {
			return pid;
		}
	}
}

// Appends to the in-flight array; false on allocation failure.
static bool infl_push(nmq_session *s, const infl_entry *f)
{
	if (s->infl_start + s->infl_len == s->infl_cap) {
		if (s->infl_start > 0) {
			memmove(s->infl, s->infl + s->infl_start, s->infl_len * sizeof(*s->infl));
			s->infl_start = 0;
		}
		if (s->infl_len == s->infl_cap) {
			uint32_t    ncap = s->infl_cap ? s->infl_cap * 2 : 8;
			infl_entry *ni   = realloc(s->infl, (size_t)ncap * sizeof(*ni));
			if (ni == NULL) {
				proto_count_alloc_failure(s->p, "inflight_window");
				return false;
			}
			nmq_mem_buffers_add((int64_t)(ncap - s->infl_cap) * (int64_t)sizeof(*ni));
			s->infl     = ni;
			s->infl_cap = ncap;
		}
	}
	s->infl[s->infl_start + s->infl_len++] = *f;
	return true;
}

// Finds an in-flight entry by packet id and state; returns its index
// relative to infl_start, or -1.
static int64_t infl_find(nmq_session *s, uint16_t pid, uint8_t state)
{
	for (uint32_t i = 0; i < s->infl_len; i++) {
		infl_entry *f = &s->infl[s->infl_start + i];
		if (f->pid == pid && f->state == state) {
			// A PUBLISH or PUBREL not sent yet cannot be answered.
			return (f->flags & INFL_UNSENT) ? -1 : (int64_t)i;
		}
	}
	return -1;
}

static void infl_remove(nmq_session *s, uint32_t i)
{
	infl_entry *f = &s->infl[s->infl_start + i];
	entry_free(&f->e);
	if (i == 0) {
		s->infl_start++;
		s->infl_len--;
	} else {
		memmove(f, f + 1, (s->infl_len - i - 1) * sizeof(*f));
		s->infl_len--;
	}
	if (s->infl_len == 0) {
		s->infl_start = 0;
	}
}

// Writes the in-flight PUBLISHes and PUBRELs that the store's commit has
// released (INFL_UNSENT without INFL_HELD) to l, in order; caller holds
// the session lock and l's tx lock. *now and *any as in the pump. Returns
// false when the send buffer is full (the rest goes at the next pump).
static bool session_flush_locked(nmq_session *s, nmq_link *l, uint64_t *now, bool *any)
{
	nmq_proto *p = s->p;
	for (uint32_t i = 0; s->unsent > 0 && i < s->infl_len; i++) {
		infl_entry *f = &s->infl[s->infl_start + i];
		if ((f->flags & (INFL_UNSENT | INFL_HELD)) != INFL_UNSENT) {
			continue;
		}
		if (*now == 0) {
			*now = nmq_clock_ms();
		}
		if (f->state == INFL_WAIT_PUBCOMP) {
			mqtt_packet pk;
			memset(&pk, 0, sizeof(pk));
			pk.type            = MQTT_PUBREL;
			pk.flags           = 0x2;
			pk.u.ack.packet_id = f->pid;
			if (!link_put_packet_locked(l, &pk)) {
				return false;
			}
		} else {
			nmq_err rv = link_send_publish(l, &f->e, f->pid, false);
			if (rv == NMQ_EBUSY) {
				return false;
			}
			s->pend_pub--;
			if (rv != NMQ_OK) {
				s->unsent--;
				// Too large for this client after all (checked when
				// it was held; the limit is the connection's).
				proto_count_drop(p, &p->m.drop_too_large);
				droplog_record(DROP_TOO_LARGE, s->client_id, f->e.msg->topic,
				    f->e.msg->topic_len, f->e.qos, 1);
				store_qdel_locked(s, f->e.seq);
				infl_remove(s, i);
				i--;
				continue;
			}
			atomic_fetch_add_explicit(&p->m.msgs_sent, 1, memory_order_relaxed);
			session_msg_event(s, f->e.msg, f->e.qos, false);
		}
		f->flags &= (uint8_t)~INFL_UNSENT;
		s->unsent--;
		f->sent_ms = *now;
		*any       = true;
	}
	return true;
}

// Sends queued messages while the window and the socket allow: the
// older of the two queue heads first; QoS 0 alone when the window is full.
// A QoS 2 message of a persistent session is taken into the window but
// held until the store's commit (session_sync_locked); QoS 0/1 messages
// behind it wait for it.
static void session_pump_locked(nmq_session *s)
{
	nmq_link *l = s->link;
	if (l == NULL || !l->connected || !link_may_send(l)) {
		// Nothing before the CONNACK (session_connack_sent pumps), nor
		// after a DISCONNECT.
		return;
	}
	nmq_proto *p   = s->p;
	uint64_t   now = 0;
	bool       any = false;
	// Over mqtt.max_message_memory, messages stay in the queue (a ring
	// entry) rather than being copied into the send buffer beyond a
	// small batch.
	uint64_t cap   = proto_lim(p)->max_message_memory;
	size_t   limit = cap > 0 && nmq_mem_in_use() > cap ? PUMP_TIGHT : SIZE_MAX;
	bool     held  = false; // an entry was held for the store's commit
	// A QoS 2 row (or held state) still in an open store group: no QoS 2
	// entry is held until it is queued (its state write, and the barrier,
	// would overtake it). Checked at the first entry to hold (-1: not
	// yet), before this loop counts its own writes.
	int q2_wait = -1;
	conn_tx_lock(l->conn);
	bool blocked = !session_flush_locked(s, l, &now, &any);
	while (!blocked && s->q.len + s->q0.len > 0 && !conn_tx_full(l->conn)
	    && conn_tx_queued(l->conn) < limit) {
		bool      window = s->infl_len < s->infl_max;
		out_ring *r;
		if (s->q.len > 0 && window
		    && (s->q0.len == 0 || s->q.v[s->q.head].seq < s->q0.v[s->q0.head].seq)) {
			r = &s->q;
		} else if (s->q0.len > 0) {
			r = &s->q0;
		} else {
			break; // only QoS 1/2 left and the window is full
		}
		out_entry *e = &r->v[r->head];
		if (e->msg->expiry_at_ms != 0) {
			if (now == 0) {
				now = nmq_clock_ms();
			}
			if (nmq_msg_remaining(e->msg, now) == 0) {
				proto_count_drop(p, &p->m.drop_expired);
				droplog_record(DROP_EXPIRED, s->client_id, e->msg->topic,
				    e->msg->topic_len, e->qos, 1);
				if (e->qos > 0 && persist(s)) {
					store_qdel_locked(s, e->seq);
				}
				entry_free(e);
				ring_pop(r);
				continue;
			}
		}
		bool hold = e->qos == 2 && persist(s);
		if (hold && q2_wait < 0) {
			q2_wait = gate_wait(&s->sync_gate) ? 1 : 0;
		}
		if (hold && q2_wait > 0) {
			break; // resumed by session_sync_wait_job; what follows waits too
		}
		if (!hold && s->pend_pub > 0) {
			break; // behind a QoS 2 PUBLISH waiting for the store
		}
		if (e->qos == 0) {
			nmq_err rv = link_send_publish(l, e, 0, false);
			if (rv == NMQ_EBUSY) {
				break;
			}
			if (rv != NMQ_OK) {
				proto_count_drop(p, &p->m.drop_too_large);
				droplog_record(DROP_TOO_LARGE, s->client_id, e->msg->topic,
				    e->msg->topic_len, e->qos, 1);
			} else {
				atomic_fetch_add_explicit(&p->m.msgs_sent, 1, memory_order_relaxed);
				session_msg_event(s, e->msg, 0, false);
			}
			entry_free(e);
			ring_pop(r);
			any = true;
			continue;
		}
		infl_entry f;
		memset(&f, 0, sizeof(f));
		f.e = *e;
		// A stored QoS 1 message goes under the packet id its seq gives
		// (unless that id is taken): the store needs no write of its
		// state, and after a restart it goes again under the same id.
		bool derived = false;
		if (e->qos == 1 && persist(s)) {
			f.pid   = session_seq_pid(e->seq);
			derived = !pid_in_use(s, f.pid);
		}
		if (!derived) {
			f.pid = next_pid(s);
		}
		f.state = e->qos == 1 ? INFL_WAIT_PUBACK : INFL_WAIT_PUBREC;
		if (now == 0) {
			now = nmq_clock_ms();
		}
		f.sent_ms = now;
		if (hold) {
			// A QoS 2 PUBLISH of a persistent session goes out only
			// once its row, with this packet id, has committed: the
			// client keeps the id until PUBREL, so after a crash the
			// broker must resend it under that id, never reuse it.
			if (link_publish_fits(l, e)) {
				f.flags = INFL_HELD | INFL_UNSENT;
				f.gen   = s->sync_gen + 1;
				if (!infl_push(s, &f)) {
					break; // counted and logged; stays queued
				}
				s->pend_pub++;
				s->unsent++;
				store_qstate_locked(s, e->seq, PROTO_STORE_SENT, f.pid);
				session_sync_note_locked(s);
				ring_pop(r);
				held = true;
				continue;
			}
		}
		nmq_err rv = link_send_publish(l, e, f.pid, e->seq < s->dup_below);
		if (rv == NMQ_EBUSY) {
			break;
		}
		if (rv != NMQ_OK) {
			proto_count_drop(p, &p->m.drop_too_large);
			droplog_record(DROP_TOO_LARGE, s->client_id, e->msg->topic,
			    e->msg->topic_len, e->qos, 1);
			if (persist(s)) {
				store_qdel_locked(s, e->seq);
			}
			entry_free(e);
			ring_pop(r);
			continue;
		}
		if (!infl_push(s, &f)) {
			// Sent but cannot be tracked (counted and logged): keep
			// the reference in the queue and stop; the client may
			// ack an unknown id, which is harmless, and the message
			// goes again at the next pump.
			break;
		}
		atomic_fetch_add_explicit(&p->m.msgs_sent, 1, memory_order_relaxed);
		session_msg_event(s, e->msg, e->qos, false);
		if (persist(s) && !derived) {
			store_qstate_locked(s, e->seq, PROTO_STORE_SENT, f.pid);
		}
		ring_pop(r);
		any = true;
	}
	conn_tx_unlock(l->conn);
	link_close_if_too_large(l, MQTT_PUBREL);
	if (held) {
		session_sync_locked(s);
	}
	if (any) {
		conn_tx_flush_later(l->conn);
		if (l->ver != MQTT_PROTO_V5 && s->infl_len > 0) {
			session_timer_update_locked(s);
		}
	}
	if (s->disk_mode) {
		session_disk_pump_locked(s);
	}
}

// ---------------------------------------------------------------------------
// Holding QoS 2 sends of a persistent session for the store's commit
// (docs/decisions/0016): a barrier behind the writes of the held entries;
// its completion posts sync_job, which releases what it covered and pumps.

// The worker that runs s's barrier completions (one per session: they run
// in commit order).
static int session_sync_worker(const nmq_session *s)
{
	return (int)(((uintptr_t)s >> 6) % (uintptr_t)workq_size(s->p->wq));
}

// On the store's thread once everything queued before the barrier has
// committed (err: it did not).
static void session_sync_done(void *arg, nmq_err err)
{
	nmq_session *s = arg;
	s->sync_err    = err; // read by sync_job only, after the post
	if (err != NMQ_OK) {
		proto_store_failed(s->p, "commit", s->client_id, err);
	}
	workq_post_to(s->p->wq, session_sync_worker(s), &s->sync_job);
}

// Asks for a barrier covering the held entries, unless one is in flight
// (its completion asks again for what it does not cover). A store that
// refuses (its queue full, or closing) ends the connection: the held
// entries stay, and the client's next CONNECT writes their state again
// and asks once more (session_sync_retry_locked).
static void session_sync_locked(nmq_session *s)
{
	if (s->sync_busy || s->ended || s->p->store == NULL) {
		return;
	}
	bool want = false;
	for (uint32_t i = 0; i < s->infl_len && !want; i++) {
		want = (s->infl[s->infl_start + i].flags & INFL_HELD) != 0;
	}
	if (!want) {
		return;
	}
	if (gate_wait(&s->sync_gate)) {
		// Queued now, the barrier would overtake writes of held entries
		// still in an open group; the last one queued asks for it
		// (session_sync_wait_job).
		return;
	}
	s->sync_busy = true;
	s->sync_gen++;
	nmq_session_hold(s);
	nmq_err e = s->p->store->sync(s->p->store_arg, session_sync_done, s);
	if (e != NMQ_OK) {
		s->sync_busy = false;
		s->sync_gen--;
		proto_store_failed(s->p, "sync", s->client_id, e);
		if (s->link != NULL) {
			conn_close(s->link->conn);
		}
		nmq_session_release(s); // the caller holds another reference
	}
}

// Lets the held entries covered by barrier gen (all with `all`) go.
static void session_release_held_locked(nmq_session *s, uint32_t gen, bool all)
{
	for (uint32_t i = 0; i < s->infl_len; i++) {
		infl_entry *f = &s->infl[s->infl_start + i];
		if ((f->flags & INFL_HELD) && (all || (int32_t)(f->gen - gen) <= 0)) {
			f->flags &= (uint8_t)~INFL_HELD;
		}
	}
}

// At a CONNECT, after a barrier was refused or its commit failed: the
// held entries' state is written again and a new barrier asked for (if
// the session is no longer stored, they simply go).
static void session_sync_retry_locked(nmq_session *s)
{
	if (s->sync_busy) {
		return;
	}
	if (!persist(s)) {
		session_release_held_locked(s, 0, true);
		return;
	}
	bool any = false;
	for (uint32_t i = 0; i < s->infl_len; i++) {
		infl_entry *f = &s->infl[s->infl_start + i];
		if (f->flags & INFL_HELD) {
			store_qstate_locked(s, f->e.seq,
			    f->state == INFL_WAIT_PUBCOMP ? PROTO_STORE_RELEASED : PROTO_STORE_SENT,
			    f->pid);
			session_sync_note_locked(s);
			f->gen = s->sync_gen + 1;
			any    = true;
		}
	}
	if (any) {
		session_sync_locked(s);
	}
}

// On a worker after a barrier's commit: what it covered goes to the client
// (if connected; else at its next CONNECT), and the next barrier is asked
// for. A failed commit sends nothing and ends the connection (as an ack
// that cannot be made durable, decisions/0016).
static void session_sync_job(workq_job *job)
{
	nmq_session *s     = (nmq_session *)((char *)job - offsetof(nmq_session, sync_job));
	nmq_conn    *close = NULL;
	nmq_mutex_lock(&s->mtx);
	s->sync_busy = false;
	if (!s->ended) {
		if (s->sync_err != NMQ_OK) {
			if (s->link != NULL) {
				close = s->link->conn;
				conn_hold(close);
			}
		} else {
			session_release_held_locked(s, s->sync_gen, false);
			session_pump_locked(s);
			session_sync_locked(s);
		}
	}
	session_unlock(s);
	if (close != NULL) {
		conn_close(close);
		conn_release(close);
	}
	nmq_session_release(s);
}

// A write counted by g was queued with its group (on the thread that made
// it, right after the group closed; no lock of the caller's is taken):
// the last one lets what waits for g wait no more.
static void gate_queued(nmq_session *s, session_gate *g)
{
	if (atomic_fetch_sub(&g->unsub, 1) == 1 && atomic_load(&g->wait)
	    && !atomic_exchange(&g->kick, true)) {
		// The job keeps the reference.
		workq_post_to(s->p->wq, session_sync_worker(s), &g->job);
		return;
	}
	nmq_session_release(s);
}

static void session_sync_queued(void *arg)
{
	nmq_session *s = arg;
	gate_queued(s, &s->sync_gate);
}

// Takes the QoS 2 entries and asks for the barrier that waited for the
// sync gate.
static void session_sync_wait_job(workq_job *job)
{
	nmq_session *s = (nmq_session *)((char *)job - offsetof(nmq_session, sync_gate.job));
	atomic_store(&s->sync_gate.kick, false);
	atomic_store(&s->sync_gate.wait, false); // set again by what must wait more
	nmq_mutex_lock(&s->mtx);
	if (!s->ended) {
		session_pump_locked(s);
		session_sync_locked(s);
	}
	session_unlock(s);
	nmq_session_release(s);
}

// Reading the backlog back from the store (store thread).
static void disk_row(void *arg, const proto_store_row *r)
{
	nmq_session *s = arg;
	nmq_mutex_lock(&s->mtx);
	if (r->seq >= s->disk_issue_seq) {
		// Delivered after the read was issued: a delivery before it
		// may still be in a store group not yet queued (the read must
		// not skip past it); read with the next chunk.
		session_unlock(s);
		return;
	}
	s->disk_read_rows++;
	// Rows in flight (sent, awaiting an ack) are in memory already.
	if (!s->ended && r->seq > s->disk_after && r->state == PROTO_STORE_QUEUED) {
		out_entry e;
		memset(&e, 0, sizeof(e));
		e.msg    = r->msg;
		e.seq    = r->seq;
		e.qos    = r->qos;
		e.retain = r->retain;
		entry_set_ids(s->p, &e, r->sub_ids, r->n_sub_ids);
		if (ring_push(&s->q, &e, UINT32_MAX)) {
			nmq_msg_hold(r->msg);
		} else {
			// Stays on disk; read again with the next chunk.
			entry_ids_free(&e);
			proto_count_alloc_failure(s->p, "session_queue");
			session_unlock(s);
			return;
		}
	}
	if (r->seq > s->disk_after) {
		s->disk_after = r->seq;
	}
	session_unlock(s);
}

static void disk_done(void *arg, nmq_err err)
{
	nmq_session *s = arg;
	nmq_mutex_lock(&s->mtx);
	s->disk_reading = false;
	if (err != NMQ_OK) {
		log_warn_rl("session", "client_id=%s event=store_read_failed error=%s",
		    s->client_id, nmq_strerror(err));
	} else if (s->disk_read_rows == 0 && s->disk_last_put < s->disk_issue_seq) {
		// Nothing left, and nothing was written behind the read: from
		// now on deliveries go to memory again.
		s->disk_mode = false;
	}
	if (!s->ended && s->link != NULL) {
		session_pump_locked(s);
	}
	session_unlock(s);
	nmq_session_release(s);
}

// Starts reading the next chunk of the backlog when the client is
// connected, no read is in flight and the queue in memory runs short.
static void session_disk_pump_locked(nmq_session *s)
{
	if (!s->disk_mode || s->disk_reading || s->link == NULL || s->ended || s->q.len >= DISK_LOW
	    || s->p->store == NULL) {
		return;
	}
	if (gate_wait(&s->disk_gate)) {
		// A delivery waits in a group not yet queued: the read would
		// overtake it. The last one queued issues it (session_disk_job).
		return;
	}
	atomic_store(&s->disk_gate.wait, false);
	nmq_session_hold(s);
	s->disk_reading   = true;
	s->disk_read_rows = 0;
	s->disk_issue_seq = s->q_seq;
	nmq_err e         = s->p->store->queue_read(
	            s->p->store_arg, s->client_id, s->disk_after, DISK_CHUNK, disk_row, disk_done, s);
	if (e != NMQ_OK) {
		// Tried again at the next pump.
		s->disk_reading = false;
		proto_store_failed(s->p, "queue_read", s->client_id, e);
		nmq_session_release(s);
	}
}

// A disk-only delivery's store group was queued.
static void session_disk_queued(void *arg)
{
	nmq_session *s = arg;
	gate_queued(s, &s->disk_gate);
}

// Issues the read that waited for the disk gate.
static void session_disk_job(workq_job *job)
{
	nmq_session *s = (nmq_session *)((char *)job - offsetof(nmq_session, disk_gate.job));
	atomic_store(&s->disk_gate.kick, false);
	nmq_mutex_lock(&s->mtx);
	session_disk_pump_locked(s);
	session_unlock(s);
	nmq_session_release(s);
}

// Queues a message for s; see proto.h.
void nmq_session_deliver(nmq_session *s, nmq_msg *msg, uint8_t qos, bool retain,
    const uint32_t *sub_ids, uint32_t n_sub_ids)
{
	nmq_proto *p            = s->p;
	bool       persist_skip = false;
	nmq_mutex_lock(&s->mtx);
	if (s->ended || (qos == 0 && s->link == NULL)) {
		session_unlock(s);
		return;
	}
	if (qos > 0 && persist(s) && (s->link == NULL || s->disk_mode)) {
		// Offline, or its backlog is still on disk: to the store only,
		// behind that backlog.
		uint64_t seq = s->q_seq;
		nmq_err  se
		    = p->store->queue_put(p->store_arg, s->client_id, session_store_sid(s), seq,
		        msg, qos, retain, sub_ids, n_sub_ids < SUBIDS_MAX ? n_sub_ids : SUBIDS_MAX);
		if (se == NMQ_OK) {
			proto_store_noted();
			// Written inside a store group: not queued until it
			// closes, and a read must not overtake it.
			gate_note(s, &s->disk_gate, session_disk_queued);
			s->q_seq++;
			if (!s->disk_mode) {
				s->disk_mode  = true;
				s->disk_after = seq - 1;
			}
			s->disk_last_put = seq;
			if (s->link != NULL) {
				session_disk_pump_locked(s);
			}
			session_unlock(s);
			return;
		}
		// Not stored (logged and counted; the publisher gets no success
		// ack): kept in memory as without a store, unless a backlog on
		// disk must stay ahead of it.
		proto_store_failed(p, "queue_put", s->client_id, se);
		proto_store_refused();
		if (s->disk_mode) {
			proto_count_drop(p, &p->m.drop_queue_full);
			session_unlock(s);
			return;
		}
		persist_skip = true;
	}
	uint64_t cap = proto_lim(p)->max_message_memory;
	if (cap > 0 && (qos == 0 || s->link == NULL) && nmq_mem_in_use() > cap) {
		// mqtt.max_message_memory: what cannot be paced by pausing the
		// publisher (QoS 0, or a session nobody reads) is not kept.
		proto_count_drop(p, &p->m.drop_memory);
		droplog_record(DROP_MEMORY, s->client_id, msg->topic, msg->topic_len, qos, 1);
		if (qos > 0) {
			log_warn_rl("session",
			    "client_id=%s reason=max_message_memory topic=%s qos=%u action=drop",
			    s->client_id, msg->topic, qos);
		}
		session_unlock(s);
		return;
	}
	out_entry e;
	e.msg       = msg;
	e.qos       = qos;
	e.retain    = retain;
	e.n_sub_ids = 0;
	entry_set_ids(p, &e, sub_ids, n_sub_ids);
	nmq_err qe = queue_push(s, &e);
	if (qe != NMQ_OK) {
		entry_ids_free(&e);
	}
	if (qe == NMQ_ENOMEM) {
		proto_count_drop(p, NULL);
		proto_count_alloc_failure(p, "session_queue");
		session_unlock(s);
		return;
	}
	if (qe != NMQ_OK) {
		proto_count_drop(p, &p->m.drop_queue_full);
		droplog_record(DROP_QUEUE_FULL, s->client_id, msg->topic, msg->topic_len, qos, 1);
		if (qos > 0) {
			log_warn_rl("session",
			    "client_id=%s reason=queue_full max_mqueue_len=%u topic=%s qos=%u "
			    "action=drop",
			    s->client_id, proto_lim(p)->max_mqueue_len, msg->topic, qos);
		}
		session_unlock(s);
		return;
	}
	nmq_msg_hold(msg);
	if (qos > 0 && persist(s) && !persist_skip) {
		// Connected: sent now (or after the ones ahead of it in memory).
		nmq_err (*put)(void *, const char *, uint32_t, uint64_t, nmq_msg *, uint8_t, bool,
		    const uint32_t *, uint32_t)
		    = s->link != NULL && p->store->queue_put_live != NULL ? p->store->queue_put_live
		                                                          : p->store->queue_put;
		nmq_err se = put(p->store_arg, s->client_id, session_store_sid(s), e.seq, msg, qos,
		    retain, sub_ids, n_sub_ids < SUBIDS_MAX ? n_sub_ids : SUBIDS_MAX);
		if (se == NMQ_OK) {
			proto_store_noted();
			if (qos == 2) {
				// Sent once a barrier behind its row commits: that
				// barrier must not overtake the row's group.
				session_sync_note_locked(s);
			}
		} else {
			proto_store_failed(p, "queue_put", s->client_id, se);
			proto_store_refused();
		}
	}
	if (s->link != NULL) {
		session_pump_locked(s);
		uint32_t mark = session_congestion_mark(p);
		if (qos > 0 && mark > 0 && s->q.len + s->q0.len >= mark && tls_congested == NULL) {
			nmq_session_hold(s);
			tls_congested = s;
		}
	}
	session_unlock(s);
}

// See session.h: pause publishers at 3/4 of a queue bound of at least
// 128 messages; smaller bounds are meant to drop.
uint32_t session_congestion_mark(const nmq_proto *p)
{
	uint32_t bound = proto_lim(p)->max_mqueue_len;
	return bound >= 128 ? bound / 4 * 3 : 0;
}

nmq_session *session_congestion_take(void)
{
	nmq_session *s = tls_congested;
	tls_congested  = NULL;
	return s;
}

uint32_t session_queue_len(nmq_session *s, bool *online)
{
	nmq_mutex_lock(&s->mtx);
	uint32_t n = s->q.len + s->q0.len;
	*online    = s->link != NULL && !s->ended;
	session_unlock(s);
	return n;
}

// Resends in-flight PUBLISH (DUP) and PUBREL packets in their original
// order; with only_old, just those sent more than retry_interval ago.
static void session_resend_locked(nmq_session *s, bool only_old)
{
	nmq_link *l = s->link;
	if (l == NULL || !l->connected || !link_may_send(l)) {
		return;
	}
	uint64_t now   = nmq_clock_ms();
	uint64_t retry = (uint64_t)proto_lim(s->p)->retry_interval_s * 1000;
	bool     any   = false;
	conn_tx_lock(l->conn);
	for (uint32_t i = 0; i < s->infl_len; i++) {
		infl_entry *f = &s->infl[s->infl_start + i];
		if (f->flags & INFL_UNSENT) {
			continue; // never sent: the pump sends it once released
		}
		if (only_old && now - f->sent_ms < retry) {
			continue;
		}
		if (f->state == INFL_WAIT_PUBCOMP) {
			mqtt_packet pk;
			memset(&pk, 0, sizeof(pk));
			pk.type            = MQTT_PUBREL;
			pk.flags           = 0x2;
			pk.u.ack.packet_id = f->pid;
			if (!link_put_packet_locked(l, &pk)) {
				break;
			}
		} else if (link_send_publish(l, &f->e, f->pid, true) == NMQ_EBUSY) {
			break;
		}
		f->sent_ms = now;
		any        = true;
	}
	conn_tx_unlock(l->conn);
	link_close_if_too_large(l, MQTT_PUBREL);
	if (any) {
		conn_tx_flush_later(l->conn);
	}
}

// PUBACK for pid: completes a QoS 1 flow and sends more.
bool session_puback_locked(nmq_session *s, uint16_t pid)
{
	int64_t i = infl_find(s, pid, INFL_WAIT_PUBACK);
	if (i < 0) {
		return false;
	}
	session_msg_event(s, s->infl[s->infl_start + (uint32_t)i].e.msg, 1, true);
	uint64_t seq = s->infl[s->infl_start + (uint32_t)i].e.seq;
	infl_remove(s, (uint32_t)i);
	if (persist(s)) {
		store_done_locked(s, seq);
	}
	session_pump_locked(s);
	return true;
}

// PUBREC for pid: the message is delivered; answer with PUBREL (unless
// the receiver failed it, v5 reason >= 0x80, which ends the flow). A
// repeated PUBREC for a flow already awaiting PUBCOMP is known too: the
// caller answers it with the same PUBREL again [MQTT-4.3.3-4].
int session_pubrec_locked(nmq_session *s, uint16_t pid, bool failed)
{
	int64_t i = infl_find(s, pid, INFL_WAIT_PUBREC);
	if (i < 0) {
		for (uint32_t j = 0; j < s->infl_len; j++) {
			const infl_entry *f = &s->infl[s->infl_start + j];
			if (f->pid == pid && f->state == INFL_WAIT_PUBCOMP) {
				// Repeated: the same PUBREL again, or, while it
				// waits for the store, when it goes.
				return (f->flags & INFL_UNSENT) ? SESSION_PUBREL_HELD
				                                : SESSION_PUBREL_NOW;
			}
		}
		return SESSION_PUBREC_UNKNOWN;
	}
	infl_entry *f = &s->infl[s->infl_start + (uint32_t)i];
	if (failed) {
		if (persist(s)) {
			store_qdel_locked(s, f->e.seq);
		}
		infl_remove(s, (uint32_t)i);
		session_pump_locked(s);
		return SESSION_PUBREC_DONE;
	}
	session_msg_event(s, f->e.msg, 2, true);
	entry_free(&f->e);
	f->state   = INFL_WAIT_PUBCOMP;
	f->sent_ms = nmq_clock_ms();
	if (persist(s)) {
		// The PUBREL goes once the PUBREC is durable: a crash before
		// that resends the PUBLISH (the client still holds the id and
		// takes it as the duplicate), never after the client let the
		// id go with its PUBCOMP.
		store_qstate_locked(s, f->e.seq, PROTO_STORE_RELEASED, pid);
		session_sync_note_locked(s);
		f->flags = INFL_HELD | INFL_UNSENT;
		f->gen   = s->sync_gen + 1;
		s->unsent++;
		session_sync_locked(s);
		return SESSION_PUBREL_HELD;
	}
	return SESSION_PUBREL_NOW;
}

// PUBCOMP for pid: completes a QoS 2 flow and sends more.
bool session_pubcomp_locked(nmq_session *s, uint16_t pid)
{
	int64_t i = infl_find(s, pid, INFL_WAIT_PUBCOMP);
	if (i < 0) {
		return false;
	}
	// Its row is RELEASED (committed before the PUBREL went): until the
	// deletion commits, a restart or a read sends the PUBREL again, never
	// the PUBLISH.
	uint64_t seq = s->infl[s->infl_start + (uint32_t)i].e.seq;
	infl_remove(s, (uint32_t)i);
	if (persist(s)) {
		store_done_locked(s, seq);
	}
	session_pump_locked(s);
	return true;
}

// The socket of l has room again; see session.h.
void session_writable(nmq_session *s, nmq_link *l)
{
	nmq_mutex_lock(&s->mtx);
	if (s->link == l && s->q.len + s->q0.len > 0) {
		session_pump_locked(s);
	}
	session_unlock(s);
}

// Drops inbound QoS 2 ids that waited longer than await_rel_timeout.
static void qos2_purge(nmq_session *s, uint64_t now)
{
	uint64_t limit = (uint64_t)proto_lim(s->p)->await_rel_timeout_s * 1000;
	if (limit == 0) {
		return;
	}
	for (uint32_t i = 0; i < s->rel_len;) {
		if (now - s->rel[i].at_ms > limit) {
			if (persist(s)) {
				store_rel_locked(s, s->rel[i].pid, false);
			}
			s->rel[i] = s->rel[--s->rel_len];
			atomic_fetch_add(&s->p->m.await_rel_expired, 1);
			droplog_record(DROP_AWAIT_REL_EXPIRED, s->client_id, NULL, 0, 2, 1);
		} else {
			i++;
		}
	}
}

// Index of pid among the ids awaiting PUBREL, or -1.
static int64_t qos2_find(const nmq_session *s, uint16_t pid)
{
	for (uint32_t i = 0; i < s->rel_len; i++) {
		if (s->rel[i].pid == pid) {
			return i;
		}
	}
	return -1;
}

// Adds pid to the ids awaiting PUBREL. Returns NMQ_OK or NMQ_ENOMEM.
static nmq_err qos2_add(nmq_session *s, uint16_t pid, uint64_t now_ms)
{
	if (s->rel_len == s->rel_cap) {
		uint32_t   ncap = s->rel_cap ? s->rel_cap * 2 : 4;
		rel_entry *nr   = realloc(s->rel, ncap * sizeof(*nr));
		if (nr == NULL) {
			proto_count_alloc_failure(s->p, "qos2_state");
			return NMQ_ENOMEM;
		}
		s->rel     = nr;
		s->rel_cap = ncap;
	}
	s->rel[s->rel_len].pid   = pid;
	s->rel[s->rel_len].at_ms = now_ms;
	s->rel_len++;
	return NMQ_OK;
}

// Records an inbound QoS 2 packet id; see session.h.
nmq_err session_qos2_record_locked(nmq_session *s, uint16_t pid, uint64_t now_ms)
{
	if (qos2_find(s, pid) >= 0) {
		return NMQ_EEXIST;
	}
	uint32_t max = proto_lim(s->p)->max_awaiting_rel;
	if (s->rel_len >= max) {
		qos2_purge(s, now_ms);
	}
	if (s->rel_len >= max) {
		return NMQ_ELIMIT;
	}
	nmq_err e = qos2_add(s, pid, now_ms);
	if (e == NMQ_OK && persist(s)) {
		store_rel_locked(s, pid, true);
		proto_store_noted();
	}
	return e;
}

bool session_stored_locked(const nmq_session *s)
{
	return persist(s);
}

bool session_qos2_pending_locked(const nmq_session *s, uint16_t pid)
{
	return qos2_find(s, pid) >= 0;
}

bool session_qos2_release_locked(nmq_session *s, uint16_t pid)
{
	int64_t i = qos2_find(s, pid);
	if (i < 0) {
		return false;
	}
	if (persist(s)) {
		store_rel_locked(s, pid, false);
	}
	s->rel[i] = s->rel[--s->rel_len];
	return true;
}

// The session part of a CONNECT; see session.h.
nmq_err session_open(nmq_proto *p, const char *client_id, const uint8_t *owner, size_t owner_len,
    bool clean_start, session_open_res *r)
{
	memset(r, 0, sizeof(*r));
	pthread_mutex_lock(&p->tbl_mtx);
	nmq_session *s = proto_table_find(p, client_id);
	if (s != NULL) {
		nmq_mutex_lock(&s->mtx);
		if (proto_lim(p)->client_id_owner_check && !clean_start
		    && !session_owned_by(s, owner, owner_len)) {
			// Another user's session is not resumed (its queue and
			// subscriptions are not handed over). A clean start by
			// another user discards it as usual and starts a session of
			// its own.
			session_unlock(s);
			pthread_mutex_unlock(&p->tbl_mtx);
			return NMQ_EACCES;
		}
		if (s->link != NULL) {
			r->old_conn = link_take_over_locked(s->link, &r->old_v5);
			__atomic_store_n(&s->link, NULL, __ATOMIC_RELAXED);
		}
		if (clean_start || s->expiry_s == 0) {
			// Discard the old session [MQTT-3.1.2-4]; a delayed will
			// of the old session is published by session_discard(). A
			// session that lasts only as long as its connection (3.1.1
			// CleanSession 1, 5.0 Session Expiry 0) ends with the
			// connection taken over, so it is not resumed either: its
			// state is never reused [MQTT-3.1.2-6] (3.1.1) and Session
			// Present is 0.
			s->ended        = true;
			r->ended_stored = persist(s);
			store_session_del_locked(s);
			proto_table_remove(p, s);
			session_unlock(s);
			r->ended = s; // the table's reference
			s        = NULL;
		} else {
			r->present = true;
			if (s->will != NULL) {
				// Reconnected within the will delay: no will.
				nmq_msg_release(s->will);
				s->will = NULL;
			}
		}
	}
	if (s == NULL) {
		s = session_alloc(p, client_id, owner, owner_len);
		if (s == NULL) {
			pthread_mutex_unlock(&p->tbl_mtx);
			proto_count_alloc_failure(p, "session");
			return NMQ_ENOMEM;
		}
		nmq_mutex_lock(&s->mtx);
		if (proto_table_insert(p, s) != NMQ_OK) { // the table keeps this reference
			session_unlock(s);
			pthread_mutex_unlock(&p->tbl_mtx);
			nmq_session_release(s);
			return NMQ_ENOMEM;
		}
	}
	// s->mtx is held here. The table is done with: the CONNACK, the resend
	// and the first pump run under the session lock only, so that a
	// reconnect with a long queue does not hold up other CONNECTs (a
	// concurrent CONNECT with this client id waits for s->mtx and then
	// takes the session over from this link).
	pthread_mutex_unlock(&p->tbl_mtx);
	nmq_session_hold(s); // the link's reference
	r->s = s;
	return NMQ_OK;
}

// The CONNACK of conn went; see session.h.
void session_connack_sent(nmq_session *s, const nmq_conn *conn)
{
	nmq_mutex_lock(&s->mtx);
	nmq_link *l = s->link;
	if (l != NULL && l->conn == conn && atomic_load(&l->connack_wait)
	    && !conn_is_closing(l->conn)) {
		atomic_store(&l->connack_wait, false);
		// The client's keepalive counts from its CONNACK (the timer
		// waited meanwhile, link_timer_cb).
		uint64_t now = nmq_clock_ms();
		if (atomic_load(&l->last_rx_ms) < now) {
			atomic_store(&l->last_rx_ms, now);
		}
		session_resend_locked(s, false);
		session_pump_locked(s);
	}
	session_unlock(s);
}

// Attaches a connection after its CONNACK; see session.h.
void session_attach_locked(
    nmq_session *s, nmq_link *l, uint8_t ver, uint32_t expiry_s, uint16_t receive_max)
{
	s->ver          = ver;
	s->expiry_s     = expiry_s;
	s->preset       = false; // the client's session from now on
	uint32_t window = proto_lim(s->p)->max_inflight_window;
	s->infl_max     = receive_max < window ? receive_max : window;
	if (s->infl_max == 0) {
		s->infl_max = 1;
	}
	__atomic_store_n(&s->link, l, __ATOMIC_RELAXED);
	s->keepalive   = l->keepalive;
	s->clean_start = l->clean_start;
	if (s->p->store != NULL) {
		if (expiry_s > 0) {
			store_session_locked(s, 0);
		} else {
			store_session_del_locked(s);
		}
	}
	// Only the in-flight window that the new connection allows is filled;
	// everything else waits in the queue.
	session_sync_retry_locked(s);
	session_resend_locked(s, false);
	session_pump_locked(s);
	session_timer_update_locked(s);
}

void session_set_expiry(nmq_session *s, const nmq_link *l, uint32_t expiry_s)
{
	nmq_mutex_lock(&s->mtx);
	if (s->link == l && s->expiry_s != expiry_s) {
		s->expiry_s = expiry_s;
		if (s->p->store != NULL) {
			if (expiry_s > 0) {
				store_session_locked(s, 0);
			} else {
				store_session_del_locked(s);
			}
		}
	}
	session_unlock(s);
}

// Detaches a connection; see session.h.
nmq_msg *session_detach(
    nmq_session *s, nmq_link *l, nmq_msg **will, uint32_t will_delay_s, bool *end)
{
	bool     current = false;
	nmq_msg *now     = NULL;
	*end             = false;
	nmq_mutex_lock(&s->mtx);
	if (s->link == l) {
		current = true;
		__atomic_store_n(&s->link, NULL, __ATOMIC_RELAXED);
		s->offline_since_ms = nmq_clock_ms();
		if (s->expiry_s == 0) {
			*end = true;
		}
	}
	if (*will != NULL) {
		if (will_delay_s == 0 || *end || s->ended) {
			// No delay, or the session ends now (or a takeover with
			// Clean Start ended it already: MQTT 5.0 3.1.4).
			now   = *will;
			*will = NULL;
		} else if (current) {
			if (s->will != NULL) {
				nmq_msg_release(s->will);
			}
			s->will       = *will;
			*will         = NULL;
			s->will_at_ms = nmq_clock_ms() + (uint64_t)will_delay_s * 1000;
		}
		// Else a takeover resumed the session within the will delay:
		// no will [MQTT-3.1.2-8].
	}
	if (current && !*end) {
		session_timer_update_locked(s);
		if (persist(s)) {
			store_session_locked(s, wall_ms());
		}
	}
	session_unlock(s);
	return now;
}

// Publishes a will message through the application and releases it.
void proto_publish_will(nmq_proto *p, nmq_msg *will)
{
	atomic_fetch_add_explicit(&p->m.msgs_received, 1, memory_order_relaxed);
	p->ops->route(p->app, NULL, NULL, will);
	nmq_msg_release(will);
}

// Returns true when the offline session s has outlived its expiry
// interval. Caller holds s->mtx.
static bool session_expired_locked(nmq_session *s, uint64_t now)
{
	return s->link == NULL && s->expiry_s != UINT32_MAX
	    && now >= s->offline_since_ms + (uint64_t)s->expiry_s * 1000;
}

// The end of a session already out of the table and marked ended (caller
// holds s->mtx, which this releases): its state is dropped, a pending will
// published, the application told, and the caller's reference released.
static void session_finish_locked(nmq_session *s)
{
	nmq_proto *p    = s->p;
	nmq_msg   *will = s->will;
	s->will         = NULL;
	session_clear_locked(s);
	session_unlock(s);
	timer_wheel_cancel(p->tw, &s->timer);
	if (will != NULL) {
		proto_publish_will(p, will);
	}
	p->ops->session_end(p->app, s);
	nmq_session_release(s);
}

// Ends s (with only_if_expired: only if it is still offline and expired,
// since a client may have resumed it after the timer decided): out of the
// table, state dropped, the application told, a pending will published.
// The table's reference is released.
static void session_end_when(nmq_session *s, bool only_if_expired)
{
	nmq_proto *p = s->p;
	// The record's delete and the pending will's writes in one group.
	proto_store_batch(p, true);
	pthread_mutex_lock(&p->tbl_mtx);
	nmq_mutex_lock(&s->mtx);
	if (s->ended || (only_if_expired && !session_expired_locked(s, nmq_clock_ms()))) {
		session_unlock(s);
		pthread_mutex_unlock(&p->tbl_mtx);
		proto_store_batch(p, false);
		return;
	}
	s->ended = true;
	store_session_del_locked(s);
	proto_table_remove(p, s);
	pthread_mutex_unlock(&p->tbl_mtx);
	session_finish_locked(s); // the table's reference
	proto_store_batch(p, false);
}

void session_end(nmq_session *s)
{
	session_end_when(s, false);
}

void session_discard(nmq_session *s)
{
	nmq_mutex_lock(&s->mtx);
	session_finish_locked(s);
}

void session_drop(nmq_session *s)
{
	timer_wheel_cancel(s->p->tw, &s->timer);
	nmq_mutex_lock(&s->mtx);
	s->ended = true;
	session_clear_locked(s);
	if (s->will != NULL) {
		nmq_msg_release(s->will);
		s->will = NULL;
	}
	session_unlock(s);
}

// Re-arms the session timer: expiry while offline, the delayed will, and
// QoS retry for 3.1.1 clients with messages in flight.
static void session_timer_update_locked(nmq_session *s)
{
	uint64_t at = 0;
	if (s->ended) {
		return;
	}
	if (s->link == NULL && s->expiry_s != UINT32_MAX) {
		at = s->offline_since_ms + (uint64_t)s->expiry_s * 1000;
	}
	if (s->will != NULL && (at == 0 || s->will_at_ms < at)) {
		at = s->will_at_ms;
	}
	if (s->link != NULL && s->ver != MQTT_PROTO_V5 && s->infl_len > 0
	    && proto_lim(s->p)->retry_interval_s > 0) {
		uint64_t r = nmq_clock_ms() + (uint64_t)proto_lim(s->p)->retry_interval_s * 1000;
		if (at == 0 || r < at) {
			at = r;
		}
	}
	if (at == 0) {
		if (s->timer_at != 0) {
			// Leave it armed: the callback re-checks and goes idle.
		}
		return;
	}
	if (s->timer_at != 0 && s->timer_at <= at && timer_wheel_armed(s->p->tw, &s->timer)) {
		return; // fires earlier anyway and re-evaluates
	}
	s->timer_at = at;
	timer_wheel_schedule(s->p->tw, &s->timer, at);
}

// Work posted from the timer thread: ending a session or publishing a will
// routes messages, which belongs on a worker.
typedef struct session_work {
	workq_job    job;
	nmq_session *s;
	nmq_msg     *will;
	bool         end;
} session_work;

static void session_work_fn(workq_job *job)
{
	session_work *w = (session_work *)job;
	nmq_proto    *p = w->s->p;
	proto_store_batch(p, true);
	if (w->will != NULL) {
		// The record loses the will in the group of the will's own
		// writes (a record still holding it would publish it again
		// after a crash).
		proto_session_will_published(w->s);
		proto_publish_will(p, w->will);
	}
	if (w->end) {
		session_end_when(w->s, true);
	}
	proto_store_batch(p, false);
	nmq_session_release(w->s);
	free(w);
}

// See proto.h.
void proto_session_will_published(nmq_session *s)
{
	nmq_mutex_lock(&s->mtx);
	// Online: the record was rewritten at the attach (with the new
	// connection's will, if any). Ended: it is deleted.
	if (!s->ended && s->link == NULL && persist(s)) {
		store_session_locked(s, s->offline_wall_ms);
	}
	session_unlock(s);
}

// Session timer (wheel thread): expiry, will delay and retry.
static void session_timer_cb(tw_timer *t)
{
	nmq_session *s    = TW_OWNER(t, nmq_session, timer);
	uint64_t     now  = nmq_clock_ms();
	nmq_msg     *will = NULL;
	bool         end  = false;
	nmq_mutex_lock(&s->mtx);
	s->timer_at = 0;
	if (s->ended) {
		session_unlock(s);
		return;
	}
	if (s->will != NULL && now >= s->will_at_ms) {
		will    = s->will;
		s->will = NULL;
	}
	if (session_expired_locked(s, now)) {
		end = true;
	}
	if (s->link != NULL && s->ver != MQTT_PROTO_V5 && s->infl_len > 0) {
		session_resend_locked(s, true);
	}
	if (!end) {
		session_timer_update_locked(s);
	}
	session_unlock(s);
	if (will != NULL || end) {
		session_work *w = calloc(1, sizeof(*w));
		if (w == NULL) {
			// Counted and logged; the will goes back to the session
			// and the timer tries again in a second, so neither the
			// will nor the session's end is lost.
			proto_count_alloc_failure(s->p, "session_work");
			nmq_mutex_lock(&s->mtx);
			if (!s->ended) {
				if (will != NULL && s->will == NULL) {
					s->will = will;
					will    = NULL;
				}
				s->timer_at = now + SESSION_RETRY_MS;
				timer_wheel_schedule(s->p->tw, &s->timer, s->timer_at);
			}
			session_unlock(s);
			if (will != NULL) {
				// Ended meanwhile, or replaced by a newer will.
				nmq_msg_release(will);
			}
			return;
		}
		nmq_session_hold(s);
		w->job.fn = session_work_fn;
		w->s      = s;
		w->will   = will;
		w->end    = end;
		workq_post(s->p->wq, &w->job);
	}
}

void session_count_received(nmq_session *s)
{
	atomic_fetch_add_explicit(&s->recv_msgs, 1, memory_order_relaxed);
}

bool session_info(nmq_session *s, proto_session_info *out)
{
	nmq_mutex_lock(&s->mtx);
	bool ended = s->ended;
	if (!ended) {
		out->online      = s->link != NULL;
		out->keepalive   = s->keepalive;
		out->clean_start = s->clean_start;
		out->proto_ver   = s->ver;
		out->queued      = s->q.len + s->q0.len;
	}
	session_unlock(s);
	out->recv_msgs = atomic_load_explicit(&s->recv_msgs, memory_order_relaxed);
	return !ended;
}

// ---------------------------------------------------------------------------
// Restoring the store's sessions at startup; see proto.h.

nmq_session *proto_session_restore(
    nmq_proto *p, const proto_store_session *rec, uint64_t now_wall_ms)
{
	const char  *u = rec->username;
	nmq_session *s
	    = session_alloc(p, rec->client_id, (const uint8_t *)u, u != NULL ? strlen(u) : 0);
	if (s == NULL) {
		proto_count_alloc_failure(p, "session");
		return NULL;
	}
	uint64_t now = nmq_clock_ms();
	// Offline since the broker stopped (online then) or since it went
	// offline, by the wall clock (the monotonic one restarted).
	uint64_t gone = 0;
	if (rec->offline_wall_ms != 0 && now_wall_ms > rec->offline_wall_ms) {
		gone = now_wall_ms - rec->offline_wall_ms;
	}
	s->expiry_s = rec->expiry_s;
	s->ver      = rec->proto_ver;
	if (rec->proto_ver == 0) { // a preset session no client took over
		s->ver    = MQTT_PROTO_V5;
		s->preset = true;
	}
	s->offline_since_ms = now > gone ? now - gone : 0;
	s->offline_wall_ms  = rec->offline_wall_ms != 0 ? rec->offline_wall_ms : now_wall_ms;
	s->stored           = true;
	if (rec->queue_max_seq > 0) {
		// Its queue stays on disk until the client is back; in-flight
		// messages are put back by proto_session_restore_msg().
		s->disk_mode     = true;
		s->disk_after    = 0;
		s->disk_last_put = rec->queue_max_seq;
		s->q_seq         = rec->queue_max_seq + 1;
		// QoS 1 messages in flight at the stop are stored as queued
		// (their packet id is their seq's): they may have gone out.
		s->dup_below = rec->queue_max_seq + 1;
	}
	if (rec->will != NULL) {
		// Its connection ended without a DISCONNECT (the broker
		// stopped or died): the will goes out after its delay.
		nmq_msg_hold(rec->will);
		s->will       = rec->will;
		s->will_at_ms = s->offline_since_ms + (uint64_t)rec->will_delay_s * 1000;
	}
	pthread_mutex_lock(&p->tbl_mtx);
	if (proto_table_find(p, rec->client_id) != NULL
	    || proto_table_insert(p, s) != NMQ_OK) { // the table keeps this reference
		pthread_mutex_unlock(&p->tbl_mtx);
		log_error("session", "client_id=%s event=restore_failed", rec->client_id);
		nmq_mutex_lock(&s->mtx);
		s->stored = false;
		if (s->will != NULL) {
			nmq_msg_release(s->will);
			s->will = NULL;
		}
		session_unlock(s);
		nmq_session_release(s);
		return NULL;
	}
	pthread_mutex_unlock(&p->tbl_mtx);
	nmq_mutex_lock(&s->mtx);
	session_timer_update_locked(s);
	session_unlock(s);
	return s;
}

// A preset session (preset.session); see proto.h.
nmq_session *proto_session_preset(nmq_proto *p, const char *client_id, bool *existed)
{
	*existed = false;
	pthread_mutex_lock(&p->tbl_mtx);
	nmq_session *s = proto_table_find(p, client_id);
	if (s != NULL) {
		// Restored from the store: it is the same session, already
		// subscribed as its client left it.
		pthread_mutex_unlock(&p->tbl_mtx);
		*existed = true;
		return s;
	}
	s = session_alloc(p, client_id, NULL, 0);
	if (s == NULL) {
		pthread_mutex_unlock(&p->tbl_mtx);
		proto_count_alloc_failure(p, "session");
		return NULL;
	}
	s->expiry_s         = UINT32_MAX; // until a client takes it over
	s->ver              = MQTT_PROTO_V5; // subscription options as configured
	s->preset           = true;
	s->offline_since_ms = nmq_clock_ms();
	if (proto_table_insert(p, s) != NMQ_OK) { // the table keeps this reference
		pthread_mutex_unlock(&p->tbl_mtx);
		nmq_session_release(s);
		proto_count_alloc_failure(p, "session");
		return NULL;
	}
	pthread_mutex_unlock(&p->tbl_mtx);
	nmq_mutex_lock(&s->mtx);
	if (p->store != NULL) {
		store_session_locked(s, wall_ms());
	}
	session_unlock(s);
	return s;
}

size_t proto_sessions_end_presets(
    nmq_proto *p, bool (*configured)(void *arg, const char *client_id), void *arg)
{
	pthread_mutex_lock(&p->tbl_mtx);
	size_t        n = 0;
	nmq_session **v = calloc(p->tbl_len > 0 ? p->tbl_len : 1, sizeof(*v));
	for (size_t i = 0; v != NULL && i < p->tbl_cap && n < p->tbl_len; i++) {
		nmq_session *s = p->tbl[i];
		if (s != NULL && s != (nmq_session *)p) {
			nmq_session_hold(s);
			v[n++] = s;
		}
	}
	pthread_mutex_unlock(&p->tbl_mtx);
	if (v == NULL) {
		proto_count_alloc_failure(p, "session");
		return 0;
	}
	size_t ended = 0;
	for (size_t i = 0; i < n; i++) {
		nmq_session *s = v[i];
		nmq_mutex_lock(&s->mtx);
		bool stale
		    = s->preset && s->link == NULL && !s->ended && !configured(arg, s->client_id);
		session_unlock(s);
		if (stale) {
			log_warn("session",
			    "client_id=%s event=preset_session_ended reason=not_configured: its "
			    "subscriptions and queued messages are dropped",
			    s->client_id);
			session_end(s);
			ended++;
		}
		nmq_session_release(s);
	}
	free(v);
	return ended;
}

nmq_err proto_session_restore_msg(nmq_session *s, uint64_t seq, nmq_msg *msg, uint8_t qos,
    bool retain, uint8_t state, uint16_t packet_id, const uint32_t *sub_ids, uint32_t n_sub_ids)
{
	out_entry e;
	memset(&e, 0, sizeof(e));
	e.msg    = msg;
	e.seq    = seq;
	e.qos    = qos;
	e.retain = retain;
	entry_set_ids(s->p, &e, sub_ids, n_sub_ids);
	bool ok;
	bool keep = true; // the entry keeps a reference to msg
	nmq_mutex_lock(&s->mtx);
	if (state == PROTO_STORE_QUEUED || packet_id == 0 || qos == 0) {
		ok = ring_push(&s->q, &e, UINT32_MAX);
	} else {
		infl_entry f;
		memset(&f, 0, sizeof(f));
		f.e   = e;
		f.pid = packet_id;
		if (state == PROTO_STORE_RELEASED) {
			f.e.msg = NULL;
			entry_ids_free(&f.e); // a PUBREL needs none
			f.state = INFL_WAIT_PUBCOMP;
			keep    = false;
		} else {
			f.state = qos == 1 ? INFL_WAIT_PUBACK : INFL_WAIT_PUBREC;
		}
		ok = infl_push(s, &f);
	}
	if (!ok) {
		entry_ids_free(&e);
	}
	if (ok) {
		if (keep) {
			nmq_msg_hold(msg);
		}
		if (seq >= s->q_seq) {
			s->q_seq = seq + 1;
		}
	}
	session_unlock(s);
	return ok ? NMQ_OK : NMQ_ENOMEM;
}

nmq_err proto_session_restore_rel(nmq_session *s, uint16_t packet_id)
{
	nmq_mutex_lock(&s->mtx);
	nmq_err e = qos2_find(s, packet_id) >= 0 ? NMQ_OK : qos2_add(s, packet_id, nmq_clock_ms());
	session_unlock(s);
	return e;
}
