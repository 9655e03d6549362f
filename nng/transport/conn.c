#include "nng/transport/conn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "nng/codec/mqtt_codec.h"
#include "nng/codec/ws_codec.h"
#include "nng/core/nmq_mutex.h"

#define RX_INIT     256
#define RX_GROW_MAX (64 * 1024)
#define TX_IOV_MAX  8 // NNG's limit per aio
#define RAW_IOV_MAX 64 // per writev on a plain socket
#define RAW_READS   8 // reads per readiness event before yielding
#define WS_HDR_ROOM 10 // room reserved for a frame header (the longest)

// One piece of queued output: either bytes in the arena (ref == NULL, at
// offset off) or bytes inside a shared message (ref held, at p).
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

// The parts only an NNG-stream connection needs (TLS, WebSocket), kept out
// of plain-socket connections to keep them small.
struct nng_side {
	nng_stream *s;
	nng_aio    *rx_aio;
	nng_aio    *tx_aio;
	txbuf       send; // the batch being sent while fill collects the next
	nng_iov     iov[TX_IOV_MAX];
};

// WebSocket state (conn_set_websocket); NULL for plain MQTT.
struct ws_side {
	const char *path;
	bool        open; // the upgrade is done: bytes are framed both ways
	ws_decoder  dec;
	// Receive: c->rx holds [0, mq_len) decoded MQTT bytes not dispatched
	// yet, then [mq_len, rx_len) raw bytes still to decode.
	size_t mq_len;
	// Upgrade: bytes already searched for the blank line ending the request.
	size_t hs_scanned;
	// Send (mtx): the data frame being filled, whose header segment
	// (WS_HDR_ROOM bytes reserved in the arena) is finished when a write
	// takes it.
	bool   frame_open;
	bool   raw_out; // queue the next bytes unframed (control frames)
	bool   close_sent; // our close frame is queued
	size_t hdr_seg;
	size_t frame_start; // fill.bytes just after the header
};

struct nmq_conn {
	// Backend: an NNG stream (TLS, WebSocket) with its two aios, or a
	// plain TCP socket (fd >= 0) owned by one worker's event loop.
	struct nng_side *ns; // NNG stream backend only, else NULL
	struct ws_side  *ws; // WebSocket only, else NULL
	int              fd;
	int              owner; // worker whose epoll set holds fd
	uint32_t         ep_events; // events registered (mtx)
	int              upcalls; // writable() calls running (mtx)
	workq_io         io;
	const conn_env  *env;
	const conn_ops  *ops;
	void            *upper;
	nmq_mutex        mtx;
	atomic_int       refs;
	int              rx_result; // receive path
	workq_job        job;
	// A flush requested off the workers; once the last reference is gone
	// (no flush can be queued then: a queued flush holds one), the
	// destruction job.
	workq_job aux_job;

	// Receive path: touched only by the recv callback and the job, which
	// never run at the same time for one connection.
	uint8_t *rx;
	uint32_t rx_len;
	uint32_t rx_cap;
	bool     rx_filled;

	// Guarded by mtx.
	bool     ep_added; // fd is in the epoll set
	bool     rx_paused; // the upper layer asked to stop reading for now
	bool     rx_parked; // NNG stream: no receive posted because of the pause
	bool     closing;
	bool     draining;
	bool     reading_done;
	bool     closed_notified;
	bool     tx_busy;
	bool     flush_pending;
	bool     peer_heap; // set once at allocation
	uint32_t send_seg;
	uint32_t send_off;
	txbuf    fill;

	void *tag;
	void (*tag_done)(void *tag); // NULL once called
	// The peer address as text: inline when it fits (every IPv4 one),
	// else on the heap (peer_heap; long IPv6 ones).
	union {
		char  inl[24];
		char *heap;
	} peer;
};

static atomic_long live_conns;

static void rx_cb(void *arg);
static void tx_cb(void *arg);
static void rx_job(workq_job *job);
static void destroy_job(workq_job *job);
static void tag_done(nmq_conn *c);
static void raw_io(workq_io *io, uint32_t events);
static void flush_job(workq_job *job);
static bool raw_write_locked(nmq_conn *c);
static bool ws_rx_dispatch(nmq_conn *c);
static void ws_frame_finish(nmq_conn *c);
static bool ws_close_locked(nmq_conn *c, uint16_t code);

// A per-thread pool of the first output blocks of a connection (the arena
// and segment array a first write allocates), so that a plain socket can
// give its blocks back after every complete write (an idle connection then
// holds none) without a malloc per flush.
#define POOL_ARENA 256
#define POOL_SEGS  4
#define POOL_MAX   256

typedef struct pool_blk {
	struct pool_blk *next;
} pool_blk;

static __thread pool_blk *pool_arenas;
static __thread pool_blk *pool_segs;
static __thread int       pool_n_arenas;
static __thread int       pool_n_segs;

// Returns a block of the given pool (POOL_ARENA bytes, or POOL_SEGS
// segments), or NULL.
static void *pool_get(bool segs)
{
	pool_blk **head = segs ? &pool_segs : &pool_arenas;
	pool_blk  *b    = *head;
	if (b != NULL) {
		*head = b->next;
		if (segs) {
			pool_n_segs--;
		} else {
			pool_n_arenas--;
		}
		return b;
	}
	return malloc(segs ? POOL_SEGS * sizeof(tx_seg) : POOL_ARENA);
}

// Frees this thread's pooled blocks; runs when a thread that used the pool
// exits.
static void pool_drain(void *unused)
{
	(void)unused;
	while (pool_arenas != NULL) {
		pool_blk *b = pool_arenas;
		pool_arenas = b->next;
		free(b);
	}
	while (pool_segs != NULL) {
		pool_blk *b = pool_segs;
		pool_segs   = b->next;
		free(b);
	}
	pool_n_arenas = 0;
	pool_n_segs   = 0;
}

static pthread_key_t  pool_key;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static __thread bool  pool_registered;

static void pool_key_init(void)
{
	pthread_key_create(&pool_key, pool_drain);
}

// Gives a block back to this thread's pool, or frees it when the pool is
// full.
static void pool_put(void *p, bool segs)
{
	int *n = segs ? &pool_n_segs : &pool_n_arenas;
	if (p == NULL) {
		return;
	}
	if (!pool_registered) {
		// Make sure the blocks are freed when this thread exits.
		pthread_once(&pool_once, pool_key_init);
		pthread_setspecific(pool_key, (void *)1);
		pool_registered = true;
	}
	if (*n >= POOL_MAX) {
		free(p);
		return;
	}
	pool_blk *b = p;
	b->next     = segs ? pool_segs : pool_arenas;
	if (segs) {
		pool_segs = b;
	} else {
		pool_arenas = b;
	}
	(*n)++;
}

