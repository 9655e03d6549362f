// The NNG-stream backend of nmq_conn (tls+tcp:// and, with the WebSocket
// layer, wss://); see conn_int.h.
//
// The receive callback (an NNG task thread) only records the result and
// posts the connection's job to a worker, which hands the frames up and
// re-arms the receive: input is never read faster than it is processed.
// Sends are NNG aios over a second buffer (send) while fill collects the
// next batch; their completions continue the output.
//
// Lingering close: NNG streams have no half-close, so when a drain has
// written its last packet the stream stays open and its input is received
// and discarded until the peer closes or fails, LINGER_BYTES have been
// discarded or LINGER_MS have passed (the receive aio's timeout), and only
// then closed: the peer reads the last packet (a TLS record) instead of
// losing it to a reset caused by input we never read. Without the FIN of
// a half-close a peer that neither reads nor closes keeps the stream until
// the time bound. The bound does not rest on NNG ending a receive that is
// cancelled or times out (in NNG 1.5.2 a TLS receive whose lower TCP
// receive is not in flight is ended neither by nng_aio_cancel nor by its
// timeout): a timerfd in a worker's epoll set closes the stream at
// LINGER_MS, which ends any receive; it holds a reference until it fires.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "nng/core/log.h"
#include "nng/transport/conn_int.h"

#define STREAM_IOV_MAX 8 // NNG's limit per aio
#define LINGER_MS      2000 // longest lingering close
#define LINGER_BYTES   (64 * 1024) // input discarded at most while lingering

struct conn_stream_side {
	nng_stream *s;
	nng_aio    *rx_aio;
	nng_aio    *tx_aio;
	txbuf       send; // the batch being sent while fill collects the next
	nng_iov     iov[STREAM_IOV_MAX];
	// Lingering close (mtx): when it ends, and what was discarded.
	uint64_t linger_end; // ms on CLOCK_MONOTONIC
	size_t   discarded;
	bool     linger_rx; // the discarding receives have begun
	// The linger's deadline: a timerfd on worker linger_w, holding a
	// reference until it fires (its handler then removes it).
	nmq_conn *c;
	workq_io  linger_io;
	int       linger_tfd;
	int       linger_w;
};

// The stream side of c (c->be_state).
#define NS(c) ((struct conn_stream_side *)(c)->be_state)

static void rx_cb(void *arg);

// Milliseconds on CLOCK_MONOTONIC.
static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}
static void tx_cb(void *arg);
static void rx_job(workq_job *job);

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
		conn_format_v4(&sa.s_in.sa_addr, ntohs(sa.s_in.sa_port), buf, len);
	} else if (sa.s_family == NNG_AF_INET6) {
		inet_ntop(AF_INET6, sa.s_in6.sa_addr, a, sizeof(a));
		snprintf(buf, len, "[%s]:%u", a, ntohs(sa.s_in6.sa_port));
	}
}

// Returns a new connection for stream s, or NULL.
nmq_conn *conn_alloc(nng_stream *s, const conn_env *env)
{
	nmq_conn *c = conn_new(env, &conn_stream_backend);
	if (c == NULL) {
		return NULL;
	}
	c->job.fn                   = rx_job;
	c->rx_cap                   = RX_INIT;
	c->rx                       = malloc(c->rx_cap);
	struct conn_stream_side *ns = calloc(1, sizeof(*ns));
	c->be_state                 = ns;
	if (c->rx == NULL || ns == NULL || nng_aio_alloc(&ns->rx_aio, rx_cb, c) != 0
	    || nng_aio_alloc(&ns->tx_aio, tx_cb, c) != 0) {
		if (ns != NULL && ns->rx_aio != NULL) {
			nng_aio_free(ns->rx_aio);
		}
		free(ns);
		conn_new_undo(c);
		return NULL;
	}
	NS(c)->s          = s;
	NS(c)->c          = c;
	NS(c)->linger_tfd = -1;
	char peer[64];
	format_peer(s, peer, sizeof(peer));
	conn_set_peer(c, peer);
	return c;
}

