// The protocol-layer instance: the session table, live connection list,
// metrics and lifecycle.
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nng/core/log.h"
#include "nng/protocol/link.h"
#include "nng/protocol/session.h"

// FNV-1a over a NUL-terminated client id.
static size_t hash_id(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s != '\0'; s++) {
		h ^= (uint8_t)*s;
		h *= 1099511628211ull;
	}
	return (size_t)h;
}

// Returns a new protocol layer, or NULL.
nmq_proto *proto_alloc(
    const proto_limits *limits, timer_wheel *tw, workq *wq, const proto_app_ops *ops, void *app)
{
	nmq_proto *p = calloc(1, sizeof(*p));
	if (p == NULL) {
		return NULL;
	}
	p->lim = calloc(1, sizeof(*p->lim));
	if (p->lim == NULL) {
		free(p);
		return NULL;
	}
	p->lim->lim = *limits;
	p->tw       = tw;
	p->wq       = wq;
	p->ops      = ops;
	p->app      = app;
	p->tbl_cap  = 1024;
	p->tbl      = calloc(p->tbl_cap, sizeof(*p->tbl));
	if (p->tbl == NULL) {
		free(p->lim);
		free(p);
		return NULL;
	}
	p->env.wq              = wq;
	p->env.max_packet_size = limits->max_packet_size;
	p->env.tx_high_water   = 256 * 1024;
	atomic_init(&p->next_session_id, 1);
	pthread_mutex_init(&p->tbl_mtx, NULL);
	pthread_mutex_init(&p->links_mtx, NULL);
	return p;
}

// Publishes a new set of limits; see proto.h.
nmq_err proto_set_limits(nmq_proto *p, const proto_limits *limits)
{
	lim_node *n = calloc(1, sizeof(*n));
	if (n == NULL) {
		proto_count_alloc_failure(p, "limits");
		return NMQ_ENOMEM; // the running limits stay
	}
	n->lim  = *limits;
	n->prev = p->lim;
	__atomic_store_n(&p->lim, n, __ATOMIC_RELEASE);
	__atomic_store_n(&p->env.max_packet_size, limits->max_packet_size, __ATOMIC_RELAXED);
	return NMQ_OK;
}

void proto_want_message_events(nmq_proto *p, bool on)
{
	atomic_store_explicit(
	    &p->want_msg_events, on && p->ops->message_event != NULL, memory_order_relaxed);
}

proto_metrics *proto_metrics_get(nmq_proto *p)
{
	return &p->m;
}

const conn_env *proto_conn_env(nmq_proto *p)
{
	return &p->env;
}

void proto_count_drop(nmq_proto *p, atomic_long *why)
{
	proto_count_drops(p, why, 1);
}

void proto_count_alloc_failure(nmq_proto *p, const char *what)
{
	long n = atomic_fetch_add(&p->m.alloc_failures, 1) + 1;
	log_warn_rl("proto", "event=alloc_failed for=%s alloc_failures=%ld", what, n);
}

void proto_count_drops(nmq_proto *p, atomic_long *why, size_t n)
{
	if (n == 0) {
		return;
	}
	atomic_fetch_add(&p->m.msgs_dropped, (long)n);
	if (why != NULL) {
		atomic_fetch_add(why, (long)n);
	}
}

// Finds a session by client id; returns it (not held), or NULL. Caller
// holds tbl_mtx.
nmq_session *proto_table_find(nmq_proto *p, const char *client_id)
{
	size_t mask = p->tbl_cap - 1;
	for (size_t i = hash_id(client_id) & mask;; i = (i + 1) & mask) {
		nmq_session *s = p->tbl[i];
		if (s == NULL) {
			return NULL;
		}
		if (s != (nmq_session *)p && strcmp(nmq_session_client_id(s), client_id) == 0) {
			return s;
		}
	}
}