// Returns the blocks of an empty txbuf: small ones to the pool, others to
// malloc.
static void txbuf_release_blocks(txbuf *b)
{
	if (b->arena_cap != 0 || b->seg_cap != 0) {
		nmq_mem_buffers_add(-(int64_t)(b->arena_cap + (size_t)b->seg_cap * sizeof(tx_seg)));
	}
	if (b->arena_cap == POOL_ARENA) {
		pool_put(b->arena, false);
	} else {
		free(b->arena);
	}
	if (b->seg_cap == POOL_SEGS) {
		pool_put(b->segs, true);
	} else {
		free(b->segs);
	}
	b->arena     = NULL;
	b->arena_cap = 0;
	b->segs      = NULL;
	b->seg_cap   = 0;
}

// Releases every message reference held by a txbuf and empties it.
static void txbuf_reset(txbuf *b)
{
	for (size_t i = 0; i < b->nsegs; i++) {
		if (b->segs[i].ref != NULL) {
			nmq_msg_release(b->segs[i].ref);
		}
	}
	b->nsegs     = 0;
	b->arena_len = 0;
	b->bytes     = 0;
	// Give back large blocks so that an idle connection stays small.
	if (b->arena_cap > 64 * 1024 || b->seg_cap > 256) {
		txbuf_release_blocks(b);
	}
}

static void txbuf_fini(txbuf *b)
{
	txbuf_reset(b);
	txbuf_release_blocks(b);
}

// Makes room for one more segment; false on allocation failure.
static bool txbuf_seg_room(txbuf *b)
{
	if (b->nsegs < b->seg_cap) {
		return true;
	}
	if (b->seg_cap == 0) {
		b->segs = pool_get(true);
		if (b->segs == NULL) {
			return false;
		}
		b->seg_cap = POOL_SEGS;
		nmq_mem_buffers_add((int64_t)(POOL_SEGS * sizeof(tx_seg)));
		return true;
	}
	size_t  ncap = b->seg_cap * 2;
	tx_seg *ns;
	if (b->seg_cap == POOL_SEGS) {
		// Leave the pool's block: move to a malloc'd array.
		ns = malloc(ncap * sizeof(*ns));
		if (ns != NULL) {
			memcpy(ns, b->segs, b->nsegs * sizeof(*ns));
			pool_put(b->segs, true);
		}
	} else {
		ns = realloc(b->segs, ncap * sizeof(*ns));
	}
	if (ns == NULL) {
		return false;
	}
	nmq_mem_buffers_add((int64_t)((ncap - b->seg_cap) * sizeof(tx_seg)));
	b->segs    = ns;
	b->seg_cap = ncap;
	return true;
}

// Formats an IPv4 address (network order) and port as "a.b.c.d:port":
// inet_ntop() would keep one more 64 KiB window of libc resident from the
// first connection on.
static void format_v4(const void *addr, unsigned port, char *buf, size_t len)
{
	const uint8_t *b = addr;
	snprintf(buf, len, "%u.%u.%u.%u:%u", b[0], b[1], b[2], b[3], port);
}

// Formats the peer address of s into buf.
static void format_peer(nng_stream *s, char *buf, size_t len)
{
	nng_sockaddr sa;
	snprintf(buf, len, "unknown");
	if (nng_stream_get_addr(s, NNG_OPT_REMADDR, &sa) != 0) {
		return;
	}
	char a[INET6_ADDRSTRLEN];
	if (sa.s_family == NNG_AF_INET) {
		format_v4(&sa.s_in.sa_addr, ntohs(sa.s_in.sa_port), buf, len);
	} else if (sa.s_family == NNG_AF_INET6) {
		inet_ntop(AF_INET6, sa.s_in6.sa_addr, a, sizeof(a));
		snprintf(buf, len, "[%s]:%u", a, ntohs(sa.s_in6.sa_port));
	}
}

// Formats the peer address of a socket into buf.
static void format_peer_fd(int fd, char *buf, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t               sl = sizeof(ss);
	char                    a[INET6_ADDRSTRLEN];
	snprintf(buf, len, "unknown");
	if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0) {
		return;
	}
	if (ss.ss_family == AF_INET) {
		struct sockaddr_in *in = (struct sockaddr_in *)&ss;
		format_v4(&in->sin_addr, ntohs(in->sin_port), buf, len);
	} else if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
		inet_ntop(AF_INET6, &in6->sin6_addr, a, sizeof(a));
		snprintf(buf, len, "[%s]:%u", a, ntohs(in6->sin6_port));
	}
}

// Stores the peer address text (truncated if memory runs out).
static void set_peer(nmq_conn *c, const char *peer)
{
	size_t n = strlen(peer);
	if (n >= sizeof(c->peer.inl)) {
		char *h = strdup(peer);
		if (h != NULL) {
			c->peer.heap = h;
			c->peer_heap = true;
			return;
		}
		n = sizeof(c->peer.inl) - 1;
	}
	memcpy(c->peer.inl, peer, n);
	c->peer.inl[n] = '\0';
}

// Allocates the parts common to both backends; NULL on failure.
static nmq_conn *conn_new(const conn_env *env)
{
	nmq_conn *c = calloc(1, sizeof(*c));
	if (c == NULL) {
		return NULL;
	}
	c->rx_cap = RX_INIT;
	c->rx     = malloc(c->rx_cap);
	if (c->rx == NULL) {
		free(c);
		return NULL;
	}
	nmq_mutex_init(&c->mtx);
	atomic_init(&c->refs, 1);
	c->fd         = -1;
	c->env        = env;
	c->job.fn     = rx_job;
	c->aux_job.fn = flush_job;
	c->io.fn      = raw_io;
	atomic_fetch_add(&live_conns, 1);
	return c;
}

// Returns a new connection for an accepted plain TCP socket (non-blocking),
// or NULL (the caller still owns fd).
nmq_conn *conn_alloc_fd(int fd, const conn_env *env)
{
	nmq_conn *c = conn_new(env);
	if (c == NULL) {
		return NULL;
	}
	c->fd    = fd;
	c->owner = workq_pick(env->wq);
	// Reads go to the worker's scratch buffer; a buffer of its own is
	// allocated only for a frame that is still incomplete.
	free(c->rx);
	c->rx     = NULL;
	c->rx_cap = 0;
	char peer[64];
	format_peer_fd(fd, peer, sizeof(peer));
	set_peer(c, peer);
	return c;
}

