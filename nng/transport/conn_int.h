// What the connection files share (not for use outside nng/transport/conn*.c):
// the connection struct, the byte backend interface and the layer
// interface, the send buffer (conn_txbuf.c) and its block pool
// (conn_pool.c).
//
// A connection is the common object of conn.c (reference count, frame
// cutting, the outbound queue, close and drain) over one byte backend:
// - conn_sock.c: a plain TCP socket on its owner worker's epoll loop,
//   optionally carrying TLS (conn_tls.c: mbed TLS on the same loop).
// A layer may sit between the backend's bytes and the MQTT frames:
// - conn_ws.c: WebSocket (RFC 6455), over either backend.
// The common code calls the backend through c->be (one indirect call per
// read or write batch) and the layer, when there is one, through c->layer
// (NULL for plain MQTT: the hot path only tests the pointer).
#ifndef NMQ_CONN_INT_H
#define NMQ_CONN_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sys/types.h>
#include <sys/uio.h>

#include "nng/core/nmq_mutex.h"
#include "nng/transport/conn.h"
#include "nng/transport/conn_tls.h"

#define RX_INIT     256
#define RX_GROW_MAX (64 * 1024)

// ---------------------------------------------------------------------------
// Block pool (conn_pool.c): a per-thread pool of the first output blocks of
// a connection (the arena and segment array a first write allocates), so
// that a plain socket can give its blocks back after every complete write
// (an idle connection then holds none) without a malloc per flush.
#define POOL_ARENA 256
#define POOL_SEGS  4

#define POOL_MAX 256 // blocks kept per list and thread; more are freed

typedef struct pool_blk {
	struct pool_blk *next;
} pool_blk;

// The calling thread's lists (conn_pool.c).
extern __thread pool_blk *conn_pool_arenas;
extern __thread pool_blk *conn_pool_segs;
extern __thread int       conn_pool_n_arenas;
extern __thread int       conn_pool_n_segs;
extern __thread bool      conn_pool_registered;

// Returns a new block (the pool is empty); NULL when out of memory.
void *conn_pool_new(bool segs);
// Registers the thread's pool for freeing at exit, then gives p back.
void conn_pool_put_slow(void *p, bool segs);

// Returns a block of the calling thread's pool (POOL_ARENA bytes, or
// POOL_SEGS segments when segs), or a new one; NULL when out of memory.
static inline void *conn_pool_get(bool segs)
{
	pool_blk **head = segs ? &conn_pool_segs : &conn_pool_arenas;
	pool_blk  *b    = *head;
	if (b == NULL) {
		return conn_pool_new(segs);
	}
	*head = b->next;
	if (segs) {
		conn_pool_n_segs--;
	} else {
		conn_pool_n_arenas--;
	}
	return b;
}

// Gives a block back to the calling thread's pool (freed when the pool is
// full, and when the thread exits). p may be NULL.
static inline void conn_pool_put(void *p, bool segs)
{
	int *n = segs ? &conn_pool_n_segs : &conn_pool_n_arenas;
	if (p == NULL) {
		return;
	}
	if (!conn_pool_registered || *n >= POOL_MAX) {
		conn_pool_put_slow(p, segs);
		return;
	}
	pool_blk **head = segs ? &conn_pool_segs : &conn_pool_arenas;
	pool_blk  *b    = p;
	b->next         = *head;
	*head           = b;
	(*n)++;
}

// ---------------------------------------------------------------------------
// Send buffer (conn_txbuf.c). Guarded by the connection's mutex.

// One piece of queued output: either bytes in the arena (ref == NULL, at
// offset off; p is NULL, or TXBUF_PINNED when later bytes must not extend
// the segment, e.g. a layer's header still to be written) or bytes inside
// a shared message (ref held, at p).
typedef struct tx_seg {
	nmq_msg       *ref;
	const uint8_t *p;
	size_t         off;
	size_t         len;
} tx_seg;

typedef struct txbuf {
	uint8_t *arena;
	tx_seg  *segs;
	size_t   bytes;
	uint32_t arena_len;
	uint32_t arena_cap;
	uint32_t nsegs;
	uint32_t seg_cap;
} txbuf;

