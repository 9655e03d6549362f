// The MQTT 3.1.1 / 5.0 wire codec: the only code in the project that reads or
// writes MQTT bytes.
//
// Contract:
// - Pure functions over caller-supplied bounded buffers. No I/O, no globals,
//   no allocation. Safe to call from any thread concurrently.
// - Decoding never copies: every mqtt_bytes in a decoded packet points into
//   the frame buffer that was decoded, so it is valid only as long as that
//   buffer is. Lists (subscriptions, user properties, reason codes) are kept
//   as a validated raw region plus a count and are walked with an iterator.
// - Decoding validates everything either specification calls malformed or a
//   protocol error for the packet in isolation, and returns the MQTT 5 reason
//   code the broker must use (MQTT_RC_MALFORMED, MQTT_RC_PROTOCOL_ERROR,
//   MQTT_RC_TOPIC_NAME_INVALID, ...). For a 3.1.1 connection the caller
//   simply closes the connection on any non-zero result.
// - Encoding writes into [buf, buf+cap) and returns the number of bytes
//   written, or 0 if the packet does not fit or is invalid.
#ifndef NMQ_MQTT_CODEC_H
#define NMQ_MQTT_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MQTT_PROTO_V31  3
#define MQTT_PROTO_V311 4
#define MQTT_PROTO_V5   5

// Largest value a variable byte integer can hold (4 bytes).
#define MQTT_VBI_MAX 268435455u

enum mqtt_packet_type {
	MQTT_CONNECT     = 1,
	MQTT_CONNACK     = 2,
	MQTT_PUBLISH     = 3,
	MQTT_PUBACK      = 4,
	MQTT_PUBREC      = 5,
	MQTT_PUBREL      = 6,
	MQTT_PUBCOMP     = 7,
	MQTT_SUBSCRIBE   = 8,
	MQTT_SUBACK      = 9,
	MQTT_UNSUBSCRIBE = 10,
	MQTT_UNSUBACK    = 11,
	MQTT_PINGREQ     = 12,
	MQTT_PINGRESP    = 13,
	MQTT_DISCONNECT  = 14,
	MQTT_AUTH        = 15, // MQTT 5.0 only
};

// MQTT 5.0 reason codes (a separate type from the project's error enum).
enum mqtt_reason {
	MQTT_RC_SUCCESS                    = 0x00, // also Normal disconnection, Granted QoS 0
	MQTT_RC_GRANTED_QOS1               = 0x01,
	MQTT_RC_GRANTED_QOS2               = 0x02,
	MQTT_RC_DISCONNECT_WITH_WILL       = 0x04,
	MQTT_RC_NO_MATCHING_SUBSCRIBERS    = 0x10,
	MQTT_RC_NO_SUBSCRIPTION_EXISTED    = 0x11,
	MQTT_RC_CONTINUE_AUTH              = 0x18,
	MQTT_RC_REAUTHENTICATE             = 0x19,
	MQTT_RC_UNSPECIFIED                = 0x80,
	MQTT_RC_MALFORMED                  = 0x81,
	MQTT_RC_PROTOCOL_ERROR             = 0x82,
	MQTT_RC_IMPL_SPECIFIC              = 0x83,
	MQTT_RC_UNSUPPORTED_VERSION        = 0x84,
	MQTT_RC_CLIENT_ID_INVALID          = 0x85,
	MQTT_RC_BAD_USER_OR_PASSWORD       = 0x86,
	MQTT_RC_NOT_AUTHORIZED             = 0x87,
	MQTT_RC_SERVER_UNAVAILABLE         = 0x88,
	MQTT_RC_SERVER_BUSY                = 0x89,
	MQTT_RC_BANNED                     = 0x8A,
	MQTT_RC_SERVER_SHUTTING_DOWN       = 0x8B,
	MQTT_RC_BAD_AUTH_METHOD            = 0x8C,
	MQTT_RC_KEEP_ALIVE_TIMEOUT         = 0x8D,
	MQTT_RC_SESSION_TAKEN_OVER         = 0x8E,
	MQTT_RC_TOPIC_FILTER_INVALID       = 0x8F,
	MQTT_RC_TOPIC_NAME_INVALID         = 0x90,
	MQTT_RC_PACKET_ID_IN_USE           = 0x91,
	MQTT_RC_PACKET_ID_NOT_FOUND        = 0x92,
	MQTT_RC_RECEIVE_MAX_EXCEEDED       = 0x93,
	MQTT_RC_TOPIC_ALIAS_INVALID        = 0x94,
	MQTT_RC_PACKET_TOO_LARGE           = 0x95,
	MQTT_RC_MESSAGE_RATE_TOO_HIGH      = 0x96,
	MQTT_RC_QUOTA_EXCEEDED             = 0x97,
	MQTT_RC_ADMIN_ACTION               = 0x98,
	MQTT_RC_PAYLOAD_FORMAT_INVALID     = 0x99,
	MQTT_RC_RETAIN_NOT_SUPPORTED       = 0x9A,
	MQTT_RC_QOS_NOT_SUPPORTED          = 0x9B,
	MQTT_RC_USE_ANOTHER_SERVER         = 0x9C,
	MQTT_RC_SERVER_MOVED               = 0x9D,
	MQTT_RC_SHARED_SUB_NOT_SUPPORTED   = 0x9E,
	MQTT_RC_CONNECTION_RATE_EXCEEDED   = 0x9F,
	MQTT_RC_MAX_CONNECT_TIME           = 0xA0,
	MQTT_RC_SUB_ID_NOT_SUPPORTED       = 0xA1,
	MQTT_RC_WILDCARD_SUB_NOT_SUPPORTED = 0xA2,
};

