// CONNECT: validation, authentication, will, session lookup and takeover,
// CONNACK, and the resumption of a persistent session.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nng/codec/mqtt_publish_out.h"
#include "nng/core/log.h"
#include "nng/protocol/proto_impl.h"
#include "nng/transport/listener.h"

// Maps an MQTT 5 CONNACK reason to the nearest 3.1.1 return code.
static uint8_t v3_connack_code(uint8_t rc)
{
	switch (rc) {
	case 0:
		return MQTT_V3_ACCEPTED;
	case MQTT_RC_UNSUPPORTED_VERSION:
		return MQTT_V3_BAD_PROTOCOL;
	case MQTT_RC_CLIENT_ID_INVALID:
		return MQTT_V3_ID_REJECTED;
	case MQTT_RC_BAD_USER_OR_PASSWORD:
		return MQTT_V3_BAD_USER_OR_PASSWORD;
	case MQTT_RC_NOT_AUTHORIZED:
	case MQTT_RC_BANNED:
		return MQTT_V3_NOT_AUTHORIZED;
	default:
		return MQTT_V3_SERVER_UNAVAILABLE;
	}
}

// Sends a refusing CONNACK in the client's version and shuts down.
static int refuse(nmq_link *l, uint8_t ver, uint8_t rc)
{
	mqtt_packet pk;
	memset(&pk, 0, sizeof(pk));
	pk.type             = MQTT_CONNACK;
	l->ver              = ver == MQTT_PROTO_V5 ? MQTT_PROTO_V5 : MQTT_PROTO_V311;
	pk.u.connack.reason = l->ver == MQTT_PROTO_V5 ? rc : v3_connack_code(rc);
	link_send_packet(l, &pk);
	conn_shutdown(l->conn);
	l->shutting    = true;
	l->deadline_ms = nmq_clock_ms() + 2000;
	timer_wheel_schedule(l->p->tw, &l->timer, l->deadline_ms);
	log_info("conn", "peer=%s event=connect_refused reason=%s(0x%02x)", conn_peer(l->conn),
	    mqtt_reason_name(rc), rc);
	return -1;
}

// Builds a shared message from topic, v5 properties and payload. The
// forwardable properties are re-encoded from the decoded set; message
// expiry becomes an absolute deadline. Returns NULL on allocation failure.
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

// Makes a unique client id for a client that sent an empty one.
static void assign_client_id(nmq_proto *p, char *buf, size_t len)
{
	static atomic_ullong counter;
	uint64_t             n = atomic_fetch_add(&counter, 1);
	snprintf(
	    buf, len, "nmq-%llx-%llx", (unsigned long long)nmq_clock_ms(), (unsigned long long)n);
	(void)p;
}