extern const uint8_t txbuf_pin_mark;
#define TXBUF_PINNED (&txbuf_pin_mark)

// Returns n writable bytes at the end of the arena (valid until the next
// call), or NULL when out of memory.
uint8_t               *txbuf_reserve_slow(txbuf *b, size_t n);
static inline uint8_t *txbuf_reserve(txbuf *b, size_t n)
{
	if (b->arena_len + n <= b->arena_cap) {
		return b->arena + b->arena_len;
	}
	if (b->arena_cap == 0 && n <= POOL_ARENA) {
		// The first block, once per write batch of a plain socket.
		uint8_t *a = conn_pool_get(false);
		if (a == NULL) {
			return NULL;
		}
		b->arena     = a;
		b->arena_cap = POOL_ARENA;
		nmq_mem_buffers_add(POOL_ARENA);
		return a;
	}
	return txbuf_reserve_slow(b, n);
}
// Makes room for one more segment; false when out of memory.
bool               txbuf_seg_grow(txbuf *b);
static inline bool txbuf_seg_room(txbuf *b)
{
	if (b->nsegs < b->seg_cap) {
		return true;
	}
	if (b->seg_cap == 0) {
		// The first block, once per write batch of a plain socket.
		b->segs = conn_pool_get(true);
		if (b->segs == NULL) {
			return false;
		}
		b->seg_cap = POOL_SEGS;
		nmq_mem_buffers_add((int64_t)(POOL_SEGS * sizeof(tx_seg)));
		return true;
	}
	return txbuf_seg_grow(b);
}
// Appends a segment for the next n arena bytes (reserved, with seg room
// checked by the caller) and counts them.
static inline void txbuf_arena_seg_add(txbuf *b, size_t n)
{
	tx_seg *s = &b->segs[b->nsegs++];
	s->ref    = NULL;
	s->p      = NULL;
	s->off    = b->arena_len;
	s->len    = n;
	b->arena_len += n;
	b->bytes += n;
}
// Commits n bytes written at txbuf_reserve: extends the last arena segment
// when contiguous (and not TXBUF_PINNED), else adds one. Returns false when
// out of memory.
static inline bool txbuf_commit(txbuf *b, size_t n)
{
	if (n == 0) {
		return true;
	}
	tx_seg *last = b->nsegs > 0 ? &b->segs[b->nsegs - 1] : NULL;
	if (last != NULL && last->ref == NULL && last->p == NULL
	    && last->off + last->len == b->arena_len) {
		last->len += n;
		b->arena_len += n;
		b->bytes += n;
		return true;
	}
	if (!txbuf_seg_room(b)) {
		return false;
	}
	txbuf_arena_seg_add(b, n);
	return true;
}
// Queues len bytes at p inside msg by reference (held until sent or
// reset). Returns false when out of memory.
static inline bool txbuf_ref(txbuf *b, nmq_msg *msg, const uint8_t *p, size_t len)
{
	if (len == 0) {
		return true;
	}
	if (!txbuf_seg_room(b)) {
		return false;
	}
	nmq_msg_hold(msg);
	tx_seg *s = &b->segs[b->nsegs++];
	s->ref    = msg;
	s->p      = p;
	s->off    = 0;
	s->len    = len;
	b->bytes += len;
	return true;
}
// Releases every message reference and empties the buffer; large blocks
// are freed so that an idle connection stays small.
void txbuf_reset(txbuf *b);
// Returns the blocks of an empty buffer: small ones to the pool.
void txbuf_release_blocks(txbuf *b);
// txbuf_reset and txbuf_release_blocks.
void txbuf_fini(txbuf *b);

