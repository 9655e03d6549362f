// Opening the durable store from the configuration: one store per broker,
// whoever needs it: the persistence of sessions, queues and retained
// messages (the sqlite section) and the MQTT bridges' offline cache
// (bridges.mqtt.cache) share one database.
//
// Threads: the main thread, at startup and shutdown.
#ifndef NMQ_STORE_CONF_H
#define NMQ_STORE_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nng/core/nmq_err.h"
#include "src/conf/conf.h"
#include "src/store/store.h"

// True when conf asks for a store.
bool store_conf_wanted(const nmq_conf *conf);
// True when conf asks for the persistence of sessions and messages.
bool store_conf_persist(const nmq_conf *conf);

// Opens the store conf asks for, with evicted(evicted_arg, ...) called for
// every queued message evicted by the size bound (may be NULL). With the
// sqlite section its settings (directory, durability, group size, bound)
// apply; with only the bridges' cache, the cache's (durability os). *sp
// is NULL when none is asked for. Returns NMQ_OK, or the error of
// store_open with a message in err.
nmq_err store_conf_open(nmq_store **sp, const nmq_conf                    *conf,
    void (*evicted)(void *arg, const char *client_id, uint64_t seq), void *evicted_arg, char *err,
    size_t errlen);

// Waits until everything queued in st so far has committed and its
// completions have run (main thread, at shutdown: before the workers that
// completions post to are stopped).
void store_conf_drain(nmq_store *st);

#endif // NMQ_STORE_CONF_H
