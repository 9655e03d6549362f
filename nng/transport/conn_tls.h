// TLS on our own event loops: mbed TLS over a plain non-blocking socket
// (docs/decisions/0019-tls-on-own-event-loops.md). A conn_tls is the TLS
// state of one accepted socket. The handshake runs first, on the
// handshake thread (tls_hs.h), with no nmq_conn yet; once it is over,
// conn_alloc_tls hands socket and state to a plain-socket connection
// (conn_sock.c) on a worker's epoll loop, which then reads decrypted and
// writes encrypted bytes itself (conn_int.h has the functions it uses).
// An outbound connection (the bridge) is the same from the client side:
// conn_dial_tls (conn_dial.h) connects, runs the handshake on the calling
// thread, and the caller wraps the result with conn_alloc_tls.
//
// Threads: a conn_tls is used by one thread at a time: the handshake
// thread (or the dialling thread) until conn_alloc_tls, then under the
// connection's mutex.
#ifndef NMQ_CONN_TLS_H
#define NMQ_CONN_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nng/transport/conn.h"
#include "nng/transport/tls_engine.h"

typedef struct conn_tls conn_tls;

// Sets up the TLS state of accepted socket fd (non-blocking) on cfg (a
// reference is taken). Returns NULL when out of memory; fd stays the
// caller's either way.
conn_tls *conn_tls_new(int fd, tls_engine_direct *cfg);
// The same for a client's socket, connected to server_name (a host
// name, sent as SNI, or an address; NULL: none), which the server's
// certificate must name when cfg verifies the server
// (tls_engine_client_name). Returns NULL when out of memory.
conn_tls *conn_tls_new_client(int fd, tls_engine_direct *cfg, const char *server_name);
// Frees the state (not the socket).
void conn_tls_free(conn_tls *t);

// Handshake results.
#define CONN_TLS_DONE       0
#define CONN_TLS_WANT_READ  1
#define CONN_TLS_WANT_WRITE 2
#define CONN_TLS_FAILED     3

// Runs the handshake as far as the socket allows, with buf (bufsz bytes,
// at least CONN_TLS_RA_MIN) as read-ahead room for this call. Returns a
// CONN_TLS_* result; on CONN_TLS_FAILED, why (whylen bytes) says why.
#define CONN_TLS_RA_MIN (17 * 1024)
int conn_tls_handshake(conn_tls *t, uint8_t *buf, size_t bufsz, char *why, size_t whylen);

// Wraps a socket whose handshake is over: the connection takes fd and t.
// Returns NULL when out of memory (the caller still owns both).
nmq_conn *conn_alloc_tls(int fd, conn_tls *t, const conn_env *env);

// Copies what c's handshake established about the peer. Returns false,
// with *p zeroed, for a connection that is not TLS on our own loops.
bool conn_tls_peer(nmq_conn *c, tls_peer *p);
// The record itself, without a copy (valid while c is held), or NULL for a
// connection that is not TLS on our own loops.
const tls_peer *conn_tls_peer_ref(nmq_conn *c);

#endif // NMQ_CONN_TLS_H