// Returns a new connection for stream s, or NULL.
nmq_conn *conn_alloc(nng_stream *s, const conn_env *env)
{
	nmq_conn *c = conn_new(env);
	if (c == NULL) {
		return NULL;
	}
	c->ns = calloc(1, sizeof(*c->ns));
	if (c->ns == NULL || nng_aio_alloc(&c->ns->rx_aio, rx_cb, c) != 0
	    || nng_aio_alloc(&c->ns->tx_aio, tx_cb, c) != 0) {
		if (c->ns != NULL && c->ns->rx_aio != NULL) {
			nng_aio_free(c->ns->rx_aio);
		}
		free(c->ns);
		nmq_mutex_destroy(&c->mtx);
		free(c->rx);
		free(c);
		atomic_fetch_sub(&live_conns, 1);
		return NULL;
	}
	c->ns->s = s;
	char peer[64];
	format_peer(s, peer, sizeof(peer));
	set_peer(c, peer);
	return c;
}

// Makes c a WebSocket connection; see conn.h.
bool conn_set_websocket(nmq_conn *c, const char *path)
{
	c->ws = calloc(1, sizeof(*c->ws));
	if (c->ws == NULL) {
		return false;
	}
	c->ws->path = path;
	// The input is decoded in place in the connection's own buffer, never
	// in the worker's scratch buffer.
	if (c->rx == NULL) {
		c->rx = malloc(RX_INIT);
		if (c->rx == NULL) {
			free(c->ws);
			c->ws = NULL;
			return false;
		}
		c->rx_cap = RX_INIT;
	}
	return true;
}

// Submits a receive into the free part of the buffer. Caller holds mtx.
static void start_recv(nmq_conn *c)
{
	nng_iov iov;
	iov.iov_buf = c->rx + c->rx_len;
	iov.iov_len = c->rx_cap - c->rx_len;
	nng_aio_set_iov(c->ns->rx_aio, 1, &iov);
	nng_stream_recv(c->ns->s, c->ns->rx_aio);
}

// Sets the upper layer and starts reading.
void conn_start(nmq_conn *c, const conn_ops *ops, void *upper)
{
	c->ops   = ops;
	c->upper = upper;
	conn_hold(c); // for the receive path
	nmq_mutex_lock(&c->mtx);
	if (c->fd >= 0) {
		c->ep_events = EPOLLIN | EPOLLRDHUP;
		if (workq_io_add(c->env->wq, c->owner, c->fd, &c->io, c->ep_events) == 0) {
			c->ep_added = true;
		} else {
			// Cannot watch it: let the receive path end at once.
			c->rx_result = NNG_ECLOSED;
			workq_post_to(c->env->wq, c->owner, &c->job);
		}
	} else {
		start_recv(c);
	}
	nmq_mutex_unlock(&c->mtx);
}

void conn_hold(nmq_conn *c)
{
	atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
}

// Drops a reference; the last one schedules destruction on a worker.
void conn_release(nmq_conn *c)
{
	if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1) {
		// A plain socket is destroyed by its own worker, after any event
		// for it in the current batch has been handled.
		c->aux_job.fn = destroy_job;
		if (c->fd >= 0) {
			workq_post_to(c->env->wq, c->owner, &c->aux_job);
		} else {
			workq_post(c->env->wq, &c->aux_job);
		}
	}
}

// Frees the connection; runs on a worker, never in an aio callback (and,
// for a plain socket, on its owner).
static void destroy_job(workq_job *job)
{
	nmq_conn *c = (nmq_conn *)((char *)job - offsetof(nmq_conn, aux_job));
	if (c->fd >= 0) {
		if (c->ep_added) {
			workq_io_del(c->env->wq, c->owner, c->fd);
		}
		close(c->fd);
	} else {
		nng_stream_close(c->ns->s);
		nng_aio_free(c->ns->rx_aio);
		nng_aio_free(c->ns->tx_aio);
		nng_stream_free(c->ns->s);
	}
	txbuf_fini(&c->fill);
	if (c->ns != NULL) {
		txbuf_fini(&c->ns->send);
		free(c->ns);
	}
	free(c->ws);
	if (c->peer_heap) {
		free(c->peer.heap);
	}
	tag_done(c);
	nmq_mutex_destroy(&c->mtx);
	free(c->rx);
	free(c);
	atomic_fetch_sub(&live_conns, 1);
}

// Calls the tag's hook once (see conn_set_tag). The receive path's end and
// the destruction never overlap: the first holds a reference.
static void tag_done(nmq_conn *c)
{
	void (*fn)(void *) = c->tag_done;
	c->tag_done        = NULL;
	if (fn != NULL) {
		fn(c->tag);
	}
}

// Runs the writable() upcall counted in c->upcalls (incremented by the
// caller under the lock), then uncounts it.
static void writable_upcall(nmq_conn *c)
{
	c->ops->writable(c->upper);
	nmq_mutex_lock(&c->mtx);
	c->upcalls--;
	nmq_mutex_unlock(&c->mtx);
}

// Returns the number of connections not yet destroyed.
long conn_live_count(void)
{
	return atomic_load(&live_conns);
}

// Closes the stream once. Caller holds mtx.
static void close_locked(nmq_conn *c)
{
	if (c->closing) {
		return;
	}
	c->closing = true;
	if (c->rx_parked) {
		// The receive path is parked by a pause: let it end now.
		c->rx_parked = false;
		c->rx_result = NNG_ECLOSED;
		workq_post(c->env->wq, &c->job);
	}
	if (c->fd >= 0) {
		// The owner sees the hang-up and ends the receive path; the
		// descriptor is closed only when the connection is destroyed.
		shutdown(c->fd, SHUT_RDWR);
	} else {
		nng_stream_close(c->ns->s);
	}
}

void conn_close(nmq_conn *c)
{
	nmq_mutex_lock(&c->mtx);
	close_locked(c);
	txbuf_reset(&c->fill);
	nmq_mutex_unlock(&c->mtx);
}

void conn_shutdown(nmq_conn *c)
{
	nmq_mutex_lock(&c->mtx);
	// A WebSocket ends with a close frame (RFC 6455 §5.5.1) after what
	// is queued, e.g. a DISCONNECT.
	bool queued = ws_close_locked(c, WS_CLOSE_NORMAL);
	c->draining = true;
	if (!c->tx_busy && c->fill.bytes == 0) {
		close_locked(c);
	}
	nmq_mutex_unlock(&c->mtx);
	if (queued) {
		conn_tx_flush_later(c);
	}
}

