// The subscription tree: topic filters -> subscribers, matched against
// published topic names.
//
// Contract:
// - Safe under concurrent publish (match), subscribe (insert), unsubscribe
//   and disconnect (remove) from any number of threads. Matching takes only
//   a shared (read) lock on the shard of the tree it walks; inserts and
//   removes take the exclusive lock of one shard. No lock is held when
//   topic_tree_match() returns, and no callback runs under a tree lock.
// - A subscriber is an opaque pointer owned by the caller. The tree calls
//   ops.hold() on every subscriber it returns from a match, so the result
//   stays valid after the lock is dropped; the caller releases each entry
//   (ops.release) when done, e.g. via topic_match_vec_clear().
// - Keys: (filter, share group, subscriber). Inserting the same key again
//   replaces the options and reports existed = true.
// - Filters starting with '+' or '#' do not match topics starting with '$'.
// - "$share/<group>/<filter>" subscriptions form groups; a match returns one
//   member per group, picked round-robin among members for which
//   ops.eligible() is true (e.g. connected); if none is eligible, any member.
#ifndef NMQ_TOPIC_TREE_H
#define NMQ_TOPIC_TREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct topic_sub_opts {
	uint8_t  qos;
	bool     no_local;
	bool     retain_as_published;
	uint8_t  retain_handling;
	uint32_t sub_id; // 0 = none
} topic_sub_opts;

typedef struct topic_tree_ops {
	void (*hold)(void *sub);
	void (*release)(void *sub);
	bool (*eligible)(void *sub); // may be NULL: every member eligible
} topic_tree_ops;

typedef struct topic_match {
	void          *sub;
	topic_sub_opts opts;
	bool           shared; // matched through a $share group
} topic_match;

// A growable result vector. Initialise with topic_match_vec_init; reuse
// across matches to avoid allocation on the hot path.
typedef struct topic_match_vec {
	topic_match *v;
	size_t       n;
	size_t       cap;
} topic_match_vec;

void topic_match_vec_init(topic_match_vec *mv);
// Releases every held subscriber (through ops) and empties the vector,
// keeping its memory.
void topic_match_vec_clear(topic_match_vec *mv, const topic_tree_ops *ops);
void topic_match_vec_fini(topic_match_vec *mv, const topic_tree_ops *ops);

typedef struct topic_tree topic_tree;

// Returns a new empty tree, or NULL on allocation failure.
topic_tree *topic_tree_alloc(const topic_tree_ops *ops);
void        topic_tree_free(topic_tree *t);

// Adds or replaces a subscription. `filter` is the full filter as received
// (a "$share/g/f" prefix is recognised here). Returns 0, or -1 if the filter
// is invalid or memory ran out. Sets *existed if the key was already there.
int topic_tree_insert(topic_tree *t, const char *filter, size_t len, void *sub,
    const topic_sub_opts *opts, bool *existed);

// Removes a subscription. Returns 0, or -1 if it did not exist.
int topic_tree_remove(topic_tree *t, const char *filter, size_t len, void *sub);

// Appends every subscription matching the topic name to *out (held).
// Returns 0, or -1 if memory ran out (out then holds what was found).
int topic_tree_match(topic_tree *t, const char *topic, size_t len, topic_match_vec *out);

// Counts for metrics: distinct filters and total subscriptions.
size_t topic_tree_filter_count(topic_tree *t);
size_t topic_tree_sub_count(topic_tree *t);

// Walks every node depth-first under the read lock (for REST /topic-tree).
// cb gets the level text, depth, number of children and subscriber list.
typedef void (*topic_tree_walk_cb)(void *arg, const char *level, size_t len,
    int depth, size_t n_children, void *const *subs, size_t n_subs);
void topic_tree_walk(topic_tree *t, topic_tree_walk_cb cb, void *arg);

// True if the topic name matches the (non-shared) filter.
bool topic_filter_match(const char *filter, size_t flen, const char *topic, size_t tlen);

// If filter is "$share/<group>/<f>", sets group/real filter and returns true.
bool topic_filter_share_split(const char *filter, size_t len, const char **group,
    size_t *glen, const char **real, size_t *rlen);

#endif // NMQ_TOPIC_TREE_H
