// PUBLISH from a client: topic aliases, inbound QoS 2 (exactly once until
// PUBREL; the session keeps that state), the Receive Maximum quota, the
// shared message built for routing, routing and the ack; then the acks of
// both QoS flows (PUBACK, PUBREC, PUBREL, PUBCOMP).
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "nng/codec/mqtt_publish_out.h"
#include "nng/core/droplog.h"
#include "nng/core/log.h"
#include "nng/protocol/link.h"

// Builds a shared message from topic, v5 properties and payload (a PUBLISH
// or a will); see link.h. The forwardable properties are re-encoded from
// the decoded set; message expiry becomes an absolute deadline. Returns
// NULL on allocation failure.
nmq_msg *proto_msg_build(uint8_t ver, mqtt_bytes topic, const mqtt_props *in, mqtt_bytes payload,
    uint8_t qos, bool retain, uint64_t origin)
{
	mqtt_props fwd;
	memset(&fwd, 0, sizeof(fwd));
	mqtt_user_prop  stack_up[8];
	mqtt_user_prop *up = stack_up;
	if (ver == MQTT_PROTO_V5 && in != NULL) {
		uint64_t keep = MQTT_PBIT(MQTT_PROP_PAYLOAD_FORMAT)
		    | MQTT_PBIT(MQTT_PROP_CONTENT_TYPE) | MQTT_PBIT(MQTT_PROP_RESPONSE_TOPIC)
		    | MQTT_PBIT(MQTT_PROP_CORRELATION_DATA);
		fwd.present          = in->present & keep;
		fwd.payload_format   = in->payload_format;
		fwd.content_type     = in->content_type;
		fwd.response_topic   = in->response_topic;
		fwd.correlation_data = in->correlation_data;
		if (in->n_user_props > 0) {
			if (in->n_user_props > 8) {
				up = malloc(in->n_user_props * sizeof(*up));
				if (up == NULL) {
					return NULL;
				}
			}
			mqtt_prop_iter it;
			uint32_t       n = 0;
			mqtt_prop_iter_init(&it, in);
			while (n < in->n_user_props
			    && mqtt_prop_iter_next_user(&it, &up[n].key, &up[n].value)) {
				n++;
			}
			fwd.user_props   = up;
			fwd.n_user_props = n;
			if (n > 0) {
				fwd.present |= MQTT_PBIT(MQTT_PROP_USER_PROPERTY);
			}
		}
	}
	size_t   plen = (fwd.present != 0) ? mqtt_props_size(&fwd) : 0;
	nmq_msg *m    = nmq_msg_alloc((const char *)topic.p, topic.len, plen, payload.len);
	if (m != NULL) {
		if (plen > 0) {
			// Encode with room for the length prefix, then keep the body.
			uint8_t  tmp[256];
			uint8_t *t = plen + 4 <= sizeof(tmp) ? tmp : malloc(plen + 4);
			if (t == NULL || mqtt_props_encode_body(t, plen + 4, &fwd) != plen) {
				if (t != tmp) {
					free(t);
				}
				nmq_msg_release(m);
				m = NULL;
				goto out;
			}
			memcpy(m->props, t, plen);
			if (t != tmp) {
				free(t);
			}
		}
		if (payload.len > 0) {
			memcpy(m->payload, payload.p, payload.len);
		}
		m->qos       = qos;
		m->retain    = retain;
		m->origin_id = origin;
		if (ver == MQTT_PROTO_V5 && in != NULL
		    && (in->present & MQTT_PBIT(MQTT_PROP_MESSAGE_EXPIRY))) {
			m->expiry_interval = in->message_expiry;
			m->expiry_at_ms    = nmq_clock_ms() + (uint64_t)in->message_expiry * 1000;
		}
	}
out:
	if (up != stack_up) {
		free(up);
	}
	return m;
}

