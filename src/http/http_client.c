// The HTTP client of the outbound callouts; see http_client.h.
#include "src/http/http_client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>

#include "nng/core/log.h"
#include "src/http/http_parse.h"

enum { SLOT_IDLE = 0, SLOT_CONNECTING, SLOT_HANDSHAKE, SLOT_SENDING, SLOT_READING };

uint64_t http_client_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

// ---- URLs ------------------------------------------------------------------

nmq_err http_url_parse(const char *url, const char *key, http_url *u, char *err, size_t errlen)
{
	memset(u, 0, sizeof(*u));
	if (strncmp(url, "https://", 8) == 0) {
		u->https = true;
	} else if (strncmp(url, "http://", 7) != 0) {
		snprintf(err, errlen, "%s: not an http:// or https:// URL: \"%.200s\"", key, url);
		return NMQ_EINVAL;
	}
	const char *p     = url + (u->https ? 8 : 7); // after the scheme
	const char *slash = strchr(p, '/');
	size_t      hl    = slash != NULL ? (size_t)(slash - p) : strlen(p);
	char        host[256];
	snprintf(u->port, sizeof(u->port), "%s", u->https ? "443" : "80");
	if (hl == 0 || hl >= sizeof(host)) {
		snprintf(err, errlen, "%s: bad host in \"%.200s\"", key, url);
		return NMQ_EINVAL;
	}
	memcpy(host, p, hl);
	host[hl] = '\0';
	snprintf(u->hostport, sizeof(u->hostport), "%s", host);
	char *h = host;
	char *colon;
	if (h[0] == '[') {
		char *rb = strchr(h, ']');
		if (rb == NULL) {
			snprintf(err, errlen, "%s: bad host in \"%.200s\"", key, url);
			return NMQ_EINVAL;
		}
		*rb   = '\0';
		colon = rb[1] == ':' ? rb + 1 : NULL;
		h++;
	} else {
		colon = strrchr(h, ':');
	}
	if (colon != NULL) {
		*colon = '\0';
		snprintf(u->port, sizeof(u->port), "%.7s", colon + 1);
	}
	snprintf(u->host, sizeof(u->host), "%s", h);
	u->path = strdup(slash != NULL ? slash : "/");
	if (u->path == NULL) {
		snprintf(err, errlen, "out of memory");
		return NMQ_ENOMEM;
	}
	return NMQ_OK;
}

nmq_err http_url_resolve(http_url *u, const char *key, char *err, size_t errlen)
{
	struct addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family   = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	int rv            = getaddrinfo(u->host, u->port, &hints, &res);
	if (rv != 0 || res == NULL) {
		snprintf(err, errlen, "%s: cannot resolve \"%.200s\" port %s: %s", key, u->host,
		    u->port, gai_strerror(rv));
		return NMQ_EINVAL;
	}
	memcpy(&u->addr, res->ai_addr, res->ai_addrlen);
	u->addrlen = (socklen_t)res->ai_addrlen;
	freeaddrinfo(res);
	return NMQ_OK;
}

void http_url_fini(http_url *u)
{
	free(u->path);
	u->path = NULL;
}

// ---- TLS configuration -------------------------------------------------------

// Certificate check of a target given by IP address (mbed TLS 2.28 matches
// DNS names only): the end certificate must list the address as an
// iPAddress subject alternative name. Returns 0; flags carry the verdict.
static int verify_ip(void *arg, mbedtls_x509_crt *crt, int depth, uint32_t *flags)
{
	const http_client *c = arg;
	if (depth != 0) {
		return 0;
	}
	for (const mbedtls_x509_sequence *q = &crt->subject_alt_names; q != NULL; q = q->next) {
		if (q->buf.tag == (MBEDTLS_ASN1_CONTEXT_SPECIFIC | 7) && q->buf.len == c->ip_len
		    && memcmp(q->buf.p, c->ip, c->ip_len) == 0) {
			return 0;
		}
	}
	*flags |= MBEDTLS_X509_BADCERT_CN_MISMATCH;
	return 0;
}

