// Unit tests of the MQTT wire codec (nng/codec): round trips of every packet
// type in both versions with every property, byte-exact short forms, and one
// test per reject with the exact reason code.

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "nng/codec/mqtt_codec.h"

#define V3       MQTT_PROTO_V311
#define V5       MQTT_PROTO_V5
#define RC_MAL   MQTT_RC_MALFORMED
#define RC_PROTO MQTT_RC_PROTOCOL_ERROR

#define BS(s) ((mqtt_bytes) { (const uint8_t *)(s), (uint32_t)(sizeof(s) - 1) })
#define P(id) MQTT_PBIT(MQTT_PROP_##id)
#define REP   (P(USER_PROPERTY) | P(SUBSCRIPTION_ID))

// ---------------------------------------------------------------------------
// A frame builder for hand-made (often invalid) packets.

typedef struct fb {
	uint8_t b[2048];
	size_t  n;
} fb;

// Appends n bytes to f.
static void fb_put(fb *f, const void *p, size_t n)
{
	assert_true(f->n + n <= sizeof(f->b));
	memcpy(f->b + f->n, p, n);
	f->n += n;
}

// Appends one byte to f.
static void fb_u8(fb *f, uint8_t v)
{
	fb_put(f, &v, 1);
}

// Appends a big-endian 16-bit integer to f.
static void fb_u16(fb *f, uint16_t v)
{
	fb_u8(f, (uint8_t)(v >> 8));
	fb_u8(f, (uint8_t)v);
}

// Appends a big-endian 32-bit integer to f.
static void fb_u32(fb *f, uint32_t v)
{
	fb_u16(f, (uint16_t)(v >> 16));
	fb_u16(f, (uint16_t)v);
}

// Appends a length-prefixed field of n bytes to f.
static void fb_bin(fb *f, const void *p, size_t n)
{
	fb_u16(f, (uint16_t)n);
	fb_put(f, p, n);
}

// Appends a length-prefixed C string to f.
static void fb_str(fb *f, const char *s)
{
	fb_bin(f, s, strlen(s));
}

// Appends a variable byte integer to f.
static void fb_vbi(fb *f, uint32_t v)
{
	uint8_t b[4];
	size_t  n = mqtt_vbi_encode(b, v);
	assert_true(n > 0);
	fb_put(f, b, n);
}

// Appends a property block (length VBI and content) to f.
static void fb_props(fb *f, const fb *content)
{
	fb_vbi(f, (uint32_t)content->n);
	fb_put(f, content->b, content->n);
}

// Builds a frame (first byte, remaining length, body) into out and returns
// its length.
static size_t frame(uint8_t first, const fb *body, uint8_t *out)
{
	uint8_t v[4];
	size_t  n = mqtt_vbi_encode(v, (uint32_t)body->n);
	out[0]    = first;
	memcpy(out + 1, v, n);
	memcpy(out + 1 + n, body->b, body->n);
	return 1 + n + body->n;
}

static uint8_t frame_buf[4096];

// Decodes first+body for proto into *out and returns the result.
static int dec_body(uint8_t first, const fb *body, uint8_t proto, mqtt_packet *out)
{
	size_t n = frame(first, body, frame_buf);
	return mqtt_decode(frame_buf, n, proto, out);
}

// Decodes a literal byte array for proto and returns the result.
static int dec_raw(const uint8_t *b, size_t n, uint8_t proto)
{
	mqtt_packet p;
	return mqtt_decode(b, n, proto, &p);
}

#define DEC(proto, ...)                                                                            \
	dec_raw((const uint8_t[]) { __VA_ARGS__ }, sizeof((const uint8_t[]) { __VA_ARGS__ }), proto)

// ---------------------------------------------------------------------------
// Property fixtures.

// Allowed properties per packet, written out independently of the codec's
// own table (MQTT 5.0 section 2.2.2.2, table 2-4).
enum ctx {
	C_CONNECT,
	C_WILL,
	C_CONNACK,
	C_PUBLISH,
	C_PUBACK,
	C_PUBREC,
	C_PUBREL,
	C_PUBCOMP,
	C_SUBSCRIBE,
	C_SUBACK,
	C_UNSUBSCRIBE,
	C_UNSUBACK,
	C_DISCONNECT,
	C_AUTH,
	C_COUNT,
};

#define ACKP (P(REASON_STRING) | P(USER_PROPERTY))
static const uint64_t allowed[C_COUNT] = {
	[C_CONNECT] = P(SESSION_EXPIRY) | P(RECEIVE_MAXIMUM) | P(MAX_PACKET_SIZE)
	    | P(TOPIC_ALIAS_MAX) | P(REQUEST_RESPONSE) | P(REQUEST_PROBLEM) | P(USER_PROPERTY)
	    | P(AUTH_METHOD) | P(AUTH_DATA),
	[C_WILL] = P(WILL_DELAY) | P(PAYLOAD_FORMAT) | P(MESSAGE_EXPIRY) | P(CONTENT_TYPE)
	    | P(RESPONSE_TOPIC) | P(CORRELATION_DATA) | P(USER_PROPERTY),
	[C_CONNACK] = P(SESSION_EXPIRY) | P(RECEIVE_MAXIMUM) | P(MAXIMUM_QOS) | P(RETAIN_AVAILABLE)
	    | P(MAX_PACKET_SIZE) | P(ASSIGNED_CLIENT_ID) | P(TOPIC_ALIAS_MAX) | P(REASON_STRING)
	    | P(USER_PROPERTY) | P(WILDCARD_SUB_AVAIL) | P(SUB_ID_AVAIL) | P(SHARED_SUB_AVAIL)
	    | P(SERVER_KEEP_ALIVE) | P(RESPONSE_INFO) | P(SERVER_REFERENCE) | P(AUTH_METHOD)
	    | P(AUTH_DATA),
	[C_PUBLISH] = P(PAYLOAD_FORMAT) | P(MESSAGE_EXPIRY) | P(TOPIC_ALIAS) | P(RESPONSE_TOPIC)
	    | P(CORRELATION_DATA) | P(USER_PROPERTY) | P(SUBSCRIPTION_ID) | P(CONTENT_TYPE),
	[C_PUBACK]      = ACKP,
	[C_PUBREC]      = ACKP,
	[C_PUBREL]      = ACKP,
	[C_PUBCOMP]     = ACKP,
	[C_SUBSCRIBE]   = P(SUBSCRIPTION_ID) | P(USER_PROPERTY),
	[C_SUBACK]      = ACKP,
	[C_UNSUBSCRIBE] = P(USER_PROPERTY),
	[C_UNSUBACK]    = ACKP,
	[C_DISCONNECT]
	= P(SESSION_EXPIRY) | P(REASON_STRING) | P(USER_PROPERTY) | P(SERVER_REFERENCE),
	[C_AUTH] = P(AUTH_METHOD) | P(AUTH_DATA) | P(REASON_STRING) | P(USER_PROPERTY),
};

static const uint8_t all_ids[]
    = { 0x01, 0x02, 0x03, 0x08, 0x09, 0x0B, 0x11, 0x12, 0x13, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1A,
	      0x1C, 0x1F, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2A };

static const mqtt_user_prop test_ups[3] = {
	{ { (const uint8_t *)"k1", 2 }, { (const uint8_t *)"v1", 2 } },
	{ { (const uint8_t *)"key two", 7 }, { (const uint8_t *)"v\xc3\xa4lue", 6 } },
	{ { (const uint8_t *)"k1", 2 }, { (const uint8_t *)"", 0 } }, // repeated key
};
static const uint32_t test_sub_ids[2] = { 7, MQTT_VBI_MAX };

// Fills p with a distinctive value for every property in mask, with two
// subscription identifiers when multi_sub is set.
static void fill_props(mqtt_props *p, uint64_t mask, bool multi_sub)
{
	memset(p, 0, sizeof(*p));
	p->present                = mask & ~REP;
	p->payload_format         = 1;
	p->message_expiry         = 3600;
	p->content_type           = BS("text/plain");
	p->response_topic         = BS("resp/topic");
	p->correlation_data       = BS("\x00\x01\x02");
	p->session_expiry         = 0xFFFFFFFFu;
	p->assigned_client_id     = BS("assigned-1");
	p->server_keep_alive      = 120;
	p->auth_method            = BS("SCRAM-SHA-1");
	p->auth_data              = BS("\xde\xad\x00\xbe");
	p->request_problem_info   = 0;
	p->will_delay             = 30;
	p->request_response_info  = 1;
	p->response_info          = BS("resp-info");
	p->server_reference       = BS("other:1883");
	p->reason_string          = BS("because");
	p->receive_maximum        = 100;
	p->topic_alias_maximum    = 10;
	p->topic_alias            = 3;
	p->maximum_qos            = 1;
	p->retain_available       = 0;
	p->maximum_packet_size    = 1048576;
	p->wildcard_sub_available = 1;
	p->sub_id_available       = 0;
	p->shared_sub_available   = 1;
	if (mask & P(USER_PROPERTY)) {
		p->user_props   = test_ups;
		p->n_user_props = 3;
	}
	if (mask & P(SUBSCRIPTION_ID)) {
		p->sub_ids   = test_sub_ids;
		p->n_sub_ids = multi_sub ? 2 : 1;
	}
}

// Asserts that two byte ranges hold the same bytes.
static void assert_bytes(mqtt_bytes a, mqtt_bytes b)
{
	assert_int_equal(a.len, b.len);
	if (a.len > 0) {
		assert_memory_equal(a.p, b.p, a.len);
	}
}

// Asserts that decoded properties out carry exactly what in (built by
// fill_props) encoded.
static void check_props(const mqtt_props *in, const mqtt_props *out)
{
	uint64_t m = in->present;

	assert_int_equal(out->present & ~REP, m & ~REP);
#define NUM(id, f)                                                                                 \
	if (m & P(id)) {                                                                           \
		assert_int_equal(out->f, in->f);                                                   \
	}
#define STR(id, f)                                                                                 \
	if (m & P(id)) {                                                                           \
		assert_bytes(out->f, in->f);                                                       \
	}
	NUM(PAYLOAD_FORMAT, payload_format);
	NUM(MESSAGE_EXPIRY, message_expiry);
	STR(CONTENT_TYPE, content_type);
	STR(RESPONSE_TOPIC, response_topic);
	STR(CORRELATION_DATA, correlation_data);
	NUM(SESSION_EXPIRY, session_expiry);
	STR(ASSIGNED_CLIENT_ID, assigned_client_id);
	NUM(SERVER_KEEP_ALIVE, server_keep_alive);
	STR(AUTH_METHOD, auth_method);
	STR(AUTH_DATA, auth_data);
	NUM(REQUEST_PROBLEM, request_problem_info);
	NUM(WILL_DELAY, will_delay);
	NUM(REQUEST_RESPONSE, request_response_info);
	STR(RESPONSE_INFO, response_info);
	STR(SERVER_REFERENCE, server_reference);
	STR(REASON_STRING, reason_string);
	NUM(RECEIVE_MAXIMUM, receive_maximum);
	NUM(TOPIC_ALIAS_MAX, topic_alias_maximum);
	NUM(TOPIC_ALIAS, topic_alias);
	NUM(MAXIMUM_QOS, maximum_qos);
	NUM(RETAIN_AVAILABLE, retain_available);
	NUM(MAX_PACKET_SIZE, maximum_packet_size);
	NUM(WILDCARD_SUB_AVAIL, wildcard_sub_available);
	NUM(SUB_ID_AVAIL, sub_id_available);
	NUM(SHARED_SUB_AVAIL, shared_sub_available);
#undef NUM
#undef STR

	mqtt_prop_iter it;
	mqtt_bytes     k, v;
	uint32_t       id;

	assert_int_equal(out->n_user_props, in->n_user_props);
	assert_int_equal((out->present & P(USER_PROPERTY)) != 0, in->n_user_props > 0);
	mqtt_prop_iter_init(&it, out);
	for (uint32_t i = 0; i < in->n_user_props; i++) {
		assert_true(mqtt_prop_iter_next_user(&it, &k, &v));
		assert_bytes(k, in->user_props[i].key);
		assert_bytes(v, in->user_props[i].value);
	}
	assert_false(mqtt_prop_iter_next_user(&it, &k, &v));

	assert_int_equal(out->n_sub_ids, in->n_sub_ids);
	assert_int_equal((out->present & P(SUBSCRIPTION_ID)) != 0, in->n_sub_ids > 0);
	mqtt_prop_iter_init(&it, out);
	for (uint32_t i = 0; i < in->n_sub_ids; i++) {
		assert_true(mqtt_prop_iter_next_sub_id(&it, &id));
		assert_int_equal(id, in->sub_ids[i]);
	}
	assert_false(mqtt_prop_iter_next_sub_id(&it, &id));
	if (in->n_sub_ids > 0) {
		assert_int_equal(out->subscription_id, in->sub_ids[0]);
	}
}

static uint8_t rt_buf[8192];
static uint8_t rt_buf2[8192];