// ---------------------------------------------------------------------------
// Byte backends. Every function runs with the connection mutex held unless
// said otherwise.
typedef struct conn_backend {
	// Starts reading (conn_start).
	void (*start)(nmq_conn *c);
	// Applies c->rx_paused (already changed by the caller).
	void (*set_paused)(nmq_conn *c, bool paused);
	// Writes, or starts writing, c->fill (not empty, no write running).
	// Returns true when everything went out at once, so that the upper
	// layer may queue more (a writable() upcall).
	bool (*write)(nmq_conn *c);
	// Ends the byte stream both ways: the receive path sees the end and
	// finishes (conn_rx_finish). Called once (c->closing just set).
	void (*close)(nmq_conn *c);
	// The receive path has ended (conn_rx_finish, c->reading_done set).
	void (*rx_done)(nmq_conn *c);
	// A drain's output is all out (conn_drain_done_locked): half-close and
	// discard input for a bounded time, so that the peer reads the last
	// packet instead of a reset, then close. Returns false if it cannot
	// (the caller closes at once). NULL: no lingering close.
	bool (*linger)(nmq_conn *c);
	// Frees the backend's resources. Without the mutex, on a worker (the
	// owner, if any), after the last reference.
	void (*fini)(nmq_conn *c);
} conn_backend;

extern const conn_backend conn_sock_backend;

// ---------------------------------------------------------------------------
// Layers between the backend's bytes and the MQTT frames.
typedef struct conn_layer conn_layer;
typedef struct conn_layer_ops {
	// New bytes are in c->rx: decode them and dispatch the MQTT frames
	// (conn_dispatch_frames), size the buffer (conn_rx_size). Receive
	// path, without the mutex. Returns false if reading must stop.
	bool (*rx)(nmq_conn *c);
	// The upper layer is about to queue bytes in c->fill. Returns false
	// when out of memory.
	bool (*tx_begin)(nmq_conn *c);
	// A write is about to take c->fill: finish what tx_begin started.
	void (*tx_seal)(nmq_conn *c);
	// conn_shutdown: queues the layer's goodbye behind the output. Returns
	// true if something was queued (the caller flushes it).
	bool (*shutdown)(nmq_conn *c);
	// Frees the layer (conn destruction, without the mutex).
	void (*fini)(nmq_conn *c);
} conn_layer_ops;

struct conn_layer {
	const conn_layer_ops *ops;
};

// ---------------------------------------------------------------------------
// The connection.

struct nmq_conn {
	const conn_backend *be;
	conn_layer         *layer; // NULL for plain MQTT
	// The backend's own state: conn_sock.c's TLS state and lingering
	// close; NULL when none.
	void           *be_state;
	const conn_env *env;
	const conn_ops *ops;
	void           *upper;
	workq_io        io; // plain socket: readiness handler
	workq_job       job; // the receive path's job
	// A flush requested off the workers; once the last reference is gone
	// (no flush can be queued then: a queued flush holds one), the
	// destruction job.
	workq_job aux_job;
	// Receive path: touched only by the thread processing input, one at a
	// time for a connection.
	uint8_t *rx;
	uint32_t rx_len;
	uint32_t rx_cap;

	int      fd; // plain socket, else -1
	uint32_t ep_events; // events registered (mtx)
	// The worker that runs this connection's jobs (the socket's owner), or
	// -1 for any worker.
	int        owner;
	int        upcalls; // writable() calls running (mtx)
	nmq_mutex  mtx;
	atomic_int refs;

	// Guarded by mtx.
	uint32_t send_seg;
	uint32_t send_off;
	uint32_t tx_sending; // bytes taken from fill by a running backend send
	bool     ep_added; // fd is in the epoll set
	bool     rx_paused; // the upper layer asked to stop reading for now
	bool     closing;
	bool     draining;
	bool     reading_done;
	bool     closed_notified;
	bool     tx_busy;
	bool     flush_pending;
	bool     peer_heap; // set once at allocation
	bool     lingering; // half-closed, discarding input (backend linger)
	// Receive path: the last read filled the buffer.
	bool rx_filled;
	// Receive path: reads may go to the worker's scratch buffer while
	// nothing is pending (plain socket without a layer); the own buffer is
	// freed when empty.
	bool  rx_scratch;
	txbuf fill;

	void *tag;
	void (*tag_done)(void *tag); // NULL once called
	// The peer address as text: inline when it fits (every IPv4 one),
	// else on the heap (peer_heap; long IPv6 ones).
	union {
		char  inl[24];
		char *heap;
	} peer;
};

// conn.c, for the backends and layers.

