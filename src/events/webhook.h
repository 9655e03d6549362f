// Webhooks (docs/webhooks.md): broker events POSTed as JSON to an HTTP
// target, per the `webhook` section.
//
// Threads: the broker's observer callback (webhook_observe, registered by
// webhook_start) runs on the thread of the event, a worker mostly: it
// matches the event against the configured events and topic filters,
// copies what the body needs into one allocation (a message event holds a
// reference to the message instead of copying its payload) and appends it
// to a bounded queue under a mutex, then wakes the webhook thread through
// an eventfd. It never blocks on the network and never waits for the
// webhook thread: when the queue is full the event is dropped and counted.
// The webhook thread ("nmq:webhook") formats the JSON bodies and runs up to
// pool_size HTTP/1.1 requests at once on non-blocking sockets with poll(),
// each bounded by cancel_timeout; a failed request (no connection, a
// timeout, a status other than 2xx) is retried after 1, 2 and 4 s, then
// counted as failed. webhook_start and webhook_stop run on the main thread.
#ifndef NMQ_WEBHOOK_H
#define NMQ_WEBHOOK_H

#include <stdint.h>

#include "nng/core/nmq_err.h"
#include "src/broker/broker.h"
#include "src/conf/conf.h"

typedef struct webhook webhook;

typedef struct webhook_stats {
	uint64_t sent; // answered with 2xx
	uint64_t failed; // given up after the retries
	uint64_t dropped; // not queued (queue full, out of memory) or unsent at exit
	uint64_t retried; // retries scheduled
	uint64_t queued; // events waiting or in flight now
} webhook_stats;

// Starts the webhook thread and registers the observer with b when the
// webhook section is present and enabled; otherwise sets *out to NULL and
// returns NMQ_OK. NMQ_EINVAL when the url's host cannot be resolved,
// NMQ_ENOMEM when out of memory; the reason is written to err.
nmq_err webhook_start(const nmq_conf *conf, nmq_broker *b, webhook **out, char *err, size_t errlen);
// Stops the thread and frees everything, releasing queued messages (they
// are counted as dropped). Call after the workers have stopped, so that no
// event arrives any more. NULL is fine.
void webhook_stop(webhook *w);
// A snapshot of the counters (any thread).
void webhook_get_stats(webhook *w, webhook_stats *st);

// Encodes src[0..n) as base62 (digits 0-9, A-Z, a-z): each group of 8 bytes
// (the last one may be shorter) becomes the fixed number of digits that
// holds it (11 for 8 bytes), most significant first. Writes the NUL
// terminator too; dst needs webhook_base62_len(n) + 1 bytes. Pure.
size_t webhook_base62_len(size_t n);
void   webhook_base62(const uint8_t *src, size_t n, char *dst);

#endif // NMQ_WEBHOOK_H
