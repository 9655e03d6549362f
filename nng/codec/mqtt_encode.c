// Encoding of MQTT 3.1/3.1.1/5.0 packets. The same code sizes a packet
// (writing to a counting cursor) and writes it, so mqtt_encoded_size is
// exact by construction.

#include "nng/codec/mqtt_codec_priv.h"

// Writes the CONNECT variable header and payload. Sets w->err on invalid
// input (unknown level, inconsistent flags, oversized fields).
static void body_connect(mqtt_wr *w, uint8_t proto, const mqtt_connect *c)
{
	uint8_t level = c->proto_level != 0 ? c->proto_level : proto;
	uint8_t flags = 0;

	if (level == MQTT_PROTO_V31) {
		wr_bin(w, (mqtt_bytes) { (const uint8_t *)"MQIsdp", 6 });
	} else if (level == MQTT_PROTO_V311 || level == MQTT_PROTO_V5) {
		wr_bin(w, (mqtt_bytes) { (const uint8_t *)"MQTT", 4 });
	} else {
		w->err = true;
		return;
	}
	if (c->will_qos > 2 || (!c->will_flag && (c->will_qos != 0 || c->will_retain))) {
		w->err = true;
		return;
	}
	if (level != MQTT_PROTO_V5 && c->has_password && !c->has_username) {
		w->err = true;
		return;
	}
	if (c->will_flag && !mqtt_topic_name_valid(c->will_topic.p, c->will_topic.len)) {
		w->err = true;
		return;
	}
	flags |= c->clean_start ? 0x02 : 0;
	flags |= c->will_flag ? 0x04 : 0;
	flags |= (uint8_t)(c->will_qos << 3);
	flags |= c->will_retain ? 0x20 : 0;
	flags |= c->has_password ? 0x40 : 0;
	flags |= c->has_username ? 0x80 : 0;
	wr_u8(w, (uint8_t)(level | (c->bridge_marker && level != MQTT_PROTO_V5 ? 0x80 : 0)));
	wr_u8(w, flags);
	wr_u16(w, c->keep_alive);
	if (level == MQTT_PROTO_V5) {
		mqtt_props_write_ctx(w, MQTT_PCTX_CONNECT, &c->props);
	}
	wr_bin(w, c->client_id);
	if (c->will_flag) {
		if (level == MQTT_PROTO_V5) {
			mqtt_props_write_ctx(w, MQTT_PCTX_WILL, &c->will_props);
		}
		wr_bin(w, c->will_topic);
		wr_bin(w, c->will_payload);
	}
	if (c->has_username) {
		wr_bin(w, c->username);
	}
	if (c->has_password) {
		wr_bin(w, c->password);
	}
}

// Writes the CONNACK body; sets w->err for a reason code not valid in
// proto or session present with a failure code.
static void body_connack(mqtt_wr *w, uint8_t proto, const mqtt_connack *c)
{
	if (!mqtt_reason_valid(MQTT_CONNACK, proto, c->reason)
	    || (c->session_present && c->reason != 0)) {
		w->err = true;
		return;
	}
	wr_u8(w, c->session_present ? 1 : 0);
	wr_u8(w, c->reason);
	if (proto == MQTT_PROTO_V5) {
		mqtt_props_write_ctx(w, MQTT_PCTX_CONNACK, &c->props);
	}
}

// Writes the PUBLISH body and returns the fixed-header flags; sets w->err
// for QoS 3, DUP on QoS 0, packet id 0 with QoS > 0, or a topic that is not
// a valid topic name (empty is allowed in v5 with a topic alias).
static uint8_t body_publish(mqtt_wr *w, uint8_t proto, const mqtt_publish *p)
{
	if (p->qos > 2 || (p->dup && p->qos == 0) || (p->qos > 0 && p->packet_id == 0)) {
		w->err = true;
		return 0;
	}
	if (p->topic.len == 0) {
		if (proto != MQTT_PROTO_V5
		    || (p->props.present & MQTT_PBIT(MQTT_PROP_TOPIC_ALIAS)) == 0) {
			w->err = true;
			return 0;
		}
	} else if (p->topic.len > 0xFFFF || p->topic.p == NULL
	    || memchr(p->topic.p, '+', p->topic.len) != NULL
	    || memchr(p->topic.p, '#', p->topic.len) != NULL) {
		w->err = true;
		return 0;
	}
	if (p->payload.len > 0 && p->payload.p == NULL) {
		w->err = true;
		return 0;
	}
	wr_bin(w, p->topic);
	if (p->qos > 0) {
		wr_u16(w, p->packet_id);
	}
	if (proto == MQTT_PROTO_V5) {
		mqtt_props_write_ctx(w, MQTT_PCTX_PUBLISH, &p->props);
	}
	wr_raw(w, p->payload.p, p->payload.len);
	return (uint8_t)((p->dup ? 0x8 : 0) | (p->qos << 1) | (p->retain ? 0x1 : 0));
}