// Encodes in for proto (checking the exact size and that one byte less
// fails), decodes it into *out and returns the frame length. The decoded
// fields point into rt_buf.
static size_t round_trip(uint8_t proto, const mqtt_packet *in, mqtt_packet *out)
{
	size_t sz = mqtt_encoded_size(proto, in);
	size_t n;

	assert_true(sz >= 2);
	assert_int_equal(mqtt_encode(rt_buf, sz - 1, proto, in), 0);
	n = mqtt_encode(rt_buf, sizeof(rt_buf), proto, in);
	assert_int_equal(n, sz);
	assert_int_equal(mqtt_decode(rt_buf, n, proto, out), 0);
	assert_int_equal(out->type, in->type);

	// Re-encoding the decoded packet reproduces the same bytes.
	assert_int_equal(mqtt_encode(rt_buf2, sizeof(rt_buf2), proto, out), n);
	assert_memory_equal(rt_buf2, rt_buf, n);
	return n;
}

// ---------------------------------------------------------------------------
// Variable byte integers and framing.

// Checks VBI sizes, encodings and decodings at every length boundary, and the rejection of
// five-byte and non-minimal forms.
// [MQTT5-1.5.5-1]: the encoder writes the fewest bytes.
static void test_vbi(void **state)
{
	static const uint32_t vals[]
	    = { 0, 1, 127, 128, 16383, 16384, 2097151, 2097152, MQTT_VBI_MAX };
	static const size_t lens[] = { 1, 1, 1, 2, 2, 3, 3, 4, 4 };
	uint8_t             b[4];
	uint32_t            v;

	(void)state;
	for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		assert_int_equal(mqtt_vbi_size(vals[i]), lens[i]);
		assert_int_equal(mqtt_vbi_encode(b, vals[i]), lens[i]);
		assert_int_equal(mqtt_vbi_decode(b, lens[i], &v), (int)lens[i]);
		assert_int_equal(v, vals[i]);
		if (lens[i] > 1) {
			assert_int_equal(mqtt_vbi_decode(b, lens[i] - 1, &v), 0);
		}
	}
	assert_int_equal(mqtt_vbi_size(MQTT_VBI_MAX + 1), 0);
	assert_int_equal(mqtt_vbi_encode(b, MQTT_VBI_MAX + 1), 0);
	assert_int_equal(mqtt_vbi_decode((const uint8_t[]) { 0xC1, 0x02 }, 2, &v), 2);
	assert_int_equal(v, 0x41 + (2 << 7));
	// Five bytes.
	assert_int_equal(
	    mqtt_vbi_decode((const uint8_t[]) { 0xFF, 0xFF, 0xFF, 0xFF, 0x7F }, 5, &v), -1);
	assert_int_equal(mqtt_vbi_decode((const uint8_t[]) { 0x80, 0x80, 0x80, 0x80 }, 4, &v), -1);
	// Not the shortest form.
	assert_int_equal(mqtt_vbi_decode((const uint8_t[]) { 0x80, 0x00 }, 2, &v), -1);
	assert_int_equal(mqtt_vbi_decode((const uint8_t[]) { 0x81, 0x80, 0x00 }, 3, &v), -1);
	assert_int_equal(mqtt_vbi_decode(NULL, 0, &v), 0);
}

// Checks that mqtt_frame_header asks for more bytes, parses 2..5 byte headers and rejects a
// five-byte remaining length.
static void test_frame_header(void **state)
{
	uint32_t rem = 99;
	uint8_t  hl  = 99;

	(void)state;
	assert_int_equal(
	    mqtt_frame_header((const uint8_t[]) { 0x30 }, 1, &rem, &hl), MQTT_FRAME_NEED_MORE);
	assert_int_equal(mqtt_frame_header((const uint8_t[]) { 0x30, 0x80 }, 2, &rem, &hl),
	    MQTT_FRAME_NEED_MORE);
	assert_int_equal(
	    mqtt_frame_header((const uint8_t[]) { 0x30, 0x80, 0x01 }, 3, &rem, &hl), MQTT_FRAME_OK);
	assert_int_equal(rem, 128);
	assert_int_equal(hl, 3);
	assert_int_equal(
	    mqtt_frame_header((const uint8_t[]) { 0xC0, 0x00 }, 2, &rem, &hl), MQTT_FRAME_OK);
	assert_int_equal(rem, 0);
	assert_int_equal(hl, 2);
	assert_int_equal(mqtt_frame_header((const uint8_t[]) { 0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F },
	                     6, &rem, &hl),
	    MQTT_FRAME_MALFORMED);
}

// Checks that a remaining length or property length VBI longer than four bytes, or not minimal, is
// Malformed.
static void test_reject_vbi_too_long(void **state)
{
	(void)state;
	assert_int_equal(DEC(V5, 0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F), RC_MAL);
	assert_int_equal(DEC(V3, 0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F), RC_MAL);
	// A property length VBI of five bytes inside a PUBLISH.
	assert_int_equal(
	    DEC(V5, 0x30, 0x09, 0x00, 0x01, 't', 0x80, 0x80, 0x80, 0x80, 0x01, 'x'), RC_MAL);
	// A non-minimal remaining length.
	assert_int_equal(DEC(V5, 0xC0, 0x80, 0x00), RC_MAL);
}

// Checks that fixed-header flags other than 0b0010 (PUBREL, SUBSCRIBE, UNSUBSCRIBE) or 0 (the rest)
// are Malformed.
// [MQTT-2.2.2-2] [MQTT-3.6.1-1] [MQTT-3.8.1-1] [MQTT-3.10.1-1] [MQTT-3.14.1-1]
// [MQTT5-3.6.1-1] [MQTT5-3.8.1-1] [MQTT5-3.10.1-1] [MQTT5-3.14.1-1] [MQTT5-3.15.1-1]
static void test_reject_reserved_flags(void **state)
{
	(void)state;
	// PINGREQ, with every non-zero flag value.
	for (uint8_t f = 1; f < 16; f++) {
		assert_int_equal(DEC(V5, (uint8_t)(0xC0 | f), 0x00), RC_MAL);
		assert_int_equal(DEC(V5, (uint8_t)(0xD0 | f), 0x00), RC_MAL);
		assert_int_equal(DEC(V5, (uint8_t)(0xE0 | f), 0x00), RC_MAL);
		assert_int_equal(DEC(V3, (uint8_t)(0xE0 | f), 0x00), RC_MAL);
		assert_int_equal(DEC(V5, (uint8_t)(0xF0 | f), 0x00), RC_MAL);
	}
	// Acks: PUBREL needs 0b0010, the others 0.
	for (uint8_t f = 0; f < 16; f++) {
		int ok = (f == 0) ? 0 : RC_MAL;
		assert_int_equal(DEC(V3, (uint8_t)(0x40 | f), 0x02, 0x00, 0x01), ok);
		assert_int_equal(DEC(V3, (uint8_t)(0x50 | f), 0x02, 0x00, 0x01), ok);
		assert_int_equal(DEC(V3, (uint8_t)(0x70 | f), 0x02, 0x00, 0x01), ok);
		assert_int_equal(
		    DEC(V3, (uint8_t)(0x60 | f), 0x02, 0x00, 0x01), f == 2 ? 0 : RC_MAL);
		assert_int_equal(DEC(V3, (uint8_t)(0x20 | f), 0x02, 0x00, 0x00), ok);
		assert_int_equal(DEC(V3, (uint8_t)(0x90 | f), 0x03, 0x00, 0x01, 0x00), ok);
		assert_int_equal(DEC(V3, (uint8_t)(0xB0 | f), 0x02, 0x00, 0x01), ok);
		// SUBSCRIBE and UNSUBSCRIBE need 0b0010.
		assert_int_equal(
		    DEC(V3, (uint8_t)(0x80 | f), 0x06, 0x00, 0x01, 0x00, 0x01, 'a', 0x00),
		    f == 2 ? 0 : RC_MAL);
		assert_int_equal(DEC(V3, (uint8_t)(0xA0 | f), 0x05, 0x00, 0x01, 0x00, 0x01, 'a'),
		    f == 2 ? 0 : RC_MAL);
		// CONNECT.
		assert_int_equal(DEC(V3, (uint8_t)(0x10 | f), 0x0D, 0x00, 0x04, 'M', 'Q', 'T', 'T',
		                     0x04, 0x02, 0x00, 0x3C, 0x00, 0x01, 'a'),
		    ok);
	}
}

// Checks that the reserved packet type 0 is Malformed.
static void test_reject_packet_type_0(void **state)
{
	(void)state;
	assert_int_equal(DEC(V5, 0x00, 0x00), RC_MAL);
	assert_int_equal(DEC(V3, 0x00, 0x00), RC_MAL);
}

// Checks that a remaining length that disagrees with the frame or its content, either way, is
// Malformed.
static void test_reject_remaining_length(void **state)
{
	uint8_t     b[8] = { 0x40, 0x02, 0x00, 0x01, 0x00 };
	mqtt_packet p;

	(void)state;
	// The frame is shorter, or longer, than its remaining length says.
	assert_int_equal(mqtt_decode(b, 3, V5, &p), RC_MAL);
	assert_int_equal(mqtt_decode(b, 5, V5, &p), RC_MAL);
	assert_int_equal(mqtt_decode(b, 4, V5, &p), 0);
	assert_int_equal(mqtt_decode(b, 1, V5, &p), RC_MAL);
	assert_int_equal(mqtt_decode(b, 0, V5, &p), RC_MAL);
	assert_int_equal(mqtt_decode(NULL, 0, V5, &p), RC_MAL);
	// Trailing bytes inside the remaining length.
	assert_int_equal(DEC(V5, 0xC0, 0x01, 0x00), RC_MAL); // PINGREQ
	assert_int_equal(DEC(V5, 0xD0, 0x01, 0x00), RC_MAL); // PINGRESP
	assert_int_equal(DEC(V3, 0xE0, 0x01, 0x00), RC_MAL); // v3 DISCONNECT
	assert_int_equal(DEC(V3, 0x40, 0x03, 0x00, 0x01, 0x00), RC_MAL); // v3 PUBACK
	assert_int_equal(DEC(V3, 0xB0, 0x03, 0x00, 0x01, 0x00), RC_MAL); // v3 UNSUBACK
	assert_int_equal(DEC(V3, 0x20, 0x03, 0x00, 0x00, 0x00), RC_MAL); // v3 CONNACK
	assert_int_equal(DEC(V5, 0x20, 0x04, 0x00, 0x00, 0x00, 0x00), RC_MAL); // v5 CONNACK
	assert_int_equal(DEC(V3, 0x10, 0x0E, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x04, 0x02, 0x00, 0x3C,
	                     0x00, 0x01, 'a', 'b'),
	    RC_MAL);
	assert_int_equal(DEC(V5, 0x40, 0x05, 0x00, 0x01, 0x00, 0x00, 0x00), RC_MAL); // v5 PUBACK
	// Too short for the content.
	assert_int_equal(DEC(V5, 0x40, 0x01, 0x00), RC_MAL);
	assert_int_equal(DEC(V3, 0x40, 0x00), RC_MAL);
	assert_int_equal(DEC(V3, 0x20, 0x01, 0x00), RC_MAL);
	assert_int_equal(DEC(V5, 0x20, 0x02, 0x00, 0x00), RC_MAL); // v5 needs a property length
	assert_int_equal(DEC(V3, 0x10, 0x0C, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x04, 0x02, 0x00, 0x3C,
	                     0x00, 0x02, 'a'),
	    RC_MAL);
	assert_int_equal(DEC(V3, 0x30, 0x02, 0x00, 0x05), RC_MAL); // topic runs past the end
	assert_int_equal(DEC(V3, 0x32, 0x04, 0x00, 0x01, 't', 0x00), RC_MAL); // half a packet id
	// A property length larger than what remains.
	assert_int_equal(DEC(V5, 0x30, 0x05, 0x00, 0x01, 't', 0x05, 0x01), RC_MAL);
	// A property value cut short by the property length.
	assert_int_equal(DEC(V5, 0x30, 0x07, 0x00, 0x01, 't', 0x02, 0x02, 0x00, 0x00), RC_MAL);
}

// ---------------------------------------------------------------------------
// UTF-8, topic names and filters.