nng_stream *conn_stream(nmq_conn *c)
{
	return c->be == &conn_stream_backend ? NS(c)->s : NULL;
}

// Submits a receive into the free part of the buffer. Caller holds mtx.
static void stream_start(nmq_conn *c)
{
	nng_iov iov;
	iov.iov_buf = c->rx + c->rx_len;
	iov.iov_len = c->rx_cap - c->rx_len;
	nng_aio_set_iov(NS(c)->rx_aio, 1, &iov);
	nng_stream_recv(NS(c)->s, NS(c)->rx_aio);
}

// A paused stream parks its receive path after the batch being handled
// (rx_job); resuming posts the receive again, or ends the path if the
// connection closed meanwhile.
static void stream_set_paused(nmq_conn *c, bool paused)
{
	if (paused || !c->rx_parked) {
		return;
	}
	c->rx_parked = false;
	if (!c->closing && !c->draining) {
		stream_start(c);
	} else {
		c->rx_result = NNG_ECLOSED;
		workq_post(c->env->wq, &c->job);
	}
}

static void stream_close(nmq_conn *c)
{
	if (c->rx_parked) {
		// The receive path is parked by a pause: let it end now.
		c->rx_parked = false;
		c->rx_result = NNG_ECLOSED;
		workq_post(c->env->wq, &c->job);
	}
	nng_stream_close(NS(c)->s);
}

static void stream_rx_done(nmq_conn *c)
{
	(void)c;
}

static void stream_fini(nmq_conn *c)
{
	nng_stream_close(NS(c)->s);
	nng_aio_free(NS(c)->rx_aio);
	nng_aio_free(NS(c)->tx_aio);
	nng_stream_free(NS(c)->s);
	txbuf_fini(&NS(c)->send);
	free(NS(c));
}

// Receive completion (NNG task thread): record and hand to a worker.
static void rx_cb(void *arg)
{
	nmq_conn *c  = arg;
	c->rx_result = nng_aio_result(NS(c)->rx_aio);
	if (c->rx_result == 0) {
		size_t n = nng_aio_count(NS(c)->rx_aio);
		conn_count_rx(n);
		if (n == 0) {
			c->rx_result = NNG_ECLOSED;
		}
		c->rx_filled = (n == c->rx_cap - c->rx_len);
		c->rx_len += n;
	}
	workq_post(c->env->wq, &c->job);
}

// Posts a receive whose bytes will be discarded, with the linger's
// remaining time as its timeout. Caller holds mtx.
static void linger_recv(nmq_conn *c)
{
	uint64_t now = now_ms();
	uint64_t end = NS(c)->linger_end;
	c->rx_len    = 0;
	nng_iov iov  = { .iov_buf = c->rx, .iov_len = c->rx_cap };
	nng_aio_set_iov(NS(c)->rx_aio, 1, &iov);
	nng_aio_set_timeout(NS(c)->rx_aio, end > now ? (nng_duration)(end - now) : 1);
	nng_stream_recv(NS(c)->s, NS(c)->rx_aio);
}

// Begins the discarding receives once (stream_linger or the end of the
// receive path, whichever sees the other done). Caller holds mtx.
static void linger_rx_start(nmq_conn *c)
{
	if (!NS(c)->linger_rx) {
		NS(c)->linger_rx = true;
		linger_recv(c);
	}
}

// A discarding receive completed (worker): go on, or end the linger at the
// peer's close or error, the timeout or LINGER_BYTES.
static void linger_rx_job(nmq_conn *c)
{
	nmq_mutex_lock(&c->mtx);
	NS(c)->discarded += c->rx_len;
	if (c->rx_result == 0 && !c->closing && NS(c)->discarded < LINGER_BYTES
	    && now_ms() < NS(c)->linger_end) {
		linger_recv(c);
		nmq_mutex_unlock(&c->mtx);
		return;
	}
	c->lingering = false;
	conn_close_locked(c);
	nmq_mutex_unlock(&c->mtx);
	conn_release(c); // the linger's reference
}

