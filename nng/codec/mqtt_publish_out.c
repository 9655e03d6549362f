#include "nng/codec/mqtt_publish_out.h"

#include <string.h>

// Size of the per-subscriber v5 properties.
static size_t head_props_size(const mqtt_publish_head *h)
{
	size_t n = 0;
	if (h->proto != MQTT_PROTO_V5) {
		return 0;
	}
	if (h->has_expiry) {
		n += 5;
	}
	if (h->topic_alias != 0) {
		n += 3;
	}
	for (uint32_t i = 0; i < h->n_sub_ids; i++) {
		n += 1 + mqtt_vbi_size(h->sub_ids[i]);
	}
	return n;
}

// Remaining length of the packet, or 0 when too large.
static size_t remaining_length(const mqtt_publish_head *h)
{
	size_t r = 2 + (size_t)h->topic_len + (h->qos > 0 ? 2 : 0) + h->payload_len;
	if (h->proto == MQTT_PROTO_V5) {
		size_t p = head_props_size(h) + h->fwd_props_len;
		size_t v = mqtt_vbi_size((uint32_t)p);
		if (v == 0) {
			return 0;
		}
		r += v + p;
	}
	if (r > MQTT_VBI_MAX) {
		return 0;
	}
	return r;
}

// Returns the full encoded size, 0 if too large.
size_t mqtt_publish_total_size(const mqtt_publish_head *h)
{
	size_t r = remaining_length(h);
	if (r == 0) {
		return 0;
	}
	return 1 + mqtt_vbi_size((uint32_t)r) + r;
}

// Returns the size of everything but the shared tail.
size_t mqtt_publish_head_size(const mqtt_publish_head *h)
{
	size_t total = mqtt_publish_total_size(h);
	if (total == 0) {
		return 0;
	}
	size_t tail = h->payload_len + (h->proto == MQTT_PROTO_V5 ? h->fwd_props_len : 0);
	return total - tail;
}

static uint8_t *put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
	return p + 2;
}

// Writes the head of a PUBLISH into buf; returns bytes written or 0.
size_t mqtt_publish_head_encode(uint8_t *buf, size_t cap, const mqtt_publish_head *h)
{
	size_t hs = mqtt_publish_head_size(h);
	if (hs == 0 || hs > cap || h->qos > 2) {
		return 0;
	}
	uint8_t *p = buf;
	*p++       = (uint8_t)((MQTT_PUBLISH << 4) | (h->dup ? 0x08 : 0) | (h->qos << 1)
            | (h->retain ? 1 : 0));
	p += mqtt_vbi_encode(p, (uint32_t)remaining_length(h));
	p = put16(p, h->topic_len);
	if (h->topic_len > 0) {
		memcpy(p, h->topic, h->topic_len);
		p += h->topic_len;
	}
	if (h->qos > 0) {
		p = put16(p, h->packet_id);
	}
	if (h->proto == MQTT_PROTO_V5) {
		p += mqtt_vbi_encode(p, (uint32_t)(head_props_size(h) + h->fwd_props_len));
		if (h->has_expiry) {
			*p++ = MQTT_PROP_MESSAGE_EXPIRY;
			*p++ = (uint8_t)(h->expiry >> 24);
			*p++ = (uint8_t)(h->expiry >> 16);
			*p++ = (uint8_t)(h->expiry >> 8);
			*p++ = (uint8_t)h->expiry;
		}
		if (h->topic_alias != 0) {
			*p++ = MQTT_PROP_TOPIC_ALIAS;
			p    = put16(p, h->topic_alias);
		}
		for (uint32_t i = 0; i < h->n_sub_ids; i++) {
			*p++ = MQTT_PROP_SUBSCRIPTION_ID;
			p += mqtt_vbi_encode(p, h->sub_ids[i]);
		}
	}
	return (size_t)(p - buf);
}

// Encodes props without the length prefix by encoding normally and sliding
// the body down over the prefix.
size_t mqtt_props_encode_body(uint8_t *buf, size_t cap, const mqtt_props *props)
{
	size_t body = mqtt_props_size(props);
	if (body == 0) {
		return 0;
	}
	size_t vs = mqtt_vbi_size((uint32_t)body);
	if (vs == 0 || body + vs > cap) {
		return 0;
	}
	size_t n = mqtt_props_encode(buf, cap, props);
	if (n != body + vs) {
		return 0;
	}
	memmove(buf, buf + vs, body);
	return body;
}
