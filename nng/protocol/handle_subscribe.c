// SUBSCRIBE and UNSUBSCRIBE: per-filter validation, the application's
// grant, SUBACK/UNSUBACK, then retained messages.
#include <stdlib.h>
#include <string.h>

#include "nng/core/droplog.h"
#include "nng/core/log.h"
#include "nng/protocol/link.h"

#define SUB_MAX_FILTERS 4096

// The granted filters of one SUBSCRIBE, for the retained messages sent
// after its SUBACK when that SUBACK waits for the store (sub_after).
typedef struct sub_granted {
	nmq_proto     *p;
	uint32_t       n;
	proto_sub_opts so[];
	// then, for each: bool existed, uint32_t len, the filter bytes
} sub_granted;

// Retained messages of the filters a SUBACK granted [MQTT-3.3.1-6], once
// it went out (or was given up with the connection gone: the subscriptions
// stand anyway). None after a failed commit: no SUBACK went, the
// connection ends and the client subscribes again.
static void sub_after(nmq_session *s, void *arg, bool durable)
{
	sub_granted   *g  = arg;
	const uint8_t *at = (const uint8_t *)&g->so[g->n];
	for (uint32_t j = 0; durable && j < g->n; j++) {
		bool     existed;
		uint32_t len;
		memcpy(&existed, at, sizeof(existed));
		at += sizeof(existed);
		memcpy(&len, at, sizeof(len));
		at += sizeof(len);
		g->p->ops->subscribed(g->p->app, s, (const char *)at, len, &g->so[j], existed);
		at += len;
	}
	free(g);
}

// The options of one subscription (filter f) as the application takes
// them: those only MQTT 5 has are off for 3.1.1, except for a bridge that
// sent the marker (link.h): No Local (not on a shared filter, as 5.0
// forbids there) and Retain As Published, so that what it published is
// not sent back to it and retained flags pass through, as Mosquitto does
// for such a bridge; sub_id is the SUBSCRIBE's (0: none).
static proto_sub_opts sub_opts_of(
    const nmq_link *l, const mqtt_bytes *f, const mqtt_sub_opts *o, uint32_t sub_id)
{
	bool v5     = l->ver == MQTT_PROTO_V5;
	bool bridge = !v5 && l->bridge;
	bool nl
	    = v5 ? o->no_local : bridge && mqtt_share_split(f->p, f->len, NULL) != MQTT_SHARE_OK;
	proto_sub_opts so = {
		.qos                 = o->qos,
		.no_local            = nl,
		.retain_as_published = v5 ? o->retain_as_published : bridge,
		.retain_handling     = v5 ? o->retain_handling : 0,
		.sub_id              = sub_id,
	};
	return so;
}

// A filter that breaks the topic filter syntax (empty, '#' not alone in
// the last level, '+' not alone in its level, "$share/" without a share
// name or a filter) is a protocol violation, not a refusal: 3.1.1 closes
// (3.1.1 [MQTT-4.8.0-1]), 5.0 sends DISCONNECT 0x82 and closes (5.0
// [MQTT-4.13.1-1]).
// SUBACK 0x8F / 0x80 is kept for well-formed filters the broker will not
// accept (limits, ACL). Returns true when every filter of the list is
// well-formed; the whole packet is checked before any of it takes effect.
static bool filters_well_formed(nmq_link *l, const mqtt_packet *pk)
{
	bool       sub = pk->type == MQTT_SUBSCRIBE;
	mqtt_bytes f;
	bool       more;
	if (sub) {
		mqtt_sub_iter it;
		mqtt_sub_opts o;
		mqtt_sub_iter_init(&it, &pk->u.subscribe, l->ver);
		while ((more = mqtt_sub_iter_next(&it, &f, &o))
		    && mqtt_topic_filter_valid(f.p, f.len)) { }
	} else {
		mqtt_unsub_iter it;
		mqtt_unsub_iter_init(&it, &pk->u.unsubscribe);
		while ((more = mqtt_unsub_iter_next(&it, &f))
		    && mqtt_topic_filter_valid(f.p, f.len)) { }
	}
	if (more) {
		log_info("conn", "peer=%s client_id=%s reason=topic_filter_malformed packet=%s",
		    conn_peer(l->conn), nmq_session_client_id(l->session),
		    sub ? "SUBSCRIBE" : "UNSUBSCRIBE");
	}
	return !more;
}