nmq_err http_client_tls_init(http_client *c, const http_tls_opts *o, char *err, size_t errlen)
{
	mbedtls_ssl_config_init(&c->tls_conf);
	mbedtls_x509_crt_init(&c->tls_ca);
	mbedtls_x509_crt_init(&c->tls_cert);
	mbedtls_pk_init(&c->tls_key);
	mbedtls_entropy_init(&c->tls_entropy);
	mbedtls_ctr_drbg_init(&c->tls_drbg);
	c->tls_ready = true;
	char        why[160];
	const char *what = "random generator";
	int         rv = mbedtls_ctr_drbg_seed(&c->tls_drbg, mbedtls_entropy_func, &c->tls_entropy,
	            (const unsigned char *)o->pers, strlen(o->pers));
	if (rv == 0) {
		rv   = mbedtls_ssl_config_defaults(&c->tls_conf, MBEDTLS_SSL_IS_CLIENT,
		      MBEDTLS_SSL_TRANSPORT_STREAM, MBEDTLS_SSL_PRESET_DEFAULT);
		what = "configuration";
	}
	if (rv == 0 && o->verify_peer) {
		rv   = mbedtls_x509_crt_parse_file(&c->tls_ca, o->cafile);
		what = o->cafile;
	}
	if (rv == 0 && o->certfile != NULL) {
		rv   = mbedtls_x509_crt_parse_file(&c->tls_cert, o->certfile);
		what = o->certfile;
		if (rv == 0) {
			rv   = mbedtls_pk_parse_keyfile(&c->tls_key, o->keyfile, o->key_password);
			what = o->keyfile;
		}
		if (rv == 0) {
			rv   = mbedtls_ssl_conf_own_cert(&c->tls_conf, &c->tls_cert, &c->tls_key);
			what = "client certificate";
		}
	}
	if (rv != 0) {
		mbedtls_strerror(rv, why, sizeof(why));
		snprintf(err, errlen, "%s: %s: %s", o->key, what, why);
		return NMQ_ETLS;
	}
	mbedtls_ssl_conf_rng(&c->tls_conf, mbedtls_ctr_drbg_random, &c->tls_drbg);
	mbedtls_ssl_conf_authmode(
	    &c->tls_conf, o->verify_peer ? MBEDTLS_SSL_VERIFY_REQUIRED : MBEDTLS_SSL_VERIFY_NONE);
	if (o->verify_peer) {
		mbedtls_ssl_conf_ca_chain(&c->tls_conf, &c->tls_ca, NULL);
	}
	if (inet_pton(AF_INET, c->url.host, c->ip) == 1) {
		c->ip_len = 4;
	} else if (inet_pton(AF_INET6, c->url.host, c->ip) == 1) {
		c->ip_len = 16;
	}
	if (c->ip_len > 0 && o->verify_peer) {
		mbedtls_ssl_conf_verify(&c->tls_conf, verify_ip, c);
	}
	return NMQ_OK;
}

void http_client_fini(http_client *c)
{
	if (c->tls_ready) {
		mbedtls_ssl_config_free(&c->tls_conf);
		mbedtls_x509_crt_free(&c->tls_ca);
		mbedtls_x509_crt_free(&c->tls_cert);
		mbedtls_pk_free(&c->tls_key);
		mbedtls_ctr_drbg_free(&c->tls_drbg);
		mbedtls_entropy_free(&c->tls_entropy);
		c->tls_ready = false;
	}
	http_url_fini(&c->url);
}

// ---- slots -------------------------------------------------------------------

void http_slot_init(http_slot *s)
{
	memset(s, 0, sizeof(*s));
	s->fd = -1;
}

bool http_slot_idle(const http_slot *s)
{
	return s->state == SLOT_IDLE;
}

bool http_slot_kept(const http_slot *s)
{
	return s->state == SLOT_IDLE && s->fd >= 0;
}

void *http_slot_close(http_slot *s)
{
	void *item = s->item;
	if (s->tls) {
		mbedtls_ssl_free(&s->ssl);
		s->tls = false;
	}
	if (s->fd >= 0) {
		close(s->fd);
	}
	s->fd        = -1;
	s->state     = SLOT_IDLE;
	s->item      = NULL;
	s->req       = NULL;
	s->off       = 0;
	s->in_len    = 0;
	s->reused    = false;
	s->head_done = false;
	return item;
}

static void slot_connect(http_client *c, http_slot *s);