// Checks mqtt_utf8_valid on valid text and on U+0000, surrogates, overlong forms, > U+10FFFF and
// truncations.
// [MQTT-1.5.3-1] [MQTT-1.5.3-2] [MQTT5-1.5.4-1] [MQTT5-1.5.4-2]
static void test_utf8(void **state)
{
	(void)state;
	assert_true(mqtt_utf8_valid((const uint8_t *)"", 0));
	assert_true(mqtt_utf8_valid((const uint8_t *)"abc/def", 7));
	assert_true(mqtt_utf8_valid((const uint8_t *)"\xc3\xa4", 2)); // U+00E4
	assert_true(mqtt_utf8_valid((const uint8_t *)"\xe2\x82\xac", 3)); // U+20AC
	assert_true(mqtt_utf8_valid((const uint8_t *)"\xed\x9f\xbf", 3)); // U+D7FF
	assert_true(mqtt_utf8_valid((const uint8_t *)"\xee\x80\x80", 3)); // U+E000
	assert_true(mqtt_utf8_valid((const uint8_t *)"\xef\xbb\xbf", 3)); // BOM allowed
	assert_true(mqtt_utf8_valid((const uint8_t *)"\xf0\x90\x80\x80", 4)); // U+10000
	assert_true(mqtt_utf8_valid((const uint8_t *)"\xf4\x8f\xbf\xbf", 4)); // U+10FFFF
	assert_true(mqtt_utf8_valid((const uint8_t *)"\x01\x7f", 2));

	assert_false(mqtt_utf8_valid((const uint8_t *)"a\0b", 3)); // U+0000
	assert_false(mqtt_utf8_valid((const uint8_t *)"\xc0\x80", 2)); // overlong NUL
	assert_false(mqtt_utf8_valid((const uint8_t *)"\xc0\xaf", 2)); // overlong '/'
	assert_false(mqtt_utf8_valid((const uint8_t *)"\xc1\xbf", 2)); // overlong
	assert_false(mqtt_utf8_valid((const uint8_t *)"\xe0\x80\xaf", 3)); // overlong
	assert_false(mqtt_utf8_valid((const uint8_t *)"\xe0\x9f\xbf", 3)); // overlong
	assert_false(mqtt_utf8_valid((const uint8_t *)"\xf0\x80\x80\xaf", 4)); // overlong
	assert_false(mqtt_utf8_valid((const uint8_t *)"\xf0\x8f\xbf\xbf", 4)); // overlong
	assert_false(mqtt_utf8_valid((const uint8_t *)"\xed\xa0\x80", 3)); // U+D800
	assert_false(mqtt_utf8_valid((const uint8_t *)"\xed\xbf\xbf", 3)); // U+DFFF
	assert_false(mqtt_utf8_valid((const uint8_t *)"\xf4\x90\x80\x80", 4)); // U+110000
	assert_false(mqtt_utf8_valid((const uint8_t *)"\xf5\x80\x80\x80", 4)); // > U+10FFFF
	assert_false(mqtt_utf8_valid((const uint8_t *)"\xff", 1));
	assert_false(mqtt_utf8_valid((const uint8_t *)"\x80", 1)); // lone continuation
	assert_false(mqtt_utf8_valid((const uint8_t *)"\xc3", 1)); // truncated
	assert_false(mqtt_utf8_valid((const uint8_t *)"\xe2\x82", 2)); // truncated
	assert_false(mqtt_utf8_valid((const uint8_t *)"\xf0\x90\x80", 3)); // truncated
	assert_false(mqtt_utf8_valid((const uint8_t *)"\xe2\x28\xa1", 3)); // bad continuation
	assert_false(mqtt_utf8_valid((const uint8_t *)"\xf0\x90\x28\xbc", 4)); // bad continuation
	assert_false(mqtt_utf8_valid(NULL, 1));
}

// Decodes a v5 and a v3 PUBLISH whose topic is the n bytes at t and returns
// the v5 result after checking that v3 gives the same.
static int publish_topic(const char *t, size_t n)
{
	fb          f = { .n = 0 };
	mqtt_packet p;
	int         rc3, rc5;

	fb_bin(&f, t, n);
	rc3 = dec_body(0x30, &f, V3, &p);
	fb_u8(&f, 0x00); // v5 property length
	rc5 = dec_body(0x30, &f, V5, &p);
	if (n > 0) {
		assert_int_equal(rc3, rc5);
	}
	return rc5;
}

// Checks that bad UTF-8 in topics, client ids, user names, filters and string properties is
// Malformed.
// [MQTT-1.5.3-1] [MQTT-1.5.3-2] [MQTT5-1.5.4-1] [MQTT5-1.5.4-2]
static void test_reject_bad_utf8(void **state)
{
	static const char  *bad[] = { "a\0b", "\xed\xa0\x80", "\xc0\xaf", "\xe0\x80\xaf",
		 "\xf0\x80\x80\xaf", "\xf4\x90\x80\x80", "\xc3", "\x80" };
	static const size_t len[] = { 3, 3, 2, 3, 4, 4, 1, 1 };
	fb                  f;
	mqtt_packet         p;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		// PUBLISH topic.
		assert_int_equal(publish_topic(bad[i], len[i]), RC_MAL);
		// CONNECT client identifier, v3 and v5.
		f.n = 0;
		fb_str(&f, "MQTT");
		fb_u8(&f, 4);
		fb_u8(&f, 0x02);
		fb_u16(&f, 60);
		fb_bin(&f, bad[i], len[i]);
		assert_int_equal(dec_body(0x10, &f, V3, &p), RC_MAL);
		// CONNECT user name.
		f.n = 0;
		fb_str(&f, "MQTT");
		fb_u8(&f, 5);
		fb_u8(&f, 0x82);
		fb_u16(&f, 60);
		fb_u8(&f, 0);
		fb_str(&f, "c");
		fb_bin(&f, bad[i], len[i]);
		assert_int_equal(dec_body(0x10, &f, V5, &p), RC_MAL);
		// SUBSCRIBE filter.
		f.n = 0;
		fb_u16(&f, 1);
		fb_bin(&f, bad[i], len[i]);
		fb_u8(&f, 0);
		assert_int_equal(dec_body(0x82, &f, V3, &p), RC_MAL);
		// UNSUBSCRIBE filter.
		f.n = 0;
		fb_u16(&f, 1);
		fb_u8(&f, 0);
		fb_bin(&f, bad[i], len[i]);
		assert_int_equal(dec_body(0xA2, &f, V5, &p), RC_MAL);
		// User property key and value, reason string.
		fb pr = { .n = 0 };
		fb_u8(&pr, MQTT_PROP_USER_PROPERTY);
		fb_bin(&pr, bad[i], len[i]);
		fb_str(&pr, "v");
		f.n = 0;
		fb_u16(&f, 1);
		fb_u8(&f, 0);
		fb_props(&f, &pr);
		assert_int_equal(dec_body(0x40, &f, V5, &p), RC_MAL);
		pr.n = 0;
		fb_u8(&pr, MQTT_PROP_REASON_STRING);
		fb_bin(&pr, bad[i], len[i]);
		f.n = 0;
		fb_u16(&f, 1);
		fb_u8(&f, 0);
		fb_props(&f, &pr);
		assert_int_equal(dec_body(0x40, &f, V5, &p), RC_MAL);
	}
}

// Checks mqtt_topic_name_valid on valid names, empty names and wildcards.
// [MQTT-4.7.1-1] [MQTT-4.7.3-1] [MQTT-4.7.3-2] [MQTT5-4.7.0-1] [MQTT5-4.7.3-1]
// [MQTT5-4.7.3-2]
static void test_topic_name_valid(void **state)
{
	(void)state;
	assert_true(mqtt_topic_name_valid((const uint8_t *)"a/b/c", 5));
	assert_true(mqtt_topic_name_valid((const uint8_t *)"/", 1));
	assert_true(mqtt_topic_name_valid((const uint8_t *)"$SYS/x", 6));
	assert_false(mqtt_topic_name_valid((const uint8_t *)"", 0));
	assert_false(mqtt_topic_name_valid((const uint8_t *)"a/+", 3));
	assert_false(mqtt_topic_name_valid((const uint8_t *)"a/#", 3));
	assert_false(mqtt_topic_name_valid((const uint8_t *)"a+b", 3));
	assert_false(mqtt_topic_name_valid((const uint8_t *)"a\0", 2));
}

// Checks mqtt_topic_filter_valid on valid filters, misplaced wildcards and shared subscription
// forms.
// [MQTT-4.7.1-2] [MQTT-4.7.1-3] [MQTT-4.7.3-1] [MQTT5-4.7.1-1] [MQTT5-4.7.1-2]
// [MQTT5-4.7.3-1] [MQTT5-4.8.2-1] [MQTT5-4.8.2-2]
static void test_topic_filter_valid(void **state)
{
	static const char *good[] = { "a", "#", "+", "/", "a/b", "a/+/c", "+/+", "a/#", "/#", "+/#",
		"a//b", "$SYS/#", "$share/g/a/b", "$share/g/#", "$share/g/+", "$share/g//" };
	static const char *bad[]
	    = { "", "a/#/b", "a+", "a#", "+a", "#/a", "a/b#", "a/+b", "$share/g", "$share/",
		      "$share//a", "$share/g/", "$share/g+/a", "$share/#/a", "$share/g#/a" };

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		assert_true(mqtt_topic_filter_valid((const uint8_t *)good[i], strlen(good[i])));
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_false(mqtt_topic_filter_valid((const uint8_t *)bad[i], strlen(bad[i])));
	}
	assert_false(mqtt_topic_filter_valid((const uint8_t *)"\xed\xa0\x80", 3));
}

// Checks that PUBLISH topics with wildcards are Topic Name invalid and that empty topics follow the
// version rules.
// [MQTT-3.3.2-2] [MQTT5-3.3.2-2]
static void test_reject_publish_topic(void **state)
{
	mqtt_packet p;
	fb          f = { .n = 0 }, pr = { .n = 0 };

	(void)state;
	// Wildcards: Topic Name invalid, both versions.
	assert_int_equal(publish_topic("a/+", 3), MQTT_RC_TOPIC_NAME_INVALID);
	assert_int_equal(publish_topic("a/#", 3), MQTT_RC_TOPIC_NAME_INVALID);
	assert_int_equal(publish_topic("#", 1), MQTT_RC_TOPIC_NAME_INVALID);
	assert_int_equal(publish_topic("a+", 2), MQTT_RC_TOPIC_NAME_INVALID);
	// Empty: 3.1.1 malformed, v5 protocol error without a topic alias.
	fb_u16(&f, 0);
	assert_int_equal(dec_body(0x30, &f, V3, &p), RC_MAL);
	fb_u8(&f, 0);
	assert_int_equal(dec_body(0x30, &f, V5, &p), RC_PROTO);
	// v5 with a topic alias: accepted.
	f.n = 0;
	fb_u16(&f, 0);
	fb_u8(&pr, MQTT_PROP_TOPIC_ALIAS);
	fb_u16(&pr, 4);
	fb_props(&f, &pr);
	fb_put(&f, "pay", 3);
	assert_int_equal(dec_body(0x30, &f, V5, &p), 0);
	assert_int_equal(p.u.publish.topic.len, 0);
	assert_int_equal(p.u.publish.props.topic_alias, 4);
	assert_bytes(p.u.publish.payload, BS("pay"));
}

// Checks that PUBLISH with QoS 3, or DUP on QoS 0, is Malformed in both versions.
// [MQTT-3.3.1-4] [MQTT5-3.3.1-4]
static void test_reject_publish_qos3_and_dup(void **state)
{
	(void)state;
	// QoS 3.
	assert_int_equal(DEC(V3, 0x36, 0x05, 0x00, 0x01, 't', 0x00, 0x01), RC_MAL);
	assert_int_equal(DEC(V5, 0x36, 0x06, 0x00, 0x01, 't', 0x00, 0x01, 0x00), RC_MAL);
	// DUP with QoS 0.
	assert_int_equal(DEC(V3, 0x38, 0x03, 0x00, 0x01, 't'), RC_MAL);
	assert_int_equal(DEC(V5, 0x38, 0x04, 0x00, 0x01, 't', 0x00), RC_MAL);
	// DUP with QoS 1 is fine; RETAIN is fine.
	assert_int_equal(DEC(V3, 0x3B, 0x05, 0x00, 0x01, 't', 0x00, 0x01), 0);
	assert_int_equal(DEC(V5, 0x3D, 0x06, 0x00, 0x01, 't', 0x00, 0x01, 0x00), 0);
}

// Checks that packet identifier 0 is a Protocol Error in every packet that carries one.
// [MQTT-2.3.1-1] [MQTT5-2.2.1-3]
static void test_reject_packet_id_zero(void **state)
{
	(void)state;
	// Decision: a zero packet identifier is a Protocol Error everywhere.
	assert_int_equal(DEC(V3, 0x32, 0x05, 0x00, 0x01, 't', 0x00, 0x00), RC_PROTO);
	assert_int_equal(DEC(V5, 0x34, 0x06, 0x00, 0x01, 't', 0x00, 0x00, 0x00), RC_PROTO);
	assert_int_equal(DEC(V3, 0x40, 0x02, 0x00, 0x00), RC_PROTO);
	assert_int_equal(DEC(V5, 0x50, 0x02, 0x00, 0x00), RC_PROTO);
	assert_int_equal(DEC(V5, 0x62, 0x02, 0x00, 0x00), RC_PROTO);
	assert_int_equal(DEC(V3, 0x70, 0x02, 0x00, 0x00), RC_PROTO);
	assert_int_equal(DEC(V3, 0x82, 0x06, 0x00, 0x00, 0x00, 0x01, 'a', 0x00), RC_PROTO);
	assert_int_equal(DEC(V5, 0x82, 0x07, 0x00, 0x00, 0x00, 0x00, 0x01, 'a', 0x00), RC_PROTO);
	assert_int_equal(DEC(V3, 0xA2, 0x05, 0x00, 0x00, 0x00, 0x01, 'a'), RC_PROTO);
	assert_int_equal(DEC(V3, 0x90, 0x03, 0x00, 0x00, 0x00), RC_PROTO);
	assert_int_equal(DEC(V3, 0xB0, 0x02, 0x00, 0x00), RC_PROTO);
	assert_int_equal(DEC(V5, 0xB0, 0x04, 0x00, 0x00, 0x00, 0x00), RC_PROTO);
	// QoS 0 PUBLISH carries no packet id, so the 0x00 0x00 is payload.
	assert_int_equal(DEC(V3, 0x30, 0x05, 0x00, 0x01, 't', 0x00, 0x00), 0);
}