// MQTT 3.1.1 CONNACK return codes.
enum mqtt_v3_connack {
	MQTT_V3_ACCEPTED             = 0,
	MQTT_V3_BAD_PROTOCOL         = 1,
	MQTT_V3_ID_REJECTED          = 2,
	MQTT_V3_SERVER_UNAVAILABLE   = 3,
	MQTT_V3_BAD_USER_OR_PASSWORD = 4,
	MQTT_V3_NOT_AUTHORIZED       = 5,
};

// MQTT 5.0 property identifiers.
enum mqtt_prop_id {
	MQTT_PROP_PAYLOAD_FORMAT     = 0x01, // byte       PUBLISH, will
	MQTT_PROP_MESSAGE_EXPIRY     = 0x02, // u32        PUBLISH, will
	MQTT_PROP_CONTENT_TYPE       = 0x03, // utf8       PUBLISH, will
	MQTT_PROP_RESPONSE_TOPIC     = 0x08, // utf8       PUBLISH, will
	MQTT_PROP_CORRELATION_DATA   = 0x09, // binary     PUBLISH, will
	MQTT_PROP_SUBSCRIPTION_ID    = 0x0B, // vbi        PUBLISH (repeatable), SUBSCRIBE
	MQTT_PROP_SESSION_EXPIRY     = 0x11, // u32        CONNECT, CONNACK, DISCONNECT
	MQTT_PROP_ASSIGNED_CLIENT_ID = 0x12, // utf8       CONNACK
	MQTT_PROP_SERVER_KEEP_ALIVE  = 0x13, // u16        CONNACK
	MQTT_PROP_AUTH_METHOD        = 0x15, // utf8       CONNECT, CONNACK, AUTH
	MQTT_PROP_AUTH_DATA          = 0x16, // binary     CONNECT, CONNACK, AUTH
	MQTT_PROP_REQUEST_PROBLEM    = 0x17, // byte       CONNECT
	MQTT_PROP_WILL_DELAY         = 0x18, // u32        will
	MQTT_PROP_REQUEST_RESPONSE   = 0x19, // byte       CONNECT
	MQTT_PROP_RESPONSE_INFO      = 0x1A, // utf8       CONNACK
	MQTT_PROP_SERVER_REFERENCE   = 0x1C, // utf8       CONNACK, DISCONNECT
	MQTT_PROP_REASON_STRING      = 0x1F, // utf8       acks, CONNACK, DISCONNECT, AUTH
	MQTT_PROP_RECEIVE_MAXIMUM    = 0x21, // u16        CONNECT, CONNACK
	MQTT_PROP_TOPIC_ALIAS_MAX    = 0x22, // u16        CONNECT, CONNACK
	MQTT_PROP_TOPIC_ALIAS        = 0x23, // u16        PUBLISH
	MQTT_PROP_MAXIMUM_QOS        = 0x24, // byte       CONNACK
	MQTT_PROP_RETAIN_AVAILABLE   = 0x25, // byte       CONNACK
	MQTT_PROP_USER_PROPERTY      = 0x26, // utf8 pair  all that have properties (repeatable)
	MQTT_PROP_MAX_PACKET_SIZE    = 0x27, // u32        CONNECT, CONNACK
	MQTT_PROP_WILDCARD_SUB_AVAIL = 0x28, // byte       CONNACK
	MQTT_PROP_SUB_ID_AVAIL       = 0x29, // byte       CONNACK
	MQTT_PROP_SHARED_SUB_AVAIL   = 0x2A, // byte       CONNACK
};

