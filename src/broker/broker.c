// Routing: topic tree match, per-session merge of overlapping
// subscriptions, shared-subscription delivery, retained messages, wills and
// $SYS client status.
//
// Read access at delivery: with an ACL in force, a message reaches a
// session only if its client may subscribe to the message's exact topic
// (acl_check_read). To keep that off the hot path, SUBSCRIBE stamps the
// subscription in the tree with the current ACL epoch when no topic of its
// filter can be denied to the client (acl_filter_may_deny); a delivery
// through a stamp equal to the epoch needs no check. A reload bumps the
// epoch (every stamp stale: checked), then re-stamps every session and
// drops the messages queued for it that its client may no longer read
// (acl_swapped); a session resumed by another user or address is
// re-stamped for it (ident_adopt, from client_status).
// Refusals are skipped silently, counted and logged rate-limited; a shared
// group's copy goes to the next member that may read it
// (topic_tree_match_stamped stand-ins).
//
// Filters held (bridges.mqtt.<name>.transparent): once a watcher is set,
// the broker counts, per filter ("$share/<g>/" stripped, '$' topics left
// out), the local subscriptions of each QoS, under watch_mtx, on the
// SUBSCRIBE / UNSUBSCRIBE / session end path only (never on publish).
// A session's filters join the count under its sess_subs.mtx (counted).
//
// Locks, in order: sess_subs.mtx -> slot stripe -> reg_mtx, and
// sess_subs.mtx -> tree shard / auth_mtx, and sess_subs.mtx -> watch_mtx
// -> the watcher's own locks. A delivery check takes only the
// subscriber's slot stripe (to read its identity), never while holding
// another broker lock; acl_swapped takes a session's protocol lock
// (nmq_session_drop_queued) with no broker lock held.
#include "src/broker/broker.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "nng/core/droplog.h"
#include "src/auth/auth.h"
#include "src/broker/route.h"
#include "src/log/log.h"
#ifdef NMQ_HAVE_STORE
#include "src/store/store.h"
#endif

// The client behind a session as the ACL sees it at delivery: the user
// name and address of the connection that last connected (or, before any
// such hand-over, that first subscribed). Immutable, reference counted.
typedef struct sess_ident {
	atomic_int  refs;
	const char *cid; // the client id it was captured for
	const char *username; // NULL: none
	const char *peer;
	bool        super; // a superuser (http_auth super_req): reads everything
	char        text[];
} sess_ident;

// One subscription of a session, kept for cleanup, introspection and
// re-stamping.
typedef struct sub_rec {
	char          *filter;
	size_t         len;
	proto_sub_opts opts;
	uint32_t       stamp; // as stored in the tree (topic_sub_opts.stamp)
} sub_rec;

// The application data of a session: its subscriptions and identity.
// - The session's slot (nmq_session_app_data) is guarded by the session's
//   stripe of slot_mtx; it holds one registry reference.
// - mtx guards v, n, cap, dead, and the tree entries of the session.
// - ident is written under mtx and the stripe, so either one is enough to
//   read it.
// - prev, next and refs are guarded by reg_mtx; an entry stays in the
//   registry (so its next pointer stays valid) while referenced.
typedef struct sess_subs {
	pthread_mutex_t   mtx;
	sub_rec          *v;
	size_t            n;
	size_t            cap;
	nmq_session      *s; // the owner; alive while !dead
	bool              dead; // b_session_end ran
	sess_ident       *ident; // NULL until known
	struct sess_subs *prev;
	struct sess_subs *next;
	unsigned          refs;
	bool              counted; // its filters are in the broker's filter count
} sess_subs;

// One filter of the filter count: subscriptions per QoS.
typedef struct fcount {
	struct fcount *next;
	uint32_t       n[3];
	size_t         len;
	char           f[];
} fcount;

#define SLOT_STRIPES 64

// A stamp no epoch takes: set by the router on a match whose client was
// refused the topic, so that it is not asked twice.
#define STAMP_REFUSED UINT32_MAX

struct nmq_broker {
	topic_tree     *tree;
	retain_store   *retained;
	nmq_proto      *proto;
	pthread_mutex_t slot_mtx[SLOT_STRIPES]; // sessions' app data slots
	pthread_mutex_t reg_mtx; // the registry of sess_subs
	sess_subs      *reg_head;

	// Reloadable: swapped under auth_mtx, used through a held reference.
	pthread_mutex_t auth_mtx;
	auth_ctx       *auth;
	bool            allow_anonymous;
	bool            deny_disconnect;
	// An ACL with rules is in force; when none is, PUBLISH and SUBSCRIBE
	// skip the auth lock altogether (the common case, on the hot path).
	_Atomic bool acl_active;
	// Changes with every ACL swap (never 0): a subscription whose stamp
	// equals it was proven, against that ACL, to be readable in full.
	_Atomic uint32_t acl_epoch;
	_Atomic uint32_t max_subscriptions; // per client, 0 = no limit
	_Atomic uint64_t max_message_memory; // 0 = no cap
	atomic_long      acl_deliveries_denied;

	// The observer (webhooks): set before clients connect, then read only.
	broker_event_fn obs_fn;
	void           *obs_arg;
	uint32_t        obs_mask;
	nmq_store      *store; // the durable store, NULL when off

	// The external authenticator and ACL: set before clients connect.
	broker_authn_fn authn_fn;
	void           *authn_arg;
	broker_acl_fn   acl_fn;
	void           *acl_arg;

	// The filter count (see the top of the file).
	pthread_mutex_t   watch_mtx;
	_Atomic bool      watch_on; // counting (never switched off again)
	broker_filters_fn watch_fn; // NULL: nobody to tell
	void             *watch_arg;
	fcount          **wtab;
	size_t            wcap; // buckets, a power of 2
	size_t            wn; // filters
};

void broker_set_acl_checker(nmq_broker *b, broker_acl_fn fn, void *arg)
{
	b->acl_fn  = fn;
	b->acl_arg = arg;
}

void broker_set_authenticator(nmq_broker *b, broker_authn_fn fn, void *arg)
{
	b->authn_fn  = fn;
	b->authn_arg = arg;
}

void broker_set_observer(nmq_broker *b, broker_event_fn fn, void *arg, uint32_t mask)
{
	b->obs_fn   = fn;
	b->obs_arg  = arg;
	b->obs_mask = fn != NULL ? mask : 0;
	if (b->proto != NULL) {
		proto_want_message_events(b->proto,
		    (b->obs_mask & ((1u << BEV_MESSAGE_DELIVERED) | (1u << BEV_MESSAGE_ACKED)))
		        != 0);
	}
}

// True when the observer wants events of type t (one load and a test).
static inline bool obs_wants(const nmq_broker *b, broker_event_type t)
{
	return (b->obs_mask & (1u << t)) != 0;
}

static void obs_emit(nmq_broker *b, broker_event_type t, const char *client_id,
    const char *username, const char *topic, size_t topic_len, uint8_t qos, uint8_t rc)
{
	broker_event ev;
	memset(&ev, 0, sizeof(ev));
	ev.type      = t;
	ev.client_id = client_id;
	ev.username  = username;
	ev.topic     = topic;
	ev.topic_len = topic_len;
	ev.qos       = qos;
	ev.rc        = rc;
	b->obs_fn(b->obs_arg, &ev);
}

// Takes a reference to the current authentication state, with the flags
// and ACL epoch that go with it (each output may be NULL).
static auth_ctx *auth_get(nmq_broker *b, bool *anon, bool *deny_disconnect, uint32_t *epoch)
{
	pthread_mutex_lock(&b->auth_mtx);
	auth_ctx *a = auth_ctx_hold(b->auth);
	if (anon != NULL) {
		*anon = b->allow_anonymous;
	}
	if (deny_disconnect != NULL) {
		*deny_disconnect = b->deny_disconnect;
	}
	if (epoch != NULL) {
		*epoch = b->acl_epoch;
	}
	pthread_mutex_unlock(&b->auth_mtx);
	return a;
}

// Returns a new identity with one reference, or NULL when memory runs out.
// user (ulen bytes, cut at a NUL like strndup) may be NULL.
static sess_ident *ident_alloc(const char *cid, const char *user, size_t ulen, const char *peer)
{
	size_t      cl = strlen(cid);
	size_t      pl = peer != NULL ? strlen(peer) : 0;
	sess_ident *id;

	if (user != NULL) {
		ulen = strnlen(user, ulen);
	}
	id = malloc(sizeof(*id) + cl + 1 + pl + 1 + (user != NULL ? ulen + 1 : 0));
	if (id == NULL) {
		return NULL;
	}
	atomic_init(&id->refs, 1);
	id->super = false;
	char *p   = id->text;
	memcpy(p, cid, cl + 1);
	id->cid = p;
	p += cl + 1;
	if (pl > 0) {
		memcpy(p, peer, pl);
	}
	p[pl]    = '\0';
	id->peer = p;
	p += pl + 1;
	id->username = NULL;
	if (user != NULL) {
		memcpy(p, user, ulen);
		p[ulen]      = '\0';
		id->username = p;
	}
	return id;
}

static sess_ident *ident_hold(sess_ident *id)
{
	if (id != NULL) {
		atomic_fetch_add(&id->refs, 1);
	}
	return id;
}

static void ident_release(sess_ident *id)
{
	if (id != NULL && atomic_fetch_sub(&id->refs, 1) == 1) {
		free(id);
	}
}

// Returns true when id has the user name username (NULL: none).
static bool same_user(const sess_ident *id, const char *username)
{
	if (id->username == NULL || username == NULL) {
		return id->username == username;
	}
	return strcmp(id->username, username) == 0;
}

// Returns true when id is the client of who (same user name and address).
static bool ident_is(const sess_ident *id, const char *username, const char *peer)
{
	return same_user(id, username) && strcmp(id->peer, peer != NULL ? peer : "") == 0;
}

