// CONNECT: validation, authentication, will, session lookup and takeover,
// CONNACK, and the resumption of a persistent session.
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nng/codec/mqtt_publish_out.h"
#include "nng/core/bridge_id.h"
#include "nng/core/droplog.h"
#include "nng/core/log.h"
#include "nng/protocol/link.h"
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

// Makes a unique client id for a client that sent an empty one.
static void assign_client_id(nmq_proto *p, char *buf, size_t len)
{
	static atomic_ullong counter;
	uint64_t             n = atomic_fetch_add(&counter, 1);
	snprintf(
	    buf, len, "nmq-%llx-%llx", (unsigned long long)nmq_clock_ms(), (unsigned long long)n);
	(void)p;
}

// What session_open() leaves to do once the session lock is released: the
// connection the session was taken from is closed, a session discarded by
// clean start is finished (its pending will published, its subscriptions
// dropped).
static void open_finish(nmq_proto *p, const session_open_res *so, const char *client_id)
{
	(void)p;
	if (so->old_conn != NULL) {
		log_info("conn", "client_id=%s peer=%s event=session_taken_over", client_id,
		    conn_peer(so->old_conn));
		if (so->old_v5) {
			conn_shutdown(so->old_conn);
		} else {
			conn_close(so->old_conn);
		}
		conn_release(so->old_conn);
	}
	if (so->ended != NULL) {
		session_discard(so->ended);
	}
}

// Once a CONNACK that waited for the store went: what waited behind it goes
// (arg: the connection, held until this returns). Not sent (the commit
// failed: the connection ends), nothing goes.
static void connack_after(nmq_session *s, void *arg, bool durable)
{
	if (durable) {
		session_connack_sent(s, arg);
	}
}

// Sends the CONNACK (session locked). When the CONNECT discarded a stored
// session (clean start), its delete is queued in the store: the CONNACK
// waits for its commit (a crash right after it must not bring the
// discarded session back), and until it has gone nothing else is sent on
// the link (connack_wait: deliveries stay queued in the session); the
// waiting ack keeps its own copy of the strings the packet refers to
// (assigned client id, response information). A CONNACK with no store
// write to wait for goes at once.
static void send_connack(nmq_link *l, const mqtt_packet *ack, bool discarded_stored)
{
	if (discarded_stored && l->p->store != NULL) {
		if (link_ack_then(l, ack, true, connack_after, l->conn)) {
			atomic_store(&l->connack_wait, true);
		}
	} else {
		link_send_packet(l, ack);
	}
}

// What authenticate may park: the link and the frame being handled.
typedef struct defer_ctx {
	nmq_link      *l;
	const uint8_t *frame;
	size_t         len;
	proto_pending *t;
} defer_ctx;

// Parks the CONNECT being handled; see proto.h.
proto_pending *proto_connect_defer(const proto_client_info *info)
{
	defer_ctx *d = info->defer_ctx;
	if (d == NULL || d->t != NULL) {
		return NULL;
	}
	d->t = link_park(d->l, true, d->frame, d->len, NULL, 0);
	return d->t;
}

// Handles the first packet of a connection, which must be CONNECT.
int handle_connect(nmq_link *l, const uint8_t *frame, size_t len)
{
	return link_connect_run(l, frame, len, -1);
}

