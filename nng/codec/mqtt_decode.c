// Decoding of complete MQTT 3.1/3.1.1/5.0 frames, and the SUBSCRIBE and
// UNSUBSCRIBE list iterators.

#include "nng/codec/mqtt_codec_priv.h"

#define MALFORMED MQTT_RC_MALFORMED
#define PROTOCOL  MQTT_RC_PROTOCOL_ERROR

// Returns true if reason is in the zero-terminated-by-0xFF list.
static bool in_list(const uint8_t *list, uint8_t reason)
{
	for (; *list != 0xFF; list++) {
		if (*list == reason) {
			return true;
		}
	}
	return false;
}

static const uint8_t rc_connack[] = { 0x00, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88,
	0x89, 0x8A, 0x8C, 0x90, 0x95, 0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F, 0xFF };
static const uint8_t rc_puback[]  = { 0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99, 0xFF };
static const uint8_t rc_pubrel[]  = { 0x00, 0x92, 0xFF };
static const uint8_t rc_suback[]
    = { 0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2, 0xFF };
static const uint8_t rc_unsuback[]   = { 0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91, 0xFF };
static const uint8_t rc_disconnect[] = { 0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D,
	0x8E, 0x8F, 0x90, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9E,
	0x9F, 0xA0, 0xA1, 0xA2, 0xFF };
static const uint8_t rc_auth[]       = { 0x00, 0x18, 0x19, 0xFF };
static const uint8_t rc_v3_suback[]  = { 0x00, 0x01, 0x02, 0x80, 0xFF };

// Returns true if reason is a reason code the specification of version
// proto allows in a packet of this type (for SUBACK/UNSUBACK: one payload
// entry; for a 3.1.1 CONNACK: the return code 0..5).
bool mqtt_reason_valid(uint8_t type, uint8_t proto, uint8_t reason)
{
	if (proto != MQTT_PROTO_V5) {
		switch (type) {
		case MQTT_CONNACK:
			return reason <= MQTT_V3_NOT_AUTHORIZED;
		case MQTT_SUBACK:
			return in_list(rc_v3_suback, reason);
		default:
			return reason == 0;
		}
	}
	switch (type) {
	case MQTT_CONNACK:
		return in_list(rc_connack, reason);
	case MQTT_PUBACK:
	case MQTT_PUBREC:
		return in_list(rc_puback, reason);
	case MQTT_PUBREL:
	case MQTT_PUBCOMP:
		return in_list(rc_pubrel, reason);
	case MQTT_SUBACK:
		return in_list(rc_suback, reason);
	case MQTT_UNSUBACK:
		return in_list(rc_unsuback, reason);
	case MQTT_DISCONNECT:
		return in_list(rc_disconnect, reason);
	case MQTT_AUTH:
		return in_list(rc_auth, reason);
	default:
		return false;
	}
}

// Returns the fixed-header flags a packet type must carry, or -1 for
// PUBLISH, whose flags carry DUP, QoS and RETAIN.
static int required_flags(uint8_t type)
{
	switch (type) {
	case MQTT_PUBLISH:
		return -1;
	case MQTT_PUBREL:
	case MQTT_SUBSCRIBE:
	case MQTT_UNSUBSCRIBE:
		return 0x2;
	default:
		return 0;
	}
}

