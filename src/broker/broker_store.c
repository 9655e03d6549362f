// The broker on the durable store; see broker_store.h.
#ifdef NMQ_HAVE_STORE

#include "src/broker/broker_store.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nng/codec/mqtt_codec.h"
#include "nng/core/bridge_id.h"
#include "nng/core/log.h"
#include "src/store/store_proto.h"

static atomic_ullong evictions;

// Client id -> restored session, while loading (open addressing).
typedef struct restore_ctx {
	nmq_broker   *b;
	nmq_proto    *p;
	nmq_session **v;
	size_t        cap;
	size_t        len;
	uint64_t      now_wall;
	size_t        n_sessions, n_subs, n_msgs, n_rel, n_retained, n_failed;
	// Wills due at startup (held), each with what takes it out of the
	// store in the group of its own writes.
	struct restore_will {
		nmq_msg     *msg;
		nmq_session *s; // held: a restored session (its record rewritten)
		char        *cid; // or an expired session (its record deleted)
		const char  *why; // for the log (a string literal)
	} * wills;
	size_t  n_wills, cap_wills;
	nmq_err err;
} restore_ctx;

static uint64_t hash_str(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	while (*s != '\0') {
		h = (h ^ (uint8_t)*s++) * 1099511628211ull;
	}
	return h;
}

static bool ctx_add(restore_ctx *c, nmq_session *s)
{
	if ((c->len + 1) * 2 > c->cap) {
		size_t        ncap = c->cap ? c->cap * 2 : 64;
		nmq_session **nv   = calloc(ncap, sizeof(*nv));
		if (nv == NULL) {
			return false;
		}
		for (size_t i = 0; i < c->cap; i++) {
			if (c->v[i] != NULL) {
				size_t j = hash_str(nmq_session_client_id(c->v[i])) & (ncap - 1);
				while (nv[j] != NULL) {
					j = (j + 1) & (ncap - 1);
				}
				nv[j] = c->v[i];
			}
		}
		free(c->v);
		c->v   = nv;
		c->cap = ncap;
	}
	size_t j = hash_str(nmq_session_client_id(s)) & (c->cap - 1);
	while (c->v[j] != NULL) {
		j = (j + 1) & (c->cap - 1);
	}
	c->v[j] = s;
	c->len++;
	return true;
}

static nmq_session *ctx_find(restore_ctx *c, const char *cid)
{
	if (c->cap == 0) {
		return NULL;
	}
	size_t j = hash_str(cid) & (c->cap - 1);
	while (c->v[j] != NULL) {
		if (strcmp(nmq_session_client_id(c->v[j]), cid) == 0) {
			return c->v[j];
		}
		j = (j + 1) & (c->cap - 1);
	}
	return NULL;
}

static void ctx_will_add(
    restore_ctx *c, const char *client_id, nmq_session *s, nmq_msg *will, const char *why);

static void load_session(void *arg, const store_session *rec)
{
	restore_ctx *c = arg;
	// A will whose delay passed while the broker was down (counted from
	// when the session went offline) is due now: published with those of
	// the expired sessions once everything is restored, not by the
	// session's timer, which could fire before the subscriptions are back.
	uint64_t gone         = rec->offline_wall_ms != 0 && c->now_wall > rec->offline_wall_ms
	            ? c->now_wall - rec->offline_wall_ms
	            : 0;
	bool     due          = rec->will_msg != NULL && gone >= (uint64_t)rec->will_delay_s * 1000;
	proto_store_session r = {
		.client_id       = rec->client_id,
		.username        = rec->username,
		.expiry_s        = rec->expiry_s,
		.proto_ver       = rec->proto_ver,
		.offline_wall_ms = rec->offline_wall_ms,
		.will            = due ? NULL : rec->will_msg,
		.will_delay_s    = rec->will_delay_s,
		.queue_max_seq   = rec->queue_max_seq,
	};
	nmq_session *s = proto_session_restore(c->p, &r, c->now_wall);
	if (s == NULL || !ctx_add(c, s)) {
		c->n_failed++;
		return;
	}
	c->n_sessions++;
	if (due) {
		ctx_will_add(c, rec->client_id, s, rec->will_msg, "will_delay_passed_offline");
	}
}

