// Outbound TCP and TLS connects; see conn_dial.h.
#include "nng/transport/conn_dial.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "nng/transport/transport_err.h"

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

// The dial's completion (an NNG task thread): only a flag for the waiter.
static void dial_done(void *arg)
{
	atomic_store((_Atomic bool *)arg, true);
}

nmq_err conn_dial_tls(const char *host, int port, nng_tls_config *cfg, int timeout_ms,
    const _Atomic bool *cancel, nng_stream **sp, char *err, size_t errlen)
{
	char               url[300];
	nng_stream_dialer *d    = NULL;
	nng_aio           *aio  = NULL;
	_Atomic bool       done = false;
	int                rv;
	if (strchr(host, ':') != NULL) {
		snprintf(url, sizeof(url), "tls+tcp://[%s]:%d", host, port);
	} else {
		snprintf(url, sizeof(url), "tls+tcp://%s:%d", host, port);
	}
	if ((rv = nng_stream_dialer_alloc(&d, url)) != 0
	    || (rv = nng_stream_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg)) != 0
	    || (rv = nng_aio_alloc(&aio, dial_done, &done)) != 0) {
		snprintf(err, errlen, "%s: %s", url, nng_strerror(rv));
		goto out;
	}
	nng_aio_set_timeout(aio, timeout_ms);
	nng_stream_dialer_dial(d, aio);
	while (cancel != NULL && !atomic_load(&done)) {
		if (atomic_load(cancel)) {
			nng_aio_cancel(aio);
			break;
		}
		usleep(50 * 1000);
	}
	nng_aio_wait(aio);
	if ((rv = nng_aio_result(aio)) != 0) {
		snprintf(err, errlen, "connect to %s:%d: %s", host, port, nng_strerror(rv));
		goto out;
	}
	*sp = nng_aio_get_output(aio, 0);
out:
	if (aio != NULL) {
		nng_aio_free(aio);
	}
	if (d != NULL) {
		nng_stream_dialer_free(d);
	}
	return rv == 0 ? NMQ_OK : transport_err_from_nng(rv);
}
