// The durable store behind the protocol layer's store interface
// (proto_store_ops, nng/protocol/proto.h): each function queues the
// matching store operation; `st` is the nmq_store.
#ifndef NMQ_STORE_PROTO_H
#define NMQ_STORE_PROTO_H

#include "nng/protocol/proto.h"

extern const proto_store_ops store_proto_ops;

#endif // NMQ_STORE_PROTO_H
