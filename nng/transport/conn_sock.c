// The plain-socket backend of nmq_conn (tcp://, ws://, and tls+tcp://,
// wss:// with TLS on the socket; a bridge's outbound link, plain or TLS);
// see conn_int.h.
//
// The socket sits in its owner worker's epoll set (workq.h): the owner
// reads and dispatches frames when it is readable, a bounded number of
// reads per event, into the worker's scratch buffer while nothing is
// pending. Output is written with writev() straight from the fill buffer
// by whichever thread flushes it (under the connection's mutex): a plain
// socket needs no second buffer, since new output is appended behind the
// part still being written and arena segments are addressed by offset.
// Only a full socket arms EPOLLOUT on the owner.
// docs/decisions/0003-plain-tcp-event-loops.md.
//
// Lingering close: when a drain (conn_shutdown) has written its last
// packet, e.g. a DISCONNECT with a reason code, the socket is half-closed
// (shutdown(SHUT_WR): the peer reads the packet, then end of stream) and
// its input is read and discarded until the peer closes, LINGER_BYTES have
// been discarded or LINGER_MS have passed (a timerfd in the owner's epoll
// set), whichever comes first; only then is it closed. Closing at once
// with unread input would send a reset, which makes the peer's stack drop
// the reason code it has not read yet. The linger holds a reference.
//
// TLS (conn_tls.c, docs/decisions/0019-tls-on-own-event-loops.md): a
// socket whose handshake is over carries its mbed TLS state in the
// backend's extension; reads decrypt (into the first half of the scratch
// buffer, reading ahead into the second) and writes encrypt, on the same
// paths and under the same rules as plain bytes. Input that TLS buffered
// above the socket is invisible to epoll, so the owner is given a read job
// (rd_job) whenever such input is left behind: at start, when a read
// yields, and when a pause ends. A close sends close_notify first.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include "nng/core/log.h"
#include "nng/transport/conn_int.h"

#define SOCK_IOV_MAX 64 // per writev
#define SOCK_READS   8 // reads per readiness event before yielding
#define LINGER_MS    2000 // longest lingering close
#define LINGER_BYTES (64 * 1024) // input discarded at most while lingering

// The backend's extension (c->be_state): a lingering close, or TLS (from
// the start), owned by the owner worker; freed with the connection.
typedef struct sock_linger {
	nmq_conn *c;
	int       tfd; // the linger's deadline; -1 when none or over
	workq_io  tio;
	size_t    discarded;
	bool      job_held; // (mtx) sock_job was posted with a reference
	bool      lingered; // a lingering close has begun (once only)
	conn_tls *tls; // NULL for plain bytes
	workq_job rd_job; // a read without readiness (TLS), holding a reference
	bool      rd_posted; // (mtx)
} sock_linger;

// The TLS state of c, or NULL.
static inline conn_tls *sock_tls(nmq_conn *c)
{
	sock_linger *x = c->be_state;
	return x != NULL ? x->tls : NULL;
}

static void sock_io(workq_io *io, uint32_t events);
static void sock_job(workq_job *job);
static void sock_rd_job(workq_job *job);

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
		conn_format_v4(&in->sin_addr, ntohs(in->sin_port), buf, len);
	} else if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
		inet_ntop(AF_INET6, &in6->sin6_addr, a, sizeof(a));
		snprintf(buf, len, "[%s]:%u", a, ntohs(in6->sin6_port));
	}
}

// Returns a new connection for an accepted plain TCP socket (non-blocking),
// or NULL (the caller still owns fd).
nmq_conn *conn_alloc_fd(int fd, const conn_env *env)
{
	nmq_conn *c = conn_new(env, &conn_sock_backend);
	if (c == NULL) {
		return NULL;
	}
	c->fd     = fd;
	c->owner  = workq_pick(env->wq);
	c->io.fn  = sock_io;
	c->job.fn = sock_job;
	// Reads go to the worker's scratch buffer; a buffer of its own is
	// allocated only for a frame that is still incomplete.
	c->rx_scratch = true;
	char peer[64];
	format_peer_fd(fd, peer, sizeof(peer));
	conn_set_peer(c, peer);
	return c;
}