// Checks that SUBSCRIBE, UNSUBSCRIBE and SUBACK without entries are a Protocol Error.
// [MQTT-3.8.3-3] [MQTT-3.10.3-2] [MQTT5-3.8.3-2] [MQTT5-3.10.3-2]
static void test_reject_empty_sub_unsub(void **state)
{
	(void)state;
	assert_int_equal(DEC(V3, 0x82, 0x02, 0x00, 0x01), RC_PROTO);
	assert_int_equal(DEC(V5, 0x82, 0x03, 0x00, 0x01, 0x00), RC_PROTO);
	assert_int_equal(DEC(V3, 0xA2, 0x02, 0x00, 0x01), RC_PROTO);
	assert_int_equal(DEC(V5, 0xA2, 0x03, 0x00, 0x01, 0x00), RC_PROTO);
	// Empty SUBACK code list.
	assert_int_equal(DEC(V3, 0x90, 0x02, 0x00, 0x01), RC_PROTO);
	assert_int_equal(DEC(V5, 0x90, 0x03, 0x00, 0x01, 0x00), RC_PROTO);
	assert_int_equal(DEC(V5, 0xB0, 0x03, 0x00, 0x01, 0x00), RC_PROTO);
}

// Checks that structurally invalid filters pass mqtt_decode and are caught by
// mqtt_topic_filter_valid, entry by entry.
static void test_sub_filters_left_to_broker(void **state)
{
	static const char *filters[] = { "a/#/b", "a+", "", "$share/g" };
	fb                 f         = { .n = 0 };
	mqtt_packet        p;
	mqtt_sub_iter      it;
	mqtt_unsub_iter    uit;
	mqtt_bytes         flt;
	mqtt_sub_opts      o;

	(void)state;
	fb_u16(&f, 9);
	fb_u8(&f, 0);
	for (size_t i = 0; i < 4; i++) {
		fb_str(&f, filters[i]);
		fb_u8(&f, (uint8_t)i % 3);
	}
	assert_int_equal(dec_body(0x82, &f, V5, &p), 0);
	assert_int_equal(p.u.subscribe.count, 4);
	mqtt_sub_iter_init(&it, &p.u.subscribe, V5);
	for (size_t i = 0; i < 4; i++) {
		assert_true(mqtt_sub_iter_next(&it, &flt, &o));
		assert_int_equal(flt.len, strlen(filters[i]));
		assert_int_equal(o.qos, i % 3);
		assert_false(mqtt_topic_filter_valid(flt.p, flt.len));
	}
	assert_false(mqtt_sub_iter_next(&it, &flt, &o));

	f.n = 0;
	fb_u16(&f, 9);
	for (size_t i = 0; i < 4; i++) {
		fb_str(&f, filters[i]);
	}
	assert_int_equal(dec_body(0xA2, &f, V3, &p), 0);
	assert_int_equal(p.u.unsubscribe.count, 4);
	mqtt_unsub_iter_init(&uit, &p.u.unsubscribe);
	for (size_t i = 0; i < 4; i++) {
		assert_true(mqtt_unsub_iter_next(&uit, &flt));
		assert_int_equal(flt.len, strlen(filters[i]));
	}
	assert_false(mqtt_unsub_iter_next(&uit, &flt));
}

// Decodes a one-entry SUBSCRIBE with filter and options byte o for proto.
static int sub_opts(uint8_t proto, const char *filter, uint8_t o)
{
	fb          f = { .n = 0 };
	mqtt_packet p;

	fb_u16(&f, 1);
	if (proto == V5) {
		fb_u8(&f, 0);
	}
	fb_str(&f, "ok/1");
	fb_u8(&f, 1);
	fb_str(&f, filter);
	fb_u8(&f, o);
	return dec_body(0x82, &f, proto, &p);
}

// Checks the subscription options rules: reserved bits, Retain Handling 3, QoS 3, No Local on
// shared, 3.1.1 bits.
// [MQTT-3.8.3-4] [MQTT5-3.8.3-4] [MQTT5-3.8.3-5]
static void test_reject_sub_options(void **state)
{
	(void)state;
	assert_int_equal(sub_opts(V5, "a", 0x2E), 0); // everything legal set
	assert_int_equal(sub_opts(V5, "a", 0x40), RC_MAL);
	assert_int_equal(sub_opts(V5, "a", 0x80), RC_MAL);
	assert_int_equal(sub_opts(V5, "a", 0x30), RC_PROTO); // retain handling 3
	assert_int_equal(sub_opts(V5, "a", 0x03), RC_PROTO); // QoS 3
	assert_int_equal(sub_opts(V5, "$share/g/a", 0x04), RC_PROTO); // No Local on shared
	assert_int_equal(sub_opts(V5, "$share/g/a", 0x08), 0);
	assert_int_equal(sub_opts(V3, "a", 0x02), 0);
	assert_int_equal(sub_opts(V3, "a", 0x03), RC_MAL);
	for (uint8_t b = 2; b < 8; b++) {
		assert_int_equal(sub_opts(V3, "a", (uint8_t)(1u << b)), RC_MAL);
	}
	assert_int_equal(sub_opts(V3, "$share/g/a", 0x01), 0);
	// Missing options byte.
	assert_int_equal(DEC(V3, 0x82, 0x05, 0x00, 0x01, 0x00, 0x01, 'a'), RC_MAL);
}

// ---------------------------------------------------------------------------
// Properties: allowed sets, duplicates, ranges.

// Builds a minimal valid packet of context c around the property block
// content pr and decodes it as v5.
static int dec_ctx(int c, const fb *pr)
{
	fb          f     = { .n = 0 };
	fb          empty = { .n = 0 };
	mqtt_packet p;
	uint8_t     first = 0;

	switch (c) {
	case C_CONNECT:
	case C_WILL:
		fb_str(&f, "MQTT");
		fb_u8(&f, 5);
		fb_u8(&f, c == C_WILL ? 0x06 : 0x02);
		fb_u16(&f, 60);
		fb_props(&f, c == C_CONNECT ? pr : &empty);
		fb_str(&f, "client");
		if (c == C_WILL) {
			fb_props(&f, pr);
			fb_str(&f, "will/t");
			fb_str(&f, "bye");
		}
		first = 0x10;
		break;
	case C_CONNACK:
		fb_u8(&f, 0);
		fb_u8(&f, 0);
		fb_props(&f, pr);
		first = 0x20;
		break;
	case C_PUBLISH:
		fb_str(&f, "t/1");
		fb_u16(&f, 7);
		fb_props(&f, pr);
		fb_put(&f, "payload", 7);
		first = 0x32;
		break;
	case C_PUBACK:
	case C_PUBREC:
	case C_PUBREL:
	case C_PUBCOMP:
		fb_u16(&f, 7);
		fb_u8(&f, 0);
		fb_props(&f, pr);
		first = (uint8_t)((MQTT_PUBACK + (c - C_PUBACK)) << 4);
		if (c == C_PUBREL) {
			first |= 2;
		}
		break;
	case C_SUBSCRIBE:
		fb_u16(&f, 7);
		fb_props(&f, pr);
		fb_str(&f, "t/#");
		fb_u8(&f, 1);
		first = 0x82;
		break;
	case C_SUBACK:
	case C_UNSUBACK:
		fb_u16(&f, 7);
		fb_props(&f, pr);
		fb_u8(&f, 0);
		first = c == C_SUBACK ? 0x90 : 0xB0;
		break;
	case C_UNSUBSCRIBE:
		fb_u16(&f, 7);
		fb_props(&f, pr);
		fb_str(&f, "t/#");
		first = 0xA2;
		break;
	case C_DISCONNECT:
	case C_AUTH:
		fb_u8(&f, 0);
		fb_props(&f, pr);
		first = c == C_AUTH ? 0xF0 : 0xE0;
		break;
	default:
		fail();
	}
	return dec_body(first, &f, V5, &p);
}

// Appends property id with a valid sample value to f.
static void sample_prop(fb *f, uint8_t id)
{
	fb_u8(f, id);
	switch (id) {
	case 0x01:
	case 0x17:
	case 0x19:
	case 0x24:
	case 0x25:
	case 0x28:
	case 0x29:
	case 0x2A:
		fb_u8(f, 1);
		break;
	case 0x13:
	case 0x21:
	case 0x22:
	case 0x23:
		fb_u16(f, 5);
		break;
	case 0x02:
	case 0x11:
	case 0x18:
	case 0x27:
		fb_u32(f, 5);
		break;
	case 0x0B:
		fb_vbi(f, 5);
		break;
	case 0x09:
	case 0x16:
		fb_bin(f, "\x00\xff", 2);
		break;
	case 0x26:
		fb_str(f, "k");
		fb_str(f, "v");
		break;
	default:
		fb_str(f, "a/b");
		break;
	}
}

// Checks every property identifier in every packet type (and the will block) against the allowed
// table.
static void test_props_allowed_per_packet(void **state)
{
	(void)state;
	for (int c = 0; c < C_COUNT; c++) {
		for (size_t i = 0; i < sizeof(all_ids); i++) {
			uint8_t id = all_ids[i];
			fb      pr = { .n = 0 };
			bool    ok = (allowed[c] & MQTT_PBIT(id)) != 0;

			if (id == MQTT_PROP_AUTH_DATA && ok) {
				sample_prop(&pr, MQTT_PROP_AUTH_METHOD);
			}
			sample_prop(&pr, id);
			print_message("ctx %d id 0x%02x\n", c, id);
			assert_int_equal(dec_ctx(c, &pr), ok ? 0 : RC_MAL);
		}
		// Identifiers that do not exist.
		static const uint8_t unknown[] = { 0x00, 0x04, 0x0A, 0x14, 0x20, 0x2B, 0x7F };
		for (size_t i = 0; i < sizeof(unknown); i++) {
			fb pr = { .n = 0 };
			fb_u8(&pr, unknown[i]);
			fb_u8(&pr, 0);
			assert_int_equal(dec_ctx(c, &pr), RC_MAL);
		}
		// A two-byte identifier VBI (0x81 0x00 is not minimal; 0x81 0x01
		// is 129, unknown).
		fb pr = { .n = 0 };
		fb_u8(&pr, 0x81);
		fb_u8(&pr, 0x01);
		fb_u8(&pr, 0);
		assert_int_equal(dec_ctx(c, &pr), RC_MAL);
	}
}

// Checks that repeating a single-valued property is a Protocol Error and that repeatable ones may
// repeat.
static void test_reject_duplicate_props(void **state)
{
	(void)state;
	for (int c = 0; c < C_COUNT; c++) {
		for (size_t i = 0; i < sizeof(all_ids); i++) {
			uint8_t id = all_ids[i];
			fb      pr = { .n = 0 };
			int     want;

			if ((allowed[c] & MQTT_PBIT(id)) == 0) {
				continue;
			}
			if (id == MQTT_PROP_AUTH_DATA) {
				sample_prop(&pr, MQTT_PROP_AUTH_METHOD);
			}
			sample_prop(&pr, id);
			sample_prop(&pr, id);
			if (id == MQTT_PROP_USER_PROPERTY
			    || (id == MQTT_PROP_SUBSCRIPTION_ID && c == C_PUBLISH)) {
				want = 0;
			} else {
				want = RC_PROTO;
			}
			print_message("ctx %d id 0x%02x\n", c, id);
			assert_int_equal(dec_ctx(c, &pr), want);
		}
	}
}

// Decodes context c with a single property id of one byte value v.
static int prop_u8(int c, uint8_t id, uint8_t v)
{
	fb pr = { .n = 0 };
	fb_u8(&pr, id);
	fb_u8(&pr, v);
	return dec_ctx(c, &pr);
}

// Decodes context c with a single property id of two-byte value v.
static int prop_u16(int c, uint8_t id, uint16_t v)
{
	fb pr = { .n = 0 };
	fb_u8(&pr, id);
	fb_u16(&pr, v);
	return dec_ctx(c, &pr);
}

// Decodes context c with a single property id of four-byte value v.
static int prop_u32(int c, uint8_t id, uint32_t v)
{
	fb pr = { .n = 0 };
	fb_u8(&pr, id);
	fb_u32(&pr, v);
	return dec_ctx(c, &pr);
}