// Pauses or resumes reading; see conn.h.
void conn_set_rx_paused(nmq_conn *c, bool paused)
{
	nmq_mutex_lock(&c->mtx);
	if (c->rx_paused == paused) {
		nmq_mutex_unlock(&c->mtx);
		return;
	}
	c->rx_paused = paused;
	if (c->fd >= 0) {
		if (c->ep_added && !c->reading_done) {
			if (paused) {
				c->ep_events &= ~(uint32_t)(EPOLLIN | EPOLLRDHUP);
			} else {
				c->ep_events |= EPOLLIN | EPOLLRDHUP;
			}
			workq_io_mod(c->env->wq, c->owner, c->fd, &c->io, c->ep_events);
		}
	} else if (!paused && c->rx_parked) {
		c->rx_parked = false;
		if (!c->closing && !c->draining) {
			start_recv(c);
		} else {
			c->rx_result = NNG_ECLOSED;
			workq_post(c->env->wq, &c->job);
		}
	}
	nmq_mutex_unlock(&c->mtx);
}

bool conn_is_closing(nmq_conn *c)
{
	nmq_mutex_lock(&c->mtx);
	bool r = c->closing || c->draining;
	nmq_mutex_unlock(&c->mtx);
	return r;
}

void conn_set_tag(nmq_conn *c, void *tag, void (*on_done)(void *tag))
{
	c->tag      = tag;
	c->tag_done = on_done;
}

void *conn_tag(nmq_conn *c)
{
	return c->tag;
}

const char *conn_peer(nmq_conn *c)
{
	return c->peer_heap ? c->peer.heap : c->peer.inl;
}

nng_stream *conn_stream(nmq_conn *c)
{
	return c->ns != NULL ? c->ns->s : NULL;
}

// Receive completion (NNG task thread): record and hand to a worker.
static void rx_cb(void *arg)
{
	nmq_conn *c  = arg;
	c->rx_result = nng_aio_result(c->ns->rx_aio);
	if (c->rx_result == 0) {
		size_t n = nng_aio_count(c->ns->rx_aio);
		if (n == 0) {
			c->rx_result = NNG_ECLOSED;
		}
		c->rx_filled = (n == c->rx_cap - c->rx_len);
		c->rx_len += n;
	}
	workq_post(c->env->wq, &c->job);
}

// Ensures the receive buffer can hold `need` bytes in total. Returns false
// on allocation failure.
static bool rx_reserve(nmq_conn *c, size_t need)
{
	if (need <= c->rx_cap) {
		return true;
	}
	uint8_t *nb = realloc(c->rx, need);
	if (nb == NULL) {
		return false;
	}
	c->rx     = nb;
	c->rx_cap = need;
	return true;
}

// Cuts and dispatches every complete frame in the buffer. Returns false if
// reading must stop.
static bool dispatch_frames(nmq_conn *c, const uint8_t *buf, size_t len, size_t *used, size_t *want)
{
	size_t off = 0;
	*want      = 0; // size of an incomplete frame at the end, if known
	for (;;) {
		uint32_t rem;
		uint8_t  hl;
		size_t   avail = len - off;
		int      r     = mqtt_frame_header(buf + off, avail, &rem, &hl);
		if (r == MQTT_FRAME_NEED_MORE) {
			break;
		}
		if (r == MQTT_FRAME_MALFORMED) {
			// Let the decoder report the malformed length.
			c->ops->frame(c->upper, buf + off, avail);
			return false;
		}
		size_t total = (size_t)hl + rem;
		if (c->ops->header != NULL
		    && c->ops->header(c->upper, buf[off], (uint32_t)total) != 0) {
			return false;
		}
		if (total > __atomic_load_n(&c->env->max_packet_size, __ATOMIC_RELAXED)) {
			c->ops->too_large(
			    c->upper, (uint32_t)(total > UINT32_MAX ? UINT32_MAX : total));
			return false;
		}
		if (total > avail) {
			*want = total;
			break;
		}
		if (c->ops->frame(c->upper, buf + off, total) != 0) {
			return false;
		}
		off += total;
	}
	*used = off;
	return true;
}

// Sizes the connection's buffer, which holds rx_len bytes, for the next
// read: the whole of an incomplete frame of `want` bytes at its start (0:
// unknown), or twice as much if the last read filled it (up to
// RX_GROW_MAX); always room for 64 more bytes; back to RX_INIT when little
// is pending. Returns false on allocation failure.
static bool rx_size(nmq_conn *c, size_t want)
{
	size_t target = RX_INIT;
	if (want > 0) {
		target = want;
	} else if (c->rx_filled && c->rx_cap < RX_GROW_MAX) {
		target = (size_t)c->rx_cap * 2;
	} else if (c->rx_filled) {
		target = c->rx_cap;
	}
	if (target < (size_t)c->rx_len + 64) {
		target = (size_t)c->rx_len + 64;
	}
	if (target > c->rx_cap) {
		return rx_reserve(c, target);
	}
	if (c->rx_cap > RX_INIT && target <= RX_INIT && c->rx_len <= RX_INIT / 2) {
		uint8_t *nb = realloc(c->rx, RX_INIT);
		if (nb != NULL) {
			c->rx     = nb;
			c->rx_cap = RX_INIT;
		}
	}
	return true;
}

// Dispatches the complete frames of the connection's own buffer, keeps the
// incomplete rest and sizes the buffer for what comes next: the rest of a
// large frame, or a bigger read if the last one filled it. A plain socket
// gives its buffer back when nothing is pending (it reads into the worker's
// scratch buffer then); an NNG stream keeps RX_INIT bytes for its next
// receive. Returns false if reading must stop.
static bool rx_dispatch(nmq_conn *c)
{
	size_t off;
	size_t want;
	if (c->ws != NULL) {
		return ws_rx_dispatch(c);
	}
	if (!dispatch_frames(c, c->rx, c->rx_len, &off, &want)) {
		return false;
	}
	if (off > 0) {
		memmove(c->rx, c->rx + off, c->rx_len - off);
		c->rx_len -= off;
	}
	if (c->fd >= 0 && c->rx_len == 0) {
		free(c->rx);
		c->rx     = NULL;
		c->rx_cap = 0;
		return true;
	}
	return rx_size(c, want);
}

