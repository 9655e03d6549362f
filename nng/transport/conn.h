// One client connection: the receive buffer that cuts MQTT frames out of
// arbitrary chunks, and the outbound queue flushed with gather sends that
// survive short counts. One byte backend (conn_sock.c; the interface is
// in conn_int.h) and an optional WebSocket layer (conn_ws.c) over it:
// a TCP socket (every listener and the bridges' outbound links; TLS on it
// for tls+tcp, wss and a bridge's TLS, conn_tls.h) owned by one worker's
// event loop (workq.h): the worker reads (and decrypts) and dispatches
// frames when the socket is readable, and output is written (encrypted)
// by whichever thread flushes it; only a full socket arms EPOLLOUT on the
// owner.
//
// Threads and ownership:
// - At most one thread processes a connection's input at a time, in order,
//   and input is never read faster than it is processed.
// - The outbound queue is guarded by the connection mutex (conn_tx_lock).
//   Upper-layer locks are taken before it, never after.
// - Reference counted: the upper layer holds a reference while it points at
//   the connection (conn_hold/conn_release). The connection is destroyed on
//   a worker thread once every reference is gone.
// - ops.closed runs exactly once, on a worker, after the connection stopped
//   reading for good (peer close, error, conn_close or a protocol close).
#ifndef NMQ_CONN_H
#define NMQ_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>

#include "nng/core/msg.h"
#include "nng/transport/workq.h"

typedef struct nmq_conn nmq_conn;

typedef struct conn_ops {
	// One complete frame (fixed header included). Returns 0 to go on, or
	// -1 to stop reading (the callee has called conn_close or
	// conn_shutdown).
	int (*frame)(void *upper, const uint8_t *frame, size_t len);
	// The frames of one read have been handed over (frame), or reading
	// stopped in them. May be NULL.
	void (*frames_end)(void *upper);
	// The fixed header of the next frame has arrived (its body may not
	// have). Returns 0 to wait for the body, -1 to stop reading (the callee
	// has closed). May be NULL.
	int (*header)(void *upper, uint8_t first_byte, uint32_t size);
	// The fixed header announced a frame larger than the maximum packet
	// size; nothing was allocated. The callee decides what to send before
	// the connection is closed.
	void (*too_large)(void *upper, uint32_t size);
	// The connection has stopped reading for good.
	void (*closed)(void *upper);
	// Output drained below the low-water mark: the upper layer may queue
	// more. Called without the connection lock.
	void (*writable)(void *upper);
} conn_ops;

// The transport-wide settings shared by every connection.
typedef struct conn_env {
	workq   *wq;
	uint32_t max_packet_size; // largest inbound frame, fixed header included
	size_t   tx_high_water; // stop pulling queued messages above this
} conn_env;

// Wraps an accepted plain TCP socket (non-blocking, TCP_NODELAY set): the
// connection is served by one worker's event loop, and writes go straight
// to the socket. Returns NULL on allocation failure (the caller still owns
// fd). ref = 1 for the caller.
nmq_conn *conn_alloc_fd(int fd, const conn_env *env);
// Makes c a WebSocket connection (RFC 6455, MQTT over WebSocket): the
// first bytes must be an HTTP upgrade request for `path` (which must stay
// valid for the connection's life; NULL serves any path), answered by the
// connection itself; after it, input is unwrapped from binary frames before
// the MQTT frames are cut, every output batch goes out as one binary frame,
// pings are answered and a close frame is echoed. The upper layer sees only
// MQTT bytes. A rejected request gets its HTTP error and the connection
// closes (closed() is called as for any close). The time the handshake may
// take is bounded by whatever deadline the upper layer sets for CONNECT.
// Call before conn_start. Returns false on allocation failure.
bool conn_set_websocket(nmq_conn *c, const char *path);

// Sets the upper layer and starts reading. Call once.
void conn_start(nmq_conn *c, const conn_ops *ops, void *upper);

void conn_hold(nmq_conn *c);
void conn_release(nmq_conn *c);

// Closes at once: pending output is discarded.
void conn_close(nmq_conn *c);
// Stops reading, sends what is queued (e.g. a DISCONNECT), then closes
// with a lingering close: closed() comes as soon as reading has stopped,
// but the transport keeps reading and discarding the peer's input (a plain
// socket half-closed after the last byte) until the peer closes, 64 KiB
// were discarded or 2 s passed, so that a peer still sending reads the
// last packet instead of a reset. Any thread.
void conn_shutdown(nmq_conn *c);
bool conn_is_closing(nmq_conn *c);
// Stops (paused) or resumes reading from the client, for back-pressure: a
// pause takes effect after the batch being handled. Closing still works
// while paused. Any thread.
void conn_set_rx_paused(nmq_conn *c, bool paused);

// An opaque pointer the transport attaches (the listener that accepted the
// connection), for checks at CONNECT time such as TLS peer verification.
// on_done (may be NULL) is called with tag once, on a worker, when the
// connection has stopped reading for good (right after closed()), or when
// it is destroyed if it never started; tag itself stays readable until
// the connection is destroyed.
void  conn_set_tag(nmq_conn *c, void *tag, void (*on_done)(void *tag));
void *conn_tag(nmq_conn *c);

// Peer address as "a.b.c.d:port" or "[v6]:port".
const char *conn_peer(nmq_conn *c);
// The worker that owns the connection (a socket's: the one that reads and
// flushes it).
int conn_owner(const nmq_conn *c);

// Outbound queue; every call below needs conn_tx_lock held.
void conn_tx_lock(nmq_conn *c);
void conn_tx_unlock(nmq_conn *c);
// Returns room for n contiguous bytes to be committed with conn_tx_commit,
// or NULL (closing, a lingering close under way after the last packet of a
// conn_shutdown, or out of memory).
uint8_t *conn_tx_reserve(nmq_conn *c, size_t n);
void     conn_tx_commit(nmq_conn *c, size_t n);
// Queues len bytes at p inside msg by reference (msg is held until sent).
// Returns false if closing (or lingering, as above) or out of memory.
bool conn_tx_ref(nmq_conn *c, nmq_msg *msg, const uint8_t *p, size_t len);
// Bytes queued and not yet sent.
size_t conn_tx_queued(nmq_conn *c);
bool   conn_tx_full(nmq_conn *c);
// Starts a send if none is running.
void conn_tx_kick(nmq_conn *c);
// Like conn_tx_kick, but on a worker thread the send starts when the
// current job ends, so that everything queued by one batch goes out in one
// gather send. Lock not required.
void conn_tx_flush_later(nmq_conn *c);

// Connections allocated and not yet destroyed (for a drain at shutdown).
long conn_live_count(void);

// Bytes read from and written to client connections since start, as the
// backends see them (after TLS, WebSocket framing included). Lock-free.
uint64_t conn_bytes_received(void);
uint64_t conn_bytes_sent(void);

#endif // NMQ_CONN_H