// Checks that property values out of range, auth data without a method and wildcard response topics
// are rejected.
static void test_reject_prop_values(void **state)
{
	(void)state;
	// Payload format indicator.
	assert_int_equal(prop_u8(C_PUBLISH, MQTT_PROP_PAYLOAD_FORMAT, 0), 0);
	assert_int_equal(prop_u8(C_PUBLISH, MQTT_PROP_PAYLOAD_FORMAT, 1), 0);
	assert_int_equal(prop_u8(C_PUBLISH, MQTT_PROP_PAYLOAD_FORMAT, 2), RC_PROTO);
	assert_int_equal(prop_u8(C_WILL, MQTT_PROP_PAYLOAD_FORMAT, 0xFF), RC_PROTO);
	// Request problem / response information.
	assert_int_equal(prop_u8(C_CONNECT, MQTT_PROP_REQUEST_PROBLEM, 0), 0);
	assert_int_equal(prop_u8(C_CONNECT, MQTT_PROP_REQUEST_PROBLEM, 2), RC_PROTO);
	assert_int_equal(prop_u8(C_CONNECT, MQTT_PROP_REQUEST_RESPONSE, 2), RC_PROTO);
	// Receive maximum, maximum packet size.
	assert_int_equal(prop_u16(C_CONNECT, MQTT_PROP_RECEIVE_MAXIMUM, 0), RC_PROTO);
	assert_int_equal(prop_u16(C_CONNACK, MQTT_PROP_RECEIVE_MAXIMUM, 0), RC_PROTO);
	assert_int_equal(prop_u16(C_CONNECT, MQTT_PROP_RECEIVE_MAXIMUM, 1), 0);
	assert_int_equal(prop_u32(C_CONNECT, MQTT_PROP_MAX_PACKET_SIZE, 0), RC_PROTO);
	assert_int_equal(prop_u32(C_CONNACK, MQTT_PROP_MAX_PACKET_SIZE, 0), RC_PROTO);
	assert_int_equal(prop_u32(C_CONNECT, MQTT_PROP_MAX_PACKET_SIZE, 1), 0);
	// CONNACK capability bytes.
	assert_int_equal(prop_u8(C_CONNACK, MQTT_PROP_MAXIMUM_QOS, 0), 0);
	assert_int_equal(prop_u8(C_CONNACK, MQTT_PROP_MAXIMUM_QOS, 2), RC_PROTO);
	assert_int_equal(prop_u8(C_CONNACK, MQTT_PROP_RETAIN_AVAILABLE, 2), RC_PROTO);
	assert_int_equal(prop_u8(C_CONNACK, MQTT_PROP_WILDCARD_SUB_AVAIL, 2), RC_PROTO);
	assert_int_equal(prop_u8(C_CONNACK, MQTT_PROP_SUB_ID_AVAIL, 2), RC_PROTO);
	assert_int_equal(prop_u8(C_CONNACK, MQTT_PROP_SHARED_SUB_AVAIL, 2), RC_PROTO);
	// Topic alias 0.
	assert_int_equal(prop_u16(C_PUBLISH, MQTT_PROP_TOPIC_ALIAS, 0), RC_PROTO);
	assert_int_equal(prop_u16(C_PUBLISH, MQTT_PROP_TOPIC_ALIAS, 0xFFFF), 0);
	// Subscription identifier 0, in SUBSCRIBE and PUBLISH.
	assert_int_equal(prop_u8(C_SUBSCRIBE, MQTT_PROP_SUBSCRIPTION_ID, 0), RC_PROTO);
	assert_int_equal(prop_u8(C_PUBLISH, MQTT_PROP_SUBSCRIPTION_ID, 0), RC_PROTO);
	{
		fb pr = { .n = 0 };
		fb_u8(&pr, MQTT_PROP_SUBSCRIPTION_ID);
		fb_vbi(&pr, MQTT_VBI_MAX);
		assert_int_equal(dec_ctx(C_SUBSCRIBE, &pr), 0);
		pr.n = 0;
		fb_u8(&pr, MQTT_PROP_SUBSCRIPTION_ID);
		fb_put(&pr, "\x80\x80\x80\x80\x01", 5); // five-byte VBI
		assert_int_equal(dec_ctx(C_SUBSCRIBE, &pr), RC_MAL);
	}
	// Authentication data without a method.
	{
		fb pr = { .n = 0 };
		sample_prop(&pr, MQTT_PROP_AUTH_DATA);
		assert_int_equal(dec_ctx(C_CONNECT, &pr), RC_PROTO);
		assert_int_equal(dec_ctx(C_CONNACK, &pr), RC_PROTO);
		assert_int_equal(dec_ctx(C_AUTH, &pr), RC_PROTO);
	}
	// Response topic with a wildcard.
	{
		fb pr = { .n = 0 };
		fb_u8(&pr, MQTT_PROP_RESPONSE_TOPIC);
		fb_str(&pr, "r/+");
		assert_int_equal(dec_ctx(C_PUBLISH, &pr), RC_PROTO);
		assert_int_equal(dec_ctx(C_WILL, &pr), RC_PROTO);
	}
}

// ---------------------------------------------------------------------------
// CONNECT.

// Builds a CONNECT with protocol name, level and flags; payload fields are
// added by the caller.
static void connect_hdr(fb *f, const char *name, uint8_t level, uint8_t flags)
{
	f->n = 0;
	fb_str(f, name);
	fb_u8(f, level);
	fb_u8(f, flags);
	fb_u16(f, 30);
	if (level == 5) {
		fb_u8(f, 0);
	}
}

// Checks the CONNECT rejects: protocol name and level, flags, will topic, missing fields, 3.1.1
// password rule.
static void test_reject_connect(void **state)
{
	fb          f;
	mqtt_packet p;

	(void)state;
	// Accepted names and levels.
	connect_hdr(&f, "MQTT", 4, 0x02);
	fb_str(&f, "c");
	assert_int_equal(dec_body(0x10, &f, V5, &p), 0);
	assert_int_equal(p.u.connect.proto_level, 4);
	connect_hdr(&f, "MQIsdp", 3, 0x02);
	fb_str(&f, "c");
	assert_int_equal(dec_body(0x10, &f, V3, &p), 0);
	assert_int_equal(p.u.connect.proto_level, 3);

	// Unsupported levels of a known name report the level received.
	static const struct {
		const char *name;
		uint8_t     level;
	} bad[] = { { "MQTT", 3 }, { "MQTT", 6 }, { "MQTT", 0 }, { "MQIsdp", 4 }, { "MQIsdp", 5 } };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		connect_hdr(&f, bad[i].name, bad[i].level, 0x02);
		fb_str(&f, "c");
		assert_int_equal(dec_body(0x10, &f, V3, &p), MQTT_RC_UNSUPPORTED_VERSION);
		assert_int_equal(p.u.connect.proto_level, bad[i].level);
		assert_int_equal(p.type, MQTT_CONNECT);
	}
	// An unknown protocol name is not MQTT: Malformed, level 0, so that
	// nothing is answered [MQTT-3.1.2-1], [MQTT-3.1.4-1].
	static const char *const unknown[] = { "mqtt", "MQTTX", "", "MQIsd", "MQTX" };
	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
		for (uint8_t lvl = 3; lvl <= 5; lvl++) {
			connect_hdr(&f, unknown[i], lvl, 0x02);
			fb_str(&f, "c");
			assert_int_equal(dec_body(0x10, &f, V3, &p), RC_MAL);
			assert_int_equal(p.u.connect.proto_level, 0);
			assert_int_equal(p.type, MQTT_CONNECT);
		}
	}

	for (uint8_t lvl = 4; lvl <= 5; lvl++) {
		// Reserved flag bit 0.
		connect_hdr(&f, "MQTT", lvl, 0x03);
		fb_str(&f, "c");
		assert_int_equal(dec_body(0x10, &f, V3, &p), RC_MAL);
		// Will QoS 3.
		connect_hdr(&f, "MQTT", lvl, 0x1E);
		fb_str(&f, "c");
		if (lvl == 5) {
			fb_u8(&f, 0);
		}
		fb_str(&f, "w");
		fb_str(&f, "m");
		assert_int_equal(dec_body(0x10, &f, V3, &p), RC_MAL);
		// Will QoS or retain without the will flag.
		connect_hdr(&f, "MQTT", lvl, 0x0A);
		fb_str(&f, "c");
		assert_int_equal(dec_body(0x10, &f, V3, &p), RC_MAL);
		connect_hdr(&f, "MQTT", lvl, 0x22);
		fb_str(&f, "c");
		assert_int_equal(dec_body(0x10, &f, V3, &p), RC_MAL);
		// Will topic with a wildcard, or empty.
		connect_hdr(&f, "MQTT", lvl, 0x06);
		fb_str(&f, "c");
		if (lvl == 5) {
			fb_u8(&f, 0);
		}
		fb_str(&f, "w/#");
		fb_str(&f, "m");
		assert_int_equal(dec_body(0x10, &f, V3, &p), MQTT_RC_TOPIC_NAME_INVALID);
		connect_hdr(&f, "MQTT", lvl, 0x06);
		fb_str(&f, "c");
		if (lvl == 5) {
			fb_u8(&f, 0);
		}
		fb_str(&f, "");
		fb_str(&f, "m");
		assert_int_equal(dec_body(0x10, &f, V3, &p), MQTT_RC_TOPIC_NAME_INVALID);
		// Will topic with bad UTF-8.
		connect_hdr(&f, "MQTT", lvl, 0x06);
		fb_str(&f, "c");
		if (lvl == 5) {
			fb_u8(&f, 0);
		}
		fb_str(&f, "w\xed\xa0\x80");
		fb_str(&f, "m");
		assert_int_equal(dec_body(0x10, &f, V3, &p), RC_MAL);
		// Flags promise a field that is missing.
		connect_hdr(&f, "MQTT", lvl, 0x82);
		fb_str(&f, "c");
		assert_int_equal(dec_body(0x10, &f, V3, &p), RC_MAL);
		connect_hdr(&f, "MQTT", lvl, 0x06);
		fb_str(&f, "c");
		assert_int_equal(dec_body(0x10, &f, V3, &p), RC_MAL);
		// Missing client identifier.
		connect_hdr(&f, "MQTT", lvl, 0x02);
		assert_int_equal(dec_body(0x10, &f, V3, &p), RC_MAL);
		// An empty client identifier is the broker's business.
		connect_hdr(&f, "MQTT", lvl, 0x00);
		fb_str(&f, "");
		assert_int_equal(dec_body(0x10, &f, V3, &p), 0);
		assert_int_equal(p.u.connect.client_id.len, 0);
	}
	// Password without user name: malformed in 3.1.1 and 3.1, fine in 5.0.
	connect_hdr(&f, "MQTT", 4, 0x42);
	fb_str(&f, "c");
	fb_str(&f, "pw");
	assert_int_equal(dec_body(0x10, &f, V3, &p), RC_MAL);
	connect_hdr(&f, "MQIsdp", 3, 0x42);
	fb_str(&f, "c");
	fb_str(&f, "pw");
	assert_int_equal(dec_body(0x10, &f, V3, &p), RC_MAL);
	connect_hdr(&f, "MQTT", 5, 0x42);
	fb_str(&f, "c");
	fb_str(&f, "pw");
	assert_int_equal(dec_body(0x10, &f, V3, &p), 0);
	assert_true(p.u.connect.has_password);
	assert_false(p.u.connect.has_username);
	assert_bytes(p.u.connect.password, BS("pw"));
	// Truncated before the level.
	f.n = 0;
	fb_str(&f, "MQTT");
	assert_int_equal(dec_body(0x10, &f, V3, &p), RC_MAL);
}

// A hand-written 3.1.1 CONNECT, checked field by field (independent of the
// encoder).
static void test_decode_known_connect(void **state)
{
	static const uint8_t b[] = { 0x10, 0x1C, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x04, 0xEE, 0x01,
		0x2C, 0x00, 0x02, 'i', 'd', 0x00, 0x01, 'w', 0x00, 0x01, 'W', 0x00, 0x01, 'u', 0x00,
		0x03, 'p', 0x00, 'w' };
	mqtt_packet          p;
	mqtt_connect        *c = &p.u.connect;

	(void)state;
	assert_int_equal(mqtt_decode(b, sizeof(b), V3, &p), 0);
	assert_int_equal(p.type, MQTT_CONNECT);
	assert_int_equal(c->proto_level, 4);
	assert_true(c->clean_start);
	assert_true(c->will_flag);
	assert_int_equal(c->will_qos, 1);
	assert_true(c->will_retain);
	assert_true(c->has_username);
	assert_true(c->has_password);
	assert_int_equal(c->keep_alive, 300);
	assert_bytes(c->client_id, BS("id"));
	assert_bytes(c->will_topic, BS("w"));
	assert_bytes(c->will_payload, BS("W"));
	assert_bytes(c->username, BS("u"));
	assert_bytes(c->password, BS("p\0w"));
}

// ---------------------------------------------------------------------------
// CONNACK, acks, DISCONNECT, AUTH.

// Checks the CONNACK rejects: reserved flags, session present with a failure, unknown codes.
static void test_reject_connack(void **state)
{
	(void)state;
	// Reserved acknowledge flags.
	assert_int_equal(DEC(V3, 0x20, 0x02, 0x02, 0x00), RC_MAL);
	assert_int_equal(DEC(V5, 0x20, 0x03, 0x80, 0x00, 0x00), RC_MAL);
	// Session present with a failure code.
	assert_int_equal(DEC(V3, 0x20, 0x02, 0x01, 0x05), RC_PROTO);
	assert_int_equal(DEC(V5, 0x20, 0x03, 0x01, 0x87, 0x00), RC_PROTO);
	// Unknown return / reason codes.
	assert_int_equal(DEC(V3, 0x20, 0x02, 0x00, 0x06), RC_PROTO);
	assert_int_equal(DEC(V3, 0x20, 0x02, 0x00, 0x05), 0);
	assert_int_equal(DEC(V5, 0x20, 0x03, 0x00, 0x01, 0x00), RC_PROTO);
	assert_int_equal(DEC(V5, 0x20, 0x03, 0x00, 0x8E, 0x00), RC_PROTO);
	assert_int_equal(DEC(V5, 0x20, 0x03, 0x00, 0x9F, 0x00), 0);
}