// A borrowed byte range. For UTF-8 strings it is not NUL-terminated.
typedef struct mqtt_bytes {
	const uint8_t *p;
	uint32_t       len;
} mqtt_bytes;

// Bits of mqtt_props.present, one per single-valued property.
#define MQTT_PBIT(id) (1ull << (id))

// Decoded MQTT 5.0 properties. A field is meaningful only if its bit
// MQTT_PBIT(id) is set in `present`. Repeatable properties (user property,
// subscription identifier in PUBLISH) are counted and walked with iterators
// over `raw`, which is the whole property block (without its length).
// When encoding, the same struct is the input: set the fields and bits.
// user_props/n_user_props then point to caller-owned pairs, and
// sub_ids/n_sub_ids to caller-owned identifiers.
typedef struct mqtt_user_prop {
	mqtt_bytes key;
	mqtt_bytes value;
} mqtt_user_prop;

typedef struct mqtt_props {
	uint64_t   present;
	mqtt_bytes raw; // decode: the property block as received
	uint8_t    payload_format;
	uint32_t   message_expiry;
	mqtt_bytes content_type;
	mqtt_bytes response_topic;
	mqtt_bytes correlation_data;
	uint32_t   session_expiry;
	mqtt_bytes assigned_client_id;
	uint16_t   server_keep_alive;
	mqtt_bytes auth_method;
	mqtt_bytes auth_data;
	uint8_t    request_problem_info;
	uint32_t   will_delay;
	uint8_t    request_response_info;
	mqtt_bytes response_info;
	mqtt_bytes server_reference;
	mqtt_bytes reason_string;
	uint16_t   receive_maximum;
	uint16_t   topic_alias_maximum;
	uint16_t   topic_alias;
	uint8_t    maximum_qos;
	uint8_t    retain_available;
	uint32_t   maximum_packet_size;
	uint8_t    wildcard_sub_available;
	uint8_t    sub_id_available;
	uint8_t    shared_sub_available;
	// Decode: the first (in SUBSCRIBE the only) subscription identifier,
	// valid when MQTT_PBIT(MQTT_PROP_SUBSCRIPTION_ID) is set. Encode: written
	// as the single identifier when that bit is set, sub_ids is NULL and
	// n_sub_ids is 0.
	uint32_t subscription_id;
	// Repeatable properties.
	uint32_t              n_sub_ids; // decode: count found in raw
	const uint32_t       *sub_ids; // encode only
	uint32_t              n_user_props;
	const mqtt_user_prop *user_props; // encode only
} mqtt_props;