// Returns the stripe lock of the session's app data slot.
static pthread_mutex_t *slot_lock(nmq_broker *b, const nmq_session *s)
{
	uintptr_t h = (uintptr_t)s;
	h ^= h >> 17;
	return &b->slot_mtx[(h >> 6) % SLOT_STRIPES];
}

// Returns the session's identity (held; release with ident_release), or
// NULL when the session has none or has ended. Takes the session's stripe
// lock only.
static sess_ident *ident_get(nmq_broker *b, nmq_session *s)
{
	pthread_mutex_t *l = slot_lock(b, s);
	pthread_mutex_lock(l);
	sess_subs  *ss = *nmq_session_app_data(s);
	sess_ident *id = ss != NULL ? ident_hold(ss->ident) : NULL;
	pthread_mutex_unlock(l);
	return id;
}

// Replaces ss->ident by id (under ss->mtx). Returns the old one, for the
// caller to release.
static sess_ident *ident_set_locked(nmq_broker *b, sess_subs *ss, sess_ident *id)
{
	pthread_mutex_t *l = slot_lock(b, ss->s);
	pthread_mutex_lock(l);
	sess_ident *old = ss->ident;
	ss->ident       = id;
	pthread_mutex_unlock(l);
	return old;
}

// Frees a registry entry nobody references any more.
static void ss_free(sess_subs *ss)
{
	for (size_t i = 0; i < ss->n; i++) {
		free(ss->v[i].filter);
	}
	free(ss->v);
	ident_release(ss->ident);
	pthread_mutex_destroy(&ss->mtx);
	free(ss);
}

// Drops a reference taken by ss_get() (or the slot's own); the last one
// takes the entry out of the registry and frees it.
static void ss_put(nmq_broker *b, sess_subs *ss)
{
	pthread_mutex_lock(&b->reg_mtx);
	bool last = --ss->refs == 0;
	if (last) {
		if (ss->prev != NULL) {
			ss->prev->next = ss->next;
		} else {
			b->reg_head = ss->next;
		}
		if (ss->next != NULL) {
			ss->next->prev = ss->prev;
		}
	}
	pthread_mutex_unlock(&b->reg_mtx);
	if (last) {
		ss_free(ss);
	}
}

// A failed allocation: logged (rate limited, naming what it was for) and
// counted with the protocol layer's (proto_metrics.alloc_failures).
static void alloc_failed(nmq_broker *b, const char *what)
{
	long n = 1;
	if (b->proto != NULL) {
		n = atomic_fetch_add(&proto_metrics_get(b->proto)->alloc_failures, 1) + 1;
	}
	log_warn_rl("broker", "event=alloc_failed for=%s alloc_failures=%ld", what, n);
}

// Returns the session's subscription record list with a reference (release
// with ss_put), creating it when create is set; NULL when there is none
// or memory runs out.
static sess_subs *ss_get(nmq_broker *b, nmq_session *s, bool create)
{
	pthread_mutex_t *l    = slot_lock(b, s);
	void           **slot = nmq_session_app_data(s);
	pthread_mutex_lock(l);
	sess_subs *ss = *slot;
	if (ss == NULL && create) {
		ss = calloc(1, sizeof(*ss));
		if (ss == NULL) {
			pthread_mutex_unlock(l);
			alloc_failed(b, "subscriptions");
			return NULL;
		}
		pthread_mutex_init(&ss->mtx, NULL);
		ss->s = s;
		*slot = ss;
		pthread_mutex_lock(&b->reg_mtx);
		ss->refs = 2; // the slot's and the caller's
		ss->next = b->reg_head;
		if (b->reg_head != NULL) {
			b->reg_head->prev = ss;
		}
		b->reg_head = ss;
		pthread_mutex_unlock(&b->reg_mtx);
	} else if (ss != NULL) {
		pthread_mutex_lock(&b->reg_mtx);
		ss->refs++;
		pthread_mutex_unlock(&b->reg_mtx);
	}
	pthread_mutex_unlock(l);
	return ss;
}

// The tree options of a subscription.
static topic_sub_opts tree_opts(const proto_sub_opts *o, uint32_t stamp)
{
	topic_sub_opts to;
	memset(&to, 0, sizeof(to));
	to.qos                 = o->qos;
	to.no_local            = o->no_local;
	to.retain_as_published = o->retain_as_published;
	to.retain_handling     = o->retain_handling;
	to.sub_id              = o->sub_id;
	to.stamp               = stamp;
	return to;
}

// Recomputes the stamp of every subscription of ss for acl a (epoch) and
// its identity, rewriting the tree entries whose meaning changes. Under
// ss->mtx, ss not dead. A stale stamp (another epoch) already means "check
// every delivery", so only proofs for this epoch are written or withdrawn.
static void restamp_locked(nmq_broker *b, sess_subs *ss, const acl *a, uint32_t epoch)
{
	const sess_ident *id = ss->ident;
	acl_client        c  = { nmq_session_client_id(ss->s), NULL, NULL };
	if (id != NULL) {
		c.username = id->username;
		c.peer     = id->peer;
	}
	for (size_t i = 0; i < ss->n; i++) {
		sub_rec *r  = &ss->v[i];
		uint32_t st = id != NULL && acl_enabled(a)
		        && (id->super || !acl_filter_may_deny(a, &c, r->filter, r->len))
		    ? epoch
		    : 0;
		if (st == r->stamp || (st == 0 && r->stamp != epoch)) {
			r->stamp = st;
			continue;
		}
		topic_sub_opts to = tree_opts(&r->opts, st);
		nmq_err        e  = topic_tree_insert(b->tree, r->filter, r->len, ss->s, &to, NULL);
		if (e == NMQ_OK) {
			r->stamp = st;
		} else {
			// The old stamp stays: stale, so deliveries are checked.
			log_warn_rl("broker", "event=restamp_failed filter=%.*s error=%s",
			    (int)(r->len > 200 ? 200 : r->len), r->filter, nmq_strerror(e));
		}
	}
}

// One session's read access, for drop_unreadable().
typedef struct queue_check {
	const acl *rules;
	acl_client client;
} queue_check;

// Returns true when the client of a queue_check may read the message's
// topic.
static bool queued_readable(void *arg, const nmq_msg *msg)
{
	const queue_check *qc = arg;
	return acl_check_read(qc->rules, &qc->client, msg->topic, msg->topic_len) == ACL_ALLOW;
}

// Drops what is queued for session s (identity id) that its client may not
// read under rules. Returns the number dropped.
static size_t drop_unreadable(nmq_broker *b, const acl *rules, nmq_session *s, const sess_ident *id)
{
	queue_check qc = { rules, { nmq_session_client_id(s), id->username, id->peer } };
	size_t      n  = nmq_session_drop_queued(s, queued_readable, &qc);
	if (n > 0) {
		atomic_fetch_add(&b->acl_deliveries_denied, (long)n);
		log_info("acl", "client_id=%s messages=%zu event=queued_dropped",
		    nmq_session_client_id(s), n);
	}
	return n;
}

// After an ACL swap, for every session, one at a time (the registry lock is
// held only to step): re-stamps its subscriptions (subscriptions made
// meanwhile carry their own stamp; until a session is done, its stale
// stamps make every delivery to it checked), then drops what is queued for
// it that its client may no longer read, since that was checked against
// the old ACL when it was queued (messages already sent stay in flight).
static void acl_swapped(nmq_broker *b)
{
	uint32_t  epoch;
	auth_ctx *a = auth_get(b, NULL, NULL, &epoch);
	if (!acl_enabled(auth_ctx_acl(a))) {
		auth_ctx_release(a);
		return;
	}
	size_t sessions = 0;
	size_t dropped  = 0;
	pthread_mutex_lock(&b->reg_mtx);
	sess_subs *ss = b->reg_head;
	if (ss != NULL) {
		ss->refs++;
	}
	pthread_mutex_unlock(&b->reg_mtx);
	while (ss != NULL) {
		nmq_session *s  = NULL;
		sess_ident  *id = NULL;
		pthread_mutex_lock(&ss->mtx);
		if (!ss->dead && ss->n > 0) {
			restamp_locked(b, ss, auth_ctx_acl(a), epoch);
			sessions++;
		}
		if (!ss->dead && ss->ident != NULL) {
			s = ss->s;
			nmq_session_hold(s);
			id = ident_hold(ss->ident);
		}
		pthread_mutex_unlock(&ss->mtx);
		if (s != NULL) {
			// The session's protocol lock, with no broker lock held.
			dropped += drop_unreadable(b, auth_ctx_acl(a), s, id);
			ident_release(id);
			nmq_session_release(s);
		}
		pthread_mutex_lock(&b->reg_mtx);
		sess_subs *next = ss->next;
		if (next != NULL) {
			next->refs++;
		}
		pthread_mutex_unlock(&b->reg_mtx);
		ss_put(b, ss);
		ss = next;
	}
	auth_ctx_release(a);
	log_debug("acl", "event=acl_swapped restamped=%zu dropped=%zu epoch=%u", sessions, dropped,
	    epoch);
}

// A subscriber in the tree is a session, or a broker_sink whose pointer
// carries a tag in its lowest bit (both are at least pointer-aligned).
#define SINK_TAG ((uintptr_t)1)

static bool is_sink(const void *sub)
{
	return ((uintptr_t)sub & SINK_TAG) != 0;
}

static broker_sink *sink_of(const void *sub)
{
	return (broker_sink *)((uintptr_t)sub & ~SINK_TAG);
}

static void *sink_key(broker_sink *s)
{
	return (void *)((uintptr_t)s | SINK_TAG);
}

static void sess_hold(void *s)
{
	if (is_sink(s)) {
		sink_of(s)->hold(sink_of(s));
		return;
	}
	nmq_session_hold(s);
}

static void sess_release(void *s)
{
	if (is_sink(s)) {
		sink_of(s)->release(sink_of(s));
		return;
	}
	nmq_session_release(s);
}

static bool sess_eligible(void *s)
{
	return is_sink(s) || nmq_session_online(s);
}

