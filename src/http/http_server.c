// The REST API's HTTP/1.1 server: one thread, one epoll loop. See
// http_server.h and docs/decisions/0017-http-server.md.
//
// Each connection reads one request at a time into a buffer bounded by
// max_head + max_body, answers it from a handler, writes the reply (with
// EPOLLOUT when the socket is full) and then reads the next one. A request
// must arrive in full within request_timeout_ms of its first byte, and a
// reply must leave within the same time, so a slow client (slowloris) holds
// its slot for a bounded time; an idle keep-alive connection is closed
// after idle_timeout_ms. At most limit_conn connections are open: beyond
// that the listening socket is taken out of the loop and new clients wait
// in the kernel's backlog, unless a connection that makes no progress can
// give up its slot (victim): one kept alive idle between requests, or one
// still sending its request head (or TLS handshake), for longer than
// GRACE_MS. The one waiting the longest is closed for the waiting client,
// so slow clients (slowloris) cannot keep a quick request out for more than
// about GRACE_MS per limit_conn of them ahead of it in the backlog.
//
// With TLS (http_server_opts.tls) a connection starts in C_HANDSHAKE: the
// handshake runs step by step as the socket allows (never blocking the
// loop) under the same request_timeout_ms deadline, and the first byte is
// peeked so that a plain HTTP request gets a readable 400 instead of a TLS
// alert. Afterwards conn_recv/conn_send go through mbed TLS; everything
// else is the same.
#include "src/http/http_server.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/ssl.h>

#include "nng/core/log.h"
#include "nng/transport/tls_engine.h"
#include "nng/transport/tls_pem.h"
#include "src/http/http_auth.h"

#define DEFAULT_MAX_HEAD 16384
#define DEFAULT_REQ_MS   10000
#define DEFAULT_IDLE_MS  60000
#define READ_CHUNK       16384
#define TICK_MS          200
#define LINGER_MS        1000 // lingering close after a refusal
#define GRACE_MS         1000 // a head or an idle wait this long may be cut when full
#define LISTEN_TAG       ((void *)1)
#define WAKE_TAG         ((void *)2)

typedef struct route {
	char        *method;
	char        *pattern;
	http_handler fn;
	void        *arg;
} route;

typedef enum conn_state { C_HANDSHAKE, C_READ, C_WRITE } conn_state;

typedef struct hconn {
	int                  fd;
	conn_state           st;
	mbedtls_ssl_context *ssl; // NULL: plain HTTP (or not yet TLS)
	char                 peer[80];
	char                *in;
	size_t               in_len;
	size_t               in_cap;
	char                *out;
	size_t               out_len;
	size_t               out_off;
	uint64_t             deadline_ms; // 0: none
	bool                 idle; // between requests (deadline is the idle one)
	bool                 head_done; // the current request's head has arrived
	uint64_t             wait_ms; // since: accept, handshake done, reply out, or first byte
	bool                 answered; // a reply went out: idle means kept alive
	bool                 sent_continue;
	bool                 close_after; // close once out is written
	bool                 draining; // reply sent, write side shut: reading to discard
	void (*after)(void *arg);
	void         *after_arg;
	struct hconn *prev;
	struct hconn *next;
} hconn;

struct http_server {
	http_server_opts   o;
	http_auth         *auth;
	tls_engine_direct *tls; // NULL: plain HTTP
	bool               tls_optional; // client certificates: check on completion
	int                lfd;
	int                efd; // epoll
	int                wfd; // eventfd: stop
	int                port;
	bool               listening; // lfd is in the epoll set
	pthread_t          thr;
	bool               started;
	route             *routes;
	size_t             nroutes;
	hconn             *conns;
	int                nconns;
	uint64_t           closed_slow; // slow heads or handshakes closed for a waiting client
	uint64_t           closed_idle; // idle kept-alive connections closed for one
};

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

// ---------------------------------------------------------------- replies

void http_resp_append(http_resp *r, const char *s, size_t n)
{
	if (r->oom) {
		return;
	}
	if (r->len + n + 1 > r->cap) {
		size_t ncap = r->cap ? r->cap : 256;
		while (ncap < r->len + n + 1) {
			ncap *= 2;
		}
		char *nb = realloc(r->body, ncap);
		if (nb == NULL) {
			r->oom = true;
			return;
		}
		r->body = nb;
		r->cap  = ncap;
	}
	memcpy(r->body + r->len, s, n);
	r->len += n;
	r->body[r->len] = '\0';
}

