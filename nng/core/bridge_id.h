// The client ids reserved for the bridges: "$bridge/<name>". The durable
// store keys a bridge's rows (its offline cache, its inbound QoS 2 ids, a
// transparent bridge's mirrored filters) by such an id, so no MQTT client
// may take one while the store is on (docs/persistence.md), and what is
// restored or evicted under one belongs to the bridge, not to a session.
// In nng/core so that every layer can ask (nng/ includes nothing of src/).
#ifndef NMQ_BRIDGE_ID_H
#define NMQ_BRIDGE_ID_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#define NMQ_BRIDGE_ID_PREFIX     "$bridge/"
#define NMQ_BRIDGE_ID_PREFIX_LEN (sizeof(NMQ_BRIDGE_ID_PREFIX) - 1)

// True when the client id of len bytes at id (NUL inside or not) starts
// with "$bridge/". For a NUL-terminated id pass strlen(id).
static inline bool nmq_bridge_client_id(const char *id, size_t len)
{
	return id != NULL && len >= NMQ_BRIDGE_ID_PREFIX_LEN
	    && memcmp(id, NMQ_BRIDGE_ID_PREFIX, NMQ_BRIDGE_ID_PREFIX_LEN) == 0;
}

#endif // NMQ_BRIDGE_ID_H