// Checks decoding and encoding of the ack short forms and the per-type reason code sets.
static void test_ack_short_forms(void **state)
{
	mqtt_packet p;
	uint8_t     b[16];

	(void)state;
	// Remaining length 2: reason 0, no properties.
	assert_int_equal(mqtt_decode((const uint8_t[]) { 0x40, 0x02, 0x12, 0x34 }, 4, V5, &p), 0);
	assert_int_equal(p.u.ack.packet_id, 0x1234);
	assert_int_equal(p.u.ack.reason, 0);
	assert_int_equal(p.u.ack.props.present, 0);
	// Remaining length 3: a reason, no properties.
	assert_int_equal(
	    mqtt_decode((const uint8_t[]) { 0x50, 0x03, 0x00, 0x01, 0x10 }, 5, V5, &p), 0);
	assert_int_equal(p.type, MQTT_PUBREC);
	assert_int_equal(p.u.ack.reason, 0x10);
	// Remaining length 4: reason and an empty property block.
	assert_int_equal(
	    mqtt_decode((const uint8_t[]) { 0x62, 0x04, 0x00, 0x01, 0x92, 0x00 }, 6, V5, &p), 0);
	assert_int_equal(p.u.ack.reason, 0x92);
	// Reason codes not allowed for the type.
	assert_int_equal(DEC(V5, 0x62, 0x03, 0x00, 0x01, 0x10), RC_PROTO); // PUBREL
	assert_int_equal(DEC(V5, 0x70, 0x03, 0x00, 0x01, 0x80), RC_PROTO); // PUBCOMP
	assert_int_equal(DEC(V5, 0x40, 0x03, 0x00, 0x01, 0x92), RC_PROTO); // PUBACK
	assert_int_equal(DEC(V5, 0x40, 0x03, 0x00, 0x01, 0x01), RC_PROTO);
	assert_int_equal(DEC(V5, 0x90, 0x04, 0x00, 0x01, 0x00, 0x03), RC_PROTO); // SUBACK
	assert_int_equal(DEC(V3, 0x90, 0x03, 0x00, 0x01, 0x87), RC_PROTO); // v3 SUBACK
	assert_int_equal(DEC(V5, 0xB0, 0x04, 0x00, 0x01, 0x00, 0x02), RC_PROTO); // UNSUBACK

	// Encoder short forms.
	mqtt_packet e     = { .type = MQTT_PUBACK };
	e.u.ack.packet_id = 0x0102;
	assert_int_equal(mqtt_encode(b, sizeof(b), V5, &e), 4);
	assert_memory_equal(b, ((const uint8_t[]) { 0x40, 0x02, 0x01, 0x02 }), 4);
	e.u.ack.reason = MQTT_RC_NO_MATCHING_SUBSCRIBERS;
	assert_int_equal(mqtt_encode(b, sizeof(b), V5, &e), 5);
	assert_memory_equal(b, ((const uint8_t[]) { 0x40, 0x03, 0x01, 0x02, 0x10 }), 5);
	// On 3.1.1 the reason is not written.
	assert_int_equal(mqtt_encode(b, sizeof(b), V3, &e), 4);
	assert_memory_equal(b, ((const uint8_t[]) { 0x40, 0x02, 0x01, 0x02 }), 4);
	e.type         = MQTT_PUBREL;
	e.u.ack.reason = 0;
	assert_int_equal(mqtt_encode(b, sizeof(b), V5, &e), 4);
	assert_memory_equal(b, ((const uint8_t[]) { 0x62, 0x02, 0x01, 0x02 }), 4);
	// An invalid reason code for the type is refused.
	e.u.ack.reason = MQTT_RC_NO_MATCHING_SUBSCRIBERS;
	assert_int_equal(mqtt_encode(b, sizeof(b), V5, &e), 0);
	assert_int_equal(mqtt_encoded_size(V5, &e), 0);
}

// Checks DISCONNECT with remaining length 0, 1 and more in both versions, decoded and encoded.
static void test_disconnect_forms(void **state)
{
	mqtt_packet p;
	uint8_t     b[16];

	(void)state;
	assert_int_equal(mqtt_decode((const uint8_t[]) { 0xE0, 0x00 }, 2, V5, &p), 0);
	assert_int_equal(p.u.disconnect.reason, 0);
	assert_int_equal(mqtt_decode((const uint8_t[]) { 0xE0, 0x01, 0x04 }, 3, V5, &p), 0);
	assert_int_equal(p.u.disconnect.reason, MQTT_RC_DISCONNECT_WITH_WILL);
	assert_int_equal(mqtt_decode((const uint8_t[]) { 0xE0, 0x00 }, 2, V3, &p), 0);
	assert_int_equal(DEC(V3, 0xE0, 0x01, 0x00), RC_MAL);
	assert_int_equal(DEC(V5, 0xE0, 0x01, 0x01), RC_PROTO); // not a DISCONNECT code
	assert_int_equal(DEC(V5, 0xE0, 0x01, 0x18), RC_PROTO);
	assert_int_equal(DEC(V5, 0xE0, 0x02, 0x00, 0x01), RC_MAL); // property length past end

	mqtt_packet e = { .type = MQTT_DISCONNECT };
	assert_int_equal(mqtt_encode(b, sizeof(b), V5, &e), 2);
	assert_memory_equal(b, ((const uint8_t[]) { 0xE0, 0x00 }), 2);
	e.u.disconnect.reason = MQTT_RC_SESSION_TAKEN_OVER;
	assert_int_equal(mqtt_encode(b, sizeof(b), V5, &e), 3);
	assert_memory_equal(b, ((const uint8_t[]) { 0xE0, 0x01, 0x8E }), 3);
	assert_int_equal(mqtt_encode(b, sizeof(b), V3, &e), 2);
	assert_memory_equal(b, ((const uint8_t[]) { 0xE0, 0x00 }), 2);
}

// Checks AUTH: refused on 3.1.1, short form, reason without property length, method requirement.
static void test_auth(void **state)
{
	mqtt_packet p;
	uint8_t     b[16];

	(void)state;
	// Type 15 on a 3.1.1 connection.
	assert_int_equal(DEC(V3, 0xF0, 0x00), RC_MAL);
	// Remaining length 0: success.
	assert_int_equal(mqtt_decode((const uint8_t[]) { 0xF0, 0x00 }, 2, V5, &p), 0);
	assert_int_equal(p.type, MQTT_AUTH);
	assert_int_equal(p.u.auth.reason, 0);
	// A reason without a property length.
	assert_int_equal(DEC(V5, 0xF0, 0x01, 0x00), RC_MAL);
	// Continue without an authentication method.
	assert_int_equal(DEC(V5, 0xF0, 0x02, 0x18, 0x00), RC_PROTO);
	// Not an AUTH reason code.
	assert_int_equal(DEC(V5, 0xF0, 0x02, 0x87, 0x00), RC_PROTO);
	// Continue with a method.
	assert_int_equal(DEC(V5, 0xF0, 0x07, 0x18, 0x05, 0x15, 0x00, 0x02, 'm', 'x'), 0);
	// Encoding: short form, and refusal on 3.1.1.
	mqtt_packet e = { .type = MQTT_AUTH };
	assert_int_equal(mqtt_encode(b, sizeof(b), V5, &e), 2);
	assert_memory_equal(b, ((const uint8_t[]) { 0xF0, 0x00 }), 2);
	assert_int_equal(mqtt_encode(b, sizeof(b), V3, &e), 0);
	e.u.auth.reason = MQTT_RC_CONTINUE_AUTH;
	assert_int_equal(mqtt_encode(b, sizeof(b), V5, &e), 0); // no method
}

// ---------------------------------------------------------------------------
// Round trips.

// Round-trips CONNECT for 3.1, 3.1.1 and 5.0 with every field and every allowed property, and a
// minimal one.
static void test_rt_connect(void **state)
{
	mqtt_packet in, out;

	(void)state;
	for (uint8_t lvl = 3; lvl <= 5; lvl++) {
		memset(&in, 0, sizeof(in));
		in.type         = MQTT_CONNECT;
		mqtt_connect *c = &in.u.connect;
		c->proto_level  = lvl;
		c->clean_start  = true;
		c->will_flag    = true;
		c->will_qos     = 2;
		c->will_retain  = true;
		c->has_username = true;
		c->has_password = true;
		c->keep_alive   = 65535;
		c->client_id    = BS("client-\xc3\xa4");
		c->will_topic   = BS("will/topic");
		c->will_payload = BS("gone\0away");
		c->username     = BS("user");
		c->password     = BS("\x00\xffpw");
		if (lvl == 5) {
			fill_props(&c->props, allowed[C_CONNECT], false);
			fill_props(&c->will_props, allowed[C_WILL], false);
		}
		// The proto argument is ignored for CONNECT.
		round_trip(lvl == 5 ? V3 : V5, &in, &out);
		const mqtt_connect *d = &out.u.connect;
		assert_int_equal(d->proto_level, lvl);
		assert_true(d->clean_start);
		assert_true(d->will_flag);
		assert_int_equal(d->will_qos, 2);
		assert_true(d->will_retain);
		assert_true(d->has_username);
		assert_true(d->has_password);
		assert_int_equal(d->keep_alive, 65535);
		assert_bytes(d->client_id, c->client_id);
		assert_bytes(d->will_topic, c->will_topic);
		assert_bytes(d->will_payload, c->will_payload);
		assert_bytes(d->username, c->username);
		assert_bytes(d->password, c->password);
		if (lvl == 5) {
			check_props(&c->props, &d->props);
			check_props(&c->will_props, &d->will_props);
		} else {
			assert_int_equal(d->props.present, 0);
			assert_int_equal(d->will_props.present, 0);
		}
		uint32_t rem;
		uint8_t  hl;
		assert_int_equal(rt_buf[0], 0x10);
		assert_int_equal(
		    mqtt_frame_header(rt_buf, sizeof(rt_buf), &rem, &hl), MQTT_FRAME_OK);
		assert_int_equal(rt_buf[hl + 1], lvl == 3 ? 6 : 4); // protocol name length

		// Minimal: no will, no credentials.
		memset(&in, 0, sizeof(in));
		in.type                  = MQTT_CONNECT;
		in.u.connect.proto_level = lvl;
		in.u.connect.client_id   = BS("x");
		round_trip(lvl, &in, &out);
		assert_false(out.u.connect.will_flag);
		assert_false(out.u.connect.clean_start);
		assert_bytes(out.u.connect.client_id, BS("x"));

		// proto_level 0: the proto argument picks the level and name.
		in.u.connect.proto_level = 0;
		round_trip(lvl, &in, &out);
		assert_int_equal(out.u.connect.proto_level, lvl);
	}
}

// Round-trips CONNACK with every property (v5) and with v3 return codes.
static void test_rt_connack(void **state)
{
	mqtt_packet in, out;
	size_t      n;

	(void)state;
	memset(&in, 0, sizeof(in));
	in.type                      = MQTT_CONNACK;
	in.u.connack.session_present = true;
	fill_props(&in.u.connack.props, allowed[C_CONNACK], false);
	n = round_trip(V5, &in, &out);
	assert_true(out.u.connack.session_present);
	assert_int_equal(out.u.connack.reason, 0);
	check_props(&in.u.connack.props, &out.u.connack.props);

	in.u.connack.session_present = false;
	in.u.connack.reason          = MQTT_RC_BANNED;
	round_trip(V5, &in, &out);
	assert_int_equal(out.u.connack.reason, MQTT_RC_BANNED);

	// 3.1.1: return code, no properties, 4 bytes.
	in.u.connack.reason = MQTT_V3_NOT_AUTHORIZED;
	n                   = round_trip(V3, &in, &out);
	assert_int_equal(n, 4);
	assert_memory_equal(rt_buf, ((const uint8_t[]) { 0x20, 0x02, 0x00, 0x05 }), 4);
	assert_int_equal(out.u.connack.reason, MQTT_V3_NOT_AUTHORIZED);
	assert_int_equal(out.u.connack.props.present, 0);
	in.u.connack.reason = MQTT_RC_BANNED; // a v5 code on 3.1.1
	assert_int_equal(mqtt_encoded_size(V3, &in), 0);
	in.u.connack.reason          = 0;
	in.u.connack.session_present = true;
	round_trip(V3, &in, &out);
	assert_true(out.u.connack.session_present);
}

// Round-trips PUBLISH at every QoS in both versions with every property, and an aliased empty
// topic.
static void test_rt_publish(void **state)
{
	mqtt_packet in, out;

	(void)state;
	for (uint8_t proto = V3; proto <= V5; proto++) {
		for (uint8_t qos = 0; qos <= 2; qos++) {
			memset(&in, 0, sizeof(in));
			in.type         = MQTT_PUBLISH;
			mqtt_publish *p = &in.u.publish;
			p->qos          = qos;
			p->dup          = qos > 0;
			p->retain       = qos != 1;
			p->topic        = BS("sensors/\xe2\x82\xac/temp");
			p->packet_id    = qos > 0 ? (uint16_t)(0xFFFF - qos) : 0;
			p->payload      = BS("\x00\x01payload\xff");
			if (proto == V5) {
				fill_props(&p->props, allowed[C_PUBLISH], true);
			}
			round_trip(proto, &in, &out);
			const mqtt_publish *d = &out.u.publish;
			assert_int_equal(d->qos, qos);
			assert_int_equal(d->dup, qos > 0);
			assert_int_equal(d->retain, qos != 1);
			assert_int_equal(
			    out.flags, (qos > 0 ? 8 : 0) | (qos << 1) | (qos != 1 ? 1 : 0));
			assert_bytes(d->topic, p->topic);
			assert_int_equal(d->packet_id, p->packet_id);
			assert_bytes(d->payload, p->payload);
			if (proto == V5) {
				check_props(&p->props, &d->props);
			} else {
				assert_int_equal(d->props.present, 0);
			}
		}
	}
	// Empty payload, empty topic with alias.
	memset(&in, 0, sizeof(in));
	in.type                        = MQTT_PUBLISH;
	in.u.publish.props.present     = P(TOPIC_ALIAS);
	in.u.publish.props.topic_alias = 9;
	round_trip(V5, &in, &out);
	assert_int_equal(out.u.publish.topic.len, 0);
	assert_int_equal(out.u.publish.payload.len, 0);
	assert_int_equal(out.u.publish.props.topic_alias, 9);
}