typedef struct mqtt_connect {
	uint8_t proto_level; // 3, 4 or 5
	// 3.1/3.1.1: bit 7 of the protocol level, the marker by which a
	// bridge asks brokers that know it (Mosquitto, ours) not to send back
	// what the bridge itself published. Brokers that do not know it
	// refuse the CONNECT (level unsupported). Encode: set it; decode:
	// found (proto_level is then 3 or 4, without the bit).
	bool       bridge_marker;
	bool       clean_start;
	bool       will_flag;
	uint8_t    will_qos;
	bool       will_retain;
	bool       has_username;
	bool       has_password;
	uint16_t   keep_alive;
	mqtt_props props; // v5
	mqtt_bytes client_id;
	mqtt_props will_props; // v5
	mqtt_bytes will_topic;
	mqtt_bytes will_payload;
	mqtt_bytes username;
	mqtt_bytes password;
} mqtt_connect;

typedef struct mqtt_connack {
	bool       session_present;
	uint8_t    reason; // v5 reason code, or v3 return code
	mqtt_props props;
} mqtt_connack;

typedef struct mqtt_publish {
	bool       dup;
	uint8_t    qos;
	bool       retain;
	mqtt_bytes topic; // may be empty in v5 when a topic alias is used
	uint16_t   packet_id;
	mqtt_props props;
	mqtt_bytes payload;
} mqtt_publish;

// PUBACK, PUBREC, PUBREL, PUBCOMP.
typedef struct mqtt_ack {
	uint16_t   packet_id;
	uint8_t    reason; // v5; 0 when absent
	mqtt_props props;
} mqtt_ack;

// Subscription options byte, decoded.
typedef struct mqtt_sub_opts {
	uint8_t qos;
	bool    no_local; // v5
	bool    retain_as_published; // v5
	uint8_t retain_handling; // v5: 0, 1 or 2
} mqtt_sub_opts;

typedef struct mqtt_subscribe {
	uint16_t   packet_id;
	mqtt_props props;
	uint32_t   count; // >= 1
	mqtt_bytes list; // raw payload, walk with mqtt_sub_iter
} mqtt_subscribe;

typedef struct mqtt_unsubscribe {
	uint16_t   packet_id;
	mqtt_props props;
	uint32_t   count; // >= 1
	mqtt_bytes list; // raw payload, walk with mqtt_unsub_iter
} mqtt_unsubscribe;

// SUBACK and UNSUBACK (v3.1.1 UNSUBACK carries no codes).
typedef struct mqtt_suback {
	uint16_t       packet_id;
	mqtt_props     props;
	uint32_t       count;
	const uint8_t *codes; // decode: points into the frame; encode: caller array
} mqtt_suback;

typedef struct mqtt_disconnect {
	uint8_t    reason;
	mqtt_props props;
} mqtt_disconnect;

typedef struct mqtt_auth {
	uint8_t    reason;
	mqtt_props props;
} mqtt_auth;

typedef struct mqtt_packet {
	uint8_t type; // enum mqtt_packet_type
	uint8_t flags; // low nibble of the first byte
	union {
		mqtt_connect     connect;
		mqtt_connack     connack;
		mqtt_publish     publish;
		mqtt_ack         ack;
		mqtt_subscribe   subscribe;
		mqtt_unsubscribe unsubscribe;
		mqtt_suback      suback;
		mqtt_disconnect  disconnect;
		mqtt_auth        auth;
	} u;
} mqtt_packet;

// ---------------------------------------------------------------------------
// Framing.

enum mqtt_frame_result {
	MQTT_FRAME_OK        = 0, // a complete fixed header was parsed
	MQTT_FRAME_NEED_MORE = 1, // not enough bytes yet to know the length
	MQTT_FRAME_MALFORMED = -1, // remaining length VBI longer than 4 bytes
};

// Parses the fixed header at buf[0..len). On MQTT_FRAME_OK sets *hdr_len to
// the size of the fixed header (2..5) and *remaining to the remaining length;
// the whole frame is *hdr_len + *remaining bytes. Does not look at the type.
int mqtt_frame_header(const uint8_t *buf, size_t len, uint32_t *remaining, uint8_t *hdr_len);

// Variable byte integer helpers. mqtt_vbi_decode returns the number of bytes
// consumed (1..4), 0 if more bytes are needed, -1 if malformed.
int    mqtt_vbi_decode(const uint8_t *buf, size_t len, uint32_t *value);
size_t mqtt_vbi_size(uint32_t value); // 1..4, 0 if value > MQTT_VBI_MAX
size_t mqtt_vbi_encode(uint8_t *buf, uint32_t value); // buf holds >= 4