void http_resp_printf(http_resp *r, const char *fmt, ...)
{
	char    small[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0) {
		return;
	}
	if ((size_t)n < sizeof(small)) {
		http_resp_append(r, small, (size_t)n);
		return;
	}
	char *big = malloc((size_t)n + 1);
	if (big == NULL) {
		r->oom = true;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(big, (size_t)n + 1, fmt, ap);
	va_end(ap);
	http_resp_append(r, big, (size_t)n);
	free(big);
}

void http_resp_json(http_resp *r, int status, cJSON *json)
{
	r->status       = status;
	r->content_type = "application/json";
	r->len          = 0;
	char *s         = json != NULL ? cJSON_PrintUnformatted(json) : NULL;
	cJSON_Delete(json);
	if (s == NULL) {
		r->oom = true;
		return;
	}
	http_resp_append(r, s, strlen(s));
	free(s);
}

void http_resp_error(http_resp *r, int status, int code, const char *message)
{
	cJSON *j = cJSON_CreateObject();
	if (j != NULL) {
		cJSON_AddNumberToObject(j, "code", code);
		cJSON_AddStringToObject(j, "message", message);
	}
	http_resp_json(r, status, j);
}

static const char *reason_phrase(int st)
{
	switch (st) {
	case 200:
		return "OK";
	case 400:
		return "Bad Request";
	case 401:
		return "Unauthorized";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 408:
		return "Request Timeout";
	case 413:
		return "Content Too Large";
	case 414:
		return "URI Too Long";
	case 431:
		return "Request Header Fields Too Large";
	case 500:
		return "Internal Server Error";
	case 501:
		return "Not Implemented";
	case 505:
		return "HTTP Version Not Supported";
	default:
		return "Unknown";
	}
}

// ---------------------------------------------------------------- setup

http_server *http_server_alloc(const http_server_opts *o, char *err, size_t errlen)
{
	http_server *hs = calloc(1, sizeof(*hs));
	if (hs == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	hs->o   = *o;
	hs->lfd = hs->efd = hs->wfd = -1;
	if (hs->o.max_head == 0) {
		hs->o.max_head = DEFAULT_MAX_HEAD;
	}
	if (hs->o.request_timeout_ms == 0) {
		hs->o.request_timeout_ms = DEFAULT_REQ_MS;
	}
	if (hs->o.idle_timeout_ms == 0) {
		hs->o.idle_timeout_ms = DEFAULT_IDLE_MS;
	}
	if (hs->o.limit_conn <= 0) {
		hs->o.limit_conn = 32;
	}
	hs->o.tls = NULL; // borrowed for this call only
	hs->auth  = http_auth_alloc(o->auth, o->username, o->password, o->jwt_keyfile, err, errlen);
	if (hs->auth == NULL) {
		goto fail;
	}
	if (o->tls != NULL) {
		if (tls_pem_direct_build(o->tls, NNG_TLS_MODE_SERVER, &hs->tls, err, errlen)
		    != NMQ_OK) {
			goto fail;
		}
		hs->tls_optional = o->tls->verify_peer && !o->tls->fail_if_no_peer_cert;
	}
	struct addrinfo hints = { 0 }, *ai = NULL;
	char            port[16];
	hints.ai_family   = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags    = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
	snprintf(port, sizeof(port), "%d", o->port);
	const char *host = o->ip_addr != NULL ? o->ip_addr : "0.0.0.0";
	int         gai  = getaddrinfo(host, port, &hints, &ai);
	if (gai != 0) {
		snprintf(err, errlen, "http_server: bad address %s: %s", host, gai_strerror(gai));
		goto fail;
	}
	hs->lfd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;
	if (hs->lfd < 0 || setsockopt(hs->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0
	    || bind(hs->lfd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(hs->lfd, 128) != 0) {
		snprintf(err, errlen, "http_server: cannot listen on %s:%d: %s", host, o->port,
		    strerror(errno));
		freeaddrinfo(ai);
		goto fail;
	}
	freeaddrinfo(ai);
	struct sockaddr_storage ss;
	socklen_t               sl = sizeof(ss);
	if (getsockname(hs->lfd, (struct sockaddr *)&ss, &sl) == 0) {
		hs->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
		                                          : ((struct sockaddr_in *)&ss)->sin_port);
	}
	hs->efd = epoll_create1(EPOLL_CLOEXEC);
	hs->wfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (hs->efd < 0 || hs->wfd < 0) {
		snprintf(err, errlen, "http_server: %s", strerror(errno));
		goto fail;
	}
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = WAKE_TAG };
	if (epoll_ctl(hs->efd, EPOLL_CTL_ADD, hs->wfd, &ev) != 0) {
		snprintf(err, errlen, "http_server: %s", strerror(errno));
		goto fail;
	}
	return hs;
fail:
	http_server_free(hs);
	return NULL;
}

void http_server_stats_get(const http_server *hs, http_server_stats *st)
{
	st->closed_slow = hs->closed_slow;
	st->closed_idle = hs->closed_idle;
}

int http_server_port(const http_server *hs)
{
	return hs->port;
}

nmq_err http_server_route(
    http_server *hs, const char *method, const char *pattern, http_handler fn, void *arg)
{
	size_t np = 0;
	for (const char *p = pattern; *p != '\0'; p++) {
		if (*p == ':' && p > pattern && p[-1] == '/') {
			np++;
		}
	}
	if (np > HTTP_MAX_PARAMS || pattern[0] != '/') {
		return NMQ_EINVAL;
	}
	route *nr = realloc(hs->routes, (hs->nroutes + 1) * sizeof(*nr));
	if (nr == NULL) {
		return NMQ_ENOMEM;
	}
	hs->routes = nr;
	route *r   = &nr[hs->nroutes];
	r->method  = strdup(method);
	r->pattern = strdup(pattern);
	r->fn      = fn;
	r->arg     = arg;
	if (r->method == NULL || r->pattern == NULL) {
		free(r->method);
		free(r->pattern);
		return NMQ_ENOMEM;
	}
	hs->nroutes++;
	return NMQ_OK;
}

// ---------------------------------------------------------------- routing

// Matches the raw (still encoded) path against a pattern, decoding each
// `:name` segment into pbuf. Returns 1 on a match, 0 on none, -1 if a
// parameter is badly encoded.
static int match_route(
    const char *pattern, http_str path, char *pbuf, size_t pcap, const char **params, size_t *np)
{
	const char *p  = pattern;
	size_t      i  = 0;
	size_t      po = 0;
	*np            = 0;
	while (*p != '\0' || i < path.n) {
		if (*p != '/' || i >= path.n || path.p[i] != '/') {
			return 0;
		}
		p++;
		i++;
		const char *pe = strchr(p, '/');
		size_t      pl = pe != NULL ? (size_t)(pe - p) : strlen(p);
		size_t      s  = i;
		while (i < path.n && path.p[i] != '/') {
			i++;
		}
		if (pl > 0 && p[0] == ':') {
			if (i == s) {
				return 0;
			}
			long dn = http_pct_decode(path.p + s, i - s, pbuf + po, pcap - po, false);
			if (dn < 0) {
				return -1;
			}
			params[(*np)++] = pbuf + po;
			po += (size_t)dn + 1;
		} else if (pl != i - s || memcmp(p, path.p + s, pl) != 0) {
			return 0;
		}
		p += pl;
	}
	return 1;
}

// Runs the handler for a complete request into resp.
static void dispatch(
    http_server *hs, const http_msg *m, const char *body, size_t blen, http_resp *resp)
{
	char path[2048];
	if (m->path.n >= sizeof(path) - 1
	    || http_pct_decode(m->path.p, m->path.n, path, sizeof(path), false) < 0) {
		http_resp_error(resp, 400, REST_PARAM_ERROR, "bad percent-encoding in the path");
		return;
	}
	// The query string is checked once, so every handler can trust it.
	size_t   qpos = 0;
	http_str k, v;
	char     scratch[1024];
	while (http_query_next(m->query, &qpos, &k, &v)) {
		if (http_pct_decode(k.p, k.n, scratch, sizeof(scratch), true) < 0
		    || http_pct_decode(v.p, v.n, scratch, sizeof(scratch), true) < 0) {
			http_resp_error(resp, 400, REST_PARAM_ERROR,
			    "bad percent-encoding in the query string");
			return;
		}
	}
	// "/api/v4/clients/" is "/api/v4/clients".
	http_str rpath = m->path;
	if (rpath.n > 1 && rpath.p[rpath.n - 1] == '/') {
		rpath.n--;
	}
	char     pbuf[2048];
	http_req req
	    = { .msg = m, .path = path, .query = m->query, .body = body, .body_len = blen };
	bool path_known = false;
	for (size_t r = 0; r < hs->nroutes; r++) {
		int mr = match_route(
		    hs->routes[r].pattern, rpath, pbuf, sizeof(pbuf), req.params, &req.nparams);
		if (mr < 0) {
			http_resp_error(
			    resp, 400, REST_PARAM_ERROR, "bad percent-encoding in the path");
			return;
		}
		if (mr == 0) {
			continue;
		}
		path_known = true;
		if (!http_str_eq(m->method, hs->routes[r].method)) {
			continue;
		}
		resp->status = 200;
		hs->routes[r].fn(hs->routes[r].arg, &req, resp);
		return;
	}
	if (path_known) {
		http_resp_error(resp, 405, REST_PARAM_ERROR, "method not allowed on this path");
	} else {
		http_resp_error(resp, 404, REST_PARAM_ERROR, "no such path");
	}
}

// ---------------------------------------------------------------- connections

static void listen_resume(http_server *hs);

static void conn_close(http_server *hs, hconn *c)
{
	epoll_ctl(hs->efd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	if (c->prev != NULL) {
		c->prev->next = c->next;
	} else {
		hs->conns = c->next;
	}
	if (c->next != NULL) {
		c->next->prev = c->prev;
	}
	if (c->after != NULL) {
		c->after(c->after_arg);
	}
	if (c->ssl != NULL) {
		mbedtls_ssl_free(c->ssl);
		free(c->ssl);
	}
	free(c->in);
	free(c->out);
	free(c);
	hs->nconns--;
	listen_resume(hs);
}

static void conn_watch(http_server *hs, hconn *c, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = c };
	epoll_ctl(hs->efd, EPOLL_CTL_MOD, c->fd, &ev);
}

// ---------------------------------------------------------------- byte I/O

// mbed TLS's transport: the connection's non-blocking socket.
static int bio_send(void *arg, const unsigned char *buf, size_t len)
{
	hconn  *c = arg;
	ssize_t n = send(c->fd, buf, len, MSG_NOSIGNAL);
	if (n >= 0) {
		return (int)n;
	}
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
		return MBEDTLS_ERR_SSL_WANT_WRITE;
	}
	return MBEDTLS_ERR_NET_SEND_FAILED;
}

static int bio_recv(void *arg, unsigned char *buf, size_t len)
{
	hconn  *c = arg;
	ssize_t n = recv(c->fd, buf, len, 0);
	if (n >= 0) {
		return (int)n; // 0: the peer closed, which mbed TLS reports
	}
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
		return MBEDTLS_ERR_SSL_WANT_READ;
	}
	return MBEDTLS_ERR_NET_RECV_FAILED;
}