static const topic_tree_ops tree_ops = {
	.hold     = sess_hold,
	.release  = sess_release,
	.eligible = sess_eligible,
};

static void msg_hold(void *m)
{
	nmq_msg_hold(m);
}

static void msg_release(void *m)
{
	nmq_msg_release(m);
}

static const retain_ops ret_ops = {
	.hold    = msg_hold,
	.release = msg_release,
};

// Returns a new broker, or NULL.
nmq_broker *broker_alloc(const nmq_conf *conf)
{
	nmq_broker *b = calloc(1, sizeof(*b));
	if (b == NULL) {
		return NULL;
	}
	b->tree     = topic_tree_alloc(&tree_ops);
	b->retained = retain_alloc(&ret_ops);
	if (b->tree == NULL || b->retained == NULL) {
		broker_free(b);
		return NULL;
	}
	for (size_t i = 0; i < SLOT_STRIPES; i++) {
		pthread_mutex_init(&b->slot_mtx[i], NULL);
	}
	pthread_mutex_init(&b->reg_mtx, NULL);
	pthread_mutex_init(&b->auth_mtx, NULL);
	pthread_mutex_init(&b->watch_mtx, NULL);
	char err[256];
	if (broker_reconfigure(b, conf, err, sizeof(err)) != NMQ_OK) {
		log_error("auth", "%s", err);
		broker_free(b);
		return NULL;
	}
	return b;
}

void broker_set_proto(nmq_broker *b, nmq_proto *p)
{
	b->proto = p;
}

void broker_set_store(nmq_broker *b, nmq_store *st)
{
	b->store = st;
}

#ifdef NMQ_HAVE_STORE
// The durable store: retained messages and the subscriptions of
// persistent sessions. A write the store refuses is logged (the state in
// memory stays).
static void store_log(const char *what, const char *key, nmq_err e)
{
	if (e != NMQ_OK) {
		log_warn_rl("broker", "key=%.200s event=store_write_failed op=%s error=%s", key,
		    what, nmq_strerror(e));
	}
}
#endif

// Writes (msg) or clears (NULL) the retained message of topic; the ack of
// the PUBLISH that carried it waits for the commit.
static void persist_retain(nmq_broker *b, const char *topic, nmq_msg *msg)
{
#ifdef NMQ_HAVE_STORE
	// The broker's own $SYS messages are republished at every interval:
	// not worth a write each.
	if (b->store != NULL && strncmp(topic, "$SYS/", 5) != 0) {
		nmq_err e = store_retain_put(b->store, topic, msg, NULL, NULL);
		store_log("retain_put", topic, e);
		if (e == NMQ_OK) {
			proto_store_noted();
		} else {
			proto_store_refused();
		}
	}
#else
	(void)b;
	(void)topic;
	(void)msg;
#endif
}

// Writes (put) or deletes a persistent session's subscription. Returns
// NMQ_OK (also when nothing is to be written), or the store's refusal
// (NMQ_ELIMIT: its queue is full; NMQ_ENOMEM; NMQ_ECLOSED): the caller
// then leaves the subscription as it was and answers with a failure.
static nmq_err persist_sub(nmq_broker *b, nmq_session *s, const char *filter, size_t len,
    const proto_sub_opts *o, bool put)
{
#ifdef NMQ_HAVE_STORE
	if (b->store == NULL || !nmq_session_persistent(s)) {
		return NMQ_OK;
	}
	char  stack[256];
	char *f = len < sizeof(stack) ? stack : malloc(len + 1);
	if (f == NULL) {
		store_log("sub_put", nmq_session_client_id(s), NMQ_ENOMEM);
		return NMQ_ENOMEM;
	}
	memcpy(f, filter, len);
	f[len] = '\0';
	nmq_err e;
	if (put) {
		store_sub r = {
			.client_id = nmq_session_client_id(s),
			.filter    = f,
			.options   = (uint8_t)((o->qos & 0x3) | (o->no_local ? 0x4 : 0)
                            | (o->retain_as_published ? 0x8 : 0)
                            | ((o->retain_handling & 0x3) << 4)),
			.sub_id    = o->sub_id,
		};
		e = store_sub_put(b->store, &r, NULL, NULL);
	} else {
		e = store_sub_del(b->store, nmq_session_client_id(s), f, NULL, NULL);
	}
	if (e == NMQ_OK) {
		proto_store_noted(); // the SUBACK / UNSUBACK waits for the commit
	} else {
		log_warn_rl("broker",
		    "client_id=%s filter=%.*s event=%s_refused reason=%s action=reason_code",
		    nmq_session_client_id(s), (int)(len > 200 ? 200 : len), filter,
		    put ? "subscribe" : "unsubscribe",
		    e == NMQ_ELIMIT ? "store_full" : nmq_strerror(e));
	}
	if (f != stack) {
		free(f);
	}
	return e;
#else
	(void)b;
	(void)s;
	(void)filter;
	(void)len;
	(void)o;
	(void)put;
	return NMQ_OK;
#endif
}

// Builds the authentication state of conf and swaps it in; see broker.h.
nmq_err broker_reconfigure(nmq_broker *b, const nmq_conf *conf, char *err, size_t errlen)
{
	auth_ctx *a = auth_ctx_alloc(conf, err, errlen);
	if (a == NULL) {
		return NMQ_EINVAL;
	}
	pthread_mutex_lock(&b->auth_mtx);
	auth_ctx *old      = b->auth;
	b->auth            = a;
	b->allow_anonymous = conf->allow_anonymous;
	b->deny_disconnect = conf->auth_deny_action == CONF_DENY_DISCONNECT;
	b->acl_active      = acl_enabled(auth_ctx_acl(a));
	// A new epoch withdraws every proof made against the old ACL:
	// deliveries are checked one by one until acl_swapped() is through.
	uint32_t epoch = b->acl_epoch + 1;
	b->acl_epoch   = epoch != 0 && epoch != STAMP_REFUSED ? epoch : 1;
	pthread_mutex_unlock(&b->auth_mtx);
	b->max_subscriptions  = conf->max_subscriptions;
	b->max_message_memory = conf->max_message_memory;
	if (old != NULL) {
		auth_ctx_release(old);
	}
	acl_swapped(b);
	return NMQ_OK;
}

void broker_free(nmq_broker *b)
{
	if (b == NULL) {
		return;
	}
	if (b->tree != NULL) {
		topic_tree_free(b->tree);
	}
	if (b->retained != NULL) {
		retain_free(b->retained);
	}
	if (b->auth != NULL) {
		auth_ctx_release(b->auth);
	}
	// Sessions still registered (none after proto_free) are not touched.
	while (b->reg_head != NULL) {
		sess_subs *ss = b->reg_head;
		b->reg_head   = ss->next;
		ss_free(ss);
	}
	for (size_t i = 0; i < SLOT_STRIPES; i++) {
		pthread_mutex_destroy(&b->slot_mtx[i]);
	}
	pthread_mutex_destroy(&b->reg_mtx);
	pthread_mutex_destroy(&b->auth_mtx);
	for (size_t i = 0; i < b->wcap; i++) {
		for (fcount *f = b->wtab[i], *nx; f != NULL; f = nx) {
			nx = f->next;
			free(f);
		}
	}
	free(b->wtab);
	pthread_mutex_destroy(&b->watch_mtx);
	free(b);
}

topic_tree *broker_topic_tree(nmq_broker *b)
{
	return b->tree;
}

retain_store *broker_retain(nmq_broker *b)
{
	return b->retained;
}

long broker_acl_deliveries_denied(nmq_broker *b)
{
	return atomic_load(&b->acl_deliveries_denied);
}

// Fills protocol limits from the mqtt section.
void broker_limits_from_conf(const nmq_conf *conf, proto_limits *lim)
{
	memset(lim, 0, sizeof(*lim));
	lim->max_packet_size        = conf->max_packet_size;
	lim->client_max_packet_size = conf->client_max_packet_size;
	lim->max_mqueue_len         = conf->max_mqueue_len;
	lim->max_inflight_window    = conf->max_inflight_window;
	lim->max_awaiting_rel       = conf->max_awaiting_rel;
	lim->await_rel_timeout_s    = conf->await_rel_timeout_s;
	lim->retry_interval_s       = conf->retry_interval_s;
	lim->keepalive_multiplier   = conf->keepalive_multiplier;
	lim->max_topic_alias
	    = (uint16_t)(conf->max_topic_alias > 65535 ? 65535 : conf->max_topic_alias);
	lim->connect_timeout_ms = 10000;
	lim->max_connections    = conf->max_connections;
	lim->max_keepalive      = conf->max_keepalive;
	lim->max_topic_length   = conf->max_topic_length;
	lim->max_topic_levels   = conf->max_topic_levels;
	// With an ACL, identities matter: a client id stays with its user.
	lim->client_id_owner_check = conf->auth_acl_enable;
	lim->max_message_memory    = conf->max_message_memory;
}

// State each worker thread keeps between calls: the match vector reused by
// every route (no allocation per publish). A thread-specific key frees it
// when the worker exits.
typedef struct thread_state {
	topic_match_vec mv;
} thread_state;

static pthread_key_t  state_key;
static pthread_once_t state_once = PTHREAD_ONCE_INIT;

static void state_free(void *arg)
{
	thread_state *ts = arg;
	topic_match_vec_fini(&ts->mv, &tree_ops);
	free(ts);
}

static void state_key_init(void)
{
	pthread_key_create(&state_key, state_free);
}

// Returns this thread's state, or NULL when out of memory.
static thread_state *thread_state_get(void)
{
	pthread_once(&state_once, state_key_init);
	thread_state *ts = pthread_getspecific(state_key);
	if (ts == NULL) {
		ts = calloc(1, sizeof(*ts));
		if (ts == NULL) {
			return NULL;
		}
		topic_match_vec_init(&ts->mv);
		pthread_setspecific(state_key, ts);
	}
	return ts;
}

