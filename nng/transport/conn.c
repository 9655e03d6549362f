// The common connection object; see conn.h and conn_int.h. This file knows
// no socket, TLS or WebSocket: the backend (conn_sock.c) moves the
// bytes, and a layer (conn_ws.c) may stand
// between those bytes and the MQTT frames cut here.
#include "nng/transport/conn.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nng/codec/mqtt_codec.h"
#include "nng/core/log.h"
#include "nng/transport/conn_int.h"

static atomic_long live_conns;

static void destroy_job(workq_job *job);
static void flush_job(workq_job *job);
static void tag_done(nmq_conn *c);

// Formats an IPv4 address and port; see conn_int.h. inet_ntop() would keep
// one more 64 KiB window of libc resident from the first connection on.
void conn_format_v4(const void *addr, unsigned port, char *buf, size_t len)
{
	const uint8_t *b = addr;
	snprintf(buf, len, "%u.%u.%u.%u:%u", b[0], b[1], b[2], b[3], port);
}

// Stores the peer address text; see conn_int.h.
void conn_set_peer(nmq_conn *c, const char *peer)
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

// Allocates the common part; see conn_int.h.
nmq_conn *conn_new(const conn_env *env, const conn_backend *be)
{
	nmq_conn *c = calloc(1, sizeof(*c));
	if (c == NULL) {
		return NULL;
	}
	nmq_mutex_init(&c->mtx);
	atomic_init(&c->refs, 1);
	c->be         = be;
	c->fd         = -1;
	c->owner      = -1;
	c->env        = env;
	c->aux_job.fn = flush_job;
	atomic_fetch_add(&live_conns, 1);
	return c;
}

// Undoes conn_new; see conn_int.h.
void conn_new_undo(nmq_conn *c)
{
	nmq_mutex_destroy(&c->mtx);
	free(c->rx);
	free(c);
	atomic_fetch_sub(&live_conns, 1);
}

// Sets the upper layer and starts reading.
void conn_start(nmq_conn *c, const conn_ops *ops, void *upper)
{
	c->ops   = ops;
	c->upper = upper;
	conn_hold(c); // for the receive path
	nmq_mutex_lock(&c->mtx);
	c->be->start(c);
	nmq_mutex_unlock(&c->mtx);
}

void conn_hold(nmq_conn *c)
{
	atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
}

// Posts one of the connection's jobs to its owner worker, or any.
static void post(nmq_conn *c, workq_job *job)
{
	if (c->owner >= 0) {
		workq_post_to(c->env->wq, c->owner, job);
	} else {
		workq_post(c->env->wq, job);
	}
}

// Drops a reference; the last one schedules destruction on a worker.
void conn_release(nmq_conn *c)
{
	if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1) {
		// A plain socket is destroyed by its own worker, after any event
		// for it in the current batch has been handled.
		c->aux_job.fn = destroy_job;
		post(c, &c->aux_job);
	}
}