// Reads application bytes (decrypted with TLS). Returns the count, 0 at
// the peer's end of stream, or -1 with errno (EAGAIN: nothing yet).
static ssize_t conn_recv(hconn *c, char *buf, size_t len)
{
	if (c->ssl == NULL) {
		return recv(c->fd, buf, len, 0);
	}
	int rv = mbedtls_ssl_read(c->ssl, (unsigned char *)buf, len);
	if (rv > 0) {
		return rv;
	}
	if (rv == 0 || rv == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY) {
		return 0;
	}
	errno
	    = rv == MBEDTLS_ERR_SSL_WANT_READ || rv == MBEDTLS_ERR_SSL_WANT_WRITE ? EAGAIN : EPROTO;
	return -1;
}

// Writes application bytes (encrypted with TLS). Returns the count taken,
// or -1 with errno (EAGAIN: the socket is full; with TLS the same bytes
// must be offered again).
static ssize_t conn_send(hconn *c, const char *buf, size_t len)
{
	if (c->ssl == NULL) {
		return send(c->fd, buf, len, MSG_NOSIGNAL);
	}
	int rv = mbedtls_ssl_write(c->ssl, (const unsigned char *)buf, len);
	if (rv >= 0) {
		return rv;
	}
	errno
	    = rv == MBEDTLS_ERR_SSL_WANT_READ || rv == MBEDTLS_ERR_SSL_WANT_WRITE ? EAGAIN : EPIPE;
	return -1;
}