// Asks acl_ask about the filters from n_known on into verdicts (n slots;
// those before n_known are given). Returns 0 when every one is answered,
// 1 when the packet was parked.
static int ask_filters(nmq_link *l, const mqtt_subscribe *sub, const proto_who *who, int *verdicts,
    uint32_t n, uint32_t n_known)
{
	mqtt_sub_iter it;
	mqtt_bytes    f;
	mqtt_sub_opts o;
	uint32_t      i = 0;
	mqtt_sub_iter_init(&it, sub, l->ver);
	while (i < n && mqtt_sub_iter_next(&it, &f, &o)) {
		if (i >= n_known) {
			if (!proto_topic_within_limits(l->p, f.p, f.len)) {
				verdicts[i] = PROTO_ACL_NONE; // refused for its size
			} else {
				verdicts[i] = link_acl_ask(l, who, PROTO_ACCESS_SUBSCRIBE,
				    (const char *)f.p, f.len, verdicts, i);
				if (verdicts[i] == PROTO_AUTH_PENDING) {
					return 1;
				}
			}
		}
		i++;
	}
	for (; i < n; i++) {
		verdicts[i] = PROTO_ACL_NONE;
	}
	return 0;
}

// Handles one SUBSCRIBE (verdicts[0..n_known): the acl_ask answers of its
// first filters when replayed). Returns 0, or -1 when the connection is
// ended.
int handle_subscribe(nmq_link *l, const mqtt_packet *pk, const int *verdicts, uint32_t n_known)
{
	nmq_proto            *p   = l->p;
	nmq_session          *s   = l->session;
	const mqtt_subscribe *sub = &pk->u.subscribe;
	uint32_t              n   = sub->count;
	if (n > SUB_MAX_FILTERS) {
		link_fail(l, MQTT_RC_QUOTA_EXCEEDED);
		return -1;
	}
	if (!filters_well_formed(l, pk)) {
		link_fail(l, MQTT_RC_PROTOCOL_ERROR);
		return -1;
	}
	uint8_t *codes   = malloc(n);
	bool    *existed = malloc(n * sizeof(bool));
	int     *acl     = malloc(((size_t)n + 1) * sizeof(int));
	if (codes == NULL || existed == NULL || acl == NULL) {
		proto_count_alloc_failure(p, "subscribe");
		free(codes);
		free(existed);
		free(acl);
		link_fail(l, MQTT_RC_UNSPECIFIED);
		return -1;
	}
	proto_who who = { nmq_session_client_id(s), l->username, conn_peer(l->conn), PROTO_ACL_NONE,
		l->superuser, l->ver, l->local_port };
	if (n_known > n) {
		n_known = n;
	}
	if (n_known > 0) {
		memcpy(acl, verdicts, n_known * sizeof(int));
	}
	if (p->ops->acl_ask != NULL && ask_filters(l, sub, &who, acl, n, n_known) != 0) {
		// Parked until the application knows; nothing done yet.
		free(codes);
		free(existed);
		free(acl);
		return 0;
	}
	uint32_t sub_id = 0;
	if (l->ver == MQTT_PROTO_V5
	    && (sub->props.present & MQTT_PBIT(MQTT_PROP_SUBSCRIPTION_ID))) {
		mqtt_prop_iter it;
		mqtt_prop_iter_init(&it, &sub->props);
		mqtt_prop_iter_next_sub_id(&it, &sub_id);
	}
	mqtt_sub_iter it;
	mqtt_bytes    f;
	mqtt_sub_opts o;
	uint32_t      i    = 0;
	uint8_t       kick = 0;
	// A persistent session's subscriptions are written to the store: the
	// SUBACK waits for their commit (a crash right after it must not lose
	// what it granted), in the same group as the writes (link_ack_then).
	bool grouped = p->ack_store != NULL && p->ack_store->batch != NULL;
	(void)proto_store_take_noted();
	(void)proto_store_take_refused();
	if (grouped) {
		p->ack_store->batch(p->ack_store_arg, true);
	}
	mqtt_sub_iter_init(&it, sub, l->ver);
	while (i < n && mqtt_sub_iter_next(&it, &f, &o)) {
		existed[i] = false;
		if (!proto_topic_within_limits(p, f.p, f.len)) {
			atomic_fetch_add(&p->m.refused_topics, 1);
			droplog_record(DENY_TOPIC_LIMIT, nmq_session_client_id(s),
			    (const char *)f.p, f.len, o.qos, 1);
			codes[i++] = l->ver == MQTT_PROTO_V5 ? MQTT_RC_TOPIC_FILTER_INVALID : 0x80;
			continue;
		}
		bool shared = mqtt_share_split(f.p, f.len, NULL) == MQTT_SHARE_OK;
		if (shared && o.no_local && l->ver == MQTT_PROTO_V5) {
			// [MQTT-3.8.3-4]
			if (grouped) {
				p->ack_store->batch(p->ack_store_arg, false);
			}
			free(codes);
			free(existed);
			free(acl);
			link_fail(l, MQTT_RC_PROTOCOL_ERROR);
			return -1;
		}
		proto_sub_opts so = sub_opts_of(l, &f, &o, sub_id);
		who.acl           = p->ops->acl_ask != NULL ? acl[i] : PROTO_ACL_NONE;
		int rv            = p->ops->subscribe(
		               p->app, s, &who, (const char *)f.p, f.len, &so, &existed[i]);
		uint8_t rc = (uint8_t)(rv & 0xFF);
		if (rv & PROTO_RC_DISCONNECT) {
			kick = rc;
		}
		if (rc >= 0x80 && l->ver != MQTT_PROTO_V5) {
			rc = 0x80;
		}
		codes[i++] = rc;
	}
	bool stored = proto_store_take_noted();
	(void)proto_store_take_refused();
	mqtt_packet r;
	memset(&r, 0, sizeof(r));
	r.type               = MQTT_SUBACK;
	r.u.suback.packet_id = sub->packet_id;
	r.u.suback.count     = i;
	r.u.suback.codes     = codes;
	// Nothing to wait for (a session that is not stored, no earlier ack
	// waiting: link_ack_then would send at once): the SUBACK goes now and
	// the retained messages after it below, without gathering them.
	// Only this thread adds to acks_waiting, so 0 stays 0 meanwhile.
	bool now = kick != 0 || !grouped || (!stored && atomic_load(&l->acks_waiting) == 0);
	if (now) {
		if (grouped) {
			p->ack_store->batch(p->ack_store_arg, false);
		}
		link_reply(l, &r);
	} else {
		// The retained messages go after the SUBACK: gather the granted
		// filters for sub_after.
		size_t sz = sizeof(sub_granted);
		mqtt_sub_iter_init(&it, sub, l->ver);
		for (uint32_t j = 0; j < i && mqtt_sub_iter_next(&it, &f, &o); j++) {
			if (codes[j] < 0x80) {
				sz += sizeof(proto_sub_opts) + sizeof(bool) + sizeof(uint32_t)
				    + f.len;
			}
		}
		sub_granted *g     = malloc(sz);
		bool         later = false;
		if (g != NULL) {
			g->p             = p;
			g->n             = 0;
			uint32_t granted = 0;
			for (uint32_t j = 0; j < i; j++) {
				granted += codes[j] < 0x80;
			}
			uint8_t *at = (uint8_t *)&g->so[granted];
			mqtt_sub_iter_init(&it, sub, l->ver);
			for (uint32_t j = 0; j < i && mqtt_sub_iter_next(&it, &f, &o); j++) {
				if (codes[j] >= 0x80) {
					continue;
				}
				g->so[g->n++] = sub_opts_of(l, &f, &o, sub_id);
				uint32_t len  = f.len;
				memcpy(at, &existed[j], sizeof(bool));
				at += sizeof(bool);
				memcpy(at, &len, sizeof(len));
				at += sizeof(len);
				memcpy(at, f.p, len);
				at += len;
			}
			session_lock(s);
			later = link_ack_then(l, &r, stored, sub_after, g);
			session_unlock(s);
		} else {
			link_reply(l, &r);
		}
		p->ack_store->batch(p->ack_store_arg, false);
		if (g != NULL) {
			if (later) {
				free(codes);
				free(existed);
				free(acl);
				return 0;
			}
			free(g);
		}
	}
	if (kick != 0) {
		free(codes);
		free(existed);
		free(acl);
		link_fail(l, kick);
		return -1;
	}

	// Retained messages after the SUBACK [MQTT-3.3.1-6].
	mqtt_sub_iter_init(&it, sub, l->ver);
	for (uint32_t j = 0; j < i && mqtt_sub_iter_next(&it, &f, &o); j++) {
		if (codes[j] >= 0x80) {
			continue;
		}
		proto_sub_opts so = sub_opts_of(l, &f, &o, sub_id);
		p->ops->subscribed(p->app, s, (const char *)f.p, f.len, &so, existed[j]);
	}
	free(codes);
	free(existed);
	free(acl);
	return 0;
}

