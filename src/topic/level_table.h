// The hash table of topic levels shared by the subscription tree (one
// table per node: its exact-level children) and the retained store (one
// table for the whole store, keyed by parent and level).
//
// Contract:
// - Open addressing, linear probing, backward-shift deletion (no
//   tombstones); the capacity is a power of two, at most 3/4 full, grown by
//   doubling, halved when under 1/8 full, and freed when the table empties.
// - The table stores pointers to level_key records embedded in the
//   caller's nodes (LEVEL_ENTRY gets the node back). It owns only its slot
//   array: a key, its level and its node belong to the caller, who removes
//   a key before freeing it and never changes a key while it is in a table.
// - A key is (scope, level): scope is an opaque pointer that tells apart
//   equal levels under different parents in a store-wide table, and is
//   NULL in a per-node table. h must be level_hash(scope, level, len).
// - Not thread safe: the caller's lock guards a table. Lookups do not
//   write, so concurrent lookups under a read lock are fine.
// - Readers may iterate: every non-NULL slots[i] for i < cap is a key.
#ifndef NMQ_LEVEL_TABLE_H
#define NMQ_LEVEL_TABLE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "nng/core/nmq_err.h"

// The key of a node. The level's bytes (not NUL-terminated) follow the key
// directly: a node ends with `level_key key; char level[];`, which
// LEVEL_KEY_CHECK verifies at compile time.
typedef struct level_key {
	const void *scope; // the parent in a store-wide table, NULL in a per-node one
	uint32_t    h; // level_hash(scope, level, len)
	uint32_t    len;
} level_key;

// The level's bytes of key k.
#define LEVEL_KEY_TEXT(k) ((const char *)((const level_key *)(k) + 1))

// Fails the build unless the bytes of `text` directly follow `key` in type.
#define LEVEL_KEY_CHECK(type, key, text)                                                           \
	_Static_assert(offsetof(type, text) == offsetof(type, key) + sizeof(level_key),            \
	    #type ": the level must follow the key")

typedef struct level_table {
	level_key **slots; // cap entries, NULL = empty; NULL when cap == 0
	uint32_t    n;
	uint32_t    cap; // 0 or a power of two
} level_table;

// The node of type `type` whose member `member` is the level_key k.
#define LEVEL_ENTRY(k, type, member) ((type *)(void *)((char *)(k)-offsetof(type, member)))

// Returns a 32-bit hash of (scope, level): FNV-1a seeded with the scope,
// then a final avalanche, so that its high bits (the tree's shard) and its
// low bits (the table slot) are independent. Pure.
static inline uint32_t level_hash(const void *scope, const char *s, size_t len)
{
	uint64_t p = (uint64_t)(uintptr_t)scope;
	uint32_t h = 2166136261u ^ (uint32_t)(p >> 4) ^ (uint32_t)(p >> 36);
	for (size_t i = 0; i < len; i++) {
		h ^= (uint8_t)s[i];
		h *= 16777619u;
	}
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h;
}

// An empty table (no allocation until the first add).
static inline void level_table_init(level_table *t)
{
	t->slots = NULL;
	t->n     = 0;
	t->cap   = 0;
}

// Returns the key (scope, s[0..len)) whose hash is h, or NULL. Inline: one
// call per topic level on the routing path.
static inline level_key *level_table_find(
    const level_table *t, const void *scope, const char *s, size_t len, uint32_t h)
{
	if (t->n == 0) {
		return NULL;
	}
	uint32_t mask = t->cap - 1;
	for (uint32_t i = h & mask;; i = (i + 1) & mask) {
		level_key *k = t->slots[i];
		if (k == NULL) {
			return NULL;
		}
		if (k->h == h && k->len == len && k->scope == scope
		    && memcmp(LEVEL_KEY_TEXT(k), s, len) == 0) {
			return k;
		}
	}
}

// Adds k, which must not be in the table (nor an equal key). Returns
// NMQ_OK, or NMQ_ENOMEM if the table could not grow (it is unchanged).
nmq_err level_table_add(level_table *t, level_key *k);

// Removes k, which must be in the table. Never fails: a failed shrink
// keeps the larger array.
void level_table_del(level_table *t, level_key *k);

// Removes and returns some key, or NULL when none is left: for tearing a
// structure down. After the first pop the table serves only further pops
// and level_table_fini (it is no longer searchable).
level_key *level_table_pop(level_table *t);

// Frees the slot array (not the keys) and empties the table.
void level_table_fini(level_table *t);

#endif // NMQ_LEVEL_TABLE_H
