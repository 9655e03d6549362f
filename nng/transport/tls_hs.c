// The TLS handshake thread; see tls_hs.h.
//
// Submissions and cancellations come through an inbox (mutex, FIFO list,
// eventfd), so that a cancel is seen after every submission made before
// it. Running handshakes are in the thread's epoll set and on a list
// ordered by deadline (timeouts differ per listener, so a new one is
// inserted from the tail, where it nearly always belongs); the epoll wait
// ends at the earliest deadline. A handshake step runs as far as the
// socket allows (mbed TLS's state machine), so one slow client never
// holds the thread.
#include "nng/transport/tls_hs.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "nng/core/log.h"

#define HS_EVENTS 64
#define HS_BUF    (32 * 1024) // read-ahead room (at least CONN_TLS_RA_MIN)

typedef struct hs_cancel {
	void           *arg;
	pthread_mutex_t mtx;
	pthread_cond_t  cv;
	bool            done;
} hs_cancel;

// One handshake, or (cancel != NULL) a cancellation in the inbox.
typedef struct hs_item {
	struct hs_item    *next;
	struct hs_item    *prev;
	int                fd;
	conn_tls          *t;
	tls_engine_direct *cfg; // until the TLS state is made
	uint64_t           deadline; // ms on CLOCK_MONOTONIC
	uint32_t           timeout_ms;
	uint32_t           events; // registered with epoll
	tls_hs_done_fn     done;
	void              *arg;
	hs_cancel         *cancel;
} hs_item;

static struct {
	pthread_once_t  once;
	nmq_err         rv;
	pthread_t       thr;
	int             epfd;
	int             evfd;
	pthread_mutex_t mtx;
	hs_item        *in_head; // inbox (mtx)
	hs_item        *in_tail;
	// The thread's own: running handshakes by deadline, and their count.
	hs_item *head;
	hs_item *tail;
	int      running;
	bool     cancelled; // a cancel ran in this event batch
	uint8_t *buf;
} hs = { .once = PTHREAD_ONCE_INIT,
	.rv    = NMQ_ENOTSUP,
	.epfd  = -1,
	.evfd  = -1,
	.mtx   = PTHREAD_MUTEX_INITIALIZER };

static _Atomic uint64_t hs_failed_n, hs_timed_out_n, hs_refused_n;

// A marker for the eventfd's epoll entry.
static int hs_wake_mark;

uint64_t tls_hs_failed(void)
{
	return atomic_load_explicit(&hs_failed_n, memory_order_relaxed);
}
uint64_t tls_hs_timed_out(void)
{
	return atomic_load_explicit(&hs_timed_out_n, memory_order_relaxed);
}
uint64_t tls_hs_refused(void)
{
	return atomic_load_explicit(&hs_refused_n, memory_order_relaxed);
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

// Formats the peer of fd for a log line.
static void peer_text(int fd, char *buf, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t               sl                  = sizeof(ss);
	char                    a[INET6_ADDRSTRLEN] = "unknown";
	unsigned                port                = 0;
	if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
		if (ss.ss_family == AF_INET) {
			struct sockaddr_in *in = (struct sockaddr_in *)&ss;
			inet_ntop(AF_INET, &in->sin_addr, a, sizeof(a));
			port = ntohs(in->sin_port);
		} else if (ss.ss_family == AF_INET6) {
			struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
			inet_ntop(AF_INET6, &in6->sin6_addr, a, sizeof(a));
			port = ntohs(in6->sin6_port);
		}
	}
	snprintf(buf, len, "%s:%u", a, port);
}

// Takes h off the running list.
static void unlink_item(hs_item *h)
{
	if (h->prev != NULL) {
		h->prev->next = h->next;
	} else {
		hs.head = h->next;
	}
	if (h->next != NULL) {
		h->next->prev = h->prev;
	} else {
		hs.tail = h->prev;
	}
	h->next = h->prev = NULL;
	hs.running--;
}

// Drops a running handshake: closes its socket.
static void drop(hs_item *h)
{
	unlink_item(h);
	epoll_ctl(hs.epfd, EPOLL_CTL_DEL, h->fd, NULL);
	close(h->fd);
	conn_tls_free(h->t);
	free(h);
}