// ---------------------------------------------------------------------------
// Decoding.

// Decodes one complete frame (fixed header included, exactly `len` bytes).
// `proto` is the connection's negotiated version (MQTT_PROTO_V311 for 3.1 and
// 3.1.1, MQTT_PROTO_V5); it is ignored for CONNECT, which carries its own.
// Returns 0 on success or an mqtt_reason (>= 0x80) saying why the packet is
// rejected. On CONNECT, a known protocol name ("MQTT", "MQIsdp") with a
// level it does not go with returns MQTT_RC_UNSUPPORTED_VERSION with
// out->u.connect.proto_level set to what was received, so the caller can
// answer in the client's version; an unknown protocol name is not MQTT and
// returns MQTT_RC_MALFORMED with proto_level 0 (nothing is answered).
// `out` is zeroed first; on failure its fields are partially filled and must
// not be used (except type, flags and, as above, connect.proto_level).
//
// Which reason code for what (where the specification leaves room, the
// choice is written here and tested in tests/unit/test_codec.c):
// - MQTT_RC_MALFORMED: anything that cannot be parsed: a remaining length or
//   VBI longer than 4 bytes or not in its shortest form, a remaining length
//   that disagrees with the content, reserved fixed-header flag bits, type 0
//   (and type 15 on a 3.1.1 connection), bad UTF-8 (including U+0000,
//   surrogates, overlong forms, > U+10FFFF), a property identifier unknown or
//   not allowed in that packet or in the will block (MQTT 5.0 2.2.2.2 says
//   Malformed, not Protocol Error), QoS 3 or DUP with QoS 0 in PUBLISH,
//   CONNECT reserved flag bit, will QoS 3, will QoS/retain without the will
//   flag, password without user name in 3.1/3.1.1, reserved bits 6-7 of the
//   v5 subscription options (or any bit above QoS, or QoS 3, in 3.1.1),
//   an empty PUBLISH topic on a 3.1.1 connection.
// - MQTT_RC_PROTOCOL_ERROR: the packet parses but breaks a rule: a packet
//   identifier of 0 where one is required (every packet that carries one;
//   chosen over Malformed because the field itself parses), a single-valued
//   property repeated (user properties and PUBLISH subscription identifiers
//   may repeat), a property value out of range (payload format, request
//   problem/response information, maximum QoS and the "available" bytes
//   > 1; receive maximum, maximum packet size, topic alias or subscription
//   identifier 0), authentication data without an authentication method,
//   a response topic that is not a valid topic name, a v5 empty PUBLISH
//   topic without a topic alias, an empty SUBSCRIBE/UNSUBSCRIBE list,
//   Retain Handling 3 or
//   QoS 3 in v5 subscription options (MQTT 5.0 3.8.3.1 says Protocol Error),
//   No Local on a "$share/" filter, a reason code not defined for the
//   packet type, CONNACK session present with a non-zero code, SUBACK or v5
//   UNSUBACK without codes, AUTH with a non-zero reason but no method.
//   (An AUTH with a reason code but no property length is Malformed: the
//   two may only be omitted together; DISCONNECT and acks may stop after
//   the reason code.)
// - MQTT_RC_TOPIC_NAME_INVALID: a PUBLISH topic or will topic that is valid
//   UTF-8 but contains '+' or '#' (or an empty will topic).
// - Topic aliases above the negotiated maximum (MQTT_RC_TOPIC_ALIAS_INVALID)
//   are the session's business.
// - MQTT_RC_UNSUPPORTED_VERSION: see above.
// Not checked here (the broker's business, it has the state): client id
// content (empty ids, length), topic alias maximum, subscription
// identifiers in a client's PUBLISH, payload format 1 with a non-UTF-8
// payload, per-filter validity in SUBSCRIBE/UNSUBSCRIBE: mqtt_decode only
// checks that each filter is well-formed UTF-8; the broker calls
// mqtt_topic_filter_valid on each (a filter that fails it is a protocol
// violation that closes the connection; 0x8F is for well-formed filters it
// refuses).
int mqtt_decode(const uint8_t *buf, size_t len, uint8_t proto, mqtt_packet *out);

