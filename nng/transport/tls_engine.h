// Our TLS engine: mbed TLS 2.28 configurations and handshake checks for
// every TLS endpoint of the broker, each of which runs mbed TLS over its
// own non-blocking sockets (the listeners' connections, conn_tls.c; the
// bridges' outbound links, conn_dial.c; the REST API's HTTPS). No TLS goes
// through NNG any more (decisions/0019, 0042); NNG's types and error codes
// (nng_tls_mode, NNG_EINVAL, ...) are kept in this interface.
//
// What it does beyond mbed TLS's defaults (NNG 1.5.2's engine, which it
// replaced, could not: docs/decisions/0001-tls-peer-identity.md):
// - a server in OPTIONAL mode refuses, during the handshake, a client
//   certificate that is presented but does not verify (no certificate is
//   still accepted);
// - the peer's common name and subject are recorded when the handshake
//   completes (tls_peer);
// - a client that dials an address checks it against the server
//   certificate's iPAddress names (tls_engine_client_name), and a failed
//   handshake gets a readable reason (tls_engine_handshake_why);
// - cheap defaults for a server: key exchange on X25519, secp256r1 or
//   secp384r1 (P-521 only when configured), AES-GCM first where the CPU
//   has AES instructions that mbed TLS uses and ChaCha20-Poly1305 first
//   where it has not, and resumption by session tickets (keys in memory
//   only, rotated every hour) and a bounded session-ID cache, so that a
//   returning client does no public-key operation
//   (docs/decisions/0008-tls-handshake-cost.md).
//
// Threads: everything here is safe to call from any thread and never
// blocks on I/O; an mbed TLS context is used by one thread at a time.
#ifndef NMQ_TLS_ENGINE_H
#define NMQ_TLS_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <mbedtls/ssl.h>
#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>

// What the handshake established about the peer of one connection.
typedef struct tls_peer {
	bool handshake_done; // false: none of the fields below is meaningful
	bool cert_present; // the peer sent a certificate
	bool verified; // ...and it verified against the configured CA
	char cn[128]; // first CN of the peer certificate ("" if none or
	              // not printable ASCII/UTF-8 without controls)
	char subject[256]; // subject DN, e.g. "CN=client1, O=Acme"
} tls_peer;

// Choices a configuration may make beyond certificates and keys. Each
// string is a list separated by ':', ',' or spaces; NULL or "" keeps the
// default. Names are case-insensitive.
typedef struct tls_engine_params {
	// Key exchange groups in preference order: x25519, secp256r1 (P-256,
	// prime256v1), secp384r1 (P-384), secp521r1 (P-521), brainpoolP256r1,
	// brainpoolP384r1, brainpoolP512r1, secp256k1.
	const char *groups;
	// Cipher suites in preference order, IANA names with '_' or '-'
	// (TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256).
	const char *ciphers;
} tls_engine_params;

// The defaults, as text for logs and documentation.
#define TLS_ENGINE_DEFAULT_GROUPS "x25519:secp256r1:secp384r1"

// Resumption: lifetime of a session ticket (its key lives twice as long)
// and of a session-ID cache entry, and the cache's size.
#define TLS_ENGINE_TICKET_LIFETIME_S 3600
#define TLS_ENGINE_CACHE_ENTRIES     1024

// Checks params without building anything. Returns 0, or NNG_EINVAL with
// err naming the first unknown or unusable name (e.g. `unknown group
// "p-999"`).
int tls_engine_params_check(const tls_engine_params *p, char *err, size_t errlen);

// True when the CPU has AES instructions (cpuid on x86, HWCAP on ARM) and
// this mbed TLS uses them, which is when AES-GCM comes first by default.
bool tls_engine_aes_fast(void);

// The cipher suite and group choices a default configuration makes, for
// a log line (static text).
const char *tls_engine_defaults_text(void);

// ---- Configurations
//
// A configuration has this engine's defaults (groups, cipher suites, TLS
// 1.2 only, the process-wide random generator; for a server, session
// tickets and a session cache) and its certificate checks.
// tls_pem_direct_build and tls_pem_client_build (tls_pem.h) build one
// from files.
//
// Threads: alloc, the setters and free run on one thread at startup; the
// mbed TLS configuration is read-only afterwards and may be used by any
// thread (mbed TLS locks the ticket keys and the cache).