// Tries to write what is pending. Returns false if the connection was
// closed.
static bool conn_flush(http_server *hs, hconn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t n = conn_send(c, c->out + c->out_off, c->out_len - c->out_off);
		if (n > 0) {
			c->out_off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			if (c->st != C_WRITE) {
				c->st = C_WRITE;
				conn_watch(hs, c, EPOLLOUT);
			}
			return true;
		}
		conn_close(hs, c);
		return false;
	}
	free(c->out);
	c->out     = NULL;
	c->out_len = c->out_off = 0;
	if (c->close_after) {
		if (c->ssl != NULL) {
			(void)mbedtls_ssl_close_notify(c->ssl); // best effort
		}
		shutdown(c->fd, SHUT_WR);
		if (c->after != NULL) {
			conn_close(hs, c);
			return false;
		}
		// Lingering close: what the client still sends (the rest of a
		// refused body) is read and dropped until it closes too, or for
		// LINGER_MS, so that closing with unread data (a reset) does not
		// destroy the reply before the client has read it.
		c->draining    = true;
		c->in_len      = 0;
		c->deadline_ms = now_ms() + LINGER_MS;
		if (c->st == C_WRITE) {
			c->st = C_READ;
			conn_watch(hs, c, EPOLLIN);
		}
		return false;
	}
	// The reply is out: the connection is idle until the next request.
	c->idle        = true;
	c->answered    = true;
	c->head_done   = false;
	c->wait_ms     = now_ms();
	c->deadline_ms = c->wait_ms + hs->o.idle_timeout_ms;
	if (c->st == C_WRITE) {
		c->st = C_READ;
		conn_watch(hs, c, EPOLLIN);
	}
	listen_resume(hs); // a client waiting in the backlog may take its place
	return true;
}