// Rebuilds the table at a new capacity, dropping tombstones. Returns false
// when out of memory (counted and logged; the table is unchanged).
static bool table_resize(nmq_proto *p, size_t ncap)
{
	nmq_session **nt = calloc(ncap, sizeof(*nt));
	if (nt == NULL) {
		proto_count_alloc_failure(p, "session_table");
		return false;
	}
	for (size_t i = 0; i < p->tbl_cap; i++) {
		nmq_session *s = p->tbl[i];
		if (s == NULL || s == (nmq_session *)p) {
			continue;
		}
		size_t j = hash_id(nmq_session_client_id(s)) & (ncap - 1);
		while (nt[j] != NULL) {
			j = (j + 1) & (ncap - 1);
		}
		nt[j] = s;
	}
	free(p->tbl);
	p->tbl      = nt;
	p->tbl_cap  = ncap;
	p->tbl_tomb = 0;
	return true;
}

// Inserts s (the table keeps the caller's reference); see proto_impl.h.
// Caller holds tbl_mtx.
nmq_err proto_table_insert(nmq_proto *p, nmq_session *s)
{
	// Live entries and tombstones together stay under half the slots, so
	// that a probe always meets an empty slot: grow when the live ones
	// pass half, else rebuild at the same size to drop the tombstones.
	size_t used = p->tbl_len + p->tbl_tomb + 1;
	if (used * 2 > p->tbl_cap) {
		size_t ncap = (p->tbl_len + 1) * 2 > p->tbl_cap ? p->tbl_cap * 2 : p->tbl_cap;
		if (!table_resize(p, ncap) && used * 8 > p->tbl_cap * 7) {
			// Could not rebuild, and probing would get too long
			// (or never end): refuse this session.
			return NMQ_ENOMEM;
		}
	}
	size_t mask = p->tbl_cap - 1;
	size_t i    = hash_id(nmq_session_client_id(s)) & mask;
	while (p->tbl[i] != NULL && p->tbl[i] != (nmq_session *)p) {
		i = (i + 1) & mask;
	}
	if (p->tbl[i] != NULL) {
		p->tbl_tomb--;
	}
	p->tbl[i] = s;
	p->tbl_len++;
	long n  = atomic_fetch_add(&p->m.sessions, 1) + 1;
	long mx = atomic_load(&p->m.sessions_max);
	while (n > mx && !atomic_compare_exchange_weak(&p->m.sessions_max, &mx, n)) { }
	return NMQ_OK;
}

// Removes s (a tombstone keeps probe chains intact; the table's reference
// passes to the caller). Caller holds tbl_mtx.
void proto_table_remove(nmq_proto *p, nmq_session *s)
{
	size_t mask = p->tbl_cap - 1;
	for (size_t i = hash_id(nmq_session_client_id(s)) & mask;; i = (i + 1) & mask) {
		if (p->tbl[i] == NULL) {
			return;
		}
		if (p->tbl[i] == s) {
			p->tbl[i] = (nmq_session *)p; // tombstone
			p->tbl_len--;
			p->tbl_tomb++;
			atomic_fetch_sub(&p->m.sessions, 1);
			return;
		}
	}
}

nmq_err proto_links_add(nmq_proto *p, nmq_link *l)
{
	pthread_mutex_lock(&p->links_mtx);
	if (p->stopping) {
		pthread_mutex_unlock(&p->links_mtx);
		return NMQ_ECLOSED;
	}
	if (p->links_len == p->links_cap) {
		size_t     ncap = p->links_cap ? p->links_cap * 2 : 64;
		nmq_link **nl   = realloc(p->links, ncap * sizeof(*nl));
		if (nl == NULL) {
			pthread_mutex_unlock(&p->links_mtx);
			proto_count_alloc_failure(p, "links");
			return NMQ_ENOMEM;
		}
		p->links     = nl;
		p->links_cap = ncap;
	}
	l->links_idx             = (uint32_t)p->links_len;
	p->links[p->links_len++] = l;
	pthread_mutex_unlock(&p->links_mtx);
	return NMQ_OK;
}