// Handles a CONNECT; answer is the application's answer to a parked
// CONNECT (a reason code, maybe with PROTO_AUTH_SUPERUSER), or -1 to ask.
int link_connect_run(nmq_link *l, const uint8_t *frame, size_t len, int answer)
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
	l->bridge   = ver != MQTT_PROTO_V5 && c->bridge_marker;
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
		if (p->store != NULL
		    && nmq_bridge_client_id((const char *)c->client_id.p, c->client_id.len)) {
			// The durable store keys the bridges' cache rows by
			// "$bridge/<name>": such a session's queue would be the
			// bridge's (docs/persistence.md).
			log_warn_rl("conn",
			    "peer=%s event=client_id_refused reason=reserved_prefix",
			    conn_peer(l->conn));
			return refuse(l, ver, MQTT_RC_CLIENT_ID_INVALID);
		}
		client_id = strndup((const char *)c->client_id.p, c->client_id.len);
	}
	if (client_id == NULL) {
		proto_count_alloc_failure(p, "client_id");
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
	nmq_listener *ln = conn_tag(l->conn);
	info.peer        = conn_peer(l->conn);
	info.proto_ver   = c->proto_level;
	info.keepalive   = c->keep_alive;
	info.listener    = ln != NULL ? listener_name(ln) : "";
	info.tls_peer_ok = listener_conn_authorized(l->conn, cn, sizeof(cn));
	info.tls_cn      = cn;
	char     subject[sizeof(((tls_peer *)0)->subject)];
	tls_peer tp;
	subject[0] = '\0';
	if (cn[0] != '\0' && listener_conn_peer(l->conn, &tp) && tp.verified) {
		snprintf(subject, sizeof(subject), "%s", tp.subject);
	}
	info.tls_subject         = subject;
	info.listener_over_limit = listener_conn_over_limit(l->conn);
	info.local_port          = ln != NULL ? (uint16_t)listener_port(ln) : 0;
	defer_ctx dc             = { .l = l, .frame = frame, .len = len, .t = NULL };
	info.defer_ctx           = answer < 0 ? &dc : NULL;
	bool super               = answer >= 0 && (answer & PROTO_AUTH_SUPERUSER) != 0;
	info.superuser           = &super;
	uint8_t arc = answer < 0 ? p->ops->authenticate(p->app, &info) : (uint8_t)(answer & 0xFF);
	if (answer >= 0 && p->ops->auth_answered != NULL) {
		p->ops->auth_answered(p->app, &info, arc);
	}
	if (arc == PROTO_AUTH_PENDING) {
		if (dc.t != NULL) {
			// Parked (link_park): reading paused; frames already read
			// are held (link_frame) until the answer.
			free(client_id);
			return 0;
		}
		arc = MQTT_RC_SERVER_UNAVAILABLE;
	}
	if (arc == 0 && proto_lim(p)->max_connections > 0
	    && (uint64_t)atomic_load(&p->m.connections) >= proto_lim(p)->max_connections) {
		// mqtt.max_connections: one more client would pass the limit.
		atomic_fetch_add(&p->m.refused_connections, 1);
		droplog_record(DENY_MAX_CONNECTIONS, client_id, NULL, 0, DROPLOG_NO_QOS, 1);
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
			proto_count_alloc_failure(p, "will");
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
				// Counted and logged; the CONNACK then offers no
				// topic aliases.
				proto_count_alloc_failure(p, "topic_alias");
				l->in_alias_max = 0;
			}
		}
	}

	// Session lookup, takeover and creation. The link's copy of the user
	// name is made first, so that nothing can fail once attached.
	const uint8_t *owner     = !c->has_username ? NULL
	        : c->username.p != NULL             ? c->username.p
	                                            : (const uint8_t *)"";
	size_t         owner_len = c->has_username ? c->username.len : 0;
	char          *username  = NULL;
	if (c->has_username) {
		username = strndup((const char *)owner, owner_len);
		if (username == NULL) {
			proto_count_alloc_failure(p, "username");
			free(client_id);
			return refuse(l, ver, MQTT_RC_SERVER_UNAVAILABLE);
		}
	}
	// A session discarded by clean start: its record's delete (committed
	// before the CONNACK goes) and its pending will's writes (open_finish)
	// in one store group, so that a crash in between does not lose the
	// will.
	proto_store_batch(p, true);
	session_open_res so;
	nmq_err          err = session_open(p, client_id, owner, owner_len, c->clean_start, &so);
	if (err != NMQ_OK) {
		open_finish(p, &so, client_id);
		proto_store_batch(p, false);
		free(username);
		if (err == NMQ_EACCES) {
			log_warn_rl("conn",
			    "peer=%s client_id=%s event=client_id_owned_by_another_user",
			    conn_peer(l->conn), client_id);
			atomic_fetch_add(&p->m.refused_connections, 1);
			droplog_record(DENY_CLIENT_ID_OWNER, client_id, NULL, 0, DROPLOG_NO_QOS, 1);
		}
		free(client_id);
		return refuse(l, ver,
		    err == NMQ_EACCES ? MQTT_RC_CLIENT_ID_INVALID : MQTT_RC_SERVER_UNAVAILABLE);
	}
	nmq_session *s = so.s; // locked, held for this link
	l->session     = s;
	l->connected   = true;
	l->superuser   = arc == 0 && super;
	l->local_port  = info.local_port;
	if (username != NULL) {
		l->username = username;
		if (session_owned_by(s, owner, owner_len)) {
			// Usually the session's creator: share its copy (the link
			// holds the session until it is freed).
			free(username);
			l->username        = (char *)session_owner(s);
			l->username_shared = true;
		}
	}

	// CONNACK first, then the resumed state.
	mqtt_packet ack;
	memset(&ack, 0, sizeof(ack));
	ack.type = MQTT_CONNACK;
	// MQTT 3.1 has no Session Present flag: its first CONNACK byte is
	// reserved and always 0.
	ack.u.connack.session_present = so.present && c->proto_level != MQTT_PROTO_V31;
	ack.u.connack.reason          = 0;
	char rinfo[300]; // the Response Information the CONNACK refers to
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
		if (l->in_alias_max > 0) {
			ap->present |= MQTT_PBIT(MQTT_PROP_TOPIC_ALIAS_MAX);
			ap->topic_alias_maximum = l->in_alias_max;
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
		if ((c->props.present & MQTT_PBIT(MQTT_PROP_REQUEST_RESPONSE))
		    && c->props.request_response_info) {
			snprintf(rinfo, sizeof(rinfo), "reply/%.250s", client_id);
			ap->present |= MQTT_PBIT(MQTT_PROP_RESPONSE_INFO);
			ap->response_info.p   = (const uint8_t *)rinfo;
			ap->response_info.len = (uint32_t)strlen(rinfo);
		}
	}
	send_connack(l, &ack, so.ended_stored);
	session_attach_locked(s, l, ver, expiry, l->client_receive_max);
	session_unlock(s);

	long n  = atomic_fetch_add(&p->m.connections, 1) + 1;
	long mx = atomic_load(&p->m.connections_max);
	while (n > mx && !atomic_compare_exchange_weak(&p->m.connections_max, &mx, n)) { }

	open_finish(p, &so, client_id);
	proto_store_batch(p, false);

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
