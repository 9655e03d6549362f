// Outbound connections, for the broker acting as a client of another
// broker (the MQTT bridge). The connect itself runs on the calling thread
// with a deadline; once connected, the socket (conn_alloc_fd) or the TLS
// stream (conn_alloc) is served by the workers' event loops like any
// accepted connection.
//
// Threads: the calling thread may block up to the deadline (name
// resolution, TCP and TLS handshakes): never call from a worker or an NNG
// callback.
#ifndef NMQ_CONN_DIAL_H
#define NMQ_CONN_DIAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>

#include "nng/core/nmq_err.h"

typedef struct conn_dial_opts {
	bool        nodelay; // TCP_NODELAY
	bool        keepalive; // SO_KEEPALIVE
	int         keepidle; // seconds, 0 = system default
	int         keepintvl;
	int         keepcnt;
	const char *bind_interface; // SO_BINDTODEVICE, NULL = any
	// When not NULL, the connect gives up (NMQ_ECLOSED) within 100 ms of
	// *cancel turning true (another thread is stopping the caller).
	const _Atomic bool *cancel;
} conn_dial_opts;

// Resolves host and connects to port, trying each address in turn, within
// timeout_ms overall. Returns NMQ_OK with a connected non-blocking socket
// in *fdp (the caller owns it), or an error with the reason in err:
// NMQ_ENOENT (name not resolved), NMQ_ETIMEDOUT, NMQ_EIO (refused,
// unreachable).
nmq_err conn_dial_tcp(const char *host, int port, const conn_dial_opts *o, int timeout_ms, int *fdp,
    char *err, size_t errlen);

// Connects over TLS with cfg (a client configuration: server verification
// and SNI as set in it), within timeout_ms; gives up within about 50 ms of
// *cancel turning true (cancel may be NULL). Returns NMQ_OK with the
// stream in *sp (the caller owns it), or an error with the reason in err.
nmq_err conn_dial_tls(const char *host, int port, nng_tls_config *cfg, int timeout_ms,
    const _Atomic bool *cancel, nng_stream **sp, char *err, size_t errlen);

#endif // NMQ_CONN_DIAL_H
