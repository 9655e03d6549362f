// A small per-client cache of ACL decisions (docs/compatibility.md §2, `auth.cache`):
// the last few (action, topic) -> allow/deny answers of one client, so that
// a client publishing to the same topics does not walk the rules each time.
//
// Contract:
// - One cache per client session, owned by the thread that handles that
//   session's packets: no locking inside. A caller that checks the same
//   client from several threads serialises the calls itself.
// - The cache holds at most max_size entries; each lives ttl_ms. Topics
//   longer than ACL_CACHE_TOPIC_MAX bytes are answered but not cached, so
//   the cache never holds more than max_size * ACL_CACHE_TOPIC_MAX bytes of
//   topics.
// - Entries are valid only for the acl (by its generation number) that
//   produced them: checking against a different acl, as after a reload,
//   empties the cache first.
// - Entries assume the client (clientid, username, peer) does not change;
//   when a session is taken over by another connection, call
//   acl_cache_flush().
#ifndef NMQ_AUTH_ACL_CACHE_H
#define NMQ_AUTH_ACL_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "src/auth/acl.h"

#define ACL_CACHE_TOPIC_MAX 256

typedef struct acl_cache acl_cache;

// Returns a new empty cache of at most max_size entries living ttl_ms each,
// or NULL when memory runs out. max_size 0 or ttl_ms 0 gives a cache that
// stores nothing (every check goes to the rules).
acl_cache *acl_cache_alloc(size_t max_size, uint32_t ttl_ms);

// Frees the cache. NULL is allowed.
void acl_cache_free(acl_cache *c);

// Empties the cache.
void acl_cache_flush(acl_cache *c);

// Returns the number of entries held (expired ones included until reused).
size_t acl_cache_size(const acl_cache *c);

// Returns acl_check(a, who, action, topic, len), from the cache when a live
// entry for (action, topic) exists, else from the rules (and then stores
// it). now_ms is a monotonic clock reading in milliseconds. c may be NULL
// (no caching). Never fails: when storing an entry runs out of memory, the
// decision is simply not cached.
int acl_cache_check(acl_cache *c, const acl *a, const acl_client *who, int action,
    const char *topic, size_t len, uint64_t now_ms);

#endif // NMQ_AUTH_ACL_CACHE_H