// Round-trips PUBACK, PUBREC, PUBREL and PUBCOMP with reasons and properties, and their 3.1.1
// forms.
static void test_rt_acks(void **state)
{
	static const uint8_t types[]   = { MQTT_PUBACK, MQTT_PUBREC, MQTT_PUBREL, MQTT_PUBCOMP };
	static const uint8_t reasons[] = { MQTT_RC_QUOTA_EXCEEDED, MQTT_RC_PAYLOAD_FORMAT_INVALID,
		MQTT_RC_PACKET_ID_NOT_FOUND, MQTT_RC_PACKET_ID_NOT_FOUND };
	mqtt_packet          in, out;
	size_t               n;

	(void)state;
	for (size_t i = 0; i < 4; i++) {
		memset(&in, 0, sizeof(in));
		in.type            = types[i];
		in.u.ack.packet_id = 42;
		in.u.ack.reason    = reasons[i];
		fill_props(&in.u.ack.props, ACKP, false);
		round_trip(V5, &in, &out);
		assert_int_equal(out.flags, types[i] == MQTT_PUBREL ? 2 : 0);
		assert_int_equal(out.u.ack.packet_id, 42);
		assert_int_equal(out.u.ack.reason, reasons[i]);
		check_props(&in.u.ack.props, &out.u.ack.props);

		// Reason 0 with properties keeps the reason byte.
		in.u.ack.reason = 0;
		n               = round_trip(V5, &in, &out);
		assert_true(n > 4);
		assert_int_equal(rt_buf[4], 0);
		check_props(&in.u.ack.props, &out.u.ack.props);

		// 3.1.1: packet id only.
		in.u.ack.reason = reasons[i];
		n               = round_trip(V3, &in, &out);
		assert_int_equal(n, 4);
		assert_int_equal(out.u.ack.reason, 0);
		assert_int_equal(out.u.ack.props.present, 0);
	}
}

// Round-trips SUBSCRIBE built with mqtt_sub_list_put in both versions, checking every entry and
// option.
static void test_rt_subscribe(void **state)
{
	static const char *filters[] = { "a/+/c", "$share/grp/x/#", "#" };
	mqtt_packet        in, out;
	uint8_t            list[256];

	(void)state;
	for (uint8_t proto = V3; proto <= V5; proto++) {
		size_t n = 0;
		for (size_t i = 0; i < 3; i++) {
			mqtt_sub_opts o = { .qos     = (uint8_t)i,
				.no_local            = i == 0,
				.retain_as_published = i == 1,
				.retain_handling     = (uint8_t)i };
			size_t        k = mqtt_sub_list_put(list + n, sizeof(list) - n, proto,
			           (mqtt_bytes) {
			               (const uint8_t *)filters[i], (uint32_t)strlen(filters[i]) },
			           &o);
			assert_true(k > 0);
			n += k;
		}
		memset(&in, 0, sizeof(in));
		in.type                  = MQTT_SUBSCRIBE;
		in.u.subscribe.packet_id = 77;
		in.u.subscribe.count     = 3;
		in.u.subscribe.list      = (mqtt_bytes) { list, (uint32_t)n };
		if (proto == V5) {
			fill_props(&in.u.subscribe.props, allowed[C_SUBSCRIBE], false);
		}
		round_trip(proto, &in, &out);
		assert_int_equal(out.flags, 2);
		assert_int_equal(out.u.subscribe.packet_id, 77);
		assert_int_equal(out.u.subscribe.count, 3);
		if (proto == V5) {
			check_props(&in.u.subscribe.props, &out.u.subscribe.props);
		}
		mqtt_sub_iter it;
		mqtt_bytes    f;
		mqtt_sub_opts o;
		mqtt_sub_iter_init(&it, &out.u.subscribe, proto);
		for (size_t i = 0; i < 3; i++) {
			assert_true(mqtt_sub_iter_next(&it, &f, &o));
			assert_int_equal(f.len, strlen(filters[i]));
			assert_memory_equal(f.p, filters[i], f.len);
			assert_int_equal(o.qos, i);
			assert_int_equal(o.no_local, proto == V5 && i == 0);
			assert_int_equal(o.retain_as_published, proto == V5 && i == 1);
			assert_int_equal(o.retain_handling, proto == V5 ? i : 0);
		}
		assert_false(mqtt_sub_iter_next(&it, &f, &o));

		// A count that disagrees with the list is refused.
		in.u.subscribe.count = 2;
		assert_int_equal(mqtt_encoded_size(proto, &in), 0);
	}
}

// Round-trips UNSUBSCRIBE built with mqtt_unsub_list_put in both versions.
static void test_rt_unsubscribe(void **state)
{
	static const char *filters[] = { "a/b", "+/#" };
	mqtt_packet        in, out;
	uint8_t            list[64];

	(void)state;
	for (uint8_t proto = V3; proto <= V5; proto++) {
		size_t n = 0;
		for (size_t i = 0; i < 2; i++) {
			n += mqtt_unsub_list_put(list + n, sizeof(list) - n,
			    (mqtt_bytes) {
			        (const uint8_t *)filters[i], (uint32_t)strlen(filters[i]) });
		}
		assert_int_equal(n, 10);
		memset(&in, 0, sizeof(in));
		in.type                    = MQTT_UNSUBSCRIBE;
		in.u.unsubscribe.packet_id = 5;
		in.u.unsubscribe.count     = 2;
		in.u.unsubscribe.list      = (mqtt_bytes) { list, (uint32_t)n };
		if (proto == V5) {
			fill_props(&in.u.unsubscribe.props, allowed[C_UNSUBSCRIBE], false);
		}
		round_trip(proto, &in, &out);
		assert_int_equal(out.flags, 2);
		assert_int_equal(out.u.unsubscribe.packet_id, 5);
		assert_int_equal(out.u.unsubscribe.count, 2);
		if (proto == V5) {
			check_props(&in.u.unsubscribe.props, &out.u.unsubscribe.props);
		}
		mqtt_unsub_iter it;
		mqtt_bytes      f;
		mqtt_unsub_iter_init(&it, &out.u.unsubscribe);
		for (size_t i = 0; i < 2; i++) {
			assert_true(mqtt_unsub_iter_next(&it, &f));
			assert_int_equal(f.len, strlen(filters[i]));
			assert_memory_equal(f.p, filters[i], f.len);
		}
		assert_false(mqtt_unsub_iter_next(&it, &f));
	}
}

// Round-trips SUBACK and UNSUBACK with every allowed code in both versions.
static void test_rt_suback_unsuback(void **state)
{
	static const uint8_t v5sub[]
	    = { 0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2 };
	static const uint8_t v3sub[]   = { 0x00, 0x01, 0x02, 0x80 };
	static const uint8_t v5unsub[] = { 0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91 };
	mqtt_packet          in, out;
	size_t               n;

	(void)state;
	memset(&in, 0, sizeof(in));
	in.type               = MQTT_SUBACK;
	in.u.suback.packet_id = 9;
	in.u.suback.count     = sizeof(v5sub);
	in.u.suback.codes     = v5sub;
	fill_props(&in.u.suback.props, ACKP, false);
	round_trip(V5, &in, &out);
	assert_int_equal(out.u.suback.packet_id, 9);
	assert_int_equal(out.u.suback.count, sizeof(v5sub));
	assert_memory_equal(out.u.suback.codes, v5sub, sizeof(v5sub));
	check_props(&in.u.suback.props, &out.u.suback.props);

	// 3.1.1 SUBACK: raw return codes; a v5-only code is refused.
	in.u.suback.count = sizeof(v3sub);
	in.u.suback.codes = v3sub;
	n                 = round_trip(V3, &in, &out);
	assert_int_equal(n, 4 + sizeof(v3sub));
	assert_memory_equal(out.u.suback.codes, v3sub, sizeof(v3sub));
	in.u.suback.codes = v5sub + 4;
	in.u.suback.count = 1;
	assert_int_equal(mqtt_encoded_size(V3, &in), 0);

	memset(&in, 0, sizeof(in));
	in.type               = MQTT_UNSUBACK;
	in.u.suback.packet_id = 10;
	in.u.suback.count     = sizeof(v5unsub);
	in.u.suback.codes     = v5unsub;
	fill_props(&in.u.suback.props, ACKP, false);
	round_trip(V5, &in, &out);
	assert_int_equal(out.u.suback.count, sizeof(v5unsub));
	assert_memory_equal(out.u.suback.codes, v5unsub, sizeof(v5unsub));
	check_props(&in.u.suback.props, &out.u.suback.props);

	// 3.1.1 UNSUBACK: packet id only.
	n = round_trip(V3, &in, &out);
	assert_int_equal(n, 4);
	assert_int_equal(out.u.suback.count, 0);
	assert_int_equal(out.u.suback.packet_id, 10);
}

// Round-trips PINGREQ and PINGRESP and checks their exact bytes.
static void test_rt_ping(void **state)
{
	mqtt_packet in = { .type = MQTT_PINGREQ }, out;

	(void)state;
	for (uint8_t proto = V3; proto <= V5; proto++) {
		in.type = MQTT_PINGREQ;
		assert_int_equal(round_trip(proto, &in, &out), 2);
		assert_memory_equal(rt_buf, ((const uint8_t[]) { 0xC0, 0x00 }), 2);
		in.type = MQTT_PINGRESP;
		assert_int_equal(round_trip(proto, &in, &out), 2);
		assert_memory_equal(rt_buf, ((const uint8_t[]) { 0xD0, 0x00 }), 2);
	}
}

// Round-trips DISCONNECT and AUTH with every allowed property.
static void test_rt_disconnect_auth(void **state)
{
	mqtt_packet in, out;

	(void)state;
	memset(&in, 0, sizeof(in));
	in.type                = MQTT_DISCONNECT;
	in.u.disconnect.reason = MQTT_RC_SERVER_MOVED;
	fill_props(&in.u.disconnect.props, allowed[C_DISCONNECT], false);
	round_trip(V5, &in, &out);
	assert_int_equal(out.u.disconnect.reason, MQTT_RC_SERVER_MOVED);
	check_props(&in.u.disconnect.props, &out.u.disconnect.props);
	assert_int_equal(round_trip(V3, &in, &out), 2);

	memset(&in, 0, sizeof(in));
	in.type          = MQTT_AUTH;
	in.u.auth.reason = MQTT_RC_CONTINUE_AUTH;
	fill_props(&in.u.auth.props, allowed[C_AUTH], false);
	round_trip(V5, &in, &out);
	assert_int_equal(out.u.auth.reason, MQTT_RC_CONTINUE_AUTH);
	check_props(&in.u.auth.props, &out.u.auth.props);
	in.u.auth.reason = MQTT_RC_SUCCESS;
	round_trip(V5, &in, &out);
	assert_int_equal(out.u.auth.reason, 0);
	check_props(&in.u.auth.props, &out.u.auth.props);
}

// ---------------------------------------------------------------------------
// Encoder refusals and property helpers.