// Authentication: the password list and auth.allow_anonymous
// (docs/compatibility.md §2).
static uint8_t authenticate(nmq_broker *b, const proto_client_info *info);

// Reports the answer to a CONNECT (rc: 0 or the refusing reason code) to
// the observer; user is the CONNECT's user name (NULL: none).
static void connack_event(
    nmq_broker *b, const proto_client_info *info, const char *user, uint8_t rc)
{
	if (!obs_wants(b, BEV_CLIENT_CONNACK)) {
		return;
	}
	broker_event ev;
	memset(&ev, 0, sizeof(ev));
	ev.type      = BEV_CLIENT_CONNACK;
	ev.client_id = info->client_id;
	ev.username  = user;
	ev.proto_ver = info->proto_ver;
	ev.keepalive = info->keepalive;
	ev.rc        = rc;
	b->obs_fn(b->obs_arg, &ev);
}

// Reports CONNECT and its answer to the observer around authenticate().
static uint8_t b_authenticate(void *app, const proto_client_info *info)
{
	nmq_broker *b = app;
	char        user[256];
	const char *u = NULL;
	if (b->obs_mask & ((1u << BEV_CLIENT_CONNECT) | (1u << BEV_CLIENT_CONNACK))) {
		if (info->username != NULL) {
			snprintf(user, sizeof(user), "%.*s",
			    (int)(info->username_len < 255 ? info->username_len : 255),
			    (const char *)info->username);
			u = user;
		}
		if (obs_wants(b, BEV_CLIENT_CONNECT)) {
			broker_event ev;
			memset(&ev, 0, sizeof(ev));
			ev.type      = BEV_CLIENT_CONNECT;
			ev.client_id = info->client_id;
			ev.username  = u;
			ev.proto_ver = info->proto_ver;
			ev.keepalive = info->keepalive;
			b->obs_fn(b->obs_arg, &ev);
		}
	}
	uint8_t rc = authenticate(b, info);
	// A parked CONNECT (HTTP authentication) reports its CONNACK event
	// when the answer comes (b_auth_answered).
	if (rc != PROTO_AUTH_PENDING) {
		connack_event(b, info, u, rc);
	}
	return rc;
}

// The answer to a CONNECT that HTTP authentication parked.
static void b_auth_answered(void *app, const proto_client_info *info, uint8_t rc)
{
	nmq_broker *b = app;
	char        user[256];
	const char *u = NULL;
	if (!obs_wants(b, BEV_CLIENT_CONNACK)) {
		return;
	}
	if (info->username != NULL) {
		snprintf(user, sizeof(user), "%.*s",
		    (int)(info->username_len < 255 ? info->username_len : 255),
		    (const char *)info->username);
		u = user;
	}
	connack_event(b, info, u, rc);
}

static uint8_t authenticate(nmq_broker *b, const proto_client_info *info)
{
	bool anon;
	if (!info->tls_peer_ok) {
		// A TLS listener with verify_peer and no verified certificate.
		log_info("auth", "client_id=%s peer=%s event=refused reason=tls_peer_not_verified",
		    info->client_id, info->peer);
		droplog_record(DENY_AUTH, info->client_id, NULL, 0, DROPLOG_NO_QOS, 1);
		return MQTT_RC_NOT_AUTHORIZED;
	}
	if (info->listener_over_limit) {
		// listeners.<name>.max_connections reached.
		atomic_fetch_add(&proto_metrics_get(b->proto)->refused_connections, 1);
		droplog_record(DENY_MAX_CONNECTIONS, info->client_id, NULL, 0, DROPLOG_NO_QOS, 1);
		log_info("auth",
		    "client_id=%s peer=%s listener=%s event=refused "
		    "reason=listener_max_connections",
		    info->client_id, info->peer, info->listener);
		return MQTT_RC_QUOTA_EXCEEDED;
	}
	auth_ctx *a = auth_get(b, &anon, NULL, NULL);
	if (b->authn_fn != NULL && info->username != NULL) {
		int pc = auth_password_check(auth_ctx_passwords(a), (const char *)info->username,
		    info->username_len, (const char *)info->password,
		    info->password != NULL ? info->password_len : 0);
		auth_ctx_release(a);
		// Not in the password list: the external authenticator decides.
		uint8_t rc = pc == AUTH_OK    ? 0
		    : pc == AUTH_UNKNOWN_USER ? b->authn_fn(b->authn_arg, info)
		                              : AUTH_RC_BAD_USER_OR_PASSWORD;
		if (rc != 0 && rc != PROTO_AUTH_PENDING) {
			log_info("auth", "client_id=%s peer=%s event=refused reason=0x%02x",
			    info->client_id, info->peer, rc);
			droplog_record(DENY_AUTH, info->client_id, NULL, 0, DROPLOG_NO_QOS, 1);
		}
		return rc;
	}
	uint8_t rc = auth_connect_check(a, (const char *)info->username,
	    info->username != NULL ? info->username_len : 0, (const char *)info->password,
	    info->password != NULL ? info->password_len : 0, anon);
	auth_ctx_release(a);
	if (rc != 0) {
		log_info("auth", "client_id=%s peer=%s event=refused reason=0x%02x",
		    info->client_id, info->peer, rc);
		droplog_record(DENY_AUTH, info->client_id, NULL, 0, DROPLOG_NO_QOS, 1);
		return rc;
	}
	return 0;
}

// A client (re)connected to session s as username from peer: that becomes
// the session's identity, for the delivery checks of its existing
// subscriptions. A session that has no subscription record yet gets its
// identity from its first SUBSCRIBE instead.
static void ident_adopt(nmq_broker *b, nmq_session *s, const char *username, const char *peer)
{
	sess_subs *ss = ss_get(b, s, false);
	if (ss == NULL) {
		return;
	}
	sess_ident *id = ident_alloc(nmq_session_client_id(s), username,
	    username != NULL ? strlen(username) : 0, peer != NULL ? peer : "");
	if (id == NULL) {
		// The subscriptions keep the old identity's stamps; with an ACL
		// the delivery checks then use the old identity too.
		alloc_failed(b, "identity");
		ss_put(b, ss);
		return;
	}
	pthread_mutex_lock(&ss->mtx);
	if (!ss->dead) {
		sess_ident *old = ss->ident;
		if (old != NULL && same_user(old, id->username)) {
			id->super = old->super; // not shared yet: writable
		}
		bool user_changed = old == NULL || !same_user(old, id->username);
		bool peer_changed = old == NULL || strcmp(old->peer, id->peer) != 0;
		if (user_changed || peer_changed) {
			id = ident_set_locked(b, ss, id);
			// The proofs were made for the old identity. The ACL is read
			// under ss->mtx: a reload swaps it before re-stamping this
			// session (under ss->mtx too), so neither misses the other.
			uint32_t   epoch;
			auth_ctx  *a     = auth_get(b, NULL, NULL, &epoch);
			const acl *rules = auth_ctx_acl(a);
			if (acl_enabled(rules)
			    && (user_changed || (peer_changed && acl_uses_peer(rules)))) {
				restamp_locked(b, ss, rules, epoch);
			}
			auth_ctx_release(a);
		}
	}
	pthread_mutex_unlock(&ss->mtx);
	ss_put(b, ss);
	ident_release(id);
}

// Asks the ACL; returns true if allowed. *disconnect says whether a denial
// ends the connection (auth.deny_action). An answer of acl_ask (who->acl:
// a superuser, or the external ACL) stands in for the rules.
static bool acl_allows(nmq_broker *b, const proto_who *who, int action, const char *topic,
    size_t len, bool *disconnect)
{
	if (who->acl == PROTO_ACL_ALLOW) {
		*disconnect = false;
		return true;
	}
	if (who->acl != PROTO_ACL_NONE) {
		auth_ctx_release(auth_get(b, NULL, disconnect, NULL));
		log_info_rl("acl",
		    "client_id=%s peer=%s action=%s topic=%.*s event=denied source=acl_req",
		    who->client_id, who->peer, action == ACL_PUBLISH ? "publish" : "subscribe",
		    (int)(len > 200 ? 200 : len), topic);
		return false;
	}
	if (!b->acl_active) {
		*disconnect = false;
		return true;
	}
	auth_ctx  *a = auth_get(b, NULL, disconnect, NULL);
	acl_client c = { who->client_id, who->username, who->peer };
	int        d = acl_check(auth_ctx_acl(a), &c, action, topic, len);
	auth_ctx_release(a);
	if (d != ACL_ALLOW) {
		log_info_rl("acl", "client_id=%s peer=%s action=%s topic=%.*s event=denied",
		    who->client_id, who->peer, action == ACL_PUBLISH ? "publish" : "subscribe",
		    (int)(len > 200 ? 200 : len), topic);
		return false;
	}
	return true;
}

// proto_app_ops.acl_ask: a superuser may do anything; otherwise, with an
// external ACL, a topic that no file rule matches is left to it (it may
// park the packet). Everything else is decided in route / subscribe.
static int b_acl_ask(
    void *app, const proto_who *who, uint8_t access, const char *topic, size_t len, void *defer_ctx)
{
	nmq_broker *b = app;
	if (who->superuser) {
		return PROTO_ACL_ALLOW;
	}
	if (b->acl_fn == NULL) {
		return PROTO_ACL_NONE;
	}
	if (b->acl_active) {
		auth_ctx  *a = auth_get(b, NULL, NULL, NULL);
		acl_client c = { who->client_id, who->username, who->peer };
		int        m = acl_match(auth_ctx_acl(a), &c,
                    access == PROTO_ACCESS_PUBLISH ? ACL_PUBLISH : ACL_SUBSCRIBE, topic, len);
		auth_ctx_release(a);
		if (m != ACL_NOMATCH) {
			return PROTO_ACL_NONE; // a file rule decides
		}
	}
	return b->acl_fn(b->acl_arg, who, access, topic, len, defer_ctx);
}