struct mbedtls_ssl_config;
typedef struct tls_engine_direct tls_engine_direct;

// Allocates a configuration for mode with params (NULL: defaults).
// Returns 0, NNG_EINVAL for params that tls_engine_params_check refuses,
// NNG_ENOMEM or NNG_ECRYPTO.
int tls_engine_direct_alloc(tls_engine_direct **dp, nng_tls_mode mode, const tls_engine_params *p);

// Adds a PEM certificate chain and key (pass: the key's password or NULL).
// Returns 0, NNG_EINVAL (unparsable, or key and certificate do not match),
// NNG_EPERM (password missing or wrong) or NNG_ENOMEM.
int tls_engine_direct_own_cert(
    tls_engine_direct *d, const char *cert, const char *key, const char *pass);

// Adds PEM trust anchors. Returns 0 or NNG_EINVAL.
int tls_engine_direct_ca_chain(tls_engine_direct *d, const char *ca);

// Sets who must prove an identity. A server in OPTIONAL mode lets mbed TLS
// finish the handshake with a client certificate that failed: the caller
// checks mbedtls_ssl_get_verify_result when a certificate was sent.
// Returns 0 or NNG_EINVAL.
int tls_engine_direct_auth_mode(tls_engine_direct *d, nng_tls_auth_mode mode);

// The mbed TLS configuration for mbedtls_ssl_setup; d keeps owning it.
const struct mbedtls_ssl_config *tls_engine_direct_conf(const tls_engine_direct *d);

// d is reference counted: alloc gives one reference, hold takes one more
// (any thread; e.g. each TLS connection of a listener holds one, so that a
// reload may replace the listener's configuration), free drops one and
// frees d with the last (NULL is fine). No SSL context may use d then.
void tls_engine_direct_hold(tls_engine_direct *d);
void tls_engine_direct_free(tls_engine_direct *d);

// Runs the handshake of ssl (set up on d) as far as the socket allows,
// with the OPTIONAL-mode check of a client certificate (*checked starts
// false). Returns 0 when it is over (*peer filled),
// MBEDTLS_ERR_SSL_WANT_READ / _WANT_WRITE when it needs I/O,
// MBEDTLS_ERR_X509_CERT_VERIFY_FAILED for a client certificate that is
// presented and does not verify (an alert is sent), or mbed TLS's error.
int tls_engine_handshake(
    mbedtls_ssl_context *ssl, const tls_engine_direct *d, bool *checked, tls_peer *peer);
// Fills *peer from a finished handshake.
void tls_engine_record_peer(const mbedtls_ssl_context *ssl, tls_peer *peer);

// What a client expects the server's certificate to name, when the name
// it dialled is an address: the certificate must carry it as an iPAddress
// subjectAltName (mbed TLS 2.28 checks DNS names and the CN only).
typedef struct tls_engine_ip {
	uint8_t a[16];
	size_t  len; // 4 or 16; 0: the name is a host name, mbed TLS checks it
} tls_engine_ip;

// Sets, on a client's ssl (set up, handshake not started), the server
// name: a host name is sent as SNI and checked by mbed TLS against the
// certificate's DNS names (else its CN); an address (IPv4, IPv6, "[v6]")
// is not sent (RFC 6066 3) and is checked against the certificate's
// iPAddress names through *ip, which must live as long as ssl. NULL: no
// name. The check only refuses when the configuration verifies the
// server. Returns 0 or NNG_ENOMEM.
int tls_engine_client_name(mbedtls_ssl_context *ssl, const char *name, tls_engine_ip *ip);

// Writes into why a readable reason for a handshake of ssl that failed
// with mbed TLS error rv: "certificate verify failed: <mbed TLS's
// verification flags, ';'-separated>" (naming the iPAddress check when ip
// says the name was an address), "the peer refused the handshake: alert
// 40 (handshake failure)", "peer closed", or mbed TLS's text.
void tls_engine_handshake_why(
    const mbedtls_ssl_context *ssl, const tls_engine_ip *ip, int rv, char *why, size_t len);

#endif // NMQ_TLS_ENGINE_H