// Writes a PUBACK/PUBREC/PUBREL/PUBCOMP body, in the short form when the
// reason is 0 and there are no properties. Sets w->err for packet id 0 or a
// reason code not allowed for the type.
static void body_ack(mqtt_wr *w, uint8_t proto, uint8_t type, const mqtt_ack *a)
{
	if (a->packet_id == 0) {
		w->err = true;
		return;
	}
	wr_u16(w, a->packet_id);
	if (proto != MQTT_PROTO_V5) {
		return;
	}
	if (!mqtt_reason_valid(type, proto, a->reason)) {
		w->err = true;
		return;
	}
	mqtt_wr probe = { NULL, 0, 0, false };
	mqtt_props_write_ctx(&probe, MQTT_PCTX_ACK, &a->props);
	if (probe.err) {
		w->err = true;
		return;
	}
	if (probe.n == 1) { // empty property block
		if (a->reason != 0) {
			wr_u8(w, a->reason);
		}
		return;
	}
	wr_u8(w, a->reason);
	mqtt_props_write_ctx(w, MQTT_PCTX_ACK, &a->props);
}

// Writes a SUBSCRIBE body; sets w->err for packet id 0 or a list that is
// not a valid SUBSCRIBE payload for proto (or whose count disagrees).
static void body_subscribe(mqtt_wr *w, uint8_t proto, const mqtt_subscribe *s)
{
	uint32_t n;

	if (s->packet_id == 0 || mqtt_sub_list_check(s->list.p, s->list.len, proto, &n) != 0
	    || n != s->count) {
		w->err = true;
		return;
	}
	wr_u16(w, s->packet_id);
	if (proto == MQTT_PROTO_V5) {
		mqtt_props_write_ctx(w, MQTT_PCTX_SUBSCRIBE, &s->props);
	}
	wr_raw(w, s->list.p, s->list.len);
}

// Writes an UNSUBSCRIBE body; sets w->err for packet id 0 or a list that is
// not a valid UNSUBSCRIBE payload (or whose count disagrees).
static void body_unsubscribe(mqtt_wr *w, uint8_t proto, const mqtt_unsubscribe *u)
{
	uint32_t n;

	if (u->packet_id == 0 || mqtt_unsub_list_check(u->list.p, u->list.len, &n) != 0
	    || n != u->count) {
		w->err = true;
		return;
	}
	wr_u16(w, u->packet_id);
	if (proto == MQTT_PROTO_V5) {
		mqtt_props_write_ctx(w, MQTT_PCTX_UNSUBSCRIBE, &u->props);
	}
	wr_raw(w, u->list.p, u->list.len);
}

// Writes a SUBACK or UNSUBACK body; sets w->err for packet id 0, no codes
// (except a 3.1.1 UNSUBACK, which has none) or a code not allowed.
static void body_suback(mqtt_wr *w, uint8_t proto, uint8_t type, const mqtt_suback *s)
{
	if (s->packet_id == 0) {
		w->err = true;
		return;
	}
	wr_u16(w, s->packet_id);
	if (type == MQTT_UNSUBACK && proto != MQTT_PROTO_V5) {
		return;
	}
	if (s->count == 0 || s->codes == NULL) {
		w->err = true;
		return;
	}
	for (uint32_t i = 0; i < s->count; i++) {
		if (!mqtt_reason_valid(type, proto, s->codes[i])) {
			w->err = true;
			return;
		}
	}
	if (proto == MQTT_PROTO_V5) {
		int ctx = type == MQTT_SUBACK ? MQTT_PCTX_SUBACK : MQTT_PCTX_UNSUBACK;
		mqtt_props_write_ctx(w, ctx, &s->props);
	}
	wr_raw(w, s->codes, s->count);
}

// Writes a v5 DISCONNECT or AUTH body: nothing when the reason is 0 and
// there are no properties, the reason alone when there are no properties,
// else both. Sets w->err for a reason code not allowed for the type.
static void body_reason_props(mqtt_wr *w, uint8_t type, uint8_t reason, const mqtt_props *props)
{
	int     ctx   = type == MQTT_AUTH ? MQTT_PCTX_AUTH : MQTT_PCTX_DISCONNECT;
	mqtt_wr probe = { NULL, 0, 0, false };

	if (!mqtt_reason_valid(type, MQTT_PROTO_V5, reason)) {
		w->err = true;
		return;
	}
	mqtt_props_write_ctx(&probe, ctx, props);
	if (probe.err) {
		w->err = true;
		return;
	}
	if (type == MQTT_AUTH && reason != 0
	    && (props->present & MQTT_PBIT(MQTT_PROP_AUTH_METHOD)) == 0) {
		w->err = true;
		return;
	}
	if (probe.n == 1) {
		if (reason != 0) {
			wr_u8(w, reason);
		}
		return;
	}
	wr_u8(w, reason);
	mqtt_props_write_ctx(w, ctx, props);
}