// Handles the first packet of a connection, which must be CONNECT.
int handle_connect(nmq_link *l, const uint8_t *frame, size_t len)
{
	nmq_proto  *p = l->p;
	mqtt_packet pk;
	if (len < 1 || (frame[0] >> 4) != MQTT_CONNECT) {
		// The first packet must be CONNECT [MQTT-3.1.0-1].
		log_info("conn", "peer=%s reason=first_packet_not_connect", conn_peer(l->conn));
		conn_close(l->conn);
		return -1;
	}
	int           rc = mqtt_decode(frame, len, MQTT_PROTO_V311, &pk);
	mqtt_connect *c  = &pk.u.connect;
	if (rc == MQTT_RC_UNSUPPORTED_VERSION) {
		return refuse(l, c->proto_level, MQTT_RC_UNSUPPORTED_VERSION);
	}
	if (rc != 0) {
		// Malformed CONNECT: a v5 client may be told why.
		if (len >= 9 && c->proto_level == MQTT_PROTO_V5) {
			return refuse(l, MQTT_PROTO_V5, (uint8_t)rc);
		}
		log_info("conn", "peer=%s reason=%s(0x%02x) packet=CONNECT", conn_peer(l->conn),
		    mqtt_reason_name((uint8_t)rc), rc);
		conn_close(l->conn);
		return -1;
	}
	uint8_t ver = c->proto_level == MQTT_PROTO_V5 ? MQTT_PROTO_V5 : MQTT_PROTO_V311;
	l->ver      = ver;
	// The client's Maximum Packet Size bounds every packet sent from now
	// on, a refusing CONNACK included (5.0 [MQTT-3.1.2-24]).
	l->client_max_packet = proto_lim(p)->client_max_packet_size;
	if (ver == MQTT_PROTO_V5 && (c->props.present & MQTT_PBIT(MQTT_PROP_MAX_PACKET_SIZE))) {
		l->client_max_packet = c->props.maximum_packet_size;
	}
	if (ver == MQTT_PROTO_V5 && (c->props.present & MQTT_PBIT(MQTT_PROP_AUTH_METHOD))) {
		// Enhanced authentication is not supported.
		return refuse(l, ver, MQTT_RC_BAD_AUTH_METHOD);
	}

	// Client identifier rules.
	char  idbuf[64];
	char *client_id = NULL;
	bool  assigned  = false;
	if (c->client_id.len == 0) {
		if (ver != MQTT_PROTO_V5 && !c->clean_start) {
			return refuse(l, ver, MQTT_RC_CLIENT_ID_INVALID); // [MQTT-3.1.3-8]
		}
		if (c->proto_level == MQTT_PROTO_V31) {
			return refuse(l, ver, MQTT_RC_CLIENT_ID_INVALID);
		}
		assign_client_id(p, idbuf, sizeof(idbuf));
		client_id = strdup(idbuf);
		assigned  = true;
	} else {
		if (c->proto_level == MQTT_PROTO_V31 && c->client_id.len > 23) {
			return refuse(l, ver, MQTT_RC_CLIENT_ID_INVALID);
		}
		client_id = strndup((const char *)c->client_id.p, c->client_id.len);
	}
	if (client_id == NULL) {
		return refuse(l, ver, MQTT_RC_SERVER_UNAVAILABLE);
	}

	// Authentication.
	proto_client_info info;
	memset(&info, 0, sizeof(info));
	info.client_id = client_id;
	if (c->has_username) {
		info.username     = c->username.p;
		info.username_len = c->username.len;
	}
	if (c->has_password) {
		info.password     = c->password.p;
		info.password_len = c->password.len;
	}
	char          cn[256];
	nmq_listener *ln         = conn_tag(l->conn);
	info.peer                = conn_peer(l->conn);
	info.proto_ver           = c->proto_level;
	info.listener            = ln != NULL ? listener_name(ln) : "";
	info.tls_peer_ok         = listener_conn_authorized(l->conn, cn, sizeof(cn));
	info.tls_cn              = cn;
	info.listener_over_limit = listener_conn_over_limit(l->conn);
	uint8_t arc              = p->ops->authenticate(p->app, &info);
	if (arc == 0 && proto_lim(p)->max_connections > 0
	    && (uint64_t)atomic_load(&p->m.connections) >= proto_lim(p)->max_connections) {
		// mqtt.max_connections: one more client would pass the limit.
		atomic_fetch_add(&p->m.refused_connections, 1);
		arc = MQTT_RC_QUOTA_EXCEEDED;
	}
	if (arc != 0) {
		free(client_id);
		return refuse(l, ver, arc);
	}

	// Will message.
	if (c->will_flag) {
		l->will = proto_msg_build(ver, c->will_topic,
		    ver == MQTT_PROTO_V5 ? &c->will_props : NULL, c->will_payload, c->will_qos,
		    c->will_retain, 0);
		if (l->will == NULL) {
			free(client_id);
			return refuse(l, ver, MQTT_RC_SERVER_UNAVAILABLE);
		}
		if (ver == MQTT_PROTO_V5
		    && (c->will_props.present & MQTT_PBIT(MQTT_PROP_WILL_DELAY))) {
			l->will_delay_s = c->will_props.will_delay;
		}
	}

	// Negotiated parameters.
	l->keepalive              = c->keep_alive;
	bool     server_keepalive = false;
	uint32_t max_ka           = proto_lim(p)->max_keepalive;
	if (ver == MQTT_PROTO_V5 && max_ka > 0 && max_ka < 65535
	    && (c->keep_alive == 0 || c->keep_alive > max_ka)) {
		// mqtt.max_keepalive: the client must use ours [MQTT-3.2.2-21].
		l->keepalive     = (uint16_t)max_ka;
		server_keepalive = true;
	}
	l->clean_start          = c->clean_start;
	l->client_receive_max   = 65535;
	l->request_problem_info = true;
	uint32_t expiry         = c->clean_start ? 0 : UINT32_MAX;
	if (ver == MQTT_PROTO_V5) {
		const mqtt_props *pr = &c->props;
		expiry               = 0;
		if (pr->present & MQTT_PBIT(MQTT_PROP_SESSION_EXPIRY)) {
			expiry = pr->session_expiry;
		}
		l->session_zero_expiry = expiry == 0;
		if (pr->present & MQTT_PBIT(MQTT_PROP_RECEIVE_MAXIMUM)) {
			l->client_receive_max = pr->receive_maximum;
		}
		if (pr->present & MQTT_PBIT(MQTT_PROP_TOPIC_ALIAS_MAX)) {
			l->client_alias_max = pr->topic_alias_maximum;
		}
		if (pr->present & MQTT_PBIT(MQTT_PROP_REQUEST_PROBLEM)) {
			l->request_problem_info = pr->request_problem_info != 0;
		}
		l->in_alias_max = proto_lim(p)->max_topic_alias;
		if (l->in_alias_max > 0) {
			l->in_alias = calloc((size_t)l->in_alias_max + 1, sizeof(char *));
			if (l->in_alias == NULL) {
				l->in_alias_max = 0;
			}
		}
	}

	// Session lookup, takeover and creation.
	nmq_session   *s;
	nmq_conn      *old_conn        = NULL; // held; the old link may be freed
	bool           old_v5          = false;
	nmq_session   *ended           = NULL;
	bool           session_present = false;
	const uint8_t *owner           = !c->has_username ? NULL
	              : c->username.p != NULL             ? c->username.p
	                                                  : (const uint8_t *)"";
	size_t         owner_len       = c->has_username ? c->username.len : 0;
	pthread_mutex_lock(&p->tbl_mtx);
	s = proto_table_find(p, client_id);
	if (s != NULL) {
		nmq_mutex_lock(&s->mtx);
		if (proto_lim(p)->client_id_owner_check && !c->clean_start
		    && !session_owned_by(s, owner, owner_len)) {
			// Another user's session is not resumed (its queue and
			// subscriptions are not handed over). A clean start by
			// another user discards it as usual and starts a session of
			// its own.
			nmq_mutex_unlock(&s->mtx);
			pthread_mutex_unlock(&p->tbl_mtx);
			log_warn_rl("conn",
			    "peer=%s client_id=%s event=client_id_owned_by_another_user",
			    conn_peer(l->conn), client_id);
			free(client_id);
			atomic_fetch_add(&p->m.refused_connections, 1);
			return refuse(l, ver, MQTT_RC_CLIENT_ID_INVALID);
		}
		if (s->link != NULL) {
			nmq_link *old   = s->link;
			old->taken_over = true;
			old_conn        = old->conn;
			old_v5          = old->ver == MQTT_PROTO_V5;
			conn_hold(old_conn);
			if (old_v5) {
				link_send_disconnect(old, MQTT_RC_SESSION_TAKEN_OVER);
			}
			__atomic_store_n(&s->link, NULL, __ATOMIC_RELAXED);
		}
		if (c->clean_start || s->expiry_s == 0) {
			// Discard the old session [MQTT-3.1.2-4]; a delayed will
			// of the old session is published now. A session that
			// lasts only as long as its connection (3.1.1 CleanSession
			// 1, 5.0 Session Expiry 0) ends with the connection taken
			// over, so it is not resumed either: its state is never
			// reused [MQTT-3.1.2-6] (3.1.1) and Session Present is 0.
			s->ended = true;
			proto_table_remove(p, s);
			ended = s;
			s     = NULL;
		} else {
			session_present = true;
			if (s->will != NULL) {
				// Reconnected within the will delay: no will.
				nmq_msg_release(s->will);
				s->will = NULL;
			}
		}
		if (ended != NULL) {
			nmq_mutex_unlock(&ended->mtx);
		}
	}
	if (s == NULL) {
		s = session_alloc(p, client_id, owner, owner_len);
		if (s == NULL) {
			pthread_mutex_unlock(&p->tbl_mtx);
			free(client_id);
			return refuse(l, ver, MQTT_RC_SERVER_UNAVAILABLE);
		}
		nmq_mutex_lock(&s->mtx);
		proto_table_insert(p, s); // the table keeps the first reference
	}
	// s->mtx is held here. The table is done with: the CONNACK, the resend
	// and the first pump run under the session lock only, so that a
	// reconnect with a long queue does not hold up other CONNECTs (a
	// concurrent CONNECT with this client id waits for s->mtx and then
	// takes the session over from this link).
	pthread_mutex_unlock(&p->tbl_mtx);
	nmq_session_hold(s); // the link's reference
	s->ver          = ver;
	s->expiry_s     = expiry;
	uint32_t window = proto_lim(p)->max_inflight_window;
	s->infl_max     = l->client_receive_max < window ? l->client_receive_max : window;
	if (s->infl_max == 0) {
		s->infl_max = 1;
	}
	l->session   = s;
	l->connected = true;
	if (c->has_username) {
		// Usually the session's creator: share its copy (the link holds
		// the session until it is freed).
		if (session_owned_by(s, owner, owner_len)) {
			l->username        = (char *)session_owner(s);
			l->username_shared = true;
		} else {
			l->username = strndup((const char *)c->username.p, c->username.len);
		}
	}

	// CONNACK first, then the resumed state.
	mqtt_packet ack;
	memset(&ack, 0, sizeof(ack));
	ack.type = MQTT_CONNACK;
	// MQTT 3.1 has no Session Present flag: its first CONNACK byte is
	// reserved and always 0.
	ack.u.connack.session_present = session_present && c->proto_level != MQTT_PROTO_V31;
	ack.u.connack.reason          = 0;
	if (ver == MQTT_PROTO_V5) {
		mqtt_props *ap = &ack.u.connack.props;
		ap->present    = MQTT_PBIT(MQTT_PROP_RECEIVE_MAXIMUM)
		    | MQTT_PBIT(MQTT_PROP_MAX_PACKET_SIZE) | MQTT_PBIT(MQTT_PROP_RETAIN_AVAILABLE)
		    | MQTT_PBIT(MQTT_PROP_WILDCARD_SUB_AVAIL) | MQTT_PBIT(MQTT_PROP_SUB_ID_AVAIL)
		    | MQTT_PBIT(MQTT_PROP_SHARED_SUB_AVAIL);
		uint32_t rmax           = proto_lim(p)->max_awaiting_rel;
		ap->receive_maximum     = (uint16_t)(rmax == 0 ? 1 : rmax > 65535 ? 65535 : rmax);
		ap->maximum_packet_size = proto_lim(p)->max_packet_size;
		ap->retain_available    = 1;
		ap->wildcard_sub_available = 1;
		ap->sub_id_available       = 1;
		ap->shared_sub_available   = 1;
		if (proto_lim(p)->max_topic_alias > 0) {
			ap->present |= MQTT_PBIT(MQTT_PROP_TOPIC_ALIAS_MAX);
			ap->topic_alias_maximum = proto_lim(p)->max_topic_alias;
		}
		if (server_keepalive) {
			ap->present |= MQTT_PBIT(MQTT_PROP_SERVER_KEEP_ALIVE);
			ap->server_keep_alive = l->keepalive;
		}
		if (assigned) {
			ap->present |= MQTT_PBIT(MQTT_PROP_ASSIGNED_CLIENT_ID);
			ap->assigned_client_id.p   = (const uint8_t *)client_id;
			ap->assigned_client_id.len = (uint32_t)strlen(client_id);
		}
		char rinfo[300];
		if ((c->props.present & MQTT_PBIT(MQTT_PROP_REQUEST_RESPONSE))
		    && c->props.request_response_info) {
			snprintf(rinfo, sizeof(rinfo), "reply/%.250s", client_id);
			ap->present |= MQTT_PBIT(MQTT_PROP_RESPONSE_INFO);
			ap->response_info.p   = (const uint8_t *)rinfo;
			ap->response_info.len = (uint32_t)strlen(rinfo);
		}
		link_send_packet(l, &ack);
	} else {
		link_send_packet(l, &ack);
	}
	__atomic_store_n(&s->link, l, __ATOMIC_RELAXED);
	// Only the in-flight window that the new connection allows is filled;
	// everything else waits in the queue.
	session_resend_locked(s, false);
	session_pump_locked(s);
	session_timer_update_locked(s);
	nmq_mutex_unlock(&s->mtx);

	long n  = atomic_fetch_add(&p->m.connections, 1) + 1;
	long mx = atomic_load(&p->m.connections_max);
	while (n > mx && !atomic_compare_exchange_weak(&p->m.connections_max, &mx, n)) { }

	if (old_conn != NULL) {
		log_info("conn", "client_id=%s peer=%s event=session_taken_over", client_id,
		    conn_peer(old_conn));
		if (old_v5) {
			conn_shutdown(old_conn);
		} else {
			conn_close(old_conn);
		}
		conn_release(old_conn);
	}
	if (ended != NULL) {
		// Publish its pending will, drop its subscriptions.
		nmq_msg *will = NULL;
		nmq_mutex_lock(&ended->mtx);
		will        = ended->will;
		ended->will = NULL;
		session_clear_locked(ended);
		nmq_mutex_unlock(&ended->mtx);
		timer_wheel_cancel(p->tw, &ended->timer);
		if (will != NULL) {
			proto_publish_will(p, will);
		}
		p->ops->session_end(p->app, ended);
		nmq_session_release(ended);
	}

	// Keepalive deadline replaces the CONNECT deadline.
	if (l->keepalive > 0) {
		uint64_t span
		    = (uint64_t)(l->keepalive * 1000.0 * proto_lim(p)->keepalive_multiplier);
		timer_wheel_schedule(p->tw, &l->timer, nmq_clock_ms() + span);
	} else {
		timer_wheel_cancel(p->tw, &l->timer);
	}
	log_info("conn",
	    "client_id=%s peer=%s event=connected proto=%u clean_start=%d keepalive=%u", client_id,
	    conn_peer(l->conn), c->proto_level, c->clean_start, c->keep_alive);
	p->ops->client_status(
	    p->app, s, true, 0, conn_peer(l->conn), l->username, l->keepalive, l->clean_start);
	free(client_id);
	return 0;
}
