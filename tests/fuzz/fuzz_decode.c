// libFuzzer target for the MQTT codec: decodes the input as one frame for a
// 3.1.1 and a 5.0 connection, walks everything the decoder hands back, and
// for every accepted packet checks that it re-encodes to exactly
// mqtt_encoded_size bytes, that the encoding decodes again, and that
// encoding is then stable.

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nng/codec/mqtt_codec.h"

// Stops the run with a message; libFuzzer records the input as a crash.
#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz_decode: check failed: %s (%s:%d)\n", #cond,          \
			    __FILE__, __LINE__);                                                   \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

static volatile uint32_t sink;

// Reads every byte of b so that a bad pointer or length shows up under
// AddressSanitizer.
static void touch(mqtt_bytes b)
{
	uint32_t x = 0;
	for (uint32_t i = 0; i < b.len; i++) {
		x += b.p[i];
	}
	sink += x;
}

// Walks the repeatable properties and touches every string of a block.
static void walk_props(const mqtt_props *p)
{
	mqtt_prop_iter it;
	mqtt_bytes     k, v;
	uint32_t       id, n = 0;

	touch(p->raw);
	mqtt_prop_iter_init(&it, p);
	while (mqtt_prop_iter_next_user(&it, &k, &v)) {
		touch(k);
		touch(v);
		CHECK(mqtt_utf8_valid(k.p, k.len) && mqtt_utf8_valid(v.p, v.len));
		n++;
	}
	CHECK(n == p->n_user_props);
	n = 0;
	mqtt_prop_iter_init(&it, p);
	while (mqtt_prop_iter_next_sub_id(&it, &id)) {
		CHECK(id > 0 && id <= MQTT_VBI_MAX);
		n++;
	}
	CHECK(n == p->n_sub_ids);
	touch(p->content_type);
	touch(p->response_topic);
	touch(p->correlation_data);
	touch(p->assigned_client_id);
	touch(p->auth_method);
	touch(p->auth_data);
	touch(p->response_info);
	touch(p->server_reference);
	touch(p->reason_string);
}

// Walks everything a decoded packet points at.
static void walk(const mqtt_packet *pkt, uint8_t proto)
{
	switch (pkt->type) {
	case MQTT_CONNECT: {
		const mqtt_connect *c = &pkt->u.connect;
		walk_props(&c->props);
		walk_props(&c->will_props);
		touch(c->client_id);
		touch(c->will_topic);
		touch(c->will_payload);
		touch(c->username);
		touch(c->password);
		CHECK(mqtt_utf8_valid(c->client_id.p, c->client_id.len));
		if (c->will_flag) {
			CHECK(mqtt_topic_name_valid(c->will_topic.p, c->will_topic.len));
		}
		break;
	}
	case MQTT_CONNACK:
		walk_props(&pkt->u.connack.props);
		break;
	case MQTT_PUBLISH:
		walk_props(&pkt->u.publish.props);
		touch(pkt->u.publish.topic);
		touch(pkt->u.publish.payload);
		CHECK(pkt->u.publish.qos < 3);
		if (pkt->u.publish.topic.len > 0) {
			CHECK(mqtt_topic_name_valid(
			    pkt->u.publish.topic.p, pkt->u.publish.topic.len));
		}
		break;
	case MQTT_PUBACK:
	case MQTT_PUBREC:
	case MQTT_PUBREL:
	case MQTT_PUBCOMP:
		walk_props(&pkt->u.ack.props);
		CHECK(pkt->u.ack.packet_id != 0);
		break;
	case MQTT_SUBSCRIBE: {
		mqtt_sub_iter it;
		mqtt_bytes    f;
		mqtt_sub_opts o;
		uint32_t      n = 0;
		walk_props(&pkt->u.subscribe.props);
		mqtt_sub_iter_init(&it, &pkt->u.subscribe, proto);
		while (mqtt_sub_iter_next(&it, &f, &o)) {
			touch(f);
			CHECK(o.qos < 3 && o.retain_handling < 3);
			sink += mqtt_topic_filter_valid(f.p, f.len);
			n++;
		}
		CHECK(n == pkt->u.subscribe.count && n > 0);
		break;
	}
	case MQTT_UNSUBSCRIBE: {
		mqtt_unsub_iter it;
		mqtt_bytes      f;
		uint32_t        n = 0;
		walk_props(&pkt->u.unsubscribe.props);
		mqtt_unsub_iter_init(&it, &pkt->u.unsubscribe);
		while (mqtt_unsub_iter_next(&it, &f)) {
			touch(f);
			sink += mqtt_topic_filter_valid(f.p, f.len);
			n++;
		}
		CHECK(n == pkt->u.unsubscribe.count && n > 0);
		break;
	}
	case MQTT_SUBACK:
	case MQTT_UNSUBACK:
		walk_props(&pkt->u.suback.props);
		touch((mqtt_bytes) { pkt->u.suback.codes, pkt->u.suback.count });
		break;
	case MQTT_DISCONNECT:
		walk_props(&pkt->u.disconnect.props);
		break;
	case MQTT_AUTH:
		walk_props(&pkt->u.auth.props);
		break;
	default:
		break;
	}
}