// The linger's deadline (worker linger_w): closes the stream if it still
// lingers, which ends a receive that NNG did not end (the receive path or
// the discarding receive then ends the linger), and drops the timer.
static void linger_timer_io(workq_io *io, uint32_t events)
{
	struct conn_stream_side *ns = (struct conn_stream_side *)((char *)io
	    - offsetof(struct conn_stream_side, linger_io));
	nmq_conn                *c  = ns->c;
	(void)events;
	nmq_mutex_lock(&c->mtx);
	if (c->lingering && !c->closing) {
		log_debug("conn", "peer=%s event=linger_deadline", conn_peer(c));
		conn_close_locked(c);
	}
	workq_io_del(c->env->wq, ns->linger_w, ns->linger_tfd);
	close(ns->linger_tfd);
	nmq_mutex_unlock(&c->mtx);
	conn_release(c); // the timer's reference
}

// Arms the linger's deadline, once. Returns false when it cannot (out of
// descriptors): the caller closes at once. Caller holds mtx.
static bool linger_timer_start(nmq_conn *c)
{
	struct conn_stream_side *ns  = NS(c);
	struct itimerspec        its = { .it_value = {
		                             .tv_sec  = LINGER_MS / 1000,
		                             .tv_nsec = (LINGER_MS % 1000) * 1000000L,
                                  } };
	if (ns->linger_tfd >= 0) {
		return false; // lingered once already
	}
	int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (tfd >= 0 && timerfd_settime(tfd, 0, &its, NULL) == 0) {
		ns->linger_io.fn = linger_timer_io;
		ns->linger_tfd   = tfd;
		ns->linger_w     = workq_pick(c->env->wq);
		conn_hold(c); // the timer's
		if (workq_io_add(c->env->wq, ns->linger_w, tfd, &ns->linger_io, EPOLLIN)
		    == NMQ_OK) {
			return true;
		}
		// Not the last reference: the caller's path holds one.
		atomic_fetch_sub_explicit(&c->refs, 1, memory_order_relaxed);
		ns->linger_tfd = -1;
	}
	log_debug(
	    "conn", "peer=%s event=linger_skipped reason=\"%s\"", conn_peer(c), strerror(errno));
	if (tfd >= 0) {
		close(tfd);
	}
	return false;
}

// Starts a lingering close; see conn_int.h and the top of this file.
static bool stream_linger(nmq_conn *c)
{
	if (!linger_timer_start(c)) {
		return false;
	}
	NS(c)->linger_end = now_ms() + LINGER_MS;
	NS(c)->discarded  = 0;
	c->lingering      = true;
	conn_hold(c);
	if (c->reading_done) {
		linger_rx_start(c);
	} else if (c->rx_parked) {
		// Parked by a pause: let the receive path end now; rx_job then
		// starts discarding.
		c->rx_parked = false;
		c->rx_result = NNG_ECLOSED;
		workq_post(c->env->wq, &c->job);
	} else {
		// A receive may be posted for input a peer told to go away need
		// not send: cancel it, so that the receive path ends (and the
		// upper layer hears closed()) now; rx_job then starts
		// discarding. A no-op while rx_job runs: it sees the drain.
		nng_aio_cancel(NS(c)->rx_aio);
	}
	return true;
}