// The read-access check of one routed message (only when an ACL is in
// force). The auth context is taken at the first check that needs it.
typedef struct read_check {
	nmq_broker *b;
	const char *topic;
	size_t      len;
	uint32_t    epoch; // the stamp that proves a subscription readable
	auth_ctx   *auth; // held once taken
} read_check;

// Returns true when the ACL lets the client of session s read the topic.
// A refusal is counted and logged (rate-limited). Takes the session's
// stripe lock; allocates nothing unless a placeholder value is long.
static bool may_read(read_check *rc, nmq_session *s)
{
	if (rc->auth == NULL) {
		rc->auth = auth_get(rc->b, NULL, NULL, NULL);
	}
	sess_ident *id = ident_get(rc->b, s);
	int         d  = ACL_DENY; // no identity: the session has ended
	if (id != NULL && id->super) {
		d = ACL_ALLOW;
	} else if (id != NULL) {
		acl_client c = { nmq_session_client_id(s), id->username, id->peer };
		if (rc->b->acl_fn != NULL) {
			// No rule for the topic: the external ACL allowed the
			// subscription, and is not asked at delivery.
			d = acl_match_read(auth_ctx_acl(rc->auth), &c, rc->topic, rc->len);
			d = d == ACL_NOMATCH ? ACL_ALLOW : d;
		} else {
			d = acl_check_read(auth_ctx_acl(rc->auth), &c, rc->topic, rc->len);
		}
	}
	ident_release(id);
	if (d == ACL_ALLOW) {
		return true;
	}
	atomic_fetch_add(&rc->b->acl_deliveries_denied, 1);
	droplog_record(
	    DROP_ACL_DELIVER, nmq_session_client_id(s), rc->topic, rc->len, DROPLOG_NO_QOS, 1);
	log_info_rl("acl", "client_id=%s action=deliver topic=%.*s event=denied",
	    nmq_session_client_id(s), (int)(rc->len > 200 ? 200 : rc->len), rc->topic);
	return false;
}

// Settles the shared picks that come with stand-ins (their pick was not
// proven readable): the first of the pick and its stand-ins that may read
// the topic gets the message, marked proven; every other is marked alt
// (skipped); the refused ones are marked STAMP_REFUSED. When none may, the
// group's copy is not delivered.
static void settle_shared(read_check *rc, topic_match_vec *mv)
{
	for (size_t i = 0; i < mv->n; i++) {
		topic_match *m = &mv->v[i];
		if (!m->shared || m->alt || m->n_alt == 0) {
			continue;
		}
		size_t end    = i + m->n_alt;
		size_t chosen = SIZE_MAX;
		for (size_t c = i; c <= end && c < mv->n; c++) {
			uint32_t st = mv->v[c].opts.stamp;
			if (st == rc->epoch
			    || (st != STAMP_REFUSED && may_read(rc, mv->v[c].sub))) {
				chosen = c;
				break;
			}
			mv->v[c].opts.stamp = STAMP_REFUSED;
		}
		for (size_t c = i; c <= end && c < mv->n; c++) {
			mv->v[c].alt = c != chosen;
		}
		if (chosen != SIZE_MAX) {
			mv->v[chosen].opts.stamp = rc->epoch;
		}
		i = end;
	}
}

// The broker's side of route_deliver(): the read-access gate and the
// queueing of one message.
typedef struct route_ctx {
	nmq_msg    *msg;
	read_check *rc; // NULL without an ACL in force
} route_ctx;

// With an ACL in force (only then is this the gate), a session gets
// nothing unless one of its matching subscriptions is proven readable (its
// stamp is rc->epoch) or the ACL lets it read the topic: the decision
// belongs to the client and the topic, not to the subscription. A
// subscription refused while settling its shared group refuses the
// session.
static bool route_admit(void *arg, const topic_match *v, size_t n)
{
	route_ctx *ctx = arg;
	if (is_sink(v[0].sub)) {
		return true; // a bridge's forward: configured by the operator
	}
	bool proven  = false;
	bool refused = false;
	for (size_t i = 0; i < n; i++) {
		proven  = proven || v[i].opts.stamp == ctx->rc->epoch;
		refused = refused || v[i].opts.stamp == STAMP_REFUSED;
	}
	return !refused && (proven || may_read(ctx->rc, v[0].sub));
}

static void route_queue(void *arg, const route_delivery *d)
{
	route_ctx *ctx = arg;
	if (is_sink(d->sub)) {
		sink_of(d->sub)->deliver(sink_of(d->sub), ctx->msg, d->qos, d->retain);
		return;
	}
	nmq_session_deliver(d->sub, ctx->msg, d->qos, d->retain, d->ids, d->n_ids);
}

static const route_ops route_acl_ops  = { route_admit, route_queue };
static const route_ops route_open_ops = { NULL, route_queue };

// Logs a failed store or clear of a retained message (the store has
// released the message).
static void retain_log(const nmq_msg *msg, nmq_err e)
{
	if (e != NMQ_OK) {
		log_warn_rl("broker", "topic=%.*s event=retained_not_stored error=%s",
		    (int)(msg->topic_len > 200 ? 200 : msg->topic_len), msg->topic,
		    nmq_strerror(e));
	}
}

// Routes one message published by from (a session, a tagged sink, or
// NULL); see proto.h.
static int route_msg(nmq_broker *b, const void *from, const proto_who *who, nmq_msg *msg)
{
	bool disconnect;
	if (who != NULL
	    && !acl_allows(b, who, ACL_PUBLISH, msg->topic, msg->topic_len, &disconnect)) {
		proto_metrics *m = proto_metrics_get(b->proto);
		atomic_fetch_add(&m->msgs_dropped, 1);
		atomic_fetch_add(&m->drop_acl, 1);
		droplog_record(
		    DROP_ACL_PUBLISH, who->client_id, msg->topic, msg->topic_len, msg->qos, 1);
		return MQTT_RC_NOT_AUTHORIZED | (disconnect ? PROTO_RC_DISCONNECT : 0);
	}
	if (who != NULL && obs_wants(b, BEV_MESSAGE_PUBLISH)) {
		broker_event ev;
		memset(&ev, 0, sizeof(ev));
		ev.type      = BEV_MESSAGE_PUBLISH;
		ev.client_id = who->client_id;
		ev.username  = who->username;
		ev.topic     = msg->topic;
		ev.topic_len = msg->topic_len;
		ev.msg       = msg;
		ev.qos       = msg->qos;
		b->obs_fn(b->obs_arg, &ev);
	}
	if (msg->retain) {
		if (msg->payload_len == 0) {
			retain_log(msg, retain_set(b->retained, msg->topic, msg->topic_len, NULL));
			persist_retain(b, msg->topic, NULL);
		} else if (b->max_message_memory > 0 && nmq_mem_in_use() > b->max_message_memory) {
			// mqtt.max_message_memory: the previous retained message, if
			// any, stays; this one is routed but not kept.
			proto_metrics *m = proto_metrics_get(b->proto);
			atomic_fetch_add(&m->msgs_dropped, 1);
			atomic_fetch_add(&m->drop_memory, 1);
			droplog_record(DROP_MEMORY, who != NULL ? who->client_id : NULL, msg->topic,
			    msg->topic_len, msg->qos, 1);
			log_warn_rl("broker",
			    "topic=%.*s reason=max_message_memory action=retained_not_stored",
			    (int)(msg->topic_len > 200 ? 200 : msg->topic_len), msg->topic);
		} else {
			nmq_msg_hold(msg);
			retain_log(msg, retain_set(b->retained, msg->topic, msg->topic_len, msg));
			persist_retain(b, msg->topic, msg);
		}
	}
	thread_state *ts = thread_state_get();
	if (ts == NULL) {
		alloc_failed(b, "route_state");
		return MQTT_RC_UNSPECIFIED;
	}
	topic_match_vec *mv = &ts->mv;
	// With an ACL in force, each delivery needs read access to the topic;
	// subscriptions stamped with the current epoch were proven readable in
	// full when made (or at the last reload), and need no check.
	read_check  rcs = { b, msg->topic, msg->topic_len, 0, NULL };
	read_check *rc  = NULL;
	if (b->acl_active) {
		rcs.epoch = b->acl_epoch;
		rc        = &rcs;
	}
	nmq_err e = topic_tree_match_stamped(b->tree, msg->topic, msg->topic_len, mv, rcs.epoch);
	if (e != NMQ_OK) {
		// Delivered to the matches found before memory ran out.
		log_warn_rl("broker", "topic=%.*s event=match_incomplete error=%s",
		    (int)(msg->topic_len > 200 ? 200 : msg->topic_len), msg->topic,
		    nmq_strerror(e));
	}
	if (rc != NULL) {
		settle_shared(rc, mv);
	}
	route_ctx   ctx = { msg, rc };
	route_stats st;
	route_deliver(mv, from, msg->qos, msg->retain,
	    rc != NULL ? &route_acl_ops : &route_open_ops, &ctx, &st);
	if (st.ids_dropped > 0) {
		log_warn_rl("broker", "topic=%.*s dropped_subscription_ids=%zu reason=over_%d",
		    (int)(msg->topic_len > 200 ? 200 : msg->topic_len), msg->topic, st.ids_dropped,
		    ROUTE_MAX_IDS);
	}
	topic_match_vec_clear(mv, &tree_ops);
	auth_ctx_release(rcs.auth);
	return 0;
}

static int b_route(void *app, nmq_session *from, const proto_who *who, nmq_msg *msg)
{
	return route_msg(app, from, who, msg);
}

nmq_err broker_sink_subscribe(
    nmq_broker *b, broker_sink *s, const char *filter, uint8_t qos, bool no_local)
{
	size_t len = strlen(filter);
	if (mqtt_share_split((const uint8_t *)filter, len, NULL) != MQTT_SHARE_NONE) {
		return NMQ_EINVAL;
	}
	topic_sub_opts o;
	memset(&o, 0, sizeof(o));
	o.qos      = qos;
	o.no_local = no_local;
	return topic_tree_insert(b->tree, filter, len, sink_key(s), &o, NULL);
}