// Checks that the encoder returns 0 for every kind of invalid input it documents.
static void test_encode_refuses_invalid(void **state)
{
	mqtt_packet p;
	uint8_t     b[256];

	(void)state;
	memset(&p, 0, sizeof(p));
	p.type            = MQTT_PUBLISH;
	p.u.publish.topic = BS("t");
	assert_true(mqtt_encode(b, sizeof(b), V5, &p) > 0);
	p.u.publish.qos = 3;
	assert_int_equal(mqtt_encode(b, sizeof(b), V5, &p), 0);
	p.u.publish.qos = 1; // packet id 0
	assert_int_equal(mqtt_encode(b, sizeof(b), V5, &p), 0);
	p.u.publish.qos = 0;
	p.u.publish.dup = true;
	assert_int_equal(mqtt_encode(b, sizeof(b), V5, &p), 0);
	p.u.publish.dup   = false;
	p.u.publish.topic = BS("a/+");
	assert_int_equal(mqtt_encode(b, sizeof(b), V5, &p), 0);
	p.u.publish.topic = BS("");
	assert_int_equal(mqtt_encode(b, sizeof(b), V5, &p), 0);
	assert_int_equal(mqtt_encode(b, sizeof(b), V3, &p), 0);
	p.u.publish.topic = BS("t");
	// A property not allowed in PUBLISH.
	p.u.publish.props.present = P(SESSION_EXPIRY);
	assert_int_equal(mqtt_encode(b, sizeof(b), V5, &p), 0);
	assert_true(mqtt_encode(b, sizeof(b), V3, &p) > 0); // not written in 3.1.1
	// An unknown present bit.
	p.u.publish.props.present = MQTT_PBIT(4);
	assert_int_equal(mqtt_encode(b, sizeof(b), V5, &p), 0);
	// Out-of-range values.
	p.u.publish.props.present        = P(PAYLOAD_FORMAT);
	p.u.publish.props.payload_format = 2;
	assert_int_equal(mqtt_encode(b, sizeof(b), V5, &p), 0);
	p.u.publish.props.present     = P(TOPIC_ALIAS);
	p.u.publish.props.topic_alias = 0;
	assert_int_equal(mqtt_encode(b, sizeof(b), V5, &p), 0);
	p.u.publish.props.present = 0;
	// Subscription identifier 0 or above the VBI range.
	uint32_t ids[1]             = { 0 };
	p.u.publish.props.sub_ids   = ids;
	p.u.publish.props.n_sub_ids = 1;
	assert_int_equal(mqtt_encode(b, sizeof(b), V5, &p), 0);
	ids[0] = MQTT_VBI_MAX + 1;
	assert_int_equal(mqtt_encode(b, sizeof(b), V5, &p), 0);
	p.u.publish.props.sub_ids   = NULL;
	p.u.publish.props.n_sub_ids = 0;
	// A string longer than 65535 bytes.
	static uint8_t big[70000];
	p.u.publish.topic = (mqtt_bytes) { big, 65536 };
	memset(big, 'a', sizeof(big));
	assert_int_equal(mqtt_encode(b, sizeof(b), V5, &p), 0);
	assert_int_equal(mqtt_encoded_size(V5, &p), 0);
	// Unknown type, AUTH on 3.1.1.
	memset(&p, 0, sizeof(p));
	assert_int_equal(mqtt_encoded_size(V5, &p), 0);
	p.type = 16;
	assert_int_equal(mqtt_encoded_size(V5, &p), 0);
	p.type = MQTT_AUTH;
	assert_int_equal(mqtt_encoded_size(V3, &p), 0);
	// CONNECT: bad level, will QoS without flag, password without user (3.1.1).
	memset(&p, 0, sizeof(p));
	p.type                  = MQTT_CONNECT;
	p.u.connect.proto_level = 6;
	assert_int_equal(mqtt_encoded_size(V5, &p), 0);
	p.u.connect.proto_level = 4;
	p.u.connect.will_qos    = 1;
	assert_int_equal(mqtt_encoded_size(V5, &p), 0);
	p.u.connect.will_qos     = 0;
	p.u.connect.has_password = true;
	assert_int_equal(mqtt_encoded_size(V5, &p), 0);
	p.u.connect.proto_level = 5;
	assert_true(mqtt_encoded_size(V5, &p) > 0);
	// Subscription ids: two in SUBSCRIBE.
	memset(&p, 0, sizeof(p));
	uint8_t       list[8];
	mqtt_sub_opts o               = { .qos = 1 };
	p.type                        = MQTT_SUBSCRIBE;
	p.u.subscribe.packet_id       = 1;
	p.u.subscribe.count           = 1;
	p.u.subscribe.list            = (mqtt_bytes) { list,
		           (uint32_t)mqtt_sub_list_put(list, sizeof(list), V5, BS("a"), &o) };
	p.u.subscribe.props.sub_ids   = test_sub_ids;
	p.u.subscribe.props.n_sub_ids = 2;
	assert_int_equal(mqtt_encoded_size(V5, &p), 0);
	p.u.subscribe.props.n_sub_ids = 1;
	assert_true(mqtt_encoded_size(V5, &p) > 0);
	// Invalid subscription options for the list builder.
	o.retain_handling = 3;
	assert_int_equal(mqtt_sub_list_put(list, sizeof(list), V5, BS("a"), &o), 0);
	o.retain_handling = 0;
	assert_int_equal(mqtt_sub_list_put(list, 3, V5, BS("a"), &o), 0);
	// Empty lists.
	memset(&p, 0, sizeof(p));
	p.type                    = MQTT_UNSUBSCRIBE;
	p.u.unsubscribe.packet_id = 1;
	assert_int_equal(mqtt_encoded_size(V5, &p), 0);
	p.type = MQTT_SUBACK;
	assert_int_equal(mqtt_encoded_size(V5, &p), 0);
	// NULL buffer.
	assert_int_equal(mqtt_encode(NULL, 100, V5, &p), 0);
}

// Checks mqtt_props_encode/mqtt_props_size, the raw-block fallback for repeatable properties and
// stripping them.
static void test_props_encode_api(void **state)
{
	mqtt_props p, d;
	uint8_t    b[512];
	size_t     n;

	(void)state;

	memset(&p, 0, sizeof(p));
	assert_int_equal(mqtt_props_size(&p), 0);
	assert_int_equal(mqtt_props_encode(b, sizeof(b), &p), 1);
	assert_int_equal(b[0], 0);

	// Everything at once (the function takes no packet type).
	fill_props(&p,
	    ~0ull
	        & (allowed[C_CONNECT] | allowed[C_CONNACK] | allowed[C_PUBLISH] | allowed[C_WILL]),
	    true);
	n = mqtt_props_encode(b, sizeof(b), &p);
	assert_true(n > 100);
	assert_int_equal(n, mqtt_props_size(&p) + mqtt_vbi_size((uint32_t)mqtt_props_size(&p)));
	assert_int_equal(mqtt_props_encode(b, n - 1, &p), 0);

	// The block decodes back inside a PUBLISH-only view: walk it with the
	// iterators.
	memset(&d, 0, sizeof(d));
	uint32_t len;
	int      k = mqtt_vbi_decode(b, n, &len);
	assert_true(k > 0);
	d.raw = (mqtt_bytes) { b + k, len };
	mqtt_prop_iter it;
	uint32_t       id;
	mqtt_bytes     key, val;
	mqtt_prop_iter_init(&it, &d);
	assert_true(mqtt_prop_iter_next_sub_id(&it, &id));
	assert_int_equal(id, 7);
	assert_true(mqtt_prop_iter_next_sub_id(&it, &id));
	assert_int_equal(id, MQTT_VBI_MAX);
	assert_false(mqtt_prop_iter_next_sub_id(&it, &id));
	mqtt_prop_iter_init(&it, &d);
	for (int i = 0; i < 3; i++) {
		assert_true(mqtt_prop_iter_next_user(&it, &key, &val));
		assert_bytes(key, test_ups[i].key);
	}
	assert_false(mqtt_prop_iter_next_user(&it, &key, &val));

	// Only the present bit: the single subscription_id field is written.
	memset(&p, 0, sizeof(p));
	p.present         = P(SUBSCRIPTION_ID);
	p.subscription_id = 300;
	n                 = mqtt_props_encode(b, sizeof(b), &p);
	assert_int_equal(n, 4);
	assert_memory_equal(b, ((const uint8_t[]) { 0x03, 0x0B, 0xAC, 0x02 }), 4);
	// Too many user properties promised from an empty raw block.
	memset(&p, 0, sizeof(p));
	p.present      = P(USER_PROPERTY);
	p.n_user_props = 1;
	assert_int_equal(mqtt_props_encode(b, sizeof(b), &p), 0);
	// Without the bit (and without an array) nothing is written.
	p.present = 0;
	assert_int_equal(mqtt_props_encode(b, sizeof(b), &p), 1);

	// Forwarding a decoded PUBLISH block: as received, or with the
	// repeatable properties stripped by clearing their bits.
	{
		mqtt_packet in, out;
		memset(&in, 0, sizeof(in));
		in.type            = MQTT_PUBLISH;
		in.u.publish.topic = BS("t");
		fill_props(&in.u.publish.props, allowed[C_PUBLISH], true);
		round_trip(V5, &in, &out);
		mqtt_props fwd = out.u.publish.props;
		n              = mqtt_props_encode(b, sizeof(b), &fwd);
		assert_true(n > 0);
		assert_int_equal(n - 1, fwd.raw.len); // same block, same length
		assert_memory_equal(b + 1, fwd.raw.p, fwd.raw.len);
		fwd.present &= ~(P(SUBSCRIPTION_ID) | P(USER_PROPERTY) | P(TOPIC_ALIAS));
		n = mqtt_props_encode(b, sizeof(b), &fwd);
		assert_true(n > 0);
		memset(&d, 0, sizeof(d));
		d.raw = (mqtt_bytes) { b + 1, (uint32_t)(n - 1) };
		mqtt_prop_iter_init(&it, &d);
		assert_false(mqtt_prop_iter_next_sub_id(&it, &id));
		mqtt_prop_iter_init(&it, &d);
		assert_false(mqtt_prop_iter_next_user(&it, &key, &val));
		assert_int_equal(n - 1, mqtt_props_size(&fwd));
	}
	// Iterators over an empty block.
	memset(&d, 0, sizeof(d));
	mqtt_prop_iter_init(&it, &d);
	assert_false(mqtt_prop_iter_next_user(&it, &key, &val));
	assert_false(mqtt_prop_iter_next_sub_id(&it, &id));
}

// Checks the log names of packet types and reason codes.
static void test_names(void **state)
{
	(void)state;
	assert_string_equal(mqtt_packet_name(MQTT_CONNECT), "CONNECT");
	assert_string_equal(mqtt_packet_name(MQTT_AUTH), "AUTH");
	assert_string_equal(mqtt_packet_name(0), "UNKNOWN");
	assert_string_equal(mqtt_packet_name(16), "UNKNOWN");
	assert_string_equal(mqtt_reason_name(MQTT_RC_MALFORMED), "Malformed Packet");
	assert_string_equal(mqtt_reason_name(MQTT_RC_TOPIC_NAME_INVALID), "Topic Name invalid");
	assert_string_equal(mqtt_reason_name(0x03), "Unknown reason code");
}

// Every truncation and every single-byte corruption of valid frames must
// decode without a sanitizer report (the result itself may be anything).
static void test_mutations_do_not_crash(void **state)
{
	mqtt_packet in, out;
	uint8_t     frame_copy[8192];
	size_t      n;

	(void)state;
	memset(&in, 0, sizeof(in));
	in.type                  = MQTT_CONNECT;
	in.u.connect.proto_level = 5;
	in.u.connect.will_flag   = true;
	in.u.connect.will_topic  = BS("w");
	in.u.connect.client_id   = BS("c");
	fill_props(&in.u.connect.props, allowed[C_CONNECT], false);
	fill_props(&in.u.connect.will_props, allowed[C_WILL], false);
	n = mqtt_encode(frame_copy, sizeof(frame_copy), V5, &in);
	assert_true(n > 0);
	for (size_t cut = 0; cut < n; cut++) {
		// A frame whose remaining length matches a truncated body.
		fb       f = { .n = 0 };
		uint32_t rem;
		uint8_t  hl;
		assert_int_equal(mqtt_frame_header(frame_copy, n, &rem, &hl), MQTT_FRAME_OK);
		if (cut < rem) {
			fb_put(&f, frame_copy + hl, cut);
			(void)dec_body(frame_copy[0], &f, V5, &out);
		}
		for (int bit = 0; bit < 8; bit++) {
			uint8_t save = frame_copy[cut];
			frame_copy[cut] ^= (uint8_t)(1u << bit);
			(void)mqtt_decode(frame_copy, n, V5, &out);
			(void)mqtt_decode(frame_copy, n, V3, &out);
			frame_copy[cut] = save;
		}
	}
}

// Runs every codec test; returns the number of failures.
int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_vbi),
		cmocka_unit_test(test_frame_header),
		cmocka_unit_test(test_reject_vbi_too_long),
		cmocka_unit_test(test_reject_reserved_flags),
		cmocka_unit_test(test_reject_packet_type_0),
		cmocka_unit_test(test_reject_remaining_length),
		cmocka_unit_test(test_utf8),
		cmocka_unit_test(test_reject_bad_utf8),
		cmocka_unit_test(test_topic_name_valid),
		cmocka_unit_test(test_topic_filter_valid),
		cmocka_unit_test(test_reject_publish_topic),
		cmocka_unit_test(test_reject_publish_qos3_and_dup),
		cmocka_unit_test(test_reject_packet_id_zero),
		cmocka_unit_test(test_reject_empty_sub_unsub),
		cmocka_unit_test(test_sub_filters_left_to_broker),
		cmocka_unit_test(test_reject_sub_options),
		cmocka_unit_test(test_props_allowed_per_packet),
		cmocka_unit_test(test_reject_duplicate_props),
		cmocka_unit_test(test_reject_prop_values),
		cmocka_unit_test(test_reject_connect),
		cmocka_unit_test(test_decode_known_connect),
		cmocka_unit_test(test_reject_connack),
		cmocka_unit_test(test_ack_short_forms),
		cmocka_unit_test(test_disconnect_forms),
		cmocka_unit_test(test_auth),
		cmocka_unit_test(test_rt_connect),
		cmocka_unit_test(test_rt_connack),
		cmocka_unit_test(test_rt_publish),
		cmocka_unit_test(test_rt_acks),
		cmocka_unit_test(test_rt_subscribe),
		cmocka_unit_test(test_rt_unsubscribe),
		cmocka_unit_test(test_rt_suback_unsuback),
		cmocka_unit_test(test_rt_ping),
		cmocka_unit_test(test_rt_disconnect_auth),
		cmocka_unit_test(test_encode_refuses_invalid),
		cmocka_unit_test(test_props_encode_api),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_mutations_do_not_crash),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
