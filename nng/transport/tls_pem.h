// Certificate and key files for our TLS engine: reads PEM files (bounded,
// checked), verifies that the key opens with its password and matches the
// certificate, and builds a tls_engine_direct from them. Every failure names
// the owner, the key and the file ("ssl: keyfile /etc/k.pem: wrong
// key_password") so that a bad configuration is refused with a message a
// user can act on.
//
// Threads: any thread that may block on file I/O (the main thread at
// start-up, --test and reload, a bridge's link thread); never a worker.
#ifndef NMQ_TLS_PEM_H
#define NMQ_TLS_PEM_H

#include <stdbool.h>
#include <stddef.h>

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>

#include "nng/core/nmq_err.h"

// The files of one TLS endpoint. Strings are borrowed for the call.
typedef struct tls_pem_spec {
	const char *name; // for messages, e.g. "ssl.default"
	const char *certfile; // required
	const char *keyfile; // required
	const char *cacertfile; // optional; required with verify_peer
	const char *key_password; // NULL: the key is not encrypted
	bool        verify_peer; // ask for (and verify) the peer's certificate
	bool        fail_if_no_peer_cert; // with verify_peer: refuse a peer without one
	const char *groups; // key exchange groups (tls_engine_params), NULL = default
	const char *ciphers; // cipher suites (tls_engine_params), NULL = default
} tls_pem_spec;

// Reads and checks the files of s without building anything. Returns
// NMQ_OK; NMQ_ENOENT if a file cannot be opened; NMQ_EINVAL for a missing
// setting, an unreadable, oversized or malformed file, a wrong password or
// a key that does not match the certificate; NMQ_ENOMEM. err says which.
nmq_err tls_pem_check(const tls_pem_spec *s, char *err, size_t errlen);

// The CA bundle a client falls back on when it verifies the server and
// names no cacertfile.
#define TLS_PEM_SYSTEM_CA "/etc/ssl/certs/ca-certificates.crt"

// Builds a client configuration (an outbound link, tls_engine_direct,
// for conn_dial_tls): the server's certificate is verified when
// s->verify_peer (against s->cacertfile, else the system bundle above),
// and the handshake fails if it does not verify; certfile and keyfile are
// optional (a client certificate, its key opened with key_password). The
// server name (SNI, and the name the certificate must carry) is the
// connection's (conn_tls_new_client). Returns NMQ_OK with *dp set
// (tls_engine_direct_free), or the errors of tls_pem_direct_build.
struct tls_engine_direct;
nmq_err tls_pem_client_build(
    const tls_pem_spec *s, struct tls_engine_direct **dp, char *err, size_t errlen);

// Builds a configuration on our engine (tls_engine_direct: the listeners,
// the REST API's HTTPS) from the files of s. mode is the side; a server
// verifies clients as s asks (verify_peer: OPTIONAL, plus
// fail_if_no_peer_cert: REQUIRED). Returns NMQ_OK with *dp set
// (tls_engine_direct_free), the errors of tls_pem_check, or NMQ_ETLS if
// the engine refused the material (NMQ_ENOMEM); err says which.
nmq_err tls_pem_direct_build(const tls_pem_spec *s, nng_tls_mode mode,
    struct tls_engine_direct **dp, char *err, size_t errlen);

#endif // NMQ_TLS_PEM_H