// Decodes the variable header and payload of a CONNECT. Returns 0,
// MQTT_RC_UNSUPPORTED_VERSION (with proto_level set), MQTT_RC_MALFORMED
// (with proto_level 0 for an unknown protocol name),
// MQTT_RC_PROTOCOL_ERROR (from the properties) or MQTT_RC_TOPIC_NAME_INVALID
// (a will topic that is valid UTF-8 but not a valid topic name).
static int decode_connect(mqtt_rd *r, mqtt_connect *c)
{
	mqtt_bytes name;
	uint8_t    level, flags;
	int        rc;

	if (!rd_bin(r, &name) || !rd_u8(r, &level)) {
		return MALFORMED;
	}
	if (name.len == 4 && memcmp(name.p, "MQTT", 4) == 0) {
		// 0x84: a 3.1.1 bridge's marker (bit 7), as Mosquitto sends it.
		c->bridge_marker = level == (MQTT_PROTO_V311 | 0x80);
		c->proto_level   = c->bridge_marker ? MQTT_PROTO_V311 : level;
		if (level != MQTT_PROTO_V311 && level != MQTT_PROTO_V5 && !c->bridge_marker) {
			return MQTT_RC_UNSUPPORTED_VERSION;
		}
	} else if (name.len == 6 && memcmp(name.p, "MQIsdp", 6) == 0) {
		c->bridge_marker = level == (MQTT_PROTO_V31 | 0x80);
		c->proto_level   = c->bridge_marker ? MQTT_PROTO_V31 : level;
		if (level != MQTT_PROTO_V31 && !c->bridge_marker) {
			return MQTT_RC_UNSUPPORTED_VERSION;
		}
	} else {
		// Not MQTT at all: proto_level stays 0, nothing is answered
		// [MQTT-3.1.2-1], [MQTT-3.1.4-1].
		return MALFORMED;
	}
	if (!rd_u8(r, &flags) || !rd_u16(r, &c->keep_alive)) {
		return MALFORMED;
	}
	if ((flags & 0x01) != 0) {
		return MALFORMED; // reserved bit
	}
	c->clean_start  = (flags & 0x02) != 0;
	c->will_flag    = (flags & 0x04) != 0;
	c->will_qos     = (flags >> 3) & 0x3;
	c->will_retain  = (flags & 0x20) != 0;
	c->has_password = (flags & 0x40) != 0;
	c->has_username = (flags & 0x80) != 0;
	if (c->will_qos == 3) {
		return MALFORMED;
	}
	if (!c->will_flag && (c->will_qos != 0 || c->will_retain)) {
		return MALFORMED;
	}
	if (level != MQTT_PROTO_V5 && c->has_password && !c->has_username) {
		return MALFORMED;
	}
	if (level == MQTT_PROTO_V5) {
		if ((rc = mqtt_props_decode_ctx(r, MQTT_PCTX_CONNECT, &c->props)) != 0) {
			return rc;
		}
	}
	if (!rd_utf8(r, &c->client_id)) {
		return MALFORMED;
	}
	if (c->will_flag) {
		if (level == MQTT_PROTO_V5) {
			rc = mqtt_props_decode_ctx(r, MQTT_PCTX_WILL, &c->will_props);
			if (rc != 0) {
				return rc;
			}
		}
		if (!rd_utf8(r, &c->will_topic) || !rd_bin(r, &c->will_payload)) {
			return MALFORMED;
		}
	}
	if (c->has_username && !rd_utf8(r, &c->username)) {
		return MALFORMED;
	}
	if (c->has_password && !rd_bin(r, &c->password)) {
		return MALFORMED;
	}
	if (rd_left(r) != 0) {
		return MALFORMED;
	}
	if (c->will_flag && !mqtt_topic_name_valid(c->will_topic.p, c->will_topic.len)) {
		return MQTT_RC_TOPIC_NAME_INVALID;
	}
	return 0;
}

// Decodes a CONNACK. Returns 0, MQTT_RC_MALFORMED (length, reserved bits)
// or MQTT_RC_PROTOCOL_ERROR (unknown reason code, session present with a
// failure, bad properties).
static int decode_connack(mqtt_rd *r, uint8_t proto, mqtt_connack *c)
{
	uint8_t ack_flags;

	if (!rd_u8(r, &ack_flags) || !rd_u8(r, &c->reason)) {
		return MALFORMED;
	}
	if ((ack_flags & 0xFE) != 0) {
		return MALFORMED;
	}
	c->session_present = (ack_flags & 0x01) != 0;
	if (proto == MQTT_PROTO_V5) {
		int rc = mqtt_props_decode_ctx(r, MQTT_PCTX_CONNACK, &c->props);
		if (rc != 0) {
			return rc;
		}
	}
	if (rd_left(r) != 0) {
		return MALFORMED;
	}
	if (!mqtt_reason_valid(MQTT_CONNACK, proto, c->reason)) {
		return PROTOCOL;
	}
	if (c->session_present && c->reason != 0) {
		return PROTOCOL;
	}
	return 0;
}