void proto_links_remove(nmq_proto *p, nmq_link *l)
{
	pthread_mutex_lock(&p->links_mtx);
	// O(1): the last link moves into l's slot.
	size_t i = l->links_idx;
	if (i < p->links_len && p->links[i] == l) {
		nmq_link *last  = p->links[--p->links_len];
		p->links[i]     = last;
		last->links_idx = (uint32_t)i;
	}
	pthread_mutex_unlock(&p->links_mtx);
}

// Closes every connection: v5 clients get DISCONNECT 0x8B first.
// Closes the live connections (those with a will only, when wills_only):
// v5 clients get DISCONNECT 0x8B first. New connections are refused from
// now on.
static void close_links(nmq_proto *p, bool wills_only)
{
	pthread_mutex_lock(&p->links_mtx);
	p->stopping = true;
	for (size_t i = 0; i < p->links_len; i++) {
		nmq_link *l = p->links[i];
		if (wills_only && __atomic_load_n(&l->will, __ATOMIC_RELAXED) == NULL) {
			continue;
		}
		conn_hold(l->conn);
		if (l->connected && l->ver == MQTT_PROTO_V5) {
			nmq_session *s = l->session;
			if (s != NULL) {
				// Lock order is session -> conn; the links list lock
				// is a leaf for everyone else, so take the session
				// lock by trying and otherwise just close.
				if (session_trylock(s)) {
					if (session_link_locked(s) == l) {
						link_send_disconnect(
						    l, MQTT_RC_SERVER_SHUTTING_DOWN);
					}
					session_unlock(s);
				}
			}
			conn_shutdown(l->conn);
		} else {
			conn_close(l->conn);
		}
		conn_release(l->conn);
	}
	pthread_mutex_unlock(&p->links_mtx);
}

// proto_quiesce's round of the workers: one job each, and the count of
// those that ran; freed by the last of them and the caller to let go.
typedef struct quiesce_round quiesce_round;
typedef struct quiesce_slot {
	workq_job      job; // first: the job is the slot
	quiesce_round *r;
} quiesce_slot;
struct quiesce_round {
	atomic_int   ran;
	atomic_int   refs;
	quiesce_slot slots[];
};

static void quiesce_round_release(quiesce_round *r)
{
	if (atomic_fetch_sub(&r->refs, 1) == 1) {
		free(r);
	}
}

static void quiesce_job(workq_job *job)
{
	quiesce_round *r = ((quiesce_slot *)job)->r;
	atomic_fetch_add(&r->ran, 1);
	quiesce_round_release(r);
}

static void quiesce_sleep(void)
{
	struct timespec ts = { 0, 5 * 1000 * 1000 };
	nanosleep(&ts, NULL);
}

// Posts a job to every worker and waits (until deadline_ms at most) for
// all of them to run it: what each worker was doing before (a frame being
// handled, its job batch and the flushes after it) is done. Returns false
// at the deadline or out of memory.
static bool quiesce_workers(nmq_proto *p, uint64_t deadline_ms)
{
	int            n = workq_size(p->wq);
	quiesce_round *r = calloc(1, sizeof(*r) + (size_t)n * sizeof(quiesce_slot));
	if (r == NULL) {
		return false;
	}
	atomic_init(&r->ran, 0);
	atomic_init(&r->refs, n + 1);
	for (int i = 0; i < n; i++) {
		r->slots[i].r      = r;
		r->slots[i].job.fn = quiesce_job;
		workq_post_to(p->wq, i, &r->slots[i].job);
	}
	bool done;
	while (!(done = atomic_load(&r->ran) == n) && nmq_clock_ms() < deadline_ms) {
		quiesce_sleep();
	}
	quiesce_round_release(r);
	return done;
}

// The acks waiting for the store on the live links.
static size_t acks_waiting(nmq_proto *p)
{
	size_t n = 0;
	pthread_mutex_lock(&p->links_mtx);
	for (size_t i = 0; i < p->links_len; i++) {
		n += atomic_load(&p->links[i]->acks_waiting);
	}
	pthread_mutex_unlock(&p->links_mtx);
	return n;
}

