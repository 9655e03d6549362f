// Outbound TCP and TLS connects; see conn_dial.h.
//
// A TLS connect is a TCP connect, then the client handshake on the
// calling thread (mbed TLS's state machine over the non-blocking socket,
// poll() between its steps), so that the connection then runs on the
// workers' loops exactly as an accepted one does after the handshake
// thread (docs/decisions/0042-bridge-tls-on-own-event-loops.md).
#include "nng/transport/conn_dial.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "nng/core/log.h"

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// Sets the socket options of o on fd (failures are not fatal: the link
// works without them).
static void set_opts(int fd, const conn_dial_opts *o)
{
	int one = 1;
	if (o == NULL || o->nodelay) {
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	if (o == NULL) {
		return;
	}
	if (o->keepalive) {
		(void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
		if (o->keepidle > 0) {
			(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &o->keepidle, sizeof(int));
		}
		if (o->keepintvl > 0) {
			(void)setsockopt(
			    fd, IPPROTO_TCP, TCP_KEEPINTVL, &o->keepintvl, sizeof(int));
		}
		if (o->keepcnt > 0) {
			(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &o->keepcnt, sizeof(int));
		}
	}
	if (o->bind_interface != NULL && o->bind_interface[0] != '\0') {
		(void)setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, o->bind_interface,
		    (socklen_t)strlen(o->bind_interface));
	}
}

// Connects fd to one address before the deadline. Returns 0 or an errno.
static int connect_one(int fd, const struct addrinfo *ai, int64_t deadline, const conn_dial_opts *o)
{
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
		return 0;
	}
	if (errno != EINPROGRESS) {
		return errno;
	}
	for (;;) {
		int64_t left = deadline - now_ms();
		if (left <= 0) {
			return ETIMEDOUT;
		}
		if (o != NULL && o->cancel != NULL) {
			if (atomic_load(o->cancel)) {
				return ECANCELED;
			}
			left = left > 100 ? 100 : left;
		}
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		int           r = poll(&p, 1, (int)left);
		if (r < 0 && errno == EINTR) {
			continue;
		}
		if (r < 0) {
			return errno;
		}
		if (r == 0) {
			continue;
		}
		int       soerr = 0;
		socklen_t sl    = sizeof(soerr);
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0) {
			return errno;
		}
		return soerr;
	}
}

nmq_err conn_dial_tcp(const char *host, int port, const conn_dial_opts *o, int timeout_ms, int *fdp,
    char *err, size_t errlen)
{
	int64_t         deadline = now_ms() + timeout_ms;
	struct addrinfo hints, *res = NULL;
	char            ports[16];
	memset(&hints, 0, sizeof(hints));
	hints.ai_family   = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	snprintf(ports, sizeof(ports), "%d", port);
	int rv = getaddrinfo(host, ports, &hints, &res);
	if (rv != 0) {
		snprintf(err, errlen, "cannot resolve %s: %s", host, gai_strerror(rv));
		return NMQ_ENOENT;
	}
	int last = EHOSTUNREACH;
	for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
		int fd = socket(
		    ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0) {
			last = errno;
			continue;
		}
		set_opts(fd, o);
		if ((last = connect_one(fd, ai, deadline, o)) == 0) {
			freeaddrinfo(res);
			*fdp = fd;
			return NMQ_OK;
		}
		close(fd);
		if (last == ETIMEDOUT || last == ECANCELED) {
			break;
		}
	}
	freeaddrinfo(res);
	snprintf(err, errlen, "connect to %s:%d: %s", host, port, strerror(last));
	return last == ETIMEDOUT ? NMQ_ETIMEDOUT : last == ECANCELED ? NMQ_ECLOSED : NMQ_EIO;
}

// Waits until fd is ready for events, the deadline passes or *cancel
// turns true (checked every 100 ms). Returns 0, ETIMEDOUT, ECANCELED or an
// errno.
static int wait_ready(int fd, short events, int64_t deadline, const _Atomic bool *cancel)
{
	for (;;) {
		int64_t left = deadline - now_ms();
		if (left <= 0) {
			return ETIMEDOUT;
		}
		if (cancel != NULL) {
			if (atomic_load(cancel)) {
				return ECANCELED;
			}
			left = left > 100 ? 100 : left;
		}
		struct pollfd p = { .fd = fd, .events = events };
		int           r = poll(&p, 1, (int)left);
		if (r < 0 && errno != EINTR) {
			return errno;
		}
		if (r > 0) {
			return 0; // ready, or an error the next read or write reports
		}
	}
}

nmq_err conn_dial_tls(const char *host, int port, const conn_dial_opts *o, tls_engine_direct *cfg,
    int timeout_ms, int *fdp, conn_tls **tp, char *err, size_t errlen)
{
	int64_t             deadline = now_ms() + timeout_ms;
	const _Atomic bool *cancel   = o != NULL ? o->cancel : NULL;
	int                 fd       = -1;
	nmq_err             e        = conn_dial_tcp(host, port, o, timeout_ms, &fd, err, errlen);
	if (e != NMQ_OK) {
		return e;
	}
	// The read-ahead room of the handshake (conn_tls_handshake).
	uint8_t  *buf = malloc(CONN_TLS_RA_MIN);
	conn_tls *t   = buf != NULL ? conn_tls_new_client(fd, cfg, host) : NULL;
	if (t == NULL) {
		free(buf);
		close(fd);
		snprintf(err, errlen, "TLS to %s:%d: out of memory", host, port);
		return NMQ_ENOMEM;
	}
	char why[320] = "";
	int  r;
	while (
	    (r = conn_tls_handshake(t, buf, CONN_TLS_RA_MIN, why, sizeof(why))) != CONN_TLS_DONE) {
		if (r == CONN_TLS_FAILED) {
			e = NMQ_ETLS;
			break;
		}
		int w
		    = wait_ready(fd, r == CONN_TLS_WANT_WRITE ? POLLOUT : POLLIN, deadline, cancel);
		if (w != 0) {
			snprintf(why, sizeof(why), "%s",
			    w == ETIMEDOUT       ? "handshake timed out"
			        : w == ECANCELED ? "cancelled"
			                         : strerror(w));
			e = w == ETIMEDOUT ? NMQ_ETIMEDOUT : w == ECANCELED ? NMQ_ECLOSED : NMQ_EIO;
			break;
		}
	}
	free(buf);
	if (r != CONN_TLS_DONE) {
		if (e == NMQ_ETLS) {
			log_warn_rl(
			    "tls", "server=%s event=handshake_failed reason=\"%s\"", host, why);
		}
		conn_tls_free(t);
		close(fd);
		snprintf(err, errlen, "TLS handshake with %s:%d: %s", host, port, why);
		return e;
	}
	*fdp = fd;
	*tp  = t;
	return NMQ_OK;
}