// Returns a connection for a socket whose TLS handshake is over; see
// conn_tls.h.
nmq_conn *conn_alloc_tls(int fd, conn_tls *t, const conn_env *env)
{
	sock_linger *x = calloc(1, sizeof(*x));
	if (x == NULL) {
		return NULL;
	}
	nmq_conn *c = conn_alloc_fd(fd, env);
	if (c == NULL) {
		free(x);
		return NULL;
	}
	x->c         = c;
	x->tfd       = -1;
	x->tls       = t;
	x->rd_job.fn = sock_rd_job;
	c->be_state  = x;
	return c;
}

// Copies the TLS peer record of c; see conn_tls.h.
bool conn_tls_peer(nmq_conn *c, tls_peer *p)
{
	conn_tls *t = c->be == &conn_sock_backend ? sock_tls(c) : NULL;
	if (t == NULL) {
		memset(p, 0, sizeof(*p));
		return false;
	}
	conn_tls_peer_of(t, p);
	return true;
}

const tls_peer *conn_tls_peer_ref(nmq_conn *c)
{
	conn_tls *t = c->be == &conn_sock_backend ? sock_tls(c) : NULL;
	return t != NULL ? conn_tls_peer_at(t) : NULL;
}

// Posts a read to the owner (TLS input buffered above the socket), once.
// Mutex held.
static void sock_rd_kick_locked(nmq_conn *c)
{
	sock_linger *x = c->be_state;
	if (x->rd_posted || c->reading_done || c->rx_paused) {
		return;
	}
	x->rd_posted = true;
	conn_hold(c);
	workq_post_to(c->env->wq, c->owner, &x->rd_job);
}

// Kicks a read if TLS left input above the socket (or failed, so that the
// receive path sees it). The owner, without the mutex.
static void sock_rd_check(nmq_conn *c)
{
	conn_tls *t = sock_tls(c);
	if (t == NULL) {
		return;
	}
	nmq_mutex_lock(&c->mtx);
	if (conn_tls_pending(t)) {
		sock_rd_kick_locked(c);
	}
	nmq_mutex_unlock(&c->mtx);
}

// A read without readiness (the owner).
static void sock_rd_job(workq_job *job)
{
	sock_linger *x = (sock_linger *)((char *)job - offsetof(sock_linger, rd_job));
	nmq_conn    *c = x->c;
	nmq_mutex_lock(&c->mtx);
	x->rd_posted = false;
	nmq_mutex_unlock(&c->mtx);
	sock_io(&c->io, EPOLLIN);
	conn_release(c); // the job's reference
}

// Watches the socket for input.
static void sock_start(nmq_conn *c)
{
	c->ep_events = EPOLLIN | EPOLLRDHUP;
	if (workq_io_add(c->env->wq, c->owner, c->fd, &c->io, c->ep_events) == NMQ_OK) {
		c->ep_added = true;
		if (sock_tls(c) != NULL) {
			// The handshake may have read the first MQTT bytes.
			sock_rd_kick_locked(c);
		}
	} else {
		log_warn_rl("conn", "peer=%s event=closed reason=\"epoll: %s\"", conn_peer(c),
		    strerror(errno));
		// Cannot watch it: let the receive path end at once.
		workq_post_to(c->env->wq, c->owner, &c->job);
	}
}

// Ends the receive path on the owner: one that could not start, or one
// that a lingering close cuts short (it holds a reference then, and the
// path may have ended meanwhile on its own).
static void sock_job(workq_job *job)
{
	nmq_conn    *c  = (nmq_conn *)((char *)job - offsetof(nmq_conn, job));
	sock_linger *lg = c->be_state;
	nmq_mutex_lock(&c->mtx);
	bool lingering = c->lingering;
	bool done      = c->reading_done;
	// The reference was taken when the job was posted; the linger may have
	// ended since (the peer closed first), so it is not c->lingering that
	// says whether to drop it.
	bool held = lg != NULL && lg->job_held;
	if (held) {
		lg->job_held = false;
	}
	nmq_mutex_unlock(&c->mtx);
	if (!done) {
		conn_rx_finish(c, !lingering);
	}
	if (held) {
		conn_release(c); // the job's reference
	}
}

// Stops or resumes watching for input.
static void sock_set_paused(nmq_conn *c, bool paused)
{
	if (!c->ep_added || c->reading_done || c->lingering) {
		return;
	}
	if (paused) {
		c->ep_events &= ~(uint32_t)(EPOLLIN | EPOLLRDHUP);
	} else {
		c->ep_events |= EPOLLIN | EPOLLRDHUP;
	}
	workq_io_mod(c->env->wq, c->owner, c->fd, &c->io, c->ep_events);
	if (!paused && sock_tls(c) != NULL && conn_tls_pending(sock_tls(c))) {
		sock_rd_kick_locked(c);
	}
}