// WebSocket: queues bytes that are already framed (an HTTP response, a
// control frame) behind what is queued, and starts sending them.
static void ws_append_raw_locked(nmq_conn *c, const void *p, size_t n)
{
	ws_frame_finish(c);
	c->ws->raw_out = true;
	uint8_t *dst   = conn_tx_reserve(c, n);
	if (dst != NULL) {
		memcpy(dst, p, n);
		conn_tx_commit(c, n);
	}
	c->ws->raw_out = false;
}

static void ws_queue_raw(nmq_conn *c, const void *p, size_t n)
{
	nmq_mutex_lock(&c->mtx);
	ws_append_raw_locked(c, p, n);
	nmq_mutex_unlock(&c->mtx);
	conn_tx_flush_later(c);
}

// WebSocket: queues our close frame with code, once, behind what is
// queued. Returns true if it was queued. Caller holds mtx.
static bool ws_close_locked(nmq_conn *c, uint16_t code)
{
	struct ws_side *w = c->ws;
	if (w == NULL || !w->open || w->close_sent || c->closing) {
		return false;
	}
	w->close_sent = true;
	uint8_t f[4]  = { 0x80 | WS_OP_CLOSE, 2, (uint8_t)(code >> 8), (uint8_t)code };
	ws_append_raw_locked(c, f, sizeof(f));
	return true;
}

// WebSocket: sends a close frame with code, then closes once it is out.
static void ws_send_close(nmq_conn *c, uint16_t code)
{
	nmq_mutex_lock(&c->mtx);
	bool queued = ws_close_locked(c, code);
	nmq_mutex_unlock(&c->mtx);
	if (queued) {
		conn_tx_flush_later(c);
	}
	conn_shutdown(c);
}

// WebSocket: answers the upgrade request once it is complete. Returns 1
// when the connection is open (the request removed from the buffer), 0
// while the request is incomplete, -1 when it was refused (the error
// response is on its way and the connection closes after it).
static int ws_handshake_step(nmq_conn *c)
{
	struct ws_side *w = c->ws;
	ws_handshake    hs;
	size_t          used = 0;
	char            resp[WS_HS_RESPONSE_MAX];
	// Parse only once the request is complete (or too long): a client
	// dribbling its request byte by byte then costs a scan of each new
	// byte, not a parse of the whole request per read.
	size_t from = w->hs_scanned > 2 ? w->hs_scanned - 2 : 0;
	bool   done = c->rx_len > WS_HS_MAX;
	for (size_t i = from; !done && i < c->rx_len; i++) {
		done = c->rx[i] == '\n'
		    && ((i + 1 < c->rx_len && c->rx[i + 1] == '\n')
		        || (i + 2 < c->rx_len && c->rx[i + 1] == '\r' && c->rx[i + 2] == '\n'));
	}
	w->hs_scanned = c->rx_len;
	memset(&hs, 0, sizeof(hs));
	hs.path = w->path;
	int r   = done ? ws_handshake_parse(&hs, c->rx, c->rx_len, &used) : WS_HS_NEED_MORE;
	if (r == WS_HS_NEED_MORE) {
		// The parser refuses a request of WS_HS_MAX bytes or more, so
		// this stops growing at twice that.
		if (c->rx_len + 64 > c->rx_cap) {
			return rx_reserve(c, c->rx_cap * 2) ? 0 : -1;
		}
		return 0;
	}
	size_t n = ws_handshake_response(&hs, r == WS_HS_OK, resp, sizeof(resp));
	ws_queue_raw(c, resp, n);
	if (r != WS_HS_OK) {
		conn_shutdown(c);
		return -1;
	}
	nmq_mutex_lock(&c->mtx);
	w->open = true;
	nmq_mutex_unlock(&c->mtx);
	memmove(c->rx, c->rx + used, c->rx_len - used);
	c->rx_len -= used;
	w->mq_len = 0;
	return 1;
}

// WebSocket receive: the upgrade first, then the frames of the buffer are
// decoded in place into the MQTT stream, whose complete packets are
// dispatched. Returns false if reading must stop.
static bool ws_rx_dispatch(nmq_conn *c)
{
	struct ws_side *w = c->ws;
	if (!w->open) {
		int r = ws_handshake_step(c);
		if (r <= 0) {
			return r == 0;
		}
	}
	size_t     out   = w->mq_len;
	size_t     raw   = w->mq_len;
	int        close = 0; // a close code to send once the data is handed up
	ws_control ctl;
	for (;;) {
		int r = ws_decode(&w->dec, c->rx, c->rx_len, &out, &raw, &ctl);
		if (r == WS_DEC_OK) {
			break;
		}
		if (r == WS_DEC_ERROR) {
			close = ctl.close_code;
			break;
		}
		if (ctl.opcode == WS_OP_PING) {
			uint8_t f[2 + sizeof(ctl.payload)];
			f[0] = 0x80 | WS_OP_PONG;
			f[1] = ctl.len;
			memcpy(f + 2, ctl.payload, ctl.len);
			ws_queue_raw(c, f, 2 + (size_t)ctl.len);
		} else if (ctl.opcode == WS_OP_CLOSE) {
			// Echo the peer's code (RFC 6455 §5.5.1); 1005 means none.
			close = ctl.close_code == 1005 ? WS_CLOSE_NORMAL : ctl.close_code;
			break;
		}
	}
	size_t used;
	size_t want;
	if (!dispatch_frames(c, c->rx, out, &used, &want)) {
		return false;
	}
	if (close != 0) {
		ws_send_close(c, (uint16_t)close);
		return false;
	}
	// Keep the undispatched MQTT bytes, then the undecoded raw bytes.
	size_t mq   = out - used;
	size_t rest = c->rx_len - raw;
	memmove(c->rx, c->rx + used, mq);
	memmove(c->rx + mq, c->rx + raw, rest);
	w->mq_len = mq;
	c->rx_len = mq + rest;
	return rx_size(c, want);
}

