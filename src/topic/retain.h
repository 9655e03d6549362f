// The retained-message store: at most one message per topic name.
//
// Contract:
// - Thread safe (one rwlock; set takes it exclusively, match shared).
// - Messages are opaque pointers with caller-supplied hold/release
//   (reference counting). retain_set() takes over the caller's reference
//   to msg; replacing or clearing releases the old one.
// - retain_match() returns every retained message whose topic matches the
//   filter (held; the caller releases). Wildcards at the first level do not
//   match topics beginning with '$'.
// - Layout: a trie by topic level. Exact levels are found through one hash
//   table keyed by (parent node, level), and '+'/'#' walk the children
//   lists, so a filter without wildcards costs one lookup per level and
//   "a/+/c" visits only the children of "a" and their "c" children, never
//   every retained topic.
// - ops.hold runs under the read lock (short, non-blocking); ops.release
//   never runs under the lock.
#ifndef NMQ_RETAIN_H
#define NMQ_RETAIN_H

#include <stdbool.h>
#include <stddef.h>

#include "nng/core/nmq_err.h"

typedef struct retain_ops {
	void (*hold)(void *msg);
	void (*release)(void *msg);
} retain_ops;

typedef struct retain_store retain_store;

// Returns a new empty store, or NULL on allocation failure. ops is copied;
// both functions are required.
retain_store *retain_alloc(const retain_ops *ops);
// Releases every stored message and frees the store. Nothing may use the
// store concurrently.
void retain_free(retain_store *rs);

// Stores msg under topic (replacing any previous one); msg == NULL clears the
// topic. Returns NMQ_OK, or NMQ_ENOMEM (the reference is released). Returns
// NMQ_EINVAL (releasing msg) if the topic is not a valid topic name
// (mqtt_topic_name_valid: empty, bad UTF-8, NUL, '+' or '#'). Clearing a topic that has
// no message returns NMQ_OK. The replaced message is released after the lock is
// dropped.
nmq_err retain_set(retain_store *rs, const char *topic, size_t len, void *msg);

// Calls cb(arg, msg) for every match after taking a reference for the caller;
// cb owns that reference. No lock is held while cb runs (results are
// collected first). Returns NMQ_OK with *count (may be NULL) set to the
// number of messages passed, or NMQ_ENOMEM (then cb was not called,
// nothing stays held and *count is 0).
// `filter` is a plain filter (the broker skips shared ones); an invalid
// filter (mqtt_topic_filter_valid) matches nothing (NMQ_OK, count 0). A
// "$share/" prefix is not stripped here. Messages come in no particular
// order.
nmq_err retain_match(retain_store *rs, const char *filter, size_t len,
    void (*cb)(void *arg, void *msg), void *arg, size_t *count);

// Number of retained messages (lock-free read).
size_t retain_count(retain_store *rs);

#endif // NMQ_RETAIN_H