// Queues a reply (status line, headers, body) and starts writing it.
// Returns false if the connection was closed.
static bool conn_reply(http_server *hs, hconn *c, http_resp *r, bool keep_alive)
{
	if (r->oom) {
		free(r->body);
		memset(r, 0, sizeof(*r));
		http_resp_error(r, 500, REST_UNKNOWN_ERROR, "out of memory");
		if (r->oom) {
			r->status = 500;
		}
	}
	c->close_after = !keep_alive || r->close;
	char   head[512];
	int    hn  = snprintf(head, sizeof(head),
	        "HTTP/1.1 %d %s\r\nServer: nanomq\r\nContent-Type: %s\r\n"
	            "Content-Length: %zu\r\nConnection: %s\r\n%s\r\n",
	        r->status, reason_phrase(r->status),
            r->content_type != NULL ? r->content_type : "application/json", r->len,
            c->close_after ? "close" : "keep-alive",
            r->status == 401 ? "WWW-Authenticate: Basic realm=\"nanomq\"\r\n" : "");
	size_t tot = (size_t)hn + r->len;
	char  *out = malloc(tot);
	if (out == NULL) {
		free(r->body);
		conn_close(hs, c);
		return false;
	}
	memcpy(out, head, (size_t)hn);
	if (r->len > 0) {
		memcpy(out + hn, r->body, r->len);
	}
	free(r->body);
	r->body = NULL;
	if (r->after != NULL) {
		c->after       = r->after;
		c->after_arg   = r->after_arg;
		c->close_after = true;
	}
	free(c->out);
	c->out         = out;
	c->out_len     = tot;
	c->out_off     = 0;
	c->deadline_ms = now_ms() + hs->o.request_timeout_ms;
	return conn_flush(hs, c);
}

// Replies with an error and closes the connection afterwards.
static void conn_fail(http_server *hs, hconn *c, int status, int code, const char *msg)
{
	http_resp r = { 0 };
	http_resp_error(&r, status, code, msg);
	r.close = true;
	log_info("http", "peer=%s status=%d reason=\"%s\"", c->peer, status, msg);
	conn_reply(hs, c, &r, false);
}

// Looks at what has arrived: answers every complete request (one at a
// time). Returns false if the connection was closed.
static bool conn_process(http_server *hs, hconn *c)
{
	while (c->st == C_READ && c->in_len > 0) {
		http_msg     *m = malloc(sizeof(*m));
		int           st;
		http_parse_rc rc;
		if (m == NULL) {
			conn_close(hs, c);
			return false;
		}
		rc = http_parse_request(c->in, c->in_len, hs->o.max_head, m, &st);
		if (c->idle) {
			// The first byte of a new request starts its clock.
			c->idle        = false;
			c->wait_ms     = now_ms();
			c->deadline_ms = c->wait_ms + hs->o.request_timeout_ms;
		}
		if (rc == HTTP_PARSE_INCOMPLETE) {
			free(m);
			return true;
		}
		c->head_done = true; // a slow body is bounded by request_timeout only
		if (rc == HTTP_PARSE_ERROR) {
			free(m);
			conn_fail(hs, c, st, REST_PARAM_ERROR,
			    st == 431       ? "request head too large"
			        : st == 414 ? "request line too long"
			        : st == 501 ? "unsupported transfer coding"
			        : st == 505 ? "unsupported HTTP version"
			                    : "malformed request");
			return false;
		}
		// Authentication before the body is read: a client without
		// credentials cannot make us buffer max_body bytes.
		int ac = http_auth_check(hs->auth, http_msg_header(m, "authorization"));
		if (ac != 0) {
			free(m);
			conn_fail(hs, c, 401, ac,
			    ac == REST_TOKEN_EXPIRED           ? "token expired"
			        : ac == REST_EMPTY_CREDENTIALS ? "authentication required"
			                                       : "wrong credentials");
			return false;
		}
		size_t body_off = m->head_len;
		size_t blen     = 0;
		size_t used     = m->head_len;
		if (m->content_length > (int64_t)hs->o.max_body) {
			free(m);
			conn_fail(hs, c, 400, REST_PARAM_ERROR, "request body too large");
			return false;
		}
		if (m->content_length > 0 || m->chunked) {
			const http_str *ex = http_msg_header(m, "expect");
			if (ex != NULL && http_str_ieq(*ex, "100-continue") && !c->sent_continue) {
				static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
				c->sent_continue         = true;
				(void)conn_send(c, cont, sizeof(cont) - 1);
			}
		}
		if (m->chunked) {
			size_t        consumed;
			http_parse_rc cr = http_chunked_decode(c->in + body_off,
			    c->in_len - body_off, hs->o.max_body, &blen, &consumed);
			if (cr == HTTP_PARSE_INCOMPLETE) {
				free(m);
				return true;
			}
			if (cr == HTTP_PARSE_ERROR) {
				free(m);
				conn_fail(
				    hs, c, 400, REST_PARAM_ERROR, "bad or too large chunked body");
				return false;
			}
			// The decoded body now lies at body_off; reparse the head (the
			// decoding touched only the body bytes).
			used += consumed;
		} else if (m->content_length > 0) {
			blen = (size_t)m->content_length;
			if (c->in_len - body_off < blen) {
				free(m);
				return true;
			}
			used += blen;
		}
		// Complete: NUL-terminate a copy of the body for the handler.
		char *body = malloc(blen + 1);
		if (body == NULL) {
			free(m);
			conn_close(hs, c);
			return false;
		}
		memcpy(body, c->in + body_off, blen);
		body[blen]       = '\0';
		http_resp resp   = { 0 };
		bool      keep   = m->keep_alive;
		c->sent_continue = false;
		dispatch(hs, m, body, blen, &resp);
		log_debug("http", "peer=%s method=%.*s path=%.*s status=%d", c->peer,
		    (int)m->method.n, m->method.p, (int)(m->path.n > 200 ? 200 : m->path.n),
		    m->path.p, resp.status);
		free(body);
		free(m);
		// Drop the request's bytes; keep any that follow (pipelining).
		memmove(c->in, c->in + used, c->in_len - used);
		c->in_len -= used;
		if (!conn_reply(hs, c, &resp, keep)) {
			return false;
		}
	}
	return true;
}

