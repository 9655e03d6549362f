// "Why was my message dropped?": a counter per reason for every message
// the broker discards and every request it refuses (a CONNECT, a
// SUBSCRIBE filter, a PUBLISH denied by the ACL...), and a fixed-size ring
// of the last events (time, reason, client id, topic, QoS), readable as
// JSON (the REST API serves it as /api/v4/drops). Each event is also
// sampled into the log (at most a few lines a second, whatever the rate of
// drops).
//
// One instance per process (drops happen in nng/protocol and src/broker,
// which share it), like the log sink.
//
// Threads: droplog_record() may be called from any thread, with or without
// a session or connection lock held (it takes only its own small lock,
// a leaf, for the copy into the ring; the counters are atomic).
// droplog_init() and droplog_fini() are called by the main thread while no
// other thread records (at startup and exit). The readers (droplog_count,
// droplog_snapshot, droplog_json) may run on any thread at any time.
#ifndef NMQ_CORE_DROPLOG_H
#define NMQ_CORE_DROPLOG_H

#include <stddef.h>
#include <stdint.h>

// Why. Keep droplog.c's names in the same order. "Drops" are messages
// discarded (they count in the messages_dropped metric, except
// DROP_ACL_DELIVER, which skips one subscriber of a message others get);
// "denies" are refused requests.
typedef enum droplog_reason {
	DROP_QUEUE_FULL = 0, // the subscriber's queue (max_mqueue_len) is full
	DROP_EXPIRED, // Message Expiry Interval passed while queued
	DROP_TOO_LARGE, // bigger than the receiver's Maximum Packet Size
	DROP_ACL_PUBLISH, // the ACL refused the PUBLISH (the whole message)
	DROP_ACL_DELIVER, // the ACL refused one subscriber the topic
	DROP_ACL_REQUEUE, // queued, then refused after an ACL reload
	DROP_MEMORY, // mqtt.max_message_memory reached
	DROP_AWAIT_REL_EXPIRED, // inbound QoS 2 without PUBREL in time
	DENY_AUTH, // CONNECT refused: credentials (or the TLS peer)
	DENY_MAX_CONNECTIONS, // CONNECT refused: mqtt or listener limit
	DENY_CLIENT_ID_OWNER, // CONNECT refused: another user's session
	DENY_TOPIC_LIMIT, // max_topic_length / max_topic_levels
	DENY_ACL_SUBSCRIBE, // the ACL refused a SUBSCRIBE filter
	DENY_MAX_SUBSCRIPTIONS, // mqtt.max_subscriptions reached
	DROP_REASON_COUNT
} droplog_reason;

// QoS unknown or not applicable (a CONNECT).
#define DROPLOG_NO_QOS 255

// Sizes kept per event: longer client ids and topics are cut (at a UTF-8
// character boundary).
#define DROPLOG_CLIENT_MAX 64
#define DROPLOG_TOPIC_MAX  128

typedef struct droplog_event {
	uint64_t seq; // 1, 2, ... in recording order
	uint64_t ts_ms; // wall clock, ms since the epoch
	uint8_t  reason; // droplog_reason
	uint8_t  qos; // 0..2 or DROPLOG_NO_QOS
	uint32_t count; // events folded into this one (a batch)
	char     client[DROPLOG_CLIENT_MAX + 1];
	char     topic[DROPLOG_TOPIC_MAX + 1];
} droplog_event;

// Sets the ring to `capacity` events (0: counters only, no ring). Returns
// 0, or -1 when the ring cannot be allocated (then counters only). Frees a
// previous ring. Main thread, before any worker runs.
int droplog_init(uint32_t capacity);
// Frees the ring (counters are kept). Main thread, after the workers end.
void droplog_fini(void);

// Records n (>= 1) events of one reason: adds n to its counter, writes one
// ring entry (count = n) and maybe a log line. client and topic may be
// NULL; topic need not be NUL-terminated (topic_len bytes).
void droplog_record(droplog_reason r, const char *client, const char *topic, size_t topic_len,
    uint8_t qos, uint32_t n);

// Events recorded for r since start.
uint64_t droplog_count(droplog_reason r);
// "queue_full", "expired", ... (the JSON and log spelling); "?" if r is
// out of range.
const char *droplog_reason_name(droplog_reason r);
// The ring's capacity (0: none).
uint32_t droplog_capacity(void);

// Copies up to max of the most recent events into out, newest first.
// Returns how many were copied.
size_t droplog_snapshot(droplog_event *out, size_t max);

// The ring and the counters as one JSON object (the /api/v4/drops body):
// {"code":0,"capacity":N,"counters":{"queue_full":n,...},
//  "data":[{"seq","ts","time","reason","clientid","topic","qos","count"}...]}
// with at most `limit` events, newest first; "qos" is null when not
// applicable. Returns a malloc'd NUL-terminated string the caller frees,
// or NULL when out of memory.
char *droplog_json(size_t limit);

#endif // NMQ_CORE_DROPLOG_H
