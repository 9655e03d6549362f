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
#ifndef NMQ_RETAIN_H
#define NMQ_RETAIN_H

#include <stdbool.h>
#include <stddef.h>

typedef struct retain_ops {
	void (*hold)(void *msg);
	void (*release)(void *msg);
} retain_ops;

typedef struct retain_store retain_store;

retain_store *retain_alloc(const retain_ops *ops);
void          retain_free(retain_store *rs);

// Stores msg under topic (replacing any previous one); msg == NULL clears the
// topic. Returns 0 or -1 on allocation failure (the reference is released).
int retain_set(retain_store *rs, const char *topic, size_t len, void *msg);

// Calls cb(arg, msg) for every match after taking a reference for the caller;
// cb owns that reference. No lock is held while cb runs (results are
// collected first). Returns the number of messages passed, or -1 on
// allocation failure.
int retain_match(retain_store *rs, const char *filter, size_t len,
    void (*cb)(void *arg, void *msg), void *arg);

size_t retain_count(retain_store *rs);

#endif // NMQ_RETAIN_H