nmq_err broker_sink_unsubscribe(nmq_broker *b, broker_sink *s, const char *filter)
{
	return topic_tree_remove(b->tree, filter, strlen(filter), sink_key(s));
}

int broker_sink_publish(nmq_broker *b, broker_sink *s, const proto_who *who, nmq_msg *msg)
{
	return route_msg(b, sink_key(s), who, msg);
}

// ------------------------------------------------------------ filter count

// The filter a subscription counts as ("$share/<g>/" stripped) in *k, *kl;
// false when it is not counted (a '$' topic, a malformed share).
static bool fc_key(const char *filter, size_t len, const char **k, size_t *kl)
{
	mqtt_share sh;
	if (mqtt_share_split((const uint8_t *)filter, len, &sh) == MQTT_SHARE_MALFORMED) {
		return false;
	}
	*k  = (const char *)sh.filter;
	*kl = sh.flen;
	return *kl > 0 && (*k)[0] != '$';
}

static size_t fc_hash(const char *f, size_t len)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < len; i++) {
		h = (h ^ (uint8_t)f[i]) * 1099511628211ull;
	}
	return (size_t)(h ^ (h >> 29));
}

static int fc_max(const fcount *c)
{
	return c->n[2] > 0 ? 2 : c->n[1] > 0 ? 1 : c->n[0] > 0 ? 0 : -1;
}

// Doubles the table (watch_mtx held); on failure it stays as it is.
static void fc_grow_locked(nmq_broker *b)
{
	size_t   ncap = b->wcap ? b->wcap * 2 : 64;
	fcount **nt   = calloc(ncap, sizeof(*nt));
	if (nt == NULL) {
		return;
	}
	for (size_t i = 0; i < b->wcap; i++) {
		for (fcount *c = b->wtab[i], *nx; c != NULL; c = nx) {
			nx       = c->next;
			size_t h = fc_hash(c->f, c->len) & (ncap - 1);
			c->next  = nt[h];
			nt[h]    = c;
		}
	}
	free(b->wtab);
	b->wtab = nt;
	b->wcap = ncap;
}

// One local subscription of filter changes from QoS old_qos to new_qos
// (-1: none); tells the watcher when the filter's highest QoS changes
// (appears, goes). The subscriber's sess_subs.mtx is held.
static void fc_change(nmq_broker *b, const char *filter, size_t len, int old_qos, int new_qos)
{
	const char *k;
	size_t      kl;
	if (old_qos == new_qos || !fc_key(filter, len, &k, &kl)) {
		return;
	}
	pthread_mutex_lock(&b->watch_mtx);
	if (b->wn >= b->wcap) {
		fc_grow_locked(b);
	}
	fcount **pp = NULL;
	fcount  *c  = NULL;
	if (b->wcap > 0) {
		pp = &b->wtab[fc_hash(k, kl) & (b->wcap - 1)];
		while (*pp != NULL && ((*pp)->len != kl || memcmp((*pp)->f, k, kl) != 0)) {
			pp = &(*pp)->next;
		}
		c = *pp;
	}
	if (c == NULL && new_qos >= 0 && pp != NULL) {
		c = calloc(1, sizeof(*c) + kl + 1);
		if (c != NULL) {
			c->len = kl;
			memcpy(c->f, k, kl);
			*pp = c;
			b->wn++;
		}
	}
	if (c == NULL) {
		if (new_qos >= 0) {
			alloc_failed(b, "filter_count");
		}
		pthread_mutex_unlock(&b->watch_mtx);
		return;
	}
	int before = fc_max(c);
	if (old_qos >= 0 && old_qos <= 2 && c->n[old_qos] > 0) {
		c->n[old_qos]--;
	}
	if (new_qos >= 0 && new_qos <= 2) {
		c->n[new_qos]++;
	}
	int after = fc_max(c);
	if (after < 0) {
		*pp = c->next;
		free(c);
		b->wn--;
	}
	if (after != before && b->watch_fn != NULL) {
		b->watch_fn(b->watch_arg);
	}
	pthread_mutex_unlock(&b->watch_mtx);
}

// Puts a session's filters in the count once counting is on (ss->mtx
// held).
static void fc_join_locked(nmq_broker *b, sess_subs *ss)
{
	if (ss->counted || ss->dead || !atomic_load(&b->watch_on)) {
		return;
	}
	ss->counted = true;
	for (size_t i = 0; i < ss->n; i++) {
		fc_change(b, ss->v[i].filter, ss->v[i].len, -1, ss->v[i].opts.qos);
	}
}

void broker_watch_filters(nmq_broker *b, broker_filters_fn fn, void *arg)
{
	pthread_mutex_lock(&b->watch_mtx);
	b->watch_fn  = fn;
	b->watch_arg = arg;
	bool was_on  = atomic_exchange(&b->watch_on, fn != NULL || b->watch_on);
	pthread_mutex_unlock(&b->watch_mtx);
	if (fn == NULL || was_on) {
		return;
	}
	// The first watcher: every session's filters join the count, one
	// session at a time (as acl_swapped walks them); a session that
	// subscribes meanwhile joins by itself.
	pthread_mutex_lock(&b->reg_mtx);
	sess_subs *ss = b->reg_head;
	if (ss != NULL) {
		ss->refs++;
	}
	pthread_mutex_unlock(&b->reg_mtx);
	while (ss != NULL) {
		pthread_mutex_lock(&ss->mtx);
		fc_join_locked(b, ss);
		pthread_mutex_unlock(&ss->mtx);
		pthread_mutex_lock(&b->reg_mtx);
		sess_subs *next = ss->next;
		if (next != NULL) {
			next->refs++;
		}
		pthread_mutex_unlock(&b->reg_mtx);
		ss_put(b, ss);
		ss = next;
	}
}

size_t broker_filters_each(
    nmq_broker *b, void (*cb)(void *arg, const char *filter, size_t len, uint8_t qos), void *arg)
{
	size_t n = 0;
	pthread_mutex_lock(&b->watch_mtx);
	for (size_t i = 0; i < b->wcap; i++) {
		for (const fcount *c = b->wtab[i]; c != NULL; c = c->next) {
			cb(arg, c->f, c->len, (uint8_t)fc_max(c));
			n++;
		}
	}
	pthread_mutex_unlock(&b->watch_mtx);
	return n;
}

// Adds or replaces one subscription, stamped when the ACL lets the client
// read every topic of the filter.
static int b_subscribe_inner(nmq_broker *b, nmq_session *s, const proto_who *who,
    const char *filter, size_t len, const proto_sub_opts *opts, bool *existed);

// Reports the SUBSCRIBE and its grant to the observer around the work.
static int b_subscribe(void *app, nmq_session *s, const proto_who *who, const char *filter,
    size_t len, const proto_sub_opts *opts, bool *existed)
{
	nmq_broker *b = app;
	if (obs_wants(b, BEV_CLIENT_SUBSCRIBE)) {
		obs_emit(b, BEV_CLIENT_SUBSCRIBE, who->client_id, who->username, filter, len,
		    opts->qos, 0);
	}
	int rv = b_subscribe_inner(b, s, who, filter, len, opts, existed);
	if (rv < 0x80 && obs_wants(b, BEV_SESSION_SUBSCRIBED)) {
		obs_emit(b, BEV_SESSION_SUBSCRIBED, who->client_id, who->username, filter, len,
		    (uint8_t)rv, 0);
	}
	return rv;
}