// An ack waiting for the store's commit. Holds the session and the
// connection; the link itself may be gone when the commit is done, so the
// job finds it again through the session (same connection, or no ack:
// the client resends after reconnecting).
//
// A plain PUBACK or PUBREC (no property: what almost every waiting ack
// is) is kept as its type, packet id and reason and rebuilt when sent;
// the PUBACKs of one read of the socket share a store_ack (up to
// ACK_BATCH), so that the tens of thousands a flood of QoS 1 publishers
// keeps waiting cost a few bytes each, not a whole mqtt_packet (over
// 300), and one barrier in the store and one job per read; any
// other packet is copied whole into `full`, allocated for it (a SUBACK's
// or UNSUBACK's codes, or a CONNACK's assigned client id and response
// information, copied behind it).
#define ACK_BATCH 16
typedef struct store_ack {
	workq_job         job;
	struct store_ack *next_free; // in its thread's pool (ack_pool)
	nmq_proto        *p;
	nmq_session      *s; // held
	nmq_conn         *conn; // held
	mqtt_packet      *full; // NULL: a plain ack (type, pid, reason below)
	nmq_err           err;
	int               worker;
	link_after_fn     after; // run once the ack is sent or given up (unlocked)
	void             *after_arg;
	uint8_t           n; // plain acks in ent (full NULL), 1..ACK_BATCH
	struct {
		uint16_t pid;
		uint8_t  type, reason;
	} ent[ACK_BATCH];
} store_ack;

// The plain PUBACKs of one connection that one read of its socket asked
// for wait together: one store_ack, one store barrier, one job for up to
// ACK_BATCH of them (link_ack_then, link_acks_flush).
static _Thread_local store_ack *open_ack; // not yet given to the store
static _Thread_local nmq_link  *open_link; // the link whose frames this thread handles
static _Thread_local uint64_t   open_mark; // the store's sync mark when they began

// Whether pkt can wait as a plain ack (store_ack.full NULL).
static inline bool ack_is_plain(const mqtt_packet *pkt)
{
	return (pkt->type == MQTT_PUBACK || pkt->type == MQTT_PUBREC) && pkt->flags == 0
	    && pkt->u.ack.props.present == 0 && pkt->u.ack.props.n_user_props == 0
	    && pkt->u.ack.props.raw.p == NULL;
}

// Free store_acks, per thread, so that an ack waiting for the store costs
// no allocation: taken on the receive path, given back by the job that
// sends the ack, which runs on the connection's owner worker (the same
// thread for a socket). Bounded: beyond ACK_POOL_MAX one is freed. A
// thread's pool is freed when it exits (the key's destructor).
#define ACK_POOL_MAX 1024
static _Thread_local store_ack *ack_pool;
static _Thread_local uint32_t   ack_pool_len;
static pthread_key_t            ack_pool_key;
static pthread_once_t           ack_pool_once = PTHREAD_ONCE_INIT;
static bool                     ack_pool_keyed;

static void ack_pool_fini(void *unused)
{
	(void)unused;
	while (ack_pool != NULL) {
		store_ack *a = ack_pool;
		ack_pool     = a->next_free;
		free(a);
	}
	ack_pool_len = 0;
}

static void ack_pool_key_make(void)
{
	ack_pool_keyed = pthread_key_create(&ack_pool_key, ack_pool_fini) == 0;
}

static store_ack *store_ack_get(void)
{
	store_ack *a = ack_pool;
	if (a == NULL) {
		return malloc(sizeof(*a));
	}
	ack_pool = a->next_free;
	ack_pool_len--;
	return a;
}

static void store_ack_put(store_ack *a)
{
	if (ack_pool_len >= ACK_POOL_MAX) {
		free(a);
		return;
	}
	if (ack_pool_len == 0 && ack_pool == NULL) {
		// The first one this thread keeps: have it freed at the
		// thread's exit.
		(void)pthread_once(&ack_pool_once, ack_pool_key_make);
		if (!ack_pool_keyed || pthread_setspecific(ack_pool_key, &ack_pool) != 0) {
			free(a);
			return;
		}
	}
	a->next_free = ack_pool;
	ack_pool     = a;
	ack_pool_len++;
}