static void slot_end(http_client *c, http_slot *s, bool answered, int status, const char *why)
{
	// A kept connection that the server closed meanwhile: the request
	// goes out again on a fresh one (nothing of the answer was seen).
	if (!answered && s->reused && s->in_len == 0 && !s->head_done
	    && (strcmp(why, "send") == 0 || strcmp(why, "tls_write") == 0
	        || strcmp(why, "closed") == 0 || strcmp(why, "recv") == 0)) {
		void       *item = s->item;
		const char *req  = s->req;
		size_t      len  = s->req_len;
		http_slot_close(s);
		s->item    = item;
		s->req     = req;
		s->req_len = len;
		slot_connect(c, s);
		return;
	}
	if (strcmp(why, "connect") == 0 || strcmp(why, "connect_timeout") == 0) {
		c->connect_failed = true;
	}
	void *item = http_slot_close(s);
	c->done(c->arg, item, answered, status, why);
}

// The whole answer is in: the slot keeps its connection if it may, and
// is idle again.
static void slot_finish(http_client *c, http_slot *s, bool reusable)
{
	if (!c->keep_alive || !reusable) {
		slot_end(c, s, true, s->status, "status");
		return;
	}
	void *item   = s->item;
	s->item      = NULL;
	s->req       = NULL;
	s->off       = 0;
	s->in_len    = 0;
	s->reused    = false;
	s->head_done = false;
	s->state     = SLOT_IDLE;
	s->idle_ms   = http_client_now_ms();
	c->done(c->arg, item, true, s->status, "status");
}

// Looks the host up again if it is time (see http_client.reresolve_ms).
static void maybe_reresolve(http_client *c, uint64_t now)
{
	if (c->reresolve_ms == 0 || now - c->resolved_ms < 1000
	    || (!c->connect_failed && now - c->resolved_ms < c->reresolve_ms)) {
		return;
	}
	http_url u = c->url;
	char     err[300];
	c->resolved_ms = now;
	if (http_url_resolve(&u, c->log_mod, err, sizeof(err)) != NMQ_OK) {
		log_warn_rl(c->log_mod,
		    "event=resolve_failed host=%s reason=\"%s\" action=keep_address", c->url.host,
		    err);
		return;
	}
	if (u.addrlen != c->url.addrlen || memcmp(&u.addr, &c->url.addr, u.addrlen) != 0) {
		log_info(c->log_mod, "event=address_changed host=%s", c->url.host);
	}
	c->url.addr    = u.addr;
	c->url.addrlen = u.addrlen;
}

// Opens a fresh connection for the request on s.
static void slot_connect(http_client *c, http_slot *s)
{
	uint64_t now   = http_client_now_ms();
	s->reused      = false;
	s->end_ms      = now + c->timeout_ms;
	s->deadline_ms = c->connect_timeout_ms != 0 ? now + c->connect_timeout_ms : s->end_ms;
	maybe_reresolve(c, now);
	s->fd = socket(c->url.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s->fd < 0) {
		slot_end(c, s, false, 0, "socket");
		return;
	}
	int one = 1;
	(void)setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(s->fd, (struct sockaddr *)&c->url.addr, c->url.addrlen) == 0
	    || errno == EINPROGRESS) {
		s->state = SLOT_CONNECTING; // writable once connected
		s->want  = POLLOUT;
	} else {
		slot_end(c, s, false, 0, "connect");
	}
}

void http_slot_start(http_client *c, http_slot *s, void *item, const char *req, size_t len)
{
	s->item    = item;
	s->req     = req;
	s->req_len = len;
	if (s->fd >= 0) {
		// A kept connection: usable if the server has neither closed it
		// nor sent anything (a close alert, say) since the last answer.
		char    b;
		ssize_t n = recv(s->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			uint64_t now   = http_client_now_ms();
			s->reused      = true;
			s->end_ms      = now + c->timeout_ms;
			s->deadline_ms = s->end_ms;
			s->state       = SLOT_SENDING;
			s->want        = POLLOUT;
			return;
		}
		http_slot_close(s);
		s->item    = item;
		s->req     = req;
		s->req_len = len;
	}
	slot_connect(c, s);
}

// mbed TLS I/O on the slot's non-blocking socket.
static int bio_send(void *arg, const unsigned char *buf, size_t len)
{
	http_slot *s = arg;
	ssize_t    n = send(s->fd, buf, len, MSG_NOSIGNAL);
	if (n >= 0) {
		return (int)n;
	}
	return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR
	    ? MBEDTLS_ERR_SSL_WANT_WRITE
	    : MBEDTLS_ERR_NET_SEND_FAILED;
}

