// A published application message: immutable once built, shared by
// reference count between the router, every subscriber queue, the retained
// store and in-flight windows.
//
// Layout of the single allocation: header, then topic (NUL-terminated), then
// the forwardable MQTT 5 properties (payload format, content type, response
// topic, correlation data, user properties; without their length prefix),
// then the payload. Properties and payload are contiguous so that an MQTT 5
// subscriber's PUBLISH is [per-subscriber header][props+payload] and an MQTT
// 3.1.1 subscriber's is [per-subscriber header][payload]: one encoded body
// shared by every subscriber.
//
// Threading: any thread may hold/release; nobody writes after nmq_msg_alloc
// returns except the builder before the message is shared.
#ifndef NMQ_MSG_H
#define NMQ_MSG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct nmq_msg {
	atomic_uint ref;
	uint8_t     qos;
	bool        retain;
	uint16_t    topic_len;
	uint32_t    props_len;
	uint32_t    payload_len;
	uint32_t    expiry_interval; // seconds as published, 0 = none
	uint64_t    expiry_at_ms; // nmq_clock_ms() deadline, 0 = never
	uint64_t    origin_id; // session id of the publisher (no-local)
	// The message's row in the durable store (src/store), 0 = none; read
	// and written by the store thread only.
	uint64_t store_id;
	char    *topic;
	uint8_t *props; // props_len bytes, immediately followed by payload
	uint8_t *payload;
	uint8_t  data[];
} nmq_msg;

// Allocates a message with room for the given sizes; fills topic, sets
// ref = 1, props/payload pointers (contents to be written by the caller).
// Returns NULL on allocation failure.
nmq_msg *nmq_msg_alloc(const char *topic, size_t topic_len, size_t props_len, size_t payload_len);

static inline void nmq_msg_hold(nmq_msg *m)
{
	atomic_fetch_add_explicit(&m->ref, 1, memory_order_relaxed);
}

// Drops one reference; frees the message with the last one.
void nmq_msg_release(nmq_msg *m);

// Seconds left before expiry (rounded up), UINT32_MAX if the message never
// expires, 0 if it has expired.
uint32_t nmq_msg_remaining(const nmq_msg *m, uint64_t now_ms);

// Total bytes allocated for messages now.
uint64_t nmq_msg_bytes_in_use(void);

// The memory accountant (mqtt.max_message_memory): besides the messages,
// the buffers that hold them on their way are counted: send buffers
// (arenas and segment arrays of connections), queue rings and in-flight
// arrays. Their owners report every change of capacity (delta may be
// negative).
void nmq_mem_buffers_add(int64_t delta);
// Messages plus those buffers, in bytes.
uint64_t nmq_mem_in_use(void);

#endif // NMQ_MSG_H