// Iterates the topic filters of a decoded SUBSCRIBE. Returns true and fills
// filter and opts while entries remain.
typedef struct mqtt_sub_iter {
	const uint8_t *p;
	const uint8_t *end;
	uint8_t        proto;
} mqtt_sub_iter;
void mqtt_sub_iter_init(mqtt_sub_iter *it, const mqtt_subscribe *s, uint8_t proto);
bool mqtt_sub_iter_next(mqtt_sub_iter *it, mqtt_bytes *filter, mqtt_sub_opts *opts);

typedef struct mqtt_unsub_iter {
	const uint8_t *p;
	const uint8_t *end;
} mqtt_unsub_iter;
void mqtt_unsub_iter_init(mqtt_unsub_iter *it, const mqtt_unsubscribe *u);
bool mqtt_unsub_iter_next(mqtt_unsub_iter *it, mqtt_bytes *filter);

// Iterates the user properties (and, separately, the subscription
// identifiers) of a decoded property block.
typedef struct mqtt_prop_iter {
	const uint8_t *p;
	const uint8_t *end;
} mqtt_prop_iter;
void mqtt_prop_iter_init(mqtt_prop_iter *it, const mqtt_props *props);
bool mqtt_prop_iter_next_user(mqtt_prop_iter *it, mqtt_bytes *key, mqtt_bytes *value);
bool mqtt_prop_iter_next_sub_id(mqtt_prop_iter *it, uint32_t *id);

// ---------------------------------------------------------------------------
// Validation helpers (also used by the broker for topic names and filters).

// True if s is well-formed UTF-8 as MQTT requires: no U+0000, no surrogates
// (U+D800..U+DFFF), no overlong forms, nothing above U+10FFFF.
bool mqtt_utf8_valid(const uint8_t *s, size_t len);

// A topic name for PUBLISH: valid UTF-8, at least one byte, no '+' or '#'.
bool mqtt_topic_name_valid(const uint8_t *s, size_t len);

// A topic filter for SUBSCRIBE/UNSUBSCRIBE: valid UTF-8, 1 to 65535 bytes,
// '+' alone in its level, '#' alone in the last level. A filter starting
// with "$share/" must be a well-formed shared subscription (see
// mqtt_share_split) whose inner filter is itself valid by these rules (so
// "$share/g/$share/x" is not, and stripping the prefix always leaves a
// valid filter). False means malformed: "", "#/a", "a+", "$share/g",
// "$share/g/", "$share//a", "$share/g+/a". Whether a valid filter is
// allowed (limits, ACL, No Local on a shared one) is the caller's business.
// The only topic filter validator: the codec, the protocol, the topic tree,
// the retained store and the ACL all use it.
bool mqtt_topic_filter_valid(const uint8_t *s, size_t len);

// What mqtt_share_split() found.
typedef enum mqtt_share_kind {
	MQTT_SHARE_NONE, // no "$share/" prefix: a plain filter
	MQTT_SHARE_OK, // "$share/<group>/<filter>", both parts non-empty
	MQTT_SHARE_MALFORMED, // "$share/" prefix, but no '/' after the group, an
	                      // empty group or filter, or '+' / '#' in the group
} mqtt_share_kind;

// The parts of a filter as received: group (NULL and 0 when not shared)
// and the filter the subscription matches with (the whole input when not
// shared). Slices of the input, not NUL-terminated.
typedef struct mqtt_share {
	const uint8_t *group;
	size_t         glen;
	const uint8_t *filter;
	size_t         flen;
} mqtt_share;

// The only parser of the "$share/" prefix [MQTT-4.8.2]. Returns
// MQTT_SHARE_NONE (out set to no group and the whole input),
// MQTT_SHARE_OK (out set to the group and the inner filter) or
// MQTT_SHARE_MALFORMED (out untouched). The prefix is case-sensitive and
// must be followed by '/': "$share" and "$sharex/a" are plain filters. The
// inner filter is not validated here (mqtt_topic_filter_valid does both).
// out may be NULL. Pure; any thread.
mqtt_share_kind mqtt_share_split(const uint8_t *s, size_t len, mqtt_share *out);