static int b_subscribe_inner(nmq_broker *b, nmq_session *s, const proto_who *who,
    const char *filter, size_t len, const proto_sub_opts *opts, bool *existed)
{
	bool disconnect;
	if (!acl_allows(b, who, ACL_SUBSCRIBE, filter, len, &disconnect)) {
		droplog_record(DENY_ACL_SUBSCRIBE, who->client_id, filter, len, opts->qos, 1);
		return MQTT_RC_NOT_AUTHORIZED | (disconnect ? PROTO_RC_DISCONNECT : 0);
	}
	int        rv    = opts->qos;
	uint32_t   epoch = 0;
	auth_ctx  *a     = NULL;
	sess_subs *ss    = ss_get(b, s, true);
	if (ss == NULL) {
		return MQTT_RC_UNSPECIFIED;
	}
	pthread_mutex_lock(&ss->mtx);
	if (ss->dead) {
		rv = MQTT_RC_UNSPECIFIED;
		goto out;
	}
	fc_join_locked(b, ss);
	if (ss->ident == NULL
	    || (ss->ident->super != who->superuser
	        && ident_is(ss->ident, who->username, who->peer))) {
		// The first SUBSCRIBE, or a superuser mark that changed.
		sess_ident *id = ident_alloc(who->client_id, who->username,
		    who->username != NULL ? strlen(who->username) : 0, who->peer);
		if (id == NULL) {
			alloc_failed(b, "identity");
			rv = MQTT_RC_UNSPECIFIED;
			goto out;
		}
		id->super = who->superuser;
		ident_release(ident_set_locked(b, ss, id));
	}
	// The proof holds for the session's identity; a SUBSCRIBE from another
	// one (a connection being taken over) is checked at each delivery. The
	// ACL is read under ss->mtx: see ident_adopt().
	uint32_t stamp = 0;
	if (b->acl_active) {
		a = auth_get(b, NULL, NULL, &epoch);
	}
	const acl *rules = auth_ctx_acl(a);
	if (acl_enabled(rules) && ident_is(ss->ident, who->username, who->peer)) {
		acl_client c = { who->client_id, who->username, who->peer };
		if (ss->ident->super || !acl_filter_may_deny(rules, &c, filter, len)) {
			stamp = epoch;
		}
	}
	topic_sub_opts to = tree_opts(opts, stamp);
	size_t         i;
	for (i = 0; i < ss->n; i++) {
		if (ss->v[i].len == len && memcmp(ss->v[i].filter, filter, len) == 0) {
			break;
		}
	}
	uint32_t max = b->max_subscriptions;
	if (i == ss->n && max > 0 && ss->n >= max) {
		// mqtt.max_subscriptions: a new filter beyond the limit.
		atomic_fetch_add(&proto_metrics_get(b->proto)->refused_subscriptions, 1);
		droplog_record(DENY_MAX_SUBSCRIPTIONS, who->client_id, filter, len, opts->qos, 1);
		rv = MQTT_RC_QUOTA_EXCEEDED;
		goto out;
	}
	if (i == ss->n) {
		// Room for the record first, so that a failure leaves no trace.
		if (ss->n == ss->cap) {
			size_t   ncap = ss->cap ? ss->cap * 2 : 4;
			sub_rec *nv   = realloc(ss->v, ncap * sizeof(*nv));
			if (nv == NULL) {
				alloc_failed(b, "subscriptions");
				rv = MQTT_RC_UNSPECIFIED;
				goto out;
			}
			ss->v   = nv;
			ss->cap = ncap;
		}
		ss->v[i].filter = strndup(filter, len);
		if (ss->v[i].filter == NULL) {
			alloc_failed(b, "subscriptions");
			rv = MQTT_RC_UNSPECIFIED;
			goto out;
		}
		ss->v[i].len = len;
	}
	// A persistent session's subscription is written first: if the store
	// refuses it (its queue is full, decisions/0021), the client is told
	// it failed and nothing changes (a SUBACK granting it would be a
	// promise a crash breaks).
	nmq_err e = persist_sub(b, s, filter, len, opts, true);
	if (e != NMQ_OK) {
		if (i == ss->n) {
			free(ss->v[i].filter);
		}
		rv = e == NMQ_ELIMIT ? MQTT_RC_QUOTA_EXCEEDED : MQTT_RC_UNSPECIFIED;
		goto out;
	}
	e = topic_tree_insert(b->tree, filter, len, s, &to, existed);
	if (e != NMQ_OK) {
		// What was written is taken back (the old options, or no row).
		(void)persist_sub(b, s, filter, len, i == ss->n ? NULL : &ss->v[i].opts, i < ss->n);
		if (i == ss->n) {
			free(ss->v[i].filter);
		}
		if (e == NMQ_EINVAL) {
			rv = MQTT_RC_TOPIC_FILTER_INVALID;
		} else {
			log_warn_rl("broker",
			    "client_id=%s filter=%.*s event=subscribe_failed error=%s",
			    who->client_id, (int)(len > 200 ? 200 : len), filter, nmq_strerror(e));
			rv = MQTT_RC_UNSPECIFIED;
		}
		goto out;
	}
	if (ss->counted) {
		fc_change(b, filter, len, i == ss->n ? -1 : ss->v[i].opts.qos, opts->qos);
	}
	ss->v[i].opts  = *opts;
	ss->v[i].stamp = stamp;
	if (i == ss->n) {
		ss->n++;
	}
out:
	pthread_mutex_unlock(&ss->mtx);
	ss_put(b, ss);
	auth_ctx_release(a);
	return rv;
}

typedef struct retained_ctx {
	nmq_broker           *b;
	nmq_session          *s;
	const proto_sub_opts *opts;
	uint64_t              now;
	read_check           *rc; // NULL: every message may be read
} retained_ctx;

// Delivers one retained message to a new subscriber (retain flag set).
static void retained_cb(void *arg, void *m)
{
	retained_ctx *ctx = arg;
	nmq_msg      *msg = m;
	if (ctx->rc != NULL) {
		ctx->rc->topic = msg->topic;
		ctx->rc->len   = msg->topic_len;
		if (!may_read(ctx->rc, ctx->s)) {
			nmq_msg_release(msg);
			return;
		}
	}
	if (msg->expiry_at_ms == 0 || nmq_msg_remaining(msg, ctx->now) > 0) {
		uint8_t  q  = ctx->opts->qos < msg->qos ? ctx->opts->qos : msg->qos;
		uint32_t id = ctx->opts->sub_id;
		nmq_session_deliver(ctx->s, msg, q, true, &id, id != 0 ? 1 : 0);
	}
	nmq_msg_release(msg);
}

// After SUBACK: retained messages per Retain Handling [MQTT-3.3.1-9..11];
// none for shared subscriptions [MQTT-4.8.2-?]. With an ACL in force, each
// one needs read access to its topic, unless the filter was proven
// readable in full.
static void b_subscribed(void *app, nmq_session *s, const char *filter, size_t len,
    const proto_sub_opts *opts, bool existed)
{
	nmq_broker *b = app;
	if (mqtt_share_split((const uint8_t *)filter, len, NULL) != MQTT_SHARE_NONE) {
		return;
	}
	if (opts->retain_handling == 2 || (opts->retain_handling == 1 && existed)) {
		return;
	}
	retained_ctx ctx = { b, s, opts, nmq_clock_ms(), NULL };
	read_check   rcs = { b, NULL, 0, 0, NULL };
	if (b->acl_active) {
		rcs.auth       = auth_get(b, NULL, NULL, &rcs.epoch);
		sess_ident *id = ident_get(b, s);
		acl_client  c  = { nmq_session_client_id(s), NULL, NULL };
		if (id != NULL) {
			c.username = id->username;
			c.peer     = id->peer;
		}
		if (id == NULL || acl_filter_may_deny(auth_ctx_acl(rcs.auth), &c, filter, len)) {
			ctx.rc = &rcs;
		}
		ident_release(id);
	}
	nmq_err e = retain_match(b->retained, filter, len, retained_cb, &ctx, NULL);
	if (e != NMQ_OK) {
		log_warn_rl("broker", "client_id=%s filter=%.*s event=retained_not_sent error=%s",
		    nmq_session_client_id(s), (int)(len > 200 ? 200 : len), filter,
		    nmq_strerror(e));
	}
	auth_ctx_release(rcs.auth);
}

// Removes a subscription the session's record holds; the tree must have
// it, so a failure is logged as an inconsistency.
static void tree_remove(nmq_broker *b, const char *filter, size_t len, nmq_session *s)
{
	nmq_err e = topic_tree_remove(b->tree, filter, len, s);
	if (e != NMQ_OK) {
		log_warn_rl("broker",
		    "client_id=%s filter=%.*s event=unsubscribe_inconsistent error=%s",
		    nmq_session_client_id(s), (int)(len > 200 ? 200 : len), filter,
		    nmq_strerror(e));
	}
}

// Removes one subscription; 0x11 if there was none.
static uint8_t unsubscribe(nmq_broker *b, nmq_session *s, const char *filter, size_t len);

// Reports UNSUBSCRIBE and the removal to the observer around the work.
static uint8_t b_unsubscribe(void *app, nmq_session *s, const char *filter, size_t len)
{
	nmq_broker *b  = app;
	uint8_t     rc = unsubscribe(b, s, filter, len);
	if (b->obs_mask & ((1u << BEV_CLIENT_UNSUBSCRIBE) | (1u << BEV_SESSION_UNSUBSCRIBED))) {
		sess_ident *id = ident_get(b, s);
		const char *u  = id != NULL ? id->username : NULL;
		if (obs_wants(b, BEV_CLIENT_UNSUBSCRIBE)) {
			obs_emit(b, BEV_CLIENT_UNSUBSCRIBE, nmq_session_client_id(s), u, filter,
			    len, 0, 0);
		}
		if (rc == 0 && obs_wants(b, BEV_SESSION_UNSUBSCRIBED)) {
			obs_emit(b, BEV_SESSION_UNSUBSCRIBED, nmq_session_client_id(s), u, filter,
			    len, 0, 0);
		}
		if (id != NULL) {
			ident_release(id);
		}
	}
	return rc;
}

static uint8_t unsubscribe(nmq_broker *b, nmq_session *s, const char *filter, size_t len)
{
	sess_subs *ss = ss_get(b, s, false);
	if (ss == NULL) {
		return MQTT_RC_NO_SUBSCRIPTION_EXISTED;
	}
	uint8_t rc = MQTT_RC_NO_SUBSCRIPTION_EXISTED;
	pthread_mutex_lock(&ss->mtx);
	for (size_t i = 0; i < ss->n; i++) {
		if (ss->v[i].len == len && memcmp(ss->v[i].filter, filter, len) == 0) {
			// The delete is queued first: refused, the subscription
			// stays and the client is told the UNSUBSCRIBE failed.
			if (persist_sub(b, s, ss->v[i].filter, ss->v[i].len, NULL, false)
			    != NMQ_OK) {
				rc = MQTT_RC_UNSPECIFIED;
				break;
			}
			tree_remove(b, ss->v[i].filter, ss->v[i].len, s);
			if (ss->counted) {
				fc_change(b, ss->v[i].filter, ss->v[i].len, ss->v[i].opts.qos, -1);
			}
			free(ss->v[i].filter);
			ss->v[i] = ss->v[--ss->n];
			rc       = 0;
			break;
		}
	}
	pthread_mutex_unlock(&ss->mtx);
	ss_put(b, ss);
	return rc;
}

static void session_end(nmq_broker *b, nmq_session *s);

// Reports the end of a session to the observer, then drops its
// subscriptions.
static void b_session_end(void *app, nmq_session *s)
{
	nmq_broker *b = app;
	if (obs_wants(b, BEV_SESSION_TERMINATED)) {
		sess_ident *id = ident_get(b, s);
		// A session that never subscribed has no identity: the user of
		// the CONNECT that created it then.
		obs_emit(b, BEV_SESSION_TERMINATED, nmq_session_client_id(s),
		    id != NULL ? id->username : nmq_session_username(s), NULL, 0, 0, 0);
		if (id != NULL) {
			ident_release(id);
		}
	}
	session_end(b, s);
}