// Handles one UNSUBSCRIBE.
int handle_unsubscribe(nmq_link *l, const mqtt_packet *pk)
{
	nmq_proto              *p     = l->p;
	nmq_session            *s     = l->session;
	const mqtt_unsubscribe *unsub = &pk->u.unsubscribe;
	uint32_t                n     = unsub->count;
	if (n > SUB_MAX_FILTERS) {
		link_fail(l, MQTT_RC_QUOTA_EXCEEDED);
		return -1;
	}
	if (!filters_well_formed(l, pk)) {
		link_fail(l, MQTT_RC_PROTOCOL_ERROR);
		return -1;
	}
	uint8_t *codes = malloc(n);
	if (codes == NULL) {
		proto_count_alloc_failure(p, "unsubscribe");
		link_fail(l, MQTT_RC_UNSPECIFIED);
		return -1;
	}
	mqtt_unsub_iter it;
	mqtt_bytes      f;
	uint32_t        i = 0;
	// The deletes of a persistent session's subscriptions: the UNSUBACK
	// waits for their commit, in their group (as the SUBACK).
	bool grouped = p->ack_store != NULL && p->ack_store->batch != NULL;
	(void)proto_store_take_noted();
	(void)proto_store_take_refused();
	if (grouped) {
		p->ack_store->batch(p->ack_store_arg, true);
	}
	mqtt_unsub_iter_init(&it, unsub);
	while (i < n && mqtt_unsub_iter_next(&it, &f)) {
		codes[i++] = p->ops->unsubscribe(p->app, s, (const char *)f.p, f.len);
	}
	bool stored = proto_store_take_noted();
	(void)proto_store_take_refused();
	if (l->ver != MQTT_PROTO_V5) {
		// A removal the application could not do (the store refused its
		// delete): 3.1.1 has no code to say so, and an UNSUBACK would
		// tell the client it is gone. Closed without it; the client may
		// send it again once reconnected (the others are done).
		for (uint32_t j = 0; j < i; j++) {
			if (codes[j] >= 0x80) {
				if (grouped) {
					p->ack_store->batch(p->ack_store_arg, false);
				}
				free(codes);
				link_fail(l, MQTT_RC_UNSPECIFIED);
				return -1;
			}
		}
	}
	mqtt_packet r;
	memset(&r, 0, sizeof(r));
	r.type               = MQTT_UNSUBACK;
	r.u.suback.packet_id = unsub->packet_id;
	r.u.suback.count     = i;
	r.u.suback.codes     = codes;
	if (grouped) {
		session_lock(s);
		(void)link_ack_then(l, &r, stored, NULL, NULL);
		session_unlock(s);
		p->ack_store->batch(p->ack_store_arg, false);
	} else {
		link_reply(l, &r);
	}
	free(codes);
	return 0;
}