// The worker side of a receive: dispatch frames, then read again or
// finish (and, once a lingering close has begun, discard).
static void rx_job(workq_job *job)
{
	nmq_conn *c  = (nmq_conn *)((char *)job - offsetof(nmq_conn, job));
	bool      go = c->rx_result == 0;
	nmq_mutex_lock(&c->mtx);
	if (c->lingering && c->reading_done) {
		nmq_mutex_unlock(&c->mtx);
		linger_rx_job(c);
		return;
	}
	if (c->closing || c->draining) {
		go = false;
	}
	nmq_mutex_unlock(&c->mtx);
	if (go) {
		go = conn_rx_dispatch(c);
	}
	nmq_mutex_lock(&c->mtx);
	if (go && !c->closing && !c->draining) {
		if (c->rx_paused) {
			c->rx_parked = true;
		} else {
			stream_start(c);
		}
		nmq_mutex_unlock(&c->mtx);
		return;
	}
	nmq_mutex_unlock(&c->mtx);
	conn_hold(c);
	conn_rx_finish(c, c->rx_result != 0 || !go);
	bool linger_over = false;
	nmq_mutex_lock(&c->mtx);
	if (c->lingering && !c->closing) {
		linger_rx_start(c);
	} else if (c->lingering && !NS(c)->linger_rx) {
		// Closed (conn_close) before the discarding began: nothing will
		// end the linger but this.
		c->lingering = false;
		linger_over  = true;
	}
	nmq_mutex_unlock(&c->mtx);
	if (linger_over) {
		conn_release(c); // the linger's reference
	}
	conn_release(c);
}

// Builds the iov list from the send buffer's current position and submits
// it. Caller holds mtx.
static void submit_send(nmq_conn *c)
{
	txbuf   *b   = &NS(c)->send;
	unsigned n   = 0;
	size_t   off = c->send_off;
	for (size_t i = c->send_seg; i < b->nsegs && n < STREAM_IOV_MAX; i++) {
		tx_seg        *s      = &b->segs[i];
		const uint8_t *base   = s->ref != NULL ? s->p : b->arena + s->off;
		NS(c)->iov[n].iov_buf = (void *)(base + off);
		NS(c)->iov[n].iov_len = s->len - off;
		off                   = 0;
		n++;
	}
	nng_aio_set_iov(NS(c)->tx_aio, n, NS(c)->iov);
	nng_stream_send(NS(c)->s, NS(c)->tx_aio);
}

// Swaps fill and send and starts sending. Caller holds mtx.
static void start_send(nmq_conn *c)
{
	conn_tx_seal(c);
	txbuf t       = NS(c)->send;
	NS(c)->send   = c->fill;
	c->fill       = t;
	c->send_seg   = 0;
	c->send_off   = 0;
	c->tx_sending = (uint32_t)NS(c)->send.bytes; // below tx_high_water + one batch
	submit_send(c);
}

// Starts a send of the fill buffer; it completes in tx_cb (never at once).
static bool stream_write(nmq_conn *c)
{
	c->tx_busy = true;
	conn_hold(c);
	start_send(c);
	return false;
}

// Send completion (NNG task thread): advance over what was written, resend
// the rest of a short send, then the next batch.
static void tx_cb(void *arg)
{
	nmq_conn *c   = arg;
	int       rv  = nng_aio_result(NS(c)->tx_aio);
	size_t    n   = nng_aio_count(NS(c)->tx_aio);
	bool      end = false;
	conn_count_tx(n);
	bool notify = false;
	nmq_mutex_lock(&c->mtx);
	if (rv != 0) {
		conn_close_locked(c);
		txbuf_reset(&NS(c)->send);
		txbuf_reset(&c->fill);
		c->tx_sending = 0;
		c->tx_busy    = false;
		nmq_mutex_unlock(&c->mtx);
		conn_release(c);
		return;
	}
	txbuf *b = &NS(c)->send;
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
	c->tx_sending = 0;
	if (c->fill.bytes > 0 && !c->closing) {
		start_send(c);
	} else {
		c->tx_busy = false;
		end        = true;
		if (c->draining) {
			conn_drain_done_locked(c);
		}
	}
	notify = !c->closing && !c->draining && !c->closed_notified
	    && c->fill.bytes < c->env->tx_high_water / 2;
	if (notify) {
		c->upcalls++;
	}
	nmq_mutex_unlock(&c->mtx);
	if (notify) {
		conn_writable_upcall(c);
	}
	if (end) {
		conn_release(c);
	}
}

const conn_backend conn_stream_backend = {
	.start      = stream_start,
	.set_paused = stream_set_paused,
	.write      = stream_write,
	.close      = stream_close,
	.rx_done    = stream_rx_done,
	.linger     = stream_linger,
	.fini       = stream_fini,
};