// Runs the handshake of h as far as the socket allows.
static void step(hs_item *h)
{
	char why[128] = "";
	int  r        = conn_tls_handshake(h->t, hs.buf, HS_BUF, why, sizeof(why));
	if (r == CONN_TLS_DONE) {
		unlink_item(h);
		epoll_ctl(hs.epfd, EPOLL_CTL_DEL, h->fd, NULL);
		h->done(h->arg, h->fd, h->t);
		free(h);
		return;
	}
	if (r == CONN_TLS_FAILED) {
		char peer[64];
		peer_text(h->fd, peer, sizeof(peer));
		log_debug("tls", "peer=%s event=handshake_failed reason=\"%s\"", peer, why);
		atomic_fetch_add_explicit(&hs_failed_n, 1, memory_order_relaxed);
		drop(h);
		return;
	}
	uint32_t want = r == CONN_TLS_WANT_WRITE ? EPOLLOUT : EPOLLIN;
	if (want != h->events) {
		struct epoll_event ev = { .events = want, .data.ptr = h };
		h->events             = want;
		epoll_ctl(hs.epfd, EPOLL_CTL_MOD, h->fd, &ev);
	}
}

// Starts a submitted handshake (the thread).
static void begin(hs_item *h)
{
	char peer[64];
	h->t = conn_tls_new(h->fd, h->cfg);
	tls_engine_direct_free(h->cfg);
	h->cfg = NULL;
	if (hs.running >= TLS_HS_MAX || h->t == NULL) {
		peer_text(h->fd, peer, sizeof(peer));
		log_warn_rl("tls", "peer=%s event=handshake_refused reason=\"%s\"", peer,
		    h->t == NULL ? "out of memory" : "too many handshakes running");
		atomic_fetch_add_explicit(&hs_refused_n, 1, memory_order_relaxed);
		close(h->fd);
		conn_tls_free(h->t);
		free(h);
		return;
	}
	h->deadline           = now_ms() + h->timeout_ms;
	h->events             = EPOLLIN;
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = h };
	if (epoll_ctl(hs.epfd, EPOLL_CTL_ADD, h->fd, &ev) != 0) {
		log_warn_rl("tls", "event=handshake_refused reason=\"epoll: %s\"", strerror(errno));
		atomic_fetch_add_explicit(&hs_refused_n, 1, memory_order_relaxed);
		close(h->fd);
		conn_tls_free(h->t);
		free(h);
		return;
	}
	// Insert by deadline, from the tail.
	hs_item *p = hs.tail;
	while (p != NULL && p->deadline > h->deadline) {
		p = p->prev;
	}
	h->prev = p;
	h->next = p != NULL ? p->next : hs.head;
	if (h->next != NULL) {
		h->next->prev = h;
	} else {
		hs.tail = h;
	}
	if (p != NULL) {
		p->next = h;
	} else {
		hs.head = h;
	}
	hs.running++;
	// The ClientHello is often there already.
	step(h);
}

// Drops the handshakes of c->arg and wakes the canceller.
static void cancel(hs_cancel *c)
{
	hs_item *h = hs.head;
	while (h != NULL) {
		hs_item *next = h->next;
		if (h->arg == c->arg) {
			drop(h);
		}
		h = next;
	}
	hs.cancelled = true;
	pthread_mutex_lock(&c->mtx);
	c->done = true;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mtx);
}

// Handles what the inbox holds, in order.
static void take_inbox(void)
{
	uint64_t v;
	if (read(hs.evfd, &v, sizeof(v)) < 0) {
		// EAGAIN: another wake-up took it.
	}
	pthread_mutex_lock(&hs.mtx);
	hs_item *h = hs.in_head;
	hs.in_head = hs.in_tail = NULL;
	pthread_mutex_unlock(&hs.mtx);
	while (h != NULL) {
		hs_item *next = h->next;
		h->next       = NULL;
		if (h->cancel != NULL) {
			hs_cancel *c = h->cancel;
			free(h);
			cancel(c);
		} else {
			begin(h);
		}
		h = next;
	}
}