// Reads into the worker's scratch buffer (nothing pending on c), dispatches
// the complete frames from there and keeps only an incomplete rest in the
// connection's own buffer. Returns the bytes read (0 end, -1 error or
// EAGAIN with errno set), and sets *stop when reading must stop.
static ssize_t raw_read_scratch(nmq_conn *c, bool *stop)
{
	size_t   room;
	uint8_t *buf = workq_scratch(&room);
	ssize_t  n   = read(c->fd, buf, room);
	if (n <= 0) {
		return n;
	}
	c->rx_filled = (size_t)n == room;
	size_t used;
	size_t want;
	if (!dispatch_frames(c, buf, (size_t)n, &used, &want)) {
		*stop = true;
		return n;
	}
	size_t rest = (size_t)n - used;
	if (rest > 0) {
		size_t cap = want > rest + 64 ? want : rest + 64;
		if (cap < RX_INIT) {
			cap = RX_INIT;
		}
		if (!rx_reserve(c, cap)) {
			*stop = true;
			return n;
		}
		memcpy(c->rx, buf + used, rest);
		c->rx_len = rest;
	}
	return n;
}

// Ends the receive path: close unless a drain is under way, tell the upper
// layer once, drop the receive path's reference. Called on the worker.
static void rx_finish(nmq_conn *c, bool failed)
{
	nmq_mutex_lock(&c->mtx);
	if (failed && !c->draining) {
		close_locked(c);
	}
	bool notify        = !c->closed_notified;
	c->closed_notified = true;
	c->reading_done    = true;
	if (c->fd >= 0 && c->ep_added) {
		// Stop reading; keep watching for writability while a drain
		// still has output to send.
		if (c->closing || !c->tx_busy) {
			workq_io_del(c->env->wq, c->owner, c->fd);
			c->ep_added = false;
		} else {
			c->ep_events = EPOLLOUT;
			workq_io_mod(c->env->wq, c->owner, c->fd, &c->io, c->ep_events);
		}
	}
	// No writable() upcall may run once closed() has been called.
	// They are short (the session queues more output), and this wait is
	// rare, so it yields instead of keeping a condition variable in every
	// connection.
	while (c->upcalls > 0) {
		nmq_mutex_unlock(&c->mtx);
		sched_yield();
		nmq_mutex_lock(&c->mtx);
	}
	nmq_mutex_unlock(&c->mtx);
	if (notify) {
		c->ops->closed(c->upper);
	}
	tag_done(c);
	conn_release(c); // the receive path's reference
}

// Reads what a plain socket has (a bounded number of reads, then yields to
// the other connections of this worker) and dispatches the frames.
static void raw_read(nmq_conn *c)
{
	nmq_mutex_lock(&c->mtx);
	bool stop = c->closing || c->draining;
	nmq_mutex_unlock(&c->mtx);
	if (stop) {
		rx_finish(c, c->closing);
		return;
	}
	for (int i = 0; i < RAW_READS; i++) {
		ssize_t n;
		bool    fail = false;
		if (c->rx_len == 0 && c->ws == NULL) {
			n = raw_read_scratch(c, &fail);
		} else {
			size_t room = c->rx_cap - c->rx_len;
			n           = read(c->fd, c->rx + c->rx_len, room);
			if (n > 0) {
				c->rx_filled = (size_t)n == room;
				c->rx_len += (size_t)n;
				fail = !rx_dispatch(c);
			}
		}
		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			return;
		}
		if (n <= 0 || fail) {
			rx_finish(c, true);
			return;
		}
		nmq_mutex_lock(&c->mtx);
		stop        = c->closing || c->draining;
		bool paused = c->rx_paused;
		nmq_mutex_unlock(&c->mtx);
		if (stop) {
			rx_finish(c, c->closing);
			return;
		}
		if (paused) {
			return;
		}
		if (!c->rx_filled) {
			return; // the socket is most likely empty now
		}
	}
}

// Readiness of a plain socket (its owner worker).
static void raw_io(workq_io *io, uint32_t events)
{
	nmq_conn *c = (nmq_conn *)((char *)io - offsetof(nmq_conn, io));
	if (events & EPOLLOUT) {
		bool notify = false;
		nmq_mutex_lock(&c->mtx);
		if (c->tx_busy) {
			c->tx_busy = false;
			notify     = raw_write_locked(c);
			if (notify) {
				c->upcalls++;
			}
		}
		nmq_mutex_unlock(&c->mtx);
		if (notify) {
			writable_upcall(c);
		}
	}
	if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
		nmq_mutex_lock(&c->mtx);
		bool done   = c->reading_done;
		bool paused = c->rx_paused;
		nmq_mutex_unlock(&c->mtx);
		if (!done && (!paused || (events & (EPOLLHUP | EPOLLERR)))) {
			raw_read(c);
		} else if (events & (EPOLLHUP | EPOLLERR)) {
			// Draining to a peer that went away: give up the output.
			nmq_mutex_lock(&c->mtx);
			close_locked(c);
			txbuf_reset(&c->fill);
			c->tx_busy = false;
			if (c->ep_added) {
				workq_io_del(c->env->wq, c->owner, c->fd);
				c->ep_added = false;
			}
			nmq_mutex_unlock(&c->mtx);
		}
	}
}

// The worker side of an NNG receive: dispatch frames, then read again or
// finish.
static void rx_job(workq_job *job)
{
	nmq_conn *c  = (nmq_conn *)((char *)job - offsetof(nmq_conn, job));
	bool      go = c->rx_result == 0;
	nmq_mutex_lock(&c->mtx);
	if (c->closing || c->draining) {
		go = false;
	}
	nmq_mutex_unlock(&c->mtx);
	if (go) {
		go = rx_dispatch(c);
	}
	nmq_mutex_lock(&c->mtx);
	if (go && !c->closing && !c->draining && c->fd < 0) {
		if (c->rx_paused) {
			c->rx_parked = true;
		} else {
			start_recv(c);
		}
		nmq_mutex_unlock(&c->mtx);
		return;
	}
	nmq_mutex_unlock(&c->mtx);
	rx_finish(c, c->rx_result != 0 || !go);
}

void conn_tx_lock(nmq_conn *c)
{
	nmq_mutex_lock(&c->mtx);
}

void conn_tx_unlock(nmq_conn *c)
{
	nmq_mutex_unlock(&c->mtx);
}

// Returns n writable bytes at the end of the fill arena, or NULL.
static uint8_t *arena_reserve(nmq_conn *c, size_t n)
{
	txbuf *b = &c->fill;
	if (c->closing) {
		return NULL;
	}
	if (b->arena_len + n > b->arena_cap) {
		if (b->arena_cap == 0 && n <= POOL_ARENA) {
			b->arena = pool_get(false);
			if (b->arena == NULL) {
				return NULL;
			}
			b->arena_cap = POOL_ARENA;
			nmq_mem_buffers_add(POOL_ARENA);
			return b->arena;
		}
		size_t ncap = b->arena_cap ? b->arena_cap : POOL_ARENA;
		while (ncap < b->arena_len + n) {
			ncap *= 2;
		}
		uint8_t *na;
		if (b->arena_cap == POOL_ARENA) {
			na = malloc(ncap);
			if (na != NULL) {
				memcpy(na, b->arena, b->arena_len);
				pool_put(b->arena, false);
			}
		} else {
			na = realloc(b->arena, ncap);
		}
		if (na == NULL) {
			return NULL;
		}
		nmq_mem_buffers_add((int64_t)(ncap - b->arena_cap));
		b->arena     = na;
		b->arena_cap = ncap;
	}
	return b->arena + b->arena_len;
}

