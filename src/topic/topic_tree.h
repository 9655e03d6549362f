// The subscription tree: topic filters -> subscribers, matched against
// published topic names.
//
// Contract:
// - Safe under concurrent publish (match), subscribe (insert), unsubscribe
//   and disconnect (remove) from any number of threads. Matching takes only
//   a shared (read) lock on the shard of the tree it walks; inserts and
//   removes take the exclusive lock of one shard. No lock is held when
//   topic_tree_match() returns, and ops.release never runs under a tree lock.
// - Sharding: a filter lives in the shard chosen by a hash of its first
//   level, or in the one wildcard shard if its first level is '+' or '#'.
//   A match walks the topic's shard and the wildcard shard (skipped for
//   topics starting with '$'), and skips any shard holding no subscription
//   without locking it. The locks prefer readers, so a subscribe storm does
//   not queue publishers behind it; only a writer that has waited 0.5 ms
//   holds new readers back until it is done, so writers do not starve.
// - A subscriber is an opaque pointer owned by the caller; the tree keeps no
//   reference of its own (the caller removes a subscriber before freeing
//   it). The tree calls ops.hold() on every subscriber it returns from a
//   match, so the result stays valid after the lock is dropped; the caller
//   releases each entry (ops.release) when done, e.g. via
//   topic_match_vec_clear().
// - ops.hold and ops.eligible are called with a shard's read lock held (the
//   hold must happen before the lock is dropped): they must be short and
//   must not block or call back into the tree (an atomic increment, a flag
//   read).
// - Results are not deduplicated: a subscriber with overlapping filters
//   ("a/+" and "a/#") appears once per matching subscription.
// - Keys: (filter, share group, subscriber). Inserting the same key again
//   replaces the options and reports existed = true.
// - Filters starting with '+' or '#' do not match topics starting with '$'.
// - "$share/<group>/<filter>" subscriptions form groups; a match returns one
//   member per group, picked round-robin among members for which
//   ops.eligible() is true (e.g. connected); if none is eligible, any member.
//   topic_tree_match_stamped() may add stand-ins after a pick (see there).
//   The group is identified by (group name, filter): "$share/g/a" and
//   "$share/g/b" are two groups, each picking its own member. A filter that
//   starts with "$share/" but is not a well-formed shared subscription is
//   rejected by insert and remove.
// - Depth and length are unbounded: matching, pruning and freeing are
//   iterative (no recursion on the levels of a topic).
#ifndef NMQ_TOPIC_TREE_H
#define NMQ_TOPIC_TREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nng/core/nmq_err.h"

typedef struct topic_sub_opts {
	uint8_t  qos;
	bool     no_local;
	bool     retain_as_published;
	uint8_t  retain_handling;
	uint32_t sub_id; // 0 = none
	// Opaque to the tree, except in topic_tree_match_stamped(): the
	// caller's proof that this subscriber may receive every topic of the
	// filter (the broker: the ACL epoch that proved it), 0 = none.
	uint32_t stamp;
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
	// topic_tree_match_stamped() only: a group's pick is followed by n_alt
	// stand-ins (alt set, shared set) that the caller may deliver to
	// instead. The caller may also use alt to mark entries it skips.
	uint8_t n_alt;
	bool    alt;
} topic_match;

// Most stand-ins that follow one shared pick.
#define TOPIC_MATCH_MAX_ALTS 16

// A growable result vector. Initialise with topic_match_vec_init; reuse
// across matches to avoid allocation on the hot path. Owned by one thread
// (typically one per work context); not shared.
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

// Returns a new empty tree, or NULL on allocation failure. ops is copied;
// hold and release are required, eligible may be NULL.
topic_tree *topic_tree_alloc(const topic_tree_ops *ops);
// Frees the tree and every node. Nothing may use the tree concurrently.
// Subscribers still in it are not released (the tree holds no reference).
void topic_tree_free(topic_tree *t);

// Adds or replaces a subscription. `filter` is the full filter as received
// (a "$share/g/f" prefix is recognised here). Returns NMQ_OK, NMQ_EINVAL if
// the filter is not valid (mqtt_topic_filter_valid) or NMQ_ENOMEM (the tree
// is then unchanged). Sets *existed if the key was already there (existed
// may be NULL). opts == NULL stores all-zero options.
nmq_err topic_tree_insert(topic_tree *t, const char *filter, size_t len, void *sub,
    const topic_sub_opts *opts, bool *existed);

// Removes a subscription. Returns NMQ_OK, NMQ_ENOENT if it did not exist,
// or NMQ_EINVAL if the filter is not valid.
nmq_err topic_tree_remove(topic_tree *t, const char *filter, size_t len, void *sub);

// Appends every subscription matching the topic name to *out (held).
// Returns NMQ_OK, or NMQ_ENOMEM if memory ran out (out then holds what was
// found, held). An empty or NULL topic matches nothing.
nmq_err topic_tree_match(topic_tree *t, const char *topic, size_t len, topic_match_vec *out);

// topic_tree_match(), except for share groups when stamp is not 0: a
// group's pick whose opts.stamp differs from stamp (the caller may have to
// refuse it) is followed in *out by stand-ins: the next members in
// round-robin order (connected ones only, unless no member is eligible), up
// to and including the first whose opts.stamp equals stamp, at most
// TOPIC_MATCH_MAX_ALTS. The pick's n_alt says how many follow it; each has
// alt and shared set. The caller delivers to the first acceptable one of
// the pick and its stand-ins. With stamp 0 no stand-in is added.
nmq_err topic_tree_match_stamped(
    topic_tree *t, const char *topic, size_t len, topic_match_vec *out, uint32_t stamp);

// Counts for metrics: distinct filters and total subscriptions. A filter is
// counted once for its plain subscribers and once per share group, so "a",
// "$share/g/a" and "$share/h/a" are three filters. Lock-free reads.
size_t topic_tree_filter_count(topic_tree *t);
size_t topic_tree_sub_count(topic_tree *t);

// Walks every node depth-first under the read lock (for REST /topic-tree).
// cb gets the level text, depth, number of children and subscriber list.
// The invisible root is not reported: first-level nodes have depth 1, and
// each shard is walked under its own read lock, one after the other. The
// subscriber list holds the plain subscribers followed by the members of
// every share group of the node. cb runs under the read lock: it must not
// call into the tree, and level/subs are valid only during the call.
// Children are visited in no particular order.
typedef void (*topic_tree_walk_cb)(void *arg, const char *level, size_t len, int depth,
    size_t n_children, void *const *subs, size_t n_subs);
void topic_tree_walk(topic_tree *t, topic_tree_walk_cb cb, void *arg);

// True if the topic name matches the (non-shared) filter, with the rules of
// the tree: '+' one level, '#' zero or more trailing levels ("a/#" matches
// "a"), empty levels are levels, a first-level wildcard does not match a
// topic starting with '$'. False if the filter is invalid
// (mqtt_topic_filter_valid) or the topic empty. A "$share/" prefix is not
// stripped here.
bool topic_filter_match(const char *filter, size_t flen, const char *topic, size_t tlen);

#endif // NMQ_TOPIC_TREE_H