static void conn_readable(http_server *hs, hconn *c)
{
	size_t limit = (size_t)hs->o.max_head + hs->o.max_body + 64;
	if (c->draining) {
		char    sink[4096];
		ssize_t n;
		while ((n = recv(c->fd, sink, sizeof(sink), 0)) > 0) { }
		if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
			conn_close(hs, c);
		}
		return;
	}
	for (;;) {
		if (c->in_len == c->in_cap) {
			if (c->in_cap >= limit) {
				// Head and body within their limits cannot fill this:
				// only chunk framing could, and that is abuse.
				conn_fail(hs, c, 400, REST_PARAM_ERROR, "request too large");
				return;
			}
			size_t ncap = c->in_cap ? c->in_cap * 2 : READ_CHUNK;
			if (ncap > limit) {
				ncap = limit;
			}
			char *nb = realloc(c->in, ncap);
			if (nb == NULL) {
				conn_close(hs, c);
				return;
			}
			c->in     = nb;
			c->in_cap = ncap;
		}
		ssize_t n = conn_recv(c, c->in + c->in_len, c->in_cap - c->in_len);
		if (n > 0) {
			c->in_len += (size_t)n;
			if (c->st == C_READ && !conn_process(hs, c)) {
				return;
			}
			continue;
		}
		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			return;
		}
		conn_close(hs, c); // EOF or error
		return;
	}
}

// Advances the TLS handshake of c as far as the socket allows. On the
// first byte, a client that speaks plain HTTP gets a clear-text 400. When
// the handshake completes, requests are read. Closes c on failure.
static void conn_handshake(http_server *hs, hconn *c)
{
	if (c->ssl->state == MBEDTLS_SSL_HELLO_REQUEST) {
		// Nothing read yet. A TLS record starts with its type, 22 for a
		// handshake; a request line starts with a method in capitals.
		unsigned char first;
		ssize_t       n = recv(c->fd, &first, 1, MSG_PEEK);
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
			return;
		}
		if (n <= 0) {
			conn_close(hs, c);
			return;
		}
		if (first >= 'A' && first <= 'Z') {
			mbedtls_ssl_free(c->ssl);
			free(c->ssl);
			c->ssl = NULL;
			c->st  = C_READ;
			conn_fail(hs, c, 400, REST_PARAM_ERROR,
			    "plain HTTP request on the HTTPS port: use https://");
			return;
		}
	}
	int rv = mbedtls_ssl_handshake(c->ssl);
	if (rv == MBEDTLS_ERR_SSL_WANT_READ || rv == MBEDTLS_ERR_SSL_WANT_WRITE) {
		conn_watch(hs, c, rv == MBEDTLS_ERR_SSL_WANT_READ ? EPOLLIN : EPOLLOUT);
		return;
	}
	if (rv == 0 && hs->tls_optional && mbedtls_ssl_get_peer_cert(c->ssl) != NULL
	    && mbedtls_ssl_get_verify_result(c->ssl) != 0) {
		(void)mbedtls_ssl_send_alert_message(
		    c->ssl, MBEDTLS_SSL_ALERT_LEVEL_FATAL, MBEDTLS_SSL_ALERT_MSG_BAD_CERT);
		rv = MBEDTLS_ERR_X509_CERT_VERIFY_FAILED;
	}
	if (rv != 0) {
		char why[120];
		mbedtls_strerror(rv, why, sizeof(why));
		log_info_rl(
		    "http", "peer=%s event=tls_handshake_failed reason=\"%s\"", c->peer, why);
		conn_close(hs, c);
		return;
	}
	// Requests may already wait, decrypted or not. The head's grace starts
	// now.
	c->st      = C_READ;
	c->wait_ms = now_ms();
	conn_watch(hs, c, EPOLLIN);
	conn_readable(hs, c);
}