static void *hs_main(void *arg)
{
	struct epoll_event ev[HS_EVENTS];
	(void)arg;
	(void)pthread_setname_np(pthread_self(), "nmq:tls-hs");
	for (;;) {
		int timeout = -1;
		if (hs.head != NULL) {
			uint64_t now = now_ms();
			timeout      = hs.head->deadline > now ? (int)(hs.head->deadline - now) : 0;
		}
		int n        = epoll_wait(hs.epfd, ev, HS_EVENTS, timeout);
		hs.cancelled = false;
		for (int i = 0; i < n; i++) {
			if (ev[i].data.ptr == &hs_wake_mark) {
				take_inbox();
			}
		}
		for (int i = 0; i < n; i++) {
			if (ev[i].data.ptr != &hs_wake_mark) {
				// A cancel in this batch may have freed a
				// handshake whose event is in it: then look it
				// up on the list first.
				hs_item *h = ev[i].data.ptr;
				hs_item *p = h;
				if (hs.cancelled) {
					for (p = hs.head; p != NULL && p != h; p = p->next) { }
				}
				if (p != NULL) {
					step(h);
				}
			}
		}
		uint64_t now = now_ms();
		while (hs.head != NULL && hs.head->deadline <= now) {
			char peer[64];
			peer_text(hs.head->fd, peer, sizeof(peer));
			log_debug("tls", "peer=%s event=handshake_timeout", peer);
			atomic_fetch_add_explicit(&hs_timed_out_n, 1, memory_order_relaxed);
			atomic_fetch_add_explicit(&hs_failed_n, 1, memory_order_relaxed);
			drop(hs.head);
		}
	}
	return NULL;
}

static void hs_setup(void)
{
	hs.buf  = malloc(HS_BUF);
	hs.epfd = epoll_create1(EPOLL_CLOEXEC);
	hs.evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (hs.buf == NULL || hs.epfd < 0 || hs.evfd < 0) {
		hs.rv = NMQ_ENOMEM;
		return;
	}
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &hs_wake_mark };
	if (epoll_ctl(hs.epfd, EPOLL_CTL_ADD, hs.evfd, &ev) != 0) {
		hs.rv = nmq_err_from_errno(errno);
		return;
	}
	if (pthread_create(&hs.thr, NULL, hs_main, NULL) != 0) {
		hs.rv = NMQ_ENOMEM;
		return;
	}
	pthread_detach(hs.thr);
	hs.rv = NMQ_OK;
}

nmq_err tls_hs_start(void)
{
	pthread_once(&hs.once, hs_setup);
	return hs.rv;
}

// Queues h in the inbox and wakes the thread.
static void post(hs_item *h)
{
	uint64_t one = 1;
	pthread_mutex_lock(&hs.mtx);
	bool wake = hs.in_head == NULL;
	if (hs.in_tail != NULL) {
		hs.in_tail->next = h;
	} else {
		hs.in_head = h;
	}
	hs.in_tail = h;
	pthread_mutex_unlock(&hs.mtx);
	if (wake && write(hs.evfd, &one, sizeof(one)) < 0) {
		// EAGAIN: the counter is full, the thread is awake anyway.
	}
}

void tls_hs_submit(
    int fd, tls_engine_direct *cfg, uint32_t timeout_ms, tls_hs_done_fn done, void *arg)
{
	hs_item *h = tls_hs_start() == NMQ_OK ? calloc(1, sizeof(*h)) : NULL;
	if (h == NULL) {
		log_warn_rl("tls", "event=handshake_refused reason=\"out of memory\"");
		atomic_fetch_add_explicit(&hs_refused_n, 1, memory_order_relaxed);
		close(fd);
		tls_engine_direct_free(cfg);
		return;
	}
	h->fd         = fd;
	h->cfg        = cfg;
	h->timeout_ms = timeout_ms > 0 ? timeout_ms : TLS_HS_TIMEOUT_MS_DEF;
	h->done       = done;
	h->arg        = arg;
	post(h);
}

void tls_hs_cancel(void *arg)
{
	if (tls_hs_start() != NMQ_OK) {
		return;
	}
	hs_item  *h = calloc(1, sizeof(*h));
	hs_cancel c = { .arg = arg, .done = false };
	if (h == NULL) {
		return; // out of memory: nothing better to do
	}
	pthread_mutex_init(&c.mtx, NULL);
	pthread_cond_init(&c.cv, NULL);
	h->cancel = &c;
	post(h);
	pthread_mutex_lock(&c.mtx);
	while (!c.done) {
		pthread_cond_wait(&c.cv, &c.mtx);
	}
	pthread_mutex_unlock(&c.mtx);
	pthread_mutex_destroy(&c.mtx);
	pthread_cond_destroy(&c.cv);
}
