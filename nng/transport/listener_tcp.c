// The listening socket of every kind; see listener_int.h.
//
// Listeners do not use NNG: the listening socket sits in one worker's
// epoll set, and accepted sockets become plain-socket connections spread
// over the workers (conn_alloc_fd), so that plain MQTT needs no NNG
// hand-off per read or write (docs/decisions/0003-plain-tcp-event-loops.md).
// ws:// listeners are the same sockets with the WebSocket layer
// (conn_ws.c) on top; tls+tcp:// and wss:// ones hand accepted sockets to
// the TLS handshake thread first (listener_tls.c, decisions/0019).
//
// When accept() fails for lack of descriptors or memory, the socket leaves
// the epoll set for ACCEPT_BACKOFF_MS, timed by a timerfd in the same set.
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "nng/core/log.h"
#include "nng/transport/listener_int.h"

// Accepts every pending connection (the owner worker, on readiness).
static void raw_accept_io(workq_io *io, uint32_t events)
{
	nmq_listener *l = (nmq_listener *)((char *)io - offsetof(nmq_listener, io));
	(void)events;
	for (;;) {
		int fd = accept4(l->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) {
				continue;
			}
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				return;
			}
			// Out of descriptors or memory: stop watching for a while
			// rather than spin on a socket that stays readable.
			log_warn_rl("listener",
			    "listener=%s event=accept_paused reason=\"%s\" pause_ms=%d", l->name,
			    strerror(errno), ACCEPT_BACKOFF_MS);
			pthread_mutex_lock(&l->mtx);
			if (!l->stopping && l->watching) {
				workq_io_del(l->env->wq, l->owner, l->lfd);
				l->watching = false;
				l->sleeping = true;
				struct itimerspec its
				    = { .it_value = {
					    .tv_sec  = ACCEPT_BACKOFF_MS / 1000,
					    .tv_nsec = (ACCEPT_BACKOFF_MS % 1000) * 1000000L,
					} };
				timerfd_settime(l->tfd, 0, &its, NULL);
			}
			pthread_mutex_unlock(&l->mtx);
			return;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (!LISTENER_KIND_PLAIN(l->kind)) {
			listener_tls_accepted(l, fd);
			continue;
		}
		nmq_conn *c = conn_alloc_fd(fd, l->env);
		if (c == NULL) {
			log_warn_rl("listener",
			    "listener=%s event=accept_dropped reason=\"out of memory\"", l->name);
			close(fd);
			continue;
		}
		listener_adopt(l, c);
	}
}

// End of an accept backoff (the owner worker, on the timer's readiness):
// watch the listening socket again.
static void raw_backoff_io(workq_io *io, uint32_t events)
{
	nmq_listener *l = (nmq_listener *)((char *)io - offsetof(nmq_listener, tio));
	uint64_t      expirations;
	(void)events;
	if (read(l->tfd, &expirations, sizeof(expirations)) != (ssize_t)sizeof(expirations)) {
		return; // not expired (a stale wake-up)
	}
	pthread_mutex_lock(&l->mtx);
	l->sleeping = false;
	if (!l->stopping && !l->watching
	    && workq_io_add(l->env->wq, l->owner, l->lfd, &l->io, EPOLLIN) == NMQ_OK) {
		l->watching = true;
	}
	pthread_mutex_unlock(&l->mtx);
}

// Parses a dotted-quad IPv4 address ("0.0.0.0", "192.168.1.10": four
// decimal numbers up to 255, no leading zeros) into sa with port. Only this
// common case is handled here, so that a broker bound to an IPv4 literal
// does not load getaddrinfo() and the resolver configuration (about 140 kB
// of libc resident). Returns true, or false to let getaddrinfo() decide.
static bool ipv4_literal(const char *host, uint16_t port, struct sockaddr_in *sa)
{
	uint32_t    addr = 0;
	const char *p    = host;
	for (int part = 0; part < 4; part++) {
		if (part > 0 && *p++ != '.') {
			return false;
		}
		if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9')) {
			return false;
		}
		uint32_t v = 0;
		int      digits;
		for (digits = 0; *p >= '0' && *p <= '9' && digits < 3; digits++) {
			v = v * 10 + (uint32_t)(*p++ - '0');
		}
		if (v > 255 || (*p >= '0' && *p <= '9')) {
			return false;
		}
		addr = addr << 8 | v;
	}
	if (*p != '\0') {
		return false;
	}
	memset(sa, 0, sizeof(*sa));
	sa->sin_family      = AF_INET;
	sa->sin_port        = htons(port);
	sa->sin_addr.s_addr = htonl(addr);
	return true;
}