// The bytes of a CONNACK's assigned client id and response information.
static size_t connack_strings_len(const mqtt_props *pr)
{
	size_t n = 0;
	if (pr->present & MQTT_PBIT(MQTT_PROP_ASSIGNED_CLIENT_ID)) {
		n += pr->assigned_client_id.len;
	}
	if (pr->present & MQTT_PBIT(MQTT_PROP_RESPONSE_INFO)) {
		n += pr->response_info.len;
	}
	return n;
}

// Copies those strings to buf (connack_strings_len bytes) and points the
// properties at the copies.
static void connack_strings_copy(mqtt_props *pr, uint8_t *buf)
{
	if (pr->present & MQTT_PBIT(MQTT_PROP_ASSIGNED_CLIENT_ID)) {
		memcpy(buf, pr->assigned_client_id.p, pr->assigned_client_id.len);
		pr->assigned_client_id.p = buf;
		buf += pr->assigned_client_id.len;
	}
	if (pr->present & MQTT_PBIT(MQTT_PROP_RESPONSE_INFO)) {
		memcpy(buf, pr->response_info.p, pr->response_info.len);
		pr->response_info.p = buf;
	}
}

// On a worker: sends the ack if its connection is still the session's.
// Acks that complete together run as one job batch on the connection's
// worker, which flushes the connection once after the batch (workq.h): one
// gather send for all of them, in commit order.
static void store_ack_job(workq_job *job)
{
	store_ack  *a       = (store_ack *)job;
	bool        end     = false;
	bool        durable = a->err == NMQ_OK;
	mqtt_packet plain;
	unsigned    n = a->full != NULL ? 1 : a->n;
	session_lock(a->s);
	nmq_link *l = session_link_locked(a->s);
	for (unsigned i = 0; i < n && l != NULL && l->conn == a->conn; i++) {
		mqtt_packet *pk = a->full;
		if (pk == NULL) {
			memset(&plain, 0, offsetof(mqtt_packet, u) + sizeof(mqtt_ack));
			plain.type            = a->ent[i].type;
			plain.u.ack.packet_id = a->ent[i].pid;
			plain.u.ack.reason    = a->ent[i].reason;
			pk                    = &plain;
		}
		if (l->tx_ended) {
			// The connection ends (v5: after a DISCONNECT, which
			// nothing follows [MQTT-3.14.4-1]), e.g. by an earlier ack:
			// given up as if the commit had failed (no retained
			// messages after a SUBACK not sent); the client resends
			// after reconnecting.
			durable = false;
		} else if (a->err == NMQ_OK) {
			link_send_packet(l, pk);
		} else if (pk->type == MQTT_SUBACK || pk->type == MQTT_UNSUBACK) {
			// A subscription change that is not durable has already
			// taken effect in memory (the subscription stands, the
			// filter is gone), so no code of a SUBACK (UNSUBACK) would
			// tell the truth. The connection ends without it (v5:
			// DISCONNECT 0x80 first); the client subscribes again
			// after reconnecting.
			link_send_disconnect(l, MQTT_RC_UNSPECIFIED);
			end = true;
		} else if (l->ver == MQTT_PROTO_V5 && pk->type != MQTT_CONNACK) {
			// Not durable: a v5 client is told (0x80) and may resend.
			pk->u.ack.reason = MQTT_RC_UNSPECIFIED;
			link_send_packet(l, pk);
		} else {
			// A 3.1.1 client has no way to be told, so its connection
			// ends without the ack (it resends after reconnecting). A
			// CONNACK is not sent: the client connects again.
			end = true;
		}
		l->tx_ended |= end;
	}
	if (l != NULL && l->conn == a->conn) {
		atomic_fetch_sub(&l->acks_waiting, 1);
	}
	session_unlock(a->s);
	if (end) {
		// After what is queued before it (earlier acks of the batch).
		conn_shutdown(a->conn);
	}
	if (a->after != NULL) {
		a->after(a->s, a->after_arg, durable);
	}
	nmq_session_release(a->s);
	conn_release(a->conn);
	free(a->full); // and the codes behind it
	store_ack_put(a);
}

