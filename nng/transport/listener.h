// Stream listeners (tcp:// now; tls+tcp://, ws://, wss:// share the code):
// accept connections and hand each to the upper layer.
//
// Threads: the accept callback runs on an NNG task thread and only wraps
// the stream and re-arms; `accepted` must not block.
#ifndef NMQ_LISTENER_H
#define NMQ_LISTENER_H

#include "nng/transport/conn.h"

typedef struct nmq_listener nmq_listener;

// Called for every accepted connection (ref owned by the callee).
typedef void (*listener_accept_fn)(void *arg, nmq_conn *c);

// Listens on url (e.g. "tcp://0.0.0.0:1883"). Returns 0 or an NNG error
// code, with a message in err.
int listener_start(nmq_listener **lp, const char *url, const conn_env *env,
    listener_accept_fn fn, void *arg, char *err, size_t errlen);
// The bound port (useful with port 0).
int listener_port(nmq_listener *l);
// Stops accepting and frees the listener; existing connections live on.
void listener_stop(nmq_listener *l);

#endif // NMQ_LISTENER_H