size_t proto_quiesce(nmq_proto *p, unsigned max_wait_ms)
{
	atomic_store(&p->rx_stopped, true);
	if (p->wq == NULL) {
		return 0;
	}
	uint64_t deadline = nmq_clock_ms() + max_wait_ms;
	// No frame is being handled any more: every ack it asked for is
	// counted on its link.
	(void)quiesce_workers(p, deadline);
	size_t n;
	while ((n = acks_waiting(p)) > 0 && nmq_clock_ms() < deadline) {
		quiesce_sleep();
	}
	// The last acks were sent by jobs whose batch flushes the connections
	// after them: two rounds, so that one runs in a later batch.
	(void)quiesce_workers(p, deadline);
	(void)quiesce_workers(p, deadline);
	return n;
}

void proto_shutdown_wills(nmq_proto *p)
{
	close_links(p, true);
}

size_t proto_links_with_will(nmq_proto *p)
{
	size_t n = 0;
	pthread_mutex_lock(&p->links_mtx);
	for (size_t i = 0; i < p->links_len; i++) {
		if (__atomic_load_n(&p->links[i]->will, __ATOMIC_RELAXED) != NULL) {
			n++;
		}
	}
	pthread_mutex_unlock(&p->links_mtx);
	return n;
}

void proto_shutdown_all(nmq_proto *p)
{
	close_links(p, false);
}

// Frees the protocol layer. Connections must be gone (proto_shutdown_all
// and a drain of the work queue) and listeners stopped.
void proto_free(nmq_proto *p)
{
	if (p == NULL) {
		return;
	}
	pthread_mutex_lock(&p->tbl_mtx);
	for (size_t i = 0; i < p->tbl_cap; i++) {
		nmq_session *s = p->tbl[i];
		if (s == NULL || s == (nmq_session *)p) {
			continue;
		}
		p->tbl[i] = NULL;
		pthread_mutex_unlock(&p->tbl_mtx);
		session_drop(s);
		p->ops->session_end(p->app, s);
		nmq_session_release(s);
		pthread_mutex_lock(&p->tbl_mtx);
	}
	pthread_mutex_unlock(&p->tbl_mtx);
	free(p->tbl);
	free(p->links);
	while (p->lim != NULL) {
		lim_node *prev = p->lim->prev;
		free(p->lim);
		p->lim = prev;
	}
	pthread_mutex_destroy(&p->tbl_mtx);
	pthread_mutex_destroy(&p->links_mtx);
	free(p);
}

// Checks a topic name or filter against max_topic_length and
// max_topic_levels.
bool proto_topic_within_limits(const nmq_proto *p, const uint8_t *t, size_t len)
{
	if (proto_lim(p)->max_topic_length > 0 && len > proto_lim(p)->max_topic_length) {
		return false;
	}
	if (proto_lim(p)->max_topic_levels > 0) {
		uint32_t levels = 1;
		for (size_t i = 0; i < len; i++) {
			if (t[i] == '/' && ++levels > proto_lim(p)->max_topic_levels) {
				return false;
			}
		}
	}
	return true;
}

void proto_count_received(nmq_proto *p)
{
	atomic_fetch_add_explicit(&p->m.msgs_received, 1, memory_order_relaxed);
}

nmq_session *proto_session_find(nmq_proto *p, const char *client_id)
{
	pthread_mutex_lock(&p->tbl_mtx);
	nmq_session *s = p->tbl != NULL ? proto_table_find(p, client_id) : NULL;
	if (s != NULL) {
		nmq_session_hold(s);
	}
	pthread_mutex_unlock(&p->tbl_mtx);
	return s;
}

void proto_sessions_snapshot_free(proto_session_info *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(v[i].client_id);
		free(v[i].username);
		if (v[i].s != NULL) {
			nmq_session_release(v[i].s);
		}
	}
	free(v);
}

