#include "nng/core/msg.h"

#include <stdlib.h>
#include <string.h>

static atomic_uint_fast64_t msg_bytes;

// Returns a new message of ref 1 with the topic copied in, or NULL.
nmq_msg *nmq_msg_alloc(const char *topic, size_t topic_len, size_t props_len, size_t payload_len)
{
	if (topic_len > UINT16_MAX || props_len > UINT32_MAX || payload_len > UINT32_MAX) {
		return NULL;
	}
	size_t   sz = sizeof(nmq_msg) + topic_len + 1 + props_len + payload_len;
	nmq_msg *m  = malloc(sz);
	if (m == NULL) {
		return NULL;
	}
	memset(m, 0, sizeof(*m));
	atomic_init(&m->ref, 1);
	m->topic_len   = (uint16_t)topic_len;
	m->props_len   = (uint32_t)props_len;
	m->payload_len = (uint32_t)payload_len;
	m->topic       = (char *)m->data;
	memcpy(m->topic, topic, topic_len);
	m->topic[topic_len] = '\0';
	m->props            = m->data + topic_len + 1;
	m->payload          = m->props + props_len;
	atomic_fetch_add_explicit(&msg_bytes, sz, memory_order_relaxed);
	return m;
}

// Drops a reference and frees the message when it was the last.
void nmq_msg_release(nmq_msg *m)
{
	if (m == NULL) {
		return;
	}
	if (atomic_fetch_sub_explicit(&m->ref, 1, memory_order_acq_rel) == 1) {
		size_t sz = sizeof(nmq_msg) + m->topic_len + 1 + m->props_len + m->payload_len;
		atomic_fetch_sub_explicit(&msg_bytes, sz, memory_order_relaxed);
		free(m);
	}
}

// Returns the seconds left before expiry, rounded up; see msg.h.
uint32_t nmq_msg_remaining(const nmq_msg *m, uint64_t now_ms)
{
	if (m->expiry_at_ms == 0) {
		return UINT32_MAX;
	}
	if (now_ms >= m->expiry_at_ms) {
		return 0;
	}
	return (uint32_t)((m->expiry_at_ms - now_ms + 999) / 1000);
}

static atomic_int_fast64_t buf_bytes;

void nmq_mem_buffers_add(int64_t delta)
{
	atomic_fetch_add_explicit(&buf_bytes, delta, memory_order_relaxed);
}

uint64_t nmq_mem_in_use(void)
{
	int64_t b = atomic_load_explicit(&buf_bytes, memory_order_relaxed);
	return atomic_load_explicit(&msg_bytes, memory_order_relaxed) + (uint64_t)(b > 0 ? b : 0);
}

// Returns the bytes currently held by messages.
uint64_t nmq_msg_bytes_in_use(void)
{
	return atomic_load_explicit(&msg_bytes, memory_order_relaxed);
}