// On the store's thread, after the commit: back to the connection's worker.
static void store_ack_done(void *arg, nmq_err err)
{
	store_ack *a = arg;
	a->err       = err;
	if (err != NMQ_OK) {
		proto_store_failed(a->p, "commit", nmq_session_client_id(a->s), err);
	}
	workq_post_to(a->p->wq, a->worker, &a->job);
}

void link_ack(nmq_link *l, const mqtt_packet *pkt, bool stored)
{
	(void)link_ack_then(l, pkt, stored, NULL, NULL);
}

// Gives a waiting ack to the store: its job runs once everything queued
// in the store so far has committed (gathered: and no group failed since
// open_mark). Returns false if it could not wait (the connection is
// closed).
static bool ack_submit(nmq_link *l, store_ack *a, bool gathered)
{
	nmq_proto *p = l->p;
	nmq_err    e = gathered
	       ? p->ack_store->sync_since(p->ack_store_arg, open_mark, store_ack_done, a)
	       : p->ack_store->sync(p->ack_store_arg, store_ack_done, a);
	if (e != NMQ_OK) {
		// The store is saturated or closing: the ack cannot be made
		// durable nor sent ahead of those waiting. The connection ends
		// without it; the client resends after reconnecting.
		atomic_fetch_sub(&l->acks_waiting, 1);
		proto_store_failed(p, "sync", nmq_session_client_id(a->s), e);
		conn_close(l->conn);
		nmq_session_release(a->s);
		conn_release(a->conn);
		free(a->full);
		store_ack_put(a);
		return false;
	}
	atomic_fetch_add_explicit(
	    &p->m.acks_after_store, a->full != NULL ? 1 : a->n, memory_order_relaxed);
	return true;
}

// Gives the gathered PUBACKs to the store.
static void open_ack_submit(void)
{
	store_ack *a = open_ack;
	open_ack     = NULL;
	if (a != NULL) {
		(void)ack_submit(open_link, a, true);
	}
}

// See link.h. The store's mark is taken before any frame of the read is
// handled, hence before any write of their messages is queued.
void link_acks_begin(nmq_link *l)
{
	if (open_link == l) {
		return;
	}
	link_acks_flush();
	nmq_proto *p = l->p;
	if (p->ack_store != NULL && p->ack_store->sync_since != NULL) {
		open_link = l;
		open_mark = p->ack_store->sync_mark(p->ack_store_arg);
	}
}

// See link.h.
void link_acks_flush(void)
{
	open_ack_submit();
	open_link = NULL;
}