// Resolves the bind address host:port into sa (*salen bytes): an IPv4
// literal directly, anything else (names, IPv6, an empty host) with
// getaddrinfo(). Returns 0, or -1 with getaddrinfo()'s message in err.
static int resolve_bind(const char *host, const char *port, struct sockaddr_storage *sa,
    socklen_t *salen, char *err, size_t errlen)
{
	unsigned long pnum = 0;
	const char   *pc   = port;
	while (*pc >= '0' && *pc <= '9' && pnum <= 65535) {
		pnum = pnum * 10 + (unsigned long)(*pc++ - '0');
	}
	if (pc != port && *pc == '\0' && pnum <= 65535
	    && ipv4_literal(host, (uint16_t)pnum, (struct sockaddr_in *)sa)) {
		*salen = sizeof(struct sockaddr_in);
		return 0;
	}
	struct addrinfo  hints;
	struct addrinfo *ai;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family   = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags    = AI_PASSIVE | AI_NUMERICSERV;
	int rv            = getaddrinfo(host[0] != '\0' ? host : NULL, port, &hints, &ai);
	if (rv != 0) {
		snprintf(err, errlen, "%s", gai_strerror(rv));
		return -1;
	}
	memcpy(sa, ai->ai_addr, ai->ai_addrlen);
	*salen = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
}

// Opens, binds and watches a tcp:// listening socket; see listener_int.h.
nmq_err listener_tcp_listen(nmq_listener *l, char *err, size_t errlen)
{
	char                    host[256];
	char                    port[16];
	char                    why[128];
	struct sockaddr_storage sa;
	socklen_t               salen;
	if (listener_split_url(l->url, host, sizeof(host), port, sizeof(port), NULL, 0) != NMQ_OK) {
		static const char *const scheme[] = { "tcp", "tls+tcp", "ws", "wss" };
		snprintf(err, errlen, "%s: %s: expected %s://host:port", l->name, l->url,
		    scheme[l->kind]);
		return NMQ_EINVAL;
	}
	if (resolve_bind(host, port, &sa, &salen, why, sizeof(why)) != 0) {
		snprintf(err, errlen, "%s: %s: %s", l->name, l->url, why);
		return NMQ_EINVAL;
	}
	l->lfd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (l->lfd < 0) {
		int e = errno;
		snprintf(err, errlen, "%s: %s: socket: %s", l->name, l->url, strerror(e));
		return nmq_err_from_errno(e);
	}
	int one = 1;
	setsockopt(l->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(l->lfd, (struct sockaddr *)&sa, salen) != 0 || listen(l->lfd, 1024) != 0) {
		int e = errno;
		snprintf(err, errlen, "%s: cannot listen on %s: %s", l->name, l->url, strerror(e));
		return e == EADDRINUSE ? NMQ_EEXIST : NMQ_EINVAL;
	}
	salen = sizeof(sa);
	if (getsockname(l->lfd, (struct sockaddr *)&sa, &salen) == 0) {
		l->port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
		                                         : ((struct sockaddr_in *)&sa)->sin_port);
	}
	l->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (l->tfd < 0) {
		int e = errno;
		snprintf(err, errlen, "%s: %s: timerfd: %s", l->name, l->url, strerror(e));
		return nmq_err_from_errno(e);
	}
	l->io.fn  = raw_accept_io;
	l->tio.fn = raw_backoff_io;
	l->owner  = workq_pick(l->env->wq);
	if (workq_io_add(l->env->wq, l->owner, l->tfd, &l->tio, EPOLLIN) != NMQ_OK
	    || workq_io_add(l->env->wq, l->owner, l->lfd, &l->io, EPOLLIN) != NMQ_OK) {
		int e = errno;
		snprintf(err, errlen, "%s: %s: epoll: %s", l->name, l->url, strerror(e));
		return nmq_err_from_errno(e);
	}
	l->watching = true;
	return NMQ_OK;
}

// Stops watching the listening socket; runs on its owner worker, so no
// accept handler is running meanwhile.
typedef struct raw_stop {
	workq_job       job;
	nmq_listener   *l;
	pthread_mutex_t mtx;
	pthread_cond_t  cv;
	bool            done;
} raw_stop;

static void raw_stop_job(workq_job *job)
{
	raw_stop     *rs = (raw_stop *)job;
	nmq_listener *l  = rs->l;
	pthread_mutex_lock(&l->mtx);
	if (l->watching) {
		workq_io_del(l->env->wq, l->owner, l->lfd);
		l->watching = false;
	}
	workq_io_del(l->env->wq, l->owner, l->tfd);
	l->sleeping = false;
	pthread_mutex_unlock(&l->mtx);
	pthread_mutex_lock(&rs->mtx);
	rs->done = true;
	pthread_cond_signal(&rs->cv);
	pthread_mutex_unlock(&rs->mtx);
}

// Stops watching the listening socket; see listener_int.h.
void listener_tcp_stop(nmq_listener *l)
{
	raw_stop rs;
	memset(&rs, 0, sizeof(rs));
	rs.job.fn = raw_stop_job;
	rs.l      = l;
	pthread_mutex_init(&rs.mtx, NULL);
	pthread_cond_init(&rs.cv, NULL);
	workq_post_to(l->env->wq, l->owner, &rs.job);
	pthread_mutex_lock(&rs.mtx);
	while (!rs.done) {
		pthread_cond_wait(&rs.cv, &rs.mtx);
	}
	pthread_mutex_unlock(&rs.mtx);
	pthread_mutex_destroy(&rs.mtx);
	pthread_cond_destroy(&rs.cv);
}

// Closes the sockets; see listener_int.h.
void listener_tcp_release(nmq_listener *l)
{
	if (l->lfd >= 0) {
		close(l->lfd);
		l->lfd = -1;
	}
	if (l->tfd >= 0) {
		close(l->tfd);
		l->tfd = -1;
	}
}
