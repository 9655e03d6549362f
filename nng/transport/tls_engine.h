// Our TLS engine for NNG: mbed TLS 2.28 plugged in through NNG's public
// engine interface (<nng/supplemental/tls/engine.h>), so that the broker
// knows who the peer is. NNG 1.5.2's own engine cannot tell a client that
// sent no certificate from one whose certificate failed verification, reads
// "verified" as true before the handshake, and has no peer-name option
// (docs/decisions/0001-tls-peer-identity.md).
//
// What it does differently from NNG's engine:
// - a server in OPTIONAL mode refuses, during the handshake, a client
//   certificate that is presented but does not verify (no certificate is
//   still accepted);
// - "verified" is false until the handshake is over;
// - the peer's common name and subject are recorded when the handshake
//   completes and can be read back with tls_engine_peer().
//
// Threads: NNG calls the engine with the connection's lock held, from its
// task threads or from whichever thread calls into the stream. Everything
// here is safe to call from any thread and never blocks on I/O.
#ifndef NMQ_TLS_ENGINE_H
#define NMQ_TLS_ENGINE_H

#include <stdbool.h>
#include <stddef.h>

#include <nng/nng.h>

// What the handshake established about the peer of one connection.
typedef struct tls_peer {
	bool handshake_done; // false: none of the fields below is meaningful
	bool cert_present; // the peer sent a certificate
	bool verified; // ...and it verified against the configured CA
	char cn[128]; // first CN of the peer certificate ("" if none or
	              // not printable ASCII/UTF-8 without controls)
	char subject[256]; // subject DN, e.g. "CN=client1, O=Acme"
} tls_peer;

// Registers the engine with NNG (once per process; later calls return the
// first result). TLS configurations allocated before the first call keep
// NNG's built-in engine. Returns 0, or an NNG error code (NNG_ENOTSUP if
// this NNG has no TLS, NNG_ENOMEM, NNG_ECRYPTO if the random generator
// cannot be seeded).
int tls_engine_init(void);

// Returns true once tls_engine_init has succeeded.
bool tls_engine_ready(void);

// Fills *p for a tls+tcp:// or wss:// stream whose TLS runs on this engine.
// Returns false, with *p zeroed, when the stream does not use this engine
// (plain tcp or ws, a configuration made before tls_engine_init) or is
// already closed. Never blocks; the stream stays owned by the caller.
bool tls_engine_peer(nng_stream *s, tls_peer *p);

#endif // NMQ_TLS_ENGINE_H