// Decodes a PUBLISH with fixed-header flags. Returns 0, MQTT_RC_MALFORMED,
// MQTT_RC_PROTOCOL_ERROR, MQTT_RC_TOPIC_NAME_INVALID or
// MQTT_RC_TOPIC_ALIAS_INVALID.
static int decode_publish(mqtt_rd *r, uint8_t proto, uint8_t flags, mqtt_publish *p)
{
	int rc;

	p->dup    = (flags & 0x8) != 0;
	p->qos    = (flags >> 1) & 0x3;
	p->retain = (flags & 0x1) != 0;
	if (p->qos == 3) {
		return MALFORMED;
	}
	if (p->dup && p->qos == 0) {
		return MALFORMED;
	}
	if (!rd_utf8(r, &p->topic)) {
		return MALFORMED;
	}
	if (p->qos > 0) {
		if (!rd_u16(r, &p->packet_id)) {
			return MALFORMED;
		}
		if (p->packet_id == 0) {
			return PROTOCOL;
		}
	}
	if (proto == MQTT_PROTO_V5) {
		if ((rc = mqtt_props_decode_ctx(r, MQTT_PCTX_PUBLISH, &p->props)) != 0) {
			return rc;
		}
	}
	p->payload.p   = r->p;
	p->payload.len = (uint32_t)rd_left(r);
	r->p           = r->end;
	if (p->topic.len == 0) {
		if (proto != MQTT_PROTO_V5) {
			return MALFORMED;
		}
		if ((p->props.present & MQTT_PBIT(MQTT_PROP_TOPIC_ALIAS)) == 0) {
			return PROTOCOL;
		}
		return 0;
	}
	if (!mqtt_topic_name_valid(p->topic.p, p->topic.len)) {
		return MQTT_RC_TOPIC_NAME_INVALID;
	}
	return 0;
}

// Decodes PUBACK, PUBREC, PUBREL or PUBCOMP. Returns 0, MQTT_RC_MALFORMED
// (bad length) or MQTT_RC_PROTOCOL_ERROR (packet id 0, reason code not
// allowed, bad properties).
static int decode_ack(mqtt_rd *r, uint8_t proto, uint8_t type, mqtt_ack *a)
{
	if (!rd_u16(r, &a->packet_id)) {
		return MALFORMED;
	}
	if (proto == MQTT_PROTO_V5 && rd_left(r) > 0) {
		if (!rd_u8(r, &a->reason)) {
			return MALFORMED;
		}
		if (rd_left(r) > 0) {
			int rc = mqtt_props_decode_ctx(r, MQTT_PCTX_ACK, &a->props);
			if (rc != 0) {
				return rc;
			}
		}
	}
	if (rd_left(r) != 0) {
		return MALFORMED;
	}
	if (a->packet_id == 0) {
		return PROTOCOL;
	}
	if (!mqtt_reason_valid(type, proto, a->reason)) {
		return PROTOCOL;
	}
	return 0;
}

// Returns 0 if [p, p+len) is a well-formed SUBSCRIBE payload for proto and
// stores the entry count, MQTT_RC_MALFORMED for a truncated entry, bad
// UTF-8 or reserved option bits, or MQTT_RC_PROTOCOL_ERROR for an empty
// list, QoS 3, Retain Handling 3, or No Local on a shared subscription.
int mqtt_sub_list_check(const uint8_t *p, size_t len, uint8_t proto, uint32_t *count)
{
	mqtt_rd  r = { p, p == NULL ? NULL : p + len };
	uint32_t n = 0;

	if (len > 0 && p == NULL) {
		return MALFORMED;
	}
	while (rd_left(&r) > 0) {
		mqtt_bytes f;
		uint8_t    o;

		if (!rd_utf8(&r, &f) || !rd_u8(&r, &o)) {
			return MALFORMED;
		}
		if (proto == MQTT_PROTO_V5) {
			if ((o & 0xC0) != 0) {
				return MALFORMED;
			}
			if ((o & 0x03) == 3 || ((o >> 4) & 0x3) == 3) {
				return PROTOCOL;
			}
			if ((o & 0x04) != 0
			    && mqtt_share_split(f.p, f.len, NULL) != MQTT_SHARE_NONE) {
				return PROTOCOL;
			}
		} else if ((o & 0xFC) != 0 || (o & 0x03) == 3) {
			return MALFORMED;
		}
		n++;
	}
	if (n == 0) {
		return PROTOCOL;
	}
	*count = n;
	return 0;
}

// Returns 0 if [p, p+len) is a well-formed UNSUBSCRIBE payload and stores
// the entry count, MQTT_RC_MALFORMED for a truncated entry or bad UTF-8, or
// MQTT_RC_PROTOCOL_ERROR for an empty list.
int mqtt_unsub_list_check(const uint8_t *p, size_t len, uint32_t *count)
{
	mqtt_rd  r = { p, p == NULL ? NULL : p + len };
	uint32_t n = 0;

	if (len > 0 && p == NULL) {
		return MALFORMED;
	}
	while (rd_left(&r) > 0) {
		mqtt_bytes f;
		if (!rd_utf8(&r, &f)) {
			return MALFORMED;
		}
		n++;
	}
	if (n == 0) {
		return PROTOCOL;
	}
	*count = n;
	return 0;
}

