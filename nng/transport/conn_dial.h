// Outbound connections, for the broker acting as a client of another
// broker (the MQTT bridge). The connect, and for TLS the handshake, runs
// on the calling thread with a deadline; once connected, the socket
// (conn_alloc_fd) or the socket with its TLS state (conn_alloc_tls) is
// served by the workers' event loops like any accepted connection.
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

#include "nng/core/nmq_err.h"
#include "nng/transport/conn_tls.h"

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
// unreachable, or a local failure such as out of descriptors: no server
// process took the connection).
nmq_err conn_dial_tcp(const char *host, int port, const conn_dial_opts *o, int timeout_ms, int *fdp,
    char *err, size_t errlen);

// Connects over TLS: conn_dial_tcp with o, then the client handshake on
// cfg (a client configuration, tls_pem_client_build), sending host as SNI
// and checking it against the server's certificate when cfg verifies the
// server; all within timeout_ms, and given up within 100 ms of *o->cancel
// turning true. Runs on the calling thread (the handshake's public-key
// operations included). Returns NMQ_OK with the socket in *fdp and its
// established TLS state in *tp (the caller owns both: conn_alloc_tls), or
// an error with the reason in err: those of conn_dial_tcp, NMQ_ETLS for a
// failed handshake ("certificate verify failed: ...", "the peer refused
// the handshake: alert 40 (handshake failure)"; also logged at warn),
// NMQ_ETIMEDOUT, NMQ_ECLOSED (cancelled), NMQ_ENOMEM. NMQ_EIO comes only
// from the TCP connect (or a local failure to wait on the socket): the
// handshake had not started.
nmq_err conn_dial_tls(const char *host, int port, const conn_dial_opts *o, tls_engine_direct *cfg,
    int timeout_ms, int *fdp, conn_tls **tp, char *err, size_t errlen);

#endif // NMQ_CONN_DIAL_H
