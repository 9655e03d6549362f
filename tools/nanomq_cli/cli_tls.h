// TLS for nanomq_cli's connections: mbed TLS 2.28 as a client over a
// non-blocking socket the caller owns. One cli_tls (the CA, our own
// certificate, verification, the session kept for resumption) is shared
// by every connection of the program; each connection has a cli_tls_conn.
//
// Threading: cli_tls_new/free run on the main thread before/after the
// loops; a cli_tls is then shared read-only by every loop thread, except
// its random generator and resumption session, which have a lock of their
// own. A cli_tls_conn belongs to the thread of its connection.
#ifndef NMQ_CLIENT_CLI_TLS_H
#define NMQ_CLIENT_CLI_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

typedef struct cli_tls_opts {
	const char *cafile; // PEM CAs; NULL: the system bundle, if any
	const char *certfile; // our certificate (mutual TLS), or NULL
	const char *keyfile; // its key, required with certfile
	const char *keypass; // the key's password, or NULL
	const char *server_name; // checked against the certificate, sent as SNI
	bool        insecure; // do not verify the server's certificate
	// Keep the session of the last full handshake and offer it (ticket or
	// session id) on later connections, so they resume.
	bool resume;
} cli_tls_opts;

typedef struct cli_tls      cli_tls;
typedef struct cli_tls_conn cli_tls_conn;

// Loads the files and prepares the client configuration. Returns 0 with
// *tp set, or -1 with a message naming the file in err.
int cli_tls_new(cli_tls **tp, const cli_tls_opts *o, char *err, size_t errlen);

// Frees t; no connection may use it any more.
void cli_tls_free(cli_tls *t);

// Handshakes so far: full, and resumed with a kept session (any thread).
void cli_tls_counts(cli_tls *t, uint64_t *full, uint64_t *resumed);

// Starts TLS on a connected socket fd. Returns 0 with *cp set, or -1 if
// memory is short.
int cli_tls_conn_new(cli_tls_conn **cp, cli_tls *t, int fd);

// Frees c (sends nothing; the caller closes the socket).
void cli_tls_conn_free(cli_tls_conn *c);

// Return values of cli_tls_handshake.
enum { CLI_TLS_DONE = 0, CLI_TLS_WANT_READ = 1, CLI_TLS_WANT_WRITE = 2, CLI_TLS_FAILED = -1 };

// Advances the handshake as far as the socket allows. Returns one of the
// values above; on CLI_TLS_FAILED, why holds the reason.
int cli_tls_handshake(cli_tls_conn *c, char *why, size_t whylen);

// Encrypts and sends up to len bytes. Returns the count taken (> 0), or -1
// with errno EAGAIN (call again later with at least the same bytes: mbed
// TLS keeps a record half sent) or EIO (why says more).
ssize_t cli_tls_send(cli_tls_conn *c, const void *buf, size_t len, char *why, size_t whylen);

// Receives and decrypts up to len bytes. Returns the count (> 0), 0 when
// the server closed, or -1 with errno EAGAIN or EIO (why says more).
ssize_t cli_tls_recv(cli_tls_conn *c, void *buf, size_t len, char *why, size_t whylen);

// With resume: makes one full handshake to addr on a blocking socket
// (at most timeout_ms per step) and keeps its session, so that every
// connection of the run resumes; it is not counted by cli_tls_counts.
// Returns 0, or -1 with a message in err. Main thread, before the loops.
int cli_tls_prime(cli_tls *t, const struct sockaddr *addr, socklen_t addrlen, int timeout_ms,
    char *err, size_t errlen);

// Bytes already decrypted and waiting (no socket readiness will announce
// them).
size_t cli_tls_pending(cli_tls_conn *c);

// Describes the established session ("TLSv1.2 TLS-ECDHE-...-SHA256,
// resumed") into buf; "" before the handshake is over.
void cli_tls_describe(cli_tls_conn *c, char *buf, size_t len);

// Queues a close_notify alert, best effort.
void cli_tls_close_notify(cli_tls_conn *c);

#endif // NMQ_CLIENT_CLI_TLS_H