bool link_ack_then(
    nmq_link *l, const mqtt_packet *pkt, bool stored, link_after_fn after, void *after_arg)
{
	nmq_proto *p = l->p;
	if (p->ack_store == NULL || (!stored && atomic_load(&l->acks_waiting) == 0)) {
		link_send_packet(l, pkt);
		return false;
	}
	bool plain = ack_is_plain(pkt);
	// Inside a read of l's socket (link_acks_begin), a plain PUBACK joins
	// the others of the read: one barrier, given to the store at its end
	// (link_acks_flush), after every write of their messages. It fails if
	// any group since the read began failed, not only one of theirs: a
	// QoS 1 message is then sent again, which QoS 1 allows; the PUBREC
	// and PUBCOMP of QoS 2 keep a barrier of their own, in their
	// message's group.
	bool gather = plain && pkt->type == MQTT_PUBACK && after == NULL && open_link == l;
	if (open_ack != NULL) {
		if (gather && open_ack->n < ACK_BATCH) {
			store_ack *o        = open_ack;
			o->ent[o->n].type   = pkt->type;
			o->ent[o->n].pid    = pkt->u.ack.packet_id;
			o->ent[o->n].reason = pkt->u.ack.reason;
			o->n++;
			return true;
		}
		// Full, or this ack cannot join: those gathered go first.
		open_ack_submit();
	}
	store_ack *a = store_ack_get();
	bool       coded
	    = (pkt->type == MQTT_SUBACK || pkt->type == MQTT_UNSUBACK) && pkt->u.suback.count > 0;
	// What the packet refers to that may be on the caller's stack: a
	// SUBACK's codes, a CONNACK's strings (its other pointer properties
	// are never set on a CONNACK that waits).
	size_t own = coded ? pkt->u.suback.count : 0;
	if (pkt->type == MQTT_CONNACK) {
		own = connack_strings_len(&pkt->u.connack.props);
	}
	mqtt_packet *full  = NULL;
	uint8_t     *codes = NULL;
	if (a != NULL && !plain) {
		full = malloc(sizeof(*full) + own);
		if (full == NULL) {
			store_ack_put(a);
			a = NULL;
		} else if (own > 0) {
			codes = (uint8_t *)(full + 1);
		}
	}
	if (a == NULL) {
		proto_count_alloc_failure(p, "store_ack");
		conn_close(l->conn);
		return false;
	}
	a->next_free = NULL;
	a->full      = full;
	a->err       = NMQ_OK;
	a->after     = after;
	a->after_arg = after_arg;
	a->job.fn    = store_ack_job;
	a->job.next  = NULL;
	a->p         = p;
	a->s         = l->session;
	a->conn      = l->conn;
	a->n         = 0;
	if (plain) {
		a->ent[0].type   = pkt->type;
		a->ent[0].pid    = pkt->u.ack.packet_id;
		a->ent[0].reason = pkt->u.ack.reason;
		a->n             = 1;
	} else {
		*full = *pkt;
		if (coded) {
			memcpy(codes, pkt->u.suback.codes, pkt->u.suback.count);
			full->u.suback.codes = codes;
		} else if (codes != NULL) {
			connack_strings_copy(&full->u.connack.props, codes);
		}
	}
	// One worker per connection, so that its acks run in commit order:
	// the socket's owner (whose thread reads and flushes it, and took
	// this store_ack from its pool), else one chosen by the connection.
	a->worker = conn_owner(l->conn);
	if (a->worker < 0 || a->worker >= workq_size(p->wq)) {
		a->worker = (int)(((uintptr_t)l->conn >> 6) % (uintptr_t)workq_size(p->wq));
	}
	nmq_session_hold(a->s);
	conn_hold(a->conn);
	// Counted from now: the acks after it wait behind it, gathered or not.
	atomic_fetch_add(&l->acks_waiting, 1);
	if (gather) {
		open_ack = a;
		return true;
	}
	return ack_submit(l, a, false);
}