// Allocates the common part for backend be; NULL on failure.
nmq_conn *conn_new(const conn_env *env, const conn_backend *be);
// Undoes conn_new for a connection that never started.
void conn_new_undo(nmq_conn *c);
// Stores the peer address text (truncated if memory runs out).
void conn_set_peer(nmq_conn *c, const char *peer);
// Formats an IPv4 address (network order) and port as "a.b.c.d:port".
void conn_format_v4(const void *addr, unsigned port, char *buf, size_t len);
// Closes the connection once (backend close). Mutex held.
void conn_close_locked(nmq_conn *c);
// Ensures the receive buffer holds `need` bytes; false when out of memory.
bool conn_rx_reserve(nmq_conn *c, size_t need);
// Sizes the receive buffer for the next read (see conn.c).
bool conn_rx_size(nmq_conn *c, size_t want);
// Cuts and dispatches every complete frame of buf (ops->frame), then
// tells the upper layer that the read's frames are handed over
// (ops->frames_end, also when reading stopped in them); *used gets the
// bytes consumed, *want the size of an incomplete frame at the end (0 if
// unknown). Returns false if reading must stop.
bool conn_dispatch_frames(nmq_conn *c, const uint8_t *buf, size_t len, size_t *used, size_t *want);
// Dispatches the new bytes of the connection's own buffer (through the
// layer, if any). Receive path. Returns false if reading must stop.
bool conn_rx_dispatch(nmq_conn *c);
// Ends the receive path: close unless a drain is under way, tell the upper
// layer once, drop the receive path's reference. Worker, without the
// mutex.
void conn_rx_finish(nmq_conn *c, bool failed);
// Runs a writable() upcall counted in c->upcalls (incremented by the
// caller under the mutex), then uncounts it. Without the mutex.
void conn_writable_upcall(nmq_conn *c);
// The output of a drain (conn_shutdown) has all been written: closes.
// Backend, mutex held.
void conn_drain_done_locked(nmq_conn *c);

// Lets the layer finish what it framed before a write takes c->fill. Mutex
// held.
static inline void conn_tx_seal(nmq_conn *c)
{
	if (c->layer != NULL) {
		c->layer->ops->tx_seal(c);
	}
}

// The byte totals of conn_bytes_received/sent, added once per read or
// write call by the backends.
extern _Atomic uint64_t conn_rx_bytes_total, conn_tx_bytes_total;
static inline void      conn_count_rx(size_t n)
{
	atomic_fetch_add_explicit(&conn_rx_bytes_total, n, memory_order_relaxed);
}
static inline void conn_count_tx(size_t n)
{
	atomic_fetch_add_explicit(&conn_tx_bytes_total, n, memory_order_relaxed);
}

// ---------------------------------------------------------------------------
// TLS over a plain socket (conn_tls.c), for conn_sock.c.

// Decrypts up to len bytes into buf (several records), taking mtx around
// mbed TLS (writers use it under the same mutex); ra (rasz bytes, at least
// CONN_TLS_RA_MIN) is read-ahead room for this call. Returns the bytes,
// 0 at the peer's close, or -1 with errno EAGAIN (nothing decrypted yet)
// or EPROTO (failed). The owner, without mtx.
ssize_t conn_tls_recv(
    conn_tls *t, nmq_mutex *mtx, uint8_t *buf, size_t len, uint8_t *ra, size_t rasz);
// Encrypts the first bytes of iov (n entries, up to one record) after
// flushing a record kept from before. Returns 0 with *consumed set (0 is
// possible when n is 0), EAGAIN when the socket is full (nothing taken),
// or EPIPE (failed). Mutex held.
int conn_tls_send(conn_tls *t, const struct iovec *iov, int n, size_t *consumed);
// An encrypted record is still waiting for room in the socket. Mutex held.
bool conn_tls_unflushed(const conn_tls *t);
// Input is buffered above the socket (read ahead, or inside mbed TLS), so
// that the owner must read again without waiting for readiness. Mutex held.
bool conn_tls_pending(const conn_tls *t);
// Queues a close_notify alert, best effort. Mutex held.
void conn_tls_close_notify(conn_tls *t);
// Copies the peer record of the handshake.
void conn_tls_peer_of(const conn_tls *t, tls_peer *p);
// The peer record itself (written once by the handshake, then unchanged;
// lives as long as t).
const tls_peer *conn_tls_peer_at(const conn_tls *t);

#endif // NMQ_CONN_INT_H
