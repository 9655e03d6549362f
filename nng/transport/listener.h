// Stream listeners: tcp://, tls+tcp://, ws:// and wss://. A listener
// accepts connections and hands each to the upper layer, tagged with the
// listener (conn_tag) so that the CONNECT handler can ask whether a TLS
// peer is acceptable.
//
// Every kind listens on our own socket in a worker's epoll set. TLS is
// mbed TLS with our configuration (tls_engine.h, files read by tls_pem.h)
// on our own loops: handshakes on the handshake thread (tls_hs.h), then
// the connection on a worker (conn_tls.h). WebSocket is our own
// (conn_set_websocket): ws:// on plain sockets, wss:// on TLS ones. Any
// Host header is accepted; the request path must be the URL's path. See
// docs/decisions/0001-tls-peer-identity.md, 0002-websocket.md and
// 0019-tls-on-own-event-loops.md. Files: listener.c (common),
// listener_tcp.c (the sockets), listener_tls.c (TLS), tls_pem.c
// (certificates).
//
// Threads: listener_start/stop/reload_tls are called from the main thread
// (stop waits for the accepting worker and the handshake thread). The
// accept callback runs on a worker (tcp, ws) or on the handshake thread
// (tls+tcp, wss); `accepted` must not block. listener_conn_authorized and
// listener_conn_peer may be called from any thread.
#ifndef NMQ_LISTENER_H
#define NMQ_LISTENER_H

#include "nng/core/nmq_err.h"
#include "nng/transport/conn.h"
#include "nng/transport/conn_tls.h"
#include "nng/transport/tls_engine.h"

typedef struct nmq_listener nmq_listener;

// Called for every accepted connection (ref owned by the callee).
typedef void (*listener_accept_fn)(void *arg, nmq_conn *c);

// What a listener serves. The url scheme selects the transport:
// "tcp://h:p", "tls+tcp://h:p", "ws://h:p/path", "wss://h:p/path".
typedef struct listener_opts {
	const char *name; // for logs and errors, e.g. "tcp", "ssl.default_1"
	const char *url;
	// TLS (tls+tcp and wss). certfile and keyfile are required; cacertfile
	// is required with verify_peer.
	const char *certfile;
	const char *keyfile;
	const char *cacertfile;
	const char *key_password;
	// false: no client certificate is asked for. true: a certificate the
	// client sends must verify against cacertfile, and with
	// fail_if_no_peer_cert a client without one is refused too.
	bool verify_peer;
	bool fail_if_no_peer_cert;
	// Key exchange groups and cipher suites in preference order (see
	// tls_engine_params); NULL = the engine's defaults.
	const char *groups;
	const char *ciphers;
	// tls+tcp and wss: longest time a TLS handshake may take, in ms; 0 =
	// the default (tls_hs.h).
	uint32_t handshake_timeout_ms;
	// Connections open at once (accepted and not yet destroyed); beyond
	// it, listener_conn_over_limit() says so at CONNECT. 0 = no limit.
	uint32_t max_connections;
} listener_opts;

// Starts listening. Returns NMQ_OK, or an error with a message in err that
// names the listener and, for a certificate problem, the file (e.g. "ssl:
// keyfile /etc/k.pem: wrong key_password"): NMQ_EINVAL for a bad URL or
// setting, NMQ_EEXIST for an address in use, NMQ_ENOENT for a missing
// file, NMQ_ETLS or NMQ_ENOTSUP for TLS, NMQ_ENOMEM, NMQ_EIO.
nmq_err listener_start(nmq_listener **lp, const listener_opts *opts, const conn_env *env,
    listener_accept_fn fn, void *arg, char *err, size_t errlen);

// Returns the bound TCP port (useful with port 0), or 0 if unknown.
int listener_port(nmq_listener *l);

// Returns the listener's name as given in listener_opts.
const char *listener_name(nmq_listener *l);
// Connections open on l now (accepted and not yet destroyed). Lock-free;
// any thread (the REST API's metrics).
uint32_t listener_conn_count(nmq_listener *l);

// Stops accepting and releases the listener's sockets; existing
// connections live on (their tag stays valid until the process exits).
void listener_stop(nmq_listener *l);

// Checks that the TLS files of opts can be read and parsed, that the key
// matches the certificate and opens with key_password, without opening any
// socket (for `--test` and for validating a reload first). Returns NMQ_OK,
// or an error as in tls_pem_check with a message naming the file in err.
// Does nothing for tcp:// and ws:// URLs.
nmq_err listener_tls_check(const listener_opts *opts, char *err, size_t errlen);

// Re-reads the certificate, key and CA files (and verify_peer /
// fail_if_no_peer_cert) of a tls+tcp or wss listener for connections
// accepted from now on; connections already open keep their session. The
// listener's URL is not changed (a new bind needs a restart). Returns
// NMQ_OK; on error the listener keeps its previous configuration and err
// says why: NMQ_EINVAL for a listener without TLS, a file error as in
// listener_start, NMQ_ECLOSED for a stopped listener, or NMQ_ETLS if mbed
// TLS refused the material.
nmq_err listener_reload_tls(nmq_listener *l, const listener_opts *opts, char *err, size_t errlen);

// Decides, at CONNECT time, whether the TLS peer of c may proceed. Returns
// true for a connection that did not come through a TLS listener, or
// whose listener does not verify peers; with verify_peer, returns false if
// the client presented a certificate that did not verify, or presented
// none while fail_if_no_peer_cert is set, or if the peer cannot be
// determined. When it returns true and the peer's certificate verified,
// copies its common name to cn (if cn is not NULL and the name fits in
// cnlen bytes with its NUL); otherwise cn is set to "". Never blocks.
bool listener_conn_authorized(nmq_conn *c, char *cn, size_t cnlen);

// True when c's listener has more connections open than its
// max_connections allows (c included), so that the CONNECT is refused.
bool listener_conn_over_limit(nmq_conn *c);

// Fills *p with what the TLS handshake established about c's peer (for
// %C / %d in HTTP auth, and logs). Returns false, with *p zeroed, for a
// connection without TLS from our engine. Never blocks.
bool listener_conn_peer(nmq_conn *c, tls_peer *p);
// The same record without copying it (its handshake's record, valid while
// c is held). NULL for a connection without TLS. Never blocks.
const tls_peer *listener_conn_peer_ref(nmq_conn *c);

#endif // NMQ_LISTENER_H