// Decodes a SUBSCRIBE. Returns 0, MQTT_RC_MALFORMED or
// MQTT_RC_PROTOCOL_ERROR (see mqtt_sub_list_check; also packet id 0).
static int decode_subscribe(mqtt_rd *r, uint8_t proto, mqtt_subscribe *s)
{
	int rc;

	if (!rd_u16(r, &s->packet_id)) {
		return MALFORMED;
	}
	if (proto == MQTT_PROTO_V5) {
		if ((rc = mqtt_props_decode_ctx(r, MQTT_PCTX_SUBSCRIBE, &s->props)) != 0) {
			return rc;
		}
	}
	s->list.p   = r->p;
	s->list.len = (uint32_t)rd_left(r);
	r->p        = r->end;
	if ((rc = mqtt_sub_list_check(s->list.p, s->list.len, proto, &s->count)) != 0) {
		return rc;
	}
	return s->packet_id == 0 ? PROTOCOL : 0;
}

// Decodes an UNSUBSCRIBE. Returns 0, MQTT_RC_MALFORMED or
// MQTT_RC_PROTOCOL_ERROR (empty list, packet id 0, bad properties).
static int decode_unsubscribe(mqtt_rd *r, uint8_t proto, mqtt_unsubscribe *u)
{
	int rc;

	if (!rd_u16(r, &u->packet_id)) {
		return MALFORMED;
	}
	if (proto == MQTT_PROTO_V5) {
		if ((rc = mqtt_props_decode_ctx(r, MQTT_PCTX_UNSUBSCRIBE, &u->props)) != 0) {
			return rc;
		}
	}
	u->list.p   = r->p;
	u->list.len = (uint32_t)rd_left(r);
	r->p        = r->end;
	if ((rc = mqtt_unsub_list_check(u->list.p, u->list.len, &u->count)) != 0) {
		return rc;
	}
	return u->packet_id == 0 ? PROTOCOL : 0;
}

// Decodes a SUBACK or UNSUBACK. Returns 0, MQTT_RC_MALFORMED (bad length)
// or MQTT_RC_PROTOCOL_ERROR (packet id 0, no codes, a code not allowed).
static int decode_suback(mqtt_rd *r, uint8_t proto, uint8_t type, mqtt_suback *s)
{
	if (!rd_u16(r, &s->packet_id)) {
		return MALFORMED;
	}
	if (type == MQTT_UNSUBACK && proto != MQTT_PROTO_V5) {
		if (rd_left(r) != 0) {
			return MALFORMED;
		}
		return s->packet_id == 0 ? PROTOCOL : 0;
	}
	if (proto == MQTT_PROTO_V5) {
		int ctx = type == MQTT_SUBACK ? MQTT_PCTX_SUBACK : MQTT_PCTX_UNSUBACK;
		int rc  = mqtt_props_decode_ctx(r, ctx, &s->props);
		if (rc != 0) {
			return rc;
		}
	}
	s->codes = r->p;
	s->count = (uint32_t)rd_left(r);
	r->p     = r->end;
	if (s->count == 0 || s->packet_id == 0) {
		return PROTOCOL;
	}
	for (uint32_t i = 0; i < s->count; i++) {
		if (!mqtt_reason_valid(type, proto, s->codes[i])) {
			return PROTOCOL;
		}
	}
	return 0;
}

// Decodes a DISCONNECT or an AUTH, both "reason code then properties,
// optional". Returns 0, MQTT_RC_MALFORMED (trailing bytes, an AUTH with a
// reason but no property length) or MQTT_RC_PROTOCOL_ERROR.
static int decode_reason_props(mqtt_rd *r, uint8_t type, uint8_t *reason, mqtt_props *props)
{
	int ctx = type == MQTT_AUTH ? MQTT_PCTX_AUTH : MQTT_PCTX_DISCONNECT;

	if (rd_left(r) > 0) {
		(void)rd_u8(r, reason);
		// DISCONNECT may stop after the reason code (MQTT 5.0 3.14.2.2.1);
		// AUTH may only omit the reason and property length together.
		if (type == MQTT_AUTH && rd_left(r) == 0) {
			return MALFORMED;
		}
		if (rd_left(r) > 0) {
			int rc = mqtt_props_decode_ctx(r, ctx, props);
			if (rc != 0) {
				return rc;
			}
		}
	}
	if (rd_left(r) != 0) {
		return MALFORMED;
	}
	if (!mqtt_reason_valid(type, MQTT_PROTO_V5, *reason)) {
		return PROTOCOL;
	}
	if (type == MQTT_AUTH && *reason != 0
	    && (props->present & MQTT_PBIT(MQTT_PROP_AUTH_METHOD)) == 0) {
		return PROTOCOL;
	}
	return 0;
}