static int bio_recv(void *arg, unsigned char *buf, size_t len)
{
	http_slot *s = arg;
	ssize_t    n = recv(s->fd, buf, len, 0);
	if (n >= 0) {
		return (int)n;
	}
	return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR
	    ? MBEDTLS_ERR_SSL_WANT_READ
	    : MBEDTLS_ERR_NET_RECV_FAILED;
}

// The poll events an mbed TLS "want" code waits for; 0 for a failure.
static short tls_want(int rv)
{
	return rv == MBEDTLS_ERR_SSL_WANT_READ ? POLLIN
	    : rv == MBEDTLS_ERR_SSL_WANT_WRITE ? POLLOUT
	                                       : 0;
}

static void tls_fail(http_client *c, http_slot *s, const char *what, int rv)
{
	char why[160];
	mbedtls_strerror(rv, why, sizeof(why));
	log_info_rl(c->log_mod, "event=tls_failed step=%s reason=\"%s\"", what, why);
	slot_end(c, s, false, 0, what);
}

// Writes what is left of the request. Returns true when all is sent;
// false when the slot ended or waits (s->want set).
static bool slot_send(http_client *c, http_slot *s)
{
	while (s->off < s->req_len) {
		const char *p = s->req + s->off;
		size_t      n = s->req_len - s->off;
		if (s->tls) {
			int rv = mbedtls_ssl_write(&s->ssl, (const unsigned char *)p, n);
			if (rv > 0) {
				s->off += (size_t)rv;
				continue;
			}
			if ((s->want = tls_want(rv)) == 0) {
				tls_fail(c, s, "tls_write", rv);
			}
			return false;
		}
		ssize_t r = send(s->fd, p, n, MSG_NOSIGNAL);
		if (r < 0 && errno == EINTR) {
			continue;
		}
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			s->want = POLLOUT;
			return false;
		}
		if (r <= 0) {
			slot_end(c, s, false, 0, "send");
			return false;
		}
		s->off += (size_t)r;
	}
	return true;
}

// Reads into s->in: > 0 bytes, 0 at the end of the stream, -1 on a
// failure, -2 when it must wait (s->want set).
static ssize_t slot_read(http_slot *s)
{
	for (;;) {
		if (s->tls) {
			int rv = mbedtls_ssl_read(
			    &s->ssl, (unsigned char *)s->in + s->in_len, sizeof(s->in) - s->in_len);
			if (rv >= 0 || rv == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY) {
				return rv >= 0 ? rv : 0;
			}
			return (s->want = tls_want(rv)) != 0 ? -2 : -1;
		}
		ssize_t n = recv(s->fd, s->in + s->in_len, sizeof(s->in) - s->in_len, 0);
		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			s->want = POLLIN;
			return -2;
		}
		return n;
	}
}