static void load_sub(void *arg, const store_sub *sub)
{
	restore_ctx *c = arg;
	if (nmq_bridge_client_id(sub->client_id, strlen(sub->client_id))) {
		return; // a transparent bridge's mirrored filters: read by the bridge
	}
	nmq_session *s = ctx_find(c, sub->client_id);
	if (s == NULL) {
		c->n_failed++;
		return;
	}
	proto_sub_opts o = {
		.qos                 = sub->options & 0x3,
		.no_local            = (sub->options & 0x4) != 0,
		.retain_as_published = (sub->options & 0x8) != 0,
		.retain_handling     = (sub->options >> 4) & 0x3,
		.sub_id              = sub->sub_id,
	};
	proto_who who
	    = { sub->client_id, nmq_session_username(s), "", PROTO_ACL_NONE, false, 0, 0 };
	bool existed;
	int  rv = broker_proto_ops.subscribe(
	     c->b, s, &who, sub->filter, strlen(sub->filter), &o, &existed);
	if ((rv & 0xFF) >= 0x80) {
		log_warn("store",
		    "client_id=%s filter=%s event=subscription_not_restored reason=0x%02x",
		    sub->client_id, sub->filter, rv & 0xFF);
		c->n_failed++;
		return;
	}
	c->n_subs++;
}

static void load_rel(void *arg, const char *client_id, uint16_t packet_id)
{
	restore_ctx *c = arg;
	if (nmq_bridge_client_id(client_id, strlen(client_id))) {
		return; // a bridge's inbound QoS 2 ids: read by the bridge itself
	}
	nmq_session *s = ctx_find(c, client_id);
	if (s == NULL || proto_session_restore_rel(s, packet_id) != NMQ_OK) {
		c->n_failed++;
		return;
	}
	c->n_rel++;
}

static void load_qmsg(void *arg, const store_qmsg *q)
{
	restore_ctx *c = arg;
	if (nmq_bridge_client_id(q->client_id, strlen(q->client_id))) {
		return; // a bridge's cache: read by the bridge itself
	}
	nmq_session *s = ctx_find(c, q->client_id);
	if (s == NULL
	    || proto_session_restore_msg(s, q->seq, q->msg, q->qos, q->retain, q->state,
	           q->packet_id, q->sub_ids, q->n_sub_ids)
	        != NMQ_OK) {
		c->n_failed++;
		return;
	}
	c->n_msgs++;
}

static void load_retained(void *arg, nmq_msg *msg)
{
	restore_ctx *c = arg;
	nmq_msg_hold(msg);
	if (retain_set(broker_retain(c->b), msg->topic, msg->topic_len, msg) != NMQ_OK) {
		c->n_failed++;
		return;
	}
	c->n_retained++;
}

// Keeps will (held) for publish_expired_wills, with the restored session
// s (held) whose record still holds it, or (s NULL) the client id of the
// expired session whose record does. The will stays stored (and comes
// back at the next start) if this fails.
static void ctx_will_add(
    restore_ctx *c, const char *client_id, nmq_session *s, nmq_msg *will, const char *why)
{
	char *cid = NULL;
	if (c->n_wills == c->cap_wills) {
		size_t               cap = c->cap_wills ? c->cap_wills * 2 : 8;
		struct restore_will *nv  = realloc(c->wills, cap * sizeof(*nv));
		if (nv == NULL) {
			goto oom;
		}
		c->wills     = nv;
		c->cap_wills = cap;
	}
	if (s == NULL && (cid = strdup(client_id)) == NULL) {
		goto oom;
	}
	nmq_msg_hold(will);
	if (s != NULL) {
		nmq_session_hold(s);
	}
	c->wills[c->n_wills++] = (struct restore_will) { will, s, cid, why };
	return;
oom:
	log_error("store", "client_id=%s event=will_not_published reason=out_of_memory", client_id);
	c->n_failed++;
}