// Frees the connection; runs on a worker, never in an aio callback (and,
// for a plain socket, on its owner).
static void destroy_job(workq_job *job)
{
	nmq_conn *c = (nmq_conn *)((char *)job - offsetof(nmq_conn, aux_job));
	c->be->fini(c);
	txbuf_fini(&c->fill);
	if (c->layer != NULL) {
		c->layer->ops->fini(c);
	}
	if (c->peer_heap) {
		free(c->peer.heap);
	}
	tag_done(c);
	conn_new_undo(c);
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

// Runs a counted writable() upcall; see conn_int.h.
void conn_writable_upcall(nmq_conn *c)
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

_Atomic uint64_t conn_rx_bytes_total, conn_tx_bytes_total;

uint64_t conn_bytes_received(void)
{
	return atomic_load_explicit(&conn_rx_bytes_total, memory_order_relaxed);
}

uint64_t conn_bytes_sent(void)
{
	return atomic_load_explicit(&conn_tx_bytes_total, memory_order_relaxed);
}

// Closes the connection once; see conn_int.h.
void conn_close_locked(nmq_conn *c)
{
	if (c->closing) {
		return;
	}
	c->closing = true;
	c->be->close(c);
}

// Ends a drain whose output is all out; see conn_int.h.
void conn_drain_done_locked(nmq_conn *c)
{
	if (c->closing || c->lingering) {
		return;
	}
	if (c->be->linger == NULL || !c->be->linger(c)) {
		conn_close_locked(c);
	}
}

void conn_close(nmq_conn *c)
{
	nmq_mutex_lock(&c->mtx);
	conn_close_locked(c);
	txbuf_reset(&c->fill);
	nmq_mutex_unlock(&c->mtx);
}

void conn_shutdown(nmq_conn *c)
{
	nmq_mutex_lock(&c->mtx);
	// A layer may end with a goodbye of its own (a WebSocket close frame)
	// after what is queued, e.g. a DISCONNECT.
	bool queued = c->layer != NULL && !c->closing && c->layer->ops->shutdown(c);
	c->draining = true;
	if (!c->tx_busy && c->fill.bytes == 0) {
		conn_drain_done_locked(c);
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
	if (c->rx_paused != paused) {
		c->rx_paused = paused;
		c->be->set_paused(c, paused);
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

int conn_owner(const nmq_conn *c)
{
	return c->owner;
}

// ---------------------------------------------------------------------------
// Receive path

// Ensures the receive buffer can hold `need` bytes; see conn_int.h.
bool conn_rx_reserve(nmq_conn *c, size_t need)
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

// Cuts and dispatches every complete frame (conn_dispatch_frames).
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

// See conn_int.h.
bool conn_dispatch_frames(nmq_conn *c, const uint8_t *buf, size_t len, size_t *used, size_t *want)
{
	bool ok = dispatch_frames(c, buf, len, used, want);
	if (c->ops->frames_end != NULL) {
		c->ops->frames_end(c->upper);
	}
	return ok;
}

// Sizes the connection's buffer, which holds rx_len bytes, for the next
// read: the whole of an incomplete frame of `want` bytes at its start (0:
// unknown), or twice as much if the last read filled it (up to
// RX_GROW_MAX); always room for 64 more bytes; back to RX_INIT when little
// is pending. Returns false on allocation failure.
bool conn_rx_size(nmq_conn *c, size_t want)
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
		return conn_rx_reserve(c, target);
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
// large frame, or a bigger read if the last one filled it. A connection
// that reads into the worker's scratch buffer (rx_scratch) gives its
// buffer back when nothing is pending; others keep RX_INIT bytes for the
// next read. A layer decodes its own framing first. Returns false if
// reading must stop.
bool conn_rx_dispatch(nmq_conn *c)
{
	size_t off;
	size_t want;
	if (c->layer != NULL) {
		return c->layer->ops->rx(c);
	}
	if (!conn_dispatch_frames(c, c->rx, c->rx_len, &off, &want)) {
		return false;
	}
	if (off > 0) {
		memmove(c->rx, c->rx + off, c->rx_len - off);
		c->rx_len -= off;
	}
	if (c->rx_scratch && c->rx_len == 0) {
		free(c->rx);
		c->rx     = NULL;
		c->rx_cap = 0;
		return true;
	}
	return conn_rx_size(c, want);
}

// Ends the receive path; see conn_int.h.
void conn_rx_finish(nmq_conn *c, bool failed)
{
	nmq_mutex_lock(&c->mtx);
	if (failed && !c->draining) {
		conn_close_locked(c);
	}
	bool notify        = !c->closed_notified;
	c->closed_notified = true;
	c->reading_done    = true;
	c->be->rx_done(c);
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

// ---------------------------------------------------------------------------
// Outbound queue

void conn_tx_lock(nmq_conn *c)
{
	nmq_mutex_lock(&c->mtx);
}

void conn_tx_unlock(nmq_conn *c)
{
	nmq_mutex_unlock(&c->mtx);
}

// Returns n writable bytes for the upper layer (behind a layer's frame
// header when one must be started), or NULL. A lingering connection has
// sent its last packet: nothing more goes out (a plain socket is
// half-closed, and a write would fail and close it at once, resetting a
// peer that is still sending).
uint8_t *conn_tx_reserve(nmq_conn *c, size_t n)
{
	if (c->closing || c->lingering || (c->layer != NULL && !c->layer->ops->tx_begin(c))) {
		return NULL;
	}
	return txbuf_reserve(&c->fill, n);
}

// Commits n bytes written after conn_tx_reserve.
void conn_tx_commit(nmq_conn *c, size_t n)
{
	if (!txbuf_commit(&c->fill, n)) {
		log_warn_rl("conn", "peer=%s event=closed reason=\"out of memory for output\"",
		    conn_peer(c));
		conn_close_locked(c);
	}
}

// Queues bytes inside msg by reference.
bool conn_tx_ref(nmq_conn *c, nmq_msg *msg, const uint8_t *p, size_t len)
{
	if (c->closing || c->lingering) {
		return false;
	}
	if (len == 0) {
		return true;
	}
	if (c->layer != NULL && !c->layer->ops->tx_begin(c)) {
		return false;
	}
	return txbuf_ref(&c->fill, msg, p, len);
}

size_t conn_tx_queued(nmq_conn *c)
{
	return c->fill.bytes + c->tx_sending;
}

bool conn_tx_full(nmq_conn *c)
{
	return c->closing || conn_tx_queued(c) >= c->env->tx_high_water;
}

// Starts sending if nothing is in progress. Returns true when the caller
// should give the upper layer a writable() upcall (everything went out at
// once). Caller holds mtx.
static bool tx_kick_locked(nmq_conn *c)
{
	if (c->tx_busy || c->fill.bytes == 0 || c->closing) {
		return false;
	}
	return c->be->write(c);
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
		conn_writable_upcall(c);
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
		    c->env->wq, c->owner >= 0 ? c->owner : workq_pick(c->env->wq), &c->aux_job);
	}
}

static void flush_job(workq_job *job)
{
	flush_later_cb((nmq_conn *)((char *)job - offsetof(nmq_conn, aux_job)));
}