// Handles one PUBLISH (verdicts: the acl_ask answer when replayed). Returns
// 0, or -1 when the connection is ended.
int handle_publish(nmq_link *l, const mqtt_packet *pk, const int *verdicts)
{
	nmq_proto          *p     = l->p;
	nmq_session        *s     = l->session;
	const mqtt_publish *pub   = &pk->u.publish;
	mqtt_bytes          topic = pub->topic;

	if (l->ver == MQTT_PROTO_V5
	    && (pub->props.present & MQTT_PBIT(MQTT_PROP_SUBSCRIPTION_ID))) {
		// Only the server sends subscription identifiers [MQTT-3.3.4-6].
		link_fail(l, MQTT_RC_PROTOCOL_ERROR);
		return -1;
	}
	if (l->ver == MQTT_PROTO_V5 && (pub->props.present & MQTT_PBIT(MQTT_PROP_PAYLOAD_FORMAT))
	    && pub->props.payload_format == 1
	    && !mqtt_utf8_valid(pub->payload.p, pub->payload.len)) {
		// The payload is declared UTF-8 but is not [MQTT-3.3.2.3.2]:
		// refuse the message (the ack says why), or the connection for
		// QoS 0, which has no ack.
		if (pub->qos == 0) {
			link_fail(l, MQTT_RC_PAYLOAD_FORMAT_INVALID);
			return -1;
		}
		mqtt_packet r;
		memset(&r, 0, sizeof(r));
		r.type            = pub->qos == 1 ? MQTT_PUBACK : MQTT_PUBREC;
		r.u.ack.packet_id = pub->packet_id;
		r.u.ack.reason    = MQTT_RC_PAYLOAD_FORMAT_INVALID;
		link_reply(l, &r);
		return 0;
	}

	// Topic alias (v5) [MQTT-3.3.2-7..12].
	if (l->ver == MQTT_PROTO_V5 && (pub->props.present & MQTT_PBIT(MQTT_PROP_TOPIC_ALIAS))) {
		uint16_t a = pub->props.topic_alias;
		if (a == 0 || a > l->in_alias_max) {
			link_fail(l, MQTT_RC_TOPIC_ALIAS_INVALID);
			return -1;
		}
		if (topic.len > 0) {
			char *t = strndup((const char *)topic.p, topic.len);
			if (t == NULL) {
				proto_count_alloc_failure(p, "topic_alias");
				link_fail(l, MQTT_RC_UNSPECIFIED);
				return -1;
			}
			free(l->in_alias[a]);
			l->in_alias[a] = t;
		} else {
			if (l->in_alias[a] == NULL) {
				link_fail(l, MQTT_RC_PROTOCOL_ERROR);
				return -1;
			}
			topic.p   = (const uint8_t *)l->in_alias[a];
			topic.len = (uint32_t)strlen(l->in_alias[a]);
		}
	} else if (topic.len == 0) {
		link_fail(l, MQTT_RC_PROTOCOL_ERROR);
		return -1;
	}

	if (!proto_topic_within_limits(p, topic.p, topic.len)) {
		atomic_fetch_add(&p->m.refused_topics, 1);
		droplog_record(DENY_TOPIC_LIMIT, nmq_session_client_id(s), (const char *)topic.p,
		    topic.len, pub->qos, 1);
		link_fail(l, MQTT_RC_TOPIC_NAME_INVALID);
		return -1;
	}

	// The application's external ACL: it may park this PUBLISH (and
	// everything the client sends after it) until it knows.
	proto_who who = { nmq_session_client_id(s), l->username, conn_peer(l->conn), PROTO_ACL_NONE,
		l->superuser, l->ver, l->local_port };
	if (verdicts != NULL) {
		who.acl = verdicts[0];
	} else {
		who.acl = link_acl_ask(
		    l, &who, PROTO_ACCESS_PUBLISH, (const char *)topic.p, topic.len, NULL, 0);
		if (who.acl == PROTO_AUTH_PENDING) {
			return 0;
		}
	}

	// Whether routing this message writes to the store (its ack then
	// waits for the commit) or the store refused one of its writes (no
	// success ack then): forget what an earlier upcall noted.
	(void)proto_store_take_noted();
	(void)proto_store_take_refused();

	// What routing a QoS 1/2 message writes to the store (its inbound QoS
	// 2 id, its queue rows, a retained copy) commits in one group or not
	// at all: a crash between them could keep the id without the rows,
	// and the publisher's resend would then be taken for a duplicate.
	// The barrier its ack waits for (link_ack) is queued in the same
	// group: were it in a later one, that one could commit after this one
	// failed (a full disk) and the ack would claim what is not stored.
	// The store bound for acks is the sessions' store, or the bridges'
	// cache alone (whose writes routing makes too).
	bool grouped = pub->qos > 0 && p->ack_store != NULL && p->ack_store->batch != NULL;
	if (grouped) {
		p->ack_store->batch(p->ack_store_arg, true);
	}

	// Inbound QoS 2: a resent PUBLISH before PUBREL is acknowledged again
	// but not routed again.
	if (pub->qos == 2) {
		session_lock(s);
		nmq_err err = session_qos2_record_locked(s, pub->packet_id, nmq_clock_ms());
		if (err == NMQ_EEXIST) {
			mqtt_packet r;
			memset(&r, 0, sizeof(r));
			r.type            = MQTT_PUBREC;
			r.u.ack.packet_id = pub->packet_id;
			link_ack(l, &r, false);
			if (grouped) {
				p->ack_store->batch(p->ack_store_arg, false);
			}
			session_unlock(s);
			return 0;
		}
		session_unlock(s);
		if (err != NMQ_OK) {
			if (grouped) {
				p->ack_store->batch(p->ack_store_arg, false);
			}
			// Over our Receive Maximum [MQTT-3.3.4-9], or a failure.
			link_fail(l,
			    err == NMQ_ELIMIT ? MQTT_RC_RECEIVE_MAX_EXCEEDED : MQTT_RC_UNSPECIFIED);
			return -1;
		}
	}

	atomic_fetch_add_explicit(&p->m.msgs_received, 1, memory_order_relaxed);
	session_count_received(s);
	nmq_msg *m = proto_msg_build(l->ver, topic, l->ver == MQTT_PROTO_V5 ? &pub->props : NULL,
	    pub->payload, pub->qos, pub->retain, nmq_session_id(s));
	if (m == NULL) {
		if (grouped) {
			p->ack_store->batch(p->ack_store_arg, false);
		}
		proto_count_alloc_failure(p, "message");
		link_fail(l, MQTT_RC_UNSPECIFIED);
		return -1;
	}
	int     rv = p->ops->route(p->app, s, &who, m);
	uint8_t rc = (uint8_t)(rv & 0xFF);
	nmq_msg_release(m);
	bool         stored    = proto_store_take_noted();
	bool         refused   = proto_store_take_refused();
	nmq_session *congested = session_congestion_take();
	if (congested == s) {
		// Its own queue: pausing its reads would also hold back the acks
		// that drain it.
		nmq_session_release(congested);
		congested = NULL;
	}
	if (congested != NULL) {
		// A subscriber's queue is nearly full: read no more from this
		// publisher until it drains, rather than drop acknowledged
		// messages for it.
		link_backpressure(l, congested);
	} else if (proto_lim(p)->max_message_memory > 0
	    && nmq_mem_in_use() > proto_lim(p)->max_message_memory) {
		// Over mqtt.max_message_memory: read no more from this publisher
		// until the subscribers have drained some.
		link_backpressure(l, LINK_BP_MEMORY);
	} else if ((stored || refused) && proto_store_congested(p, false)) {
		// The store's write queue is half full: read no more from this
		// publisher until it has drained to a quarter, rather than have
		// the store refuse writes (whose messages then cannot be acked).
		link_backpressure(l, LINK_BP_STORE);
	}

	if (pub->qos > 0) {
		mqtt_packet r;
		memset(&r, 0, sizeof(r));
		r.type            = pub->qos == 1 ? MQTT_PUBACK : MQTT_PUBREC;
		r.u.ack.packet_id = pub->packet_id;
		r.u.ack.reason    = l->ver == MQTT_PROTO_V5 ? rc : 0;
		bool nack         = refused && rc < 0x80;
		if (nack) {
			// The store refused a write this message needed: an ack
			// would promise what is not durable (0021). A v5 publisher
			// is told (0x97) and may resend; a 3.1.1 one cannot be
			// told, so its connection ends without the ack.
			rc             = MQTT_RC_QUOTA_EXCEEDED;
			r.u.ack.reason = rc;
			long n         = atomic_fetch_add(&p->m.store_refused_acks, 1) + 1;
			log_warn_rl("proto",
			    "client_id=%s topic=%.*s qos=%u event=publish_not_acked "
			    "reason=store_full "
			    "action=%s store_refused_acks=%ld",
			    nmq_session_client_id(s), (int)(topic.len > 200 ? 200 : topic.len),
			    (const char *)topic.p, pub->qos,
			    l->ver == MQTT_PROTO_V5 ? "ack_0x97" : "disconnect", n);
		}
		session_lock(s);
		if (pub->qos == 2 && rc >= 0x80) {
			// A refused QoS 2 flow ends here: forget the id.
			session_qos2_release_locked(s, pub->packet_id);
		}
		if (nack && l->ver != MQTT_PROTO_V5) {
			session_unlock(s);
			if (grouped) {
				p->ack_store->batch(p->ack_store_arg, false);
			}
			link_fail(l, MQTT_RC_QUOTA_EXCEEDED);
			return -1;
		}
		link_ack(l, &r, stored);
		session_unlock(s);
	}
	if (grouped) {
		p->ack_store->batch(p->ack_store_arg, false);
	}
	if (rv & PROTO_RC_DISCONNECT) {
		link_fail(l, rc);
		return -1;
	}
	return 0;
}

