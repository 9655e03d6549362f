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

// What a listener serves. The url scheme selects the transport:
// "tcp://h:p", "tls+tcp://h:p", "ws://h:p/path", "wss://h:p/path".
typedef struct listener_opts {
	const char *name; // for logs, e.g. "tcp", "ssl.default_1"
	const char *url;
	// TLS (tls+tcp and wss)
	const char *certfile;
	const char *keyfile;
	const char *cacertfile;
	const char *key_password;
	bool        verify_peer;
	bool        fail_if_no_peer_cert;
} listener_opts;

// Starts listening. Returns 0 or an NNG error code, with a message in err.
int listener_start(nmq_listener **lp, const listener_opts *opts, const conn_env *env,
    listener_accept_fn fn, void *arg, char *err, size_t errlen);
// The bound port (useful with port 0).
int listener_port(nmq_listener *l);
// Stops accepting and frees the listener; existing connections live on.
void listener_stop(nmq_listener *l);

#endif // NMQ_LISTENER_H