static void load_expired_will(void *arg, const char *client_id, nmq_msg *will)
{
	ctx_will_add(arg, client_id, NULL, will, "session_expired_offline");
}

static void wills_free(restore_ctx *c)
{
	for (size_t i = 0; i < c->n_wills; i++) {
		nmq_msg_release(c->wills[i].msg);
		if (c->wills[i].s != NULL) {
			nmq_session_release(c->wills[i].s);
		}
		free(c->wills[i].cid);
	}
	free(c->wills);
	c->wills   = NULL;
	c->n_wills = 0;
}

// The wills due at startup, once the restored sessions are subscribed and
// the store is bound (so that persistent subscribers queue them durably),
// as the protocol layer publishes the will of a session that ends. Each
// goes with the write that takes it out of the store (the restored
// session's record rewritten without it, or the expired session's record
// deleted) in one store group: a crash before that group commits
// publishes it at the next start, one after it does not.
static void publish_expired_wills(restore_ctx *c, nmq_store *st)
{
	for (size_t i = 0; i < c->n_wills; i++) {
		struct restore_will *w = &c->wills[i];
		store_batch_begin(st);
		if (w->s != NULL) {
			proto_session_will_published(w->s);
		} else {
			nmq_err e = store_session_del(st, w->cid, NULL, NULL);
			if (e != NMQ_OK) {
				log_error("store",
				    "client_id=%s event=session_del_failed error=%d (its will may "
				    "be "
				    "published again at the next start)",
				    w->cid, (int)e);
			}
		}
		log_info("store", "client_id=%s topic=%s event=will_published reason=%s",
		    w->s != NULL ? nmq_session_client_id(w->s) : w->cid, w->msg->topic, w->why);
		broker_proto_ops.route(c->b, NULL, NULL, w->msg);
		store_batch_end(st);
	}
	wills_free(c);
}

static uint64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

nmq_err broker_store_attach(nmq_broker *b, nmq_proto *p, nmq_store *st, bool persist)
{
	if (!persist) {
		// Only the bridges' cache: no session is written, but a forward
		// cached for a local publisher is acked after its commit.
		proto_set_ack_store(p, &store_proto_ops, st);
		return NMQ_OK;
	}
	restore_ctx c;
	memset(&c, 0, sizeof(c));
	c.b                = b;
	c.p                = p;
	c.now_wall         = wall_ms();
	store_load_ops ops = {
		.session      = load_session,
		.sub          = load_sub,
		.rel          = load_rel,
		.qmsg         = load_qmsg,
		.retained     = load_retained,
		.expired_will = load_expired_will,
		// Queued messages stay on disk until their client is back.
		.qmsg_inflight_only = true,
	};
	uint64_t t0 = nmq_clock_ms();
	nmq_err  e  = store_load(st, c.now_wall, &ops, &c);
	free(c.v);
	if (e != NMQ_OK) {
		wills_free(&c);
		return e;
	}
	store_stats ss;
	store_stats_get(st, &ss);
	log_info("store",
	    "path=%s event=restored sessions=%zu subscriptions=%zu inflight=%zu qos2_ids=%zu "
	    "retained=%zu expired=%llu failed=%zu ms=%llu",
	    store_path(st), c.n_sessions, c.n_subs, c.n_msgs, c.n_rel, c.n_retained,
	    (unsigned long long)ss.expired, c.n_failed, (unsigned long long)(nmq_clock_ms() - t0));
	proto_set_store(p, &store_proto_ops, st);
	broker_set_store(b, st);
	publish_expired_wills(&c, st);
	return NMQ_OK;
}

void broker_store_evicted(void *arg, const char *client_id, uint64_t seq)
{
	// Counted; the store logs each eviction (rate limited) itself.
	(void)arg;
	(void)client_id;
	(void)seq;
	atomic_fetch_add(&evictions, 1);
}

uint64_t broker_store_evictions(void)
{
	return atomic_load(&evictions);
}

#endif // NMQ_HAVE_STORE
