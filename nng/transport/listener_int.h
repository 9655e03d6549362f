// What the listener files share: the listener struct and the hooks between
// the common code (listener.c), the socket listener of every kind
// (listener_tcp.c) and the TLS part of tls+tcp:// and wss://
// (listener_tls.c: configuration, handshakes on the handshake thread). Not
// for use outside nng/transport/listener*.c.
#ifndef NMQ_LISTENER_INT_H
#define NMQ_LISTENER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "nng/core/nmq_err.h"
#include "nng/transport/listener.h"
#include "nng/transport/tls_hs.h"
#include "nng/transport/tls_pem.h"
#include "nng/transport/workq.h"

// Pause before accepting again after an accept error (out of descriptors).
#define ACCEPT_BACKOFF_MS 100

enum listener_kind {
	KIND_TCP,
	KIND_TLS,
	KIND_WS,
	KIND_WSS,
};

// True for the kinds without TLS.
#define LISTENER_KIND_PLAIN(k) ((k) == KIND_TCP || (k) == KIND_WS)

struct nmq_listener {
	// Every kind (listener_tcp.c): our own socket in worker `owner`'s
	// epoll set.
	int      lfd;
	int      owner;
	int      port;
	workq_io io;
	bool     watching; // lfd is in the epoll set (mtx)
	// The accept backoff: a one-shot timer in the same epoll set, so that
	// a TCP-only broker never starts NNG (and its threads).
	int                tfd;
	workq_io           tio;
	const conn_env    *env;
	listener_accept_fn fn;
	void              *arg;
	enum listener_kind kind;
	char               name[64];
	char               url[256];
	char               ws_path[128]; // ws/wss: the path served

	pthread_mutex_t mtx;
	bool            stopping; // guarded by mtx
	bool            sleeping; // an accept backoff is running (mtx)
	// tls+tcp:// and wss:// (listener_tls.c): the configuration new
	// handshakes use (mtx; each handshake holds its own reference) and
	// their timeout.
	tls_engine_direct *tls;
	uint32_t           hs_timeout_ms;
	atomic_bool        verify_peer;
	atomic_uint        max_conns; // 0 = no limit
	atomic_uint        n_conns; // connections accepted and not destroyed
	atomic_bool        fail_if_no_peer_cert;

	struct nmq_listener *retired_next;
};

// listener.c: hands a new connection of l to the upper layer (WebSocket on
// for ws and wss, tagged with l and counted). A connection that cannot be
// set up is released (closed). Any thread; does not block.
void listener_adopt(nmq_listener *l, nmq_conn *c);

// listener.c: splits "scheme://host:port[/path]" (host may be "[v6]" or
// empty) into host, port and path ("/" when none; path may be NULL).
// Returns NMQ_OK or NMQ_EINVAL.
nmq_err listener_split_url(
    const char *url, char *host, size_t hlen, char *port, size_t plen, char *path, size_t pathlen);

// listener_tcp.c: opens, binds and watches the socket of a listener
// (l->url, l->env set). Returns NMQ_OK, NMQ_EINVAL for a bad address,
// NMQ_EEXIST if it is in use, or another error, with a message in err; on
// error the caller releases l (listener_tcp_release).
nmq_err listener_tcp_listen(nmq_listener *l, char *err, size_t errlen);
// listener_tcp.c: stops watching the socket (waits for the owner worker,
// so that no accept handler runs afterwards). Main thread.
void listener_tcp_stop(nmq_listener *l);
// listener_tcp.c: closes the sockets. Call with l->mtx held or before l
// is shared.
void listener_tcp_release(nmq_listener *l);

// listener_tls.c: builds the TLS configuration of a tls+tcp or wss
// listener from the files of o and starts the handshake thread. Returns
// NMQ_OK or an error with a message in err (tls_pem.h's for the files);
// on error the caller releases l (listener_tls_release).
nmq_err listener_tls_setup(nmq_listener *l, const listener_opts *o, char *err, size_t errlen);
// listener_tls.c: a socket accepted by l (the owner worker): its handshake
// goes to the handshake thread, and the connection to listener_adopt.
void listener_tls_accepted(nmq_listener *l, int fd);
// listener_tls.c: drops the handshakes still running (after
// listener_tcp_stop). Main thread.
void listener_tls_stop(nmq_listener *l);
// listener_tls.c: releases the TLS configuration. Call with l->mtx held
// or before l is shared, after listener_tls_stop.
void listener_tls_release(nmq_listener *l);
// listener_tls.c: listener_reload_tls for a TLS listener.
nmq_err listener_tls_reload(nmq_listener *l, const listener_opts *o, char *err, size_t errlen);
// listener_tls.c: the tls_pem_spec of o (name of l or o).
void listener_tls_spec(const listener_opts *o, tls_pem_spec *s);

#endif // NMQ_LISTENER_INT_H