// Re-encodes an accepted packet and checks the encoder's promises. Buffers
// are allocated at their exact size so that any overrun is caught.
static void reencode(const mqtt_packet *pkt, uint8_t proto)
{
	size_t      sz = mqtt_encoded_size(proto, pkt);
	uint8_t    *a, *b;
	size_t      n;
	mqtt_packet again;

	CHECK(sz >= 2);
	a = malloc(sz);
	b = malloc(sz);
	CHECK(a != NULL && b != NULL);
	CHECK(mqtt_encode(a, sz - 1, proto, pkt) == 0);
	n = mqtt_encode(a, sz, proto, pkt);
	CHECK(n == sz);
	CHECK(mqtt_decode(a, n, proto, &again) == 0);
	CHECK(again.type == pkt->type);
	CHECK(again.flags == pkt->flags);
	walk(&again, proto);
	CHECK(mqtt_encoded_size(proto, &again) == n);
	CHECK(mqtt_encode(b, sz, proto, &again) == n);
	CHECK(memcmp(a, b, n) == 0);
	free(a);
	free(b);
}

// libFuzzer entry point. Always returns 0.
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint8_t protos[] = { MQTT_PROTO_V311, MQTT_PROTO_V5 };
	uint32_t             rem, v;
	uint8_t              hl;

	// Framing on the raw bytes.
	if (mqtt_frame_header(data, size, &rem, &hl) == MQTT_FRAME_OK) {
		CHECK(hl >= 2 && hl <= 5 && hl <= size);
	}
	if (mqtt_vbi_decode(data, size, &v) > 0) {
		CHECK(v <= MQTT_VBI_MAX);
	}
	sink += mqtt_utf8_valid(data, size);
	sink += mqtt_topic_name_valid(data, size);

	// The "$share/" split: slices inside the input, and a valid filter
	// stays valid once its prefix is stripped.
	mqtt_share      sh;
	mqtt_share_kind k     = mqtt_share_split(data, size, &sh);
	bool            valid = mqtt_topic_filter_valid(data, size);
	if (k == MQTT_SHARE_OK) {
		CHECK(sh.glen > 0 && sh.flen > 0 && sh.group == data + 7);
		CHECK(sh.filter + sh.flen == data + size && sh.filter == sh.group + sh.glen + 1);
		CHECK(!valid || mqtt_topic_filter_valid(sh.filter, sh.flen));
	} else if (k == MQTT_SHARE_NONE) {
		CHECK(sh.group == NULL && sh.filter == data && sh.flen == size);
	} else {
		CHECK(!valid);
	}
	sink += valid;

	for (size_t i = 0; i < sizeof(protos); i++) {
		mqtt_packet pkt;
		int         rc = mqtt_decode(data, size, protos[i], &pkt);

		CHECK(rc == 0 || (rc >= 0x80 && rc <= 0xFF));
		sink += (uint32_t)strlen(mqtt_reason_name((uint8_t)rc));
		if (rc != 0) {
			continue;
		}
		sink += (uint32_t)strlen(mqtt_packet_name(pkt.type));
		walk(&pkt, protos[i]);
		reencode(&pkt, protos[i]);
	}
	return 0;
}