// Appends a segment for the next n arena bytes of b (room checked by the
// caller) and counts them.
static void arena_seg_add(txbuf *b, size_t n)
{
	tx_seg *s = &b->segs[b->nsegs++];
	s->ref    = NULL;
	s->p      = NULL;
	s->off    = b->arena_len;
	s->len    = n;
	b->arena_len += n;
	b->bytes += n;
}

// WebSocket: starts a data frame at the end of the fill buffer if the
// connection is open and no frame is, with a header segment of WS_HDR_ROOM
// arena bytes that ws_frame_finish fills in. Returns false on allocation
// failure. Does nothing for other connections.
static bool ws_frame_begin(nmq_conn *c)
{
	struct ws_side *w = c->ws;
	txbuf          *b = &c->fill;
	if (w == NULL || !w->open || w->frame_open || w->raw_out) {
		return true;
	}
	if (arena_reserve(c, WS_HDR_ROOM) == NULL || !txbuf_seg_room(b)) {
		return false;
	}
	w->hdr_seg = b->nsegs;
	arena_seg_add(b, WS_HDR_ROOM);
	w->frame_open  = true;
	w->frame_start = b->bytes;
	return true;
}

// WebSocket: ends the open data frame, if any, by writing its header for
// the bytes queued since (an empty frame is dropped). Called before a
// write takes the fill buffer and before a control frame is queued.
// Caller holds mtx.
static void ws_frame_finish(nmq_conn *c)
{
	struct ws_side *w = c->ws;
	txbuf          *b = &c->fill;
	if (w == NULL || !w->frame_open) {
		return;
	}
	w->frame_open = false;
	if (w->hdr_seg >= b->nsegs || b->bytes < w->frame_start) {
		return; // the buffer was emptied meanwhile (a close)
	}
	tx_seg *h       = &b->segs[w->hdr_seg];
	size_t  payload = b->bytes - w->frame_start;
	if (payload == 0 && w->hdr_seg == b->nsegs - 1) {
		b->nsegs--;
		b->arena_len -= WS_HDR_ROOM;
		b->bytes -= WS_HDR_ROOM;
		return;
	}
	uint8_t hdr[WS_HDR_ROOM];
	size_t  k = ws_frame_header(hdr, WS_OP_BINARY, payload);
	h->off += WS_HDR_ROOM - k;
	h->len = k;
	memcpy(b->arena + h->off, hdr, k);
	b->bytes -= WS_HDR_ROOM - k;
}

// Returns n writable bytes for the upper layer (behind a frame header when
// a WebSocket frame must be started), or NULL.
uint8_t *conn_tx_reserve(nmq_conn *c, size_t n)
{
	return ws_frame_begin(c) ? arena_reserve(c, n) : NULL;
}

// Commits n bytes written after conn_tx_reserve.
void conn_tx_commit(nmq_conn *c, size_t n)
{
	txbuf *b = &c->fill;
	if (n == 0) {
		return;
	}
	// Extend the last arena segment when contiguous (but never a frame
	// header still to be finished), else add one.
	if (b->nsegs > 0 && b->segs[b->nsegs - 1].ref == NULL && b->segs[b->nsegs - 1].p == NULL
	    && b->segs[b->nsegs - 1].off + b->segs[b->nsegs - 1].len == b->arena_len
	    && !(c->ws != NULL && c->ws->frame_open && c->ws->hdr_seg == b->nsegs - 1)) {
		b->segs[b->nsegs - 1].len += n;
		b->arena_len += n;
		b->bytes += n;
	} else if (txbuf_seg_room(b)) {
		arena_seg_add(b, n);
	} else {
		close_locked(c);
	}
}