// The connection that has made no progress the longest, for more than
// GRACE_MS, or NULL: one kept alive and idle between requests (limit_conn
// bounds the requests in progress, not the keep-alive connections that
// dashboards and scrapers leave open), one whose request head (or TLS
// handshake) has not arrived in full (a slowloris holds a slot only while
// no one waits), or one accepted that has sent nothing. A connection whose
// head has arrived (body being read, handler, reply being written) is
// never chosen: its request is in progress and bounded by
// request_timeout. The grace keeps an active keep-alive client, and a
// legitimate client's quick request, from being cut.
static hconn *victim(http_server *hs)
{
	uint64_t now = now_ms();
	hconn   *v   = NULL;
	for (hconn *c = hs->conns; c != NULL; c = c->next) {
		bool waiting = c->st == C_HANDSHAKE
		    || (c->st == C_READ && !c->head_done && !c->draining && !c->close_after);
		if (waiting && now - c->wait_ms >= GRACE_MS
		    && (v == NULL || c->wait_ms < v->wait_ms)) {
			v = c;
		}
	}
	return v;
}

// Takes the listening socket out of the loop (new clients wait in the
// backlog); listen_resume puts it back while there is a free slot or an
// idle kept-alive connection to give up.
static void listen_pause(http_server *hs)
{
	if (hs->listening) {
		epoll_ctl(hs->efd, EPOLL_CTL_DEL, hs->lfd, NULL);
		hs->listening = false;
	}
}

static void listen_resume(http_server *hs)
{
	if (!hs->listening && (hs->nconns < hs->o.limit_conn || victim(hs) != NULL)) {
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = LISTEN_TAG };
		if (epoll_ctl(hs->efd, EPOLL_CTL_ADD, hs->lfd, &ev) == 0) {
			hs->listening = true;
		}
	}
}

static void accept_all(http_server *hs)
{
	for (;;) {
		// Full: a connection that makes no progress (victim) makes room
		// for a waiting client; without one, new clients stay in the
		// backlog.
		hconn *v = NULL;
		if (hs->nconns >= hs->o.limit_conn && (v = victim(hs)) == NULL) {
			break;
		}
		struct sockaddr_storage ss;
		socklen_t               sl = sizeof(ss);
		int                     fd
		    = accept4(hs->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
				// Out of descriptors, say: stop watching the socket (it
				// would stay readable and spin the loop) until the next
				// tick tries again.
				log_warn_rl(
				    "http", "event=accept_failed reason=\"%s\"", strerror(errno));
				listen_pause(hs);
			}
			return;
		}
		if (v != NULL) {
			if (v->st == C_READ && v->idle && v->answered) {
				hs->closed_idle++;
				log_debug(
				    "http", "peer=%s event=idle_closed reason=limit_conn", v->peer);
			} else {
				hs->closed_slow++;
				log_info_rl("http",
				    "peer=%s event=slow_request_closed reason=limit_conn "
				    "waited_ms=%llu",
				    v->peer, (unsigned long long)(now_ms() - v->wait_ms));
			}
			conn_close(hs, v);
		}
		hconn *c = calloc(1, sizeof(*c));
		if (c == NULL) {
			log_warn_rl("http", "event=accept_dropped reason=out_of_memory");
			close(fd);
			continue;
		}
		char host[NI_MAXHOST], serv[NI_MAXSERV];
		if (getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), serv, sizeof(serv),
		        NI_NUMERICHOST | NI_NUMERICSERV)
		    == 0) {
			snprintf(c->peer, sizeof(c->peer), "%.63s:%.8s", host, serv);
		}
		c->fd = fd;
		c->st = C_READ;
		if (hs->tls != NULL) {
			if ((c->ssl = malloc(sizeof(*c->ssl))) != NULL) {
				mbedtls_ssl_init(c->ssl);
			}
			if (c->ssl == NULL
			    || mbedtls_ssl_setup(c->ssl, tls_engine_direct_conf(hs->tls)) != 0) {
				log_warn_rl("http", "event=accept_dropped reason=tls_setup");
				if (c->ssl != NULL) {
					mbedtls_ssl_free(c->ssl);
					free(c->ssl);
				}
				close(fd);
				free(c);
				continue;
			}
			mbedtls_ssl_set_bio(c->ssl, c, bio_send, bio_recv, NULL);
			c->st = C_HANDSHAKE;
		}
		c->idle               = true;
		c->wait_ms            = now_ms();
		c->deadline_ms        = c->wait_ms + hs->o.request_timeout_ms;
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
		if (epoll_ctl(hs->efd, EPOLL_CTL_ADD, fd, &ev) != 0) {
			log_warn_rl("http", "event=accept_dropped reason=\"%s\"", strerror(errno));
			close(fd);
			free(c);
			continue;
		}
		c->next = hs->conns;
		if (hs->conns != NULL) {
			hs->conns->prev = c;
		}
		hs->conns = c;
		hs->nconns++;
	}
	// Full: leave new clients in the backlog until a slot frees.
	listen_pause(hs);
}