// The owner sees the hang-up and ends the receive path; the descriptor is
// closed only when the connection is destroyed.
static void sock_close(nmq_conn *c)
{
	if (sock_tls(c) != NULL) {
		conn_tls_close_notify(sock_tls(c));
	}
	shutdown(c->fd, SHUT_RDWR);
}

// Stops reading; keeps watching for writability while a drain still has
// output to send.
static void sock_rx_done(nmq_conn *c)
{
	if (c->lingering) {
		// Keep reading, to discard.
		c->ep_events = EPOLLIN | EPOLLRDHUP;
		if (c->ep_added) {
			workq_io_mod(c->env->wq, c->owner, c->fd, &c->io, c->ep_events);
		}
		return;
	}
	if (!c->ep_added) {
		return;
	}
	if (c->closing || !c->tx_busy) {
		workq_io_del(c->env->wq, c->owner, c->fd);
		c->ep_added = false;
	} else {
		c->ep_events = EPOLLOUT;
		workq_io_mod(c->env->wq, c->owner, c->fd, &c->io, c->ep_events);
	}
}

static void sock_fini(nmq_conn *c)
{
	sock_linger *lg = c->be_state;
	if (c->ep_added) {
		workq_io_del(c->env->wq, c->owner, c->fd);
	}
	close(c->fd);
	if (lg != NULL) {
		if (lg->tfd >= 0) {
			workq_io_del(c->env->wq, c->owner, lg->tfd);
			close(lg->tfd);
		}
		conn_tls_free(lg->tls);
		free(lg);
	}
}

// Ends a lingering close (the owner): stop watching, close, drop the
// linger's reference. The state stays until the connection is freed, since
// an event for it may still be pending in this batch.
static void sock_linger_end(nmq_conn *c)
{
	sock_linger *lg = c->be_state;
	nmq_mutex_lock(&c->mtx);
	if (!c->lingering) {
		nmq_mutex_unlock(&c->mtx);
		return;
	}
	c->lingering = false;
	workq_io_del(c->env->wq, c->owner, lg->tfd);
	close(lg->tfd);
	lg->tfd = -1;
	if (c->ep_added && c->reading_done) {
		workq_io_del(c->env->wq, c->owner, c->fd);
		c->ep_added = false;
	}
	conn_close_locked(c);
	nmq_mutex_unlock(&c->mtx);
	conn_release(c); // the linger's reference
}

// The linger's deadline (the owner, on the timer's readiness).
static void sock_linger_timer_io(workq_io *io, uint32_t events)
{
	sock_linger *lg = (sock_linger *)((char *)io - offsetof(sock_linger, tio));
	(void)events;
	sock_linger_end(lg->c);
}

// Reads and discards what the peer sends while lingering (the owner); ends
// the linger at the peer's end of stream, an error or LINGER_BYTES.
static void sock_discard(nmq_conn *c)
{
	sock_linger *lg = c->be_state;
	for (;;) {
		size_t   room;
		uint8_t *buf = workq_scratch(&room);
		ssize_t  n   = read(c->fd, buf, room);
		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			return;
		}
		if (n <= 0) {
			break;
		}
		lg->discarded += (size_t)n;
		if (lg->discarded >= LINGER_BYTES) {
			break;
		}
	}
	sock_linger_end(c);
}

