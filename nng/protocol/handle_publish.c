// PUBLISH from a client: topic aliases, inbound QoS 2 state (exactly once
// until PUBREL), the Receive Maximum quota, routing and the ack.
#include <stdlib.h>
#include <string.h>

#include "nng/core/log.h"
#include "nng/protocol/proto_impl.h"

// Drops inbound QoS 2 ids that waited longer than await_rel_timeout.
static void purge_rel(nmq_session *s, uint64_t now)
{
	uint64_t limit = (uint64_t)proto_lim(s->p)->await_rel_timeout_s * 1000;
	if (limit == 0) {
		return;
	}
	for (uint32_t i = 0; i < s->rel_len;) {
		if (now - s->rel[i].at_ms > limit) {
			s->rel[i] = s->rel[--s->rel_len];
			atomic_fetch_add(&s->p->m.await_rel_expired, 1);
		} else {
			i++;
		}
	}
}

// Handles one PUBLISH. Returns 0, or -1 when the connection is ended.
int handle_publish(nmq_link *l, const mqtt_packet *pk)
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
		nmq_mutex_lock(&s->mtx);
		link_send_packet(l, &r);
		nmq_mutex_unlock(&s->mtx);
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
		link_fail(l, MQTT_RC_TOPIC_NAME_INVALID);
		return -1;
	}

	// Inbound QoS 2: a resent PUBLISH before PUBREL is acknowledged again
	// but not routed again.
	if (pub->qos == 2) {
		bool dup = false;
		nmq_mutex_lock(&s->mtx);
		for (uint32_t i = 0; i < s->rel_len; i++) {
			if (s->rel[i].pid == pub->packet_id) {
				dup = true;
				break;
			}
		}
		if (!dup) {
			uint64_t now = nmq_clock_ms();
			if (s->rel_len >= proto_lim(p)->max_awaiting_rel) {
				purge_rel(s, now);
			}
			if (s->rel_len >= proto_lim(p)->max_awaiting_rel) {
				nmq_mutex_unlock(&s->mtx);
				// Over our Receive Maximum [MQTT-3.3.4-9].
				link_fail(l, MQTT_RC_RECEIVE_MAX_EXCEEDED);
				return -1;
			}
			if (s->rel_len == s->rel_cap) {
				uint32_t   ncap = s->rel_cap ? s->rel_cap * 2 : 4;
				rel_entry *nr   = realloc(s->rel, ncap * sizeof(*nr));
				if (nr == NULL) {
					nmq_mutex_unlock(&s->mtx);
					link_fail(l, MQTT_RC_UNSPECIFIED);
					return -1;
				}
				s->rel     = nr;
				s->rel_cap = ncap;
			}
			s->rel[s->rel_len].pid   = pub->packet_id;
			s->rel[s->rel_len].at_ms = now;
			s->rel_len++;
		}
		nmq_mutex_unlock(&s->mtx);
		if (dup) {
			mqtt_packet r;
			memset(&r, 0, sizeof(r));
			r.type            = MQTT_PUBREC;
			r.u.ack.packet_id = pub->packet_id;
			nmq_mutex_lock(&s->mtx);
			link_send_packet(l, &r);
			nmq_mutex_unlock(&s->mtx);
			return 0;
		}
	}

	atomic_fetch_add_explicit(&p->m.msgs_received, 1, memory_order_relaxed);
	nmq_msg *m = proto_msg_build(l->ver, topic, l->ver == MQTT_PROTO_V5 ? &pub->props : NULL,
	    pub->payload, pub->qos, pub->retain, s->id);
	if (m == NULL) {
		link_fail(l, MQTT_RC_UNSPECIFIED);
		return -1;
	}
	proto_who who = { s->client_id, l->username, conn_peer(l->conn) };
	int       rv  = p->ops->route(p->app, s, &who, m);
	uint8_t   rc  = (uint8_t)(rv & 0xFF);
	nmq_msg_release(m);
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
	}

	if (pub->qos > 0) {
		mqtt_packet r;
		memset(&r, 0, sizeof(r));
		r.type            = pub->qos == 1 ? MQTT_PUBACK : MQTT_PUBREC;
		r.u.ack.packet_id = pub->packet_id;
		r.u.ack.reason    = l->ver == MQTT_PROTO_V5 ? rc : 0;
		if (pub->qos == 2 && rc >= 0x80) {
			// A refused QoS 2 flow ends here: forget the id.
			nmq_mutex_lock(&s->mtx);
			for (uint32_t i = 0; i < s->rel_len; i++) {
				if (s->rel[i].pid == pub->packet_id) {
					s->rel[i] = s->rel[--s->rel_len];
					break;
				}
			}
			nmq_mutex_unlock(&s->mtx);
		}
		nmq_mutex_lock(&s->mtx);
		link_send_packet(l, &r);
		nmq_mutex_unlock(&s->mtx);
	}
	if (rv & PROTO_RC_DISCONNECT) {
		link_fail(l, rc);
		return -1;
	}
	return 0;
}