// Drops every subscription of an ending session (see b_session_end).
static void session_end(nmq_broker *b, nmq_session *s)
{
	pthread_mutex_t *l    = slot_lock(b, s);
	void           **slot = nmq_session_app_data(s);
	pthread_mutex_lock(l);
	sess_subs *ss = *slot;
	*slot         = NULL;
	pthread_mutex_unlock(l);
	if (ss == NULL) {
		return;
	}
	pthread_mutex_lock(&ss->mtx);
	ss->dead = true;
	for (size_t i = 0; i < ss->n; i++) {
		tree_remove(b, ss->v[i].filter, ss->v[i].len, s);
		if (ss->counted) {
			fc_change(b, ss->v[i].filter, ss->v[i].len, ss->v[i].opts.qos, -1);
		}
		free(ss->v[i].filter);
	}
	ss->n = 0;
	pthread_mutex_unlock(&ss->mtx);
	ss_put(b, ss); // the slot's reference
}

// Appends s to buf as a JSON string with escapes; returns the new length.
static size_t json_str(char *buf, size_t cap, size_t n, const char *s)
{
	if (n < cap) {
		buf[n] = '"';
	}
	n++;
	for (; *s != '\0'; s++) {
		unsigned char ch = (unsigned char)*s;
		char          esc[8];
		const char   *e = NULL;
		if (ch == '"') {
			e = "\\\"";
		} else if (ch == '\\') {
			e = "\\\\";
		} else if (ch < 0x20) {
			snprintf(esc, sizeof(esc), "\\u%04x", ch);
			e = esc;
		}
		if (e != NULL) {
			for (; *e != '\0'; e++, n++) {
				if (n < cap) {
					buf[n] = *e;
				}
			}
		} else {
			if (n < cap) {
				buf[n] = (char)ch;
			}
			n++;
		}
	}
	if (n < cap) {
		buf[n] = '"';
	}
	return n + 1;
}

// Publishes $SYS/brokers/client_status/<clientid> (docs/compatibility.md §9).
static void b_client_status(void *app, nmq_session *s, bool online, uint8_t reason,
    const char *peer, const char *username, uint16_t keepalive, bool clean_start)
{
	nmq_broker    *b   = app;
	const char    *cid = nmq_session_client_id(s);
	struct timeval tv;
	if (online) {
		ident_adopt(b, s, username, peer);
	}
	broker_event_type et = online ? BEV_CLIENT_CONNECTED : BEV_CLIENT_DISCONNECTED;
	if (obs_wants(b, et)) {
		broker_event ev;
		memset(&ev, 0, sizeof(ev));
		ev.type      = et;
		ev.client_id = cid;
		ev.username  = username;
		ev.proto_ver = nmq_session_proto(s);
		ev.keepalive = keepalive;
		ev.rc        = reason;
		b->obs_fn(b->obs_arg, &ev);
	}
	gettimeofday(&tv, NULL);
	unsigned long long ts
	    = (unsigned long long)tv.tv_sec * 1000 + (unsigned long long)tv.tv_usec / 1000;
	char peer_host[80];
	snprintf(peer_host, sizeof(peer_host), "%s", peer);
	char *colon = strrchr(peer_host, ':');
	if (colon != NULL) {
		*colon = '\0';
	}
	char *host = peer_host;
	if (host[0] == '[') {
		host++;
		char *rb = strchr(host, ']');
		if (rb != NULL) {
			*rb = '\0';
		}
	}
	// Two passes: measure, then write.
	char  *buf = NULL;
	size_t cap = 0;
	for (int pass = 0; pass < 2; pass++) {
		size_t n = 0;
		char   tmp[128];
#define PUT(str)                                                                                   \
	do {                                                                                       \
		const char *p_ = (str);                                                            \
		for (; *p_ != '\0'; p_++, n++)                                                     \
			if (n < cap)                                                               \
				buf[n] = *p_;                                                      \
	} while (0)
		if (online) {
			PUT("{\"status\":\"online\",\"username\":");
			n = json_str(buf, cap, n, username != NULL ? username : "");
			PUT(",\"ts\":");
			snprintf(tmp, sizeof(tmp), "%llu", ts);
			PUT(tmp);
			PUT(",\"proto_name\":\"MQTT\",\"keepalive\":");
			snprintf(tmp, sizeof(tmp), "%u", keepalive);
			PUT(tmp);
			snprintf(tmp, sizeof(tmp),
			    ",\"return_code\":\"%x\",\"proto_ver\":%u,\"client_id\":", reason,
			    nmq_session_proto(s));
			PUT(tmp);
			n = json_str(buf, cap, n, cid);
			snprintf(
			    tmp, sizeof(tmp), ",\"clean_start\":%d,\"IPv4\":", clean_start ? 1 : 0);
			PUT(tmp);
			n = json_str(buf, cap, n, host);
			PUT("}");
		} else {
			PUT("{\"status\":\"offline\",\"username\":");
			n = json_str(buf, cap, n, username != NULL ? username : "");
			PUT(",\"ts\":");
			snprintf(tmp, sizeof(tmp), "%llu", ts);
			PUT(tmp);
			snprintf(
			    tmp, sizeof(tmp), ",\"reason_code\":\"%x\",\"client_id\":", reason);
			PUT(tmp);
			n = json_str(buf, cap, n, cid);
			PUT(",\"IPv4\":");
			n = json_str(buf, cap, n, host);
			PUT("}");
		}
#undef PUT
		if (pass == 0) {
			cap = n;
			buf = malloc(cap + 1);
			if (buf == NULL) {
				alloc_failed(b, "client_status");
				return;
			}
		}
	}
	char topic[300];
	int  tl = snprintf(topic, sizeof(topic), "$SYS/brokers/client_status/%s", cid);
	if (tl <= 0 || (size_t)tl >= sizeof(topic)) {
		log_info_rl("broker",
		    "client_id=%.64s... event=client_status_not_published "
		    "reason=client_id_too_long",
		    cid);
		free(buf);
		return;
	}
	nmq_msg *m = nmq_msg_alloc(topic, (size_t)tl, 0, cap);
	if (m != NULL) {
		memcpy(m->payload, buf, cap);
		m->qos = 0;
		b_route(b, NULL, NULL, m);
		nmq_msg_release(m);
	} else {
		alloc_failed(b, "client_status");
	}
	free(buf);
}

// A message sent to s or acknowledged by its client (proto.h): reported to
// the observer. Session and connection locks are held: only the observer's
// queue is touched.
static void b_message_event(
    void *app, nmq_session *s, const char *username, const nmq_msg *msg, uint8_t qos, bool acked)
{
	nmq_broker       *b = app;
	broker_event_type t = acked ? BEV_MESSAGE_ACKED : BEV_MESSAGE_DELIVERED;
	if (obs_wants(b, t)) {
		broker_event ev;
		memset(&ev, 0, sizeof(ev));
		ev.type      = t;
		ev.client_id = nmq_session_client_id(s);
		ev.username  = username;
		ev.topic     = msg->topic;
		ev.topic_len = msg->topic_len;
		ev.msg       = (nmq_msg *)msg;
		ev.qos       = qos;
		b->obs_fn(b->obs_arg, &ev);
	}
}

void broker_publish(nmq_broker *b, nmq_msg *msg)
{
	(void)b_route(b, NULL, NULL, msg);
}

size_t broker_session_subs(nmq_broker *b, nmq_session *s, broker_sub_info **out, nmq_err *err)
{
	*out          = NULL;
	*err          = NMQ_OK;
	sess_subs *ss = ss_get(b, s, false);
	if (ss == NULL) {
		return 0;
	}
	size_t n = 0;
	pthread_mutex_lock(&ss->mtx);
	broker_sub_info *v = NULL;
	if (!ss->dead && ss->n > 0) {
		v = calloc(ss->n, sizeof(*v));
		for (size_t i = 0; v != NULL && i < ss->n; i++) {
			v[i].filter = strndup(ss->v[i].filter, ss->v[i].len);
			v[i].qos    = ss->v[i].opts.qos;
			if (v[i].filter == NULL) {
				broker_subs_free(v, i);
				v = NULL;
				break;
			}
			n++;
		}
		if (v == NULL) {
			n    = 0;
			*err = NMQ_ENOMEM;
		}
	}
	pthread_mutex_unlock(&ss->mtx);
	ss_put(b, ss);
	*out = v;
	return n;
}

void broker_subs_free(broker_sub_info *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(v[i].filter);
	}
	free(v);
}

int broker_publish_as(nmq_broker *b, const proto_who *who, nmq_msg *msg)
{
	proto_count_received(b->proto);
	return b_route(b, NULL, who, msg) & 0xff;
}

int broker_subscribe(
    nmq_broker *b, nmq_session *s, const proto_who *who, const char *filter, uint8_t qos)
{
	proto_sub_opts opts = { .qos = qos };
	bool           existed;
	size_t         len = strlen(filter);
	int            rv  = b_subscribe(b, s, who, filter, len, &opts, &existed) & 0xff;
	if (rv < 0x80) {
		b_subscribed(b, s, filter, len, &opts, existed);
	}
	return rv;
}

const char *broker_subscriber_client_id(void *sub)
{
	return is_sink(sub) ? NULL : nmq_session_client_id(sub);
}

bool broker_allow_anonymous(nmq_broker *b)
{
	bool anon;
	auth_ctx_release(auth_get(b, &anon, NULL, NULL));
	return anon;
}

void broker_set_allow_anonymous(nmq_broker *b, bool allow)
{
	pthread_mutex_lock(&b->auth_mtx);
	b->allow_anonymous = allow;
	pthread_mutex_unlock(&b->auth_mtx);
}

int broker_unsubscribe(nmq_broker *b, nmq_session *s, const char *filter)
{
	return b_unsubscribe(b, s, filter, strlen(filter));
}

const proto_app_ops broker_proto_ops = {
	.authenticate  = b_authenticate,
	.auth_answered = b_auth_answered,
	.acl_ask       = b_acl_ask,
	.route         = b_route,
	.subscribe     = b_subscribe,
	.subscribed    = b_subscribed,
	.unsubscribe   = b_unsubscribe,
	.session_end   = b_session_end,
	.client_status = b_client_status,
	.message_event = b_message_event,
};