// Sends a simple ack (PUBACK/PUBREC/PUBREL/PUBCOMP).
static void send_ack(nmq_link *l, uint8_t type, uint16_t pid, uint8_t reason)
{
	mqtt_packet pk;
	memset(&pk, 0, sizeof(pk));
	pk.type            = type;
	pk.flags           = type == MQTT_PUBREL ? 0x2 : 0;
	pk.u.ack.packet_id = pid;
	pk.u.ack.reason    = l->ver == MQTT_PROTO_V5 ? reason : 0;
	link_send_attached(l, &pk);
}

// Handles PUBACK/PUBREC/PUBREL/PUBCOMP from the client.
int handle_pub_ack(nmq_link *l, const mqtt_packet *pk)
{
	nmq_session *s   = l->session;
	uint16_t     pid = pk->u.ack.packet_id;
	session_lock(s);
	if (session_link_locked(s) != l) {
		session_unlock(s);
		return -1;
	}
	switch (pk->type) {
	case MQTT_PUBACK:
		session_puback_locked(s, pid);
		break;
	case MQTT_PUBREC:
		switch (session_pubrec_locked(s, pid, pk->u.ack.reason >= 0x80)) {
		case SESSION_PUBREL_NOW:
			send_ack(l, MQTT_PUBREL, pid, 0);
			break;
		case SESSION_PUBREC_UNKNOWN:
			send_ack(l, MQTT_PUBREL, pid, MQTT_RC_PACKET_ID_NOT_FOUND);
			break;
		default: // held for the store's commit, or the flow failed
			break;
		}
		break;
	case MQTT_PUBCOMP:
		session_pubcomp_locked(s, pid);
		break;
	case MQTT_PUBREL: {
		// The id's delete and the barrier the PUBCOMP waits for in one
		// group (see handle_publish).
		nmq_proto *p       = l->p;
		bool       grouped = p->ack_store != NULL && p->ack_store->batch != NULL;
		if (grouped) {
			p->ack_store->batch(p->ack_store_arg, true);
		}
		bool        found = session_qos2_release_locked(s, pid);
		mqtt_packet c;
		memset(&c, 0, sizeof(c));
		c.type            = MQTT_PUBCOMP;
		c.u.ack.packet_id = pid;
		c.u.ack.reason
		    = l->ver == MQTT_PROTO_V5 && !found ? MQTT_RC_PACKET_ID_NOT_FOUND : 0;
		// A stored id is forgotten in the store too; the PUBCOMP waits
		// for that commit, since the client may reuse the id at once: a
		// crash before it would bring the id back, and the broker would
		// take the client's next message with it for a resend.
		link_ack(l, &c, found && session_stored_locked(s));
		if (grouped) {
			p->ack_store->batch(p->ack_store_arg, false);
		}
		break;
	}
	}
	session_unlock(s);
	return 0;
}
