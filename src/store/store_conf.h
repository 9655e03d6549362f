// Opening the durable store from the configuration: one store per broker,
// whoever needs it. Today the MQTT bridges' offline cache
// (bridges.mqtt.cache) asks for it; the persistence of sessions (the
// sqlite section) is to be added here, so that both share one database.
//
// Threads: the main thread, at startup.
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

// Opens the store conf asks for, with evicted(evicted_arg, ...) called for
// every cached message evicted by the size bound (may be NULL). *sp is
// NULL when none is asked for. Returns NMQ_OK, or the error of store_open
// with a message in err.
nmq_err store_conf_open(nmq_store **sp, const nmq_conf                    *conf,
    void (*evicted)(void *arg, const char *client_id, uint64_t seq), void *evicted_arg, char *err,
    size_t errlen);

#endif // NMQ_STORE_CONF_H