// ---------------------------------------------------------------------------
// Encoding. Each returns the bytes written to buf, or 0 if it would not fit
// in cap or the input is invalid. `proto` selects the wire version.
//
// Invalid input is what mqtt_decode would reject for its structure: QoS 3,
// DUP with QoS 0, packet id 0 where one is required, a reason code not
// defined for the packet type and version (a 3.1.1 CONNACK takes the v3
// return code 0..5, a 3.1.1 SUBACK the raw codes 0, 1, 2, 0x80), a property
// not allowed in the packet, a field longer than 65535 bytes, a PUBLISH
// topic with a wildcard (or empty without a v5 topic alias), a
// SUBSCRIBE/UNSUBSCRIBE list that does not parse or whose count differs.
// String contents are not re-checked for UTF-8 (except the will topic).
// For 3.1.1, v5-only fields (properties, ack and DISCONNECT reason codes)
// are not written. The short forms are used where allowed: an ack with
// reason 0 and no properties has remaining length 2 (3 with a reason and
// no properties); DISCONNECT and AUTH with reason 0 and no properties have
// remaining length 0. CONNECT uses pkt->u.connect.proto_level (3: "MQIsdp",
// 4 or 5: "MQTT") when it is non-zero, else `proto`.
//
// Property blocks: every single-valued property whose bit is set in
// `present` is written (an unknown bit makes the input invalid); then the
// subscription identifiers sub_ids[0..n_sub_ids); or, when sub_ids is NULL
// and MQTT_PBIT(MQTT_PROP_SUBSCRIPTION_ID) is set, the first n_sub_ids found
// in `raw` (so a decoded block re-encodes as received), or the single
// `subscription_id` if n_sub_ids is 0; then the user properties
// user_props[0..n_user_props), or, when user_props is NULL and
// MQTT_PBIT(MQTT_PROP_USER_PROPERTY) is set, the first n_user_props found in
// `raw`. So to forward a decoded block without its subscription identifiers
// (or user properties), clear that bit. Asking for more entries than raw
// holds makes the input invalid.

size_t mqtt_encode(uint8_t *buf, size_t cap, uint8_t proto, const mqtt_packet *pkt);

// Exact encoded size of pkt, 0 if invalid.
size_t mqtt_encoded_size(uint8_t proto, const mqtt_packet *pkt);

// Encodes a property block (length VBI followed by the properties) for the
// given packet type; returns bytes written or 0. Exposed so that the
// protocol layer can build per-subscriber PUBLISH headers. It takes no
// packet type, so it accepts every known property (values are still
// range-checked); mqtt_encode checks the per-type allowed sets.
size_t mqtt_props_encode(uint8_t *buf, size_t cap, const mqtt_props *props);
// Size of the property block content (without its length VBI); 0 for an
// empty block and also for an invalid one (mqtt_props_encode tells them
// apart: it returns 1 for an empty block).
size_t mqtt_props_size(const mqtt_props *props);

// Builds SUBSCRIBE/UNSUBSCRIBE payloads for encoding: each appends one entry
// (filter, and for SUBSCRIBE the options byte for `proto`) at buf[0..cap)
// and returns the bytes written, or 0 if it does not fit or the options are
// invalid (QoS or retain handling > 2). Concatenate the entries into
// mqtt_subscribe.list / mqtt_unsubscribe.list and set count.
size_t mqtt_sub_list_put(
    uint8_t *buf, size_t cap, uint8_t proto, mqtt_bytes filter, const mqtt_sub_opts *opts);
size_t mqtt_unsub_list_put(uint8_t *buf, size_t cap, mqtt_bytes filter);

// Human-readable name of a packet type or reason code, for logs.
const char *mqtt_packet_name(uint8_t type);
const char *mqtt_reason_name(uint8_t reason);

#endif // NMQ_MQTT_CODEC_H
