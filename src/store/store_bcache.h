// The bridges' offline cache (store_bcache.c): what the bridges need of
// it beyond the queue operations of store.h.
#ifndef NMQ_STORE_BCACHE_H
#define NMQ_STORE_BCACHE_H

#include "src/store/store.h"

// Lists the bridges that have rows in the store: fn(arg, client_id, rows,
// ids, filters) for each client id "$bridge/<name>" with cached forwards
// (rows), inbound QoS 2 packet ids (ids) or mirrored filters (filters), on
// the store thread after everything queued before it, then done (NMQ_OK,
// or NMQ_EIO if the read failed). fn and done run on the store thread and
// must not block. Returns NMQ_OK when queued (done will run), or the error
// of the submission (done will not run). A bridge's rows are dropped with
// store_session_del of its client id.
nmq_err store_bcache_list(nmq_store *s,
    void (*fn)(void *arg, const char *client_id, uint64_t rows, uint32_t ids, uint32_t filters),
    store_done_fn done, void *arg);

// Whether the cached row (client_id, seq) is done with: its forward was
// acknowledged (or dropped) and its delete is on its way to the store.
// Called on the store thread; must not block.
typedef bool (*store_bcache_gone_fn)(void *arg, const char *client_id, uint64_t seq);

// Sets the function eviction (disk_cache_size) asks about each row it
// would take: a row done with is deleted without being counted or
// reported as evicted (it was going anyway; taking it loses nothing).
// fn may be NULL (every row counts). Any thread.
void store_bcache_set_gone(nmq_store *s, store_bcache_gone_fn fn, void *arg);

// A cached row (client_id, seq) deleted because its message expired: by
// the store's sweep (the rows that expire while the broker runs, every
// second) or by a read that reached it. Called on the store thread after
// the commit; must not block.
typedef void (*store_bcache_expired_fn)(void *arg, const char *client_id, uint64_t seq);

// Sets the function told of each cached row dropped as expired (may be
// NULL). Any thread.
void store_bcache_set_expired(nmq_store *s, store_bcache_expired_fn fn, void *arg);

#endif