static void expire(http_server *hs)
{
	uint64_t now = now_ms();
	hconn   *c   = hs->conns;
	while (c != NULL) {
		hconn *next = c->next;
		if (c->deadline_ms != 0 && now >= c->deadline_ms) {
			if (!c->idle && c->st == C_READ && c->in_len > 0) {
				log_info("http", "peer=%s event=request_timeout", c->peer);
			} else if (c->st == C_HANDSHAKE) {
				log_info_rl("http", "peer=%s event=tls_handshake_timeout", c->peer);
			}
			conn_close(hs, c);
		}
		c = next;
	}
	listen_resume(hs); // after a failed accept
}

static void *server_main(void *arg)
{
	http_server       *hs = arg;
	struct epoll_event evs[64];
	uint64_t           last_tick = now_ms();
	(void)pthread_setname_np(pthread_self(), "nmq:http");
	for (;;) {
		int n = epoll_wait(hs->efd, evs, 64, TICK_MS);
		if (n < 0 && errno != EINTR) {
			log_error("http", "event=epoll_failed reason=\"%s\"", strerror(errno));
			break;
		}
		for (int i = 0; i < n; i++) {
			void *tag = evs[i].data.ptr;
			if (tag == WAKE_TAG) {
				return NULL;
			}
			if (tag == LISTEN_TAG) {
				accept_all(hs);
				continue;
			}
			hconn *c = tag;
			if (c->st == C_HANDSHAKE) {
				conn_handshake(hs, c);
			} else if (c->st == C_WRITE) {
				// Once the reply is out, requests that arrived behind it
				// (pipelined) are answered.
				if ((evs[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
				    && conn_flush(hs, c) && c->st == C_READ && c->in_len > 0) {
					conn_process(hs, c);
				}
			} else {
				conn_readable(hs, c);
			}
		}
		uint64_t now = now_ms();
		if (now - last_tick >= TICK_MS) {
			last_tick = now;
			expire(hs);
		}
	}
	return NULL;
}

nmq_err http_server_start(http_server *hs)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = LISTEN_TAG };
	if (epoll_ctl(hs->efd, EPOLL_CTL_ADD, hs->lfd, &ev) != 0) {
		return NMQ_EIO;
	}
	hs->listening = true;
	if (pthread_create(&hs->thr, NULL, server_main, hs) != 0) {
		return NMQ_ENOMEM;
	}
	hs->started = true;
	log_info("http", "event=listening addr=%s port=%d tls=%s limit_conn=%d auth=%s",
	    hs->o.ip_addr != NULL ? hs->o.ip_addr : "0.0.0.0", hs->port,
	    hs->tls != NULL ? "on" : "off", hs->o.limit_conn,
	    hs->o.auth == HTTP_AUTH_JWT        ? "jwt"
	        : hs->o.auth == HTTP_AUTH_NONE ? "none"
	                                       : "basic");
	return NMQ_OK;
}

void http_server_free(http_server *hs)
{
	if (hs == NULL) {
		return;
	}
	if (hs->started) {
		uint64_t one = 1;
		(void)!write(hs->wfd, &one, sizeof(one));
		pthread_join(hs->thr, NULL);
	}
	while (hs->conns != NULL) {
		hs->conns->after = NULL; // stopping: no deferred action any more
		conn_close(hs, hs->conns);
	}
	for (size_t i = 0; i < hs->nroutes; i++) {
		free(hs->routes[i].method);
		free(hs->routes[i].pattern);
	}
	free(hs->routes);
	if (hs->lfd >= 0) {
		close(hs->lfd);
	}
	if (hs->efd >= 0) {
		close(hs->efd);
	}
	if (hs->wfd >= 0) {
		close(hs->wfd);
	}
	http_auth_free(hs->auth);
	tls_engine_direct_free(hs->tls);
	free(hs);
}
