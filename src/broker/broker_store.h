// The broker on the durable store (sqlite section): restores what the
// store holds at startup, then keeps it up to date. Sessions, their queues
// and QoS 2 state are written by the protocol layer (proto_set_store); the
// broker writes subscriptions and retained messages.
//
// Threads: broker_store_attach on the main thread, before any listener
// opens; broker_store_evicted on the store's thread.
#ifndef NMQ_BROKER_STORE_H
#define NMQ_BROKER_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "nng/core/nmq_err.h"
#include "nng/protocol/proto.h"
#include "src/broker/broker.h"
#include "src/store/store.h"

// Restores the store's sessions (offline, with their subscriptions,
// queued and in-flight messages and QoS 2 state) into p and its retained
// messages into b, then binds the store to both. With persist false (the
// store is open for another user, e.g. a bridge cache), nothing is
// restored nor written, and the store is bound for acks alone
// (proto_set_ack_store: a forward cached for a publisher is acked after
// its commit). Returns NMQ_OK, or NMQ_EIO / NMQ_ENOMEM (logged).
nmq_err broker_store_attach(nmq_broker *b, nmq_proto *p, nmq_store *st, bool persist);

// The store's evicted callback (arg: the broker): a queued message was
// dropped by sqlite.disk_cache_size. Counted and logged, rate limited.
void broker_store_evicted(void *arg, const char *client_id, uint64_t seq);

// Queued messages evicted by sqlite.disk_cache_size so far.
uint64_t broker_store_evictions(void);

#endif // NMQ_BROKER_STORE_H
