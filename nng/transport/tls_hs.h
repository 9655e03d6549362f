// The TLS handshake thread ("nmq:tls-hs"): runs the handshakes of accepted
// tls+tcp:// and wss:// sockets on its own epoll loop, off the workers, so
// that a full handshake's private-key operation (2-3 ms of CPU with mbed
// TLS 2.28) never delays the clients a worker serves. A socket whose
// handshake is over is handed, with its established mbed TLS state, to
// the submitter's callback, which wraps it into a connection
// (conn_alloc_tls) for a worker's loop. docs/decisions/0019.
//
// Bounds: a handshake not over within its timeout is dropped (the socket
// closed), and at most TLS_HS_MAX run at once (further sockets are closed
// at once and counted), so that a client that never finishes costs one
// slot for a bounded time and nothing else.
//
// Threads: tls_hs_submit from any thread (the accepting worker); the
// callback runs on the handshake thread; tls_hs_cancel from the main
// thread, never from the callback.
#ifndef NMQ_TLS_HS_H
#define NMQ_TLS_HS_H

#include <stdint.h>

#include "nng/core/nmq_err.h"
#include "nng/transport/conn_tls.h"

#define TLS_HS_MAX            4096 // handshakes running at once
#define TLS_HS_TIMEOUT_MS_DEF 10000 // default handshake timeout

// Receives a socket whose handshake is over; fd and t are the callee's.
typedef void (*tls_hs_done_fn)(void *arg, int fd, conn_tls *t);

// Starts the handshake thread (once; later calls return the first
// result). Returns NMQ_OK or the error of creating it.
nmq_err tls_hs_start(void);

// Runs the handshake of accepted socket fd on cfg, with a timeout (0: the
// default). fd and one reference on cfg pass to the thread, which closes
// fd on failure or timeout and calls done(arg, fd, t) on success. Never
// blocks on I/O.
void tls_hs_submit(
    int fd, tls_engine_direct *cfg, uint32_t timeout_ms, tls_hs_done_fn done, void *arg);

// Drops every handshake submitted with arg; once it returns, done is never
// called with arg again. Blocks until the thread has done so.
void tls_hs_cancel(void *arg);

// Handshakes that failed (including timeouts), that timed out, and
// sockets refused because TLS_HS_MAX were running. Lock-free.
uint64_t tls_hs_failed(void);
uint64_t tls_hs_timed_out(void);
uint64_t tls_hs_refused(void);

#endif // NMQ_TLS_HS_H