size_t proto_sessions_snapshot(nmq_proto *p, proto_session_info **out, nmq_err *err)
{
	*out = NULL;
	if (err != NULL) {
		*err = NMQ_OK;
	}
	// 1. The session pointers, held, under the table lock only.
	pthread_mutex_lock(&p->tbl_mtx);
	size_t              n = 0;
	proto_session_info *v = calloc(p->tbl_len > 0 ? p->tbl_len : 1, sizeof(*v));
	if (v != NULL) {
		for (size_t i = 0; i < p->tbl_cap && n < p->tbl_len; i++) {
			nmq_session *s = p->tbl[i];
			if (s != NULL && s != (nmq_session *)p) {
				nmq_session_hold(s);
				v[n++].s = s;
			}
		}
	}
	pthread_mutex_unlock(&p->tbl_mtx);
	if (v == NULL) {
		if (err != NULL) {
			*err = NMQ_ENOMEM;
		}
		return 0;
	}
	// 2. Each session under its own lock.
	size_t kept = 0;
	for (size_t i = 0; i < n; i++) {
		nmq_session        *s     = v[i].s;
		proto_session_info *in    = &v[kept];
		const char         *o     = session_owner(s);
		bool                ended = !session_info(s, in);
		in->s                     = s;
		in->client_id             = ended ? NULL : strdup(nmq_session_client_id(s));
		in->username              = (ended || o == NULL) ? NULL : strdup(o);
		if (ended || in->client_id == NULL || (o != NULL && in->username == NULL)) {
			bool oom = !ended;
			free(in->client_id);
			free(in->username);
			in->client_id = NULL;
			in->username  = NULL;
			in->s         = NULL;
			nmq_session_release(s);
			if (oom) {
				for (size_t j = i + 1; j < n; j++) {
					nmq_session_release(v[j].s);
				}
				proto_sessions_snapshot_free(v, kept);
				if (err != NULL) {
					*err = NMQ_ENOMEM;
				}
				return 0;
			}
			continue;
		}
		kept++;
	}
	if (kept == 0) {
		free(v);
		return 0;
	}
	*out = v;
	return kept;
}

void proto_get_limits(nmq_proto *p, proto_limits *out)
{
	*out = *proto_lim(p);
}

// ---------------------------------------------------------------------------
// The durable store

static __thread bool tls_store_noted;
static __thread bool tls_store_refused;

void proto_set_store(nmq_proto *p, const proto_store_ops *ops, void *st)
{
	p->store         = ops;
	p->store_arg     = st;
	p->ack_store     = ops;
	p->ack_store_arg = st;
}

void proto_set_ack_store(nmq_proto *p, const proto_store_ops *ops, void *st)
{
	p->ack_store     = ops;
	p->ack_store_arg = st;
}

void proto_store_noted(void)
{
	tls_store_noted = true;
}

bool proto_store_take_noted(void)
{
	bool n          = tls_store_noted;
	tls_store_noted = false;
	return n;
}

void proto_store_refused(void)
{
	tls_store_refused = true;
}

bool proto_store_take_refused(void)
{
	bool n            = tls_store_refused;
	tls_store_refused = false;
	return n;
}

bool proto_store_congested(nmq_proto *p, bool resume)
{
	if (p->store == NULL || p->store->backlog == NULL) {
		return false;
	}
	uint32_t pending = 0, max = 0;
	p->store->backlog(p->store_arg, &pending, &max);
	return max > 0 && pending >= (resume ? max / 4 : max / 2);
}

void proto_store_failed(nmq_proto *p, const char *what, const char *client_id, nmq_err e)
{
	long n = atomic_fetch_add(&p->m.store_failures, 1) + 1;
	log_warn_rl("proto",
	    "client_id=%s event=store_write_failed op=%s error=%s store_failures=%ld", client_id,
	    what, nmq_strerror(e), n);
}
