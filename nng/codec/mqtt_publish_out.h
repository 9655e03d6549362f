// Encoding of outbound PUBLISH packets in two parts, for fan-out: the small
// per-subscriber head (fixed header, topic, packet id, property length and
// per-subscriber properties) is written here, and the shared tail (the
// forwardable properties and the payload, encoded once per message) is
// appended by reference.
//
// Pure functions, no allocation, any thread.
#ifndef NMQ_MQTT_PUBLISH_OUT_H
#define NMQ_MQTT_PUBLISH_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nng/codec/mqtt_codec.h"

typedef struct mqtt_publish_head {
	uint8_t        proto; // MQTT_PROTO_V311 or MQTT_PROTO_V5
	uint8_t        qos;
	bool           dup;
	bool           retain;
	const uint8_t *topic; // may be empty (len 0) when an alias is sent
	uint16_t       topic_len;
	uint16_t       packet_id;
	// v5 per-subscriber properties
	bool            has_expiry;
	uint32_t        expiry;
	uint16_t        topic_alias; // 0 = none
	const uint32_t *sub_ids;
	uint32_t        n_sub_ids;
	// shared tail sizes
	uint32_t fwd_props_len; // v5 only
	uint32_t payload_len;
} mqtt_publish_head;

// Size of the whole packet described by h, or 0 if it exceeds the MQTT
// maximum.
size_t mqtt_publish_total_size(const mqtt_publish_head *h);
// Size of the head alone.
size_t mqtt_publish_head_size(const mqtt_publish_head *h);
// Writes the head; returns the bytes written or 0 if it does not fit.
size_t mqtt_publish_head_encode(uint8_t *buf, size_t cap, const mqtt_publish_head *h);

// Encodes a property block WITHOUT its length prefix (the form kept in a
// shared message). Returns bytes written, 0 if empty or it does not fit
// (check mqtt_props_size for the empty case).
size_t mqtt_props_encode_body(uint8_t *buf, size_t cap, const mqtt_props *props);

#endif // NMQ_MQTT_PUBLISH_OUT_H