// Starts a lingering close; see conn_int.h and the top of this file.
static bool sock_linger_start(nmq_conn *c)
{
	sock_linger      *lg    = c->be_state;
	struct itimerspec its   = { .it_value = {
		                        .tv_sec  = LINGER_MS / 1000,
		                        .tv_nsec = (LINGER_MS % 1000) * 1000000L,
                                  } };
	bool              fresh = lg == NULL;
	if (lg != NULL && lg->lingered) {
		return false; // lingered once already
	}
	if (fresh && (lg = calloc(1, sizeof(*lg))) == NULL) {
		return false;
	}
	lg->c      = c;
	lg->tio.fn = sock_linger_timer_io;
	lg->tfd    = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (lg->tls != NULL) {
		// The last record is out: say goodbye before the FIN.
		conn_tls_close_notify(lg->tls);
	}
	if (lg->tfd < 0 || timerfd_settime(lg->tfd, 0, &its, NULL) != 0
	    || shutdown(c->fd, SHUT_WR) != 0
	    || workq_io_add(c->env->wq, c->owner, lg->tfd, &lg->tio, EPOLLIN) != NMQ_OK) {
		// Out of descriptors, or the peer is gone already: close now.
		log_debug("conn", "peer=%s event=linger_skipped reason=\"%s\"", conn_peer(c),
		    strerror(errno));
		if (lg->tfd >= 0) {
			close(lg->tfd);
			lg->tfd = -1;
		}
		if (fresh) {
			free(lg);
		}
		return false;
	}
	lg->lingered = true;
	c->be_state  = lg;
	c->lingering = true;
	conn_hold(c);
	// Watch for input to discard.
	c->ep_events = EPOLLIN | EPOLLRDHUP;
	if (c->ep_added) {
		workq_io_mod(c->env->wq, c->owner, c->fd, &c->io, c->ep_events);
	} else {
		c->ep_added
		    = workq_io_add(c->env->wq, c->owner, c->fd, &c->io, c->ep_events) == NMQ_OK;
	}
	if (!c->reading_done) {
		// The receive path may be idle, waiting for input that a peer
		// told to go away need not send: end it now on the owner (the
		// upper layer's closed() must not wait for the linger).
		conn_hold(c);
		lg->job_held = true;
		workq_post_to(c->env->wq, c->owner, &c->job);
	}
	return true;
}

// Writes as much of the queued output as the socket takes now. Arms
// EPOLLOUT for the rest (tx_busy), closes on an error. Returns true when
// everything went out, so the upper layer may queue more. Caller holds mtx.
static bool sock_write(nmq_conn *c)
{
	txbuf    *b   = &c->fill;
	conn_tls *tls = sock_tls(c);
	conn_tx_seal(c);
	while (c->send_seg < b->nsegs || (tls != NULL && conn_tls_unflushed(tls))) {
		struct iovec iov[SOCK_IOV_MAX];
		int          n     = 0;
		size_t       off   = c->send_off;
		size_t       bytes = 0;
		// TLS takes one record per call: gather no more than that.
		size_t limit = tls != NULL ? 16 * 1024 : SIZE_MAX;
		for (size_t i = c->send_seg; i < b->nsegs && n < SOCK_IOV_MAX && bytes < limit;
		     i++) {
			tx_seg        *sg   = &b->segs[i];
			const uint8_t *base = sg->ref != NULL ? sg->p : b->arena + sg->off;
			iov[n].iov_base     = (void *)(base + off);
			iov[n].iov_len      = sg->len - off;
			bytes += iov[n].iov_len;
			off = 0;
			n++;
		}
		ssize_t w;
		if (tls != NULL) {
			size_t took;
			int    e = conn_tls_send(tls, iov, n, &took);
			w        = e == 0 ? (ssize_t)took : -1;
			errno    = e;
		} else {
			w = writev(c->fd, iov, n);
		}
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
				    == NMQ_OK;
			} else if (!(c->ep_events & EPOLLOUT)) {
				c->ep_events |= EPOLLOUT;
				workq_io_mod(c->env->wq, c->owner, c->fd, &c->io, c->ep_events);
			}
			return false;
		}
		if (w > 0 && tls == NULL) {
			conn_count_tx((size_t)w);
		}
		if (w < 0) {
			conn_close_locked(c);
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
		conn_drain_done_locked(c);
		return false;
	}
	return !c->closing && !c->closed_notified;
}

// Reads into the worker's scratch buffer (nothing pending on c), dispatches
// the complete frames from there and keeps only an incomplete rest in the
// connection's own buffer. Returns the bytes read (0 end, -1 error or
// EAGAIN with errno set), and sets *stop when reading must stop.
static ssize_t read_scratch(nmq_conn *c, bool *stop)
{
	size_t    room;
	uint8_t  *buf = workq_scratch(&room);
	conn_tls *tls = sock_tls(c);
	ssize_t   n;
	if (tls != NULL) {
		// Plaintext in the first half, ciphertext read ahead in the second.
		room /= 2;
		n = conn_tls_recv(tls, &c->mtx, buf, room, buf + room, room);
	} else {
		n = read(c->fd, buf, room);
	}
	if (n <= 0) {
		return n;
	}
	if (tls == NULL) {
		conn_count_rx((size_t)n);
	}
	c->rx_filled = (size_t)n == room;
	size_t used;
	size_t want;
	if (!conn_dispatch_frames(c, buf, (size_t)n, &used, &want)) {
		*stop = true;
		return n;
	}
	size_t rest = (size_t)n - used;
	if (rest > 0) {
		size_t cap = want > rest + 64 ? want : rest + 64;
		if (cap < RX_INIT) {
			cap = RX_INIT;
		}
		if (!conn_rx_reserve(c, cap)) {
			*stop = true;
			return n;
		}
		memcpy(c->rx, buf + used, rest);
		c->rx_len = rest;
	}
	return n;
}