// Decodes one complete frame; see the header for the contract. Returns 0 or
// the MQTT 5 reason code for the first problem found.
int mqtt_decode(const uint8_t *buf, size_t len, uint8_t proto, mqtt_packet *out)
{
	uint32_t remaining;
	uint8_t  hdr_len, type, flags;
	int      req;
	mqtt_rd  r;

	memset(out, 0, sizeof(*out));
	if (buf == NULL || mqtt_frame_header(buf, len, &remaining, &hdr_len) != MQTT_FRAME_OK) {
		return MALFORMED;
	}
	if ((size_t)hdr_len + remaining != len) {
		return MALFORMED;
	}
	if (proto != MQTT_PROTO_V5) {
		proto = MQTT_PROTO_V311;
	}
	type       = buf[0] >> 4;
	flags      = buf[0] & 0x0F;
	out->type  = type;
	out->flags = flags;
	r.p        = buf + hdr_len;
	r.end      = buf + len;

	if (type == 0 || (type == MQTT_AUTH && proto != MQTT_PROTO_V5)) {
		return MALFORMED;
	}
	req = required_flags(type);
	if (req >= 0 && flags != req) {
		return MALFORMED;
	}

	switch (type) {
	case MQTT_CONNECT:
		return decode_connect(&r, &out->u.connect);
	case MQTT_CONNACK:
		return decode_connack(&r, proto, &out->u.connack);
	case MQTT_PUBLISH:
		return decode_publish(&r, proto, flags, &out->u.publish);
	case MQTT_PUBACK:
	case MQTT_PUBREC:
	case MQTT_PUBREL:
	case MQTT_PUBCOMP:
		return decode_ack(&r, proto, type, &out->u.ack);
	case MQTT_SUBSCRIBE:
		return decode_subscribe(&r, proto, &out->u.subscribe);
	case MQTT_SUBACK:
	case MQTT_UNSUBACK:
		return decode_suback(&r, proto, type, &out->u.suback);
	case MQTT_UNSUBSCRIBE:
		return decode_unsubscribe(&r, proto, &out->u.unsubscribe);
	case MQTT_PINGREQ:
	case MQTT_PINGRESP:
		return remaining == 0 ? 0 : MALFORMED;
	case MQTT_DISCONNECT:
		if (proto != MQTT_PROTO_V5) {
			return remaining == 0 ? 0 : MALFORMED;
		}
		return decode_reason_props(
		    &r, type, &out->u.disconnect.reason, &out->u.disconnect.props);
	case MQTT_AUTH:
		return decode_reason_props(&r, type, &out->u.auth.reason, &out->u.auth.props);
	default:
		return MALFORMED;
	}
}

// Initialises it to walk the topic filters of s, decoded for proto.
void mqtt_sub_iter_init(mqtt_sub_iter *it, const mqtt_subscribe *s, uint8_t proto)
{
	it->p     = s->list.p;
	it->end   = s->list.p == NULL ? NULL : s->list.p + s->list.len;
	it->proto = proto;
}

// Returns true and fills filter and opts with the next entry, or false when
// none remain (or the list is truncated, which a decoded packet never is).
bool mqtt_sub_iter_next(mqtt_sub_iter *it, mqtt_bytes *filter, mqtt_sub_opts *opts)
{
	mqtt_rd r = { it->p, it->end };
	uint8_t o;

	if (it->p == NULL || !rd_bin(&r, filter) || !rd_u8(&r, &o)) {
		it->p = it->end;
		return false;
	}
	it->p     = r.p;
	opts->qos = o & 0x03;
	if (it->proto == MQTT_PROTO_V5) {
		opts->no_local            = (o & 0x04) != 0;
		opts->retain_as_published = (o & 0x08) != 0;
		opts->retain_handling     = (o >> 4) & 0x03;
	} else {
		opts->no_local            = false;
		opts->retain_as_published = false;
		opts->retain_handling     = 0;
	}
	return true;
}

// Initialises it to walk the topic filters of u.
void mqtt_unsub_iter_init(mqtt_unsub_iter *it, const mqtt_unsubscribe *u)
{
	it->p   = u->list.p;
	it->end = u->list.p == NULL ? NULL : u->list.p + u->list.len;
}

// Returns true and fills filter with the next entry, or false when none
// remain.
bool mqtt_unsub_iter_next(mqtt_unsub_iter *it, mqtt_bytes *filter)
{
	mqtt_rd r = { it->p, it->end };

	if (it->p == NULL || !rd_bin(&r, filter)) {
		it->p = it->end;
		return false;
	}
	it->p = r.p;
	return true;
}