// Queues bytes inside msg by reference.
bool conn_tx_ref(nmq_conn *c, nmq_msg *msg, const uint8_t *p, size_t len)
{
	txbuf *b = &c->fill;
	if (c->closing) {
		return false;
	}
	if (len == 0) {
		return true;
	}
	if (!ws_frame_begin(c) || !txbuf_seg_room(b)) {
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

size_t conn_tx_queued(nmq_conn *c)
{
	return c->fill.bytes + (c->ns != NULL ? c->ns->send.bytes : 0);
}

bool conn_tx_full(nmq_conn *c)
{
	return c->closing || conn_tx_queued(c) >= c->env->tx_high_water;
}

// Builds the iov list from the send buffer's current position and submits
// it. Caller holds mtx.
static void submit_send(nmq_conn *c)
{
	txbuf   *b   = &c->ns->send;
	unsigned n   = 0;
	size_t   off = c->send_off;
	for (size_t i = c->send_seg; i < b->nsegs && n < TX_IOV_MAX; i++) {
		tx_seg        *s      = &b->segs[i];
		const uint8_t *base   = s->ref != NULL ? s->p : b->arena + s->off;
		c->ns->iov[n].iov_buf = (void *)(base + off);
		c->ns->iov[n].iov_len = s->len - off;
		off                   = 0;
		n++;
	}
	nng_aio_set_iov(c->ns->tx_aio, n, c->ns->iov);
	nng_stream_send(c->ns->s, c->ns->tx_aio);
}

// Swaps fill and send and starts sending. Caller holds mtx.
static void start_send(nmq_conn *c)
{
	ws_frame_finish(c);
	txbuf t     = c->ns->send;
	c->ns->send = c->fill;
	c->fill     = t;
	c->send_seg = 0;
	c->send_off = 0;
	submit_send(c);
}

// Writes as much of the queued output as a plain socket takes now, straight
// from the fill buffer (a plain socket needs no second buffer: new output is
// appended behind the part still being written, and arena segments are
// addressed by offset). Arms EPOLLOUT for the rest (tx_busy), closes on an
// error. Returns true when everything went out, so the upper layer may
// queue more. Caller holds mtx.
static bool raw_write_locked(nmq_conn *c)
{
	txbuf *b = &c->fill;
	ws_frame_finish(c);
	while (c->send_seg < b->nsegs) {
		struct iovec iov[RAW_IOV_MAX];
		int          n   = 0;
		size_t       off = c->send_off;
		for (size_t i = c->send_seg; i < b->nsegs && n < RAW_IOV_MAX; i++) {
			tx_seg        *sg   = &b->segs[i];
			const uint8_t *base = sg->ref != NULL ? sg->p : b->arena + sg->off;
			iov[n].iov_base     = (void *)(base + off);
			iov[n].iov_len      = sg->len - off;
			off                 = 0;
			n++;
		}
		ssize_t w = writev(c->fd, iov, n);
		if (w < 0 && errno == EINTR) {
			continue;
		}
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			c->tx_busy = true;
			if (!c->ep_added) {
				// Reading has ended (a drain): watch for room only.
				c->ep_events = EPOLLOUT;
				c->ep_added  = workq_io_add(
				                   c->env->wq, c->owner, c->fd, &c->io, c->ep_events)
				    == 0;
			} else if (!(c->ep_events & EPOLLOUT)) {
				c->ep_events |= EPOLLOUT;
				workq_io_mod(c->env->wq, c->owner, c->fd, &c->io, c->ep_events);
			}
			return false;
		}
		if (w < 0) {
			close_locked(c);
			txbuf_reset(b);
			c->send_seg = 0;
			c->send_off = 0;
			return false;
		}
		size_t left = (size_t)w;
		while (left > 0 && c->send_seg < b->nsegs) {
			tx_seg *sg   = &b->segs[c->send_seg];
			size_t  rest = sg->len - c->send_off;
			if (left >= rest) {
				left -= rest;
				c->send_off = 0;
				// Written: its message reference can go now.
				if (sg->ref != NULL) {
					nmq_msg_release(sg->ref);
					sg->ref = NULL;
					sg->p   = NULL;
					sg->len = 0;
				}
				c->send_seg++;
			} else {
				c->send_off += left;
				left = 0;
			}
		}
	}
	// Everything went out: an idle plain socket keeps no output blocks.
	txbuf_reset(b);
	txbuf_release_blocks(b);
	c->send_seg = 0;
	c->send_off = 0;
	if (c->ep_added && (c->ep_events & EPOLLOUT)) {
		c->ep_events &= ~(uint32_t)EPOLLOUT;
		if (c->reading_done) {
			workq_io_del(c->env->wq, c->owner, c->fd);
			c->ep_added = false;
		} else {
			workq_io_mod(c->env->wq, c->owner, c->fd, &c->io, c->ep_events);
		}
	}
	if (c->draining) {
		close_locked(c);
		return false;
	}
	return !c->closing && !c->closed_notified;
}

// Starts sending if nothing is in progress. Returns true when the caller
// should give the upper layer a writable() upcall (plain sockets only).
// Caller holds mtx.
static bool tx_kick_locked(nmq_conn *c)
{
	if (c->tx_busy || c->fill.bytes == 0 || c->closing) {
		return false;
	}
	if (c->fd >= 0) {
		return raw_write_locked(c);
	}
	c->tx_busy = true;
	conn_hold(c);
	start_send(c);
	return false;
}

void conn_tx_kick(nmq_conn *c)
{
	(void)tx_kick_locked(c);
}

// Deferred flush: runs after the current worker job.
static void flush_later_cb(void *arg)
{
	nmq_conn *c = arg;
	nmq_mutex_lock(&c->mtx);
	c->flush_pending = false;
	bool notify      = tx_kick_locked(c) && c->fill.bytes == 0;
	if (notify) {
		c->upcalls++;
	}
	nmq_mutex_unlock(&c->mtx);
	if (notify) {
		// The socket took everything: the session may have more queued
		// that waited for room.
		writable_upcall(c);
	}
	conn_release(c);
}

void conn_tx_flush_later(nmq_conn *c)
{
	nmq_mutex_lock(&c->mtx);
	if (c->flush_pending || c->tx_busy) {
		// A running send picks up the fill buffer when it completes.
		nmq_mutex_unlock(&c->mtx);
		return;
	}
	c->flush_pending = true;
	conn_hold(c);
	nmq_mutex_unlock(&c->mtx);
	if (!workq_defer(flush_later_cb, c)) {
		// Not on a worker (the timer thread, the main thread): the caller
		// may hold the session lock that a writable() upcall takes, so
		// the flush runs on a worker instead.
		workq_post_to(
		    c->env->wq, c->fd >= 0 ? c->owner : workq_pick(c->env->wq), &c->aux_job);
	}
}

static void flush_job(workq_job *job)
{
	flush_later_cb((nmq_conn *)((char *)job - offsetof(nmq_conn, aux_job)));
}

// Send completion (NNG task thread): advance over what was written, resend
// the rest of a short send, then the next batch.
static void tx_cb(void *arg)
{
	nmq_conn *c      = arg;
	int       rv     = nng_aio_result(c->ns->tx_aio);
	size_t    n      = nng_aio_count(c->ns->tx_aio);
	bool      end    = false;
	bool      notify = false;
	nmq_mutex_lock(&c->mtx);
	if (rv != 0) {
		close_locked(c);
		txbuf_reset(&c->ns->send);
		txbuf_reset(&c->fill);
		c->tx_busy = false;
		nmq_mutex_unlock(&c->mtx);
		conn_release(c);
		return;
	}
	txbuf *b = &c->ns->send;
	while (n > 0 && c->send_seg < b->nsegs) {
		tx_seg *s    = &b->segs[c->send_seg];
		size_t  left = s->len - c->send_off;
		if (n >= left) {
			n -= left;
			c->send_off = 0;
			c->send_seg++;
		} else {
			c->send_off += n;
			n = 0;
		}
	}
	if (c->send_seg < b->nsegs) {
		submit_send(c);
		nmq_mutex_unlock(&c->mtx);
		return;
	}
	txbuf_reset(b);
	if (c->fill.bytes > 0 && !c->closing) {
		start_send(c);
	} else {
		c->tx_busy = false;
		end        = true;
		if (c->draining) {
			close_locked(c);
		}
	}
	notify = !c->closing && !c->draining && !c->closed_notified
	    && c->fill.bytes < c->env->tx_high_water / 2;
	if (notify) {
		c->upcalls++;
	}
	nmq_mutex_unlock(&c->mtx);
	if (notify) {
		writable_upcall(c);
	}
	if (end) {
		conn_release(c);
	}
}