// Reads what the socket has (a bounded number of reads, then yields to the
// other connections of this worker) and dispatches the frames. Returns true
// if the receive path has ended.
static bool sock_read(nmq_conn *c)
{
	nmq_mutex_lock(&c->mtx);
	bool stop = c->closing || c->draining;
	nmq_mutex_unlock(&c->mtx);
	if (stop) {
		conn_rx_finish(c, c->closing);
		return true;
	}
	for (int i = 0; i < SOCK_READS; i++) {
		ssize_t n;
		bool    fail = false;
		if (c->rx_len == 0 && c->rx_scratch) {
			n = read_scratch(c, &fail);
		} else {
			size_t    room = c->rx_cap - c->rx_len;
			conn_tls *tls  = sock_tls(c);
			if (tls != NULL) {
				size_t   sroom;
				uint8_t *ra = workq_scratch(&sroom);
				n = conn_tls_recv(tls, &c->mtx, c->rx + c->rx_len, room, ra, sroom);
			} else {
				n = read(c->fd, c->rx + c->rx_len, room);
			}
			if (n > 0) {
				if (tls == NULL) {
					conn_count_rx((size_t)n);
				}
				c->rx_filled = (size_t)n == room;
				c->rx_len += (size_t)n;
				fail = !conn_rx_dispatch(c);
			}
		}
		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			return false;
		}
		if (n <= 0 || fail) {
			conn_rx_finish(c, true);
			return true;
		}
		nmq_mutex_lock(&c->mtx);
		stop        = c->closing || c->draining;
		bool paused = c->rx_paused;
		nmq_mutex_unlock(&c->mtx);
		if (stop) {
			conn_rx_finish(c, c->closing);
			return true;
		}
		if (paused) {
			return false;
		}
		if (!c->rx_filled) {
			sock_rd_check(c);
			return false; // the socket is most likely empty now
		}
	}
	sock_rd_check(c); // yielding with input left above the socket
	return false;
}

// Readiness of the socket (its owner worker).
static void sock_io(workq_io *io, uint32_t events)
{
	nmq_conn *c = (nmq_conn *)((char *)io - offsetof(nmq_conn, io));
	if (events & EPOLLOUT) {
		bool notify = false;
		nmq_mutex_lock(&c->mtx);
		if (c->tx_busy) {
			c->tx_busy = false;
			notify     = sock_write(c);
			if (notify) {
				c->upcalls++;
			}
		}
		nmq_mutex_unlock(&c->mtx);
		if (notify) {
			conn_writable_upcall(c);
		}
	}
	if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
		nmq_mutex_lock(&c->mtx);
		bool done   = c->reading_done;
		bool paused = c->rx_paused;
		nmq_mutex_unlock(&c->mtx);
		if (!done && (!paused || (events & (EPOLLHUP | EPOLLERR)))) {
			if (!sock_read(c)) {
				return; // still reading
			}
		} else if (!done) {
			return; // paused
		}
		nmq_mutex_lock(&c->mtx);
		bool lingering = c->lingering;
		nmq_mutex_unlock(&c->mtx);
		if (lingering) {
			sock_discard(c);
		} else if (done && (events & (EPOLLHUP | EPOLLERR))) {
			// Draining to a peer that went away: give up the output.
			nmq_mutex_lock(&c->mtx);
			conn_close_locked(c);
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

const conn_backend conn_sock_backend = {
	.start      = sock_start,
	.set_paused = sock_set_paused,
	.write      = sock_write,
	.close      = sock_close,
	.rx_done    = sock_rx_done,
	.linger     = sock_linger_start,
	.fini       = sock_fini,
};