void http_slot_io(http_client *c, http_slot *s)
{
	if (s->state == SLOT_CONNECTING) {
		int       e  = 0;
		socklen_t el = sizeof(e);
		if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &e, &el) != 0 || e != 0) {
			slot_end(c, s, false, 0, "connect");
			return;
		}
		c->connect_failed = false;
		s->deadline_ms    = s->end_ms;
		if (!c->url.https) {
			s->state = SLOT_SENDING;
		} else {
			mbedtls_ssl_init(&s->ssl);
			s->tls = true;
			int rv = mbedtls_ssl_setup(&s->ssl, &c->tls_conf);
			if (rv == 0 && c->ip_len == 0) {
				rv = mbedtls_ssl_set_hostname(
				    &s->ssl, c->url.host); // SNI and name check
			}
			if (rv != 0) {
				tls_fail(c, s, "tls_setup", rv);
				return;
			}
			mbedtls_ssl_set_bio(&s->ssl, s, bio_send, bio_recv, NULL);
			s->state = SLOT_HANDSHAKE;
		}
	}
	if (s->state == SLOT_HANDSHAKE) {
		int rv = mbedtls_ssl_handshake(&s->ssl);
		if (rv != 0) {
			if ((s->want = tls_want(rv)) == 0) {
				tls_fail(c, s, "tls_handshake", rv);
			}
			return;
		}
		s->state = SLOT_SENDING;
	}
	if (s->state == SLOT_SENDING) {
		if (!slot_send(c, s)) {
			return;
		}
		s->state = SLOT_READING;
		s->want  = POLLIN;
		if (!s->tls) {
			return; // wait for the answer
		}
		// mbed TLS may hold records already read: try at once.
	}
	if (s->state != SLOT_READING) {
		return;
	}
	for (;;) {
		if (s->in_len == sizeof(s->in)) {
			slot_end(c, s, false, 0, "response_head_too_long");
			return;
		}
		ssize_t n = slot_read(s);
		if (n == -2) {
			return;
		}
		if (s->head_done) {
			// Reading (and dropping) the body of an answer to keep the
			// connection; its end decides whether it may be reused.
			if (n <= 0) {
				slot_end(c, s, true, s->status, "status");
				return;
			}
			s->body_left -= n;
			s->in_len = 0;
			if (s->body_left <= 0) {
				slot_finish(c, s, s->body_left == 0);
				return;
			}
			continue;
		}
		if (n > 0) {
			s->in_len += (size_t)n;
		}
		http_msg      m;
		int           status = 0;
		http_parse_rc rc
		    = http_parse_response(s->in, s->in_len, HTTP_CLIENT_HEAD_MAX, &m, &status);
		if (rc == HTTP_PARSE_OK) {
			s->status = m.status;
			// Reusable when its end is known: Content-Length (none for
			// 204 and 304), HTTP/1.1 and no "Connection: close".
			int64_t len = m.content_length >= 0                      ? m.content_length
			    : (m.status == 204 || m.status == 304) && !m.chunked ? 0
			                                                         : -1;
			if (!c->keep_alive || !m.keep_alive || m.chunked || len < 0) {
				slot_end(c, s, true, m.status, "status");
				return;
			}
			int64_t have = (int64_t)(s->in_len - m.head_len);
			if (have >= len) {
				slot_finish(c, s, have == len);
				return;
			}
			s->head_done = true;
			s->body_left = len - have;
			s->in_len    = 0;
			if (n <= 0) {
				slot_end(c, s, true, m.status, "status");
				return;
			}
			continue;
		}
		if (rc == HTTP_PARSE_ERROR) {
			slot_end(c, s, false, status, "bad_response");
			return;
		}
		if (n <= 0) {
			slot_end(c, s, false, 0, n == 0 ? "closed" : "recv");
			return;
		}
	}
}

void http_client_poll_prepare(http_client *c, http_slot *slots, uint32_t count, uint64_t now,
    struct pollfd *pfd, int *map, int *n, int *timeout_ms)
{
	for (uint32_t i = 0; i < count; i++) {
		http_slot *s = &slots[i];
		if (s->state == SLOT_IDLE) {
			if (s->fd >= 0 && now - s->idle_ms >= HTTP_CLIENT_KEEP_IDLE_MS) {
				http_slot_close(s);
			}
			continue;
		}
		if (now >= s->deadline_ms) {
			bool connecting = s->state == SLOT_CONNECTING && c->connect_timeout_ms != 0;
			if (s->head_done) {
				slot_end(c, s, true, s->status, "status");
			} else {
				slot_end(
				    c, s, false, 0, connecting ? "connect_timeout" : "timeout");
			}
			continue;
		}
		if ((int)(s->deadline_ms - now) < *timeout_ms) {
			*timeout_ms = (int)(s->deadline_ms - now);
		}
		pfd[*n].fd     = s->fd;
		pfd[*n].events = s->want != 0 ? s->want : POLLIN;
		map[*n]        = (int)i;
		(*n)++;
	}
}

void http_client_poll_dispatch(
    http_client *c, http_slot *slots, const struct pollfd *pfd, const int *map, int n, int r)
{
	for (int i = 0; r > 0 && i < n; i++) {
		if (pfd[i].revents == 0) {
			continue;
		}
		if (map[i] < 0) {
			uint64_t v;
			ssize_t  rr = read(pfd[i].fd, &v, sizeof(v));
			(void)rr;
			continue;
		}
		http_slot *s = &slots[map[i]];
		if (!http_slot_idle(s)) {
			http_slot_io(c, s);
		}
	}
}
