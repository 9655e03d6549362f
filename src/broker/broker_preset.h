// Preset sessions (preset.session): persistent sessions the broker creates
// at startup, subscribed as configured, so that messages queue for a
// client before it first connects (docs/config.md, docs/persistence.md).
//
// Threads: the main thread, after the durable store's sessions were
// restored (broker_store_attach) and before any listener opens.
#ifndef NMQ_BROKER_PRESET_H
#define NMQ_BROKER_PRESET_H

#include "nng/core/nmq_err.h"
#include "nng/protocol/proto.h"
#include "src/broker/broker.h"

struct cJSON;

// Creates the sessions of presets (nmq_conf.preset_sessions; NULL: none)
// in p and subscribes them through b, which writes them to the store when
// one is bound. A session restored from the store under a preset client
// id is kept as it is (not created twice, not subscribed again). A
// subscription the broker refuses (the ACL) is logged at error and skipped.
// Returns NMQ_OK, or NMQ_ENOMEM (logged).
nmq_err broker_preset_sessions(nmq_broker *b, nmq_proto *p, const struct cJSON *presets);

#endif // NMQ_BROKER_PRESET_H