// Writes (or counts) the packet body and returns the fixed-header flags.
// Sets w->err on invalid input.
static uint8_t body_write(mqtt_wr *w, uint8_t proto, const mqtt_packet *pkt)
{
	switch (pkt->type) {
	case MQTT_CONNECT:
		body_connect(w, proto, &pkt->u.connect);
		return 0;
	case MQTT_CONNACK:
		body_connack(w, proto, &pkt->u.connack);
		return 0;
	case MQTT_PUBLISH:
		return body_publish(w, proto, &pkt->u.publish);
	case MQTT_PUBACK:
	case MQTT_PUBREC:
	case MQTT_PUBCOMP:
		body_ack(w, proto, pkt->type, &pkt->u.ack);
		return 0;
	case MQTT_PUBREL:
		body_ack(w, proto, pkt->type, &pkt->u.ack);
		return 0x2;
	case MQTT_SUBSCRIBE:
		body_subscribe(w, proto, &pkt->u.subscribe);
		return 0x2;
	case MQTT_UNSUBSCRIBE:
		body_unsubscribe(w, proto, &pkt->u.unsubscribe);
		return 0x2;
	case MQTT_SUBACK:
	case MQTT_UNSUBACK:
		body_suback(w, proto, pkt->type, &pkt->u.suback);
		return 0;
	case MQTT_PINGREQ:
	case MQTT_PINGRESP:
		return 0;
	case MQTT_DISCONNECT:
		if (proto == MQTT_PROTO_V5) {
			body_reason_props(
			    w, MQTT_DISCONNECT, pkt->u.disconnect.reason, &pkt->u.disconnect.props);
		}
		return 0;
	case MQTT_AUTH:
		if (proto != MQTT_PROTO_V5) {
			w->err = true;
			return 0;
		}
		body_reason_props(w, MQTT_AUTH, pkt->u.auth.reason, &pkt->u.auth.props);
		return 0;
	default:
		w->err = true;
		return 0;
	}
}

// Returns the version to encode pkt with: 5 stays 5, anything else is 3.1.1
// framing (3.1 differs only in CONNECT, which gets proto unchanged and uses
// its own proto_level when set).
static uint8_t norm_proto(uint8_t proto, const mqtt_packet *pkt)
{
	if (pkt->type == MQTT_CONNECT) {
		return proto;
	}
	return proto == MQTT_PROTO_V5 ? MQTT_PROTO_V5 : MQTT_PROTO_V311;
}

// Returns the exact encoded size of pkt (fixed header included), or 0 if
// pkt is invalid or larger than the largest MQTT packet.
size_t mqtt_encoded_size(uint8_t proto, const mqtt_packet *pkt)
{
	mqtt_wr w = { NULL, 0, 0, false };

	if (pkt == NULL) {
		return 0;
	}
	(void)body_write(&w, norm_proto(proto, pkt), pkt);
	if (w.err || w.n > MQTT_VBI_MAX) {
		return 0;
	}
	return 1 + mqtt_vbi_size((uint32_t)w.n) + w.n;
}

// Encodes pkt into [buf, buf+cap). Returns the bytes written, or 0 if the
// packet is invalid or does not fit; buf contents are then unspecified.
size_t mqtt_encode(uint8_t *buf, size_t cap, uint8_t proto, const mqtt_packet *pkt)
{
	mqtt_wr count = { NULL, 0, 0, false };
	mqtt_wr w     = { buf, cap, 0, false };
	uint8_t flags;

	if (buf == NULL || pkt == NULL) {
		return 0;
	}
	proto = norm_proto(proto, pkt);
	flags = body_write(&count, proto, pkt);
	if (count.err || count.n > MQTT_VBI_MAX) {
		return 0;
	}
	wr_u8(&w, (uint8_t)((pkt->type << 4) | flags));
	wr_vbi(&w, (uint32_t)count.n);
	(void)body_write(&w, proto, pkt);
	if (w.err) {
		return 0;
	}
	return w.n;
}

// Appends one SUBSCRIBE entry (filter and options byte for proto) at
// buf[0..cap). Returns the bytes written, or 0 if it does not fit or the
// options are invalid for proto.
size_t mqtt_sub_list_put(
    uint8_t *buf, size_t cap, uint8_t proto, mqtt_bytes filter, const mqtt_sub_opts *opts)
{
	mqtt_wr w = { buf, cap, 0, false };
	uint8_t o;

	if (buf == NULL || opts->qos > 2 || opts->retain_handling > 2) {
		return 0;
	}
	o = opts->qos;
	if (proto == MQTT_PROTO_V5) {
		o |= opts->no_local ? 0x04 : 0;
		o |= opts->retain_as_published ? 0x08 : 0;
		o |= (uint8_t)(opts->retain_handling << 4);
	}
	wr_bin(&w, filter);
	wr_u8(&w, o);
	return w.err ? 0 : w.n;
}

// Appends one UNSUBSCRIBE entry at buf[0..cap). Returns the bytes written,
// or 0 if it does not fit.
size_t mqtt_unsub_list_put(uint8_t *buf, size_t cap, mqtt_bytes filter)
{
	mqtt_wr w = { buf, cap, 0, false };

	if (buf == NULL) {
		return 0;
	}
	wr_bin(&w, filter);
	return w.err ? 0 : w.n;
}
